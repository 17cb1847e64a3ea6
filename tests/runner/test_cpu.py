"""A step whose caller works beside it (runner.HOST_BUSY) runs off the caller's CPU while its
first segment runs, and on every CPU it had again once ``ran`` arrives (runner._cpu); any
other step runs where the kernel puts it. On a machine with one CPU allowed nothing changes,
and the tests say so instead."""

from __future__ import annotations

import asyncio
import contextvars
import os

import pytest

from runner import HOST_BUSY, ProcessRunner
from runner import _cpu as runner_cpu
from runner import _process as runner_process
from runner._cpu import AWAY_AT_MOST, AwayFromHost
from runner._forkserver import ForkedChild, ForkServer
from sandbox.protocol import FileInfo
from tests.runner.support import script, zombies
from tests.runner.test_live import pid_of

MiB = 1024 * 1024
CPUS = os.sched_getaffinity(0)


async def test_a_child_is_kept_off_one_cpu_and_let_back() -> None:
    server = ForkServer()
    try:
        child = await server.spawn(memory=64 * MiB, data_limit=None)
        before = os.sched_getaffinity(child.pid)
        away = AwayFromHost(child)
        during = os.sched_getaffinity(child.pid)
        if len(before) > 1:
            assert away.allowed == before
            assert len(during) == len(before) - 1 and during < before
        else:  # one CPU: there is nowhere else to run
            assert away.allowed is None and during == before
        away.release()
        assert os.sched_getaffinity(child.pid) == before
        away.release()  # once only: a second release changes nothing
        assert os.sched_getaffinity(child.pid) == before
        child.kill()
        await child.reap(grace=1.0)
        away.release()  # a child that is gone is not touched (its pid may be another's)
    finally:
        await server.aclose()
    assert zombies() == []


async def test_releasing_a_gone_child_touches_no_pid() -> None:
    """The pid of a child that was reaped is never given a new affinity."""
    server = ForkServer()
    try:
        child = await server.spawn(memory=64 * MiB, data_limit=None)
        away = AwayFromHost(child)
        child.kill()
        await child.reap(grace=1.0)
        assert not child.alive()
        away.release()
        assert away.allowed is None
    finally:
        await server.aclose()


class _Watch:
    """A FileReader that notes the reading process's CPUs while the segment runs, and
    answers after ``delay`` seconds."""

    def __init__(self, delay: float = 0.0) -> None:
        self.seen: list[set[int]] = []
        self.pid = 0
        self.delay = delay

    async def read(self, file_id: str, offset: int, length: int) -> bytes:
        self.seen.append(os.sched_getaffinity(self.pid))
        await asyncio.sleep(self.delay)
        return b"hi"[offset : offset + length]


@pytest.mark.parametrize("busy", [True, False])
async def test_a_step_runs_off_a_busy_hosts_cpu_until_ran_then_anywhere(
    busy: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a pool step whose caller is busy beside it, the process's script segment runs on
    all CPUs but one (the host's when it sent the script); the live process waiting for its
    call's result may run anywhere. A step whose caller just waits is not moved."""
    # Kept off until ran, however long the process takes to read its file here.
    monkeypatch.setattr(runner_cpu, "AWAY_AT_MOST", 600.0)
    async with ProcessRunner(mode="pool", slots=1) as runner:
        watch = _Watch()
        assert runner.pool is not None
        runner.pool.start()
        await runner.pool.refill()
        watch.pid = runner.pool.idle[0].pid  # the child the step takes
        s = script("await files.text('f.txt'); await tools.t({ i: 1 }); return 1").model_copy(
            update={"files": [FileInfo(id="f.txt", mime="text/plain", size=2)]}
        )
        context = contextvars.copy_context()
        context.run(HOST_BUSY.set, busy)
        step = await asyncio.create_task(runner.run(s, watch, live=True), context=context)
        assert step.outcome == "calls" and step.live is not None
        assert pid_of(step.live) == watch.pid
        (during,) = watch.seen
        if busy and len(CPUS) > 1:
            assert len(during) == len(CPUS) - 1 and during < CPUS
        else:
            assert during == CPUS
        assert os.sched_getaffinity(watch.pid) == CPUS
        await step.live.close()


async def test_a_long_first_segment_is_let_back_on_every_cpu_soon(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A script that runs on in its first segment is kept off the host's CPU for
    AWAY_AT_MOST only, not until its ran: two scripts computing for seconds at once must not
    share one CPU of two."""
    made: list[AwayFromHost] = []

    class Noted(AwayFromHost):
        def __init__(self, child: ForkedChild) -> None:
            super().__init__(child)
            made.append(self)
            self.moved = self.allowed is not None

    monkeypatch.setattr(runner_process, "AwayFromHost", Noted)
    async with ProcessRunner(mode="pool", slots=1) as runner:
        # The host answers the first read only once AWAY_AT_MOST has passed, many times over
        # (the loop is free meanwhile, to run the timer).
        watch = _Watch(delay=50 * AWAY_AT_MOST)
        assert runner.pool is not None
        runner.pool.start()
        await runner.pool.refill()
        watch.pid = runner.pool.idle[0].pid
        s = script("await files.text('f.txt'); await files.text('f.txt'); return 1").model_copy(
            update={"files": [FileInfo(id="f.txt", mime="text/plain", size=2)]}
        )
        context = contextvars.copy_context()
        context.run(HOST_BUSY.set, True)
        step = await asyncio.create_task(runner.run(s, watch), context=context)
        assert step.outcome == "finished" and step.value == 1
        (away,) = made
        assert away.moved == (len(CPUS) > 1)
        _, second = watch.seen
        assert second == CPUS  # let back before its ran
