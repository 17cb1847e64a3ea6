"""One script driven by this host: its lease, kept alive while the host drives, and the
script's record and calls as this host last wrote or read them.

Only the lease holder writes a script's steps and calls, and the store refuses its writes
(:class:`~engine.log.LeaseLost`) once another host has taken the script over, so a host that
stalled past its lease cannot write over its successor. The cache is safe for the same
reason: while the lease holds, the only other writes to the script are answers (approvals,
client results, holds), which the loop reads again before it decides anything on them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Sequence
from typing import Any

from engine import log

logger = logging.getLogger("codemode")


def new_owner() -> str:
    """A name for one drive of a script, unique across hosts and readable in ``show``:
    ``host:pid:nonce``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def dead_local_owner(store: log.LogStore, lease: log.Lease | None) -> str | None:
    """The lease's owner if it is a process of this machine that is gone, on a store whose
    hosts all share this machine (so a restarted host resumes at once instead of waiting
    out its predecessor's lease); otherwise ``None``."""
    if lease is None or not store.local:
        return None
    host, _, rest = lease.owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return lease.owner
    except OSError:  # alive, as another user
        return None
    return None


class Drive:
    """The script ``record`` under ``lease``: renews the lease in the background until
    :meth:`close`, and keeps ``calls`` as written. Every write raises
    :class:`~engine.log.LeaseLost` once the script is another host's."""

    def __init__(
        self,
        store: log.LogStore,
        lease: log.Lease,
        record: log.ScriptRecord,
        calls: list[log.CallEntry],
        ttl_ms: int,
    ) -> None:
        self.store = store
        self.lease = lease
        self.record = record
        self.calls = calls
        self._ttl_ms = ttl_ms
        self._renewer = asyncio.create_task(self._renew(), name=f"lease {record.id}")
        # Results that finish while a commit is under way are committed together next.
        self._pending: list[tuple[Sequence[log.Settlement], asyncio.Future[None]]] = []
        self._committing: asyncio.Lock = asyncio.Lock()

    @classmethod
    async def take(
        cls, store: log.LogStore, script_id: str, owner: str, ttl_ms: int
    ) -> Drive | None:
        """Take the script's lease and read it, or ``None`` if another host holds it."""
        lease = await store.acquire(script_id, owner, ttl_ms)
        if lease is None:
            dead = dead_local_owner(store, (await store.get_script(script_id)).lease)
            if dead is not None:
                lease = await store.acquire(script_id, owner, ttl_ms, take_from=dead)
        if lease is None:
            return None
        return await cls.resume(store, lease, ttl_ms)

    @classmethod
    async def resume(cls, store: log.LogStore, lease: log.Lease, ttl_ms: int) -> Drive:
        """Drive a script whose lease this host already took."""
        try:
            record = await store.get_script(lease.script_id)
            calls = await store.calls(lease.script_id)
        except BaseException:
            await store.release(lease)
            raise
        return cls(store, lease, record, calls, ttl_ms)

    async def _renew(self) -> None:
        # Renew at a third of the lease, so two missed renewals still leave time.
        while True:
            await asyncio.sleep(self._ttl_ms / 3000)
            try:
                self.lease = await self.store.renew(self.lease, self._ttl_ms)
            except log.LeaseLost:
                logger.warning(
                    "script lease lost script=%s owner=%s: another host took it over",
                    self.lease.script_id,
                    self.lease.owner,
                )
                return
            except Exception:  # the store is unreachable: the next write will say so
                logger.warning("script lease not renewed script=%s", self.record.id, exc_info=True)

    async def reread_script(self) -> None:
        """Read the script's record again: a hold may have landed (the calls this host wrote
        are already in :attr:`calls`)."""
        self.record = await self.store.get_script(self.record.id)

    # ---- writes ----

    async def add_calls(self, entries: Sequence[log.CallEntry]) -> None:
        await self.store.add_calls(self.lease, entries)
        self.calls.extend(entries)

    async def decide(self, decisions: Sequence[log.Decision]) -> None:
        await self.store.decide(self.lease, decisions)
        for d in decisions:
            entry = self.calls[d.index]
            entry.state, entry.note, entry.error = d.state, d.note, d.error

    async def claim(self, indexes: Sequence[int]) -> list[int]:
        """The receipts of the calls about to run, in one transaction."""
        claimed = await self.store.claim(self.lease, indexes)
        for index in claimed:
            entry = self.calls[index]
            entry.state, entry.owner, entry.token = log.RUNNING, self.lease.owner, self.lease.token
        return claimed

    async def settle(self, *settlements: log.Settlement) -> None:
        """Record how calls ended; returns once they are durable. Endings that arrive while
        another commit is under way go to the store together in the next one (group commit:
        a hundred calls that end at once cost a few transactions, not a hundred)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((settlements, done))
        async with self._committing:
            if not done.done():
                batch, self._pending = self._pending, []
                try:
                    await self.store.settle(self.lease, [s for group, _ in batch for s in group])
                except asyncio.CancelledError:
                    self._pending[:0] = batch  # not written: the next committer takes them
                    raise
                except BaseException as e:
                    for _, future in batch:
                        future.set_exception(e)
                else:
                    for group, future in batch:
                        for s in group:
                            entry = self.calls[s.index]
                            entry.state, entry.result, entry.error = s.state, s.result, s.error
                            entry.result_bytes = s.result_bytes
                        future.set_result(None)
        await done

    async def reopen(self, indexes: Sequence[int]) -> None:
        await self.store.reopen(self.lease, indexes)
        for index in indexes:
            entry = self.calls[index]
            entry.state, entry.owner, entry.token = log.APPROVED, None, None

    async def record_step(self, usage: log.StepUsage) -> None:
        await self.store.record_step(self.lease, usage)
        self.record.steps = usage.steps
        self.record.total_compute_ms = usage.total_compute_ms
        self.record.total_file_bytes = usage.total_file_bytes

    async def pause(self) -> None:
        await self.store.pause(self.lease)
        self.record.status = log.PAUSED

    async def end(self, status: str, outcome: dict[str, Any]) -> None:
        await self.store.end(self.lease, status, outcome)
        self.record.status, self.record.outcome = status, outcome

    async def close(self) -> None:
        """Stop renewing and give the lease up (a lost lease is left as it is)."""
        self._renewer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._renewer
        with contextlib.suppress(Exception):
            await self.store.release(self.lease)
