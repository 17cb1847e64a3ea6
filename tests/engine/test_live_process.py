"""Live steps with real confined processes (``ProcessRunner``'s warm pool, which needs Linux
and libseccomp as every ProcessRunner test does): a live run goes on in the same process, and
no live process is left after evictions, after a pause or after ``aclose``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psutil
import pytest

from engine import CodeMode, CodeModeError, Limits, StepUnavailable, tool
from engine._live import LiveRuns
from runner import LiveRun, ProcessRunner
from tests.runner.support import until

SEQUENTIAL = "let n = 0; for (let i = 0; i < 20; i++) n = await tools.inc({ n }); return n"


@tool
def inc(n: int) -> int:
    """Add one."""
    return n + 1


def _descendants(before: frozenset[int] = frozenset()) -> list[psutil.Process]:
    """This process's descendants that are still running (zombies are gone but unreaped),
    but those of ``before`` (what another test's fixture of this worker keeps: pytest-xdist
    may run this between the tests of a module that holds one)."""
    alive = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            pass
    return alive


def _running_now() -> frozenset[int]:
    return frozenset(p.pid for p in _descendants())


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a process that ends while it is looked at does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def _gone(pids: list[int]) -> list[int]:
    """The pids of ``pids`` still running after they were given a few seconds to go."""
    left = pids
    for _ in range(500):
        left = [pid for pid in pids if _running(pid)]
        if not left:
            break
        await asyncio.sleep(0.01)
    return left


class _Recording(LiveRuns):
    """Live runs that remember the process of every run they kept."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.pids: list[int] = []

    def keep(self, key: Any, run: LiveRun, first: int, calls: Any) -> None:
        self.pids.append(run.child.pid)  # type: ignore[attr-defined]
        super().keep(key, run, first, calls)


@pytest.mark.parametrize("language", ["javascript", "python"])
async def test_entering_the_engine_warms_its_runner_for_its_language(language: str) -> None:
    """`async with CodeMode(...)` starts its runner's fork server and fills its pool, for the
    engine's language, before any run_code: the first run_code takes a process made ready
    then. Nothing is left running after."""
    before = _running_now()
    runner = ProcessRunner(mode="pool", pool_size=1)
    engine = CodeMode([inc], runner=runner, language=language, type_check="off")  # type: ignore[arg-type]
    assert runner.pool is not None and runner.pool.spawned == 0
    async with engine:
        await until(lambda: runner.pool is not None and len(runner.pool.idle) == 1, "a child")
        assert runner.pool.warm == language
        ready = runner.pool.idle[0].pid
        result = await engine.run_code("return 6 * 7")
        assert result.value == 42, result.text
        assert ready not in [child.pid for child in runner.pool.idle]
    assert _descendants(before) == []


async def test_a_live_run_goes_on_in_one_process(tmp_path: Path) -> None:
    """Twenty calls on the SQLite log: one process from the start to the end (each segment's
    process is the one before it), the same value as by replay, and none left running."""
    before = _running_now()
    runner = ProcessRunner(mode="pool")
    engine = CodeMode([inc], runner=runner, data_dir=tmp_path, type_check="off")
    engine._live = _Recording(wait=60, max_count=8, max_memory=1 << 34)
    try:
        live = await engine.run_code(SEQUENTIAL)
        assert live.value == 20 and live.steps == 21
        pids = engine._live.pids  # type: ignore[attr-defined]
        assert len(pids) == 20 and len(set(pids)) == 1
        await engine._live.drain()
        assert runner.live_runs == 0
        assert await _gone(pids) == []
        replayed = CodeMode([inc], runner=runner, data_dir=tmp_path, live=False)
        again = await replayed.run_code(SEQUENTIAL)
        await replayed.aclose()
        assert (again.value, again.text) == (live.value, live.text)
    finally:
        await engine.aclose()
    assert _descendants(before) == []


