"""RemoteRunner and RunnerService together, on loopback: steps, files, spreading, failover."""

from __future__ import annotations

import asyncio
import re
import ssl
from pathlib import Path

import pytest

from engine import CodeMode, CodeModeError, StepUnavailable
from runner import MAX_TENANT, FileMissing, ProcessRunner, RemoteRunner, RunError, Step
from runner import _wire as wire
from runner._service import RunnerService
from sandbox.protocol import Call, FileInfo, Limits, Ran, Record, Script
from tests._needs import require

from .remote_support import (
    TOKEN,
    FakeRunner,
    blocked,
    exec_runner,
    failing,
    sandbox_children,
    script,
    self_signed,
    services,
)


def same_result(a: Step, b: Step) -> None:
    """Two steps of the same script agree on everything but what was measured."""
    assert a.returned == b.returned
    assert a.model_dump(exclude={"stats", "process"}) == b.model_dump(exclude={"stats", "process"})


class Files:
    """An engine-side FileReader over a dict, counting reads."""

    def __init__(self, data: dict[str, bytes]) -> None:
        self.data = data
        self.reads: list[tuple[str, int, int]] = []

    async def read(self, file_id: str, offset: int, length: int) -> bytes:
        self.reads.append((file_id, offset, length))
        if file_id not in self.data:
            raise FileMissing(f"the file {file_id!r} was deleted")
        return self.data[file_id][offset : offset + length]


async def test_steps_match_the_local_runner() -> None:
    """A step run through a service ends exactly as on the local runner: calls, value, error."""
    scripts = [
        script("console.log('a'); const r = await tools.t({n: 1}); return r.n + 1", tools=["t"]),
        script(
            "console.log('a'); const r = await tools.t({n: 1}); return [r, Date.now()]",
            tools=["t"],
            records=[Record(name="t", arguments={"n": 1}, result={"n": 41})],
        ),
        script("const x = null;\nreturn x.y"),
        script("console.log('nothing returned')"),
    ]
    async with ProcessRunner() as local, services(ProcessRunner(), slots=2) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        for s in scripts:
            here, there = await asyncio.gather(local.run(s), remote.run(s))
            same_result(here, there)
            assert there.process is not None and there.process.wall_ms > 0


def test_step_wire_keeps_returned_and_undefined_apart() -> None:
    """A returned null and a returned undefined stay different across the wire."""
    null = Step.from_ran(Ran(outcome="finished", value=None))
    undefined = Step.from_ran(Ran(outcome="finished"))
    assert wire.decode(wire.encode_step(null), ("step",)).returned
    assert not wire.decode(wire.encode_step(undefined), ("step",)).returned


async def test_file_reads_are_answered_by_the_engine() -> None:
    """The service asks the client for each read; the client answers from its FileReader."""

    async def reads(s: Script, files: object, tenant: str) -> Step:
        assert files is not None
        head = await files.read("sales.csv", 0, 5)  # type: ignore[attr-defined]
        rest = await files.read("sales.csv", 5, 100)  # type: ignore[attr-defined]
        try:
            await files.read("gone.txt", 0, 10)  # type: ignore[attr-defined]
        except FileMissing as e:
            gone = str(e)
        return Step(outcome="finished", value=[head.decode(), rest.decode(), gone, tenant])

    files = Files({"sales.csv": b"region,amount\n"})
    attached = [
        FileInfo(id="sales.csv", mime="text/csv", size=14),
        FileInfo(id="gone.txt", mime="text/plain", size=10),
    ]
    async with services(FakeRunner(reads)) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        step = await remote.run(script("files", files=attached), files, tenant="acme")
    assert step.value == ["regio", "n,amount\n", "the file 'gone.txt' was deleted", "acme"]
    assert files.reads == [("sales.csv", 0, 5), ("sales.csv", 5, 9), ("gone.txt", 0, 10)]


