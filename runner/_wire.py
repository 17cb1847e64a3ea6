"""The runner service's wire protocol, version 3: script steps over TCP.

A remote runner speaks the sandbox protocol (``sandbox.protocol``) over a TCP connection,
with a first exchange that authenticates. JSON lines, UTF-8, one envelope ``{"<kind>": body}``
per line; both sides bound every line they read and drop a peer whose line is too long,
does not parse, or does not come within its timeout. TLS wraps the connection when the
service has a certificate.

Handshake, once per connection:

- client -> service: ``{"hello": {"token": "...", "version": 3, "oldest": 1}}``, the wire
  versions the client speaks (``oldest`` defaults to ``version``).
- service -> client: ``{"welcome": {"version": v, "oldest": 1, "scripts": [1, 1],
  "languages": ["javascript"], "slots": N, "busy": M, "waiting": W, "draining": false,
  "max_line": B, "slot_wait": S, "heartbeat": H, "live_wait": L}}``: ``v`` is the wire
  version both speak (the newest), the service takes ``Script`` versions ``scripts[0]`` to
  ``scripts[1]`` in ``languages``, has ``N`` slots of which ``M`` are busy with ``W`` steps
  waiting for one, takes a script line of at most ``B`` bytes, waits at most ``S`` seconds
  for a free slot, (version 2) sends a ``beat`` every ``H`` seconds while a step runs, and
  (version 3) keeps a live step's process waiting for its results at most ``L`` seconds (no
  ``live_wait``: it keeps none).
- or ``{"refused": {"error": "<why>"}}`` and the service closes the connection: a missing or
  wrong token (compared in constant time), no wire version in common, a first line that is
  not a ``hello``, too long, or too slow, or too many connections.

Then any number of requests, one at a time:

- ``{"load": {}}`` -> ``{"load": {"slots": N, "busy": M, "waiting": W, "draining": bool}}``,
  for health checks.
- ``{"script": {<the sandbox protocol's Script>, "tenant": "..."}}`` runs one step. While it
  runs the service may send ``{"read": {"file", "offset", "len"}}`` (a file read the sandbox
  asked for), which the client answers exactly as a runner answers its sandbox: ``{"bytes": n}``
  followed by exactly ``n`` raw bytes (``n <= len``), or ``{"missing": "<why>"}``. From
  version 2 the service also sends ``{"beat": {}}`` every ``heartbeat`` seconds until the
  step's answer, so a client can tell a service that froze (stopped, swapped out, its machine
  gone) from a long step, and run the step elsewhere. The step ends with one of:

  - ``{"step": {<the Ran>, "process": {wall_ms, cpu_ms, file_bytes, max_rss_bytes,
    wait_ms, exit_status}}}``: where the step ended, a failed script included;
  - ``{"busy": {"error", "slots", "busy", "waiting"}}``: no slot came free within
    ``slot_wait``, or (sent as soon as the line has been read to its end, which the service
    drops) the service's line budget had no room for the script line, held by other
    connections' lines; ``error`` says which;
  - ``{"error": {"error": "<why>", "cause": "draining" | "unavailable" | "unfit" |
    "protocol"}}``: the service could not take the step (it is draining, its local runner
    failed, it does not take this script's version or language, or its line would take
    more than the whole line budget to decode, or the request was bad).

  The client sends nothing during a step except answers to reads. A client that closes the
  connection mid-step abandons the step: the service kills its process. A client whose file
  store fails closes the connection for the same effect.

Live steps (version 3). A ``script`` request may carry ``"live": true``: when the step stops
on calls and the service can keep its process, the ``step`` answer carries
``"live": {"memory": bytes}`` (what the waiting process holds), and the process waits, alive
and on this connection, for the records of exactly those calls. It holds no slot while it
waits, and counts against the service's own live budget (a count and memory; a process that
does not fit is the one ended, its ``ended`` following its ``step``, and those kept wait on).
The connection then carries one of:

- client -> service ``{"results": [Record, ...]}`` (the sandbox protocol's line): the same
  run goes on, exactly as a ``script`` step does (``read``, ``beat``, then ``step``, which
  may carry ``live`` again, or ``busy`` / ``error``; ``error`` with cause ``live`` says the
  process could not go on, and the client replays the step: so is a results line the
  service's line budget has no room for, read to its end and dropped);
- client -> service ``{"end": {}}``: the service ends the process; no answer, and the
  connection takes requests again;
- service -> client ``{"ended": {"error": "<why>"}}``: the service ended the process itself
  (no results within ``live_wait``, evicted for room, draining) and closes the connection.

A client that closes the connection, or whose connection breaks, while its process waits
makes the service end the process. The process is a cache: the results are in the engine's log
before they are sent, so when the service goes away the engine replays the step elsewhere.

A step is a pure function of its ``Script`` (tool calls happen in the engine, never in a
runner), so a client may run a step again elsewhere when a service goes away before answering.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import socket
from typing import Annotated, Any

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, ValidationError

from runner._base import MAX_TENANT, Step
from runner._conversation import Deadline, Within, within
from sandbox import protocol

WIRE_VERSION = 3
WIRE_OLDEST = 1
# The first wire version with heartbeats during a step.
HEARTBEAT_VERSION = 2
# The first wire version with live steps.
LIVE_WIRE_VERSION = 3

# Every line but a script and a step is small.
SMALL_LINE = 64 * protocol.KiB
# The longest waits a service may state in its welcome, in seconds. The client waits a step
# out by them (slot_wait, 3 beats of silence): a service that stated more (1e300) held a step
# past every timeout of the engine's.
MAX_SLOT_WAIT = 600.0
MAX_HEARTBEAT = 60.0
MAX_LIVE_WAIT = 3600.0
# What a step line may carry beyond the sandbox's `ran`: the process stats and the envelope.
STEP_OVERHEAD = 64 * protocol.KiB

_CHUNK = 256 * protocol.KiB
# A line that counts against a LineBudget reads this much at a time: the budget is taken
# before the bytes arrive, so a line waiting for a slow peer holds at most this much that it
# has not received.
_BUDGETED_CHUNK = 64 * protocol.KiB


class WireError(Exception):
    """The peer broke the wire protocol: a line too long, cut short, not JSON, not expected."""


class PeerGone(Exception):
    """The peer closed the connection or it broke (reset, TLS failure)."""


class OverBudget(Exception):
    """A line would hold more than is left of the service's :class:`LineBudget`. The line is
    part read: :meth:`Channel.skip_line` discards the rest, and the connection is in step.
    ``never``: it would hold more than the whole budget, so no wait makes room for it."""

    def __init__(self, message: str, *, never: bool = False) -> None:
        super().__init__(message)
        self.never = never


class LineBudget:
    """The bytes that the lines a service is reading may hold together, across connections.

    Each line may hold its first ``free`` bytes without asking (a small request always passes:
    a health check, a hello-sized step); past that, every byte it reads is taken from
    ``total`` before it is read, and given back by :meth:`LineHold.release` when the line is
    done with. A line that needs more than is left raises :class:`OverBudget` rather than
    wait: lines that wait while holding part of the budget could wait on each other for ever.
    """

    def __init__(self, total: int, free: int = SMALL_LINE) -> None:
        if total < 0:
            raise ValueError(f"a line budget must be 0 bytes or more, not {total}")
        if free < 1:
            raise ValueError(f"a line budget's free bytes must be 1 or more, not {free}")
        self.total = total
        self.free = free
        self.taken = 0

    @property
    def left(self) -> int:
        return self.total - self.taken

    @property
    def most(self) -> int:
        """The most bytes one line can hold: its free bytes and all of the budget."""
        return self.free + self.total

    def hold(self) -> LineHold:
        """A new line's share, empty until it reads past ``free`` (a context manager that
        gives it back)."""
        return LineHold(self)


def decoding_cost(line: bytes) -> int:
    """What decoding ``line`` takes beyond its bytes, in bytes of a :class:`LineBudget`
    (whose default share of memory allows for about three times a line's bytes): each JSON
    value a Python object in a list's or a dict's slot (some 64 bytes: a small text, a
    number), each object a dict and often a model (some 320), each array a list (some 96).

    Counted by the commas and brackets in the line, less those in its strings (a text of
    characters up to U+FFFF decodes to at most twice its bytes, which the share allows):
    finding the strings takes a step of Python each, so the first one in 128 bytes of the
    line are looked for, and past them the rest of the line is counted whole (a line of
    many small records and one CSV text after them is charged the text's commas). On a
    67 MiB line: 0.1 s for the counts, 0.4 s more for the strings of two CSV texts, 0.5 s
    for those of tiny records, 1.0 s at most (texts of 130 bytes, escapes).

    A character past U+FFFF (four bytes of UTF-8, or a surrogate pair's ``\\ud8xx`` escape;
    a text's ``\\\\ud8xx`` is taken for one too) makes its text take four bytes a character:
    a line holding one is charged three times its bytes more (one of 16 MiB, charged
    nothing, grew memory by 64 MiB); looking for them takes 0.1 s on a 67 MiB line, 0.2 s
    more past ASCII.

    Measured: 300,000 records of 39 bytes each took 23 times their line's bytes to decode,
    300,000 texts of 4 bytes 18 times; a line of 14 million tiny records, 525 MiB, took
    11.2 GB, past any budget counted by the line's bytes alone. Arrays, uncounted, let a line
    of a million ``[[[[[]]]]]`` (11 MB) take 476 MB, 15 times what it was charged. Commas in
    strings, counted, charged a 14 MiB line of two CSV texts 163 MiB, which decoding grew by
    28 MiB."""
    cost = _structure(line, 0, len(line))
    most = len(line) // (2 * _FEW_STRINGS)
    # From the line's start, the first quote outside a string opens one. In a line that is
    # not JSON, decoding fails at the first place where this scan and the decoder part; a
    # string not closed ends it (a search would try each quote in it, to the line's end).
    at = line.find(b'"')
    while at >= 0 and most > 0:
        string = _STRING.match(line, at)
        if string is None:
            break
        cost -= _structure(line, at, string.end())
        most -= 1
        at = line.find(b'"', string.end())
    cost //= 3
    if _SURROGATE.search(line) or (not line.isascii() and _FOUR_BYTES.search(line)):
        cost += 3 * len(line)
    return cost


_FEW_STRINGS = 64
# Possessive: backtracking kept a frame for each escape, 1.8 GB for a 30 MiB string of them.
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"')
# An escape's backslash is not told from an escaped one's: a lookbehind took 1 s on 67 MiB.
_SURROGATE = re.compile(rb"\\u[dD][89abAB]")
_FOUR_BYTES = re.compile(rb"[\xf0-\xf4]")


def _structure(json: bytes, start: int, end: int) -> int:
    """Three times the decoding cost of ``json[start:end]``'s commas and brackets."""
    values = json.count(b",", start, end) * 64
    return values + json.count(b"{", start, end) * 320 + json.count(b"[", start, end) * 96


class LineHold:
    """One line's share of a :class:`LineBudget`."""

    def __init__(self, budget: LineBudget) -> None:
        self.budget = budget
        self.held = 0

    def cover(self, have: int, want: int) -> int:
        """Make room for reading up to ``want`` bytes past the ``have`` the line holds; return
        how many it may read now (at least 1). Raises :class:`OverBudget` when it may read
        none."""
        budget = self.budget
        allowed = budget.free + self.held + budget.left
        if allowed <= have:
            raise OverBudget(
                f"the line passed {have:,} bytes while the service's other connections hold "
                f"{budget.taken - self.held:,} of its line budget of {budget.total:,} bytes"
            )
        grant = min(want, allowed - have)
        more = have + grant - budget.free - self.held
        if more > 0:
            budget.taken += more
            self.held += more
        return grant

    def reserve(self, have: int, extra: int) -> None:
        """Hold ``extra`` bytes beyond the ``have`` the line holds (what decoding it takes
        beyond its bytes: :func:`decoding_cost`), all of them or none: raises
        :class:`OverBudget` when the budget has no room for them."""
        budget = self.budget
        if have + extra > budget.most:
            raise OverBudget(
                f"decoding the line's {have:,} bytes takes about {extra:,} more, more than "
                f"all of the service's line budget of {budget.total:,} bytes",
                never=True,
            )
        if have + extra > budget.free + self.held + budget.left:
            raise OverBudget(
                f"decoding the line's {have:,} bytes takes about {extra:,} more, while the "
                f"service's other connections hold {budget.taken - self.held:,} of its line "
                f"budget of {budget.total:,} bytes"
            )
        more = have + extra - budget.free - self.held
        if more > 0:
            budget.taken += more
            self.held += more

    def release(self) -> None:
        """Give back what the line held; it may be called again (it gives back nothing)."""
        self.budget.taken -= self.held
        self.held = 0

    def __enter__(self) -> LineHold:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


# What a peer says of an error goes into this side's errors and log lines: bounded, and its
# control characters (a line break forging a log line, a terminal's escapes) shown escaped.
PEER_TEXT_BOUND = 2000
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def peer_text(text: str) -> str:
    """``text`` from a peer as this side shows it: bounded to about PEER_TEXT_BOUND
    characters (head and tail), its control characters as escapes."""
    if len(text) > PEER_TEXT_BOUND:
        half = PEER_TEXT_BOUND // 2
        text = f"{text[:half]}[... {len(text) - 2 * half:,} characters cut ...]{text[-half:]}"
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


PeerText = Annotated[str, AfterValidator(peer_text)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Hello(_Model):
    token: str = Field("", max_length=4096)
    version: StrictInt  # `true` is no version (lax, it read as 1)
    oldest: StrictInt | None = None


class Welcome(_Model):
    version: int
    oldest: int
    scripts: tuple[int, int]
    languages: list[str]
    slots: int = Field(ge=0)
    busy: int = Field(ge=0)
    waiting: int = Field(0, ge=0)
    draining: bool = False
    max_line: int = Field(ge=0)
    slot_wait: float = Field(ge=0, le=MAX_SLOT_WAIT)
    # Seconds between beats during a step (version 2); None: the service sends none.
    heartbeat: float | None = Field(None, gt=0, le=MAX_HEARTBEAT)
    # The longest a live process waits for its results (version 3); None: no live steps.
    live_wait: float | None = Field(None, gt=0, le=MAX_LIVE_WAIT)


class Beat(_Model):
    """The service is alive and still working on the step (version 2)."""


class Refused(_Model):
    error: PeerText


class LiveOffer(_Model):
    """Carried by a ``step`` (version 3): its process waits, alive, for the calls' results."""

    memory: int = Field(ge=0)


class Ended(_Model):
    """The service ended a waiting live process itself (version 3), and says why."""

    error: PeerText


class Load(_Model):
    slots: int = Field(ge=0)
    busy: int = Field(ge=0)
    waiting: int = Field(0, ge=0)
    draining: bool = False


class Busy(_Model):
    error: PeerText
    slots: int = Field(ge=0)
    busy: int = Field(ge=0)
    waiting: int = Field(0, ge=0)


class Failure(_Model):
    """The service could not take the step; ``cause`` says whether to try it elsewhere."""

    error: PeerText
    cause: str = "unavailable"


_KINDS: dict[str, type[BaseModel]] = {
    "hello": Hello,
    "welcome": Welcome,
    "refused": Refused,
    "load": Load,
    "busy": Busy,
    "error": Failure,
    "read": protocol.ReadRequest,
    "step": Step,
    "beat": Beat,
    "ended": Ended,
}
_NAMES = {cls: kind for kind, cls in _KINDS.items()}


def encode(message: BaseModel) -> bytes:
    """One wire line for a message model, newline included."""
    if isinstance(message, Step):
        return encode_step(message)
    # Left out when not set, so a version 1 peer (whose models forbid unknown keys) reads it.
    body = message.model_dump(
        mode="json",
        exclude_unset=isinstance(message, Hello),
        exclude_none=isinstance(message, Welcome),
    )
    return orjson.dumps({_NAMES[type(message)]: body}) + b"\n"


def encode_load_request() -> bytes:
    return b'{"load":{}}\n'


def encode_script(script: protocol.Script, tenant: str, *, live: bool = False) -> bytes:
    """The ``script`` line: the sandbox protocol's script line with the tenant added, and
    (version 3 only) whether the step may stay live."""
    body = script.model_dump(mode="python", exclude_unset=True)
    body["tenant"] = tenant
    if live:
        body["live"] = True
    return orjson.dumps({"script": body}) + b"\n"


def encode_step(step: Step, live: LiveOffer | None = None) -> bytes:
    body = step.model_dump(mode="python", exclude_unset=True, exclude={"process"})
    if step.process is not None:
        body["process"] = dataclasses.asdict(step.process)
    if live is not None:
        body["live"] = live.model_dump()
    return orjson.dumps({"step": body}) + b"\n"


def envelope(line: bytes) -> tuple[str, Any]:
    """Split a line into its kind and body. Raises :class:`WireError` if it is no envelope."""
    try:
        return protocol.envelope(line)
    except protocol.ProtocolError as e:
        raise WireError(str(e)) from None


def decode(line: bytes, expect: tuple[str, ...]) -> Any:
    """Parse a line into one of the ``expect`` kinds.

    ``script`` gives ``(Script, tenant, live)``; ``step`` a :class:`~runner.Step` whose
    ``live`` is the :class:`LiveOffer` it carried (or ``None``); ``bytes`` gives an ``int``;
    ``missing`` a ``str``; the rest their models. Raises :class:`WireError` naming what was
    wrong.
    """
    kind, body = envelope(line)
    return decode_body(kind, body, expect)


def decode_body(kind: str, body: Any, expect: tuple[str, ...]) -> Any:
    if kind not in expect:
        raise WireError(f"{protocol.a_kind(kind)} message where {' or '.join(expect)} was expected")
    if kind == "bytes":
        if not isinstance(body, int) or isinstance(body, bool) or body < 0:
            raise WireError(f"a malformed 'bytes' message: {body!r} is not a byte count")
        return body
    if kind == "missing":
        if not isinstance(body, str):
            raise WireError("a malformed 'missing' message: its body is not a string")
        return body
    if kind == "script":
        if not isinstance(body, dict):
            raise WireError("a malformed 'script' message: its body is not an object")
        tenant = body.pop("tenant", "default")
        if not isinstance(tenant, str) or not 0 < len(tenant) <= MAX_TENANT:
            raise WireError(
                "a malformed 'script' message: tenant must be a string of 1 to "
                f"{MAX_TENANT} characters"
            )
        live = body.pop("live", False)
        if not isinstance(live, bool):
            raise WireError("a malformed 'script' message: live must be true or false")
        try:
            return protocol.Script.model_validate(body), tenant, live
        except ValidationError as e:
            raise WireError(protocol.malformed(kind, e)) from None
    if kind == "step":
        offer = body.pop("live", None) if isinstance(body, dict) else None
        try:
            step = Step.model_validate(body)
            step.live = None if offer is None else LiveOffer.model_validate(offer)
        except ValidationError as e:
            raise WireError(protocol.malformed(kind, e)) from None
        return step
    try:
        return _KINDS[kind].model_validate(body)
    except ValidationError as e:
        raise WireError(protocol.malformed(kind, e)) from None


def step_bound(script: protocol.Script) -> int:
    """The longest ``step`` line a service may send for ``script``."""
    return script.limits.step_arguments * 2 + protocol.RAN_OVERHEAD + STEP_OVERHEAD


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) as a host and a port.

    Raises ``ValueError`` naming the address and the form it should take.
    """
    host, sep, port = address.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    # ASCII digits alone: str.isdigit takes '²', which int() then refused with its own words
    # (and fullwidth digits, which it read as ASCII ones).
    if not sep or not host or not (port.isascii() and port.isdigit()):
        raise ValueError(
            f"runner address {address!r} is not HOST:PORT (for example 10.0.0.5:7300, "
            "or [::1]:7300 for IPv6)"
        )
    digits = port.lstrip("0") or "0"
    if len(digits) > 5 or int(digits) > 65535:  # int() refuses 4,300 digits and more
        raise ValueError(
            f"runner address {address[:80]!r} has a port past 65535, the highest there is"
        )
    try:
        # As connecting and listening encode it: a name they refuse raised UnicodeError
        # there, a traceback at the first step.
        host.encode("idna")
    except UnicodeError:
        raise ValueError(
            f"runner address {address!r} has no host name: {host!r} has an empty part or "
            "one over 63 characters (for example runner1.example.com:7300)"
        ) from None
    return host, int(digits)


def keepalive(writer: asyncio.StreamWriter) -> None:
    """Probe an idle connection, so a peer whose machine vanished is noticed in about 30 s."""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 5)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 4)
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Channel:
    """One framed connection: bounded lines and raw byte runs in, whole messages out.

    It keeps its own buffer over the stream, so a read that times out or is cancelled loses
    nothing already received.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        stall: float | None = None,
    ) -> None:
        self.reader = reader
        self.writer = writer
        # Seconds the peer may take none of what is sent to it before it counts as gone
        # (None: no bound). A peer that stops reading would otherwise hold a send for ever.
        self.stall = stall
        self._buffer = bytearray()
        self._eof = False
        self._scanned = 0  # bytes of the buffer known to hold no newline

    @property
    def peer(self) -> str:
        peer = self.writer.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            return f"{peer[0]}:{peer[1]}"
        return str(peer)

    async def _fill(self, until: Deadline | None, size: int = _CHUNK) -> None:
        """Read up to ``size`` more bytes into the buffer. Raises TimeoutError past ``until``,
        PeerGone on a break."""
        try:
            # Within, not asyncio.timeout: this host stopped meanwhile (SIGSTOP, a paused
            # virtual machine) is no silence of the peer's, whose bytes wait to be read.
            async with asyncio.timeout(None) if until is None else Within(until):
                chunk = await self.reader.read(size)
        except TimeoutError:  # an OSError too, but not a broken connection
            raise
        except (ConnectionError, OSError) as e:
            raise PeerGone(f"the connection broke: {e}") from None
        if not chunk:
            self._eof = True
        self._buffer.extend(chunk)

    async def line(
        self,
        bound: int,
        *,
        idle: float | None,
        timeout: float | None = None,
        hold: LineHold | None = None,
    ) -> bytes | None:
        """The next line (newline included); ``None`` when the peer closed between lines.

        ``idle`` bounds the wait for the line's first byte, ``timeout`` the time from its first
        byte to its newline (``None``: no bound). With ``hold``, every read past the budget's
        free bytes is taken from its :class:`LineBudget` first (the caller releases it when
        done with the line). Raises ``TimeoutError``, :class:`WireError` for a line over
        ``bound`` or cut short, :class:`OverBudget`, :class:`PeerGone` when the connection
        broke.
        """
        until = _within(idle)
        while not self._buffer:
            if self._eof:
                return None
            # Waiting for a line's first byte takes nothing from the budget.
            await self._fill(
                until, _CHUNK if hold is None else min(_BUDGETED_CHUNK, hold.budget.free)
            )
        until = _within(timeout)
        while True:
            at = self._buffer.find(b"\n", self._scanned)
            if at >= 0:
                if at + 1 > bound:
                    raise WireError(_over(at + 1, bound))
                line = bytes(self._buffer[: at + 1])
                del self._buffer[: at + 1]
                self._scanned = 0
                return line
            self._scanned = len(self._buffer)
            if self._scanned > bound:
                raise WireError(_over(self._scanned, bound))
            if self._eof:
                raise WireError(
                    f"the peer closed the connection in the middle of a line "
                    f"({len(self._buffer):,} bytes without a newline)"
                )
            size = _CHUNK if hold is None else hold.cover(len(self._buffer), _BUDGETED_CHUNK)
            await self._fill(until, size)

    def buffered(self) -> int:
        """Bytes read from the peer and not yet taken (a line begun, after a timeout)."""
        return len(self._buffer)

    async def skip_line(self, bound: int, timeout: float | None) -> None:
        """Discard the rest of a line :meth:`line` left part read (:class:`OverBudget`), up to
        and with its newline, holding none of it. Raises as :meth:`line` does."""
        until = _within(timeout)
        skipped = 0
        while True:
            at = self._buffer.find(b"\n")
            if at >= 0:
                if skipped + at + 1 > bound:
                    raise WireError(_over(skipped + at + 1, bound))
                del self._buffer[: at + 1]
                self._scanned = 0
                return
            skipped += len(self._buffer)
            self._buffer.clear()
            self._scanned = 0
            if skipped > bound:
                raise WireError(_over(skipped, bound))
            if self._eof:
                raise WireError(
                    f"the peer closed the connection in the middle of a line "
                    f"({skipped:,} bytes without a newline)"
                )
            await self._fill(until)

    async def exactly(self, n: int, timeout: float | None) -> bytes:
        """Exactly ``n`` raw bytes. Raises TimeoutError, PeerGone, or WireError if cut short."""
        until = _within(timeout)
        while len(self._buffer) < n:
            if self._eof:
                raise WireError(
                    f"the peer closed the connection {len(self._buffer):,} bytes into a run "
                    f"of {n:,}"
                )
            await self._fill(until)
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        self._scanned = 0
        return data

    def usable(self) -> bool:
        """True when the connection is open both ways with nothing unread: fit for a request."""
        return not (self._eof or self._buffer or self.reader.at_eof() or self.writer.is_closing())

    async def send(self, data: bytes) -> None:
        """Write ``data``. Raises :class:`PeerGone` when the connection broke, or when the
        peer took none of what waits to be sent for ``stall`` seconds (it stopped reading)."""
        try:
            self.writer.write(data)
            transport = self.writer.transport
            # Nothing left waiting to be sent: drain has nothing to wait for, nor a timer.
            if self.stall is None or not transport.get_write_buffer_size():
                await self.writer.drain()
                return
            while True:
                waiting = transport.get_write_buffer_size()
                try:
                    async with within(self.stall):
                        await self.writer.drain()
                    return
                except TimeoutError:
                    if transport.get_write_buffer_size() >= waiting:
                        raise PeerGone(
                            f"the peer read none of the {waiting:,} bytes waiting for it in "
                            f"{self.stall:g} s"
                        ) from None
        except (ConnectionError, OSError, RuntimeError) as e:
            raise PeerGone(f"the connection broke while sending: {e}") from None

    async def close(self, linger: float = 0.0) -> None:
        """Close the connection; never waits long for a peer that does not read.

        With ``linger``, first send an end of stream and discard what the peer still sends for
        up to that many seconds: closing with unread bytes makes the kernel send a reset, and
        the peer would lose the last message (a refusal) along with it.
        """
        if self.writer.is_closing():
            return
        if linger > 0 and not self._eof:
            until = Deadline.seconds(linger)
            with contextlib.suppress(Exception):
                if self.writer.can_write_eof():
                    self.writer.write_eof()
                while not self._eof:
                    self._buffer.clear()
                    await self._fill(until)
        self._buffer.clear()
        self.writer.close()
        try:
            async with asyncio.timeout(1.0):
                await self.writer.wait_closed()
        except asyncio.CancelledError:
            self.abort()
            raise
        except Exception:
            self.abort()

    def abort(self) -> None:
        """Drop the connection at once (a reset), unsent data discarded."""
        transport = self.writer.transport
        if not transport.is_closing():
            transport.abort()


def _within(seconds: float | None) -> Deadline | None:
    return None if seconds is None else Deadline.seconds(seconds)


def _over(size: int, bound: int) -> str:
    return f"a line over the bound of {bound:,} bytes (at least {size:,})"
