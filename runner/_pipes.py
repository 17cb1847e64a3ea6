"""Our ends of a forked child's pipes, on the event loop without asyncio transports.

A step makes two pipes' worth of asyncio objects per process, so they are kept minimal:
the writer writes straight to the fd (waiting for room with ``add_writer``) and can say
how much of what it wrote the child left unread; the reader feeds a ``StreamReader`` from
``add_reader`` and pauses when its buffer is full, as a transport would.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import sys
import termios


class PipeWriter:
    """Writes to a pipe fd it owns. ``write`` raises ``BrokenPipeError`` if the reader left."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        os.set_blocking(fd, False)
        self.loop = loop
        self.fd: int | None = fd
        self.failed = False
        self.written = 0

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = self.write_now(view)
            if n == 0 and self.fd is not None:
                await self._writable(self.fd)
            view = view[n:]

    def write_now(self, data: bytes | memoryview) -> int:
        """Write what the pipe takes now, without waiting; returns how many bytes that was."""
        if self.fd is None:
            raise BrokenPipeError("the pipe is closed")
        try:
            n = os.write(self.fd, data)
        except BlockingIOError:
            return 0
        except OSError:
            self.failed = True
            raise BrokenPipeError("the process closed its stdin") from None
        self.written += n
        return n

    async def _writable(self, fd: int) -> None:
        ready: asyncio.Future[None] = self.loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        self.loop.add_writer(fd, wake)
        try:
            await ready
        finally:
            self.loop.remove_writer(fd)

    def unread(self) -> int:
        """Bytes written that the reader has not read (FIONREAD works on either end)."""
        if self.fd is None:
            return 0
        try:
            raw = fcntl.ioctl(self.fd, termios.FIONREAD, b"\0\0\0\0")
        except OSError:
            return 0
        return int.from_bytes(raw, sys.byteorder)

    def untouched(self) -> bool:
        """True when the reader consumed none of what was written (or nothing could be)."""
        if self.written == 0:
            return self.failed
        return self.unread() == self.written

    def close(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            with contextlib.suppress(Exception):
                self.loop.remove_writer(fd)
            os.close(fd)


class PipeFeed:
    """Feeds a StreamReader from an fd; the reader pauses and resumes it like a transport."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, stream: asyncio.StreamReader):
        os.set_blocking(fd, False)
        self.loop = loop
        self.fd: int | None = fd
        self.stream = stream
        self.reading = False
        # Set while nothing is expected from the process (a live one waiting for results):
        # whatever it writes then stays in the pipe, unread, where the resume finds it, and
        # reading pauses at the first sign of it. Cheaper than pausing at every wait (two
        # epoll changes), and a process that floods meanwhile fills only its pipe.
        self.idle = False
        stream.set_transport(self)  # type: ignore[arg-type]
        self.resume_reading()

    def _ready(self) -> None:
        if self.fd is None:
            return
        if self.idle:
            self.pause_reading()
            return
        try:
            data = os.read(self.fd, 256 * 1024)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.stream.feed_data(data)
        else:
            self.pause_reading()
            self.stream.feed_eof()

    def pause_reading(self) -> None:
        if self.reading and self.fd is not None:
            self.loop.remove_reader(self.fd)
        self.reading = False

    def resume_reading(self) -> None:
        if not self.reading and self.fd is not None:
            self.loop.add_reader(self.fd, self._ready)
            self.reading = True

    def close(self) -> None:
        self.pause_reading()
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)


def pipe_reader(
    loop: asyncio.AbstractEventLoop, fd: int, limit: int
) -> tuple[asyncio.StreamReader, PipeFeed]:
    """A StreamReader reading the pipe ``fd`` (which it owns); close the feed to release it."""
    stream = asyncio.StreamReader(limit=limit, loop=loop)
    return stream, PipeFeed(loop, fd, stream)
