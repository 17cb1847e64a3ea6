"""The runner interface: take one step of a script, return where it ended.

A runner keeps nothing between steps, so it can be a local process, another machine, or a
service. The engine decides how many steps run at once, reads each step from the session log
and checks every call a step asks for.
"""

from __future__ import annotations

import abc
import errno
import os
import shutil
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ConfigDict, Field

from sandbox.protocol import (
    ERROR_MESSAGE_BOUND,
    ERROR_NAME_BOUND,
    LANGUAGES,
    LimitMet,
    Ran,
    Record,
    Script,
    ScriptError,
)

# The interpreter's arguments that start the sandbox, before its own: what isolated mode
# (-I) does but ignoring the environment (no user site-packages, not the working directory on
# the path), with SANDBOX_ENV as the whole environment, so the one variable it sets is read.
SANDBOX_FLAGS = ("-s", "-P")
SANDBOX_ARGS = (*SANDBOX_FLAGS, "-m", "sandbox")
# The sandbox's whole environment. String hashing is not randomised per process, so a
# Python script that iterates a set of strings makes its calls in the same order in every
# process, as its replays must (no secret: any process may know it).
SANDBOX_ENV = {"PYTHONHASHSEED": "0"}

# The longest tenant name (in characters) a step is run for: what ``CodeMode.run_code`` takes
# and what a runner service takes on the wire, one bound, so no service refuses a step the
# engine accepted.
MAX_TENANT = 256

# The longest string of each kind a step may carry from the process (in characters). A
# process is not trusted: whatever it says is cut to these before anything stores, logs or
# returns it (see :func:`bounded`). The sandbox itself keeps within them.
TEXT_BOUNDS = {
    "name": ERROR_NAME_BOUND,  # an error's or a limit's name
    "message": ERROR_MESSAGE_BOUND,  # an error's or a limit's message
    "line": 300,  # one line of the script quoted with an error
}
# How many of the script's lines an error may quote.
MAX_ERROR_LINES = 8


def bounded(text: str, kind: str) -> str:
    """``text`` within the bound for its ``kind``: the middle cut out, with a note."""
    bound = TEXT_BOUNDS[kind]
    if len(text) <= bound:
        return text
    half = bound // 2
    return f"{text[:half]}[... {len(text) - 2 * half:,} characters cut ...]{text[-half:]}"


class RunError(Exception):
    """The runner cannot take this step now (down, busy, of another version).

    Not a script failure: the engine puts the step back on its queue and tries it again
    later. A script that fails is a failed :class:`Step`, never a ``RunError``.
    ``permanent`` says waiting will not help (every service refused this host's token, say):
    the engine gives up at once and says why, instead of retrying until its queue timeout.
    """

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


# Why exec() refuses a program for good: it is not there, may not be run, or is no program.
# Anything else (no memory, too many processes or files) may pass.
_NEVER_STARTS = frozenset(
    {
        errno.ENOENT,
        errno.EACCES,
        errno.EPERM,
        errno.ENOEXEC,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.ELOOP,
        errno.ENAMETOOLONG,
    }
)
# What to do about an interpreter that cannot run the sandbox.
PYTHON_FIX = (
    "give the runner an interpreter that has this project installed "
    "(ProcessRunner(python=...), `codemode runner serve --python`)"
)


def sandbox_python(python: str) -> str:
    """``python`` as an absolute path to an executable file (a bare name looked up on this
    process's ``PATH``), as a runner starts it: from ``/``, with the sandbox's environment,
    where a relative path or a bare name would name another file or none. Raises
    ValueError naming the path."""
    found = shutil.which(python) if python else None
    if found is None:
        raise ValueError(
            f"python {python!r} is not an executable file (nor a program on PATH); {PYTHON_FIX}"
        )
    return os.path.abspath(found)


def not_started(what: str, error: OSError) -> RunError:
    """The error of a sandbox interpreter (``what``: the fork server, a sandbox process) that
    could not be started: permanent when exec() refused the program itself, since waiting
    will not help; else the step can be tried again."""
    if error.errno in _NEVER_STARTS:
        return RunError(f"could not start {what}: {error}; {PYTHON_FIX}", permanent=True)
    return RunError(f"could not start {what}: {error}")


