"""A host that stalls (stopped, its machine paused) past its script's lease while its calls
wait, then wakes up after another host took the script over: what it had claimed must not
begin. Each test runs the hosts as processes and stops one with SIGSTOP."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from engine import SqliteStore
from engine._drive import Drive, lease_clock
from engine.log import (
    APPROVED,
    CallEntry,
    Decision,
    Lease,
    LeaseLost,
    MemoryStore,
    ScriptRecord,
    Started,
)
from tests.engine.host_processes import NOTE_SOURCE, host_result, ledger, wait_for

ROOT = Path(__file__).resolve().parents[2]
# Bounds each wait on the test's own events, so a failing run ends instead of hanging.
BOUND = 60

TOOLS = (
    NOTE_SOURCE
    + '''
import os, time
from engine import tool

@tool
def slow(n: int) -> int:
    """Takes the host's one tool thread until the GO file is there."""
    _note(f"slow {n}")
    while not os.path.exists(os.environ["GO"]):
        time.sleep(0.02)
    return n

@tool
def charge(cents: int) -> str:
    """Charge a card."""
    _note(f"charge {cents}")
    return "charged"
'''
)

HOST = """
import asyncio, json, os, sys
sys.path.insert(0, {root!r})
from engine import CodeMode
from engine._loading import load_tools
from tests.engine.conftest import InProcessRunner

async def main():
    tools, _ = load_tools({tools!r})
    # One tool thread: a second sync call waits for the first to end.
    engine = CodeMode(tools, runner=InProcessRunner(), data_dir={data!r}, lease_ms=500,
                      tool_threads=1)
    if sys.argv[1] == "start":
        result = await engine.run_code(sys.argv[2])
    else:
        result = await engine.resume(sys.argv[2], wait=30)
    print(json.dumps(result.to_dict()), flush=True)
    await engine.aclose()

asyncio.run(main())
"""

SCRIPT = """
const [n, paid] = await Promise.all([tools.slow({ n: 1 }), tools.charge({ cents: 30 })]);
return { n, paid };
"""


def _host(tmp_path: Path, *args: str, tools_source: str = TOOLS) -> subprocess.Popen[str]:
    tools = tmp_path / "tools.py"
    tools.write_text(tools_source)
    program = HOST.format(root=str(ROOT), tools=str(tools), data=str(tmp_path / "data"))
    env = {
        **os.environ,
        "LEDGER": str(tmp_path / "ledger"),
        "GO": str(tmp_path / "go"),
        "TMPDIR": str(tmp_path),
    }
    return subprocess.Popen(
        [sys.executable, "-c", program, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


async def _the_script(data: Path) -> tuple[str, bool]:
    """The one script's id, and whether its lease ran out by the log's clock."""
    store = SqliteStore(data)
    try:
        (record,) = await store.scripts()
        lease = record.lease
        return record.id, lease is not None and lease.expires_ms < time.time() * 1000
    finally:
        await store.aclose()


@pytest.mark.parametrize("repeatable", [False, True])
def test_a_call_waiting_for_a_thread_when_its_host_stalled_never_begins(
    tmp_path: Path, repeatable: bool
) -> None:
    """A host runs two calls; the first takes its one tool thread, the second waits for it
    (with effects, it is claimed as its thread comes; idempotent, with its step, and the
    new owner runs it again). The host is stopped past its lease, and another host takes
    the script over: the first call is settled as interrupted (the script fails), and the
    second, which never began, runs there. The stalled host, continued, finishes its first
    call, but the second does not begin then (a claimed one asks whether the lease still
    holds): it would have charged the card twice, after the script had ended."""
    tools = TOOLS.replace("@tool\ndef charge", "@tool(idempotent=True)\ndef charge")
    assert tools != TOOLS
    source = tools if repeatable else TOOLS
    stalled = _host(tmp_path, "start", SCRIPT, tools_source=source)
    try:
        wait_for(lambda: ledger(tmp_path) == ["slow 1"], "the first call to take the thread")
        stalled.send_signal(signal.SIGSTOP)
        script_id = ""

        def lapsed() -> bool:
            nonlocal script_id
            script_id, out = asyncio.run(_the_script(tmp_path / "data"))
            return out

        wait_for(lapsed, "the stalled host's lease to run out")
        successor = host_result(_host(tmp_path, "resume", script_id, tools_source=source))
        assert successor.status == "failed", successor.text
        assert "interrupted" in successor.text
    except BaseException:
        # Not left behind: its slow call waits for the GO file, and it for that call.
        stalled.kill()
        stalled.communicate()
        raise
    finally:
        stalled.send_signal(signal.SIGCONT)
    (tmp_path / "go").write_text("")
    late = host_result(stalled)
    assert late.to_dict() == successor.to_dict(), "the successor's outcome stands"
    assert ledger(tmp_path) == ["slow 1", "charge 30"], "the charge ran once, on the successor"


def _never(lease: Lease) -> None:
    raise AssertionError(f"the lease of {lease.script_id} was kept")


async def _start(store: MemoryStore, ttl_ms: int) -> Started:
    """A new script ``s1`` in ``store``, started by ``host:1:a`` with a lease of ``ttl_ms``."""
    record = ScriptRecord(id="s1", code="return 1", tenant="t", now_ms=0, seed=1, created_ms=0)
    started = await store.start(record, "host:1:a", ttl_ms)
    assert started.lease is not None
    return started


async def _drive(
    store: MemoryStore, started: Started, *, taken_ago: float = 0.0, read: bool = False
) -> Drive:
    """The drive of ``started`` with a minute-long lease (to it), taken ``taken_ago`` seconds
    ago by this host's lease clock; with ``read``, its record and calls read from ``store``
    (calls written since the start)."""
    assert started.lease is not None
    return await Drive.resume(
        store,
        started.lease,
        60_000,
        None if read else started.record,
        kept=_never,
        taken_at=lease_clock() - taken_ago,
    )


async def test_a_call_begins_only_while_the_lease_surely_holds() -> None:
    """``Drive.may_begin`` measures the lease from when it was taken (``taken_at``), not from
    when the drive was made: a take half a lease old or more is renewed before a call begins,
    which finds the script another host's once that host took it over. One taken just now
    asks the log nothing."""
    now = [0.0]
    store = MemoryStore(clock=lambda: now[0])
    started = await _start(store, 1000)
    # The drives' lease is a minute long to them (half of it: 30 s), so neither renews on its
    # own during the test however slow the machine; the log's lease is one second.
    fresh = await _drive(store, started)
    old = await _drive(store, started, taken_ago=31)
    try:
        now[0] = 1.5  # the lease ran out by the log's clock, and another host took it over
        assert await store.acquire("s1", "host:2:b", 1000) is not None
        assert fresh.may_begin() is None  # taken just now: it holds for this host's clock
        renewing = old.may_begin()
        assert renewing is not None
        with pytest.raises(LeaseLost):
            await renewing
    finally:
        await fresh.close()
        await old.close()


class _CountedRenewals(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.renewals = 0

    async def renew(self, lease: Lease, ttl_ms: int) -> Lease:
        self.renewals += 1
        await asyncio.sleep(0.01)  # a write that takes a while: the calls meet in it
        return await super().renew(lease, ttl_ms)


async def _taken_half_a_lease_ago() -> tuple[_CountedRenewals, Drive]:
    """A drive of a new script whose (minute-long) lease was taken 31 s ago."""
    store = _CountedRenewals()
    return store, await _drive(store, await _start(store, 60_000), taken_ago=31)


async def test_calls_that_begin_together_share_one_renewal() -> None:
    """Fifty calls granted threads at once, half a lease after the take: the drive renews
    its lease once for them all (its own renewal, which close() waits for), not once each."""
    store, drive = await _taken_half_a_lease_ago()
    try:
        waits = [drive.may_begin() for _ in range(50)]
        assert all(w is not None for w in waits)
        await asyncio.gather(*(w for w in waits if w is not None))
        assert store.renewals == 1
        assert drive.may_begin() is None  # renewed just now
    finally:
        await drive.close()


async def test_a_call_left_waiting_after_its_drive_ended_never_begins() -> None:
    """A drive that ended (a sibling call's failure ended it while this call still waited
    for a thread) lets no call begin, and does not renew the lease it gave up: the script
    stays free for the next host."""
    store, drive = await _taken_half_a_lease_ago()
    await drive.close()
    with pytest.raises(LeaseLost, match="drive on this host has ended"):
        drive.may_begin()
    assert store.renewals == 0
    assert await store.acquire("s1", "host:2:b", 60_000) is not None, "the script is free"


class _ReceiptLate(MemoryStore):
    """A memory log whose claims commit, then take until ``go`` to say so (a log slow to
    answer, a host stalled after the write)."""

    def __init__(self) -> None:
        super().__init__()
        self.committed = asyncio.Event()
        self.go = asyncio.Event()

    async def claim(self, lease: Lease, indexes: Any, *, lasting: bool = True) -> list[int]:
        claimed = await super().claim(lease, indexes, lasting=lasting)
        self.committed.set()
        await self.go.wait()
        return claimed


async def test_a_call_whose_receipt_landed_as_its_drive_ended_does_not_begin() -> None:
    """A call claimed as its tool thread came (``Drive.claim_to_begin``) whose receipt was
    answered only after its drive had ended (a sibling call's failure ended it) does not
    begin: as any claimed call, only while its drive runs on a lease it surely holds."""
    store = _ReceiptLate()
    started = await _start(store, 60_000)
    assert started.lease is not None
    call = CallEntry(
        script_id="s1", index=0, call_id="c1", name="pay", arguments={}, argument_bytes=2
    )
    await store.add_calls(started.lease, [call])
    await store.decide(started.lease, [Decision(0, APPROVED)])
    drive = await _drive(store, started, read=True)
    drive.defer([0], 1)
    beginning = drive.claim_to_begin(0)
    assert beginning is not None
    waiting = asyncio.ensure_future(beginning)
    await asyncio.wait_for(store.committed.wait(), BOUND)
    await drive.close()
    store.go.set()
    with pytest.raises(LeaseLost, match="drive on this host has ended"):
        await asyncio.wait_for(waiting, BOUND)


async def test_a_call_does_not_begin_once_a_renewal_found_the_script_anothers() -> None:
    """The drive's own renewal (at a third of the lease) found the script another host's:
    a call that asks before half the lease has passed (when may_begin renews itself) did
    begin, the drive knowing better. It is refused with that renewal's LeaseLost."""
    now = [0.0]
    store = MemoryStore(clock=lambda: now[0])
    drive = await _drive(store, await _start(store, 1000))
    try:
        now[0] = 1.5  # the lease ran out by the log's clock, and another host took it over
        assert await store.acquire("s1", "host:2:b", 1000) is not None
        await drive._renew()  # what the renewal timer runs
        with pytest.raises(LeaseLost):
            drive.may_begin()
    finally:
        await drive.close()
