"""What is particular to each store: opening, upgrading and refusing a log."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import socket
import sqlite3
import sys
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from engine import ConfigError, StoreUnavailable
from engine.log import (
    APPROVED,
    DONE,
    CallEntry,
    LogStore,
    PostgresStore,
    ScriptRecord,
    SqliteStore,
)

# The schema of the first release's SQLite log, as its files are on hosts' disks.
FIRST_RELEASE_SCHEMA = """
CREATE TABLE scripts (
    id TEXT PRIMARY KEY, code TEXT NOT NULL, tenant TEXT NOT NULL, now_ms INTEGER NOT NULL,
    seed INTEGER NOT NULL, created_ms INTEGER NOT NULL, status TEXT NOT NULL,
    held INTEGER NOT NULL DEFAULT 0, steps INTEGER NOT NULL DEFAULT 0,
    total_compute_ms REAL NOT NULL DEFAULT 0, total_file_bytes INTEGER NOT NULL DEFAULT 0,
    outcome BLOB, files BLOB
);
CREATE TABLE calls (
    script_id TEXT NOT NULL REFERENCES scripts(id), idx INTEGER NOT NULL,
    call_id TEXT NOT NULL, name TEXT NOT NULL, arguments BLOB NOT NULL, state TEXT NOT NULL,
    result BLOB, error TEXT, note TEXT, extra BLOB, PRIMARY KEY (script_id, idx)
);
CREATE INDEX scripts_status ON scripts(status);
"""


async def test_sqlite_upgrades_a_first_release_log(tmp_path: Path) -> None:
    """A log written by the first release opens, with every script and call as it was and
    the sizes it kept in `extra` taken over."""
    db = sqlite3.connect(tmp_path / SqliteStore.FILE_NAME)
    db.executescript(FIRST_RELEASE_SCHEMA)
    db.execute(
        "INSERT INTO scripts VALUES ('s1', 'return 1', 'acme', 5, 6, 7, 'paused', 0, 2, 1.5, 0,"
        " NULL, ?)",
        (orjson.dumps([]),),
    )
    args, result = orjson.dumps({"sku": "A1"}), orjson.dumps({"price": 3})
    db.execute(
        "INSERT INTO calls VALUES ('s1', 0, 'call_s1_1', 'get_price', ?, 'done', ?, NULL, NULL, ?)",
        (args, result, orjson.dumps({"argument_bytes": len(args), "result_bytes": 999})),
    )
    db.execute(
        "INSERT INTO calls VALUES ('s1', 1, 'call_s1_2', 'get_price', ?, 'approved', NULL, NULL,"
        " 'approved', ?)",
        (args, orjson.dumps({"argument_bytes": len(args)})),
    )
    db.commit()
    db.close()

    store = SqliteStore(tmp_path)
    try:
        record = await store.get_script("s1")
        assert (record.code, record.status, record.steps, record.updated_ms) == (
            "return 1",
            "paused",
            2,
            7,
        )
        assert record.lease is None and record.key is None and record.tools == {}
        calls = await store.calls("s1")
        assert [(c.state, c.result, c.argument_bytes, c.result_bytes) for c in calls] == [
            (DONE, {"price": 3}, len(args), 999),
            (APPROVED, None, len(args), None),
        ]
        lease = await store.acquire("s1", "host-a", 60_000)
        assert lease is not None and await store.claim(lease, [1]) == [1]
    finally:
        await store.aclose()
    # Opened again, it is not upgraded twice.
    again = SqliteStore(tmp_path)
    assert len(await again.calls("s1")) == 2
    await again.aclose()


# Schema 2's tables, as its SQLite logs have them ({int}, {real}, {blob}: each dialect's
# types): a key was unique in the whole log (scripts_key), not within its tenant.
SCHEMA_2 = """
CREATE TABLE scripts (
    id TEXT PRIMARY KEY, key TEXT, code TEXT NOT NULL, tenant TEXT NOT NULL,
    language TEXT NOT NULL DEFAULT 'javascript', now_ms {int} NOT NULL, seed {int} NOT NULL,
    created_ms {int} NOT NULL, updated_ms {int} NOT NULL DEFAULT 0, status TEXT NOT NULL,
    held {int} NOT NULL DEFAULT 0, steps {int} NOT NULL DEFAULT 0,
    total_compute_ms {real} NOT NULL DEFAULT 0, total_file_bytes {int} NOT NULL DEFAULT 0,
    outcome {blob}, files {blob}, tools {blob}, lease_owner TEXT,
    lease_token {int} NOT NULL DEFAULT 0, lease_expires_ms {int} NOT NULL DEFAULT 0
);
CREATE TABLE calls (
    script_id TEXT NOT NULL REFERENCES scripts(id), idx {int} NOT NULL, call_id TEXT NOT NULL,
    name TEXT NOT NULL, arguments {blob} NOT NULL, argument_bytes {int} NOT NULL DEFAULT 0,
    state TEXT NOT NULL, result {blob}, result_bytes {int}, error TEXT, note TEXT, owner TEXT,
    token {int}, created_ms {int} NOT NULL DEFAULT 0, started_ms {int}, ended_ms {int},
    PRIMARY KEY (script_id, idx)
);
CREATE UNIQUE INDEX scripts_key ON scripts(key);
CREATE INDEX scripts_updated ON scripts(status, updated_ms);
CREATE INDEX calls_call_id ON calls(script_id, call_id);
"""
SQLITE_TYPES = {"int": "INTEGER", "real": "REAL", "blob": "BLOB"}
POSTGRES_TYPES = {"int": "BIGINT", "real": "DOUBLE PRECISION", "blob": "BYTEA"}
# Tenant A's script, started with the key toolu_1 (a model's tool-use id) and finished.
KEYED_SCRIPT = (
    "INSERT INTO scripts (id, key, code, tenant, now_ms, seed, created_ms, updated_ms, status,"
    " files) VALUES ('s-a', 'toolu_1', 'return 1', 'A', 5, 6, 7, 7, 'finished', {empty})"
)


def _keyed(tenant: str, key: str | None = "toolu_1") -> ScriptRecord:
    return ScriptRecord(
        id=uuid.uuid4().hex, code="return 2", tenant=tenant, now_ms=1, seed=2, created_ms=3, key=key
    )


async def _keys_are_per_tenant(store: LogStore) -> None:
    """On a log upgraded from schema 2: tenant A's start with its key finds its script, tenant
    B's start with that key makes B's own, and each is idempotent."""
    again = await store.start(_keyed("A"), "host-a", 60_000)
    assert not again.created and again.record.id == "s-a", again
    b = await store.start(_keyed("B"), "host-a", 60_000)
    assert b.created and b.record.id != "s-a" and b.record.tenant == "B", b
    b_again = await store.start(_keyed("B"), "host-b", 60_000)
    assert not b_again.created and b_again.record.id == b.record.id
    assert sorted((s.tenant, s.key) for s in await store.scripts()) == [
        ("A", "toolu_1"),
        ("B", "toolu_1"),
    ]


def _sqlite_schema_2_log(directory: Path) -> None:
    """A SQLite log of schema 2 in ``directory``, holding one keyed script."""
    db = sqlite3.connect(directory / SqliteStore.FILE_NAME)
    db.executescript(SCHEMA_2.format(**SQLITE_TYPES))
    db.execute(KEYED_SCRIPT.format(empty="?"), (orjson.dumps([]),))
    db.execute("PRAGMA user_version = 2")
    db.commit()
    db.close()


async def test_sqlite_upgrades_a_schema_2_log_to_keys_per_tenant(tmp_path: Path) -> None:
    """A log of schema 2 (a key unique in the whole log) opens as schema 3: its keyed script
    is found by its tenant's start, another tenant's start with the key makes its own, and
    the old index is gone."""
    _sqlite_schema_2_log(tmp_path)

    store = SqliteStore(tmp_path)
    try:
        await _keys_are_per_tenant(store)
    finally:
        await store.aclose()
    db = sqlite3.connect(tmp_path / SqliteStore.FILE_NAME)
    try:
        assert db.execute("PRAGMA user_version").fetchone() == (3,)
        indexes = {row[1]: row[2] for row in db.execute("PRAGMA index_list(scripts)")}
        assert "scripts_key" not in indexes and indexes["scripts_tenant_key"] == 1, indexes
        columns = [row[2] for row in db.execute("PRAGMA index_info(scripts_tenant_key)")]
        assert columns == ["tenant", "key"]
    finally:
        db.close()
    again = SqliteStore(tmp_path)  # opened again, as it is
    assert len(await again.scripts()) == 2
    await again.aclose()


async def test_postgres_upgrades_a_schema_2_log_to_keys_per_tenant(postgres: str) -> None:
    """As on SQLite: a schema 2 log in PostgreSQL, opened by two hosts at once, is upgraded
    once, and keys name scripts within their tenants."""
    import psycopg

    schema = f"v2_{uuid.uuid4().hex[:12]}"
    async with await psycopg.AsyncConnection.connect(postgres, autocommit=True) as conn:
        await conn.execute(f'CREATE SCHEMA "{schema}"')
        await conn.execute(f'SET search_path TO "{schema}"')
        for statement in SCHEMA_2.format(**POSTGRES_TYPES).split(";"):
            if statement.strip():
                await conn.execute(statement)
        await conn.execute("CREATE TABLE blobs (digest TEXT PRIMARY KEY, data BYTEA NOT NULL)")
        await conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        await conn.execute("INSERT INTO schema_version VALUES (2)")
        await conn.execute(KEYED_SCRIPT.format(empty="%s"), (orjson.dumps([]),))

    a, b = PostgresStore(postgres, schema=schema), PostgresStore(postgres, schema=schema)
    try:
        await asyncio.gather(a.scripts(), b.scripts())
        await _keys_are_per_tenant(a)
    finally:
        await a.aclose()
        await b.aclose()
    async with await psycopg.AsyncConnection.connect(postgres) as conn:
        versions = await (
            await conn.execute(f'SELECT version FROM "{schema}".schema_version')
        ).fetchall()
        indexes = await (
            await conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s"
                " AND tablename = 'scripts'",
                (schema,),
            )
        ).fetchall()
    assert versions == [(3,)]
    found = dict(indexes)
    assert "scripts_key" not in found, found
    assert (
        "UNIQUE" in found["scripts_tenant_key"] and "(tenant, key)" in found["scripts_tenant_key"]
    )


async def test_sqlite_read_only_reads_a_log_as_it_is(tmp_path: Path) -> None:
    """``read_only``: a log of schema 2 is read, not upgraded, and nothing is written (a write
    is the read-only StoreUnavailable); one older than 2, or newer than this codemode, is
    refused, as no upgrade can be made by reading."""
    _sqlite_schema_2_log(tmp_path)
    before = (tmp_path / SqliteStore.FILE_NAME).read_bytes()
    store = SqliteStore(tmp_path, read_only=True)
    try:
        (record,) = await store.scripts()
        with pytest.raises(StoreUnavailable, match="is read-only for this process") as raised:
            await store.set_held(record.id, True)
        assert raised.value.permanent
    finally:
        await store.aclose()
    assert (tmp_path / SqliteStore.FILE_NAME).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [SqliteStore.FILE_NAME]
    for version, said in ((1, r"older codemode \(schema 1\)"), (99, "newer codemode")):
        db = sqlite3.connect(tmp_path / SqliteStore.FILE_NAME)
        db.execute(f"PRAGMA user_version = {version}")
        db.close()
        with pytest.raises(ConfigError, match=said):
            SqliteStore(tmp_path, read_only=True)


def test_sqlite_read_only_names_an_empty_file_and_one_not_sqlite(tmp_path: Path) -> None:
    """Read (``codemode scripts``), an empty codemode.sqlite3 (touched, or left by a first
    write that failed) was "of an older codemode (schema 0)", to be upgraded by a writer; a
    file that is not SQLite was "file is not a database" alone, where a writer says it is
    damaged and what to do."""
    (tmp_path / SqliteStore.FILE_NAME).write_bytes(b"")
    with pytest.raises(ConfigError, match=r"is empty: no codemode log was ever written to it"):
        SqliteStore(tmp_path, read_only=True)
    (tmp_path / SqliteStore.FILE_NAME).write_bytes(b"not a database at all " * 200)
    for read_only in (True, False):
        with pytest.raises(StoreUnavailable, match="if it is no codemode log") as raised:
            SqliteStore(tmp_path, read_only=read_only)
        assert raised.value.permanent and "is damaged" in str(raised.value)


def test_sqlite_log_that_is_a_directory_says_so(tmp_path: Path) -> None:
    """A directory where the log's file goes was "unable to open database file" alone."""
    (tmp_path / SqliteStore.FILE_NAME).mkdir()
    with pytest.raises(ConfigError, match=r"codemode.sqlite3 is a directory, not a file: move"):
        SqliteStore(tmp_path)


