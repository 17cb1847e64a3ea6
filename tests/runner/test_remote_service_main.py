"""``codemode runner serve`` as a process: options, the listening line, TLS, drain on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import psutil
import pytest

from runner import RemoteRunner, RunError
from runner._service import RunnerService
from runner.service_main import main
from tests._needs import require

from .remote_support import TOKEN, FakeRunner, script, self_signed

# About a second of CPU in the sandbox.
SLOW = "let t = 0; for (let i = 0; i < 10000000; i++) t += i % 7; return t"
SLOW_VALUE = 29999994


def environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "CODEMODE_RUNNER_TOKEN"}


@asynccontextmanager
async def serving(*args: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """A service process on a free loopback port, and the address from its first line."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "runner.service_main",
        "--listen",
        "127.0.0.1:0",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=environment(),
        cwd=Path(__file__).parents[2],
    )
    try:
        assert process.stdout is not None
        first = await asyncio.wait_for(process.stdout.readline(), 30)
        found = re.fullmatch(rb"listening on (127\.0\.0\.1:\d+)\n", first)
        if found is None:
            assert process.stderr is not None
            stderr = await process.stderr.read()
            raise AssertionError(f"no listening line: {first!r} {stderr.decode()}")
        yield process, found.group(1).decode()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "runner.token"
    path.write_text(TOKEN + "\n")
    return path


def test_refuses_to_start_without_a_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No token file and no variable: exit 2, saying how to make one or opt out explicitly."""
    monkeypatch.delenv("CODEMODE_RUNNER_TOKEN", raising=False)
    assert main(["--listen", "127.0.0.1:0"]) == 2
    err = capsys.readouterr().err
    assert "no token" in err and "$CODEMODE_RUNNER_TOKEN" in err
    assert "openssl rand -hex 32" in err and "--insecure-no-token" in err


def test_refuses_a_short_token_and_half_a_tls_pair(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("CODEMODE_RUNNER_TOKEN", "short")
    assert main(["--listen", "127.0.0.1:0"]) == 2
    assert "the token is 5 characters, fewer than 16" in capsys.readouterr().err
    monkeypatch.setenv("CODEMODE_RUNNER_TOKEN", TOKEN)
    assert main(["--listen", "127.0.0.1:0", "--cert", str(tmp_path / "c.pem")]) == 2
    assert "TLS needs both --cert and --key" in capsys.readouterr().err
    assert main(["--listen", "nowhere"]) == 2
    assert "is not HOST:PORT" in capsys.readouterr().err


def test_a_port_another_process_holds_is_named_and_exits_75(
    token_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It exited 1, the code of a failed script: now 75 (EX_TEMPFAIL: a supervisor may start
    it again once the port is free), saying what holds the port and the fix; nothing it
    started is left running."""
    # This worker's other tests may keep processes of their own (a module's runner).
    before = set(psutil.Process().children(recursive=True))
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert main(["--listen", f"127.0.0.1:{port}", "--token-file", str(token_file)]) == 75
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "address already in use" in err
    assert "another process listens there; stop it, or give --listen another port" in err
    assert set(psutil.Process().children(recursive=True)) <= before


