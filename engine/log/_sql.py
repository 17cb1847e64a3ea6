"""The SQL stores' transactions, written once for every database.

Each transaction is a generator: it yields a :class:`Q` (a statement and what to fetch), is
sent back the answer, and returns its value. A driver runs it inside one transaction of its
database: SQLite's on the event loop (or its store thread), PostgreSQL's on an async
connection. So the rules of the log (fencing, claims, conditional answers) are one piece of
code whatever the database, and the store conformance suite checks that piece on each.

Locking: every transaction that writes a script's calls or lease first reads the script's
row with ``lock="update"`` (``FOR UPDATE`` on PostgreSQL; SQLite's ``BEGIN IMMEDIATE``
already serializes writers), so writes to one script are serialized and always take the
script's row before its calls' rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from engine._errors import CallNotWaiting, ScriptNotFound
from engine.log import _records as r
from engine.log import _rows as rows
from engine.log import _rules as rules
from engine.log._schema import CALL_COLUMNS, SCRIPT_COLUMNS
from engine.log._store import Started

Fetch = Literal["one", "all", "count", "none", "many"]
Lock = Literal["update", "skip"] | None


@dataclass(frozen=True)
class Q:
    """One statement: ``?`` placeholders; ``fetch`` says what the driver sends back (a row or
    ``None``, all rows, the affected row count, nothing; ``many`` runs it once per row of
    ``params``); ``lock`` asks PostgreSQL to lock the rows read (``skip``: skip locked ones)."""

    sql: str
    params: Sequence[Any] = ()
    fetch: Fetch = "none"
    lock: Lock = None


Tx = Generator[Q, Any, Any]

_SCRIPT_VALUES = ", ".join("?" * len(SCRIPT_COLUMNS.split(",")))
_CALL_VALUES = ", ".join("?" * len(CALL_COLUMNS.split(",")))

# A script waits for no one: paused with no call awaiting a person or the client, or active
# under a lease that expired (its host died). Oldest change first.
_READY = (
    f"SELECT {SCRIPT_COLUMNS} FROM scripts s WHERE held = 0 AND lease_expires_ms <= ? AND ("
    " (status = 'paused' AND NOT EXISTS (SELECT 1 FROM calls c WHERE c.script_id = s.id"
    " AND c.state IN ('awaiting_approval', 'awaiting_client')))"
    " OR (status = 'active' AND lease_token > 0)){skip}"
    " ORDER BY updated_ms, id LIMIT 1"
)


# ---- reading ----


def get_script(script_id: str, lock: Lock = None) -> Tx:
    row = yield Q(f"SELECT {SCRIPT_COLUMNS} FROM scripts WHERE id = ?", (script_id,), "one", lock)
    if row is None:
        raise ScriptNotFound.of(script_id)
    return rows.script_from_row(row)


def script_by_key(tenant: str, key: str) -> Tx:
    row = yield Q("SELECT id FROM scripts WHERE tenant = ? AND key = ?", (tenant, key), "one")
    return None if row is None else (yield from get_script(row[0]))


def calls(script_id: str, start: int) -> Tx:
    yield from get_script(script_id)
    found = yield Q(
        f"SELECT {CALL_COLUMNS} FROM calls WHERE script_id = ? AND idx >= ? ORDER BY idx",
        (script_id, start),
        "all",
    )
    entries = [rows.call_from_row(row) for row in found]
    for expected, entry in enumerate(entries, start):
        if entry.index != expected:  # the engine reads a call at the index it has
            raise rows.BadRow(f"the calls of script {script_id!r} skip index {expected}")
    return entries


def scripts(status: str | None, limit: int) -> Tx:
    sql = f"SELECT {SCRIPT_COLUMNS} FROM scripts"
    params: tuple[Any, ...] = ()
    if status is not None:
        sql, params = sql + " WHERE status = ?", (status,)
    found = yield Q(sql + " ORDER BY created_ms, id LIMIT ?", (*params, limit), "all")
    return [rows.script_from_row(row) for row in found]


# ---- starting and owning ----


def start(record: r.ScriptRecord, owner: str, ttl_ms: int, now: int) -> Tx:
    # A new script is written with its first lease: one statement, nothing read back.
    token = rules.next_token(None, owner, now, None)
    assert token is not None
    lease = r.Lease(record.id, owner, token, now + ttl_ms)
    added = yield Q(
        f"INSERT INTO scripts ({SCRIPT_COLUMNS}) VALUES ({_SCRIPT_VALUES}) ON CONFLICT DO NOTHING",
        rows.script_row(record, updated_ms=now, lease=lease),
        "count",
    )
    if added == 1:
        return Started(dataclasses.replace(record, updated_ms=now, lease=lease), lease, True)
    # The tenant's key (or, by a host's mistake, the id) is taken: a start of a script already
    # started.
    row = None
    if record.key is not None:
        row = yield Q(
            "SELECT id FROM scripts WHERE tenant = ? AND key = ?",
            (record.tenant, record.key),
            "one",
        )
    if row is None:
        raise ValueError(f"script {record.id!r} is already in the log")
    lease = yield from acquire(row[0], owner, ttl_ms, now, None)
    return Started((yield from get_script(row[0])), lease, created=False)


def acquire(script_id: str, owner: str, ttl_ms: int, now: int, take_from: str | None) -> Tx:
    record = yield from get_script(script_id, "update")
    return (yield from _take(record, owner, ttl_ms, now, take_from))


def _take(
    record: r.ScriptRecord, owner: str, ttl_ms: int, now: int, take_from: str | None = None
) -> Tx:
    token = rules.next_token(record.lease, owner, now, take_from)
    if token is None:
        return None
    yield Q(
        "UPDATE scripts SET lease_owner = ?, lease_token = ?, lease_expires_ms = ? WHERE id = ?",
        (owner, token, now + ttl_ms, record.id),
    )
    return r.Lease(record.id, owner, token, now + ttl_ms)


def renew(lease: r.Lease, ttl_ms: int, now: int) -> Tx:
    yield from _fenced_update(lease, "lease_expires_ms = ?", (now + ttl_ms,))
    return r.Lease(lease.script_id, lease.owner, lease.token, now + ttl_ms)


def release(lease: r.Lease) -> Tx:
    yield Q(
        "UPDATE scripts SET lease_expires_ms = 0 WHERE id = ? AND lease_token = ?",
        (lease.script_id, lease.token),
    )


def claim_ready(owner: str, ttl_ms: int, now: int, skip: Sequence[str] = ()) -> Tx:
    passed = f" AND id NOT IN ({', '.join('?' * len(skip))})" if skip else ""
    row = yield Q(_READY.format(skip=passed), (now, *skip), "one", "skip")
    if row is None:
        return None
    return (yield from _take(rows.script_from_row(row), owner, ttl_ms, now))


# ---- owner writes ----


def _fence(lease: r.Lease) -> Tx:
    """Lock the script's row and refuse the write unless ``lease`` still holds it; returns
    whether the script is held. Reads only the columns that say so (every owner write makes
    this read: the whole row, with its code and files, costs more than the write)."""
    row = yield Q(
        "SELECT held, lease_owner, lease_token, lease_expires_ms FROM scripts WHERE id = ?",
        (lease.script_id,),
        "one",
        "update",
    )
    if row is None:
        raise ScriptNotFound.of(lease.script_id)
    held, owner, token, expires = row
    if owner is None or token != lease.token:
        now = r.Lease(lease.script_id, owner, token, expires) if owner is not None else None
        raise r.LeaseLost(rules.lost(lease, now))
    return bool(held)


def _fence_driven(lease: r.Lease, now: int, usage: r.StepUsage | None = None) -> Tx:
    """:func:`_fence`, and what an owner's write of its calls changes in the script: with
    ``usage``, its step counts; a paused script is driven on (active again, ``updated_ms``
    set to ``now``). Returns whether the script is held.

    Only what changes is written. Most calls' writes find the script active, and a row
    written is a page of the log to write, with one more for each index on a column set
    (``scripts_updated``, on status and ``updated_ms``): settling a call only reads it."""
    if usage is None:
        q = Q(
            "SELECT held, status FROM scripts" + _HELD_BY,
            (lease.script_id, lease.token),
            "one",
            "update",
        )
    else:
        q = Q(
            "UPDATE scripts SET steps = ?, total_compute_ms = ?, total_file_bytes = ?"
            + _HELD_BY
            + " RETURNING held, status",
            (
                usage.steps,
                usage.total_compute_ms,
                usage.total_file_bytes,
                lease.script_id,
                lease.token,
            ),
            "one",
        )
    held, status = yield from _fenced_row(lease, q)
    if status == r.PAUSED:
        # `scripts` listed it paused while its approved call ran: its owner's write of its
        # calls drives it on, and its next pause says paused again. (Taking its lease alone
        # does not: a host that takes it and leaves it, lacking a tool, writes nothing.)
        yield Q(
            "UPDATE scripts SET status = ?, updated_ms = ? WHERE id = ?",
            (r.ACTIVE, now, lease.script_id),
        )
    return bool(held)


def _fenced_update(lease: r.Lease, sets: str, params: Sequence[Any]) -> Tx:
    """``UPDATE scripts SET {sets}`` (its ``?`` given ``params``) if ``lease`` still holds the
    script: :func:`_fence` and the write in one statement, which locks the row as the
    fence's read does (a statement fewer). Where the lease no longer holds, nothing is
    written and the fence's read says why. Returns whether the script is held."""
    (held,) = yield from _fenced_row(
        lease,
        Q(
            f"UPDATE scripts SET {sets}" + _HELD_BY + " RETURNING held",
            (*params, lease.script_id, lease.token),
            "one",
        ),
    )
    return bool(held)


