"""The PostgreSQL log when its server fails: restarted (fast or immediate) while a script
runs, so that every connection the store holds is cut. Needs PostgreSQL's server binaries:
each test module here runs a throwaway server of its own, which it restarts (never the
session's shared one, nor a server named by ``CODEMODE_TEST_DSN``)."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import CodeMode, ConfigError, StoreUnavailable, Tool, tool
from engine.log import DONE, PostgresStore
from tests._needs import require
from tests.engine.conftest import InProcessRunner
from tests.postgres_server import PostgresServer, PostgresUnavailable


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this module's own, which its tests restart."""
    server = PostgresServer()
    try:
        server.start()
    except PostgresUnavailable as e:
        require(f"PostgreSQL is unavailable: {e}")
    try:
        yield server
    finally:
        server.stop()


ROOT = Path(__file__).resolve().parents[3]


def _store(server: PostgresServer) -> PostgresStore:
    return PostgresStore(server.dsn, schema=f"t_{uuid.uuid4().hex[:16]}")


async def _bumps_each_once(engine: CodeMode, store: PostgresStore, ran: list[int]) -> None:
    """Run the script of three bumps (the test's tool ``bump``, which fails the log at its
    second call): it finishes, each call ran once and its result is in the log."""
    result = await engine.run_code(
        "const a = await tools.bump({ n: 0 });\n"
        "const b = await tools.bump({ n: 1 });\n"
        "const c = await tools.bump({ n: 2 });\n"
        "return [a, b, c];"
    )
    assert result.status == "finished", result.text
    assert "[100,101,102]" in result.text
    assert ran == [0, 1, 2]
    calls = await store.calls(result.script_id)
    assert [(c.state, c.result) for c in calls] == [(DONE, 100), (DONE, 101), (DONE, 102)]


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_a_server_restart_during_a_call_loses_no_result(
    server: PostgresServer, mode: str
) -> None:
    """The server restarts while a call with effects runs; once it is back, the call's
    result is recorded and the script goes on: the connections the restart cut are not
    handed to the script's next write. (Before, that write failed on a dead pooled
    connection: run_code raised StoreUnavailable, the call stayed `running`, and a resume
    would have settled it as interrupted although it had run and returned.)"""
    ran: list[int] = []

    @tool
    def bump(n: int) -> int:
        """Add 100, once (an effect: not read-only)."""
        ran.append(n)
        if n == 1:
            server.restart(mode)  # returns once the server takes connections again
        return n + 100

    store = _store(server)
    engine = CodeMode([bump], runner=InProcessRunner(), store=store, type_check="off")
    try:
        await _bumps_each_once(engine, store, ran)
    finally:
        await engine.aclose()


def test_a_store_serves_one_event_loop_after_another(server: PostgresServer) -> None:
    """A host that calls asyncio.run for each request, one store for all: after a server
    restart the next loop's writes go through, and the store closes in a loop of its own.
    (The pool's workers had ended with the first loop, so the connections the restart cut
    were never replaced: the write waited out the connect timeout and was StoreUnavailable
    'couldn't get a connection', and aclose raised 'Event loop is closed'.)"""
    store = _store(server)
    assert asyncio.run(store.start(_record("s1"), "host-a", 30_000)).created
    server.restart("fast")  # every connection of the first loop's pool is cut
    asyncio.run(store.set_held("s1", True))
    assert asyncio.run(store.get_script("s1")).held
    asyncio.run(store.aclose())


async def test_a_log_opened_while_its_server_is_down_waits_for_it(server: PostgresServer) -> None:
    """A host that opens the log while the server does not take connections yet (down,
    starting up) waits for it, up to the connect timeout, rather than failing at once."""
    server.halt()
    store = PostgresStore(server.dsn, schema=f"t_{uuid.uuid4().hex[:16]}", connect_timeout=120)
    try:
        opening = asyncio.ensure_future(store.scripts())
        await asyncio.sleep(0.5)  # not a margin: the open must be under way, whenever it is
        assert not opening.done()
        await asyncio.to_thread(server.resume)
        assert await opening == []
    finally:
        await store.aclose()


async def test_a_log_whose_server_stays_down_is_store_unavailable(server: PostgresServer) -> None:
    """The server goes away while a host has the log open and does not come back: each use
    is a StoreUnavailable saying so once the connect timeout ran out, never psycopg's own
    error; once it is back, the same store works."""
    store = PostgresStore(server.dsn, schema=f"t_{uuid.uuid4().hex[:16]}", connect_timeout=2)
    try:
        assert await store.scripts() == []
        server.halt("immediate")
        try:
            with pytest.raises(StoreUnavailable, match="did not answer"):
                await store.scripts()
        finally:
            server.resume()
        assert await store.scripts() == []
    finally:
        await store.aclose()


async def test_a_log_whose_server_is_down_when_it_opens_is_store_unavailable(
    server: PostgresServer,
) -> None:
    """A server that does not come up within the connect timeout of the first open: the
    log may come back (StoreUnavailable, the CLI's exit 75), not a mistake in the config
    (ConfigError, exit 2), which a supervisor retrying on 75 would give up on."""
    server.halt()
    try:
        store = PostgresStore(server.dsn, schema=f"t_{uuid.uuid4().hex[:16]}", connect_timeout=1)
        try:
            with pytest.raises(StoreUnavailable, match="cannot reach the PostgreSQL session log"):
                await store.scripts()
        finally:
            await store.aclose()
    finally:
        server.resume()


