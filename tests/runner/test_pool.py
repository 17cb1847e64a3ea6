"""The warm pool: ready children ahead of demand, refilled, shrunk, never handed out dead."""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
from typing import Any

import psutil
import pytest

from runner import ProcessRunner
from runner import _process as process_module
from runner._pool import NICE, WarmPool
from runner._process import POOL_MEMORY
from sandbox import protocol
from sandbox.__main__ import LINE_ROOM_FACTOR
from tests._needs import require
from tests.runner.support import (
    EVENT_TIMEOUT,
    children_of,
    limits_of,
    script,
    until,
    wait_gone,
)

MiB = 1024 * 1024
# What a forked child's RLIMIT_CPU is before a script (lockdown's backstop, the most a
# process may use in its life), and the hard limit a version 2 script keeps.
FORKED_CPU = (str(protocol.PROCESS_CPU_SECONDS), str(protocol.PROCESS_CPU_SECONDS + 1))
LIVE_HARD_CPU = FORKED_CPU[1]


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_the_pool_fills_to_its_size_and_refills_after_each_step() -> None:
    async with ProcessRunner(mode="pool", pool_size=2) as runner:
        assert runner.pool is not None
        assert (await runner.run(script("return 1"))).value == 1
        await until(lambda: len(runner.pool.idle) == 2, "the pool to fill")
        spawned = runner.pool.spawned
        assert (await runner.run(script("return 2"))).value == 2
        await until(lambda: len(runner.pool.idle) == 2, "the pool to refill")
        assert runner.pool.spawned == spawned + 1
        assert all(child.ready is not None for child in runner.pool.idle)


async def test_warm_fills_the_pool_before_any_step_which_takes_a_child_from_it() -> None:
    """warm() returns at once and starts the fork server and the pool's refill in the
    background, with children made ready for the language it names; the first step takes
    one of them rather than waiting for the fork server."""
    async with ProcessRunner(mode="pool", pool_size=2) as runner:
        assert runner.pool is not None and runner.server is not None
        runner.warm("python")
        assert runner.pool.spawned == 0 and not runner.server.alive
        await until(lambda: len(runner.pool.idle) == 2, "the pool to fill")
        assert runner.pool.warm == "python"
        first = runner.pool.idle[0].pid
        step = await runner.run(script("return 1"))
        assert step.value == 1
        assert first not in [child.pid for child in runner.pool.idle]  # the step's
        runner.warm()  # again, with the pool running: nothing more to begin
        await until(lambda: len(runner.pool.idle) == 2, "the pool to refill")
        zygote = runner.server.zygote_pid
        pids = [child.pid for child in runner.pool.idle]
    assert zygote is not None and wait_gone([zygote, *pids]) == []


async def test_warm_for_a_language_the_sandbox_does_not_run_is_refused_and_begins_nothing() -> None:
    async with ProcessRunner(mode="pool") as runner:
        assert runner.pool is not None and runner.server is not None
        with pytest.raises(
            ValueError, match="language must be one of javascript, python, not 'cobol'"
        ):
            runner.warm("cobol")
        await asyncio.sleep(0.05)
        assert runner.pool.warm == "javascript" and not runner.server.alive
        assert (await runner.run(script("return 1"))).value == 1


@pytest.mark.parametrize("mode", ["fork", "exec"])
async def test_warm_starts_the_fork_server_in_fork_mode_and_nothing_in_exec_mode(
    mode: str,
) -> None:
    before = running_children()
    runner = ProcessRunner(mode=mode)  # type: ignore[arg-type]
    try:
        runner.warm()
        if mode == "fork":
            assert runner.server is not None
            server = runner.server
            await until(lambda: server.alive, "the fork server to start")
        else:
            await asyncio.sleep(0.2)
            assert runner.server is None and running_children() == before
        assert (await runner.run(script("return 3"))).value == 3
    finally:
        await runner.aclose()
    assert running_children() == before


