"""Live steps through a runner service: the process stays on its service, waiting on the
step's connection; a service that goes away means the engine replays elsewhere, and a client
that goes away makes the service end the process. Needs the sandbox (Linux, seccomp)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from engine import CodeMode, MemoryStore, tool
from runner import (
    LiveRun,
    ProcessRunner,
    RemoteRunner,
    RunError,
    RunnerService,
    ScriptRunner,
    Step,
)
from runner._remote import RemoteLive
from sandbox.protocol import Call, Limits, Record, Script
from tests._needs import require

from .remote_support import TOKEN, script, service_process, services, warmed

ROOT = Path(__file__).resolve().parents[2]

TOOLS = ["t"]
THREE = "const a = await tools.t({ n: 1 });\nconst b = await tools.t({ n: 2 });\nreturn [a, b];"


def _answers(step: Step) -> list[Record]:
    return [Record(name=c.name, arguments=c.arguments, result=c.arguments["n"]) for c in step.calls]


async def until(condition: Callable[[], bool], what: str, seconds: float = 30.0) -> None:
    """Poll ``condition`` until it holds (bounded, so a bug fails instead of hanging)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        await asyncio.sleep(0.02)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _waiting_pids(service: RunnerService) -> list[int]:
    return [held.run.child.pid for held in service._held]  # type: ignore[attr-defined]


async def test_a_live_step_waits_on_its_service_holding_no_slot() -> None:
    """A live step's process waits on the service (counted there, holding no slot: another
    step runs meanwhile on the service's one slot), and the same run goes on over the same
    connection to the value a replay gives."""
    local = ProcessRunner(mode="fork", slots=1)
    async with services(local, slots=1) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        step = await remote.run(script(THREE, tools=TOOLS, id="live"), live=True)
        assert step.outcome == "calls" and isinstance(step.live, RemoteLive)
        assert service.live_runs == 1 and local.live_runs == 1
        assert service.slots.in_use == 0 and local.slots.in_use == 0
        assert remote.live_runs == 1 and remote.status()[service.address]["live"] == 1
        other = await remote.run(script("return 'meanwhile'", id="other"))
        assert other.value == "meanwhile"
        nxt = await step.live.resume(_answers(step))
        assert nxt.outcome == "calls" and isinstance(nxt.live, RemoteLive)
        assert [c.arguments for c in nxt.calls] == [{"n": 2}]
        assert step.live.memory_bytes == 0  # spent: the next segment's run took over
        done = await nxt.live.resume(_answers(nxt))
        assert done.outcome == "finished" and done.value == [1, 2], done.error
        assert done.live is None and remote.live_runs == 0
        await until(lambda: service.live_runs == 0 and local.live_runs == 0, "nothing waiting")
        # By replay: the same value.
        records = [Record(name="t", arguments={"n": 1}, result=1)]
        records.append(Record(name="t", arguments={"n": 2}, result=2))
        replayed = await remote.run(script(THREE, tools=TOOLS, id="replay", records=records))
        assert replayed.value == done.value
        await remote.aclose()


async def test_older_services_and_clients_get_replay_steps() -> None:
    """A service or a client of wire version 2 (deployed before live steps) keeps no process:
    the step comes back with no live run, and the script goes on by replay."""

    class OldService(RunnerService):
        wire_version = 2

    class OldClient(RemoteRunner):
        wire_version = 2

    old_local, new_local = ProcessRunner(mode="fork"), ProcessRunner(mode="fork")
    old = OldService(TOKEN, runner=old_local)
    new = RunnerService(TOKEN, runner=new_local)
    try:
        for client in (
            RemoteRunner([await old.start()], TOKEN),
            OldClient([await new.start()], TOKEN),
        ):
            step = await client.run(script(THREE, tools=TOOLS), live=True)
            assert step.outcome == "calls" and step.live is None
            records = _answers(step)
            step = await client.run(script(THREE, tools=TOOLS, records=records), live=True)
            assert step.live is None
            step = await client.run(
                script(THREE, tools=TOOLS, records=records + _answers(step)), live=True
            )
            assert step.value == [1, 2]
            await client.aclose()
        assert old_local.live_runs == new_local.live_runs == 0
    finally:
        for service in (old, new):
            await service.aclose()
        for local in (old_local, new_local):
            await local.aclose()


