"""The SQLite log's writes that must last reach the disk before anything depends on them:
a call's receipt before the call runs, the outcome of a script that called a tool with
effects before ``run_code`` returns. Each such write commits without a sync and then
``fsync``s the write-ahead log, by Linux AIO or on the store's thread; these tests watch the
``fsync``s the process makes, either way, and the order they come in."""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from engine import CodeMode, SqliteStore, StoreUnavailable, tool
from engine.log import _aio
from tests._needs import require
from tests.engine.conftest import InProcessRunner


@pytest.fixture(params=["aio", "thread"], autouse=True)
def sync_by(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test both ways: the syncs by Linux AIO, and on the store's thread (where the
    machine has no AIO)."""
    if request.param == "thread":
        monkeypatch.setattr(_aio.AioSync, "make", classmethod(lambda cls, loop: None))
    elif _aio._linux_aio() is None:
        require("Linux AIO (kernel 4.18 or later, io_setup allowed, caio installed)")
    return str(request.param)


def watch_fsync(monkeypatch: pytest.MonkeyPatch, seen: Any) -> None:
    """Call ``seen(fd)`` after each fsync the process makes of a file, by ``os.fsync`` or by
    Linux AIO."""
    real = os.fsync

    def fsync(fd: Any) -> None:
        real(fd)
        seen(fd)

    real_aio = _aio.AioSync.fsync

    async def aio_fsync(self: _aio.AioSync, fd: int) -> None:
        await real_aio(self, fd)
        seen(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(_aio.AioSync, "fsync", aio_fsync)


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

    def seen(fd: Any) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}") if isinstance(fd, int) else str(fd)
        if name.endswith("codemode.sqlite3-wal"):
            events.append("sync")

    engine = CodeMode(
        [price, charge], runner=InProcessRunner(), store=SqliteStore(tmp_path), type_check="off"
    )
    watch_fsync(monkeypatch, seen)
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

    def seen(fd: Any) -> None:
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

    watch_fsync(monkeypatch, seen)
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


async def test_the_syncs_go_by_linux_aio_where_the_machine_has_it(
    sync_by: str, tmp_path: Path
) -> None:
    """After the first sync (on the thread, which opens the log and syncs its directory),
    the store's syncs go by Linux AIO; without AIO, all stay on the thread."""

    @tool
    def charge(n: int) -> int:
        """Take n from the card (an effect: its receipt must last)."""
        return n

    store = SqliteStore(tmp_path)
    engine = CodeMode([charge], runner=InProcessRunner(), store=store, type_check="off")
    try:
        assert (await engine.run_code(THREE_CALLS.format(name="charge"))).value == 6
        assert (store._aio is not None) == (sync_by == "aio")
    finally:
        await engine.aclose()
    assert store._aio is None  # let go at aclose


@pytest.mark.parametrize("sync_by", ["aio"], indirect=True)
async def test_a_file_system_that_refuses_aio_fsync_syncs_on_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An fsync by AIO that the file system refuses (EINVAL) is made on the thread instead,
    and the store stops trying AIO: every receipt still reaches the disk before its call."""
    refused: list[int] = []

    async def refuse(self: _aio.AioSync, fd: int) -> None:
        refused.append(fd)
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(_aio.AioSync, "fsync", refuse)
    events: list[str] = []
    real = os.fsync

    def fsync(fd: Any) -> None:
        real(fd)
        if os.readlink(f"/proc/self/fd/{fd}").endswith("codemode.sqlite3-wal"):
            events.append("sync")

    monkeypatch.setattr(os, "fsync", fsync)

    @tool
    def charge(n: int) -> int:
        """Take n from the card (an effect: its receipt must last)."""
        events.append(f"charge {n}")
        return n

    store = SqliteStore(tmp_path)
    engine = CodeMode([charge], runner=InProcessRunner(), store=store, type_check="off")
    try:
        assert (await engine.run_code(THREE_CALLS.format(name="charge"))).value == 6
    finally:
        await engine.aclose()
    assert len(refused) == 1 and store._aio_off
    assert events == [
        *["sync", "charge 1", "sync", "charge 2", "sync", "charge 3"],
        "sync",
    ], events


@pytest.mark.parametrize("sync_by", ["aio"], indirect=True)
async def test_an_aio_fsync_that_fails_stops_the_script_before_its_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An I/O error from an fsync by AIO is not retried on the thread (a second fsync can
    report success for pages the first failed to write): the store says the log could not be
    synced, and the call whose receipt it was does not run."""

    async def fail(self: _aio.AioSync, fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    ran: list[int] = []

    @tool
    def charge(n: int) -> int:
        """Take n from the card (an effect: its receipt must last)."""
        ran.append(n)
        return n

    store = SqliteStore(tmp_path)
    engine = CodeMode([charge], runner=InProcessRunner(), store=store, type_check="off")
    try:
        assert (await engine.run_code("return await tools.charge({n: 1})")).value == 1
        monkeypatch.setattr(_aio.AioSync, "fsync", fail)
        with pytest.raises(StoreUnavailable, match="could not be synced to the disk"):
            await engine.run_code("return await tools.charge({n: 2})")
    finally:
        await engine.aclose()
    assert ran == [1]


@pytest.mark.parametrize("sync_by", ["aio"], indirect=True)
async def test_an_fsync_waiting_when_its_aio_context_is_let_go_is_told_to_sync_another_way(
    tmp_path: Path,
) -> None:
    """A store lets its AIO context go when another sync found AIO refused, or at aclose: a
    sync still waiting on it gets an error of UNSUPPORTED (the store then syncs on the
    thread), never a wait for an answer nobody will read."""
    aio = _aio.AioSync.make(asyncio.get_running_loop())
    assert aio is not None
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        waiting = asyncio.create_task(aio.fsync(fd))
        await asyncio.sleep(0)  # submitted; its completion not read yet
        context = aio.detach()
        with pytest.raises(OSError) as raised:
            async with asyncio.timeout(5):
                await waiting
        assert raised.value.errno in _aio.UNSUPPORTED
        del context
    finally:
        os.close(fd)