@pytest.mark.parametrize("mode", ["pool", "fork"])
async def test_aclose_as_warm_starts_the_fork_server_leaves_no_process(mode: str) -> None:
    """Closed while the fork server it began starts (or before), the runner ends it."""
    before = running_children()
    for wait in (0.0, 0.05, 0.2):
        runner = ProcessRunner(mode=mode)  # type: ignore[arg-type]
        runner.warm()
        await asyncio.sleep(wait)
        await runner.aclose()
        assert running_children() == before, wait
        runner.warm()  # closed: begins nothing
        await asyncio.sleep(0.05)
        assert running_children() == before, wait


def running_children() -> set[int]:
    """The pids of this process's children that have not exited."""
    running = set()
    for child in children_of(os.getpid()):
        with contextlib.suppress(psutil.NoSuchProcess):  # gone since it was listed
            if child.status() != psutil.STATUS_ZOMBIE:
                running.add(child.pid)
    return running


def ended(pid: int) -> bool:
    """Whether process ``pid`` runs no more (gone, or a zombie the fork server will reap)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def filled(runner: ProcessRunner, *, quiet: float, latest: float) -> WarmPool:
    """The runner's pool once full, with its quiet (``runner._quiet``) set as given."""
    pool = runner.pool
    assert pool is not None
    runner.quiet.quiet, runner.quiet.latest = quiet, latest
    await runner.run(script("return 1"))
    await until(lambda: len(pool.idle) == pool.size, "the pool to fill")
    return pool


async def test_the_refill_waits_while_a_live_run_waits_for_results() -> None:
    """With a child still in the pool, a refill waits until no live run waits for results
    (a script in the middle of its run), then comes once the runner was quiet."""
    async with ProcessRunner(mode="pool", pool_size=2) as runner:
        pool = await filled(runner, quiet=0.05, latest=3600.0)
        spawned = pool.spawned
        step = await runner.run(script("return await tools.t({})"), live=True)
        assert step.live is not None
        await asyncio.sleep(0.5)  # ten times the quiet the refill waits for
        assert (len(pool.idle), pool.spawned) == (1, spawned), "refilled mid-script"
        await step.live.close()
        await until(lambda: len(pool.idle) == 2, "the pool to refill once the run ended")
        assert pool.spawned == spawned + 1


async def test_a_refill_that_waits_comes_by_its_latest_time() -> None:
    """A live run that keeps waiting delays the refill by the quiet's ``latest`` at most."""
    async with ProcessRunner(mode="pool", pool_size=2) as runner:
        pool = await filled(runner, quiet=0.05, latest=0.5)
        loop = asyncio.get_running_loop()
        began = loop.time()
        step = await runner.run(script("return await tools.t({})"), live=True)
        assert step.live is not None
        try:
            await until(lambda: len(pool.idle) == 2, "the pool to refill by its latest time")
            # Not by its quiet (0.05 s) but by its latest (0.5 s), counted from when the refill
            # was first wanted: filled()'s own step can leave one wanted a few ms before this
            # step begins (a refill already wanted keeps its time), so with latest 0.3 and
            # this bound 0.3, CI once saw the refill 0.2998 s after.
            assert loop.time() - began >= 0.3
        finally:
            await step.live.close()


async def test_a_refill_after_a_step_comes_by_its_latest_time_however_long_the_quiet() -> None:
    """A step's end wants a refill once the runner is quiet; a quiet longer than the latest
    time does not hold it back past that time (the refill is woken at the sooner of the two,
    not when the step ends)."""
    async with ProcessRunner(mode="pool", pool_size=2) as runner:
        pool = await filled(runner, quiet=3600.0, latest=0.3)
        spawned = pool.spawned
        assert (await runner.run(script("return 2"))).value == 2
        await until(lambda: len(pool.idle) == 2, "the pool to refill by its latest time")
        assert pool.spawned == spawned + 1


async def test_an_empty_pool_refills_at_once_while_a_step_runs() -> None:
    """A pool left empty refills at once: its next step would fork on demand."""
    async with ProcessRunner(mode="pool", pool_size=1) as runner:
        pool = await filled(runner, quiet=3600.0, latest=3600.0)
        running = asyncio.create_task(runner.run(script("for (;;) {}", compute_ms=3000)))
        await until(lambda: len(pool.idle) == 1, "the pool to refill while the step runs")
        assert not running.done()
        step = await running
        assert step.limit is not None and step.limit.name == "compute_ms"


