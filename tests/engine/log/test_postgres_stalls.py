"""The PostgreSQL log when its server takes connections but stops answering (a backend
stopped, a network cut that sends no reset): here its sessions are stopped with SIGSTOP (the
tests run as root, as the server's user may be another), and always continued after. Each
store use then fails with StoreUnavailable once ``answer_timeout`` ran out, the connection
it waited on dropped, and the script resumes once the server answers again. The module runs
a throwaway server of its own, whose postmaster one test stops too."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from engine import CodeMode, StoreUnavailable, tool
from engine.log import DONE, FAILED, RUNNING, PostgresStore
from engine.log._postgres import DEFAULT_ANSWER_TIMEOUT
from tests._needs import require
from tests.engine.conftest import InProcessRunner, given_up
from tests.postgres_server import PostgresServer, PostgresUnavailable

# A hang is what these tests catch: each wait is bounded far past any answer_timeout here.
HANG_S = 120


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this module's own, whose processes its tests stop."""
    server = PostgresServer()
    try:
        server.start()
    except PostgresUnavailable as e:
        require(f"PostgreSQL is unavailable: {e}")
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def _stopped(pids: list[int]) -> Iterator[list[int]]:
    """The processes ``pids`` stopped (SIGSTOP) for the block, continued whatever it does."""
    stopped: list[int] = []
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        yield stopped
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)


def _sessions(server: PostgresServer, name: str) -> list[int]:
    """The server's processes of the sessions a store opened (their application_name)."""
    import psycopg

    with psycopg.connect(server.dsn, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (name,)
        ).fetchall()
    return [row[0] for row in rows]


class _Stalling(PostgresStore):
    """A PostgreSQL store whose server stops answering as its method ``at`` begins (the
    first time), or at :meth:`stall`: each of its sessions' processes is stopped, and stays
    so until :meth:`go_on`. Its sessions carry an application_name of their own to be found
    by. Its answer_timeout is 1 s while they are stopped, and the default otherwise (a
    server on a loaded machine may take a second to answer)."""

    def __init__(self, server: PostgresServer, schema: str, at: str = "", **options: Any) -> None:
        self.name = f"stall_{uuid.uuid4().hex[:12]}"
        super().__init__(f"{server.dsn} application_name={self.name}", schema=schema, **options)
        self.server = server
        self.at = at
        self.frozen: list[int] = []
        self.whole = False  # the postmaster stopped too: no new connection is made
        self._stack = contextlib.ExitStack()

    def stall(self) -> None:
        """Stop the store's sessions' processes (and the postmaster if ``whole``)."""
        self.frozen = self._stack.enter_context(_stopped(_sessions(self.server, self.name)))
        assert self.frozen, "the store had no session to stop"
        if self.whole:
            self._stack.enter_context(_stopped([self.server.pid()]))
        self._answer = 1.0

    def _stall(self, method: str) -> None:
        if method == self.at and not self.frozen:
            self.stall()

    def go_on(self) -> None:
        """Continue the stopped sessions."""
        self._stack.close()
        self._answer = DEFAULT_ANSWER_TIMEOUT

    async def get_script(self, script_id: str) -> Any:
        self._stall("get_script")
        return await super().get_script(script_id)

    async def calls(self, *args: Any, **kwargs: Any) -> Any:
        self._stall("calls")
        return await super().calls(*args, **kwargs)

    async def add_calls(self, *args: Any, **kwargs: Any) -> Any:
        self._stall("add_calls")
        return await super().add_calls(*args, **kwargs)

    async def settle(self, *args: Any, **kwargs: Any) -> Any:
        self._stall("settle")
        return await super().settle(*args, **kwargs)