async def test_sqlite_refuses_a_newer_log(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / SqliteStore.FILE_NAME)
    db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(ConfigError, match=r"newer codemode .*upgrade codemode"):
        SqliteStore(tmp_path)


def test_sqlite_says_a_damaged_log_is_damaged_when_its_upgrade_meets_the_damage(
    tmp_path: Path,
) -> None:
    """A first release's log whose calls' pages are damaged fails its upgrade as damaged, with
    what to do about it (it was "has tables codemode did not make", which sent the host to
    another data_dir and left the damage unsaid)."""
    path = tmp_path / SqliteStore.FILE_NAME
    db = sqlite3.connect(path)
    db.executescript(FIRST_RELEASE_SCHEMA)
    db.execute(
        "INSERT INTO scripts VALUES ('s1', 'return 1', 'acme', 5, 6, 7, 'paused', 0, 2,"
        " 1.5, 0, NULL, NULL)"
    )
    for i in range(400):
        db.execute(
            "INSERT INTO calls VALUES ('s1', ?, ?, 't', ?, 'done', ?, NULL, NULL, NULL)",
            (i, f"call_{i}", b"x" * 200, b"y" * 200),
        )
    db.commit()
    (pages,) = db.execute("PRAGMA page_count").fetchone()
    (size,) = db.execute("PRAGMA page_size").fetchone()
    db.close()
    data = bytearray(path.read_bytes())
    middle = pages // 2  # the calls' pages; the first ones (the schema) stay whole
    data[middle * size : (middle + 2) * size] = b"\xff" * (2 * size)
    path.write_bytes(bytes(data))
    with pytest.raises(StoreUnavailable, match=r"is damaged \(database disk image is malformed\)"):
        SqliteStore(tmp_path)


