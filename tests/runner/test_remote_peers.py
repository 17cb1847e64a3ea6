"""Bad peers against a runner service: each is refused or dropped, and the others are served.

Each test plays one hostile or broken client by hand on the wire, then checks that a good
client still gets its step run, so one bad peer cannot take the service down.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator

import orjson
import pytest

from runner import ProcessRunner, RemoteRunner, RunError, Step
from runner import _wire as wire
from runner._service import RunnerService
from sandbox import protocol
from sandbox.protocol import FileInfo, Script

from .remote_support import (
    TOKEN,
    FakeRunner,
    RawClient,
    exec_runner,
    sandbox_children,
    script,
    services,
)
from .support import until


@pytest.fixture
async def service() -> AsyncIterator[RunnerService]:
    async with services(
        FakeRunner(), slots=2, handshake_timeout=0.5, line_timeout=0.5, max_script_line=16 * 1024
    ) as [service]:
        yield service


async def still_serves(service: RunnerService) -> None:
    step = await RemoteRunner([service.address], TOKEN).run(script("x", id="good"))
    assert step.value == {"runner": "fake", "id": "good"}


def script_message(s: Script) -> dict[str, object]:
    return {"script": {**s.model_dump(exclude_unset=True), "tenant": "t"}}


async def test_no_token(service: RunnerService) -> None:
    """A hello without a token is refused, naming what is missing."""
    client = await RawClient.connect(service.address)
    await client.send_json({"hello": {"version": 1}})
    assert await client.receive() == {
        "refused": {"error": "no token: hello must carry the service's token"}
    }
    assert await client.closed()
    await still_serves(service)


async def test_wrong_token(service: RunnerService) -> None:
    """A wrong token is refused without saying more, and the connection closed."""
    client = await RawClient.connect(service.address)
    assert await client.hello(token="not-the-token") == {"refused": {"error": "wrong token"}}
    assert await client.closed()
    await still_serves(service)


async def test_refused_hellos_are_logged_once_a_while_and_counted(
    service: RunnerService, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A peer that retries a wrong token (or a hostile one, a connection after another) got
    a log line for each: one line for its host and reason in ``REFUSED_EVERY`` seconds, and
    the count of the others in one line when that time is up (here: flushed at once). A
    refusal for another reason is a line of its own. Every one of them is still refused."""

    async def refused(**hello: object) -> None:
        client = await RawClient.connect(service.address)
        answer = await client.hello(**hello)  # type: ignore[arg-type]
        assert "refused" in answer, answer
        assert await client.closed()

    def said(text: str) -> list[str]:
        return [r.getMessage() for r in caplog.records if text in r.getMessage()]

    caplog.set_level("WARNING", logger="codemode.runner")
    # One window for the whole test, however slow the machine (31 connections).
    monkeypatch.setattr("runner._service.REFUSED_EVERY", 3600.0)
    for _ in range(30):
        await refused(token="not-the-token")
    await refused(token="")
    assert len(said("refused: wrong token")) == 1, said("refused")
    assert len(said("refused: no token")) == 1, said("refused")
    assert said("more hellos") == []
    service.refusals.flush()  # what its timer does REFUSED_EVERY seconds after
    [counted] = said("more hellos")
    assert "refused 29 more hellos, not logged one by one: 29 from 127.0.0.1 (wrong token)" in (
        counted
    ), counted
    assert "(31 refused since the start)" in counted, counted
    assert service.refusals.count == 31
    await still_serves(service)