async def test_a_finished_process_is_ended_once_the_runner_is_quiet() -> None:
    """A process whose step is over waits, stopped, while a script is mid-run on the runner
    (here a live run waiting for its results), and is ended once the runner is quiet."""
    async with ProcessRunner(mode="pool", pool_size=2) as runner:
        pool = await filled(runner, quiet=0.05, latest=3600.0)
        live = (await runner.run(script("return await tools.t({})"), live=True)).live
        assert live is not None
        finished = pool.idle[0].pid  # the next step's
        assert (await runner.run(script("return 2"))).value == 2
        await asyncio.sleep(0.3)  # six times the quiet it waits for
        assert psutil.Process(finished).status() == psutil.STATUS_STOPPED
        await live.close()
        await until(lambda: ended(finished), "the finished process to be ended")


async def test_a_finished_process_is_stopped_only_if_it_waits_past_stop_ending_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One ended soon after its step (between scripts, the usual case) is never stopped
    first: no signal, and no wake of the process, on the way to the step's return."""
    monkeypatch.setattr(process_module, "STOP_ENDING_AFTER", 3600.0)
    async with ProcessRunner(mode="pool", pool_size=2) as runner:
        pool = await filled(runner, quiet=3600.0, latest=3600.0)
        finished = pool.idle[0].pid
        assert (await runner.run(script("return 2"))).value == 2
        await until(
            lambda: psutil.Process(finished).status() != psutil.STATUS_RUNNING,
            "the finished process to wait",
        )
        await asyncio.sleep(0.1)
        assert psutil.Process(finished).status() == psutil.STATUS_SLEEPING
        assert finished in {child.pid for child in runner._to_end.values()}


