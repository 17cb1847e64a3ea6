"""Settling the calls a script stopped on: the worker, approvals, the client, running them.

Part of :class:`engine.CodeMode` (a base class of it); the step loop (``_steps``) calls
``_settle_calls`` before each step.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import traceback
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import orjson

from engine import log
from engine._drive import Drive, NotClaimed
from engine._errors import CallAbandoned, StoreUnavailable
from engine._events import Emitting
from engine._limits import Limits
from engine._naming import BUILTIN_TOOLS, SKILL, TOOL_SEARCH
from engine._search import ToolIndex
from engine._skills import Skill, find_skill, recorded_of, skill_answer
from engine._tool_threads import Ticket, ToolThreads
from engine._tools import (
    SAID_ON_PURPOSE,
    Tool,
    ToolCallError,
    ToolContext,
    described,
    unsendable,
)
from engine._worker import Decision, Worker, ask, proposed_worker
from runner import bounded
from sandbox.names import closest_names

logger = logging.getLogger("codemode")


class CallSettling(Emitting):
    """How the calls a script asked for are answered and run, and recorded in the log."""

    tools: list[Tool]
    skills: list[Skill]
    worker: Worker
    context: Any
    call_timeout: float | None
    _tool_threads: ToolThreads
    _by_name: dict[str, Tool]
    _index: ToolIndex
    _tool_names: list[str]
    limits_for: Callable[[str], Limits]

    async def _settle_calls(self, drive: Drive, limits: Limits) -> None:
        record = drive.record
        await self._recover(drive)
        claimed: list[int] = []
        proposed = [c for c in drive.open_calls() if c.state == log.PROPOSED]
        if proposed:
            question = ask(
                self.worker,
                record.id,
                [(c.call_id, c.name, self._given(record.language, c)) for c in proposed],
            )
            # The default worker answers at once: no task of its own on every step's path.
            answers = await (question if self.worker is proposed_worker else drive.asking(question))
            decisions = [self._decision(c, answers[c.call_id]) for c in proposed]
            # When no call waits for a person, the approved calls' receipts go in the same
            # write as the decisions.
            waits = any(d.state == log.AWAITING_APPROVAL for d in decisions) or any(
                c.state == log.AWAITING_APPROVAL for c in drive.open_calls()
            )
            # A receipt must last unless every call it lets run may simply run again.
            lasting = waits or not all(
                d.state == log.APPROVED and self._repeatable(drive.calls[d.index].name)
                for d in decisions
            )
            # A step with a call of a sequential tool claims each turn's calls as it comes,
            # and one with a call that would wait for a tool thread claims it as it begins.
            claim = (
                not waits
                and not (len(proposed) > 1 and self._in_turns(drive, decisions))
                and not self._thread_waits(
                    drive, [d.index for d in decisions if d.state == log.APPROVED]
                )[1]
            )
            claimed = await drive.decide(decisions, claim=claim, lasting=lasting)
            for c in proposed:
                self._emit_decided(record.tenant, drive.calls[c.index])
        # When a call needs approval, it asks a person first, and the rest wait.
        open_calls = drive.open_calls()
        if any(c.state == log.AWAITING_APPROVAL for c in open_calls):
            return
        ready = [c.index for c in open_calls if c.state == log.APPROVED]
        if len(ready) > 1 and self._in_turns(drive, ready):
            await self._run_in_turns(drive, ready, limits)
            return
        later: list[int] = []
        if ready:
            got, later = await self._claim_to_run(drive, ready)
            claimed += got
        await self._run_calls(drive, claimed, limits, later)

    async def _claim_to_run(self, drive: Drive, ready: list[int]) -> tuple[list[int], list[int]]:
        """The receipts of the approved calls ``ready``, in one transaction, before any of
        them runs: a call runs only if it was claimed, so a crash, or another host, can never
        run it twice. But for the calls that would wait for a tool thread (see
        :meth:`_thread_waits`): each is claimed as its thread comes (``Drive.claim_to_begin``),
        so a host that dies while it waits leaves it approved, to run on resume, not
        "interrupted" though it never ran. Returns the claimed calls and those to claim as
        they begin (none when the script is held)."""
        now, later = self._thread_waits(drive, ready)
        claimed: list[int] = []
        if now:
            lasting = self._with_effects(drive.calls[i].name for i in now)
            claimed = await drive.claim(now, lasting=lasting)
            if len(claimed) < len(now):
                return claimed, []  # held
        if later:
            drive.defer(later, self._tool_threads.per_script)
        return claimed, later

    def _thread_waits(self, drive: Drive, ready: list[int]) -> tuple[list[int], list[int]]:
        """``ready`` (approved calls about to run, in order) split into those to claim now and
        those to claim as they begin: the calls of sync tools with effects past the tool
        threads free to the script now. Others' calls may take a free thread first; such a
        claimed call then waits, as all did before (a crash meanwhile makes it
        "interrupted")."""
        free = self._tool_threads.free_for(drive.record.tenant, drive.record.id)
        now: list[int] = []
        later: list[int] = []
        for index in ready:
            tool = self._by_name.get(drive.calls[index].name)
            takes = tool is not None and tool.in_thread
            # A call that may simply run again has nothing to gain: claimed with the rest,
            # though it takes its thread all the same.
            if takes and free <= 0 and not self._repeatable(drive.calls[index].name):
                later.append(index)
            else:
                free -= takes
                now.append(index)
        return now, later

    async def _run_calls(
        self, drive: Drive, claimed: list[int], limits: Limits, later: Sequence[int] = ()
    ) -> None:
        """Run the calls ``claimed`` (indexes) together, and ``later``: calls not claimed yet,
        claimed as their tool threads come."""
        every = [*claimed, *later]
        if len(every) == 1:  # a sequential script's every call: no task of its own
            await self._run_call(drive, drive.calls[every[0]], limits)
        elif every:
            await asyncio.gather(*(self._run_call(drive, drive.calls[i], limits) for i in every))

    def _sequential(self, drive: Drive, index: int) -> bool:
        tool = self._by_name.get(drive.calls[index].name)
        return tool is not None and tool.sequential

    def _in_turns(self, drive: Drive, calls: Iterable[int | log.Decision]) -> bool:
        """Whether any of these calls (indexes, or decisions on them) is of a sequential tool."""
        return any(self._sequential(drive, c if isinstance(c, int) else c.index) for c in calls)

    async def _run_in_turns(self, drive: Drive, ready: list[int], limits: Limits) -> None:
        """Run the approved calls ``ready``, some of sequential tools, as pydantic-ai runs
        such a batch: in the order the script made them, each call of a sequential tool
        alone, and the calls between two such together. Each turn's calls are claimed as it
        begins, so a call still waiting its turn when the host stops runs later (it was not
        running), and a hold that lands meanwhile keeps it from running."""
        turn: list[int] = []
        turns: list[list[int]] = []
        for index in sorted(ready):
            if self._sequential(drive, index):
                turns += [turn, [index]] if turn else [[index]]
                turn = []
            else:
                turn.append(index)
        if turn:
            turns.append(turn)
        for turn in turns:
            claimed, later = await self._claim_to_run(drive, turn)
            await self._run_calls(drive, claimed, limits, later)
            if len(claimed) + len(later) < len(turn) or drive.record.held:
                return  # held: the calls left run once it is released

    async def _recover(self, drive: Drive) -> None:
        """Settle the calls a previous owner was running when it died (they carry an older
        lease token). A call of a read-only or idempotent tool runs again; any other may or
        may not have taken effect, so it is never run again and the script sees an error it
        can handle."""
        stale = [
            c
            for c in drive.open_calls()
            if c.state == log.RUNNING and (c.token or 0) < drive.lease.token
        ]
        again = [c.index for c in stale if self._repeatable(c.name)]
        if again:
            await drive.reopen(again)
        interrupted = [
            _failed(
                c,
                f"tools.{c.name} was interrupted: its result was never recorded (the host "
                "that ran it stopped or stopped waiting for it: a crash, a cancelled request, "
                "Ctrl-C; or the log did not take the result), so it may or may not have taken "
                "effect; check before calling it again",
            )
            for c in stale
            if c.index not in again
        ]
        if interrupted:
            await drive.settle(*interrupted)
            for s in interrupted:
                self._emit_call(
                    "call.failed", drive.record.tenant, drive.calls[s.index], error=s.error
                )

    def _repeatable(self, name: str) -> bool:
        tool = self._by_name.get(name)
        # The built-in tools read the host's own tables and skills: running them is harmless.
        return name in BUILTIN_TOOLS or (tool is not None and tool.idempotent)

    def _with_effects(self, names: Iterable[str]) -> bool:
        """Whether any of these tools may not simply run again: then what lets them run (a
        receipt) or records what they did (an outcome) must reach the disk."""
        return not all(self._repeatable(name) for name in names)

    def _decision(self, entry: log.CallEntry, decision: Decision) -> log.Decision:
        if decision.action == "refuse":
            return log.Decision(entry.index, log.FAILED, error=error_text(decision.message))
        tool = self._by_name.get(entry.name)
        if tool is not None and tool.client:
            return log.Decision(entry.index, log.AWAITING_CLIENT, note="waiting for the client")
        if tool is not None and tool.needs_approval:
            return log.Decision(
                entry.index, log.AWAITING_APPROVAL, note="waiting for a person to approve it"
            )
        return log.Decision(entry.index, log.APPROVED)

    def _emit_decided(self, tenant: str, entry: log.CallEntry) -> None:
        """The event for what was decided about a proposed call."""
        if entry.state == log.APPROVED or entry.state == log.RUNNING:
            self._emit_call("call.approved", tenant, entry)
        elif entry.state == log.FAILED:
            self._emit_call("call.failed", tenant, entry, error=entry.error)
        else:
            reason = "client" if entry.state == log.AWAITING_CLIENT else "approval"
            self._emit_call("call.waiting", tenant, entry, reason=reason)

    async def _run_call(self, drive: Drive, entry: log.CallEntry, limits: Limits) -> None:
        record = drive.record
        tool = self._by_name.get(entry.name)
        # A sync handler's place in the tool threads, which says whether its thread began.
        ticket = Ticket(record.tenant, record.id) if tool is not None and tool.in_thread else None
        # The call begins only while this host still holds the script (see may_begin): a
        # sync one once its thread is granted, which may take long; one not claimed yet
        # (it was to wait for its thread) is claimed then.
        if ticket is not None and entry.state == log.APPROVED:
            ticket.begin = functools.partial(drive.claim_to_begin, entry.index)
        elif ticket is not None:
            ticket.begin = drive.may_begin
        elif (renewing := drive.may_begin()) is not None:
            await renewing
        if ticket is None:
            self._emit_call("call.running", record.tenant, entry)
        else:  # once its thread begins it: it may wait for one, and for its receipt
            ticket.running = functools.partial(
                self._emit_call, "call.running", record.tenant, entry
            )
        await self._record_outcome(
            drive,
            entry,
            drive.run_handler(entry, self._invoke(record, entry, limits.results, ticket), ticket),
            limits.results,
            ticket,
        )

    async def _record_outcome(
        self,
        drive: Drive,
        entry: log.CallEntry,
        handled: Awaitable[Any],
        room: int | None,
        ticket: Ticket | None = None,
    ) -> None:
        """Await ``handled``, the handler of ``entry``, and record how the call ended: its
        result, or the error the script sees. A result over ``room`` bytes (the script's
        ``results`` budget; None: no budget known) is kept as its size alone. The budget is
        given, not asked of the limits function again: that is the host's code, and a call
        that ran must be recorded even if it now raises. ``ticket``: a sync handler's, whose
        ``refused`` says why the call never began (the lease lost, the log not answering):
        that is raised, not recorded as the call's error."""
        record = drive.record
        try:
            result = await handled
        except ToolCallError as e:
            if ticket is not None and isinstance(ticket.refused, NotClaimed):
                return  # held as its thread came: it never began, and stays approved
            if ticket is not None and ticket.refused is not None:
                raise ticket.refused from None
            _log_raised(e, entry, record.id)
            await self._settle_failed(drive, _failed(entry, e.message))
            return
        except CallAbandoned:
            raise  # the engine closes: the call stays running in the log, as after a crash
        except Exception as e:  # a bug in the engine or a tool must not lose the script
            logger.exception(
                "tool call failed unexpectedly script=%s call=%s", record.id, entry.call_id
            )
            await self._settle_failed(
                drive, _failed(entry, f"tools.{entry.name} failed: {described(e)}")
            )
            return
        try:
            size = len(orjson.dumps(result))
        except (TypeError, orjson.JSONEncodeError) as e:
            # Data the script could never be sent (an integer past 64 bits, a lone surrogate,
            # nesting past what the encoder takes): that call's error, which it can catch.
            # (A built-in tool's result is the engine's own: it has no author to warn.)
            tool = self._by_name.get(entry.name)
            message = tool.unencodable(e).message if tool is not None else unsendable(entry.name, e)
            await self._settle_failed(drive, _failed(entry, message))
            return
        if room is not None and size > room:
            # Over the budget on its own: keep its size, not its bytes; the script ends on
            # the results limit before its next run.
            result = None
        try:
            await drive.settle(log.Settlement(entry.index, log.DONE, result, size))
        except StoreUnavailable as e:
            raise self._outcome_lost(entry, e) from e
        self._emit_call("call.done", record.tenant, entry, stats={"result_bytes": size})

    async def _settle_failed(self, drive: Drive, failed: log.Settlement) -> None:
        entry = drive.calls[failed.index]
        if not await drive.ensure_claimed(failed.index):
            return  # failed before its thread came, and the script is held: left approved
        try:
            await drive.settle(failed)
        except StoreUnavailable as e:
            raise self._outcome_lost(entry, e) from e
        self._emit_call("call.failed", drive.record.tenant, entry, error=failed.error)

    def _outcome_lost(self, entry: log.CallEntry, error: StoreUnavailable) -> StoreUnavailable:
        """The log could not take the outcome of ``entry``, which ran (a full disk): said so,
        with what the resume does with it ("nothing written is lost" alone sent a host to
        resume a script that then failed on an interrupted call)."""
        tool = self._by_name.get(entry.name)
        again = tool is not None and (tool.read_only or tool.idempotent)
        after = (
            "it runs again when the script resumes (its tool may run again)"
            if again
            else "it may have taken effect, so the resumed script finds it interrupted"
        )
        return StoreUnavailable(
            f"tools.{entry.name} (call {entry.call_id}) ran, but the log could not take its "
            f"outcome: {error}; {after}",
            permanent=error.permanent,
        )

    async def _invoke(
        self,
        record: log.ScriptRecord,
        entry: log.CallEntry,
        room: int,
        ticket: Ticket | None = None,
    ) -> Any:
        """Run the call ``entry``: a built-in tool's answer, or the host's tool's result as
        JSON data of at most ``room`` bytes (the script's ``results`` budget)."""
        if entry.name == TOOL_SEARCH:
            # The index checks the query and the limit (ToolCallError, as the script sees it).
            query = entry.arguments.get("query")
            limit = entry.arguments.get("limit", 8)
            return self._index.search(query, limit=limit, language=record.language)
        if entry.name == SKILL:
            skill = find_skill(self.skills, entry.arguments.get("name"), record.language)
            attached = recorded_of(skill, record.files)
            return skill_answer(skill, self.tools, language=record.language, attached=attached)
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
            self._given(record.language, entry),
            ctx,
            threads=self._tool_threads,
            default_timeout=self.call_timeout,
            ticket=ticket,
            room=room,
            language=record.language,
        )

    def _given(self, language: str, entry: log.CallEntry) -> Any:
        """The arguments ``entry``'s tool gets, which are also what the worker and a person
        asked to approve it see: as the script sent them (and the log keeps them), but for a
        Python script, null for each required argument that takes null it left out (its
        sandbox leaves out a None argument, sandbox/python.py: there it was meant as null)."""
        tool = self._by_name.get(entry.name)
        if tool is not None and language == "python":
            return tool.with_required_nulls(entry.arguments)
        return entry.arguments


