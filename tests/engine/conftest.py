"""Engine tests run scripts through an in-process runner: the engine is under test, not the
sandbox, and a confined process per step would only slow them down. Tests that need the real
process say so and use ``runner.ProcessRunner``."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.log import LogStore, MemoryStore, PostgresStore, SqliteStore
from runner import FileMissing, FileReader, ProcessStats, ScriptRunner, Step
from sandbox.files import FileError
from sandbox.protocol import Ran, Script
from sandbox.runtime import run_in_process


class InProcessRunner(ScriptRunner):
    """Runs each step in this process with no confinement; counts the steps it ran.

    Like every runner, it measures what the engine charges: the CPU time of the thread the
    step ran on, and the file bytes it served.
    """

    def __init__(self) -> None:
        self.steps: list[Script] = []

    async def run(
        self, script: Script, files: FileReader | None = None, *, tenant: str = "default"
    ) -> Step:
        self.steps.append(script)
        loop = asyncio.get_running_loop()
        measured = ProcessStats()

        def fetch(file_id: str, offset: int, length: int) -> bytes:
            if files is None:
                raise FileError(f"{file_id} cannot be read: no file reader")
            future = asyncio.run_coroutine_threadsafe(files.read(file_id, offset, length), loop)
            try:
                data = future.result(timeout=30)
            except FileMissing as e:
                raise FileError(f"{file_id} is gone: {e}") from None
            measured.file_bytes += len(data)
            return data

        def run() -> Ran:
            started = time.thread_time()
            try:
                return run_in_process(script, fetch)
            finally:
                measured.cpu_ms = (time.thread_time() - started) * 1000

        ran = await asyncio.to_thread(run)
        return Step.from_ran(ran, measured)


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