@pytest.mark.parametrize(
    "foreign",
    ["CREATE TABLE scripts(id INTEGER PRIMARY KEY)", "CREATE VIEW calls AS SELECT 1 AS id"],
)
def test_sqlite_refuses_a_file_with_tables_of_another_application(
    tmp_path: Path, foreign: str
) -> None:
    """A SQLite file of another program's, with a table named as codemode names one, is one
    error saying so (it was sqlite3.OperationalError: no such column: created_ms), and the
    file is left as it was."""
    db = sqlite3.connect(tmp_path / SqliteStore.FILE_NAME)
    db.execute(foreign)
    db.close()
    with pytest.raises(
        ConfigError, match=r"has tables codemode did not make .*directory of its own"
    ):
        SqliteStore(tmp_path)
    db = sqlite3.connect(tmp_path / SqliteStore.FILE_NAME)
    assert db.execute("PRAGMA user_version").fetchone() == (0,)
    assert [r[0] for r in db.execute("SELECT name FROM sqlite_master ORDER BY 1")] == [
        "calls" if "VIEW" in foreign else "scripts"
    ]
    db.close()


@pytest.mark.parametrize("read_only", [False, True])
def test_sqlite_refuses_another_applications_database(tmp_path: Path, read_only: bool) -> None:
    """A SQLite file of another program's, whose tables are none of codemode's names: opened,
    codemode's tables were made beside the program's own; read (`codemode scripts`), it was
    'of an older codemode (schema 0) ...: run one there (resume, worker) once', which did
    that. It is refused as no log of codemode's, the file left as it was."""
    path = tmp_path / SqliteStore.FILE_NAME
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (body TEXT)")
    db.execute("INSERT INTO notes VALUES ('mine')")
    db.commit()
    db.close()
    before = path.read_bytes()
    with pytest.raises(
        ConfigError,
        match=r"holds tables codemode did not make \(notes\): if it is no codemode log, give "
        "data_dir a directory of its own",
    ):
        SqliteStore(tmp_path, read_only=read_only)
    assert path.read_bytes() == before


