"""The host's worker: what it says about the calls a script stops on.

When a step stops on calls, the engine sends the worker a ``codemode.calls`` trigger, as the
spec shows:

    {"type": "codemode.calls", "id": "<script id>",
     "tool_calls": [{"id": "call_s1", "type": "function",
                     "function": {"name": "weather", "arguments": "{\\"city\\":\\"Oslo\\"}"}}]}

The worker answers ``"proposed"`` (run each call as proposed: a call that needs approval asks
a person first, a client tool waits for the client), or answers each call by its id with
``{"type": "tool.call"}`` (run it) or ``{"type": "tool.error", "message": "..."}`` (refuse it
with that message). A call no answer runs or refuses fails, and the script can catch it.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from engine._tools import described

logger = logging.getLogger("codemode")

PROPOSED = "proposed"

Trigger = dict[str, Any]
Answer = str | Mapping[str, Any]
Worker = Callable[[Trigger], Answer | Awaitable[Answer]]


def proposed_worker(trigger: Trigger) -> Answer:
    """The default worker: every call runs as proposed."""
    return PROPOSED


def calls_trigger(script_id: str, calls: list[tuple[str, str, Any]]) -> Trigger:
    """The ``codemode.calls`` trigger for ``(call_id, name, arguments)`` triples."""
    return {
        "type": "codemode.calls",
        "id": script_id,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": orjson.dumps(arguments).decode()},
            }
            for call_id, name, arguments in calls
        ],
    }


@dataclass(frozen=True)
class Decision:
    """What to do with one call: run it, or refuse it with a message."""

    action: Literal["run", "refuse"]
    message: str = ""


_RUN = Decision("run")


async def ask(
    worker: Worker, script_id: str, calls: list[tuple[str, str, Any]]
) -> dict[str, Decision]:
    """Ask the worker about ``(call_id, name, arguments)`` triples (its
    :func:`calls_trigger`) and turn its answer into a decision per call id. The default
    worker, which lets every call run, is not asked: a trigger made for it (each call's
    arguments as JSON text) would be thrown away.

    A worker that raises or answers nonsense refuses every call with a message that says
    what went wrong, so the script sees it and the host's log has it.
    """
    ids = [call_id for call_id, _, _ in calls]
    if worker is proposed_worker:
        return dict.fromkeys(ids, _RUN)
    trigger = calls_trigger(script_id, calls)
    try:
        answer = worker(trigger)
        if inspect.isawaitable(answer):
            answer = await answer
    except Exception as e:
        logger.exception("the host's worker failed; the calls it was asked about are refused")
        why = f"the host's worker failed on these calls: {described(e)}"
        return {i: Decision("refuse", why) for i in ids}
    if answer == PROPOSED:
        return dict.fromkeys(ids, _RUN)
    if not isinstance(answer, Mapping):
        why = f"the host's worker answered {answer!r:.200}, not 'proposed' or an answer per call id"
        logger.warning("%s; the calls are refused", why)
        return {i: Decision("refuse", why) for i in ids}
    decisions: dict[str, Decision] = {}
    for call_id in ids:
        one = answer.get(call_id)
        kind = one.get("type") if isinstance(one, Mapping) else one
        if kind == "tool.call" or kind == PROPOSED:
            decisions[call_id] = _RUN
        elif kind == "tool.error":
            message = one.get("message") if isinstance(one, Mapping) else None
            decisions[call_id] = Decision("refuse", str(message or "the host refused this call"))
        else:
            if call_id in answer:
                why = (
                    f"the host's worker answered {one!r:.200} for this call, not a "
                    '{"type": "tool.call"} or {"type": "tool.error"}, so it did not run'
                )
            else:
                why = (
                    f"the host's worker gave no answer for this call ({call_id}), so it did not run"
                )
            logger.warning("%s", why)
            decisions[call_id] = Decision("refuse", why)
    return decisions