async def test_a_service_takes_every_tenant_the_engine_takes() -> None:
    """A tenant as long as run_code takes reaches the service's runner whole (the wire took
    200 characters of the engine's 256: every step of such a tenant was refused, and its
    service put out of rotation, until the queue timed out); one longer is the engine's
    CodeModeError, before any step."""
    tenants: list[str] = []

    async def noting(s: Script, files: object, tenant: str) -> Step:
        tenants.append(tenant)
        return Step(outcome="finished", value=1)

    longest = "t" * MAX_TENANT
    async with services(FakeRunner(noting)) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        async with CodeMode([], runner=remote, queue_timeout=1) as engine:
            result = await engine.run_code("return 1", tenant=longest)
            assert result.status == "finished", result.text
            with pytest.raises(CodeModeError, match=f"1 to {MAX_TENANT} characters"):
                await engine.run_code("return 1", tenant=longest + "t")
    assert tenants == [longest]


async def test_a_file_not_attached_is_missing_without_asking_the_engine() -> None:
    """The client refuses a read of a file the script was not given."""

    async def reads(s: Script, files: object, tenant: str) -> Step:
        try:
            await files.read("secret", 0, 10)  # type: ignore[attr-defined]
        except FileMissing as e:
            return Step(outcome="finished", value=str(e))
        return Step(outcome="finished", value="read it")

    files = Files({"secret": b"0123456789"})
    async with services(FakeRunner(reads)) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        step = await remote.run(script("x"), files)
    assert "no file 'secret' is attached" in step.value
    assert files.reads == []


async def test_a_failing_file_store_sends_the_step_back_and_abandons_it() -> None:
    """RunError from the engine's store reaches the engine; the service cancels the step."""

    class Broken:
        async def read(self, file_id: str, offset: int, length: int) -> bytes:
            raise RunError("the blob store is down")

    started = asyncio.Event()

    async def reads(s: Script, files: object, tenant: str) -> Step:
        started.set()
        await files.read("a", 0, 1)  # type: ignore[attr-defined]
        await asyncio.sleep(30)
        return Step(outcome="finished")

    fake = FakeRunner(reads)
    async with services(fake) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        with pytest.raises(RunError, match="the blob store is down"):
            await remote.run(script("x", files=[FileInfo(id="a", mime="x", size=1)]), Broken())
        for _ in range(100):
            if fake.running == 0:
                break
            await asyncio.sleep(0.01)
        assert fake.running == 0
        assert remote.out_of_rotation() == {}  # the store failed, not the service


async def test_steps_spread_across_services() -> None:
    """Concurrent steps go to every service, the least busy first."""
    gate = asyncio.Event()
    fakes = [FakeRunner(blocked(gate, f"r{i}"), name=f"r{i}") for i in range(3)]
    async with services(*fakes, slots=4) as started:
        remote = RemoteRunner([s.address for s in started], TOKEN)
        runs = [asyncio.create_task(remote.run(script("x", id=f"s{i}"))) for i in range(12)]
        for _ in range(200):
            if sum(f.running for f in fakes) == 12:
                break
            await asyncio.sleep(0.01)
        assert [f.running for f in fakes] == [4, 4, 4]
        gate.set()
        steps = await asyncio.gather(*runs)
    assert sorted(s.value["id"] for s in steps) == sorted(f"s{i}" for i in range(12))


async def test_a_service_that_is_down_leaves_rotation_for_the_cooldown() -> None:
    """A refused connection sends the step elsewhere and benches the address until later."""
    now = [1000.0]
    fake = FakeRunner()
    async with services(fake) as [service]:
        gone = RunnerService(TOKEN, runner=FakeRunner())
        dead = await gone.start()
        await gone.aclose()  # its port now refuses connections
        remote = RemoteRunner([dead, service.address], TOKEN, cooldown=10, clock=lambda: now[0])
        # Not listening any more: the port refuses connections.
        for i in range(4):
            step = await remote.run(script("x", id=f"s{i}"))
            assert step.value["runner"] == "fake"
        assert list(remote.out_of_rotation()) == [dead]
        now[0] += 11
        assert remote.out_of_rotation() == {}
    assert len(fake.seen) == 4


