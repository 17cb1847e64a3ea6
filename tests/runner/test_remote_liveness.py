"""A runner service under strangers and freezes: idle sockets cannot lock out a client with
the token, and a step on a service that stops answering moves to another within seconds."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import orjson
import pytest

from runner import ProcessRunner, RemoteRunner, _remote
from runner import _wire as wire
from runner._service import MAX_UNWELCOMED
from sandbox.protocol import FileInfo, Record

from .remote_support import (
    TOKEN,
    FakeRunner,
    RawClient,
    blocked,
    script,
    service_process,
    services,
    warmed,
)


async def until(condition: object, what: str) -> None:
    """Yield to the event loop until ``condition()`` holds (bounded, so a bug cannot hang)."""
    for _ in range(5000):
        if callable(condition) and condition():
            return
        await asyncio.sleep(0.002)
    raise AssertionError(f"gave up waiting for {what}")


async def test_idle_sockets_cannot_lock_out_a_client_with_the_token() -> None:
    """Connections that never say hello count against a budget of their own, not against
    max_connections: past it, the oldest is dropped for a newcomer once it is CROWD_AGE old, so a client with the
    token still gets its step run and the service stays in rotation."""
    idle = 100
    async with services(FakeRunner(), max_connections=16, handshake_timeout=60) as [service]:
        sockets = [await RawClient.connect(service.address) for _ in range(idle)]
        await until(lambda: service.accepted == idle, "the service to accept every socket")
        remote = RemoteRunner([service.address], TOKEN)
        step = await remote.run(script("x", id="good"))
        assert step.value == {"runner": "fake", "id": "good"}
        assert remote.out_of_rotation() == {}
        # The oldest were dropped for the newcomers once they had had their time (the
        # client's place among them taken as one came free).
        assert 1 <= service.crowded_out <= idle - MAX_UNWELCOMED + 1
        for s in sockets:
            s.close()
        await remote.aclose()


async def test_a_burst_of_clients_with_the_token_is_never_cut_off() -> None:
    """More connections than max_unwelcomed open at once, each saying hello at once (an
    engine starting many scripts): the newcomers wait for a place, none is dropped, and the
    service stays in rotation. (The oldest was dropped for each newcomer at once, before it
    could read its hello: 36 of 100 steps failed and the service went out of rotation.)"""
    async with services(FakeRunner(), max_connections=512) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        count = 2 * MAX_UNWELCOMED + 10
        steps = await asyncio.gather(*(remote.run(script("x", id=f"s{i}")) for i in range(count)))
        assert [s.value for s in steps] == [{"runner": "fake", "id": f"s{i}"} for i in range(count)]
        assert service.crowded_out == 0
        assert remote.out_of_rotation() == {}
        await remote.aclose()


async def test_connections_past_the_open_file_limit_are_turned_away() -> None:
    """Past what the open-file limit leaves room for, a newcomer is closed at once, counted
    and said in the log, while the service goes on for the connections it holds and takes
    new ones once some close. (Under ulimit -n 1024 and its defaults, the service ran out of
    descriptors: every step failed making a sandbox's pipes, and asyncio's accept loop
    logged thousands of tracebacks a second.)"""
    async with services(FakeRunner(), handshake_timeout=60) as [service]:
        service.connection_room = 4
        held = [await RawClient.connect(service.address) for _ in range(4)]
        await until(lambda: len(service._connections) == 4, "the service to hold four")
        extra = await RawClient.connect(service.address)
        await until(lambda: service.turned_away == 1, "the newcomer to be turned away")
        assert await extra.closed()  # without a word
        assert "welcome" in await held[0].hello()
        for client in held:
            client.close()
        await until(lambda: not service._connections, "the service to see them go")
        remote = RemoteRunner([service.address], TOKEN)
        step = await remote.run(script("x", id="after"))
        assert step.value == {"runner": "fake", "id": "after"}
        await remote.aclose()


def test_a_service_without_open_files_to_spare_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An open-file limit that leaves no room for connections beside the slots' and the
    live processes' is refused when the service is made, naming the remedy."""
    import resource

    from runner import _service

    real = resource.getrlimit

    def low(which: int) -> tuple[int, int]:
        return (256, 256) if which == resource.RLIMIT_NOFILE else real(which)

    monkeypatch.setattr(_service.resource, "getrlimit", low)
    with pytest.raises(ValueError, match=r"open-file limit \(256, ulimit -n\) leaves room"):
        _service.RunnerService(TOKEN, runner=FakeRunner(), slots=2, live_max=30)
    made = _service.RunnerService(TOKEN, runner=FakeRunner(), slots=2, live_max=4)
    assert made.connection_room == 256 - _service.FD_RESERVE - 8 * (2 * 2 + 4)


