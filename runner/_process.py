"""ProcessRunner: each step in a confined process, from a warm pool, a fork server or exec.

Three ways to get the process, one way to talk to it (``_conversation``):

- ``pool`` (default): a child the fork server forked ahead of demand, already locked down
  and ``ready`` (``_pool``);
- ``fork``: a child the fork server forks for this step (``_forkserver``, ``sandbox.zygote``);
- ``exec``: a fresh ``python -s -P -m sandbox`` per step, the baseline.

Each process starts with no environment but ``SANDBOX_ENV`` and only its three pipes, and is
reaped with ``wait4`` (by the runner in exec mode, by the zygote otherwise) so its CPU time and peak
memory reach the step's stats. Every way it can end becomes a Step (see
``_conversation.step_from``); none hangs the caller. Steps run in at most ``slots``
processes at once, shared fairly between tenants (``_slots``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
import subprocess
import sys
import time
import weakref
from dataclasses import dataclass, field
from typing import Literal, Protocol

from runner import _conversation as conv
from runner._base import (
    SANDBOX_ARGS,
    SANDBOX_ENV,
    FileReader,
    ProcessStats,
    RunError,
    ScriptRunner,
    Step,
    check_count,
    check_seconds,
    closed_runner,
    ended_at_start,
    not_started,
    sandbox_python,
)
from runner._cpu import HOST_BUSY, AwayFromHost
from runner._forkserver import ForkedChild, ForkServer
from runner._live import ProcessLive, close_all, measure_at_ran
from runner._pool import DEFAULT_IDLE_AFTER, WarmPool
from runner._procfs import ProcFiles, cpu_ms_of
from runner._quiet import QUIET, Quiet
from runner._slots import DEFAULT_SCRIPT_WAIT, Slots, default_slot_count
from runner._tasks import cancel_and_wait
from runner.sizes import parse_size
from sandbox import protocol
from sandbox.protocol import Script

Mode = Literal["pool", "fork", "exec"]
MODES: tuple[Mode, ...] = ("pool", "fork", "exec")

STDERR_KEEP = 8 * 1024
# How long a new process may take to import, lock down and say ready.
SPAWN_TIMEOUT = 30.0
# The JS heap pool children are forked for (the spec's default `memory`): their heap ceiling
# is the runner's for it; a script that needs more gets a child forked for it.
POOL_MEMORY = protocol.Limits().memory
# How long a process whose step is over may wait for the runner's quiet unstopped: past the
# quiet itself, so one ended between scripts is never stopped first.
STOP_ENDING_AFTER = 2 * QUIET


@dataclass
class Child:
    """A sandbox process and its pipes, reaped once."""

    pid: int
    popen: subprocess.Popen[bytes]
    reader: conv.LineReader
    writer: asyncio.StreamWriter
    stderr: bytearray = field(default_factory=bytearray)
    stderr_task: asyncio.Task[None] | None = None
    started: float = field(default_factory=time.monotonic)
    killed_by_us: bool = False
    status: int | None = None
    rusage: resource.struct_rusage | None = None
    # Handed to a background reap after its step returned at `ran`.
    detached: bool = False

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    def close_input(self) -> None:
        """Close the process's stdin: a version 2 process waiting for results exits."""
        self.writer.close()

    def kill(self) -> None:
        if self.status is None:
            self.killed_by_us = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, signal.SIGKILL)

    async def reap(self, grace: float = 2.0) -> None:
        """Wait for the process to end (killing it after ``grace`` seconds), then reap it."""
        if self.status is not None:
            return
        end = time.monotonic() + grace
        delay = 0.0005
        while True:
            pid, status, rusage = os.wait4(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.status, self.rusage = status, rusage
                break
            if time.monotonic() >= end:
                self.kill()
                end = time.monotonic() + 5.0
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.02)
        self.popen.returncode = os.waitstatus_to_exitcode(self.status)
        self.writer.close()
        task = self.stderr_task
        if task is not None:
            # Waited for, not awaited: a wait cancelled from outside must end this task too,
            # and the reader's own end (cancelled, failed) is of no use here.
            await asyncio.wait({task}, timeout=1.0)
            if not task.done():
                task.cancel()
            elif not task.cancelled():
                task.exception()
        self.popen.stdout.close()  # type: ignore[union-attr]
        self.popen.stderr.close()  # type: ignore[union-attr]

    def stats(self) -> ProcessStats:
        stats = ProcessStats(wall_ms=(time.monotonic() - self.started) * 1000)
        if self.rusage is not None:
            stats.cpu_ms = (self.rusage.ru_utime + self.rusage.ru_stime) * 1000
            stats.max_rss_bytes = self.rusage.ru_maxrss * 1024
        stats.exit_status = self.status
        return stats


