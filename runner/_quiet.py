"""When a runner's background work may run: not while a script is in the middle of its run.

A runner has work of its own besides its steps: forking a child ahead into its warm pool (the
fork server copying its page tables, the child locking itself down) and ending a process
whose step is over (the kernel tearing down its address space, a millisecond or two). On a
small machine that CPU is taken from whatever runs then, and on a run of live steps or a
script's last step that is the script: the host's loop, its sandbox, the log's ``fsync``.
So that work waits until nothing holds the runner (no step runs, no live run waits for its
results) and no step or segment began or ended for ``quiet`` seconds, ``latest`` seconds at
most: between scripts, not in the middle of one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

QUIET = 0.005
LATEST = 0.05


class Quiet:
    """A runner's quiet: ``holding()`` says whether a script is mid-run on it (a step
    running, a live run waiting), :meth:`busy` marks a step or segment beginning or ending.
    Times are ``time.monotonic()`` seconds."""

    def __init__(
        self,
        holding: Callable[[], bool] = lambda: False,
        *,
        quiet: float = QUIET,
        latest: float = LATEST,
    ) -> None:
        self.holding = holding
        self.quiet = quiet
        self.latest = latest
        self._last_busy = float("-inf")

    def busy(self) -> None:
        """A step or a live segment began or ended: the quiet starts again from now."""
        self._last_busy = time.monotonic()

    def due(self) -> float:
        """The latest time for background work wanted now."""
        return time.monotonic() + self.latest

    async def wait(self, due: float, hurry: asyncio.Event | None = None) -> None:
        """Return once the runner is quiet, or at ``due``, or as soon as ``hurry`` is set."""
        while hurry is None or not hurry.is_set():
            now = time.monotonic()
            quiet_at = self._last_busy + self.quiet
            if self.holding():
                quiet_at = max(quiet_at, now + self.quiet)  # look again then
            wake = min(quiet_at, due)
            if wake <= now:
                return
            if hurry is None:
                await asyncio.sleep(wake - now)
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wake - now):
                    await hurry.wait()
