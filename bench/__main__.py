"""``python -m bench [--quick] [--out DIR] [--modes ...] [--only ...]``.

Runs every workload on every mode in one run, prints a table, writes ``latest.json`` and
``latest.png`` into ``--out`` (default ``bench/results``), and says which targets hold.
``--quick`` takes about 3 minutes, for checks; the full run about 8 (bench/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import platform
import sys
import time
from pathlib import Path

import orjson
import psutil

from bench import _report
from bench._modes import MODES, Mode, make_mode
from bench._workloads import WORKLOADS
from runner import default_slot_count

DEFAULT_OUT = Path(__file__).with_name("results")


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small counts, about 3 minutes")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where results go")
    parser.add_argument(
        "--modes", default=",".join(MODES), help=f"comma-separated subset of {','.join(MODES)}"
    )
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated workload keys (default: all); with --limits, groups of limits "
        "(compute_ms, memory, deadline, results, live)",
    )
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiply every count (at least 1 each)"
    )
    parser.add_argument(
        "--limits",
        action="store_true",
        help="measure how each limit holds and what it costs instead (bench/_limits.py)",
    )
    return parser.parse_args(argv)


def _machine(slots: int) -> dict[str, object]:
    return {
        "cpus": psutil.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
        "python": sys.version.split()[0],
        "kernel": platform.release(),
        "slots": slots,
        "load_average_at_start": os.getloadavg(),
    }


async def _warm(mode: Mode) -> None:
    """Start a mode and take a few steps, so the first measured step is not a cold one."""
    from bench._workloads import TRIVIAL, script

    for _ in range(3):
        await mode.step(script(TRIVIAL))
    await _settle(mode)


async def _settle(mode: Mode) -> None:
    """Let a warm pool fill up again between workloads."""
    runner = getattr(mode, "runner", None)
    pool = getattr(runner, "pool", None)
    if pool is not None:
        end = time.monotonic() + 10
        while len(pool.idle) < pool.size and time.monotonic() < end:
            await asyncio.sleep(0.01)


async def run(args: argparse.Namespace) -> list[_report.Row]:
    """Every workload on every mode; one runner per mode for the whole run, as a host has."""
    names = [m.strip() for m in args.modes.split(",") if m.strip()]
    only = {w.strip() for w in args.only.split(",") if w.strip()}
    workloads = [w for w in WORKLOADS if not only or w.key in only]
    slots = default_slot_count()
    modes = {name: make_mode(name, slots) for name in names}
    rows: list[_report.Row] = []
    try:
        for mode in modes.values():
            await _warm(mode)
        for workload in workloads:
            for name, mode in modes.items():
                count = workload.count(name, args.quick)
                if count == 0:
                    continue
                count = max(1, round(count * args.scale))
                await _settle(mode)
                sample = await workload.run(mode, count)
                row = _report.Row.of(workload, name, count, sample)
                rows.append(row)
                print(
                    f"  {workload.key:<20} {name:<6} n={count:<4} p50 {row.p50_ms:9.2f} ms  "
                    f"{row.steps_per_s:8.1f} steps/s",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        for mode in modes.values():
            await mode.aclose()
    _report.add_ratios(rows)
    return rows


def limits_main(args: argparse.Namespace) -> int:
    """``--limits``: the limits' table; exit status 1 when a limit overshoots (a defect)."""
    from bench import _limits

    only = frozenset(k.strip() for k in args.only.split(",") if k.strip()) or frozenset(
        _limits.GROUPS
    )
    unknown = only - set(_limits.GROUPS)
    if unknown:
        print(
            f"bench --limits: no group {', '.join(sorted(unknown))}; "
            f"the groups are {', '.join(_limits.GROUPS)}",
            file=sys.stderr,
        )
        return 2
    started = time.monotonic()
    machine = _machine(default_slot_count())
    print(f"bench --limits: {'quick' if args.quick else 'full'} run on {machine}", file=sys.stderr)
    figures = asyncio.run(_limits.measure(args.quick, default_slot_count(), only))
    print(_limits.text(figures))
    elapsed = time.monotonic() - started
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "limits.json"
    machine["load_average_at_end"] = os.getloadavg()
    path.write_bytes(
        orjson.dumps(
            {
                "quick": args.quick,
                "seconds": round(elapsed, 1),
                "machine": machine,
                "figures": _limits.as_json(figures),
            },
            option=orjson.OPT_INDENT_2,
        )
    )
    print(f"\n{len(figures)} figures in {elapsed:.0f} s; wrote {path}")
    return 1 if any(f.defect for f in figures) else 0


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    if args.limits:
        return limits_main(args)
    # Refused before anything runs: a typo ran nothing and wrote an empty run over the
    # results; a mode misspelled was a ValueError traceback.
    only = {w.strip() for w in args.only.split(",") if w.strip()}
    unknown = only - {w.key for w in WORKLOADS}
    modes = {m.strip() for m in args.modes.split(",") if m.strip()}
    if unknown or not modes <= set(MODES):
        wrong = sorted(unknown) + sorted(modes - set(MODES))
        print(
            f"bench: no workload or mode {', '.join(wrong)}; the workloads are "
            f"{', '.join(w.key for w in WORKLOADS)}, the modes {', '.join(MODES)}",
            file=sys.stderr,
        )
        return 2
    started = time.monotonic()
    machine = _machine(default_slot_count())
    print(f"bench: {'quick' if args.quick else 'full'} run on {machine}", file=sys.stderr)
    rows = asyncio.run(run(args))
    found = _report.targets(rows)
    machine["load_average_at_end"] = os.getloadavg()
    elapsed = time.monotonic() - started

    print(_report.table(rows))
    print()
    comparison = _report.peers_text(rows)
    if comparison:
        print(comparison)
        print()
    print(_report.targets_text(found))
    print(f"\n{len(rows)} rows in {elapsed:.0f} s")

    args.out.mkdir(parents=True, exist_ok=True)
    json_path = args.out / "latest.json"
    json_path.write_bytes(
        orjson.dumps(
            {
                "quick": args.quick,
                "seconds": round(elapsed, 1),
                "machine": machine,
                "rows": [dataclasses.asdict(r) for r in rows],
                "targets": [dataclasses.asdict(t) for t in found],
                "summary": _report.summary_stats(rows),
            },
            option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY,
        )
    )
    png_path = args.out / "latest.png"
    drawn = _report.chart(rows, png_path)
    print(f"wrote {json_path}" + (f" and {png_path}" if drawn else " (no matplotlib: no chart)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
