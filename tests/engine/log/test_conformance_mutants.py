"""The store conformance suite fails a store that is wrong, and says what is wrong.

Each store here is a real one broken in one way, as a third party's store could be; each test
runs the one check that must catch it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from engine.log import LogStore, MemoryStore, SqliteStore, Started, conformance
from engine.log import _records as r


class _SettleDropsNote(MemoryStore):
    """Settles a call and clears its note (who approved it)."""

    async def settle(self, lease: r.Lease, settlements: Sequence[r.Settlement]) -> bool:
        held = await super().settle(lease, settlements)
        with self._lock:
            for settlement in settlements:
                self._calls[lease.script_id][settlement.index].note = None
        return held


class _AnswerDropsNote(MemoryStore):
    """Moves an answered call and forgets the answer's note."""

    async def answer(
        self, script_id: str, call_id: str, expect: str, state: str, **fields: Any
    ) -> r.CallEntry:
        return await super().answer(script_id, call_id, expect, state, **(fields | {"note": None}))


class _ClaimDropsNote(MemoryStore):
    """Claims a call and clears its note."""

    async def claim(
        self, lease: r.Lease, indexes: Sequence[int], *, lasting: bool = True
    ) -> list[int]:
        claimed = await super().claim(lease, indexes, lasting=lasting)
        with self._lock:
            for index in claimed:
                self._calls[lease.script_id][index].note = None
        return claimed


@pytest.mark.parametrize(
    ("store", "said"),
    [
        (_SettleDropsNote, "a settle dropped the call's note"),
        (_AnswerDropsNote, "an approval's note was lost"),
        (_ClaimDropsNote, "a claim dropped the call's note"),
    ],
    ids=["settle", "answer", "claim"],
)
async def test_a_lost_note_fails(store: type[MemoryStore], said: str) -> None:
    broken = store()
    with pytest.raises(AssertionError, match=said):
        await conformance.check_notes_kept(lambda: broken)


@pytest.mark.parametrize(
    "clock",
    [time.monotonic, lambda: time.time() - 3600, lambda: time.time() / 1000],
    ids=["monotonic", "an-hour-off", "seconds"],
)
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_wrong_clock_fails(kind: str, clock: Any, tmp_path: Path) -> None:
    store: LogStore = MemoryStore(clock) if kind == "memory" else SqliteStore(tmp_path, clock)
    with pytest.raises(AssertionError, match="a store's times are the wall clock's"):
        await conformance.check_wall_clock(lambda: store)


class _CallsFrom(SqliteStore):
    """Reads calls from one position off the one asked for (``shift``), or all but the last
    of a script's calls past three (``last``)."""

    shift = 0
    drop_last = False

    async def calls(self, script_id: str, start: int = 0) -> list[r.CallEntry]:
        got = await super().calls(script_id, max(0, start + self.shift) if start else 0)
        return got[:-1] if self.drop_last and len(got) > 3 else got


class _Repeats(_CallsFrom):
    shift = -1


class _Skips(_CallsFrom):
    shift = 1


class _MissesLast(_CallsFrom):
    drop_last = True


@pytest.mark.parametrize(
    ("store", "check", "said"),
    [
        (_Repeats, conformance.check_calls_in_order, r"calls\(script, 1\) .* gave .*\[0, 1, 2\]"),
        (_Skips, conformance.check_calls_in_order, r"calls\(script, 1\) .* gave .*\[2\], not"),
        (_MissesLast, conformance.check_claims, r"positions \[0, 1, 2, 3\], not \[0, 1, 2, 3, 4\]"),
    ],
    ids=["repeats", "skips", "misses-last"],
)
async def test_a_wrong_read_of_calls_fails(
    store: type[SqliteStore], check: conformance.Check, said: str, tmp_path: Path
) -> None:
    """Caught before too, by a bare assert or an IndexError: now the message says which
    read gave which calls."""
    with pytest.raises(AssertionError, match=said):
        await check(lambda: store(tmp_path))


class _ListsEveryStatus(SqliteStore):
    async def scripts(self, status: str | None = None, limit: int = 1000) -> list[r.ScriptRecord]:
        return await super().scripts(None, limit)


class _KeysAcrossTenants(MemoryStore):
    async def script_by_key(self, tenant: str, key: str) -> r.ScriptRecord | None:
        with self._lock:
            found = [i for (_, k), i in self._keys.items() if k == key]
        return await self.get_script(found[0]) if found else None


async def test_a_listing_that_ignores_its_status_fails(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match=r"scripts\('paused'\) gave .* not the paused ones"):
        await conformance.check_listing(lambda: _ListsEveryStatus(tmp_path))


async def test_a_key_across_tenants_fails() -> None:
    store = _KeysAcrossTenants()
    with pytest.raises(AssertionError, match="a key names a script within its tenant"):
        await conformance.check_keys_per_tenant(lambda: store)


class _KeepsGivenRecord(MemoryStore):
    """Keeps the record a start was given, not a copy."""

    async def start(self, record: r.ScriptRecord, owner: str, ttl_ms: int) -> Started:
        started = await super().start(record, owner, ttl_ms)
        with self._lock:
            self._scripts[record.id].files = record.files
        return started


class _GivesOwnCalls(MemoryStore):
    """Gives out the calls it keeps, not copies."""

    async def calls(self, script_id: str, start: int = 0) -> list[r.CallEntry]:
        with self._lock:
            self._script(script_id)
            return self._calls[script_id][start:]


class _KeepsGivenResult(MemoryStore):
    """Keeps the result a settle was given, not a copy."""

    async def settle(self, lease: r.Lease, settlements: Sequence[r.Settlement]) -> bool:
        held = await super().settle(lease, settlements)
        with self._lock:
            for settlement in settlements:
                self._calls[lease.script_id][settlement.index].result = settlement.result
        return held


@pytest.mark.parametrize(
    ("store", "said"),
    [
        (_KeepsGivenRecord, "a change to a record given to or read from the store"),
        (_GivesOwnCalls, "a change to a call given to or read from the store"),
        (_KeepsGivenResult, "a change to a result settled or read"),
    ],
    ids=["record", "calls", "result"],
)
async def test_a_store_that_shares_its_objects_fails(store: type[MemoryStore], said: str) -> None:
    broken = store()
    with pytest.raises(AssertionError, match=said):
        await conformance.check_no_shared_objects(lambda: broken)
