"""RemoteRunner: a ScriptRunner that sends each step to one of several runner services.

Each step goes, on a connection it has to itself while it runs (TCP, TLS when configured), to
the service that looks least busy: the fewest steps per slot, counting this client's steps in
flight and the other busy slots and waiting steps the service reported when it last welcomed a
connection, ties taken in turn. The client
answers the step's file reads from the engine's :class:`FileReader`, so services need no
access to the engine's storage. The protocol is in ``runner._wire``.

A service that cannot be reached, refuses the connection, breaks the protocol, is draining,
or goes away mid-step is taken out of rotation for ``cooldown`` seconds, and the step is tried
on the next service: a step is a pure function of its ``Script`` (tool calls happen in the
engine), so running it again elsewhere is safe. When no service can take a step,
:meth:`RemoteRunner.run` raises :class:`RunError` and the engine puts the step back on its
queue.

While a step runs, a service of wire version 2 sends a beat every second or so; a service
that says nothing for ``silence`` seconds mid-step (stopped, swapped out, its machine gone
without a reset) is counted as gone, and the step runs on another service at once instead of
after its whole deadline.

Live steps (wire version 3, ``run(live=True)``): a step that stops on calls may leave its
process waiting on its service; the step's connection stays open, held by the
:class:`RemoteLive` the step carries, and :meth:`RemoteLive.resume` sends the results over it.
A service that goes away meanwhile (killed, the connection dropped, silent past ``silence``)
is taken out of rotation and the resume raises ``RunError``: the engine, whose log holds the
results, replays the step on another service. A service of an older wire version gets replay
steps.

A connection that ended its step cleanly is kept open (up to ``keep_idle`` per service) for
the next step to that service, which saves the TCP and TLS handshakes and the hello; one the
service closed while idle is noticed, and the step is sent again on a new connection.
Measured on loopback (2 cores, a service that answers at once): a step costs 4.7 ms on a new
connection (10 ms over TLS) and 0.6 ms on a kept one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner import _conversation as conv
from runner import _wire as wire
from runner._base import (
    FileReader,
    LiveRun,
    ProcessStats,
    RunError,
    ScriptRunner,
    Step,
    check_count,
    check_seconds,
    closed_runner,
)
from runner._live import mismatch
from sandbox import protocol
from sandbox.protocol import Script

TOKEN_ENV = "CODEMODE_RUNNER_TOKEN"
# A token file holds one short line; a larger file is a mistake (or /dev/zero).
MAX_TOKEN_FILE = 4096
CONNECT_TIMEOUT = 5.0
COOLDOWN = 10.0
# How long past a step's own deadline and the service's slot wait the client waits for the
# step's answer before it counts the service as gone (covers starting the process).
STEP_MARGIN = 60.0
# Connections kept open per service between steps.
KEEP_IDLE = 4
# Seconds without a word from a service mid-step (it sends a beat every second) before the
# client counts it as gone and runs the step elsewhere.
SILENCE = 5.0
# What a service says it measured of a step's process; file_bytes is what this client served.
_MEASURES = ("wall_ms", "cpu_ms", "max_rss_bytes", "wait_ms")
# Those of them that pass within the step are no longer than it may take (see _past), give
# or take at least this much.
_TIMES_SLACK_MS = 1000.0
# The keys of a [codemode.runner] table a remote runner takes.
OPTIONS = frozenset(
    {
        "kind",
        "addresses",
        "token",
        "token_file",
        "token_env",
        "tls",
        "ca_file",
        "server_name",
        "connect_timeout",
        "cooldown",
        "silence",
    }
)


class _Skip(Exception):
    """This service cannot take this step, but is healthy: try the next one. ``lasting``:
    nor will it ever take this step as it is (its line is over the service's bound or takes
    more than its whole line budget to decode, its language or limits are not the
    service's), so a step every service skips so fails at once."""

    def __init__(self, message: str, *, lasting: bool = False) -> None:
        super().__init__(message)
        self.lasting = lasting


class _Down(Exception):
    """This service failed: take it out of rotation and try the next one."""


class _Refused(_Down):
    """This client's configuration does not fit the service: it refused the token, they
    share no wire version, or its TLS certificate does not verify against the client's CA
    and server name. Waiting will
    not change that, so a step that meets only these fails at once."""


class _Ended(Exception):
    """The live process cannot go on: the service ended it while it waited (its live wait
    passed, it needed the room, it drains) and closed the connection, or it could not go on
    (``keeps``: the connection takes requests again). Healthy, but the step must replay."""

    def __init__(self, message: str, *, keeps: bool = False) -> None:
        super().__init__(message)
        self.keeps = keeps


class _Stale(_Down):
    """The connection ended before the service said anything about the step.

    On a connection kept from an earlier step, the service most likely closed it while it was
    idle, so the step is sent again on a new connection to the same service.
    """


_SPEAKS_TLS = (
    "it speaks TLS and this client connects without it: set tls (and ca_file for the "
    "service's certificate) in the runner's config"
)


async def _speaks_tls(remote: _Remote, timeout: float) -> bool:
    """Whether the service at ``remote`` completes a TLS handshake (its certificate not
    checked: only to tell a client without TLS why the service dropped its hello)."""
    probe = ssl.create_default_context()
    probe.check_hostname = False
    probe.verify_mode = ssl.CERT_NONE
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(
                remote.host, remote.port, ssl=probe, ssl_handshake_timeout=timeout
            )
    except (OSError, TimeoutError, ssl.SSLError):
        return False
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError, TimeoutError):
        async with asyncio.timeout(1):
            await writer.wait_closed()
    return True


