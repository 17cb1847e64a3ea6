"""What every language's type check shares: what a check found (:class:`Checked`), the
message the model reads when a script is refused, and running a checker as a bounded
subprocess of the host.

A checker runs with no environment, in a fresh temporary directory, under rlimits (data
segment, CPU, no files written, no core) and a wall-clock timeout, on a script the engine
has already bounded (``engine._source``: 256 KiB), and its output is read up to a bound. One
checker per core runs at a time (:class:`Turns`).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import math
import os
import signal
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from engine._errors import CodeModeError, ConfigError
from engine._limits import SECONDS, is_seconds, parse_size
from runner import within

MiB = 1024 * 1024

# The bounds of one check: wall clock, CPU, the checker's data segment (its heap), output.
TIMEOUT_S = 5.0
MEMORY_BYTES = 512 * MiB
OUTPUT_BYTES = 1 * MiB
# How long a cancelled check waits for its killed checker to be reaped.
REAP_WAIT = 5.0
# At most these many problems are shown to the model; the rest are counted.
SHOWN_PROBLEMS = 8

# A checker the kernel's fault ended, with no error reported: it met its data rlimit where a
# failed allocation could not be reported (Go under load; ty at its start), the memory bound.
FAULTED = frozenset({-signal.SIGSEGV, -signal.SIGBUS})

# Said to the model, which cannot change the host's settings: the host may.
_TURN_OFF = 'the host may turn the check off with type_check = "off"'


class CompilerMissing(CodeModeError):
    """No checker to check scripts with; the message says where it was looked for and how
    to install it."""


@dataclass(frozen=True)
class TypeProblem:
    """One thing the checker found wrong with a call to a tool, at the script's line."""

    line: int
    column: int
    code: int | str
    message: str


@dataclass
class Checked:
    """What a check found, and what it cost.

    ``problems`` empty and ``failure`` None: the script may run. ``failure`` says why the
    check itself could not finish (time, memory, a crash); the script does not run then.
    """

    problems: list[TypeProblem] = field(default_factory=list)
    failure: str | None = None
    ms: float = 0.0
    # For the host: the checker does not work (it failed on an empty script too), what it
    # said and what to do; ``failure`` then tells the model the script is not at fault.
    broken: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems and self.failure is None

    def message(self) -> str:
        """The error the model reads when the script is refused."""
        if self.failure is not None:
            return self.failure
        shown = self.problems[:SHOWN_PROBLEMS]
        lines = [
            "the script does not match the tools' declarations, so it did not run and no "
            "call was made:"
        ]
        lines += [f"  line {p.line}: {p.message}" for p in shown]
        more = len(self.problems) - len(shown)
        if more:
            lines.append(f"  ... and {more} more")
        lines.append("Fix the calls and run the script again.")
        return "\n".join(lines)


def shown_explained(
    problems: list[TypeProblem], explain: Callable[[TypeProblem], str]
) -> list[TypeProblem]:
    """``problems``, the message of each the model is shown (the first
    :data:`SHOWN_PROBLEMS`) as ``explain`` says it. The rest are only counted, and explaining
    one may cost a scan of every tool (the closest names to one that does not exist): a
    script of thousands of such calls held the host's event loop for minutes."""
    shown = [replace(p, message=explain(p)) for p in problems[:SHOWN_PROBLEMS]]
    return shown + problems[SHOWN_PROBLEMS:]


def cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class BoundedChecker(abc.ABC):
    """Checks scripts with one checker binary at ``path`` (default: :meth:`find`), within
    ``timeout`` seconds (wall and CPU) and ``memory`` bytes of checker heap per check; raises
    :class:`CompilerMissing` when ``path`` is not an executable file.

    One checker per core runs at a time on each event loop: a burst of starts (a hundred
    scripts at once) would otherwise fork a hundred checkers that starve the host's event
    loop and each other past their timeout. A check's time bound starts when its turn
    comes. A language's checker writes :meth:`find` and :meth:`_check`.
    """

    language: str
    # The checker, as the host is told to give it.
    program: str
    # What the host does about a checker :meth:`find` found that does not work: where to
    # point it (its environment variable, which only find() reads).
    repair: str

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        timeout: float = TIMEOUT_S,
        memory: int | str = MEMORY_BYTES,
    ) -> None:
        self.memory = parse_size(memory, what=f"{type(self).__name__}(memory=...)")
        if not is_seconds(timeout):
            # Found at the first check, it failed every script (a traceback for NaN or "5",
            # the model told to simplify its script for 0).
            raise ConfigError(
                f"{type(self).__name__}(timeout=...) = {timeout!r:.80} must be {SECONDS}"
            )
        self.given = path is not None  # by the host, not found: its repair is the host's own
        self.path = Path(path) if path is not None else self.find()
        if not (self.path.is_file() and os.access(self.path, os.X_OK)):
            # Found at the first check, it failed every script, telling the model to write
            # them more simply.
            raise CompilerMissing(
                f"{type(self).__name__}({str(self.path)!r}) is not an executable file; give "
                "the checker's path, or none to find the installed one"
            )
        self.timeout = timeout
        # A semaphore belongs to the loop it first made a check wait on, and an engine
        # serves one asyncio.run after another: one shared by all loops failed the second
        # run's burst of checks ("... is bound to a different event loop").
        self._turns = weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]()

    @staticmethod
    @abc.abstractmethod
    def find() -> Path:
        """Where the checker is; :class:`CompilerMissing` saying how to install it."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r}, timeout={self.timeout:g})"

    async def check(self, code: str, declarations: str) -> Checked:
        """Check the body ``code`` against the language's check ``declarations``.

        Never raises for anything in ``code``: a check that cannot finish is a ``failure``.
        One that failed with no bound met is tried again on an empty script: failed there
        too, the checker does not work (``broken``), whatever the script.
        """
        loop = asyncio.get_running_loop()
        turns = self._turns.get(loop)
        if turns is None:
            turns = self._turns[loop] = asyncio.Semaphore(cores())
        async with turns:
            started = time.monotonic()
            checked = await self._check(code, declarations)
            if isinstance(checked.failure, Crash):
                # A checker that cannot start, or ends at once without its output, failed
                # every script telling the model to write it more simply: the host's to fix.
                tried = await self._check("", declarations)
                if isinstance(tried.failure, Crash):
                    repair = (
                        f"give {type(self).__name__} the path of {self.program} (or none, to "
                        "find the installed one)"
                        if self.given
                        else self.repair
                    )
                    checked.broken = (
                        f"the type checker {self.path} does not work: it failed on an empty "
                        f"{self.language} script too ({tried.failure.said}), so every script "
                        f'is refused and none runs; {repair}, or set type_check = "off"'
                    )
                    checked.failure = BROKEN
            checked.ms = (time.monotonic() - started) * 1000
            return checked

    @abc.abstractmethod
    async def _check(self, code: str, declarations: str) -> Checked:
        """The check itself, in the caller's turn (:meth:`check` times it)."""


