"""Stores under test: memory, SQLite, and PostgreSQL on the session's throwaway server."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.log import LogStore, MemoryStore, PostgresStore, SqliteStore

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
    schema = f"t_{uuid.uuid4().hex[:16]}"
    return lambda: PostgresStore(dsn, schema=schema)
