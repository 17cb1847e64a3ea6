"""Settling the calls a script stopped on: the worker, approvals, the client, running them.

Part of :class:`engine.CodeMode` (a base class of it); the step loop (``_steps``) calls
``_settle_calls`` before each step.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import Any

import orjson

from engine import _log as log
from engine._limits import Limits
from engine._naming import SKILL, TOOL_SEARCH
from engine._search import ToolIndex
from engine._skills import Skill, find_skill, skill_answer
from engine._tool_threads import ToolThreads
from engine._tools import Tool, ToolCallError, ToolContext
from engine._worker import Decision, Worker, ask, calls_trigger
from runner import bounded
from sandbox.names import closest_names

logger = logging.getLogger("codemode")


class CallSettling:
    """How the calls a script asked for are answered and run, and recorded in the log."""

    tools: list[Tool]
    skills: list[Skill]
    store: log.LogStore
    worker: Worker
    context: Any
    call_timeout: float | None
    _tool_threads: ToolThreads
    _by_name: dict[str, Tool]
    _index: ToolIndex
    _tool_names: list[str]
    limits_for: Callable[[str], Limits]

    async def _settle_calls(
        self, record: log.ScriptRecord, limits: Limits, calls: list[log.CallEntry]
    ) -> None:
        for entry in calls:
            if entry.state == log.RUNNING:
                # The host stopped while this call ran: it may or may not have taken effect.
                # It is never run again; the script sees an error it can handle.
                self._fail_call(
                    record,
                    entry,
                    f"tools.{entry.name} was interrupted: the host stopped while it ran, "
                    "so it may or may not have taken effect; check before calling it again",
                )
        calls = self.store.calls(record.id)
        proposed = [c for c in calls if c.state == log.PROPOSED]
        if proposed:
            trigger = calls_trigger(record.id, [(c.call_id, c.name, c.arguments) for c in proposed])
            decisions = await ask(self.worker, trigger)
            for entry in proposed:
                self._apply(record, entry, decisions[entry.call_id])
            calls = self.store.calls(record.id)
        # When a call needs approval, it asks a person first, and the rest wait.
        if any(c.state == log.AWAITING_APPROVAL for c in calls):
            return
        ready = [c for c in calls if c.state == log.APPROVED]
        if ready:
            await asyncio.gather(*(self._run_call(record, c) for c in ready))

    def _apply(self, record: log.ScriptRecord, entry: log.CallEntry, decision: Decision) -> None:
        if decision.action == "refuse":
            self._fail_call(record, entry, decision.message)
            return
        tool = self._by_name.get(entry.name)
        if tool is not None and tool.client:
            state, note = log.AWAITING_CLIENT, "waiting for the client"
        elif tool is not None and tool.needs_approval:
            state, note = log.AWAITING_APPROVAL, "waiting for a person to approve it"
        else:
            state, note = log.APPROVED, None
        self.store.update_call(record.id, entry.index, state=state, note=note)

    async def _run_call(self, record: log.ScriptRecord, entry: log.CallEntry) -> None:
        # The receipt: written before the call runs, so a crash can never run it twice.
        self.store.update_call(record.id, entry.index, state=log.RUNNING)
        try:
            result = await self._invoke(record, entry)
        except ToolCallError as e:
            self._fail_call(record, entry, e.message)
            return
        except Exception as e:  # a bug in the engine or a tool must not lose the script
            logger.exception(
                "tool call failed unexpectedly script=%s call=%s", record.id, entry.call_id
            )
            self._fail_call(record, entry, f"tools.{entry.name} failed: {type(e).__name__}: {e}")
            return
        try:
            size = len(orjson.dumps(result))
        except (TypeError, orjson.JSONEncodeError) as e:
            # Data the script could never be sent (an integer past 64 bits, a lone surrogate,
            # nesting past what the encoder takes): that call's error, which it can catch.
            self._fail_call(
                record,
                entry,
                f"tools.{entry.name} returned a result that cannot be sent to the script ({e}); "
                "the tool must return JSON data (integers within 64 bits, text without lone "
                "surrogates)",
            )
            return
        extra = {**entry.extra, "result_bytes": size}
        if size > self.limits_for(record.tenant).results:
            # Over the budget on its own: keep its size, not its bytes; the script ends on
            # the results limit before its next run.
            result = None
        self.store.update_call(record.id, entry.index, state=log.DONE, result=result, extra=extra)

    def _fail_call(self, record: log.ScriptRecord, entry: log.CallEntry, message: str) -> None:
        """Settle a call as failed with ``message``, as the log can keep it."""
        self.store.update_call(record.id, entry.index, state=log.FAILED, error=error_text(message))

    async def _invoke(self, record: log.ScriptRecord, entry: log.CallEntry) -> Any:
        if entry.name == TOOL_SEARCH:
            # The index checks the query and the limit (ToolCallError, as the script sees it).
            query = entry.arguments.get("query")
            return self._index.search(query, limit=entry.arguments.get("limit", 8))
        if entry.name == SKILL:
            skill = find_skill(self.skills, entry.arguments.get("name"))
            return skill_answer(skill, self.tools)
        tool = self._by_name.get(entry.name)
        if tool is None:
            near = closest_names(entry.name, self._tool_names)
            raise ToolCallError(
                f"tools.{entry.name} does not exist"
                + (f"; the closest tools are {', '.join(near)}" if near else "")
            )
        ctx = ToolContext(
            host=self.context,
            tenant=record.tenant,
            script_id=record.id,
            call_id=entry.call_id,
            call_index=entry.index,
        )
        return await tool.invoke(
            entry.arguments, ctx, threads=self._tool_threads, default_timeout=self.call_timeout
        )


def error_text(message: str) -> str:
    """A call's error message as the log keeps it and the script sees it: within the bound
    for messages, and valid UTF-8 (a lone surrogate, which no store can keep, becomes
    U+FFFD)."""
    return LONE_SURROGATE.sub("\ufffd", bounded(message, "message"))


# In a Python str every surrogate code point stands alone (a pair would be one code point).
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
