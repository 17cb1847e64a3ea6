"""Engine tests run scripts through an in-process runner: the engine is under test, not the
sandbox, and a confined process per step would only slow them down. Tests that need the real
process say so and use ``runner.ProcessRunner``."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.log import LogStore, MemoryStore, PostgresStore, SqliteStore
from runner import FileMissing, FileReader, ScriptRunner, Step
from sandbox.files import FileError
from sandbox.protocol import Script
from sandbox.runtime import run_in_process


class InProcessRunner(ScriptRunner):
    """Runs each step in this process with no confinement; counts the steps it ran."""

    def __init__(self) -> None:
        self.steps: list[Script] = []

    async def run(
        self, script: Script, files: FileReader | None = None, *, tenant: str = "default"
    ) -> Step:
        self.steps.append(script)
        loop = asyncio.get_running_loop()

        def fetch(file_id: str, offset: int, length: int) -> bytes:
            if files is None:
                raise FileError(f"{file_id} cannot be read: no file reader")
            future = asyncio.run_coroutine_threadsafe(files.read(file_id, offset, length), loop)
            try:
                return future.result(timeout=30)
            except FileMissing as e:
                raise FileError(f"{file_id} is gone: {e}") from None

        ran = await asyncio.to_thread(run_in_process, script, fetch)
        return Step.from_ran(ran)


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
