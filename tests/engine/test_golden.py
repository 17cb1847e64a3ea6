"""Golden logs: some must replay cleanly, some must fail with a divergence naming the call."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from sandbox.protocol import Clock, Record, Script
from sandbox.runtime import run_in_process

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(GOLDEN.glob("*.json"))


def _script(case: dict[str, Any], records: list[Record]) -> Script:
    names = sorted({r.name for r in records} | set(re.findall(r"tools\.(\w+)", case["code"])))
    return Script(
        id="golden",
        code=case["code"],
        records=records,
        tools=names,
        clock=Clock(now_ms=case["now_ms"], seed=case["seed"]),
    )


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_golden_log(path: Path) -> None:
    """Each golden log replays to the outcome it records."""
    case = orjson.loads(path.read_bytes())
    if case.get("records_from_first_run"):
        first = run_in_process(_script(case, []))
        assert first.outcome == "calls"
        records = [Record(name=c.name, arguments=c.arguments, result="ok") for c in first.calls]
    else:
        records = [Record.model_validate(r) for r in case["records"]]
    ran = run_in_process(_script(case, records))
    expect = case["expect"]
    assert ran.outcome == expect["outcome"], ran
    if expect["outcome"] == "finished":
        assert ran.value == expect["value"]
        if "printed" in expect:
            assert ran.printed == expect["printed"]
    elif expect["outcome"] == "calls":
        assert [c.model_dump() for c in ran.calls] == expect["calls"]
    else:
        assert ran.error is not None
        assert ran.error.name == expect["error"]
        assert f"call {expect['position']} differs" in ran.error.message


def test_golden_corpus_has_both_kinds() -> None:
    """The corpus holds logs that replay cleanly and logs that must diverge."""
    outcomes = {orjson.loads(p.read_bytes())["expect"]["outcome"] for p in CASES}
    assert {"finished", "failed", "calls"} <= outcomes
