"""Code mode in an OpenAI Responses loop, with pauses (see anthropic_loop.py: the same loop;
a paused turn's function calls wait in `items`, unanswered)."""

from typing import Any

from engine import CodeMode

MODEL = "gpt-5"
WAIT = 300.0  # see anthropic_loop.py


async def advance(client: Any, engine: CodeMode, items: list[dict[str, Any]]) -> bool:
    while True:
        done = {i["call_id"] for i in items if i.get("type") == "function_call_output"}
        calls = [i for i in items if i.get("type") == "function_call" and i["call_id"] not in done]
        if not calls:
            if items[-1].get("role") == "assistant":
                return True
            reply = await client.responses.create(
                model=MODEL, tools=[engine.definition("openai_responses")], input=items
            )
            items += [o.to_dict() for o in reply.output]
            # No call: the model is done, said it something or not (a reply cut short can
            # hold its reasoning alone, or nothing: asked again, it was asked forever).
            if not any(o.type == "function_call" for o in reply.output):
                return True
            continue
        results = [
            await engine.call_tool(c["name"], c["arguments"], key=c["call_id"], wait=WAIT)
            for c in calls
        ]
        if any(r.status in ("paused", "elsewhere") for r in results):
            return False
        items += [r.to_openai_responses(c["call_id"]) for c, r in zip(calls, results)]
