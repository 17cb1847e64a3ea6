"""The step loop: run a script step by step until it finishes, fails or pauses.

Part of :class:`engine.CodeMode` (a base class of it). Each step re-runs the script from
the start in a runner, answering every call already in the log; the calls it stops on are
checked and recorded here and settled by ``_calls``.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from engine import _render as render
from engine import log
from engine._calls import CallSettling
from engine._drive import Drive
from engine._ending import Ending
from engine._errors import CodeModeError, StepUnavailable, StoreUnavailable, ToolsMissing
from engine._files import BlobReader, BlobStore, StoredSkillFiles
from engine._limits import LIMIT_NAMES, Limits, config_hint
from engine._live import LiveRuns, live_key
from engine._naming import BUILTIN_TOOLS, SKILL
from engine._result import RunResult
from engine._source import other_language_hint, unclosed_hint
from engine.adapters._formats import left_out_line, returned_left_out, returns_media
from engine.languages import check_language
from runner import HOST_BUSY, FileMissing, RunError, ScriptRunner, Step, bounded
from sandbox import protocol
from sandbox.protocol import Call, is_media, sizes_over

logger = logging.getLogger("codemode")

# A step that no runner takes is tried every retry_delay up to queue_timeout; the log says so
# at the first requeue, then once in this many seconds.
REQUEUED_EVERY = 60.0
# Less of queue_timeout than this left, a step no runner took is given up, not tried again.
MIN_RETRY = 0.01


class StepLoop(CallSettling):
    """The loop behind ``run_code`` and ``resume``: steps, checks, records, endings."""

    runner: ScriptRunner
    blobs: BlobStore
    _skill_files: StoredSkillFiles
    queue_timeout: float
    _check_ms: dict[str, float]
    retry_delay: float
    live: bool
    _live: LiveRuns
    _closed: bool  # the engine's aclose() began: its runner takes no step again

    async def _drive(self, drive: Drive) -> RunResult:
        """Step the script this host owns until it ends or pauses."""
        # What the last step's run printed: a script this loop ends on a budget of its own
        # fails with it, as a script that throws does (its run is the whole run so far).
        printed = ""
        while True:
            if drive.leave is not None and drive.leave.is_set():
                return RunResult(
                    drive.record.id,
                    "elsewhere",
                    "Script left as it was: this host is stopping; another host drives it on.",
                    steps=drive.record.steps,
                )
            await drive.reread_script()  # a hold may have landed
            record = drive.record
            if record.status in log.ENDED and record.outcome is not None:
                return RunResult.from_dict(record.outcome)
            if record.held:
                return await self._paused(drive, [], held=True)
            limits = self.limits_for(record.tenant)
            if drive.open_calls():
                await self._settle_calls(drive, limits)
                # Held: as a claim found it (no call went out) or the settle of the calls that ran.
                if drive.record.held:
                    return await self._paused(drive, [], held=True)
                unsettled = drive.open_calls()
                if unsettled:
                    return await self._paused(drive, unsettled)
            over = self._results_over(drive, limits)
            if over is not None:
                return await self._end(drive, dataclasses.replace(over, printed=printed))
            step = await self._step(drive, limits)
            if step.outcome == "failed" and not step.printed:
                # A process a limit ended (its deadline, its CPU where the run could not
                # stop itself: see sandbox.replay.CpuStop) reported nothing: what the steps
                # before printed stands, the script's output up to its last call.
                step.printed = printed
            printed = step.printed
            ending = self._over_budget(drive.record, step, limits)
            if ending is None and step.outcome == "calls":
                ending = self._check_calls(drive, step, limits)
                if ending is None:
                    # A call to a tool the script began with that this host lacks: left,
                    # unrecorded, for a host that has it.
                    self._refuse_missing(drive.record.id, step.calls)
                    await self._record_calls(drive, step)
                    continue
            if ending is not None:
                return await self._end(drive, dataclasses.replace(ending, printed=printed))
            ending = Ending.of_step(step)
            error = ending.error
            if error is not None and error.name == "SyntaxError":
                code, language = drive.record.code, drive.record.language
                hint = other_language_hint(code, language) or unclosed_hint(code, language)
                if hint:
                    said = error.model_copy(update={"message": error.message + hint})
                    ending = dataclasses.replace(ending, error=said)
            return await self._end(drive, ending)

    async def _step(self, drive: Drive, limits: Limits) -> Step:
        record = drive.record
        records = drive.records()
        queued = started = time.monotonic()
        early, drive.early = drive.early, None
        if early is not None:  # a new script's first step (no records), begun with its start
            queued, started, step = await early
            live = False
        else:
            step = await self._live_step(drive, records) if self.live else None
            live = step is not None
        if step is None:
            script = self._script(drive, limits)
            queued, started, step = await self._replay_step(script, record, limits, records)
        run_ms = (time.monotonic() - started) * 1000
        process = step.process
        wait_ms = (started - queued) * 1000 + (process.wait_ms if process else 0.0)
        # Budgets are charged what the runner measured (the process's CPU from wait4, the
        # file bytes it served), never what the process says about itself.
        cpu_ms = _measure(process.cpu_ms) if process else 0.0
        file_bytes = int(_measure(process.file_bytes)) if process else 0
        self._log_step(record, step, limits, wait_ms, run_ms, cpu_ms, live=live)
        self._keep_live(drive, step)
        drive.record_step(
            log.StepUsage(
                record.steps + 1,
                record.total_compute_ms + cpu_ms,
                record.total_file_bytes + file_bytes,
            )
        )
        return step

    def _script(self, drive: Drive, limits: Limits) -> protocol.Script:
        """The script as a step's runner takes it, less its records: what does not change
        between the steps of one drive, checked once (each step copies it with its records,
        which were made from data this engine checked when it logged them)."""
        run_limits = limits.for_run()
        script = drive.script
        tools = self._tools_for(drive)
        if script is None or script.limits is not run_limits or script.tools != tools:
            script = drive.script = self._script_of(drive.record, run_limits, tools)
        return script

    def _tools_for(self, drive: Drive) -> list[str]:
        """:meth:`_tools_of` the drive's script, made again only when the engine's tools
        change."""
        made = drive.tools_made
        if made is None or made[0] is not self._tool_names:
            made = drive.tools_made = (self._tool_names, self._tools_of(drive.record))
        return made[1]

    def _refuse_missing(self, script_id: str, calls: Iterable[log.CallEntry | Call]) -> None:
        """:class:`ToolsMissing` when ``calls`` name a tool this host does not have."""
        missing = sorted({c.name for c in calls} - set(self._tool_names))
        if missing:
            have = ", ".join(sorted(self._by_name)) or "none"
            raise ToolsMissing(
                f"script {script_id} calls {', '.join(missing)}, which this host does "
                f"not have (it has: {have}); resume it on a host with those tools"
            )

    def _tools_of(self, record: log.ScriptRecord) -> list[str]:
        """The tools a script can call: those it began with (named in its record's
        fingerprint), and the built-in ones. A tool added since (an MCP server's, a host's
        new release) stays out of its world: its runs before the tool came, live or
        replayed, had no such tool, and its later runs must make the same calls (a call to it
        that failed in a live run, made in the replay after a pause, was a DivergenceError).
        One it began with that this host lacks (a server down, a rolling deploy) stays in:
        a call to it stops the drive before it is recorded (:meth:`_refuse_missing`), for a
        host that has it, where the script would otherwise fail for good on "does not
        exist". A log without fingerprints (written before them) gives this host's tools."""
        began = record.tools
        if not began:
            return self._tool_names
        names = [name for name in self._tool_names if name in began or name in BUILTIN_TOOLS]
        return names + [name for name in began if name not in self._by_name]

    def _script_of(
        self,
        record: log.ScriptRecord,
        run_limits: protocol.Limits,
        tools: list[str] | None = None,
    ) -> protocol.Script:
        return protocol.Script(
            id=record.id,
            language=check_language(record.language),
            code=record.code,
            tools=self._tools_of(record) if tools is None else tools,
            files=[
                protocol.FileInfo(id=f["id"], mime=f["mime"], size=f["size"], skill=f.get("skill"))
                for f in record.files
            ],
            clock=protocol.Clock(now_ms=record.now_ms, seed=record.seed),
            limits=run_limits,
        )

    def _begin_first_step(
        self, record: log.ScriptRecord
    ) -> tuple[asyncio.Task[tuple[float, float, Step]], protocol.Script]:
        """Begin the first step of an unchecked script about to be started, and its script
        (a drive that takes the step takes the script too). The step runs while the start is
        written: a step only ever reports calls, which run once they are logged, so a step
        whose key names a script already started, or whose start fails, is dropped
        (:func:`discard_early`) and nothing it did is left."""
        limits = self.limits_for(record.tenant)
        script = self._script_of(record, limits.for_run())
        # The host writes the start while this step runs: a hint to the runner.
        context = contextvars.copy_context()
        context.run(HOST_BUSY.set, True)
        task = asyncio.create_task(
            self._replay_step(script, record, limits),
            name=f"step {record.id}",
            context=context,
        )
        return task, script

    async def _replay_step(
        self,
        script: protocol.Script,
        record: log.ScriptRecord,
        limits: Limits,
        records: list[protocol.Record] | None = None,
    ) -> tuple[float, float, Step]:
        """A step that runs ``script`` from the start in the runner, with ``records`` (its
        own, if None): when it was queued, when the runner took it, and the step. Its process
        may use what is left of the script's ``total_compute_ms`` (live, over every segment
        it goes on to run)."""
        used = record.total_compute_ms
        left = min(protocol.MAX_LIMIT, max(1, math.ceil(limits.total_compute_ms - used)))
        update: dict[str, Any] = {
            "limits": script.limits.model_copy(update={"compute_left_ms": left})
        }
        if records is not None:
            update["records"] = records
        script = script.model_copy(update=update)
        reader = (
            BlobReader(self.blobs, record.files, self._skill_files.forget) if record.files else None
        )
        queued = time.monotonic()
        said_at = 0.0  # the wait at which the next "requeued" warning is due
        while True:
            started = time.monotonic()
            try:
                if self.live:
                    step = await self.runner.run(script, reader, tenant=record.tenant, live=True)
                else:
                    step = await self.runner.run(script, reader, tenant=record.tenant)
                return queued, started, step
            except RunError as e:
                if self._closed:  # retried, it would wait out queue_timeout for nothing
                    raise CodeModeError(
                        f"the engine closed while script {record.id} ran a step; it waits in "
                        "the log: resume it"
                    ) from e
                waited = time.monotonic() - queued
                time_left = self.queue_timeout - waited
                if e.permanent or time_left < MIN_RETRY:
                    if e.permanent:
                        raise StepUnavailable(
                            f"no runner can take a step of script {record.id}: {e}; fix that, "
                            "then resume the script",
                            permanent=True,
                        ) from e
                    # Given up at queue_timeout, its last try made there (a bound under
                    # retry_delay gets one more try, not none): the time said is the time
                    # tried, beside the bound.
                    raise StepUnavailable(
                        f"no runner took a step of script {record.id} in {waited:.1f} s of "
                        f"trying (queue_timeout {self.queue_timeout:g} s; the last try: {e}); "
                        "resume it later"
                    ) from e
                if waited >= said_at:  # once, then once a minute: not a line per try
                    logger.warning(
                        "script step requeued script=%s (for %.0f s so far, up to queue_timeout "
                        "%g s): %s",
                        record.id,
                        waited,
                        self.queue_timeout,
                        e,
                    )
                    said_at = waited + REQUEUED_EVERY
                await asyncio.sleep(min(self.retry_delay, time_left))

    # ---- live steps (see engine._live) ----

    async def _live_step(self, drive: Drive, records: list[protocol.Record]) -> Step | None:
        """The next segment of the drive's live run, if it keeps one that waits for exactly
        the last calls in ``records``; ``None`` when the step must replay instead. Every call
        is settled, and its result durable in the log, before this runs: a host that dies
        after sending a result to the process has it in the log."""
        key = live_key(drive)
        run = self._live.take(key, records)
        if run is None:
            return None
        try:
            return await run.resume(records[run.known :])
        except RunError as e:
            logger.info("live run gone script=%s: %s; replaying", drive.record.id, e)
        except Exception:  # a runner's bug: the log still holds everything, so replay
            logger.warning("live run failed script=%s; replaying", drive.record.id, exc_info=True)
        finally:
            self._live.release(key)
        self._live.close(run)
        return None

    def _keep_live(self, drive: Drive, step: Step) -> None:
        """Keep the step's live run for the drive's next step (the calls it asked for are
        logged from index ``len(drive.calls)``); a live run a step cannot use is closed."""
        run = step.live
        if run is None:
            return
        step.live = None  # the cache owns it now
        if step.outcome == "calls" and self.live:
            self._live.keep(live_key(drive), run, len(drive.calls), step.calls)
        else:
            self._live.close(run)

    def _over_budget(self, record: log.ScriptRecord, step: Step, limits: Limits) -> Ending | None:
        """The ending when the script's runs together passed a budget, once charged."""
        if record.total_file_bytes > limits.total_file_bytes and step.outcome != "failed":
            read, bound = sizes_over(record.total_file_bytes, limits.total_file_bytes)
            return Ending.limit_met(
                "total_file_bytes",
                f"the script's runs have read {read} of files in all, over the {bound} one "
                "script may read",
            )
        # The runner ends a run at what is left of the total (`compute_left_ms`), and names
        # it; a runner without it (script version 2) lets the run end a segment later.
        if step.limit is not None and step.limit.name == "total_compute_ms":
            # The run was stopped at what was left: what the process is charged, read apart,
            # comes out a little under or over it ("1,498 ms of 1,500" read as a limit not
            # met), so the ending does not say it (the same, live or replayed).
            return Ending.limit_met(
                "total_compute_ms",
                f"the script's runs have used all the {limits.total_compute_ms:,} ms of CPU "
                "one script may use",
            )
        if record.total_compute_ms > limits.total_compute_ms and step.outcome == "calls":
            return Ending.limit_met(
                "total_compute_ms",
                f"the script's runs have used {record.total_compute_ms:,.0f} ms of CPU in all, "
                f"and one script may use {limits.total_compute_ms:,} ms",
            )
        return None

    def _log_step(
        self,
        record: log.ScriptRecord,
        step: Step,
        limits: Limits,
        wait_ms: float,
        run_ms: float,
        cpu_ms: float,
        *,
        live: bool = False,
    ) -> None:
        heap = step.stats.heap_bytes
        # The type check runs before a script's first step; that step's line carries it.
        check_ms = self._check_ms.pop(record.id, 0.0)
        # A replay runs again the segments of the steps before it, each with compute_ms of
        # its own (the process re-arms it at each), so its CPU is weighed against them all.
        segments = 1 if live else record.steps + 1
        if heap > limits.memory / 2 or cpu_ms > limits.compute_ms * segments / 2:
            logger.warning(
                "script step used over half its allowance script=%s tenant=%s heap_bytes=%d "
                "of memory=%d, cpu_ms=%.1f of compute_ms=%d in each of %d segments",
                record.id,
                render.escaped(record.tenant),
                heap,
                limits.memory,
                cpu_ms,
                limits.compute_ms,
                segments,
            )
        # Made only for a log or a listener that takes them: every step of every call is here.
        if not (self._listeners or logger.isEnabledFor(logging.INFO)):
            return
        limit = step.limit.name if step.limit else "-"
        # The same fields as the message's, as the record's own attributes for a JSON log.
        fields = {
            "script": record.id,
            "tenant": record.tenant,
            "step": record.steps + 1,
            "outcome": step.outcome,
            "results_bytes": step.stats.results_bytes,
            "wait_ms": round(wait_ms, 1),
            "run_ms": round(run_ms, 1),
            "heap_bytes": heap,
            "cpu_ms": round(cpu_ms, 1),
            "check_ms": round(check_ms, 1),
            "limit": limit,
            "live": int(live),
        }
        logger.info(
            "script step script=%s tenant=%s step=%d outcome=%s results_bytes=%d wait_ms=%.1f "
            "run_ms=%.1f heap_bytes=%d cpu_ms=%.1f check_ms=%.1f limit=%s live=%d",
            # The tenant is the host's caller's text: a line break in it would forge a line.
            *({**fields, "tenant": render.escaped(record.tenant)}.values()),
            extra=fields,
        )
        stats = {k: fields[k] for k in list(fields)[3:10]} | {
            "calls": len(step.calls),
            "live": fields["live"],
        }
        self._emit(
            "step",
            record.id,
            tenant=record.tenant,
            step=record.steps + 1,
            stats=stats,
            limit=step.limit.name if step.limit else None,
        )

    # ---- checking and recording the calls a step asks for ----

    def _check_calls(self, drive: Drive, step: Step, limits: Limits) -> Ending | None:
        """Re-check the calls the runner reported against the tools and the log's budgets."""
        tools = self._tools_for(drive)
        for call in step.calls:
            if call.name not in tools:
                return Ending.failure(
                    "ProtocolError",
                    f"the runner reported a call to tools.{bounded(call.name, 'name')}, "
                    "which does not exist",
                )
        count = len(drive.calls) + len(step.calls)
        if count > limits.calls:
            return Ending.limit_met("calls", protocol.calls_over(limits.calls))
        try:
            sizes = [len(orjson.dumps(c.arguments)) for c in step.calls]
        except (TypeError, orjson.JSONEncodeError) as e:
            return Ending.failure(
                "ProtocolError", f"the runner reported arguments that are not JSON data ({e})"
            )
        biggest = max(sizes, default=0)
        if biggest > limits.call_arguments:
            size, bound = sizes_over(biggest, limits.call_arguments)
            return Ending.limit_met(
                "call_arguments",
                f"a call's arguments are {size}, over the {bound} one call may take",
            )
        if sum(sizes) > limits.step_arguments:
            size, bound = sizes_over(sum(sizes), limits.step_arguments)
            return Ending.limit_met(
                "step_arguments",
                f"the calls of one step pass {size} of arguments together, over the {bound} "
                "one step may pass",
            )
        total = sum(sizes) + drive.argument_bytes
        if total > limits.arguments:
            size, bound = sizes_over(total, limits.arguments)
            return Ending.limit_met(
                "arguments",
                f"the script's calls pass {size} of arguments in all, over the {bound} one "
                "script may pass",
            )
        return None

    async def _record_calls(self, drive: Drive, step: Step) -> None:
        record, start = drive.record, len(drive.calls)
        now = int(time.time() * 1000)
        await drive.add_calls(
            [
                log.CallEntry(
                    script_id=record.id,
                    index=start + i,
                    call_id=f"call_{record.id[:8]}_{start + i + 1}",
                    name=call.name,
                    arguments=call.arguments,
                    argument_bytes=len(orjson.dumps(call.arguments)),
                    created_ms=now,
                )
                for i, call in enumerate(step.calls)
            ]
        )
        for entry in drive.calls[start:]:
            self._emit_call(
                "call.proposed",
                record.tenant,
                entry,
                stats={"argument_bytes": entry.argument_bytes},
            )

    def _results_over(self, drive: Drive, limits: Limits) -> Ending | None:
        total = drive.result_bytes()
        if total <= limits.results:
            return None
        # A skill longer than the whole budget: no script can read it, and asking tools for
        # less (the limit's remedy) does not help; the host's log names the skill to shorten.
        room = limits.results
        skill = next(
            (c for c in drive.calls if c.name == SKILL and (c.result_bytes or 0) > room),
            None,
        )
        if skill is not None:
            name = skill.arguments.get("name")
            logger.warning(
                "the skill %s answers %s bytes, over the results limit (%s bytes) of script=%s "
                "tenant=%s: no script can read it; shorten it (its instructions, or the tools "
                "it names), or raise %s",
                render.escaped(str(name)),
                skill.result_bytes,
                limits.results,
                drive.record.id,
                render.escaped(drive.record.tenant),
                config_hint("results"),
            )
            size, bound = sizes_over(skill.result_bytes or 0, limits.results)
            return Ending.limit_met(
                "results",
                f"the skill {orjson.dumps(name).decode()} answered {size}, over the {bound} of "
                "results one script may read",
                "this host's skill is too long to read: do the task without it (tool_search "
                "finds the tools)",
            )
        size, bound = sizes_over(total, limits.results)
        return Ending.limit_met(
            "results",
            f"the script's calls returned {size} of results, over the {bound} one script may read",
        )

    # ---- endings ----

    async def _paused(
        self, drive: Drive, unsettled: Sequence[log.CallEntry], *, held: bool = False
    ) -> RunResult:
        record = drive.record
        reasons = {log.AWAITING_APPROVAL: "approval", log.AWAITING_CLIENT: "client"}
        waiting = [
            {
                "call_id": c.call_id,
                "name": c.name,
                "arguments": self._given(record.language, c),
                "reason": reasons.get(c.state, "turn"),
            }
            for c in unsettled
        ]
        if held:
            text = "Script paused.\n  held: the script is interrupted until it is released."
        else:
            text = render.render_paused(waiting)
        await drive.pause()
        events = [
            {"call_id": w["call_id"], "tool": w["name"], "reason": w["reason"]} for w in waiting
        ]
        self._emit("paused", record.id, tenant=record.tenant, steps=record.steps, waiting=events)
        return RunResult(record.id, "paused", text, waiting=waiting, steps=record.steps)

    async def _end(self, drive: Drive, ending: Ending) -> RunResult:
        record = drive.record
        if ending.limit is not None and ending.limit in LIMIT_NAMES:
            logger.warning(
                "script ended on a limit script=%s tenant=%s limit=%s; if scripts should have "
                "more, raise %s",
                record.id,
                render.escaped(record.tenant),
                ending.limit,
                config_hint(ending.limit),
            )
        # A failed script's files come after its error and printed text, as a finished one's
        # do after its value: what it showed before it failed (a chart, a table) is what the
        # model needs to see to mend it.
        shown_text, shown, media = await self._shown(record, ending)
        if ending.status == "finished":
            value = ending.value if ending.value_text is None else ending.value_text
            # The image and audio blocks returned are attached within what the files shown
            # left of the same budgets (the API refuses a request of some 100 images, and
            # every later one of the conversation with it): decided here, once, for every API.
            left_out, left_out_text = [], ""
            if returns_media(value):  # as most scripts do not: then the limits are not asked
                limits = self.limits_for(record.tenant)
                left_out = returned_left_out(
                    value,
                    limits.shown_files - len(shown),
                    limits.shown_media - sum(s["size"] for s in shown if is_media(s["mime"])),
                )
                budgets = {"shown_files": limits.shown_files, "shown_media": limits.shown_media}
                left_out_text = left_out_line(left_out, budgets)
            result = RunResult(
                record.id,
                "finished",
                render.render_finished(ending, left_out) + shown_text + left_out_text,
                value=value,
                returned=ending.returned,
                steps=record.steps,
                shown=shown,
                media=media,
                returned_left_out=left_out,
            )
            status = log.FINISHED
        else:
            result = RunResult(
                record.id,
                "failed",
                render.render_failed(ending) + shown_text,
                error=ending.error.model_dump() if ending.error else None,
                limit=ending.limit,
                steps=record.steps,
                shown=shown,
                media=media,
            )
            status = log.SCRIPT_FAILED
        # An outcome must last unless the script called no tool with effects: a power cut
        # that lost it loses nothing a new run would not give again.
        lasting = self._with_effects(c.name for c in drive.calls)
        await drive.end(status, result.to_dict(), lasting=lasting)
        self._emit(
            "ended",
            record.id,
            tenant=record.tenant,
            status=result.status,
            steps=record.steps,
            limit=result.limit,
            error=result.error["name"] if result.error else None,
        )
        return result

    async def _shown(
        self, record: log.ScriptRecord, ending: Ending
    ) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
        """The files the script showed, checked again against the limits, read from blobs."""
        if not ending.shown:
            return "", [], []  # as most scripts: then no thread
        limits = self.limits_for(record.tenant)
        by_id = {f["id"]: f for f in record.files}
        ids = [i for i in dict.fromkeys(ending.shown) if i in by_id][: limits.shown_files]

        def read(f: dict[str, Any], length: int) -> bytes | None:
            try:
                return self.blobs.read(f["blob"], 0, length)
            except FileMissing:
                return None

        try:
            # Off the loop: the blobs are files to read or a database to reach.
            return await asyncio.to_thread(
                render.render_shown,
                [by_id[i] for i in ids],
                read,
                text_budget=limits.shown,
                media_budget=limits.shown_media,
            )
        except OSError as e:
            # Not rendered without them: the outcome lasts. The script is in the log as it was.
            raise StoreUnavailable(
                f"the file store failed reading the files the script showed ({e}); script "
                f"{record.id} is in the log: resume it once the store is back"
            ) from None


async def discard_early(task: asyncio.Task[tuple[float, float, Step]]) -> None:
    """Drop a first step begun early that no drive takes: cancelled if it still runs, its
    live process ended if it kept one. Never raises but for this caller's cancellation."""
    task.cancel()
    await asyncio.wait({task})
    if task.cancelled() or task.exception() is not None:
        return
    live = task.result()[2].live
    if live is not None:
        await live.close()


def _measure(value: float) -> float:
    """A runner's measure as a charge: a negative or non-finite one (a runner's bug) is 0."""
    return value if math.isfinite(value) and value > 0 else 0.0
