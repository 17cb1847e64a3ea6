"""CodeMode: the `run_code` tool a host gives its model, and the replay loop behind it.

One script runs as a series of steps. Each step re-runs the script from the start in a
runner, answering every call already in the session log; when it stops on new calls, the
engine checks them, asks the host's worker, runs them (or waits for a person or the client),
writes each result to the log, and steps again. The log is the whole state, so a script
resumes after a restart, in another process, without running a recorded call again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import math
import os
import secrets
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import orjson

from engine import log
from engine._calls import LONE_SURROGATE, error_text
from engine._config import (
    RunnerConfig,
    build_runner,
    check_engine_options,
    check_live_options,
    check_parts,
    data_directory,
)
from engine._drive import (
    LOST_TAKE,
    Drive,
    acquire_or_keep,
    dead_local_owner,
    lease_clock,
    new_owner,
    release_or_keep,
    taken_or_kept,
)
from engine._ending import Ending
from engine._errors import (
    CallAbandoned,
    CallNotWaiting,
    CodeModeError,
    ConfigError,
    FilesMissing,
    ScriptNotFound,
    StoreUnavailable,
    ToolDefinitionError,
)
from engine._events import EventKind, Listener, listeners_option
from engine._files import (
    Attachment,
    BlobStore,
    StoredSkillFiles,
    attachments_of,
    record_files,
)
from engine._functions import as_tools
from engine._limits import Limits, limits_for, limits_option
from engine._live import (
    DEFAULT_LIVE_WAIT,
    LiveRuns,
    default_live_count,
    default_live_memory,
    keeps_live,
    live_key,
    takes_live,
)
from engine._naming import BUILTIN_NAMES, BUILTIN_TOOLS, MAX_KEY
from engine._result import RunResult
from engine._schema import NotJSONData, script_argument, to_json_data
from engine._search import ToolIndex
from engine._skills import Skill, check_skills, named_as, skills_listing
from engine._source import OtherLanguage, ScriptTooLarge, normalize
from engine._steps import StepLoop, discard_early
from engine._tool_threads import TOOL_THREADS, ToolThreads
from engine._tools import (
    Tool,
    ToolCallError,
    described,
    tool_fingerprint,
    unique_tools,
    unsendable,
)
from engine._worker import Worker, proposed_worker
from engine.adapters import Format, tool_definition
from engine.languages import Language, check_language, dialect
from engine.languages.javascript import (
    SHOWN_PROBLEMS,
    Checked,
    CompilerMissing,
    TypeChecker,
    check_declarations,
)
from engine.languages.python import PythonTypeChecker, check_stubs
from engine.log._rules import not_waiting
from runner import MAX_TENANT, ScriptRunner, Step, cancel_and_wait
from sandbox import protocol
from sandbox.names import closest_names
from sandbox.replay import source_lines

if TYPE_CHECKING:
    from engine.mcp import McpServers

logger = logging.getLogger("codemode")

CHECK_NOTE = (
    "Before a script runs, its calls are type-checked against the declarations below: a call "
    "to a tool that does not exist, or with a missing or wrong argument, fails the script "
    "before any call is made, with the line to fix."
)

# A worker that could not drive a script (it lacks a tool the script called) passes it over
# for this many seconds, and over at most this many scripts at once.
WORKER_LEFT_FOR = 60.0
WORKER_LEFT_MAX = 500

# Reasons the type check is off that were logged already: each is said once per process.
_CHECK_OFF_SAID: set[str] = set()


class _Flight:
    """A start or resume this host runs now (see ``CodeMode._once``): its task, how many
    other deliveries of it wait for its result, whether the caller that runs it left
    (``orphaned``: it goes on for those that wait), and a keyed start's language and code
    (``source``; None for a resume)."""

    __slots__ = ("orphaned", "source", "task", "waiting")

    def __init__(self, task: asyncio.Task[RunResult], source: tuple[str, str] | None) -> None:
        self.task = task
        self.waiting = 0
        self.orphaned = False
        self.source = source


# While the session log cannot be reached, a worker says so again this often (seconds).
UNREACHABLE_EVERY = 60.0

# A lease kept while the log did not answer is given up once it does (CodeMode._keep): tried
# after this pause, which doubles after each try up to the most (or a quarter of the lease).
KEPT_RETRY_FIRST_S = 0.5
KEPT_RETRY_MOST_S = 5.0

# How long a host that answers a model (pydantic-ai's toolset, `codemode mcp serve`) waits, by
# default, for the outcome of a script another host drives (a worker that took it after an
# approval), as the README's chat loops do: seconds.
ELSEWHERE_WAIT = 300.0


class _Outage:
    """What :meth:`CodeMode.work` says while it cannot reach the session log: a warning when
    that begins, another each :data:`UNREACHABLE_EVERY` seconds it lasts (it looks again at
    each ``poll_interval``: a line a second), and a line when the log answers again."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.said_at = 0.0

    def failed(self, e: StoreUnavailable) -> None:
        now = time.monotonic()
        if self.since is None:
            self.since = self.said_at = now
            logger.warning("worker could not reach the session log, trying again: %s", e)
        elif now - self.said_at >= UNREACHABLE_EVERY:
            self.said_at = now
            logger.warning(
                "worker still cannot reach the session log after %.0f s, trying again: %s",
                now - self.since,
                e,
            )

    def answered(self) -> None:
        if self.since is not None:
            logger.warning(
                "worker reached the session log again after %.0f s",
                time.monotonic() - self.since,
            )
            self.since = None


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
    (``"on"``, ``"off"``, a :class:`TypeChecker` or a :class:`PythonTypeChecker`) checks
    each new script against the tools' declarations before its first call; ``"on"`` finds
    TypeScript 7's compiler (for JavaScript) or ``ty`` (for Python), and says once in the
    log, when a script first runs without it, that the check is off because the checker is
    missing. A checker given applies to its language; the other language's is found as with
    ``"on"``.

    ``language`` (``"javascript"`` or ``"python"``) is the language the model is told to
    write scripts in (``run_code(language=...)`` may start one in the other); a script
    keeps its language in the log, so it resumes in it whatever the engine's default.

    Many hosts may share one store; one of them drives a script at a time, under a lease of
    ``lease_ms`` that it renews while it drives (a host that dies lets it lapse, and another
    takes the script over). ``poll_interval`` (seconds) paces :meth:`work` and
    ``resume(wait=...)``. ``on_event`` is told what each script does as it runs (see
    ``engine._events``: started, steps, calls, pauses, endings).

    ``live`` (default on) keeps a script's confined process alive while its calls run, when
    the runner can (see ``engine._live``): the results go to the log first, then to the
    waiting process, which goes on where it stopped instead of re-running the script. A
    process waits at most ``live_wait`` seconds; at most ``live_max`` of them wait at once,
    holding at most ``live_memory`` (bytes or a word such as ``"2gb"``; defaults sized for the
    machine); past those, and
    whenever a live process is gone, the next step replays from the log. ``live=False``
    replays every step.

    ``mcp`` (an :class:`engine.mcp.McpServers`) adds the tools of live MCP servers and keeps
    them current as the servers change them; the engine closes it when it closes.
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
        type_check: Literal["on", "off"] | TypeChecker | PythonTypeChecker = "on",
        language: Language = "javascript",
        lease_ms: int = log.DEFAULT_LEASE_MS,
        poll_interval: float = 1.0,
        on_event: Listener | Sequence[Listener] | None = None,
        live: bool = True,
        live_wait: float = DEFAULT_LIVE_WAIT,
        live_max: int | None = None,
        live_memory: int | str | None = None,
        mcp: McpServers | None = None,
    ) -> None:
        check_parts(
            tools=tools,
            skills=skills,
            runner=runner,
            store=store,
            blobs=blobs,
            clock=clock,
            tool_threads=tool_threads,
            mcp=mcp,
        )
        self._own_tools = as_tools(tools)
        for own in self._own_tools:
            if own.source is None and own.original_name in BUILTIN_NAMES:
                # Renamed with a hash (as a clash is), the host's tool went unseen under
                # another name, and a script calling the name reached the engine's own.
                raise ToolDefinitionError(
                    f"a tool is named {own.original_name!r}, the name of the engine's own tool "
                    "(run_code runs scripts, tool_search searches the tools, skill loads a "
                    "skill); give yours another name"
                )
        self._definition: tuple[list[Any], dict[str, Any]] | None = None
        # The tools' fingerprint (a digest of each input schema), made once per tool set: a
        # host with a hundred tools spent about 0.3 ms of each run_code hashing them.
        self._fingerprint: tuple[list[Tool], dict[str, str]] | None = None
        self._mcp = mcp
        self.tools = unique_tools([*self._own_tools, *(mcp.tools if mcp is not None else [])])
        self._by_name = {t.name: t for t in self.tools}
        self.skills: list[Skill] = check_skills(skills, self.tools)
        self._declares_skills = bool(self.skills)
        self._index = ToolIndex(self.tools, [s.info() for s in self.skills])
        if mcp is not None:
            mcp.subscribe(self._mcp_tools_changed)
        check_engine_options(
            worker=worker,
            queue_timeout=queue_timeout,
            retry_delay=retry_delay,
            call_timeout=call_timeout,
            lease_ms=lease_ms,
            poll_interval=poll_interval,
        )
        live_bytes = check_live_options(
            live=live, live_wait=live_wait, live_max=live_max, live_memory=live_memory
        )
        self._limits = limits_option(limits)
        directory = data_directory(data_dir) if data_dir is not None else None
        if store is None:
            store = log.SqliteStore(directory) if directory is not None else log.MemoryStore()
        self.store = store
        if blobs is None and isinstance(store, log.PostgresStore):
            blobs = store.blob_store()  # shared by every host of the log, as the log is
        if blobs is None and directory is None and isinstance(store, log.SqliteStore):
            # Beside the log (where data_dir=<its directory> keeps them): in memory, a paused
            # script's files would be gone after a restart its log outlives.
            blobs = store.blob_store()
        if blobs is None:
            blobs = BlobStore(directory / "blobs" if directory is not None else None)
        self.blobs = blobs
        self._skill_files = StoredSkillFiles()  # of self.blobs: see record_files
        self.runner = runner if runner is not None else build_runner(RunnerConfig())
        self.worker: Worker = worker or proposed_worker
        self.context = context
        self.queue_timeout = queue_timeout
        self.call_timeout = call_timeout
        self.retry_delay = retry_delay
        self.clock = clock
        self._tool_threads = ToolThreads(tool_threads)
        self.language: Language = check_language(language)
        self._type_check_setting = _type_check_option(type_check)
        self._checkers: dict[str, TypeChecker | PythonTypeChecker | None] = {}
        # Why the check of a language is off although it was asked for (its checker is
        # missing): said once, as a warning, when a script in it first runs unchecked.
        self._check_missing: dict[str, str] = {}
        self.type_checker = self._checker(self.language)
        self._check_declarations: dict[str, str] = {}
        self._check_ms: dict[str, float] = {}  # what each new script's check cost, until logged
        # The starts (by tenant and key) and resumes (by script id) this host runs now (see
        # _once).
        self._in_flight: dict[tuple[str, ...], _Flight] = {}
        self._driving: set[Drive] = set()  # the drives under way, whose leases aclose() gives up
        # Each script this host drives now, by id: done when that drive ends.
        self._drives_of: dict[str, asyncio.Future[None]] = {}
        # Drives cancelled while sync handlers ran, recording them once they end (_hear_out).
        self._hearing: set[asyncio.Task[None]] = set()
        # The leases of drives that ended as the log stopped answering, and of takes whose
        # answer was lost, by script and owner (one drive's kept lease and a later take's
        # lost one are both kept): kept then (a release would wait the log's timeout again
        # for nothing), given up once it answers (_give_back_kept), not left to run out while
        # a resume calls this host elsewhere. Each with the time (monotonic) by which it
        # surely ran out, and for a keyed start's lost take the tenant and key it was
        # looked up by (the key may name a script begun before, not the one it made).
        self._kept: dict[tuple[str, str], tuple[log.Lease, float, tuple[str, str] | None]] = {}
        self._giving_back: asyncio.Task[None] | None = None  # _give_back_kept
        # Wakes _give_back_kept to try at once; made with each such task, on its loop (one
        # made here would be bound to the first loop, and asyncio.run per request is fine).
        self._log_answered = asyncio.Event()
        self._closed = False  # aclose() began
        self._pid = os.getpid()  # the process it was made in (see _check_open)
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop it serves (_check_loop)
        self._loop_lock = threading.Lock()
        self.lease_ms = lease_ms
        self.poll_interval = poll_interval
        self._tool_names = sorted({*self._by_name, *BUILTIN_TOOLS})
        self._listeners = listeners_option(on_event)
        memory = live_bytes if live_bytes is not None else default_live_memory()
        count = live_max if live_max is not None else default_live_count(memory)
        self._live = LiveRuns(wait=live_wait, max_count=count, max_memory=memory)
        # A budget that keeps none asks for replay steps (a live one would be ended at once).
        self.live = live and takes_live(self.runner) and keeps_live(count, memory)

    def add_listener(self, on_event: Listener) -> None:
        """Also tell ``on_event`` what each script does, as ``on_event=`` does."""
        self._listeners = (*self._listeners, *listeners_option(on_event))

    def _mcp_tools_changed(self, mcp_tools: list[Tool]) -> None:
        """An MCP server changed its tools: the engine's tools are the host's and these."""
        self.tools = unique_tools([*self._own_tools, *mcp_tools], before=self.tools)
        self._by_name = {t.name: t for t in self.tools}
        self._index = ToolIndex(self.tools, [s.info() for s in self.skills], before=self._index)
        self._tool_names = sorted({*self._by_name, *BUILTIN_TOOLS})
        self._check_declarations = {}

    # ---- what the model sees ----

    def definition(self, format: Format = "anthropic") -> dict[str, Any]:
        """The `run_code` tool in ``format``'s shape: ``"anthropic"`` (``name``,
        ``description``, ``input_schema``), ``"openai_chat"``, ``"openai_responses"`` or
        ``"mcp"`` (see ``engine.adapters``).

        The same bytes for the same tools, so a cached prompt prefix holds.
        """
        # Kept while the declared tools stay the same: a tool an MCP server adds mid-session
        # is deferred (found with tool_search), and the prompt's cached prefix holds. All a
        # declaration is made of is compared: a tool whose result alone changed is declared
        # again (and an MCP client told).
        declared = [
            (
                t.name,
                t.description,
                orjson.dumps(t.input_schema, option=orjson.OPT_SORT_KEYS),
                orjson.dumps(t.output_schema, option=orjson.OPT_SORT_KEYS),
            )
            for t in self.tools
            if not t.deferred
        ]
        if self._definition is None or self._definition[0] != declared:
            speech = dialect(self.language)
            notes = [_files_note(speech.files_note, self._limits)]
            if self.type_checker is not None:
                notes.append(CHECK_NOTE)
            tool = speech.run_code_tool(self.tools, skills=self._declares_skills, notes=notes)
            self._definition = (declared, tool)
        return tool_definition(self._definition[1], format)

    def direct_call_error(self, name: str, served: tuple[str, ...] = ("run_code",)) -> str:
        """The error for a model that called a tool directly: code mode is all or nothing,
        so every tool but ``run_code`` (and the others of ``served``, the tools the host
        offers the model) is reached from a script."""
        name = str(name)  # what a provider's call named (None raised AttributeError)
        if name in self._by_name or name in BUILTIN_TOOLS:
            call = f"{name}(...)" if self.language == "python" else f"{name}({{ ... }})"
            return (
                f"{name} is not called directly: call it from run_code, in a script such as "
                f"`return await tools.{call}`"
            )
        near = closest_names(name, self._tool_names)
        # Tools a script reaches, written so: the model must not take them for the host's.
        shown = ", ".join(f"tools.{n}" for n in near)
        hint = f" (the closest are {shown}, which a script calls)" if near else ""
        offered = (
            f"the only tool is {served[0]}"
            if len(served) == 1
            else f"the tools are {', '.join(served[:-1])} and {served[-1]}"
        )
        # The model's text: a name of 10,000 characters was said back whole.
        return (
            f"there is no tool {name!r:.80}{hint}; {offered}, and scripts reach the others as "
            "tools.<name>"
        )

    def skills_prompt(self) -> str:
        """The system-prompt text listing each skill with the tools it names."""
        return skills_listing(self.skills, self.language)

    def add_skill(self, skill: Skill) -> str:
        """Add a skill while the session runs; returns the text that lists it for the model
        (tell it after what it has read, so the cached prefix holds)."""
        if named_as(skill.name, [s.name for s in self.skills]) is not None:
            raise CodeModeError(f"a skill called {skill.name!r} is already loaded")
        self.skills.extend(check_skills([skill], self.tools))
        self._index = ToolIndex(self.tools, [s.info() for s in self.skills], before=self._index)
        return skills_listing([skill], self.language)

    def search(self, query: str, limit: int = 8, *, language: Language | None = None) -> str:
        """What ``tools.tool_search({ query })`` answers inside a script in ``language``
        (default: the engine's)."""
        language = self.language if language is None else check_language(language)
        return self._index.search(query, limit=limit, language=language)

    def limits_for(self, tenant: str) -> Limits:
        return limits_for(self._limits, tenant)

    # ---- running ----

    async def run_code(
        self,
        code: str,
        *,
        tenant: str = "default",
        files: Sequence[Attachment] = (),
        key: str | None = None,
        on_start: Callable[[str], None] | None = None,
        language: Language | None = None,
        wait: float = 0.0,
    ) -> RunResult:
        """Start a script and drive it until it finishes, fails or pauses.

        ``language`` is the script's (default: the engine's ``language``).
        ``files`` are the attachments the script may read (``files.list()`` shows them);
        their bytes are recorded with the script, so every run reads the same bytes. ``key``
        makes the start idempotent: give the model's tool-use id, and a host that replays the
        same ``run_code`` call (after a restart, say) continues that script instead of
        starting another. A key names a script within its ``tenant``: another tenant's start
        with the same key starts a script of its own, and never sees this one. A start with
        the tenant and key of a start this host is still running waits for it and returns
        its result (``on_start`` is told its id then). A key that names a script of other
        code, or one in another language, begun or being started, raises ``ConfigError``:
        that is no replay of the call, but one key given to two. Otherwise
        ``on_start`` is told the script's id once its start is in the log, before any of its
        calls runs. When the key names a script another host drives now (a worker that took
        it after an approval), the result has status ``elsewhere`` at once, or, with ``wait``
        (seconds), once that host lets it go, as :meth:`resume`'s.
        """
        self._check_open()
        _check_wait(wait)
        language = self.language if language is None else check_language(language)
        try:
            body = normalize(code, language)
            _check_text(body)
        except (ScriptTooLarge, OtherLanguage, TypeError, NotText) as e:
            script_id = self._new_id()
            text = f"Script failed.\nScriptError: {e}"
            return RunResult(script_id, "failed", text, error={"name": "ScriptError"})
        # Checked before anything is recorded: a log keeps neither a tenant that is no name
        # nor text with a lone surrogate (the store's own error said neither).
        _check_name(
            "tenant", tenant, MAX_TENANT, "the name of the user or organization it runs for"
        )
        if key is not None:
            _check_name("key", key, MAX_KEY, "the model's tool-use id")
        # The host's limits are checked before the script is recorded, so a bad limits
        # function leaves no script behind that could never run.
        self.limits_for(tenant)
        if on_start is not None and (
            not callable(on_start) or inspect.iscoroutinefunction(on_start)
        ):
            # Found once the start was written, it failed the run_code with the script in
            # the log (an async one was dropped, never awaited).
            raise ConfigError(
                f"on_start is {on_start!r:.80}; give a plain function of the script's id"
            )
        if key is None:
            return await self._start(body, language, tenant, files, None, on_start)
        result, joined = await self._once(
            ("key", tenant, key),
            lambda: self._start(body, language, tenant, files, key, on_start, wait),
            final=False,
            source=(language, body),
        )
        if on_start is not None and joined:
            on_start(result.script_id)
        return result

    async def call_tool(self, name: str, arguments: Any, **options: Any) -> RunResult:
        """Answer the model's call of a tool as its turn gave it: the tool's ``name``, and
        ``arguments`` as data (Anthropic's ``input``) or as JSON text (OpenAI's
        ``arguments``). A call of ``run_code`` with its one argument is
        ``run_code(code, **options)`` (``key``, ``wait``, ``tenant``, ...); any other call (a
        tool called directly, no ``code``, an argument run_code does not take, text that is
        no JSON or gives ``code`` twice) starts no script and has a ``failed`` result whose
        text tells the model what to send instead."""
        self._check_open()
        try:
            if name != protocol.RUN_CODE:
                raise CodeModeError(self.direct_call_error(name))
            code = script_argument(arguments)
        except CodeModeError as e:
            # The model's mistake, for the model to mend: the host's loop answers it as any
            # result (a KeyError or JSONDecodeError of the loop ended the conversation).
            said = str(e)
            return RunResult(
                self._new_id(), "failed", said, error={"name": "CodeModeError", "message": said}
            )
        return await self.run_code(code, **options)

    async def _start(
        self,
        body: str,
        language: Language,
        tenant: str,
        files: Sequence[Attachment],
        key: str | None,
        on_start: Callable[[str], None] | None,
        wait: float = 0.0,
    ) -> RunResult:
        attachments = [a for s in self.skills for a in s.attachments()] + attachments_of(files)
        record = log.ScriptRecord(
            id=self._new_id(),
            code=body,
            language=language,
            tenant=tenant,
            now_ms=int(self.clock() * 1000),
            # 63 bits, what a signed 64-bit column holds: Math.random, crypto.randomUUID and
            # uuid.uuid4 follow the seed, and among 32-bit seeds two of some 77,000 scripts
            # shared one at even odds, and with it every "random" id they made.
            seed=secrets.randbits(log.SEED_BITS),
            created_ms=int(time.time() * 1000),
            key=key,
            # Off the event loop: the blobs may be files to write or a database to reach.
            # (Most scripts have none: then no thread, whose hop costs a trivial run 5%.)
            files=await asyncio.to_thread(record_files, self.blobs, attachments, self._skill_files)
            if attachments
            else [],
            tools=self._tools_fingerprint(),
        )
        # Unchecked, the first step runs while the start is written. (A checked script never
        # runs before it passed: a refused one "did not run".) Checked, before the start is
        # written: a script in the log was checked, so a host that goes on with it after its
        # creator died mid-check never runs what the check would refuse. A key already in the
        # log names a script checked when it began (retries of one start come in bursts, from
        # a model or a queue: each would cost a compiler run).
        early: asyncio.Task[Any] | None = None
        checked: Checked | None = None
        if self._checker(language) is None:
            self._say_unchecked(language)
            early, script = self._begin_first_step(record)
        elif key is None or await self.store.script_by_key(tenant, key) is None:
            checked = await self._type_check(body, language)
        try:
            if early is not None:
                await asyncio.sleep(0)  # the step goes as far as its first wait, then the write
            owner = new_owner()
            taken_at = lease_clock()  # the lease's, if the start takes one
            starting = self.store.start(record, owner, self.lease_ms)
            # A keyed start is the one a caller retries (the model's call given again), and
            # would find held by the lease a cancelled start took; an unkeyed retry starts
            # another script, and a trivial run_code need not pay for the task.
            started = await (
                taken_or_kept(
                    starting,
                    lambda started: started.lease,
                    functools.partial(self._keep, by_key=(tenant, key)),
                    lost=(record.id, owner),
                )
                if key is not None
                else starting
            )
            if early is not None and (not started.created or started.lease is None):
                await discard_early(early)  # the key names a script begun before: it goes on
                early = None
            if not started.created and (
                started.record.code != record.code or started.record.language != language
            ):
                # Not the same run_code call given again: a host's key that names two calls
                # (a provider that numbers its tool-use ids per turn) would hand the model
                # the other script's answer.
                if started.lease is not None:
                    await release_or_keep(self.store, started.lease, self._keep)
                raise _key_of_another_call(
                    key, f"script {started.record.id}, started", started.record.language, language
                )
            if on_start is not None:
                try:
                    on_start(started.record.id)
                except BaseException:
                    # The host's own callback failed: the script waits in the log, free for
                    # a resume or the key's next start (not held for the lease's length).
                    if started.lease is not None:
                        await release_or_keep(self.store, started.lease, self._keep)
                    raise
            if started.created:
                self._emit("started", record.id, tenant=tenant)
            if started.lease is None:
                # Another host holds the script the key names. One of this machine that died
                # gives it up at once, as resume() takes it: a host restarted after a crash
                # that replays the model's call goes on with the script.
                await self._give_back(started.record.id, _key_of(started.record))
                taken = await Drive.take(
                    self.store, started.record.id, owner, self.lease_ms, kept=self._keep
                )
                if taken is None:
                    if wait > 0 or started.record.id in self._drives_of:  # or this host's
                        return await self._resume(started.record.id, wait)
                    return await self._elsewhere_or_ended(started.record.id)
                self._emit("resumed", taken.record.id, tenant=tenant, steps=taken.record.steps)
                return await self._drive_owned(taken)
            new = started.record if started.created else None
            drive = await Drive.resume(
                self.store, started.lease, self.lease_ms, new, kept=self._keep, taken_at=taken_at
            )
            if not started.created and started.record.status not in log.ENDED:
                # The key named a script already in the log: it goes on. (One that ended
                # only gives its outcome again, as resume() does: no events.) Told once its
                # drive is made, which reads the log: a read that failed or was cancelled
                # left listeners a script resumed and never left (a span open for good).
                self._emit("resumed", started.record.id, tenant=tenant, steps=started.record.steps)
            if started.created:
                if checked is None and early is None:
                    # The key's script was in the log when looked up, and is not now (a log
                    # that lost it): this one is new, and is checked as any new one is.
                    try:
                        checked = await self._type_check(body, language)
                    except BaseException:
                        await drive.close()
                        raise
                if checked is not None:
                    self._check_ms[record.id] = checked.ms
                    if not checked.ok:
                        try:
                            return await self._refused(drive, checked)
                        finally:
                            await drive.close()
                if early is not None:
                    drive.early, drive.script, early = early, script, None
            return await self._drive_owned(drive)
        finally:
            if early is not None:
                await discard_early(early)

    def _tools_fingerprint(self) -> dict[str, str]:
        """``tool_fingerprint(self.tools)``, made again only when the tools change (a Tool
        is not changed once made: its schemas are compiled into its checks)."""
        made = self._fingerprint
        if made is None or made[0] is not self.tools:
            made = self._fingerprint = (self.tools, tool_fingerprint(self.tools))
        return dict(made[1])

    async def _type_check(self, body: str, language: Language) -> Checked | None:
        checker = self._checker(language)
        if checker is None:
            return None
        declarations = self._check_declarations.get(language)
        if declarations is None:
            make = check_stubs if language == "python" else check_declarations
            declarations = self._check_declarations[language] = make(self.tools)
        checked = await checker.check(body, declarations)
        if checked.broken is not None:
            # The model is told only that the script is not at fault: the fix is the host's.
            logger.warning("type check: %s", checked.broken)
        return checked

    def _checker(self, language: Language) -> TypeChecker | PythonTypeChecker | None:
        """The type check of scripts in ``language`` (None when it is off), found once."""
        if language not in self._checkers:
            setting = self._type_check_setting
            if isinstance(setting, TypeChecker | PythonTypeChecker):
                setting = setting if setting.language == language else "on"
            checker = _type_checker(setting, language)
            if isinstance(checker, CompilerMissing):
                self._check_missing[language], checker = str(checker), None
            self._checkers[language] = checker
        return self._checkers[language]

    def _say_unchecked(self, language: Language) -> None:
        """Warn, once per process and reason, that a new script runs unchecked because the
        checker asked for is missing. Said when a script runs, so a host that only describes
        or searches its tools (``codemode describe``) is not told of a check it never needs."""
        reason = self._check_missing.get(language)
        if reason is not None and reason not in _CHECK_OFF_SAID:
            _CHECK_OFF_SAID.add(reason)
            logger.warning("type check off: %s scripts run without it: %s", language, reason)

    async def _refused(self, drive: Drive, checked: Checked) -> RunResult:
        """End a script the type check refused: it never ran, and no call was made."""
        record = drive.record
        lines = source_lines(record.code, record.language)
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
        return await self._end(drive, Ending("failed", error=error))

    async def resume(self, script_id: str, *, wait: float = 0.0) -> RunResult:
        """Continue a script from its log: after a pause, a restart, or on another host.

        One host drives a script at a time. If another host drives it now, the result has
        status ``elsewhere`` at once, or, with ``wait`` (seconds), once that host lets it go
        (the script's outcome if it ended; or this host drives it on).
        """
        self._check_open()
        check_ids(script_id)
        _check_wait(wait)
        result, _ = await self._once(
            ("script", script_id), lambda: self._resume(script_id, wait), final=True
        )
        return result

    async def _resume(self, script_id: str, wait: float) -> RunResult:
        deadline = time.monotonic() + wait
        while True:
            # This host drives the script already (a keyed start, a worker, a cancelled drive
            # recording a call its thread ran): the resume waits for that drive, as for a
            # resume of its own, instead of calling its own host "elsewhere".
            while (driving := self._drives_of.get(script_id)) is not None:
                await asyncio.shield(driving)
            record = await self.store.get_script(script_id)
            if record.status in log.ENDED and record.outcome is not None:
                return RunResult.from_dict(record.outcome)
            await self._give_back(script_id, _key_of(record))
            drive = await Drive.take(
                self.store, script_id, new_owner(), self.lease_ms, kept=self._keep
            )
            if drive is not None:
                self._emit("resumed", script_id, tenant=drive.record.tenant, steps=record.steps)
                return await self._drive_owned(drive)
            if time.monotonic() >= deadline:
                return await self._elsewhere_or_ended(script_id)
            await asyncio.sleep(min(self.poll_interval, max(0.0, deadline - time.monotonic())))

    async def _once(
        self,
        what: tuple[str, ...],
        run: Callable[[], Awaitable[RunResult]],
        *,
        final: bool,
        source: tuple[str, str] | None = None,
    ) -> tuple[RunResult, bool]:
        """``run()``, unless this host runs the same start (by tenant and key) or resume (by
        script) already: then wait for that one and take its result (with ``final``, only an
        outcome: a paused script may have been answered since, so it is resumed again, by
        one waiting caller after another).
        Returns the result and whether it was another's. A keyed start's ``source`` (its
        language and code) is the run's: a start of the same key with another raises
        ``ConfigError`` rather than wait for that run and take its result as its own.

        A start or an approval is often delivered again while its first delivery runs (a
        model's retry, a webhook's, a queue's); each would otherwise read and try to take
        the script, for "elsewhere". Under a burst, those duplicates crowded the store's
        connections out of the one that drives the script.
        """
        while (other := self._in_flight.get(what)) is not None:
            if other.source is not None and source is not None and other.source != source:
                # Not the same run_code call given again (see _start): waited for, its
                # result went to the model as this call's, another script's answer.
                raise _key_of_another_call(
                    what[-1], "a script this host is starting now", other.source[0], source[0]
                )
            other.waiting += 1
            try:
                result = await asyncio.shield(other.task)
            except asyncio.CancelledError:
                if not other.task.cancelled():
                    # This caller was cancelled. The last one waiting on a run whose own
                    # caller left takes it down with it, as that caller's cancel would have.
                    if other.orphaned and other.waiting == 1 and not other.task.done():
                        other.task.cancel()
                    raise
                continue  # that run was cancelled: this one runs (or waits for another)
            except Exception:
                continue  # that run failed: this one runs, and sees the failure if it recurs
            finally:
                other.waiting -= 1
            if not final or result.status in log.ENDED:
                return result, True
            # Paused: an answer may have landed since that run looked, so this caller runs
            # again, after any other that got in first (each waits for the one before).
        flight = _Flight(asyncio.ensure_future(run()), source)
        self._in_flight[what] = flight

        def landed(task: asyncio.Task[RunResult]) -> None:
            if self._in_flight.get(what) is flight:
                del self._in_flight[what]
            if not task.cancelled():
                task.exception()  # its callers see it; not "never retrieved"

        flight.task.add_done_callback(landed)
        try:
            return await asyncio.shield(flight.task), False
        except asyncio.CancelledError:
            if flight.task.done():
                raise
            if flight.waiting:
                # Another delivery of the same start or resume waits for this run (a retry
                # of a request whose client left): it goes on for that one, not interrupted.
                flight.orphaned = True
                raise
            flight.task.cancel()
            await asyncio.wait([flight.task])  # as the run unwinds from its cancel
            if flight.task.cancelled():
                raise
            return flight.task.result(), False  # it ended, or raised, despite the cancel

    async def work(self, *, stop: asyncio.Event | None = None) -> None:
        """Drive scripts that wait for no one (an answer landed, or their host died), one at
        a time, until ``stop`` is set: what ``codemode worker`` runs. A script being driven
        when ``stop`` is set is left before its next step (its calls running then end first),
        for another host to drive on. Hosts that only record
        approvals need not drive scripts themselves while one of these runs."""
        self._check_open()
        stop = stop or asyncio.Event()
        # Scripts this worker could not drive (a tool it lacks), passed over until a time:
        # taken again at once, the oldest of them would be all it ever looked at.
        left: dict[str, float] = {}
        outage = _Outage()
        while not stop.is_set():
            now = time.monotonic()
            for script_id in [s for s, until in left.items() if until <= now]:
                del left[script_id]
            # Raced against the stop: a log that does not answer makes the claim wait out
            # its connect timeout, and a worker told to stop then has nothing to finish.
            claiming = asyncio.ensure_future(self._claim_ready(left))
            stopped = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({claiming, stopped}, return_when=asyncio.FIRST_COMPLETED)
            finally:  # this worker cancelled too
                stopped.cancel()
                if not claiming.done():
                    await cancel_and_wait(claiming)
            if stop.is_set():
                if claiming.cancelled() or isinstance(claiming.exception(), StoreUnavailable):
                    break
                taken = claiming.result()
                if taken is not None:  # claimed as the stop came: left for another host
                    await taken.close()
                break
            try:
                drive = claiming.result()
            except StoreUnavailable as e:
                if e.permanent:
                    raise
                # A database restart or outage: what waits in the log waits on, and the
                # worker goes on looking once it answers (a service dying here would not).
                outage.failed(e)
                drive = None
            else:
                outage.answered()
            if drive is None:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.poll_interval):
                        await stop.wait()
                continue
            lease = drive.lease
            drive.leave = stop  # told to stop, it leaves the script at its next step
            self._emit(
                "resumed", lease.script_id, tenant=drive.record.tenant, steps=drive.record.steps
            )
            try:
                result = await self._drive_owned(drive)
            except CodeModeError as e:  # this script cannot go on here; others can
                if isinstance(e, StoreUnavailable) and not e.permanent:
                    # The log failed, not this host: the script is looked at as any other
                    # once it answers (its lease, kept, runs out on its own).
                    outage.failed(e)
                    continue
                logger.warning(
                    "worker left script=%s (looked at again in %g s): %s",
                    lease.script_id,
                    WORKER_LEFT_FOR,
                    e,
                )
                if len(left) >= WORKER_LEFT_MAX:
                    # More scripts it cannot drive than it passes over: the oldest is looked
                    # at again, after a pause, so the worker never spins on them.
                    del left[next(iter(left))]
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self.poll_interval):
                            await stop.wait()
                left[lease.script_id] = time.monotonic() + WORKER_LEFT_FOR
                continue
            if drive.lost:
                # Its lease ran out before this host renewed it (a host stalled, a log that
                # did not answer): what it returns is the other host's doing, not its own.
                there = "" if result.status == "elsewhere" else f"; status there: {result.status}"
                logger.warning(
                    "worker lost script=%s to another host, which took it over once this "
                    "host's lease ran out%s",
                    lease.script_id,
                    there,
                )
            elif result.status == "elsewhere" and stop.is_set():
                logger.info("worker left script=%s for another host (stopping)", lease.script_id)
            else:
                logger.info("worker drove script=%s status=%s", lease.script_id, result.status)

    async def _claim_ready(self, skip: Collection[str]) -> Drive | None:
        """The drive of a script that waits for no one and is not in ``skip`` (its lease
        taken), or ``None`` if there is none."""
        taken_at = lease_clock()
        lease = await taken_or_kept(
            self.store.claim_ready(new_owner(), self.lease_ms, tuple(skip)),
            lambda lease: lease,
            self._keep,
        )
        if lease is None and self.store.local:
            taken_at = lease_clock()
            lease = await self._take_from_dead_host(skip)
        if lease is None:
            return None
        return await Drive.resume(
            self.store, lease, self.lease_ms, kept=self._keep, taken_at=taken_at
        )

    async def _take_from_dead_host(self, skip: Collection[str] = ()) -> log.Lease | None:
        """The lease of an active script, not held and not in ``skip``, whose host was a
        process of this machine that is gone, taken over at once (as :meth:`resume` does)
        rather than when its lease runs out; ``None`` if there is none."""
        for record in await self.store.scripts("active"):
            if record.held or record.id in skip:
                continue
            dead = dead_local_owner(self.store, record.lease)
            if dead is not None:
                lease = await acquire_or_keep(
                    self.store, record.id, new_owner(), self.lease_ms, self._keep, take_from=dead
                )
                if lease is not None:
                    return lease
        return None

    async def _drive_owned(self, drive: Drive) -> RunResult:
        """Drive a script whose lease this host holds; the lease is given up at the end."""
        record = drive.record
        self._driving.add(drive)
        ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._drives_of[record.id] = ended
        try:
            self._check_tools(drive)
            await self._check_files(drive)
            result = await self._drive(drive)
        except log.LeaseLost as e:
            if not self._closed:
                drive.lost = True
                result = None
            else:
                # aclose gave the lease up under this drive (_give_up): lost then (a call's
                # begin refused, a write fenced) is no other host's doing, and "running on
                # another host" named this one.
                closed = CodeModeError(
                    f"the engine closed while it drove script {record.id}; it waits in the "
                    "log: resume it"
                )
                error = error_text(described(closed))
                self._emit("left", record.id, tenant=record.tenant, error=error)
                # Calls it claimed after that and never began (may_begin refused them) run
                # on resume, not "interrupted".
                drive.note_unbegun()
                unbegun, drive.unbegun = drive.unbegun, []
                if unbegun:
                    await self._approve_again(drive, unbegun)
                raise closed from e
        except BaseException as e:  # cancelled too (a caller's timeout): the drive stops here
            error = error_text(described(e))
            self._emit("left", record.id, tenant=record.tenant, error=error)
            if isinstance(e, asyncio.CancelledError):
                drive.note_unbegun()
            if isinstance(e, StoreUnavailable):
                # The log did not answer: giving the lease up now would wait its timeout
                # again for nothing; it is given up once the log answers (_keep).
                drive.keep_lease()
            raise
        finally:
            if (drive.unheard or drive.unbegun) and not self._closed:
                # Cancelled while sync handlers ran: the caller goes on now, and the drive
                # keeps its lease until they end and what they did is in the log.
                hearing = asyncio.create_task(
                    self._hear_out(drive, ended), name=f"hearing out {record.id}"
                )
                self._hearing.add(hearing)
                hearing.add_done_callback(self._hearing.discard)
            else:
                await self._let_go(drive, ended)
        if self._kept and not drive.kept:
            # The log answered this drive: it takes releases again. In the background, not
            # to make this caller wait on a lease's row that a stalled session still locks.
            # The task first: one of a loop that ended (asyncio.run per request) is replaced,
            # with an Event of this loop's, which an Event of the old one's would not be.
            self._start_giving_back()
            self._log_answered.set()
        if result is None:
            self._emit("left", record.id, tenant=record.tenant, status="elsewhere")
            return await self._elsewhere_or_ended(drive.record.id)
        if result.status == "paused" and not drive.record.held:
            # An answer may have landed after this host decided to pause and before it let
            # go: then nobody else would step the script, so step it on now.
            calls = await self.store.calls(drive.record.id)
            if not any(c.state in (log.AWAITING_APPROVAL, log.AWAITING_CLIENT) for c in calls):
                record = await self.store.get_script(drive.record.id)
                if not record.held:
                    return await self._resume(drive.record.id, 0.0)
        return result

    async def _give_back(
        self, script_id: str | None = None, by_key: tuple[str, str] | None = None
    ) -> None:
        """Give up the leases this host kept when the log stopped answering (``_kept``):
        ``script_id``'s, which a failure to do so raises (the log still does not answer, as
        the take of the script that follows would say), or with None every one, as far as
        the log answers (a failure leaves the rest to the next call). Safe at any time: a
        drive's lease is kept only once nothing of the drive writes under it, and a release
        is fenced by its token, so it never frees a lease another host has taken since.

        A take whose answer was lost (token :data:`LOST_TAKE`) is looked up by its owner: a
        lease found is given up; none found, it is looked up again at the next call until
        it has run out, since the log may still be committing it (a server that had not
        finished the transaction when the answer was given up)."""
        # A keyed start's lost take is of the script its key names (``by_key``: the tenant
        # and key of ``script_id``), which may be another than the one it would have made.
        keys = [
            k
            for k, kept in self._kept.items()
            if script_id is None or k[0] == script_id or (by_key and kept[2] == by_key)
        ]
        for key in keys:
            kept = self._kept.get(key)
            if kept is None:
                continue
            if kept[1] <= time.monotonic():
                del self._kept[key]  # it ran out: nobody needs it given up
                continue
            try:
                lease = kept[0]
                if lease.token == LOST_TAKE:
                    found = await self._taken(lease, kept[2])
                    if found is None:
                        continue
                    lease = found
                await self.store.release(lease)
            except CodeModeError:
                if script_id is not None:
                    raise
                return
            if self._kept.get(key) is kept:
                del self._kept[key]

    async def _taken(self, lost: log.Lease, by_key: tuple[str, str] | None) -> log.Lease | None:
        """The lease ``lost.owner`` holds on its script, whose take's answer was lost (token
        :data:`LOST_TAKE`), or None if the log has none (yet, or the take did not go
        through, or a start made no script). A keyed start's (``by_key``: its tenant and
        key) took the script its key names, which is another than the one it would have
        made if the key named one already."""
        if by_key is not None:
            record = await self.store.script_by_key(*by_key)
        else:
            try:
                record = await self.store.get_script(lost.script_id)
            except ScriptNotFound:
                record = None
        held = None if record is None else record.lease
        return held if held is not None and held.owner == lost.owner else None

    def _keep(self, lease: log.Lease, *, by_key: tuple[str, str] | None = None) -> None:
        """Keep aside a lease possibly still held in the log (its release failed, or was
        not tried: the log did not answer; or its take's answer was lost), to be given up by
        :meth:`_give_back_kept`. Called only once nothing of its drive writes under it."""
        if self._closed:
            return
        # The lease was last renewed (or taken) at most lease_ms before now.
        self._kept[lease.script_id, lease.owner] = (
            lease,
            time.monotonic() + self.lease_ms / 1000,
            by_key if lease.token == LOST_TAKE else None,
        )
        self._log_answered.clear()  # it did not answer this drive
        self._start_giving_back()

    def _start_giving_back(self) -> None:
        # A task that ended (its done callback, which forgets it, runs a loop turn later) or
        # that is another loop's (asyncio.run per request) gives back nothing more.
        task = self._giving_back
        if (task is None or task.done() or task.get_loop() is not asyncio.get_running_loop()) and (
            self._kept and not self._closed
        ):
            self._log_answered = asyncio.Event()  # of this loop, unset: _drive_owned sets it
            self._giving_back = asyncio.create_task(self._give_back_kept(), name="kept leases")
            self._giving_back.add_done_callback(self._given_back)

    async def _give_back_kept(self) -> None:
        """Give the kept leases up on their own, whether or not this host does anything more
        (an idle host would hold its scripts from every other host for the lease): tried
        after a pause that doubles up to KEPT_RETRY_MOST_S, and at once when a drive finds
        the log answering; ends once none is kept (each is dropped when it has run out, so
        this ends within lease_ms of the last), and with :meth:`aclose`, which cancels it."""
        pause = KEPT_RETRY_FIRST_S  # not at once: the log has just failed
        most = min(KEPT_RETRY_MOST_S, max(self.lease_ms / 4000, KEPT_RETRY_FIRST_S))
        while self._kept:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(pause):
                    await self._log_answered.wait()
            self._log_answered.clear()  # a drive that ends from here on sets it again
            pause = min(pause * 2, most)
            await self._give_back()

    def _given_back(self, task: asyncio.Task[None]) -> None:
        if self._giving_back is task:
            self._giving_back = None
        if not task.cancelled() and task.exception() is not None:
            logger.warning(
                "the leases kept while the log did not answer are left to run out",
                exc_info=task.exception(),
            )

    async def _let_go(self, drive: Drive, ended: asyncio.Future[None]) -> None:
        """The end of a drive: its live run and early step dropped, its lease given up, and
        who waits for it (``ended``) told."""
        closed = False  # its close ended: aclose() has no lease of it to give up
        closing: asyncio.Task[None] | None = None
        try:
            self._live.drop(live_key(drive))  # a live run never outlasts its drive
            if drive.early is not None:
                early, drive.early = drive.early, None
                await discard_early(early)
            try:  # a lease it leaves held is kept (_keep): nothing writes under it
                await drive.close()
            except asyncio.CancelledError:
                # Its close may go on (see Drive.close), the lease held and renewed till
                # then: the drive stays this host's (a resume here waits for it, not "on
                # another host"; aclose() waits for it) until that close ends.
                closed, closing = True, drive.closing
                raise
            closed = True
        finally:  # cancelled in the cleanup too: who waits for this drive goes on
            if closing is None:
                self._gone(drive, ended, closed)
            else:
                closing.add_done_callback(lambda _: self._gone(drive, ended, True))

    def _gone(self, drive: Drive, ended: asyncio.Future[None], closed: bool) -> None:
        """The drive ended (``closed``: its close too, else aclose() gives its lease up):
        it is no longer this host's, and who waits for it (``ended``) is told."""
        if closed:
            self._driving.discard(drive)
        script_id = drive.record.id
        if self._drives_of.get(script_id) is ended:
            del self._drives_of[script_id]
        # A drive cancelled (or failed) before its first step was logged: the check's cost
        # goes with it, not kept for as long as the host runs.
        self._check_ms.pop(script_id, None)
        if not ended.done():
            ended.set_result(None)

    async def _hear_out(self, drive: Drive, ended: asyncio.Future[None]) -> None:
        """Record the calls a cancelled drive left running in tool threads once they end
        (each within its tool's timeout), then let the drive go. A resume on this host waits
        for it and finds them done; another host finds the script still held. If the engine
        closes first (:meth:`aclose` cancels them), they stay running in the log, as after a
        crash. The calls whose threads had not begun are approved again, to run when the
        script is resumed: they never ran."""
        try:
            room: int | None = None  # unknown: the results are kept whole, not lost
            with contextlib.suppress(Exception):
                room = self.limits_for(drive.record.tenant).results
            for index, task in list(drive.unheard.items()):
                try:
                    await self._record_outcome(drive, drive.calls[index], task, room)
                except (asyncio.CancelledError, CallAbandoned):
                    break  # the engine closes
                except Exception:  # the log did not answer: the call stays running there
                    logger.warning(
                        "the result of a call left running by a cancelled drive was not "
                        "recorded script=%s call=%s",
                        drive.record.id,
                        drive.calls[index].call_id,
                        exc_info=True,
                    )
                finally:
                    drive.forget_handler(index)
        finally:
            unbegun, drive.unbegun = drive.unbegun, []
            try:
                if unbegun:  # aclose() too: it waits for this before the log closes
                    await self._approve_again(drive, unbegun)
            finally:
                await self._let_go(drive, ended)

    async def _give_up(self, drive: Drive) -> None:
        """The lease of a drive :meth:`aclose` abandoned, given up; the calls claimed ahead of
        their tool threads, which never began, approved again (they would otherwise read as
        interrupted, though they never ran)."""
        unbegun, drive.unbegun = drive.unbegun, []
        if unbegun:
            await self._approve_again(drive, unbegun)
        else:
            await drive.close()

    async def _approve_again(self, drive: Drive, indexes: list[int]) -> None:
        """Approve again the calls ``drive`` claimed whose threads never began. The log
        reopens only calls claimed under an older lease (a call running under this one is
        not its to take back), so the lease is given up and taken anew first; a host that
        takes the script in between finds them running and tells the script they were
        interrupted, as after a crash, and so does a log that does not answer."""
        try:
            await drive.close()
            again = await Drive.take(
                self.store, drive.record.id, new_owner(), self.lease_ms, kept=self._keep
            )
            if again is None:
                return
            try:
                # A call to be claimed as its thread came may never have been: still approved;
                # one whose receipt was cancelled with its write may not even be in the log.
                calls = again.calls
                claimed = [i for i in indexes if i < len(calls) and calls[i].state == log.RUNNING]
                if claimed:
                    await again.reopen(claimed)
            finally:
                await again.close()
        except Exception:
            logger.warning(
                "calls a cancelled drive never began were not approved again script=%s",
                drive.record.id,
                exc_info=True,
            )

    async def _elsewhere_or_ended(self, script_id: str) -> RunResult:
        record = await self.store.get_script(script_id)
        if record.status in log.ENDED and record.outcome is not None:
            return RunResult.from_dict(record.outcome)
        lease = record.lease
        owner = lease.owner if lease is not None else "another host"
        text = (
            f"Script is running on another host ({owner}); its result is in the session log "
            "when it ends."
        )
        left = (lease.expires_ms / 1000 - time.time()) if lease is not None else 0.0
        if left > 0:
            # A host that stopped (killed, or cut off from the log) holds the script until its
            # lease runs out: the reader should know when a resume can take it.
            text += (
                f" If that host has stopped, its lease runs out in about {math.ceil(left)} s; "
                "resume the script then."
            )
        return RunResult(script_id, "elsewhere", text, steps=record.steps)

    def _check_tools(self, drive: Drive) -> None:
        """Refuse to drive a script that calls tools this host does not have, before any of
        its calls runs: run here, it would fail at that call after the others took effect."""
        self._refuse_missing(drive.record.id, drive.calls)

    async def _check_files(self, drive: Drive) -> None:
        """Refuse to drive on a script whose files' bytes the file store lost, before any of
        its calls runs: its runs would read other bytes than its first (a file gone, or cut
        short), diverge from its log, and fail after the approved calls took effect. A
        script that made no call yet has nothing to diverge from."""
        files = drive.record.files
        if not files or not drive.calls:
            return
        try:
            recorded = {f["blob"]: f["size"] for f in files}
            gone = set(await asyncio.to_thread(self.blobs.missing, recorded))
        except OSError as e:
            raise StoreUnavailable(
                f"the file store failed ({e}); script {drive.record.id} is left as it was: "
                "resume it once the store is back"
            ) from None
        if gone:
            for digest in gone:
                self._skill_files.forget(digest)
            names = [f["id"] for f in files if f["blob"] in gone]
            shown = ", ".join(repr(n) for n in names[:10])
            more = f" and {len(names) - 10} more" if len(names) > 10 else ""
            raise FilesMissing(
                f"script {drive.record.id} reads files whose bytes the file store lost or "
                f"changed: {shown}{more}; no call was run and the script is left as it "
                "was: put the blobs back in the store (they are named by their SHA-256) and "
                "resume it, or start it again"
            )

    async def check_tools(self, script_id: str) -> None:
        """:class:`ToolsMissing` if the script's log has calls to tools this host does not
        have, as :meth:`resume` would refuse it; ask before answering a call that this host
        then means to drive on (``codemode resume --approve``), so a refusal records nothing.
        """
        self._check_open()
        check_ids(script_id)
        self._refuse_missing(script_id, await self.store.calls(script_id))

    async def hold(self, script_id: str) -> None:
        """Interrupt: no step of the script runs and no call it asks for goes out."""
        self._check_open()
        check_ids(script_id)
        await self.store.set_held(script_id, True)

    async def release(self, script_id: str) -> None:
        """End a hold; call :meth:`resume` to continue (or let a worker do it)."""
        self._check_open()
        check_ids(script_id)
        await self.store.set_held(script_id, False)

    async def approve(self, script_id: str, call_id: str) -> None:
        """A person approved the call: it runs when the script resumes. An approval that
        lands twice, or on two hosts at once, takes effect once (the second is
        :class:`CallNotWaiting`)."""
        self._check_open()
        check_ids(script_id, call_id)
        await self.store.answer(
            script_id, call_id, log.AWAITING_APPROVAL, log.APPROVED, note=log.APPROVED_NOTE
        )
        await self._answered("call.approved", script_id, call_id)

    async def reject(self, script_id: str, call_id: str, message: str = "") -> None:
        """A person refused the call: the script sees an error with this message."""
        self._check_open()
        check_ids(script_id, call_id)
        entry = await self._waiting(script_id, call_id)
        # As client_result's error: any message is its text (5 failed in len() with TypeError).
        said = "" if message is None else str(message)
        error = error_text(said or f"a person refused tools.{entry.name}")
        await self.store.answer(
            script_id,
            call_id,
            log.AWAITING_APPROVAL,
            log.FAILED,
            error=error,
            note=log.REFUSED_NOTE,
        )
        await self._answered("call.failed", script_id, call_id, entry, error=error)

    async def client_result(
        self, script_id: str, call_id: str, result: Any = None, *, error: str | None = None
    ) -> None:
        """The client ran a client tool: its result, or the error it failed with."""
        self._check_open()
        check_ids(script_id, call_id)
        expect = log.AWAITING_CLIENT
        if error is not None:
            # An empty error gave the script an Error with no message at all.
            message = error_text(str(error) or "the client failed this call, saying nothing")
            await self.store.answer(script_id, call_id, expect, log.FAILED, error=message)
            await self._answered("call.failed", script_id, call_id, error=message)
            return
        entry = await self._waiting(script_id, call_id)
        if entry.state != expect:
            # Refused before the result is checked: against the schema of a call that
            # waits for no client, a host tool's, it logged that tool as returning a bad
            # result, which it never did.
            raise CallNotWaiting(not_waiting(entry, expect))
        tool = self._by_name.get(entry.name)
        record = await self.store.get_script(script_id)
        room = self.limits_for(record.tenant).results
        try:
            if tool is not None:
                data = await tool.checked(result, room, record.language)
            else:
                # No declaration to check it by (a client tool this engine does not hold):
                # still only data as a declared tool's result is (NaN refused, not read as
                # null; nothing nested past what the sandbox takes, or every run of the
                # script failed on its record, 'a malformed script message').
                try:
                    data = to_json_data(result)
                except NotJSONData as e:
                    raise ToolCallError(
                        f"tools.{entry.name} returned {e.what_in(record.language)}, which is "
                        f"not JSON data{e.hint}"
                    ) from None
            size = len(orjson.dumps(data))
        except (ToolCallError, TypeError, orjson.JSONEncodeError) as e:
            message = error_text(
                e.message if isinstance(e, ToolCallError) else unsendable(entry.name, e)
            )
            await self.store.answer(script_id, call_id, expect, log.FAILED, error=message)
            await self._answered("call.failed", script_id, call_id, entry, error=message)
            return
        if size > room:
            # Over the budget on its own, as a host tool's result may be (engine._calls):
            # its size is kept, not its bytes, and the script ends on the results limit.
            data = None
        await self.store.answer(
            script_id, call_id, expect, log.DONE, result=data, result_bytes=size
        )
        await self._answered("call.done", script_id, call_id, entry, stats={"result_bytes": size})

    async def _answered(
        self,
        kind: EventKind,
        script_id: str,
        call_id: str,
        entry: log.CallEntry | None = None,
        **fields: Any,
    ) -> None:
        """The event for a call a person or the client answered, with its tool and tenant as
        every call's event has them (read only when someone listens)."""
        if not self._listeners:
            return
        if entry is None:
            entry = await self._waiting(script_id, call_id)
        tenant = (await self.store.get_script(script_id)).tenant
        self._emit_call(kind, tenant, entry, **fields)

    async def _waiting(self, script_id: str, call_id: str) -> log.CallEntry:
        for entry in await self.store.calls(script_id):
            if entry.call_id == call_id:
                return entry
        raise CallNotWaiting.no_call(script_id, call_id)

    def _new_id(self) -> str:
        return uuid.uuid4().hex

    def _check_open(self) -> None:
        """:class:`CodeModeError` once :meth:`aclose` began: a step would wait out
        ``queue_timeout`` for a runner that is closed for good."""
        if self._closed:
            raise CodeModeError(
                "this engine is closed (aclose); make a new CodeMode on the same log to go on"
            )
        self._check_process()
        self._check_loop()

    def _check_loop(self) -> None:
        """:class:`ConfigError` on an event loop while another still runs that the engine
        served last. Its runner's processes, its log's connections and its tasks belong to
        one loop at a time (one after another is fine: a host's asyncio.run per request);
        used from two threads' loops at once, a run raised "Event loop is closed" or hung."""
        loop = asyncio.get_running_loop()
        with self._loop_lock:  # two threads' first calls at once: one of them is refused
            served = self._loop
            if served is not None and served is not loop and served.is_running():
                raise ConfigError(
                    "this engine is in use on another thread's event loop; a CodeMode serves "
                    "one event loop at a time: make one for each thread that runs a loop"
                )
            self._loop = loop

    def _check_process(self) -> None:
        """:class:`ConfigError` in a process forked after the engine was made."""
        if os.getpid() != self._pid:
            # Its runner's fork server, its log's connections and threads are its maker's:
            # in a forked child (a web server's workers forked after the app was made) a step
            # waited for ever on processes the child does not have, and a SQLite connection
            # shared across a fork can damage the file.
            raise ConfigError(
                "this CodeMode was made in another process, before a fork (a web server's "
                "--preload, say): make the CodeMode in each worker process, after the fork"
            )

    async def __aenter__(self) -> CodeMode:
        """The engine, its runner warmed (see ``ScriptRunner.warm``): a process runner's fork
        server and pool start now, in the background, not at the first ``run_code``."""
        if not self._closed:
            self.runner.warm(self.language)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the engine (``async with CodeMode(...) as engine:`` does at its end): its
        MCP servers, live processes, runner, session log, blobs and tool threads. A script
        still driven here gives its lease up first, so another engine or host goes on with it
        at once; its ``run_code`` (or ``resume``) ends on a :class:`CodeModeError`, and
        nothing written is lost. Its calls still running are cancelled (a sync handler's
        thread runs on, unheard, as do those a cancelled ``run_code`` left to be recorded
        when their threads end) and stay as the log has them, running, as if the host had
        stopped: the next host runs a read-only or idempotent one again, and tells the script
        any other was interrupted."""
        self._closed = True
        for drive in self._driving:
            drive.abandon()  # its running calls end now, not when their handlers would
        await asyncio.gather(*self._hearing, return_exceptions=True)
        await asyncio.gather(*(self._give_up(drive) for drive in list(self._driving)))
        giving_back, self._giving_back = self._giving_back, None
        if giving_back is not None and giving_back.get_loop() is asyncio.get_running_loop():
            await cancel_and_wait(giving_back)  # one of a loop that ended has ended with it
        if self._mcp is not None:
            await self._mcp.aclose()
        await self._live.aclose()  # before the runner: its processes are the runner's
        await self.runner.aclose()
        # The drives unwind before the log closes: one whose step ended as its lease was
        # given up approves again the calls it claimed then and never began (_drive_owned).
        ending = list(self._drives_of.values())  # asyncio.wait cancels none of them
        if ending:
            await asyncio.wait(ending, timeout=self.lease_ms / 1000)
        await self.store.aclose()
        await asyncio.to_thread(self.blobs.close)
        self._tool_threads.close()


class NotText(ValueError):
    """A script that is not Unicode text: no log could keep it."""


def _check_name(what: str, value: object, most: int, example: str) -> None:
    """Raise :class:`CodeModeError` unless ``value`` is a string of 1 to ``most``
    characters that every log can keep (no lone surrogate, no NUL)."""
    if not (
        isinstance(value, str) and 0 < len(value) <= most and log.NOT_KEPT.search(value) is None
    ):
        raise CodeModeError(
            f"{what} = {value!r:.80} must be a string of 1 to {most} characters of Unicode "
            f"text without NUL, such as {example}"
        )


def check_ids(script_id: object, call_id: object = "") -> None:
    """:class:`ScriptNotFound` (or :class:`CallNotWaiting`) for an id from outside that no
    log can hold (not a string, too long, a lone surrogate or a NUL): said as for any id the
    log lacks, before a store sees a value it would fail on in its own way."""
    if not _keepable(script_id):
        raise ScriptNotFound.of(script_id)
    if not _keepable(call_id, empty=True):
        raise CallNotWaiting.no_call(str(script_id), call_id)


def _files_note(note: str, limits: Limits | Callable[[str], Limits]) -> str:
    """The language's paragraph on ``files`` with the number of files a script may show as
    the host set it (it said the default, 4, whatever the limit: a script that showed a file
    more than the host allows failed on the limit). Not a number when a function gives each
    tenant its own limits: the description is one for every tenant."""
    if isinstance(limits, Limits):
        return note.replace("{shown}", f"at most {limits.shown_files}")
    return note.replace("{shown}", "as many as the limits allow")


def _key_of_another_call(key: str | None, named: str, began: str, language: str) -> ConfigError:
    """The error for a keyed start whose key ``named`` a script begun in language ``began``
    with other code than this call's, or in another ``language``."""
    differs = "with other code" if began == language else f"in {began}, not {language}"
    return ConfigError(
        f"key {key!r} names {named} {differs}: a key is one run_code call's (the model's "
        "tool-use id, unique in the tenant); give this call its own key, or none"
    )