def _engine(
    store: PostgresStore, ran: list[int], *, idempotent: bool = False, lease_ms: int = 3000
) -> CodeMode:
    @tool(idempotent=idempotent)
    def bump(n: int) -> int:
        """Add 100 (an effect: not read-only)."""
        ran.append(n)
        return n + 100

    # The lease a host keeps when its log does not answer runs out in 3 s here.
    return CodeMode(
        [bump], runner=InProcessRunner(), store=store, type_check="off", lease_ms=lease_ms
    )


SCRIPT = "const a = await tools.bump({ n: 1 });\nreturn await tools.bump({ n: a });"


async def _nothing_waits_on(store: _Stalling) -> None:
    """No transaction of ``store`` is under way, and its pool holds no connection to a
    stopped session (the one that waited was dropped), and nothing waits in it."""
    ours = [
        t
        for t in asyncio.all_tasks()
        if t.get_coro().__qualname__.startswith("PostgresStore.")  # type: ignore[union-attr]
    ]
    assert ours == [], ours
    pool = store._pool
    assert pool is not None
    stats = pool.get_stats()
    assert stats.get("requests_waiting", 0) == 0, stats
    # psycopg_pool's idle connections (private): their server processes, as libpq knows them.
    idle = [conn.info.backend_pid for conn in pool._pool]
    assert not set(idle) & set(store.frozen), (idle, store.frozen)
    # The connection that waited came back broken, and was dropped.
    assert stats.get("returns_bad", 0) >= 1, stats


async def _stalled_run(store: _Stalling, engine: CodeMode) -> StoreUnavailable:
    """run_code of SCRIPT, which the stalled server ends with StoreUnavailable."""
    with pytest.raises(StoreUnavailable) as caught:
        await asyncio.wait_for(engine.run_code(SCRIPT), HANG_S)
    assert store.frozen, "the store's server was never stopped"
    said = str(caught.value)
    assert "did not answer within 1 s (answer_timeout)" in said, said
    assert "nothing written is lost" in said and "resume the script" in said, said
    assert not caught.value.permanent
    await _nothing_waits_on(store)
    return caught.value


async def _only_script(store: PostgresStore) -> str:
    (record,) = await store.scripts()
    return record.id


@pytest.mark.parametrize("at", ["get_script", "add_calls"])
async def test_a_server_that_stops_answering_before_a_call_runs(
    server: PostgresServer, at: str
) -> None:
    """The server stops answering as a script's record is read (``get_script``), or as the
    receipt of its first call is written (``add_calls``): run_code fails with
    StoreUnavailable within the answer timeout (it waited for ever), the call never ran;
    once the server answers again, the resumed script runs each call once and finishes."""
    ran: list[int] = []
    store = _Stalling(server, f"t_{uuid.uuid4().hex[:16]}", at)
    engine = _engine(store, ran)
    try:
        try:
            await _stalled_run(store, engine)
            assert ran == []
        finally:
            store.go_on()
        result = await asyncio.wait_for(
            engine.resume(await _only_script(store), wait=HANG_S), HANG_S
        )
        assert result.status == "finished", result.text
        assert "201" in result.text
        assert ran == [1, 101]
    finally:
        store.go_on()
        await engine.aclose()


@pytest.mark.parametrize("idempotent", [False, True])
async def test_a_server_that_stops_answering_as_a_result_is_written(
    server: PostgresServer, idempotent: bool
) -> None:
    """The server stops answering as a call's result is written: run_code fails with
    StoreUnavailable saying the call ran and what its resume does with it. The resumed
    script finds a call with effects interrupted (it may have taken effect), never runs it
    again, and fails saying so; a call of an idempotent tool runs again, and it finishes."""
    ran: list[int] = []
    store = _Stalling(server, f"t_{uuid.uuid4().hex[:16]}", "settle")
    engine = _engine(store, ran, idempotent=idempotent)
    try:
        try:
            error = await _stalled_run(store, engine)
            assert str(error).startswith("tools.bump (call "), error
            after = "runs again" if idempotent else "the resumed script finds it interrupted"
            assert after in str(error), error
            assert ran == [1]
        finally:
            store.go_on()
        script_id = await _only_script(store)
        calls = await store.calls(script_id)
        assert [c.state for c in calls] == [RUNNING]  # the result never reached the log
        result = await asyncio.wait_for(engine.resume(script_id, wait=HANG_S), HANG_S)
        if idempotent:
            assert result.status == "finished", result.text
            assert ran == [1, 1, 101]
            assert [c.state for c in await store.calls(script_id)] == [DONE, DONE]
        else:
            assert result.status == "failed", result.text
            assert "tools.bump was interrupted" in result.text, result.text
            # The host did not stop: the log did not take the result (it said the host had).
            assert "or the log did not take the result" in result.text, result.text
            assert ran == [1]
            assert [c.state for c in await store.calls(script_id)] == [FAILED]
    finally:
        store.go_on()
        await engine.aclose()


