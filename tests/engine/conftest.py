"""Engine tests run scripts through an in-process runner: the engine is under test, not the
sandbox, and a confined process per step would only slow them down. Tests that need the real
process say so and use ``runner.ProcessRunner``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.log import Lease, LogStore, MemoryStore, PostgresStore, SqliteStore
from runner import FileMissing, FileReader, LiveRun, ProcessStats, RunError, ScriptRunner, Step
from sandbox.files import FileError
from sandbox.protocol import Ran, Record, Script
from sandbox.runtime import LiveInProcess, ResumeError, run_in_process

# The command line of `codemode ARGS` in a process that takes Ctrl-C as one a terminal starts
# does. A process a non-interactive shell starts in the background (as CI may start the
# suite) inherits SIGINT ignored, and Python, rightly, goes on ignoring it: this sets it back.
_CTRL_C_TAKEN = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from engine.cli import main; sys.exit(main())"
)


def cli_taking_ctrl_c(*args: str) -> list[str]:
    """``python -m engine.cli ARGS``, as a command Ctrl-C (SIGINT) reaches however the test
    suite was started."""
    return [sys.executable, "-c", _CTRL_C_TAKEN, *args]


async def given_up(store: LogStore, script_id: str) -> Lease:
    """Wait (at most a minute) until the script's lease is given up in the log: its expiry
    set to 0 by a release, not a lease that ran out. The lease given up."""
    lease = None
    for _ in range(1200):
        lease = (await store.get_script(script_id)).lease
        if lease is not None and lease.expires_ms == 0:
            return lease
        await asyncio.sleep(0.05)
    raise AssertionError(f"the lease of script {script_id} was never given up: {lease}")


class InProcessRunner(ScriptRunner):
    """Runs each step in this process with no confinement; counts the steps it ran.

    Like every runner, it measures what the engine charges: the CPU time of the thread the
    step ran on, and the file bytes it served. With ``live=True`` a step that stops on calls
    comes back with a :class:`InProcessLive` run (``sandbox.runtime.LiveInProcess``), as the
    process runner's would; ``segments`` counts the live segments it resumed, and ``lives``
    holds every live run it started (to check that the engine closed them all).
    """

    def __init__(self) -> None:
        self.steps: list[Script] = []
        self.segments = 0
        self.lives: list[InProcessLive] = []

    async def run(
        self,
        script: Script,
        files: FileReader | None = None,
        *,
        tenant: str = "default",
        live: bool = False,
    ) -> Step:
        self.steps.append(script)
        segment = _Segment(files, asyncio.get_running_loop())
        if live:
            run = InProcessLive(self, script, segment)
            try:
                return await run.start()
            except BaseException:  # cancelled, as a process runner's step: nothing kept
                # (once its thread let go of the context: a context is not for two threads)
                await asyncio.shield(asyncio.to_thread(run._thread.shutdown, True))
                await run.close()
                raise

        def run_once() -> Ran:
            with segment.measured():
                return run_in_process(script, segment.fetch)

        ran = await asyncio.to_thread(run_once)
        return Step.from_ran(ran, segment.stats)


class EnteredRunner(InProcessRunner):
    """An :class:`InProcessRunner` that says when a step begins (``entered``)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()

    async def run(self, *args: Any, **kwargs: Any) -> Step:
        self.entered.set()
        return await super().run(*args, **kwargs)


class _Segment:
    """What one step or live segment measures: the CPU of its thread, the bytes it served."""

    def __init__(self, files: FileReader | None, loop: asyncio.AbstractEventLoop) -> None:
        self.files, self.loop = files, loop
        self.stats = ProcessStats()

    def fetch(self, file_id: str, offset: int, length: int) -> bytes:
        if self.files is None:
            raise FileError(f"{file_id} cannot be read: no file reader")
        future = asyncio.run_coroutine_threadsafe(
            self.files.read(file_id, offset, length), self.loop
        )
        try:
            data = future.result(timeout=30)
        except FileMissing as e:
            raise FileError(f"{file_id} is gone: {e}") from None
        self.stats.file_bytes += len(data)
        return data

    @contextlib.contextmanager
    def measured(self) -> Iterator[None]:
        started = time.thread_time()
        try:
            yield
        finally:
            self.stats.cpu_ms = (time.thread_time() - started) * 1000


class InProcessLive(LiveRun):
    """A live run of the in-process runner: a ``LiveInProcess`` driven on a thread of its
    own (a QuickJS context stays on the thread that made it)."""

    def __init__(self, runner: InProcessRunner, script: Script, segment: _Segment) -> None:
        self._runner = runner
        self._segment = segment
        # The file reader of the step that started the run serves every later segment: the
        # files are the script's, recorded when it started.
        self._files = segment.files
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="live")
        self._live = LiveInProcess(script, lambda *a: self._segment.fetch(*a))
        self.closed = False
        # As a process's are, what it was last seen to hold: a closed run still says so.
        self.known = self.waiting = 0
        runner.lives.append(self)

    @property
    def memory_bytes(self) -> int:
        return self._live.memory_bytes

    async def start(self) -> Step:
        return await self._go(self._live.start)

    async def resume(self, records: list[Record]) -> Step:
        if self.closed:
            raise RunError("the live run was closed")
        self._runner.segments += 1
        self._segment = _Segment(self._files, asyncio.get_running_loop())
        try:
            return await self._go(lambda: self._live.resume(records))
        except ResumeError as e:
            await self.close()
            raise RunError(f"the live run cannot go on: {e}") from None

    async def _go(self, segment: Callable[[], Ran]) -> Step:
        def measured() -> Ran:
            with self._segment.measured():
                return segment()

        loop = asyncio.get_running_loop()
        ran = await loop.run_in_executor(self._thread, measured)
        step = Step.from_ran(ran, self._segment.stats)
        if ran.outcome == "calls":
            self.known, self.waiting = self._live.known, self._live.waiting
            step.live = self
        else:
            await self.close()
        return step

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._live.close()
            self._thread.shutdown(wait=False)


@pytest.fixture
def inproc() -> InProcessRunner:
    return InProcessRunner()


STORES = ["memory", "sqlite", "postgres"]


@pytest.fixture(params=STORES)
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], LogStore]:
    """Handles on one fresh log of each kind of store."""
    if request.param == "memory":
        store = MemoryStore()
        return lambda: store
    if request.param == "sqlite":
        return lambda: SqliteStore(tmp_path / "log")
    dsn = request.getfixturevalue("postgres")
    schema = f"t_{uuid.uuid4().hex[:16]}"
    return lambda: PostgresStore(dsn, schema=schema)
