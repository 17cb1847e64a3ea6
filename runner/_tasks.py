"""Ending an asyncio task from the code that owns it."""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` and wait until it has ended (see :func:`wait_ended`).

    The usual ``task.cancel()`` then ``with suppress(CancelledError): await task`` cannot
    tell the task's cancellation from its caller's: a caller cancelled there went on as if
    nothing had asked it to stop (the fault of ``asyncio.wait_for``, gh-86296)."""
    task.cancel()
    await wait_ended(task)


async def wait_ended(task: asyncio.Future[Any]) -> None:
    """Wait until ``task`` has ended, however it ends (its error is taken, not raised). A
    cancellation of the caller while it waits is raised, never swallowed."""
    await asyncio.wait({task})
    if not task.cancelled():
        task.exception()  # taken: asyncio would log one never retrieved
