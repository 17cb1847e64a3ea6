"""A task that is cancelled ends cancelled: no wait inside the runner swallows the request.

Python 3.11's ``asyncio.wait_for`` returns its awaitable's result when that finished in the
same turn of the loop as the cancellation of the task awaiting it (gh-86296), and the task
goes on as if nothing had asked it to stop. A service's heartbeat did: it kept beating
after its step's answer was ready, so the answer never went out and the client waited out
the step's whole deadline (86 s), hearing beats.

Each test cancels a task after 0, 1, 2, ... turns of the loop, to land in every window of
the wait: whenever ``cancel()`` found the task still running, the task must end cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import socket
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from engine._progress import ProgressLine
from runner import _wire as wire
from runner._pool import WarmPool
from runner._tasks import cancel_and_wait

TURNS = 12


async def assert_cancel_is_kept(make: Callable[[], Coroutine[Any, Any, Any]]) -> None:
    """For each number of turns, start ``make()``, let the loop turn that often, cancel it:
    a task that was still running when cancelled must end cancelled."""
    kept = 0
    for turns in range(TURNS):
        task = asyncio.create_task(make())
        for _ in range(turns):
            await asyncio.sleep(0)
        if not task.cancel():
            continue  # it had ended: nothing to keep
        try:
            async with asyncio.timeout(5):  # a task that went on may never end
                await asyncio.shield(task)
        except asyncio.CancelledError:
            kept += 1
            continue
        except TimeoutError:
            task.cancel()  # once more, so that it ends with the test
        raise AssertionError(f"cancelled after {turns} turns of the loop, the task went on")
    assert kept > 0, "every task ended before it was cancelled: the test proves nothing"


@asynccontextmanager
async def channel_pair() -> AsyncIterator[tuple[wire.Channel, wire.Channel]]:
    a, b = socket.socketpair()
    ra, wa = await asyncio.open_connection(sock=a)
    rb, wb = await asyncio.open_connection(sock=b)
    try:
        yield wire.Channel(ra, wa, stall=5.0), wire.Channel(rb, wb, stall=5.0)
    finally:
        for w in (wa, wb):
            w.close()


@asynccontextmanager
async def running(coro: Coroutine[Any, Any, Any]) -> AsyncIterator[None]:
    """``coro`` as a task for the block, cancelled after it."""
    task = asyncio.create_task(coro)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_send_cancelled_as_its_drain_ends_is_cancelled() -> None:
    async with channel_pair() as (ours, theirs):

        async def beat() -> None:  # as the service's heartbeat: send until cancelled
            while True:
                await ours.send(b'{"beat":{}}\n')
                await asyncio.sleep(0)

        async def take() -> None:  # the peer reads every beat
            while await theirs.line(1024, idle=None) is not None:
                pass

        async with running(take()):
            await assert_cancel_is_kept(beat)


async def test_a_read_cancelled_as_its_data_arrives_is_cancelled() -> None:
    async with channel_pair() as (ours, theirs):

        async def watch() -> None:  # as the service's watch of the client: read until cancelled
            while True:
                await ours.line(1024, idle=5.0)

        async def feed() -> None:  # a line at every turn of the loop, read or not
            while True:
                theirs.writer.write(b"{}\n")
                await asyncio.sleep(0)

        async with running(feed()):
            await assert_cancel_is_kept(watch)


async def test_the_warm_pools_refill_loop_cancelled_as_it_is_wanted_is_cancelled() -> None:
    """``WarmPool.aclose`` cancels its refill loop and awaits it: a loop that went on after
    the cancel would hold the close for ever."""
    pool = WarmPool(None, size=1, memory=1 << 20, data_limit=None)  # type: ignore[arg-type]
    pool.problem = "no children here: each refill is done at once"
    pool._wanted = asyncio.Event()

    async def want() -> None:  # a take at every turn of the loop
        while True:
            pool._want()
            await asyncio.sleep(0)

    async with running(want()):
        await assert_cancel_is_kept(pool._refill_forever)


# ---- ending a task one owns: cancel_and_wait ----


async def _slow_to_end() -> None:
    """A task that, cancelled, takes a few turns of the loop to clean up and end."""
    try:
        await asyncio.sleep(3600)
    finally:
        for _ in range(4):
            await asyncio.sleep(0)


async def _then_forever() -> None:
    # What a caller that went on would do: never end (assert_cancel_is_kept times it out).
    while True:
        await asyncio.sleep(0)


async def test_a_caller_cancelled_while_it_ends_a_task_is_cancelled() -> None:
    """``task.cancel()`` then ``suppress(CancelledError): await task`` swallowed a
    cancellation of the caller that came while it waited: cancel_and_wait keeps it."""

    async def owner() -> None:
        inner = asyncio.create_task(_slow_to_end())
        await asyncio.sleep(0)
        await cancel_and_wait(inner)
        await _then_forever()

    await assert_cancel_is_kept(owner)


async def test_cancel_and_wait_waits_for_the_end_and_takes_the_error() -> None:
    async def fails_when_cancelled() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0)
            raise RuntimeError("cleanup failed")

    task = asyncio.create_task(fails_when_cancelled())
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert task.done() and isinstance(task.exception(), RuntimeError)
    done = asyncio.create_task(asyncio.sleep(0))
    await done
    await cancel_and_wait(done)  # an ended task: nothing to do


async def test_a_progress_line_closed_as_its_caller_is_cancelled_keeps_the_cancellation() -> None:
    async def shows_progress() -> None:
        async with ProgressLine(io.StringIO(), interval=3600).run():
            await asyncio.sleep(0)
        await _then_forever()

    await assert_cancel_is_kept(shows_progress)
