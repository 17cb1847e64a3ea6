"""The store interface over the shared SQL transactions; a driver supplies only ``_tx``."""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any

from engine.log import _records as r
from engine.log import _rules as rules
from engine.log import _sql as sql
from engine.log._store import LogStore, Started


class SqlStore(LogStore):
    """A store whose every method is one transaction of :mod:`engine.log._sql`."""

    @abc.abstractmethod
    async def _tx(self, make: Callable[[int], sql.Tx], *, write: bool, sync: bool = True) -> Any:
        """Run the transaction ``make(now_ms)`` (the store's time) in one database
        transaction; ``write`` says whether it writes (a read may use a plain snapshot).

        ``sync=False`` marks a write that need not reach the disk before it returns, for a
        store whose hosts all share one machine (so a power loss ends them all): it reaches
        the disk with the next write that must, since the log is written in order. Such writes
        are the ones a run can derive again or that leave a call settled as interrupted if
        lost; every receipt, decision, answer and pause syncs, and every outcome of a script
        that called a tool with effects, so no call that may have run, and nothing a person
        or a client answered, is lost."""

    async def get_script(self, script_id: str) -> r.ScriptRecord:
        return await self._tx(lambda now: sql.get_script(script_id), write=False)

    async def calls(self, script_id: str, start: int = 0) -> list[r.CallEntry]:
        return await self._tx(lambda now: sql.calls(script_id, start), write=False)

    async def scripts(self, status: str | None = None, limit: int = 1000) -> list[r.ScriptRecord]:
        return await self._tx(lambda now: sql.scripts(status, limit), write=False)

    async def script_by_key(self, tenant: str, key: str) -> r.ScriptRecord | None:
        return await self._tx(lambda now: sql.script_by_key(tenant, key), write=False)

    async def start(self, record: r.ScriptRecord, owner: str, ttl_ms: int) -> Started:
        return await self._tx(
            lambda now: sql.start(record, owner, ttl_ms, now), write=True, sync=False
        )

    async def acquire(
        self, script_id: str, owner: str, ttl_ms: int, *, take_from: str | None = None
    ) -> r.Lease | None:
        return await self._tx(
            lambda now: sql.acquire(script_id, owner, ttl_ms, now, take_from),
            write=True,
            sync=False,
        )

    async def renew(self, lease: r.Lease, ttl_ms: int) -> r.Lease:
        return await self._tx(lambda now: sql.renew(lease, ttl_ms, now), write=True, sync=False)

    async def release(self, lease: r.Lease) -> None:
        await self._tx(lambda now: sql.release(lease), write=True, sync=False)

    async def claim_ready(
        self, owner: str, ttl_ms: int, skip: Sequence[str] = ()
    ) -> r.Lease | None:
        skip = tuple(skip)
        return await self._tx(
            lambda now: sql.claim_ready(owner, ttl_ms, now, skip), write=True, sync=False
        )

    async def add_calls(
        self,
        lease: r.Lease,
        entries: Sequence[r.CallEntry],
        usage: r.StepUsage | None = None,
        *,
        claim: bool = False,
        lasting: bool = True,
    ) -> list[int]:
        for entry in entries:
            rules.check_new_call(entry)
        # Proposals alone can be made again by a run; decisions and receipts must last.
        decided = any(e.state != r.PROPOSED for e in entries)
        return await self._tx(
            lambda now: sql.add_calls(lease, entries, usage, claim, now),
            write=True,
            sync=decided and lasting,
        )

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
        return await self._tx(
            lambda now: sql.decide(lease, decisions, claim, now), write=True, sync=lasting
        )

    async def claim(
        self, lease: r.Lease, indexes: Sequence[int], *, lasting: bool = True
    ) -> list[int]:
        return await self._tx(lambda now: sql.claim(lease, indexes, now), write=True, sync=lasting)

    async def settle(self, lease: r.Lease, settlements: Sequence[r.Settlement]) -> bool:
        for settlement in settlements:
            rules.check_settlement(settlement)
        held: bool = await self._tx(
            lambda now: sql.settle(lease, settlements, now), write=True, sync=False
        )
        return held

    async def reopen(self, lease: r.Lease, indexes: Sequence[int]) -> None:
        await self._tx(lambda now: sql.reopen(lease, indexes, now), write=True, sync=False)

    async def pause(self, lease: r.Lease) -> None:
        await self._tx(lambda now: sql.pause(lease, now), write=True)

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
        await self._tx(
            lambda now: sql.end(lease, status, outcome, usage, now), write=True, sync=lasting
        )

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
        return await self._tx(
            lambda now: sql.answer(
                script_id, call_id, expect, state, result, result_bytes, error, note, now
            ),
            write=True,
        )

    async def set_held(self, script_id: str, held: bool) -> None:
        await self._tx(lambda now: sql.set_held(script_id, held, now), write=True)
