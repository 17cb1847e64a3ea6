"""Turn samples into rows, and rows into a table, a JSON file, a chart and the targets."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._workloads import Sample, Workload

MiB = 1024 * 1024


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), interpolated; the value itself for one sample."""
    if not values:
        return math.nan
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass
class Row:
    workload: str
    title: str
    mode: str
    unit: str
    count: int
    steps: int
    p50_ms: float
    p90_ms: float
    steps_per_s: float
    peak_rss_mib: float
    calls: int | None = None
    per_call_ms: float | None = None
    shares: dict[str, float] | None = None
    fairness: float | None = None  # Jain's index of the shares: 1.0 is perfectly even
    faster_than_exec: float | None = None  # exec p50 / this p50
    times_floor: float | None = None  # this p50 / floor p50
    extra: dict[str, Any] | None = None

    @classmethod
    def of(cls, workload: Workload, mode: str, count: int, sample: Sample) -> Row:
        p50 = percentile(sample.latencies, 50) * 1000
        row = cls(
            workload=workload.key,
            title=workload.title,
            mode=mode,
            unit=workload.unit,
            count=count,
            steps=sample.steps,
            p50_ms=p50,
            p90_ms=percentile(sample.latencies, 90) * 1000,
            steps_per_s=sample.steps / sample.wall if sample.wall else math.nan,
            peak_rss_mib=sample.peak_rss / MiB,
            calls=workload.calls,
            shares=sample.shares,
            extra=sample.extra or None,
        )
        if workload.calls:
            row.per_call_ms = p50 / workload.calls
        if sample.shares:
            shares = list(sample.shares.values())
            row.fairness = sum(shares) ** 2 / (len(shares) * sum(s * s for s in shares) or 1)
        return row


def add_ratios(rows: list[Row]) -> None:
    """Each row's p50 against exec-per-step and against the in-process floor."""
    by_key = {(r.workload, r.mode): r for r in rows}
    for row in rows:
        exec_row = by_key.get((row.workload, "exec"))
        floor_row = by_key.get((row.workload, "floor"))
        if exec_row and row.p50_ms > 0:
            row.faster_than_exec = exec_row.p50_ms / row.p50_ms
        if floor_row and floor_row.p50_ms > 0:
            row.times_floor = row.p50_ms / floor_row.p50_ms