async def test_refusals_from_many_hosts_are_bounded_lines() -> None:
    """Five thousand hosts (one IPv6 /64, and IPv4 ones) each refused: at most
    ``REFUSED_LINES`` lines in ``REFUSED_EVERY`` seconds, and one line counting the rest; a
    site's /64 is one host, an IPv4 client of a dual-stack socket its IPv4 address."""
    import logging

    from runner._service import REFUSED_LINES, RefusalLog, _host_group

    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Collect(level=logging.WARNING)
    logger = logging.getLogger("codemode.runner.service")
    logger.addHandler(handler)
    try:
        refusals = RefusalLog()
        for i in range(2500):
            refusals.refused(f"2001:db8::{i:x}:4000", "wrong token")
            refusals.refused(f"10.{i // 256}.{i % 256}.1:4000", "wrong token")
        assert len(lines) == REFUSED_LINES, lines
        refusals.close()
        assert len(lines) == REFUSED_LINES + 1, lines
        counted = lines[-1]
        assert counted.startswith(
            "refused 4,990 more hellos, not logged one by one: 2,499 from 2001:db8::/64 "
        ), counted
        assert counted.endswith("(5,000 refused since the start)"), counted
    finally:
        logger.removeHandler(handler)
    assert _host_group("::ffff:192.0.2.7:4000") == "192.0.2.7"
    assert _host_group("2001:db8::1:2:3:4:5") == "2001:db8::/64"
    assert _host_group("host.example:4000") == "host.example"


async def test_a_script_before_hello_is_refused(service: RunnerService) -> None:
    """Skipping the handshake gets a refusal, never a step."""
    client = await RawClient.connect(service.address)
    await client.send_json(script_message(script("return 1")))
    answer = await client.receive()
    assert "the first message must be hello" in answer["refused"]["error"]
    assert await client.closed()


async def test_a_hello_whose_version_is_no_number_is_refused(service: RunnerService) -> None:
    """`"version": true` is no wire version (it was welcomed at version 1)."""
    client = await RawClient.connect(service.address)
    await client.send_json({"hello": {"token": TOKEN, "version": True}})
    answer = await client.receive()
    assert "the first message must be hello" in answer["refused"]["error"], answer
    await still_serves(service)


async def test_a_malformed_hellos_text_is_not_logged(
    service: RunnerService, caplog: pytest.LogCaptureFixture
) -> None:
    """A hello that does not parse may hold the token (a client's, one character off, or
    this one's with junk after it): the peer is told, the log does not repeat its text."""
    for line in (
        b'{"hello": {"token": "SECRET-hunter2", "version": 2}} {"x": 1}\n',
        b'{"hello": {"token": "SECRET-hunter2", "version": true}}\n',
    ):
        client = await RawClient.connect(service.address)
        await client.send(line)
        answer = await client.receive()
        assert "refused" in answer, answer
    assert "SECRET" not in caplog.text
    assert "a malformed hello (its text is not logged, as it may hold a token)" in caplog.text
    await still_serves(service)


async def test_not_json(service: RunnerService) -> None:
    client = await RawClient.connect(service.address)
    await client.send(b"GET / HTTP/1.1\r\n\r\n")
    answer = await client.receive()
    assert "not JSON" in answer["refused"]["error"]
    await still_serves(service)


async def test_a_slow_client_that_never_finishes_its_hello(service: RunnerService) -> None:
    """A client that trickles half a line is dropped after the handshake timeout."""
    client = await RawClient.connect(service.address)
    started = time.monotonic()
    await client.send(b'{"hello": {"tok')
    await still_serves(service)  # served meanwhile
    answer = await client.receive()
    assert answer == {"refused": {"error": "no hello within 0.5 s"}}
    assert time.monotonic() - started > 0.4  # not before its timeout (no upper bound: load)
    assert await client.closed()


async def test_a_client_that_says_nothing(service: RunnerService) -> None:
    client = await RawClient.connect(service.address)
    answer = await client.receive()
    assert answer == {"refused": {"error": "no hello within 0.5 s"}}


async def test_a_slow_client_that_never_finishes_its_script(service: RunnerService) -> None:
    """After the handshake, a line that stalls midway is dropped after line_timeout."""
    client = await RawClient.connect(service.address)
    assert "welcome" in await client.hello()
    await client.send(b'{"script": {"id": "x", "code": "ret')
    started = time.monotonic()
    assert await client.closed(timeout=5)
    assert time.monotonic() - started > 0.4  # not before its timeout (no upper bound: load)
    await still_serves(service)


