"""The store conformance suite: what every :class:`~engine.log.LogStore` must do.

A host that writes its own store runs it the way this project's tests run it on the memory,
SQLite and PostgreSQL stores::

    from engine.log.conformance import CHECKS

    @pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
    async def test_my_store(check):
        log = new_empty_log()
        await check(lambda: MyStore(log))

Each check takes a factory, made afresh for each check, that returns a handle on one log
that was empty when the check began; a check that calls it twice gets two handles on that
log, as two hosts would (for a store that lives in one object, the same object twice). A
check raises ``AssertionError`` naming what the store got wrong. Checks use leases of a
minute for "still held" and of one millisecond, followed by a short sleep, for "expired":
no check depends on the store being fast. A store's times are the wall clock's (in Unix
milliseconds), and a check compares them with this host's: give a store that takes a clock
the real one.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from engine._errors import CallNotWaiting, ScriptNotFound
from engine.log import _records as r
from engine.log._store import LogStore

StoreFactory = Callable[[], LogStore]
Check = Callable[[StoreFactory], Awaitable[None]]

HELD_MS = 60_000  # a lease that does not expire during a check
EXPIRED_MS = 1  # a lease that has expired after EXPIRY_WAIT
EXPIRY_WAIT = 0.05
# How far a store's clock may be from this host's: the wall clock, on another machine (a
# database server's), is this close; another clock (monotonic, local time as UTC, seconds)
# is not.
CLOCK_SLACK_MS = 5 * 60_000

# Data that must come back exactly: unicode, big and small numbers, nesting, key order.
AWKWARD = {
    "text": 'żółć 🦀 \u2028 "quoted" \\ \n',
    "big": 2**62,
    "small": -(2**62),
    "float": 0.1,
    "nested": {"z": [1, [2, [3, {"a": None}]]], "a": True},
    "empty": {},
}


def _record(key: str | None = None, **fields: Any) -> r.ScriptRecord:
    values: dict[str, Any] = {
        "id": uuid.uuid4().hex,
        "code": "return 1;\n// żółć",
        "tenant": "acme",
        "now_ms": 1_767_225_600_000,
        "seed": 2**r.SEED_BITS - 1,
        "created_ms": 1_767_225_600_123,
        "key": key,
        "files": [{"id": "a.csv", "mime": "text/csv", "size": 3, "blob": "ab" * 32}],
        "tools": {"get_price": "sha256:" + "0" * 64},
    }
    values.update(fields)
    return r.ScriptRecord(**values)


def _call(script_id: str, index: int, name: str = "get_price", **fields: Any) -> r.CallEntry:
    return r.CallEntry(
        script_id=script_id,
        index=index,
        call_id=f"call_{script_id[:8]}_{index + 1}",
        name=name,
        arguments={"sku": f"A{index}", "opts": AWKWARD},
        argument_bytes=100 + index,
        **fields,
    )


async def _started(store: LogStore, owner: str = "host-a") -> tuple[r.ScriptRecord, r.Lease]:
    started = await store.start(_record(), owner, HELD_MS)
    assert started.created and started.lease is not None, f"a new script's start gave {started}"
    return started.record, started.lease


async def _with_calls(store: LogStore, n: int, state: str = r.APPROVED) -> tuple[str, r.Lease]:
    """A script with ``n`` calls moved to ``state`` (proposed, approved or running)."""
    record, lease = await _started(store)
    await store.add_calls(lease, [_call(record.id, i) for i in range(n)])
    if state != r.PROPOSED:
        await store.decide(lease, [r.Decision(i, r.APPROVED) for i in range(n)])
    if state == r.RUNNING:
        await store.claim(lease, list(range(n)))
    return record.id, lease


async def _expire(store: LogStore, lease: r.Lease, owner: str) -> r.Lease:
    """Let ``lease`` lapse (as a host that stalled would) and take the script as ``owner``."""
    await store.renew(lease, EXPIRED_MS)
    await asyncio.sleep(EXPIRY_WAIT)
    taken = await store.acquire(lease.script_id, owner, HELD_MS)
    assert taken is not None, "an expired lease must be free to take"
    assert taken.token > lease.token, "a takeover must give a larger token"
    return taken


async def _calls(store: LogStore, script_id: str, count: int, start: int = 0) -> list[r.CallEntry]:
    """The calls ``store.calls(script_id, start)`` gives, checked to be the script's calls
    from ``start`` to ``count - 1``: each once, none missing, in call order."""
    calls = await store.calls(script_id, start)
    got, want = [c.index for c in calls], list(range(start, count))
    assert got == want, (
        f"calls(script, {start}) of a script with {count} calls gave the calls at positions "
        f"{got}, not {want}: it must give every call from the position asked, each once, in "
        "call order"
    )
    return calls


async def _raises(kind: type[BaseException], what: str, action: Awaitable[Any]) -> None:
    try:
        await action
    except kind:
        return
    raise AssertionError(f"{what}: expected {kind.__name__}")


async def _close(store: LogStore) -> None:
    await store.aclose()


# ---- the checks ----


async def check_start_and_read(make: StoreFactory) -> None:
    """A started script reads back field for field; unknown ids are ScriptNotFound."""
    store = make()
    try:
        record = _record(key=None, language="javascript")
        started = await store.start(record, "host-a", HELD_MS)
        got = await store.get_script(record.id)
        for name in ("id", "code", "tenant", "now_ms", "seed", "created_ms", "files", "tools"):
            assert getattr(got, name) == getattr(record, name), f"{name} changed: {got}"
        assert got.status == r.ACTIVE and not got.held and got.steps == 0, got
        assert started.record.id == record.id
        assert await store.calls(record.id) == []
        await _raises(ScriptNotFound, "get_script of an unknown id", store.get_script("nope"))
        await _raises(ScriptNotFound, "calls of an unknown id", store.calls("nope"))
        await _raises(ValueError, "a second start of one id", store.start(record, "b", HELD_MS))
    finally:
        await _close(store)


async def check_idempotent_start(make: StoreFactory) -> None:
    """A start with a key already used continues that script; the lease goes to its holder."""
    store = make()
    try:
        key = f"toolu_{uuid.uuid4().hex}"
        first = await store.start(_record(key=key), "host-a", HELD_MS)
        again = await store.start(_record(key=key), "host-b", HELD_MS)
        assert not again.created and again.record.id == first.record.id, again
        assert again.lease is None, "host-b must not get a script host-a holds"
        mine = await store.start(_record(key=key), "host-a", HELD_MS)
        assert mine.lease is not None and first.lease is not None
        assert mine.lease.token == first.lease.token, "the holder keeps its token"
        assert len(await store.scripts()) == 1
        # Many hosts starting one key at once: one script, one of them owns it.
        key2 = f"toolu_{uuid.uuid4().hex}"
        results = await asyncio.gather(
            *(store.start(_record(key=key2), f"host-{i}", HELD_MS) for i in range(8))
        )
        assert len({s.record.id for s in results}) == 1, "one key, one script"
        assert sum(s.created for s in results) == 1
        assert sum(s.lease is not None for s in results) == 1, "one owner"
    finally:
        await _close(store)


async def check_keys_per_tenant(make: StoreFactory) -> None:
    """A key names a script within its tenant: another tenant's start with the same key adds
    a script of its own, and each tenant's starts with it are idempotent."""
    store = make()
    try:
        key = f"toolu_{uuid.uuid4().hex}"
        a = await store.start(_record(key=key, tenant="tenant-a"), "host-a", HELD_MS)
        b = await store.start(_record(key=key, tenant="tenant-b"), "host-b", HELD_MS)
        assert b.created, "another tenant's start with a key used must add its own script"
        assert b.record.id != a.record.id, "tenant-b's start got tenant-a's script"
        assert b.lease is not None and b.record.tenant == "tenant-b", b
        for tenant, first in (("tenant-a", a), ("tenant-b", b)):
            again = await store.start(_record(key=key, tenant=tenant), "host-c", HELD_MS)
            assert not again.created and again.record.id == first.record.id, again
            assert again.record.tenant == tenant and again.lease is None, again
            found = await store.script_by_key(tenant, key)
            assert found is not None and found.id == first.record.id, (
                f"script_by_key({tenant!r}, key) gave "
                f"{None if found is None else (found.id, found.tenant)}, not {tenant}'s script "
                f"{first.record.id}: a key names a script within its tenant"
            )
        assert await store.script_by_key("tenant-c", key) is None, "a key is the tenant's"
        assert await store.script_by_key("tenant-a", "toolu_none") is None
        assert len(await store.scripts()) == 2
        # Both tenants starting one key at once, from many hosts: one script each.
        key2 = f"toolu_{uuid.uuid4().hex}"
        results = await asyncio.gather(
            *(
                store.start(_record(key=key2, tenant=f"tenant-{'ab'[i % 2]}"), f"h{i}", HELD_MS)
                for i in range(8)
            )
        )
        for tenant in ("tenant-a", "tenant-b"):
            mine = [s for s in results if s.record.tenant == tenant]
            assert len(mine) == 4, f"{tenant}'s starts got another tenant's script: {results}"
            assert len({s.record.id for s in mine}) == 1, f"{tenant}: one key, one script"
            assert sum(s.created for s in mine) == 1 and sum(s.lease is not None for s in mine) == 1
    finally:
        await _close(store)