async def _drain_stderr(stream: asyncio.StreamReader, keep: bytearray) -> None:
    while chunk := await stream.read(65536):
        keep.extend(chunk)
        if len(keep) > STDERR_KEEP:
            del keep[: len(keep) - STDERR_KEEP]


async def spawn(argv: list[str], line_limit: int) -> Child:
    """Start a sandbox process with only SANDBOX_ENV as its environment; connect its pipes."""
    loop = asyncio.get_running_loop()
    popen = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(SANDBOX_ENV),
        close_fds=True,
        start_new_session=True,
        cwd="/",
    )
    stdout = asyncio.StreamReader(limit=min(line_limit, 1 << 24), loop=loop)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdout), popen.stdout)
    stderr = asyncio.StreamReader(loop=loop)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stderr), popen.stderr)
    transport, proto = await loop.connect_write_pipe(
        lambda: asyncio.streams.FlowControlMixin(loop), popen.stdin
    )
    writer = asyncio.StreamWriter(transport, proto, None, loop)
    child = Child(pid=popen.pid, popen=popen, reader=conv.LineReader(stdout), writer=writer)
    child.stderr_task = asyncio.create_task(_drain_stderr(stderr, child.stderr))
    return child


class _Process(Protocol):
    """What a step needs of a sandbox process, exec'd (``Child``) or forked (``ForkedChild``)."""

    pid: int
    reader: conv.LineReader
    stderr: bytearray
    status: int | None
    killed_by_us: bool
    started: float
    detached: bool

    async def write(self, data: bytes) -> None: ...
    def close_input(self) -> None: ...
    def kill(self) -> None: ...
    async def reap(self, grace: float = 2.0) -> None: ...
    def stats(self) -> ProcessStats: ...


# The most ready children a pool keeps per slot (see ProcessRunner's pool_size).
MAX_POOL_PER_SLOT = 4