async def test_a_hello_over_the_bound(service: RunnerService) -> None:
    """A first line over 64 KiB is refused as soon as the bound is passed."""
    client = await RawClient.connect(service.address)
    await client.send(b'{"hello": {"token": "' + b"a" * 200_000)
    answer = await client.receive()
    assert "over the bound of 65,536 bytes" in answer["refused"]["error"]
    client.close()
    await still_serves(service)


async def test_a_script_over_the_bound(service: RunnerService) -> None:
    """A script line over the service's bound is refused and the connection dropped."""
    client = await RawClient.connect(service.address)
    welcome = (await client.hello())["welcome"]
    assert welcome["max_line"] == 16 * 1024
    await client.send_json(script_message(script("// " + "x" * 20_000)))
    answer = await client.receive()
    assert answer["error"]["cause"] == "protocol"
    assert "over the bound of 16,384 bytes" in answer["error"]["error"]
    assert await client.closed()
    # The client checks the bound from the welcome itself and does not send such a script.
    remote = RemoteRunner([service.address], TOKEN)
    with pytest.raises(
        RunError, match=r"over its bound of 16,384 \(the service's --line-memory\)"
    ) as caught:
        await remote.run(script("// " + "x" * 20_000))
    # Nor will it ever be sent as it is: the step fails at once (its queue would wait out
    # queue_timeout for nothing).
    assert caught.value.permanent
    await still_serves(service)


async def test_a_version_the_service_does_not_speak(service: RunnerService) -> None:
    """A client of another wire version is refused with both ranges named."""
    client = await RawClient.connect(service.address)
    await client.send_json({"hello": {"token": TOKEN, "version": 9, "oldest": 7}})
    answer = await client.receive()
    assert answer == {
        "refused": {
            "error": "no wire version in common: this service speaks versions 1 to 3, the "
            "client 7 to 9; upgrade the older side"
        }
    }
    # A newer client that still speaks version 3 is welcomed at version 3, with heartbeats and
    # live steps.
    newer = await RawClient.connect(service.address)
    await newer.send_json({"hello": {"token": TOKEN, "version": 4, "oldest": 1}})
    welcome = (await newer.receive())["welcome"]
    assert welcome["version"] == 3 and welcome["heartbeat"] == service.heartbeat
    # Clients of versions 2 and 1 get no key they do not know (their welcome forbids unknown
    # keys): no live wait for version 2, and no heartbeat either for version 1.
    two = await RawClient.connect(service.address)
    welcome = (await two.hello(version=2))["welcome"]
    assert welcome["version"] == 2 and "heartbeat" in welcome and "live_wait" not in welcome
    older = await RawClient.connect(service.address)
    welcome = (await older.hello(version=1))["welcome"]
    assert welcome["version"] == 1 and "heartbeat" not in welcome and "live_wait" not in welcome


async def test_a_hello_whose_oldest_is_past_its_version_is_named_so(
    service: RunnerService,
) -> None:
    """It was refused as no version in common, "the client 5 to 3; upgrade the older side",
    which no upgrade mends."""
    client = await RawClient.connect(service.address)
    await client.send_json({"hello": {"token": TOKEN, "version": 3, "oldest": 5}})
    error = (await client.receive())["refused"]["error"]
    assert "the client's hello says it speaks 5 to 3, none (its oldest is" in error, error
    assert "upgrade" not in error
    await still_serves(service)