async def test_no_live_process_is_left_after_evictions_or_aclose(tmp_path: Path) -> None:
    """Four scripts whose first calls wait for each other, with room for two live runs: the
    two that do not fit are not kept and their processes end at once; the two kept are
    ended by ``aclose`` while their calls still run; no process of the runner is left."""
    before = _running_now()
    barrier = asyncio.Barrier(5)

    @tool
    async def meet(n: int) -> int:
        """Return once every script's first call (and the test) got here."""
        await barrier.wait()
        await barrier.wait()  # the test looks at the processes in between
        return n

    runner = ProcessRunner(mode="pool")
    # Once aclose ended the runner, the scripts' next steps give up soon.
    engine = CodeMode(
        [meet],
        runner=runner,
        data_dir=tmp_path,
        type_check="off",
        queue_timeout=1.0,
        retry_delay=0.1,
    )
    recording = _Recording(wait=600, max_count=2, max_memory=1 << 34)
    engine._live = recording
    tasks = [
        asyncio.create_task(engine.run_code(f"return await tools.meet({{ n: {n} }})"))
        for n in range(4)
    ]
    closed = False
    try:
        await barrier.wait()
        await recording.drain()
        assert recording.kept == 2 and recording.evicted == 2 and len(recording) == 2
        kept, evicted = recording.pids[:2], recording.pids[2:]
        assert await _gone(evicted) == []
        assert all(psutil.pid_exists(pid) for pid in kept)
        assert runner.live_runs == 2
        await engine.aclose()
        closed = True
        assert await _gone(kept) == [] and runner.live_runs == 0
        assert await _gone([p.pid for p in _descendants(before)]) == []
    finally:
        if not closed:
            await barrier.wait()  # lets the calls return
        results = await asyncio.gather(*tasks, return_exceptions=True)
    # aclose ended the calls under them: each run_code ended on a CodeModeError, and the log
    # keeps each script for a resume.
    assert all(isinstance(r, CodeModeError) for r in results), results


async def test_a_pause_ends_the_live_process(tmp_path: Path) -> None:
    """A call that waits for a person: the process that ran up to it is gone when run_code
    returns paused."""

    @tool(needs_approval=True)
    def pay(cents: int) -> str:
        """Pay."""
        return "paid"

    runner = ProcessRunner(mode="pool")
    engine = CodeMode([inc, pay], runner=runner, data_dir=tmp_path, type_check="off")
    engine._live = _Recording(wait=600, max_count=8, max_memory=1 << 34)
    try:
        paused = await engine.run_code(
            "const n = await tools.inc({ n: 1 }); return await tools.pay({ cents: n })"
        )
        assert paused.status == "paused"
        await engine._live.drain()
        pids = engine._live.pids  # type: ignore[attr-defined]
        assert len(pids) == 2 and await _gone(pids) == [] and runner.live_runs == 0
        await engine.approve(paused.script_id, paused.waiting[0]["call_id"])
        done = await engine.resume(paused.script_id)
        assert done.value == "paid"
    finally:
        await engine.aclose()


async def test_aclose_ends_the_steps_under_way_and_those_waiting_for_a_slot() -> None:
    """aclose() while one script's step computes in the only slot and another's waits for
    it: both run_codes end at once on a CodeModeError. The closed runner's error was retried
    every retry_delay until queue_timeout (five minutes here), and they hung that long."""
    computing = asyncio.Event()

    @tool
    def begin() -> int:
        """Say the script began."""
        return 1

    def on_event(event: Any) -> None:
        if event.kind == "call.done":
            computing.set()

    engine = CodeMode(
        [begin],
        runner=ProcessRunner(mode="pool", slots=1),
        type_check="off",
        live=False,
        queue_timeout=300,
        on_event=on_event,
    )
    spin = "await tools.begin({}); let x = 0; for (;;) x++;"
    first = asyncio.create_task(engine.run_code(spin))
    await computing.wait()
    second = asyncio.create_task(engine.run_code("return 2"))
    await asyncio.sleep(
        0.5
    )  # its step asks for the slot (it may not have yet: then it ends the same)
    await engine.aclose()
    for run in (first, second):
        with pytest.raises(CodeModeError, match="closed"):
            await asyncio.wait_for(run, 30)


async def test_a_closed_runner_fails_the_step_at_once_saying_so(tmp_path: Path) -> None:
    """An engine given a runner another engine's aclose() closed: run_code fails at once,
    saying the runner is closed and why. It was retried as a runner that is busy, every
    retry_delay for queue_timeout (five minutes by default), and then said to resume later."""
    runner = ProcessRunner(mode="pool")
    first = CodeMode([inc], runner=runner, data_dir=tmp_path, type_check="off")
    assert (await first.run_code("return 1")).value == 1
    await first.aclose()
    second = CodeMode([inc], runner=runner, data_dir=tmp_path, type_check="off", queue_timeout=1)
    try:
        with pytest.raises(StepUnavailable) as raised:
            await second.run_code("return 2")
    finally:
        await second.aclose()
    assert raised.value.permanent
    assert "this runner is closed (an engine's aclose() closes its runner" in str(raised.value)


