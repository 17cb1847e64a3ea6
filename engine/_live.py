"""Live steps: the confined processes this host keeps alive while their scripts' calls run.

A step whose outcome is ``calls`` may come back with a :class:`runner.LiveRun`: the process
stopped where the script waits for those calls and can go on from there once it gets their
records. The log stays the whole state and a live run is only a cache of it: the engine
writes the calls' results to the log first, then resumes the run with exactly those records,
and whenever a live run is missing, spent, evicted, expired or odd, the next step replays the
script from the log as if live steps did not exist.

Only the host that holds a script's lease keeps a live run for it (entries are keyed by the
drive, and the drive drops its entry when it ends, pauses or loses the lease). Live runs have
a budget of their own, a count and the memory their processes hold: a run that does not fit
is closed and the runs kept stay (see :meth:`LiveRuns.keep`); one that waits for results
longer than ``live_wait`` is closed too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from engine._drive import Drive
from runner import (
    LiveRun,
    count_private,
    default_live_count,
    default_live_memory,
    keeps_live,
    takes_live,
)
from sandbox import protocol

__all__ = [
    "DEFAULT_LIVE_WAIT",
    "LiveRuns",
    "default_live_count",
    "default_live_memory",
    "keeps_live",
    "live_key",
    "takes_live",
]

logger = logging.getLogger("codemode")

# The live wait's default: results that take longer than this (a slow tool, a person) let the
# process go, and the next step replays. A few seconds keep a chain of quick calls live while
# an idle script holds no process for long.
DEFAULT_LIVE_WAIT = 5.0


@dataclass
class _Kept:
    run: LiveRun
    first: int  # the log index of the first call it waits for
    calls: list[tuple[str, object]]  # the calls it waits for, as its segment asked for them
    memory: int  # as counted: its memory_bytes, or its private_bytes once measured
    timer: asyncio.TimerHandle
    measured: bool = False


class LiveRuns:
    """The live runs one engine keeps, one per drive of a script at most.

    ``wait``: seconds a run may wait for its results before it is closed; ``max_count`` and
    ``max_memory``: the budget the kept runs stay within. A run
    counts its :attr:`~runner.LiveRun.memory_bytes` (resident, quick to know) until those of
    the kept runs pass ``max_memory``; then its :meth:`~runner.LiveRun.private_bytes` (what
    ending it gives back, without the pages it shares with the fork server: a tenth of its
    resident size for a small script), measured once per run, and a run that still does not
    fit then is not kept. Closing happens in the
    background (a step never waits for another script's process to end); :meth:`drain`
    waits for it, :meth:`aclose` closes everything.
    """

    def __init__(self, *, wait: float, max_count: int, max_memory: int) -> None:
        self.wait = wait
        self.max_count = max_count
        self.max_memory = max_memory
        self._kept: OrderedDict[tuple[str, str], _Kept] = OrderedDict()
        # The runs taken to be resumed, by key, with their memory as counted: their processes
        # live on while they wait for a runner slot and run their segment, so they stay in
        # the budget until :meth:`release`.
        self._resuming: dict[tuple[str, str], int] = {}
        self._memory = 0
        self._closing: set[asyncio.Task[None]] = set()
        # What happened to live runs, for tests and the benchmark.
        self.kept = self.resumed = self.evicted = self.expired = self.mismatched = 0

    def __len__(self) -> int:
        return len(self._kept)

    def runs(self) -> list[LiveRun]:
        """The runs kept now, least recently kept first."""
        return [kept.run for kept in self._kept.values()]

    @property
    def memory(self) -> int:
        """The memory the kept runs are counted at (see the class)."""
        return self._memory

    def keep(
        self, key: tuple[str, str], run: LiveRun, first: int, calls: Sequence[protocol.Call]
    ) -> None:
        """Keep ``run``, which waits for the records of ``calls``, to be logged from index
        ``first``; closes what it replaces. A run the budget has no room for is closed, not
        kept (``evicted`` counts it; its script's next step replays): the runs kept stay
        until their results come, ``wait`` passes or their drive drops them. Evicting the
        least recently kept instead closes, when more scripts step in turn than the budget
        holds, every run before its results come (each of N + 1 scripts over a budget of N
        evicts the one whose turn is next): every step replays, and each costs a process
        started and ended for nothing."""
        self.drop(key)
        try:
            memory = max(0, int(run.memory_bytes))
        except Exception:  # a process that cannot say what it holds is not worth keeping
            logger.warning("live run dropped script=%s: its memory cannot be read", key[0])
            self._close(run)
            return
        loop = asyncio.get_running_loop()
        timer = loop.call_later(self.wait, self._expire, key, run)
        self._kept[key] = _Kept(run, first, [(c.name, c.arguments) for c in calls], memory, timer)
        self._memory += memory
        # Past the memory budget by resident sizes: count what each run really costs.
        self._memory = count_private(self._kept.values(), self._memory, self.max_memory)
        if len(self._kept) + len(self._resuming) > self.max_count or (
            self._memory > self.max_memory
        ):
            logger.info("live run not kept, the live budget is full script=%s", key[0])
            self.evicted += 1
            self.drop(key)
            return
        self.kept += 1

    def take(self, key: tuple[str, str], records: Sequence[protocol.Record]) -> LiveRun | None:
        """The run kept for ``key`` if it waits for exactly the records past its first in
        ``records`` (the whole call log, every call settled); otherwise ``None``, and a run
        that does not match is closed. The run is no longer kept: the caller owns it, and
        calls :meth:`release` once its resume returned; until then it counts in the budget
        (its process lives on while it waits for a runner slot: on a busy host, hundreds of
        them, each with its pipes, met the host's limit of open files)."""
        kept = self._kept.pop(key, None)
        if kept is None:
            return None
        kept.timer.cancel()
        run = kept.run
        waiting = records[kept.first :]
        if (
            run.known != kept.first
            or run.waiting != len(kept.calls)
            or len(waiting) != len(kept.calls)
            or any((r.name, r.arguments) != c for r, c in zip(waiting, kept.calls, strict=True))
        ):
            logger.warning(
                "live run does not match the log script=%s known=%d waiting=%d log=%d; replaying",
                key[0],
                run.known,
                run.waiting,
                len(records),
            )
            self.mismatched += 1
            self._memory -= kept.memory
            self._close(run)
            return None
        self._resuming[key] = kept.memory
        self.resumed += 1
        return run

    def release(self, key: tuple[str, str]) -> None:
        """The run :meth:`take` gave for ``key`` was resumed (or failed to be): it no longer
        counts in the budget (its next segment's run, if any, is kept anew)."""
        memory = self._resuming.pop(key, None)
        if memory is not None:
            self._memory -= memory

    def drop(self, key: tuple[str, str]) -> None:
        """Close the run kept for ``key``, if any (the drive ended, paused or lost its lease)."""
        kept = self._kept.pop(key, None)
        if kept is not None:
            kept.timer.cancel()
            self._memory -= kept.memory
            self._close(kept.run)

    def drop_script(self, script_id: str) -> None:
        """Close every run kept for ``script_id``."""
        for key in [k for k in self._kept if k[0] == script_id]:
            self.drop(key)

    def _expire(self, key: tuple[str, str], run: LiveRun) -> None:
        kept = self._kept.get(key)
        if kept is not None and kept.run is run:
            logger.info("live run closed after %gs without results script=%s", self.wait, key[0])
            self.expired += 1
            self.drop(key)

    def close(self, run: LiveRun) -> None:
        """Close a run the caller owns, in the background."""
        self._close(run)

    def _close(self, run: LiveRun) -> None:
        task = asyncio.get_running_loop().create_task(_quietly_close(run))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def drain(self) -> None:
        """Wait until every run being closed is gone."""
        while self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    async def aclose(self) -> None:
        """Close every kept run and wait until they are gone."""
        for key in list(self._kept):
            self.drop(key)
        await self.drain()


async def _quietly_close(run: LiveRun) -> None:
    # close() never raises by contract; a runner's bug must not take the engine down.
    with contextlib.suppress(Exception):
        await run.close()


def live_key(drive: Drive) -> tuple[str, str]:
    """The key of a drive's live run: its script and its lease's owner, which names one
    drive of one host (a later drive of the same script never finds an earlier one's run)."""
    return (drive.record.id, drive.lease.owner)