async def test_a_standby_is_waited_for_and_one_that_takes_no_writes_says_so(
    server: PostgresServer,
) -> None:
    """A failover: the log's server is a standby for a while, then promoted. While it
    refuses connections ('not accepting connections': hot_standby off), a host opening the
    log waits for it as for a server starting up (it was a ConfigError at once, 'check
    [codemode.store] dsn', the CLI's exit 2). While it takes connections but no writes (a
    hot standby), a write is a StoreUnavailable that says so and may be tried again (it was
    the permanent 'not as codemode made it ... restore the log'). Promoted, it takes the
    same store's writes."""
    store = PostgresStore(server.dsn, schema=f"t_{uuid.uuid4().hex[:16]}", connect_timeout=120)
    try:
        await asyncio.to_thread(server.standby, False)
        opening = asyncio.ensure_future(store.start(_record("s1"), "host-a", 30_000))
        await asyncio.sleep(0.5)  # not a margin: the open must be under way, whenever it is
        assert not opening.done(), opening
        await asyncio.to_thread(server.promote)
        assert (await opening).created

        await asyncio.to_thread(server.standby, True)
        with pytest.raises(StoreUnavailable, match="takes no writes") as caught:
            await store.set_held("s1", True)
        assert not caught.value.permanent
        assert "point [codemode.store] dsn at the primary" in str(caught.value)
        assert not (await store.get_script("s1")).held  # reads go on
        await asyncio.to_thread(server.promote)
        await store.set_held("s1", True)
        assert (await store.get_script("s1")).held
    finally:
        with contextlib.suppress(PostgresUnavailable):  # a primary already, unless it failed
            await asyncio.to_thread(server.promote)
        await store.aclose()


async def test_a_role_at_its_connection_limit_is_waited_for(server: PostgresServer) -> None:
    """The log's role is at its CONNECTION LIMIT (other sessions of its hold every one): a
    host opening the log waits for one to end, as for a server full of clients (it was a
    ConfigError at once, 'too many connections for role ...; check [codemode.store] dsn',
    the CLI's exit 2)."""
    import psycopg

    _, dsn = _new_role(server, "CONNECTION LIMIT 2")
    others = [await psycopg.AsyncConnection.connect(dsn) for _ in range(2)]
    store = PostgresStore(dsn, schema=f"t_{uuid.uuid4().hex[:16]}", connect_timeout=120)
    try:
        opening = asyncio.ensure_future(store.scripts())
        await asyncio.sleep(0.5)  # not a margin: the open must be under way, whenever it is
        assert not opening.done(), opening
        for other in others:
            await other.close()
        assert await opening == []
    finally:
        for other in others:
            await other.close()
        await store.aclose()


async def test_a_host_the_server_refuses_for_good_mid_script_is_told_to_fix_its_dsn(
    server: PostgresServer,
) -> None:
    """The server refuses the host's connection for good once the script is under way (its
    role may no longer log in, its password changed): the next write is a permanent
    StoreUnavailable naming the refusal and the dsn to fix, as at the open (the CLI's exit
    2). It read 'did not answer (... FATAL: role ... is not permitted to log in); nothing
    written is lost: resume the script once it is back', to be retried for ever."""
    import psycopg

    role, dsn = _new_role(server)
    store = PostgresStore(dsn, schema=f"t_{uuid.uuid4().hex[:16]}")
    try:
        assert (await store.start(_record("s1"), "host-a", 30_000)).created
        with psycopg.connect(server.dsn, autocommit=True) as admin:
            admin.execute(f"ALTER ROLE {role} NOLOGIN")
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
        with pytest.raises(StoreUnavailable, match="is not permitted to log in") as caught:
            await store.set_held("s1", True)
        assert caught.value.permanent
        assert "check [codemode.store] dsn" in str(caught.value)
    finally:
        await store.aclose()


async def test_a_database_not_in_utf8_is_refused_when_the_log_opens(
    server: PostgresServer,
) -> None:
    """A database encoded in LATIN1 cannot keep a script or an error with an emoji in it:
    the log refuses it when it opens, saying why and what to give (it opened, and the first
    such script's start was a raw UnicodeEncodeError from the driver, a traceback from
    `codemode run`)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = f"latin1_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.dsn, autocommit=True) as admin:
        admin.execute(
            f"CREATE DATABASE {name} ENCODING 'LATIN1' TEMPLATE template0 "
            "LC_COLLATE 'C' LC_CTYPE 'C'"
        )
    store = PostgresStore(make_conninfo(**{**conninfo_to_dict(server.dsn), "dbname": name}))
    try:
        with pytest.raises(ConfigError, match=rf"database '{name}' is encoded in LATIN1.*UTF8"):
            await store.scripts()
    finally:
        await store.aclose()


HALTING_TOOLS = """
import json, os, subprocess
from engine import tool