async def test_welcomed_connections_are_capped() -> None:
    """Past max_connections welcomed connections, a hello is refused; one leaving makes room."""
    async with services(FakeRunner(), max_connections=2) as [service]:
        clients = [await RawClient.connect(service.address) for _ in range(2)]
        for c in clients:
            assert "welcome" in await c.hello()
        extra = await RawClient.connect(service.address)
        assert await extra.hello() == {
            "refused": {"error": "too many connections; try again later"}
        }
        clients[0].close()
        await until(lambda: service._welcomed == 1, "the service to see the client leave")
        again = await RawClient.connect(service.address)
        assert "welcome" in await again.hello()
        for c in [clients[1], extra, again]:
            c.close()


async def test_a_step_in_flight_gets_heartbeats_and_none_after_its_answer() -> None:
    """A client of wire version 2 hears a beat every ``heartbeat`` seconds while its step
    runs; the answer is the last line of the step, so the next request's answer follows it."""
    gate = asyncio.Event()
    async with services(FakeRunner(blocked(gate)), heartbeat=0.01) as [service]:
        client = await RawClient.connect(service.address)
        await client.send_json({"hello": {"token": TOKEN, "version": 2}})
        assert (await client.receive())["welcome"]["heartbeat"] == 0.01
        message = {"script": {**script("x").model_dump(exclude_unset=True), "tenant": "t"}}
        await client.send_json(message)
        for _ in range(3):
            assert await client.receive() == {"beat": {}}
        gate.set()
        while (answer := await client.receive()) == {"beat": {}}:
            pass
        assert answer["step"]["value"] == {"runner": "fake", "id": "s"}
        await client.send_json({"load": {}})
        assert "load" in await client.receive()
        client.close()


class _GatedFiles:
    """A FileReader whose first read waits for ``go``: the test freezes the service then."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.go = asyncio.Event()
        self.reads = 0

    async def read(self, file_id: str, offset: int, length: int) -> bytes:
        self.reads += 1
        self.asked.set()
        await self.go.wait()
        return b"hello"[offset : offset + length]


@pytest.mark.timeout(120)
async def test_a_frozen_service_loses_its_step_to_another_within_seconds(tmp_path: Path) -> None:
    """A service stopped (SIGSTOP) mid-step stops sending heartbeats: the client counts it
    as gone after ``silence`` seconds and runs the step on another service, instead of
    waiting out the step's whole deadline (86 s by default)."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    beat = ("--heartbeat", "0.1", "--slots", "1")
    async with (
        service_process(token_file, *beat) as (stopped, frozen),
        service_process(token_file, *beat) as (_, healthy),
    ):
        await warmed(frozen, healthy)
        remote = RemoteRunner([frozen, healthy], TOKEN, silence=2.0)
        remote._turn = -1  # the first address first
        files = _GatedFiles()
        code = 'return await files.text("f")'
        attached = [FileInfo(id="f", mime="text/plain", size=5)]
        run = asyncio.create_task(remote.run(script(code, files=attached), files))
        await files.asked.wait()  # the step is running on the first service
        os.kill(stopped.pid, signal.SIGSTOP)
        files.go.set()
        # Bounded under the step's deadline (86 s), so the test fails instead of waiting that
        # out; a loaded machine needs seconds for the step on the other service.
        step = await asyncio.wait_for(run, 60)
        assert step.outcome == "finished", step.error
        assert step.value == "hello"
        status = remote.status()
        assert status[frozen]["abandoned"] == 1
        assert "went silent for 2 s" in status[frozen]["why"]
        assert status[healthy]["steps"] == 1
        assert files.reads == 2  # once on each service
        os.kill(stopped.pid, signal.SIGCONT)
        await remote.aclose()


def test_the_welcome_of_a_service_that_beats_parses() -> None:
    """The version 2 welcome carries heartbeat; a version 1 welcome leaves it out."""
    from runner import _wire as wire

    body = {
        "version": 2,
        "oldest": 1,
        "scripts": [1, 1],
        "languages": ["javascript"],
        "slots": 1,
        "busy": 0,
        "max_line": 10,
        "slot_wait": 1.0,
        "heartbeat": 0.5,
    }
    welcome = wire.decode(orjson.dumps({"welcome": body}), ("welcome",))
    assert welcome.heartbeat == 0.5
    v1 = welcome.model_copy(update={"heartbeat": None})
    assert b"heartbeat" not in wire.encode(v1)