async def test_the_pool_readies_its_children_for_the_language_of_the_last_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a Python step the pool forks its children ready for Python (a trivial Python
    step's child then uses half the CPU), after a JavaScript one for JavaScript (sparing a
    JavaScript host their memory); a child made ready for one runs the other all the same."""
    async with ProcessRunner(mode="pool", slots=1, pool_size=1) as runner:
        assert runner.server is not None
        asked: list[str] = []
        spawn = runner.server.spawn

        async def spawn_and_note(**kwargs: Any) -> Any:
            if "warm" in kwargs:  # the pool's (a step that finds none forks its own)
                asked.append(kwargs["warm"])
            return await spawn(**kwargs)

        monkeypatch.setattr(runner.server, "spawn", spawn_and_note)
        python = script("return 6 * 7").model_copy(update={"language": "python"})
        for language, step in (("python", python), ("javascript", script("return 42"))) * 2:
            assert (await runner.run(step)).value == 42
            await until(lambda: len(runner.pool.idle) == 1, "the pool to refill")
            assert asked[-1] == language, asked


async def test_at_most_one_finished_process_per_slot_waits_for_quiet() -> None:
    """Past one waiting process per slot, a finished process is ended at once: a burst of
    steps does not leave a process (its memory, its fds) behind each."""
    async with ProcessRunner(mode="pool", slots=1, pool_size=2) as runner:
        pool = await filled(runner, quiet=0.05, latest=3600.0)
        await until(lambda: runner.ending == 0, "the first step's process to be ended")
        runner.quiet.quiet = 3600.0
        first, second = (child.pid for child in pool.idle)
        assert (await runner.run(script("return 2"))).value == 2
        assert (await runner.run(script("return 3"))).value == 3
        assert runner.ending == 1
        assert wait_gone([second]) == [], "the second finished process was not ended at once"
        assert not ended(first)
        await until(
            lambda: psutil.Process(first).status() == psutil.STATUS_STOPPED,
            "the first finished process to wait, stopped",
        )


async def test_a_process_waiting_for_quiet_is_ended_if_its_wait_is_cancelled() -> None:
    """The loop ending cancels the waits: the processes are ended, not left stopped."""
    async with ProcessRunner(mode="pool", pool_size=2) as runner:
        pool = await filled(runner, quiet=3600.0, latest=3600.0)
        finished = pool.idle[0].pid
        assert (await runner.run(script("return 2"))).value == 2
        await asyncio.sleep(0)  # the waits begin
        for task in list(runner._to_end):
            task.cancel()
        await until(lambda: ended(finished), "the finished process to be ended")
        assert runner.ending == 0


async def test_aclose_ends_the_processes_that_wait_for_quiet_at_once() -> None:
    runner = ProcessRunner(mode="pool", pool_size=2)
    try:
        pool = await filled(runner, quiet=3600.0, latest=3600.0)
        finished = pool.idle[0].pid
        assert (await runner.run(script("return 2"))).value == 2
        await until(
            lambda: psutil.Process(finished).status() == psutil.STATUS_STOPPED,
            "the finished process to stop",
        )
    finally:
        async with asyncio.timeout(EVENT_TIMEOUT):
            await runner.aclose()
    assert wait_gone([finished]) == []


async def test_a_child_that_died_waiting_is_discarded_not_used() -> None:
    async with ProcessRunner(mode="pool", pool_size=2) as runner:
        assert runner.pool is not None
        await runner.run(script("return 1"))
        await until(lambda: len(runner.pool.idle) == 2, "the pool to fill")
        victim = runner.pool.idle[0]
        assert victim.pidfd is not None
        signal.pidfd_send_signal(victim.pidfd, signal.SIGKILL)
        # Dead, but the runner has not heard yet (the zygote's report may be on its way).
        select.select([victim.pidfd], [], [], EVENT_TIMEOUT)
        step = await runner.run(script("return 'fine'"))
        assert step.outcome == "finished" and step.value == "fine"
        await until(lambda: victim not in runner.pool.idle, "the dead child to go")


async def test_the_pool_shrinks_to_one_child_when_idle() -> None:
    clock = FakeClock()
    async with ProcessRunner(mode="pool", pool_size=3) as runner:
        assert runner.pool is not None
        runner.pool.clock = clock
        await runner.run(script("return 1"))
        await until(lambda: len(runner.pool.idle) == 3, "the pool to fill")
        clock.now += 29
        assert runner.pool.shrink_if_idle() == 0
        clock.now += 2
        assert runner.pool.shrink_if_idle() == 2
        assert len(runner.pool.idle) == 1
        zygote = runner.server.zygote_pid if runner.server else None
        await until(lambda: len(children_of(zygote)) == 1, "the surplus children to exit")
        # Busy again: back to full size.
        await runner.run(script("return 1"))
        await until(lambda: len(runner.pool.idle) == 3, "the pool to grow back")


async def test_a_script_over_the_pool_heap_gets_a_child_forked_for_it() -> None:
    """Pool children's heap is set for the default memory; a bigger script is forked anew."""
    async with ProcessRunner(mode="pool", pool_size=1) as runner:
        assert runner.pool is not None and runner.server is not None
        await runner.run(script("return 1"))
        await until(lambda: len(runner.pool.idle) == 1, "the pool to fill")
        waiting = runner.pool.idle[0]
        memory = 2 * POOL_MEMORY  # needs a 1 GiB heap; pool children have 512 MiB
        task = runner.run(script("for (;;) {}", memory=memory, compute_ms=1000))
        running = asyncio.create_task(task)
        zygote = runner.server.zygote_pid

        def busy_child() -> int | None:
            for child in children_of(zygote):
                if child.pid != waiting.pid and limits_of(child.pid).get("Max cpu time") == (
                    "2",
                    LIVE_HARD_CPU,
                ):
                    return child.pid
            return None

        await until(busy_child, "the script's child to be tightened")
        pid = busy_child()
        assert pid is not None
        soft, hard = limits_of(pid)["Max data size"]
        assert soft == str(2 * memory)
        # A live run's hard limit leaves room for the results lines it may still read (as a
        # replay's script line has), and no more: a subverted process can take only that.
        most = protocol.run_results_bound(protocol.Limits(memory=memory))
        assert 2 * memory < int(hard) <= 2 * memory + LINE_ROOM_FACTOR * most
        assert waiting in runner.pool.idle  # the pool child was left for a script it fits
        step = await running
        assert step.limit is not None and step.limit.name == "compute_ms"


