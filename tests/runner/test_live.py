"""Live steps through a real confined process (``ProcessRunner`` in pool and fork modes).

The process of a version 2 script that stopped on calls is kept (``Step.live``), waits for
their records without holding a slot, and goes on with the same run. Each test checks the
live run against a replay of the same log (tests/sandbox/test_live.py holds the semantics),
and that nothing is left running afterwards. Needs what the other process tests need
(Linux, seccomp; root to drop to ``nobody``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import os
import signal
from typing import Any

import orjson
import psutil
import pytest

from runner import LiveRun, ProcessRunner, ProcessStats, RunError, Step
from runner import _conversation as conv
from runner import _live as live_module
from runner._live import ProcessLive
from sandbox import protocol, runtime
from sandbox.protocol import Record, Script
from tests._needs import require
from tests.runner.conftest import open_fds
from tests.runner.support import script, until, wait_gone, zombies

MODES = ["pool", "fork"]

SEQUENTIAL = """
let total = 0;
for (let i = 0; i < 5; i++) { const r = await tools.t({ i }); total += r.v; console.log("got", i, r.v); }
const both = await Promise.all([tools.t({ i: 10 }), tools.t({ i: 11 })]);
return [total, both.map((r) => r.v)];
"""


def record(call: protocol.Call) -> Record:
    return Record(name=call.name, arguments=call.arguments, result={"v": 10 * call.arguments["i"]})


def outcome(step: Step) -> bytes:
    body = step.model_dump(mode="json", exclude_unset=True, exclude={"stats", "process", "live"})
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def pid_of(live: LiveRun | None) -> int:
    assert isinstance(live, ProcessLive)
    return live.child.pid


async def replay(runner: ProcessRunner, s: Script) -> list[Step]:
    records: list[Record] = []
    steps = []
    while True:
        step = await runner.run(s.model_copy(update={"records": list(records)}))
        assert step.live is None
        steps.append(step)
        if step.outcome != "calls":
            return steps
        records += [record(c) for c in step.calls]


async def live_run(runner: ProcessRunner, s: Script) -> tuple[list[Step], set[int]]:
    step = await runner.run(s, live=True)
    steps, pids = [step], set()
    while step.live is not None:
        pids.add(pid_of(step.live))
        assert step.live.waiting == len(step.calls)
        step = await step.live.resume([record(c) for c in step.calls])
        steps.append(step)
    return steps, pids


@pytest.mark.parametrize("mode", MODES)
async def test_a_live_run_is_one_process_and_agrees_with_replay(mode: str) -> None:
    before = open_fds()
    async with ProcessRunner(mode=mode, slots=2) as runner:  # type: ignore[arg-type]
        s = script(SEQUENTIAL)
        lived, pids = await live_run(runner, s)
        replayed = await replay(runner, s)
        assert [outcome(x) for x in lived] == [outcome(x) for x in replayed]
        assert len(lived) == 7 and len(pids) == 1
        assert lived[-1].outcome == "finished" and lived[-1].value == [100, [100, 110]]
        for step in lived:
            assert step.process is not None and step.process.wall_ms > 0
            assert step.process.cpu_ms > 0 and step.process.max_rss_bytes > 0
        assert runner.live_runs == 0
        # Ended once the runner is quiet (runner._quiet), which takes the loop: not blocked.
        await until(lambda: wait_gone(list(pids), timeout=0) == [], "the live process to end")
    assert zombies() == []
    await until(lambda: open_fds() == before, "every fd of the runner to be closed")


async def test_a_waiting_process_holds_no_slot() -> None:
    async with ProcessRunner(mode="pool", slots=1, script_wait=60) as runner:
        first = await runner.run(script("await tools.t({ i: 1 }); return 1"), live=True)
        assert first.live is not None and runner.slots.in_use == 0
        # The one slot is free for another step while the first waits.
        other = await runner.run(script("return 2"))
        assert other.value == 2
        last = await first.live.resume([record(c) for c in first.calls])
        assert last.value == 1 and last.live is None
        assert runner.slots.in_use == 0


async def _settled(pid: int) -> str:
    """The process's state once it no longer runs (it has just written its ``ran``)."""
    await until(lambda: psutil.Process(pid).status() != psutil.STATUS_RUNNING, "it to wait")
    return str(psutil.Process(pid).status())


