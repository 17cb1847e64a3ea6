"""Where the host's sync tool handlers run: a bounded thread pool per engine, fair between
tenants and scripts, that a call which timed out cannot clog.

What was there before, and why it went: sync handlers ran through ``asyncio.to_thread``, on
the event loop's default executor (``min(32, CPUs + 4)`` threads: 6 on 2 cores), first come
first served and shared with everything else the process sends there. One script with a few
slow calls took every thread, and another script's fast call waited behind them until its own
timeout; and a call that timed out kept its thread (Python cannot stop a thread), so a slow
tool could hold the pool down for good.

What is here instead (:class:`ToolThreads`):

- **Bounded.** At most ``threads`` calls run at once, in threads of the engine's own
  ``ThreadPoolExecutor``; a call waits for admission on the event loop, never in the
  executor's queue, so the order is ours.
- **Fair.** One script holds at most ``per_script`` threads and one tenant ``per_tenant``
  (by default a quarter and a half of them), so there is always room for another tenant and
  another script. When a thread frees, it goes to the waiting call whose tenant holds the
  fewest threads, then whose script does, then the one that waited longest.
- **A timed-out call stops counting against others.** Its thread runs on, so it still counts
  against its own script and tenant until it really ends (a script whose calls hang can only
  slow itself), but it no longer takes one of the ``threads``: the executor has ``spare``
  threads more for such calls. Only when more than ``spare`` are stuck at once do they eat
  into the pool, which bounds the process at ``threads + spare`` threads whatever a tool does.

Async handlers run on the event loop and take no thread; they are not admitted here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import itertools
import queue
import threading
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

TOOL_THREADS = 16


class _DaemonExecutor(concurrent.futures.Executor):
    """``ThreadPoolExecutor``'s work in daemon threads: a handler that never returns (a call
    given up on at its timeout runs on) must not keep the host's process from exiting once
    the engine is closed, as the standard executor's threads do (the interpreter joins them
    at its exit). Threads are made as work comes, up to ``workers``, and reused."""

    def __init__(self, workers: int, name: str) -> None:
        self._workers = workers
        self._name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._shut = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot schedule new futures after shutdown")
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            self._queue.put((future, fn, args, kwargs))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._workers:
                number = len(self._threads) + 1
                thread = threading.Thread(
                    target=self._work, name=f"{self._name}_{number}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
        return future

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            _run(*item)
            del item  # nothing of a call outlives it in a waiting thread
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shut = True
            if cancel_futures:
                while True:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None:
                        item[0].cancel()
            for _ in self._threads:
                self._queue.put(None)  # each thread ends once its call has
        if wait:
            for thread in self._threads:
                thread.join()


def _run(
    future: concurrent.futures.Future[Any], fn: Callable[..., Any], args: Any, kwargs: Any
) -> None:
    if future.set_running_or_notify_cancel():
        try:
            result = fn(*args, **kwargs)
        except BaseException as e:  # as ThreadPoolExecutor: the caller's to see
            future.set_exception(e)
        else:
            future.set_result(result)


@dataclass(eq=False)
class Ticket:
    """One sync call's place: ``waiting`` for a thread, ``running`` in one, or ``done``.

    A call that timed out while ``waiting`` never ran; one that timed out ``running`` runs on
    and may yet take effect.
    """

    tenant: str
    script: str
    state: str = "waiting"
    order: int = 0
    granted: asyncio.Future[None] | None = field(default=None, repr=False)


class ToolThreads:
    """A bounded, fair pool of threads for sync tool handlers (see the module docstring).

    ``threads`` run at once (at least 1); ``per_script`` and ``per_tenant`` default to a
    quarter and a half of them (at least 1 each); ``spare`` (default ``threads``) more
    threads take over the calls that timed out while running. Admission happens on the
    event loop of the caller.
    """

    def __init__(
        self,
        threads: int = TOOL_THREADS,
        *,
        per_script: int | None = None,
        per_tenant: int | None = None,
        spare: int | None = None,
    ) -> None:
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"tool threads must be a whole number of at least 1, not {threads!r}")
        self.threads = threads
        self.per_script = per_script if per_script is not None else max(1, threads // 4)
        self.per_tenant = per_tenant if per_tenant is not None else max(1, threads // 2)
        self.spare = spare if spare is not None else threads
        if min(self.per_script, self.per_tenant) < 1 or self.spare < 0:
            raise ValueError("per_script and per_tenant must be at least 1, spare at least 0")
        self.running = 0  # calls that take one of the `threads`
        self.stuck = 0  # calls that timed out and run on in a spare thread
        self.by_tenant: Counter[str] = Counter()  # running or stuck, per tenant
        self.by_script: Counter[str] = Counter()  # running or stuck, per script
        self._waiting: list[Ticket] = []
        self._order = itertools.count()
        self._executor: _DaemonExecutor | None = None

    def waiting(self) -> int:
        return len(self._waiting)

    async def call(self, ticket: Ticket, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        """Run ``fn(**kwargs)`` in a thread once ``ticket`` is admitted; its result.

        Cancelling (a timeout) while it waits takes it out of the queue; cancelling while it
        runs leaves the thread running on (``ticket.state`` stays ``running``) and moves it to
        the spare threads.
        """
        loop = asyncio.get_running_loop()
        ticket.order = next(self._order)
        ticket.granted = loop.create_future()
        self._waiting.append(ticket)
        self._dispatch()
        try:
            await ticket.granted
        except BaseException:
            if ticket.granted.done() and not ticket.granted.cancelled():
                self._release(ticket, stuck=False)  # granted just as it was given up
            else:
                ticket.granted.cancel()
                self._waiting.remove(ticket)
            raise  # the state stays "waiting": it never ran
        try:
            if self._executor is None:
                self._executor = _DaemonExecutor(self.threads + self.spare, "codemode-tool")
            context = contextvars.copy_context()  # as asyncio.to_thread does
            work = self._executor.submit(context.run, _call, fn, kwargs)
        except BaseException:  # no thread to be had (out of threads, shut down): it never ran
            self._release(ticket, stuck=False)
            raise
        ticket.state = "running"
        try:
            result = await asyncio.wrap_future(work, loop=loop)
        except asyncio.CancelledError:
            if work.cancel():
                ticket.state = "waiting"  # the executor never started it
                self._release(ticket, stuck=False)
            elif work.done():
                ticket.state = "done"
                self._release(ticket, stuck=False)
            else:
                self._leave_running(ticket, work, loop)
            raise
        except BaseException:
            ticket.state = "done"
            self._release(ticket, stuck=False)
            raise
        ticket.state = "done"
        self._release(ticket, stuck=False)
        return result

    def close(self) -> None:
        """Stop taking calls; threads still running finish on their own."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def _leave_running(
        self, ticket: Ticket, work: concurrent.futures.Future[Any], loop: asyncio.AbstractEventLoop
    ) -> None:
        """A call given up on while its thread runs: free its place in ``threads`` if a spare
        thread is left, and settle the rest when the thread really ends."""
        stuck = self.stuck < self.spare
        if stuck:
            self.running -= 1
            self.stuck += 1
            self._dispatch()

        def ended(_: object) -> None:
            ticket.state = "done"
            self._release(ticket, stuck=stuck)

        def on_thread(_: object) -> None:
            try:
                loop.call_soon_threadsafe(ended, None)
            except RuntimeError:  # the loop is closed: nobody waits for a thread any more
                ended(None)

        work.add_done_callback(on_thread)

    def _release(self, ticket: Ticket, *, stuck: bool) -> None:
        if stuck:
            self.stuck -= 1
        else:
            self.running -= 1
        for counter, key in ((self.by_tenant, ticket.tenant), (self.by_script, ticket.script)):
            counter[key] -= 1
            if counter[key] <= 0:
                del counter[key]
        with contextlib.suppress(RuntimeError):  # a closed loop has no waiters to wake
            self._dispatch()

    def _dispatch(self) -> None:
        """Admit waiting calls while threads are free, under the fairness rule."""
        while self.running < self.threads and self._waiting:
            best: Ticket | None = None
            best_rank: tuple[int, int] = (0, 0)
            for ticket in self._waiting:  # in arrival order: the first of equals wins
                tenant, script = self.by_tenant[ticket.tenant], self.by_script[ticket.script]
                if tenant >= self.per_tenant or script >= self.per_script:
                    continue
                if best is None or (tenant, script) < best_rank:
                    best, best_rank = ticket, (tenant, script)
            if best is None:
                return
            self._waiting.remove(best)
            self.running += 1
            self.by_tenant[best.tenant] += 1
            self.by_script[best.script] += 1
            assert best.granted is not None
            best.granted.set_result(None)