@tool
def halt() -> str:
    \"\"\"Stop the log's PostgreSQL server, for good.\"\"\"
    subprocess.run(json.loads(os.environ["HALT_COMMAND"]), check=True, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return "halted"
"""


def test_cli_run_whose_log_goes_away_exits_75_with_one_error(
    server: PostgresServer, tmp_path: Path
) -> None:
    """`codemode run` on a PostgreSQL log whose server stops mid-script (and stays down)
    ends with exit code 75, as a step no runner took does (the script is in the log:
    resume it once the server is back), not 2 ("a mistake in the command"); its stderr has
    the error, not a traceback from the lease renewal's warning, nor psycopg's warning at
    every reconnect attempt."""
    tools = tmp_path / "tools.py"
    tools.write_text(HALTING_TOOLS)
    config = tmp_path / "codemode.toml"
    config.write_text(
        f'[codemode.store]\nkind = "postgres"\ndsn = "{server.dsn}"\n'
        f'schema = "t_{uuid.uuid4().hex[:16]}"\n\n[codemode]\ntype_check = "off"\n'
    )
    script = tmp_path / "halt.js"
    script.write_text("return await tools.halt({});")
    env = {**os.environ, "HALT_COMMAND": json.dumps(server.halt_command("immediate"))}
    try:
        command = ["run", str(script), "--tools", str(tools), "--config", str(config)]
        proc = subprocess.run(
            [sys.executable, "-m", "engine.cli", *command],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=300,
        )
    finally:
        server.resume()
    assert proc.returncode == 75, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "error connecting" not in proc.stderr and "discarding" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    # The call ran, and its result is what the log could not take: the error says so.
    assert last.startswith("codemode: tools.halt (call ") and "ran, but the log" in last, last
    assert "the PostgreSQL session log at" in last and "resume" in last, last


def _host_and_worker(
    server: PostgresServer, pay: Tool, **worker_options: Any
) -> tuple[CodeMode, CodeMode]:
    """A host and a worker on one log of the server's, the worker's store giving up on a
    server that is down after 1 s, its look for work every 50 ms."""
    schema = f"t_{uuid.uuid4().hex[:16]}"
    host = CodeMode(
        [pay],
        runner=InProcessRunner(),
        store=PostgresStore(server.dsn, schema=schema),
        type_check="off",
    )
    worker = CodeMode(
        [pay],
        runner=InProcessRunner(),
        store=PostgresStore(server.dsn, schema=schema, connect_timeout=1),
        poll_interval=0.05,
        type_check="off",
        **worker_options,
    )
    return host, worker


async def test_a_worker_outlives_its_log_going_away(server: PostgresServer) -> None:
    """`engine.work()` (what `codemode worker` runs) keeps going while its PostgreSQL log is
    down, saying so in a warning each time it cannot reach it, and drives scripts again once
    it is back. (Before, the first look for work that failed ended work() with
    StoreUnavailable: a worker service died at a database restart that outlasted the connect
    timeout.)"""
    effects: list[int] = []

    @tool(needs_approval=True)
    def pay(cents: int) -> str:
        """Pay, after a person approves."""
        effects.append(cents)
        return "paid"

    loop = asyncio.get_running_loop()
    missed = asyncio.Event()

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "worker could not reach the session log" in record.getMessage():
                loop.call_soon_threadsafe(missed.set)

    host, worker = _host_and_worker(server, pay)
    seen = Seen()
    logging.getLogger("codemode").addHandler(seen)
    stop = asyncio.Event()
    working = asyncio.ensure_future(worker.work(stop=stop))
    try:
        paused = await host.run_code("return await tools.pay({ cents: 5 });")
        assert paused.status == "paused", paused.text
        # The worker's log is open before the server goes: a worker whose first open meets
        # a server that is down says to check the dsn, and ends (as a wrong one would), and
        # under load its first look for work had not opened it yet (one CI run in two).
        await worker.store.get_script(paused.script_id)
        server.halt("immediate")
        try:
            noticed = asyncio.ensure_future(missed.wait())
            done, _ = await asyncio.wait({working, noticed}, return_when=asyncio.FIRST_COMPLETED)
            assert noticed in done and not working.done(), working
        finally:
            server.resume()
        await host.approve(paused.script_id, paused.waiting[0]["call_id"])
        for _ in range(2400):  # until the worker drove it (at most 2 minutes)
            record = await host.store.get_script(paused.script_id)
            if record.status in ("finished", "failed") or working.done():
                break
            await asyncio.sleep(0.05)
        assert not working.done(), working
        assert record.status == "finished" and effects == [5]
    finally:
        stop.set()
        logging.getLogger("codemode").removeHandler(seen)
        await asyncio.wait_for(asyncio.gather(working, return_exceptions=True), 60)
        await worker.aclose()
        await host.aclose()


async def test_a_worker_told_to_stop_while_its_log_is_down_stops_at_once(
    server: PostgresServer,
) -> None:
    """A worker stopped (`codemode worker`'s SIGTERM) while its look for work waits for a
    PostgreSQL server that is down ends then, not once the connect timeout runs out (before,
    it waited for it, up to 10 s by default, and warned it would try again as it ended)."""
    server.halt()
    worker = CodeMode(
        [],
        runner=InProcessRunner(),
        store=PostgresStore(server.dsn, schema=f"t_{uuid.uuid4().hex[:16]}", connect_timeout=120),
        type_check="off",
    )
    stop = asyncio.Event()
    working = asyncio.ensure_future(worker.work(stop=stop))
    try:
        await asyncio.sleep(0.5)  # not a margin: the look must be under way, whenever it is
        assert not working.done(), working
        stop.set()
        # Far less than the connect timeout: a bound on a hang, not a measure of time.
        done, _ = await asyncio.wait({working}, timeout=60)
        assert working in done
        assert working.result() is None
    finally:
        stop.set()
        await asyncio.to_thread(server.resume)
        await asyncio.wait_for(asyncio.gather(working, return_exceptions=True), 150)
        await worker.aclose()


async def test_a_worker_whose_log_goes_away_mid_drive_takes_the_script_up_again(
    server: PostgresServer,
) -> None:
    """The server goes away while a worker's call runs, for longer than the connect timeout:
    the worker says it could not reach the log and, once it is back, drives that script on
    as any other (its call settled as interrupted, never run again). (Before, it took the
    outage for a script it could not drive: 'worker left script=... (looked at again in 60
    s)', and passed it over for a minute after the log was back.)"""
    effects: list[int] = []
    halted = threading.Event()

    @tool(needs_approval=True)
    def pay(cents: int) -> str:
        """Pay, after a person approves; the server goes down as it does."""
        effects.append(cents)
        server.halt("immediate")
        halted.set()
        return "paid"

    loop = asyncio.get_running_loop()
    said: list[str] = []
    heard = asyncio.Event()

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if message.startswith(("worker could not reach", "worker left script")):
                said.append(message)
                loop.call_soon_threadsafe(heard.set)

    host, worker = _host_and_worker(server, pay, lease_ms=1000)
    seen = Seen()
    logging.getLogger("codemode").addHandler(seen)
    stop = asyncio.Event()
    working: asyncio.Future[None] | None = None
    try:
        paused = await host.run_code("return await tools.pay({ cents: 5 });")
        assert paused.status == "paused", paused.text
        await host.approve(paused.script_id, paused.waiting[0]["call_id"])
        working = asyncio.ensure_future(worker.work(stop=stop))
        try:
            await heard.wait()
        finally:
            await asyncio.to_thread(halted.wait)
            await asyncio.to_thread(server.resume)
        assert said[0].startswith("worker could not reach the session log"), said
        for _ in range(2400):  # until the worker drove it (at most 2 minutes)
            record = await host.store.get_script(paused.script_id)
            if record.status in ("finished", "failed") or working.done():
                break
            await asyncio.sleep(0.05)
        assert record.status == "failed", record
        assert record.outcome is not None and "interrupted" in record.outcome["text"]
        assert effects == [5]
        assert not any(m.startswith("worker left script") for m in said), said
    finally:
        stop.set()
        logging.getLogger("codemode").removeHandler(seen)
        if working is not None:
            await asyncio.wait_for(asyncio.gather(working, return_exceptions=True), 60)
        await worker.aclose()
        await host.aclose()


class _Proxy(abc.ABC):
    """A TCP proxy on this machine to the server at ``dsn`` (whose ``port`` it takes): each
    connection a client makes to it is served by :meth:`_serve`, which each kind defines."""

    def __init__(self, dsn: str) -> None:
        self.port = int(dsn.split("port=")[1].split()[0])
        self.dsn = dsn
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        """Listens, and gives the dsn that connects through the proxy."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return self.dsn.replace(f"port={self.port}", f"port={port}")

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    @abc.abstractmethod
    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        """Serve one client's connection (to the server at ``port``)."""


class _CutAtCommit(_Proxy):
    """A TCP proxy to the server that, once armed, cuts the next write transaction's
    connection at its COMMIT (the store's reads say ``READ ONLY``): ``after`` the server
    read the COMMIT and answered (so it committed, and the answer is lost), or ``before`` the
    COMMIT reaches it (so it rolls back). The client sees its connection reset either way."""

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.mode: str | None = None
        self.times = 1  # the writes cut, one after the other, once armed
        self.cuts = 0

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self.port)
        swallowing = False
        done = asyncio.Event()

        def cut() -> None:
            self.cuts += 1
            client_w.transport.abort()  # a reset: the client's connection is lost
            server_w.close()  # an end of input: the server ends the session
            done.set()

        async def up() -> None:
            nonlocal swallowing
            reading = False  # this transaction is a read (the store's reads say READ ONLY)
            while data := await client_r.read(65536):
                reading = reading or b"READ ONLY" in data
                if b"COMMIT" in data and not reading and self.mode is not None:
                    mode, self.times = self.mode, self.times - 1
                    if self.times <= 0:
                        self.mode = None
                    if mode == "before":
                        cut()
                        return
                    swallowing = True  # the server's answer to this COMMIT is not passed on
                    server_w.write(data)
                    await server_w.drain()
                    return
                if b"COMMIT" in data:
                    reading = False
                server_w.write(data)
                await server_w.drain()
            done.set()

        async def down() -> None:
            while data := await server_r.read(65536):
                if swallowing:
                    cut()  # the server has answered the COMMIT: it committed
                    return
                client_w.write(data)
                await client_w.drain()
            done.set()

        tasks = [asyncio.ensure_future(up()), asyncio.ensure_future(down())]
        await done.wait()
        for task in tasks:
            task.cancel()
        client_w.transport.abort()
        server_w.close()


def _bumping(
    dsn: str, ran: list[int], arm: Callable[[], None]
) -> tuple[CodeMode, PostgresStore, list[str | None]]:
    """An engine on a PostgreSQL log at ``dsn`` with one tool, ``bump`` (an effect: each
    call's argument added to ``ran``), whose first call ``arm``s what cuts the next write
    (its result's); the store, and what each lost COMMIT's status was found to be."""

    @tool
    async def bump(n: int) -> int:
        """Add 100, once (an effect: not read-only)."""
        ran.append(n)
        if n == 1:
            arm()  # the next write is this call's result
        return n + 100

    store = PostgresStore(dsn, schema=f"t_{uuid.uuid4().hex[:16]}")
    statuses: list[str | None] = []
    status_of = store._status_of

    async def seen(pool: Any, xid: int, run: str | None) -> str | None:
        statuses.append(await status_of(pool, xid, run))
        return statuses[-1]

    store._status_of = seen  # type: ignore[method-assign]
    engine = CodeMode([bump], runner=InProcessRunner(), store=store, type_check="off")
    return engine, store, statuses


@pytest.mark.parametrize("mode", ["after", "before"])
async def test_a_connection_lost_at_commit_is_resolved_by_the_transactions_id(
    server: PostgresServer, mode: str
) -> None:
    """The connection is lost while a call's result is committed. Whether the COMMIT took
    effect is asked of the server by the transaction's id once it answers: committed
    (``after``), the write is done; rolled back (``before``), it runs once more. Either way
    the script goes on and the call ran once. (Before, both were StoreUnavailable: the call
    stayed `running` and a resume settled it as interrupted although it had run.)"""
    proxy = _CutAtCommit(server.dsn)
    dsn = await proxy.start()
    ran: list[int] = []

    def arm() -> None:
        proxy.mode = mode

    engine, store, statuses = _bumping(dsn, ran, arm)
    try:
        await _bumps_each_once(engine, store, ran)
        assert proxy.cuts == 1
        assert statuses == ["committed" if mode == "after" else "aborted"]
    finally:
        await engine.aclose()
        await proxy.stop()


async def test_a_write_cut_again_and_again_runs_until_it_goes_through(
    server: PostgresServer,
) -> None:
    """A write whose connection is cut before its COMMIT three times over (a server
    restarted twice in a row, connections an operator cuts again and again) runs again
    each time, within the connect timeout, and goes through. (It gave up at the second
    cut: StoreUnavailable 'did not answer (terminating connection due to administrator
    command)'; 2 of 40 scripts failed so while every connection was cut each 150 ms.)"""
    proxy = _CutAtCommit(server.dsn)
    dsn = await proxy.start()
    store = PostgresStore(dsn, schema=f"t_{uuid.uuid4().hex[:16]}")
    try:
        assert (await store.start(_record("s1"), "host-a", 30_000)).created
        proxy.mode, proxy.times = "before", 3
        await store.set_held("s1", True)
        assert proxy.cuts == 3
        assert (await store.get_script("s1")).held
    finally:
        await store.aclose()
        await proxy.stop()


async def test_a_log_whose_server_comes_back_within_the_timeout_goes_on(
    server: PostgresServer,
) -> None:
    """The server is down for 16 s of a 30 s connect timeout while a read waits: the read is
    answered once the server is back. (psycopg_pool's own reconnection backs off 1, 2, 4,
    8, 16 s: after 16 s down it would have connected again at 31 s, and the read was
    StoreUnavailable at 30 s, with the server up for half of that.)"""
    store = PostgresStore(server.dsn, schema=f"t_{uuid.uuid4().hex[:16]}", connect_timeout=30)
    try:
        assert await store.scripts() == []
        server.halt("immediate")
        try:
            reading = asyncio.ensure_future(store.scripts())
            await asyncio.sleep(16)
            assert not reading.done(), reading
        finally:
            await asyncio.to_thread(server.resume)
        assert await reading == []
        assert await store.scripts() == []
    finally:
        await store.aclose()


async def test_a_host_stalled_in_a_transaction_does_not_lock_its_script_for_good(
    server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host that stalls in the middle of a transaction (stopped, paused, cut off) holds its
    script's row lock: the server ends that session once it has idled for
    ``IDLE_IN_TRANSACTION_S`` (1 s here), and another host's write goes through then. (It
    waited for as long as the stalled host did: for ever, `hold` and `resume(wait=...)`
    included.)"""
    import psycopg

    from engine.log import _postgres

    monkeypatch.setattr(_postgres, "IDLE_IN_TRANSACTION_S", 1)
    schema = f"t_{uuid.uuid4().hex[:16]}"
    stalled = PostgresStore(server.dsn, schema=schema)
    other = PostgresStore(server.dsn, schema=schema)
    try:
        record = _record("s1")
        assert (await stalled.start(record, "host-a", 30_000)).created
        pool = stalled._pool or await stalled._open()
        async with pool.connection() as conn:
            await conn.execute("BEGIN")
            await conn.execute("SELECT 1 FROM scripts WHERE id = 's1' FOR UPDATE")
            # The host stalls here, its row lock held; another host holds the script.
            await asyncio.wait_for(other.set_held("s1", True), timeout=60)
            assert (await other.get_script("s1")).held
            with pytest.raises(psycopg.Error, match="idle-in-transaction timeout"):
                await conn.execute("SELECT 1")  # the server ended the stalled session
        # The stalled host, awake: its next write finds its lease lost, or goes on.
        assert (await stalled.get_script("s1")).held
    finally:
        await stalled.aclose()
        await other.aclose()


async def test_attachments_after_a_server_restart(server: PostgresServer) -> None:
    """The blob store's connection, cut by a restart, is made again for the next script's
    attachments (the first run_code after a restart failed with StoreUnavailable)."""
    from engine import Attachment

    store = _store(server)
    engine = CodeMode([], runner=InProcessRunner(), store=store, type_check="off")
    script = "return (await files.text('a.txt')).length"
    files = [Attachment("a.txt", data=b"x" * 5000, mime="text/plain")]
    try:
        assert (await engine.run_code(script, files=files)).value == 5000
        await asyncio.to_thread(server.restart, "fast")
        files = [Attachment("a.txt", data=b"y" * 7000, mime="text/plain")]
        assert (await engine.run_code(script, files=files)).value == 7000
    finally:
        await engine.aclose()


def _new_role(server: PostgresServer, options: str = "") -> tuple[str, str]:
    """A new role of the server's (``options``: ``CREATE ROLE``'s) that may make a log's
    schema, and a dsn that logs in as it."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    role = f"r_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN {options}")
        admin.execute(f"GRANT CREATE ON DATABASE postgres TO {role}")
    return role, make_conninfo(**{**conninfo_to_dict(server.dsn), "user": role})


