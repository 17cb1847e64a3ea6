"""Live steps on this machine: a confined process kept, alive, between the steps of its run.

A step of a version 2 script that stops on calls may keep its process (``ProcessRunner.run``
with ``live=True``): the process waits for the calls' results and goes on with the same run
(``sandbox.protocol``). While it waits it holds no slot; :meth:`ProcessLive.resume` takes one
again, fairly per tenant, and the segment has the wall deadline of a step of its own.

While it waits nothing reads its stdout (what it writes stays in its pipe), and once it has
waited :data:`PARK_AFTER` it is stopped (``SIGSTOP`` by pidfd; ``SIGCONT`` when its results
come): an honest sandbox only blocks on its stdin then, so this costs it nothing, and a
sandbox that was subverted cannot spin, allocate or write without a slot for longer than
that. Results that come sooner (a tool that answers in a millisecond or two: most calls of a
script) find it running, blocked on its read, which saves the two signals, the two wakes of
the process they cost and their two trips through the scheduler (about 0.1 ms of the host's
CPU per call). What it does between its ``ran`` and the resume is found then (output it
wrote ends it; CPU it used is charged to the next segment, which has its own deadline).

The process is a cache of the log: anything that goes wrong with it before the results are
taken (it ended, it wrote while it waited, the records are not the ones it waits for) ends it
and raises ``RunError``, and the engine replays the step from the log.

What a segment cost is measured here, never taken from the process: its CPU from
``/proc/<pid>/schedstat`` (the kernel's own count, in nanoseconds) and its peak memory from
``/proc/<pid>/status`` (``VmHWM``), read when ``ran`` arrives while the process waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import resource
import select
import signal
import time
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

import psutil

from runner import _conversation as conv
from runner._base import LiveRun, ProcessStats, RunError, ScriptRunner, Step
from runner._procfs import ProcFiles
from runner._slots import Slots
from sandbox import protocol

if TYPE_CHECKING:
    from runner._forkserver import ForkedChild


MiB = 1024 * 1024
# A waiting process holds what its run built (a few MiB for most scripts, on top of the
# pages it shares with the fork server); the default count leaves each about this much.
TYPICAL_LIVE_BYTES = 16 * MiB
MAX_LIVE_COUNT = 1024
# The file descriptors a sandbox process holds in the process that runs it (its pipes, its
# pidfd, measured: 7), and one for a service's connection to the engine that drives it.
FDS_PER_PROCESS = 8
# How long a waiting process may go on unstopped (see above): what a subverted one could
# spin, without a slot, before the stop. It is charged for it all the same.
PARK_AFTER = 0.005


def default_live_memory() -> int:
    """A quarter of the memory the machine has available now: live processes are a cache,
    and a cache must not crowd out the steps and tools it serves."""
    return max(64 * MiB, psutil.virtual_memory().available // 4)


def default_live_count(memory: int) -> int:
    """How many processes may wait live at once by default: what ``memory`` holds at a
    typical live process's size, within half the file descriptors this process may open
    (each live process holds its pipes, or a connection, here; the other half is for the
    steps and connections), from 4 to 1,024."""
    if memory <= 0:
        return 0  # no memory keeps none (see keeps_live): no room held for them either
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    by_fds = soft // (2 * FDS_PER_PROCESS) if soft != resource.RLIM_INFINITY else MAX_LIVE_COUNT
    return max(4, min(MAX_LIVE_COUNT, memory // TYPICAL_LIVE_BYTES, by_fds))


def keeps_live(max_count: int, max_memory: int) -> bool:
    """Whether a live budget of ``max_count`` processes and ``max_memory`` bytes keeps any:
    with either 0, a process run live would be ended for room as soon as its step was
    answered, and the step replayed after its calls (a process made for nothing each step),
    so live steps are not asked for (an engine) or offered (a service)."""
    return max_count > 0 and max_memory > 0


def takes_live(runner: ScriptRunner) -> bool:
    """Whether ``runner.run`` takes ``live=``: a runner written before live steps does not,
    and gets replay steps."""
    try:
        parameters = inspect.signature(runner.run).parameters
    except (TypeError, ValueError):
        return False
    return "live" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


class _Owner(Protocol):
    """What a live run needs of the runner that made it (``ProcessRunner``)."""

    slots: Slots
    _live: weakref.WeakSet[ProcessLive]

    def busy(self) -> None: ...

    async def _segment_step(
        self,
        child: ForkedChild,
        script: protocol.Script,
        outcome: conv.Outcome,
        server: conv.FileServer,
        *,
        tenant: str,
        known: int,
        cpu_charged: float,
        cpu_start: float,
        started: float,
        resumed: bool = False,
    ) -> Step: ...


class _Measured(Protocol):
    proc: ProcFiles | None


def wrote_while_waiting(child: ForkedChild) -> bool:
    """True when the process wrote (or closed) its stdout after its last ``ran``: a process
    that waits for results writes nothing until it has them."""
    if child.reader.buffered():
        return True
    fd = child.stdout.fd
    if fd is None:
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


class ProcessLive(LiveRun):
    """A forked sandbox child that stopped on calls and waits for their records.

    Made by :class:`~runner.ProcessRunner` only. ``cpu_charged`` is the process's CPU the
    steps so far were charged (a segment is charged what it used beyond it), ``cpu_start``
    its CPU when it was sent the script; ``resident`` the memory it held at its ``ran``.
    """

    def __init__(
        self,
        runner: _Owner,
        child: ForkedChild,
        script: protocol.Script,
        server: conv.FileServer,
        *,
        tenant: str,
        known: int,
        waiting: list[protocol.Call],
        cpu_charged: float,
        cpu_start: float,
        resident: int,
    ) -> None:
        self.runner = runner
        self.child = child
        self.script = script
        self.server = server
        self.tenant = tenant
        self.known = known
        self.calls = waiting
        self.waiting = len(waiting)
        self.cpu_charged = cpu_charged
        self.cpu_start = cpu_start
        self._resident = resident
        self._private: int | None = None  # read once, when a live budget asks
        self._busy = False
        self._done = False  # spent (a later segment took over) or closed
        # While it waits, nothing reads its stdout: what it writes stays in the pipe, where
        # resume finds it (and a process that floods it blocks, holding nothing of ours).
        child.stdout.idle = True
        # Stopped if it still waits after PARK_AFTER: no CPU, memory or output without a slot.
        # (The timer holds the run weakly: a run dropped is collected, and ends, at once.)
        self._parked = False
        self._park_at: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(
            PARK_AFTER, _park_weakly, weakref.ref(self)
        )
        runner._live.add(self)
        # A LiveRun dropped without close: its process is ended when it is collected.
        self._finalizer = weakref.finalize(self, _end_child, child)

    def _park(self) -> None:
        self._park_at = None
        if not self._done:
            self.child.stdout.pause_reading()
            self._parked = self.child.send_signal(signal.SIGSTOP)

    def _cancel_park(self) -> None:
        if self._park_at is not None:
            self._park_at.cancel()
            self._park_at = None

    @property
    def memory_bytes(self) -> int:
        # Read at its `ran`: blocked on its read (then stopped) since, it holds what it held.
        return 0 if self._done else self._resident

    def private_bytes(self) -> int:
        """Its private memory (``smaps_rollup``), read the first time it is asked for (it
        waits: it holds the same until it is resumed); its resident memory when that file
        cannot be read (a runner without ``CAP_SYS_PTRACE``: not root)."""
        if self._done:
            return 0
        if self._private is None:
            proc = self.child.proc
            measured = proc.private() if proc is not None else None
            # Measured now: what it allocated after its `ran` (only a subverted one does) counts.
            self._private = self._resident if measured is None else measured
        return self._private

    async def resume(self, records: list[protocol.Record]) -> Step:
        if self._done:
            raise RunError("this live run is over (closed, or a later step took it over)")
        if self._busy:
            raise RunError("this live run is being resumed already")
        self._busy = True
        try:
            return await self._resume(records)
        finally:
            self._busy = False

    async def _resume(self, records: list[protocol.Record]) -> Step:
        child = self.child
        problem = mismatch(records, self.calls)
        if problem is not None:
            await self.close()
            raise RunError(f"the live run cannot take these results: {problem}")
        if not child.alive():
            await self.close()
            raise RunError("the live process ended while it waited for results")
        if wrote_while_waiting(child):
            await self.close()
            raise RunError(
                "the live process wrote to its output while it waited for results (a sandbox "
                "that breaks the protocol) and was stopped"
            )
        try:
            async with self.runner.slots.hold(self.tenant) as use:
                self.runner.busy()
                try:
                    step = await self._segment(records)
                finally:
                    self.runner.busy()
        except BaseException:
            await self.close()
            raise
        if step.process is not None:
            step.process.wait_ms = use.waited * 1000
        self._spend()
        return step

    async def _segment(self, records: list[protocol.Record]) -> Step:
        child = self.child
        started = time.monotonic()
        self._cancel_park()
        child.stdout.idle = False
        child.stdout.resume_reading()
        stopped = self._parked

        async def write(data: bytes) -> None:
            # The results go into the pipe first and a parked process is continued after: it
            # wakes once, to read them (continued first, it would wake, block on its read
            # again, and wake a second time for the line). What the pipe cannot take yet is
            # written once the process reads.
            nonlocal stopped
            if stopped:
                stopped = False
                taken = child.stdin.write_now(data)
                child.send_signal(signal.SIGCONT)
                data = data[taken:]
            if data:
                await child.write(data)

        outcome = await conv.segment(
            child.reader,
            write,
            self.script,
            self.server,
            conv.Deadline(self.script.limits.compute_ms),
            protocol.results_line(records),
            self.known + len(records),
        )
        if outcome.unsent:
            raise RunError("the live process ended before it took the results")
        return await self.runner._segment_step(
            child,
            self.script,
            outcome,
            self.server,
            tenant=self.tenant,
            known=self.known + len(records),
            cpu_charged=self.cpu_charged,
            cpu_start=self.cpu_start,
            started=started,
            resumed=True,
        )

    def _spend(self) -> None:
        self._done = True
        self._cancel_park()
        self._finalizer.detach()
        self.runner._live.discard(self)

    async def close(self) -> None:
        if self._done:
            return
        self._spend()
        child = self.child
        with contextlib.suppress(Exception):
            child.kill()
            await child.reap(grace=0)


class Counted(Protocol):
    """A live run as a live budget counts it."""

    run: LiveRun
    memory: int  # as counted: its memory_bytes, or its private_bytes once measured
    measured: bool


def count_private(kept: Iterable[Counted], total: int, budget: int) -> int:
    """Count ``kept`` runs (least recently kept first) at their private memory, each once,
    until ``total`` (what they are counted at together) is within ``budget``; the new total.
    A runner whose ``private_bytes`` fails (a bug) leaves its run counted as it was."""
    for k in kept:
        if total <= budget:
            break
        if k.measured:
            continue
        try:
            private = max(0, int(k.run.private_bytes()))
        except Exception:  # a runner's bug must not take a budget down
            private = k.memory
        total += private - k.memory
        k.memory, k.measured = private, True
    return total


def mismatch(records: list[protocol.Record], calls: list[protocol.Call]) -> str | None:
    """Why ``records`` are not the results of ``calls`` (count, names, arguments), or None."""
    if len(records) != len(calls):
        return f"it waits for {len(calls):,} results and was sent {len(records):,}"
    for i, (record, call) in enumerate(zip(records, calls, strict=True)):
        if record.name != call.name or (
            # The same object (the engine logs a call's arguments as the run sent them).
            record.arguments is not call.arguments
            and protocol.canonical_json(record.arguments) != protocol.canonical_json(call.arguments)
        ):
            return (
                f"result {i + 1} is a record of tools.{record.name}, not of call {i + 1} "
                f"(tools.{call.name}) with its arguments"
            )
    return None


def _park_weakly(ref: weakref.ref[ProcessLive]) -> None:
    live = ref()
    if live is not None:
        live._park()


def _end_child(child: ForkedChild) -> None:
    """End a dropped live run's process now; the fork server reaps it."""
    with contextlib.suppress(Exception):
        child.kill()
        child.close()


