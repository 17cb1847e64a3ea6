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
import contextlib
import contextvars
import itertools
import queue
import threading
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

TOOL_THREADS = 16


class _Work:
    """One call handed to a tool thread: ``fn(**kwargs)`` run there in a copy of the caller's
    context (as ``asyncio.to_thread`` does), its outcome set on :attr:`answer`, a future of the
    caller's event loop.

    The thread answers the loop itself (``call_soon_threadsafe``), with no
    ``concurrent.futures.Future`` chained to an asyncio one between them: that chain cost a
    sync call about 0.06 ms of CPU more than its bare hand-off (0.13 against 0.08 ms a call on
    two cores), for nothing this pool uses. ``state`` goes ``queued`` -> ``running`` ->
    ``done``, or ``queued`` -> ``cancelled`` (it never began), changed under ``_STATES``."""

    __slots__ = ("answer", "context", "ended", "fn", "kwargs", "loop", "state")

    def __init__(
        self, fn: Callable[..., Any], kwargs: dict[str, Any], loop: asyncio.AbstractEventLoop
    ) -> None:
        self.fn = fn
        self.kwargs = kwargs
        self.context = contextvars.copy_context()
        self.loop = loop
        self.answer: asyncio.Future[Any] = loop.create_future()
        self.state = "queued"
        self.ended: list[Callable[[], None]] = []  # run on the loop once the thread's call ends

    def cancel(self) -> bool:
        """Keep it from beginning; whether it never will (False: it began)."""
        with _STATES:
            if self.state == "queued":
                self.state = "cancelled"
            return self.state == "cancelled"

    def run(self) -> None:
        """In a tool thread: the call, then its outcome to the loop."""
        with _STATES:
            if self.state != "queued":
                return  # cancelled before it began
            self.state = "running"
        try:
            value, failed = self.context.run(self.fn, **self.kwargs), False
        except BaseException as e:  # as ThreadPoolExecutor: the caller's to see
            value, failed = e, True
        with _STATES:
            self.state = "done"
        try:
            self.loop.call_soon_threadsafe(self._end, value, failed)
        except RuntimeError:  # the loop is closed: nobody can take the answer any more
            for ended in self.ended:
                ended()

    def _end(self, value: Any, failed: bool) -> None:
        answer = self.answer
        if not answer.done():  # not given up on (cancelled)
            if not failed:
                answer.set_result(value)
            elif isinstance(value, StopIteration):  # which a future cannot carry
                answer.set_exception(RuntimeError(f"StopIteration: {value}"))
            else:
                answer.set_exception(value)
        for ended in self.ended:
            ended()


# Guards each _Work's state between the loop and the tool threads (held for a few bytecodes).
_STATES = threading.Lock()