def test_sqlite_data_dir_that_is_a_file(tmp_path: Path) -> None:
    path = tmp_path / "sess.v1"
    path.write_text("not a directory")
    with pytest.raises(ConfigError, match="is a file: give a directory"):
        SqliteStore(path)


def test_sqlite_without_wal_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite's dot-file VFS has no shared memory, as a network filesystem has none: WAL
    # cannot be turned on, and the store says so instead of syncing on the event loop.
    connect = sqlite3.connect

    def dotfile(path: str, **options: Any) -> sqlite3.Connection:
        return connect(f"file:{path}?vfs=unix-dotfile", uri=True, **options)

    monkeypatch.setattr(sqlite3, "connect", dotfile)
    with pytest.raises(ConfigError, match=r"write-ahead log .*stayed 'delete'.*local filesystem"):
        SqliteStore(tmp_path)


def test_sqlite_data_dir_with_a_dot_is_a_directory(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "sess.v1")
    assert store.path == tmp_path / "sess.v1" / SqliteStore.FILE_NAME


async def test_postgres_unreachable_is_one_clear_error() -> None:
    """Nothing answers at the dsn's address: a server that is down (it may come back: a
    StoreUnavailable, the CLI's exit 75) or a wrong address, which the message points to."""
    with socket.socket() as s:  # a port on loopback that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = PostgresStore(f"postgresql://codemode:secret@127.0.0.1:{port}/app", connect_timeout=2)
    with pytest.raises(StoreUnavailable) as caught:
        await store.get_script("x")
    message = str(caught.value)
    assert f"127.0.0.1:{port}/app" in message and "[codemode.store] dsn" in message
    assert "secret" not in message
    await store.aclose()


def test_postgres_schema_name_is_checked() -> None:
    with pytest.raises(ConfigError, match="plain lower-case identifier"):
        PostgresStore("postgresql://x", schema='x"; DROP TABLE scripts; --')
    with pytest.raises(ConfigError, match="plain lower-case identifier"):
        PostgresStore("postgresql://x", schema=None)  # type: ignore[arg-type]
    # PostgreSQL refuses to make it ("unacceptable schema name"): said when the store is made.
    with pytest.raises(ConfigError, match="not starting with pg_"):
        PostgresStore("postgresql://x", schema="pg_codemode")


@pytest.mark.parametrize("dsn", [None, b"host=db.internal"])
def test_postgres_dsn_that_is_no_text_is_refused_when_the_store_is_made(dsn: Any) -> None:
    """A dsn of None (a variable of the environment not set: os.environ.get) or bytes is
    refused when the store is made, with what to give. (It failed the first use, with
    "'NoneType' object has no attribute 'encode'".)"""
    with pytest.raises(ConfigError, match=r"dsn = .* is not text: give a libpq connection"):
        PostgresStore(dsn)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("connect_timeout", 0),
        ("connect_timeout", -1),
        ("connect_timeout", float("nan")),
        ("connect_timeout", "5"),
        ("max_connections", "5"),
        ("max_connections", 2.5),
        ("max_connections", 0),
    ],
)
def test_postgres_options_are_checked_when_the_store_is_made(option: str, value: Any) -> None:
    """A connect timeout or pool size PostgresStore cannot use is refused when it is made,
    naming it. (They were taken: a connect_timeout of 0 failed the first use as 'pool
    initialization incomplete after 0 sec; check [codemode.store] dsn and that the server
    runs', NaN and text as a raw ValueError or TypeError, as did a max_connections of text.)"""
    with pytest.raises(ConfigError, match=rf"^{option} = .* must be "):
        PostgresStore("postgresql://x", **{option: value})


@pytest.mark.parametrize("module", ["psycopg", "psycopg_pool"])
def test_postgres_without_the_extra_is_refused_when_made(
    monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    """A host without psycopg (or its pool) is told to install the extra by PostgresStore(...)
    itself, not by the first call that reaches the log. (None in sys.modules makes the import
    fail as it does where the package is missing.)"""
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ConfigError, match=r"pip install 'codemode\[postgres\]'"):
        PostgresStore("postgresql://app@db.internal/codemode")


async def test_postgres_tables_in_their_own_schema(postgres: str) -> None:
    """Two schemas on one database are two separate logs."""
    import psycopg

    a, b = PostgresStore(postgres, schema="log_a"), PostgresStore(postgres, schema="log_b")
    try:
        await a.scripts()
        await b.scripts()
        async with await psycopg.AsyncConnection.connect(postgres) as conn:
            rows = await (
                await conn.execute(
                    "SELECT table_schema FROM information_schema.tables"
                    " WHERE table_name = 'scripts' ORDER BY 1"
                )
            ).fetchall()
        assert {"log_a", "log_b"} <= {r[0] for r in rows}
    finally:
        await a.aclose()
        await b.aclose()