class ProcessRunner(ScriptRunner):
    """Runs each step in a confined sandbox process on this machine.

    ``mode`` picks how the process comes to be: ``"pool"`` (default) takes a child the fork
    server forked ahead of demand, ``"fork"`` forks one per step, ``"exec"`` starts a fresh
    ``python -s -P -m sandbox`` per step (slowest; for hosts that want no long-lived server).

    ``slots`` caps how many steps run at once (an int, or a :class:`Slots` shared with other
    runners; default ``CODEMODE_SANDBOX_SLOTS`` or the CPU count clamped to 2..8), and
    ``script_wait`` is how long a step may wait for one before it gets a :class:`RunError`.
    ``pool_size`` is how many ready children the pool keeps (default: one per slot; at most
    four per slot); it shrinks to one after ``idle_after`` idle seconds. ``spawn_timeout`` is
    how long a process may take to start. ``data_limit`` caps a process's heap
    (records included; bytes or a word such as ``"1gb"``); keep it above ``memory``. By
    default it is twice the script's ``memory`` and at least 512 MiB, plus room for a script
    line past 16 MiB (its call log). ``python`` is the interpreter that runs the sandbox (a
    path, or a name looked up on ``PATH``; ValueError when it is no executable file); one
    that cannot start the sandbox (missing since, or without this project) fails each step
    at once with a permanent :class:`RunError` saying so.
    """

    def __init__(
        self,
        *,
        mode: Mode = "pool",
        python: str = sys.executable,
        data_limit: int | str | None = None,
        spawn_timeout: float = SPAWN_TIMEOUT,
        slots: int | Slots | None = None,
        pool_size: int | None = None,
        script_wait: float = DEFAULT_SCRIPT_WAIT,
        idle_after: float = DEFAULT_IDLE_AFTER,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        # Not above zero, each step timed out before its process could start, or the pool's
        # idle watch (idle_after) woke without a pause, a core's worth of CPU for ever.
        check_seconds("spawn_timeout", spawn_timeout)
        check_seconds("idle_after", idle_after)
        # Bytes, or a size word ("1gb") as [codemode.runner] data_limit takes.
        heap = None if data_limit is None else parse_size(data_limit, "data_limit")
        if heap is not None and heap < protocol.MiB:
            raise ValueError(
                f"data_limit is {heap:,} bytes, too small for any script; give the "
                "process heap in bytes, above the scripts' memory (e.g. 1073741824 for 1 GiB)"
            )
        self.mode: Mode = mode
        self.python = sandbox_python(python)
        self.data_limit = heap
        self.spawn_timeout = spawn_timeout
        self.script_wait = script_wait
        self.idle_after = idle_after
        if isinstance(slots, Slots):
            self.slots = slots
        else:
            self.slots = Slots(slots if slots is not None else default_slot_count(), script_wait)
        self.pool_size = pool_size if pool_size is not None else self.slots.count
        check_count("pool_size", self.pool_size)
        if self.pool_size > MAX_POOL_PER_SLOT * self.slots.count:
            # Each child waits holding its memory; a million were forked until the machine
            # ran out.
            raise ValueError(
                f"pool_size must be at most {MAX_POOL_PER_SLOT} per slot "
                f"({MAX_POOL_PER_SLOT * self.slots.count} for {self.slots.count}), not "
                f"{self.pool_size}: no more steps than slots run at once, and the pool "
                "refills as each takes a child"
            )
        self.server: ForkServer | None = None
        self.pool: WarmPool | None = None
        # A step running, or a live run waiting for its results: a script in the middle of
        # its run, which the pool's refills and the ends of finished processes wait out.
        self.quiet = Quiet(lambda: self.slots.in_use > 0 or bool(self._live))
        if mode != "exec":
            self.server = ForkServer(python=python, spawn_timeout=spawn_timeout)
        if mode == "pool":
            assert self.server is not None
            self.pool = WarmPool(
                self.server,
                size=self.pool_size,
                memory=POOL_MEMORY,
                data_limit=heap,
                spawn_timeout=spawn_timeout,
                idle_after=idle_after,
                quiet=self.quiet,
            )
        self._closed = False
        # The live runs this runner made and nobody closed yet; aclose ends them.
        self._live: weakref.WeakSet[ProcessLive] = weakref.WeakSet()
        # Processes whose steps returned at `ran`, being reaped (aclose waits for them).
        self._reaping: set[asyncio.Task[None]] = set()
        # Of those, the ones waiting for the runner's quiet to be ended (see _reap_later).
        self._to_end: dict[asyncio.Task[None], ForkedChild] = {}
        self._warming: asyncio.Task[None] | None = None  # the fork server's start (warm)

    def with_data_limit(self, data_limit: int) -> ProcessRunner:
        """A runner like this one whose processes' heap is capped at ``data_limit`` bytes.

        It shares this runner's slots, so the two together still run at most ``slots``
        steps at once.
        """
        return ProcessRunner(
            mode=self.mode,
            python=self.python,
            data_limit=data_limit,
            spawn_timeout=self.spawn_timeout,
            slots=self.slots,
            pool_size=self.pool_size,
            script_wait=self.script_wait,
            idle_after=self.idle_after,
        )

    def heap_limit(self, memory: int) -> int:
        """The process heap for a script with JS heap ``memory``."""
        if self.data_limit is not None:
            return max(self.data_limit, memory)
        return protocol.process_heap(memory)

    def argv(self, script: Script) -> list[str]:
        """The exec-mode command line for ``script``."""
        memory = script.limits.memory
        argv = [self.python, *SANDBOX_ARGS, "--memory-ceiling", str(memory)]
        # Its one step's language only: a JavaScript step does not pay for warming Python.
        argv += ["--languages", script.language]
        if self.data_limit is not None:
            # Without it the process takes the default heap for `memory`, plus room for a
            # long script line, as a forked child does.
            argv += ["--data-limit", str(self.heap_limit(memory))]
        return argv

    async def run(
        self,
        script: Script,
        files: FileReader | None = None,
        *,
        tenant: str = "default",
        live: bool = False,
    ) -> Step:
        """As :meth:`ScriptRunner.run`. A live step (``Step.live``) keeps its forked process,
        which holds no slot while it waits (pool and fork modes; exec mode keeps none)."""
        if self._closed:
            raise closed_runner()
        async with self.slots.hold(tenant) as use:
            if self.mode == "exec":
                step = await self._run_exec(script, files)
            else:
                step = await self._run_forked(script, files, live=live, tenant=tenant)
        if step.process is not None:
            step.process.wait_ms = use.waited * 1000
        return step

    def warm(self, language: str = protocol.LANGUAGES[0]) -> None:
        """As :meth:`ScriptRunner.warm`: the pool mode fills its pool, the fork mode starts
        its fork server (exec mode has nothing to begin). A first step then takes a process
        that is ready, rather than waiting about half a second of CPU for the fork server to
        start (Python, QuickJS, the prelude and a probe run in each language). Raises
        ``ValueError`` for a language the sandbox does not run."""
        if language not in protocol.LANGUAGES:
            # Else every refill failed, saying so in the host's log only, and steps forked.
            raise ValueError(
                f"warm: language must be one of {', '.join(protocol.LANGUAGES)}, not "
                f"{language!r:.80}"
            )
        if self._closed:
            return
        if self.pool is not None:
            self.pool.begin(language)
        elif self.server is not None and self._warming is None:
            self._warming = asyncio.get_running_loop().create_task(
                self._start_server(), name="codemode fork server start"
            )

    async def _start_server(self) -> None:
        assert self.server is not None
        # Not reported here: a server that cannot start fails the first step, which says why.
        with contextlib.suppress(Exception):
            await self.server.start()

    def busy(self) -> None:
        """A live segment began or ended (see ``runner._quiet``)."""
        self.quiet.busy()

    @property
    def ending(self) -> int:
        """How many processes whose step is over wait for the runner's quiet to be ended."""
        return len(self._to_end)

    @property
    def live_runs(self) -> int:
        """How many live processes this runner keeps now (made and not yet closed)."""
        return len(self._live)

    # ---- exec mode ----

    async def _run_exec(self, script: Script, files: FileReader | None) -> Step:
        try:
            child = await spawn(self.argv(script), conv.ran_bound(script))
        except OSError as e:
            raise not_started(f"the sandbox process ({self.python})", e) from e
        try:
            ready = await self._await_ready(child)
            if isinstance(ready, Step):
                return ready
            return await self._drive(child, ready, script, files, live=False, tenant="")
        finally:
            if not child.detached:
                child.kill()
                await child.reap(grace=0)

    # ---- fork and pool modes ----

    async def _run_forked(
        self, script: Script, files: FileReader | None, *, live: bool, tenant: str
    ) -> Step:
        assert self.server is not None
        memory = script.limits.memory
        child = None
        if self.pool is not None and self.heap_limit(memory) <= self.heap_limit(POOL_MEMORY):
            child = self.pool.take(script.language)
        if child is not None:
            try:
                return await self._run_child(child, script, files, live=live, tenant=tenant)
            except _NeverRead:
                pass  # it died waiting, just before we took it: the script never ran there
        data_limit = self.heap_limit(memory) if self.data_limit is not None else None
        child = await self.server.spawn(memory=memory, data_limit=data_limit)
        try:
            return await self._run_child(child, script, files, live=live, tenant=tenant)
        except _NeverRead:
            raise RunError(
                f"the sandbox process ended before it read the script{_tail(child)}; the "
                "step can be tried again"
            ) from None

    async def _run_child(
        self,
        child: ForkedChild,
        script: Script,
        files: FileReader | None,
        *,
        live: bool,
        tenant: str,
    ) -> Step:
        """One step on a forked child. Raises ``_NeverRead`` if it died before the script."""
        step: Step | None = None
        try:
            ready: protocol.Ready | Step | None = child.ready
            if ready is None:
                ready = await self._await_ready(child)
            if isinstance(ready, Step):
                return ready
            if isinstance(child, ForkedChild) and child.proc is None:
                child.proc = ProcFiles.open(child.pid)  # it waits for its script: surely it
            child.started = time.monotonic()
            step = await self._drive(child, ready, script, files, live=live, tenant=tenant)
            return step
        finally:
            if (step is None or step.live is None) and not child.detached:
                child.kill()
                await child.reap(grace=0)
            if self.pool is not None:
                self.pool.taken_done()

    # ---- one step, either way ----

    async def _await_ready(self, child: Child | ForkedChild) -> protocol.Ready | Step:
        """The process's ``ready``; a failed step if it cannot confine itself.

        Raises :class:`RunError` when it never got to a script: the runner's trouble, not
        the script's, so the step can be tried again.
        """
        try:
            return await conv.await_ready(child.reader, conv.Deadline.seconds(self.spawn_timeout))
        except conv.UnconfinedError as e:
            return Step.failure(
                "SandboxUnavailable",
                f"the sandbox process could not lock itself down, so no script runs here: {e}",
            )
        except (TimeoutError, protocol.ProtocolError, RunError) as e:
            child.kill()
            await child.reap(grace=0)
            detail = str(e) or type(e).__name__
            # An exec'd interpreter that exited on its own before it was ready does so every
            # time; a forked child's end says nothing of the next one.
            code = (
                child.popen.returncode
                if isinstance(child, Child) and not isinstance(e, TimeoutError)
                else None
            )
            raise ended_at_start("the sandbox process", f"{detail}{_tail(child)}", code) from None

    async def _drive(
        self,
        child: _Process,
        ready: protocol.Ready,
        script: Script,
        files: FileReader | None,
        *,
        live: bool,
        tenant: str,
    ) -> Step:
        script = protocol.fit(script, ready.version)  # a sandbox of an older install
        conv.check_version(ready, script)
        deadline = conv.Deadline.for_step(script)
        server = conv.FileServer(script, files)
        # The step is charged the CPU its process used from the script on, not what it used
        # before: forking, locking itself down, and in the pool, touching its pages while it
        # waited (about 6 ms, which a trivial script was charged); an exec'd one, starting
        # Python and warming up (hundreds of ms). Its pid is surely its: it is not reaped. A
        # pool child's was read as it waited (ForkedChild.cpu_ready).
        if isinstance(child, ForkedChild):
            before = child.cpu_ready
            if before is None and child.proc is not None:
                before = child.proc.cpu_ms()
        else:
            before = cpu_ms_of(child.pid)
        # A host that works while the script runs leaves it its CPU (runner._cpu).
        away = AwayFromHost(child) if isinstance(child, ForkedChild) and HOST_BUSY.get() else None
        outcome: conv.Outcome | None = None
        try:
            outcome = await conv.segment(
                child.reader,
                child.write,
                script,
                server,
                deadline,
                protocol.encode(script),
                len(script.records),
            )
        finally:
            # A process that waits for results is let back on every CPU once the step has
            # returned (it has nothing to run until then); one whose run is over, by the
            # timer, if it is still there: syscalls off the way to the step's return.
            ended = outcome is not None and (outcome.ran is None or outcome.ran.outcome != "calls")
            if away is not None and not ended:
                asyncio.get_running_loop().call_soon(away.release)
        keep = live and ready.version >= protocol.LIVE_VERSION
        return await self._segment_step(
            child,
            script,
            outcome,
            server,
            tenant=tenant,
            known=len(script.records),
            cpu_charged=before or 0.0,
            cpu_start=before or 0.0,
            started=child.started,
            keep=keep,
        )

    async def _segment_step(
        self,
        child: _Process,
        script: Script,
        outcome: conv.Outcome,
        server: conv.FileServer,
        *,
        tenant: str,
        known: int,
        cpu_charged: float,
        cpu_start: float,
        started: float,
        keep: bool = True,
        resumed: bool = False,
    ) -> Step:
        """The Step of a segment that ended with ``outcome``: a kept process for a version 2
        run that stopped on calls (when ``keep`` and it is a forked child), else the process
        ends and is reaped. ``cpu_charged`` is what earlier segments of its run were charged,
        ``cpu_start`` the process's CPU when it was sent the script;
        ``resumed``: a live run's segment after results (see ``conv.step_from``)."""
        ran = outcome.ran
        waits = (
            ran is not None and ran.outcome == "calls" and script.version >= protocol.LIVE_VERSION
        )
        if ran is not None and isinstance(child, ForkedChild):
            # Return at `ran`: what the step cost is read from /proc now, not from wait4 (the
            # fork server reaps the process; an exec'd one is ours to reap, so waited for).
            measured = measure_at_ran(child, cpu_charged, started)
            if measured is not None:
                stats, resident = measured
                stats.file_bytes = outcome.file_bytes
                step = Step.from_ran(ran, stats)
                if waits and keep and isinstance(child, ForkedChild):
                    step.live = ProcessLive(
                        self,
                        child,
                        script,
                        server,
                        tenant=tenant,
                        known=known,
                        waiting=list(ran.calls),
                        cpu_charged=cpu_charged + stats.cpu_ms,
                        cpu_start=cpu_start,
                        resident=resident,
                    )
                else:
                    # The process has nothing more to say: it is ended and reaped meanwhile.
                    self._reap_later(child)
                return step
        if ran is not None and script.version >= protocol.LIVE_VERSION:
            child.close_input()  # a version 2 process waits after `ran`: let it exit
        if outcome.ran is None:
            if outcome.stopped:
                child.kill()
            await child.reap(grace=0.5)
        else:
            await child.reap(grace=1.0)
        if outcome.ran is None and isinstance(child, ForkedChild) and child.unread:
            raise _NeverRead
        if outcome.ran is None and isinstance(child, ForkedChild) and child.server_died:
            raise RunError(
                "the fork server ended while this step ran, so its process was stopped "
                "before it reported how the run ended; the step can be tried again"
            )
        # Where the segment began is known but in a replay's own process.
        segment_used = cpu_charged - cpu_start if resumed or not script.records else None
        step = self._step(child, script, outcome, cpu_start, segment_used, resumed=resumed)
        if step.process is not None:
            step.process.cpu_ms = max(step.process.cpu_ms - cpu_charged, 0.0)
            step.process.wall_ms = (time.monotonic() - started) * 1000
        return step

    def _reap_later(self, child: _Process) -> None:
        """End a process whose step is over once the runner is quiet (``runner._quiet``):
        the kernel's teardown of it then takes no CPU from a script mid-run, the log's
        fsync at the script's end included. Meanwhile it is stopped if it waits past
        :data:`STOP_ENDING_AFTER` (ended between scripts, as most are, it never is: a
        signal, and a wake of the process, saved on the way to the step's return), and then
        can do nothing. At most one such process per slot waits (a burst of steps would
        otherwise hold a process each, with its memory and fds): past that, and for an exec'd
        process (ours to reap, not the fork server's), it is ended at once."""
        child.detached = True
        loop = asyncio.get_running_loop()
        if isinstance(child, ForkedChild) and len(self._to_end) < self.slots.count:
            task = loop.create_task(self._end_when_quiet(child))
            self._to_end[task] = child
            # A task cancelled before it ran (the loop ending) runs none of its code: the
            # process is ended here then, not left stopped.
            task.add_done_callback(self._end_left)
        else:
            child.kill()
            task = loop.create_task(child.reap(grace=1.0))
        self._reaping.add(task)
        task.add_done_callback(self._reaping.discard)

    async def _end_when_quiet(self, child: ForkedChild) -> None:
        task = asyncio.current_task()
        stop = asyncio.get_running_loop().call_later(
            STOP_ENDING_AFTER, child.send_signal, signal.SIGSTOP
        )
        try:
            await self.quiet.wait(self.quiet.due())
        finally:  # cancelled too (the loop ending): the process is ended all the same
            stop.cancel()
            mine = self._to_end.pop(task, None) is not None  # type: ignore[arg-type]
            if mine:
                child.kill()
        if mine:  # else aclose took it over
            await child.reap(grace=1.0)

    def _end_left(self, task: asyncio.Task[None]) -> None:
        child = self._to_end.pop(task, None)
        if child is not None:
            child.kill()

    def _step(
        self,
        child: _Process,
        script: Script,
        outcome: conv.Outcome,
        cpu_start: float,
        segment_used: float | None,
        *,
        resumed: bool = False,
    ) -> Step:
        status = child.status
        term = os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status) else None
        code = os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else None
        if outcome.stopped:
            term = None if child.killed_by_us else term
        stats = child.stats()
        return conv.step_from(
            outcome,
            script,
            stats,
            run_cpu_ms=stats.cpu_ms - cpu_start,
            segment_used_ms=segment_used,
            term_signal=term,
            exit_code=code,
            killed_by_us=child.killed_by_us,
            stderr_tail=child.stderr.decode("utf-8", "replace"),
            resumed=resumed,
        )

    async def aclose(self) -> None:
        """End every live process it made, let the pool's children go and stop the fork
        server; reaps everything."""
        self._closed = True
        if self._warming is not None:
            await cancel_and_wait(self._warming)
        await close_all(self._live)
        waiting, self._to_end = self._to_end, {}
        for task, child in waiting.items():  # ended now, not when the runner is quiet
            task.cancel()
            child.kill()
        if self._reaping or waiting:
            await asyncio.gather(
                *(child.reap(grace=1.0) for child in waiting.values()),
                *self._reaping,
                return_exceptions=True,
            )
        if self.pool is not None:
            await self.pool.aclose()
        if self.server is not None:
            await self.server.aclose()


class _NeverRead(Exception):
    """The forked child ended before it read the script: the script did not run."""


def _tail(child: Child | ForkedChild) -> str:
    text = child.stderr.decode("utf-8", "replace").strip()
    return f" ({text.splitlines()[-1][:300]})" if text else ""