def _check_fit(welcome: wire.Welcome, script: Script, line_bytes: int) -> None:
    """Raise _Skip or _Down when the service cannot take this step, before it is sent."""
    why = protocol.unfit(script, *welcome.scripts, welcome.languages)
    if why is not None:
        raise _Skip(why, lasting=True)
    if welcome.draining:
        raise _Down("it is draining")
    if line_bytes > welcome.max_line:
        raise _Skip(
            f"the step's script line is {line_bytes:,} bytes, over its bound of "
            f"{welcome.max_line:,} (the service's --line-memory)",
            lasting=True,
        )


@dataclass
class _Remote:
    """What the client knows of one service."""

    address: str
    host: str
    port: int
    down_until: float = float("-inf")
    why: str = ""
    inflight: int = 0  # this client's steps on it now
    slots: int = 1  # as last reported
    others: int = 0  # busy slots that are not this client's, as last reported
    steps: int = 0  # steps it answered for this client
    failures: int = 0  # times it was taken out of rotation
    abandoned: int = 0  # steps it went away in the middle of (run again elsewhere)
    live: int = 0  # live processes of this client's waiting on it now
    refused_us: bool = False  # it refused our token or failed our TLS check: a config error
    idle: list[tuple[wire.Channel, wire.Welcome, asyncio.AbstractEventLoop]] = field(
        default_factory=list
    )  # connections kept open between steps

    def score(self) -> float:
        return (self.inflight + self.others) / max(self.slots, 1)