def _changed(dsn: str, **changes: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    return make_conninfo(**{**conninfo_to_dict(dsn), **changes})


@pytest.mark.parametrize("setting", ["lock_timeout", "statement_timeout"])
async def test_postgres_timeouts_the_role_sets_cancel_no_write_of_the_log(
    postgres: str, setting: str
) -> None:
    """A statement_timeout or lock_timeout the role or database sets (here in the dsn's
    options, as a role's would be) does not cancel a write of the log waiting for another
    host's row lock: it waits, and goes through. (Before, the write failed at once as
    'the PostgreSQL session log ... did not answer (canceling statement due to lock
    timeout)', a call's result with it, and a statement_timeout that short failed the log's
    open as 'check [codemode.store] dsn'.)"""
    schema, name = f"t_{uuid.uuid4().hex[:16]}", f"codemode-{uuid.uuid4().hex[:16]}"
    store = PostgresStore(
        _changed(postgres, options=f"-c {setting}=1", application_name=name), schema=schema
    )
    try:
        await _held_behind_a_row_lock(postgres, store, name)
        assert (await store.get_script("s1")).held
    finally:
        await store.aclose()


async def test_postgres_idle_session_timeout_the_role_sets_loses_no_write(postgres: str) -> None:
    """idle_session_timeout on the role or database (here in the dsn's options, as a role's
    would be): the server would end each of the pool's connections once it had idled that
    long, between a script's steps, and the log's next write would meet a connection cut
    under it. The log's sessions take none of it: the write after an idle second goes
    through on the connection the pool kept."""
    dsn = _changed(postgres, options="-c idle_session_timeout=200")
    store = PostgresStore(dsn, schema=f"t_{uuid.uuid4().hex[:16]}")
    record = ScriptRecord(id="s1", code="return 1", tenant="", now_ms=0, seed=0, created_ms=0)
    try:
        assert (await store.start(record, "host-a", 30_000)).created
        pool = store._pool
        await asyncio.sleep(1.0)
        assert (await store.get_script("s1")).code == "return 1"
        assert store._pool is pool  # no reconnection was needed
        async with pool.connection() as conn:
            cur = await conn.execute("SHOW idle_session_timeout")
            assert (await cur.fetchone())[0] == "0"
    finally:
        await store.aclose()


async def test_postgres_client_encoding_the_role_sets_is_not_the_logs(postgres: str) -> None:
    """client_encoding = LATIN1 on the role or database (here in the dsn's options, as a
    role's would be): the log keeps a script with an emoji all the same. (Its start failed
    with a raw UnicodeEncodeError from the driver, a traceback from `codemode run`.)"""
    dsn = _changed(postgres, options="-c client_encoding=LATIN1")
    store = PostgresStore(dsn, schema=f"t_{uuid.uuid4().hex[:16]}")
    code = "return '\U0001f600 caf\u00e9'"
    record = ScriptRecord(id="s1", code=code, tenant="\u00e9", now_ms=0, seed=0, created_ms=0)
    try:
        assert (await store.start(record, "host-a", 30_000)).created
        assert (await store.get_script("s1")).code == code
    finally:
        await store.aclose()


async def _held_behind_a_row_lock(
    postgres: str,
    store: PostgresStore,
    name: str,
    meanwhile: str | None = None,
    holder: str = "SELECT 1 FROM {scripts} WHERE id = 's1' FOR UPDATE",
) -> None:
    """Start script s1 in ``store`` (whose sessions' application_name is ``name``) and hold
    it while another host's transaction holds its row (``holder``'s statement): once the
    write waits for the lock, run the SQL ``meanwhile`` (``%s``: the name), then let the
    row go."""
    import psycopg

    record = ScriptRecord(id="s1", code="1", tenant="t", now_ms=0, seed=0, created_ms=0)
    waiting = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND " + (
        "wait_event_type = 'Lock'"
    )
    await store.start(record, "host-a", 30_000)
    async with await psycopg.AsyncConnection.connect(postgres) as other:
        await other.execute(holder.format(scripts=f'"{store.schema}".scripts'))
        holding = asyncio.ensure_future(store.set_held("s1", True))
        async with await psycopg.AsyncConnection.connect(postgres, autocommit=True) as look:
            while not holding.done():  # until the write waits for the lock
                if (await (await look.execute(waiting, (name,))).fetchone())[0]:
                    if meanwhile is not None:
                        await look.execute(meanwhile, (name,))
                    break
                await asyncio.sleep(0.01)
        await other.commit()
    await holding


async def test_postgres_isolation_the_role_makes_the_default_is_not_the_logs(
    postgres: str,
) -> None:
    """default_transaction_isolation = serializable on the role or database (here in the
    dsn's options, as a role's would be): the log's writes run at read committed all the
    same, which its row locks are written for, so a write that waited for a row another
    host changed goes through. (It failed, 'could not serialize access due to concurrent
    update', as did 46 of 200 scripts run at once.)"""
    schema, name = f"t_{uuid.uuid4().hex[:16]}", f"codemode-{uuid.uuid4().hex[:16]}"
    dsn = _changed(
        postgres, options="-c default_transaction_isolation=serializable", application_name=name
    )
    store = PostgresStore(dsn, schema=schema)
    changed = "UPDATE {scripts} SET updated_ms = updated_ms + 1 WHERE id = 's1'"
    try:
        await _held_behind_a_row_lock(postgres, store, name, holder=changed)
        assert (await store.get_script("s1")).held
    finally:
        await store.aclose()


async def test_postgres_a_write_the_server_fails_says_what_it_said(postgres: str) -> None:
    """A write the server answers with an error (here an operator's pg_cancel_backend of
    it) is StoreUnavailable saying the server failed it, with its words. (It said the log
    'did not answer (canceling statement due to user request)', which it had.)"""
    schema, name = f"t_{uuid.uuid4().hex[:16]}", f"codemode-{uuid.uuid4().hex[:16]}"
    store = PostgresStore(_changed(postgres, application_name=name), schema=schema)
    cancel = "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = %s"
    try:
        with pytest.raises(StoreUnavailable) as caught:
            await _held_behind_a_row_lock(postgres, store, name, cancel)
        said = str(caught.value)
        assert "failed a transaction of it (canceling statement due to user request)" in said
        assert "did not answer" not in said and not caught.value.permanent
    finally:
        await store.aclose()


