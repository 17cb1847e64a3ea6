"""The runner's side of the fork server (``sandbox.zygote``): start it, ask it for children.

The zygote is started like an exec-mode sandbox process (``SANDBOX_ENV``, ``close_fds``,
a session of its own, ``cwd="/"``) with one extra fd, its end of a ``SOCK_SEQPACKET``
socketpair. For each child the runner makes three pipes, sends the child's ends in a
``spawn`` request (``SCM_RIGHTS``) and keeps its own; the zygote forks, and answers with the
pid and a pidfd, then later with the exit status and resource use it got from ``wait4``.

Every wait here is bounded, and the zygote's death is seen at once (its control socket
closes): children in flight are killed through their pidfds, steps in flight get a
``RunError`` (or their ``ran``, if they had it), and the next spawn starts a new zygote.

Choices made by measurement (2-core VM, bench/): a step no longer waits for the zygote's exit
report after ``ran`` (about 2 ms of it is the kernel tearing down the child's copy of the
zygote's 25 MiB address space): its CPU and peak memory are read from ``/proc`` when ``ran``
arrives (``runner._live.measure_at_ran``), and the exit report only closes the child; asyncio
pipe transports were replaced by plain fds on the loop (``_pipes``), two loop turns fewer
per child; running the warm-up again in each pool child to copy its pages ahead
("prefault") saved less in the step than it cost, so children do not.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from runner import _conversation as conv
from runner._base import (
    SANDBOX_ARGS,
    SANDBOX_ENV,
    ProcessStats,
    RunError,
    closed_runner,
    ended_at_start,
    not_started,
)
from runner._pipes import PipeFeed, PipeWriter, pipe_reader
from sandbox import protocol

if TYPE_CHECKING:
    from runner._procfs import ProcFiles

STDERR_KEEP = 8 * 1024
MAX_MESSAGE = 64 * 1024
# The StreamReader's buffer bound; LineReader enforces each line's own bound on top.
READ_LIMIT = 4 * protocol.MiB


@dataclass
class _Spawned:
    pid: int
    pidfd: int | None
    exit: asyncio.Future[ExitReport | None]


@dataclass
class ExitReport:
    """What the zygote's ``wait4`` said about one child."""

    status: int
    cpu_ms: float
    max_rss: int


