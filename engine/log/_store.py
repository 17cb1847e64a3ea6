"""The store interface: what a session log must do so that many hosts can share it.

Every method is a coroutine and every write is durable when it returns. Writes are of three
kinds, and the kind says who may make them:

- **Starting** (:meth:`LogStore.start`): any host; idempotent by the script's ``key``, which
  names a script within its tenant.
- **Owner writes** carry a :class:`Lease` and are *fenced*: the store refuses them with
  :class:`LeaseLost` once the script's lease has another token (another host took it over),
  so a host that stalled past its lease and woke up cannot write over its successor.
- **Answers** (:meth:`LogStore.answer`, :meth:`LogStore.set_held`): any host, no lease; each
  is an atomic change conditioned on the call's state, so an approval delivered twice, or to
  two hosts at once, takes effect once.

Group commit: the calls of one step are added in one transaction, their receipts
(:meth:`LogStore.claim`) in one, and their results (:meth:`LogStore.settle`) in one; when
the worker decides at once, a step's calls, their decisions and their receipts are one
transaction (:meth:`LogStore.add_calls` with ``claim``).

A host that writes its own store runs :mod:`engine.log.conformance` against it.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.log._records import (
    CallEntry,
    Decision,
    Lease,
    ScriptRecord,
    Settlement,
    StepUsage,
)

# How long a lease lasts unless the owner renews it; the owner renews at a third of it.
DEFAULT_LEASE_MS = 30_000


@dataclass(frozen=True)
class Started:
    """What :meth:`LogStore.start` did: the script (new, or the one the key already named),
    the lease if this host now owns it (``None``: another host drives it), and whether the
    script was created by this call."""

    record: ScriptRecord
    lease: Lease | None
    created: bool


class LogStore(abc.ABC):
    """Where scripts and their calls are kept, shared by every host that drives them."""

    # ---- reading ----

    @abc.abstractmethod
    async def get_script(self, script_id: str) -> ScriptRecord:
        """The script, or :class:`~engine.ScriptNotFound`."""

    @abc.abstractmethod
    async def calls(self, script_id: str, start: int = 0) -> list[CallEntry]:
        """The script's calls from position ``start`` on, in call order (incremental reads:
        an owner that has the first ``start`` calls asks only for the rest)."""

    @abc.abstractmethod
    async def scripts(self, status: str | None = None, limit: int = 1000) -> list[ScriptRecord]:
        """Scripts, oldest first, with that status if one is given; at most ``limit``."""

    @abc.abstractmethod
    async def script_by_key(self, tenant: str, key: str) -> ScriptRecord | None:
        """The script ``key`` names within ``tenant`` (see :meth:`start`), or ``None``."""

    # ---- starting and owning ----

    @abc.abstractmethod
    async def start(self, record: ScriptRecord, owner: str, ttl_ms: int) -> Started:
        """Add the script and take its lease, in one transaction.

        If ``record.key`` names a script of ``record.tenant`` already in the log, nothing is
        added: that script is returned, with a lease if it could be taken (see
        :meth:`acquire`). A key is unique within its tenant, not across tenants: another
        tenant's script with the same key is neither returned nor touched, and this start
        adds a script of its own."""

    # A store all of whose hosts run on one machine (a SQLite file): there, a host can tell
    # that a lease's owner process is gone and take its scripts over at once.
    local = False

    @abc.abstractmethod
    async def acquire(
        self, script_id: str, owner: str, ttl_ms: int, *, take_from: str | None = None
    ) -> Lease | None:
        """Take the script's lease for ``ttl_ms``, or ``None`` while another owner's lease
        on it has not expired. Taking it when it was free, expired, or released gives a
        larger token than any before; an owner that still holds it gets it renewed, with its
        token unchanged. ``take_from`` names an owner the caller knows is dead: its lease is
        taken as if it had expired. :class:`~engine.ScriptNotFound` if there is no such
        script. (A paused script is active again at its owner's next write of its calls:
        ``add_calls``, ``decide``, ``claim``, ``settle``, ``reopen``.)"""

    @abc.abstractmethod
    async def renew(self, lease: Lease, ttl_ms: int) -> Lease:
        """Extend the lease; :class:`LeaseLost` if another host took the script over."""

    @abc.abstractmethod
    async def release(self, lease: Lease) -> None:
        """Give the lease up (the next taker gets a larger token); a lost lease is ignored."""

    @abc.abstractmethod
    async def claim_ready(self, owner: str, ttl_ms: int, skip: Sequence[str] = ()) -> Lease | None:
        """Take the lease of one script that waits for no one, or ``None`` if there is none;
        scripts whose ids are in ``skip`` (those a worker could not drive) are passed over.

        A script is ready when it is paused, not held, and no call of it awaits a person or
        a client (an answer landed), or when it is active, not held, and its owner's lease
        expired (its host died). Hosts that call this at once never get the same script."""

    # ---- owner writes (fenced) ----

    @abc.abstractmethod
    async def add_calls(
        self,
        lease: Lease,
        entries: Sequence[CallEntry],
        usage: StepUsage | None = None,
        *,
        claim: bool = False,
        lasting: bool = True,
    ) -> list[int]:
        """Append calls; their indexes must continue the script's call order
        (:class:`CallConflict` otherwise). ``usage``: what the script's runs have used after
        the step that asked for them, written with them.

        An entry is ``proposed``, or already decided (one of the states a worker decides,
        with its note and error: the worker answered before the calls were written, so the
        calls and the decisions are one write). With ``claim``, the entries decided
        ``approved`` are claimed in the same write, as :meth:`claim` would (none while the
        script is held), and their indexes returned.

        ``lasting=False``: the write need not reach the disk before this returns (see
        :meth:`claim`)."""

    @abc.abstractmethod
    async def decide(
        self,
        lease: Lease,
        decisions: Sequence[Decision],
        *,
        claim: bool = False,
        lasting: bool = True,
    ) -> list[int]:
        """Move proposed calls to what the worker decided; :class:`CallConflict` if one is
        not proposed. With ``claim``, a call decided ``approved`` is claimed in the same
        write (see :meth:`claim`): its index is returned, and it is ``running``; while the
        script is held, nothing is claimed. ``lasting``: see :meth:`claim`."""

    @abc.abstractmethod
    async def claim(
        self, lease: Lease, indexes: Sequence[int], *, lasting: bool = True
    ) -> list[int]:
        """The receipts: move each call that is ``approved`` to ``running`` under this lease
        (owner, token, start time) and return the indexes that moved. A call runs only if
        its index is returned. While the script is held, none moves (no call goes out), and
        the hold is checked in the same transaction as the claim.

        A receipt reaches the disk before this returns, unless ``lasting=False``: the
        engine says so when every call claimed is of a tool that may simply run again (read
        only, or idempotent), whose receipt a power cut may lose. A store may sync anyway."""

    @abc.abstractmethod
    async def settle(self, lease: Lease, settlements: Sequence[Settlement]) -> bool:
        """Record how running calls ended. A call claimed under an older token (its owner
        died while it ran) may be settled too. :class:`CallConflict` if one is not running.
        Returns whether the script is held, as the write's fence found it: the owner then
        runs no step after these calls (a store that cannot say returns False, and a hold
        that landed while the calls ran stops the script at its next claim instead)."""

    @abc.abstractmethod
    async def reopen(self, lease: Lease, indexes: Sequence[int]) -> None:
        """Move ``running`` calls claimed under an older token back to ``approved``, to run
        again: only for tools declared read-only, whose repeat has no effect."""

    @abc.abstractmethod
    async def pause(self, lease: Lease) -> None:
        """The script waits (for a person, the client, or a release)."""

    @abc.abstractmethod
    async def end(
        self,
        lease: Lease,
        status: str,
        outcome: dict[str, Any],
        usage: StepUsage | None = None,
        *,
        lasting: bool = True,
    ) -> None:
        """The script ended (``finished`` or ``failed``) with this outcome (and ``usage``, what
        its runs used); its lease is given up in the same write.

        The outcome reaches the disk before this returns, unless ``lasting=False``: the
        engine says so when the script called no tool with effects (every call it made may
        simply run again), so a power cut that lost the outcome loses nothing a new run of
        the script would not give again. A store may sync anyway."""

    # ---- answers (any host) ----

    @abc.abstractmethod
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
    ) -> CallEntry:
        """Move call ``call_id`` from ``expect`` to ``state`` atomically and return it as it is
        now; :class:`~engine.CallNotWaiting` if it is not in ``expect`` (already answered, or
        never waiting), :class:`~engine.ScriptNotFound` if there is no script."""

    @abc.abstractmethod
    async def set_held(self, script_id: str, held: bool) -> None:
        """Hold the script (no step runs, no call goes out) or release it."""

    async def aclose(self) -> None:  # noqa: B027 - optional
        """Release the store's resources."""