async def test_a_python_scripts_results_count_outside_its_memory_live_as_replayed(
    tmp_path: Path,
) -> None:
    """A Python script with 4 MiB of memory reads a 7 MB result after its first call: live,
    as replayed (where the result comes in the script line, outside ``memory``), it finishes.
    Its live run failed on the memory limit: the results line had no room of its own."""

    @tool
    def text(n: int) -> str:
        """Text of n bytes."""
        return "x" * n

    code = "await tools.inc(n=1)\ns = await tools.text(n=7_000_000)\nreturn len(s)"
    outcomes = []
    for live in (True, False):
        engine = CodeMode(
            [inc, text],
            runner=ProcessRunner(mode="pool"),
            data_dir=tmp_path / str(live),
            type_check="off",
            language="python",
            limits=Limits(memory="4mb"),
            live=live,
        )
        try:
            result = await engine.run_code(code)
            outcomes.append((result.status, result.value, result.text))
            assert engine._live.resumed == (2 if live else 0)
        finally:
            await engine.aclose()
    assert outcomes[0] == outcomes[1] == ("finished", 7_000_000, outcomes[1][2])


async def test_a_python_finalizer_the_collector_runs_makes_no_call(tmp_path: Path) -> None:
    """A __del__ of an object in a reference cycle runs when the garbage collector does,
    which differs between the live run and the replay after a pause: a call made there
    made the replay's calls differ from the log's (DivergenceError). Such a call is not
    made: the script goes on, and says why once. A finalizer that its object's last
    reference runs (no cycle) runs at the same point on every run, and its call is made."""

    @tool(needs_approval=True)
    def pay(cents: int) -> str:
        """Pay."""
        return "paid"

    code = (
        "class Cycle:\n"
        "    def __init__(self):\n"
        "        self.me = self\n"
        "    def __del__(self):\n"
        "        tools.inc(n=100)\n"
        "class Plain:\n"
        "    def __del__(self):\n"
        "        tools.inc(n=-1)\n"
        "Plain()\n"
        "n = 0\n"
        "for i in range(300):\n"
        # Four cycles a call: 1,200 objects only the collector frees, past its first
        # threshold (700) in every run, whatever count the run began at.
        "    Cycle(); Cycle(); Cycle(); Cycle()\n"
        "    n = await tools.inc(n=n)\n"
        "return await tools.pay(cents=n)\n"
    )
    engine = CodeMode(
        [inc, pay],
        runner=ProcessRunner(mode="pool"),
        data_dir=tmp_path,
        type_check="off",
        language="python",
    )
    try:
        paused = await engine.run_code(code)
        assert paused.status == "paused", paused.text
        await engine.approve(paused.script_id, paused.waiting[0]["call_id"])
        done = await engine.resume(paused.script_id)
        assert done.status == "finished", done.text
        assert done.value == "paid"
        assert "line 5: Warning: an exception in Cycle.__del__ was ignored: RuntimeError: " in (
            done.text
        )
        assert "garbage collector" in done.text
        calls = await engine.store.calls(paused.script_id)
        assert [c.arguments["n"] for c in calls if c.name == "inc"] == [-1, *range(300)]
    finally:
        await engine.aclose()


async def test_runs_waiting_for_a_slot_to_resume_count_in_the_live_budget(tmp_path: Path) -> None:
    """Twelve scripts at once on one slot, with a budget of two live runs: a run taken to be
    resumed waits for the slot with its process alive, and it counts in the budget until its
    segment is over. It did not: each script waiting for the slot with its results held a
    stopped process outside the budget (a host of 400 scripts met its 1,024 open files), so
    the live processes were as many as the scripts."""
    runner = ProcessRunner(mode="pool", slots=1)
    seen: list[int] = []

    @tool
    async def step(n: int) -> int:
        """Add one, noting how many live processes the runner holds now."""
        seen.append(runner.live_runs)
        return n + 1

    engine = CodeMode(
        [step], runner=runner, data_dir=tmp_path, type_check="off", live_max=2, live_wait=60
    )
    code = "let n = 0; for (let i = 0; i < 4; i++) n = await tools.step({ n }); return n"
    try:
        results = await asyncio.gather(*(engine.run_code(code) for _ in range(12)))
    finally:
        await engine.aclose()
    assert [(r.status, r.value) for r in results] == [("finished", 4)] * 12
    assert len(seen) == 48
    assert max(seen) <= 2 + 1, seen  # the budget, and a new step's run not yet turned away
    assert runner.live_runs == 0