def _record(script_id: str) -> Any:
    from engine import ScriptRecord

    return ScriptRecord(id=script_id, code="1", tenant="t", now_ms=0, seed=0, created_ms=0)


async def test_a_transaction_waiting_for_a_connection_as_the_store_closes(
    server: PostgresServer,
) -> None:
    """A transaction that waits for a connection of the pool while this host closes the
    store says the store was closed (it said the server did not answer, and to resume once
    it is back, though the server answered all along)."""
    store = PostgresStore(server.dsn, schema=f"t_{uuid.uuid4().hex[:16]}", max_connections=1)
    await store.scripts()
    holding, done = asyncio.Event(), asyncio.Event()

    async def hold() -> None:  # the pool's one connection, in use
        async with store._pool.connection():
            holding.set()
            await done.wait()

    held = asyncio.create_task(hold())
    try:
        await holding.wait()
        waiting = asyncio.create_task(store.scripts())
        while not store._pool.get_stats().get("requests_waiting"):  # it waits in the pool
            await asyncio.sleep(0.01)
        closing = asyncio.create_task(store.aclose())
        with pytest.raises(StoreUnavailable) as caught:
            await asyncio.wait_for(waiting, 60)
        said = str(caught.value)
        assert said.startswith("the session log was closed (aclose) while this used it"), said
        done.set()  # the pool's close waits for the connection in use
        await asyncio.wait_for(closing, 60)
    finally:
        done.set()
        await held
        await store.aclose()