async def test_no_service_can_take_the_step() -> None:
    """RunError names every address and why, so the engine requeues the step."""
    async with services(FakeRunner(failing("no sandbox here"))) as [service]:
        remote = RemoteRunner([service.address, "127.0.0.1:1"], TOKEN)
        with pytest.raises(RunError) as caught:
            await remote.run(script("x"))
        message = str(caught.value)
        assert "no sandbox here" in message and "127.0.0.1:1: could not connect" in message
        # Both are out of rotation now: the next step fails at once, saying for how long.
        with pytest.raises(RunError, match="out of rotation for"):
            await remote.run(script("x"))


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        # Every connect given up at once, and the step requeued until queue_timeout.
        ("connect_timeout", 0, "connect_timeout must be a positive number of seconds, not 0"),
        ("connect_timeout", float("nan"), "not nan"),
        ("silence", -1, "silence must be a positive number of seconds, not -1"),
        ("cooldown", -1, "cooldown must be zero or more seconds, not -1"),
        ("cooldown", float("nan"), "not nan"),
        # Each step given less than its own allowance: ended as silent while it ran.
        ("step_margin", -5.0, "step_margin must be zero or more seconds, not -5.0"),
        ("keep_idle", -1, "keep_idle must be a whole number, at least 0, not -1"),
        ("keep_idle", 1.5, "not 1.5"),
    ],
)
def test_options_that_would_fail_every_step_are_refused(
    option: str, value: object, said: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(said)):
        RemoteRunner(["127.0.0.1:7300"], TOKEN, **{option: value})  # type: ignore[arg-type]
    taken = RemoteRunner(["127.0.0.1:7300"], TOKEN, cooldown=0, step_margin=0, keep_idle=0)
    assert (taken.cooldown, taken.step_margin, taken.keep_idle) == (0, 0, 0)


async def test_a_host_name_that_does_not_resolve_is_named() -> None:
    """An address whose host name has no address (a typo; .invalid never resolves) says
    which name to check, not to see whether a service runs at a place there is none."""
    # A resolver that cannot be reached fails too (EAI_AGAIN), only later: wait for it.
    remote = RemoteRunner(["nosuchhost.invalid:7300"], TOKEN, connect_timeout=60)
    with pytest.raises(RunError) as caught:
        await remote.run(script("x"))
    message = str(caught.value)
    assert "nosuchhost.invalid:7300: could not find the host 'nosuchhost.invalid': " in message
    assert "check the address's host name" in message
    assert "is the runner service running there" not in message


async def test_a_refused_token_everywhere_is_permanent() -> None:
    """When every service refuses the token, waiting cannot help: the RunError says so
    (permanent), so the engine stops at once; one service still up keeps it transient."""
    async with services(FakeRunner(failing("unused"))) as [service]:
        remote = RemoteRunner([service.address], "not-the-token-at-all")
        with pytest.raises(RunError, match="check the token") as caught:
            await remote.run(script("x"))
        assert caught.value.permanent
        mixed = RemoteRunner([service.address, "127.0.0.1:1"], "not-the-token-at-all")
        with pytest.raises(RunError) as caught:
            await mixed.run(script("x"))
        assert not caught.value.permanent


async def test_a_service_that_dies_mid_step_loses_nothing() -> None:
    """The step of a service that goes away before answering runs on another."""
    gate = asyncio.Event()
    first, second = FakeRunner(blocked(gate, "first"), "first"), FakeRunner(name="second")
    async with services(first, second) as [a, b]:
        remote = RemoteRunner([a.address, b.address], TOKEN)
        remote._turn = -1  # the first address first
        run = asyncio.create_task(remote.run(script("x")))
        for _ in range(200):
            if first.running:
                break
            await asyncio.sleep(0.01)
        await a.aclose()
        step = await asyncio.wait_for(run, 10)
    assert step.value["runner"] == "second"
    assert first.cancelled == 1
    assert a.address in remote.out_of_rotation()


