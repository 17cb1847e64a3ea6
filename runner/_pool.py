"""The warm pool: confined children forked ahead of demand, each waiting for a script.

A pool child has already locked itself down and written ``ready``, so a step that takes one
pays neither for the fork nor for the lockdown. Its heap ceiling (``RLIMIT_DATA``) was set at
fork from the runner's largest; it lowers its limits to the script's after it reads the
script (``tighten``), so limits only ever go down.

The pool refills in a background task, and shrinks to one child after ``idle_after``
seconds without a take. A child that died while it waited is discarded, never handed out.

A refill forks and readies a child: CPU that, on a small machine, a script running then
waits for. So after a step, while the pool still holds a child for the next one, the refill
waits for the runner's quiet (``runner._quiet``): after a script, not in the middle of it.
Measured on 2 vCPUs (two engines interleaved in one process, both pools full before each
timed run; a refill at once against one after the script), p50: a trivial ``run_code`` 3.33
against 2.97 ms, one call 10.43 against 8.09 ms, ``Promise.all`` of 100 calls 20.13 against
19.73 ms. A pool found empty refills at once: its next step would fork on demand.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections import deque
from collections.abc import Callable

from runner import _conversation as conv
from runner._base import RunError
from runner._forkserver import ForkedChild, ForkServer
from runner._procfs import ProcFiles
from runner._quiet import Quiet
from runner._tasks import cancel_and_wait
from sandbox import protocol

log = logging.getLogger("codemode.runner")

DEFAULT_IDLE_AFTER = 30.0
# After a failed refill, wait this long before trying again (doubling while it keeps
# failing, up to the most); steps meanwhile fork on demand and report what goes wrong.
RETRY_AFTER = 1.0
RETRY_MOST = 30.0
NICE = 10


class WarmPool:
    """Up to ``size`` ready children of ``server``, forked with ``memory``/``data_limit``.

    :meth:`take` never waits: it returns a live ready child or ``None`` (the caller forks
    one on demand). ``clock`` drives the idle shrink, so tests can use a fake one.
    """

    def __init__(
        self,
        server: ForkServer,
        *,
        size: int,
        memory: int,
        data_limit: int | None,
        spawn_timeout: float = 30.0,
        idle_after: float = DEFAULT_IDLE_AFTER,
        clock: Callable[[], float] = time.monotonic,
        quiet: Quiet | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"pool_size must be at least 1, not {size}")
        self.server = server
        self.size = size
        self.memory = memory
        self.data_limit = data_limit
        self.spawn_timeout = spawn_timeout
        self.idle_after = idle_after
        self.clock = clock
        self.quiet = quiet if quiet is not None else Quiet()
        self.idle: deque[ForkedChild] = deque()
        self.target = size
        self.last_take = clock()
        # Children wait at this nice value, so forking them ahead competes less with the
        # steps running meanwhile; a taken child is set back to the host's own nice value
        # (which takes root), never above it: a host run at a low priority keeps it.
        self.base_nice = os.getpriority(os.PRIO_PROCESS, 0)
        self.nice = NICE if os.geteuid() == 0 else 0
        self.problem: str | None = None  # why children cannot be had (unconfined), if so
        self.spawned = 0
        # The language the next children are made ready for: that of the last step taken
        # (hosts run one language, mostly). See sandbox.__main__._touch_pages.
        self.warm = protocol.LANGUAGES[0]
        self._wanted: asyncio.Event | None = None
        # A refill that may wait for quiet: when it is due at the latest (None: wanted at
        # once, or not wanted); a want at once sets _hurry, which cuts the wait short.
        self._due: float | None = None
        self._hurry: asyncio.Event | None = None
        self._later: asyncio.TimerHandle | None = None  # a refill wanted once quiet, not yet
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._reaping: set[asyncio.Task[None]] = set()  # children let go, being reaped

    # ---- taking ----

    def take(self, language: str = protocol.LANGUAGES[0]) -> ForkedChild | None:
        """A ready, live child for a step in ``language``, or ``None`` when the pool has
        none now. The children forked next are made ready for ``language``."""
        self.begin(language)
        self.quiet.busy()
        # What the zygote said meanwhile (mostly the exits of earlier steps' processes) is
        # read once the script is sent, not before: a child is taken only if its pidfd says
        # it lives, and one that dies before it reads the script (its zygote died just
        # now, taking its children with it) makes the runner fork another (_NeverRead).
        self.last_take = self.clock()
        self.target = self.size
        self.server.check()  # a zygote that died just now: its children are not handed out
        child = None
        while self.idle:
            candidate = self.idle.popleft()
            if candidate.alive():
                child = candidate
                if self.nice:
                    # Not reported exited and its pidfd not readable: the pid is still its.
                    try:
                        os.setpriority(os.PRIO_PROCESS, child.pid, self.base_nice)
                    except OSError:
                        self.nice = 0  # not allowed here after all: fork at the host's from now on
                break
            self._discard(candidate)
        if child is None:
            self._want()
        return child

    def taken_done(self) -> None:
        """A taken child's step ended: refill at once if the pool is empty, else once the
        runner is quiet (see the module's docstring)."""
        self.quiet.busy()
        if self.idle:
            self._want_later()
        else:
            self._want()

    def begin(self, language: str = protocol.LANGUAGES[0]) -> None:
        """Fill the pool now, in the background, with children made ready for ``language``
        (the fork server started first if it is not running): see ``ProcessRunner.warm``."""
        self.warm = language
        self.start()

    def start(self) -> None:
        """Start the background refill on the running loop (a no-op once running)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            for child in self.idle:  # made on another loop: unusable here
                child.kill()
                child.close()
            self.idle.clear()
            self._loop = loop
            self._wanted = asyncio.Event()
            self._hurry = asyncio.Event()
            self._due = None
            self._later = None  # a timer of the loop before, if any, finds the events new
            self._task = None
        if self._task is None and not self._closed:
            self._task = loop.create_task(self._refill_forever(), name="codemode warm pool")
            self._want()

    def _want(self) -> None:
        """Refill at once."""
        if self._wanted is not None and self._hurry is not None:
            self._due = None
            self._hurry.set()
            self._wanted.set()

    def _want_later(self) -> None:
        """Refill once the runner is quiet (a refill already wanted keeps its time).

        The refill task is woken when the quiet may first have come (a step just ended) or
        at the latest time, whichever is sooner, not now: woken now, it ran on the way to the
        step's return, only to find it must wait (a trivial run_code 1.9 and 2.8% longer,
        interleaved in one process)."""
        if self._wanted is None or self._wanted.is_set() or self._later is not None:
            return
        assert self._loop is not None
        self._later = self._loop.call_later(
            min(self.quiet.quiet, self.quiet.latest),
            self._wanted_later,
            self._wanted,
            self.quiet.due(),
        )

    def _wanted_later(self, wanted: asyncio.Event, due: float) -> None:
        if wanted is not self._wanted:
            return  # made on a loop since let go
        self._later = None
        if not wanted.is_set() and not self._closed:  # else wanted at once meanwhile
            self._due = due
            wanted.set()

    # ---- refilling and shrinking ----

    async def _refill_forever(self) -> None:
        assert self._wanted is not None
        retry = RETRY_AFTER
        while not self._closed:
            try:
                async with asyncio.timeout(self.idle_after):
                    await self._wanted.wait()
            except TimeoutError:
                self.shrink_if_idle()
                continue
            assert self._hurry is not None
            if self._due is not None:
                await self.quiet.wait(self._due, self._hurry)
            self._due = None
            self._hurry.clear()
            self._wanted.clear()
            try:
                await self.refill()
            except RunError as e:
                log.warning("the warm pool could not refill (next try in %g s): %s", retry, e)
                await asyncio.sleep(retry)
                retry = min(2 * retry, RETRY_MOST)
                self._want()
            else:
                retry = RETRY_AFTER

    async def refill(self) -> None:
        """Fork children until ``target`` are ready (one at a time: the zygote is serial)."""
        while not self._closed and self.problem is None and len(self.idle) < self.target:
            child = await self.server.spawn(
                memory=self.memory,
                data_limit=self.data_limit,
                nice=self.nice,
                warm=self.warm,
                ahead=True,
            )
            self.spawned += 1
            try:
                child.ready = await conv.await_ready(
                    child.reader, conv.Deadline.seconds(self.spawn_timeout)
                )
                child.proc = ProcFiles.open(child.pid)  # it waits for a script: surely it
                # What a step is charged from (runner._process): read now, not on the step's
                # clock (a read of /proc before the script's write: a trivial run_code 1.3 to
                # 3.2% longer). Past `ready` the child only blocks on its stdin; what it spends
                # getting there, a few microseconds, may fall after this read and be charged.
                child.cpu_ready = child.proc.cpu_ms() if child.proc is not None else None
            except conv.UnconfinedError as e:
                # Every child would say the same: stop forking; steps fork on demand and
                # report it as exec mode does.
                self.problem = str(e)
                await self._drop(child)
                return
            except (TimeoutError, OSError, RunError, ValueError) as e:
                await self._drop(child)
                why = str(e) or f"{type(e).__name__} (it did not answer in time)"
                raise RunError(f"a pool child did not become ready: {why}") from e
            except BaseException:
                await self._drop(child)
                raise
            if self._closed:
                await self._drop(child)
                return
            self.idle.append(child)
            child.exit.add_done_callback(functools.partial(self._died_waiting, child))

    def _died_waiting(self, child: ForkedChild, _: object = None) -> None:
        if child in self.idle:
            self.idle.remove(child)
            self._discard(child)
            self._want()

    def shrink_if_idle(self) -> int:
        """After ``idle_after`` seconds without a take, keep one child. Returns how many went."""
        if self.clock() - self.last_take < self.idle_after:
            return 0
        self.target = 1
        gone = 0
        while len(self.idle) > self.target:
            self._discard(self.idle.pop())
            gone += 1
        return gone

    def _discard(self, child: ForkedChild) -> None:
        """Let a child go: closing its stdin ends a waiting child; reap it in the background."""
        if child.closed:
            return
        child.close_input()
        if self._loop is not None and not self._closed:
            task = self._loop.create_task(child.reap(grace=2.0))
            self._reaping.add(task)
            task.add_done_callback(self._reaping.discard)
        else:
            child.kill()
            child.close()

    async def _drop(self, child: ForkedChild) -> None:
        child.kill()
        await child.reap(grace=0)

    async def aclose(self) -> None:
        """Stop refilling and let every idle child go."""
        self._closed = True
        if self._loop is not None and self._loop is not asyncio.get_running_loop():
            # Made on another loop (closed, say: a host's asyncio.run per request): its task
            # and children cannot be awaited here. Each child is killed (the zygote reaps).
            self._task = None
            self._reaping.clear()
            for child in self.idle:
                child.kill()
                child.close()
            self.idle.clear()
            return
        if self._later is not None:  # (another loop's would find the pool closed)
            self._later.cancel()
            self._later = None
        if self._task is not None:
            await cancel_and_wait(self._task)
        children, self.idle = list(self.idle), deque()
        for child in children:
            child.close_input()  # a waiting child reads EOF and exits
        await asyncio.gather(
            *(c.reap(grace=1.0) for c in children), *self._reaping, return_exceptions=True
        )
