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
    assert pool["times_floor"] is not None and pool["times_floor"] > 1
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
    assert config["package-data"]["sandbox"] == ["*.js"]