async def test_postgres_transactions_that_queue_for_a_busy_pool_wait_their_turn(
    postgres: str,
) -> None:
    """More transactions at once than the pool has connections, for longer in all than the
    connect timeout: each waits its turn while the others are served, and none fails for
    it. (Before, one that waited past the connect timeout twice, the server's check
    between, was StoreUnavailable 'did not answer (couldn't get a connection after 2.00
    sec)': of 400 scripts at once on one connection with a timeout of 1 s, 163 failed so,
    results of calls that had run with them.)"""
    from engine.log import _sql as sql

    def slow(now: int) -> sql.Tx:
        yield sql.Q("SELECT pg_sleep(0.2)", (), "one")
        return now

    store = PostgresStore(
        postgres, schema=f"t_{uuid.uuid4().hex[:16]}", max_connections=1, connect_timeout=2
    )
    try:
        assert await store.scripts() == []
        # 6 s of transactions, one at a time: the last waits three connect timeouts.
        served = await asyncio.gather(*(store._tx(slow, write=False) for _ in range(30)))
        assert len(served) == 30
    finally:
        await store.aclose()


@pytest.mark.parametrize(
    ("mistake", "said"),
    [
        ("no database", 'database "codemode_no_such_db" does not exist'),
        ("no user", 'role "codemode_no_such_user" does not exist'),
        ("not a dsn", 'missing "=" after "not" in connection info string'),
        # libpq's refusals of an option's value: taken for a server down, tried until the
        # timeout, then "try again once the server runs" (exit 75, which supervisors retry).
        ("bad sslmode", 'invalid sslmode value: "bogus"'),
        ("bad port", 'invalid integer value "abc" for connection option "port"'),
    ],
)
async def test_postgres_mistake_in_the_dsn_says_what_the_server_said(
    postgres: str, mistake: str, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A dsn the server will never take (a database or user that does not exist, text that
    is not a dsn) is one error with the reason, not the pool's "pool initialization
    incomplete after 10.0 sec" once its retries ran out, nor a warning per retry."""
    if mistake == "no database":
        dsn = _changed(postgres, dbname="codemode_no_such_db")
    elif mistake == "no user":
        dsn = _changed(postgres, user="codemode_no_such_user")
    elif mistake == "bad sslmode":
        dsn = _changed(postgres) + " sslmode=bogus"
    elif mistake == "bad port":
        dsn = _changed(postgres) + " port=abc"
    else:
        dsn = "not a dsn at all"
    store = PostgresStore(dsn, connect_timeout=30)
    try:
        with pytest.raises(ConfigError) as caught:
            await store.scripts()
    finally:
        await store.aclose()
    assert said in str(caught.value) and "[codemode.store] dsn" in str(caught.value)
    assert "pool" not in str(caught.value)
    assert not [r for r in caplog.records if r.name.startswith("psycopg")]


@pytest.mark.parametrize(
    ("dsn", "secret"),
    [
        ("postgresql://codemode:s3cr%zzet@127.0.0.1:1/postgres", "s3cr"),
        ("host=127.0.0.1 port=1 password='hunter 22' dbname=x junk", "hunter"),
    ],
)
async def test_postgres_errors_leave_the_dsns_password_out(dsn: str, secret: str) -> None:
    """The driver's reason may quote the dsn (a bad percent escape in its password): the
    error, which a CLI prints and a host logs, says it without the password."""
    store = PostgresStore(dsn, connect_timeout=5)
    try:
        with pytest.raises(ConfigError) as caught:
            await store.scripts()
    finally:
        await store.aclose()
    assert secret not in str(caught.value) and "[codemode.store] dsn" in str(caught.value)


async def test_sqlite_log_damaged_after_it_opened_is_one_clear_error(tmp_path: Path) -> None:
    """A log whose pages were damaged (a disk fault, a copy cut short) but whose header still
    opens fails its first read with StoreUnavailable naming the file and what to do, not
    sqlite3.DatabaseError ("database disk image is malformed"), which no host expects."""
    store = SqliteStore(tmp_path)
    for i in range(200):
        record = ScriptRecord(
            id=f"s{i:04d}", code="x" * 2000, tenant="t", now_ms=0, seed=0, created_ms=0
        )
        await store.start(record, "host", 30_000)
    await store.aclose()  # the last connection: the write-ahead log is checkpointed
    damaged = bytearray(store.path.read_bytes())
    middle = len(damaged) // 2
    damaged[middle : middle + 16384] = b"\xab" * 16384
    store.path.write_bytes(bytes(damaged))
    store = SqliteStore(tmp_path)
    try:
        with pytest.raises(StoreUnavailable) as caught:
            await store.scripts()
    finally:
        await store.aclose()
    message = str(caught.value)
    assert str(store.path) in message and "malformed" in message and "integrity_check" in message
    assert caught.value.permanent


async def test_sqlite_log_without_a_table_is_damaged_not_unwritable(tmp_path: Path) -> None:
    """A log whose tables are not as codemode made them (one dropped) is damaged, for good:
    it read "could not be written ...; resume the script once it can", which waiting never
    mends, and for a read too."""
    store = SqliteStore(tmp_path)
    record = ScriptRecord(id="s0001", code="x", tenant="t", now_ms=0, seed=0, created_ms=0)
    await store.start(record, "host", 30_000)
    await store.aclose()
    with sqlite3.connect(store.path) as db:
        db.execute("DROP TABLE calls")
    store = SqliteStore(tmp_path)
    try:
        with pytest.raises(StoreUnavailable) as caught:
            await store.calls("s0001")
    finally:
        await store.aclose()
    assert "is damaged (no such table: calls)" in str(caught.value)
    assert caught.value.permanent


async def test_sqlite_log_locked_by_another_process_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening a log whose write lock another process holds past the wait is
    StoreUnavailable, to try again (it was a raw sqlite3.OperationalError)."""
    from engine.log import _sqlite

    await SqliteStore(tmp_path).aclose()
    monkeypatch.setattr(_sqlite, "OPEN_BUSY_MS", 50)
    holder = sqlite3.connect(tmp_path / "codemode.sqlite3", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreUnavailable, match="another process holds it") as caught:
            SqliteStore(tmp_path)
        assert not caught.value.permanent
    finally:
        holder.execute("ROLLBACK")
        holder.close()


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("UPDATE scripts SET created_ms = 'abc'", "a script row holds str in its created_ms"),
        ("UPDATE scripts SET outcome = x'5b315d'", "a script row's JSON holds list, not dict"),
        ("UPDATE scripts SET lease_expires_ms = 1e20", "in its lease_expires_ms column"),
        ("UPDATE scripts SET seed = -1", "a script row holds -1 in its seed column"),
        ("UPDATE scripts SET status = 'weird'", "status is 'weird', which codemode never"),
        ("UPDATE calls SET state = 'weird'", "a call row's state is 'weird'"),
        ("UPDATE calls SET started_ms = 1e300", "in its started_ms column"),
        ("UPDATE calls SET idx = 5", "skip index 0"),
    ],
)
async def test_sqlite_rows_of_what_codemode_never_writes_are_damage(
    tmp_path: Path, change: str, said: str
) -> None:
    """SQLite keeps whatever a row is given: a row changed by hand or by another program to
    values codemode never writes is the log damaged, said once (they were TypeErrors,
    OverflowErrors, and an unknown call state drove a resume into endless recursion)."""
    store = SqliteStore(tmp_path)
    record = ScriptRecord(id="s1", code="x", tenant="t", now_ms=0, seed=0, created_ms=0)
    started = await store.start(record, "host", 30_000)
    entry = CallEntry(
        script_id="s1", index=0, call_id="c1", name="t", arguments={}, argument_bytes=2
    )
    await store.add_calls(started.lease, [entry])
    await store.aclose()
    with sqlite3.connect(store.path) as db:
        db.execute(change)
    store = SqliteStore(tmp_path)
    try:
        with pytest.raises(StoreUnavailable) as caught:
            await store.get_script("s1")
            await store.calls("s1")
    finally:
        await store.aclose()
    assert said in str(caught.value) and "is damaged" in str(caught.value)
    assert caught.value.permanent


async def test_postgres_log_whose_tables_were_changed_is_one_clear_error(postgres: str) -> None:
    """A schema whose tables are not the ones codemode made (one dropped by hand, or a
    schema of that name that another application uses) fails with StoreUnavailable naming
    the schema and the table, not psycopg's UndefinedTable."""
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:16]}"
    store = PostgresStore(postgres, schema=schema)
    try:
        record = ScriptRecord(id="s1", code="1", tenant="t", now_ms=0, seed=0, created_ms=0)
        await store.start(record, "host", 30_000)
        async with await psycopg.AsyncConnection.connect(postgres, autocommit=True) as conn:
            await conn.execute(f'DROP TABLE "{schema}".calls')
        with pytest.raises(StoreUnavailable) as caught:
            await store.calls("s1")
    finally:
        await store.aclose()
    message = str(caught.value)
    assert repr(schema) in message and 'relation "calls" does not exist' in message, message
    assert "[codemode.store] schema" in message and caught.value.permanent


