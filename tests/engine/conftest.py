"""Engine tests run scripts through an in-process runner: the engine is under test, not the
sandbox, and a confined process per step would only slow them down. Tests that need the real
process say so and use ``runner.ProcessRunner``."""

from __future__ import annotations

import asyncio

import pytest

from runner import FileReader, ScriptRunner, Step
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
        ran = await asyncio.to_thread(run_in_process, script)
        return Step.from_ran(ran)


@pytest.fixture
def inproc() -> InProcessRunner:
    return InProcessRunner()
