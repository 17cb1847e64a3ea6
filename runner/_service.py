"""The runner service: takes script steps over TCP and runs them in local confined processes.

One :class:`RunnerService` listens on an address, authenticates each connection with a shared
token (and TLS when it has a certificate), and runs the steps it is sent with a local
:class:`ScriptRunner` (the default :class:`ProcessRunner`), at most ``slots`` at once. A
step's file reads go back over the same connection to the engine, so the service needs no
access to the engine's storage. The protocol is in ``runner._wire``.

Nothing a peer sends is trusted: every line is bounded and timed, a peer that breaks the
protocol is refused or dropped without disturbing the others, and a step whose client goes
away is cancelled, which kills its process.

Connections are admitted in two stages, so strangers cannot lock out clients that hold the
token. Until it is welcomed, a connection (its TLS handshake included) has
``handshake_timeout`` seconds to say hello and counts only against ``max_unwelcomed``, a small
budget of its own: when that is full, a newcomer waits for a place, and takes that of the
oldest connection still in its handshake once that one has had ``CROWD_AGE`` seconds to
say hello, so idle sockets can never keep a real client out for long, and a burst of real
clients is never cut off. Only welcomed connections count against ``max_connections``.

The lines welcomed connections send (a script, a live step's results) share one budget of
bytes, ``line_memory``, which a line's script or records hold on to until their step is
answered (waiting for a slot included): a line that would take more than is left is read to
its end and thrown away, and the client told the service is busy (it tries another service,
or again later), or, when it would take more than the whole budget, that the line never fits
here, so a few peers cannot make the service hold a line of ``max_script_line`` on each of
``max_connections`` connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import ipaddress
import logging
import resource
import ssl
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import psutil

from runner import _wire as wire
from runner._base import (
    FileMissing,
    LiveRun,
    ProcessStats,
    RunError,
    ScriptRunner,
    Step,
    check_count,
    check_seconds,
)
from runner._live import (
    FDS_PER_PROCESS,
    count_private,
    default_live_count,
    default_live_memory,
    keeps_live,
    takes_live,
)
from runner._slots import Slots, default_slot_count
from runner._tasks import cancel_and_wait
from runner.sizes import parse_size
from sandbox import protocol
from sandbox.protocol import Script

log = logging.getLogger("codemode.runner.service")

HANDSHAKE_TIMEOUT = 5.0
IDLE_TIMEOUT = 300.0
LINE_TIMEOUT = 60.0
READ_TIMEOUT = 60.0
SLOT_WAIT = 10.0
# Request lines longer than this are parsed on a thread, off the event loop.
OFF_LOOP_LINE = 1024 * 1024


async def _on_loop(parse: Callable[..., Any], *args: Any) -> Any:
    return parse(*args)


async def _off_loop(parse: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.to_thread(parse, *args)


MAX_CONNECTIONS = 1024
# Connections in their handshake at once; a real client says hello within milliseconds.
MAX_UNWELCOMED = 64
# How long a connection has in its handshake before a newer one may take its place (at most
# half of handshake_timeout). Younger ones are never dropped: a burst of real clients (an
# engine starting a hundred scripts, a fleet reconnecting) waits for places instead.
CROWD_AGE = 0.5
# Seconds between beats while a step runs (wire version 2).
HEARTBEAT = 1.0
# The shortest: each step's connection is sent a beat that often, and --heartbeat 1e-9 was
# taken and sent 66,000 beats a second to each engine, holding the service's CPU meanwhile.
MIN_HEARTBEAT = 0.01
# The longest a live process waits for its results here (wire version 3). The engine lets a
# process go after its own live wait (a few seconds by default); this bounds a client that
# vanished without closing its connection.
LIVE_WAIT = 30.0
# Open files kept back from the connections' share of the service's limit (``ulimit -n``):
# the listening socket, the fork server's, logs, TLS (measured: 32 open running nothing).
FD_RESERVE = 64
# How often the service says it turns connections away for want of open files.
TURNED_AWAY_EVERY = 10.0
# Refused hellos: a line for each would let a peer retrying a wrong token, or a hostile one,
# fill the log (see RefusalLog). A line per host and reason in REFUSED_EVERY seconds, at most
# REFUSED_LINES such lines in that time, REFUSED_KEYS hosts and reasons remembered.
REFUSED_EVERY = 10.0
REFUSED_LINES = 10
REFUSED_KEYS = 1024


class RefusalLog:
    """The log lines of refused hellos, bounded. The first refusal of a peer host (an IPv6
    one by its /64) for a reason is logged with its peer and reason; more of the same within
    ``REFUSED_EVERY`` seconds, or past ``REFUSED_LINES`` lines in that time, are counted,
    and the counts are logged in one line ``REFUSED_EVERY`` seconds after the first of them
    (and when the service closes). ``count`` is every hello refused since the start, and
    every TLS handshake that failed (logged the same way)."""

    def __init__(self) -> None:
        self.count = 0
        self._said: OrderedDict[tuple[str, str], float] = OrderedDict()  # key -> logged at
        self._quiet: Counter[tuple[str, str]] = Counter()  # key -> refused, not logged
        self._quiet_others = 0  # past REFUSED_KEYS keys
        self._window = -REFUSED_EVERY
        self._lines = 0
        self._flush: asyncio.TimerHandle | None = None

    def refused(self, peer: str, said: str) -> None:
        """Count a refused hello of ``peer`` (``host:port``) and log it if the bounds let."""
        self.count += 1
        now = time.monotonic()
        if now - self._window >= REFUSED_EVERY:
            self._window, self._lines = now, 0
        # The reason is the text before its first colon: what follows may be the peer's.
        key = (_host_group(peer), said.split(":", 1)[0])
        logged = self._said.get(key)
        if (logged is not None and now - logged < REFUSED_EVERY) or self._lines >= REFUSED_LINES:
            if key in self._quiet or len(self._quiet) < REFUSED_KEYS:
                self._quiet[key] += 1
            else:
                self._quiet_others += 1
            if self._flush is None:
                loop = asyncio.get_running_loop()
                self._flush = loop.call_later(REFUSED_EVERY, self.flush)
            return
        self._lines += 1
        log.warning("%s: refused: %s", peer, said)
        self._said[key] = now
        self._said.move_to_end(key)
        while len(self._said) > REFUSED_KEYS:
            self._said.popitem(last=False)

    def flush(self) -> None:
        """Log the refusals counted and not logged yet, in one line."""
        self._flush = None
        quiet = sum(self._quiet.values()) + self._quiet_others
        if not quiet:
            return
        top = self._quiet.most_common(5)
        rest = quiet - sum(n for _, n in top)
        parts = [f"{n:,} from {host} ({reason})" for (host, reason), n in top]
        if rest:
            parts.append(f"{rest:,} from other hosts or for other reasons")
        log.warning(
            "refused %s more hellos, not logged one by one: %s (%s refused since the start)",
            f"{quiet:,}",
            ", ".join(parts),
            f"{self.count:,}",
        )
        self._quiet.clear()
        self._quiet_others = 0

    def close(self) -> None:
        """Log what is counted and not logged, and stop the timer."""
        if self._flush is not None:
            self._flush.cancel()
        self.flush()


def _host_group(peer: str) -> str:
    """The host of ``peer`` (``host:port``), an IPv6 address as its /64 (one site's)."""
    host = peer.rpartition(":")[0] or peer
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:  # an IPv4 client of a dual-stack socket
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{host}/64", strict=False))
    return host


def connection_room(slots: int, live_max: int) -> int | None:
    """How many connections the service may hold open at once within its open-file limit:
    what is left after the processes of its slots (running, and the warm pool's), the live
    ones that may wait, and a reserve. None when the limit is infinite."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    return soft - FD_RESERVE - FDS_PER_PROCESS * (2 * slots + live_max)


# The default line budget is this share of the machine's memory: a line being parsed takes
# about three times its bytes (the bytes, their copy, the decoded script) at its peak.
LINE_MEMORY_SHARE = 8


def default_line_memory() -> int:
    """An eighth of the machine's memory (at least 64 MiB): what the lines that welcomed
    connections send may hold together by default."""
    return max(64 * protocol.MiB, psutil.virtual_memory().total // LINE_MEMORY_SHARE)


# What a step's work hands back: the answer line, whether the connection can carry another
# request, and the live process that now waits on the connection (if any).
_Answer = tuple[bytes, bool, "_Held | None"]


# What the log says of a hello that does not parse: the peer is told why, with the line's
# text, which may hold the service's token (a client's, one character off), so the log not.
_UNLOGGED = "a malformed hello (its text is not logged, as it may hold a token)"


@dataclass(eq=False)
class _Held:
    """A live process that waits, on one client's connection, for its calls' results."""

    run: LiveRun
    files: _ForwardedFiles
    script: Script
    tenant: str
    memory: int  # as counted: its memory_bytes, or its private_bytes once measured
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    measured: bool = False
    why: str = ""

    def end(self, why: str) -> None:
        """Ask the connection that holds it to end it (it was evicted, or the service drains)."""
        if not self.ended.is_set():
            self.why = why
            self.ended.set()


class _ForwardedFiles:
    """A FileReader that asks the engine, over the step's connection, for each read.

    :meth:`watch` is the only reader of the connection while the step runs: it hands each
    answer to the read waiting for it and returns when the client goes away or sends
    something it was not asked for.
    """

    def __init__(self, conn: wire.Channel, timeout: float) -> None:
        self.conn = conn
        self.timeout = timeout
        self.broken = False  # a read went unanswered: the stream is out of step
        self._pending: tuple[asyncio.Future[bytes], int] | None = None
        self._lock = asyncio.Lock()

    async def read(self, file_id: str, offset: int, length: int) -> bytes:
        async with self._lock:
            answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
            self._pending = (answer, length)
            try:
                request = protocol.ReadRequest(file=file_id, offset=offset, len=length)
                await self.conn.send(wire.encode(request))
                async with asyncio.timeout(self.timeout):
                    return await answer
            except wire.PeerGone as e:
                self.broken = True
                raise RunError(f"the engine went away during a read of {file_id!r}: {e}") from e
            except TimeoutError:
                self.broken = True
                raise RunError(
                    f"the engine did not answer a read of {file_id!r} within {self.timeout:g} s"
                ) from None
            except asyncio.CancelledError:
                # The step ended (its deadline) while the answer was on its way: watch takes
                # that answer and drops it, and the connection carries no other step.
                self.broken = True
                raise
            finally:
                if not answer.cancelled():
                    self._pending = None

    async def watch(self) -> str:
        """Read the client's side of a step until it ends it; returns why.

        Returns (never raises) when the client closed, broke the connection, broke the
        protocol or stalled in the middle of an answer.
        """
        try:
            while True:
                line = await self.conn.line(wire.SMALL_LINE, idle=None, timeout=self.timeout)
                if line is None:
                    return "the client closed the connection mid-step"
                pending = self._pending
                if pending is None or (pending[0].done() and not pending[0].cancelled()):
                    return "the client sent a message during a step when no read was asked"
                answer, length = pending
                if answer.cancelled():  # the answer to a read the step gave up: dropped
                    self._pending = None
                body = wire.decode(line, ("bytes", "missing"))
                if isinstance(body, str):
                    if not answer.done():
                        answer.set_exception(FileMissing(body))
                    continue
                if body > length:
                    return f"the client answered a read of {length:,} bytes with {body:,}"
                data = await self.conn.exactly(body, self.timeout)
                if not answer.done():
                    answer.set_result(data)
        except wire.PeerGone as e:
            return str(e)
        except wire.WireError as e:
            return f"the client broke the protocol: {e}"
        except TimeoutError:
            return f"the client stalled mid-answer for {self.timeout:g} s"


def _digest(token: str) -> bytes:
    # Hashing first makes the comparison constant-time in the token's length too.
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class RunnerService:
    """A runner service: steps over TCP, run in local confined processes.

    ``token`` is the shared secret every client must send; ``None`` turns authentication off,
    and only an explicit ``None`` does (the ``serve`` command asks for a flag for it).
    ``runner`` runs the steps (default: a new :class:`ProcessRunner`, closed with the service;
    a runner passed in stays the caller's to close); ``slots`` is how many run at once,
    shared fairly between tenants (default: ``CODEMODE_SANDBOX_SLOTS`` or the CPU count
    clamped to 2..8), and ``slot_wait`` how long a step waits for a slot before the service
    answers ``busy``. ``tls`` wraps every connection when given.

    Timeouts: ``handshake_timeout`` for the TLS handshake and the ``hello`` line together,
    ``idle_timeout`` between requests, ``line_timeout`` from a line's first byte to its
    newline and for the client to read any of what the service sends it (a client that stops
    reading its answers is dropped, so it cannot hold a step, or a drain, for ever),
    ``read_timeout`` for the engine's answer to a file read. At most
    ``max_unwelcomed`` connections are in their handshake at once (past that, a newcomer
    waits, and the oldest is dropped for it once it is ``CROWD_AGE`` seconds old) and
    ``max_connections`` are welcomed. While a step runs, a client of wire
    version 2 gets a ``beat`` every ``heartbeat`` seconds.

    Live steps (wire version 3): a step that stops on calls may keep its process, waiting on
    the client's connection for the results, at most ``live_wait`` seconds. Waiting
    processes hold no slot; at most ``live_max`` of them, holding at most ``live_memory``
    bytes, wait at once (defaults sized for the machine), and a new one that does not fit is
    ended (those waiting stay). A process counts its resident memory until those of the waiting
    ones pass ``live_memory``, then what ending it gives back (its private memory, measured
    once: see :meth:`runner.LiveRun.private_bytes`). ``live_max=0`` or ``live_memory=0`` keeps
    none. A client that goes away ends its process.

    ``line_memory`` bounds the bytes that the lines being read (scripts, live results) hold
    together, the first 64 KiB of each aside (default: :func:`default_line_memory`), and
    what a line made holds it on while it waits for a slot and runs, until the step is
    answered. A line
    that would pass it is read to its end and dropped, and the client is answered ``busy``
    (``error`` with cause ``live`` for a live step's results, whose process is ended: the
    engine replays the step), so it runs the step elsewhere or again later; a script line that
    would pass all of it is answered ``error`` with cause ``unfit`` (no wait makes it fit).
    The connection stays usable. No line longer than ``line_memory`` is taken (the welcome's
    ``max_line``).
    """

    # The newest wire version this service speaks (a subclass may speak an older one, as a
    # service deployed before a newer client does).
    wire_version = wire.WIRE_VERSION

    def __init__(
        self,
        token: str | None,
        *,
        runner: ScriptRunner | None = None,
        slots: int | None = None,
        tls: ssl.SSLContext | None = None,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
        line_timeout: float = LINE_TIMEOUT,
        read_timeout: float = READ_TIMEOUT,
        slot_wait: float = SLOT_WAIT,
        max_script_line: int = protocol.MAX_SCRIPT_LINE,
        max_connections: int = MAX_CONNECTIONS,
        max_unwelcomed: int = MAX_UNWELCOMED,
        heartbeat: float = HEARTBEAT,
        live_wait: float = LIVE_WAIT,
        live_max: int | None = None,
        live_memory: int | None = None,
        line_memory: int | None = None,
    ) -> None:
        check_seconds("live_wait", live_wait)
        if live_max is not None:
            check_count("live_max", live_max, 0)
        # Bytes or a size word, as CodeMode's live_memory and codemode.toml take them (-1 was
        # taken as a budget, and "1gb" was a raw TypeError).
        if live_memory is not None:
            live_memory = parse_size(live_memory, "live_memory")
        if line_memory is not None:
            line_memory = parse_size(line_memory, "line_memory")
        if token is not None and not token:
            raise ValueError("the runner service's token is empty")
        timeouts = {
            "heartbeat": heartbeat,
            "handshake_timeout": handshake_timeout,
            "idle_timeout": idle_timeout,
            "line_timeout": line_timeout,
            "read_timeout": read_timeout,
        }
        for name, seconds in timeouts.items():
            check_seconds(name, seconds)  # 0 would drop every client at once, not wait for ever
        if heartbeat < MIN_HEARTBEAT:
            raise ValueError(
                f"heartbeat must be at least {MIN_HEARTBEAT:g} seconds, not {heartbeat:g}: "
                "each step's client is sent a beat that often"
            )
        # Below one, no client was ever welcomed, or no script line was ever taken.
        for name, count in (
            ("max_unwelcomed", max_unwelcomed),
            ("max_connections", max_connections),
            ("max_script_line", max_script_line),
        ):
            check_count(name, count)
        # The welcome carries these, within the wire's bounds: past them, every handshake
        # failed.
        bounds = {
            "slot_wait": (slot_wait, wire.MAX_SLOT_WAIT),
            "heartbeat": (heartbeat, wire.MAX_HEARTBEAT),
            "live_wait": (live_wait, wire.MAX_LIVE_WAIT),
        }
        for name, (seconds, most) in bounds.items():
            if not 0 <= seconds <= most:
                raise ValueError(f"{name} must be at most {most:g} seconds, not {seconds}")
        count = slots if slots is not None else default_slot_count()
        self.slots = Slots(count, script_wait=slot_wait)
        self._owns_runner = runner is None
        if runner is None:
            from runner._process import ProcessRunner

            # As many slots as the service's, which are taken first: they never make it wait.
            runner = ProcessRunner(slots=count, script_wait=slot_wait)
        self.runner = runner
        self._token = None if token is None else _digest(token)
        self.tls = tls
        self.handshake_timeout = handshake_timeout
        self.idle_timeout = idle_timeout
        self.line_timeout = line_timeout
        self.read_timeout = read_timeout
        self.slot_wait = slot_wait
        self.max_script_line = max_script_line
        self.lines = wire.LineBudget(
            line_memory if line_memory is not None else default_line_memory()
        )
        self.lines_refused = 0  # lines dropped because the line budget was full
        self.max_connections = max_connections
        self.max_unwelcomed = max_unwelcomed
        self.heartbeat = heartbeat
        self.live_wait = live_wait
        self.live_memory = live_memory if live_memory is not None else default_live_memory()
        self.live_max = live_max if live_max is not None else default_live_count(self.live_memory)
        # Past it, accepting a connection, or making a sandbox's pipes, would fail with "too
        # many open files" for every client: a newcomer is turned away instead.
        self.connection_room = connection_room(count, self.live_max)
        if self.connection_room is not None and self.connection_room < 16:
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            raise ValueError(
                f"the open-file limit ({soft}, ulimit -n) leaves room for "
                f"{max(0, self.connection_room)} connections beside {count} slots and "
                f"live_max {self.live_max}: raise the limit, or lower slots or live_max"
            )
        self.turned_away = 0  # connections closed at once for want of open files
        self._turned_away_said = -TURNED_AWAY_EVERY
        self.refusals = RefusalLog()
        # The live processes waiting on connections, least recently kept first.
        self._held: OrderedDict[_Held, None] = OrderedDict()
        self._held_memory = 0
        # Live processes being ended: their ends outlive a cancelled connection (see _end_run).
        self._ending: set[asyncio.Task[None]] = set()
        self.live_ended = 0  # waiting processes the service ended itself (evicted, expired)
        self.draining = False
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        # Connections still in their handshake, oldest first (dicts keep insertion order).
        self._unwelcomed: dict[asyncio.Task[None], tuple[wire.Channel, float]] = {}
        self._handshake_room = asyncio.Event()  # set (and made anew) as a place comes free
        self._welcomed = 0
        self.accepted = 0  # connections accepted, for tests and metrics
        self.crowded_out = 0  # connections dropped mid-handshake to make room for a newer one
        # Steps in flight, and live processes waiting on their connections: a drain waits
        # until none is left (a waiting process's end is told its client, `ended`, first).
        self._steps = 0
        self._live_waits = 0
        self._no_work = asyncio.Event()
        self._no_work.set()
        self._closed = asyncio.Event()
        self.host = ""
        self.port = 0

    @property
    def address(self) -> str:
        """``HOST:PORT`` the service listens on (after :meth:`start`)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def max_line(self) -> int:
        """The longest script line taken: ``max_script_line``, within the line budget (a line
        that fits only in more than all of it could never be read) and the bytes each line
        holds without it (so a budget of 0 still takes health checks and small steps)."""
        return min(self.max_script_line, self.lines.most)

    @property
    def line_bytes(self) -> int:
        """Bytes of the line budget that lines being read hold now."""
        return self.lines.taken

    @property
    def live_runs(self) -> int:
        """How many live processes wait on connections now."""
        return len(self._held)

    def load(self) -> wire.Load:
        return wire.Load(
            slots=self.slots.count,
            busy=self.slots.in_use,
            waiting=self.slots.waiting(),
            draining=self.draining,
        )

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen on ``host:port`` (port 0: any free port). Returns the bound address."""
        # TLS starts in _connection, not here: a handshake asyncio ran before handing the
        # connection over would hold a socket that no budget counts.
        self._server = await asyncio.start_server(self._accept, host, port, reuse_address=True)
        bound = self._server.sockets[0].getsockname()
        self.host, self.port = bound[0], bound[1]
        return self.address

    async def wait_closed(self) -> None:
        """Until the service has drained or closed."""
        await self._closed.wait()

    async def drain(self) -> None:
        """Take no new step, finish the steps in flight, then close every connection."""
        if self.draining:
            await self._closed.wait()
            return
        self.draining = True
        if self._server is not None:
            self._server.close()
        log.info(
            "draining: %d step(s) in flight, %d live process(es) waiting",
            self._steps,
            len(self._held),
        )
        for held in list(self._held):
            held.end("the runner service is draining")
        await self._no_work.wait()
        await self._cancel_connections()
        await self._close_runner()
        self.refusals.close()
        self._closed.set()

    async def aclose(self) -> None:
        """Stop now: abandon the steps in flight (their processes are killed) and close."""
        if self._steps or self._held:
            log.warning(
                "closing: %d step(s) in flight and %d live process(es) waiting abandoned; "
                "their clients run them elsewhere",
                self._steps,
                len(self._held),
            )
        self.draining = True
        if self._server is not None:
            self._server.close()
        await self._cancel_connections()
        await self._close_runner()
        self.refusals.close()
        self._closed.set()

    async def _close_runner(self) -> None:
        if self._owns_runner:
            await self.runner.aclose()

    async def _cancel_connections(self) -> None:
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._ending:
            await asyncio.gather(*self._ending, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._connection(wire.Channel(reader, writer, stall=self.line_timeout))
        except asyncio.CancelledError:
            # The service is closing. The task must not end cancelled: asyncio's stream
            # callback reports a cancelled handler as an error.
            writer.transport.abort()

    async def _connection(self, conn: wire.Channel) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.accepted += 1
        wire.keepalive(conn.writer)
        if self.draining:
            conn.abort()
            return
        if self.connection_room is not None and len(self._connections) >= self.connection_room:
            conn.abort()
            self._turn_away()
            return
        self._connections.add(task)
        welcomed = False
        until = time.monotonic() + self.handshake_timeout
        try:
            if not await self._admit(task, conn, until):
                return
            version = await self._handshake(conn, until)
            if version is None:
                return
            welcomed = True  # counted in _welcomed by _handshake
            await self._requests(conn, version)
        except wire.PeerGone as e:
            log.info("%s: %s", conn.peer, e)
        except Exception:
            log.exception("%s: the connection failed", conn.peer)
        finally:
            self._left_handshake(task)
            if welcomed:
                self._welcomed -= 1
            self._connections.discard(task)
            await conn.close(linger=0 if self.draining else 0.5)

    async def _refuse(self, conn: wire.Channel, why: str, logged: str | None = None) -> None:
        """Tell the peer ``why`` and log it (or ``logged``: what may be logged of it), as
        :class:`RefusalLog` bounds."""
        self.refusals.refused(conn.peer, why if logged is None else logged)
        with contextlib.suppress(wire.PeerGone, TimeoutError):
            async with asyncio.timeout(1.0):
                await conn.send(wire.encode(wire.Refused(error=why)))

    def _turn_away(self) -> None:
        self.turned_away += 1
        now = time.monotonic()
        if now - self._turned_away_said >= TURNED_AWAY_EVERY:
            self._turned_away_said = now
            log.warning(
                "turned away a connection: %d are open, all the open-file limit (ulimit -n) "
                "leaves room for beside the sandbox processes; %d turned away so far",
                len(self._connections),
                self.turned_away,
            )

    async def _admit(self, task: asyncio.Task[None], conn: wire.Channel, until: float) -> bool:
        """A place among the connections in their handshake, by ``until`` (else the
        connection is dropped: False). Past ``max_unwelcomed``, the oldest takes
        ``CROWD_AGE`` seconds before it is dropped for this one (it has had the longest to
        say hello); until then, this one waits for a place to come free."""
        age = min(CROWD_AGE, self.handshake_timeout / 2)
        while len(self._unwelcomed) >= self.max_unwelcomed:
            oldest, (old_conn, since) = next(iter(self._unwelcomed.items()))
            now = time.monotonic()
            if now - since >= age:
                del self._unwelcomed[oldest]
                old_conn.abort()
                self.crowded_out += 1
                log.info("dropped a connection that had not said hello, for a newer one")
                continue
            wait = min(since + age, until) - now
            if until <= now:
                conn.abort()
                return False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._handshake_room.wait()
        self._unwelcomed[task] = (conn, time.monotonic())
        return True

    def _left_handshake(self, task: asyncio.Task[None] | None) -> None:
        if task is not None and self._unwelcomed.pop(task, None) is not None:
            room, self._handshake_room = self._handshake_room, asyncio.Event()
            room.set()

    async def _handshake(self, conn: wire.Channel, until: float) -> int | None:
        """TLS, then read and check ``hello``; answer ``welcome`` or ``refused``.

        Returns the wire version agreed on when welcomed (and counted in ``_welcomed``),
        else None. TLS and the hello share one deadline, ``until`` (the connection's
        ``handshake_timeout``).
        """
        timeout = self.handshake_timeout
        if self.tls is not None:
            try:
                left = max(0.001, until - time.monotonic())
                await conn.writer.start_tls(self.tls, ssl_handshake_timeout=left)
            except (ssl.SSLError, ConnectionError, OSError) as e:
                # Bounded as refused hellos are: a scanner is a connection after another.
                self.refusals.refused(conn.peer, f"the TLS handshake failed: {e}")
                return None
        try:
            left = max(0.0, until - time.monotonic())
            line = await conn.line(wire.SMALL_LINE, idle=left, timeout=left)
        except TimeoutError:
            await self._refuse(conn, f"no hello within {timeout:g} s")
            return None
        except wire.WireError as e:
            await self._refuse(conn, f"a bad hello: {e}", _UNLOGGED)
            return None
        if line is None:
            return None
        try:
            hello: wire.Hello = wire.decode(line, ("hello",))
        except wire.WireError as e:
            await self._refuse(conn, f"the first message must be hello: {e}", _UNLOGGED)
            return None
        if self._token is not None and not hello.token:
            await self._refuse(conn, "no token: hello must carry the service's token")
            return None
        if self._token is not None and not hmac.compare_digest(_digest(hello.token), self._token):
            await self._refuse(conn, "wrong token")
            return None
        oldest = hello.version if hello.oldest is None else hello.oldest
        if oldest > hello.version:
            # Refused as no version in common, it said "the client 5 to 3; upgrade the older
            # side", which no upgrade mends.
            await self._refuse(
                conn,
                f"no wire version in common: the client's hello says it speaks {oldest} to "
                f"{hello.version}, none (its oldest is the oldest version it speaks, its "
                "version the newest)",
            )
            return None
        version = min(hello.version, self.wire_version)
        if version < max(oldest, wire.WIRE_OLDEST):
            await self._refuse(
                conn,
                f"no wire version in common: this service speaks versions {wire.WIRE_OLDEST} "
                f"to {self.wire_version}, the client {oldest} to {hello.version}; upgrade the "
                "older side",
            )
            return None
        self._left_handshake(asyncio.current_task())
        if self._welcomed >= self.max_connections:
            await self._refuse(conn, "too many connections; try again later")
            return None
        beats = version >= wire.HEARTBEAT_VERSION
        welcome = wire.Welcome(
            version=version,
            oldest=wire.WIRE_OLDEST,
            scripts=(protocol.OLDEST, protocol.VERSION),
            languages=list(self.runner.languages),
            slots=self.slots.count,
            busy=self.slots.in_use,
            waiting=self.slots.waiting(),
            draining=self.draining,
            max_line=self.max_line,
            slot_wait=self.slot_wait,
            heartbeat=self.heartbeat if beats else None,
            live_wait=self.live_wait if self._offers_live(version) else None,
        )
        self._welcomed += 1  # before the await, so two handshakes cannot both pass the cap
        try:
            await conn.send(wire.encode(welcome))
        except BaseException:
            self._welcomed -= 1
            raise
        return version

    async def _requests(self, conn: wire.Channel, version: int) -> None:
        """Answer requests until the client leaves, idles out or breaks the protocol."""
        while True:
            with self.lines.hold() as hold:
                try:
                    line = await conn.line(
                        self.max_line, idle=self.idle_timeout, timeout=self.line_timeout, hold=hold
                    )
                except TimeoutError:
                    log.info("%s: dropped: idle or too slow to finish a line", conn.peer)
                    return
                except wire.OverBudget as e:
                    hold.release()
                    if not await self._skip_line(conn, self.max_line, e):
                        return
                    busy = self._busy(self._over_budget(e))
                    await conn.send(busy)
                    continue
                except wire.WireError as e:
                    await self._fail(conn, f"dropped: {e}", "protocol")
                    return
                if line is None:
                    return
                # A large line is parsed on a thread: on the loop, a 30 MB one took 5 s, and
                # every other connection's heartbeats and steps waited (a client took the
                # service for gone). On a thread the loop still runs between its turns.
                parse = _off_loop if len(line) > OFF_LOOP_LINE else _on_loop
                # What decoding it takes, counted as it is parsed (some 0.45 s of CPU for 30 MB
                # at most: wire.decoding_cost).
                try:
                    hold.reserve(len(line), await parse(wire.decoding_cost, line))
                except wire.OverBudget as e:  # read whole: the connection is in step
                    hold.release()
                    self._line_refused(conn, e)
                    # Draining, it takes no script whatever its line: unfit would tell the
                    # engine no service can take the step, though its replacement may.
                    if self.draining:
                        await self._fail(conn, "the runner service is draining", "draining")
                    elif e.never:  # busy, the engine would send it again until queue_timeout
                        await self._fail(conn, self._over_budget(e), "unfit")
                    else:
                        await conn.send(self._busy(self._over_budget(e)))
                    continue
                try:
                    kind, body = await parse(wire.envelope, line)
                    del line
                    if kind == "load":
                        await conn.send(wire.encode(self.load()))
                        continue
                    if kind != "script":
                        raise wire.WireError(
                            f"{protocol.a_kind(kind)} message where script or load was expected"
                        )
                    if self.draining:
                        await self._fail(conn, "the runner service is draining", "draining")
                        continue
                    script, tenant, live = await parse(wire.decode_body, kind, body, ("script",))
                    del body
                    if live and not self._offers_live(version):
                        raise wire.WireError("a live step was asked for, which was not offered")
                except wire.WireError as e:
                    await self._fail(conn, str(e), "protocol")
                    return
                # The line is parsed and gone, but the script it made is held while it waits
                # for a slot and while it runs (about as many bytes): its share of the budget
                # is given back once the step is answered.
                files = _ForwardedFiles(conn, self.read_timeout)
                keep, held = await self._exchange(
                    conn, version, script.id, files, self._work(script, tenant, files, live), hold
                )
                del script
            while held is not None:
                keep, held = await self._wait_live(conn, version, held)
            if not keep:
                return

    def _over_budget(self, e: wire.OverBudget) -> str:
        if e.never:
            return (
                f"the runner service can never take this line ({e}); send it to another "
                "service, or start this one with a larger --line-memory"
            )
        return (
            f"the runner service's line budget is full ({e}); send the line again shortly or "
            "to another service, or start the service with a larger --line-memory"
        )

    async def _skip_line(self, conn: wire.Channel, bound: int, e: wire.OverBudget) -> bool:
        """Read to the end of a line the budget had no room for, holding none of it, so the
        connection stays in step. False: the connection was dropped meanwhile."""
        self._line_refused(conn, e)
        try:
            await conn.skip_line(bound, self.line_timeout)
        except TimeoutError:
            log.info("%s: dropped: too slow to finish a line", conn.peer)
            return False
        except wire.WireError as e:
            await self._fail(conn, f"dropped: {e}", "protocol")
            return False
        return True

    def _line_refused(self, conn: wire.Channel, e: wire.OverBudget) -> None:
        self.lines_refused += 1
        log.warning("%s: a line was dropped: %s", conn.peer, e)

    def _offers_live(self, version: int) -> bool:
        return (
            version >= wire.LIVE_WIRE_VERSION
            and keeps_live(self.live_max, self.live_memory)
            and takes_live(self.runner)
        )

    async def _fail(self, conn: wire.Channel, why: str, cause: str) -> None:
        if cause == "protocol":
            # It may name what the client sent (a key of its script's): escaped, as in the
            # client's answer, so no line break of the client's writes a line of the log.
            log.warning("%s: %s", conn.peer, wire.peer_text(why))
        with contextlib.suppress(wire.PeerGone, TimeoutError):
            line = wire.encode(wire.Failure(error=why, cause=cause))
            async with asyncio.timeout(1.0):
                await conn.send(line)

    async def _exchange(
        self,
        conn: wire.Channel,
        version: int,
        label: str,
        files: _ForwardedFiles,
        work: Coroutine[Any, Any, _Answer],
        hold: wire.LineHold,
    ) -> tuple[bool, _Held | None]:
        """Run one step (or live segment) for the client and send its answer: whether the
        connection can carry another request, and the live process that waits on it now.
        ``hold`` is the share of the line budget of the line the step came in, which its
        script or records held while they waited for a slot and ran: given back before the
        answer goes out (and by the caller, however the step ends)."""
        self._steps += 1
        self._no_work.clear()
        watcher = asyncio.create_task(files.watch())
        working = asyncio.create_task(work)
        beats = []
        if version >= wire.HEARTBEAT_VERSION:
            beats.append(asyncio.create_task(self._beat(conn)))
        tasks: list[asyncio.Task[Any]] = [watcher, working, *beats]
        handed: _Held | None = None
        try:
            await asyncio.wait({watcher, working}, return_when=asyncio.FIRST_COMPLETED)
            if not working.done():
                # The client went away or broke the protocol: abandon the step; cancelling
                # the local run kills its process (waited for, as it is not gathered: a
                # gather the service's close cancels would cancel it again, see below). A
                # client that broke it is told why (one that left hears nothing), after the
                # beats stop: no beat may follow.
                await cancel_and_wait(working)
                for task in beats:
                    task.cancel()
                await asyncio.gather(*beats, return_exceptions=True)
                await self._fail(conn, f"step {label} abandoned: {watcher.result()}", "protocol")
                return False, None
            answer, keep, held = working.result()
            if held is not None:
                self._keep(held)  # in the budget before the client hears it waits
            # No beat may follow the answer: the client reads the next line as a new one.
            for task in beats:
                task.cancel()
            await asyncio.gather(*beats, return_exceptions=True)
            hold.release()
            await conn.send(answer)
            keep = keep and not files.broken
            if keep:
                handed = held  # it waits on this connection now; otherwise it ends below
            return keep, handed
        finally:
            for task in tasks:
                # Once: a local run cancelled again while it ends (as it reaps its
                # process) leaves the process's pipes open.
                if not task.cancelling():
                    task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            # A live process nobody waits on any more (the answer did not go out, the client
            # left meanwhile, the connection is done): it ends here.
            if working.done() and not working.cancelled() and working.exception() is None:
                held = working.result()[2]
                if held is not None and held is not handed:
                    self._unkeep(held)
                    await self._end_run(held.run)
            self._steps -= 1
            self._work_done()

    def _live_wait_over(self) -> None:
        self._live_waits -= 1
        self._work_done()

    def _work_done(self) -> None:
        if self._steps == 0 and self._live_waits == 0:
            self._no_work.set()

    async def _beat(self, conn: wire.Channel) -> None:
        """Send a beat every ``heartbeat`` seconds until cancelled or the connection breaks.

        Each beat is one whole write, so it never lands inside another message.
        """
        line = wire.encode(wire.Beat())
        with contextlib.suppress(wire.PeerGone):
            while True:
                await asyncio.sleep(self.heartbeat)
                await conn.send(line)

    async def _work(
        self, script: Script, tenant: str, files: _ForwardedFiles, live: bool
    ) -> _Answer:
        """Take a slot and run the step. Returns the line that answers it."""
        why = protocol.unfit(script, languages=self.runner.languages)
        if why is not None:
            why = f"this runner service cannot run the step: {why}"
            return wire.encode(wire.Failure(error=why, cause="unfit")), True, None
        try:
            use = await self.slots.acquire(tenant)
        except RunError:
            return self._busy(), True, None
        try:
            try:
                if live:
                    step = await self.runner.run(script, files, tenant=tenant, live=True)
                else:
                    step = await self.runner.run(script, files, tenant=tenant)
            except RunError as e:
                return wire.encode(wire.Failure(error=str(e), cause="unavailable")), True, None
            except Exception as e:
                log.exception("step %s: the local runner failed", script.id)
                why = f"the runner service's local runner failed: {type(e).__name__}: {e}"
                return wire.encode(wire.Failure(error=why, cause="unavailable")), False, None
            return self._answer(step, use.waited, script, tenant, files)
        finally:
            self.slots.release(use)

    def _busy(self, why: str | None = None) -> bytes:
        if why is None:
            why = f"no slot came free within {self.slot_wait:g} s"
        busy = wire.Busy(
            error=why,
            slots=self.slots.count,
            busy=self.slots.in_use,
            waiting=self.slots.waiting(),
        )
        return wire.encode(busy)

    def _answer(
        self, step: Step, waited: float, script: Script, tenant: str, files: _ForwardedFiles
    ) -> _Answer:
        """The ``step`` line, and the live process it leaves waiting (if any)."""
        if step.process is None:
            step.process = ProcessStats()
        step.process.wait_ms += waited * 1000
        run, step.live = step.live, None
        if run is None:
            return wire.encode_step(step), True, None
        held = _Held(run, files, script, tenant, memory=max(0, int(run.memory_bytes)))
        return wire.encode_step(step, wire.LiveOffer(memory=held.memory)), True, held

    # ---- live processes waiting on connections ----

    async def _wait_live(
        self, conn: wire.Channel, version: int, held: _Held
    ) -> tuple[bool, _Held | None]:
        """Keep ``held`` waiting for the client's results, within the live budget; then resume
        it, or end it. Returns as :meth:`_exchange` does. It was counted in the live budget
        when its answer went out (:meth:`_exchange`)."""
        if self.draining:
            held.end("the runner service is draining")
        # The client's own limits size the line; never past what a script line may be.
        bound = min(protocol.results_bound(held.script.limits), self.max_line)
        hold = self.lines.hold()
        reading = asyncio.create_task(
            conn.line(bound, idle=self.live_wait, timeout=self.line_timeout, hold=hold)
        )
        ending = asyncio.create_task(held.ended.wait())
        going_on = False
        self._live_waits += 1
        self._no_work.clear()
        try:
            await asyncio.wait({reading, ending}, return_when=asyncio.FIRST_COMPLETED)
            if held.ended.is_set():  # its results may have come too: it is out of the budget
                return await self._end_held(conn, held, held.why)
            try:
                line = reading.result()
            except TimeoutError:
                # `live_wait` bounds the wait for the line to begin, `line_timeout` its
                # sending once begun (a client on a slow link, or one that trickles it).
                why = (
                    f"its results line began within {self.live_wait:g} s but did not end "
                    f"within {self.line_timeout:g} s more"
                    if conn.buffered()
                    else f"no results came within {self.live_wait:g} s"
                )
                return await self._end_held(conn, held, why)
            except wire.OverBudget as e:
                # Its results cannot be read now; the process is ended (below), and the
                # engine, whose log holds them, replays the step.
                hold.release()
                if not await self._skip_line(conn, bound, e):
                    return False, None
                why = f"the live process cannot go on: {self._over_budget(e)}"
                await self._fail(conn, why, "live")
                return True, None
            except wire.WireError as e:
                await self._fail(conn, f"dropped: {e}", "protocol")
                return False, None
            except wire.PeerGone as e:
                log.info("%s: live step %s ended: %s", conn.peer, held.script.id, e)
                return False, None
            if line is None:
                log.info("%s: live step %s ended: the client left", conn.peer, held.script.id)
                return False, None
            try:
                parse = _off_loop if len(line) > OFF_LOOP_LINE else _on_loop
                hold.reserve(len(line), await parse(wire.decoding_cost, line))
            except wire.OverBudget as e:  # as one past the budget as it is read (above)
                self._line_refused(conn, e)
                why = f"the live process cannot go on: {self._over_budget(e)}"
                await self._fail(conn, why, "live")
                return True, None
            try:
                records = protocol.decode_resume(line)
            except protocol.ProtocolError as e:
                await self._fail(conn, f"dropped: {e}", "protocol")
                return False, None
            del line
            if records is None:  # the client ended it
                return True, None
            going_on = True
        finally:
            for task in (reading, ending):
                task.cancel()
            await asyncio.gather(reading, ending, return_exceptions=True)
            if not going_on:
                self._unkeep(held)
                hold.release()  # the results line was given up
                self._live_wait_over()  # its client was told; the drain waits on its end
                await self._end_run(held.run)
        # The records the line made are held while they wait for a slot and go to the
        # process: the line's share of the budget is given back once the segment is answered.
        # The process stays in the live budget until its segment is over (see _resume).
        try:
            return await self._exchange(
                conn, version, held.script.id, held.files, self._resume(held, records), hold
            )
        finally:
            self._unkeep(held)
            hold.release()
            self._live_wait_over()  # the segment counted as a step from its start

    async def _end_held(self, conn: wire.Channel, held: _Held, why: str) -> tuple[bool, None]:
        """End a waiting process the client did not end, and tell the client why."""
        self._unkeep(held)  # out of the budget before the client hears of it
        self.live_ended += 1
        log.info("%s: live step %s ended: %s", conn.peer, held.script.id, why)
        await self._end_run(held.run)
        with contextlib.suppress(wire.PeerGone, TimeoutError):
            async with asyncio.timeout(1.0):
                await conn.send(wire.encode(wire.Ended(error=why)))
        return False, None

    async def _resume(self, held: _Held, records: list[protocol.Record]) -> _Answer:
        """Take a slot and run the live process's next segment. The process counts in the
        live budget until then: it lives on while it waits for the slot (on a busy service,
        every client's results waiting for one held a process the budget did not count, past
        ``live_max`` and the file descriptors it was sized for); it leaves the budget before
        its answer's live process, if any, is kept."""
        try:
            use = await self.slots.acquire(held.tenant)
        except RunError:
            self._unkeep(held)
            await self._end_run(held.run)
            return self._busy(), True, None
        except BaseException:
            self._unkeep(held)
            raise
        try:
            try:
                step = await held.run.resume(records)
            except RunError as e:
                # The process is gone or cannot go on (and was ended): the client replays.
                why = f"the live process cannot go on: {e}"
                return wire.encode(wire.Failure(error=why, cause="live")), True, None
            except Exception as e:
                log.exception("live step %s: the local runner failed", held.script.id)
                await self._end_run(held.run)
                why = f"the runner service's local runner failed: {type(e).__name__}: {e}"
                return wire.encode(wire.Failure(error=why, cause="unavailable")), False, None
            return self._answer(step, use.waited, held.script, held.tenant, held.files)
        finally:
            self._unkeep(held)
            self.slots.release(use)

    def _keep(self, held: _Held) -> None:
        """Count ``held`` in the live budget, or end it when the budget has no room for it:
        the processes kept stay until their results come (ending the least recently kept
        for it thrashes, as engine._live.LiveRuns.keep says)."""
        self._held[held] = None
        self._held_memory += held.memory
        # Past the memory budget by resident sizes: count what each process really costs.
        self._held_memory = count_private(self._held, self._held_memory, self.live_memory)
        if len(self._held) > self.live_max or self._held_memory > self.live_memory:
            held.end("it was ended for room (the runner service's live budget is full)")
            self._unkeep(held)

    async def _end_run(self, run: LiveRun) -> None:
        """End a live process. Cancelling the caller (the service closing its connections)
        does not stop the end half-way, which would leave the process and its pipes behind:
        it goes on, and the service waits for it before it closes its runner."""
        task = asyncio.create_task(_close_quietly(run))
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)
        await asyncio.shield(task)

    def _unkeep(self, held: _Held) -> None:
        if held in self._held:
            del self._held[held]
            self._held_memory -= held.memory


async def _close_quietly(run: LiveRun) -> None:
    # close() never raises by contract; a local runner's bug must not take the service down.
    with contextlib.suppress(Exception):
        await run.close()
