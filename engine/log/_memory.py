"""The session log in this process's memory: for tests, and for hosts that keep nothing.

It keeps every promise of the interface (leases, fencing, atomic answers) among the hosts
of one process, and copies in and out as a database would, so no caller shares its objects:
values go through JSON as the SQL stores' do (what comes back is what a SQL store gives back,
and the round trip costs a fraction of a deep copy).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from engine._errors import CallNotWaiting, ScriptNotFound
from engine.log import _records as r
from engine.log import _rules as rules
from engine.log._store import LogStore, Started


class MemoryStore(LogStore):
    """A log in memory. ``clock`` gives the store's time in seconds (leases expire by it)."""

    local = True

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._scripts: dict[str, r.ScriptRecord] = {}
        self._keys: dict[tuple[str, str], str] = {}  # (tenant, key) -> script id
        self._calls: dict[str, list[r.CallEntry]] = {}
        # One lock makes each method one transaction; no method awaits while holding it.
        self._lock = threading.Lock()

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _script(self, script_id: str) -> r.ScriptRecord:
        try:
            return self._scripts[script_id]
        except KeyError:
            raise ScriptNotFound.of(script_id) from None

    # ---- reading ----

    async def get_script(self, script_id: str) -> r.ScriptRecord:
        with self._lock:
            return _script_copy(self._script(script_id))

    async def calls(self, script_id: str, start: int = 0) -> list[r.CallEntry]:
        with self._lock:
            self._script(script_id)
            return [_call_copy(c) for c in self._calls[script_id][start:]]

    async def scripts(self, status: str | None = None, limit: int = 1000) -> list[r.ScriptRecord]:
        with self._lock:
            found = [s for s in self._scripts.values() if status is None or s.status == status]
            found.sort(key=lambda s: (s.created_ms, s.id))
            return [_script_copy(s) for s in found[:limit]]

    async def script_by_key(self, tenant: str, key: str) -> r.ScriptRecord | None:
        with self._lock:
            script_id = self._keys.get((tenant, key))
            return None if script_id is None else _script_copy(self._script(script_id))

    # ---- starting and owning ----

    async def start(self, record: r.ScriptRecord, owner: str, ttl_ms: int) -> Started:
        with self._lock:
            key = (record.tenant, record.key) if record.key is not None else None
            existing = self._keys.get(key) if key is not None else None
            if existing is not None:
                lease = self._acquire(existing, owner, ttl_ms)
                return Started(_script_copy(self._scripts[existing]), lease, created=False)
            if record.id in self._scripts:
                raise ValueError(f"script {record.id!r} is already in the log")
            stored = _script_copy(record)
            stored.lease = None
            stored.updated_ms = self._now_ms()
            self._scripts[record.id] = stored
            self._calls[record.id] = []
            if key is not None:
                self._keys[key] = record.id
            lease = self._acquire(record.id, owner, ttl_ms)
            return Started(_script_copy(stored), lease, created=True)

    async def acquire(
        self, script_id: str, owner: str, ttl_ms: int, *, take_from: str | None = None
    ) -> r.Lease | None:
        with self._lock:
            return self._acquire(script_id, owner, ttl_ms, take_from)

    def _acquire(
        self, script_id: str, owner: str, ttl_ms: int, take_from: str | None = None
    ) -> r.Lease | None:
        script = self._script(script_id)
        now = self._now_ms()
        token = rules.next_token(script.lease, owner, now, take_from)
        if token is None:
            return None
        script.lease = r.Lease(script_id, owner, token, now + ttl_ms)
        return script.lease

    async def renew(self, lease: r.Lease, ttl_ms: int) -> r.Lease:
        with self._lock:
            script = self._fenced(lease)
            script.lease = dataclasses.replace(lease, expires_ms=self._now_ms() + ttl_ms)
            return script.lease

    async def release(self, lease: r.Lease) -> None:
        with self._lock:
            script = self._script(lease.script_id)
            if script.lease is not None and script.lease.token == lease.token:
                script.lease = dataclasses.replace(lease, expires_ms=0)

    async def claim_ready(
        self, owner: str, ttl_ms: int, skip: Sequence[str] = ()
    ) -> r.Lease | None:
        passed = set(skip)
        with self._lock:
            now = self._now_ms()
            for script in sorted(self._scripts.values(), key=lambda s: (s.updated_ms, s.id)):
                if script.id not in passed and _ready(script, self._calls[script.id], now):
                    return self._acquire(script.id, owner, ttl_ms)
            return None

    # ---- owner writes ----

    def _fenced(self, lease: r.Lease) -> r.ScriptRecord:
        script = self._script(lease.script_id)
        if script.lease is None or script.lease.token != lease.token:
            raise r.LeaseLost(rules.lost(lease, script.lease))
        return script

    async def add_calls(
        self,
        lease: r.Lease,
        entries: Sequence[r.CallEntry],
        usage: r.StepUsage | None = None,
        *,
        claim: bool = False,
        lasting: bool = True,  # nothing here reaches a disk
    ) -> list[int]:
        for entry in entries:
            rules.check_new_call(entry)
        with self._lock:
            script = self._fenced(lease)
            log = self._calls[lease.script_id]
            for i, entry in enumerate(entries):
                if entry.script_id != lease.script_id or entry.index != len(log) + i:
                    raise r.CallConflict(rules.out_of_order(entry, len(log) + i))
            added = [_call_copy(e) for e in entries]
            claimed = []
            if claim and not script.held:  # no call goes out while the script is held
                now_ms = self._now_ms()
                for entry in added:
                    if entry.state == r.APPROVED:
                        entry.state, entry.owner, entry.token = r.RUNNING, lease.owner, lease.token
                        entry.started_ms = now_ms
                        claimed.append(entry.index)
            log.extend(added)
            _use(script, usage)
            self._driven(lease.script_id)
            return claimed

    async def decide(
        self,
        lease: r.Lease,
        decisions: Sequence[r.Decision],
        *,
        claim: bool = False,
        lasting: bool = True,
    ) -> list[int]:
        for decision in decisions:
            rules.check_decision(decision)
        with self._lock:
            held = self._fenced(lease).held
            claim = claim and not held  # no call goes out while the script is held
            log, now_ms = self._calls[lease.script_id], self._now_ms()
            entries = [_at(log, d.index, lease.script_id, {r.PROPOSED}) for d in decisions]
            claimed = []
            for entry, decision in zip(entries, decisions, strict=True):
                entry.state, entry.note, entry.error = decision.state, decision.note, decision.error
                if claim and decision.state == r.APPROVED:
                    entry.state, entry.owner, entry.token = r.RUNNING, lease.owner, lease.token
                    entry.started_ms = now_ms
                    claimed.append(entry.index)
            self._driven(lease.script_id)
            return claimed

    async def claim(
        self, lease: r.Lease, indexes: Sequence[int], *, lasting: bool = True
    ) -> list[int]:
        with self._lock:
            held = self._fenced(lease).held
            log = self._calls[lease.script_id]
            claimed, now_ms = [], self._now_ms()
            for index in [] if held else dict.fromkeys(indexes):  # none goes out while held
                if 0 <= index < len(log) and log[index].state == r.APPROVED:
                    entry = log[index]
                    entry.state, entry.owner, entry.token = r.RUNNING, lease.owner, lease.token
                    entry.started_ms = now_ms
                    claimed.append(index)
            self._driven(lease.script_id)
            return claimed

    async def settle(self, lease: r.Lease, settlements: Sequence[r.Settlement]) -> bool:
        with self._lock:
            held = self._fenced(lease).held
            log, now_ms = self._calls[lease.script_id], self._now_ms()
            entries = [_at(log, s.index, lease.script_id, {r.RUNNING}) for s in settlements]
            for entry, settlement in zip(entries, settlements, strict=True):
                rules.check_settlement(settlement)
                entry.state = settlement.state
                entry.result = _data(settlement.result)
                entry.result_bytes = settlement.result_bytes
                entry.error = settlement.error
                entry.ended_ms = now_ms
            self._driven(lease.script_id)
            return held

    async def reopen(self, lease: r.Lease, indexes: Sequence[int]) -> None:
        with self._lock:
            self._fenced(lease)
            log = self._calls[lease.script_id]
            entries = [_at(log, i, lease.script_id, {r.RUNNING}) for i in indexes]
            for entry in entries:
                if entry.token is not None and entry.token >= lease.token:
                    raise r.CallConflict(rules.own_call(entry))
            for entry in entries:
                entry.state, entry.owner, entry.token, entry.started_ms = (
                    r.APPROVED,
                    None,
                    None,
                    None,
                )
            self._driven(lease.script_id)

    async def pause(self, lease: r.Lease) -> None:
        with self._lock:
            self._fenced(lease).status = r.PAUSED
            self._touch(lease.script_id)

    async def end(
        self,
        lease: r.Lease,
        status: str,
        outcome: dict[str, Any],
        usage: r.StepUsage | None = None,
        *,
        lasting: bool = True,
    ) -> None:
        rules.check_ending(status)
        with self._lock:
            script = self._fenced(lease)
            script.status, script.outcome = status, _data(outcome)
            _use(script, usage)
            script.lease = dataclasses.replace(lease, expires_ms=0)
            self._touch(lease.script_id)

    # ---- answers ----

    async def answer(
        self,
        script_id: str,
        call_id: str,
        expect: str,
        state: str,
        *,
        result: Any = None,
        result_bytes: int | None = None,
        error: str | None = None,
        note: str | None = None,
    ) -> r.CallEntry:
        rules.check_answer(expect, state)
        with self._lock:
            self._script(script_id)
            for entry in self._calls[script_id]:
                if entry.call_id == call_id:
                    if entry.state != expect:
                        raise CallNotWaiting(rules.not_waiting(entry, expect))
                    entry.state, entry.note = state, note
                    if state in r.SETTLED:
                        entry.result = _data(result)
                        entry.result_bytes, entry.error = result_bytes, error
                        entry.ended_ms = self._now_ms()
                    self._touch(script_id)
                    return _call_copy(entry)
            raise CallNotWaiting.no_call(script_id, call_id)

    async def set_held(self, script_id: str, held: bool) -> None:
        with self._lock:
            self._script(script_id).held = held
            self._touch(script_id)

    def _touch(self, script_id: str) -> None:
        self._scripts[script_id].updated_ms = self._now_ms()

    def _driven(self, script_id: str) -> None:
        """Its owner wrote its calls: a paused script is active again (and touched)."""
        script = self._scripts[script_id]
        if script.status == r.PAUSED:
            script.status = r.ACTIVE
            self._touch(script_id)