async def test_a_busy_service_sends_the_step_elsewhere() -> None:
    """No slot within slot_wait is a busy answer: another service takes the step."""
    gate = asyncio.Event()
    busy, idle = FakeRunner(blocked(gate, "busy"), "busy"), FakeRunner(name="idle")
    async with services(busy, slots=1, slot_wait=0.1) as [a], services(idle) as [b]:
        remote = RemoteRunner([a.address, b.address], TOKEN)
        remote._turn = -1
        hold = asyncio.create_task(remote.run(script("x", id="hold")))
        while not busy.running:
            await asyncio.sleep(0.01)
        other = RemoteRunner([a.address, b.address], TOKEN)  # knows nothing of the load
        other._turn = -1
        step = await other.run(script("x", id="next"))
        assert step.value["runner"] == "idle"
        assert other.out_of_rotation() == {}  # busy is not down
        only_a = RemoteRunner([a.address], TOKEN)
        with pytest.raises(RunError, match=r"busy: no slot came free within 0.1 s"):
            await only_a.run(script("x"))
        gate.set()
        assert (await hold).value["runner"] == "busy"


async def test_drain_finishes_steps_in_flight_and_takes_no_new_one() -> None:
    """Draining: the step in flight ends normally, new steps go elsewhere."""
    gate = asyncio.Event()
    fake = FakeRunner(blocked(gate))
    async with services(fake) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        run = asyncio.create_task(remote.run(script("x", id="in-flight")))
        while not fake.running:
            await asyncio.sleep(0.01)
        drain = asyncio.create_task(service.drain())
        await asyncio.sleep(0.05)
        assert not drain.done()
        with pytest.raises(RunError, match="could not connect"):
            await RemoteRunner([service.address], TOKEN).run(script("x"))
        gate.set()
        assert (await run).value["id"] == "in-flight"
        await asyncio.wait_for(drain, 5)


async def test_load_reports_busy_and_free_slots() -> None:
    """A health check sees the slots and how many are busy."""
    gate = asyncio.Event()
    fake = FakeRunner(blocked(gate))
    async with services(fake, slots=3) as [service]:
        remote = RemoteRunner([service.address, "127.0.0.1:1"], TOKEN)
        run = asyncio.create_task(remote.run(script("x")))
        while not fake.running:
            await asyncio.sleep(0.01)
        loads = await remote.loads()
        assert loads[service.address] == wire.Load(slots=3, busy=1, waiting=0, draining=False)
        assert "could not connect" in str(loads["127.0.0.1:1"])
        gate.set()
        await run


async def test_a_step_cancelled_by_the_engine_kills_the_remote_process() -> None:
    """Cancelling run() drops the connection; the service kills the sandbox process."""
    async with services(exec_runner(), slots=1) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        run = asyncio.create_task(remote.run(script("while (true) {}")))
        for _ in range(300):
            if sandbox_children():
                break
            await asyncio.sleep(0.01)
        assert sandbox_children()
        run.cancel()
        for _ in range(300):
            if not sandbox_children() and service.slots.in_use == 0:
                break
            await asyncio.sleep(0.01)
        assert sandbox_children() == []
        assert service.slots.in_use == 0


def _served_certificate(tmp_path: Path) -> tuple[Path, ssl.SSLContext]:
    """A self-signed certificate in ``tmp_path``, and a service's TLS context serving it."""
    pair = self_signed(tmp_path)
    if pair is None:
        require("openssl, to make a certificate for the test (make installs it)")
    cert, key = pair
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return cert, context