def measure_at_ran(
    child: _Measured, cpu_charged: float, started: float
) -> tuple[ProcessStats, int] | None:
    """What a step whose process just wrote ``ran`` cost, read from ``/proc`` without waiting
    for it to exit: CPU beyond ``cpu_charged`` and peak memory, with the memory it holds now
    (resident bytes: a live run's, which it keeps while it waits, stopped); or ``None`` when
    that cannot be read surely of this process (then the caller waits for ``wait4``).

    The reads are of the files the runner opened while the process waited for its script
    (:class:`ProcFiles`), so they are of this process or fail. What the kernel spends
    tearing the process down after ``ran`` (a millisecond or two) is charged to nobody.
    """
    if child.proc is None:
        return None
    cpu = child.proc.cpu_ms()
    memory = child.proc.memory()
    if cpu is None or memory is None:
        return None
    stats = ProcessStats(
        wall_ms=(time.monotonic() - started) * 1000,
        cpu_ms=max(cpu - cpu_charged, 0.0),
        max_rss_bytes=memory[1],
    )
    return stats, memory[0]


async def close_all(lives: weakref.WeakSet[ProcessLive]) -> None:
    """End every live process in ``lives`` (a runner's, at its ``aclose``)."""
    await asyncio.gather(*(live.close() for live in list(lives)), return_exceptions=True)