async def check_leases(make: StoreFactory) -> None:
    """Leases: one owner at a time; expiry frees it; every new owner gets a larger token."""
    store = make()
    try:
        record, lease = await _started(store)
        assert lease.token >= 1
        assert await store.acquire(record.id, "host-b", HELD_MS) is None
        same = await store.acquire(record.id, "host-a", HELD_MS)
        assert same is not None and same.token == lease.token, "the holder keeps its token"
        renewed = await store.renew(lease, HELD_MS)
        assert renewed.token == lease.token and renewed.owner == "host-a"
        taken = await _expire(store, lease, "host-b")
        await _raises(r.LeaseLost, "renew after a takeover", store.renew(lease, HELD_MS))
        await store.release(lease)  # a lost lease's release changes nothing
        assert await store.acquire(record.id, "host-c", HELD_MS) is None
        await store.release(taken)
        after = await store.acquire(record.id, "host-c", HELD_MS)
        assert after is not None and after.token > taken.token, "released, then a larger token"
        got = await store.get_script(record.id)
        assert got.lease is not None and got.lease.owner == "host-c"
        await _raises(ScriptNotFound, "acquire of an unknown id", store.acquire("x", "a", 1))
        # An owner known to be dead is taken over at once; naming anyone else changes nothing.
        assert await store.acquire(record.id, "host-d", HELD_MS, take_from="host-x") is None
        dead = await store.acquire(record.id, "host-d", HELD_MS, take_from="host-c")
        assert dead is not None and dead.token > after.token, "take_from takes a dead lease"
        # Many hosts at once: exactly one gets it.
        record2, lease2 = await _started(store)
        await store.release(lease2)
        got_leases = await asyncio.gather(
            *(store.acquire(record2.id, f"host-{i}", HELD_MS) for i in range(8))
        )
        assert sum(x is not None for x in got_leases) == 1, got_leases
    finally:
        await _close(store)