async def test_a_log_whose_connection_is_cut_as_it_opens_opens_all_the_same(
    server: PostgresServer,
) -> None:
    """The server ends the session that makes (or checks) the log's tables as a host opens
    it (pg_terminate_backend here; a restart does the same): the host connects again and
    opens the log. (Before, the server's 'terminating connection due to administrator
    command' was a ConfigError saying to check the dsn: exit 2, which a supervisor does not
    retry, for a restart it would have outlived.)"""
    import psycopg

    store = _store(server)
    async with await psycopg.AsyncConnection.connect(server.dsn, autocommit=True) as admin:
        # Held here, the lock that a new log's first open waits for (so it is mid-open,
        # waiting on the server, when its session is ended).
        await admin.execute("SELECT pg_advisory_lock(hashtext('codemode schema'))")
        opening = asyncio.ensure_future(store.scripts())
        try:
            waiting: list[Any] = []
            while not waiting:
                assert not opening.done(), opening
                await asyncio.sleep(0.02)
                cursor = await admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event = 'advisory' "
                    "AND pid <> pg_backend_pid()"
                )
                waiting = await cursor.fetchall()
            await admin.execute("SELECT pg_terminate_backend(%s)", waiting[0])
        finally:
            await admin.execute("SELECT pg_advisory_unlock(hashtext('codemode schema'))")
        try:
            assert await asyncio.wait_for(opening, 60) == []
            assert await store.scripts() == []
        finally:
            await store.aclose()


