"""Code mode in an Anthropic Messages loop, with pauses.

`advance` runs the conversation on until a model turn calls no tool (True: its answer, or a
reply cut short) or a script waits for a person (False). The tool-use ids of a paused turn
wait in `messages` itself: call `advance` again once the person answered (`codemode approve
...`, from any process on the same log), and `call_tool(..., key=tool_use_id)` picks the
same script up where it stopped. `messages` is JSON data, so a host may keep it anywhere
between the two calls.
"""

from typing import Any

from engine import CodeMode

MODEL = "claude-sonnet-5-5"
# How long a script another host drives (a worker, after an approval) is waited for; still
# driven then, the turn is left as a paused one is, for the next `advance`.
WAIT = 300.0


async def advance(client: Any, engine: CodeMode, messages: list[dict[str, Any]]) -> bool:
    while True:
        if messages[-1]["role"] == "user":
            reply = await client.messages.create(
                model=MODEL, max_tokens=4096, tools=[engine.definition()], messages=messages
            )
            # A reply of no content (end_turn, nothing said) is not kept: the API refuses an
            # empty message anywhere but last, and every request after it failed.
            if not reply.content:
                return True
            messages.append({"role": "assistant", "content": [b.to_dict() for b in reply.content]})
        uses = [b for b in messages[-1]["content"] if b["type"] == "tool_use"]
        if not uses:
            return True
        # A call run_code cannot take (no code, another tool) is answered, for the model.
        results = [
            await engine.call_tool(u["name"], u["input"], key=u["id"], wait=WAIT) for u in uses
        ]
        if any(r.status in ("paused", "elsewhere") for r in results):
            return False
        answers = [r.to_anthropic(u["id"]) for u, r in zip(uses, results)]
        messages.append({"role": "user", "content": answers})