def _call(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    return fn(**kwargs)


_shared: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ToolThreads] = (
    weakref.WeakKeyDictionary()
)


def shared_threads() -> ToolThreads:
    """The pool for tools invoked outside an engine (each engine has its own), one per event
    loop: a pool's waiting calls belong to one loop, and a loop that ended leaves its pool
    to the garbage collector (its threads end when their calls do)."""
    loop = asyncio.get_running_loop()
    threads = _shared.get(loop)
    if threads is None:
        threads = _shared[loop] = ToolThreads()
    return threads


def timed_out(
    name: str, seconds: float, ticket: Ticket | None, threads: ToolThreads | None = None
) -> str:
    """What the script reads when ``tools.<name>`` passed its deadline.

    ``ticket`` is the sync call's (None: an async handler, which was cancelled), waiting for
    a thread of ``threads``. Like an interrupted call, a call that may have taken effect says
    so.
    """
    if ticket is not None and ticket.state == "waiting":
        if threads is not None and threads.by_script[ticket.script] >= threads.per_script:
            # The script's own share is what is full: its earlier calls hold it (a handler
            # that timed out runs on in its thread), and calling again waits the same way.
            return (
                f"tools.{name} did not run: this script's {threads.per_script} tool "
                f"thread{'s' if threads.per_script != 1 else ''} stayed taken by its earlier "
                f"calls for {seconds:g} s (a call that timed out keeps its thread until its "
                "handler returns); call it again once they end"
            )
        return (
            f"tools.{name} did not run: no tool thread came free within {seconds:g} s (the "
            "host is busy with other calls); it can be called again"
        )
    if ticket is not None:
        return (
            f"tools.{name} timed out after {seconds:g} s while its handler ran; a handler "
            "cannot be stopped, so the call may or may not take effect; check before calling "
            "it again"
        )
    return (
        f"tools.{name} timed out after {seconds:g} s and was stopped, so it may or may not "
        "have taken effect; check before calling it again"
    )
