"""ProcessRunner in exec mode: a fresh ``python -I -m sandbox`` for each step.

The process starts with an empty environment, only its three pipes, in a session of its own,
and is reaped with ``wait4`` so its CPU time and peak memory reach the step's stats. Every way
it can end becomes a Step (see ``_conversation.step_from``); none hangs the caller.
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
from dataclasses import dataclass, field

from runner import _conversation as conv
from runner._base import FileReader, ProcessStats, RunError, ScriptRunner, Step
from sandbox import protocol
from sandbox.protocol import Script

STDERR_KEEP = 8 * 1024
# How long a new process may take to import, lock down and say ready.
SPAWN_TIMEOUT = 30.0


def default_data_limit(memory: int) -> int:
    """The process heap: twice the JS ``memory`` and at least 512 MiB."""
    return max(2 * memory, 512 * protocol.MiB)


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

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

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
        if self.stderr_task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self.stderr_task, 1.0)
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
    """Start a sandbox process with an empty environment and connect its pipes."""
    loop = asyncio.get_running_loop()
    popen = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={},
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


class ProcessRunner(ScriptRunner):
    """Runs each step in a new confined ``python -I -m sandbox`` process (exec mode).

    ``data_limit`` caps a process's heap (records included); keep it above ``memory``.
    By default it is twice the script's ``memory`` and at least 512 MiB.
    """

    def __init__(
        self,
        *,
        python: str = sys.executable,
        data_limit: int | None = None,
        spawn_timeout: float = SPAWN_TIMEOUT,
    ) -> None:
        self.python = python
        self.data_limit = data_limit
        self.spawn_timeout = spawn_timeout
        self._closed = False

    def with_data_limit(self, data_limit: int) -> ProcessRunner:
        """A runner like this one whose processes' heap is capped at ``data_limit`` bytes."""
        return ProcessRunner(
            python=self.python, data_limit=data_limit, spawn_timeout=self.spawn_timeout
        )

    def argv(self, script: Script) -> list[str]:
        memory = script.limits.memory
        data_limit = self.data_limit or default_data_limit(memory)
        return [
            self.python,
            "-I",
            "-m",
            "sandbox",
            "--memory-ceiling",
            str(memory),
            "--data-limit",
            str(max(data_limit, memory)),
        ]

    async def run(
        self, script: Script, files: FileReader | None = None, *, tenant: str = "default"
    ) -> Step:
        if self._closed:
            raise RunError("this runner is closed")
        try:
            child = await spawn(self.argv(script), conv.ran_bound(script))
        except OSError as e:
            raise RunError(f"could not start the sandbox process: {e}") from e
        try:
            return await self._drive(child, script, files)
        finally:
            child.kill()
            await child.reap(grace=0)

    async def _drive(self, child: Child, script: Script, files: FileReader | None) -> Step:
        try:
            ready = await conv.await_ready(child.reader, conv.Deadline.seconds(self.spawn_timeout))
        except conv.UnconfinedError as e:
            return Step.failure(
                "SandboxUnavailable",
                f"the sandbox process could not lock itself down, so no script runs here: {e}",
            )
        except (TimeoutError, protocol.ProtocolError, RunError) as e:
            # The process never got to a script: this is the runner's trouble, not the
            # script's, and the step can be tried again.
            child.kill()
            await child.reap(grace=0)
            detail = str(e) or type(e).__name__
            raise RunError(f"the sandbox process did not start: {detail}{self._tail(child)}")
        conv.check_version(ready, script)
        deadline = conv.Deadline(script.limits.compute_ms)
        outcome = await conv.converse(child.reader, child.write, script, files, deadline)
        if outcome.ran is None:
            if outcome.timed_out or outcome.problem:
                child.kill()
            await child.reap(grace=0.5)
        else:
            await child.reap(grace=1.0)
        return self._step(child, script, outcome)

    def _step(self, child: Child, script: Script, outcome: conv.Outcome) -> Step:
        status = child.status
        term = os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status) else None
        code = os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else None
        if outcome.timed_out or outcome.problem:
            term = None if child.killed_by_us else term
        return conv.step_from(
            outcome,
            script,
            child.stats(),
            term_signal=term,
            exit_code=code,
            killed_by_us=child.killed_by_us,
            stderr_tail=child.stderr.decode("utf-8", "replace"),
        )

    @staticmethod
    def _tail(child: Child) -> str:
        text = child.stderr.decode("utf-8", "replace").strip()
        return f" ({text.splitlines()[-1][:300]})" if text else ""

    async def aclose(self) -> None:
        self._closed = True