async def check_fencing(make: StoreFactory) -> None:
    """Once another host holds the script, every write under the old lease is refused and
    changes nothing."""
    store = make()
    try:
        script_id, old = await _with_calls(store, 3, r.PROPOSED)
        await store.decide(old, [r.Decision(1, r.APPROVED)])
        await store.decide(old, [r.Decision(2, r.APPROVED)])
        await store.claim(old, [2])
        await _expire(store, old, "host-b")
        before = (await store.get_script(script_id), await store.calls(script_id))
        writes: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("add_calls", lambda: store.add_calls(old, [_call(script_id, 3)])),
            ("decide", lambda: store.decide(old, [r.Decision(0, r.APPROVED)])),
            ("claim", lambda: store.claim(old, [1])),
            ("settle", lambda: store.settle(old, [r.Settlement(2, r.DONE, 1, 1)])),
            ("reopen", lambda: store.reopen(old, [2])),
            ("pause", lambda: store.pause(old)),
            ("end", lambda: store.end(old, r.FINISHED, {"text": "stale"})),
            ("renew", lambda: store.renew(old, HELD_MS)),
        ]
        for name, write in writes:
            await _raises(r.LeaseLost, f"{name} under a lease taken over", write())
        after = (await store.get_script(script_id), await store.calls(script_id))
        assert after[1] == before[1], "a refused write changed the calls"
        for name in ("status", "steps", "outcome", "total_compute_ms"):
            assert getattr(after[0], name) == getattr(before[0], name), f"{name} changed"
    finally:
        await _close(store)


async def check_calls_in_order(make: StoreFactory) -> None:
    """Calls append in order, in one group; reads can start at a position."""
    store = make()
    try:
        record, lease = await _started(store)
        await store.add_calls(lease, [_call(record.id, 0), _call(record.id, 1)])
        await _calls(store, record.id, 2)
        await _raises(
            r.CallConflict,
            "a group with a gap",
            store.add_calls(lease, [_call(record.id, 2), _call(record.id, 4)]),
        )
        assert len(await store.calls(record.id)) == 2, "a refused group added some calls"
        await _raises(
            r.CallConflict, "a repeated index", store.add_calls(lease, [_call(record.id, 1)])
        )
        await store.add_calls(lease, [_call(record.id, 2)])
        await store.add_calls(lease, [])
        calls = await _calls(store, record.id, 3)
        assert calls[0].arguments == _call(record.id, 0).arguments, "arguments changed"
        assert calls[0].argument_bytes == 100 and calls[0].state == r.PROPOSED, calls[0]
        for start in (1, 2, 3):  # an owner's incremental reads: the rest, once each
            await _calls(store, record.id, 3, start)
    finally:
        await _close(store)


async def check_decide(make: StoreFactory) -> None:
    """The worker's decisions move proposed calls only, all of a group or none."""
    store = make()
    try:
        script_id, lease = await _with_calls(store, 3, r.PROPOSED)
        await store.decide(
            lease,
            [
                r.Decision(0, r.AWAITING_APPROVAL, note="waiting for a person"),
                r.Decision(1, r.FAILED, error="refused by policy"),
            ],
        )
        calls = await _calls(store, script_id, 3)
        assert calls[0].state == r.AWAITING_APPROVAL, f"a decision did not move {calls[0]}"
        assert calls[0].note == "waiting for a person", f"a decision's note was lost: {calls[0]}"
        assert calls[1].state == r.FAILED, f"a decision did not move {calls[1]}"
        assert calls[1].error == "refused by policy", f"a decision's error was lost: {calls[1]}"
        await _raises(
            r.CallConflict,
            "a decision on a call already decided",
            store.decide(lease, [r.Decision(2, r.APPROVED), r.Decision(0, r.APPROVED)]),
        )
        assert (await _calls(store, script_id, 3, 2))[0].state == r.PROPOSED, "half a group applied"
        await _raises(ValueError, "a decision to run", store.decide(lease, [r.Decision(2, r.DONE)]))
        await _raises(
            r.CallConflict, "no such call", store.decide(lease, [r.Decision(7, r.APPROVED)])
        )
    finally:
        await _close(store)


