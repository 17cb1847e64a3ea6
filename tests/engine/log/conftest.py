"""Stores under test: memory, SQLite, and PostgreSQL on a throwaway server this session starts
(see tests/postgres_server.py). A PostgreSQL test that cannot have its server fails in CI and
is skipped elsewhere, saying what is missing."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.log import LogStore, MemoryStore, SqliteStore
from tests._needs import require
from tests.postgres_server import PostgresServer, PostgresUnavailable


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The DSN of a PostgreSQL server for this test session, or the reason there is none."""
    server = PostgresServer()
    try:
        dsn = server.start()
    except PostgresUnavailable as e:
        yield f"unavailable: {e}"
        return
    try:
        yield dsn
    finally:
        server.stop()


@pytest.fixture
def postgres(postgres_server: str) -> str:
    """A PostgreSQL DSN; the test fails in CI (skips elsewhere) if there is no server."""
    if postgres_server.startswith("unavailable: "):
        require(f"PostgreSQL is {postgres_server}")
    return postgres_server


STORES = ["memory", "sqlite", "postgres"]


@pytest.fixture(params=STORES)
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], LogStore]:
    """Handles on one fresh log of each kind of store."""
    if request.param == "memory":
        store = MemoryStore()
        return lambda: store
    if request.param == "sqlite":
        return lambda: SqliteStore(tmp_path / "log")
    dsn = request.getfixturevalue("postgres")
    from engine.log import PostgresStore

    schema = f"t_{uuid.uuid4().hex[:16]}"
    return lambda: PostgresStore(dsn, schema=schema)
