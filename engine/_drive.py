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
import functools
import inspect
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from engine import log
from engine._errors import CallAbandoned, CodeModeError, StoreUnavailable
from engine._tool_threads import Ticket
from runner import cancel_and_wait
from sandbox import protocol

logger = logging.getLogger("codemode")


def lease_clock() -> float:
    """Seconds by the clock a lease's age is measured on here: one that counts time the
    machine was suspended (a laptop asleep), as the log's expiry, a wall-clock time, does;
    the event loop's monotonic clock does not."""
    return time.clock_gettime(_LEASE_CLOCK)


_LEASE_CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)

T = TypeVar("T")


def new_owner() -> str:
    """A name for one drive of a script, unique across hosts and readable in ``show``:
    ``host:pid:nonce``, and ``@place`` where the pid can be looked up (:func:`pid_place`)."""
    place = pid_place(os.getpid())
    where = "" if place is None else f"@{place}"
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}{where}"


@functools.cache
def pid_place(pid: int) -> str | None:
    """Where process ``pid`` (this one: the cache is by pid, for forks) is known by that
    number: the machine's boot and its PID namespace, ``None`` if ``/proc`` does not say.
    Two containers that share a log and a host name but not a PID namespace each have a
    process 1: the pid alone would name the wrong one."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip().replace("-", "")[:12]
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    return f"{boot}.{namespace:x}" if boot else None


_PID_MAX = 1 << 22  # Linux's pid_max can be set no higher


def dead_local_owner(store: log.LogStore, lease: log.Lease | None) -> str | None:
    """The lease's owner if it is a process of this machine that is gone, on a store whose
    hosts all share this machine (so a restarted host resumes at once instead of waiting
    out its predecessor's lease); otherwise ``None``. Only an owner named in this process's
    boot and PID namespace is looked up: any other (another container, an owner named
    before the place was, a machine without ``/proc``) has its lease waited out."""
    if lease is None or not store.local:
        return None
    name, _, place = lease.owner.partition("@")
    host, _, rest = name.partition(":")
    pid = rest.partition(":")[0]
    if place != pid_place(os.getpid()) or host != socket.gethostname():
        return None
    # A pid Linux can give (1 to 2**22), in ASCII digits: an owner edited by hand in the log
    # (pid 0 names the process group, an enormous one raised OverflowError) is waited out.
    if not (pid.isascii() and pid.isdigit() and 0 < int(pid) <= _PID_MAX):
        return None
    if int(pid) == os.getpid():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return lease.owner
    except OSError:  # alive, as another user
        return None
    return lease.owner if _exited(int(pid)) else None


def _exited(pid: int) -> bool:
    """Whether process ``pid``, which signals still reach, has exited all the same: a zombie
    that its parent has not reaped yet (a host killed under a supervisor that waits on it
    late) runs nothing more."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False  # no /proc to ask: taken as alive, and its lease waited out
    # "pid (comm) state ...": the name may hold anything, parentheses too; the state follows
    # the last one.
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] in (b"Z", b"X")


# The token of a lease whose take's answer was lost (the log failed as it answered): whether
# the take went through is read from the log, by the owner, when the lease is given up.
LOST_TAKE = 0


async def taken_or_kept(
    taking: Awaitable[T],
    lease_of: Callable[[T], log.Lease | None],
    kept: Callable[[log.Lease], None],
    *,
    lost: tuple[str, str] | None = None,
) -> T:
    """Await ``taking``, a write that takes a lease (``lease_of`` finds it in the answer),
    without losing the lease with the answer: cancelled while the log still works on it (a
    caller's timeout while another host holds the log's write lock), the write goes on, and
    a lease it takes all the same is handed to ``kept``, to give up. Left to run out, it held
    the script from every host, this one too, for the lease's length.

    ``lost``: the script and owner of the take, if known. A take that fails as the log
    answers (:class:`StoreUnavailable`: it may have gone through) is then handed to
    ``kept`` as a lease of token :data:`LOST_TAKE`, looked up by its owner when it is given
    up, whether or not the caller still waits."""
    if lost is not None:
        taking = _keep_lost(taking, lost, kept)
    task = asyncio.ensure_future(taking)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.add_done_callback(functools.partial(_keep_taken, lease_of, kept))
        raise


async def _keep_lost(
    taking: Awaitable[T], lost: tuple[str, str], kept: Callable[[log.Lease], None]
) -> T:
    try:
        return await taking
    except StoreUnavailable:
        kept(log.Lease(*lost, LOST_TAKE, 0))
        raise


def _keep_taken(
    lease_of: Callable[[Any], log.Lease | None],
    kept: Callable[[log.Lease], None],
    task: asyncio.Future[Any],
) -> None:
    if task.cancelled() or task.exception() is not None:
        return  # nothing taken, or kept as lost (_keep_lost)
    lease = lease_of(task.result())
    if lease is not None:
        kept(lease)


