"""The benchmark's workloads, and the replay loop that drives multi-step scripts.

The "engine" here is the simplest honest one: run a step, record a result for each call it
asked for (the tool ``t`` answers ``{"v": i}`` at once), run the script again, until it
ends. So a script's whole time is runner time plus this loop's own bookkeeping, which is
what the 200-calls target measures.
"""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._modes import Mode
from engine.languages import Language
from runner import FileReader, ScriptRunner, Step
from sandbox.protocol import Clock, Record, Script

CLOCK = Clock(now_ms=1_768_435_200_000, seed=7)
SLOW_MODES = ("exec", "node")  # about 100 to 300 ms a step: fewer repetitions

TRIVIAL = "return 1"
SEQUENTIAL = """\
let s = 0;
for (let i = 0; i < %d; i++) { const r = await tools.t({ i }); s += r.v; }
return s;"""
PROMISE_ALL = """\
const rs = await Promise.all(Array.from({ length: 100 }, (_, i) => tools.t({ i })));
return rs.reduce((a, r) => a + r.v, 0);"""
CPU_SORT = """\
const a = [];
for (let i = 0; i < 1e5; i++) a.push(Math.random());
a.sort((x, y) => x - y);
return a.length;"""
TENANT_SCRIPT = """\
const r = await tools.t({ i: %d });
let s = 0;
for (let k = 0; k < 20000; k++) s += k %% 7;
return s + r.v;"""
TENANTS = 4
# The same scripts in Python (the `languages` workload runs both, interleaved).
PY_TRIVIAL = "return 1"
PY_SEQUENTIAL = """\
s = 0
for i in range(%d):
    r = await tools.t(i=i)
    s += r["v"]
return s"""
# Sequential calls of the `languages` workload (its trivial script makes none).
LANGUAGE_CALLS = (10, 50)


@dataclass
class Sample:
    """What one workload measured on one mode."""

    latencies: list[float] = field(default_factory=list)  # seconds per unit
    steps: int = 0
    wall: float = 0.0
    peak_rss: int = 0
    shares: dict[str, float] | None = None  # tenant -> share of slot time
    extra: dict[str, Any] = field(default_factory=dict)

    def saw(self, step: Step) -> None:
        self.steps += 1
        if step.process is not None:
            self.peak_rss = max(self.peak_rss, step.process.max_rss_bytes)


def script(
    code: str,
    records: list[Record] | None = None,
    id: str = "bench",
    language: Language = "javascript",
) -> Script:
    return Script(
        id=id, code=code, records=records or [], tools=["t"], clock=CLOCK, language=language
    )


async def replay(
    mode: Mode,
    code: str,
    sample: Sample,
    tenant: str = "default",
    language: Language = "javascript",
) -> Step:
    """Run ``code`` to its end, answering every call; returns the last step."""
    records: list[Record] = []
    while True:
        step = await mode.step(script(code, records, language=language), tenant)
        sample.saw(step)
        if step.outcome != "calls":
            return step
        records = records + [
            Record(name=c.name, arguments=c.arguments, result={"v": c.arguments["i"]})
            for c in step.calls
        ]


def expect(step: Step, value: Any) -> None:
    if step.outcome != "finished" or step.value != value:
        raise AssertionError(
            f"the benchmark script did not finish with {value!r}: {step.outcome} "
            f"{step.value!r} {step.error}"
        )


@dataclass
class Workload:
    key: str
    title: str
    unit: str  # what a latency is the time of: "step" or "script"
    counts: tuple[int, int, int, int]  # full fast, full slow, quick fast, quick slow
    run: Callable[[Mode, int], Any]  # (mode, count) -> awaitable Sample
    calls: int | None = None  # sequential calls per script, for the chart
    modes: tuple[str, ...] | None = None  # the only modes it runs on (None: all)

    def count(self, mode: str, quick: bool) -> int:
        if self.modes is not None and mode not in self.modes:
            return 0
        full_fast, full_slow, quick_fast, quick_slow = self.counts
        slow = mode in SLOW_MODES
        if quick:
            return quick_slow if slow else quick_fast
        return full_slow if slow else full_fast


async def _trivial(mode: Mode, count: int) -> Sample:
    sample = Sample()
    start = time.perf_counter()
    for _ in range(count):
        t0 = time.perf_counter()
        step = await mode.step(script(TRIVIAL))
        sample.latencies.append(time.perf_counter() - t0)
        sample.saw(step)
        expect(step, 1)
    sample.wall = time.perf_counter() - start
    return sample


