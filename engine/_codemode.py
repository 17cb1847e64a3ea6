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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from engine import _log as log
from engine._calls import LONE_SURROGATE, error_text
from engine._config import RunnerConfig, build_runner, check_engine_options, data_directory
from engine._declarations import run_code_tool
from engine._ending import Ending
from engine._errors import CallNotWaiting, CodeModeError
from engine._files import Attachment, BlobStore, record_files
from engine._functions import as_tools
from engine._limits import Limits, limits_for, limits_option
from engine._naming import BUILTIN_TOOLS
from engine._result import RunResult
from engine._search import ToolIndex
from engine._skills import Skill, check_skills, skills_listing
from engine._source import ScriptTooLarge, normalize
from engine._steps import StepLoop
from engine._tool_threads import TOOL_THREADS, ToolThreads
from engine._tools import Tool, ToolCallError, unique_tools
from engine._worker import Worker, proposed_worker
from engine.languages.javascript import (
    SHOWN_PROBLEMS,
    Checked,
    CompilerMissing,
    TypeChecker,
    check_declarations,
)
from runner import ScriptRunner, Step
from sandbox import protocol
from sandbox.names import closest_names

logger = logging.getLogger("codemode")

CHECK_NOTE = (
    "Before a script runs, its calls are type-checked against the declarations below: a call "
    "to a tool that does not exist, or with a missing or wrong argument, fails the script "
    "before any call is made, with the line to fix."
)

# Reasons the type check is off that were logged already: each is said once per process.
_CHECK_OFF_SAID: set[str] = set()


FILES_NOTE = (
    "The conversation's files are in `files`: `files.list()` and `files.stat(id)` give "
    "`{ id, mime, size }`; `await files.text(id)` reads a whole file; `files.show(id)` puts a "
    "file in front of you when the script ends (at most 4). Stream big files with "
    "`for await (const row of files.csv(id, { header, delimiter }))`, `files.lines(id)`, "
    "`files.jsonl(id)`, `files.chunks(id, { size, offset })` and `files.xlsx(id, { sheet })` "
    "(`await files.sheets(id)` names the sheets); each takes `{ limit, offset }`. Read files "
    "before calling tools: each run of the script reads them again."
)