async def test_a_client_with_no_wire_version_in_common_fails_at_once(
    service: RunnerService,
) -> None:
    """A client that shares no wire version with the service fails the step at once, as a
    permanent error (it was retried until queue_timeout: five minutes, then "resume it
    later", which no wait mends)."""

    class Older(RemoteRunner):
        wire_version = 0

    remote = Older([service.address], TOKEN)
    try:
        with pytest.raises(RunError, match="no wire version in common") as caught:
            await asyncio.wait_for(remote.run(script("return 1")), 30)
        assert caught.value.permanent
    finally:
        await remote.aclose()
    await still_serves(service)


async def test_a_script_version_the_service_does_not_take(service: RunnerService) -> None:
    """A script of another version is answered unfit; the connection stays usable."""
    client = await RawClient.connect(service.address)
    await client.hello()
    message = script_message(script("return 1"))
    message["script"]["version"] = 99  # type: ignore[index]
    await client.send_json(message)
    answer = await client.receive()
    assert answer["error"]["cause"] == "unfit"
    assert (
        f"takes script versions {protocol.OLDEST} to {protocol.VERSION}, the step is version 99"
        in answer["error"]["error"]
    )
    await client.send_json({"load": {}})
    assert await client.receive() == {
        "load": {"slots": 2, "busy": 0, "waiting": 0, "draining": False}
    }


async def test_a_malformed_script(service: RunnerService) -> None:
    client = await RawClient.connect(service.address)
    await client.hello()
    await client.send_json({"script": {"id": "x", "tenant": "t"}})
    answer = await client.receive()
    assert answer["error"]["cause"] == "protocol"
    assert "malformed 'script' message" in answer["error"]["error"]
    assert await client.closed()


async def test_what_a_client_puts_in_a_protocol_error_cannot_forge_a_log_line(
    service: RunnerService, caplog: pytest.LogCaptureFixture
) -> None:
    """A key of a malformed script is named in the service's log line with its control
    characters escaped, as in the client's answer (a key holding a line break wrote a
    line of the client's choosing into the service's log)."""
    client = await RawClient.connect(service.address)
    await client.hello()
    forged = "\n2026-12-06 12:00:00,000 WARNING codemode.runner.service: forged"
    message = script_message(script("x"))
    message["script"][forged] = 1  # type: ignore[index]
    await client.send_json(message)
    answer = await client.receive()
    assert "\\x0a2026-12-06" in answer["error"]["error"]
    assert await client.closed()
    [logged] = [r.getMessage() for r in caplog.records if "malformed 'script'" in r.getMessage()]
    assert "\n" not in logged and "\\x0a2026-12-06" in logged
    await still_serves(service)


async def test_an_unknown_request(service: RunnerService) -> None:
    client = await RawClient.connect(service.address)
    await client.hello()
    await client.send_json({"shell": {"cmd": "id"}})
    answer = await client.receive()
    assert answer["error"]["error"] == "a 'shell' message where script or load was expected"
    assert await client.closed()
    client = await RawClient.connect(service.address)
    await client.hello()
    await client.send_json({"end": {}})
    answer = await client.receive()
    assert answer["error"]["error"] == "an 'end' message where script or load was expected"
    assert await client.closed()