async def check_claims(make: StoreFactory) -> None:
    """A call runs only after its claim: approved to running, once, under the lease."""
    store = make()
    try:
        script_id, lease = await _with_calls(store, 3, r.PROPOSED)
        await store.decide(lease, [r.Decision(0, r.APPROVED), r.Decision(1, r.APPROVED)])
        assert await store.claim(lease, [0, 1, 2, 9]) == [0, 1], "only approved calls move"
        assert await store.claim(lease, [0, 1]) == [], "a claimed call is not claimed again"
        # A receipt that need not last (every call it claims may run again) is the same claim.
        assert await store.claim(lease, [0, 1], lasting=False) == [], "claimed again"
        calls = await _calls(store, script_id, 3)
        for c in calls[:2]:
            assert c.state == r.RUNNING and c.owner == "host-a" and c.token == lease.token, c
            assert c.started_ms is not None, f"a claimed call has no start time: {c}"
        assert calls[2].state == r.PROPOSED, f"a call not approved was claimed: {calls[2]}"
        # Decided and claimed in one write: approved calls run, the rest are as decided.
        more = [_call(script_id, i) for i in (3, 4)]
        await store.add_calls(lease, more)
        got = await store.decide(
            lease,
            [
                r.Decision(2, r.APPROVED),
                r.Decision(3, r.AWAITING_CLIENT),
                r.Decision(4, r.APPROVED),
            ],
            claim=True,
        )
        assert got == [2, 4], got
        calls = await _calls(store, script_id, 5)
        states = [c.state for c in calls[2:]]
        assert states == [r.RUNNING, r.AWAITING_CLIENT, r.RUNNING], f"decided and claimed: {states}"
        assert calls[4].owner == "host-a" and calls[4].token == lease.token, calls[4]
        assert await store.decide(lease, []) == []
        # Added decided, and claimed in the same write: calls, decisions and receipts at once.
        decided = [
            _call(script_id, 5, state=r.APPROVED),
            _call(script_id, 6, state=r.FAILED, error="refused"),
            _call(script_id, 7, state=r.AWAITING_APPROVAL, note="ask"),
            _call(script_id, 8, state=r.APPROVED),
        ]
        got = await store.add_calls(lease, decided, claim=True)
        assert got == [5, 8], got
        calls = await _calls(store, script_id, 9, 5)
        assert [c.state for c in calls] == [r.RUNNING, r.FAILED, r.AWAITING_APPROVAL, r.RUNNING]
        assert calls[0].owner == "host-a" and calls[0].token == lease.token, calls[0]
        assert calls[0].started_ms is not None and calls[2].owner is None, calls
        assert (calls[1].error, calls[2].note) == ("refused", "ask"), calls
        assert await store.add_calls(lease, [_call(script_id, 9, state=r.APPROVED)]) == []
        assert (await _calls(store, script_id, 10, 9))[0].state == r.APPROVED, "claimed unasked"
        for bad in (
            _call(script_id, 10, state=r.RUNNING),
            _call(script_id, 10, state=r.APPROVED, owner="host-a", token=lease.token),
        ):
            await _raises(ValueError, f"a call added as {bad}", store.add_calls(lease, [bad]))
    finally:
        await _close(store)


async def check_no_claim_while_held(make: StoreFactory) -> None:
    """No call goes out while the script is held: a claim (alone or with the decisions)
    moves nothing, the decisions still stand, and once released the calls are claimed. A
    settle says whether the script is held."""
    store = make()
    try:
        script_id, lease = await _with_calls(store, 3, r.PROPOSED)
        await store.decide(lease, [r.Decision(0, r.APPROVED)])
        await store.set_held(script_id, True)
        assert await store.claim(lease, [0]) == [], "a held script's call was claimed"
        got = await store.decide(
            lease, [r.Decision(1, r.APPROVED), r.Decision(2, r.FAILED, error="no")], claim=True
        )
        assert got == [], f"a held script's decided call was claimed: {got}"
        calls = await _calls(store, script_id, 3)
        assert [c.state for c in calls] == [r.APPROVED, r.APPROVED, r.FAILED], calls
        added = await store.add_calls(lease, [_call(script_id, 3, state=r.APPROVED)], claim=True)
        assert added == [], f"a held script's added call was claimed: {added}"
        added_call = (await _calls(store, script_id, 4, 3))[0]
        assert added_call.state == r.APPROVED, f"a held script's added call is {added_call}"
        await store.set_held(script_id, False)
        assert await store.claim(lease, [0, 1, 3]) == [0, 1, 3], "released, the calls go out"
        # A hold that lands while calls run is told by the write of their results.
        assert await store.settle(lease, [r.Settlement(0, r.DONE, 1, 1)]) is False
        await store.set_held(script_id, True)
        held = await store.settle(lease, [r.Settlement(1, r.DONE, 2, 1)])
        assert held is True, f"settle of a held script's calls returned {held!r}, not True"
    finally:
        await _close(store)


