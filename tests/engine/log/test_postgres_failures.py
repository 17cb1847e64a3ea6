"""The PostgreSQL log when its server fails: restarted (fast or immediate) while a script
runs, so that every connection the store holds is cut. Needs PostgreSQL's server binaries:
each test module here runs a throwaway server of its own, which it restarts (never the
session's shared one, nor a server named by ``CODEMODE_TEST_DSN``)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from engine import CodeMode, StoreUnavailable, tool
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


def _store(server: PostgresServer) -> PostgresStore:
    return PostgresStore(server.dsn, schema=f"t_{uuid.uuid4().hex[:16]}")


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
    finally:
        await engine.aclose()


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