async def test_pool_children_lower_their_limits_to_the_script() -> None:
    """RLIMIT_CPU becomes the script's allowance + 1 s (soft) once it is read; a version 2
    script keeps the hard limit the child was forked with (its live segments re-arm it), a
    version 1 script lowers it to the allowance + 2 s."""
    async with ProcessRunner(mode="pool", pool_size=1, data_limit=700 * MiB) as runner:
        assert runner.pool is not None and runner.server is not None
        await runner.run(script("return 1"))
        await until(lambda: len(runner.pool.idle) == 1, "the pool to fill")
        child = runner.pool.idle[0]
        assert limits_of(child.pid)["Max cpu time"] == FORKED_CPU  # lockdown's backstop
        assert limits_of(child.pid)["Max data size"] == (str(700 * MiB),) * 2
        running = asyncio.create_task(
            runner.run(script("for (;;) {}", compute_ms=1000, memory=64 * MiB))
        )
        await until(
            lambda: limits_of(child.pid)["Max cpu time"] == ("2", LIVE_HARD_CPU), "tighten to apply"
        )
        assert limits_of(child.pid)["Max data size"] == (str(700 * MiB),) * 2
        step = await running
        assert step.limit is not None and step.limit.name == "compute_ms"
        await until(lambda: len(runner.pool.idle) == 1, "the pool to fill")
        child = runner.pool.idle[0]
        v1 = script("for (;;) {}", compute_ms=1000, memory=64 * MiB).model_copy(
            update={"version": 1}
        )
        running = asyncio.create_task(runner.run(v1))
        await until(lambda: limits_of(child.pid)["Max cpu time"] == ("2", "3"), "tighten to apply")
        step = await running
        assert step.limit is not None and step.limit.name == "compute_ms"


async def test_fork_server_and_children_run_as_batch() -> None:
    """The fork server and every child it forks run under SCHED_BATCH: a child woken with a
    script or results, or ended, does not preempt the host's event loop (the fork server's
    forking ahead is background work too)."""
    async with ProcessRunner(mode="pool", pool_size=1) as runner:
        assert runner.pool is not None and runner.server is not None
        await runner.run(script("return 1"))
        await until(lambda: len(runner.pool.idle) == 1, "the pool to fill")
        assert runner.server.popen is not None
        assert os.sched_getscheduler(runner.server.popen.pid) == os.SCHED_BATCH
        assert os.sched_getscheduler(runner.pool.idle[0].pid) == os.SCHED_BATCH
        assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the host itself is left as it is


async def test_children_wait_at_a_low_priority_and_run_at_the_normal_one() -> None:
    if os.geteuid() != 0:
        require("root: only root may set a taken child back to the host's nice value")
    async with ProcessRunner(mode="pool", pool_size=1) as runner:
        assert runner.pool is not None and runner.server is not None
        await runner.run(script("return 1"))
        await until(lambda: len(runner.pool.idle) == 1, "the pool to fill")
        waiting = runner.pool.idle[0]
        base = os.getpriority(os.PRIO_PROCESS, 0)  # the host may itself run niced
        assert psutil.Process(waiting.pid).nice() == min(19, base + NICE)
        running = asyncio.create_task(runner.run(script("for (;;) {}", compute_ms=1000)))
        await until(
            lambda: limits_of(waiting.pid).get("Max cpu time") == ("2", LIVE_HARD_CPU),
            "the step to run",
        )
        assert psutil.Process(waiting.pid).nice() == base
        step = await running
        assert step.limit is not None and step.limit.name == "compute_ms"


async def test_a_child_that_does_not_get_ready_in_time_is_named_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A child that says nothing within spawn_timeout fails the refill with a reason (the
    warning read "a pool child did not become ready: ", a TimeoutError's text being
    empty)."""
    from runner import _pool
    from runner._base import RunError

    async def silent(*args: Any, **kwargs: Any) -> Any:
        raise TimeoutError

    async with ProcessRunner(mode="pool", pool_size=1) as runner:
        pool = runner.pool
        assert pool is not None
        await runner.run(script("return 1"))
        await until(lambda: len(pool.idle) == 1, "the pool to fill")
        monkeypatch.setattr(_pool.conv, "await_ready", silent)
        while pool.idle:  # so refill forks one
            await pool._drop(pool.idle.popleft())
        with pytest.raises(RunError, match=r"did not become ready: TimeoutError \(it did not"):
            await pool.refill()