async def test_a_client_that_vanishes_mid_step_has_its_process_killed() -> None:
    """The service notices the closed connection, kills the sandbox process, serves on."""
    async with services(exec_runner(), slots=1, slot_wait=5) as [service]:
        client = await RawClient.connect(service.address)
        await client.hello()
        await client.send_json(script_message(script("while (true) {}")))
        for _ in range(300):
            if sandbox_children():
                break
            await asyncio.sleep(0.01)
        assert len(sandbox_children()) == 1
        client.close()
        for _ in range(300):
            if not sandbox_children() and service.slots.in_use == 0:
                break
            await asyncio.sleep(0.01)
        assert sandbox_children() == []
        assert service.slots.in_use == 0
        step = await RemoteRunner([service.address], TOKEN).run(script("return 6 * 7"))
        assert step.value == 42


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_a_step_its_client_abandons_closes_its_process_fds() -> None:
    """The local run of a step whose client leaves is cancelled once and ends its process to
    the end, its pipes and pidfd closed (cancelled again as the step was dropped, its reap
    was cut short: each abandoned step left seven fds open on the service, for good)."""
    local = ProcessRunner(mode="fork", slots=1)
    async with services(local, slots=1) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        await remote.run(script("return 1"))  # the fork server is up, the connection kept
        await until(lambda: not (local.ending or local._reaping), "the first step's reap")
        before = _open_fds()
        assert local.server is not None and local.server.popen is not None
        server = local.server.popen.pid

        def scripts() -> list[int]:  # the sandbox processes, not the fork server
            return [p.pid for p in sandbox_children() if p.pid != server]

        for _ in range(3):
            client = await RawClient.connect(service.address)
            await client.hello(version=wire.WIRE_VERSION)  # with beats
            await client.send_json(script_message(script("while (true) {}")))
            await until(scripts, "the step's process")
            client.close()
            await until(lambda: not service.slots.in_use, "the step to be abandoned")
        await until(lambda: _open_fds() <= before, "the abandoned steps' fds to close")
        assert not scripts()
        assert (await remote.run(script("return 6 * 7"))).value == 42
        await remote.aclose()


async def test_closing_the_service_as_it_abandons_a_step_lets_the_run_end() -> None:
    """The service closing while it abandons a step (its client left; the local run is
    ending its process) does not cancel the run again: its end goes on to the end (it was
    cut short, and the process's pipes were left open)."""
    ending, gate = asyncio.Event(), asyncio.Event()
    ended: list[str] = []
    fake = FakeRunner()

    async def run(s: Script, files: object, tenant: str) -> object:
        try:
            await asyncio.Event().wait()
        finally:  # as a process runner's kill and reap
            ending.set()
            await gate.wait()
            ended.append(s.id)
        raise AssertionError("unreachable")

    fake.handler = run  # type: ignore[assignment]
    service = RunnerService(TOKEN, runner=fake)
    await service.start("127.0.0.1", 0)
    try:
        client = await RawClient.connect(service.address)
        await client.hello(version=wire.WIRE_VERSION)
        await client.send_json(script_message(script("x")))
        await until(lambda: fake.running, "the step to run")
        client.close()
        await until(ending.is_set, "the step to be abandoned")
        closing = asyncio.create_task(service.aclose())
        for _ in range(20):  # the close's cancellations land (turns of the loop, not time)
            await asyncio.sleep(0)
        gate.set()
        await asyncio.wait_for(closing, 10)
        assert ended == ["s"]
    finally:
        gate.set()
        await service.aclose()


async def test_a_client_that_talks_out_of_turn_mid_step_is_dropped() -> None:
    """Data the service did not ask for during a step ends the step and the connection, and
    the client is told why (it heard only the end of the stream)."""
    gate = asyncio.Event()
    fake = FakeRunner()

    async def wait(s: Script, files: object, tenant: str) -> object:
        await gate.wait()
        raise AssertionError("the step should have been abandoned")

    fake.handler = wait  # type: ignore[assignment]
    async with services(fake) as [service]:
        client = await RawClient.connect(service.address)
        await client.hello()
        await client.send_json(script_message(script("x")))
        while not fake.running:
            await asyncio.sleep(0.01)
        await client.send_json({"bytes": 3})
        answer = await client.receive()
        while "beat" in answer:
            answer = await client.receive()
        assert answer["error"]["cause"] == "protocol", answer
        assert answer["error"]["error"] == (
            "step s abandoned: the client sent a message during a step when no read was asked"
        )
        assert await client.closed()
        assert fake.cancelled == 1