class RemoteRunner(ScriptRunner):
    """Runs each step on one of the runner services at ``addresses`` (``HOST:PORT`` each).

    ``token`` is the services' shared token. ``tls``: ``None``/``False`` for plain TCP,
    ``True`` for TLS checked against the system's certificate authorities, or an
    ``ssl.SSLContext``; ``ca`` (a PEM file) turns TLS on and checks the services'
    certificates against it; ``server_hostname`` overrides the name checked. A service that
    fails is left out of rotation for ``cooldown`` seconds (by ``clock``). ``connect_timeout``
    bounds the connection and the handshake; a step's answer may take its own deadline, the
    service's slot wait and ``step_margin`` seconds, but a service that sends heartbeats and
    goes ``silence`` seconds without a word mid-step, or reads nothing this client sends it
    for as long, is counted as gone (at least three of its heartbeat intervals; a service
    without heartbeats may read nothing for ``step_margin`` seconds). Up to ``keep_idle``
    connections per service stay open between steps.

    ``run`` raises :class:`RunError` only when no service could take the step; a script that
    fails is a failed :class:`Step`, as with every runner.
    """

    # The newest wire version this client speaks (a subclass may speak an older one, as a
    # client deployed before a newer service does).
    wire_version = wire.WIRE_VERSION

    def __init__(
        self,
        addresses: Sequence[str],
        token: str,
        *,
        tls: bool | ssl.SSLContext | None = None,
        ca: str | os.PathLike[str] | None = None,
        server_hostname: str | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
        cooldown: float = COOLDOWN,
        step_margin: float = STEP_MARGIN,
        keep_idle: int = KEEP_IDLE,
        silence: float = SILENCE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # Each would fail or misjudge every step: a connect that may take no time, a step
        # given less than its own allowance.
        check_seconds("silence", silence)
        check_seconds("connect_timeout", connect_timeout)
        check_seconds("cooldown", cooldown, zero=True)
        check_seconds("step_margin", step_margin, zero=True)
        check_count("keep_idle", keep_idle, 0)
        if isinstance(addresses, str):
            addresses = [addresses]
        if not addresses:
            raise ValueError("a RemoteRunner needs at least one runner service address")
        if not token:
            raise ValueError(
                f"a RemoteRunner needs the services' token (from a file or ${TOKEN_ENV})"
            )
        self._remotes = [_Remote(a, *wire.parse_address(a)) for a in addresses]
        self._token = token
        self._tls = _tls_context(tls, ca)
        self.server_hostname = server_hostname
        self.connect_timeout = connect_timeout
        self.cooldown = cooldown
        self.step_margin = step_margin
        self.keep_idle = keep_idle
        self.silence = silence
        self.clock = clock
        self._turn = 0
        self._closed = False
        # The live runs this client holds connections for and nobody closed yet.
        self._live: weakref.WeakSet[RemoteLive] = weakref.WeakSet()

    @classmethod
    def from_options(
        cls,
        options: Mapping[str, Any],
        *,
        base: str | os.PathLike[str] | None = None,
        environ: Mapping[str, str] | None = None,
        where: str = "[codemode.runner]",
    ) -> RemoteRunner:
        """A RemoteRunner from a ``[codemode.runner]`` table with ``kind = "remote"``.

        Keys: ``addresses`` (list of ``HOST:PORT``, required); the token from ``token_file``
        (a path, relative to ``base``), else ``token``, else the environment variable named by
        ``token_env`` (``CODEMODE_RUNNER_TOKEN`` by default); ``tls`` (bool), ``ca_file`` (PEM,
        turns TLS on), ``server_name`` (the name the certificates must carry),
        ``connect_timeout``, ``cooldown`` and ``silence`` (seconds). Raises ``ValueError``
        naming the key at fault after ``where`` (the table, and its file if it has one).
        """
        unknown = sorted(set(options) - OPTIONS)
        if unknown:
            raise ValueError(
                f"{where} has unknown key(s) {', '.join(unknown)}; "
                f"a remote runner takes {', '.join(sorted(OPTIONS))}"
            )
        if options.get("kind", "remote") != "remote":
            raise ValueError(f"{where} kind = {options['kind']!r} is not a remote runner")
        addresses = options.get("addresses")
        if (
            not isinstance(addresses, list)
            or not addresses
            or not all(isinstance(a, str) for a in addresses)
        ):
            raise ValueError(
                f'{where} addresses must be a list of "HOST:PORT" strings, '
                'for example addresses = ["10.0.0.5:7300"]'
            )
        root = Path(base) if base is not None else Path.cwd()
        env = os.environ if environ is None else environ
        inline = options.get("token")
        token_file = options.get("token_file")
        if token_file is None and isinstance(inline, str) and inline:
            token = inline
        else:
            # Its errors name the key that led to the file or the variable.
            keys = [k for k in ("token_file", "token_env") if options.get(k) is not None]
            token = read_token(
                token_file,
                env_name=options.get("token_env", TOKEN_ENV),
                base=root,
                environ=env,
                where=" ".join([where, *keys[:1]]),
            )
        ca = options.get("ca_file")
        try:
            return cls(
                addresses,
                token,
                tls=bool(options.get("tls", False)) or None,
                ca=None if ca is None else root / ca,
                server_hostname=options.get("server_name"),
                connect_timeout=float(options.get("connect_timeout", CONNECT_TIMEOUT)),
                cooldown=float(options.get("cooldown", COOLDOWN)),
                silence=float(options.get("silence", SILENCE)),
            )
        except (OSError, ssl.SSLError) as e:
            raise ValueError(
                f"{where} ca_file {ca if ca is None else root / ca}: cannot load it: {e}"
            ) from e

    @property
    def addresses(self) -> list[str]:
        return [r.address for r in self._remotes]

    def out_of_rotation(self) -> dict[str, str]:
        """The services left out of rotation now, each with why."""
        now = self.clock()
        return {r.address: r.why for r in self._remotes if r.down_until > now}

    @property
    def live_runs(self) -> int:
        """How many live processes on services this client holds now (made, not closed)."""
        return len(self._live)

    def status(self) -> dict[str, dict[str, Any]]:
        """Per service: steps it answered, times it failed, steps it went away in the middle
        of, steps in flight, live processes of this client waiting on it, and if it is out
        of rotation, for how long more and why."""
        now = self.clock()
        return {
            r.address: {
                "steps": r.steps,
                "failures": r.failures,
                "abandoned": r.abandoned,
                "inflight": r.inflight,
                "live": r.live,
                "slots": r.slots,
                "out_for": max(0.0, r.down_until - now),
                "why": r.why if r.down_until > now else "",
            }
            for r in self._remotes
        }

    def __repr__(self) -> str:
        down = self.out_of_rotation()
        return f"RemoteRunner({self.addresses!r}, out_of_rotation={sorted(down)!r})"

    async def run(
        self,
        script: Script,
        files: FileReader | None = None,
        *,
        tenant: str = "default",
        live: bool = False,
    ) -> Step:
        """As :meth:`ScriptRunner.run`. With ``live``, a step of a service of wire version 3
        that stops on calls may leave its process waiting there (``Step.live`` is then a
        :class:`RemoteLive`, which holds the step's connection)."""
        if self._closed:
            raise closed_runner("this remote runner")
        now = self.clock()
        reasons: list[str] = []
        usable: list[_Remote] = []
        for remote in self._remotes:
            if remote.down_until > now:
                left = remote.down_until - now
                # The cause first: it is what the host acts on (out of rotation: the wait).
                reasons.append(
                    f"{remote.address}: {remote.why} (out of rotation for {left:.1f} s more)"
                )
            else:
                usable.append(remote)
        self._turn += 1
        n = len(self._remotes)
        order = sorted(usable, key=lambda r: (r.score(), (self._remotes.index(r) - self._turn) % n))
        never: set[str] = set()  # the services that will never take this step as it is
        for remote in order:
            try:
                step = await self._run_on(remote, script, files, tenant, live)
                remote.steps += 1
                remote.refused_us = False
                return step
            except _Skip as e:
                if e.lasting:
                    never.add(remote.address)
                reasons.append(f"{remote.address}: {e}")
            except _Down as e:
                remote.down_until = self.clock() + self.cooldown
                remote.why = str(e)
                remote.failures += 1
                remote.refused_us = isinstance(e, _Refused)
                reasons.append(f"{remote.address}: {e}")
        # Every service refusing our token or certificate check will not change by waiting:
        # say so at once.
        permanent = all(r.refused_us or r.address in never for r in self._remotes)
        raise RunError(
            f"no runner service could take step {script.id!r}: " + "; ".join(reasons),
            permanent=permanent,
        )

    async def _run_on(
        self, remote: _Remote, script: Script, files: FileReader | None, tenant: str, live: bool
    ) -> Step:
        remote.inflight += 1
        sent = False
        try:
            for fresh in (False, True):
                conn, welcome, reused = await self._checkout(remote, fresh=fresh)
                # A service of script version 2 takes the step without compute_left_ms.
                script = protocol.fit(script, welcome.scripts[1])
                asks = (
                    live
                    and welcome.version >= wire.LIVE_WIRE_VERSION
                    and welcome.live_wait is not None
                    and script.version >= protocol.LIVE_VERSION
                )
                line = wire.encode_script(script, tenant, live=asks)
                keep = handed = False
                try:
                    _check_fit(welcome, script, len(line))
                    # Before the send: the service runs the step from when the line reaches
                    # it, however long this loop is busy before it reads again.
                    began = time.monotonic()
                    try:
                        await conn.send(line)
                    except wire.PeerGone as e:
                        raise _Stale(str(e)) from None
                    sent = True
                    server = conv.FileServer(script, files)
                    step = await self._converse(
                        conn,
                        welcome,
                        script,
                        server,
                        asks=asks,
                        known=len(script.records),
                        began=began,
                    )
                    if step.live is not None:
                        # The process waits on the service, on this connection, which the
                        # live run holds from now on.
                        handed = True
                        step.live = RemoteLive(
                            self,
                            remote,
                            conn,
                            welcome,
                            script,
                            server,
                            known=len(script.records),
                            calls=list(step.calls),
                            memory=step.live.memory,
                        )
                        return step
                    keep = True
                    return step
                except _Skip:
                    keep = True  # the service answered: the connection is in step
                    raise
                except _Stale:
                    if reused:
                        continue  # most likely closed while idle: again on a new connection
                    raise
                finally:
                    if keep:
                        await self._checkin(remote, conn, welcome)
                    elif not handed:
                        # Mid-step (cancelled, the file store failed, the service broke): a
                        # reset makes the service abandon the step and kill its process at once.
                        conn.abort()
            raise AssertionError("unreachable: a fresh connection is never retried")
        except _Down:
            if sent:
                remote.abandoned += 1  # it took the step and went away: it runs elsewhere
            raise
        finally:
            remote.inflight -= 1

    async def _checkout(
        self, remote: _Remote, *, fresh: bool
    ) -> tuple[wire.Channel, wire.Welcome, bool]:
        """An idle connection to ``remote`` (unless ``fresh``), or a new one. True: reused."""
        loop = asyncio.get_running_loop()
        while remote.idle and not fresh:
            conn, welcome, owner = remote.idle.pop()
            if owner is loop and conn.usable():
                return conn, welcome, True
            with contextlib.suppress(Exception):
                conn.abort()
        conn, welcome = await self._connect(remote)
        return conn, welcome, False

    async def _checkin(self, remote: _Remote, conn: wire.Channel, welcome: wire.Welcome) -> None:
        """Keep a connection whose exchange ended cleanly for the next step, or close it."""
        if not self._closed and conn.usable() and len(remote.idle) < self.keep_idle:
            remote.idle.append((conn, welcome, asyncio.get_running_loop()))
        else:
            await conn.close()

    async def _connect(self, remote: _Remote) -> tuple[wire.Channel, wire.Welcome]:
        """Open a connection and shake hands. Raises :class:`_Down` naming what failed."""
        timeout = self.connect_timeout
        try:
            # Within: this host stopped meanwhile (SIGSTOP, a paused virtual machine) is no
            # service that could not be reached.
            async with conv.within(timeout):
                reader, writer = await asyncio.open_connection(
                    remote.host,
                    remote.port,
                    ssl=self._tls,
                    server_hostname=(self.server_hostname or remote.host) if self._tls else None,
                    ssl_handshake_timeout=timeout if self._tls else None,
                )
        except TimeoutError:
            raise _Down(f"could not connect within {timeout:g} s") from None
        except ssl.SSLCertVerificationError as e:
            raise _Refused(
                f"its TLS certificate failed verification ({e.verify_message}); set ca_file "
                "to the CA that signed the service's certificate, and server_name to a name "
                "the certificate carries ([codemode.runner] in codemode.toml; "
                "RemoteRunner(ca=..., server_hostname=...) in code)"
            ) from None
        except ssl.SSLError as e:
            if e.reason == "WRONG_VERSION_NUMBER":
                # What answered is no TLS server: a service run without --cert, which
                # waiting will not change (it took the service out of rotation, to retry).
                raise _Refused(
                    "it does not speak TLS (WRONG_VERSION_NUMBER): give the service --cert "
                    "and --key, or connect without tls"
                ) from None
            raise _Down(
                f"the TLS handshake failed ({e}); check tls, ca and the certificate"
            ) from None
        except socket.gaierror as e:
            # No such host is no service that is down: say which name to check. Still
            # retried: a name may resolve once its service is up (a pod's, in a cluster).
            raise _Down(
                f"could not find the host {remote.host!r}: {e.strerror or e}; check the "
                "address's host name"
            ) from None
        except OSError as e:
            raise _Down(
                f"could not connect: {e.strerror or e} (is the runner service running there?)"
            ) from None
        conn = wire.Channel(reader, writer)
        wire.keepalive(writer)
        try:
            hello = wire.Hello(
                token=self._token, version=self.wire_version, oldest=wire.WIRE_OLDEST
            )
            await conn.send(wire.encode(hello))
            line = await conn.line(wire.SMALL_LINE, idle=timeout, timeout=timeout)
            if line is None:
                if self._tls is None and await _speaks_tls(remote, timeout):
                    # A TLS service drops a plain hello: waiting will not change that.
                    raise _Refused(_SPEAKS_TLS)
                raise _Down("it closed the connection during the handshake (does it expect TLS?)")
        except TimeoutError:
            conn.abort()
            raise _Down(f"no welcome within {timeout:g} s") from None
        except (wire.WireError, wire.PeerGone) as e:
            conn.abort()
            if self._tls is None and await _speaks_tls(remote, timeout):
                raise _Refused(_SPEAKS_TLS) from None
            raise _Down(f"the handshake failed: {e}") from None
        except _Down:
            conn.abort()
            raise
        try:
            message = wire.decode(line, ("welcome", "refused"))
        except wire.WireError as e:
            # It answered, with what no runner service says (an HTTP server's status line,
            # another protocol's greeting): the address is wrong, which waiting will not mend.
            conn.abort()
            raise _Refused(
                "it is not a codemode runner service: it answered the hello with "
                f"{wire.peer_text(str(e))}; check the address and port"
            ) from None
        if isinstance(message, wire.Refused):
            conn.abort()
            if "token" in message.error:
                raise _Refused(f"it refused the connection: {message.error}; check the token")
            if "wire version" in message.error:  # one side must be upgraded: no wait will do
                raise _Refused(f"it refused the connection: {message.error}")
            raise _Down(f"it refused the connection: {message.error}")
        if not wire.WIRE_OLDEST <= message.version <= self.wire_version:
            conn.abort()
            raise _Refused(
                f"it chose wire version {message.version}, which this client lacks (it speaks "
                f"{wire.WIRE_OLDEST} to {self.wire_version}); upgrade the older side"
            )
        remote.slots = message.slots
        remote.others = max(0, message.busy + message.waiting - (remote.inflight - 1))
        # A service that stops reading what this client sends (a script, results, a file's
        # bytes) is gone, as one that stops talking is: a send must not wait for ever.
        conn.stall = self._silence(message) or self.step_margin
        return conn, message

    def _silence(self, welcome: wire.Welcome) -> float | None:
        """How long a service may say nothing mid-step: ``silence``, and at least three of
        its heartbeat intervals; ``None`` for a service that sends none (version 1)."""
        if welcome.heartbeat is None:
            return None
        return max(self.silence, 3 * welcome.heartbeat)

    async def _converse(
        self,
        conn: wire.Channel,
        welcome: wire.Welcome,
        script: Script,
        server: conv.FileServer,
        *,
        asks: bool,
        known: int,
        began: float,
        resuming: bool = False,
    ) -> Step:
        """Answer the step's reads until its answer comes (``asks``: the step may stay live;
        ``resuming``: it is a live run's next segment; ``known``: the records the run holds;
        ``began``: the ``time.monotonic()`` at which the step's line was sent). Its ``live``
        is the service's :class:`~runner._wire.LiveOffer` when its process waits. Raises
        _Skip/_Down/_Ended/RunError."""
        wait = conv.Deadline.for_step(script).allowance + welcome.slot_wait + self.step_margin
        before = server.served
        bound = wire.step_bound(script)
        # A service that beats must not go quiet for long; one that does not (version 1) is
        # given the whole wait.
        silence = self._silence(welcome)
        heard = False  # the service has said something about this step
        # One scope for the whole wait. Neither a beat nor a read moves it: the service's own
        # deadline for the step counts its reads, so a service that asks for reads without
        # end cannot hold the step. Within: this host stopped meanwhile (SIGSTOP, a paused
        # virtual machine) is no step of the service's that took too long.
        try:
            async with conv.within(wait):
                while True:
                    try:
                        line = await conn.line(bound, idle=silence)
                        if line is None:
                            why = "it closed the connection before the step ended"
                            raise _Down(why) if heard else _Stale(why)
                        message = wire.decode(
                            line, ("step", "read", "busy", "error", "beat", "ended")
                        )
                    except TimeoutError:  # only a service that beats is given an idle bound
                        raise _Down(
                            f"it went silent for {silence:g} s in the middle of a step (it sends a "
                            f"heartbeat every {welcome.heartbeat:g} s): it is stopped or cut off"
                        ) from None
                    except wire.PeerGone as e:
                        why = f"the connection broke before the step ended: {e}"
                        raise (_Down(why) if heard else _Stale(why)) from None
                    except wire.WireError as e:
                        # What it sent is named in it (its keys): escaped, as its own errors are.
                        raise _Down(f"it broke the protocol: {wire.peer_text(str(e))}") from None
                    if isinstance(message, wire.Ended):
                        if resuming and not heard:
                            raise _Ended(message.error)
                        if not heard:  # left from a live run this connection carried
                            raise _Stale(f"it had ended a live process on it ({message.error})")
                        raise _Down("it sent 'ended' in the middle of a step")
                    heard = True
                    if isinstance(message, wire.Beat):
                        continue
                    if isinstance(message, Step):
                        if message.live is not None and not (asks and message.outcome == "calls"):
                            raise _Down(
                                "it broke the protocol: it kept a live process for a step that "
                                "cannot have one"
                            )
                        # What a local runner checks of its process's report, checked again: a
                        # service's runner did, so a step that fails it is the service's lie.
                        problem = conv.check_ran(message, script, known)
                        if problem is not None:
                            problem = wire.peer_text(problem)  # it may name a call it made up
                            raise _Down(
                                f"it sent a step no run of this script can end with: {problem}"
                            )
                        # The engine takes the step's wait and CPU from these (a wait_ms of inf
                        # reached its step event, and failed a tracer's span).
                        if message.process is not None:
                            problem = conv.no_measure("process", message.process, _MEASURES)
                            if problem is None:
                                waited = time.monotonic() - began
                                problem = _past(
                                    message.process,
                                    wall_ms=max(waited, wait) * 1000,
                                    cpu_ms=conv.step_compute_ms(script),
                                    wait_ms=welcome.slot_wait * 1000,
                                )
                            if problem is not None:
                                raise _Down(f"it broke the protocol: its step says {problem}")
                        # The bytes this client served are what the step read, whatever it says.
                        if message.process is None:
                            message.process = ProcessStats()
                        message.process.file_bytes = server.served - before
                        return message.bounded()
                    if isinstance(message, wire.Busy):
                        raise _Skip(
                            f"busy: {message.error} ({message.busy} of {message.slots} slots)"
                        )
                    if isinstance(message, wire.Failure):
                        if message.cause == "unfit":
                            raise _Skip(message.error, lasting=True)
                        if message.cause == "live" and resuming:
                            raise _Ended(message.error, keeps=True)
                        raise _Down(message.error)
                    # A file read: answered from the engine's reader exactly as for a local sandbox.
                    # A store failure raises RunError out of run(): the step goes back to the queue.
                    try:
                        # A store that never answers cannot hold the step: by the time a read
                        # has waited a whole step's wall time, the service has passed the
                        # step's deadline and its answer (the step) is on its way.
                        async with asyncio.timeout(conv.wall_seconds(script.limits.compute_ms)):
                            answer = await server.answer(message)
                    except TimeoutError:
                        continue
                    except (protocol.ProtocolError, conv.OverReading) as e:
                        # The service's own runner stops a process that asks this; refuse it
                        # here too.
                        answer = conv.missing(str(e))
                    try:
                        await conn.send(answer)
                    except wire.PeerGone as e:
                        raise _Down(f"the connection broke during a read: {e}") from None
        except TimeoutError:
            raise _Down(f"it did not finish the step within {wait:g} s") from None

    async def loads(self) -> dict[str, wire.Load | str]:
        """Each service's load, or why it could not say: a health check."""

        async def one(remote: _Remote) -> wire.Load | str:
            try:
                conn, _ = await self._connect(remote)
            except _Down as e:
                return str(e)
            try:
                await conn.send(wire.encode_load_request())
                line = await conn.line(
                    wire.SMALL_LINE, idle=self.connect_timeout, timeout=self.connect_timeout
                )
                if line is None:
                    return "it closed the connection"
                load: wire.Load = wire.decode(line, ("load",))
                return load
            except (TimeoutError, wire.WireError, wire.PeerGone) as e:
                return str(e) or type(e).__name__
            finally:
                await conn.close()

        results = await asyncio.gather(*(one(r) for r in self._remotes))
        return {r.address: result for r, result in zip(self._remotes, results, strict=True)}

    async def aclose(self) -> None:
        """End every live process this client holds, and close its connections."""
        self._closed = True
        await asyncio.gather(*(live.close() for live in list(self._live)), return_exceptions=True)
        for remote in self._remotes:
            idle, remote.idle = remote.idle, []
            for conn, _, _ in idle:
                with contextlib.suppress(Exception):
                    conn.abort()


class RemoteLive(LiveRun):
    """A live step's process waiting on a runner service, and the connection it waits on.

    Made by :class:`RemoteRunner` only. ``memory_bytes`` is what the service said the
    process held when it stopped. A run dropped without :meth:`close` drops its connection,
    which makes the service end the process.
    """

    def __init__(
        self,
        runner: RemoteRunner,
        remote: _Remote,
        conn: wire.Channel,
        welcome: wire.Welcome,
        script: Script,
        server: conv.FileServer,
        *,
        known: int,
        calls: list[protocol.Call],
        memory: int,
    ) -> None:
        self.runner = runner
        self.remote = remote
        self.conn = conn
        self.welcome = welcome
        self.script = script
        self.server = server
        self.known = known
        self.calls = calls
        self.waiting = len(calls)
        self._memory = memory
        self._done = False  # spent (a later segment took over) or closed
        remote.live += 1
        runner._live.add(self)
        self._finalizer = weakref.finalize(self, _drop, conn, remote)

    @property
    def memory_bytes(self) -> int:
        return 0 if self._done else self._memory

    def _spend(self) -> None:
        if not self._done:
            self._done = True
            self._finalizer.detach()
            self.remote.live -= 1
            self.runner._live.discard(self)

    async def resume(self, records: list[protocol.Record]) -> Step:
        if self._done:
            raise RunError("this live run is over (closed, or a later step took it over)")
        problem = mismatch(records, self.calls)
        if problem is not None:
            await self.close()
            raise RunError(f"the live run cannot take these results: {problem}")
        line = protocol.results_line(records)
        if len(line) > self.welcome.max_line:
            # The service would drop the line, and with it the connection: it would look
            # gone. Ended here instead, the service stays in rotation; the step replays.
            await self.close()
            raise RunError(
                f"the live run's results line is {len(line):,} bytes, over the "
                f"{self.welcome.max_line:,} the runner service {self.remote.address} takes "
                "(its --line-memory): the process is ended and the step replays"
            )
        self._spend()
        runner, remote, conn = self.runner, self.remote, self.conn
        remote.inflight += 1
        handed = keep = False
        try:
            began = time.monotonic()  # before the send, as in _run_on
            try:
                await conn.send(line)
            except wire.PeerGone as e:
                raise _Down(f"the connection broke: {e}") from None
            step = await runner._converse(
                conn,
                self.welcome,
                self.script,
                self.server,
                asks=True,
                known=self.known + len(records),
                began=began,
                resuming=True,
            )
            known = self.known + len(records)
            if step.live is not None:
                handed = True
                step.live = RemoteLive(
                    runner,
                    remote,
                    conn,
                    self.welcome,
                    self.script,
                    self.server,
                    known=known,
                    calls=list(step.calls),
                    memory=step.live.memory,
                )
            else:
                keep = True
            remote.steps += 1
            return step
        except _Ended as e:
            keep = e.keeps
            raise RunError(
                f"the runner service {remote.address} ended the live process: {e}"
            ) from None
        except _Skip as e:
            keep = True  # it answered (busy): the connection takes requests again
            raise RunError(f"the runner service {remote.address} could not go on: {e}") from None
        except _Down as e:
            # It went away with the process: out of rotation, and the engine replays the step
            # (its results are in the log) on another service.
            remote.down_until = runner.clock() + runner.cooldown
            remote.why = str(e)
            remote.failures += 1
            remote.abandoned += 1
            raise RunError(
                f"the runner service {remote.address} went away during a live step: {e}"
            ) from None
        finally:
            remote.inflight -= 1
            if keep:
                await runner._checkin(remote, conn, self.welcome)
            elif not handed:
                conn.abort()

    async def close(self) -> None:
        if self._done:
            return
        self._spend()
        # The service ends the process; the connection takes requests again.
        try:
            async with asyncio.timeout(1.0):
                await self.conn.send(protocol.END_LINE)
        except asyncio.CancelledError:
            self.conn.abort()
            raise
        except Exception:
            self.conn.abort()
            return
        with contextlib.suppress(Exception):
            await self.runner._checkin(self.remote, self.conn, self.welcome)


def _past(process: ProcessStats, **most_ms: float) -> str | None:
    """What of a step's ``process`` times is past the most it can be (``most_ms``, by name):
    a service's lie or bug (a cpu_ms of 1e300, or of 75,000 for a step of compute_ms 5,000
    answered at once, was charged to the script's ``total_compute_ms``, which failed it for
    good). Each is given :func:`_slack`.

    ``cpu_ms`` is at most the step's CPU allowance and ``wait_ms`` the service's slot wait,
    whatever the clock says. ``wall_ms`` is at most the longer of the wait this client allows
    the step's answer (its deadline, the service's slot wait and ``step_margin``) and the
    time it waited, from before the step's line was sent. The measure alone refused healthy
    services: while this host is asleep or its virtual machine paused, ``CLOCK_MONOTONIC``
    stands still and the service runs on (``CLOCK_BOOTTIME`` counts no paused virtual machine
    either, so the bound is needed whatever the clock); it stays for a wait longer than the
    bound (this host stalled and the wait restarted: :class:`runner._conversation.Within`)."""
    for name, most in most_ms.items():
        value = getattr(process, name)
        slack = _slack(most)
        if value > most + slack:
            return (
                f"process.{name} = {value:g}, more than {most + slack:,.0f} ms: "
                f"{_BOUNDS[name]}, {most:,.0f} ms, and {slack:,.0f} ms of slack"
            )
    return None


_BOUNDS = {
    "wall_ms": "the time the step may take",
    "cpu_ms": "the CPU the step may use",
    "wait_ms": "the service's slot wait",
}


def _slack(most_ms: float) -> float:
    """How far past its bound a time may honestly be: a tenth of it and at least
    _TIMES_SLACK_MS (the kernel counts CPU in ticks, a CPU timer fires at one, and an exec'd
    process's CPU counts its start)."""
    return max(_TIMES_SLACK_MS, most_ms / 10)


def _drop(conn: wire.Channel, remote: _Remote) -> None:
    """A live run dropped without close: its connection goes, and with it the process."""
    remote.live -= 1
    with contextlib.suppress(Exception):
        conn.abort()


def _tls_context(
    tls: bool | ssl.SSLContext | None, ca: str | os.PathLike[str] | None
) -> ssl.SSLContext | None:
    if isinstance(tls, ssl.SSLContext):
        if ca is not None:
            raise ValueError("give either an SSLContext or a ca file, not both")
        return tls
    if ca is not None:
        if tls is False:
            raise ValueError("a ca file was given with tls=False; TLS is needed to use it")
        return ssl.create_default_context(cafile=os.fspath(ca))
    if tls:
        return ssl.create_default_context()
    return None


def read_token(
    token_file: str | os.PathLike[str] | None,
    *,
    env_name: str = TOKEN_ENV,
    base: Path | None = None,
    environ: Mapping[str, str] | None = None,
    where: str = "the runner",
) -> str:
    """The shared token: the one line of ``token_file`` if given, else ``$env_name``.

    Raises ``ValueError`` naming where it looked and how to make a token.
    """
    remedy = "make one with `openssl rand -hex 32`"
    if token_file is not None:
        path = Path(token_file)
        if base is not None and not path.is_absolute():
            path = base / path
        try:
            with path.open("rb") as f:
                # Bounded: a token file is one short line, and /dev/zero must not hang us.
                raw = f.read(MAX_TOKEN_FILE + 1)
                mode = os.fstat(f.fileno()).st_mode & 0o777
        except OSError as e:
            raise ValueError(f"{where}: cannot read the token file {path}: {e.strerror}") from e
        if len(raw) > MAX_TOKEN_FILE:
            raise ValueError(
                f"{where}: the token file {path} is over {MAX_TOKEN_FILE:,} bytes; it holds one "
                f"line, the token: {remedy}"
            )
        try:
            token = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise ValueError(
                f"{where}: the token file {path} is not UTF-8 text; {remedy}"
            ) from None
        if not token:
            raise ValueError(f"{where}: the token file {path} is empty; {remedy}")
        if len(lines := token.splitlines()) > 1:
            # Another file named by mistake (a config, a key) was its whole text as the token.
            raise ValueError(
                f"{where}: the token file {path} has {len(lines):,} lines; it holds one line, "
                f"the token: {remedy}"
            )
        if mode & 0o044:
            # Said, not refused (the machine's other users may be trusted), on both sides: a
            # token file left at the umask's 0644 was taken without a word.
            logging.getLogger("codemode.runner").warning(
                "%s: the token file %s can be read by other users of this machine (mode "
                "%04o), and anyone with the token may run steps on the runner service: "
                "chmod 600 %s",
                where,
                path,
                mode,
                path,
            )
        return token
    env = os.environ if environ is None else environ
    token = env.get(env_name, "").strip()
    if not token:
        raise ValueError(f"{where}: no token: give a token file, or set ${env_name}; {remedy}")
    return token