async def check_settle(make: StoreFactory) -> None:
    """Running calls settle with their result or error, byte for byte, in one group."""
    store = make()
    try:
        script_id, lease = await _with_calls(store, 3, r.RUNNING)
        await store.settle(
            lease,
            [
                r.Settlement(0, r.DONE, result=AWKWARD, result_bytes=321),
                r.Settlement(1, r.FAILED, error="tools.get_price: out of stock"),
            ],
        )
        calls = await _calls(store, script_id, 3)
        assert calls[0].state == r.DONE and calls[0].result == AWKWARD, calls[0]
        assert list(calls[0].result) == list(AWKWARD), "key order changed"
        assert calls[0].result_bytes == 321, f"a settle's result size was lost: {calls[0]}"
        assert calls[0].ended_ms is not None, f"a settled call has no end time: {calls[0]}"
        assert calls[1].state == r.FAILED, f"a settle did not move {calls[1]}"
        error = calls[1].error
        assert error == "tools.get_price: out of stock", f"a settle's error was lost: {calls[1]}"
        await _raises(
            r.CallConflict,
            "settling a call twice",
            store.settle(lease, [r.Settlement(2, r.DONE, 1, 1), r.Settlement(0, r.DONE, 2, 1)]),
        )
        assert (await _calls(store, script_id, 3, 2))[0].state == r.RUNNING, "half a group applied"
        await _raises(
            ValueError, "settling as approved", store.settle(lease, [r.Settlement(2, r.APPROVED)])
        )
        # A result over the budget keeps its size only.
        await store.settle(lease, [r.Settlement(2, r.DONE, result=None, result_bytes=10**9)])
        last = (await _calls(store, script_id, 3, 2))[0]
        assert last.result is None and last.result_bytes == 10**9, f"a result over budget: {last}"
    finally:
        await _close(store)


async def check_takeover_of_running_calls(make: StoreFactory) -> None:
    """A new owner sees its predecessor's running calls by their older token, and may settle
    them (interrupted) or reopen them (read-only tools); its own are not reopened."""
    store = make()
    try:
        script_id, old = await _with_calls(store, 2, r.RUNNING)
        new = await _expire(store, old, "host-b")
        calls = await _calls(store, script_id, 2)
        assert all(c.token is not None and c.token < new.token for c in calls), calls
        await store.settle(new, [r.Settlement(0, r.FAILED, error="interrupted")])
        await store.reopen(new, [1])
        calls = await _calls(store, script_id, 2)
        assert calls[0].state == r.FAILED and calls[1].state == r.APPROVED, calls
        assert calls[1].owner is None and calls[1].token is None, f"reopened: {calls[1]}"
        assert await store.claim(new, [1]) == [1]
        await _raises(r.CallConflict, "reopening its own running call", store.reopen(new, [1]))
        await _raises(r.CallConflict, "reopening a settled call", store.reopen(new, [0]))
        assert old.token < new.token
    finally:
        await _close(store)


async def check_step_pause_end(make: StoreFactory) -> None:
    """The owner records usage, pauses and ends the script; a bad status is refused."""
    store = make()
    try:
        record, lease = await _started(store)
        await store.add_calls(lease, [], usage=r.StepUsage(3, 12.5, 4096))
        await store.pause(lease)
        got = await store.get_script(record.id)
        assert (got.steps, got.total_compute_ms, got.total_file_bytes) == (3, 12.5, 4096)
        assert got.status == r.PAUSED, f"a paused script is {got.status}"
        await _raises(ValueError, "ending as paused", store.end(lease, r.PAUSED, {}))
        outcome = {"status": "finished", "text": "Script finished.", "value": AWKWARD}
        # An outcome that need not last (no call had effects) is the same end.
        await store.end(lease, r.FINISHED, outcome, usage=r.StepUsage(4, 20.0, 8192), lasting=False)
        got = await store.get_script(record.id)
        assert got.status == r.FINISHED and got.outcome == outcome, f"ended: {got}"
        usage = (got.steps, got.total_compute_ms, got.total_file_bytes)
        assert usage == (4, 20.0, 8192), "the end records the usage"
        after = await store.acquire(record.id, "host-b", HELD_MS)
        assert after is not None and after.token > lease.token, "ending gives the lease up"
        got = await store.get_script(record.id)
        assert got.status == r.FINISHED, "taking an ended script's lease leaves it ended"
        # A paused script is active again once its owner writes its calls (driven on), not
        # when its lease is merely taken (a host that leaves it writes nothing).
        other, held = await _started(store)
        await store.pause(held)
        await store.release(held)
        taken = await store.acquire(other.id, "host-b", HELD_MS)
        assert taken is not None
        assert (await store.get_script(other.id)).status == r.PAUSED, "taking a lease drives"
        await store.claim(taken, [])
        got = await store.get_script(other.id)
        assert got.status == r.ACTIVE, f"a paused script driven on is {got.status}, not active"
        # So too by a step's calls written with what the step used.
        await store.pause(taken)
        await store.add_calls(taken, [], usage=r.StepUsage(3, 1.5, 0))
        got = await store.get_script(other.id)
        assert (got.status, got.steps) == (r.ACTIVE, 3), "a step's calls drive a paused script"
        finished = [s.id for s in await store.scripts(r.FINISHED)]
        assert finished == [record.id], f"scripts('finished') gave {finished}, not [{record.id}]"
        paused = [(s.id, s.status) for s in await store.scripts(r.PAUSED)]
        assert paused == [], f"scripts('paused') gave {paused}, and none is paused"
        # An end with no usage of its own keeps what the steps recorded.
        other, other_lease = await _started(store)
        await store.add_calls(other_lease, [], usage=r.StepUsage(2, 7.5, 100))
        await store.end(other_lease, r.SCRIPT_FAILED, {"status": "failed"})
        got = await store.get_script(other.id)
        assert (got.steps, got.total_compute_ms, got.total_file_bytes) == (2, 7.5, 100)
    finally:
        await _close(store)


