"""Code mode in an OpenAI Chat Completions loop, with pauses (see anthropic_loop.py: the same
loop; the tool-call ids of a paused turn wait in `messages`)."""

from typing import Any

from engine import CodeMode

MODEL = "gpt-5"
WAIT = 300.0  # see anthropic_loop.py


async def advance(client: Any, engine: CodeMode, messages: list[dict[str, Any]]) -> bool:
    while True:
        if messages[-1]["role"] != "assistant":
            reply = await client.chat.completions.create(
                model=MODEL, tools=[engine.definition("openai_chat")], messages=messages
            )
            message = reply.choices[0].message
            # A refusal comes as `refusal`, its content null: kept, as the model's answer.
            kept = {"role", "content", "refusal", "tool_calls"}
            messages.append(message.model_dump(include=kept, exclude_none=True))
        calls = messages[-1].get("tool_calls") or []
        if not calls:
            return True
        results = [
            await engine.call_tool(
                c["function"]["name"], c["function"]["arguments"], key=c["id"], wait=WAIT
            )
            for c in calls
        ]
        if any(r.status in ("paused", "elsewhere") for r in results):
            return False
        # Every tool message first, then the media (a tool message takes text only).
        answers = [r.to_openai_chat(c["id"]) for c, r in zip(calls, results)]
        messages += [a[0] for a in answers] + [m for a in answers for m in a[1:]]
