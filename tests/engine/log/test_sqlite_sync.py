"""The SQLite log's writes that must last reach the disk before anything depends on them:
a call's receipt before the call runs, the outcome of a script that called a tool with
effects before ``run_code`` returns. Each such
write commits without a sync and then ``fsync``s the write-ahead log; these tests watch the
``fsync`` calls the process makes and the order they come in."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from engine import CodeMode, SqliteStore, Tool, tool
from tests.engine.conftest import InProcessRunner

SCRIPT = "let s = 0; for (const n of [1, 2, 3]) s += await tools.{name}({{n}}); return s;"


async def _run_watched(
    t: Tool | list[Tool],
    events: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    code: str | None = None,
) -> Any:
    """Run ``code`` (by default, a script of three calls to ``t``) with the tools ``t``,
    noting in ``events`` each fsync of the log's write-ahead log and, last, the return."""
    tools = t if isinstance(t, list) else [t]
    real = os.fsync

    def fsync(fd: Any) -> None:
        real(fd)
        name = os.readlink(f"/proc/self/fd/{fd}") if isinstance(fd, int) else str(fd)
        if name.endswith("codemode.sqlite3-wal"):
            events.append("sync")

    engine = CodeMode(
        tools, runner=InProcessRunner(), store=SqliteStore(tmp_path), type_check="off"
    )
    monkeypatch.setattr(os, "fsync", fsync)
    try:
        result = await engine.run_code(code or SCRIPT.format(name=tools[0].name))
        events.append("returned")
    finally:
        await engine.aclose()
    return result.value


def _tools(events: list[str]) -> tuple[Tool, Tool]:
    """``price``, read-only, and ``charge``, with an effect; each notes its call in ``events``."""

    @tool(read_only=True)
    def price(n: int) -> int:
        """A price (no effect: run again if a crash interrupts it)."""
        events.append(f"price {n}")
        return n

    @tool
    def charge(n: int) -> int:
        """Take n from the card (an effect: its receipt must last)."""
        events.append(f"charge {n}")
        return n

    return price, charge


async def test_a_receipt_is_synced_before_its_call_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    _, charge = _tools(events)
    assert await _run_watched(charge, events, tmp_path, monkeypatch) == 6
    # Each call's receipt synced before it ran; the outcome synced before the return.
    calls = [i for i, e in enumerate(events) if e.startswith("charge")]
    assert len(calls) == 3
    for i in calls:
        assert events[i - 1] == "sync", events
    assert events[-2:] == ["sync", "returned"], events


async def test_a_read_only_call_waits_for_no_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    price, _ = _tools(events)
    assert await _run_watched(price, events, tmp_path, monkeypatch) == 6
    # Nor does the outcome: a new run of the script, after a power cut, gives it again.
    assert events == ["price 1", "price 2", "price 3", "returned"], events


async def test_one_call_with_effects_makes_the_outcome_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    # The charge comes first and its result is not synced: only the outcome makes the result
    # last, so it syncs though the call after it is read-only.
    code = "const c = await tools.charge({n: 5}); return c + await tools.price({n: 1});"
    assert await _run_watched(list(_tools(events)), events, tmp_path, monkeypatch, code) == 6
    assert events == ["sync", "charge 5", "price 1", "sync", "returned"], events


async def test_a_script_without_calls_waits_for_no_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    _, charge = _tools(events)
    assert await _run_watched(charge, events, tmp_path, monkeypatch, "return 1 + 1") == 2
    assert events == ["returned"], events
