"""Fixtures every test package shares: a PostgreSQL server for this test session, started
on first use (see tests/postgres_server.py). A test that needs it and cannot have it fails in
CI and is skipped elsewhere, saying what is missing."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

import pytest

from tests._needs import require
from tests.postgres_server import PostgresServer, PostgresUnavailable

# The servers tests start listen on loopback: a proxy of the machine's environment (which
# MCP's HTTP client honours) must not carry what goes to them.
_LOOPBACK = "127.0.0.1,localhost,::1"
for _name in ("NO_PROXY", "no_proxy"):
    os.environ[_name] = ",".join(filter(None, [os.environ.get(_name), _LOOPBACK]))


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``'s workers: one more than the cores (``--maxprocesses`` caps it at four).
    Many tests wait (a child process's start, a server's timeout, a grace period) rather than
    compute, and a worker more keeps the cores busy meanwhile: on two cores the suite took
    498 s with three workers against 540 to 573 s with two."""
    return (os.cpu_count() or 1) + 1


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection made (the modules, the test items, their parameters: some 400
    thousand objects in each worker) so that no collection of garbage walks it again. The
    tests that run scripts in this process collect garbage before each run (see
    tests/_garbage.py), and each full collection walked all of it: half a second, thousands
    of times over a session."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The DSN of a PostgreSQL server for this test session, or the reason there is none.
    ``CODEMODE_TEST_DSN`` names a server of your own instead of a throwaway one."""
    own = os.environ.get("CODEMODE_TEST_DSN")
    if own:
        yield own
        return
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