async def test_postgres_log_whose_tables_were_altered_is_one_clear_error(postgres: str) -> None:
    """Tables changed by hand in ways other than one dropped: a column's type (its JSON no
    longer JSON), a trigger that raises, a constraint the log's rows break. Each use is the
    permanent StoreUnavailable naming the schema (they were psycopg's or orjson's errors, a
    traceback from the CLI with exit code 1)."""
    import psycopg

    changes = [
        "ALTER TABLE {s}.scripts ALTER COLUMN outcome TYPE text USING 'x' || outcome::text",
        "CREATE FUNCTION {s}.nope() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'nope'; END $$; "
        "CREATE TRIGGER nope BEFORE INSERT OR UPDATE ON {s}.scripts "
        "FOR EACH ROW EXECUTE FUNCTION {s}.nope()",
        "UPDATE {s}.scripts SET steps = 1; "
        "ALTER TABLE {s}.scripts ADD CONSTRAINT no_steps CHECK (steps < 1) NOT VALID",
    ]
    for change in changes:
        schema = f"t_{uuid.uuid4().hex[:16]}"
        store = PostgresStore(postgres, schema=schema)
        try:
            record = ScriptRecord(id="s1", code="1", tenant="t", now_ms=0, seed=0, created_ms=0)
            started = await store.start(record, "host", 30_000)
            assert started.lease is not None
            await store.end(started.lease, "finished", {"value": 1})
            async with await psycopg.AsyncConnection.connect(postgres, autocommit=True) as conn:
                await conn.execute(change.format(s=f'"{schema}"'))
            with pytest.raises(StoreUnavailable, match="not as codemode made it") as caught:
                await store.get_script("s1")
                await store.start(
                    dataclasses.replace(record, id="s2"), "host", 30_000
                )  # the writes' turn, for a change reads do not meet
                await store.set_held("s1", True)
            assert repr(schema) in str(caught.value) and caught.value.permanent
        finally:
            await store.aclose()


