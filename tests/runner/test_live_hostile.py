"""A confined process that turns hostile while its live step waits for results: right after
``ran`` it spins, allocates, or floods its stdout with garbage (the stand-in sandbox, locked
down exactly as the sandbox is). Whatever it does, the runner stops it while it waits, and the
resume ends on a named outcome with its slot freed and nothing left: no process, fd or zombie.
Needs Linux, libseccomp and root or user namespaces, as every ProcessRunner test does."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import psutil
import pytest

from runner import ProcessRunner, RunError, ScriptRunner, Step
from sandbox.protocol import Clock, Limits, Record, Script
from tests.runner.conformance import zombies
from tests.runner.conftest import open_fds
from tests.runner.remote_support import LoopbackRemote

# What each behaviour may end on, by what reaches the resume first (the stop lands a moment
# after `ran`; what the process did in that moment is found at the resume).
NAMED = {
    "live_spin": ("compute_ms",),
    # Touching pages costs CPU: the script's CPU timer or its heap limit, whichever comes first.
    # A MemoryError outside any run (the stand-in allocates in its own code) ends the process
    # with the sandbox's internal-error code: the runner names that exit.
    "live_alloc": (
        "ended while it waited",
        "compute_ms",
        "memory",
        "MemoryError",
        "exited (code 70) without reporting how the run ended",
        # The same, found by the resume (the resumed segment's process ended unreported).
        "ended with exit code 70 during its segment",
    ),
    "live_garbage": ("wrote to its output while it waited", "ProtocolError", "not JSON"),
}


def _kinds(python: str) -> dict[str, Callable[[], ScriptRunner]]:
    return {
        "fork": lambda: ProcessRunner(mode="fork", python=python),
        "pool": lambda: ProcessRunner(mode="pool", python=python),
        "remote": lambda: LoopbackRemote(lambda: ProcessRunner(mode="pool", python=python)),
    }


def _local(runner: ScriptRunner) -> ProcessRunner:
    if isinstance(runner, LoopbackRemote):
        assert isinstance(runner.local, ProcessRunner)
        return runner.local
    assert isinstance(runner, ProcessRunner)
    return runner


def _waiting_pid(runner: ScriptRunner) -> int:
    [live] = list(_local(runner)._live)
    return live.child.pid


def _state_and_cpu(pid: int) -> tuple[str, float]:
    process = psutil.Process(pid)
    times = process.cpu_times()
    return process.status(), times.user + times.system


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("kind", ["fork", "pool", "remote"])
@pytest.mark.parametrize("behaviour", sorted(NAMED))
def test_a_process_hostile_while_it_waits_ends_named_and_leaves_nothing(
    standin_python: str, behaviour: str, kind: str
) -> None:
    before = open_fds()
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    said: list[str] = []

    async def go() -> None:
        runner = _kinds(standin_python)[kind]()
        async with runner:
            script = Script(
                id="hostile",
                code=f"// standin: {behaviour}\nreturn 1",
                tools=["t"],
                clock=Clock(now_ms=0, seed=1),
                limits=Limits(compute_ms=300),
            )
            step = await runner.run(script, live=True)
            assert step.outcome == "calls" and step.live is not None, step
            pid = _waiting_pid(runner)
            # While it waits it is stopped: it uses no CPU, whatever it was doing.
            await asyncio.sleep(0.3)
            state, cpu = _state_and_cpu(pid)
            await asyncio.sleep(0.5)
            assert state == psutil.STATUS_STOPPED, state
            assert _state_and_cpu(pid) == (state, cpu)
            local = _local(runner)
            assert local.slots.in_use == 0
            record = Record(name="t", arguments={"a": 1}, result=1)
            try:
                resumed: Step | None = await step.live.resume([record])
            except RunError as e:
                resumed, said[:] = None, [str(e)]
            if resumed is not None:
                assert resumed.outcome == "failed", resumed
                assert resumed.live is None
                limit = resumed.limit.name if resumed.limit else ""
                said[:] = [f"{limit} {resumed.error.name if resumed.error else ''} "]
                said[0] += resumed.error.message if resumed.error else ""
            assert any(name in said[0] for name in NAMED[behaviour]), said[0]
            deadline = time.monotonic() + 10
            while not _gone(pid) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert _gone(pid), "the hostile process still runs"
            assert local.slots.in_use == 0 and local.live_runs == 0
            if isinstance(runner, LoopbackRemote):
                assert runner.service is not None and runner.service.slots.in_use == 0
                assert runner.service.live_runs == 0
            # The runner still serves.
            healthy = await runner.run(
                script.model_copy(update={"code": "return 'fine'", "id": "after"})
            )
            assert healthy.value == "fine", healthy

    with asyncio.Runner() as loop:
        loop.run(go())
    settle = time.monotonic() + 10
    while (open_fds() != before or zombies()) and time.monotonic() < settle:
        time.sleep(0.05)
    assert open_fds() == before
    assert zombies() == []
    left = []
    for p in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if p.pid not in children_before and p.ppid() not in children_before:
                left.append(p)
    assert left == [], f"processes left: {left}"