async def acquire_or_keep(
    store: log.LogStore,
    script_id: str,
    owner: str,
    ttl_ms: int,
    kept: Callable[[log.Lease], None],
    *,
    take_from: str | None = None,
) -> log.Lease | None:
    """``store.acquire`` through :func:`taken_or_kept`: its lease is not lost with its
    answer, whether the caller left or the log lost it."""
    return await taken_or_kept(
        store.acquire(script_id, owner, ttl_ms, take_from=take_from),
        lambda lease: lease,
        kept,
        lost=(script_id, owner),
    )


async def release_or_keep(
    store: log.LogStore, lease: log.Lease, kept: Callable[[log.Lease], None]
) -> None:
    """Give up ``lease``, which nothing writes under any more; if the release does not end
    (the log did not answer, or the wait was cancelled), ``kept`` is given the lease to give
    up later. Only the log's own failure (:class:`CodeModeError`) goes no further."""
    try:
        await store.release(lease)
    except BaseException as e:
        kept(lease)
        if not isinstance(e, CodeModeError):
            raise


# The most calls one receipt of calls claimed as their threads come covers (see
# Drive.claim_to_begin): so many are claimed before their turn at most, twice over.
MAX_CHUNK = 64


class NotClaimed(Exception):
    """A call's receipt was refused as its thread came: the script is held (see
    :meth:`Drive.claim_to_begin`)."""


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
        *,
        kept: Callable[[log.Lease], None],
        taken_at: float,
    ) -> None:
        self.store = store
        self.lease = lease
        self.record = record
        self.calls = calls
        self._ttl_ms = ttl_ms
        # Renewals: a timer, and a task only while one runs (most drives end before the
        # first renewal is due, and a task each, with its wait, cost a trivial run 5%).
        self._stopping = False  # close() began: no renewal starts after it
        self._renewal: asyncio.Task[None] | None = None
        self._next_renewal: asyncio.TimerHandle | None = None
        # When (lease_clock) the write that last gave the lease its expiry began, as far as
        # this host can tell (``taken_at``: the take's): a call begins only while the lease
        # surely holds (see may_begin). A renewal's error, if the last one failed.
        self._confirmed = taken_at
        self._renew_error: Exception | None = None
        self._schedule_renewal()
        self._released = False
        self._usage: log.StepUsage | None = None  # a step's usage, until its next write
        self._records: list[protocol.Record] = []  # the settled calls' records, in order
        # The hold was checked since the last step: the record was just read, or the last
        # claim (which the store refuses while the script is held) took every call asked.
        self._checked = True
        self._running: set[int] = set()  # the calls this drive claimed and has not settled
        # The last calls in ``calls``, asked for by a step and not written yet: they are
        # written with the worker's decisions on them (see :meth:`decide`).
        self._unwritten = 0
        # Results that finish while a commit is under way are committed together next.
        self._pending: list[tuple[Sequence[log.Settlement], asyncio.Future[None]]] = []
        # Outcomes being written after the drive was cancelled: :meth:`close` waits for them.
        self._writes: set[asyncio.Future[Any]] = set()
        self._unheard: BaseException | None = None  # the failure last logged of a write
        # A close cancelled while it waited for those writes, going on once they end (see
        # :meth:`close`).
        self.closing: asyncio.Task[None] | None = None
        self._committing: asyncio.Lock = asyncio.Lock()
        # Every call before ``_open_from`` is settled, and a settled call never changes: the
        # loop looks at the calls after it only, and keeps the sums it needs of those before
        # (a long script's steps would otherwise each scan the whole log).
        self._open_from = 0
        self._settled_result_bytes = 0  # of the DONE calls before _open_from
        self.argument_bytes = sum(c.argument_bytes for c in calls)
        self.script: protocol.Script | None = None  # the step's script, made at the first step
        # The tools the script can call, as made from the engine's (see StepLoop._tools_for).
        self.tools_made: tuple[list[str], list[str]] | None = None
        # A new script's first step, begun with its start (see StepLoop._begin_first_step):
        # taken by the drive's first step, or dropped with the drive.
        self.early: asyncio.Task[Any] | None = None
        # The handlers of the calls running now (see :meth:`run_handler`), which
        # :meth:`abandon` cancels.
        self._handlers: set[asyncio.Task[Any]] = set()
        # The calls whose handlers run on after the drive was cancelled (a sync handler's
        # thread, which nothing stops), by index: recorded once they end, before the lease
        # is given up (see CodeMode._hear_out).
        self.unheard: dict[int, asyncio.Task[Any]] = {}
        # The calls whose threads had not begun when the drive was cancelled or abandoned:
        # they never will, so they are to run again (see CodeMode._hear_out and aclose).
        self.unbegun: list[int] = []
        # The calls whose receipts this drive wrote, or began to write; and those whose
        # handlers began: an async one's task, a sync one's thread (known from its ticket
        # once its handler ended; see :meth:`note_unbegun`).
        self._receipted: set[int] = set()
        self._handed: set[int] = set()
        self._tickets: dict[int, Ticket] = {}  # of the sync handlers in _handlers, by index
        # The receipts of calls claimed as their tool threads came (see
        # :meth:`claim_to_begin`), by index: a chunk's one task under each of its calls,
        # until it ends.
        self._claiming: dict[int, asyncio.Task[None]] = {}
        # The calls to claim so, in order (a dict as an ordered set).
        self._deferred: dict[int, None] = {}
        self._chunk = 1
        self._chunking: asyncio.Task[None] | None = None  # the latest chunk's receipts
        self._grown: asyncio.Task[None] | None = None  # the chunk whose waiters grew _chunk
        # Set: the drive stops before its next step, its script left in the log for another
        # host to drive on (a worker that was told to stop).
        self.leave: asyncio.Event | None = None
        self._abandoned = False
        # Set: a write was refused because another host took the script over, so the
        # result this host returns is that host's (see CodeMode._drive_owned).
        self.lost = False
        # Set: the lease may still hold the script in the log after :meth:`close`, kept there
        # (:meth:`keep_lease`) or its release failed (the log did not answer); the engine
        # gives it up once the log answers (see CodeMode._keep).
        self.kept = False
        # Given the lease by :meth:`close` when it is kept (and not lost), once.
        self._kept_to: Callable[[log.Lease], None] | None = kept

    @classmethod
    async def take(
        cls,
        store: log.LogStore,
        script_id: str,
        owner: str,
        ttl_ms: int,
        *,
        kept: Callable[[log.Lease], None],
    ) -> Drive | None:
        """Take the script's lease and read it, or ``None`` if another host holds it;
        ``kept`` as for :meth:`resume`."""
        taken_at = lease_clock()
        lease = await acquire_or_keep(store, script_id, owner, ttl_ms, kept)
        if lease is None:
            dead = dead_local_owner(store, (await store.get_script(script_id)).lease)
            if dead is not None:
                taken_at = lease_clock()
                lease = await acquire_or_keep(store, script_id, owner, ttl_ms, kept, take_from=dead)
        if lease is None:
            return None
        return await cls.resume(store, lease, ttl_ms, kept=kept, taken_at=taken_at)

    @classmethod
    async def resume(
        cls,
        store: log.LogStore,
        lease: log.Lease,
        ttl_ms: int,
        record: log.ScriptRecord | None = None,
        *,
        kept: Callable[[log.Lease], None],
        taken_at: float,
    ) -> Drive:
        """Drive a script whose lease this host already took; ``record``: a script just
        started, as the store returned it (it has no calls yet), so nothing is read again.
        A failed read gives the lease up; if that fails too (the log stopped answering),
        ``kept`` is given the lease, to give up later, and the read's error is raised.
        ``kept`` is the drive's too: :meth:`close` gives it a lease it leaves held.
        ``taken_at``: :func:`lease_clock`'s time when the write that took the lease began
        (taken before it: a lease counted older than it is only renews sooner)."""
        try:
            if record is not None:
                return cls(store, lease, record, [], ttl_ms, kept=kept, taken_at=taken_at)
            record = await store.get_script(lease.script_id)
            calls = await store.calls(lease.script_id)
        except BaseException:
            await release_or_keep(store, lease, kept)
            raise
        return cls(store, lease, record, calls, ttl_ms, kept=kept, taken_at=taken_at)

    def _schedule_renewal(self) -> None:
        # Renew at a third of the lease, so two missed renewals still leave time.
        loop = asyncio.get_running_loop()
        self._next_renewal = loop.call_later(self._ttl_ms / 3000, self._start_renewal)

    def _start_renewal(self) -> None:
        self._next_renewal = None
        if not self._stopping:
            self._renewal = asyncio.create_task(self._renew(), name=f"lease {self.record.id}")

    async def _renew(self) -> None:
        # close() waits for a renewal under way (cancelling it only when the store hangs past
        # the lease's time), never cuts one short on its own: a renewal cut off
        # mid-transaction could keep the store's connection out of its pool, one that landed
        # after the release would hold the script again, and a cancellation can be lost
        # inside the store's await (Python 3.11's asyncio.wait_for returns a result that
        # arrives with it, as when psycopg's pool hands over a connection at that moment),
        # leaving a renewer that renews the lease of a drive that ended, forever.
        started = lease_clock()
        try:
            self.lease = await self.store.renew(self.lease, self._ttl_ms)
            self._confirmed, self._renew_error = started, None
        except log.LeaseLost as e:
            self._renew_error = e
            logger.warning(
                "script lease lost script=%s this_owner=%s: another host took the script "
                "over; this host leaves it",
                self.lease.script_id,
                self.lease.owner,
            )
            return
        except CodeModeError as e:  # the store did not answer: the next write will say so
            self._renew_error = e
            logger.warning("script lease not renewed script=%s: %s", self.record.id, e)
        except Exception as e:
            self._renew_error = e
            logger.warning("script lease not renewed script=%s", self.record.id, exc_info=True)
        finally:
            self._renewal = None
        if not self._stopping:
            self._schedule_renewal()

    def may_begin(self) -> Awaitable[None] | None:
        """``None`` if the lease surely still holds the script, so a call this drive claimed
        may begin now; else an awaitable that returns once the lease was renewed, raising
        :class:`~engine.log.LeaseLost` if another host took the script over (or the
        renewal's error: the log did not answer). Raises :class:`~engine.log.LeaseLost` at
        once when the drive has ended: a call left waiting for a thread after its drive
        stopped never begins (nor does its renewal hold the script again).

        A claim is no licence for ever: a host stalled past its lease (stopped, its machine
        suspended) while a call waited for a tool thread woke up to run a call its successor
        had already settled as interrupted. So once the last renewal began half a lease ago
        or more (they come every third of one), the drive's own renewal runs first, one for
        every call that asks then: as a rule a look at the clock, no write, no await."""
        if self._stopping or self._released or self.lost:
            raise log.LeaseLost(
                f"script {self.record.id}: its drive on this host has ended, so a call it "
                "claimed does not begin now; the script's next owner settles it"
            )
        if isinstance(self._renew_error, log.LeaseLost):
            raise self._renew_error  # a renewal found the script another host's
        if lease_clock() - self._confirmed < self._ttl_ms / 2000:
            return None
        return self._confirm()

    async def _confirm(self) -> None:
        if self._renewal is None:
            if self._next_renewal is not None:
                self._next_renewal.cancel()
            self._start_renewal()
        if self._renewal is not None:
            # Shielded: a call given up on (its timeout) leaves the renewal to end as any.
            await asyncio.shield(self._renewal)
        if lease_clock() - self._confirmed >= self._ttl_ms / 2000:
            raise self._renew_error or log.LeaseLost(
                f"script {self.record.id}: its lease was not renewed, so a call it claimed "
                "does not begin; the script's next owner settles it"
            )

    def open_calls(self) -> list[log.CallEntry]:
        """The calls not settled yet, in order."""
        later = self._past_settled()
        return [c for c in later if not c.settled]

    def result_bytes(self) -> int:
        """The size of every result the script's calls returned so far."""
        later = self._past_settled()
        return self._settled_result_bytes + sum(
            c.result_bytes or 0 for c in later if c.state == log.DONE
        )

    def _past_settled(self) -> list[log.CallEntry]:
        """The calls from the first one not settled on, moving ``_open_from`` past those
        settled since (and counting their results)."""
        calls, i = self.calls, self._open_from
        while i < len(calls) and calls[i].settled:
            if calls[i].state == log.DONE:
                self._settled_result_bytes += calls[i].result_bytes or 0
            i += 1
        self._open_from = i
        return calls[i:]

    def records(self) -> list[protocol.Record]:
        """The call log as a step's script carries it (every call is settled when a step
        runs). Each record is made once, when its call is first sent: a settled call never
        changes, and remaking every record at every step made a long script's steps cost the
        square of its calls. Made without the model's checks: each is data this engine
        checked when it recorded it (and the sandbox checks the line it reads)."""
        for c in self.calls[len(self._records) :]:
            if c.state == log.FAILED:
                record = protocol.Record.model_construct(
                    name=c.name, arguments=c.arguments, error=c.error
                )
            else:
                record = protocol.Record.model_construct(
                    name=c.name, arguments=c.arguments, result=c.result
                )
            self._records.append(record)
        return list(self._records)

    async def reread_script(self) -> None:
        """Read the script's record again if a hold may have landed unseen (the calls this
        host wrote are already in :attr:`calls`). Not after a claim that took every call it
        asked for: the store checks the hold in the claim's own transaction, so the calls
        that ran went out unheld, and a hold that lands later stops the next claim. Nor right
        after the drive began: what it read stands."""
        if self._checked:
            self._checked = False
            return
        await self._read_hold()

    async def _read_hold(self) -> None:
        # Only the hold: the rest of the record is this host's to write (and a step's usage
        # may not be written yet), and another host cannot end or change it under the lease.
        self.record.held = (await self.store.get_script(self.record.id)).held

    # ---- writes ----

    async def add_calls(self, entries: Sequence[log.CallEntry]) -> None:
        """The calls a step asked for. They are written, with what the step used, by the
        next write: the worker's decisions on them (so a step's calls, their decisions and
        their receipts cost one write), or any other. A host that dies before then loses
        them, as if it had died during the step; its successor's run asks for them again."""
        self.calls.extend(entries)
        self.argument_bytes += sum(c.argument_bytes for c in entries)
        self._unwritten += len(entries)

    async def _flush(self) -> None:
        """Write the calls a step asked for, if they are not written yet."""
        if self._unwritten:
            await self.store.add_calls(self.lease, self.calls[-self._unwritten :], self._usage)
            self._usage, self._unwritten = None, 0

    async def decide(
        self, decisions: Sequence[log.Decision], *, claim: bool, lasting: bool = True
    ) -> list[int]:
        """Record the worker's decisions; with ``claim``, the approved calls' receipts go in
        the same write, and their indexes are returned. The decisions on calls not written
        yet are written with them, in one write. ``lasting``: see ``LogStore.claim``."""
        new = len(self.calls) - self._unwritten  # the first call not written yet
        written = [d for d in decisions if d.index < new]
        if claim:
            self._receipted.update(d.index for d in decisions if d.state == log.APPROVED)
        claimed = (
            await self.store.decide(self.lease, written, claim=claim, lasting=lasting)
            if written
            else []
        )
        for d in decisions:
            entry = self.calls[d.index]
            entry.state, entry.note, entry.error = d.state, d.note, d.error
        if self._unwritten:
            claimed += await self.store.add_calls(
                self.lease, self.calls[new:], self._usage, claim=claim, lasting=lasting
            )
            self._usage, self._unwritten = None, 0
        if claim:
            await self._claimed(sum(d.state == log.APPROVED for d in decisions), claimed)
        return claimed

    async def _claimed(self, asked: int, indexes: Sequence[int]) -> None:
        for index in indexes:
            entry = self.calls[index]
            entry.state, entry.owner, entry.token = log.RUNNING, self.lease.owner, self.lease.token
        self._running.update(indexes)
        if len(indexes) < asked:
            await self._read_hold()  # a call was not claimed: the script is held
        self._checked = 0 < asked == len(indexes)

    async def claim(self, indexes: Sequence[int], *, lasting: bool = True) -> list[int]:
        """The receipts of the calls about to run, in one transaction; none while the
        script is held (then :attr:`record` says so). ``lasting``: see ``LogStore.claim``."""
        await self._flush()
        self._receipted.update(indexes)
        claimed = await self.store.claim(self.lease, indexes, lasting=lasting)
        await self._claimed(len(indexes), claimed)
        return claimed

    def defer(self, indexes: Sequence[int], chunk: int) -> None:
        """Calls about to run, with effects, that are claimed as their tool threads come (see
        :meth:`claim_to_begin`); a receipt takes ``chunk`` of them at first."""
        self._deferred.update(dict.fromkeys(indexes))
        self._chunk = chunk

    def claim_to_begin(self, index: int) -> Awaitable[None] | None:
        """What a call :meth:`defer` named awaits as its tool thread comes, before it begins.
        A call that waits for a thread is claimed as its turn comes, not with its step's
        others, so a host that dies while it waits leaves it approved, to run on resume, not
        "interrupted" though it never began: its receipt is written with those of the next
        calls still waiting, ``chunk`` in all, and as the first of a chunk claimed so begins,
        the next chunk's are written, so a hundred calls of a fast tool neither wait for a
        receipt each nor have more than two chunks claimed before their turn. One already
        claimed waits for :meth:`may_begin` alone. Raises :class:`NotClaimed` when the script
        is held (the call stays approved), and what :meth:`may_begin` raises. A receipt,
        once begun, goes on if its waiter is cancelled (a timeout): :meth:`ensure_claimed`
        waits for it."""
        task = self._claiming.get(index)
        first = task is None or task.done()  # its receipt is to be asked for now
        if first:
            if self.calls[index].state == log.RUNNING:
                self._claim_ahead()
                return self.may_begin()  # claimed with an earlier call's receipt
            if self.record.held:  # a receipt was refused so: no other is asked for
                raise self._not_claimed(index)
            task = self._claim_chunk_of([index])
        assert task is not None
        return self._claimed_in(index, task, first)

    def _claim_ahead(self) -> None:
        """The next chunk's receipts, unless some are being written or the script is held."""
        idle = self._chunking is None or self._chunking.done()
        if self._deferred and idle and not self.record.held:
            self._claim_chunk_of([])

    def _claim_chunk_of(self, first: list[int]) -> asyncio.Task[None] | None:
        """A task writing the receipts of ``first`` and of the next deferred calls still
        approved, :attr:`_chunk` in all; None when there are none."""
        for index in first:
            self._deferred.pop(index, None)
        chunk = list(first)
        while self._deferred and len(chunk) < self._chunk:
            other = next(iter(self._deferred))
            del self._deferred[other]
            pending = self._claiming.get(other)
            if self.calls[other].state == log.APPROVED and (pending is None or pending.done()):
                chunk.append(other)
        if not chunk:
            return None
        task = asyncio.ensure_future(self._claim_chunk(chunk))
        for other in chunk:
            self._claiming[other] = task

        def landed(done: asyncio.Task[None]) -> None:
            if not done.cancelled():
                done.exception()  # read here: a waiter cancelled meanwhile does not
            for other in chunk:
                if self._claiming.get(other) is done:
                    del self._claiming[other]

        task.add_done_callback(landed)
        self._chunking = task
        return task

    async def _claim_chunk(self, chunk: list[int]) -> None:
        if (renewing := self.may_begin()) is not None:
            await renewing
        await self.claim(chunk)

    async def _claimed_in(self, index: int, task: asyncio.Task[None], first: bool) -> None:
        if not first and not task.done() and task is not self._grown:
            # Its thread came before the receipts a call ahead of it began: the tool ends
            # faster than a receipt is written, so the chunks grow (once a chunk), to keep
            # the threads busy.
            self._grown = task
            self._chunk = min(self._chunk * 2, MAX_CHUNK)
        await asyncio.shield(task)
        if self.calls[index].state != log.RUNNING:
            raise self._not_claimed(index)
        self._claim_ahead()
        # The receipt may have taken long (a slow log, a stalled host): the call begins only
        # while the drive runs on a lease it surely holds, as any claimed call.
        if (renewing := self.may_begin()) is not None:
            await renewing

    def _not_claimed(self, index: int) -> NotClaimed:
        return NotClaimed(f"script {self.record.id} is held: call {index} stays approved")

    async def ensure_claimed(self, index: int) -> bool:
        """Before an outcome is written of the call at ``index``: claimed if it is not yet
        (one that failed before its thread came, which never ran, needs no lasting
        receipt), after any receipt :meth:`claim_to_begin` began for it. False when the
        script is held: the call stays approved, its outcome unwritten."""
        self._deferred.pop(index, None)  # no chunk takes it from here
        task = self._claiming.get(index)
        if task is not None:
            await asyncio.wait([task])  # its error, if any, was the call's (see run_handler)
        if self.calls[index].state == log.RUNNING:
            return True
        await self.claim([index], lasting=False)
        return self.calls[index].state == log.RUNNING

    async def settle(self, *settlements: log.Settlement) -> None:
        """Record how calls ended; returns once they are durable. Endings that arrive while
        another commit is under way go to the store together in the next one (group commit:
        a hundred calls that end at once cost a few transactions, not a hundred)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((settlements, done))
        # Counted, not a set difference: with a hundred calls running, each ending copying
        # the set of the others cost the square of them.
        try:  # a cancel from here on: the outcome in hand is written all the same
            if len(self._running) > sum(s.index in self._running for s in settlements):
                # Other calls still run. A store that commits without waiting (SQLite on the
                # loop) would commit each ending alone: first give the endings that already
                # arrived the two turns of the loop they take to get here (the tool thread's
                # callback, then their task).
                await asyncio.sleep(0)
                await asyncio.sleep(0)
            async with self._committing:
                if not done.done():
                    await self._commit_pending()
            await done
        except asyncio.CancelledError:
            # The drive is cancelled (a caller's timeout) with the outcome in hand: it is
            # written all the same, before the lease is given up (:meth:`close` waits),
            # rather than left running in the log for the next drive to call interrupted.
            # A write of it that fails is logged, as nobody waits for it now (whoever wrote
            # its batch, this waiter or another).
            done.add_done_callback(self._unheard_failure)
            if not done.done():
                self._in_background(self._commit_later())
            raise

    def _unheard_failure(self, done: asyncio.Future[None]) -> None:
        error = None if done.cancelled() else done.exception()
        # Once a failed write, not once for each of its cancelled waiters (a hundred calls
        # cancelled together: a hundred identical lines).
        if error is not None and error is not self._unheard:
            self._unheard = error
            logger.warning(
                "call outcomes of a cancelled drive were not recorded script=%s: %s",
                self.record.id,
                error,
            )

    async def _commit_pending(self) -> None:
        """Write the settlements pending, in one transaction (under ``_committing``). A write
        whose waiter is cancelled goes on, and its outcome is applied when it ends. A write
        that fails is told to every waiter of the batch (not raised here: a waiter left
        unanswered wrote an empty batch and waited for ever; a cancelled one logs it)."""
        batch, self._pending = self._pending, []
        settlements = [s for group, _ in batch for s in group]
        write = asyncio.ensure_future(self.store.settle(self.lease, settlements))
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:
            if write.done():
                self._committed(batch, write)
            else:
                self._in_background(write)
                write.add_done_callback(lambda w: self._committed(batch, w))
            raise
        except Exception:
            pass  # told to every waiter of the batch, this one's too, by _committed
        self._committed(batch, write)

    def _committed(
        self,
        batch: list[tuple[Sequence[log.Settlement], asyncio.Future[None]]],
        write: asyncio.Future[bool],
    ) -> None:
        """Apply what ``write`` (of ``batch``) did to the drive's calls, and tell its waiters
        (a cancelled one logs a failure: see :meth:`settle`)."""
        if write.cancelled():
            for _, future in batch:
                future.cancel()
            return
        error = write.exception()
        if error is not None:
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            return
        if write.result():  # a hold landed while the calls ran: the loop runs no next step
            self.record.held = True
        for group, future in batch:
            for s in group:
                self._running.discard(s.index)
                entry = self.calls[s.index]
                entry.state, entry.result, entry.error = s.state, s.result, s.error
                entry.result_bytes = s.result_bytes
            if not future.done():
                future.set_result(None)

    async def _commit_later(self) -> None:
        async with self._committing:
            if self._pending:
                await self._commit_pending()  # a failure: logged by its cancelled waiters

    def _in_background(self, write: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(write)
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def reopen(self, indexes: Sequence[int]) -> None:
        await self._flush()
        await self.store.reopen(self.lease, indexes)
        for index in indexes:
            entry = self.calls[index]
            entry.state, entry.owner, entry.token = log.APPROVED, None, None

    def record_step(self, usage: log.StepUsage) -> None:
        """What the script's runs have used after a step: written with the step's next write
        (its calls, or its end), so a step costs no write of its own. A host that dies
        before that write loses one step's count, which its successor's run counts again."""
        self._usage = usage
        self.record.steps = usage.steps
        self.record.total_compute_ms = usage.total_compute_ms
        self.record.total_file_bytes = usage.total_file_bytes

    async def pause(self) -> None:
        await self._flush()
        await self.store.pause(self.lease)
        self.record.status = log.PAUSED

    async def end(self, status: str, outcome: dict[str, Any], *, lasting: bool = True) -> None:
        """Write the outcome and give the lease up. ``lasting``: see ``LogStore.end``."""
        await self._flush()
        await self.store.end(self.lease, status, outcome, self._usage, lasting=lasting)
        self._usage = None
        self.record.status, self.record.outcome = status, outcome
        self._released = True  # ending gave the lease up

    async def run_handler(
        self, entry: log.CallEntry, handler: Awaitable[T], ticket: Ticket | None = None
    ) -> T:
        """Await the handler of ``entry``, a call this drive runs; :class:`CallAbandoned`
        when :meth:`abandon` cancelled it (then nothing about the call is to be written).

        ``ticket``: the handler is a sync one's, whose thread nothing can stop once it began.
        When the drive itself is cancelled (a caller's timeout, a request the client left),
        a handler whose thread began is not cancelled but left in :attr:`unheard`, so that
        what it did is recorded once it ends (a call that took effect would otherwise be
        "interrupted", and the script told it may not have); one whose thread had not begun
        is cancelled, and left in :attr:`unbegun` to run again."""
        inner = handler
        if ticket is None:
            handler = self._began(entry.index, inner)
        task = asyncio.ensure_future(handler)
        task.add_done_callback(lambda _: self._close_unbegun(entry.index, inner))
        self._handlers.add(task)
        if ticket is not None:
            self._tickets[entry.index] = ticket
        try:
            return await (task if ticket is None else asyncio.shield(task))
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not self._abandoned or (current is not None and current.cancelling()):
                if ticket is not None and ticket.state == "waiting":
                    task.cancel()  # admitted only on the loop, so it never will be now
                    self.unbegun.append(entry.index)
                elif ticket is not None and not task.cancelled():
                    self.unheard[entry.index] = task  # still in _handlers: abandon() stops it
                raise  # the drive itself is cancelled
            if ticket is not None and ticket.state == "waiting":
                raise CallAbandoned(
                    f"the engine closed before tools.{entry.name} began (it waited for a tool "
                    f"thread); script {self.record.id} waits in the log: resume it"
                ) from None
            raise CallAbandoned(
                f"the engine closed while tools.{entry.name} ran (it may or may not have taken "
                f"effect); script {self.record.id} waits in the log: resume it"
            ) from None
        finally:
            if entry.index not in self.unheard:
                self._handlers.discard(task)
                self._drop_ticket(entry.index)

    async def _began(self, index: int, handler: Awaitable[T]) -> T:
        """``handler``, noting as it begins that the call at ``index`` may take effect: a
        task cancelled before its first step never runs it (see :meth:`note_unbegun`)."""
        self._handed.add(index)
        return await handler

    def _close_unbegun(self, index: int, handler: Awaitable[Any]) -> None:
        if index not in self._handed and inspect.iscoroutine(handler):
            handler.close()  # never begun: closed, not warned of as never awaited

    async def asking(self, question: Awaitable[T]) -> T:
        """Await ``question``, the host's worker asked about the calls this drive stopped on;
        :class:`CodeModeError` when :meth:`abandon` cancelled it (the engine closed: the
        calls stay proposed in the log, for the next host to ask about). An async worker
        that never answered held ``run_code`` past ``aclose`` for ever."""
        task = asyncio.ensure_future(question)
        if self._abandoned:
            task.cancel()
        self._handlers.add(task)
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not self._abandoned or (current is not None and current.cancelling()):
                raise  # the drive itself is cancelled
            raise CodeModeError(
                f"the engine closed while the host's worker decided on script "
                f"{self.record.id}'s calls; it waits in the log: resume it"
            ) from None
        finally:
            self._handlers.discard(task)

    def note_unbegun(self) -> None:
        """The drive was cancelled, or its lease given up under it (``aclose``): add to
        :attr:`unbegun` the calls whose receipts it wrote, or was writing as the cancel
        landed, and whose handlers never began (a receipt that committed though its write
        was cancelled, SQLite syncing after its commit; calls claimed together whose tasks
        had not started; a sync call whose thread came once the lease was gone): they never
        ran, so they are approved again, not found running by the next drive and called
        interrupted. Those the log does not have running are left as they are
        (``_approve_again``)."""
        noted = set(self.unbegun)
        for index in sorted(self._receipted - noted - self._handed):
            ticket = self._tickets.get(index)
            if ticket is None or ticket.state == "waiting":
                self.unbegun.append(index)

    def forget_handler(self, index: int) -> None:
        """The unheard handler of the call at ``index``, recorded (or given up on):
        :meth:`abandon` no longer stops it."""
        task = self.unheard.pop(index)
        self._handlers.discard(task)
        self._drop_ticket(index)

    def _drop_ticket(self, index: int) -> None:
        """The ticket of the call at ``index``, whose handler ended, let go of; the call
        noted as begun if its thread began (it is not to run again)."""
        ticket = self._tickets.pop(index, None)
        if ticket is not None and ticket.state != "waiting":
            self._handed.add(index)

    def abandon(self) -> None:
        """The engine closes: cancel the handlers of the calls running now, whose drive
        ends on :class:`CallAbandoned`. Each such call stays as the log has it, running, as
        if the host had stopped: the next host runs a read-only or idempotent one again, and
        tells the script any other was interrupted. A sync one still waiting for its thread
        never begins now: it is added to :attr:`unbegun`, to be approved again."""
        self._abandoned = True
        # Admitted only on the loop, and cancelled here: a ticket waiting now never runs.
        self.unbegun.extend(i for i, t in self._tickets.items() if t.state == "waiting")
        for task in self._handlers:
            task.cancel()

    def keep_lease(self) -> None:
        """Leave the lease as it is at :meth:`close` (the store is not answering)."""
        self._released = True
        self.kept = True

    async def close(self) -> None:
        """Stop renewing and give the lease up (a lost lease is left as it is; one whose
        release fails, or that :meth:`keep_lease` left, is :attr:`kept` and handed to the
        ``kept`` callback of :meth:`take` or :meth:`resume`, once, unless it was lost: the
        caller lets go of everything that writes under the lease before). A renewal
        under way is given the lease's time to end; one still not done then (a store that
        hangs) is cancelled.

        Cancelled while it waits for the outcomes being written under the lease, it goes on
        in a task once they end (the lease was otherwise renewed for ever: anyio cancels at
        every await, so a second cancel was enough); a close called meanwhile waits for it."""
        closing = self.closing
        if closing is not None and closing is not asyncio.current_task():
            await asyncio.shield(closing)
            return
        try:
            while self._writes:  # outcomes in hand, written under the lease before it goes
                await asyncio.wait(set(self._writes))
        except asyncio.CancelledError:
            if self.closing is None:  # not in _writes: it waits for them
                self.closing = asyncio.ensure_future(self.close())
            raise
        self._stopping = True
        if self._next_renewal is not None:
            self._next_renewal.cancel()
            self._next_renewal = None
        try:
            renewal = self._renewal
            if renewal is not None:
                done, _ = await asyncio.wait({renewal}, timeout=self._ttl_ms / 1000)
                if not done:
                    await cancel_and_wait(renewal)
            if not self._released:
                self._released = True
                await self.store.release(self.lease)
        except BaseException as e:
            # Not answered, or cancelled before the release ended: the lease may hold the
            # script still (given up later: a release is fenced by its token).
            self._released = self.kept = True
            self._hand_kept()
            if not isinstance(e, Exception):
                raise
        self._hand_kept()

    def _hand_kept(self) -> None:
        if self.kept and not self.lost and self._kept_to is not None:
            kept_to, self._kept_to = self._kept_to, None
            kept_to(self.lease)