def _use(script: r.ScriptRecord, usage: r.StepUsage | None) -> None:
    if usage is not None:
        script.steps = usage.steps
        script.total_compute_ms = usage.total_compute_ms
        script.total_file_bytes = usage.total_file_bytes


def _ready(script: r.ScriptRecord, calls: list[r.CallEntry], now_ms: int) -> bool:
    if script.held or (script.lease is not None and script.lease.expires_ms > now_ms):
        return False
    if script.status == r.PAUSED:
        return not any(c.state in (r.AWAITING_APPROVAL, r.AWAITING_CLIENT) for c in calls)
    return script.status == r.ACTIVE and script.lease is not None


def _at(log: list[r.CallEntry], index: int, script_id: str, states: set[str]) -> r.CallEntry:
    if not 0 <= index < len(log):
        raise r.CallConflict(f"script {script_id} has no call at position {index}")
    entry = log[index]
    if entry.state not in states:
        raise r.CallConflict(rules.wrong_state(script_id, entry.call_id, entry.state, states))
    return entry


def _data(value: Any) -> Any:
    """JSON data as a store gives it back: equal, and shared with no caller."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return orjson.loads(orjson.dumps(value))


def _call_copy(entry: r.CallEntry) -> r.CallEntry:
    return dataclasses.replace(entry, arguments=_data(entry.arguments), result=_data(entry.result))


def _script_copy(record: r.ScriptRecord) -> r.ScriptRecord:
    return dataclasses.replace(
        record, outcome=_data(record.outcome), files=_data(record.files), tools=dict(record.tools)
    )
