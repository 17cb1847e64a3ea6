"""One step's conversation with a confined process, and how a process's end becomes a Step.

Shared by every local runner mode (exec per step, fork server, warm pool): they differ in how
a process comes to be, not in how they talk to it. Nothing the process says is trusted: every
line is bounded and parsed into the expected message, and a process that dies, hangs or
writes garbage becomes a failed step that names the cause.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson

from runner._base import FileMissing, FileReader, ProcessStats, RunError, Step
from sandbox import protocol
from sandbox.protocol import Ran, Script

# A read may ask for at most this much at once; the sandbox asks for 256 KiB pieces.
MAX_READ = 4 * protocol.MiB


def wall_seconds(compute_ms: int) -> float:
    """The wall time a step may take: three times its CPU allowance plus one second."""
    return 3 * compute_ms / 1000 + 1.0


class Deadline:
    """Wall time a step may take (:func:`wall_seconds`).

    Time spent waiting on the host's file reads does not count, so :meth:`pause` extends it.
    """

    def __init__(self, compute_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.allowance = wall_seconds(compute_ms)
        self.at = clock() + self.allowance
        self.expired = False

    @classmethod
    def seconds(cls, seconds: float, clock: Callable[[], float] = time.monotonic) -> Deadline:
        deadline = cls(0, clock)
        deadline.allowance = seconds
        deadline.at = clock() + seconds
        return deadline

    def remaining(self) -> float:
        return self.at - self.clock()

    def extend(self, seconds: float) -> None:
        self.at += seconds


@dataclass
class Outcome:
    """What the conversation saw: a ``ran``, or why there was none."""

    ran: Ran | None = None
    problem: str | None = None  # a protocol fault the process committed
    timed_out: bool = False
    eof: bool = False


class LineReader:
    """Reads bounded lines from a process's stdout."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self.stream = stream

    async def line(self, bound: int, deadline: Deadline) -> bytes | None:
        """The next line (with its newline), ``None`` at end of stream.

        Raises ``TimeoutError`` past the deadline and ``protocol.ProtocolError`` for a line
        over ``bound`` or one cut short by the end of the stream.
        """
        chunks: list[bytes] = []
        size = 0
        while True:
            remaining = deadline.remaining()
            if remaining <= 0:
                raise TimeoutError
            try:
                chunk = await asyncio.wait_for(self.stream.readuntil(b"\n"), remaining)
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

    async def exactly(self, n: int) -> bytes:
        return await self.stream.readexactly(n)


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
    try:
        await write(protocol.encode(script))
    except (BrokenPipeError, ConnectionResetError):
        return Outcome(eof=True)
    bound = ran_bound(script)
    known = {f.id: f for f in script.files}
    while True:
        try:
            line = await reader.line(bound, deadline)
        except TimeoutError:
            return Outcome(timed_out=True)
        except protocol.ProtocolError as e:
            return Outcome(problem=str(e))
        if line is None:
            return Outcome(eof=True)
        try:
            message = protocol.decode(line, ("ran", "read"))
        except protocol.ProtocolError as e:
            return Outcome(problem=str(e))
        if isinstance(message, Ran):
            return Outcome(ran=message)
        started = time.monotonic()
        answer = await _answer_read(message, known, files)
        deadline.extend(time.monotonic() - started)
        try:
            await write(answer)
        except (BrokenPipeError, ConnectionResetError):
            return Outcome(eof=True)


async def _answer_read(
    request: protocol.ReadRequest, known: dict[str, protocol.FileInfo], files: FileReader | None
) -> bytes:
    def missing(why: str) -> bytes:
        return orjson.dumps({"missing": why}) + b"\n"

    info = known.get(request.file)
    if info is None:
        return missing(f"no file {request.file!r} is attached to this script")
    if files is None:
        return missing("this runner was given no file reader")
    length = min(request.len, MAX_READ, max(info.size - request.offset, 0))
    if length == 0:
        return orjson.dumps({"bytes": 0}) + b"\n"
    try:
        data = await files.read(request.file, request.offset, length)
    except FileMissing as e:
        return missing(str(e) or f"the file {request.file!r} is gone")
    data = bytes(data[:length])
    return orjson.dumps({"bytes": len(data)}) + b"\n" + data


_SIGNAL_NAMES: dict[int, str] = {
    signal.SIGSYS: "SIGSYS",
    signal.SIGSEGV: "SIGSEGV",
    signal.SIGABRT: "SIGABRT",
    signal.SIGBUS: "SIGBUS",
    signal.SIGILL: "SIGILL",
    signal.SIGFPE: "SIGFPE",
    signal.SIGKILL: "SIGKILL",
    signal.SIGPROF: "SIGPROF",
    signal.SIGXCPU: "SIGXCPU",
}


def step_from(
    outcome: Outcome,
    script: Script,
    process: ProcessStats,
    *,
    term_signal: int | None,
    exit_code: int | None,
    killed_by_us: bool,
    stderr_tail: str = "",
) -> Step:
    """Turn how the conversation and the process ended into a Step."""
    limits = script.limits
    if outcome.ran is not None:
        return Step.from_ran(outcome.ran, process)
    compute = protocol.limit_message(
        "compute_ms", f"the script used its {limits.compute_ms:,} ms of CPU in one run"
    )
    if term_signal in (signal.SIGPROF, signal.SIGXCPU) or (
        term_signal == signal.SIGKILL and process.cpu_ms >= limits.compute_ms
    ):
        return Step.failure("LimitError", compute, limit="compute_ms", process=process)
    if outcome.timed_out:
        message = protocol.limit_message(
            "compute_ms",
            f"the run passed its deadline of {wall_seconds(limits.compute_ms):,.1f} s of wall "
            "time (three times its CPU allowance plus one second) and was stopped",
        )
        return Step.failure("LimitError", message, limit="compute_ms", process=process)
    if term_signal == signal.SIGSYS:
        return Step.failure(
            "SandboxViolation",
            "the script's process made a system call the sandbox forbids and was stopped",
            process=process,
        )
    if "MemoryError" in stderr_tail or (
        term_signal == signal.SIGKILL and not killed_by_us and process.max_rss_bytes
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
    if term_signal is not None:
        name = _SIGNAL_NAMES.get(term_signal, f"signal {term_signal}")
        return Step.failure(
            "SandboxCrash",
            f"the script's process crashed ({name}) before it reported how the run ended"
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