async def check_answers(make: StoreFactory) -> None:
    """Answers move a waiting call once, whoever delivers them and however often."""
    store = make()
    try:
        script_id, lease = await _with_calls(store, 3, r.PROPOSED)
        await store.decide(
            lease,
            [
                r.Decision(0, r.AWAITING_APPROVAL, note="waiting for a person"),
                r.Decision(1, r.AWAITING_CLIENT, note="waiting for the client"),
                r.Decision(2, r.AWAITING_APPROVAL),
            ],
        )
        call_ids = [c.call_id for c in await _calls(store, script_id, 3)]
        # An approval delivered eight times at once takes effect once.
        results = await asyncio.gather(
            *(
                store.answer(script_id, call_ids[0], r.AWAITING_APPROVAL, r.APPROVED, note="ok")
                for _ in range(8)
            ),
            return_exceptions=True,
        )
        done = [x for x in results if isinstance(x, r.CallEntry)]
        assert len(done) == 1 and done[0].state == r.APPROVED, results
        assert all(isinstance(x, CallNotWaiting) for x in results if x is not done[0])
        entry = await store.answer(
            script_id, call_ids[1], r.AWAITING_CLIENT, r.DONE, result=AWKWARD, result_bytes=55
        )
        assert entry.state == r.DONE and entry.result == AWKWARD, f"answered: {entry}"
        assert entry.result_bytes == 55, f"an answer's result size was lost: {entry}"
        await store.answer(script_id, call_ids[2], r.AWAITING_APPROVAL, r.FAILED, error="no")
        calls = await _calls(store, script_id, 3)
        assert calls[2].state == r.FAILED, f"a refusal did not move {calls[2]}"
        assert calls[2].error == "no", f"a refusal's error was lost: {calls[2]}"
        await _raises(
            CallNotWaiting,
            "answering an answered call",
            store.answer(script_id, call_ids[1], r.AWAITING_CLIENT, r.DONE, result=1),
        )
        await _raises(
            CallNotWaiting,
            "an unknown call",
            store.answer(script_id, "call_nope", r.AWAITING_APPROVAL, r.APPROVED),
        )
        await _raises(
            ScriptNotFound,
            "an unknown script",
            store.answer("nope", call_ids[0], r.AWAITING_APPROVAL, r.APPROVED),
        )
        await _raises(
            ValueError,
            "an approval that runs the call",
            store.answer(script_id, call_ids[0], r.AWAITING_APPROVAL, r.RUNNING),
        )
    finally:
        await _close(store)


async def check_ready_queue(make: StoreFactory) -> None:
    """A paused script is ready once nothing awaits an answer; an orphaned active script is
    ready; a held one is not; hosts asking at once never get the same script; scripts a host
    says to skip are passed over."""
    store = make()
    try:
        assert await store.claim_ready("host-x", HELD_MS) is None, "an empty log has no work"
        script_id, lease = await _with_calls(store, 1, r.PROPOSED)
        await store.decide(lease, [r.Decision(0, r.AWAITING_APPROVAL)])
        await store.pause(lease)
        await store.release(lease)
        assert await store.claim_ready("host-x", HELD_MS) is None, "a call still awaits"
        call_id = (await _calls(store, script_id, 1))[0].call_id
        await store.answer(script_id, call_id, r.AWAITING_APPROVAL, r.APPROVED)
        await store.set_held(script_id, True)
        assert await store.claim_ready("host-x", HELD_MS) is None, "a held script is not ready"
        await store.set_held(script_id, False)
        taken = await store.claim_ready("host-x", HELD_MS)
        assert taken is not None and taken.script_id == script_id, f"claim_ready gave {taken}"
        assert taken.token > lease.token, f"claim_ready gave a token not larger: {taken}"
        assert await store.claim_ready("host-y", HELD_MS) is None, "one script, one taker"
        # A host died while driving: its script is ready once its lease expires.
        orphan, orphan_lease = await _started(store, "host-dead")
        assert await store.claim_ready("host-y", HELD_MS) is None
        await store.release(orphan_lease)
        rescued = await store.claim_ready("host-y", HELD_MS)
        assert rescued is not None, "a script whose owner's lease is over is ready"
        assert rescued.script_id == orphan.id, f"claim_ready took {rescued}, not the orphan"
        # Many ready scripts, many hosts at once: no script twice.
        ids = set()
        for _ in range(6):
            sid, lease_i = await _with_calls(store, 0, r.PROPOSED)
            await store.pause(lease_i)
            await store.release(lease_i)
            ids.add(sid)
        passed = sorted(ids)[:2]
        got = await asyncio.gather(
            *(store.claim_ready(f"h{i}", HELD_MS, passed) for i in range(10))
        )
        taken_ids = [g.script_id for g in got if g is not None]
        assert sorted(taken_ids) == sorted(ids - set(passed)), (taken_ids, ids, passed)
        for script_id in passed:  # what one host passes over, another takes
            skipped = await store.claim_ready("h-other", HELD_MS, [script_id])
            assert skipped is not None and skipped.script_id in passed, "skip one, take another"
            assert skipped.script_id != script_id, "a script passed over is not taken"
            taken_ids.append(skipped.script_id)
        assert sorted(taken_ids) == sorted(ids), (taken_ids, ids)
        # A finished script is never work.
        await store.end(taken, r.FINISHED, {})
        await store.release(taken)
        assert await store.claim_ready("host-z", HELD_MS) is None
    finally:
        await _close(store)