async def test_the_service_ends_a_process_past_its_live_wait_or_budget() -> None:
    """A process that waits past the service's live wait, or does not fit when the service's
    live budget is full (the one waiting stays), is ended by the service; its client's
    resume says why and raises RunError (the engine then replays)."""
    local = ProcessRunner(mode="fork")
    async with services(local, live_max=1, live_wait=2.0) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        first = await remote.run(script(THREE, tools=TOOLS, id="a"), live=True)
        pid = _waiting_pids(service)[0]
        second = await remote.run(script(THREE, tools=TOOLS, id="b"), live=True)
        assert first.live is not None and second.live is not None
        with pytest.raises(RunError, match="ended for room"):
            await second.live.resume(_answers(second))
        assert service.live_runs == 1 and service.live_ended == 1
        assert _waiting_pids(service) == [pid]
        await until(lambda: _gone(pid), "the process to end after the live wait", 20)
        with pytest.raises(RunError, match="no results came within 2 s"):
            await first.live.resume(_answers(first))
        assert remote.out_of_rotation() == {}, "a service that ended a process is healthy"
        assert service.live_runs == 0 and local.live_runs == 0
        await remote.aclose()


@pytest.mark.parametrize("budget", [{"live_max": 0}, {"live_memory": 0}])
async def test_a_service_with_no_live_budget_keeps_no_process(budget: dict[str, int]) -> None:
    """No live count, or no live memory, keeps none: the step comes back with no live run and
    the script goes on by replay. With no memory a process was offered, and ended for room
    as soon as its step was sent, so each step made a process for nothing and replayed."""
    local = ProcessRunner(mode="fork")
    async with services(local, **budget) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        step = await remote.run(script(THREE, tools=TOOLS), live=True)
        assert step.outcome == "calls" and step.live is None
        records = _answers(step)
        step = await remote.run(script(THREE, tools=TOOLS, records=records), live=True)
        assert step.outcome == "calls" and step.live is None
        step = await remote.run(
            script(THREE, tools=TOOLS, records=records + _answers(step)), live=True
        )
        assert step.value == [1, 2]
        assert service.live_ended == 0 and local.live_runs == 0
        await remote.aclose()


async def test_the_services_live_budget_counts_what_processes_cost() -> None:
    """With a live_memory of one process's resident size, the service keeps several waiting
    (each costs its private memory; the rest it shares with the fork server), and still ends
    those that do not fit once what they cost passes it. By resident size it kept one."""
    if os.geteuid() != 0:
        require("root: only a runner with CAP_SYS_PTRACE may read a sandbox's smaps_rollup")
    code = "const s = 'x'.repeat(4 << 20); await tools.t({ n: s.length }); return 1"
    local = ProcessRunner(mode="fork")
    probe = await local.run(script(code, tools=TOOLS), live=True)
    assert probe.live is not None
    resident = probe.live.memory_bytes
    await probe.live.close()
    async with services(local, live_memory=resident, live_max=100) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        steps = [
            await remote.run(script(code, tools=TOOLS, id=f"s{k}"), live=True) for k in range(7)
        ]
        assert all(step.live is not None for step in steps)
        assert service.live_ended >= 1  # the budget still binds
        assert 3 <= service.live_runs < 7
        assert service._held_memory <= service.live_memory
        await remote.aclose()