async def test_tls(tmp_path: Path) -> None:
    """With a certificate, steps run over TLS; a client without TLS or the CA gets nowhere."""
    cert, context = _served_certificate(tmp_path)
    async with services(FakeRunner(), tls=context, handshake_timeout=1.0) as [service]:
        step = await RemoteRunner([service.address], TOKEN, ca=cert).run(script("x"))
        assert step.value["runner"] == "fake"
        named = RemoteRunner(
            [f"localhost:{service.port}"], TOKEN, ca=cert, server_hostname="localhost"
        )
        assert (await named.run(script("x"))).outcome == "finished"
        with pytest.raises(RunError, match="TLS certificate failed verification"):
            await RemoteRunner([service.address], TOKEN, tls=True).run(script("x"))
        with pytest.raises(RunError, match=r"127.0.0.1:\d+: it speaks TLS and this client"):
            await RemoteRunner([service.address], TOKEN, connect_timeout=2).run(script("x"))


async def test_a_certificate_that_does_not_verify_fails_at_once(tmp_path: Path) -> None:
    """A wrong CA or a server name the certificate does not carry is a configuration error,
    like a refused token: the step fails at once (permanent) with one line naming the fix,
    and the engine does not retry it for its whole queue timeout."""
    (tmp_path / "other").mkdir()
    pair, other = self_signed(tmp_path), self_signed(tmp_path / "other")
    if pair is None or other is None:
        require("openssl, to make a certificate for the test (make installs it)")
    cert, key = pair
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    async with services(FakeRunner(), tls=context, handshake_timeout=1.0) as [service]:
        wrong_ca = RemoteRunner([service.address], TOKEN, ca=other[0])
        wrong_name = RemoteRunner([service.address], TOKEN, ca=cert, server_hostname="example.com")
        for remote, why in [(wrong_ca, "self-signed"), (wrong_name, "example.com")]:
            with pytest.raises(RunError) as caught:
                await remote.run(script("x"))
            message = str(caught.value)
            assert caught.value.permanent, message
            assert "TLS certificate failed verification" in message and why in message
            assert "set ca_file" in message and "\n" not in message
        engine = CodeMode([], runner=wrong_ca, retry_delay=5, queue_timeout=20)
        with pytest.raises(StepUnavailable, match="fix that, then resume") as failed:
            await engine.run_code("return 1")
        assert "TLS certificate failed verification" in str(failed.value)
        await engine.aclose()