async def check_listing(make: StoreFactory) -> None:
    """Scripts list oldest first, filtered by status, at most ``limit``."""
    store = make()
    try:
        made = []
        for i in range(5):
            started = await store.start(_record(created_ms=1000 + i), "host-a", HELD_MS)
            made.append(started.record.id)
            if i % 2 and started.lease is not None:
                await store.pause(started.lease)
        listed = [s.id for s in await store.scripts()]
        assert listed == made, f"scripts() gave {listed}, not {made}: oldest first"
        paused = [s.id for s in await store.scripts(r.PAUSED)]
        want = [made[1], made[3]]
        assert paused == want, f"scripts('paused') gave {paused}, not the paused ones {want}"
        first = [s.id for s in await store.scripts(limit=2)]
        assert first == made[:2], f"scripts(limit=2) gave {first}, not the oldest two {made[:2]}"
    finally:
        await _close(store)


async def check_notes_kept(make: StoreFactory) -> None:
    """A call's note (why it waited, who answered it) stays with it through its answer, its
    claim and its settle: what a late answer is told is made from it."""
    store = make()
    try:
        script_id, lease = await _with_calls(store, 2, r.PROPOSED)
        waiting = "waiting for a person"
        await store.decide(
            lease, [r.Decision(i, r.AWAITING_APPROVAL, note=waiting) for i in range(2)]
        )
        ids = [c.call_id for c in await _calls(store, script_id, 2)]
        approved = await store.answer(
            script_id, ids[0], r.AWAITING_APPROVAL, r.APPROVED, note=r.APPROVED_NOTE
        )
        assert approved.note == r.APPROVED_NOTE, f"an approval's note was lost: {approved}"
        refused = await store.answer(
            script_id, ids[1], r.AWAITING_APPROVAL, r.FAILED, error="no", note=r.REFUSED_NOTE
        )
        assert refused.note == r.REFUSED_NOTE, f"a refusal's note was lost: {refused}"
        calls = await _calls(store, script_id, 2)
        notes = [c.note for c in calls]
        assert notes == [r.APPROVED_NOTE, r.REFUSED_NOTE], f"the answers' notes read {notes}"
        assert await store.claim(lease, [0]) == [0], "an approved call was not claimed"
        claimed = (await _calls(store, script_id, 2))[0]
        assert claimed.note == r.APPROVED_NOTE, f"a claim dropped the call's note: {claimed}"
        await store.settle(lease, [r.Settlement(0, r.FAILED, error="tools.t: timed out")])
        settled = (await _calls(store, script_id, 2))[0]
        assert settled.note == r.APPROVED_NOTE, f"a settle dropped the call's note: {settled}"
        assert settled.error == "tools.t: timed out", f"a settle's error was lost: {settled}"
    finally:
        await _close(store)


def _wall_ms() -> int:
    return int(time.time() * 1000)


def _on_wall_clock(what: str, ms: int | None, before: int, after: int) -> None:
    assert ms is not None and before - CLOCK_SLACK_MS <= ms <= after + CLOCK_SLACK_MS, (
        f"{what} is {ms}, but this host's wall clock read {before} to {after} (Unix ms): a "
        "store's times are the wall clock's, in milliseconds since the epoch (time.time(), "
        "PostgreSQL's clock_timestamp()), not a monotonic clock's, local time's or seconds"
    )


