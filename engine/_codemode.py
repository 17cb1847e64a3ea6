"""CodeMode: the `run_code` tool a host gives its model, and the replay loop behind it.

One script runs as a series of steps. Each step re-runs the script from the start in a
runner, answering every call already in the session log; when it stops on new calls, the
engine checks them, asks the host's worker, runs them (or waits for a person or the client),
writes each result to the log, and steps again. The log is the whole state, so a script
resumes after a restart, in another process, without running a recorded call again.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from engine import _log as log
from engine import _render as render
from engine._declarations import run_code_tool
from engine._errors import CallNotWaiting, CodeModeError, StepUnavailable
from engine._files import Attachment, BlobReader, BlobStore, record_files
from engine._limits import Limits
from engine._naming import closest_names
from engine._search import ToolIndex
from engine._skills import Skill, find_skill, skill_answer, skills_listing
from engine._source import ScriptTooLarge, normalize
from engine._tools import Tool, ToolCallError, ToolContext, unique_tools
from engine._worker import Decision, Worker, ask, calls_trigger, proposed_worker
from engine.languages.javascript import (
    SHOWN_PROBLEMS,
    Checked,
    CompilerMissing,
    TypeChecker,
    check_declarations,
)
from runner import RunError, ScriptRunner, Step
from sandbox import protocol
from sandbox.protocol import limit_message, size_text

logger = logging.getLogger("codemode")

BUILTIN_TOOLS = ("tool_search", "skill")

FILES_NOTE = (
    "The conversation's files are in `files`: `files.list()` and `files.stat(id)` give "
    "`{ id, mime, size }`; `await files.text(id)` reads a whole file; `files.show(id)` puts a "
    "file in front of you when the script ends (at most 4). Stream big files with "
    "`for await (const row of files.csv(id, { header, delimiter }))`, `files.lines(id)`, "
    "`files.jsonl(id)`, `files.chunks(id, { size, offset })` and `files.xlsx(id, { sheet })` "
    "(`await files.sheets(id)` names the sheets); each takes `{ limit, offset }`. Read files "
    "before calling tools: each run of the script reads them again."
)

CHECK_NOTE = (
    "Before a script runs, its calls are type-checked against the declarations below: a call "
    "to a tool that does not exist, or with a missing or wrong argument, fails the script "
    "before any call is made, with the line to fix."
)

Status = Literal["finished", "failed", "paused"]

# Reasons the type check is off that were logged already: each is said once per process.
_CHECK_OFF_SAID: set[str] = set()


@dataclass
class RunResult:
    """How a `run_code` call ended, or where it paused.

    ``text`` is what the model sees; ``content`` the same as MCP content blocks. A paused
    result names what it waits for in ``waiting`` (each ``{call_id, name, arguments,
    reason}``, reason ``approval``, ``client`` or ``held``); resume it with
    :meth:`CodeMode.resume` once they are answered.
    """

    script_id: str
    status: Status
    text: str
    value: Any = None
    returned: bool = False
    error: dict[str, Any] | None = None
    limit: str | None = None
    waiting: list[dict[str, Any]] = field(default_factory=list)
    steps: int = 0
    shown: list[dict[str, Any]] = field(default_factory=list)
    media: list[dict[str, Any]] = field(default_factory=list)

    @property
    def content(self) -> list[dict[str, Any]]:
        """MCP content blocks: the text, then each media file the script showed."""
        return [{"type": "text", "text": self.text}, *self.media]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["content"] = self.content
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        known = {k: v for k, v in data.items() if k != "content"}
        return cls(**known)


class CodeMode:
    """Code mode for one agent: its tools, its runner, its session log and its limits.

    ``limits`` is a :class:`Limits` or a function from tenant to limits (asked at each
    step). ``worker`` answers the calls a script stops on (default: run them as proposed).
    ``context`` is handed to tool handlers as ``ToolContext.host``. ``call_timeout`` bounds a
    call whose tool sets no ``timeout`` of its own (a call past it fails, catchably).
    ``store`` defaults to a SQLite log under ``data_dir`` (or in memory when neither is
    given); file attachments are kept as blobs in ``blobs`` (default: under ``data_dir``, or
    in memory). ``type_check`` (``"on"``, ``"off"`` or a :class:`TypeChecker`) checks each
    new script against the tools' declarations before its first call; ``"on"`` finds
    TypeScript 7's compiler, and says once in the log that the check is off when it is
    missing.
    """

    def __init__(
        self,
        tools: Iterable[Tool] = (),
        *,
        runner: ScriptRunner | None = None,
        store: log.LogStore | None = None,
        data_dir: str | Path | None = None,
        limits: Limits | Callable[[str], Limits] | None = None,
        worker: Worker | None = None,
        context: Any = None,
        skills: Iterable[Skill] = (),
        queue_timeout: float = 300.0,
        retry_delay: float = 3.0,
        call_timeout: float | None = 300.0,
        clock: Callable[[], float] = time.time,
        blobs: BlobStore | None = None,
        type_check: Literal["on", "off"] | TypeChecker = "on",
    ) -> None:
        self.tools = unique_tools(tools)
        self._by_name = {t.name: t for t in self.tools}
        self.skills: list[Skill] = list(skills)
        self._declares_skills = bool(self.skills)
        self._index = ToolIndex(self.tools, [s.info() for s in self.skills])
        if runner is None:
            from runner import ProcessRunner

            runner = ProcessRunner()
        self.runner = runner
        if store is None:
            store = log.SqliteStore(data_dir) if data_dir is not None else log.MemoryStore()
        self.store = store
        if blobs is None:
            blobs = BlobStore(Path(data_dir) / "blobs" if data_dir is not None else None)
        self.blobs = blobs
        self._limits = limits or Limits()
        self.worker: Worker = worker or proposed_worker
        self.context = context
        self.queue_timeout = queue_timeout
        self.call_timeout = call_timeout
        self.retry_delay = retry_delay
        self.clock = clock
        self._script_locks: dict[str, asyncio.Lock] = {}
        self._tool_names = sorted({*self._by_name, *BUILTIN_TOOLS})
        self.type_checker = _type_checker(type_check)
        self._check_declarations: str | None = None
        self._check_ms: dict[str, float] = {}  # what each new script's check cost, until logged

    # ---- what the model sees ----

    def definition(self) -> dict[str, Any]:
        """The `run_code` tool for a model API: ``name``, ``description``, ``input_schema``.

        The same bytes for the same tools, so a cached prompt prefix holds.
        """
        notes = [FILES_NOTE] if self.type_checker is None else [FILES_NOTE, CHECK_NOTE]
        return run_code_tool(self.tools, skills=self._declares_skills, notes=notes)

    def direct_call_error(self, name: str) -> str:
        """The error for a model that called a tool directly: code mode is all or nothing,
        so every tool but ``run_code`` is reached from a script."""
        if name in self._by_name or name in BUILTIN_TOOLS:
            return (
                f"{name} is not called directly: call it from run_code, in a script such as "
                f"`return await tools.{name}({{ ... }})`"
            )
        near = closest_names(name, self._tool_names)
        hint = f" (the closest are {', '.join(near)})" if near else ""
        return (
            f"there is no tool {name!r}{hint}; the only tool is run_code, and scripts reach "
            "the others as tools.<name>"
        )

    def skills_prompt(self) -> str:
        """The system-prompt text listing each skill with the tools it names."""
        return skills_listing(self.skills)

    def add_skill(self, skill: Skill) -> str:
        """Add a skill while the session runs; returns the text that lists it for the model
        (tell it after what it has read, so the cached prefix holds)."""
        if any(s.name == skill.name for s in self.skills):
            raise CodeModeError(f"a skill called {skill.name!r} is already loaded")
        self.skills.append(skill)
        self._index = ToolIndex(self.tools, [s.info() for s in self.skills])
        return skills_listing([skill])

    def search(self, query: str, limit: int = 8) -> str:
        """What ``tools.tool_search({ query })`` answers inside a script."""
        return self._index.search(query, limit=limit)

    def limits_for(self, tenant: str) -> Limits:
        limits = self._limits
        return limits(tenant) if callable(limits) else limits

    # ---- running ----

    async def run_code(
        self, code: str, *, tenant: str = "default", files: Sequence[Attachment] = ()
    ) -> RunResult:
        """Start a script and drive it until it finishes, fails or pauses.

        ``files`` are the attachments the script may read (``files.list()`` shows them);
        their bytes are recorded with the script, so every run reads the same bytes.
        """
        try:
            body = normalize(code)
        except (ScriptTooLarge, TypeError) as e:
            script_id = self._new_id()
            text = f"Script failed.\nScriptError: {e}"
            return RunResult(script_id, "failed", text, error={"name": "ScriptError"})
        checked = await self._type_check(body)
        record = log.ScriptRecord(
            id=self._new_id(),
            code=body,
            tenant=tenant,
            now_ms=int(self.clock() * 1000),
            seed=secrets.randbits(32),
            created_ms=int(time.time() * 1000),
            files=record_files(
                self.blobs, [a for s in self.skills for a in s.attachments()] + list(files)
            ),
        )
        self.store.create_script(record)
        if checked is not None:
            self._check_ms[record.id] = checked.ms
            if not checked.ok:
                return self._refused(record, checked)
        return await self.resume(record.id)

    async def _type_check(self, body: str) -> Checked | None:
        if self.type_checker is None:
            return None
        if self._check_declarations is None:
            self._check_declarations = check_declarations(self.tools)
        return await self.type_checker.check(body, self._check_declarations)

    def _refused(self, record: log.ScriptRecord, checked: Checked) -> RunResult:
        """End a script the type check refused: it never ran, and no call was made."""
        lines = record.code.split("\n")
        step = Step.failure("TypeCheckError", checked.message())
        assert step.error is not None
        step.error.lines = [
            protocol.ErrorLine(line=n, text=lines[n - 1][:300])
            for n in dict.fromkeys(p.line for p in checked.problems[:SHOWN_PROBLEMS])
            if n <= len(lines)
        ]
        self._log_step(record, step, self.limits_for(record.tenant), 0.0, 0.0, 0.0)
        return self._end(record, step)

    async def resume(self, script_id: str) -> RunResult:
        """Continue a script from its log: after a pause, a restart, or on another host."""
        lock = self._script_locks.setdefault(script_id, asyncio.Lock())
        async with lock:
            return await self._drive(script_id)

    def hold(self, script_id: str) -> None:
        """Interrupt: no step of the script runs and no call it asks for goes out."""
        self.store.get_script(script_id)
        self.store.update_script(script_id, held=True)

    def release(self, script_id: str) -> None:
        """End a hold; call :meth:`resume` to continue."""
        self.store.get_script(script_id)
        self.store.update_script(script_id, held=False)

    def approve(self, script_id: str, call_id: str) -> None:
        """A person approved the call: it runs when the script resumes."""
        entry = self._waiting(script_id, call_id, log.AWAITING_APPROVAL)
        self.store.update_call(script_id, entry.index, state=log.APPROVED, note="approved")

    def reject(self, script_id: str, call_id: str, message: str = "") -> None:
        """A person refused the call: the script sees an error with this message."""
        entry = self._waiting(script_id, call_id, log.AWAITING_APPROVAL)
        error = message or f"a person refused tools.{entry.name}"
        self.store.update_call(script_id, entry.index, state=log.FAILED, error=error)

    def client_result(
        self, script_id: str, call_id: str, result: Any = None, *, error: str | None = None
    ) -> None:
        """The client ran a client tool: its result, or the error it failed with."""
        entry = self._waiting(script_id, call_id, log.AWAITING_CLIENT)
        if error is not None:
            self.store.update_call(script_id, entry.index, state=log.FAILED, error=str(error))
            return
        tool = self._by_name.get(entry.name)
        try:
            data = tool._check_result(result) if tool is not None else result
            size = len(orjson.dumps(data))
        except (ToolCallError, TypeError) as e:
            message = e.message if isinstance(e, ToolCallError) else str(e)
            self.store.update_call(script_id, entry.index, state=log.FAILED, error=message)
            return
        extra = {**entry.extra, "result_bytes": size}
        self.store.update_call(script_id, entry.index, state=log.DONE, result=data, extra=extra)

    def _waiting(self, script_id: str, call_id: str, state: str) -> log.CallEntry:
        for entry in self.store.calls(script_id):
            if entry.call_id == call_id:
                if entry.state != state:
                    raise CallNotWaiting(
                        f"call {call_id} of script {script_id} is {entry.state}, "
                        f"not {state.replace('_', ' ')}"
                    )
                return entry
        raise CallNotWaiting(f"script {script_id} has no call {call_id}")

    # ---- the loop ----

    async def _drive(self, script_id: str) -> RunResult:
        while True:
            record = self.store.get_script(script_id)
            if record.status in log.ENDED and record.outcome is not None:
                return RunResult.from_dict(record.outcome)
            if record.held:
                return self._paused(record, [], held=True)
            limits = self.limits_for(record.tenant)
            calls = self.store.calls(script_id)
            if any(not c.settled for c in calls):
                await self._settle_calls(record, limits, calls)
                calls = self.store.calls(script_id)
                unsettled = [c for c in calls if not c.settled]
                if unsettled:
                    return self._paused(record, unsettled)
            over = self._results_over(calls, limits)
            if over is not None:
                return self._end(record, over)
            step = await self._step(record, calls, limits)
            record = self.store.get_script(script_id)
            if step.outcome == "calls":
                failure = self._check_calls(record, calls, step, limits)
                if failure is not None:
                    return self._end(record, failure)
                self._record_calls(record, calls, step)
                continue
            return self._end(record, step)

    async def _step(
        self, record: log.ScriptRecord, calls: list[log.CallEntry], limits: Limits
    ) -> Step:
        script = protocol.Script(
            id=record.id,
            code=record.code,
            records=[
                protocol.Record(name=c.name, arguments=c.arguments, error=c.error)
                if c.state == log.FAILED
                else protocol.Record(name=c.name, arguments=c.arguments, result=c.result)
                for c in calls
            ],
            tools=self._tool_names,
            files=[
                protocol.FileInfo(id=f["id"], mime=f["mime"], size=f["size"], skill=f.get("skill"))
                for f in record.files
            ],
            clock=protocol.Clock(now_ms=record.now_ms, seed=record.seed),
            limits=limits.for_run(),
        )
        reader = BlobReader(self.blobs, record.files) if record.files else None
        queued = time.monotonic()
        while True:
            started = time.monotonic()
            try:
                step = await self.runner.run(script, reader, tenant=record.tenant)
                break
            except RunError as e:
                waited = time.monotonic() - queued
                if e.permanent or waited + self.retry_delay > self.queue_timeout:
                    if e.permanent:
                        raise StepUnavailable(
                            f"no runner can take a step of script {record.id}: {e}; fix that, "
                            "then resume the script"
                        ) from e
                    raise StepUnavailable(
                        f"no runner took a step of script {record.id} within "
                        f"{self.queue_timeout:g} s ({e}); resume it later"
                    ) from e
                logger.warning("script step requeued script=%s: %s", record.id, e)
                await asyncio.sleep(self.retry_delay)
        run_ms = (time.monotonic() - started) * 1000
        wait_ms = (started - queued) * 1000 + (step.process.wait_ms if step.process else 0.0)
        # The run's own CPU, as the sandbox measured it; a process that died without saying
        # is charged what the runner measured of it (start-up included).
        cpu_ms = step.stats.cpu_ms or (step.process.cpu_ms if step.process else 0.0)
        total = record.total_compute_ms + cpu_ms
        file_total = record.total_file_bytes + step.stats.file_bytes
        self.store.update_script(
            record.id,
            steps=record.steps + 1,
            total_compute_ms=total,
            total_file_bytes=file_total,
        )
        self._log_step(record, step, limits, wait_ms, run_ms, cpu_ms)
        if file_total > limits.total_file_bytes and step.outcome != "failed":
            return _limit_step(
                "total_file_bytes",
                f"the script's runs have read {size_text(file_total)} of files in all, over "
                f"the {size_text(limits.total_file_bytes)} one script may read",
            )
        if total > limits.total_compute_ms and step.outcome == "calls":
            return _limit_step(
                "total_compute_ms",
                f"the script's runs have used {total:,.0f} ms of CPU in all, over the "
                f"{limits.total_compute_ms:,} ms one script may use",
            )
        return step

    def _log_step(
        self,
        record: log.ScriptRecord,
        step: Step,
        limits: Limits,
        wait_ms: float,
        run_ms: float,
        cpu_ms: float,
    ) -> None:
        limit = step.limit.name if step.limit else "-"
        heap = step.stats.heap_bytes
        # The type check runs before a script's first step; that step's line carries it.
        check_ms = self._check_ms.pop(record.id, 0.0)
        logger.info(
            "script step script=%s tenant=%s step=%d outcome=%s results_bytes=%d wait_ms=%.1f "
            "run_ms=%.1f heap_bytes=%d cpu_ms=%.1f check_ms=%.1f limit=%s",
            record.id,
            record.tenant,
            record.steps + 1,
            step.outcome,
            step.stats.results_bytes,
            wait_ms,
            run_ms,
            heap,
            cpu_ms,
            check_ms,
            limit,
        )
        if heap > limits.memory / 2 or cpu_ms > limits.compute_ms / 2:
            logger.warning(
                "script step used over half its allowance script=%s tenant=%s heap_bytes=%d "
                "of memory=%d, cpu_ms=%.1f of compute_ms=%d",
                record.id,
                record.tenant,
                heap,
                limits.memory,
                cpu_ms,
                limits.compute_ms,
            )

    # ---- checking and recording the calls a step asks for ----

    def _check_calls(
        self, record: log.ScriptRecord, calls: list[log.CallEntry], step: Step, limits: Limits
    ) -> Step | None:
        """Re-check what the sandbox reported; it is not trusted."""
        for call in step.calls:
            if call.name not in self._tool_names:
                return Step.failure(
                    "ProtocolError",
                    f"the sandbox reported a call to tools.{call.name}, which does not exist",
                )
        count = len(calls) + len(step.calls)
        if count > limits.calls:
            return _limit_step(
                "calls",
                f"the script made {count:,} calls, the most one script may make is "
                f"{limits.calls:,}",
            )
        sizes = [len(orjson.dumps(c.arguments)) for c in step.calls]
        biggest = max(sizes, default=0)
        if biggest > limits.call_arguments:
            return _limit_step(
                "call_arguments",
                f"a call's arguments are {size_text(biggest)}, over the "
                f"{size_text(limits.call_arguments)} one call may take",
            )
        if sum(sizes) > limits.step_arguments:
            return _limit_step(
                "step_arguments",
                f"the calls of one step pass {size_text(sum(sizes))} of arguments together, "
                f"over the {size_text(limits.step_arguments)} one step may pass",
            )
        total = sum(sizes) + sum(_argument_bytes(c) for c in calls)
        if total > limits.arguments:
            return _limit_step(
                "arguments",
                f"the script's calls pass {size_text(total)} of arguments in all, over the "
                f"{size_text(limits.arguments)} one script may pass",
            )
        return None

    def _record_calls(
        self, record: log.ScriptRecord, calls: list[log.CallEntry], step: Step
    ) -> None:
        start = len(calls)
        self.store.add_calls(
            [
                log.CallEntry(
                    script_id=record.id,
                    index=start + i,
                    call_id=f"call_{record.id[:8]}_{start + i + 1}",
                    name=call.name,
                    arguments=call.arguments,
                    extra={"argument_bytes": len(orjson.dumps(call.arguments))},
                )
                for i, call in enumerate(step.calls)
            ]
        )

    def _results_over(self, calls: list[log.CallEntry], limits: Limits) -> Step | None:
        total = sum(_result_bytes(c) for c in calls if c.state == log.DONE)
        if total <= limits.results:
            return None
        return _limit_step(
            "results",
            f"the script's calls returned {size_text(total)} of results, over the "
            f"{size_text(limits.results)} one script may read",
        )

    # ---- settling calls: the worker, approvals, the client, and running them ----

    async def _settle_calls(
        self, record: log.ScriptRecord, limits: Limits, calls: list[log.CallEntry]
    ) -> None:
        for entry in calls:
            if entry.state == log.RUNNING:
                # The host stopped while this call ran: it may or may not have taken effect.
                # It is never run again; the script sees an error it can handle.
                self.store.update_call(
                    record.id,
                    entry.index,
                    state=log.FAILED,
                    error=f"tools.{entry.name} was interrupted: the host stopped while it ran, "
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
            self.store.update_call(record.id, entry.index, state=log.FAILED, error=decision.message)
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
        tool = self._by_name.get(entry.name)
        timeout = None if tool is not None and tool.timeout is not None else self.call_timeout
        try:
            async with asyncio.timeout(timeout):
                result = await self._invoke(record, entry)
        except TimeoutError:
            message = f"tools.{entry.name} timed out after {timeout:g} s"
            self.store.update_call(record.id, entry.index, state=log.FAILED, error=message)
            return
        except ToolCallError as e:
            self.store.update_call(record.id, entry.index, state=log.FAILED, error=e.message)
            return
        except Exception as e:  # a bug in the engine or a tool must not lose the script
            logger.exception(
                "tool call failed unexpectedly script=%s call=%s", record.id, entry.call_id
            )
            message = f"tools.{entry.name} failed: {type(e).__name__}: {e}"
            self.store.update_call(record.id, entry.index, state=log.FAILED, error=message)
            return
        size = len(orjson.dumps(result))
        extra = {**entry.extra, "result_bytes": size}
        if size > self.limits_for(record.tenant).results:
            # Over the budget on its own: keep its size, not its bytes; the script ends on
            # the results limit before its next run.
            result = None
        self.store.update_call(record.id, entry.index, state=log.DONE, result=result, extra=extra)

    async def _invoke(self, record: log.ScriptRecord, entry: log.CallEntry) -> Any:
        if entry.name == "tool_search":
            query = entry.arguments.get("query")
            if not isinstance(query, str):
                raise ToolCallError('tools.tool_search takes { query: "words or tool names" }')
            limit = entry.arguments.get("limit", 8)
            if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 50:
                raise ToolCallError("tools.tool_search: limit must be a whole number, 1 to 50")
            try:
                return self._index.search(query, limit=limit)
            except ValueError as e:
                raise ToolCallError(str(e)) from e
        if entry.name == "skill":
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
        return await tool.invoke(entry.arguments, ctx)

    # ---- endings ----

    def _paused(
        self, record: log.ScriptRecord, unsettled: Sequence[log.CallEntry], *, held: bool = False
    ) -> RunResult:
        reasons = {log.AWAITING_APPROVAL: "approval", log.AWAITING_CLIENT: "client"}
        waiting = [
            {
                "call_id": c.call_id,
                "name": c.name,
                "arguments": c.arguments,
                "reason": reasons.get(c.state, "turn"),
            }
            for c in unsettled
        ]
        if held:
            text = "Script paused.\n  held: the script is interrupted until it is released."
        else:
            text = render.render_paused(waiting)
        self.store.update_script(record.id, status=log.PAUSED)
        return RunResult(record.id, "paused", text, waiting=waiting, steps=record.steps)

    def _end(self, record: log.ScriptRecord, step: Step) -> RunResult:
        if step.outcome == "finished":
            shown_text, shown, media = self._shown(record, step)
            result = RunResult(
                record.id,
                "finished",
                render.render_finished(step) + shown_text,
                value=step.value if step.value_text is None else step.value_text,
                returned=step.returned,
                steps=record.steps,
                shown=shown,
                media=media,
            )
            status = log.FINISHED
        else:
            error = step.error.model_dump() if step.error else None
            result = RunResult(
                record.id,
                "failed",
                render.render_failed(step),
                error=error,
                limit=step.limit.name if step.limit else None,
                steps=record.steps,
            )
            status = log.SCRIPT_FAILED
        self.store.update_script(record.id, status=status, outcome=result.to_dict())
        return result

    def _shown(
        self, record: log.ScriptRecord, step: Step
    ) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
        """The files the script showed, checked again against the limits, read from blobs."""
        limits = self.limits_for(record.tenant)
        by_id = {f["id"]: f for f in record.files}
        ids = [i for i in dict.fromkeys(step.shown) if i in by_id][: limits.shown_files]
        return render.render_shown(
            [by_id[i] for i in ids],
            lambda f: self.blobs.read(f["blob"], 0, f["size"]),
            text_budget=limits.shown,
            media_budget=limits.shown_media,
        )

    def _new_id(self) -> str:
        return uuid.uuid4().hex

    async def aclose(self) -> None:
        await self.runner.aclose()
        self.store.close()


def _type_checker(setting: Literal["on", "off"] | TypeChecker) -> TypeChecker | None:
    if isinstance(setting, TypeChecker):
        return setting
    if setting == "off":
        return None
    if setting != "on":
        raise CodeModeError(f'type_check = {setting!r}; use "on", "off" or a TypeChecker')
    try:
        return TypeChecker()
    except CompilerMissing as e:
        reason = str(e)
        if reason not in _CHECK_OFF_SAID:
            _CHECK_OFF_SAID.add(reason)
            logger.warning("type check off: scripts run without it: %s", reason)
        return None


def _limit_step(name: str, detail: str) -> Step:
    return Step.failure("LimitError", limit_message(name, detail), limit=name)


# Sizes kept with each call when it is recorded, so a step does not re-serialize the log.
def _argument_bytes(entry: log.CallEntry) -> int:
    size = entry.extra.get("argument_bytes")
    return size if isinstance(size, int) else len(orjson.dumps(entry.arguments))


def _result_bytes(entry: log.CallEntry) -> int:
    size = entry.extra.get("result_bytes")
    return size if isinstance(size, int) else len(orjson.dumps(entry.result))


__all__ = ["CodeMode", "CodeModeError", "RunResult"]
