"""``python -m bench --limits``: how each limit holds, and what it costs, on the warm pool.

Each figure is what a host would see through :class:`runner.ProcessRunner`:

- **compute_ms**: a busy loop under ``compute_ms`` of 100 ms, 1 s and 5 s; the CPU the
  process was charged (``ProcessStats.cpu_ms``, what the engine charges), and so the
  overshoot.
- **memory**: scripts that grow the JS heap (arrays of numbers, strings of 1 MiB) under a
  ``memory`` limit; the heap the run reports at its end and the process's peak RSS above a
  trivial step's.
- **deadline**: a script whose file read never comes back (the runner's store hangs), so
  only the wall-time deadline (three times ``compute_ms`` plus a second) can end it; the time
  from the deadline to the step's return with its process reaped.
- **compute_ms, live**: the same per segment of a live run (the CPU timer re-armed when the
  results arrive): a run that makes one call, then busy-loops.
- **total_compute_ms**: through the engine (live, and ``live = false``), a script that makes
  calls between stretches of work under ``total_compute_ms`` of 1 s: one call, then a busy
  loop; and calls between about 100 ms of work each. The CPU the engine charged the script in
  all when the limit ended it, and so the overshoot.
- **results / calls**: a step's time when its run holds 1, 4 and 8 MiB of results, or 1,000
  calls (the budgets' edges): replayed from the log, and live (only the new result sent).
- **memory, live**: a live call's time when the script holds 100,000 or 1,000,000 small
  objects (about 15 and 150 MiB of the 256 MiB default), against none: what a call costs
  near the ``memory`` budget's edge.

A limit that overshoots by more than 10% or by more than 50 ms is a defect (issue 14).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

from runner import ProcessRunner, Step
from sandbox.protocol import Clock, FileInfo, Limits, MiB, Record, Script

CLOCK = Clock(now_ms=1_768_435_200_000, seed=7)
BUSY = "for (;;) {}"
TRIVIAL = "return 1"
# Arrays of numbers: many small allocations, the usual way a heap fills.
GROW_ARRAYS = """\
const keep = [];
for (let i = 0; ; i++) keep.push(new Array(1e4).fill(i + 0.5));"""
# Strings of 1 MiB each: few, large allocations.
GROW_STRING = """\
const keep = [];
for (let i = 0; ; i++) keep.push("x".repeat(1 << 20) + i);"""
READ_FOREVER = 'return files.text("slow")'
# The step measured is the second call's: the first call's big result is already recorded.
TWO_CALLS = """\
const a = await tools.t({ i: 0 });
const b = await tools.t({ i: 1 });
return a.s.length + b.v;"""
CALL_THEN_BUSY = "await tools.t({ i: 0 });\nfor (;;) {}"
# A heap of small objects, then calls: the segments after the first are measured.
HOLD_THEN_CALLS = """\
const kept = [];
for (let i = 0; i < %d; i++) kept.push({ i, s: "x" + i });
let n = 0;
for (let i = 0; i < %d; i++) { const r = await tools.t({ i }); n += r.v; }
return kept.length + n;"""
CALLS = """\
let n = 0;
for (let i = 0; i < %d; i++) { const r = await tools.t({ i }); n += r.v; }
return n;"""


@dataclass
class Figure:
    """One measured figure of one limit."""

    limit: str
    setting: str
    measure: str
    value: str
    overshoot: str = ""
    defect: bool | None = None  # None: not a bound that can be overshot
    note: str = ""


def script(code: str, **kw: Any) -> Script:
    limits = kw.pop("limits", None) or Limits()
    return Script(id="bench-limits", code=code, tools=["t"], clock=CLOCK, limits=limits, **kw)


def over_bound(used: float, bound: float, absolute: float) -> bool:
    """Whether ``used`` passes ``bound`` by more than 10% or by more than ``absolute``."""
    return used - bound > min(0.1 * bound, absolute)


async def _timed(runner: ProcessRunner, s: Script, files: Any = None) -> tuple[Step, float]:
    t0 = time.perf_counter()
    step = await runner.run(s, files)
    return step, (time.perf_counter() - t0) * 1000


async def compute(runner: ProcessRunner, settings: tuple[int, ...], reps: int) -> list[Figure]:
    figures = []
    for ms in settings:
        used: list[float] = []
        walls: list[float] = []
        by_deadline = 0
        for _ in range(reps):
            step, wall = await _timed(runner, script(BUSY, limits=Limits(compute_ms=ms)))
            if step.limit is None or step.limit.name != "compute_ms" or step.process is None:
                raise AssertionError(f"a busy loop under compute_ms={ms} ended so: {step}")
            used.append(step.process.cpu_ms)
            walls.append(wall)
            by_deadline += _by_deadline(step)
        worst = max(used)
        figures.append(
            Figure(
                "compute_ms",
                f"{ms:,} ms",
                "CPU the runner charged (ProcessStats.cpu_ms), worst of "
                f"{reps}; step wall p50 {statistics.median(walls):,.0f} ms",
                f"{worst:,.1f} ms",
                f"{worst - ms:+,.1f} ms ({100 * (worst - ms) / ms:+.1f}%)",
                over_bound(worst, ms, 50),
                _ended(by_deadline, reps),
            )
        )
    return figures


def _by_deadline(step: Step) -> bool:
    """Whether the wall deadline, not the CPU timer, ended the step (a starved process)."""
    return step.error is not None and "deadline" in step.error.message


def _ended(by_deadline: int, reps: int) -> str:
    if not by_deadline:
        return "ended by the CPU timer"
    return (
        f"{by_deadline} of {reps} ended by the wall deadline before using the CPU (the "
        "machine was oversubscribed)"
    )


async def memory(runner: ProcessRunner, settings: tuple[int, ...]) -> list[Figure]:
    base, _ = await _timed(runner, script(TRIVIAL))
    base_rss = base.process.max_rss_bytes if base.process else 0
    figures = []
    for limit in settings:
        for name, code in (("arrays", GROW_ARRAYS), ("string", GROW_STRING)):
            step, wall = await _timed(runner, script(code, limits=Limits(memory=limit)))
            if step.limit is None or step.limit.name != "memory" or step.process is None:
                raise AssertionError(f"growing {name} under memory={limit} ended so: {step}")
            heap = step.stats.heap_bytes if step.stats else 0
            grew = step.process.max_rss_bytes - base_rss
            figures.append(
                Figure(
                    "memory",
                    f"{limit // MiB} MiB, {name}",
                    f"process peak RSS above a trivial step's; step wall {wall:,.0f} ms",
                    f"{grew / MiB:,.1f} MiB",
                    f"{(grew - limit) / MiB:+,.1f} MiB ({100 * (grew - limit) / limit:+.0f}%)",
                    over_bound(grew, limit, 50 * MiB),
                    f"heap the run reported: {heap / MiB:,.1f} MiB",
                )
            )
    return figures


class _Hanging:
    """A file store that never answers: only the step's deadline can end the read."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()

    async def read(self, file_id: str, offset: int, length: int) -> bytes:
        self.asked.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def deadline(runner: ProcessRunner, settings: tuple[int, ...]) -> list[Figure]:
    from runner._conversation import wall_seconds

    figures = []
    for ms in settings:
        files = [FileInfo(id="slow", mime="text/plain", size=10)]
        step, wall = await _timed(
            runner, script(READ_FOREVER, files=files, limits=Limits(compute_ms=ms)), _Hanging()
        )
        due = wall_seconds(ms) * 1000
        if step.limit is None or step.limit.name != "compute_ms" or step.process is None:
            raise AssertionError(f"a hanging read under compute_ms={ms} ended so: {step}")
        late = wall - due
        reaped = step.process.exit_status is not None
        figures.append(
            Figure(
                "deadline",
                f"compute_ms {ms:,} ms (deadline {due / 1000:,.1f} s)",
                "wall from the deadline to the step's return, process reaped"
                if reaped
                else "wall from the deadline to the step's return (NOT reaped)",
                f"{late:,.1f} ms",
                f"{late:+,.1f} ms",
                over_bound(wall, due, 50) or not reaped,
            )
        )
    return figures