class _DaemonExecutor:
    """Runs each :class:`_Work` in a daemon thread: a handler that never returns (a call
    given up on at its timeout runs on) must not keep the host's process from exiting once
    the engine is closed, as the standard executor's threads do (the interpreter joins them
    at its exit). Threads are made as work comes, up to ``workers``, and reused."""

    def __init__(self, workers: int, name: str) -> None:
        self._workers = workers
        self._name = name
        self._queue: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._shut = False

    def submit(self, work: _Work) -> None:
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot schedule new work after shutdown")
            self._queue.put(work)
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._workers:
                number = len(self._threads) + 1
                thread = threading.Thread(
                    target=self._work, name=f"{self._name}_{number}", daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def _work(self) -> None:
        while (work := self._queue.get()) is not None:
            work.run()
            del work  # nothing of a call outlives it in a waiting thread
            self._idle.release()

    def shutdown(self) -> None:
        """Take no more work, give up the work not begun (its callers see it cancelled), and
        let each thread end once its call has."""
        with self._lock:
            self._shut = True
            while True:
                try:
                    work = self._queue.get_nowait()
                except queue.Empty:
                    break
                if work is not None and work.cancel():
                    with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits
                        work.loop.call_soon_threadsafe(work.answer.cancel)
            for _ in self._threads:
                self._queue.put(None)


@dataclass(eq=False)
class Ticket:
    """One sync call's place: ``waiting`` for a thread, ``running`` in one, or ``done``.

    A call that timed out while ``waiting`` never ran; one that timed out ``running`` runs on
    and may yet take effect. ``begin``, if given, is called once a thread is granted, before
    the call goes to it (and what it returns awaited, unless ``None``): if it raises, the
    call never runs (it stays ``waiting``), and what it raised is kept in ``refused`` (a
    handler's caller may wrap it as the call's error). ``running``, if given, is called on
    the loop as the call goes to its thread (after ``begin``).
    """

    tenant: str
    script: str
    state: str = "waiting"
    order: int = 0
    granted: asyncio.Future[None] | None = field(default=None, repr=False)
    admitted: bool = False  # a thread was granted (it may then wait for ``begin``)
    begin: Callable[[], Awaitable[None] | None] | None = field(default=None, repr=False)
    refused: Exception | None = field(default=None, repr=False)
    running: Callable[[], None] | None = field(default=None, repr=False)


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
        # The loop of the latest call: where a call whose own loop was closed under it (one
        # asyncio.run per request) is released from its thread, so the counts change and a
        # waiting call is admitted, and woken, on the loop the calls now wait on. Weakly: a
        # shared pool is its loop's, which must not be kept alive by it (see shared_threads).
        self._loop: weakref.ref[asyncio.AbstractEventLoop] | None = None

    def waiting(self) -> int:
        return len(self._waiting)

    def free_for(self, tenant: str, script: str) -> int:
        """How many calls of ``script`` (of ``tenant``) would be admitted at once if they
        came now: the threads free within the pool's and their shares. Others' calls may take
        them first; the figure is what the rule allows now, not a reservation."""
        return max(
            0,
            min(
                self.threads - self.running,
                self.per_tenant - self.by_tenant[tenant],
                self.per_script - self.by_script[script],
            ),
        )

    async def call(self, ticket: Ticket, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        """Run ``fn(**kwargs)`` in a thread once ``ticket`` is admitted; its result.

        Cancelling (a timeout) while it waits takes it out of the queue; cancelling while it
        runs leaves the thread running on (``ticket.state`` stays ``running``) and moves it to
        the spare threads.
        """
        loop = asyncio.get_running_loop()
        if self._loop is None or self._loop() is not loop:
            self._loop = weakref.ref(loop)
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
        ticket.admitted = True
        if ticket.begin is not None:
            try:
                if (beginning := ticket.begin()) is not None:
                    await beginning
            except BaseException as e:
                self._release(ticket, stuck=False)
                if isinstance(e, Exception):
                    ticket.refused = e
                raise  # still "waiting": it never ran
        if ticket.running is not None:
            ticket.running()  # before its thread can end it
        work = _Work(fn, kwargs, loop)
        try:
            if self._executor is None:
                self._executor = _DaemonExecutor(self.threads + self.spare, "codemode-tool")
            self._executor.submit(work)
        except BaseException:  # no thread to be had (out of threads, shut down): it never ran
            self._release(ticket, stuck=False)
            raise
        ticket.state = "running"
        try:
            result = await work.answer
        except asyncio.CancelledError:
            if work.cancel():
                ticket.state = "waiting"  # no thread began it
                self._release(ticket, stuck=False)
            elif work.state == "done":
                ticket.state = "done"
                self._release(ticket, stuck=False)
            else:
                self._leave_running(ticket, work)
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
            self._executor.shutdown()
            self._executor = None

    def _leave_running(self, ticket: Ticket, work: _Work) -> None:
        """A call given up on while its thread runs: free its place in ``threads`` if a spare
        thread is left, and settle the rest when the thread really ends (on the loop, or on
        the thread once the loop is closed)."""
        stuck = self.stuck < self.spare
        if stuck:
            self.running -= 1
            self.stuck += 1
            self._dispatch()

        def ended() -> None:
            # From the tool thread when the call's loop was closed under it: on the loop the
            # calls now wait on, if one runs (a loop not running may be closed before it
            # would run this, and the thread then stayed counted as taken for good).
            loop = None if self._loop is None else self._loop()
            if loop is not None and loop.is_running() and not _running_on(loop):
                with contextlib.suppress(RuntimeError):  # closed meanwhile: released here
                    loop.call_soon_threadsafe(ended)
                    return
            ticket.state = "done"
            self._release(ticket, stuck=stuck)

        work.ended.append(ended)

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


def _running_on(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


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
        if ticket.admitted:  # a thread came, and then ``begin``: the log confirming the lease
            return (
                f"tools.{name} did not run: within {seconds:g} s the host's log did not "
                "confirm that this host still drives the script (a thread was free); it can "
                "be called again"
            )
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