async def test_a_client_without_tls_to_a_service_with_it_fails_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other way round: the TLS service drops the plain hello, which read as a service
    that may come back; the client retried for its whole queue timeout. It now asks whether
    the service speaks TLS, and fails at once naming the fix. The service logs the failed
    handshakes as refused hellos: a line for the host, not one a connection."""
    cert, context = _served_certificate(tmp_path)
    caplog.set_level("INFO", logger="codemode.runner")
    monkeypatch.setattr("runner._service.REFUSED_EVERY", 3600.0)  # one window, however slow
    async with services(FakeRunner(), tls=context, handshake_timeout=1.0) as [service]:
        for _ in range(3):
            remote = RemoteRunner([service.address], TOKEN, connect_timeout=5)
            with pytest.raises(RunError, match="it speaks TLS and this client connects") as e:
                await remote.run(script("x"))
            assert e.value.permanent and "set tls" in str(e.value)
            await remote.aclose()
        failed = [r for r in caplog.records if "the TLS handshake failed" in r.getMessage()]
        assert len(failed) == 1 and service.refusals.count >= 3, (failed, service.refusals.count)
        # With TLS it serves.
        secure = RemoteRunner([service.address], TOKEN, ca=cert)
        assert (await secure.run(script("x"))).outcome is not None
        await secure.aclose()


async def test_tls_to_a_service_without_it_fails_at_once(tmp_path: Path) -> None:
    """A client with TLS and a service without it (run with no --cert): a configuration
    error that waiting does not mend, so the step fails at once, naming the fix (it took the
    service out of rotation, and the engine retried until its queue timeout)."""
    async with services(FakeRunner()) as [service]:
        remote = RemoteRunner([service.address], TOKEN, tls=True)
        with pytest.raises(RunError, match="it does not speak TLS") as caught:
            await remote.run(script("x"))
        assert caught.value.permanent
        await remote.aclose()


def test_from_options(tmp_path: Path) -> None:
    """[codemode.runner] builds a RemoteRunner; mistakes name the key and the remedy."""
    (tmp_path / "runner.token").write_text(TOKEN + "\n")
    remote = RemoteRunner.from_options(
        {
            "kind": "remote",
            "addresses": ["10.0.0.5:7300", "[::1]:7301"],
            "token_file": "runner.token",
        },
        base=tmp_path,
    )
    assert remote.addresses == ["10.0.0.5:7300", "[::1]:7301"]
    assert remote._remotes[1].host == "::1" and remote._token == TOKEN
    from_env = RemoteRunner.from_options(
        {"addresses": ["h:1"]}, environ={"CODEMODE_RUNNER_TOKEN": "abc"}
    )
    assert from_env._token == "abc"
    with pytest.raises(ValueError, match=r"no token: give a token file, or set \$CODEMODE"):
        RemoteRunner.from_options({"addresses": ["h:1"]}, environ={})
    with pytest.raises(ValueError, match="addresses must be a list"):
        RemoteRunner.from_options({"addresses": "h:1"}, environ={"CODEMODE_RUNNER_TOKEN": "a"})
    with pytest.raises(ValueError, match="is not HOST:PORT"):
        RemoteRunner.from_options({"addresses": ["h"]}, environ={"CODEMODE_RUNNER_TOKEN": "a"})
    # A superscript is a digit to str.isdigit, and int() refused it in its own words ("invalid
    # literal for int()"); a fullwidth port was read as the ASCII one.
    for port in ("\u00b2", "\uff17\uff13\uff10\uff10"):
        with pytest.raises(ValueError, match=f"runner address 'h:{port}' is not HOST:PORT"):
            RemoteRunner.from_options({"addresses": [f"h:{port}"], "token": "a"}, environ={})
    for port in ("70000", "9" * 5000):  # int() refuses 5,000 digits in its own words
        with pytest.raises(ValueError, match="has a port past 65535, the highest there is"):
            RemoteRunner.from_options({"addresses": [f"h:{port}"], "token": "a"}, environ={})
    # Host names that connecting refuses (an empty part, one past 63 characters) were
    # taken, and failed the first step with a UnicodeError's traceback.
    for host in ("runner..example.com", "x" * 64 + ".example.com"):
        with pytest.raises(ValueError, match=f"runner address '{host}:7300' has no host name"):
            RemoteRunner.from_options({"addresses": [f"{host}:7300"], "token": "a"}, environ={})
    inline = RemoteRunner.from_options({"addresses": ["h:1"], "token": "abc"}, environ={})
    assert inline._token == "abc"
    with pytest.raises(ValueError, match="unknown key"):
        RemoteRunner.from_options({"addresses": ["h:1"], "secret": "x"}, environ={})
    with pytest.raises(ValueError, match="cannot read the token file"):
        RemoteRunner.from_options({"addresses": ["h:1"], "token_file": "nope"}, base=tmp_path)


@pytest.mark.parametrize(("mode", "warned"), [(0o644, True), (0o640, True), (0o620, False)])
def test_an_engines_token_file_others_can_read_is_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: int, warned: bool
) -> None:
    """The engine's token file, as the service's: left readable by others (the README says
    chmod 600), it was taken without a word on the engine's side."""
    token = tmp_path / "runner.token"
    token.write_text(TOKEN + "\n")
    token.chmod(mode)
    with caplog.at_level("WARNING", logger="codemode.runner"):
        RemoteRunner.from_options({"addresses": ["h:1"], "token_file": str(token)})
    said = f"can be read by other users of this machine (mode {mode:04o})"
    assert (said in caplog.text) is warned, caplog.text
    assert (f"chmod 600 {token}" in caplog.text) is warned


