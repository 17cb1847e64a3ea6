"""One step's conversation with a confined process, and how a process's end becomes a Step.

Shared by every local runner mode (exec per step, fork server, warm pool): they differ in how
a process comes to be, not in how they talk to it. Nothing the process says is trusted: every
line is bounded and parsed into the expected message, and a process that dies, hangs or
writes garbage becomes a failed step that names the cause.
"""

from __future__ import annotations

import asyncio
import math
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from runner._base import FileMissing, FileReader, ProcessStats, RunError, Step, bounded
from sandbox import protocol
from sandbox.protocol import Ran, Script

# A read may ask for at most this much at once; the sandbox asks for 256 KiB pieces.
MAX_READ = 4 * protocol.MiB


def wall_seconds(compute_ms: int) -> float:
    """The wall time a step may take: three times its CPU allowance plus one second."""
    return 3 * compute_ms / 1000 + 1.0


def step_compute_ms(script: Script) -> int:
    """The CPU a step that sends ``script`` may use: one ``compute_ms``, or in version 2 one
    for each segment its replay may run, since the process re-arms ``compute_ms`` at each
    batch of recorded results it settles (at most one batch a record), as a live run has it
    per segment; at most the process's whole CPU (:data:`protocol.PROCESS_CPU_SECONDS`),
    past which it cannot run anyway."""
    compute_ms = script.limits.compute_ms
    if script.version >= protocol.LIVE_VERSION and script.records:
        most = protocol.PROCESS_CPU_SECONDS * 1000
        compute_ms = min(compute_ms * (len(script.records) + 1), max(most, compute_ms))
    return compute_ms


