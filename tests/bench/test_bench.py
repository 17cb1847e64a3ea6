"""A smoke test of ``python -m bench``: every part runs end to end, with tiny counts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench import _report
from bench.__main__ import main
from bench._modes import find_node


def test_a_tiny_run_writes_the_table_the_json_and_the_chart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    modes = "pool,fork,floor" + (",node" if find_node() else "")
    code = main(
        [
            "--quick",
            "--modes",
            modes,
            "--only",
            "trivial,seq_10,tenants,type_check",
            "--scale",
            "0.2",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "10 sequential calls" in out and "slot shares" in out and "Targets" in out
    assert "x without the check" in out
    data = json.loads((tmp_path / "latest.json").read_text())
    rows = {(r["workload"], r["mode"]) for r in data["rows"]}
    for mode in modes.split(","):
        assert {("trivial", mode), ("seq_10", mode), ("tenants", mode)} <= rows
    assert all(r["p50_ms"] > 0 and r["steps"] > 0 for r in data["rows"])
    pool = next(r for r in data["rows"] if r["workload"] == "trivial" and r["mode"] == "pool")
    # A ratio is reported, not judged: on a loaded machine either side can be the faster.
    assert pool["times_floor"] is not None and pool["times_floor"] > 0
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    assert (tmp_path / "latest.png").stat().st_size > 1000


def test_percentiles_interpolate() -> None:
    assert _report.percentile([3.0], 90) == 3.0
    assert _report.percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    assert _report.percentile([0.0, 10.0], 90) == 9.0
    assert math.isnan(_report.percentile([], 50))


def test_bench_is_not_installed_for_users() -> None:
    """``pip install .`` installs engine, runner and sandbox (with the prelude), not bench:
    the benchmarks run from a checkout."""
    import tomllib

    import setuptools

    root = Path(__file__).parents[2]
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = setuptools.find_packages(where=str(root), include=config["packages"]["find"]["include"])
    assert {p.split(".")[0] for p in found} == {"engine", "runner", "sandbox"}
    assert "bench" not in config["package-data"]
    # The prelude and the TypeScript bundle, with the licenses of what the bundle holds.
    assert config["package-data"]["sandbox"] == ["*.js", "*.LICENSE.txt"]


def test_monty_and_the_engine_live_and_replay_return_each_scripts_value() -> None:
    """The peers comparison checks every value it gets (a wrong one raises), so this is the
    check that monty's Python and the engine's JS compute the same thing."""
    import asyncio

    from bench._peers import compare

    only = {"trivial", "seq_1", "seq_10", "promise_all"}
    peers = ("live", "live_ro", "replay", "monty")
    comparison = asyncio.run(compare(1, peers=peers, slots=1, only=only))
    assert set(comparison.times) == only
    for key in only:
        assert len(comparison.times[key]["monty"]) >= 1
        for peer in peers:
            assert len(comparison.times[key][peer]) == len(comparison.times[key]["monty"])
    figures = comparison.as_dict()
    assert figures["peers"] == list(peers)
    assert figures["live_runs"]["resumed"] > 0  # the live engine did take live steps
    assert all(v is not None and v > 0 for v in figures["p50_ms"]["trivial"].values())
    # The machine's floor for a call to another process, measured beside the peers.
    assert 0 < figures["round_trip_p50_ms"] < max(figures["p50_ms"]["seq_10"].values())


def test_the_acceptance_ratios_come_from_one_runs_medians() -> None:
    p50 = {
        "trivial": {"live": 4.0, "live_ro": 4.0, "replay": 5.0, "monty": 1.0},
        "seq_200": {"live": 44.0, "live_ro": 24.0, "replay": 1000.0, "monty": 21.0},
        "promise_all": {"live": 12.0, "replay": 30.0, "monty": 10.0},
    }
    row = _report.Row(
        workload="peers", title="", mode="pool", unit="script", count=1, steps=1,
        p50_ms=5.0, p90_ms=5.0, steps_per_s=1.0, peak_rss_mib=0.0,
        extra={"peers": {"peers": ["live", "replay", "monty"], "p50_ms": p50,
                         "runs": {k: {"live": 1, "replay": 1, "monty": 1} for k in p50}}},
    )  # fmt: skip
    assert _report.per_call_ms(p50, "live") == (44.0 - 4.0) / 200
    found = {t.name: t for t in _report.peer_targets([row])}
    per_call = found["per call, 200-call script, live/monty"]
    assert per_call.holds is False and "2.00x" in per_call.value  # 0.2 ms against 0.1 ms
    assert found["per call, 200-call script, live/Cloudflare"].value.endswith("= 4.0x")
    read_only = found["per call, 200-call script, live_ro/monty"]
    assert read_only.holds is None and "0.100/0.100 ms" in read_only.value  # a reference
    assert found["trivial run_code, live/monty"].holds is False  # 4x
    assert found["Promise.all of 100, live/monty"].value == "1.20x"
    assert found["Promise.all of 100, live/monty"].holds is True
    assert found["200-call script, live/replay"].value == "0.044"
    assert found["200-call script, live/replay"].holds is True
    text = _report.peers_text([row])
    assert "live/monty" in text and "live/replay" in text and "200 sequential calls" in text


def test_limits_quick_measures_every_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--limits --quick`` runs end to end (its verdicts depend on the machine's load, so
    the exit status is not checked: 1 says a limit overshot)."""
    code = main(["--limits", "--quick", "--out", str(tmp_path)])
    assert code in (0, 1)
    out = capsys.readouterr().out
    data = json.loads((tmp_path / "limits.json").read_text())
    limits = {f["limit"] for f in data["figures"]}
    assert limits >= {"compute_ms", "memory", "deadline", "results", "calls", "live"}
    assert any("live segment" in f["setting"] for f in data["figures"])
    assert any("objects held, live" in f["setting"] for f in data["figures"])
    for figure in data["figures"]:
        assert figure["limit"] in out and figure["value"]
    compute = next(f for f in data["figures"] if f["limit"] == "compute_ms")
    assert compute["defect"] is not None