async def test_postgres_log_without_its_unique_index_is_refused(postgres: str) -> None:
    """A log whose unique index on (tenant, key) was dropped by hand would take a keyed start
    twice, each running its effects: a host refuses to open it, naming the index."""
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:16]}"
    store = PostgresStore(postgres, schema=schema)
    try:
        assert await store.scripts() == []
    finally:
        await store.aclose()
    async with await psycopg.AsyncConnection.connect(postgres, autocommit=True) as conn:
        await conn.execute(f'DROP INDEX "{schema}".scripts_tenant_key')
    store = PostgresStore(postgres, schema=schema)
    try:
        with pytest.raises(ConfigError, match="unique index scripts_tenant_key is missing"):
            await store.scripts()
    finally:
        await store.aclose()


async def test_sqlite_log_whose_json_was_changed_is_one_clear_error(tmp_path: Path) -> None:
    """A row whose JSON column another program changed (here: the outcome, made text that is
    not JSON) is the permanent StoreUnavailable naming the file, not orjson's error."""
    import sqlite3

    store = SqliteStore(tmp_path)
    record = ScriptRecord(id="s1", code="1", tenant="t", now_ms=0, seed=0, created_ms=0)
    started = await store.start(record, "host", 30_000)
    assert started.lease is not None
    await store.end(started.lease, "finished", {"value": 1})
    await store.aclose()
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE scripts SET outcome = 'not json' WHERE id = 's1'")
    store = SqliteStore(tmp_path)
    try:
        with pytest.raises(StoreUnavailable, match="is damaged") as caught:
            await store.get_script("s1")
    finally:
        await store.aclose()
    assert str(store.path) in str(caught.value) and caught.value.permanent


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_nul_in_a_calls_error_is_kept_as_every_store_keeps_text(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A tool's error and a person's refusal with a NUL in them: PostgreSQL's text refused
    the write, which read as a log not as codemode made it, and the failed call as
    interrupted. The NUL is U+FFFD on every store. Needs PostgreSQL for "postgres"."""
    from engine import CodeMode, ToolCallError, tool
    from tests.engine.conftest import InProcessRunner

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        raise ToolCallError(f"not found: {key}\x00")

    @tool(needs_approval=True)
    def pay(cents: int) -> str:
        """Pay."""
        return "paid"

    if kind == "postgres":
        dsn = request.getfixturevalue("postgres")
        store: LogStore = PostgresStore(dsn, schema=f"nul_{uuid.uuid4().hex[:12]}")
    else:
        store = SqliteStore(tmp_path)
    engine = CodeMode([lookup, pay], runner=InProcessRunner(), store=store)
    try:
        code = "try { await tools.lookup({ key: 'x' }) } catch (e) { return e.message }"
        caught = await engine.run_code(code)
        assert caught.value == "not found: x\ufffd", caught.text
        paused = await engine.run_code(
            "try { await tools.pay({ cents: 1 }) } catch (e) { return e.message }"
        )
        await engine.reject(paused.script_id, paused.waiting[0]["call_id"], "no\x00way")
        refused = await engine.resume(paused.script_id)
        assert refused.value == "no\ufffdway", refused.text
    finally:
        await engine.aclose()


@pytest.mark.parametrize(
    ("statements", "said"),
    [
        (
            ["CREATE TABLE scripts (id TEXT PRIMARY KEY, title TEXT)"],
            "has tables codemode did not make (column",
        ),
        (
            [
                "CREATE TABLE schema_version (version TEXT)",
                "INSERT INTO schema_version VALUES ('2024-01')",
            ],
            "has a schema_version table codemode did not make",
        ),
        # An integer version of another application's: it was taken for codemode's, an old
        # one upgraded (its rows set to 3, codemode's tables made beside its own), a newer
        # one said as 'written by a newer codemode (schema 7 ...): upgrade codemode'.
        (
            [
                "CREATE TABLE schema_version (version INTEGER, applied TEXT)",
                "INSERT INTO schema_version VALUES (1, 'a'), (2, 'b')",
            ],
            "has a schema_version table codemode did not make (its columns: version integer, "
            "applied text; no scripts table)",
        ),
        (
            [
                "CREATE TABLE schema_version (version INTEGER NOT NULL)",
                "INSERT INTO schema_version VALUES (7)",
            ],
            "has a schema_version table codemode did not make (its columns: version integer; "
            "no scripts table)",
        ),
    ],
)
async def test_postgres_schema_of_another_application_is_said_so_when_opened(
    postgres: str, statements: list[str], said: str
) -> None:
    """Opening a log in a schema whose tables another application made: the message says
    so and to give codemode a schema of its own (it said to check a dsn that works, or was a
    raw TypeError comparing a text version), and the schema is left as it was. Needs
    PostgreSQL."""
    import psycopg

    schema = f"other_{uuid.uuid4().hex[:12]}"
    rows = "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1"
    with psycopg.connect(postgres, autocommit=True) as db:
        db.execute(f'CREATE SCHEMA "{schema}"')
        db.execute(f'SET search_path TO "{schema}"')
        for statement in statements:
            db.execute(statement)
        tables = db.execute(rows, (schema,)).fetchall()
        mine = ("schema_version",) in tables
        versions = db.execute("SELECT * FROM schema_version").fetchall() if mine else None
    store = PostgresStore(postgres, schema=schema)
    try:
        with pytest.raises(ConfigError, match=re.escape(said)) as caught:
            await store.scripts()
        assert "schema one of its own" in str(caught.value)
    finally:
        await store.aclose()
    with psycopg.connect(postgres, autocommit=True) as db:
        assert db.execute(rows, (schema,)).fetchall() == tables
        if versions is not None:
            assert db.execute(f'SELECT * FROM "{schema}".schema_version').fetchall() == versions