async def test_the_lease_kept_through_a_stall_is_given_up_once_the_server_answers(
    server: PostgresServer,
) -> None:
    """A host whose server stopped answering as it wrote a call's receipt keeps the
    script's lease (a release would wait again), but gives it up once the server answers:
    a resume there right away drives the script on (it said "running on another host" for
    the whole lease, 30 s); and a script another host resumes right after this host's next
    drive went through (after which it gives its kept leases up) is that host's at once
    then."""
    ran: list[int] = []
    schema = f"t_{uuid.uuid4().hex[:16]}"
    store = _Stalling(server, schema, "add_calls")
    engine = _engine(store, ran, lease_ms=30_000)
    other = _engine(PostgresStore(server.dsn, schema=schema), ran, lease_ms=30_000)
    try:
        try:
            await _stalled_run(store, engine)
        finally:
            store.go_on()
        first = await _only_script(store)
        result = await asyncio.wait_for(engine.resume(first), HANG_S)
        assert result.status == "finished", result.text
        assert ran == [1, 101]
        # Again, for a script another host resumes.
        store.at, store.frozen = "add_calls", []
        try:
            await _stalled_run(store, engine)
        finally:
            store.go_on()
        (second,) = {r.id for r in await store.scripts()} - {first}
        assert (await engine.run_code("return 7")).value == 7  # the log answers this host
        for _ in range(1200):  # until this host gave the lease up (at most a minute)
            lease = (await other.store.get_script(second)).lease
            if lease is None or lease.expires_ms == 0:
                break
            await asyncio.sleep(0.05)
        assert lease is not None and lease.expires_ms == 0, lease  # given up, not run out
        result = await asyncio.wait_for(other.resume(second), HANG_S)
        assert result.status == "finished", result.text
        assert ran == [1, 101, 1, 101]
    finally:
        store.go_on()
        await other.aclose()
        await engine.aclose()


async def test_a_host_idle_after_a_stall_gives_its_kept_lease_up(server: PostgresServer) -> None:
    """A host whose server stopped answering as it wrote a call's receipt keeps the
    script's lease, and gives it up once the server answers though it does nothing more:
    another host resumes the script then and drives it to its end (an idle host held it,
    and another host's resume said "running on another host", for the whole lease)."""
    ran: list[int] = []
    schema = f"t_{uuid.uuid4().hex[:16]}"
    store = _Stalling(server, schema, "add_calls")
    # A lease far longer than the test: it is given up, never left to run out.
    engine = _engine(store, ran, lease_ms=600_000)
    other = _engine(PostgresStore(server.dsn, schema=schema), ran, lease_ms=600_000)
    try:
        try:
            await _stalled_run(store, engine)
        finally:
            store.go_on()
        script_id = await _only_script(store)
        await given_up(other.store, script_id)
        result = await asyncio.wait_for(other.resume(script_id), HANG_S)
        assert result.status == "finished", result.text
        assert ran == [1, 101]
    finally:
        store.go_on()
        await other.aclose()
        await engine.aclose()