CLIENT = """
import asyncio, os, sys
sys.path.insert(0, {root!r})
from runner import RemoteRunner
from tests.runner.remote_support import TOKEN, script

async def main():
    remote = RemoteRunner([{address!r}], TOKEN)
    step = await remote.run(script({code!r}, tools=['t']), live=True)
    assert step.live is not None
    print("waiting", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_a_draining_service_tells_a_waiting_process_client_why_it_ended() -> None:
    """A service that drains while a live process waits ends it and says so (``ended``)
    before it closes the connection: the client's resume names the drain, and the service,
    which answered, is not counted as failed (its connection closed unsaid, and the client
    took it for one gone mid-step)."""
    local = ProcessRunner(mode="fork")
    async with services(local) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        step = await remote.run(script(THREE, tools=TOOLS), live=True)
        [pid] = _waiting_pids(service)
        assert step.live is not None
        await asyncio.wait_for(service.drain(), 30)
        assert _gone(pid) and local.live_runs == 0
        with pytest.raises(
            RunError, match="ended the live process: the runner service is draining"
        ):
            await step.live.resume(_answers(step))
        assert remote.status()[service.address]["failures"] == 0
        await remote.aclose()


async def test_a_client_that_vanishes_makes_the_service_end_its_process() -> None:
    """A client process killed while its live process waits on the service: the service sees
    the connection drop and ends the process; nothing of it is left."""
    local = ProcessRunner(mode="fork")
    async with services(local) as [service]:
        program = CLIENT.format(root=str(ROOT), address=service.address, code=THREE)
        client = await asyncio.create_subprocess_exec(
            sys.executable, "-c", program, stdout=asyncio.subprocess.PIPE, cwd=ROOT
        )
        assert client.stdout is not None
        assert await asyncio.wait_for(client.stdout.readline(), 60) == b"waiting\n"
        assert service.live_runs == 1
        pid = _waiting_pids(service)[0]
        client.kill()
        await client.wait()
        await until(lambda: service.live_runs == 0 and local.live_runs == 0, "the process ended")
        await until(lambda: _gone(pid), "the sandbox process to go")
        assert service.slots.in_use == 0


async def test_a_client_that_drops_its_connection_ends_the_process() -> None:
    """A live run dropped without close (its connection reset) and one closed: the service
    ends both processes at once, and the client keeps nothing."""
    local = ProcessRunner(mode="fork")
    async with services(local) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        dropped = await remote.run(script(THREE, tools=TOOLS, id="dropped"), live=True)
        closed = await remote.run(script(THREE, tools=TOOLS, id="closed"), live=True)
        assert service.live_runs == 2
        pids = _waiting_pids(service)
        assert isinstance(dropped.live, RemoteLive) and closed.live is not None
        dropped.live.conn.abort()
        await closed.live.close()
        await until(lambda: service.live_runs == 0 and local.live_runs == 0, "both ended")
        await until(lambda: all(_gone(p) for p in pids), "both processes to go")
        # The closed run's connection went back to the client's idle set and still serves.
        assert (await remote.run(script("return 7"))).value == 7
        await remote.aclose()


@pytest.mark.parametrize("how", ["killed", "frozen"])
async def test_a_service_gone_mid_live_wait_means_replay_elsewhere(
    tmp_path: Path, how: str
) -> None:
    """The service that holds a script's live process is SIGKILLed (or frozen, so its
    heartbeats stop) while the script's call runs: the engine replays the step on the other
    service, from the log, and the script finishes with each call made once."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    beat = ("--heartbeat", "0.2")
    async with (
        service_process(token_file, *beat) as (first, a),
        service_process(token_file, *beat) as (second, b),
    ):
        await warmed(a, b)
        remote = RemoteRunner([a, b], TOKEN, silence=1.0)
        processes = {a: first, b: second}
        made: list[int] = []
        victim: list[str] = []

        @tool
        def step(n: int) -> int:
            """A step of work; the first one takes down the service the script waits on."""
            made.append(n)
            if n == 1:
                [address] = [k for k, v in remote.status().items() if v["live"] == 1]
                victim.append(address)
                pid = processes[address].pid
                if how == "killed":
                    os.killpg(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGSTOP)
            return n * 10

        engine = CodeMode([step], runner=remote, store=MemoryStore(), type_check="off")
        try:
            code = "const a = await tools.step({ n: 1 });\nconst b = await tools.step({ n: 2 });\nreturn a + b;"
            result = await engine.run_code(code)
            assert result.status == "finished" and result.value == 30, result.text
            assert made == [1, 2], "each call made once"
            status = remote.status()
            assert status[victim[0]]["failures"] >= 1 and status[victim[0]]["abandoned"] >= 1
            other = b if victim[0] == a else a
            assert status[other]["steps"] >= 1
        finally:
            await engine.aclose()
            if how == "frozen":
                os.kill(processes[victim[0]].pid, signal.SIGCONT)