def test_a_limit_overshoots_by_more_than_ten_percent_or_the_absolute_bound() -> None:
    from bench._limits import over_bound

    assert not over_bound(109, 100, 50)
    assert over_bound(111, 100, 50)
    assert not over_bound(5040, 5000, 50)
    assert over_bound(5060, 5000, 50)  # 1.2%, but 60 ms


async def test_a_pool_mode_settles_with_its_pool_full() -> None:
    """The engine_store comparison waits for the shared warm pool before each timed run:
    after a step took a child, settle returns once the pool holds its children again (a
    run that found it short forked one on demand, and its p50 was 2 or 6 ms at random)."""
    from bench._modes import make_mode
    from bench._workloads import TRIVIAL
    from sandbox.protocol import Clock, Limits, Script

    mode = make_mode("pool", 2)
    try:
        script = Script(id="s", code=TRIVIAL, clock=Clock(now_ms=0, seed=1), limits=Limits())
        await mode.step(script)
        pool = mode.runner.pool  # type: ignore[attr-defined]
        await mode.settle(timeout=60)  # however loaded the machine: it returns once full
        assert len(pool.idle) == pool.target == 2
    finally:
        await mode.aclose()


@pytest.mark.parametrize("given", [["--only", "typecheck"], ["--modes", "pol"]])
def test_a_workload_or_mode_it_does_not_have_is_refused(
    given: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A misspelled workload ran nothing and wrote an empty run over the results (exit 0);
    a misspelled mode was a ValueError traceback. Each is one line, exit 2, nothing written."""
    from bench.__main__ import main

    assert main([*given, "--quick", "--out", str(tmp_path)]) == 2
    assert "the workloads are trivial," in capsys.readouterr().err
    assert not (tmp_path / "latest.json").exists()