class Deadline:
    """Wall time a step may take (:func:`wall_seconds`).

    Time spent on file reads counts too: a process cannot buy itself time by asking for
    bytes (the runner serves them from the host's store, which is fast next to the CPU
    allowance it shares this deadline with).
    """

    __slots__ = ("allowance", "at", "clock")

    def __init__(self, compute_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.allowance = wall_seconds(compute_ms)
        self.at = clock() + self.allowance

    @classmethod
    def seconds(cls, seconds: float, clock: Callable[[], float] = time.monotonic) -> Deadline:
        # Made per line a remote runner reads: no second look at the clock.
        deadline = cls.__new__(cls)
        deadline.clock, deadline.allowance = clock, seconds
        deadline.at = clock() + seconds
        return deadline

    @classmethod
    def for_step(cls, script: Script) -> Deadline:
        """The wall time of a step that sends ``script``: that of its
        :func:`step_compute_ms`."""
        return cls(step_compute_ms(script))

    def remaining(self) -> float:
        return self.at - self.clock()

    def restarted(self) -> bool:
        """Whether this deadline, met now, was met while the host itself did not run (now
        is more than :data:`STALLED_S` past it: its timer ran that late): the time was not
        the waited-for's, so the deadline starts again, a whole allowance from now."""
        if -self.remaining() > STALLED_S:
            self.at = self.clock() + self.allowance
            return True
        return False


@dataclass
class Outcome:
    """What the conversation saw: a ``ran`` the runner accepts, or why there was none.

    ``problem`` (a protocol fault), ``over_reading`` (reads past ``file_bytes`` after a
    refusal) and ``timed_out`` mean the runner ended the process; ``file_bytes`` is what the
    runner served it, whatever the process says.
    """

    ran: Ran | None = None
    problem: str | None = None
    over_reading: str | None = None
    timed_out: bool = False
    file_bytes: int = 0
    # The process was gone before it took the first line of the segment (its stdin closed).
    unsent: bool = False

    @property
    def stopped(self) -> bool:
        """True when the runner ended the process rather than the process itself."""
        return self.timed_out or self.problem is not None or self.over_reading is not None


class LineReader:
    """Reads bounded lines from a process's stdout."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self.stream = stream

    def buffered(self) -> int:
        """Bytes read from the process and not yet taken as a line."""
        return len(self.stream._buffer)  # type: ignore[attr-defined]

    async def line(self, bound: int, deadline: Deadline, *, scoped: bool = False) -> bytes | None:
        """The next line (with its newline), ``None`` at end of stream.

        Raises ``TimeoutError`` past the deadline and ``protocol.ProtocolError`` for a line
        over ``bound`` or one cut short by the end of the stream. ``scoped``: the caller
        awaits this inside a timeout scope of ``deadline`` already (no timer of its own).
        """
        chunks: list[bytes] = []
        size = 0
        while True:
            remaining = deadline.remaining()
            if remaining <= 0:
                raise TimeoutError
            try:
                # A timeout scope, not wait_for: no task of its own for every line.
                async with asyncio.timeout(None if scoped else remaining):
                    chunk = await self.stream.readuntil(b"\n")
            except asyncio.IncompleteReadError as e:
                if not e.partial and not chunks:
                    return None
                raise protocol.ProtocolError(
                    f"the process ended in the middle of a line ({size + len(e.partial):,} "
                    "bytes without a newline)"
                ) from None
            except asyncio.LimitOverrunError as e:
                # Take what is buffered and keep looking for the newline, within the bound.
                chunk = await self.stream.readexactly(e.consumed)
                size += len(chunk)
                if size > bound:
                    raise protocol.ProtocolError(_over(size, bound)) from None
                chunks.append(chunk)
                continue
            size += len(chunk)
            if size > bound:
                raise protocol.ProtocolError(_over(size, bound))
            chunks.append(chunk)
            return b"".join(chunks)


def _over(size: int, bound: int) -> str:
    return f"a line over the bound of {bound:,} bytes (at least {size:,})"


def ran_bound(script: Script) -> int:
    """The longest ``ran`` line a process may write for ``script``."""
    return script.limits.step_arguments * 2 + protocol.RAN_OVERHEAD


async def await_ready(reader: LineReader, deadline: Deadline) -> protocol.Ready:
    """Read the process's first line. Raises :class:`RunError` if it cannot run scripts.

    ``unconfined`` raises :class:`Unconfined` so the runner can report it as a failed step.
    """
    line = await reader.line(protocol.MAX_SMALL_LINE, deadline)
    if line is None:
        raise RunError("the sandbox process ended before it said it was ready")
    message = protocol.decode(line, ("ready", "unconfined"))
    if isinstance(message, protocol.Unconfined):
        raise UnconfinedError(message.error)
    return message


class UnconfinedError(Exception):
    """The process could not lock itself down and will not run a script."""


def check_version(ready: protocol.Ready, script: Script) -> None:
    why = protocol.unfit(script, ready.oldest, ready.version, ready.languages)
    if why is not None:
        raise RunError(f"the sandbox cannot run this step: {why}")


async def converse(
    reader: LineReader,
    write: Callable[[bytes], Awaitable[None]],
    script: Script,
    files: FileReader | None,
    deadline: Deadline,
) -> Outcome:
    """Send the script, answer file reads, and read ``ran``.

    Never raises for anything the process does; ``RunError`` only when the host's file
    store fails (the step is retried later).
    """
    server = FileServer(script, files)
    return await segment(
        reader, write, script, server, deadline, protocol.encode(script), len(script.records)
    )


async def segment(
    reader: LineReader,
    write: Callable[[bytes], Awaitable[None]],
    script: Script,
    server: FileServer,
    deadline: Deadline,
    opening: bytes,
    known: int,
) -> Outcome:
    """One segment of a run: send ``opening`` (the script, or a live run's results), answer
    file reads from ``server`` (one per run: ``file_bytes`` counts over the run), read
    ``ran`` and check it as the report of a run that holds ``known`` records. As
    :func:`converse`; ``file_bytes`` of the outcome is what this segment was served."""
    before = server.served
    # One timeout scope for the whole segment (one timer, not one per write and per line):
    # writes wait for the process to read, so one that stops reading meets the deadline, and
    # the wait for the host's store counts too, so one that never answers meets it like a
    # process that never does.
    try:
        async with Within(deadline):
            outcome = await _exchange(reader, write, script, server, deadline, opening, known)
    except TimeoutError:
        outcome = Outcome(timed_out=True)
    outcome.file_bytes = server.served - before
    return outcome


# A deadline whose timer runs this many seconds late was met while the host itself did not
# run (stopped, its virtual machine paused, its laptop asleep), not while it watched.
STALLED_S = 1.0


# asyncio's Timeout, whose expiry it looks at first: a scope of its own wrapped around one,
# with a timer of its own, cost each step 2 us more than asyncio.timeout.
class Within(asyncio.Timeout):  # type: ignore[misc]
    """``async with Within(deadline):`` raises ``TimeoutError`` out of its body once
    ``deadline`` passes, as ``asyncio.timeout`` does. A timer that runs more than
    :data:`STALLED_S` late found the host stopped while what it waits for ran on (a
    process, a checker, a tool's thread): the time was not theirs, so the deadline starts
    again (what bounds their CPU bounds it still), and what they finished meanwhile is
    read, not taken for a run past its deadline."""

    def __init__(self, deadline: Deadline) -> None:
        self.deadline = deadline
        super().__init__(asyncio.get_running_loop().time() + max(deadline.remaining(), 0))

    def _on_timeout(self) -> None:  # asyncio.Timeout's, run by its timer
        if self.deadline.restarted():
            self.reschedule(asyncio.get_running_loop().time() + self.deadline.allowance)
        else:
            super()._on_timeout()  # type: ignore[misc]


def within(seconds: float | None) -> asyncio.Timeout:
    """``async with within(seconds):``, a :class:`Within` of a deadline ``seconds`` from
    now; ``None``: no bound, as ``asyncio.timeout(None)``."""
    return asyncio.timeout(None) if seconds is None else Within(Deadline.seconds(seconds))


async def _exchange(
    reader: LineReader,
    write: Callable[[bytes], Awaitable[None]],
    script: Script,
    server: FileServer,
    deadline: Deadline,
    opening: bytes,
    known: int,
) -> Outcome:
    bound = ran_bound(script)
    try:
        await write(opening)
    except (BrokenPipeError, ConnectionResetError):
        return Outcome(unsent=True)
    try:
        while True:
            line = await reader.line(bound, deadline, scoped=True)
            if line is None:
                return Outcome()
            message = protocol.decode(line, ("ran", "read"))
            if isinstance(message, Ran):
                problem = check_ran(message, script, known)
                return Outcome(ran=message) if problem is None else Outcome(problem=problem)
            await write(await server.answer(message))
    except (BrokenPipeError, ConnectionResetError):
        return Outcome()
    except protocol.ProtocolError as e:
        return Outcome(problem=str(e))
    except OverReading as e:
        return Outcome(over_reading=str(e))


class OverReading(Exception):
    """The process asked for file bytes again after a read was refused for ``file_bytes``."""


class FileServer:
    """Answers one step's file reads, within the step's ``file_bytes``.

    It counts the bytes it serves: that count, not the process's own, is what the step read.
    A read that would pass ``file_bytes`` is answered ``missing``, naming the limit. An
    honest sandbox checks the budget before it asks and never gets there, so a process that
    asks again after such a refusal is ended (:class:`OverReading`). A read of a file the
    script was not given, or of no bytes, is a protocol fault (``ProtocolError``): the
    sandbox never asks for one.
    """

    def __init__(self, script: Script, files: FileReader | None) -> None:
        self.known = {f.id: f for f in script.files}
        self.files = files
        self.budget = script.limits.file_bytes
        self.served = 0
        self.refused = False

    async def answer(self, request: protocol.ReadRequest) -> bytes:
        """The answer line (and bytes) for one ``read``."""
        info = self.known.get(request.file)
        if info is None:
            raise protocol.ProtocolError(
                f"no file {bounded(request.file, 'name')!r} is attached to this script"
            )
        if self.refused:
            raise OverReading(
                protocol.limit_message(
                    "file_bytes",
                    f"the run kept asking for file bytes after it was refused at "
                    f"{protocol.size_text(self.budget)}, the most one run may read, and was "
                    "stopped",
                )
            )
        length = min(request.len, MAX_READ, max(info.size - request.offset, 0))
        if length == 0:
            # The sandbox answers an empty read itself; asking for one only spends our time.
            raise protocol.ProtocolError(
                f"a read of no bytes ({request.len:,} at offset {request.offset:,} of "
                f"{bounded(request.file, 'name')!r}, which has {info.size:,})"
            )
        if self.served + length > self.budget:
            self.refused = True
            read, asked = protocol.size_text(self.served), protocol.size_text(length)
            total, bound = protocol.sizes_over(self.served + length, self.budget)
            return missing(
                protocol.limit_message(
                    "file_bytes",
                    f"this run has read {read} of files and asked for {asked} more, {total} in "
                    f"all, over the {bound} one run may read",
                )
            )
        if self.files is None:
            return missing("this runner was given no file reader")
        try:
            data = await self.files.read(request.file, request.offset, length)
        except FileMissing as e:
            return missing(str(e) or f"the file {request.file!r} is gone")
        data = bytes(data[:length])
        self.served += len(data)
        return orjson.dumps({"bytes": len(data)}) + b"\n" + data


def missing(why: str) -> bytes:
    """The answer that refuses a read, saying why."""
    return orjson.dumps({"missing": why}) + b"\n"


# The longest printed text and returned-value text a sandbox sends (characters): the head
# and tail it keeps, and room for the note that says what was cut between them.
PRINTED_BOUND = protocol.PRINTED_HEAD + protocol.PRINTED_TAIL + 256
VALUE_TEXT_BOUND = protocol.VALUE_BOUND + 256
_STATS = ("cpu_ms", "heap_bytes", "results_bytes", "file_bytes")


def check_ran(ran: Ran, script: Script, known: int | None = None) -> str | None:
    """What is wrong with ``ran`` as the report of a run of ``script``, or ``None``.

    ``known`` is how many records the run holds (a live run's grow with each segment; by
    default the script's own).

    The runner's re-check of what the process says: the sandbox enforces each of these
    itself, so a ``ran`` that breaks one comes from a process that lies, and the step fails.
    Tool names, counts and sizes are checked against the script's own tools and limits.
    """
    limits = script.limits
    problem = no_measure("stats", ran.stats, _STATS)
    if problem is not None:
        return f"the process reported {problem}"
    if ran.printed_bytes < 0 or len(ran.printed) > PRINTED_BOUND:
        return (
            f"the process reported {len(ran.printed):,} characters of printed text "
            f"(printed_bytes = {ran.printed_bytes:,}); a run keeps at most {PRINTED_BOUND:,}"
        )
    if ran.value_text is not None and len(ran.value_text) > VALUE_TEXT_BOUND:
        return (
            f"the process reported a returned value's text of {len(ran.value_text):,} "
            f"characters; a run sends at most {VALUE_TEXT_BOUND:,}"
        )
    if "value" in ran.model_fields_set:
        size = _json_size(ran.value)
        if size is None:
            return "the process reported a returned value that is not JSON data"
        if size > protocol.VALUE_BOUND:
            return (
                f"the process reported a returned value of {size:,} bytes of JSON; a run "
                f"sends at most {protocol.VALUE_BOUND:,} (a larger one goes as value_text)"
            )
    if ran.limit is not None and ran.limit.name not in limits.met_by_a_run():
        name = bounded(ran.limit.name, "name")
        return f"the process reported meeting a limit {name!r}, which is no limit of a run"
    ids = {f.id for f in script.files}
    for file_id in ran.shown:
        if file_id not in ids:
            shown = bounded(file_id, "name")
            return f"the process reported showing {shown!r}, which is not a file of this script"
    if len(set(ran.shown)) > limits.shown_files:
        return (
            f"the process reported showing {len(set(ran.shown)):,} files, over "
            f"shown_files = {limits.shown_files:,}"
        )
    if ran.outcome != "calls":
        return None
    tools = set(script.tools)
    for call in ran.calls:
        if call.name not in tools:
            return (
                f"the process reported a call to tools.{bounded(call.name, 'name')}, which is "
                "not a tool of this script"
            )
    count = (len(script.records) if known is None else known) + len(ran.calls)
    if count > limits.calls:
        return f"the process reported {count:,} calls in all, over calls = {limits.calls:,}"
    total = 0
    for call in ran.calls:
        size = _json_size(call.arguments)
        if size is None:
            return (
                f"the process reported a call to tools.{call.name} whose arguments are not "
                "JSON data"
            )
        if size > limits.call_arguments:
            return (
                f"the process reported a call to tools.{call.name} with {size:,} bytes of "
                f"arguments, over call_arguments = {limits.call_arguments:,}"
            )
        total += size
    if total > limits.step_arguments:
        return (
            f"the process reported calls with {total:,} bytes of arguments together, over "
            f"step_arguments = {limits.step_arguments:,}"
        )
    return None


def no_measure(owner: str, measures: object, names: tuple[str, ...]) -> str | None:
    """``"<owner>.<name> = <value>, which is no measure"`` for the first of ``names`` whose
    value in ``measures`` is negative or not finite; ``None`` when each is a measure."""
    for name in names:
        value = getattr(measures, name)
        if not 0 <= value < math.inf:  # NaN fails it too
            return f"{owner}.{name} = {value}, which is no measure"
    return None


def _json_size(value: Any) -> int | None:
    """The size of ``value``'s JSON, or ``None`` when it has none (nested too deeply)."""
    try:
        return len(orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError):
        return None


_SIGNAL_NAMES: dict[int, str] = {
    signal.SIGSYS: "SIGSYS",
    signal.SIGSEGV: "SIGSEGV",
    signal.SIGABRT: "SIGABRT",
    signal.SIGBUS: "SIGBUS",
    signal.SIGILL: "SIGILL",
    signal.SIGFPE: "SIGFPE",
    signal.SIGKILL: "SIGKILL",
    signal.SIGPROF: "SIGPROF",
    signal.SIGVTALRM: "SIGVTALRM",
    signal.SIGXCPU: "SIGXCPU",
}


# What CPython, and Rust's allocator (pydantic-core's, orjson's: they abort where an
# allocation fails), write to stderr before they abort, out of memory past recovery.
_GAVE_UP = ("Cannot recover from MemoryErrors", "memory allocation of ")


# How far below what was left of `total_compute_ms` the runner may read a replay's CPU when
# the timer for that ended it: a running process's CPU, as read, lags its CPU timer (90 ms of
# 100 read at a load of 30), and the timer fires at a tick (4 ms at 250 Hz).
_LAG_SHARE = 0.1
_TICK_MS = 12.0


def _total_ended(
    limits: protocol.Limits, run_cpu_ms: float | None, segment_used_ms: float | None
) -> bool:
    """Whether the CPU timer that ended a run was armed for what was left of
    ``total_compute_ms`` rather than for ``compute_ms`` (see ``Limits.segment_ms``).

    ``segment_used_ms``: the run's CPU when its last segment began, when the runner knows
    it (read while the process waited, so exact): then the process armed its timer for the
    total exactly when that left less than ``compute_ms``. Otherwise (a replay, whose
    segments begin inside the process) it did so for every segment when what was left is
    less than ``compute_ms``, and else ended on the total when the run's CPU reached it
    (within what a reading lags)."""
    left = limits.compute_left_ms
    if left is None:
        return False
    if segment_used_ms is not None:
        return left - segment_used_ms < limits.compute_ms
    if left < limits.compute_ms:
        return True
    return run_cpu_ms is not None and run_cpu_ms >= left * (1 - _LAG_SHARE) - _TICK_MS


def step_from(
    outcome: Outcome,
    script: Script,
    process: ProcessStats,
    *,
    run_cpu_ms: float | None = None,
    segment_used_ms: float | None = None,
    term_signal: int | None,
    exit_code: int | None,
    killed_by_us: bool,
    stderr_tail: str = "",
    resumed: bool = False,
) -> Step:
    """Turn how the conversation and the process ended into a Step.

    ``resumed``: the segment of a live run after its results (``ProcessLive.resume``). A
    process that ended in one without saying how, for no cause that is surely the script's
    (a limit it met, a forbidden call, a broken protocol), raises :class:`RunError`
    instead of failing the script: killed from outside (the OOM killer, a person) or
    crashed, it was a cache of the log, and the step replays in a new process, where a
    cause of the script's own comes again and ends it there. ``run_cpu_ms``: the CPU the
    process used from its script on, and ``segment_used_ms`` what it had used when its last
    segment began (None when the runner cannot know: a replay), by which a CPU timer that
    ended it is told to be ``total_compute_ms``'s rather than ``compute_ms``'s."""
    limits = script.limits
    process.file_bytes = outcome.file_bytes
    if outcome.ran is not None:
        return Step.from_ran(outcome.ran, process)
    if outcome.over_reading is not None:
        return Step.failure("LimitError", outcome.over_reading, limit="file_bytes", process=process)
    if term_signal in (signal.SIGPROF, signal.SIGVTALRM, signal.SIGXCPU) or (
        term_signal == signal.SIGKILL and process.cpu_ms >= limits.compute_ms
    ):
        total = _total_ended(limits, run_cpu_ms, segment_used_ms)
        name, message = protocol.cpu_spent(limits, script.version, total)
        return Step.failure("LimitError", message, limit=name, process=process)
    if outcome.timed_out:
        message = protocol.limit_message(
            "compute_ms",
            f"the run passed its deadline of wall time ({wall_seconds(limits.compute_ms):,.1f} "
            "s, three times its CPU allowance plus one second, for each segment it may run) "
            "and was stopped",
        )
        return Step.failure("LimitError", message, limit="compute_ms", process=process)
    if term_signal == signal.SIGSYS and any(said in stderr_tail for said in _GAVE_UP):
        # CPython aborts when it cannot even raise MemoryError (Rust code, when an
        # allocation fails), and abort's tgkill is one of the calls the filter kills: the
        # heap ran out (only the process writes fd 2).
        return Step.failure(
            "LimitError",
            protocol.limit_message("memory", "the script's heap ran out"),
            limit="memory",
            process=process,
        )
    if term_signal == signal.SIGSYS:
        return Step.failure(
            "SandboxViolation",
            "the script's process made a system call the sandbox forbids and was stopped",
            process=process,
        )
    if "MemoryError" in stderr_tail or (
        term_signal == signal.SIGKILL and not killed_by_us and process.max_rss_bytes and not resumed
    ):
        message = protocol.limit_message(
            "memory",
            "the script's process ran out of memory (its heap limit is "
            f"{protocol.size_text(protocol.process_heap(limits.memory))} or more)",
        )
        return Step.failure("LimitError", message, limit="memory", process=process)
    if outcome.problem is not None:
        return Step.failure(
            "ProtocolError",
            f"the sandbox process broke the protocol and was stopped: {outcome.problem}",
            process=process,
        )
    if resumed:
        how = ""
        if term_signal is not None:
            how = f" by {_SIGNAL_NAMES.get(term_signal, f'signal {term_signal}')}"
        elif exit_code is not None:
            how = f" with exit code {exit_code}"
        raise RunError(
            f"the live process ended{how} during its segment, before it reported how it went"
            + _tail(stderr_tail)
        )
    if term_signal is not None:
        name = _SIGNAL_NAMES.get(term_signal, f"signal {term_signal}")
        why = ""
        if term_signal == signal.SIGSEGV:
            # The interpreters bound their own recursion; C code that recurses on its own
            # (a chain of iterators, map(f, map(f, ...)) built in a loop) can still overflow.
            why = (
                "; most likely its C stack overflowed: something nested many thousands deep "
                "(iterators built on iterators in a loop, as map(f, map(f, ...))): nest less"
            )
        return Step.failure(
            "SandboxCrash",
            f"the script's process crashed ({name}) before it reported how the run ended"
            + why
            + _tail(stderr_tail),
            process=process,
        )
    return Step.failure(
        "SandboxCrash",
        f"the script's process exited (code {exit_code}) without reporting how the run ended"
        + _tail(stderr_tail),
        process=process,
    )


def _tail(stderr_tail: str) -> str:
    last = [line for line in stderr_tail.strip().splitlines() if line.strip()]
    return f": {last[-1][:300]}" if last else ""
