"""The SQLite log's writes that must last reach the disk before anything depends on them:
a call's receipt before the call runs, the outcome of a script that called a tool with
effects before ``run_code`` returns. Each such write commits without a sync and then
``fsync``s the write-ahead log; these tests watch the ``fsync`` calls the process makes and
the order they come in."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from engine import CodeMode, SqliteStore, tool
from tests.engine.conftest import InProcessRunner

THREE_CALLS = "let s = 0; for (const n of [1, 2, 3]) s += await tools.{name}({{n}}); return s;"


async def _run_watched(
    code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, list[str]]:
    """Run ``code`` with two tools, ``price`` (read-only) and ``charge`` (with an effect):
    its value, and what happened in order: each call (``"charge 5"``), each fsync of the
    log's write-ahead log (``"sync"``) and, last, the return (``"returned"``)."""
    events: list[str] = []

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

    real = os.fsync

    def fsync(fd: Any) -> None:
        real(fd)
        name = os.readlink(f"/proc/self/fd/{fd}") if isinstance(fd, int) else str(fd)
        if name.endswith("codemode.sqlite3-wal"):
            events.append("sync")

    engine = CodeMode(
        [price, charge], runner=InProcessRunner(), store=SqliteStore(tmp_path), type_check="off"
    )
    monkeypatch.setattr(os, "fsync", fsync)
    try:
        result = await engine.run_code(code)
        events.append("returned")
    finally:
        await engine.aclose()
    return result.value, events


async def test_a_receipt_is_synced_before_its_call_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    value, events = await _run_watched(THREE_CALLS.format(name="charge"), tmp_path, monkeypatch)
    assert value == 6
    # Each call's receipt synced before it ran; the outcome synced before the return.
    calls = [i for i, e in enumerate(events) if e.startswith("charge")]
    assert len(calls) == 3
    for i in calls:
        assert events[i - 1] == "sync", events
    assert events[-2:] == ["sync", "returned"], events


@pytest.mark.parametrize(
    ("code", "value", "calls"),
    [
        # A read-only call's receipt waits for no sync, nor does the outcome: a new run of
        # the script, after a power cut, gives it again.
        (THREE_CALLS.format(name="price"), 6, ["price 1", "price 2", "price 3"]),
        # A script that called nothing changed nothing, whatever tools it had.
        ("return 1 + 1", 2, []),
    ],
    ids=["read-only calls", "no calls"],
)
async def test_a_script_without_effects_waits_for_no_sync(
    code: str, value: int, calls: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got, events = await _run_watched(code, tmp_path, monkeypatch)
    assert got == value
    assert events == [*calls, "returned"], events


async def test_one_call_with_effects_makes_the_outcome_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The charge comes first and its result is not synced: only the outcome makes the result
    # last, so it syncs though the call after it is read-only.
    code = "const c = await tools.charge({n: 5}); return c + await tools.price({n: 1});"
    value, events = await _run_watched(code, tmp_path, monkeypatch)
    assert value == 6
    assert events == ["sync", "charge 5", "price 1", "sync", "returned"], events


async def test_a_log_the_store_opens_has_its_directory_synced_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file's name lasts only with its directory's: the first sync of a write-ahead log the
    # store opens (it may have been made just now) syncs the directory too, later ones only
    # the log. A store opened after the last one closed (which deleted the log) does it again.
    syncs: list[str] = []
    real = os.fsync

    def fsync(fd: Any) -> None:
        real(fd)
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            syncs.append(
                "directory" if Path(os.readlink(f"/proc/self/fd/{fd}")) == tmp_path else "?"
            )
        elif os.readlink(f"/proc/self/fd/{fd}").endswith("codemode.sqlite3-wal"):
            syncs.append("log")

    @tool
    def charge(n: int) -> int:
        """Take n from the card (an effect: its receipt must last)."""
        return n

    monkeypatch.setattr(os, "fsync", fsync)
    for _ in range(2):
        syncs.clear()
        engine = CodeMode(
            [charge], runner=InProcessRunner(), store=SqliteStore(tmp_path), type_check="off"
        )
        try:
            result = await engine.run_code(THREE_CALLS.format(name="charge"))
        finally:
            await engine.aclose()
        assert result.value == 6
        # Three receipts and the outcome: four syncs of the log, the first with the directory.
        assert syncs == ["log", "directory", "log", "log", "log"], syncs
        assert not Path(f"{tmp_path}/codemode.sqlite3-wal").exists()
