"""Fixtures for the hostile suite: confined children started as the sandbox is.

Every child is a single-threaded process started with ``env={}`` and pipes on 0/1/2 that
calls the real ``sandbox.lockdown.apply``. Most come from one zygote (a fresh Python that
imported everything and built the BPF once, then forks one child per test: the fork-server
path, a few milliseconds each); a few are fresh interpreters (``apply()`` building its own
filter). See ``tests/hostile/child.py`` for the child's side of the line protocol.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from runner import ProcessRunner
from sandbox.protocol import Clock, Record, Script
from sandbox.runtime import Prepared, run_in_process
from tests._needs import require

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 20.0
NOBODY = 65534


def seccomp_unavailable() -> str | None:
    """Why the hostile suite cannot run here, or None when it can."""
    if not sys.platform.startswith("linux"):
        return "needs Linux seccomp"
    try:
        status = Path("/proc/self/status").read_text()
    except OSError as e:
        return f"needs /proc/self/status to check for seccomp: {e}"
    if "Seccomp:" not in status:
        return "needs a kernel with seccomp (no Seccomp: line in /proc/self/status)"
    try:
        import pyseccomp  # noqa: F401
    except (ImportError, RuntimeError, OSError) as e:
        return f"needs pyseccomp and libseccomp.so.2: {e}"
    return None


@pytest.fixture(autouse=True)
def _needs_seccomp() -> None:
    reason = seccomp_unavailable()
    if reason:
        require(reason)


def needs_root() -> None:
    if os.geteuid() != 0:
        require("root: lockdown drops to nobody only when started as root")


class _Lines:
    """JSON lines from a pipe, with a deadline so a broken child fails the test, not hangs."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self.fd = pipe.fileno()
        self.buffer = b""
        self.raw: list[bytes] = []

    def next(self, timeout: float = TIMEOUT) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise TimeoutError(f"no line from the child in {timeout} s: {self.raw!r}")
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        self.raw.append(line)
        try:
            message: dict[str, Any] = json.loads(line)
        except ValueError:
            return {"text": line.decode(errors="replace")}
        return message


@dataclass
class Outcome:
    """How one child went: its messages, then how it ended (exit code or signal), the wall
    time from the go line to its end and (zygote children) the CPU time it used."""

    pid: int | None = None
    unconfined: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    paused: list[dict[str, Any]] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    exit: int | None = None
    signal: int | None = None
    seconds: float = 0.0
    cpu_ms: float | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)


Inspect = Callable[[int], None]


def _drive(
    lines: _Lines,
    stdin: IO[bytes],
    status: Callable[[dict[str, Any] | None], dict[str, Any] | None],
    *,
    inspect: Inspect | None,
    on_pause: Callable[[int, dict[str, Any]], None] | None,
    payload: bytes,
) -> Outcome:
    """Read the child's lines until it ends, answering ready/paused as the test asks."""
    out = Outcome()
    started = time.monotonic()
    while True:
        message = lines.next()
        final = status(message)
        if final is not None:
            out.seconds = time.monotonic() - started
            out.exit = final.get("exit")
            out.signal = final.get("signal")
            out.cpu_ms = final.get("cpu_ms")
            return out
        assert message is not None
        out.messages.append(message)
        if "ready" in message:
            out.pid = message["ready"]["pid"]
            if inspect is not None:
                inspect(out.pid)
            started = time.monotonic()
            stdin.write(b"go\n" + payload)
            stdin.flush()
        elif "paused" in message:
            out.paused.append(message["paused"])
            if on_pause is not None:
                assert out.pid is not None
                on_pause(out.pid, message["paused"])
            stdin.write(b"\n")
            stdin.flush()
        elif "result" in message:
            out.result = message["result"]
        elif "unconfined" in message:
            out.unconfined = message["unconfined"]
        elif "text" in message:
            out.text.append(message["text"])