async def test_a_resume_that_took_the_lease_as_the_server_stopped_gives_it_up(
    server: PostgresServer,
) -> None:
    """A resume takes the script's lease, and the server stops answering (the postmaster
    too) as it reads the script's calls: the resume fails with StoreUnavailable, and the
    lease, whose release failed too, is given up once the server answers though the host
    does nothing more: another host's resume then drives the script to its end (it was
    held, and that resume said "running on another host", for the whole lease)."""
    ran: list[int] = []
    schema = f"t_{uuid.uuid4().hex[:16]}"
    store = _Stalling(server, schema, "add_calls", connect_timeout=1)
    engine = _engine(store, ran, lease_ms=600_000)
    other = _engine(PostgresStore(server.dsn, schema=schema), ran, lease_ms=600_000)
    try:
        try:
            await _stalled_run(store, engine)  # a script left active, its lease kept
        finally:
            store.go_on()
        script_id = await _only_script(store)
        await given_up(other.store, script_id)
        store.at, store.frozen, store.whole = "calls", [], True
        try:
            with pytest.raises(StoreUnavailable):
                await asyncio.wait_for(engine.resume(script_id), HANG_S)
            assert store.frozen, "the store's server was never stopped"
        finally:
            store.go_on()
        assert (await given_up(other.store, script_id)).token == 2  # the resume's
        result = await asyncio.wait_for(other.resume(script_id), HANG_S)
        assert result.status == "finished", result.text
        assert ran == [1, 101]
    finally:
        store.go_on()
        await other.aclose()
        await engine.aclose()


async def test_a_start_whose_on_start_fails_as_the_server_stops_gives_its_lease_up(
    server: PostgresServer,
) -> None:
    """run_code's on_start callback fails just as the server stops answering (the
    postmaster too): the start gives the script's lease up so that it waits free in the log,
    and when that release fails, the lease is given up once the server answers though the
    host does nothing more: another host's resume then drives the script (it was held, and
    that resume said "running on another host", for the whole lease)."""
    ran: list[int] = []
    schema = f"t_{uuid.uuid4().hex[:16]}"
    store = _Stalling(server, schema, connect_timeout=1)
    store.whole = True
    engine = _engine(store, ran, lease_ms=600_000)
    other = _engine(PostgresStore(server.dsn, schema=schema), ran, lease_ms=600_000)
    started: list[str] = []

    def on_start(script_id: str) -> None:
        started.append(script_id)
        store.stall()
        raise RuntimeError("the host's callback failed")

    try:
        try:
            with pytest.raises(RuntimeError, match="callback failed"):
                await asyncio.wait_for(engine.run_code(SCRIPT, on_start=on_start), HANG_S)
        finally:
            store.go_on()
        (script_id,) = started
        assert (await given_up(other.store, script_id)).token == 1  # the start's
        result = await asyncio.wait_for(other.resume(script_id), HANG_S)
        assert result.status == "finished", result.text
        assert ran == [1, 101]
    finally:
        store.go_on()
        await other.aclose()
        await engine.aclose()