# Where a statement of the owner's meets the script's row only while its lease holds it (the
# script's id and the lease's token, its last parameters).
_HELD_BY = " WHERE id = ? AND lease_owner IS NOT NULL AND lease_token = ?"


def _fenced_row(lease: r.Lease, q: Q) -> Tx:
    """The row ``q`` (a statement ending in :data:`_HELD_BY`, and its ``RETURNING``) gives;
    where it gives none, the fence's read says why (no such script, or the lease was lost)."""
    row = yield q
    if row is None:
        yield from _fence(lease)  # raises
        raise AssertionError("the fence let through a write the lease did not")
    return row


def _call(script_id: str, index: int, states: tuple[str, ...]) -> Tx:
    row = yield Q(
        f"SELECT {CALL_COLUMNS} FROM calls WHERE script_id = ? AND idx = ?",
        (script_id, index),
        "one",
        "update",
    )
    if row is None:
        raise r.CallConflict(f"script {script_id} has no call at position {index}")
    entry = rows.call_from_row(row)
    if entry.state not in states:
        raise r.CallConflict(rules.wrong_state(script_id, entry.call_id, entry.state, states))
    return entry


def _states(script_id: str, indexes: Sequence[int], states: tuple[str, ...] | None) -> Tx:
    """The state of each call at ``indexes`` (locked), in one read of the range they span and
    only the columns the check needs; with ``states``, :class:`CallConflict` unless each call
    is there and in one of them."""
    if not indexes:
        return {}
    found = yield Q(
        "SELECT idx, call_id, state FROM calls WHERE script_id = ? AND idx >= ? AND idx <= ?",
        (script_id, min(indexes), max(indexes)),
        "all",
        "update",
    )
    by_index: dict[int, str] = {}
    names: dict[int, str] = {}
    for index, call_id, state in found:
        by_index[index], names[index] = state, call_id
    if states is not None:
        for index in indexes:
            if index not in by_index:
                raise r.CallConflict(f"script {script_id} has no call at position {index}")
            if by_index[index] not in states:
                raise r.CallConflict(
                    rules.wrong_state(script_id, names[index], by_index[index], states)
                )
    return by_index