async def test_a_log_whose_server_ends_each_session_at_once_is_not_asked_again_at_once(
    server: PostgresServer,
) -> None:
    """The server takes each connection and ends its session at its first statement (a
    pooler in front of a server that is down): the log's open connects again after 50 ms to
    1 s, as it does when connections are refused, and says it cannot reach the log. (It
    connected again at once for the whole connect timeout: 735 connections in 2 s, each
    one a backend the server forked.)"""

    class EndsAtFirstStatement(_Proxy):
        connections = 0

        async def _serve(
            self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
        ) -> None:
            self.connections += 1
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self.port)

            async def up() -> None:  # the startup and login pass; the first query ends it
                while (data := await client_r.read(65536)) and data[:1] not in (b"Q", b"P"):
                    server_w.write(data)
                    await server_w.drain()

            async def down() -> None:
                while data := await server_r.read(65536):
                    client_w.write(data)
                    await client_w.drain()

            tasks = [asyncio.ensure_future(up()), asyncio.ensure_future(down())]
            await asyncio.wait(tasks, return_when="FIRST_COMPLETED")
            for task in tasks:
                task.cancel()
            client_w.transport.abort()
            server_w.close()

    proxy = EndsAtFirstStatement(server.dsn)
    dsn = await proxy.start()
    store = PostgresStore(dsn, schema=f"t_{uuid.uuid4().hex[:16]}", connect_timeout=2)
    try:
        with pytest.raises(StoreUnavailable, match="cannot reach the PostgreSQL session log"):
            await store.scripts()
        assert 2 <= proxy.connections < 40, proxy.connections
    finally:
        await store.aclose()
        await proxy.stop()