def _num(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def table(rows: list[Row]) -> str:
    header = (
        f"{'workload':<36} {'mode':<6} {'n':>4} {'steps':>6} {'p50 ms':>9} {'p90 ms':>9} "
        f"{'steps/s':>8} {'peak MiB':>9} {'exec/x':>7} {'x/floor':>8}  note"
    )
    lines = [header, "-" * len(header)]
    last = None
    for row in rows:
        title = row.title if row.workload != last else ""
        last = row.workload
        note = ""
        if row.per_call_ms is not None:
            note = f"{_num(row.per_call_ms, 2)} ms/call"
        if row.extra and "check_ratio" in row.extra:
            extra = row.extra
            note = (
                f"{extra['check_ratio']:.2f}x without the check "
                f"({_num(extra['without_check_p50_ms'], 2)} ms), +{extra['check_adds_ms']:.1f} ms"
                + ("" if extra["type_check"] == "on" else f" [{extra['type_check']}]")
            )
        if row.extra and "engine_store" in row.extra:
            note = "; ".join(
                f"{name} {figures['sqlite_over_memory']:.2f}x memory"
                + (
                    f", engine {figures['engine_own_ms_per_call']['sqlite']:.3f} ms/call"
                    if figures["engine_own_ms_per_call"]
                    else ""
                )
                for name, figures in row.extra["engine_store"].items()
            )
            if "sync_commit_p50_ms" in row.extra:
                note += f"; a synced commit {row.extra['sync_commit_p50_ms']:.2f} ms"
        if row.extra and "languages" in row.extra:
            note = "; ".join(
                f"{name} py {_num(f['python_p50_ms'], 2)} / js {_num(f['javascript_p50_ms'], 2)}"
                f" ms = {f['python_over_javascript']:.2f}x"
                for name, f in row.extra["languages"].items()
            )
        if row.extra and "peers" in row.extra:
            note = "see the comparison below"
        if row.shares:
            shares = "/".join(f"{100 * s:.0f}" for s in row.shares.values())
            note = f"slot shares {shares}%, Jain {row.fairness:.3f}"
        lines.append(
            f"{title:<36} {row.mode:<6} {row.count:>4} {row.steps:>6} {_num(row.p50_ms, 2):>9} "
            f"{_num(row.p90_ms, 2):>9} {_num(row.steps_per_s):>8} {_num(row.peak_rss_mib):>9} "
            f"{_num(row.faster_than_exec):>7} {_num(row.times_floor):>8}  {note}"
        )
    lines.append("")
    lines.append(
        "p50/p90: per step (trivial) or per whole script (the rest); steps/s over the "
        "workload's wall time; peak MiB: the largest max RSS of one step's process (wait4; "
        "forked children count the zygote pages they share), the JS heap for floor; "
        "exec/x: how many times faster than exec per step; x/floor: how many times the "
        "in-process floor."
    )
    return "\n".join(lines)


@dataclass
class Target:
    name: str
    goal: str
    value: str
    holds: bool | None  # None: not measured in this run


def targets(rows: list[Row]) -> list[Target]:
    by_key = {(r.workload, r.mode): r for r in rows}

    def get(workload: str, mode: str) -> Row | None:
        return by_key.get((workload, mode))

    found: list[Target] = []
    pool, exec_, floor = get("trivial", "pool"), get("trivial", "exec"), get("trivial", "floor")
    if pool:
        found.append(
            Target("warm-pool trivial p50", "<= 2 ms", f"{pool.p50_ms:.2f} ms", pool.p50_ms <= 2)
        )
    if pool and exec_:
        ratio = exec_.p50_ms / pool.p50_ms
        found.append(Target("faster than exec per step", ">= 40x", f"{ratio:.0f}x", ratio >= 40))
    if pool and floor:
        ratio = pool.p50_ms / floor.p50_ms
        found.append(Target("within the floor", "<= 10x", f"{ratio:.1f}x", ratio <= 10))
    concurrent = get("trivial_concurrent", "pool")
    if concurrent:
        rate = concurrent.steps_per_s
        found.append(
            Target("trivial steps/s (warm pool)", ">= 400/s", f"{rate:.0f}/s", rate >= 400)
        )
    seq = get("seq_200", "pool")
    if seq:
        found.append(
            Target(
                "200 sequential calls, whole script",
                "< 1 s",
                f"{seq.p50_ms / 1000:.2f} s",
                seq.p50_ms < 1000,
            )
        )
    return found + peer_targets(rows)


def _peer_figures(rows: list[Row]) -> dict[str, Any] | None:
    row = next((r for r in rows if r.extra and "peers" in r.extra), None)
    return row.extra["peers"] if row and row.extra else None


def per_call_ms(p50: dict[str, dict[str, float | None]], peer: str) -> float | None:
    """What each call of a 200-call script costs ``peer``: the script's time less a trivial
    script's, over its 200 calls."""
    long, trivial = p50.get("seq_200", {}).get(peer), p50.get("trivial", {}).get(peer)
    if long is None or trivial is None:
        return None
    return (long - trivial) / 200


def peer_targets(rows: list[Row]) -> list[Target]:
    """Issue 14's acceptance ratios, from the interleaved comparison of one run."""
    from bench._peers import CLOUDFLARE_PER_CALL_MS

    figures = _peer_figures(rows)
    if figures is None:
        return []
    p50: dict[str, dict[str, float | None]] = figures["p50_ms"]
    # The engine's own figure: live when this run measured it, else replay (labelled).
    engine = "live" if "live" in figures["peers"] else "replay"
    found: list[Target] = []

    def ratio(script: str, top: str, bottom: str) -> float | None:
        a, b = p50.get(script, {}).get(top), p50.get(script, {}).get(bottom)
        return a / b if a is not None and b else None

    ours, monty = per_call_ms(p50, engine), per_call_ms(p50, "monty")
    read_only = per_call_ms(p50, "live_ro")
    if read_only is not None and monty is not None:  # what the synced receipt costs
        found.append(
            Target(
                "per call, 200-call script, live_ro/monty",
                "reference",
                f"{read_only:.3f}/{monty:.3f} ms = {read_only / monty:.2f}x",
                None,
            )
        )
    if ours is not None and monty is not None:
        found.append(
            Target(
                f"per call, 200-call script, {engine}/monty",
                "<= 1x",
                f"{ours:.3f}/{monty:.3f} ms = {ours / monty:.2f}x",
                ours <= monty,
            )
        )
        found.append(
            Target(
                f"per call, 200-call script, {engine}/Cloudflare",
                "reference",
                f"{ours:.3f}/{CLOUDFLARE_PER_CALL_MS} ms = {ours / CLOUDFLARE_PER_CALL_MS:.1f}x",
                None,
            )
        )
    for script, name, goal in (
        ("trivial", "trivial run_code", 2.0),
        ("promise_all", "Promise.all of 100", 1.2),
    ):
        value = ratio(script, engine, "monty")
        if value is not None:
            found.append(
                Target(f"{name}, {engine}/monty", f"<= {goal}x", f"{value:.2f}x", value <= goal)
            )
    value = ratio("seq_200", "live", "replay")
    if value is not None:
        found.append(Target("200-call script, live/replay", "<= 0.1", f"{value:.3f}", value <= 0.1))
    return found


def peers_text(rows: list[Row]) -> str:
    """The comparison's table: each script's p50 on each peer, and the ratios to monty."""
    from bench._peers import SCRIPTS

    figures = _peer_figures(rows)
    if figures is None:
        return ""
    peers: list[str] = figures["peers"]
    p50: dict[str, dict[str, float | None]] = figures["p50_ms"]
    runs: dict[str, dict[str, int]] = figures["runs"]
    ours = [p for p in peers if p != "monty"]
    header = (
        f"{'script (whole run, p50 ms)':<28} {'runs':>5} "
        + " ".join(f"{p:>9}" for p in peers)
        + "  "
        + " ".join(f"{p + '/monty':>13}" for p in ours if "monty" in peers)
        + ("  live/replay" if {"live", "replay"} <= set(peers) else "")
    )
    lines = [
        "Engine against pydantic-monty (CodeMode.run_code on SQLite, warm pool; monty's warm "
        "pool), interleaved:",
        header,
        "-" * len(header),
    ]
    for script in SCRIPTS:
        if script.key not in p50:
            continue
        row = p50[script.key]
        cells = " ".join(f"{_num(row.get(p), 2):>9}" for p in peers)
        ratios = ""
        if "monty" in peers:
            ratios = " ".join(
                f"{_num(_div(row.get(p), row.get('monty')), 2) + 'x':>13}" for p in ours
            )
        live_replay = ""
        if {"live", "replay"} <= set(peers):
            live_replay = f"  {_num(_div(row.get('live'), row.get('replay')), 3):>11}"
        count = min(runs[script.key].values())
        lines.append(f"{script.title:<28} {count:>5} {cells}  {ratios}{live_replay}")
    per_call = {p: per_call_ms(p50, p) for p in peers}
    lines.append(
        "per call in the 200-call script ((200 calls - trivial) / 200): "
        + ", ".join(f"{p} {_num(v, 3)} ms" for p, v in per_call.items())
    )
    if figures.get("round_trip_p50_ms") is not None:
        lines.append(
            "a pipe round trip to a process that only echoes, from this event loop, measured "
            f"beside them: p50 {figures['round_trip_p50_ms']:.3f} ms (the least one call to "
            "another process costs here; both monty's worker and a live step pay it once a call)"
        )
    if figures.get("live_runs"):
        lines.append(
            "the live engines' live runs: "
            + ", ".join(f"{k} {v:,}" for k, v in figures["live_runs"].items())
        )
    return "\n".join(lines)


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def targets_text(found: list[Target]) -> str:
    lines = ["Targets (benchmark figures, not test assertions):"]
    for t in found:
        verdict = "-" if t.holds is None else "holds" if t.holds else "does not hold"
        lines.append(f"  {t.name:<40} goal {t.goal:<9} measured {t.value:<10} {verdict}")
    return "\n".join(lines)


def chart(rows: list[Row], path: Path) -> bool:
    """Latency against calls per script, one line per mode (PNG). False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    modes = list(dict.fromkeys(r.mode for r in rows))
    for mode in modes:
        points = sorted((r.calls, r.p50_ms) for r in rows if r.mode == mode and r.calls)
        if points:
            xs, ys = zip(*points, strict=True)
            left.plot(xs, ys, marker="o", label=mode)
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("sequential calls per script")
    left.set_ylabel("whole-script time, p50 (ms)")
    left.set_title("Latency against calls per script")
    left.grid(True, which="both", alpha=0.3)
    if left.get_legend_handles_labels()[0]:  # a run with no sequential-calls rows has none
        left.legend()
    trivial = [r for r in rows if r.workload == "trivial"]
    right.bar([r.mode for r in trivial], [r.p50_ms for r in trivial], color="tab:blue")
    right.set_yscale("log")
    right.set_ylabel("trivial step, p50 (ms)")
    right.set_title("One trivial step")
    for i, r in enumerate(trivial):
        right.annotate(f"{r.p50_ms:.2f}", (i, r.p50_ms), ha="center", va="bottom")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def summary_stats(rows: list[Row]) -> dict[str, float]:
    """A few headline numbers for the JSON."""
    out: dict[str, float] = {}
    for row in rows:
        if row.workload == "trivial":
            out[f"trivial_p50_ms_{row.mode}"] = row.p50_ms
    pools = [r.p50_ms for r in rows if r.mode == "pool"]
    if pools:
        out["pool_median_of_p50_ms"] = statistics.median(pools)
    return out