@dataclass
class Ran:
    """A checker's run: its output (up to the bound), exit status, and whether the output
    was cut at the bound."""

    output: str
    status: int
    cut: bool


def timed_out(timeout: float) -> str:
    return (
        f"the type check did not finish within {timeout:g} s, the most it may take; simplify "
        f"the script's types (or leave them out) and flatten what it nests thousands deep, or "
        f"{_TURN_OFF}"
    )


def out_of_cpu(timeout: float) -> str:
    return (
        f"the type check used more than {timeout:g} s of CPU, the most it may use; simplify "
        f"the script's types (or leave them out) and flatten what it nests thousands deep, or "
        f"{_TURN_OFF}"
    )


def out_of_memory(memory: int) -> str:
    return (
        f"the type check needed more than {memory // MiB} MiB of memory, the most it may "
        f"use; simplify the script's types (or leave them out), or {_TURN_OFF}"
    )


class Crash(str):
    """The failure of a checker that ended with no bound met and without its report (the
    message the model reads); ``said`` is the checker's own first line, or its status."""

    said: str


def crashed(first: str) -> Crash:
    failure = Crash(
        f"the type checker failed on this script ({first}), so it did not run: write it more "
        "simply (an expression nested very deep, a huge literal), or the host may set "
        'type_check = "off"'
    )
    failure.said = first
    return failure


# Said to the model when the checker fails on every script: no rewrite of it can help.
BROKEN = (
    "the host's type checker is not working (it fails on every script, an empty one too), so "
    "the script did not run and no call was made; this is no fault of the script, and "
    "writing it again will not help: the host must repair its type check"
)


async def run_bounded(
    argv: list[str],
    folder: Path,
    *,
    timeout: float,
    memory: int,
    env: dict[str, str] | None = None,
) -> Ran | None:
    """Run the checker ``argv`` in ``folder`` within the bounds, with ``env`` as its whole
    environment (default: none); None when it took longer than ``timeout`` seconds of wall
    clock (it is killed)."""
    # The shell sets the bounds, then becomes the checker. (A preexec_fn would do the same,
    # but it makes Python fork instead of vfork: twice the cost of the check.)
    confine = (
        f"ulimit -d {memory // 1024} && ulimit -t {max(1, math.ceil(timeout))}"
        ' && ulimit -f 0 && ulimit -c 0 && exec "$@"'
    )
    process = await asyncio.create_subprocess_exec(
        "/bin/sh",
        "-c",
        confine,
        "sh",
        *argv,
        cwd=folder,
        env=env or {},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    assert process.stdout is not None
    # Killed through a pidfd, not Process.kill: that reaps a checker which has ended
    # (Popen.poll), and asyncio's child watcher, finding it gone, reports 255 for it
    # ("Unknown child process pid N, will report returncode 255").
    try:
        pidfd: int | None = os.pidfd_open(process.pid)
    except ProcessLookupError:  # ended and reaped already: nothing to kill
        pidfd = None
    except OSError:  # a kernel without pidfds, or a seccomp profile that refuses them
        pidfd = -1

    def kill() -> None:
        if process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            if pidfd == -1:
                process.kill()  # by its pid, as before pidfds
            elif pidfd is not None:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)

    chunks: list[bytes] = []
    size = 0
    cut = False

    async def read() -> None:
        nonlocal size, cut
        assert process.stdout is not None
        while chunk := await process.stdout.read(64 * 1024):
            if size + len(chunk) > OUTPUT_BYTES:
                cut = True  # enough to report; the rest is more of the same
                kill()
                break
            chunks.append(chunk)
            size += len(chunk)

    try:
        # Not asyncio.timeout: a host stopped while the checker ran on (SIGSTOP, a paused
        # virtual machine) would fail the script's start for good, its types blamed.
        async with within(timeout):
            await read()
        async with within(timeout):
            status = await process.wait()
    except TimeoutError:
        kill()
        await process.wait()
        return None
    except BaseException:
        # Cancelled (the host let the script go): a checker left with nobody reading its
        # output blocks on the full pipe for good, so it ends with the check (unless it
        # already has), and is reaped on this loop: left, its transport outlived a loop that
        # closed next ("Event loop is closed" when it was collected).
        kill()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(REAP_WAIT):
                await process.wait()
        raise
    finally:
        if pidfd is not None and pidfd >= 0:
            os.close(pidfd)
    return Ran(b"".join(chunks).decode("utf-8", "replace"), status, cut)