async def test_a_log_whose_server_goes_down_as_its_pool_opens_is_store_unavailable(
    server: PostgresServer,
) -> None:
    """The server goes down once the log's tables are checked and before the store's pool
    has its first connection, and stays down past the connect timeout: the log may come
    back (StoreUnavailable), not a mistake in the dsn (the pool's 'pool initialization
    incomplete' was a ConfigError, exit 2, which a supervisor does not retry)."""

    class Halting(PostgresStore):
        def _new_pool(self) -> Any:
            pool = super()._new_pool()
            opening = pool.open

            async def open(*args: Any, **kwargs: Any) -> None:
                await asyncio.to_thread(server.halt, "immediate")  # the tables are checked
                await opening(*args, **kwargs)

            pool.open = open
            return pool

    store = Halting(server.dsn, schema=f"t_{uuid.uuid4().hex[:16]}", connect_timeout=1)
    try:
        with pytest.raises(StoreUnavailable, match="cannot reach the PostgreSQL session log"):
            await store.scripts()
    finally:
        await store.aclose()
        await asyncio.to_thread(server.resume)


class _CrashMidWrite(_Proxy):
    """A TCP proxy to the server that, once armed, crashes the server in the next write
    transaction (a restart ``-m immediate``, as an OOM kill of a backend does): the server
    has given it its id (``txid_current()``) and nothing of it reached the write-ahead log,
    so the crash forgets the id, and the server hands it out again. Then, before the client
    learns its connection is lost (at its COMMIT), with ``taken`` other sessions commit
    transactions until that id is taken (other hosts writing the log as the server comes
    back); without, the id is one the server has not given out yet. With ``checkpoint``, a
    CHECKPOINT follows (an operator's, a backup's): its next id is past the write's."""

    def __init__(self, server: PostgresServer, taken: bool, checkpoint: bool = False) -> None:
        super().__init__(server.dsn)
        self.server = server
        self.taken = taken
        self.checkpoint = checkpoint
        self.armed = False
        self.crashed = 0

    async def _crash(self) -> None:
        import psycopg

        await asyncio.to_thread(self.server.restart, "immediate")
        async with await psycopg.AsyncConnection.connect(self.server.dsn, autocommit=True) as c:
            for _ in range(50 if self.taken else 0):  # more ids than the crash forgot
                await c.execute("SELECT txid_current()")
            if self.checkpoint:
                await c.execute("CHECKPOINT")
        self.crashed += 1

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:  # the server is restarting: as it would, refuse
            client_w.transport.abort()
            return
        crashing = False

        async def up() -> None:
            nonlocal crashing
            given_id = False
            while data := await client_r.read(65536):
                if given_id:  # the write's next statement: it never reaches the server
                    self.armed, crashing = False, True
                    await self._crash()
                    return
                given_id = self.armed and b"txid_current()" in data
                server_w.write(data)
                await server_w.drain()

        async def down() -> None:
            while data := await server_r.read(65536):
                client_w.write(data)
                await client_w.drain()

        upward = asyncio.ensure_future(up())
        await asyncio.wait([upward, asyncio.ensure_future(down())], return_when="FIRST_COMPLETED")
        if crashing:  # the client learns its connection is lost once its id is taken
            await upward
        client_w.transport.abort()
        server_w.close()


@pytest.mark.parametrize(
    ("taken", "checkpoint"),
    [(True, False), (True, True), (False, False)],
    ids=["id-taken", "id-taken-then-checkpoint", "id-forgotten"],
)
async def test_a_write_lost_in_a_server_crash_is_not_taken_for_committed(
    server: PostgresServer, taken: bool, checkpoint: bool
) -> None:
    """The server crashes in a write (its connection lost at COMMIT) and, once back, gives
    the write's transaction id to another transaction, which commits: the store does not
    take that one's COMMIT for the write's. What the store says of the write is what the
    log holds: done, or StoreUnavailable. (Before, txid_status said 'committed' of the
    other transaction, and the store returned as if the write were done: in a log whose
    server crashed under 10 scripts, a call's result so lost failed its script with
    'CallConflict: script ... has no call at position 4'.) An id the server has not given
    out again is one it forgot: the write took no effect, and runs again. (It was
    txid_status's 'transaction ID ... is in the future', taken for a log changed by hand:
    StoreUnavailable, 'not as codemode made it'.) A checkpoint once the id is taken (an
    operator's CHECKPOINT) hands out ids past the write's, and proves nothing of it (the
    store took it for proof the write was kept: it said the lease was released, and the log
    held it still)."""
    proxy = _CrashMidWrite(server, taken, checkpoint)
    dsn = await proxy.start()
    store = PostgresStore(dsn, schema=f"t_{uuid.uuid4().hex[:16]}")
    try:
        lease = (await store.start(_record("s1"), "host-a", 300_000)).lease
        proxy.armed = True
        try:
            await store.release(lease)
            released = True
        except StoreUnavailable:
            released = False
        assert proxy.crashed == 1
        lease_there = (await store.get_script("s1")).lease
        assert lease_there is not None
        assert (lease_there.expires_ms == 0) == released, (released, lease_there)
        assert released is not taken
    finally:
        await store.aclose()
        await proxy.stop()