def add_calls(
    lease: r.Lease,
    entries: Sequence[r.CallEntry],
    usage: r.StepUsage | None,
    claim: bool,
    now: int,
) -> Tx:
    held = yield from _fence_driven(lease, now, usage)
    # The calls' indexes run from 0 without a gap: the next is one past the last (an index
    # lookup, where a count reads every call of the script).
    (count,) = yield Q(
        "SELECT COALESCE(MAX(idx) + 1, 0) FROM calls WHERE script_id = ?", (lease.script_id,), "one"
    )
    for i, entry in enumerate(entries):
        if entry.script_id != lease.script_id or entry.index != count + i:
            raise r.CallConflict(rules.out_of_order(entry, count + i))
    # A held script's calls are added but not claimed: no call goes out while it is held.
    claimed = [e.index for e in entries if claim and not held and e.state == r.APPROVED]
    if entries:
        running = set(claimed)
        yield Q(
            f"INSERT INTO calls ({CALL_COLUMNS}) VALUES ({_CALL_VALUES})",
            [
                rows.call_row(e)
                if e.index not in running
                else rows.call_row(e, claim=(lease.owner, lease.token, now))
                for e in entries
            ],
            "many",
        )
    return claimed


def decide(lease: r.Lease, decisions: Sequence[r.Decision], claim: bool, now: int) -> Tx:
    held = yield from _fence_driven(lease, now)
    yield from _states(lease.script_id, [d.index for d in decisions], (r.PROPOSED,))
    # A held script's calls are decided but not claimed: no call goes out while it is held.
    claiming = claim and not held
    claimed = [d for d in decisions if claiming and d.state == r.APPROVED]
    decided = [d for d in decisions if not (claiming and d.state == r.APPROVED)]
    if claimed:
        yield Q(
            "UPDATE calls SET state = ?, note = ?, error = ?, owner = ?, token = ?,"
            " started_ms = ? WHERE script_id = ? AND idx = ?",
            [
                (
                    r.RUNNING,
                    d.note,
                    d.error,
                    lease.owner,
                    lease.token,
                    now,
                    lease.script_id,
                    d.index,
                )
                for d in claimed
            ],
            "many",
        )
    if decided:
        yield Q(
            "UPDATE calls SET state = ?, note = ?, error = ? WHERE script_id = ? AND idx = ?",
            [(d.state, d.note, d.error, lease.script_id, d.index) for d in decided],
            "many",
        )
    return [d.index for d in claimed]