class Zygote:
    """One warm helper process that forks a confined child per attack."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.lines: _Lines | None = None

    def _start(self) -> tuple[subprocess.Popen[bytes], _Lines]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.hostile.child", "--zygote"],
                cwd=REPO,
                env={},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            assert self.proc.stdout is not None
            self.lines = _Lines(self.proc.stdout)
        assert self.lines is not None
        return self.proc, self.lines

    def run(
        self,
        attack: str,
        *,
        inspect: Inspect | None = None,
        on_pause: Callable[[int, dict[str, Any]], None] | None = None,
        payload: bytes = b"",
    ) -> Outcome:
        proc, lines = self._start()
        assert proc.stdin is not None
        try:
            proc.stdin.write(attack.encode() + b"\n")
            proc.stdin.flush()

            def status(message: dict[str, Any] | None) -> dict[str, Any] | None:
                if message is None:
                    raise AssertionError(f"the zygote ended: {lines.raw!r}")
                if "status" in message:
                    assert "error" not in message["status"], message
                    return dict(message["status"])
                return None

            return _drive(
                lines, proc.stdin, status, inspect=inspect, on_pause=on_pause, payload=payload
            )
        except BaseException:
            self.close()  # the protocol may be out of step: start a new zygote next time
            raise

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            for pipe in (self.proc.stdin, self.proc.stdout):
                if pipe is not None:
                    pipe.close()
            self.proc = None


class _NullWriter:
    """Where lines for a child without a stdin pipe go."""

    def write(self, data: bytes) -> int:
        return len(data)

    def flush(self) -> None:
        pass


def run_fresh(
    attack: str,
    *,
    stdin: Any = subprocess.PIPE,
    stdout: Any = subprocess.PIPE,
    inspect: Inspect | None = None,
    payload: bytes = b"",
    pass_fds: tuple[int, ...] = (),
) -> Outcome:
    """A fresh interpreter, started with env={}, that runs the whole ``apply()`` itself."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.hostile.child", "--fresh", attack],
        cwd=REPO,
        env={},
        stdin=stdin,
        stdout=stdout,
        stderr=subprocess.DEVNULL,
        pass_fds=pass_fds,
    )
    try:
        if stdout is not subprocess.PIPE:
            proc.wait(TIMEOUT)
            return Outcome(exit=proc.returncode if proc.returncode >= 0 else None)
        assert proc.stdout is not None
        lines = _Lines(proc.stdout)
        writer: Any = proc.stdin if proc.stdin is not None else _NullWriter()

        def status(message: dict[str, Any] | None) -> dict[str, Any] | None:
            if message is not None:
                return None
            code = proc.wait(TIMEOUT)
            return {"signal": -code} if code < 0 else {"exit": code}

        return _drive(lines, writer, status, inspect=inspect, on_pause=None, payload=payload)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


@pytest.fixture(scope="session")
def zygote() -> Iterator[Zygote]:
    reason = seccomp_unavailable()
    if reason:
        require(reason)
    z = Zygote()
    yield z
    z.close()


def proc_status(pid: int) -> dict[str, str]:
    """/proc/<pid>/status as a dict, read from the parent."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def proc_limits(pid: int) -> dict[str, tuple[str, str]]:
    """/proc/<pid>/limits as {name: (soft, hard)}, read from the parent."""
    limits = {}
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines()[1:]:
        name, soft, hard = line[:26].strip(), line[26:47].strip(), line[47:68].strip()
        limits[name] = (soft, hard)
    return limits


# ---- Hostile scripts: run in this process and through a confined process ----

NOW_MS = 1_767_225_600_000


def _script(code: str, records: list[Record] | None = None) -> Script:
    return Script(
        id="hostile",
        code=code,
        records=records or [],
        tools=["echo"],
        clock=Clock(now_ms=NOW_MS, seed=7),
    )


class PoolProcess:
    """One pool-mode runner for the module, driven from synchronous tests."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.runner = ProcessRunner(mode="pool", pool_size=1)

    def run(self, script: Script) -> Any:
        return self.loop.run_until_complete(self.runner.run(script))

    def close(self) -> None:
        self.loop.run_until_complete(self.runner.aclose())
        self.loop.close()


@pytest.fixture(scope="module")
def process() -> Iterator[PoolProcess]:
    p = PoolProcess()
    yield p
    p.close()


WAYS = ("fresh", "prepared", "process")


@pytest.fixture(params=WAYS)
def run(request: pytest.FixtureRequest) -> Any:
    """Run a script in this process (fresh, or on a prepared context as the fork server
    makes) or through a real confined process (pool mode); each gives the Ran's fields."""
    way = request.param
    if way == "fresh":
        return lambda code, records=None: run_in_process(_script(code, records))
    if way == "prepared":
        return lambda code, records=None: run_in_process(_script(code, records), None, Prepared())
    proc = request.getfixturevalue("process")
    return lambda code, records=None: proc.run(_script(code, records))
