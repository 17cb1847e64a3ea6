"""Helpers for the remote runner tests: scripts, fake local runners, raw wire clients."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import psutil

from runner import FileReader, ProcessRunner, RemoteRunner, RunError, ScriptRunner, Step
from runner import _wire as wire
from runner._service import RunnerService
from sandbox.protocol import Clock, Record, Script

TOKEN = "test-token-0123456789abcdef"


def script(code: str, *, id: str = "s", records: list[Record] | None = None, **kw: Any) -> Script:
    return Script(
        id=id,
        code=code,
        records=records or [],
        clock=Clock(now_ms=1_767_225_600_000, seed=7),
        **kw,
    )


Handler = Callable[[Script, FileReader | None, str], Awaitable[Step]]


class FakeRunner(ScriptRunner):
    """A local runner that needs no process: ``handler`` decides each step.

    Counts the steps it saw, and the steps in flight, so tests can see where work went.
    """

    def __init__(self, handler: Handler | None = None, name: str = "fake") -> None:
        self.handler = handler or self._finish
        self.name = name
        self.seen: list[str] = []
        self.running = 0
        self.cancelled = 0

    async def _finish(self, script: Script, files: FileReader | None, tenant: str) -> Step:
        return Step(outcome="finished", value={"runner": self.name, "id": script.id})

    async def run(
        self,
        script: Script,
        files: FileReader | None = None,
        *,
        tenant: str = "default",
        live: bool = False,  # never kept: a runner may keep no live run (Step.live None)
    ) -> Step:
        self.seen.append(script.id)
        self.running += 1
        try:
            return await self.handler(script, files, tenant)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.running -= 1


def blocked(gate: asyncio.Event, name: str = "fake") -> Handler:
    """A handler that waits for ``gate`` before it finishes the step."""

    async def handler(script: Script, files: FileReader | None, tenant: str) -> Step:
        await gate.wait()
        return Step(outcome="finished", value={"runner": name, "id": script.id})

    return handler


def failing(why: str) -> Handler:
    async def handler(script: Script, files: FileReader | None, tenant: str) -> Step:
        raise RunError(why)

    return handler


@contextlib.asynccontextmanager
async def services(*runners: ScriptRunner, **kw: Any) -> AsyncIterator[list[RunnerService]]:
    """Runner services on loopback, one per runner, closed afterwards."""
    started: list[RunnerService] = []
    token = kw.pop("token", TOKEN)
    try:
        for runner in runners:
            service = RunnerService(token, runner=runner, **kw)
            await service.start("127.0.0.1", 0)
            started.append(service)
        yield started
    finally:
        for service in started:
            await service.aclose()
        for runner in runners:
            await runner.aclose()


def exec_runner() -> ProcessRunner:
    """A ProcessRunner that starts a process per step: no warm processes to count."""
    if "mode" in inspect.signature(ProcessRunner).parameters:
        return ProcessRunner(mode="exec")  # type: ignore[call-arg,unused-ignore]
    return ProcessRunner()


@contextlib.asynccontextmanager
async def service_process(
    token_file: Path, *args: str
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """``runner.service_main`` on a free loopback port, in a session of its own (so killing
    its group kills its sandboxes), with 2 slots unless ``args`` say otherwise; yields the
    process and the address from its first line.

    At the end it is woken (SIGCONT) if a test stopped it, drained with SIGTERM, and its
    group killed if that does not end it.
    """
    env = {k: v for k, v in os.environ.items() if k != "CODEMODE_RUNNER_TOKEN"}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "runner.service_main",
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        str(token_file),
        "--slots",
        "2",
        "--log-level",
        "WARNING",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
        cwd=Path(__file__).parents[2],
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        first = await asyncio.wait_for(process.stdout.readline(), 30)
        found = re.fullmatch(rb"listening on (127\.0\.0\.1:\d+)\n", first)
        assert found is not None, first
        yield process, found.group(1).decode()
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGCONT)
                process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()


class RawClient:
    """A hand-driven wire client, for playing a bad peer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, address: str) -> RawClient:
        host, port = wire.parse_address(address)
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def send_json(self, message: Any) -> None:
        await self.send(orjson.dumps(message) + b"\n")

    async def hello(self, token: str = TOKEN, version: int = 1) -> dict[str, Any]:
        await self.send_json({"hello": {"token": token, "version": version}})
        return await self.receive()

    async def receive(self, timeout: float = 10.0) -> dict[str, Any]:
        """The next message; ``{}`` when the service closed the connection."""
        line = await asyncio.wait_for(self.reader.readline(), timeout)
        return orjson.loads(line) if line else {}

    async def closed(self, timeout: float = 10.0) -> bool:
        """True when the service closes the connection (after any last message) in time."""
        try:
            while await asyncio.wait_for(self.reader.read(65536), timeout):
                pass
        except (ConnectionError, OSError):
            pass
        return True

    def close(self) -> None:
        self.writer.transport.abort()


def sandbox_children() -> list[psutil.Process]:
    """Sandbox processes started by this test process that are still alive: those that run
    ``-m sandbox`` (not any whose path says "sandbox", such as an interpreter in a checkout
    named so)."""
    alive = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            argv = child.cmdline()
            runs = any(a == "-m" and b == "sandbox" for a, b in itertools.pairwise(argv))
            if runs and child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child)
    return alive


def self_signed(directory: Path) -> tuple[Path, Path] | None:
    """A certificate for 127.0.0.1 and localhost and its key, or None without openssl."""
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


class LoopbackRemote(ScriptRunner):
    """A RemoteRunner in front of a RunnerService on loopback, as one runner.

    For the conformance suite: entering it starts the service (on the entering event loop)
    over the local runner ``local()`` makes; closing it closes all three. Steps go the whole
    way: the wire, the handshake, the service's slots, the local runner, and back.
    """

    def __init__(self, local: Callable[[], ScriptRunner], **service_options: Any) -> None:
        self.make_local = local
        self.service_options = service_options
        self.local: ScriptRunner | None = None
        self.service: RunnerService | None = None
        self.remote: RemoteRunner | None = None

    async def __aenter__(self) -> LoopbackRemote:
        self.local = self.make_local()
        await self.local.__aenter__()
        self.service = RunnerService(TOKEN, runner=self.local, **self.service_options)
        address = await self.service.start("127.0.0.1", 0)
        self.remote = RemoteRunner([address], TOKEN)
        return self

    async def run(
        self,
        script: Script,
        files: FileReader | None = None,
        *,
        tenant: str = "default",
        live: bool = False,
    ) -> Step:
        assert self.remote is not None, "enter the LoopbackRemote (async with) before a run"
        return await self.remote.run(script, files, tenant=tenant, live=live)

    @property
    def live_runs(self) -> int:
        """Live processes the client holds, and the service's runner keeps."""
        local = getattr(self.local, "live_runs", 0)
        return (self.remote.live_runs if self.remote is not None else 0) + local

    async def aclose(self) -> None:
        if self.remote is not None:
            await self.remote.aclose()
        if self.service is not None:
            await self.service.aclose()
        if self.local is not None:
            await self.local.aclose()


async def warmed(*addresses: str) -> None:
    """One step on each service, with generous timeouts: a fresh service starts its sandboxes
    at its first step, which on a loaded machine takes seconds that the tests below do not
    mean to time (and that a 2 s silence could take for a freeze)."""
    for address in addresses:
        remote = RemoteRunner([address], TOKEN, silence=30.0, connect_timeout=30.0)
        try:
            assert (await remote.run(script("return 0"))).value == 0
        finally:
            await remote.aclose()
