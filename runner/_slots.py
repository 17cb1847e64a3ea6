"""Slots: how many scripts run at once, shared fairly between tenants.

The rule (from the spec): scripts run in at most ``count`` processes at once. A tenant may
take every slot while no other tenant waits; while another does, it keeps at most all but
one. A step waits at most ``script_wait`` seconds for a slot, then gets a ``RunError`` (the
engine puts it back on its queue and tries again later).

When a slot frees and several tenants wait, the one holding the fewest slots gets it (ties:
whoever has waited longest), so tenants with steady demand converge on equal shares.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import psutil

from runner._base import RunError, check_count, check_seconds

SLOTS_VARIABLE = "CODEMODE_SANDBOX_SLOTS"
DEFAULT_SCRIPT_WAIT = 60.0


def default_slot_count(environ: dict[str, str] | None = None) -> int:
    """``CODEMODE_SANDBOX_SLOTS``, or the number of CPUs clamped to 2..8.

    Raises ``ValueError`` naming the variable and its value when it is not a positive
    integer.
    """
    env = os.environ if environ is None else environ
    text = env.get(SLOTS_VARIABLE)
    if text is not None and text.strip():
        try:
            count = int(text)
        except ValueError:
            count = 0
        if count < 1:
            raise ValueError(
                f"{SLOTS_VARIABLE}={text!r} is not a positive whole number of slots; set it "
                "to how many scripts may run at once (e.g. 4), or unset it to use the CPU count"
            )
        return count
    return min(8, max(2, psutil.cpu_count() or 2))


@dataclass(eq=False)
class _Waiter:
    tenant: str
    order: int
    future: asyncio.Future[None]


@dataclass
class SlotUse:
    """What one hold of a slot cost: how long it waited, and how long it held."""

    tenant: str
    waited: float = 0.0
    held_since: float = 0.0


@dataclass
class Slots:
    """A fair counting semaphore keyed by tenant (asyncio; one event loop at a time).

    ``clock`` measures waits and slot time, so tests can use a fake one; the ``script_wait``
    timeout itself runs on the event loop's timer. ``on_release(tenant, seconds)``, when set,
    is told how long each hold lasted, for a host's own accounting: the slots keep no history
    per tenant, which would grow with every tenant a long-running service ever saw.
    """

    count: int
    script_wait: float = DEFAULT_SCRIPT_WAIT
    clock: Callable[[], float] = time.monotonic
    held: Counter[str] = field(default_factory=Counter)
    on_release: Callable[[str, float], None] | None = None
    _queues: dict[str, deque[_Waiter]] = field(default_factory=dict)
    _order: itertools.count[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        check_count("slots", self.count)  # 2.5 was taken, and let three steps run at once
        check_seconds("script_wait", self.script_wait, zero=True)

    @property
    def in_use(self) -> int:
        return sum(self.held.values())

    def waiting(self, tenant: str | None = None) -> int:
        """How many steps wait (for ``tenant``, or in all)."""
        if tenant is not None:
            return len(self._queues.get(tenant, ()))
        return sum(len(q) for q in self._queues.values())

    def cap(self, tenant: str) -> int:
        """The most slots ``tenant`` may hold now: all, or all but one while another waits."""
        others_wait = any(q for t, q in self._queues.items() if t != tenant)
        return max(1, self.count - 1) if others_wait else self.count

    @contextlib.asynccontextmanager
    async def hold(self, tenant: str) -> AsyncIterator[SlotUse]:
        """Hold one slot for ``tenant`` while the block runs.

        Raises :class:`RunError` when none came free within ``script_wait`` seconds.
        """
        use = await self.acquire(tenant)
        try:
            yield use
        finally:
            self.release(use)

    async def acquire(self, tenant: str) -> SlotUse:
        start = self.clock()
        if not self._queues and self.in_use < self.count:
            # Nobody waits and a slot is free: taken at once (as _dispatch would grant it),
            # without a future and a queue for a wait that cannot happen.
            self.held[tenant] += 1
            return SlotUse(tenant=tenant, waited=0.0, held_since=start)
        waiter = _Waiter(tenant, next(self._order), asyncio.get_running_loop().create_future())
        self._queues.setdefault(tenant, deque()).append(waiter)
        self._dispatch()
        if not waiter.future.done():
            try:
                async with asyncio.timeout(self.script_wait):
                    await asyncio.shield(waiter.future)
            except BaseException as e:
                if waiter.future.done() and not waiter.future.cancelled():
                    self._give_back(tenant)  # granted just as we gave up: hand it on
                else:
                    waiter.future.cancel()
                    self._remove(waiter)
                    self._dispatch()  # our leaving may let another tenant take its cap
                if isinstance(e, TimeoutError):
                    raise RunError(
                        f"no sandbox slot came free within {self.script_wait:g} s (all "
                        f"{self.count} busy, {self.waiting()} steps waiting); the step can be "
                        f"tried again later, or raise {SLOTS_VARIABLE} or script_wait"
                    ) from None
                raise
        now = self.clock()
        return SlotUse(tenant=tenant, waited=now - start, held_since=now)

    def release(self, use: SlotUse) -> None:
        spent = self.clock() - use.held_since
        self._give_back(use.tenant)  # first: a callback that raises must not keep the slot
        if self.on_release is not None:
            self.on_release(use.tenant, spent)

    def _give_back(self, tenant: str) -> None:
        self.held[tenant] -= 1
        if self.held[tenant] <= 0:
            del self.held[tenant]
        self._dispatch()

    def _remove(self, waiter: _Waiter) -> None:
        queue = self._queues.get(waiter.tenant)
        if queue is not None:
            with contextlib.suppress(ValueError):
                queue.remove(waiter)
            if not queue:
                del self._queues[waiter.tenant]

    def _dispatch(self) -> None:
        """Grant free slots to waiting tenants under the fairness rule."""
        while self.in_use < self.count and self._queues:
            eligible = [
                (self.held[tenant], queue[0].order, tenant)
                for tenant, queue in self._queues.items()
                if self.held[tenant] < self.cap(tenant)
            ]
            if not eligible:
                return  # cannot happen with count >= 1 (see tests), but never spin
            _, _, tenant = min(eligible)
            queue = self._queues[tenant]
            waiter = queue.popleft()
            if not queue:
                del self._queues[tenant]
            if waiter.future.done():  # cancelled while queued
                continue
            self.held[tenant] += 1
            waiter.future.set_result(None)