async def test_a_drive_heard_out_through_a_stall_gives_its_lease_up(
    server: PostgresServer,
) -> None:
    """run_code cancelled while a sync tool's thread runs, as the server stops answering:
    the drive is heard out (its call's result waited for), the result cannot be written
    (nor a new connection made: the postmaster is stopped too), and the lease is given up once the server answers, though the host does nothing more:
    another host resumes the script then and runs the call again (its tool is idempotent);
    the lease was kept, and the resume said "running on another host", for the lease."""
    started = threading.Event()
    go = threading.Event()

    @tool(idempotent=True)
    def slow(n: int) -> int:
        """Add 1, once let go."""
        started.set()
        go.wait(HANG_S)
        return n + 1

    schema = f"t_{uuid.uuid4().hex[:16]}"
    store = _Stalling(server, schema, connect_timeout=1)
    engine = CodeMode(
        [slow], runner=InProcessRunner(), store=store, type_check="off", lease_ms=600_000
    )
    other = CodeMode(
        [slow],
        runner=InProcessRunner(),
        store=PostgresStore(server.dsn, schema=schema),
        type_check="off",
        lease_ms=600_000,
    )
    try:
        run = asyncio.create_task(engine.run_code("return await tools.slow({ n: 1 });"))
        assert await asyncio.to_thread(started.wait, HANG_S)
        script_id = await _only_script(store)
        try:
            store.stall()
            with _stopped([server.pid()]):
                run.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await run
                go.set()  # the call ends; its result is not written (the server is stopped)
                hearing = list(engine._hearing)
                assert hearing, "the cancelled drive was not heard out"
                await asyncio.wait_for(asyncio.gather(*hearing), HANG_S)
        finally:
            go.set()
            store.go_on()
        assert [c.state for c in await other.store.calls(script_id)] == [RUNNING]
        await given_up(other.store, script_id)
        result = await asyncio.wait_for(other.resume(script_id), HANG_S)
        assert result.status == "finished", result.text
        assert result.value == 2
    finally:
        go.set()
        store.go_on()
        await other.aclose()
        await engine.aclose()


async def test_a_server_that_takes_no_connection_is_store_unavailable(
    server: PostgresServer,
) -> None:
    """The server's postmaster stops (the kernel accepts a connection, which is never
    answered) while a host that has not connected yet approves a paused script's call: the
    approval fails with StoreUnavailable within the connect timeout, and once the server
    answers, the approved script finishes, its call run once."""
    paid: list[int] = []

    @tool(needs_approval=True)
    def pay(cents: int) -> str:
        """Pay, after a person approves."""
        paid.append(cents)
        return "paid"

    schema = f"t_{uuid.uuid4().hex[:16]}"
    host = CodeMode(
        [pay],
        runner=InProcessRunner(),
        store=PostgresStore(server.dsn, schema=schema),
        type_check="off",
    )
    later = CodeMode(
        [pay],
        runner=InProcessRunner(),
        store=PostgresStore(server.dsn, schema=schema, connect_timeout=1),
        type_check="off",
    )
    try:
        paused = await host.run_code("return await tools.pay({ cents: 5 });")
        assert paused.status == "paused", paused.text
        call_id = paused.waiting[0]["call_id"]
        with _stopped([server.pid()]):
            with pytest.raises(StoreUnavailable) as caught:
                await asyncio.wait_for(later.approve(paused.script_id, call_id), HANG_S)
            said = str(caught.value)
            assert "cannot reach the PostgreSQL session log" in said, said
            assert "try again once the server runs" in said, said
        await asyncio.wait_for(later.approve(paused.script_id, call_id), HANG_S)
        result = await asyncio.wait_for(later.resume(paused.script_id), HANG_S)
        assert result.status == "finished", result.text
        assert paid == [5]
        assert [c.state for c in await later.store.calls(paused.script_id)] == [DONE]
    finally:
        await later.aclose()
        await host.aclose()


async def test_a_server_that_stops_answering_as_attachments_are_stored(
    server: PostgresServer,
) -> None:
    """The server stops answering the blob store's own connection (and the log's) as a
    script's attachment is stored: run_code fails with StoreUnavailable saying so, no
    script started (the thread that stored it waited for ever); once the server answers,
    the same run goes through."""
    from engine import Attachment

    store = _Stalling(server, f"t_{uuid.uuid4().hex[:16]}")
    engine = CodeMode([], runner=InProcessRunner(), store=store, type_check="off")
    script = "return (await files.text('a.txt')).length"
    try:
        files = [Attachment("a.txt", data=b"x" * 5000, mime="text/plain")]
        assert (await engine.run_code(script, files=files)).value == 5000
        files = [Attachment("a.txt", data=b"y" * 7000, mime="text/plain")]
        try:
            store.stall()
            assert len(store.frozen) >= 2  # the pool's connection and the blob store's
            with pytest.raises(StoreUnavailable) as caught:
                await asyncio.wait_for(engine.run_code(script, files=files), HANG_S)
            said = str(caught.value)
            assert "failed storing attachment 'a.txt'" in said, said
            assert "did not answer within 1 s (answer_timeout)" in said, said
            assert "no script was started" in said, said
        finally:
            store.go_on()
        assert len(await store.scripts()) == 1
        assert (await engine.run_code(script, files=files)).value == 7000
    finally:
        store.go_on()
        await engine.aclose()


