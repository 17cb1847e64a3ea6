"""A host that stops while its step's process runs on (SIGSTOP, a paused virtual machine, a
laptop asleep) reads, once it runs again, the ``ran`` the process wrote meanwhile: the
process is not charged the host's stall as a run past its wall-clock deadline."""

from __future__ import annotations

import asyncio
import time

from runner import ProcessRunner
from runner._conversation import STALLED_S, wall_seconds
from sandbox.protocol import FileInfo
from tests.runner.support import script


class _Stall:
    """A FileReader that answers, then stops the host's event loop for ``seconds`` while the
    process goes on with the bytes, as a host stopped by SIGSTOP would be."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def read(self, file_id: str, offset: int, length: int) -> bytes:
        asyncio.get_running_loop().call_soon(time.sleep, self.seconds)
        return b"hi"[offset : offset + length]


async def test_a_host_stalled_past_a_steps_deadline_reads_the_ran_written_meanwhile() -> None:
    """The host stalls well past the step's deadline (1.3 s for 100 ms of CPU) right after
    it answers the process's read: the step finishes with the script's value (it failed on
    the compute_ms limit, 'the run passed its deadline of wall time', and the script with
    it, for good)."""
    s = script("return await files.text('f.txt')", compute_ms=100).model_copy(
        update={"files": [FileInfo(id="f.txt", mime="text/plain", size=2)]}
    )
    async with ProcessRunner() as runner:
        step = await runner.run(s, _Stall(wall_seconds(100) + 2 * STALLED_S))
    assert step.outcome == "finished", step.error
    assert step.value == "hi"