async def _trivial_concurrent(mode: Mode, count: int) -> Sample:
    sample = Sample()
    workers = 2 * mode.slots.count

    async def worker(k: int) -> None:
        for _ in range(k, count, workers):
            t0 = time.perf_counter()
            step = await mode.step(script(TRIVIAL))
            sample.latencies.append(time.perf_counter() - t0)
            sample.saw(step)
            expect(step, 1)

    start = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(workers)))
    sample.wall = time.perf_counter() - start
    sample.extra["concurrency"] = workers
    return sample


def _sequential(n: int) -> Callable[[Mode, int], Any]:
    async def run(mode: Mode, count: int) -> Sample:
        sample = Sample()
        start = time.perf_counter()
        for _ in range(count):
            t0 = time.perf_counter()
            step = await replay(mode, SEQUENTIAL % n, sample)
            sample.latencies.append(time.perf_counter() - t0)
            expect(step, n * (n - 1) // 2)
        sample.wall = time.perf_counter() - start
        return sample

    return run


async def _one_script(mode: Mode, count: int, code: str, value: Any) -> Sample:
    sample = Sample()
    start = time.perf_counter()
    for _ in range(count):
        t0 = time.perf_counter()
        step = await replay(mode, code, sample)
        sample.latencies.append(time.perf_counter() - t0)
        expect(step, value)
    sample.wall = time.perf_counter() - start
    return sample


async def _promise_all(mode: Mode, count: int) -> Sample:
    return await _one_script(mode, count, PROMISE_ALL, sum(range(100)))


async def _cpu_sort(mode: Mode, count: int) -> Sample:
    return await _one_script(mode, count, CPU_SORT, 100_000)


async def _tenants(mode: Mode, per_tenant: int) -> Sample:
    """TENANTS tenants each start ``per_tenant`` two-step scripts at once."""
    sample = Sample()
    used: dict[str, float] = {f"tenant{k}": 0.0 for k in range(TENANTS)}

    def held(tenant: str, seconds: float) -> None:
        if tenant in used:
            used[tenant] += seconds

    mode.slots.on_release = held
    spin = sum(k % 7 for k in range(20000))

    async def one(tenant: str, i: int) -> None:
        t0 = time.perf_counter()
        step = await replay(mode, TENANT_SCRIPT % i, sample, tenant)
        sample.latencies.append(time.perf_counter() - t0)
        expect(step, spin + i)

    start = time.perf_counter()
    try:
        await asyncio.gather(
            *(one(f"tenant{t}", i) for i in range(per_tenant) for t in range(TENANTS))
        )
    finally:
        mode.slots.on_release = None
    sample.wall = time.perf_counter() - start
    total = sum(used.values()) or 1.0
    sample.shares = {t: u / total for t, u in used.items()}
    return sample


class _ModeRunner(ScriptRunner):
    """The engine's runner for the engine workloads: each step goes to the bench's mode, and
    the time spent in it is counted (the rest of a ``run_code`` is the engine's own)."""

    def __init__(self, mode: Mode) -> None:
        self.mode = mode
        self.spent = 0.0

    async def run(
        self,
        script: Script,
        files: FileReader | None = None,
        *,
        tenant: str = "default",
        live: bool = False,
    ) -> Step:
        t0 = time.perf_counter()
        try:
            return await self.mode.step(script, tenant)
        finally:
            self.spent += time.perf_counter() - t0


async def _engine_store(mode: Mode, count: int) -> Sample:
    """The whole engine (``CodeMode.run_code``, type check off) on its SQLite log and on the
    memory store, interleaved so both see the same load: a trivial script, ``Promise.all`` of
    100 calls, and 200 sequential calls. The sample is SQLite's trivial ``run_code``; the
    extra figures are each script's SQLite/memory ratio and the engine's own time (a
    ``run_code`` less the time its steps spent in the runner) per call of the 200-call
    script."""
    import tempfile

    from engine import CodeMode, MemoryStore, SqliteStore, tool

    @tool
    def t(i: int) -> dict[str, int]:
        """Answer {"v": i}."""
        return {"v": i}

    # Each script and how many calls it makes.
    scripts = {
        "trivial": (TRIVIAL, 0),
        "promise_all": (PROMISE_ALL, 100),
        "seq_200": (SEQUENTIAL % 200, 200),
    }
    with tempfile.TemporaryDirectory(prefix="codemode-bench-") as directory:
        runners = {"memory": _ModeRunner(mode), "sqlite": _ModeRunner(mode)}
        engines = {
            "memory": CodeMode(
                [t], runner=runners["memory"], store=MemoryStore(), type_check="off"
            ),
            "sqlite": CodeMode(
                [t], runner=runners["sqlite"], store=SqliteStore(directory), type_check="off"
            ),
        }
        times: dict[tuple[str, str], list[float]] = {}
        own: dict[tuple[str, str], list[float]] = {}
        # What one synchronous commit costs on this disk now (a row in a WAL file of its own,
        # `synchronous=FULL`): SQLite's side of every ratio pays one per step with calls, and
        # the trivial script one in all (its outcome), so it is measured in the same run.
        probe = sqlite3.connect(Path(directory, "probe.sqlite3"), isolation_level=None)
        probe.execute("PRAGMA journal_mode=WAL")
        probe.execute("PRAGMA synchronous=FULL")
        probe.execute("CREATE TABLE t (v INTEGER)")
        synced: list[float] = []
        sample = Sample()
        start = time.perf_counter()
        try:
            for name, (code, _) in scripts.items():
                # The long script costs seconds a run: a few runs give a steady median.
                for _ in range(count if name != "seq_200" else max(1, count // 10)):
                    for store in ("memory", "sqlite"):
                        runner = runners[store]
                        runner.spent = 0.0
                        # Both stores' engines share the mode: each run starts with its pool
                        # full, not after the other's run took a child (the trivial script's
                        # p50 was 2 or 6 ms at random, for either store).
                        await mode.settle()
                        t0 = time.perf_counter()
                        result = await engines[store].run_code(code)
                        elapsed = time.perf_counter() - t0
                        if result.status != "finished":
                            raise AssertionError(f"the benchmark script failed: {result.text}")
                        times.setdefault((name, store), []).append(elapsed)
                        own.setdefault((name, store), []).append(elapsed - runner.spent)
                        sample.steps += result.steps
                    t0 = time.perf_counter()
                    probe.execute("INSERT INTO t VALUES (1)")
                    synced.append(time.perf_counter() - t0)
        finally:
            probe.close()
            for engine in engines.values():
                await engine.aclose()
        sample.wall = time.perf_counter() - start
    sample.latencies = times[("trivial", "sqlite")]

    def p50(values: list[float]) -> float:
        return statistics.median(values) * 1000

    sample.extra = {
        "sync_commit_p50_ms": round(p50(synced), 3),
        "engine_store": {
            name: {
                "memory_p50_ms": round(p50(times[(name, "memory")]), 3),
                "sqlite_p50_ms": round(p50(times[(name, "sqlite")]), 3),
                "sqlite_over_memory": round(
                    p50(times[(name, "sqlite")]) / p50(times[(name, "memory")]), 3
                ),
                "engine_own_ms_per_call": {
                    store: round(p50(own[(name, store)]) / calls, 4)
                    for store in ("memory", "sqlite")
                }
                if calls
                else None,
            }
            for name, (_, calls) in scripts.items()
        },
    }
    return sample


async def _type_check(mode: Mode, count: int) -> Sample:
    """A trivial ``run_code`` through the engine, with the type check and without it,
    interleaved so both see the same load; the sample is the checked one."""
    from engine import CodeMode, tool

    @tool
    def t(i: int) -> dict[str, int]:
        """Answer {"v": i}."""
        return {"v": i}

    runner = _ModeRunner(mode)
    checked = CodeMode([t], runner=runner, type_check="on")
    unchecked = CodeMode([t], runner=runner, type_check="off")
    sample = Sample()
    without: list[float] = []
    start = time.perf_counter()
    for _ in range(count):
        for engine, into in ((unchecked, without), (checked, sample.latencies)):
            t0 = time.perf_counter()
            result = await engine.run_code(TRIVIAL)
            into.append(time.perf_counter() - t0)
            sample.steps += 1
            if result.value != 1:
                raise AssertionError(f"the benchmark script did not return 1: {result.text}")
    sample.wall = time.perf_counter() - start
    with_ms = statistics.median(sample.latencies) * 1000
    without_ms = statistics.median(without) * 1000
    sample.extra = {
        "type_check": "on" if checked.type_checker is not None else "off: no compiler",
        "without_check_p50_ms": round(without_ms, 3),
        "check_ratio": round(with_ms / without_ms, 3),
        "check_adds_ms": round(with_ms - without_ms, 3),
    }
    return sample


async def _languages(mode: Mode, count: int) -> Sample:
    """The trivial script and N sequential calls in JavaScript and in Python, interleaved so
    both languages see the same load; the sample is Python's trivial step, and ``extra``
    has each script's medians and the Python/JavaScript ratio."""
    scripts: dict[str, tuple[dict[Language, str], int]] = {
        "trivial": ({"javascript": TRIVIAL, "python": PY_TRIVIAL}, 1),
        **{
            f"seq_{n}": (
                {"javascript": SEQUENTIAL % n, "python": PY_SEQUENTIAL % n},
                n * (n - 1) // 2,
            )
            for n in LANGUAGE_CALLS
        },
    }
    times: dict[tuple[str, str], list[float]] = {}
    sample = Sample()
    start = time.perf_counter()
    for _ in range(count):
        for name, (codes, value) in scripts.items():
            for language, code in codes.items():
                t0 = time.perf_counter()
                step = await replay(mode, code, sample, language=language)
                times.setdefault((name, language), []).append(time.perf_counter() - t0)
                expect(step, value)
    sample.wall = time.perf_counter() - start
    sample.latencies = times[("trivial", "python")]

    def p50(name: str, language: str) -> float:
        return statistics.median(times[(name, language)]) * 1000

    sample.extra = {
        "languages": {
            name: {
                "javascript_p50_ms": round(p50(name, "javascript"), 3),
                "python_p50_ms": round(p50(name, "python"), 3),
                "python_over_javascript": round(p50(name, "python") / p50(name, "javascript"), 3),
            }
            for name in scripts
        }
    }
    return sample


async def _peers(mode: Mode, count: int) -> Sample:
    """The engine (live and replay, each with its own warm pool) against pydantic-monty's
    warm pool, interleaved (``bench._peers``); runs once, beside the ``pool`` mode. The
    sample is the replay engine's trivial ``run_code``; the figures are in ``extra``."""
    from bench._peers import compare

    start = time.perf_counter()
    comparison = await compare(count, slots=mode.slots.count)
    sample = Sample(wall=time.perf_counter() - start)
    sample.latencies = comparison.times["trivial"]["replay"]
    sample.steps = sum(len(v) for peers in comparison.times.values() for v in peers.values())
    sample.extra = {"peers": comparison.as_dict()}
    return sample


WORKLOADS = [
    Workload("trivial", "trivial step (return 1)", "step", (300, 30, 40, 5), _trivial),
    Workload(
        "trivial_concurrent",
        "trivial steps, 2 x slots at once",
        "step",
        (600, 40, 80, 8),
        _trivial_concurrent,
    ),
    *(
        Workload(f"seq_{n}", f"{n} sequential calls", "script", counts, _sequential(n), n)
        for n, counts in (
            (1, (20, 3, 5, 1)),
            (10, (10, 2, 3, 1)),
            (50, (5, 1, 1, 0)),
            (200, (3, 1, 1, 0)),
        )
    ),
    Workload(
        "languages",
        f"JS vs Python: trivial, {'/'.join(map(str, LANGUAGE_CALLS))} calls",
        "script",
        (10, 2, 2, 1),
        _languages,
        modes=("pool", "fork", "exec", "floor"),
    ),
    Workload("promise_all", "Promise.all of 100 calls", "script", (20, 3, 3, 1), _promise_all),
    Workload("cpu_sort", "sort 10^5 numbers", "script", (10, 3, 2, 1), _cpu_sort),
    Workload(
        "engine_store",
        "run_code on SQLite (vs memory store)",
        "script",
        (20, 5, 5, 1),
        _engine_store,
    ),
    Workload(
        "type_check",
        "trivial run_code, type check on",
        "script",
        (40, 10, 8, 2),
        _type_check,
    ),
    Workload(
        "peers",
        "engine (live, replay) vs pydantic-monty",
        "script",
        (3, 3, 1, 1),
        _peers,
        modes=("pool",),
    ),
    Workload(
        "tenants",
        f"{TENANTS} tenants x N two-step scripts at once",
        "script",
        (50, 50, 5, 3),
        _tenants,
    ),
]