async def test_a_results_line_is_bounded_by_the_service_not_by_the_clients_limits() -> None:
    """A client whose script claims huge limits cannot make the service buffer a results
    line past its ``max_script_line``: the service drops it and ends the process. (A client
    that keeps to the welcome's max_line does not send it: this one ignores it.)"""
    local = ProcessRunner(mode="fork")
    bound = 1 << 20
    async with services(local, max_script_line=bound) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        limits = Limits(results=1 << 40, step_arguments=1 << 40)
        step = await remote.run(script(THREE, tools=TOOLS, limits=limits), live=True)
        assert step.live is not None and service.live_runs == 1
        [pid] = _waiting_pids(service)
        big = [Record(name=c.name, arguments=c.arguments, result="x" * bound) for c in step.calls]
        live = step.live
        assert isinstance(live, RemoteLive) and live.welcome.max_line == bound
        live.welcome = live.welcome.model_copy(update={"max_line": 1 << 40})
        with pytest.raises(RunError, match="a line over the bound of 1,048,576 bytes"):
            await step.live.resume(big)
        await until(lambda: service.live_runs == 0 and _gone(pid), "the process to end")
        await remote.aclose()


class _SlowLive(LiveRun):
    """A live run whose end takes a while (as a real one's does: kill, reap, close pipes)."""

    known = 0
    waiting = 1

    def __init__(self) -> None:
        self.closing = asyncio.Event()
        self.gate = asyncio.Event()
        self.closed = False

    @property
    def memory_bytes(self) -> int:
        return 0

    async def resume(self, records: list[Record]) -> Step:
        raise RunError("not resumed in this test")

    async def close(self) -> None:
        self.closing.set()
        await self.gate.wait()
        self.closed = True


class _SlowLiveRunner(ScriptRunner):
    def __init__(self) -> None:
        self.run_made = _SlowLive()

    async def run(
        self, script: Script, files: object = None, *, tenant: str = "default", live: bool = False
    ) -> Step:
        return Step(outcome="calls", calls=[Call(name="t", arguments={})], live=self.run_made)


async def test_closing_the_service_does_not_cut_a_live_process_end_short() -> None:
    """The service's close cancels its connections; one that is ending its live process
    (the client ended it) finishes ending it first, so no process or pipe is left behind."""
    local = _SlowLiveRunner()
    service = RunnerService(TOKEN, runner=local)
    await service.start("127.0.0.1", 0)
    remote = RemoteRunner([service.address], TOKEN)
    step = await remote.run(script("x", tools=TOOLS), live=True)
    assert step.live is not None and service.live_runs == 1
    await step.live.close()  # the service ends its process
    await local.run_made.closing.wait()
    closing = asyncio.create_task(service.aclose())
    await until(lambda: not service._connections, "the connections cancelled")  # type: ignore[attr-defined]
    local.run_made.gate.set()
    await closing
    assert local.run_made.closed
    await remote.aclose()


async def test_a_process_waiting_for_a_slot_with_its_results_stays_in_the_live_budget() -> None:
    """Two live processes whose results came while the service's one slot is busy: each
    waits for the slot with its process alive, and counts in the live budget until its
    segment is over. They left the budget as their results came, so on a busy service the
    processes waiting for a slot were as many as the clients, past live_max and the file
    descriptors the service was sized for."""
    local = ProcessRunner(mode="fork", slots=1)
    async with services(local, slots=1, live_max=2) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        steps = [
            await remote.run(script(THREE, tools=TOOLS, id=f"s{k}"), live=True) for k in range(2)
        ]
        assert all(step.live is not None for step in steps)
        use = await service.slots.acquire("someone else")  # the slot busy
        try:
            resumes = [asyncio.create_task(step.live.resume(_answers(step))) for step in steps]
            await until(lambda: service.slots.waiting() == 2, "both resumes to wait for the slot")
            assert local.live_runs == 2
            assert service.live_runs == 2  # was 0: both processes outside the budget
        finally:
            service.slots.release(use)
        nxt = await asyncio.gather(*resumes)
        assert [s.outcome for s in nxt] == ["calls", "calls"]
        assert service.live_runs == 2
        done = await asyncio.gather(*(s.live.resume(_answers(s)) for s in nxt))
        assert [s.value for s in done] == [[1, 2], [1, 2]]
        await until(lambda: service.live_runs == 0 and local.live_runs == 0, "nothing waiting")
        await remote.aclose()
