"""Which CPUs a step's process may run on while its host works beside it.

A pipe's write wakes its reader as a "sync" wakeup: the kernel takes the writer to be about
to sleep and queues the reader on the writer's CPU. That is right when the host does wait
once it has sent the script (a runner service, a step after the first), and wrong when it
goes on working: the engine begins a script's first step and writes the script's start to
its log meanwhile (about 0.3 ms). There the process waited for the host's CPU while another
was idle: on 2 vCPUs, 255 of 300 trivial steps ran on the host's CPU and their process read
its script 0.39 ms (median) after it was written, against 0.14 ms for the 45 that ran on
the other. (A host that waits loses by the move: a trivial step 1.74 -> 1.83 ms.)

So a caller that works beside a step says so (:data:`HOST_BUSY`, set in the step's
context), and that step's process may run on any CPU but the one the host is on when it
sends the script, until :data:`AWAY_AT_MOST` has passed or, if it then waits for its calls'
results, ``ran`` has arrived (on the event loop's next turn). With one CPU
allowed, or when the kernel refuses (a host that may not set another process's affinity),
nothing changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
from collections.abc import Callable
from contextvars import ContextVar

from runner._forkserver import ForkedChild


def _sched_getcpu() -> Callable[[], int] | None:
    """libc's ``sched_getcpu`` (glibc reads it without a system call), or None."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # the process's own symbols: libc's
        getcpu = libc.sched_getcpu
    except (OSError, AttributeError):
        return None
    getcpu.restype = ctypes.c_int
    getcpu.argtypes = []
    return getcpu


_GETCPU = _sched_getcpu()

HOST_BUSY: ContextVar[bool] = ContextVar("codemode_host_busy", default=False)
"""True in the context of a step whose caller goes on working on this thread while the step
runs (a hint a runner may use: :class:`ProcessRunner` keeps the step's process off the
caller's CPU until ``ran``)."""


# How long a process is kept off the host's CPU at most: the host's work beside a step is
# short (the start's write, about 0.3 ms), and a script that computes for seconds in its
# first segment must not be held to fewer CPUs all that time (two such scripts at once would
# share one CPU of two).
AWAY_AT_MOST = 0.002


class AwayFromHost:
    """Keeps ``child`` off the host's current CPU until :meth:`release`, or for
    :data:`AWAY_AT_MOST` seconds at most. Made on the event loop."""

    def __init__(self, child: ForkedChild) -> None:
        self.child = child
        self.allowed: set[int] | None = None  # the child's CPUs before, while it is kept off
        self._timer: asyncio.TimerHandle | None = None
        if _GETCPU is None:
            return
        try:
            allowed = os.sched_getaffinity(child.pid)
            elsewhere = allowed - {_GETCPU()}
            if not elsewhere or elsewhere == allowed:
                return
            os.sched_setaffinity(child.pid, elsewhere)
        except OSError:
            return
        self.allowed = allowed
        self._timer = asyncio.get_running_loop().call_later(AWAY_AT_MOST, self.release)

    def release(self) -> None:
        """Let the child run on every CPU it had again (once; a no-op if it is gone: its pid
        is only touched while it is surely the child's)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        allowed, self.allowed = self.allowed, None
        if allowed is None or not self.child.alive():
            return
        with contextlib.suppress(OSError):
            os.sched_setaffinity(self.child.pid, allowed)
