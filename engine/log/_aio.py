"""``fsync`` by the kernel's asynchronous I/O (Linux AIO, ``IOCB_CMD_FSYNC``), through caio.

A durable commit of the SQLite log waits for an ``fsync`` of its write-ahead log, never on
the event loop. Done on a thread, that wait costs two hand-offs on top of the ``fsync``: the
thread is woken and takes the GIL, then wakes the loop through its self-pipe and gives the
GIL back. Linux AIO (kernel 4.18 and later) queues the ``fsync`` to a kernel worker at
``io_submit`` and signals an eventfd the loop watches when it is done: one wake-up, no GIL.
Measured on 2 vCPUs, two engines interleaved in one process, a 100-call script whose tool has
effects (a synced receipt per call): 1.524 / 1.847 / 1.855 ms a call on the thread against
1.364 / 1.623 / 1.627 ms by AIO, in three runs.

caio's low-level context is used rather than its asyncio wrapper, which reports a failed
operation as a ``SystemError`` carrying only ``strerror``'s text: here a failure is an
``OSError`` with its errno, so the store can tell "this file system cannot" (the thread then
does the syncs) from an I/O error (the write may not be on the disk).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import importlib
import os
from typing import Any

# caio's Linux AIO module, imported at the first AioSync.make: importing it costs 40 to 90 ms
# (caio imports every variant, and its module calls io_setup), which every process importing
# the engine paid, a `codemode describe` or `scripts` that never syncs a write included.
linux_aio: Any = None
_imported = False


def _linux_aio() -> Any:
    """caio's ``linux_aio`` module, or ``None`` where it cannot be had."""
    global linux_aio, _imported
    if not _imported:  # marked once the module is had: a store on another thread waits for it
        module: Any = None
        # Linux 4.18+ with io_setup allowed (a container's seccomp profile may refuse it).
        with contextlib.suppress(ImportError):
            module = importlib.import_module("caio.linux_aio")
        linux_aio, _imported = module, True
    return linux_aio


# What an fsync by AIO fails with where the file or the kernel cannot do it that way.
UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM})
MAX_REQUESTS = 64


class AioSync:
    """``fsync`` of a file descriptor by Linux AIO, on one event loop. Make with :meth:`make`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, context: Any) -> None:
        self.loop = loop
        self._context: Any = context
        self._semaphore = asyncio.BoundedSemaphore(MAX_REQUESTS)
        self._waiting: set[asyncio.Future[int]] = set()
        loop.add_reader(context.fileno, self._on_ready)

    @classmethod
    def make(cls, loop: asyncio.AbstractEventLoop) -> AioSync | None:
        """One for ``loop``, or ``None`` where Linux AIO cannot be had (another OS, a kernel
        before 4.18, ``io_setup`` refused, caio not installed)."""
        aio = _linux_aio()
        if aio is None:
            return None
        try:
            return cls(loop, aio.Context(max_requests=MAX_REQUESTS))
        except (OSError, SystemError, NotImplementedError):
            return None

    async def fsync(self, fd: int) -> None:
        """Return once ``fd``'s file is on the disk, as ``os.fsync(fd)``; raises ``OSError``.

        Cancelled, the ``fsync`` still completes in the kernel (which holds the file), and its
        answer is dropped."""
        if self._context is None:
            raise OSError(errno.EBADF, "the store's AIO context is closed")
        done: asyncio.Future[int] = self.loop.create_future()

        def finished(res: int) -> None:  # called on the loop, from _on_ready
            if not done.done():
                done.set_result(res)

        operation = linux_aio.Operation.fsync(fd)
        operation.set_callback(finished)
        async with self._semaphore:
            try:
                if self._context.submit(operation) != 1:
                    raise OSError(errno.EAGAIN, "the fsync was not queued")
            except SystemError as e:  # io_submit failed; caio gives strerror's text only
                raise OSError(errno.EIO, f"the fsync could not be queued: {e}") from None
            self._waiting.add(done)
            try:
                res = await done
            finally:
                self._waiting.discard(done)
        # The kernel's result comes as an unsigned 64-bit number: a failure is -errno.
        if res >= 1 << 63:
            res -= 1 << 64
        if res < 0:
            raise OSError(-res, os.strerror(-res))

    def _on_ready(self) -> None:
        try:
            with contextlib.suppress(BlockingIOError):  # woken with nothing to read
                self._context.poll()
            self._context.process_events()
        except (OSError, SystemError) as e:
            # The completions cannot be read: fail every wait rather than leave it hanging.
            for done in self._waiting:
                if not done.done():
                    done.set_exception(OSError(errno.EIO, f"the fsync's answer was lost: {e}"))

    def detach(self) -> Any:
        """Stop watching; returns the context, to be let go off the event loop (its
        ``io_destroy`` waits for an ``fsync`` still in flight). An ``fsync`` still waiting
        raises ``OSError(EOPNOTSUPP)``, one of :data:`UNSUPPORTED`: its answer will never be
        read here, so its caller syncs another way."""
        context, self._context = self._context, None
        if context is not None:
            with contextlib.suppress(Exception):
                self.loop.remove_reader(context.fileno)
        for done in self._waiting:
            if not done.done():
                done.set_exception(
                    OSError(
                        errno.EOPNOTSUPP, "the AIO context was let go before the fsync's answer"
                    )
                )
        return context
