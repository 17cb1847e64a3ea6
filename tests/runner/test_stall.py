"""A host that stops while its step's process runs on (SIGSTOP, a paused virtual machine, a
laptop asleep) reads, once it runs again, the ``ran`` the process wrote meanwhile: the
process is not charged the host's stall as a run past its wall-clock deadline, nor a runner
service as a silence of its own."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from runner import ProcessRunner, RemoteRunner
from runner._conversation import STALLED_S, wall_seconds
from sandbox.protocol import FileInfo
from tests.runner.remote_support import TOKEN, service_process, warmed
from tests.runner.support import script


class _Stall:
    """A FileReader that answers, then, at its first read, stops the host's event loop for
    ``seconds`` while the process goes on with the bytes, as a host stopped by SIGSTOP
    would be."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def read(self, file_id: str, offset: int, length: int) -> bytes:
        if self.seconds:  # at the first read only
            asyncio.get_running_loop().call_soon(time.sleep, self.seconds)
            self.seconds = 0
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


async def _remote_step(tmp_path: Path, code: str, stall: float, value: str, **options: Any) -> None:
    """A step of ``code`` (1 s of CPU, with files f.txt and g.txt of "hi") on a runner service
    in a process of its own (beating every 0.1 s), through a RemoteRunner of ``options`` whose
    host stalls ``stall`` seconds right after it answers the step's first read, finishes
    with ``value``, the service left in rotation."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    attached = [FileInfo(id=name, mime="text/plain", size=2) for name in ("f.txt", "g.txt")]
    s = script(code, compute_ms=1000).model_copy(update={"files": attached})
    beat = ("--heartbeat", "0.1", "--slot-wait", "0.1")
    async with service_process(token_file, *beat) as (_, address):
        await warmed(address)
        remote = RemoteRunner([address], TOKEN, connect_timeout=30.0, **options)
        try:
            step = await remote.run(s, _Stall(stall))
        finally:
            await remote.aclose()
    assert step.outcome == "finished", step.error
    assert step.value == value
    assert remote.status()[address]["failures"] == 0, remote.status()


@pytest.mark.timeout(120)
async def test_a_host_stalled_past_a_services_silence_reads_the_step_it_sent_meanwhile(
    tmp_path: Path,
) -> None:
    """The engine's host stalls past ``silence`` right after it answers the step's read, while
    the runner service beats and finishes the step: the client reads the step, and the
    service stays in rotation (the client said it 'went silent for 1 s in the middle of a
    step ... it is stopped or cut off', took it out of rotation and put the step back)."""
    # Two reads: the second's request waits for the client when it runs again, and the
    # step's deadline (4 s) outlasts the stall.
    code = "return (await files.text('f.txt')) + (await files.text('g.txt'))"
    await _remote_step(tmp_path, code, 1.0 + 2 * STALLED_S, "hihi", silence=1.0)


@pytest.mark.timeout(120)
async def test_a_host_stalled_past_a_steps_whole_wait_reads_the_step_sent_meanwhile(
    tmp_path: Path,
) -> None:
    """The stall outlasts the whole wait for the step's answer (its deadline, the service's
    slot wait and ``step_margin``) while the step computes on, beating, and ends: the client
    reads the step, and the service stays in rotation (it said the service 'did not finish
    the step within 4.2 s', took it out of rotation and put the step back)."""
    # A third of a second of CPU here, within the step's 1 s: the service beats meanwhile.
    code = "const t = await files.text('f.txt'); let x = 0\n"
    code += "for (let i = 0; i < 1e7; i++) x += i\nreturn t"
    wait = wall_seconds(1000) + 0.1 + 0.1
    await _remote_step(tmp_path, code, wait + 2 * STALLED_S, "hi", silence=30.0, step_margin=0.1)


@pytest.mark.timeout(120)
async def test_a_host_stalled_as_it_connects_to_a_service_takes_the_connection(
    tmp_path: Path,
) -> None:
    """The engine's host stalls past ``connect_timeout`` as it opens a connection to a runner
    service: once it runs again it takes the connection and the step runs there (it said
    the service 'could not connect within 1 s' and took it out of rotation)."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    async with service_process(token_file) as (_, address):
        await warmed(address)
        remote = RemoteRunner([address], TOKEN, connect_timeout=1.0)
        try:
            asyncio.get_running_loop().call_soon(time.sleep, 1.0 + 2 * STALLED_S)
            step = await remote.run(script("return 1"))
        finally:
            await remote.aclose()
    assert step.value == 1, step.error
    assert remote.status()[address]["failures"] == 0