def claim(lease: r.Lease, indexes: Sequence[int], now: int) -> Tx:
    held = yield from _fence_driven(lease, now)
    claimed: list[int] = []
    if not held:  # no call goes out while the script is held
        states = yield from _states(lease.script_id, indexes, None)
        claimed = [i for i in dict.fromkeys(indexes) if states.get(i) == r.APPROVED]
    if claimed:
        yield Q(
            "UPDATE calls SET state = ?, owner = ?, token = ?, started_ms = ?"
            " WHERE script_id = ? AND idx = ?",
            [(r.RUNNING, lease.owner, lease.token, now, lease.script_id, i) for i in claimed],
            "many",
        )
    return claimed


def settle(lease: r.Lease, settlements: Sequence[r.Settlement], now: int) -> Tx:
    """Returns whether the script is held (the fence reads it anyway)."""
    held = yield from _fence_driven(lease, now)
    rows_of = [
        (s.state, rows.dump(s.result), s.result_bytes, s.error, now, lease.script_id, s.index)
        for s in settlements
    ]
    if len(rows_of) == 1:
        # A sequential script's every call: the state checked by the write itself (a
        # statement fewer); if it changed nothing, the check below says why.
        changed = yield Q(_SETTLE + " AND state = ?", (*rows_of[0], r.RUNNING), "count")
        if changed == 1:
            return held
    yield from _states(lease.script_id, [s.index for s in settlements], (r.RUNNING,))
    if rows_of:
        yield Q(_SETTLE, rows_of, "many")
    return held


_SETTLE = (
    "UPDATE calls SET state = ?, result = ?, result_bytes = ?, error = ?, ended_ms = ?"
    " WHERE script_id = ? AND idx = ?"
)


def reopen(lease: r.Lease, indexes: Sequence[int], now: int) -> Tx:
    yield from _fence_driven(lease, now)
    for index in indexes:
        entry = yield from _call(lease.script_id, index, (r.RUNNING,))
        if entry.token is not None and entry.token >= lease.token:
            raise r.CallConflict(rules.own_call(entry))
        yield Q(
            "UPDATE calls SET state = ?, owner = NULL, token = NULL, started_ms = NULL"
            " WHERE script_id = ? AND idx = ?",
            (r.APPROVED, lease.script_id, index),
        )


def pause(lease: r.Lease, now: int) -> Tx:
    yield from _fenced_update(lease, "status = ?, updated_ms = ?", (r.PAUSED, now))


def end(
    lease: r.Lease, status: str, outcome: dict[str, Any], usage: r.StepUsage | None, now: int
) -> Tx:
    # The last step's usage, if any, in the same statement: the row and its index are
    # written once.
    steps, compute_ms, file_bytes = (
        (usage.steps, usage.total_compute_ms, usage.total_file_bytes) if usage else (None,) * 3
    )
    yield from _fenced_update(
        lease,
        "status = ?, outcome = ?, updated_ms = ?, lease_expires_ms = 0,"
        " steps = COALESCE(?, steps), total_compute_ms = COALESCE(?, total_compute_ms),"
        " total_file_bytes = COALESCE(?, total_file_bytes)",
        (status, rows.dump(outcome), now, steps, compute_ms, file_bytes),
    )


# ---- answers ----


def answer(
    script_id: str,
    call_id: str,
    expect: str,
    state: str,
    result: Any,
    result_bytes: int | None,
    error: str | None,
    note: str | None,
    now: int,
) -> Tx:
    yield from get_script(script_id, "update")
    row = yield Q(
        f"SELECT {CALL_COLUMNS} FROM calls WHERE script_id = ? AND call_id = ?",
        (script_id, call_id),
        "one",
        "update",
    )
    if row is None:
        raise CallNotWaiting.no_call(script_id, call_id)
    entry = rows.call_from_row(row)
    if entry.state != expect:
        raise CallNotWaiting(rules.not_waiting(entry, expect))
    settled = state in r.SETTLED
    yield Q(
        "UPDATE calls SET state = ?, note = ?, result = ?, result_bytes = ?, error = ?,"
        " ended_ms = ? WHERE script_id = ? AND idx = ?",
        (
            state,
            note,
            rows.dump(result) if settled else None,
            result_bytes if settled else None,
            error if settled else None,
            now if settled else None,
            script_id,
            entry.index,
        ),
    )
    yield Q("UPDATE scripts SET updated_ms = ? WHERE id = ?", (now, script_id))
    return (yield from _call(script_id, entry.index, (state,)))


def set_held(script_id: str, held: bool, now: int) -> Tx:
    yield from get_script(script_id, "update")
    yield Q("UPDATE scripts SET held = ?, updated_ms = ? WHERE id = ?", (int(held), now, script_id))