class _RestartAtCommit(_Proxy):
    """A TCP proxy to the server that, once armed, lets the next write transaction's COMMIT
    through, holds back the server's answer (it committed), restarts the server cleanly
    (``-m fast``) and then cuts the client's connection: a COMMIT a quick restart cut."""

    def __init__(self, server: PostgresServer) -> None:
        super().__init__(server.dsn)
        self.server = server
        self.armed = False
        self.restarts = 0

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:  # the server is restarting: as it would, refuse
            client_w.transport.abort()
            return
        committing = False

        async def up() -> None:
            nonlocal committing
            reading = False  # this transaction is a read (the store's reads say READ ONLY)
            while data := await client_r.read(65536):
                reading = reading or b"READ ONLY" in data
                if b"COMMIT" in data:
                    committing, reading = self.armed and not reading, False
                    self.armed = self.armed and not committing
                server_w.write(data)
                await server_w.drain()

        async def down() -> None:
            while data := await server_r.read(65536):
                if committing:  # the server answered the COMMIT: it committed
                    await asyncio.to_thread(self.server.restart, "fast")
                    self.restarts += 1
                    return
                client_w.write(data)
                await client_w.drain()

        tasks = [asyncio.ensure_future(up()), asyncio.ensure_future(down())]
        await asyncio.wait(tasks, return_when="FIRST_COMPLETED")
        if committing:  # the client learns its connection is lost once the server is back
            await tasks[1]
        for task in tasks:
            task.cancel()
        client_w.transport.abort()
        server_w.close()


async def test_a_commit_cut_by_a_quick_clean_restart_is_never_lost_nor_run_twice(
    server: PostgresServer,
) -> None:
    """The server commits a call's result and restarts cleanly (``pg_ctl restart -m
    fast``) before the host hears so. The store finds the write committed (the clean
    stop's checkpoint hands out ids past the write's), or, when that checkpoint is in the
    same second as the new server's start (most quick restarts), cannot tell it from one
    taken since and says StoreUnavailable: the resume reads the log, where the result is,
    and goes on. Either way the call ran once and its result is in the log."""
    proxy = _RestartAtCommit(server)
    dsn = await proxy.start()
    ran: list[int] = []

    def arm() -> None:
        proxy.armed = True

    engine, store, statuses = _bumping(dsn, ran, arm)
    try:
        try:
            await _bumps_each_once(engine, store, ran)
        except StoreUnavailable:
            assert statuses == [None]
            [script] = await store.scripts()
            calls = await store.calls(script.id)
            assert [(c.state, c.result) for c in calls] == [(DONE, 100), (DONE, 101)]
            result = await engine.resume(script.id)
            assert result.status == "finished", result.text
            assert "[100,101,102]" in result.text
            assert ran == [0, 1, 2]
        else:
            assert statuses == ["committed"]
        assert proxy.restarts == 1
    finally:
        await engine.aclose()
        await proxy.stop()


async def test_a_role_that_may_not_read_the_servers_statistics_uses_the_log(
    server: PostgresServer,
) -> None:
    """The store asks when the server's statistics were reset, of each connection and as
    it resolves a write lost at COMMIT (to tell a crash since, see
    test_a_write_lost_in_a_server_crash_is_not_taken_for_committed): a role the server
    keeps them from uses the log all the same, and a write of its that the connection
    lost before its COMMIT runs again. (The log did not open, and then such a write was
    StoreUnavailable, 'the database user may not use the PostgreSQL session log'.)"""
    import psycopg

    _, dsn = _new_role(server)
    with psycopg.connect(server.dsn, autocommit=True) as admin:
        admin.execute("REVOKE SELECT ON pg_stat_bgwriter FROM PUBLIC")
    proxy = _CutAtCommit(dsn)
    store = PostgresStore(await proxy.start(), schema=f"t_{uuid.uuid4().hex[:16]}")
    try:
        assert (await store.start(_record("s1"), "host-a", 30_000)).created
        proxy.mode = "before"
        await store.set_held("s1", True)
        assert proxy.cuts == 1
        assert (await store.get_script("s1")).held
    finally:
        await store.aclose()
        await proxy.stop()
        with psycopg.connect(server.dsn, autocommit=True) as admin:
            admin.execute("GRANT SELECT ON pg_stat_bgwriter TO PUBLIC")