def _key_of(record: log.ScriptRecord) -> tuple[str, str] | None:
    """The tenant and key a keyed start of ``record`` gave, or None for a script without."""
    return None if record.key is None else (record.tenant, record.key)


def _keepable(value: object, *, empty: bool = False) -> bool:
    return (
        isinstance(value, str)
        and (empty or len(value) > 0)
        and len(value) <= MAX_KEY
        and log.NOT_KEPT.search(value) is None
    )


def _check_text(code: str) -> None:
    """Raise :class:`NotText` naming where ``code`` has a lone surrogate or a NUL (which
    PostgreSQL's text cannot keep; a model's JSON arguments can hold one as ``\\u0000``)."""
    if log.NOT_KEPT.search(code) is None:
        return
    for number, line in enumerate(code.split("\n"), 1):
        found = LONE_SURROGATE.search(line)
        if found:
            char = ord(found.group())
            raise NotText(
                f"line {number} has a lone surrogate (U+{char:04X}), which is not Unicode "
                f'text; write it as an escape in a string ("\\u{char:04x}")'
            )
        if "\x00" in line:
            raise NotText(
                f"line {number} has a NUL character (U+0000), which no session log keeps; "
                'write it as an escape in a string ("\\u0000")'
            )


__all__ = ["CodeMode", "CodeModeError", "RunResult"]


def _type_check_option(
    setting: object,
) -> Literal["on", "off"] | TypeChecker | PythonTypeChecker:
    if isinstance(setting, TypeChecker | PythonTypeChecker) or setting in ("on", "off"):
        return setting
    raise ConfigError(
        f'type_check = {setting!r:.80}; use "on", "off", a TypeChecker or a PythonTypeChecker'
    )


def _type_checker(
    setting: Literal["on", "off"] | TypeChecker | PythonTypeChecker, language: Language
) -> TypeChecker | PythonTypeChecker | CompilerMissing | None:
    """The checker ``setting`` asks for in ``language``: None when it is off, the
    :class:`CompilerMissing` saying why when "on" finds none."""
    if isinstance(setting, TypeChecker | PythonTypeChecker):
        return setting
    if setting == "off":
        return None
    try:
        return PythonTypeChecker() if language == "python" else TypeChecker()
    except CompilerMissing as e:
        return e


def _check_wait(wait: Any) -> None:
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not wait >= 0:
        raise CodeModeError(
            f"wait = {wait!r:.80} must be a number of seconds, 0 or more (0: do not wait)"
        )