def ended_at_start(what: str, detail: str, exit_code: int | None) -> RunError:
    """The error of ``what`` that never got ready (``detail`` says how). One that exited on
    its own with a failure code (an interpreter that cannot import the sandbox, say) will
    do so again: permanent. One killed by a signal, still running, or too slow may not."""
    if exit_code is not None and exit_code > 0:
        return RunError(
            f"{what} did not start: {detail} (it exited with code {exit_code}); {PYTHON_FIX}",
            permanent=True,
        )
    return RunError(f"{what} did not start: {detail}")


def check_seconds(name: str, value: float, *, zero: bool = False) -> None:
    """Raise ValueError naming ``name`` unless ``value`` is a number of seconds above zero
    (``zero``: or zero); infinity is one (never)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (value >= 0 if zero else value > 0)
    ):
        kind = "zero or more" if zero else "a positive number of"
        raise ValueError(f"{name} must be {kind} seconds, not {value!r}")


def check_count(name: str, value: int, least: int = 1) -> None:
    """Raise ValueError naming ``name`` unless ``value`` is a whole number of ``least`` or
    more (not a bool, not 2.5: a fraction of a slot or a process was taken as a count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be a whole number, at least {least}, not {value!r}")


def closed_runner(what: str = "this runner") -> RunError:
    """The error of a step asked of a runner after its ``aclose()``: permanent, since a closed
    runner takes no step again (an engine's ``aclose()`` closes the runner it was given)."""
    return RunError(
        f"{what} is closed (an engine's aclose() closes its runner: give each engine its own)",
        permanent=True,
    )


class FileMissing(Exception):
    """A file a script asked for is gone; the script sees an error naming it."""


class FileReader(Protocol):
    """Reads a script's file bytes for its runner. The process never sees where they live."""

    async def read(self, file_id: str, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes of ``file_id`` from ``offset``; fewer only at the end.

        Raises :class:`FileMissing` when the file is gone, and ``RunError`` when the store
        fails (the step is retried later).
        """
        ...


@dataclass
class ProcessStats:
    """What the runner measured of the process that ran the step (zero where unknown).

    The engine charges a script's budgets from these, never from what the process says
    about itself: ``cpu_ms`` is the process's CPU time from ``wait4``, ``file_bytes`` the
    bytes of files the runner served it.
    """

    wall_ms: float = 0.0
    cpu_ms: float = 0.0
    file_bytes: int = 0
    max_rss_bytes: int = 0
    wait_ms: float = 0.0
    exit_status: int | None = None


class LiveRun(abc.ABC):
    """A confined process that stopped at ``ran`` with outcome ``calls`` and waits, alive,
    for the records of exactly those calls (a live step). Owned by whoever got it from a
    :class:`Step`; it is a cache of the log, never the only copy of anything.

    ``known`` is how many records the run holds (given at the start and answered since);
    ``waiting`` is how many calls of the last segment it waits for.
    """

    known: int
    waiting: int

    @property
    @abc.abstractmethod
    def memory_bytes(self) -> int:
        """What the process holds now (its resident memory), for a live budget: quick to
        know, and more than :meth:`private_bytes` for any process that shares pages."""

    def private_bytes(self) -> int:
        """What ending the process would give back: its private memory, without the pages it
        shares (with the fork server it was forked from, above all). It may take a fraction
        of a millisecond, so a live budget asks only when the :attr:`memory_bytes` of what it
        keeps pass it. Default: :attr:`memory_bytes`."""
        return self.memory_bytes

    @abc.abstractmethod
    async def resume(self, records: list[Record]) -> Step:
        """Send exactly ``waiting`` records (call order); the same run goes on from where it
        stopped. Returns the next segment's Step (whose ``live`` may be set again: this
        object is then spent). Raises :class:`RunError` when the process is gone or cannot
        go on (the engine then replays from the log); the process is ended in that case.
        """

    @abc.abstractmethod
    async def close(self) -> None:
        """End the process (idempotent, never raises); nothing is left running after it."""


class Step(Ran):
    """What the runner reports of one step: the process's ``ran`` plus what it measured.

    A step the process could not report itself (it died, hung, wrote garbage, lied) is a
    failed step whose error names the cause, built by the runner. Whether the script
    finished, failed or goes on is the engine's call, not the runner's. ``live`` is set when
    the step stopped on calls and its process waits for their results (``run(live=True)``);
    it is never serialized.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    process: ProcessStats | None = None
    live: Any = Field(default=None, exclude=True)  # LiveRun | None (pydantic cannot check it)

    @classmethod
    def from_ran(cls, ran: Ran, process: ProcessStats | None = None) -> Step:
        # What model_construct(**dict(ran), process=..., live=None) makes, without its work
        # on each field (every field is given): a step of every call passes here (27 -> 3 us).
        step = cls.__new__(cls)
        fields = dict(ran.__dict__)
        fields["process"], fields["live"] = process, None
        object.__setattr__(step, "__dict__", fields)
        object.__setattr__(
            step, "__pydantic_fields_set__", {*ran.model_fields_set, "process", "live"}
        )
        object.__setattr__(step, "__pydantic_extra__", None)
        object.__setattr__(step, "__pydantic_private__", None)
        return step.bounded()

    def bounded(self) -> Step:
        """This step with every string of the process's within :data:`TEXT_BOUNDS`."""
        if self.error is not None:
            self.error = ScriptError(
                name=bounded(self.error.name, "name"),
                message=bounded(self.error.message, "message"),
                lines=[
                    line.model_copy(update={"text": bounded(line.text, "line")})
                    for line in self.error.lines[:MAX_ERROR_LINES]
                ],
            )
        if self.limit is not None:
            self.limit = LimitMet(
                name=bounded(self.limit.name, "name"),
                message=bounded(self.limit.message, "message"),
            )
        return self

    @classmethod
    def failure(
        cls,
        name: str,
        message: str,
        *,
        limit: str | None = None,
        process: ProcessStats | None = None,
    ) -> Step:
        step = cls(
            outcome="failed",
            error=ScriptError(name=name, message=message),
            limit=LimitMet(name=limit, message=message) if limit else None,
            process=process,
        )
        return step.bounded()


class ScriptRunner(abc.ABC):
    """Runs one step of a script.

    ``run`` returns a :class:`Step` for every way a script can end, including failures of
    the process that ran it; it raises :class:`RunError` only when the step could not be
    taken now and should be retried. Implementations are safe to call concurrently.

    The process is not trusted: a runner bounds every line it reads, serves file reads
    only within ``file_bytes``, re-checks the process's ``ran`` against the script it sent
    (``_conversation.check_ran``), and reports in ``Step.process`` what it measured itself
    (the engine charges budgets from that, never from ``ran.stats``).
    """

    languages: tuple[str, ...] = LANGUAGES

    @abc.abstractmethod
    async def run(
        self,
        script: Script,
        files: FileReader | None = None,
        *,
        tenant: str = "default",
        live: bool = False,
    ) -> Step:
        """Run ``script`` once from the start and report where it ended.

        ``tenant`` names who the step is for, so a runner with slots can keep one tenant
        from starving another. With ``live``, a step that stops on calls of a script of
        ``protocol.LIVE_VERSION`` or later may keep its process: ``Step.live`` is then a
        :class:`LiveRun` (``None`` when the runner or its process cannot keep one).
        """

    def warm(self, language: str = LANGUAGES[0]) -> None:  # noqa: B027 - optional hook
        """Begin, in the background on the running loop, what a first step would otherwise
        wait for (a process runner's fork server and warm pool, made ready for steps in
        ``language``), and return at once. Optional: the first step begins it all the same,
        and reports what goes wrong. A runner with nothing to begin does nothing."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook, default does nothing
        """Release processes and connections. The runner takes no step afterwards."""

    async def __aenter__(self) -> ScriptRunner:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
