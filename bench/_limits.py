"""``python -m bench --limits``: how each limit holds, and what it costs, on the warm pool.

Each figure is what a host would see through :class:`runner.ProcessRunner`:

- **compute_ms**: a busy loop under ``compute_ms`` of 100 ms, 1 s and 5 s; the CPU the
  process used by the end (``wait4``, what the engine charges), and so the overshoot.
- **memory**: scripts that grow the JS heap (arrays of numbers, strings of 1 MiB) under a
  ``memory`` limit; the heap the run reports at its end and the process's peak RSS above a
  trivial step's.
- **deadline**: a script whose file read never comes back (the runner's store hangs), so
  only the wall-time deadline (three times ``compute_ms`` plus a second) can end it; the time
  from the deadline to the step's return with its process reaped.
- **results / calls**: a step's time when its log holds 1, 4 and 8 MiB of results, or 1,000
  calls (the budgets' edges), replayed from the log.

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
ONE_RESULT = "const r = await tools.t({ i: 0 }); return r.s.length;"
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
        for _ in range(reps):
            step, wall = await _timed(runner, script(BUSY, limits=Limits(compute_ms=ms)))
            if step.limit is None or step.limit.name != "compute_ms" or step.process is None:
                raise AssertionError(f"a busy loop under compute_ms={ms} ended so: {step}")
            used.append(step.process.cpu_ms)
            walls.append(wall)
        worst = max(used)
        figures.append(
            Figure(
                "compute_ms",
                f"{ms:,} ms",
                "CPU used at the end (wait4), worst of "
                f"{reps}; step wall p50 {statistics.median(walls):,.0f} ms",
                f"{worst:,.1f} ms",
                f"{worst - ms:+,.1f} ms ({100 * (worst - ms) / ms:+.1f}%)",
                over_bound(worst, ms, 50),
            )
        )
    return figures


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
                    f"process peak RSS above a trivial step's (wait4); step wall {wall:,.0f} ms",
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


def _answered(results: list[Any]) -> list[Record]:
    return [Record(name="t", arguments={"i": i}, result=r) for i, r in enumerate(results)]


async def replay_cost(runner: ProcessRunner, sizes: tuple[int, ...], reps: int) -> list[Figure]:
    figures = []
    for size in sizes:
        blob = "x" * (size - 64)  # the record's JSON, about ``size`` bytes
        s = script(ONE_RESULT, records=_answered([{"s": blob}]))
        times = []
        for _ in range(reps):
            step, wall = await _timed(runner, s)
            if step.outcome != "finished" or step.value != len(blob):
                raise AssertionError(f"the {size // MiB} MiB replay ended so: {step.error}")
            times.append(wall)
        figures.append(
            Figure(
                "results",
                f"{size // MiB} MiB recorded",
                f"replayed step wall, p50 of {reps}",
                f"{statistics.median(times):,.1f} ms",
            )
        )
    calls = 1000
    s = script(CALLS % calls, records=_answered([{"v": i} for i in range(calls)]))
    times = []
    for _ in range(reps):
        step, wall = await _timed(runner, s)
        if step.outcome != "finished":
            raise AssertionError(f"the {calls}-call replay ended so: {step.error}")
        times.append(wall)
    figures.append(
        Figure(
            "calls",
            f"{calls:,} recorded",
            f"replayed step wall, p50 of {reps}",
            f"{statistics.median(times):,.1f} ms",
        )
    )
    return figures


async def measure(quick: bool = False, slots: int = 2) -> list[Figure]:
    """Every figure, on one warm-pool runner. ``quick``: the small settings only."""
    runner = ProcessRunner(mode="pool", slots=slots)
    try:
        await runner.run(script(TRIVIAL))  # warm
        figures = await compute(runner, (100,) if quick else (100, 1000, 5000), 1 if quick else 3)
        figures += await memory(runner, (16 * MiB,) if quick else (16 * MiB, 64 * MiB))
        figures += await deadline(runner, (100,) if quick else (100, 1000))
        figures += await replay_cost(
            runner, (1 * MiB,) if quick else (1 * MiB, 4 * MiB, 8 * MiB), 1 if quick else 5
        )
    finally:
        await runner.aclose()
    return figures


def text(figures: list[Figure]) -> str:
    header = (
        f"{'limit':<11} {'setting':<34} {'measured':>11} {'overshoot':>20}  verdict  "
        "what is measured"
    )
    lines = [header, "-" * len(header)]
    for f in figures:
        verdict = "-" if f.defect is None else "DEFECT" if f.defect else "holds"
        what = f.measure + (f"; {f.note}" if f.note else "")
        lines.append(
            f"{f.limit:<11} {f.setting:<34} {f.value:>11} {f.overshoot:>20}  {verdict:<7}  {what}"
        )
    lines.append("")
    lines.append(
        "A limit holds when it is overshot by at most 10% and at most 50 ms (50 MiB for memory)."
    )
    return "\n".join(lines)


def as_json(figures: list[Figure]) -> list[dict[str, Any]]:
    return [asdict(f) for f in figures]