@pytest.mark.timeout(120)
async def test_a_frozen_service_that_reads_nothing_loses_its_step_within_seconds(
    tmp_path: Path,
) -> None:
    """A service stopped (SIGSTOP) while the client sends a script line bigger than the
    sockets' buffers reads none of it: the client counts it as gone after ``silence``
    seconds and runs the step on another service, instead of waiting on the send for ever."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    beat = ("--heartbeat", "0.1", "--slots", "1")
    async with (
        service_process(token_file, *beat) as (stopped, frozen),
        service_process(token_file, *beat) as (_, healthy),
    ):
        await warmed(frozen, healthy)
        # A long connect timeout while the service is healthy: a loaded machine can take over
        # 2 s to welcome a fresh service's first client, which put it out of rotation before
        # the freeze this test is about (seen once in CI).
        remote = RemoteRunner([frozen, healthy], TOKEN, silence=2.0, connect_timeout=30.0)
        remote._turn = -1  # the first address first
        assert (await remote.run(script("return 1"))).value == 1  # its connection is kept
        assert remote.status()[frozen]["steps"] == 1, remote.status()
        os.kill(stopped.pid, signal.SIGSTOP)
        # The kept connection fails on the send; the fresh one tried next waits this long
        # for a welcome from the stopped service.
        remote.connect_timeout = 2.0
        big = "// " + "x" * (32 << 20) + "\nreturn 2"
        remote._turn = -1
        # Bounded, so the test fails instead of hanging on the send.
        step = await asyncio.wait_for(remote.run(script(big)), 60)
        assert step.value == 2, step.error
        status = remote.status()
        assert status[frozen]["failures"] == 1 and status[healthy]["steps"] == 1
        os.kill(stopped.pid, signal.SIGCONT)
        await remote.aclose()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("segment", ["step", "resumed"])
async def test_a_step_run_while_the_engine_was_busy_after_sending_it_is_no_lie(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, segment: str
) -> None:
    """The engine's loop busy for 2 s right after it sent a step's line (another task's
    synchronous work, or the engine starved of CPU) while the service ran the step: the
    process's wall time counts those seconds, and is no lie. The client counted its wait
    from after the send, took the time for more than the step could take, and put the
    healthy service out of rotation (a step, or a live run's resumed segment)."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    async with service_process(token_file, "--slots", "1") as (_, address):
        await warmed(address)
        remote = RemoteRunner([address], TOKEN, silence=30.0, connect_timeout=30.0)
        # The file read makes the process wait for this client, so it runs while the loop is.
        code = 'return await files.text("f")'
        if segment == "resumed":
            code = "await tools.t({ n: 1 });\n" + code
        attached = [FileInfo(id="f", mime="text/plain", size=5)]
        files = _GatedFiles()
        files.go.set()
        busy_after = b'{"script"' if segment == "step" else b'{"results"'
        send = wire.Channel.send

        async def busy(conn: wire.Channel, data: bytes) -> None:
            await send(conn, data)
            if data.startswith(busy_after):
                time.sleep(2.0)  # the loop busy: nothing reads the service's answer meanwhile

        monkeypatch.setattr(wire.Channel, "send", busy)
        try:
            s = script(code, files=attached, tools=["t"])
            step = await remote.run(s, files, live=segment == "resumed")
            if segment == "resumed":
                assert step.outcome == "calls" and step.live is not None, step.error
                step = await step.live.resume([Record(name="t", arguments={"n": 1}, result=1)])
            assert step.outcome == "finished" and step.value == "hello", step.error
            status = remote.status()[address]
            assert status["failures"] == 0, status["why"]
        finally:
            await remote.aclose()


async def test_a_step_run_while_the_engines_clock_stood_still_is_no_lie(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The engine's host asleep (a laptop's lid closed, a suspended host: CLOCK_MONOTONIC
    stands still) while the service ran a step: the process's honest 1.5 s are more than the
    client measured, and no lie. The client took them for one and put the healthy service
    out of rotation; a step's times are refused only past what the step may take."""

    class Stood:
        """The client's clock, standing still for the whole step."""

        def monotonic(self) -> float:
            return 0.0

        def __getattr__(self, name: str) -> object:
            return getattr(time, name)

    class SlowFiles(_GatedFiles):
        async def read(self, file_id: str, offset: int, length: int) -> bytes:
            await asyncio.sleep(1.5)  # the process waits this long for the bytes, at least
            return await super().read(file_id, offset, length)

    files = SlowFiles()
    files.go.set()
    attached = [FileInfo(id="f", mime="text/plain", size=5)]
    async with services(ProcessRunner(mode="fork", slots=1), slots=1) as [service]:
        remote = RemoteRunner([service.address], TOKEN, silence=30.0, connect_timeout=30.0)
        monkeypatch.setattr(_remote, "time", Stood())
        try:
            step = await remote.run(script('return await files.text("f")', files=attached), files)
            assert step.outcome == "finished" and step.value == "hello", step.error
            assert step.process is not None and step.process.wall_ms >= 1500
            status = remote.status()[service.address]
            assert status["failures"] == 0, status["why"]
        finally:
            await remote.aclose()