async def test_a_worker_whose_sessions_stop_answering_goes_on(server: PostgresServer) -> None:
    """The sessions of a worker's log stop answering while it looks for work: its look
    fails within the answer timeout (it waited for ever, and the worker with it), it warns
    that it could not reach the log, and it goes on on new connections, driving a script
    approved meanwhile to its end, its call run once, while the old sessions are still
    stopped."""
    paid: list[int] = []

    @tool(needs_approval=True)
    def pay(cents: int) -> str:
        """Pay, after a person approves."""
        paid.append(cents)
        return "paid"

    loop = asyncio.get_running_loop()
    missed = asyncio.Event()

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "worker could not reach the session log" in record.getMessage():
                loop.call_soon_threadsafe(missed.set)

    schema = f"t_{uuid.uuid4().hex[:16]}"
    host = CodeMode(
        [pay],
        runner=InProcessRunner(),
        store=PostgresStore(server.dsn, schema=schema),
        type_check="off",
    )
    store = _Stalling(server, schema)
    worker = CodeMode(
        [pay], runner=InProcessRunner(), store=store, poll_interval=0.05, type_check="off"
    )
    seen = Seen()
    logging.getLogger("codemode").addHandler(seen)
    stop = asyncio.Event()
    working = asyncio.ensure_future(worker.work(stop=stop))
    try:
        paused = await host.run_code("return await tools.pay({ cents: 5 });")
        assert paused.status == "paused", paused.text
        await store.get_script(paused.script_id)  # the worker's log is open
        store.stall()
        noticed = asyncio.ensure_future(missed.wait())
        done, _ = await asyncio.wait(
            {working, noticed}, timeout=HANG_S, return_when=asyncio.FIRST_COMPLETED
        )
        assert noticed in done and not working.done(), working
        await host.approve(paused.script_id, paused.waiting[0]["call_id"])
        for _ in range(2400):  # until the worker drove it (at most 2 minutes)
            record = await host.store.get_script(paused.script_id)
            if record.status in ("finished", "failed") or working.done():
                break
            await asyncio.sleep(0.05)
        assert not working.done(), working
        assert record.status == "finished" and paid == [5]
    finally:
        store.go_on()
        stop.set()
        logging.getLogger("codemode").removeHandler(seen)
        await asyncio.wait_for(asyncio.gather(working, return_exceptions=True), HANG_S)
        await worker.aclose()
        await host.aclose()