def _record(i: int, result: Any) -> Record:
    return Record(name="t", arguments={"i": i}, result=result)


async def _live_to(runner: ProcessRunner, s: Script, results: list[Any]) -> tuple[Step, Any]:
    """Run ``s`` live and answer its first ``len(results)`` calls one segment at a time;
    returns the last step and its live run (the caller closes it)."""
    step = await runner.run(s, live=True)
    for i, result in enumerate(results):
        if step.live is None:
            raise AssertionError(f"segment {i} of a live run did not stay live: {step.error}")
        step = await step.live.resume([_record(i, result)])
    return step, step.live


async def record_cost(runner: ProcessRunner, sizes: tuple[int, ...], reps: int) -> list[Figure]:
    """A step's time when the run already holds ``size`` bytes of results (the second call's
    step), by replay (the log sent again) and live (only the new result sent)."""
    figures = []
    for size in sizes:
        blob = {"s": "x" * (size - 64)}  # the record's JSON, about ``size`` bytes
        value = size - 64 + 1
        replayed, live = [], []
        for _ in range(reps):
            s = script(TWO_CALLS, records=[_record(0, blob)])
            step, wall = await _timed(runner, s)
            if step.outcome != "calls":
                raise AssertionError(f"the {size // MiB} MiB replay ended so: {step.error}")
            replayed.append(wall)
            step, run = await _live_to(runner, script(TWO_CALLS), [blob])
            try:
                if run is None:
                    raise AssertionError(f"the {size // MiB} MiB live run ended: {step.error}")
                t0 = time.perf_counter()
                step = await run.resume([_record(1, {"v": 1})])
                live.append((time.perf_counter() - t0) * 1000)
            finally:
                if run is not None:
                    await run.close()
            if step.outcome != "finished" or step.value != value:
                raise AssertionError(f"the {size // MiB} MiB live run ended so: {step.error}")
        figures.append(_cost("results", f"{size // MiB} MiB recorded", replayed, live))
    calls = 1000
    replayed, live = [], []
    small = [{"v": i} for i in range(calls)]
    for _ in range(max(1, reps // 2)):
        records = [_record(i, r) for i, r in enumerate(small)]
        step, wall = await _timed(runner, script(CALLS % calls, records=records))
        if step.outcome != "finished" or step.value != sum(range(calls)):
            raise AssertionError(f"the {calls}-call replay ended so: {step.error}")
        replayed.append(wall)
        step, run = await _live_to(runner, script(CALLS % calls), small[:-1])
        try:
            if run is None:
                raise AssertionError(f"the {calls}-call live run ended: {step.error}")
            t0 = time.perf_counter()
            step = await run.resume([_record(calls - 1, small[-1])])
            live.append((time.perf_counter() - t0) * 1000)
        finally:
            if run is not None:
                await run.close()
        if step.outcome != "finished" or step.value != sum(range(calls)):
            raise AssertionError(f"the {calls}-call live run ended so: {step.error}")
    figures.append(_cost("calls", f"{calls:,} recorded", replayed, live))
    return figures


async def heap_cost(runner: ProcessRunner, objects: tuple[int, ...], calls: int) -> list[Figure]:
    """A live call's wall (from the results sent to the next ``ran``) while the script holds
    ``objects`` small objects, against the same with none held, in one run."""

    async def call_walls(held: int) -> list[float]:
        s = script(HOLD_THEN_CALLS % (held, calls), limits=Limits(compute_ms=20_000))
        step = await runner.run(s, live=True)
        walls = []
        try:
            for i in range(calls):
                if step.live is None:
                    raise AssertionError(f"call {i} of a live run did not stay live: {step.error}")
                t0 = time.perf_counter()
                step = await step.live.resume([_record(i, {"v": i})])
                walls.append((time.perf_counter() - t0) * 1000)
        finally:
            if step.live is not None:
                await step.live.close()
        if step.outcome != "finished" or step.value != held + sum(range(calls)):
            raise AssertionError(f"the run holding {held:,} objects ended so: {step.error}")
        return walls[1:]  # the first resume may still be collecting the heap just built

    figures = []
    for held in objects:
        none, some = [], []
        for _ in range(2):  # interleaved
            none += await call_walls(0)
            some += await call_walls(held)
        a, b = statistics.median(none), statistics.median(some)
        figures.append(
            Figure(
                "memory",
                f"{held:,} objects held, live",
                f"a live call's wall, p50 of {len(some)}: {b:,.2f} ms, {a:,.2f} ms with none held",
                f"{b:,.2f} / {a:,.2f} ms",
                note=f"held/none {b / a:.2f}",
            )
        )
    return figures


def _cost(limit: str, setting: str, replayed: list[float], live: list[float]) -> Figure:
    r, v = statistics.median(replayed), statistics.median(live)
    return Figure(
        limit,
        setting,
        f"a step's wall, p50 of {len(replayed)}: replayed {r:,.1f} ms, live {v:,.2f} ms",
        f"{r:,.1f} / {v:,.2f} ms",
        note=f"live/replay {v / r:.3f}",
    )


async def compute_live(runner: ProcessRunner, settings: tuple[int, ...]) -> list[Figure]:
    """``compute_ms`` per segment: a live run's second segment busy-loops after its call."""
    figures = []
    for ms in settings:
        step, run = await _live_to(runner, script(CALL_THEN_BUSY, limits=Limits(compute_ms=ms)), [])
        if run is None:
            raise AssertionError(f"a live run under compute_ms={ms} did not stay live: {step}")
        try:
            t0 = time.perf_counter()
            step = await run.resume([_record(0, {"v": 0})])
            wall = (time.perf_counter() - t0) * 1000
        finally:
            await run.close()
        if step.limit is None or step.limit.name != "compute_ms" or step.process is None:
            raise AssertionError(f"a live busy segment under compute_ms={ms} ended so: {step}")
        used = step.process.cpu_ms
        figures.append(
            Figure(
                "compute_ms",
                f"{ms:,} ms, live segment",
                f"the CPU the runner charged the segment; its wall {wall:,.0f} ms",
                f"{used:,.1f} ms",
                f"{used - ms:+,.1f} ms ({100 * (used - ms) / ms:+.1f}%)",
                over_bound(used, ms, 50),
                _ended(int(_by_deadline(step)), 1),
            )
        )
    return figures


# Calls between stretches of work of about 100 ms (75 to 100 ms a segment where it was written).
CALLS_BETWEEN_WORK = """\
for (let i = 0; ; i++) {
  let x = 0;
  for (let k = 0; k < 1500000; k++) x += k;
  await tools.t({ i: i + (x > 0 ? 0 : 1) });
}"""


async def total_compute(slots: int, total_ms: int) -> list[Figure]:
    """``total_compute_ms`` through the engine, live and replayed: the CPU charged in all
    when the limit ended each script."""
    from engine import CodeMode, MemoryStore, tool
    from engine import Limits as EngineLimits

    @tool
    def t(i: int) -> dict[str, int]:
        """Answer {"v": i}."""
        return {"v": i}

    figures = []
    for live in (True, False):
        engine = CodeMode(
            [t],
            runner=ProcessRunner(mode="pool", slots=slots),
            store=MemoryStore(),
            type_check="off",
            live=live,
            limits=EngineLimits(total_compute_ms=total_ms),
        )
        try:
            for code, what in (
                (CALL_THEN_BUSY, "busy after a call"),
                (CALLS_BETWEEN_WORK, "calls amid work"),
            ):
                t0 = time.perf_counter()
                result = await engine.run_code(code)
                wall = (time.perf_counter() - t0) * 1000
                record = await engine.store.get_script(result.script_id)
                if result.limit != "total_compute_ms":
                    raise AssertionError(f"{what} under total_compute_ms ended so: {result.text}")
                used = record.total_compute_ms
                figures.append(
                    Figure(
                        "total_compute_ms",
                        f"{total_ms:,} ms, {what}, {'live' if live else 'replay'}",
                        f"the CPU the engine charged the script in all, over {record.steps} "
                        f"steps; wall {wall:,.0f} ms",
                        f"{used:,.1f} ms",
                        f"{used - total_ms:+,.1f} ms ({100 * (used - total_ms) / total_ms:+.1f}%)",
                        over_bound(used, total_ms, 50),
                    )
                )
        finally:
            await engine.aclose()
    return figures


async def live_budget(slots: int, *, live_max: int | None = None) -> list[Figure]:
    """How many scripts wait live at once under the engine's default live budget: more
    scripts than the budget's count each call a tool that holds until all have called it
    (``live_wait`` long, so only the budget ends a live run); the engine's live runs are
    counted then, with the memory the budget counts them at (resident, then private once the
    resident sizes pass it). ``live_max`` narrows the budget (for ``--quick``)."""
    import tempfile

    from engine import CodeMode, tool

    arrived = 0
    everyone = asyncio.Event()
    target = 0
    private = 0  # what the kept runs cost (their private memory) when the last script called

    @tool
    async def t(i: int) -> dict[str, int]:
        """Wait until every script has called, then answer {"v": i}."""
        nonlocal arrived, private
        arrived += 1
        if arrived >= target:
            private = sum(run.private_bytes() for run in live.runs())
            everyone.set()
        await everyone.wait()
        return {"v": i}

    with tempfile.TemporaryDirectory(prefix="codemode-bench-live-") as directory:
        engine = CodeMode(
            [t],
            runner=ProcessRunner(mode="pool", slots=slots),
            data_dir=directory,
            type_check="off",
            live=True,
            live_wait=600.0,
            live_max=live_max,
        )
        live = engine._live  # the engine's own live cache: what it keeps is what we count
        target = live.max_count + max(2, live.max_count // 8)
        try:
            held = 0
            memory = 0

            async def watch() -> None:
                nonlocal held, memory
                while not everyone.is_set():
                    await asyncio.sleep(0.05)
                    if len(live) >= held:
                        held, memory = len(live), live.memory

            watcher = asyncio.create_task(watch())
            t0 = time.perf_counter()
            results = await asyncio.gather(
                *(engine.run_code(f"return (await tools.t({{ i: {i} }})).v") for i in range(target))
            )
            wall = time.perf_counter() - t0
            await watcher
            if any(r.value != i for i, r in enumerate(results)):
                raise AssertionError("a script waiting live returned the wrong value")
            evicted = live.evicted
        finally:
            await engine.aclose()
    per = memory / held if held else 0
    return [
        Figure(
            "live",
            ("default budget" if live_max is None else "budget")
            + f": {live.max_count:,} runs, {live.max_memory / MiB:,.0f} MiB",
            f"runs waiting live at once ({target:,} scripts each waiting on a call; "
            f"{evicted:,} evicted, {wall:,.1f} s)",
            f"{held:,}",
            note=f"{memory / MiB:,.0f} MiB counted, {per / MiB:,.1f} MiB each; they cost "
            f"{private / MiB:,.0f} MiB (private memory) when the last script called",
        )
    ]


# What ``--limits --only`` takes: the groups of figures, each measured by itself.
GROUPS = ("compute_ms", "memory", "deadline", "results", "live")


async def measure(
    quick: bool = False, slots: int = 2, only: frozenset[str] = frozenset(GROUPS)
) -> list[Figure]:
    """The figures of the ``only`` groups (``results`` covers ``calls`` too), on one
    warm-pool runner; the live budget's on an engine of its own. ``quick``: the small
    settings only."""
    figures: list[Figure] = []
    if only - {"live"}:
        runner = ProcessRunner(mode="pool", slots=slots)
        try:
            await runner.run(script(TRIVIAL))  # warm
            if "compute_ms" in only:
                ms = (100,) if quick else (100, 1000, 5000)
                figures += await compute(runner, ms, 1 if quick else 3)
                figures += await compute_live(runner, ms)
                figures += await total_compute(slots, 1000)
            if "memory" in only:
                figures += await memory(runner, (16 * MiB,) if quick else (16 * MiB, 64 * MiB))
            if "deadline" in only:
                figures += await deadline(runner, (100,) if quick else (100, 1000))
            if "results" in only:
                figures += await record_cost(
                    runner, (1 * MiB,) if quick else (1 * MiB, 4 * MiB, 8 * MiB), 1 if quick else 5
                )
            if "memory" in only:
                held = (100_000,) if quick else (100_000, 1_000_000)
                figures += await heap_cost(runner, held, 20)
        finally:
            await runner.aclose()
    if "live" in only:
        figures += await live_budget(slots, live_max=8 if quick else None)
    return figures


def text(figures: list[Figure]) -> str:
    header = (
        f"{'limit':<16} {'setting':<34} {'measured':>11} {'overshoot':>20}  verdict  "
        "what is measured"
    )
    lines = [header, "-" * len(header)]
    for f in figures:
        verdict = "-" if f.defect is None else "DEFECT" if f.defect else "holds"
        what = f.measure + (f"; {f.note}" if f.note else "")
        lines.append(
            f"{f.limit:<16} {f.setting:<34} {f.value:>11} {f.overshoot:>20}  {verdict:<7}  {what}"
        )
    lines.append("")
    lines.append(
        "A limit holds when it is overshot by at most 10% and at most 50 ms (50 MiB for memory)."
    )
    return "\n".join(lines)


def as_json(figures: list[Figure]) -> list[dict[str, Any]]:
    return [asdict(f) for f in figures]