async def test_a_read_answered_with_too_many_bytes_is_dropped() -> None:
    """A client that answers a read with more bytes than asked is dropped, the step killed."""
    fake = FakeRunner()

    async def read(s: Script, files: object, tenant: str) -> object:
        await files.read("a", 0, 4)  # type: ignore[attr-defined]
        raise AssertionError("the read should not have been answered")

    fake.handler = read  # type: ignore[assignment]
    async with services(fake) as [service]:
        client = await RawClient.connect(service.address)
        await client.hello()
        attached = [FileInfo(id="a", mime="text/plain", size=4)]
        await client.send_json(script_message(script("x", files=attached)))
        assert await client.receive() == {"read": {"file": "a", "offset": 0, "len": 4}}
        await client.send(orjson.dumps({"bytes": 1000}) + b"\n" + b"x" * 1000)
        assert await client.closed()
        assert fake.cancelled == 1
        fake.handler = fake._finish
        await still_serves(service)


async def test_a_read_never_answered_times_out() -> None:
    """A client that never answers a read: the step fails as unavailable and is dropped."""
    fake = FakeRunner()

    async def read(s: Script, files: object, tenant: str) -> object:
        await files.read("a", 0, 4)  # type: ignore[attr-defined]
        raise AssertionError("the read should not have been answered")

    fake.handler = read  # type: ignore[assignment]
    async with services(fake, read_timeout=0.3) as [service]:
        client = await RawClient.connect(service.address)
        await client.hello()
        attached = [FileInfo(id="a", mime="text/plain", size=4)]
        await client.send_json(script_message(script("x", files=attached)))
        assert "read" in await client.receive()
        answer = await client.receive()
        assert answer["error"]["cause"] == "unavailable"
        assert "did not answer a read of 'a' within 0.3 s" in answer["error"]["error"]
        assert await client.closed()


async def test_a_service_without_a_token_takes_any_client() -> None:
    """Only an explicit token=None turns authentication off."""
    async with services(FakeRunner(), token=None) as [service]:
        client = await RawClient.connect(service.address)
        await client.send_json({"hello": {"version": 1}})
        assert "welcome" in await client.receive()
        await still_serves(service)
    with pytest.raises(ValueError, match="token is empty"):
        RunnerService("", runner=FakeRunner())


async def test_a_client_that_never_reads_its_answer_is_dropped_and_a_drain_ends() -> None:
    """A client that sends a step and reads nothing of its answer (too big for the socket's
    buffers) is dropped after ``line_timeout``: it holds neither the step nor a drain."""
    answered = asyncio.Event()

    async def big(s: Script, files: object, tenant: str) -> Step:
        answered.set()
        return Step(outcome="finished", printed="p" * (32 * protocol.MiB))

    async with services(FakeRunner(big), line_timeout=1.0) as [service]:
        client = await RawClient.connect(service.address)
        await client.hello()
        await client.send_json(script_message(script("x")))
        await answered.wait()
        await asyncio.wait_for(service.drain(), 30)
        assert service.slots.in_use == 0
        client.close()


async def test_a_large_script_line_is_parsed_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A script line over 1 MiB is parsed on a thread: parsed on the loop, a 30 MB one held
    every other connection for 5 s (their heartbeats stopped, and their clients took the
    service for gone). A small one stays on the loop (a thread's hop would cost it more)."""
    import threading

    from runner import _service

    threads: dict[str, bool] = {}
    decode_body = _service.wire.decode_body

    def recording(kind: str, body: object, expect: tuple[str, ...]) -> object:
        on_loop = threading.current_thread() is threading.main_thread()
        if kind == "script" and isinstance(body, dict):
            threads[str(body.get("id"))] = on_loop
        return decode_body(kind, body, expect)

    monkeypatch.setattr(_service.wire, "decode_body", recording)
    async with services(FakeRunner()) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        big = await remote.run(script("// " + "x" * (_service.OFF_LOOP_LINE + 1), id="big"))
        small = await remote.run(script("return 1", id="small"))
        assert big.value == {"runner": "fake", "id": "big"} and small.value is not None
        assert threads == {"big": False, "small": True}
        await remote.aclose()