_TRACE_KEPT = 16_000


def _log_raised(error: ToolCallError, entry: log.CallEntry, script_id: str) -> None:
    """A handler that raised (not a ToolCallError: that is a failure said on purpose, for the
    model) is logged with its traceback, for the host's developer: the model reads only its
    message. A warning, but for the plain exceptions a handler raises on purpose as well
    (``ValueError("no such sku")``): those are info."""
    raised = error.__cause__
    if raised is None or isinstance(raised, ToolCallError):
        return
    level = logging.INFO if type(raised) in SAID_ON_PURPOSE else logging.WARNING
    # Formatted here, well formed: a message with a lone surrogate (a tool's own text) breaks
    # a handler that writes UTF-8, and the log line with it.
    trace = "".join(traceback.format_exception(raised)).rstrip()
    if len(trace) > _TRACE_KEPT:  # a message of megabytes: its head and tail say enough
        half = _TRACE_KEPT // 2
        trace = f"{trace[:half]} [... {len(trace) - _TRACE_KEPT:,} characters ...] {trace[-half:]}"
    trace = LONE_SURROGATE.sub("\ufffd", trace)
    logger.log(
        level,
        "tool call raised script=%s call=%s tool=%s: %s\n%s",
        script_id,
        entry.call_id,
        entry.name,
        LONE_SURROGATE.sub("\ufffd", error.message),
        trace,
        # The trace is also the record's own, so a one-line handler (the CLI's) can leave it
        # out of the line rather than fold it in.
        extra={"trace": trace},
    )


def error_text(message: str) -> str:
    """A call's error message as the log keeps it and the script sees it: within the bound
    for messages, and text every store keeps (a lone surrogate, which none can keep, and a
    NUL, which PostgreSQL's text cannot, become U+FFFD), the same on every store."""
    return log.NOT_KEPT.sub("\ufffd", bounded(message, "message"))


# In a Python str every surrogate code point stands alone (a pair would be one code point).
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _failed(entry: log.CallEntry, message: str) -> log.Settlement:
    """The call failed with ``message``, as the log can keep it."""
    return log.Settlement(entry.index, log.FAILED, error=error_text(message))