async def test_connections_are_kept_between_steps() -> None:
    """Steps one after another to a service share one connection."""
    async with services(FakeRunner()) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        for i in range(5):
            await remote.run(script("x", id=f"s{i}"))
        assert service.accepted == 1
        await asyncio.gather(*(remote.run(script("x")) for _ in range(8)))
        assert len(remote._remotes[0].idle) == 4  # keep_idle
        await remote.aclose()
        assert remote._remotes[0].idle == []


async def test_a_kept_connection_the_service_closed_is_replaced() -> None:
    """The service closed an idle connection: the step goes on a new one, no failure counted."""
    async with services(FakeRunner(), idle_timeout=0.1) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        await remote.run(script("x"))
        for _ in range(5000):  # until the service drops the idle connection
            if not service._connections:
                break
            await asyncio.sleep(0.002)
        assert (await remote.run(script("x"))).outcome == "finished"
        assert service.accepted == 2
        assert remote.status()[service.address]["failures"] == 0


async def test_a_kept_connection_that_dies_unnoticed_is_replaced() -> None:
    """A kept connection that breaks as the step is sent: a new one, the same service."""
    async with services(FakeRunner()) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        await remote.run(script("x"))
        [(conn, _, _)] = remote._remotes[0].idle
        conn.usable = lambda: True  # type: ignore[method-assign]  # the check misses it
        for task in list(service._connections):
            task.cancel()  # the service side goes away without the client seeing it yet
        await asyncio.sleep(0)
        assert (await remote.run(script("x"))).outcome == "finished"
        assert service.accepted == 2
        assert remote.status()[service.address]["failures"] == 0


async def test_a_step_in_a_language_a_service_lacks_goes_to_another() -> None:
    """A service whose runner runs only JavaScript is skipped for a Python step (its welcome
    says so, before anything is sent) and takes JavaScript steps as before."""
    js_only = FakeRunner(name="js")
    js_only.languages = ("javascript",)
    both = FakeRunner(name="both")
    async with services(js_only, both) as started:
        remote = RemoteRunner([s.address for s in started], TOKEN)
        for i in range(4):
            step = await remote.run(script("return 1", id=f"p{i}", language="python"))
            assert step.value["runner"] == "both"
        assert js_only.seen == []
        javascript = [await remote.run(script("return 1", id=f"j{i}")) for i in range(4)]
        assert {s.value["runner"] for s in javascript} == {"js", "both"}
    async with services(js_only) as [only]:
        remote = RemoteRunner([only.address], TOKEN)
        with pytest.raises(RunError, match="it runs javascript, not python"):
            await remote.run(script("return 1", language="python"))


LIES = {
    "a returned value past VALUE_BOUND": Step(outcome="finished", value="v" * (1 << 20)),
    "printed text past what a run keeps": Step(outcome="finished", printed="p" * (1 << 20)),
    "a call to a tool the script lacks": Step(
        outcome="calls", calls=[Call(name="rm_rf", arguments={})]
    ),
    "more calls than the script may make": Step(
        outcome="calls", calls=[Call(name="t", arguments={})] * 3
    ),
    "a file shown that is not the script's": Step(outcome="finished", shown=["/etc/shadow"]),
}


@pytest.mark.parametrize("lie", LIES)
async def test_a_service_that_lies_about_a_step_loses_it_to_another(lie: str) -> None:
    """A step no sandbox of the script could report (a local runner re-checks its process's
    report; a service's runner did too, so this is the service's own) counts the service as
    broken: out of rotation, and the step runs on another."""

    async def liar(s: Script, files: object, tenant: str) -> Step:
        return LIES[lie].model_copy()

    async with services(FakeRunner(liar), FakeRunner(name="honest")) as [bad, good]:
        remote = RemoteRunner([bad.address, good.address], TOKEN)
        remote._turn = -1  # the liar first
        step = await remote.run(script("x", tools=["t"], limits=Limits(calls=2)))
        assert step.value == {"runner": "honest", "id": "s"}
        assert (
            "it sent a step no run of this script can end with"
            in remote.status()[bad.address]["why"]
        )
        await remote.aclose()