def test_an_address_of_no_interface_here_is_named_and_exits_2(
    token_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An address no interface of this machine has (192.0.2.1 is TEST-NET-1, documentation
    only) is an option error, exit 2, saying what to give instead; nothing is left running."""
    before = set(psutil.Process().children(recursive=True))
    assert main(["--listen", "192.0.2.1:0", "--token-file", str(token_file)]) == 2
    err = capsys.readouterr().err
    assert "cannot listen on 192.0.2.1:0" in err, err
    assert "no interface of this machine has that address" in err, err
    assert set(psutil.Process().children(recursive=True)) <= before


async def test_drains_on_sigterm(token_file: Path) -> None:
    """SIGTERM mid-step: the step finishes, new connections are refused, the process exits 0."""
    async with serving("--token-file", str(token_file), "--slots", "2") as (process, address):
        remote = RemoteRunner([address], TOKEN)
        step = asyncio.create_task(remote.run(script(SLOW)))
        for _ in range(300):
            load = (await remote.loads())[address]
            if not isinstance(load, str) and load.busy == 1:
                break
            await asyncio.sleep(0.02)
        process.send_signal(signal.SIGTERM)
        for _ in range(1500):  # until it stops listening
            if isinstance((await remote.loads())[address], str):
                break
            await asyncio.sleep(0.02)
        with pytest.raises(RunError, match="could not connect"):
            await RemoteRunner([address], TOKEN).run(script("return 1"))
        assert (await asyncio.wait_for(step, 30)).value == SLOW_VALUE
        assert await asyncio.wait_for(process.wait(), 30) == 0
        assert process.stderr is not None
        assert "SIGTERM: draining" in (await process.stderr.read()).decode()


@pytest.mark.parametrize(("mode", "warned"), [(0o644, True), (0o640, True), (0o600, False)])
async def test_a_token_file_others_can_read_is_said(
    token_file: Path, mode: int, warned: bool
) -> None:
    """The README says chmod 600; a token file left readable by others served without a word."""
    token_file.chmod(mode)
    async with serving("--token-file", str(token_file)) as (process, address):
        step = await RemoteRunner([address], TOKEN).run(script("return 1"))
        assert step.value == 1
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 30) == 0
        assert process.stderr is not None
        err = (await process.stderr.read()).decode()
    said = f"can be read by other users of this machine (mode {mode:04o})"
    assert (said in err) is warned, err
    assert (f"chmod 600 {token_file}" in err) is warned, err


async def test_a_second_sigterm_stops_it_at_once_and_says_so(token_file: Path) -> None:
    """A second SIGTERM during a drain abandons the steps in flight, and the log says so
    (it said only that it drained, and a step never ended was never named as abandoned)."""
    async with serving("--token-file", str(token_file), "--slots", "2") as (process, address):
        remote = RemoteRunner([address], TOKEN)
        step = asyncio.create_task(remote.run(script("for (;;) {}")))
        for _ in range(1500):
            load = (await remote.loads())[address]
            if not isinstance(load, str) and load.busy == 1:
                break
            await asyncio.sleep(0.02)
        process.send_signal(signal.SIGTERM)
        for _ in range(1500):  # until it stops listening: it drains
            if isinstance((await remote.loads())[address], str):
                break
            await asyncio.sleep(0.02)
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 30) == 0
        with pytest.raises(RunError, match="it closed the connection before the step ended"):
            await asyncio.wait_for(step, 30)
        assert process.stderr is not None
        err = (await process.stderr.read()).decode()
        assert "SIGTERM: draining" in err
        assert "SIGTERM again: stopping now" in err, err
        assert "closing: 1 step(s) in flight and 0 live process(es) waiting abandoned" in err


async def test_serves_over_tls(tmp_path: Path) -> None:
    """--cert and --key: clients that check the certificate run steps, others get nowhere."""
    pair = self_signed(tmp_path)
    if pair is None:
        require("openssl, to make a certificate for the test (make installs it)")
    cert, key = pair
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    args = ("--cert", str(cert), "--key", str(key), "--token-file", str(token_file))
    async with serving(*args) as (process, address):
        step = await RemoteRunner([address], TOKEN, ca=cert).run(script("return 6 * 7"))
        assert step.value == 42
        with pytest.raises(RunError, match="TLS certificate failed verification"):
            await RemoteRunner([address], TOKEN, tls=True).run(script("return 1"))
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 30) == 0


@pytest.mark.parametrize("option", ["--handshake-timeout", "--idle-timeout", "--read-timeout"])
def test_refuses_a_timeout_of_zero(
    option: str, token_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A timeout of 0 would drop every client at once (no hello, no request, no read can come
    in no time): refused at start, naming the option, rather than a service nobody can use."""
    with pytest.raises(SystemExit) as exited:
        main(["--listen", "127.0.0.1:0", "--token-file", str(token_file), option, "0"])
    assert exited.value.code == 2
    assert f"{option}: '0' is not a number of seconds above 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="must be a positive number of seconds, not 0"):
        RunnerService(TOKEN, runner=FakeRunner(), **{option[2:].replace("-", "_"): 0})


def test_a_heartbeat_of_zero_is_refused_in_the_words_of_its_type(
    token_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-1 said "0 or more", then 0 "must be a positive number": one rule, said once."""
    for value in ("0", "-1"):
        with pytest.raises(SystemExit) as exited:
            main(["--listen", "127.0.0.1:0", "--token-file", str(token_file), "--heartbeat", value])
        assert exited.value.code == 2
        assert f"--heartbeat: '{value}' is not a number of seconds" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "value"), [("slot_wait", 900), ("heartbeat", 120), ("live_wait", 7200)]
)
def test_the_service_refuses_a_wait_its_welcome_cannot_carry(option: str, value: float) -> None:
    """A wait past what the wire's welcome carries is refused when the service is made (it
    was taken, and every handshake then failed with a raw validation error)."""
    with pytest.raises(ValueError, match=rf"{option} must be at most [0-9]+ seconds, not {value}"):
        RunnerService(TOKEN, runner=FakeRunner(), **{option: value})


@pytest.mark.parametrize("option", ["max_connections", "max_script_line", "max_unwelcomed"])
@pytest.mark.parametrize("value", [0, -1, 2.5])
def test_the_service_refuses_a_count_under_one(option: str, value: float) -> None:
    """No client was ever welcomed (max_connections = 0), or no script line ever taken."""
    with pytest.raises(ValueError, match=rf"{option} must be a whole number, at least 1, not"):
        RunnerService(TOKEN, runner=FakeRunner(), **{option: value})


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("live_max", -1, "live_max must be a whole number, at least 0, not -1"),
        ("live_max", 2.5, "live_max must be a whole number, at least 0, not 2.5"),
        ("live_max", "3", "live_max must be a whole number, at least 0, not '3'"),
        ("live_memory", -1, "live_memory = -1 is negative"),
        ("live_memory", "lots", "live_memory = 'lots' is not a size"),
        ("line_memory", 2.5, "line_memory = 2.5 is not a size"),
    ],
)
def test_the_service_refuses_a_live_budget_that_is_no_count_or_size(
    option: str, value: object, said: str
) -> None:
    """live_memory = -1 was taken as a budget; "1gb", which CodeMode takes, and any other
    text were a raw TypeError from a comparison."""
    with pytest.raises(ValueError, match=re.escape(said)):
        RunnerService(TOKEN, runner=FakeRunner(), **{option: value})  # type: ignore[arg-type]
    service = RunnerService(TOKEN, runner=FakeRunner(), live_memory="1gb", line_memory="64mb")
    assert (service.live_memory, service.lines.total) == (1 << 30, 64 << 20)


def test_the_service_refuses_a_heartbeat_that_would_flood_its_clients() -> None:
    """A heartbeat of a nanosecond was taken, and each step's client was sent beats as fast
    as the service could write them (66,000 a second), the service's CPU with them."""
    with pytest.raises(ValueError, match=r"heartbeat must be at least 0\.01 seconds, not 1e-09"):
        RunnerService(TOKEN, runner=FakeRunner(), heartbeat=1e-9)
    RunnerService(TOKEN, runner=FakeRunner(), heartbeat=0.01)


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("--python", "/nonexistent/python", "--python /nonexistent/python is not an executable"),
        ("--python", "/bin/false", "--python /bin/false is not a Python the sandbox can run"),
        ("--python", "/bin/true", "--python /bin/true is not a Python the sandbox can run"),
        ("--python", "WITHOUT", "is not a Python the sandbox can run (ModuleNotFoundError: No "),
        ("--slot-wait", "1e300", "--slot-wait must be at most 600 seconds"),
        ("--heartbeat", "1000", "--heartbeat must be a positive number of seconds up to 60"),
        # Taken, it sent each engine 66,000 beats a second while a step ran.
        ("--heartbeat", "1e-9", "--heartbeat must be at least 0.01 seconds, not 1e-09"),
        ("--live-wait", "1e9", "--live-wait must be a positive number of seconds up to 3600"),
    ],
)
def test_refuses_what_would_break_every_step(
    option: str, value: str, said: str, token_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Python that is not there (every step failed to start its fork server, while the
    health check said all was well) or waits past what a client takes in a welcome: refused
    at start, naming the option. WITHOUT: a Python that cannot import this project (its
    fork server said "No module named sandbox" at every step)."""
    if value == "WITHOUT":
        value = str(token_file.with_name("python"))
        Path(value).write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
        Path(value).chmod(0o755)
    assert main(["--listen", "127.0.0.1:0", "--token-file", str(token_file), option, value]) == 2
    assert said in capsys.readouterr().err
