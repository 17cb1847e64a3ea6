"""Hostile runner services against the client: each step fails over or fails with a clear
message, within the step's own bounds, whatever the service says or does not say."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import orjson
import pytest

from runner import RemoteRunner, RunError
from runner import _wire as wire
from sandbox.protocol import FileInfo, Limits

from .remote_support import TOKEN, script

Play = Callable[[wire.Channel], Awaitable[None]]


@contextlib.asynccontextmanager
async def hostile(play: Play) -> AsyncIterator[str]:
    """A service on loopback that welcomes every client (wire version 3, beating), reads its
    first request, then plays ``play`` on the connection; yields its address."""

    playing: set[asyncio.Task[None]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = wire.Channel(reader, writer)
        task = asyncio.current_task()
        assert task is not None
        playing.add(task)
        # Cancelled at the end of the test: a stream handler must not end cancelled.
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await conn.line(wire.SMALL_LINE, idle=5, timeout=5)
            welcome = wire.Welcome(
                version=3,
                oldest=1,
                scripts=(1, 2),
                languages=["javascript"],
                slots=1,
                busy=0,
                max_line=1 << 20,
                slot_wait=0,
                heartbeat=0.1,
                live_wait=5,
            )
            await conn.send(wire.encode(welcome))
            await conn.line(1 << 20, idle=5, timeout=5)
            await play(conn)
        conn.abort()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    host, port = server.sockets[0].getsockname()[:2]
    try:
        yield f"{host}:{port}"
    finally:
        server.close()
        for task in playing:
            task.cancel()
        await asyncio.gather(*playing, return_exceptions=True)


async def test_a_service_that_reads_for_ever_cannot_hold_a_step() -> None:
    """A service that keeps asking for file reads (each answered: the file is not the
    script's) gets no more time for it than the step's own bound."""

    async def reads(conn: wire.Channel) -> None:
        while True:
            read = {"read": {"file": "not-attached", "offset": 0, "len": 1}}
            await conn.send(orjson.dumps(read) + b"\n")
            await conn.line(wire.SMALL_LINE, idle=5, timeout=5)
            await asyncio.sleep(0.05)

    async with hostile(reads) as address:
        remote = RemoteRunner([address], TOKEN, step_margin=1.0)
        attached = [FileInfo(id="f", mime="text/plain", size=5)]
        # Its bound: 1.3 s of wall time, no slot wait, 1 s of margin; the test's is far over.
        s = script("x", files=attached, limits=Limits(compute_ms=100))
        with pytest.raises(RunError, match=r"did not finish the step within 2\.3 s"):
            await asyncio.wait_for(remote.run(s), 30)
        await remote.aclose()


@pytest.mark.parametrize(
    ("field", "value"), [("slot_wait", 1e300), ("heartbeat", 1e9), ("live_wait", 1e12)]
)
async def test_a_welcome_that_states_endless_waits_is_refused(field: str, value: float) -> None:
    """A service whose welcome states a slot wait, a beat or a live wait past any bound (the
    client waits a step out by them) is refused with a clear error at once: with slot_wait
    1e300 a step waited past queue_timeout, for ever."""
    welcome = {
        "welcome": {
            "version": 3, "oldest": 1, "scripts": [1, 2], "languages": ["javascript"], "slots": 1,
            "busy": 0, "max_line": 1 << 20, "slot_wait": 0, "heartbeat": 0.1, "live_wait": 5,
        }
    }  # fmt: skip
    welcome["welcome"][field] = value

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            await reader.readline()
            writer.write(orjson.dumps(welcome) + b"\n")
            await writer.drain()
            await reader.read()  # then silence, as long as the client stays
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    host, port = server.sockets[0].getsockname()[:2]
    remote = RemoteRunner([f"{host}:{port}"], TOKEN)
    try:
        with pytest.raises(RunError, match=field):
            await asyncio.wait_for(remote.run(script("x")), 30)
    finally:
        await remote.aclose()
        server.close()


@pytest.mark.parametrize(
    ("answer", "permanent"),
    [
        (b"HTTP/1.1 400 Bad Request\r\n\r\n", True),
        (b'{"greeting": "hello"}\n', True),
        (b"", False),  # it closes at once: a service that expects TLS, or going down
    ],
)
async def test_a_peer_that_is_no_runner_service_fails_the_step_for_good(
    answer: bytes, permanent: bool
) -> None:
    """A peer that answers the hello with what no runner service says (an HTTP server on
    the address, another protocol) fails the step for good, naming it, as a refused token
    does: it was retried for the whole queue_timeout (300 s by default). One that only
    closes the connection may be a service going down, and is retried."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            await reader.readline()
            writer.write(answer)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    host, port = server.sockets[0].getsockname()[:2]
    remote = RemoteRunner([f"{host}:{port}"], TOKEN)
    try:
        with pytest.raises(RunError) as raised:
            await asyncio.wait_for(remote.run(script("x")), 30)
    finally:
        await remote.aclose()
        server.close()
    assert raised.value.permanent is permanent
    if permanent:
        assert "is not a codemode runner service" in str(raised.value)
        assert "check the address and port" in str(raised.value)


async def _failed(answer: bytes) -> RunError:
    """The RunError of a step sent to a service that answers it with ``answer`` alone."""

    async def say(conn: wire.Channel) -> None:
        await conn.send(answer)
        await conn.line(wire.SMALL_LINE, idle=5, timeout=5)

    async with hostile(say) as address:
        remote = RemoteRunner([address], TOKEN)
        try:
            with pytest.raises(RunError) as failed:
                await asyncio.wait_for(remote.run(script("x")), 30)
        finally:
            await remote.aclose()
    return failed.value


@pytest.mark.parametrize("kind", ["busy", "error", "ended"])
async def test_what_a_service_says_of_an_error_is_bounded_and_escaped(kind: str) -> None:
    """A service's error text reaches the step's RunError and the engine's log lines: 60,000
    characters of it, and a terminal's escape and a line break, came through whole."""
    text = "x" * 60_000 + "\x1b[31m\nforged"
    body: dict[str, object] = {"error": text}
    if kind == "busy":
        body.update(slots=1, busy=1)

    message = str(await _failed(orjson.dumps({kind: body}) + b"\n"))
    assert len(message) < wire.PEER_TEXT_BOUND + 1000, len(message)
    assert "\\x1b[31m\\x0aforged" in message and "\n" not in message


async def test_a_service_of_script_version_2_is_sent_the_step_as_version_2() -> None:
    """A service that takes script versions up to 2 gets a version 3 step as version 2,
    without ``compute_left_ms`` (a field its sandbox would refuse), not a skip."""
    lines: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = wire.Channel(reader, writer)
        with contextlib.suppress(Exception):
            await conn.line(wire.SMALL_LINE, idle=5, timeout=5)
            welcome = wire.Welcome(
                version=3, oldest=1, scripts=(1, 2), languages=["javascript"], slots=1, busy=0,
                max_line=1 << 20, slot_wait=0, heartbeat=0.1, live_wait=5,
            )  # fmt: skip
            await conn.send(wire.encode(welcome))
            lines.append(await conn.line(1 << 20, idle=5, timeout=5))
        conn.abort()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    host, port = server.sockets[0].getsockname()[:2]
    remote = RemoteRunner([f"{host}:{port}"], TOKEN)
    try:
        s = script("return 1", limits=Limits(compute_ms=100, compute_left_ms=50))
        with pytest.raises(RunError):
            await asyncio.wait_for(remote.run(s), 30)
    finally:
        await remote.aclose()
        server.close()
    sent = orjson.loads(lines[0])["script"]
    assert sent["version"] == 2
    assert sent["limits"] == {"compute_ms": 100}


@pytest.mark.parametrize(
    ("measure", "said"),
    [
        ('"wait_ms": "inf"', "process.wait_ms = inf"),
        ('"wall_ms": "nan"', "process.wall_ms = nan"),
        ('"cpu_ms": -1', "process.cpu_ms = -1.0"),
        ('"max_rss_bytes": -1', "process.max_rss_bytes = -1"),
    ],
)
async def test_a_step_whose_process_measures_are_none_is_the_services_fault(
    measure: str, said: str
) -> None:
    """A step whose process stats hold a measure that is none (negative, NaN, infinite: JSON
    has no such number, pydantic reads "inf" as one) breaks the protocol, as a ran's stats
    that are none do: the engine took its wait_ms as it came, and an infinite one failed its
    step event's span."""
    line = b'{"step": {"outcome": "finished", "value": 1, "process": {%s}}}\n' % measure.encode()
    failed = await _failed(line)
    assert f"it broke the protocol: its step says {said}, which is no measure" in str(failed)


@pytest.mark.parametrize("name", ["cpu_ms", "wait_ms", "wall_ms"])
async def test_a_step_whose_process_took_longer_than_the_step_is_the_services_fault(
    name: str,
) -> None:
    """A step answered at once whose process says it used an hour of CPU (or waited, or ran,
    an hour) lies: it ran within the time the step may take (its deadline, the slot wait and
    the step margin, 76 s here). The engine charged such a cpu_ms to the script's
    total_compute_ms, which failed the script for good."""
    line = b'{"step": {"outcome": "finished", "value": 1, "process": {"%s": 3.6e6}}}\n' % (
        name.encode()
    )
    failed = str(await _failed(line))
    assert f"it broke the protocol: its step says process.{name} = 3.6e+06, more than" in failed
    assert "ms of slack" in failed


@pytest.mark.parametrize(
    ("name", "bound"),
    [
        ("cpu_ms", "6,000 ms: the CPU the step may use, 5,000 ms,"),
        ("wait_ms", "1,000 ms: the service's slot wait, 0 ms,"),
    ],
    ids=["cpu", "wait"],
)
async def test_a_step_whose_process_used_past_its_allowance_is_the_services_fault(
    name: str, bound: str
) -> None:
    """A step answered at once whose process says it used 75 s of CPU, its compute_ms 5,000,
    lies, though 75 s is within the wait the client allows its answer (86 s): the engine
    charged it to total_compute_ms, and two such steps failed the script for good. Its wait
    is bounded by the service's slot wait (0 here) in the same way."""
    line = b'{"step": {"outcome": "finished", "value": 1, "process": {"%s": 75000}}}\n' % (
        name.encode()
    )
    failed = str(await _failed(line))
    assert f"its step says process.{name} = 75000, more than {bound} and 1,000 ms of" in failed


async def test_a_step_whose_cpu_is_at_its_allowance_is_taken() -> None:
    """An honest step stopped at its compute_ms says a little more (the CPU timer fires at a
    tick): it is taken, its cpu_ms as said."""

    async def say(conn: wire.Channel) -> None:
        step = b'{"step": {"outcome": "finished", "value": 1, "process": {"cpu_ms": 5004}}}\n'
        await conn.send(step)
        await conn.line(wire.SMALL_LINE, idle=5, timeout=5)

    async with hostile(say) as address:
        remote = RemoteRunner([address], TOKEN)
        try:
            step = await asyncio.wait_for(remote.run(script("x")), 30)
        finally:
            await remote.aclose()
    assert step.process is not None and step.process.cpu_ms == 5004


@pytest.mark.parametrize(
    "answer",
    [
        {"step": {"outcome": "finished", "value": 1, "\nforged": 1}},
        {"read": {"file": "f", "offset": 0, "len": 1, "\nforged": 1}},
        {"step": {"outcome": "calls", "calls": [{"name": "\nforged", "arguments": {}}]}},
    ],
    ids=["a step's key", "a read's key", "a call's name"],
)
async def test_what_a_service_puts_in_a_broken_answer_is_escaped(answer: object) -> None:
    """A malformed answer's keys, and a made-up call's name, reach the step's RunError
    (and the engine's log lines) with their control characters escaped, as a service's own
    error text does (a line break in one wrote a line into the engine's log)."""
    message = str(await _failed(orjson.dumps(answer) + b"\n"))
    assert "\\x0aforged" in message and "\n" not in message