async def test_a_process_is_stopped_only_once_it_has_waited_park_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Results that come within ``PARK_AFTER`` find the process running, blocked on its
    read: a quick call costs no SIGSTOP and SIGCONT (and no wakes of the process for them).
    One that waits longer is stopped, and continued by its results."""
    monkeypatch.setattr(live_module, "PARK_AFTER", 0.5)
    async with ProcessRunner(mode="pool") as runner:
        step = await runner.run(script(SEQUENTIAL), live=True)
        assert step.live is not None
        pid = pid_of(step.live)
        assert await _settled(pid) == psutil.STATUS_SLEEPING
        step = await step.live.resume([record(c) for c in step.calls])
        assert step.live is not None and await _settled(pid) == psutil.STATUS_SLEEPING
        await until(
            lambda: psutil.Process(pid).status() == psutil.STATUS_STOPPED, "the process to stop"
        )
        while step.live is not None:
            step = await step.live.resume([record(c) for c in step.calls])
        assert step.outcome == "finished" and step.value == [100, [100, 110]], step


def _burn(cpu_ms: float) -> int:
    """A loop count that takes about ``cpu_ms`` of CPU in QuickJS on this machine."""
    probe = 2_000_000
    ran = runtime.run_in_process(script(f"let x = 0; for (let i = 0; i < {probe}; i++) x += i;"))
    return int(probe * cpu_ms / max(ran.stats.cpu_ms, 1.0))


async def test_compute_ms_is_per_segment_live_and_by_replay() -> None:
    """Five segments of ~0.4 of the allowance each: a live run finishes, and so does a replay
    of the last step (which runs all five): its process re-arms compute_ms as it settles
    each recorded batch, as the live one did at each resume, so the script ends the same way
    however its steps ran. A segment over the allowance meets it either way; a version 1
    run (no segments) has one allowance for the whole run. (The loop's calibration can be
    off by 40% under load: each figure has that much room.)"""
    n = _burn(400)
    code = f"""
    for (let k = 0; k < 5; k++) {{
      let x = 0; for (let i = 0; i < {n}; i++) x += i;
      await tools.t({{ i: k }});
    }}
    let x = 0; for (let i = 0; i < globalThis.last; i++) x += i;
    return "done";"""
    s = script(code, compute_ms=1000)
    records = [Record(name="t", arguments={"i": k}, result={"v": 0}) for k in range(5)]
    async with ProcessRunner(mode="pool", slots=2) as runner:
        lived, _ = await live_run(runner, s)
        assert lived[-1].outcome == "finished", lived[-1].error
        for step in lived[:5]:
            assert step.process is not None and step.process.cpu_ms < 1000
        replayed = await runner.run(s.model_copy(update={"records": records}))
        assert replayed.outcome == "finished", replayed.error
        assert replayed.process is not None and replayed.process.cpu_ms > 1000
        # The new segment after the replayed ones has one allowance, as live.
        over = code.replace("globalThis.last", str(6 * n))
        last = await runner.run(
            script(over, compute_ms=1000).model_copy(update={"records": records})
        )
        assert last.limit is not None and last.limit.name == "compute_ms"
        one_run = s.model_copy(update={"records": records, "version": 1})
        last = await runner.run(one_run)
        assert last.limit is not None and last.limit.name == "compute_ms"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("code", ["await tools.t({ i: 1 })", "return 1", "null.x"])
async def test_a_step_returns_at_ran(mode: str, code: str) -> None:
    """A forked step that is not kept returns when `ran` arrives, measured from /proc (no
    exit status yet: it is ended and the fork server reaps it); nothing is left after
    aclose."""
    before = open_fds()
    async with ProcessRunner(mode=mode) as runner:  # type: ignore[arg-type]
        step = await runner.run(script(code))
        assert step.live is None
        assert step.process is not None and step.process.exit_status is None
        assert step.process.cpu_ms > 0 and step.process.max_rss_bytes > 0
    assert zombies() == []
    await until(lambda: open_fds() == before, "every fd of the runner to be closed")


@pytest.mark.parametrize("mode", MODES)
async def test_a_step_is_charged_the_cpu_from_its_script_on(mode: str) -> None:
    """What a forked process used before it had the script (its fork, its lockdown, a pool
    child's touching of its pages: milliseconds of CPU) is not the script's: the step is
    charged less than the process's whole CPU, read while it waits, stopped."""
    async with ProcessRunner(mode=mode) as runner:  # type: ignore[arg-type]
        step = await runner.run(script("await tools.t({ i: 1 }); return 1"), live=True)
        assert step.process is not None and step.live is not None
        with open(f"/proc/{pid_of(step.live)}/schedstat") as f:
            whole_ms = int(f.read().split()[0]) / 1e6
        # Lockdown alone is a few milliseconds of CPU; the run of one line, far less.
        assert 0 < step.process.cpu_ms < whole_ms - 1.0, (step.process.cpu_ms, whole_ms)
        await step.live.close()


async def test_an_exec_step_is_charged_the_cpu_from_its_script_on() -> None:
    """An exec'd process starts Python and warms up (a hundred milliseconds of CPU or more)
    before it reads the script; its step is charged its run, not that."""
    async with ProcessRunner(mode="exec") as runner:
        step = await runner.run(script("return 1"))
        assert step.process is not None and step.process.exit_status == 0
        assert 0 < step.process.cpu_ms < 50, step.process.cpu_ms


async def test_an_exec_step_waits_for_its_process() -> None:
    """Exec mode reaps its own processes: a step returns with wait4's figures (a version 2
    process, told by the end of its input, exits 0)."""
    async with ProcessRunner(mode="exec") as runner:
        step = await runner.run(script("await tools.t({ i: 1 })"), live=True)
        assert step.outcome == "calls" and step.live is None
        assert step.process is not None and step.process.exit_status == 0


async def test_a_version_1_step_is_never_kept() -> None:
    async with ProcessRunner(mode="pool") as runner:
        v1 = script("await tools.t({ i: 1 })").model_copy(update={"version": 1})
        step = await runner.run(v1, live=True)
        assert step.outcome == "calls" and step.live is None


async def test_resume_refuses_wrong_records_and_ends_the_process() -> None:
    async with ProcessRunner(mode="pool") as runner:
        first = await runner.run(script("await tools.t({ i: 1 }); return 1"), live=True)
        assert first.live is not None
        pid = pid_of(first.live)
        with pytest.raises(RunError, match="waits for 1 results and was sent 2"):
            await first.live.resume([record(first.calls[0])] * 2)
        assert wait_gone([pid]) == []
        assert runner.live_runs == 0
        with pytest.raises(RunError, match="over"):
            await first.live.resume([record(first.calls[0])])


async def test_resume_of_a_record_for_another_call_is_refused() -> None:
    async with ProcessRunner(mode="pool") as runner:
        first = await runner.run(script("await tools.t({ i: 1 }); return 1"), live=True)
        assert first.live is not None
        with pytest.raises(RunError, match="not of call 1"):
            await first.live.resume([Record(name="t", arguments={"i": 2}, result=1)])


async def test_a_process_gone_while_waiting_makes_resume_raise() -> None:
    async with ProcessRunner(mode="pool") as runner:
        first = await runner.run(script("await tools.t({ i: 1 }); return 1"), live=True)
        assert first.live is not None
        live = first.live
        assert isinstance(live, ProcessLive)
        live.child.kill()
        await until(lambda: not live.child.alive(), "the process to end")
        with pytest.raises(RunError, match="ended while it waited"):
            await live.resume([record(first.calls[0])])
        assert runner.live_runs == 0
    assert zombies() == []


async def test_a_process_killed_from_outside_as_its_results_go_makes_resume_raise() -> None:
    """A live process killed by another (the OOM killer, a person) just before its results
    are sent may still look alive, and take them into its pipe, as it dies: the segment then
    ends without a report, which is not the script's doing (it was read as the memory limit,
    failing the script for good). Resume raises RunError either way, and the step replays."""
    async with ProcessRunner(mode="pool") as runner:
        for _ in range(5):
            first = await runner.run(script("await tools.t({ i: 1 }); return 1"), live=True)
            assert first.live is not None
            pid = pid_of(first.live)
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(RunError, match="live process"):
                await first.live.resume([record(first.calls[0])])
            assert wait_gone([pid]) == []
        assert runner.live_runs == 0
    assert zombies() == []


@pytest.mark.parametrize(
    ("term", "code", "said"),
    [
        (signal.SIGKILL, None, "by SIGKILL"),
        (signal.SIGSEGV, None, "by SIGSEGV"),
        (None, 3, "with exit code 3"),
    ],
)
def test_a_resumed_segment_that_ends_unreported_is_not_the_scripts_failure(
    term: int | None, code: int | None, said: str
) -> None:
    """How a segment's silent end is read: a run's first segment fails the script (the
    SIGKILL no runner sent is the OOM killer's, its memory); a resumed one raises RunError.
    What is surely the script's (MemoryError on stderr) fails it either way."""
    s = script("return 1")
    ended = conv.Outcome()
    stats = ProcessStats(max_rss_bytes=MiB)
    first = conv.step_from(ended, s, stats, term_signal=term, exit_code=code, killed_by_us=False)
    assert first.outcome == "failed" and first.error is not None
    assert first.limit is not None if term == signal.SIGKILL else first.limit is None
    with pytest.raises(RunError, match=f"live process ended {said} during its segment"):
        conv.step_from(
            ended, s, stats, term_signal=term, exit_code=code, killed_by_us=False, resumed=True
        )
    memory = conv.step_from(
        ended,
        s,
        stats,
        term_signal=term,
        exit_code=code,
        killed_by_us=False,
        stderr_tail="MemoryError\n",
        resumed=True,
    )
    assert memory.limit is not None and memory.limit.name == "memory"


async def test_close_is_idempotent_and_resume_after_close_raises() -> None:
    async with ProcessRunner(mode="pool") as runner:
        first = await runner.run(script("await tools.t({ i: 1 }); return 1"), live=True)
        assert first.live is not None
        pid = pid_of(first.live)
        await first.live.close()
        await first.live.close()
        assert wait_gone([pid]) == []
        assert first.live.memory_bytes == 0
        with pytest.raises(RunError):
            await first.live.resume([record(first.calls[0])])


async def test_concurrent_resumes_one_wins() -> None:
    async with ProcessRunner(mode="pool") as runner:
        first = await runner.run(script("await tools.t({ i: 1 }); return 1"), live=True)
        assert first.live is not None
        records = [record(first.calls[0])]
        results: list[Any] = await asyncio.gather(
            first.live.resume(records), first.live.resume(records), return_exceptions=True
        )
        steps = [r for r in results if isinstance(r, Step)]
        errors = [r for r in results if isinstance(r, RunError)]
        assert len(steps) == 1 and steps[0].value == 1
        assert len(errors) == 1 and "being resumed already" in str(errors[0])


async def test_aclose_ends_every_live_process() -> None:
    before = open_fds()
    runner = ProcessRunner(mode="pool", slots=2)
    steps = [await runner.run(script(f"await tools.t({{ i: {k} }})"), live=True) for k in range(3)]
    pids = [pid_of(s.live) for s in steps]
    assert runner.live_runs == 3
    assert all(s.live is not None and s.live.memory_bytes > 0 for s in steps)
    await runner.aclose()
    assert runner.live_runs == 0
    assert wait_gone(pids) == []
    assert zombies() == []
    await until(lambda: open_fds() == before, "every fd of the runner to be closed")


async def test_a_dropped_live_run_ends_its_process() -> None:
    async with ProcessRunner(mode="pool") as runner:
        step = await runner.run(script("await tools.t({ i: 1 })"), live=True)
        pid = pid_of(step.live)
        del step
        gc.collect()
        assert runner.live_runs == 0
        assert wait_gone([pid]) == []


async def test_file_bytes_count_over_the_live_run() -> None:
    """The runner's file_bytes budget holds over the run's segments; each segment's Step
    says what it was served."""
    data = b"x" * 3000

    class Reader:
        async def read(self, file_id: str, offset: int, length: int) -> bytes:
            return data[offset : offset + length]

    code = """
    const a = await files.text("f.txt");
    await tools.t({ i: 1 });
    const b = await files.text("f.txt");
    return a.length + b.length;"""
    files = [protocol.FileInfo(id="f.txt", mime="text/plain", size=len(data))]
    s = script(code, file_bytes=5000).model_copy(update={"files": files})
    async with ProcessRunner(mode="pool") as runner:
        first = await runner.run(s, Reader(), live=True)
        assert first.process is not None and first.process.file_bytes == 3000
        assert first.live is not None
        last = await first.live.resume([record(first.calls[0])])
        assert last.limit is not None and last.limit.name == "file_bytes"
        replayed = await runner.run(
            s.model_copy(update={"records": [record(first.calls[0])]}), Reader()
        )
        assert outcome(replayed) == outcome(last)


async def test_a_process_that_wrote_while_waiting_is_ended() -> None:
    """A bogus second `ran` (or anything) written before the results: resume raises and the
    process is ended. The line is put where the runner would find it, in the reader's buffer
    (a real sandbox never writes while it waits)."""
    async with ProcessRunner(mode="pool") as runner:
        first = await runner.run(script("await tools.t({ i: 1 }); return 1"), live=True)
        live = first.live
        assert isinstance(live, ProcessLive)
        pid = live.child.pid
        live.child.reader.stream.feed_data(b'{"ran": {"outcome": "finished", "value": 666}}\n')
        with pytest.raises(RunError, match="wrote to its output while it waited"):
            await live.resume([record(first.calls[0])])
        assert wait_gone([pid]) == []
        assert runner.live_runs == 0
    assert zombies() == []


MiB = 1 << 20


async def test_a_live_process_costs_its_private_memory_not_the_pages_it_shares() -> None:
    """What a live process costs (``private_bytes``) leaves out the pages it shares with the
    fork server, which its resident size counts: a trivial script's process holds 31 MiB
    resident and 3.3 MiB of its own. A script that builds a 4 MiB string costs 4 MiB more.
    Without its smaps_rollup (a runner that is not root cannot read it), the resident size."""
    if os.geteuid() != 0:
        require("root: only a runner with CAP_SYS_PTRACE may read a sandbox's smaps_rollup")
    async with ProcessRunner(mode="pool") as runner:
        small = await runner.run(script("await tools.t({ i: 1 })"), live=True)
        big = await runner.run(
            script("const s = 'x'.repeat(4 << 20); await tools.t({ i: s.length })"), live=True
        )
        assert isinstance(small.live, ProcessLive) and isinstance(big.live, ProcessLive)
        assert 0 < small.live.private_bytes() < small.live.memory_bytes / 3
        grown = big.live.private_bytes() - small.live.private_bytes()
        assert 3 * MiB < grown < 8 * MiB
        assert small.live.private_bytes() == small.live.private_bytes()  # read once, kept
        proc = big.live.child.proc
        assert proc is not None and proc.private() is not None
        big.live._private = None  # as if never read, by a runner that may not read it
        proc._smaps = None
        assert big.live.private_bytes() == big.live.memory_bytes
        await small.live.close()
        await big.live.close()
        assert small.live.private_bytes() == 0


def test_a_budget_counts_a_run_that_cannot_say_what_it_costs_at_its_resident_size() -> None:
    """A runner whose private_bytes fails (a bug) leaves its run counted as it was."""
    from runner import count_private

    class Broken(LiveRun):
        known = waiting = 0
        memory_bytes = 5 * MiB  # type: ignore[assignment]

        def private_bytes(self) -> int:
            raise OSError("no /proc here")

        async def resume(self, records: list[Record]) -> Step:
            raise RunError("not resumed")

        async def close(self) -> None:
            pass

    @dataclasses.dataclass
    class Kept:
        run: LiveRun
        memory: int
        measured: bool = False

    kept = Kept(Broken(), 5 * MiB)
    assert count_private([kept], 5 * MiB, 0) == 5 * MiB
    assert kept.memory == 5 * MiB and kept.measured
