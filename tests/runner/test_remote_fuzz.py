"""Fuzzing the runner service's reader of a peer: the framing (``wire.Channel``), the message
parser (``wire.decode``), and a live service fed arbitrary bytes on loopback.

Whatever a peer sends, the service must never crash, hang or hold more than its bounds: it
answers with a clear error (``refused`` or ``error``) or closes the connection, and the next
good client is served.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from runner import RemoteRunner
from runner import _wire as wire
from runner._service import RunnerService

from .remote_support import TOKEN, FakeRunner, script

# The same examples on every run (derandomize), so a red run always means a regression; a
# change to the strategies explores anew.
FUZZ = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

KINDS = ["hello", "welcome", "refused", "load", "busy", "error", "read", "step", "beat"]
KINDS += ["script", "bytes", "missing", "nonsense"]

json_data = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def _dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:  # an int orjson cannot write: send it as text, as a peer could
        return repr(value).encode()


envelopes = st.builds(lambda kind, body: _dumps({kind: body}), st.sampled_from(KINDS), json_data)
script_lines = st.builds(
    lambda body, tenant: _dumps({"script": {**body, "tenant": tenant}}),
    st.fixed_dictionaries(
        {"id": st.text(max_size=10), "code": st.text(max_size=30)},
        optional={"version": json_data, "records": json_data, "limits": json_data},
    ),
    json_data,
)
GOOD_SCRIPT = script("x").model_dump(mode="json", exclude_unset=True)
good_scripts = st.builds(
    lambda tenant: _dumps({"script": {**GOOD_SCRIPT, "tenant": tenant}}),
    st.text(min_size=1, max_size=5) | json_data,
)
lines = st.one_of(
    st.binary(max_size=300),
    envelopes,
    script_lines,
    good_scripts,
    st.just(b'{"load": {}}'),
    st.just(b"x" * (wire.SMALL_LINE + 10)),  # over the hello's bound
).map(lambda line: line + b"\n")
peers = st.tuples(
    st.sampled_from([b"", b'{"hello": {"token": "%s", "version": 2}}\n' % TOKEN.encode()]),
    st.lists(lines | st.binary(max_size=64), max_size=6),
)


@given(st.lists(st.binary(min_size=1, max_size=200), max_size=20), st.integers(1, 300))
@FUZZ
def test_framing_of_arbitrary_chunks(chunks: list[bytes], bound: int) -> None:
    """Lines come out whole, newline-ended, at most ``bound`` bytes, in the order the bytes
    came; a line over the bound or cut short is a WireError; the buffer never holds more than
    the bound and one read."""

    async def read_all() -> None:
        reader = asyncio.StreamReader()
        for chunk in chunks:
            reader.feed_data(chunk)
        reader.feed_eof()
        channel = wire.Channel(reader, _NullWriter())  # type: ignore[arg-type]
        got = b""
        try:
            while (line := await channel.line(bound, idle=1, timeout=1)) is not None:
                assert line.endswith(b"\n") and b"\n" not in line[:-1] and len(line) <= bound
                assert len(channel._buffer) <= bound + wire._CHUNK
                got += line
            assert got == b"".join(chunks)
        except wire.WireError as e:
            assert "bound" in str(e) or "middle of a line" in str(e)
            assert b"".join(chunks).startswith(got)

    asyncio.run(read_all())


class _NullWriter:
    def get_extra_info(self, name: str) -> None:
        return None


# What each reader of the wire expects, service and client.
EXPECTS = [
    ("hello",),
    ("welcome", "refused"),
    ("load",),
    ("script",),
    ("bytes", "missing"),
    ("step", "read", "busy", "error", "beat"),
]


@given(st.one_of(st.binary(max_size=300), envelopes, script_lines), st.sampled_from(EXPECTS))
@FUZZ
def test_decoding_arbitrary_lines(line: bytes, expect: tuple[str, ...]) -> None:
    """Every line decodes to a kind asked for or raises WireError naming the problem."""
    try:
        wire.decode(line, expect)
    except wire.WireError as e:
        assert str(e)


def test_a_live_service_fed_arbitrary_bytes(caplog: pytest.LogCaptureFixture) -> None:
    """Arbitrary bytes, before or after a good hello, end with a clear answer or a close
    within the service's own timeouts; nothing is left running, nothing is logged as a
    failure of the service, and a good client is served after each peer."""
    caplog.set_level(logging.WARNING, logger="codemode.runner.service")
    with asyncio.Runner() as loop:
        service = RunnerService(
            TOKEN,
            runner=FakeRunner(),
            handshake_timeout=0.5,
            idle_timeout=0.5,
            line_timeout=0.5,
            read_timeout=0.5,
            max_script_line=16 * 1024,
        )
        loop.run(service.start("127.0.0.1", 0))
        good = RemoteRunner([service.address], TOKEN, keep_idle=0)

        @given(peers)
        @FUZZ
        def one_peer(peer: tuple[bytes, list[bytes]]) -> None:
            loop.run(_play(service, good, peer))

        try:
            one_peer()
        finally:
            loop.run(good.aclose())
            loop.run(service.aclose())
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert failures == [], [r.getMessage() for r in failures]


ANSWERS = {"welcome", "refused", "error", "load", "step", "busy", "read", "beat"}


async def _play(
    service: RunnerService, good: RemoteRunner, peer: tuple[bytes, list[bytes]]
) -> None:
    hello, rest = peer
    reader, writer = await asyncio.open_connection(service.host, service.port)
    try:
        writer.write(hello + b"".join(rest))
        with_suppressed_reset = asyncio.wait_for(writer.drain(), 10)
        try:
            await with_suppressed_reset
            writer.write_eof()
        except (ConnectionError, OSError):
            pass  # the service already dropped us: fine
        received = bytearray()
        try:
            while chunk := await asyncio.wait_for(reader.read(65536), 10):
                received += chunk
                assert len(received) < 1024 * 1024, "the service keeps talking"
        except ConnectionError:
            pass  # a reset after the last answer: a close
    finally:
        writer.transport.abort()
    kinds = []
    for line in bytes(received).splitlines():
        ((kind, body),) = orjson.loads(line).items()
        assert kind in ANSWERS, line
        if kind in ("refused", "error"):
            assert isinstance(body["error"], str) and body["error"], line
        kinds.append(kind)
    event(f"answered {'+'.join(dict.fromkeys(kinds)) or 'nothing'}")
    for _ in range(5000):  # the service lets go of the connection (bounded wait)
        if not service._connections:
            break
        await asyncio.sleep(0.002)
    assert not service._connections and service._welcomed == 0 and not service._unwelcomed
    assert service._steps == 0 and service.slots.in_use == 0
    step = await good.run(script("x", id="good"))
    assert step.value == {"runner": "fake", "id": "good"}