@dataclass(eq=False)
class ForkedChild:
    """One child of the zygote, seen from the runner: its pipes, pidfd and exit report.

    Quacks like the exec-mode ``Child`` (``reader``, ``write``, ``kill``, ``reap``,
    ``stats``, ``status``, ``killed_by_us``, ``stderr``) so one step driver serves both.
    """

    pid: int
    pidfd: int | None
    server: ForkServer
    reader: conv.LineReader
    stdin: PipeWriter
    stdout: PipeFeed
    stderr_fd: int
    exit: asyncio.Future[ExitReport | None]
    started: float = field(default_factory=time.monotonic)
    ready: protocol.Ready | None = None
    killed_by_us: bool = False
    status: int | None = None
    report: ExitReport | None = None
    stderr: bytearray = field(default_factory=bytearray)
    closed: bool = False
    # Set at close: the child ended without reading any of what we wrote (the script).
    unread: bool = False
    # Its /proc files, opened while it waited for a script, so surely its (see
    # runner._live.ProcFiles); closed with it.
    proc: ProcFiles | None = None
    # Its CPU (ms) once it said ready and waits for its script, read by the pool then, off a
    # step's clock (see WarmPool.refill); None: read when the script is sent.
    cpu_ready: float | None = None
    # Handed to a background reap after its step returned at `ran`.
    detached: bool = False

    @property
    def server_died(self) -> bool:
        """True when the zygote ended before it could report this child's exit."""
        return self.exit.done() and self.exit.result() is None

    def alive(self) -> bool:
        """Not reported exited, and (when there is a pidfd) not exited at all."""
        if self.closed or self.exit.done():
            return False
        if self.pidfd is None:
            return True
        poller = select.poll()
        poller.register(self.pidfd, select.POLLIN)
        return not poller.poll(0)  # a pidfd turns readable when its process exits

    async def write(self, data: bytes) -> None:
        await self.stdin.write(data)

    def send_signal(self, signum: int) -> bool:
        """Send ``signum`` by pidfd (never a stranger that reused the pid); False when it
        cannot be sent surely (no pidfd, or the child is gone)."""
        if self.pidfd is None or self.exit.done() or self.closed:
            return False
        try:
            signal.pidfd_send_signal(self.pidfd, signum)
        except (ProcessLookupError, OSError):
            return False
        return True

    def kill(self) -> None:
        """SIGKILL the child, by pidfd (never a stranger that reused the pid)."""
        if self.exit.done() or self.closed:
            return
        self.killed_by_us = True
        if self.pidfd is not None:
            with contextlib.suppress(ProcessLookupError, OSError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        else:
            self.server.request_kill(self.pid)

    async def reap(self, grace: float = 2.0) -> None:
        """Wait for the exit report (killing the child after ``grace`` seconds), then close."""
        if self.closed:
            return
        if not self.exit.done():
            try:
                async with asyncio.timeout(grace):
                    await asyncio.shield(self.exit)
            except TimeoutError:
                self.kill()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(5.0):
                        await asyncio.shield(self.exit)
        if self.exit.done():
            self.report = self.exit.result()
            if self.report is not None:
                self.status = self.report.status
        self.close()

    def close(self) -> None:
        """Release the runner's fds for this child (kill it first if it may still run)."""
        if self.closed:
            return
        self.closed = True
        # What the child left in its stdin pipe: if all of the script, it never ran it.
        self.unread = self.stdin.untouched()
        self.close_input()
        self.stdout.close()
        self._read_stderr()
        os.close(self.stderr_fd)
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        if self.proc is not None:
            self.proc.close()
        self.server.forget(self.pid)

    def close_input(self) -> None:
        """Close our end of the child's stdin: a child still waiting for a script exits."""
        self.stdin.close()

    def _read_stderr(self) -> None:
        # The child has exited (or is being dropped): what it wrote is all in the pipe.
        for _ in range(64):
            try:
                chunk = os.read(self.stderr_fd, 65536)
            except (BlockingIOError, OSError):
                break
            if not chunk:
                break
            self.stderr.extend(chunk)
            if len(self.stderr) > STDERR_KEEP:
                del self.stderr[: len(self.stderr) - STDERR_KEEP]

    def stats(self) -> ProcessStats:
        stats = ProcessStats(wall_ms=(time.monotonic() - self.started) * 1000)
        if self.report is not None:
            stats.cpu_ms = self.report.cpu_ms
            stats.max_rss_bytes = self.report.max_rss
        stats.exit_status = self.status
        return stats


def _page_counts(value: Any) -> dict[str, int]:
    """A zygote's ``{language: pages}``; ``ValueError`` for anything else (a zygote that says
    nonsense is taken for dead)."""
    if not isinstance(value, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value.values()
    ):
        raise ValueError(f"page counts by language, not {value!r:.80}")
    return {str(k): v for k, v in value.items()}


class ForkServer:
    """One zygote process and its control socket, bound to the event loop that started it.

    :meth:`spawn` starts the zygote on first use and again after it died. Raises
    :class:`RunError` when the zygote cannot be started or does not answer.
    """

    def __init__(self, *, python: str = sys.executable, spawn_timeout: float = 30.0) -> None:
        self.python = python
        self.spawn_timeout = spawn_timeout
        self.loop: asyncio.AbstractEventLoop | None = None
        self.popen: subprocess.Popen[bytes] | None = None
        self.zygote_pid: int | None = None
        self._sock: socket.socket | None = None
        # The zygote's pidfd, readable once it exited, and a poller watching it (check()).
        self._zygote_fd: int | None = None
        self._zygote_poll: Any = None
        self._hello: asyncio.Future[int] | None = None
        self._pending: dict[int, asyncio.Future[_Spawned]] = {}
        self._exits: dict[int, asyncio.Future[ExitReport | None]] = {}
        self._pidfds: dict[int, int] = {}  # pid -> pidfd, for killing orphans
        self._ids = itertools.count(1)
        self._stderr = bytearray()
        self._starting: asyncio.Lock | None = None
        self._closed = False
        self._reaping: set[asyncio.Task[None]] = set()  # zygotes that died, being reaped
        self.starts = 0  # how many zygotes this server started (tests watch restarts)
        # By language, how many pages a child forked ahead (a pool's) copies before its step
        # (sandbox.pages), as the zygote said in its hello and again once it tried to learn
        # them again (after its first children forked ahead); 0 where it could not learn them.
        self.copied_pages: dict[str, int] = {}

    # ---- lifecycle ----

    @property
    def alive(self) -> bool:
        return self._sock is not None

    async def start(self) -> None:
        """Start the zygote and wait for its ``hello`` (a no-op while one is running)."""
        loop = asyncio.get_running_loop()
        if self.loop is not None and self.loop is not loop:
            self._abandon()  # the old loop is gone or elsewhere; its zygote goes with it
        self.loop = loop
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._sock is not None:
                return
            if self._closed:
                raise closed_runner()
            await self._start(loop)

    async def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            # Kept here too: its death (which may come before the hello) lets the attribute go.
            self.popen = popen = subprocess.Popen(
                [self.python, *SANDBOX_ARGS, "--zygote", "--control", str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=dict(SANDBOX_ENV),
                close_fds=True,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
                cwd="/",
            )
        except OSError as e:
            ours.close()
            raise not_started(f"the fork server ({self.python})", e) from e
        finally:
            theirs.close()
        self.starts += 1
        self._stderr = bytearray()
        assert popen.stderr is not None
        os.set_blocking(popen.stderr.fileno(), False)
        loop.add_reader(popen.stderr.fileno(), self._drain_stderr, popen.stderr)
        ours.setblocking(False)
        self._sock = ours
        self._hello = loop.create_future()
        loop.add_reader(ours.fileno(), self._on_readable)
        with contextlib.suppress(OSError):  # a kernel without pidfds: see check()
            self._zygote_fd = os.pidfd_open(popen.pid)
            self._zygote_poll = select.poll()
            self._zygote_poll.register(self._zygote_fd, select.POLLIN)
        try:
            async with asyncio.timeout(self.spawn_timeout):
                self.zygote_pid = await asyncio.shield(self._hello)
        except (TimeoutError, RunError) as e:
            self._on_dead()
            if isinstance(e, TimeoutError):
                detail, code = "it did not say hello in time", None
            else:  # it ended: how, if it says so soon (its socket closes as it exits)
                detail, code = str(e), await _exit_code(popen)
            raise ended_at_start("the fork server", f"{detail}{self._tail()}", code) from None

    def _drain_stderr(self, stream: Any) -> None:
        """Keep the tail of what the zygote writes to stderr (so it never blocks on it)."""
        with contextlib.suppress(OSError, ValueError, TypeError):
            chunk = stream.read(65536)
            if chunk:
                self._stderr.extend(chunk)
                del self._stderr[:-STDERR_KEEP]
                return
            if chunk == b"" and self.loop is not None:  # end of file
                self.loop.remove_reader(stream.fileno())

    def _tail(self) -> str:
        if self.popen is not None and self.popen.stderr is not None:
            self._drain_stderr(self.popen.stderr)
        lines = self._stderr.decode("utf-8", "replace").strip().splitlines()
        return f" ({lines[-1][:300]})" if lines else ""

    async def aclose(self) -> None:
        """Stop the zygote (it kills and reaps any child left) and reap it."""
        self._closed = True
        if self.loop is not None and self.loop is not asyncio.get_running_loop():
            self._abandon()  # started on another loop (closed, say): dropped at once
            return
        popen = self.popen
        self._on_dead()
        if popen is not None:
            await _reap_popen(popen, grace=2.0)
        if self._reaping:
            await asyncio.gather(*self._reaping, return_exceptions=True)

    def _abandon(self) -> None:
        """Drop a zygote started on another event loop, synchronously."""
        popen = self.popen
        self._on_dead(loop_gone=True)
        if popen is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(popen.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(5.0)

    def check(self) -> None:
        """If the zygote has exited though the event loop has not yet read its socket's end
        (it died a moment ago), read it now: its children, orphans, are then known for dead
        (their exits resolve to None) and none takes a step. One taken in that moment ran
        the script and failed it: "the fork server ended while this step ran"."""
        if self._zygote_poll is None or self._sock is None:
            return
        if self._zygote_poll.poll(0):  # one system call a step
            self._on_readable()

    def _on_dead(self, *, loop_gone: bool = False, why: str = "") -> None:
        """The control socket closed: fail what waits, kill orphans, schedule the reap.
        ``why``: what the zygote did, said to what waits (else that it ended)."""
        zygote_fd, self._zygote_fd, self._zygote_poll = self._zygote_fd, None, None
        if zygote_fd is not None:
            os.close(zygote_fd)
        sock, self._sock = self._sock, None
        if sock is not None:
            if self.loop is not None and not loop_gone:
                with contextlib.suppress(Exception):
                    self.loop.remove_reader(sock.fileno())
            sock.close()
        for pid, pidfd in list(self._pidfds.items()):
            # Orphans now: nothing reaps them for us, but the pidfd still names each one.
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            del pid
        if loop_gone:
            # What waited on the old loop is gone with it: its futures cannot be set (a
            # closed loop refuses their callbacks), and nothing awaits them any more.
            self._hello, self._starting = None, None
            self._pending.clear()
            self._exits.clear()
        if self._hello is not None and not self._hello.done():
            self._hello.set_exception(RunError(why or "the fork server ended before it said hello"))
            self._hello.exception()  # retrieved: nobody may be waiting any more
        for future in self._pending.values():
            if not future.done():
                future.set_exception(RunError(why or "the fork server ended while forking a child"))
                future.exception()
        self._pending.clear()
        for exit_future in self._exits.values():
            if not exit_future.done():
                exit_future.set_result(None)
        self._exits.clear()
        popen, self.popen = self.popen, None
        if popen is not None and popen.stderr is not None and not loop_gone and self.loop:
            self._drain_stderr(popen.stderr)  # its last words, for the error that follows
            with contextlib.suppress(Exception):
                self.loop.remove_reader(popen.stderr.fileno())
        if popen is not None and not self._closed and not loop_gone and self.loop is not None:
            task = self.loop.create_task(_reap_popen(popen, grace=2.0))
            self._reaping.add(task)
            task.add_done_callback(self._reaping.discard)

    # ---- messages ----

    def poll(self) -> None:
        """Handle what the zygote has said so far, now (its death included), without waiting.

        The event loop does this on its own when it next runs; a caller about to trust the
        server's state (take a pool child, fork) calls it first.
        """
        if self._sock is not None and self.loop is asyncio.get_running_loop():
            self._on_readable()

    def _on_readable(self) -> None:
        sock = self._sock
        if sock is None:
            return
        while True:
            try:
                data, fds, _flags, _ = socket.recv_fds(sock, MAX_MESSAGE, 1)
            except BlockingIOError:
                return
            except OSError:
                self._on_dead()
                return
            if not data and not fds:
                self._on_dead()
                return
            try:
                self._handle(orjson.loads(data), fds)
            except (ValueError, TypeError, KeyError, AttributeError) as e:
                for fd in fds:
                    os.close(fd)
                # A zygote that says nonsense is as good as dead: the next step starts another.
                self._on_dead(
                    why=f"the fork server said {bytes(data[:120])!r}, which is not a message of "
                    f"its protocol ({type(e).__name__}: {e}); it was stopped"
                )
                return

    def _handle(self, message: dict[str, Any], fds: list[int]) -> None:
        ((kind, body),) = message.items()
        assert self.loop is not None
        if kind == "spawned":
            pid, pidfd = int(body["pid"]), (fds[0] if fds else None)
            waiter = self._pending.pop(int(body["id"]), None)
            exit_future: asyncio.Future[ExitReport | None] = self.loop.create_future()
            self._exits[pid] = exit_future
            if pidfd is not None:
                self._pidfds[pid] = pidfd
            if waiter is None or waiter.done():  # the spawn was given up on: drop the child
                self._drop(pid, pidfd, exit_future)
                return
            waiter.set_result(_Spawned(pid, pidfd, exit_future))
        elif kind == "exited":
            pid = int(body["pid"])
            report = ExitReport(
                status=int(body["status"]),
                cpu_ms=float(body["cpu_ms"]),
                max_rss=int(body["max_rss"]),
            )
            future = self._exits.pop(pid, None)
            if future is not None and not future.done():
                future.set_result(report)
        elif kind == "failed":
            waiter = self._pending.pop(int(body["id"]), None) if body["id"] is not None else None
            if waiter is not None and not waiter.done():
                waiter.set_exception(RunError(f"the fork server could not fork: {body['error']}"))
        elif kind == "hello":
            if self._hello is not None and not self._hello.done():
                if "pages" in body:
                    self.copied_pages = _page_counts(body["pages"])
                self._hello.set_result(int(body["pid"]))
        elif kind == "pages":  # it tried to learn them again
            self.copied_pages = _page_counts(body)
        else:
            raise ValueError(kind)

    def _drop(
        self, pid: int, pidfd: int | None, exit_future: asyncio.Future[ExitReport | None]
    ) -> None:
        """Kill a child nobody will use, and close its pidfd once it is gone."""
        if pidfd is None:
            self.request_kill(pid)
            return
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)

        def close(_: object) -> None:
            self.forget(pid)
            os.close(pidfd)

        exit_future.add_done_callback(close)

    def forget(self, pid: int) -> None:
        """The runner is done with ``pid``: its pidfd was closed by its owner."""
        self._pidfds.pop(pid, None)

    def request_kill(self, pid: int) -> None:
        """Ask the zygote to SIGKILL ``pid`` (safe: it kills only children it has not reaped)."""
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.send(orjson.dumps({"kill": {"pid": pid}}))

    async def _send(self, data: bytes, fds: list[int]) -> None:
        sock = self._sock
        assert self.loop is not None
        while sock is not None:
            try:
                socket.send_fds(sock, [data], fds)
                return
            except BlockingIOError:
                writable = self.loop.create_future()
                self.loop.add_writer(sock.fileno(), writable.set_result, None)
                try:
                    await writable
                finally:
                    self.loop.remove_writer(sock.fileno())
            except OSError as e:
                self._on_dead()
                raise RunError(f"the fork server is gone: {e}") from e
            sock = self._sock
        raise RunError("the fork server is gone")

    # ---- children ----

    async def spawn(
        self,
        *,
        memory: int,
        data_limit: int | None,
        nice: int = 0,
        warm: str = protocol.LANGUAGES[0],
        ahead: bool = False,
    ) -> ForkedChild:
        """Fork a child that will lock itself down with these limits and say ``ready``,
        its pages touched for a run in ``warm`` (one of ``protocol.LANGUAGES``: the one the
        caller expects; a script in the other runs all the same). ``ahead``: it will wait for
        its script (a pool's child), so it copies the pages a step writes first (see
        ``sandbox.pages``); one forked for a step at once leaves them to the step, which writes
        fewer of them than that copies.

        The ``ready`` line is left for the caller to read. Raises :class:`RunError` when no
        child can be had.
        """
        self.poll()
        await self.start()
        loop = self.loop
        assert loop is not None
        spawn_id = next(self._ids)
        ours: list[int] = []
        theirs: list[int] = []
        try:
            for _ in range(3):
                r, w = os.pipe2(os.O_CLOEXEC)
                ours.append(r)
                theirs.append(w)
        except OSError as e:
            for fd in ours + theirs:
                os.close(fd)
            raise RunError(f"could not make pipes for a sandbox process: {e}") from e
        # stdin: the child reads, we write; stdout and stderr: the child writes, we read.
        ours[0], theirs[0] = theirs[0], ours[0]
        waiter: asyncio.Future[_Spawned] = loop.create_future()
        self._pending[spawn_id] = waiter
        body = {
            "spawn": {
                "id": spawn_id,
                "memory": memory,
                "data_limit": data_limit,
                "nice": nice,
                "warm": warm,
                "ahead": ahead,
            }
        }
        try:
            await self._send(orjson.dumps(body), theirs)
        except BaseException:
            self._pending.pop(spawn_id, None)
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)  # the zygote has its own copies now
        try:
            async with asyncio.timeout(self.spawn_timeout):
                spawned = await asyncio.shield(waiter)
        except BaseException as e:
            self._pending.pop(spawn_id, None)
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                # The zygote's report came in while this spawn unwound (both in one turn of
                # the loop): nobody will use the child. Kill it and close its pidfd.
                late = waiter.result()
                self._drop(late.pid, late.pidfd, late.exit)
            waiter.cancel()
            for fd in ours:
                os.close(fd)
            if isinstance(e, TimeoutError):
                raise RunError(
                    f"the fork server did not fork a child within {self.spawn_timeout:g} s"
                ) from None
            raise
        stream, feed = pipe_reader(loop, ours[1], READ_LIMIT)
        os.set_blocking(ours[2], False)
        return ForkedChild(
            pid=spawned.pid,
            pidfd=spawned.pidfd,
            server=self,
            reader=conv.LineReader(stream),
            stdin=PipeWriter(loop, ours[0]),
            stdout=feed,
            stderr_fd=ours[2],
            exit=spawned.exit,
        )


async def _exit_code(popen: subprocess.Popen[bytes] | None, within: float = 1.0) -> int | None:
    """``popen``'s exit code once it has exited, waiting up to ``within`` seconds; None if it
    has not (negative: the signal that ended it)."""
    end = time.monotonic() + within
    delay = 0.001
    while popen is not None and popen.poll() is None and time.monotonic() < end:
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.05)
    return None if popen is None else popen.returncode


async def _reap_popen(popen: subprocess.Popen[bytes], grace: float) -> None:
    """Wait for a zygote to exit (SIGKILL to its group after ``grace`` s), then reap it."""
    end = time.monotonic() + grace
    delay = 0.001
    killed = False
    while popen.poll() is None:
        if time.monotonic() >= end and not killed:
            killed = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(popen.pid, signal.SIGKILL)
            end = time.monotonic() + 5.0
        elif killed and time.monotonic() >= end:
            break
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.05)
    if popen.stderr is not None:
        popen.stderr.close()