def test_the_cli_schema_check_is_bounded_too(
    server: PostgresServer, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI's look for a log in the configured schema (before a command opens the store)
    meets a server whose session stops answering once connected: StoreUnavailable within
    answer_timeout, which says so (it waited on its query for good)."""
    import psycopg

    from engine import Config
    from engine.cli import _postgres_log_there

    config_file = tmp_path / "codemode.toml"
    config_file.write_text(
        f'[codemode.store]\nkind = "postgres"\ndsn = "{server.dsn}"\nanswer_timeout = 1\n'
    )
    config = Config.load(config_file)
    connect = psycopg.connect
    stopped: list[int] = []

    def stalling(*args: Any, **kwargs: Any) -> Any:
        conn = connect(*args, **kwargs)
        os.kill(conn.info.backend_pid, signal.SIGSTOP)
        stopped.append(conn.info.backend_pid)
        return conn

    async def in_a_command() -> None:  # as the CLI's commands call it: on their event loop
        _postgres_log_there(config, "scripts")

    monkeypatch.setattr(psycopg, "connect", stalling)
    try:
        with pytest.raises(StoreUnavailable) as caught:
            asyncio.run(in_a_command())
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    assert stopped, "the check never connected"
    said = str(caught.value)
    assert "scripts: the PostgreSQL server of the session log at " in said, said
    assert "did not answer within 1 s (answer_timeout)" in said, said
    assert "then run the command again (" in said and "[codemode.store])" in said, said


def test_blob_reads_are_watched_by_one_thread_and_a_stopped_server_still_fails_them(
    server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The blob store's statements (one per chunk of a file a script reads) are bounded by
    answer_timeout as blocking calls, by one watching thread (a thread's timer was started
    for each, 0.13 ms a chunk): a read of a file in 200 chunks starts at most one thread,
    a read on a stopped server session still fails within the answer timeout saying so,
    the next read goes on on a new connection, and the watching thread ends once idle."""
    store = _Stalling(server, f"t_{uuid.uuid4().hex[:16]}")
    blobs = store.blob_store()
    started: list[str] = []
    start = threading.Thread.start
    here = threading.get_ident()

    def counted(thread: threading.Thread) -> None:
        if threading.get_ident() == here:  # by the blob store's calls, not the test runner's
            started.append(thread.name)
        start(thread)

    try:
        data = bytes(range(256)) * 800
        digest = blobs.put(data)
        monkeypatch.setattr(threading.Thread, "start", counted)
        read = b"".join(blobs.read(digest, at, 1024) for at in range(0, len(data), 1024))
        assert read == data
        assert len(started) <= 1, started
        try:
            store.stall()
            with pytest.raises(OSError) as caught:
                blobs.read(digest, 0, 10)
        finally:
            store.go_on()
        said = str(caught.value)
        assert "blob store at " in said and "did not answer within 1 s (answer_timeout)" in said
        assert blobs.read(digest, 5, 3) == data[5:8]
        assert len(started) <= 2, started  # once more at most, had it ended meanwhile
    finally:
        store.go_on()
        blobs.close()
    watching = [t for t in threading.enumerate() if t.name in started]
    for thread in watching:  # it ends on its own once no statement is watched for a while
        thread.join(HANG_S)
        assert not thread.is_alive(), thread


def test_a_cli_command_whose_server_takes_the_connection_and_never_answers(
    tmp_path: Any,
) -> None:
    """A dsn whose port takes connections and never answers (a stopped postmaster, a port
    that is not PostgreSQL's): a command ends with exit 75 and says it cannot reach the log,
    after one connect timeout. (The CLI's look for the log waited it out, then left the
    server to the store, which waited it out again on a second connection.)"""
    import socket
    import subprocess
    import sys
    from pathlib import Path

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    taken: list[socket.socket] = []

    def take() -> None:
        with contextlib.suppress(OSError):  # closed: the test is over
            while True:
                taken.append(listener.accept()[0])

    threading.Thread(target=take, daemon=True).start()
    port = listener.getsockname()[1]
    config = tmp_path / "codemode.toml"
    config.write_text(
        f'[codemode.store]\nkind = "postgres"\n'
        f'dsn = "host=127.0.0.1 port={port} dbname=postgres user=codemode"\n'
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "engine.cli", "scripts", "--config", str(config)],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parents[3],
            timeout=HANG_S,
        )
    finally:
        listener.close()
        for conn in taken:
            conn.close()
    assert len(taken) == 1, (taken, proc.stderr)
    assert proc.returncode == 75, proc.stderr
    said = proc.stderr.strip()
    assert said.startswith("codemode: scripts: cannot reach the PostgreSQL session log at "), said
    assert f"127.0.0.1:{port}/postgres" in said and "try again once the server runs" in said, said