async def check_wall_clock(make: StoreFactory) -> None:
    """The store's times are the wall clock's, in Unix milliseconds: a lease's end, a
    call's start and end. People read them, and a lease's end is told to other hosts."""
    store = make()
    try:
        before = _wall_ms()
        script_id, lease = await _with_calls(store, 2, r.PROPOSED)
        decided = [r.Decision(0, r.APPROVED), r.Decision(1, r.AWAITING_CLIENT)]
        assert await store.decide(lease, decided, claim=True) == [0], "call 0 was not claimed"
        await store.settle(lease, [r.Settlement(0, r.DONE, result=1, result_bytes=1)])
        call_id = (await _calls(store, script_id, 2))[1].call_id
        await store.answer(script_id, call_id, r.AWAITING_CLIENT, r.DONE, result=2, result_bytes=1)
        renewed = await store.renew(lease, HELD_MS)
        held = (await store.get_script(script_id)).lease
        after = _wall_ms()
        _on_wall_clock(
            "a new lease's end, less its length", lease.expires_ms - HELD_MS, before, after
        )
        _on_wall_clock(
            "a renewed lease's end, less its length", renewed.expires_ms - HELD_MS, before, after
        )
        assert held is not None, "a held script's record has no lease"
        _on_wall_clock(
            "the script's lease's end, less its length", held.expires_ms - HELD_MS, before, after
        )
        calls = await _calls(store, script_id, 2)
        _on_wall_clock("a claimed call's start", calls[0].started_ms, before, after)
        _on_wall_clock("a settled call's end", calls[0].ended_ms, before, after)
        _on_wall_clock("an answered call's end", calls[1].ended_ms, before, after)
    finally:
        await _close(store)


async def check_no_shared_objects(make: StoreFactory) -> None:
    """What a store takes and gives shares no object with its caller, as a database's rows
    do not: a caller that changes a record, call, result or read afterwards (the engine
    changes the entries it holds) changes nothing in the log."""
    store = make()
    try:
        record = _record()
        started = await store.start(record, "host-a", HELD_MS)
        assert started.lease is not None, f"a new script's start gave {started}"
        lease = started.lease
        entries = [
            _call(record.id, 0, state=r.APPROVED),
            _call(record.id, 1, state=r.AWAITING_CLIENT),
        ]
        assert await store.add_calls(lease, entries, claim=True) == [0], "call 0 not claimed"
        result: dict[str, Any] = {"rows": [1, 2], "nested": {"a": 1}}
        await store.settle(lease, [r.Settlement(0, r.DONE, result=result, result_bytes=9)])
        answer = {"client": ["said"]}
        call_id = entries[1].call_id
        await store.answer(record.id, call_id, r.AWAITING_CLIENT, r.DONE, result=answer)
        # The caller changes everything it gave.
        record.files[0]["mime"] = "changed"
        record.tools["get_price"] = "changed"
        entries[0].arguments["sku"] = "changed"
        result["rows"].append(3)
        result["nested"]["a"] = 2
        answer["client"].append("changed")
        # ... and everything it was given.
        read = await store.get_script(record.id)
        read.files[0]["mime"] = "changed"
        read.tools["get_price"] = "changed"
        read.status = r.FAILED
        calls = await _calls(store, record.id, 2)
        calls[0].arguments["sku"] = "changed"
        calls[0].result["rows"].append(4)
        calls[0].state = r.FAILED
        calls[1].result["client"].append("changed")
        got = await store.get_script(record.id)
        assert got.files == _record().files and got.tools == _record().tools, (
            f"a change to a record given to or read from the store changed the log: {got}"
        )
        assert got.status == r.ACTIVE, f"a change to a record read changed the log: {got}"
        calls = await _calls(store, record.id, 2)
        assert calls[0].arguments == _call(record.id, 0).arguments, (
            f"a change to a call given to or read from the store changed the log: {calls[0]}"
        )
        assert calls[0].state == r.DONE, f"a change to a call read changed the log: {calls[0]}"
        assert calls[0].result == {"rows": [1, 2], "nested": {"a": 1}}, (
            f"a change to a result settled or read changed the log: {calls[0].result}"
        )
        assert calls[1].result == {"client": ["said"]}, (
            f"a change to an answer's result given or read changed the log: {calls[1].result}"
        )
    finally:
        await _close(store)


async def check_separate_handles(make: StoreFactory) -> None:
    """Two store objects on one log (two hosts) see each other's writes and exclude each
    other."""
    a, b = make(), make()
    try:
        record, lease = await _started(a)
        got = await b.get_script(record.id)
        assert got.id == record.id
        assert await b.acquire(record.id, "host-b", HELD_MS) is None
        await a.add_calls(lease, [_call(record.id, 0)])
        await _calls(b, record.id, 1)  # another handle's write is seen
    finally:
        await _close(a)
        await _close(b)


CHECKS: list[Check] = [
    check_start_and_read,
    check_idempotent_start,
    check_keys_per_tenant,
    check_leases,
    check_fencing,
    check_calls_in_order,
    check_decide,
    check_claims,
    check_no_claim_while_held,
    check_settle,
    check_takeover_of_running_calls,
    check_step_pause_end,
    check_answers,
    check_ready_queue,
    check_listing,
    check_notes_kept,
    check_wall_clock,
    check_no_shared_objects,
    check_separate_handles,
]


async def check_store(make: StoreFactory) -> None:
    """Run every check against stores from ``make``."""
    for check in CHECKS:
        await check(make)