class CodeMode(StepLoop):
    """Code mode for one agent: its tools, its runner, its session log and its limits.

    ``limits`` is a :class:`Limits` or a function from tenant to limits (asked at each
    step). ``worker`` answers the calls a script stops on (default: run them as proposed).
    ``context`` is handed to tool handlers as ``ToolContext.host``. ``call_timeout`` bounds a
    call whose tool sets no ``timeout`` of its own (a call past it fails, catchably).
    ``store`` defaults to a SQLite log under ``data_dir`` (or in memory when neither is
    given); file attachments are kept as blobs in ``blobs`` (default: under ``data_dir``, or
    in memory). Sync tool handlers run in ``tool_threads`` threads of the engine's own, shared
    fairly between tenants and scripts (see ``engine._tool_threads``). ``type_check``
    (``"on"``, ``"off"`` or a :class:`TypeChecker`) checks each new script against the
    tools' declarations before its first call; ``"on"`` finds TypeScript 7's compiler, and
    says once in the log that the check is off when it is missing.
    """

    def __init__(
        self,
        tools: Iterable[Tool | Callable[..., Any]] = (),
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
        tool_threads: int = TOOL_THREADS,
        type_check: Literal["on", "off"] | TypeChecker = "on",
    ) -> None:
        self.tools = unique_tools(as_tools(tools))
        self._by_name = {t.name: t for t in self.tools}
        self.skills: list[Skill] = check_skills(skills, self.tools)
        self._declares_skills = bool(self.skills)
        self._index = ToolIndex(self.tools, [s.info() for s in self.skills])
        check_engine_options(
            worker=worker,
            queue_timeout=queue_timeout,
            retry_delay=retry_delay,
            call_timeout=call_timeout,
        )
        self._limits = limits_option(limits)
        directory = data_directory(data_dir) if data_dir is not None else None
        if store is None:
            store = (
                log.SqliteStore(directory / log.SqliteStore.FILE_NAME)
                if directory is not None
                else log.MemoryStore()
            )
        self.store = store
        if blobs is None:
            blobs = BlobStore(directory / "blobs" if directory is not None else None)
        self.blobs = blobs
        self.runner = runner if runner is not None else build_runner(RunnerConfig())
        self.worker: Worker = worker or proposed_worker
        self.context = context
        self.queue_timeout = queue_timeout
        self.call_timeout = call_timeout
        self.retry_delay = retry_delay
        self.clock = clock
        self._tool_threads = ToolThreads(tool_threads)
        self.type_checker = _type_checker(type_check)
        self._check_declarations: str | None = None
        self._check_ms: dict[str, float] = {}  # what each new script's check cost, until logged
        # One lock per script that is being driven or waited on; dropped when nobody
        # holds or waits on it, so the map does not grow with every script ever run.
        self._script_locks: dict[str, _ScriptLock] = {}
        self._tool_names = sorted({*self._by_name, *BUILTIN_TOOLS})

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
        self.skills.extend(check_skills([skill], self.tools))
        self._index = ToolIndex(self.tools, [s.info() for s in self.skills])
        return skills_listing([skill])

    def search(self, query: str, limit: int = 8) -> str:
        """What ``tools.tool_search({ query })`` answers inside a script."""
        return self._index.search(query, limit=limit)

    def limits_for(self, tenant: str) -> Limits:
        return limits_for(self._limits, tenant)

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
            _check_text(body)
        except (ScriptTooLarge, TypeError, NotText) as e:
            script_id = self._new_id()
            text = f"Script failed.\nScriptError: {e}"
            return RunResult(script_id, "failed", text, error={"name": "ScriptError"})
        # The host's limits are checked before the script is recorded, so a bad limits
        # function leaves no script behind that could never run.
        self.limits_for(tenant)
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
        error = protocol.ScriptError(
            name="TypeCheckError",
            message=checked.message(),
            lines=[
                protocol.ErrorLine(line=n, text=lines[n - 1][:300])
                for n in dict.fromkeys(p.line for p in checked.problems[:SHOWN_PROBLEMS])
                if n <= len(lines)
            ],
        )
        limits = self.limits_for(record.tenant)
        self._log_step(record, Step.failure(error.name, error.message), limits, 0.0, 0.0, 0.0)
        return self._end(record, Ending("failed", error=error))

    async def resume(self, script_id: str) -> RunResult:
        """Continue a script from its log: after a pause, a restart, or on another host."""
        lock = self._script_locks.setdefault(script_id, _ScriptLock())
        lock.users += 1
        try:
            async with lock.lock:
                return await self._drive(script_id)
        finally:
            lock.users -= 1
            if lock.users == 0:
                del self._script_locks[script_id]

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
        self.store.update_call(script_id, entry.index, state=log.FAILED, error=error_text(error))

    def client_result(
        self, script_id: str, call_id: str, result: Any = None, *, error: str | None = None
    ) -> None:
        """The client ran a client tool: its result, or the error it failed with."""
        entry = self._waiting(script_id, call_id, log.AWAITING_CLIENT)
        if error is not None:
            self.store.update_call(
                script_id, entry.index, state=log.FAILED, error=error_text(str(error))
            )
            return
        tool = self._by_name.get(entry.name)
        try:
            data = tool._check_result(result) if tool is not None else result
            size = len(orjson.dumps(data))
        except (ToolCallError, TypeError) as e:
            message = e.message if isinstance(e, ToolCallError) else str(e)
            self.store.update_call(
                script_id, entry.index, state=log.FAILED, error=error_text(message)
            )
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

    def _new_id(self) -> str:
        return uuid.uuid4().hex

    async def aclose(self) -> None:
        await self.runner.aclose()
        self.store.close()
        self._tool_threads.close()


@dataclass
class _ScriptLock:
    """The lock that lets one ``resume`` drive a script at a time, and how many hold or
    wait on it."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class NotText(ValueError):
    """A script that is not Unicode text: no log could keep it."""


def _check_text(code: str) -> None:
    """Raise :class:`NotText` naming where ``code`` has a lone surrogate."""
    for number, line in enumerate(code.split("\n"), 1):
        found = LONE_SURROGATE.search(line)
        if found:
            char = ord(found.group())
            raise NotText(
                f"line {number} has a lone surrogate (U+{char:04X}), which is not Unicode "
                f'text; write it as an escape in a string ("\\u{char:04x}")'
            )


__all__ = ["CodeMode", "CodeModeError", "RunResult"]


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
