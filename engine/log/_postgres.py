"""The session log in PostgreSQL, shared by hosts on many machines (psycopg 3, async pool).

Time is the database's (``clock_timestamp()``), so leases expire by one clock whatever the
hosts' clocks say. Writes to a script are serialized by a ``FOR UPDATE`` lock on its row, and
:meth:`~engine.log.LogStore.claim_ready` skips rows another host has locked
(``FOR UPDATE SKIP LOCKED``), so hosts that look for work at once never take the same script.
Tables live in their own schema (``codemode`` unless told), out of the way of the host's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import heapq
import itertools
import logging
import os
import re
import socket
import threading
import time
import urllib.parse
import weakref
from collections.abc import Callable, Generator, Mapping
from typing import Any

import orjson

from engine._errors import ConfigError, StoreUnavailable
from engine._files import WRITTEN_OVER, BlobStore, BlobTooLarge, Readable
from engine._limits import SECONDS, is_seconds
from engine.log import _rows as rows
from engine.log import _schema as tables
from engine.log import _sql as sql
from engine.log._sqlbase import SqlStore
from runner import Deadline, FileMissing

logger = logging.getLogger("codemode")

SCHEMA_VERSION = 3

# Beside the log's own tables: the attachments' blobs, and the schema's version.
_MORE_TABLES = [
    "CREATE TABLE IF NOT EXISTS blobs (digest TEXT PRIMARY KEY, data BYTEA NOT NULL)",
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)",
]

_NOW = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
# A write also takes its transaction's id, to ask after it if the connection is lost at
# COMMIT (txid_current and txid_status: PostgreSQL 10 and later).
_NOW_AND_XID = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint, txid_current()"
# The server's run as a session can tell it: when its postmaster started, and when its
# shared statistics were last reset, which crash recovery does (a backend killed, say by the
# OOM killer, and the others with it) while the postmaster goes on.
_RUN = (
    "SELECT pg_postmaster_start_time()::text || ' ' || "
    "coalesce((SELECT stats_reset FROM pg_stat_bgwriter)::text, '')"
)
_XACT_STATUS = "SELECT txid_status(%s)"
# The transaction id the server's last checkpoint would hand out next, if that checkpoint
# was taken before this postmaster started (NULL else; see PostgresStore._status_of). Its
# time is in whole seconds: the start's is cut to them, so one in the same second is not.
# Nor is a clean stop's told by redo_lsn = checkpoint_lsn: an operator's CHECKPOINT under
# wal_level=minimal has them equal too (seen on PostgreSQL 15), and counts reused ids.
_CHECKPOINT_NEXT_XID = (
    "SELECT CASE WHEN c.checkpoint_time < date_trunc('second', pg_postmaster_start_time()) "
    "THEN c.next_xid END FROM pg_control_checkpoint() c"
)
# The server's run (_RUN) that each connection of the pools was made in: a connection lives
# in one run (a restart or a crash ends it).
_RUNS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_LOCKS = {"update": " FOR UPDATE", "skip": " FOR UPDATE SKIP LOCKED", None: ""}
_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}")

# A transaction of the log never waits on anything but the server: one idle this long holds
# its row locks for a host that stalled mid-transaction (stopped, paused, cut off), and the
# server ends its session, so the script's next host is not locked out past its lease.
IDLE_IN_TRANSACTION_S = 10
# How long a host waits for the server's answers in one transaction before it takes the
# server for stalled: well past IDLE_IN_TRANSACTION_S, which a write may wait out for a row
# lock, and past any transaction of the log a server that answers takes.
DEFAULT_ANSWER_TIMEOUT = 30.0


def _session(schema: str) -> str:
    """What every connection of the store sets first: the log's schema, the bound on a
    stalled host's transaction, and no statement_timeout or lock_timeout, whatever the role
    or database sets. A write that waits for another host's row lock (which that bound
    ends), or sends a large result, is not canceled midway: a canceled write was a
    StoreUnavailable that lost a call's result (the call stayed running, and was settled
    as interrupted). Writes run at read committed, which the log's row locks are written
    for, whatever isolation the role or database makes the default: at serializable, a
    write that waited for a row another host changed failed, as did writes that met in the
    scripts table (46 of 200 scripts at once). Text goes both ways in UTF8, whatever
    client_encoding the role sets (in LATIN1, a script with an emoji failed its write with
    a raw UnicodeEncodeError from the driver). No idle_session_timeout either (the server
    cut the pool's connections between a script's steps, and the next write reconnected)
    nor transaction_timeout (which cancels a write waiting for a row lock, as lock_timeout
    did)."""
    return (
        f'SET search_path TO "{schema}"; '
        f"SET idle_in_transaction_session_timeout = '{IDLE_IN_TRANSACTION_S}s'; "
        "SET statement_timeout = 0; SET lock_timeout = 0; "
        "SET default_transaction_isolation = 'read committed'; SET client_encoding = 'UTF8'; "
        # Settings of later servers than the oldest the log takes (idle_session_timeout:
        # PostgreSQL 14, transaction_timeout: 17), set where the server has them.
        "SELECT set_config(name, '0', false) FROM pg_settings "
        "WHERE name IN ('idle_session_timeout', 'transaction_timeout')"
    )


def _driver() -> tuple[Any, Any]:
    """psycopg and its pool, or :class:`ConfigError` naming the extra that installs them."""
    try:
        import psycopg
        from psycopg_pool import AsyncConnectionPool
    except ImportError as e:
        raise ConfigError(
            f"the PostgreSQL store needs psycopg 3 and psycopg-pool ({e}): "
            "pip install 'codemode[postgres]'"
        ) from None
    return psycopg, AsyncConnectionPool


class PostgresStore(SqlStore):
    """The log in the PostgreSQL database at ``dsn`` (a libpq connection string or URL).

    ``schema`` names the schema its tables live in (made if missing); ``max_connections``
    bounds the pool. The pool opens on first use, in the event loop that uses it (a store
    used in another loop, as of asyncio.run after asyncio.run, lets the last one's go and
    opens one there); close it with :meth:`aclose`. A database that cannot be reached is a
    :class:`~engine.ConfigError` that names it; so is a host without psycopg (the
    ``codemode[postgres]`` extra), when the store is made.

    ``connect_timeout`` (seconds) bounds each wait for a connection, the server's or the
    pool's. ``answer_timeout`` (seconds; ``answer_timeout`` in codemode.toml's
    ``[codemode.store]``) bounds each transaction's wait for the server once it has a
    connection, from its first statement to its COMMIT's answer: a server that takes
    connections and answers none (a server process stopped, a network cut that sends no
    reset) fails the store's use with :class:`~engine.StoreUnavailable` after that long,
    which says so, rather than hanging it for good. The connection is dropped, and so are
    the pool's others made before it; the transaction is not run again (it may or may not
    take effect once the server runs on, as with any lost connection). Keep it well above
    ``IDLE_IN_TRANSACTION_S``, which a write may wait out for a row another host locked and
    stalled on.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "codemode",
        max_connections: int = 20,
        connect_timeout: float = 10.0,
        answer_timeout: float = DEFAULT_ANSWER_TIMEOUT,
    ) -> None:
        if not isinstance(dsn, str):
            # None from a variable of the environment that is not set, say: it failed at
            # first use as a raw "'NoneType' object has no attribute 'encode'".
            raise ConfigError(
                f"the PostgreSQL dsn = {dsn!r:.80} is not text: give a libpq connection "
                "string or URL, such as 'postgresql://user@host/dbname'"
            )
        if (
            not isinstance(schema, str)
            or not _IDENTIFIER.fullmatch(schema)
            or schema.startswith("pg_")
        ):
            raise ConfigError(
                f"the PostgreSQL schema name {schema!r} is not a plain lower-case identifier "
                "(letters, digits, _; at most 63; not starting with pg_, which PostgreSQL "
                "keeps for itself): choose one such as 'codemode'"
            )
        if (
            isinstance(max_connections, bool)
            or not isinstance(max_connections, int)
            or max_connections < 1
        ):
            raise ConfigError(
                f"max_connections = {max_connections!r:.80} must be a whole number, 1 or more"
            )
        if not is_seconds(connect_timeout):
            # It was taken, and failed at first use: 0 as 'pool initialization incomplete
            # after 0 sec; check [codemode.store] dsn', NaN or text as a raw ValueError.
            raise ConfigError(
                f"connect_timeout = {connect_timeout!r:.80} must be {SECONDS}: how long a "
                "host waits for the server to take a connection"
            )
        if not is_seconds(answer_timeout):
            raise ConfigError(
                f"answer_timeout = {answer_timeout!r:.80} must be {SECONDS}: how long a host "
                "waits for the server to answer before it drops the connection"
            )
        _driver()  # a host without the extra is told when it makes the store, not at first use
        self.dsn = dsn
        self.schema = schema
        self._max = max_connections
        self._timeout = connect_timeout
        self._answer = answer_timeout
        self._pool: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the pool's and the lock's
        self._opening = asyncio.Lock()
        self._closed = False
        self._retired: set[asyncio.Task[None]] = set()  # pools an outage left, closing
        self._served = 0  # transactions the server served, their connections given back

    def where(self) -> str:
        """The database as people read it (``host:port/dbname``), without any password."""
        return database_at(self.dsn)

    async def _open(self) -> Any:
        async with self._opening:
            if self._pool is not None:
                return self._pool
            psycopg, _ = _driver()
            from psycopg_pool import PoolTimeout

            pool = self._new_pool()
            try:
                await _prepare(psycopg, self.dsn, self.schema, self._timeout, self._answer)
                await pool.open(wait=True, timeout=self._timeout)
            except _NoAnswer as e:
                await pool.close()
                raise self._no_answer(e) from None
            except _Uncommitted as e:
                # The server ended each session the open made, until the connect timeout
                # (restarting, or its sessions terminated): down for now, not the dsn.
                await pool.close()
                raise StoreUnavailable(
                    cannot_reach(self.dsn, e.__cause__ or e, ended=True)
                ) from None
            except (psycopg.Error, TimeoutError, OSError) as e:
                await pool.close()
                if isinstance(e, psycopg.errors.ReadOnlySqlTransaction):
                    raise self._takes_no_writes(e) from None
                # psycopg's ConnectionTimeout (an OperationalError, where psycopg has it):
                # the kernel took the connection and the server never answered (a stopped
                # postmaster). It was a ConfigError, 'check [codemode.store] dsn'.
                # The pool's PoolTimeout: the tables were checked, so the dsn is right, and
                # the server went away (or its slots filled) before the pool's first
                # connection (it was a ConfigError too).
                timed_out = getattr(psycopg.errors, "ConnectionTimeout", TimeoutError)
                if isinstance(e, TimeoutError | OSError | timed_out | PoolTimeout) or (
                    type(e) is psycopg.OperationalError and not _for_good(e)
                ):
                    # Down, or not answering: the log may come back (the CLI's exit 75).
                    raise StoreUnavailable(cannot_reach(self.dsn, e)) from None
                raise ConfigError(self._open_failed(psycopg, e)) from None
            except BaseException:
                await pool.close()
                raise
            self._pool, self._loop = pool, asyncio.get_running_loop()
            return pool

    def _moved_to(self, loop: asyncio.AbstractEventLoop) -> None:
        """Take the store into ``loop``, another event loop than its pool's (a host that
        calls asyncio.run for each request). The pool's workers ended with the loop that
        opened it, so it would neither replace a connection a server restart cut nor grow
        (each transaction then waited out the connect timeout: StoreUnavailable), and its
        close could not run: it is let go, its idle connections closed, and this loop opens
        a pool of its own."""
        old, self._pool, self._loop = self._pool, None, loop
        self._opening = asyncio.Lock()  # an asyncio lock is its first waiter's loop's
        self._retired = set()  # closing in the loop that ended, or cancelled with it
        if old is not None:
            # psycopg_pool's idle connections: private, so a release that renames it
            # leaves them to the server to close rather than failing the move.
            for conn in list(getattr(old, "_pool", ())):
                conn.pgconn.finish()

    def _open_failed(self, psycopg: Any, error: BaseException) -> str:
        """Why the log could not be opened, and the fix: the server's answer names what is
        wrong with the schema, the rights or the connection, each its own fix."""
        said = _without_secrets(_first_line(error), self.dsn)
        errors = psycopg.errors
        if isinstance(error, errors.InsufficientPrivilege):
            return (
                f"the database user may not use the PostgreSQL session log in schema "
                f"{self.schema!r} at {self.where()} ({said}): grant it the rights on that "
                "schema and its tables, or use the user that made them"
            )
        if isinstance(
            error,
            errors.UndefinedColumn
            | errors.UndefinedTable
            | errors.WrongObjectType
            | errors.DatatypeMismatch
            | errors.InvalidTextRepresentation,
        ):
            return (
                f"the PostgreSQL schema {self.schema!r} at {self.where()} has tables codemode "
                f"did not make ({said}): does another application use it? Give "
                "[codemode.store] schema one of its own"
            )
        return (
            f"cannot use the PostgreSQL session log at {self.where()}: {said}; check "
            "[codemode.store] dsn and that the server runs"
        )

    def _no_answer(self, error: _NoAnswer) -> StoreUnavailable:
        """The server took the connection and then answered nothing for ``answer_timeout``
        (:class:`_NoAnswer`)."""
        return no_answer(self.where(), error.seconds, "resume the script")

    def _takes_no_writes(self, error: BaseException) -> StoreUnavailable:
        """The server refused a write of the log because it takes none as things are: a
        standby (a failover under way, or a dsn that names a replica), or a server or user
        read-only by default. Not the log's damage: once the dsn reaches a primary, the
        script resumes."""
        return StoreUnavailable(
            f"the PostgreSQL server of the session log at {self.where()} takes no writes "
            f"({_without_secrets(_first_line(error), self.dsn)}): it is a standby, or "
            "read-only; point [codemode.store] dsn at the primary (of several hosts, "
            "target_session_attrs=read-write picks it); nothing written is lost: try again "
            "(resume the script) once it takes writes"
        )

    def _new_pool(self) -> Any:
        """A pool of connections to the log, not open yet."""
        _, AsyncConnectionPool = _driver()
        schema, answer = self.schema, self._answer

        async def configure(conn: Any) -> None:
            with _Watch(conn, answer):
                await conn.execute(_session(schema))
                run = await _server_run(conn)
                if run is not None:
                    _RUNS[conn] = run

        return AsyncConnectionPool(
            self.dsn,
            min_size=1,
            max_size=self._max,
            open=False,
            kwargs={"autocommit": True, "connect_timeout": max(1, int(self._timeout))},
            configure=configure,
            timeout=self._timeout,
            name=f"codemode-{schema}",
        )

    async def _back(self, pool: Any, timed_out: bool = False, within: float | None = None) -> Any:
        """The pool to go on with after a connection of ``pool`` was lost, once the server
        takes connections again: asked directly every 50 ms to 1 s, up to the connect
        timeout. psycopg_pool's own reconnection backs off (1, 2, 4, 8 s), so after an
        outage of 8 s it would connect again at 15 s, past the timeout: a pool that found the
        server down is replaced by a new one, made once it answers. A server that answered at
        once (a restart, a connection it cut) keeps the pool, whose broken connections are
        dropped (``check``), unless no connection of it came in time (``timed_out``) while
        it has fewer than it may: its reconnection is then in that backoff (up to minutes
        after a long outage), and it is replaced too. Raises ``psycopg.OperationalError``
        if the server does not answer, or refuses for good (:func:`_connect`), within
        ``within`` seconds (what is left of the transaction's connect timeout; by default
        the whole of it)."""
        import psycopg

        async with self._opening:
            if self._pool is not pool or self._closed:
                return self._pool or pool  # another transaction came back first
            loop = asyncio.get_running_loop()
            wait = self._timeout if within is None else max(within, 1.0)
            deadline = loop.time() + wait
            conn, down = await _connect(psycopg, self.dsn, wait)
            await conn.close()
            backing_off = timed_out and pool.get_stats().get("pool_size", 0) < self._max
            if not down and not backing_off:
                await _drop_idle(pool)
                return pool
            fresh = self._new_pool()
            try:
                await fresh.open(wait=True, timeout=max(deadline - loop.time(), 1.0))
            except BaseException:
                await fresh.close()
                raise
            self._pool = fresh
            retired = asyncio.ensure_future(pool.close())
            self._retired.add(retired)
            retired.add_done_callback(self._retired.discard)
            return fresh

    async def _tx(self, make: Callable[[int], sql.Tx], *, write: bool, sync: bool = True) -> Any:
        # Every write syncs, whatever ``sync`` says: the hosts of a PostgreSQL log live on
        # other machines than the server, and would outlive what a server crash lost.
        if self._closed:
            raise _closed()
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._moved_to(loop)
        pool = self._pool or await self._open()
        # A caller cancelled mid-transaction leaves it to end on its own (as if its host had
        # died after sending it): the driver is never interrupted between a statement and
        # its answer, which could leave the connection out of the pool for good.
        running = loop.create_task(self._transaction(pool, make, write))
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            running.add_done_callback(_forget)
            raise

    async def _transaction(self, pool: Any, make: Callable[[int], sql.Tx], write: bool) -> Any:
        import psycopg
        from psycopg_pool import PoolClosed, PoolTimeout

        # One connect timeout for the transaction: the wait for a connection of the pool and
        # the server's coming back share it (waited one after the other, a server that went
        # down took twice the timeout to be said so, and each later transaction again).
        began = asyncio.get_running_loop().time()
        try:
            again = False
            while True:
                try:
                    return await self._queued(pool, make, write)
                except (_Uncommitted, PoolTimeout) as e:
                    # The connection was lost before the transaction's COMMIT was sent, so
                    # none of it took effect: the server restarted (or cut it) since it last
                    # served; or no connection came (the server is down, or every one is
                    # busy and none was served meanwhile; or the pool was replaced, and
                    # closed, while this waited in it). Once it takes connections again, the
                    # transaction runs once more, on a new one; and again while the connect
                    # timeout lasts (a server restarted twice, connections cut again and
                    # again: it gave up at the second cut).
                    left = began + self._timeout - asyncio.get_running_loop().time()
                    if again and left <= 0:
                        raise
                    again = True
                    pool = await self._back(pool, timed_out=isinstance(e, PoolTimeout), within=left)
        except psycopg.errors.ReadOnlySqlTransaction as e:
            raise self._takes_no_writes(e) from None
        except _NoAnswer as e:
            # Not run again on another connection: the stalled session may hold the rows
            # it needs (and a read that went through would only move the wait to the next
            # write). The pool's other connections, idle since before, may be to stalled
            # sessions too (a network cut takes them all): none is handed out again.
            if self._pool is not None:
                await _drop_idle(self._pool)
            raise self._no_answer(e) from None
        except (
            psycopg.errors.UndefinedTable,
            psycopg.errors.UndefinedColumn,
            psycopg.errors.IntegrityError,
            psycopg.errors.DataError,
            psycopg.errors.InternalError,
            psycopg.errors.ProgrammingError,
            orjson.JSONDecodeError,
            rows.BadRow,
        ) as e:
            if isinstance(e, psycopg.errors.InsufficientPrivilege):
                raise StoreUnavailable(
                    f"the database user may not use the PostgreSQL session log in schema "
                    f"{self.schema!r} at {self.where()} ({_first_line(e)}): grant it the "
                    "rights on that schema and its tables, or use the user that made them",
                    permanent=True,
                ) from None
            # Statements the log made for its own tables do not fail so: a column changed
            # by hand, a trigger, a constraint added, another application's rows.
            raise StoreUnavailable(
                f"the PostgreSQL session log in schema {self.schema!r} at {self.where()} is "
                f"not as codemode made it ({_first_line(e)}): was a table changed by hand, or "
                "does another application use that schema? Give [codemode.store] schema one "
                "of its own, or restore the log",
                permanent=True,
            ) from None
        except (PoolTimeout, psycopg.OperationalError, _Uncommitted, _CommitUnknown) as e:
            if isinstance(e, PoolClosed) and self._closed:
                # It waited for a connection as this host closed the store: the server did
                # not fail to answer (it said so, and to wait for the server to come back).
                raise _closed() from None
            if type(e) is psycopg.OperationalError and _for_good(e):
                # Connecting again, the server refused this host for good (its password
                # changed, its role may no longer log in): no wait mends it, as at the open.
                raise StoreUnavailable(self._open_failed(psycopg, e), permanent=True) from None
            if getattr(e, "sqlstate", None) is not None:
                # An error the server answered on a connection that stands (a statement an
                # operator canceled, a full disk): the server did answer, and said this.
                raise StoreUnavailable(
                    f"the PostgreSQL server of the session log at {self.where()} failed a "
                    f"transaction of it ({_first_line(e)}); nothing written is lost: resume "
                    "the script (once what the server says is mended)"
                ) from None
            # Translated once, here: the engine sees the log's own error family.
            cause = e.__cause__ if isinstance(e, _Uncommitted | _CommitUnknown) else e
            raise StoreUnavailable(
                f"the PostgreSQL session log at {self.where()} did not answer "
                f"({_first_line(cause or e)}); nothing written is lost: resume the script "
                "once it is back"
            ) from None

    async def _queued(self, pool: Any, make: Callable[[int], sql.Tx], write: bool) -> Any:
        """:meth:`_attempt`, waiting in the pool's queue for as long as it moves: a wait for
        a connection that outlasts the connect timeout while other transactions were served
        (and gave theirs back) is a pool busy with many scripts, not a server gone, and
        waits on (it was StoreUnavailable, a call's result lost with it). Raises
        ``PoolTimeout`` once no transaction was served for the whole timeout."""
        from psycopg_pool import PoolTimeout

        while True:
            served = self._served
            try:
                value = await self._attempt(pool, make, write)
            except PoolTimeout:
                if self._served == served or pool is not self._pool:
                    raise
                continue
            self._served += 1  # only a transaction the server served: a failing one is no sign
            return value

    async def _attempt(self, pool: Any, make: Callable[[int], sql.Tx], write: bool) -> Any:
        """:func:`_attempt`, and when its connection was lost at COMMIT, the outcome the
        server gives the transaction's id once it answers again: committed, its value;
        rolled back, :class:`_Uncommitted` (nothing of it took effect, so it may run
        again). Raises :class:`_CommitUnknown` when the server cannot say."""
        from psycopg_pool import PoolClosed

        try:
            return await _attempt(pool, make, write, self._answer)
        except PoolClosed:
            if pool is self._pool or self._closed:
                raise
            # The pool was replaced (see _back), and closed, while this waited for one of
            # its connections: nothing was sent, so it runs on in the new pool.
            raise _Uncommitted() from None
        except _CommitUnknown as unknown:
            pool = await self._back(pool)
            status = await self._status_of(pool, unknown.xid, unknown.run)
            if status == "committed":
                return unknown.value
            if status == "aborted":
                # Nothing of it took effect: it runs again as a cut before its COMMIT does.
                raise _Uncommitted() from unknown.__cause__
            raise

    async def _status_of(self, pool: Any, xid: int, run: str | None) -> str | None:
        """``committed``, ``aborted``, or None (unknown: its id is too old to say, or may
        be another transaction's) for the transaction ``xid``, made in the server's run
        ``run`` (:data:`_RUN`; None if not known), once it is no longer in progress: the
        server ends the transaction of a connection it lost as soon as it notices (it
        commits one whose COMMIT it read), which this waits for, up to the store's timeout.

        A server that crashed since forgets the ids it gave out after the last it wrote to
        its write-ahead log, and gives them out again: a write the crash cut before its
        COMMIT, which wrote nothing the log kept, may find its id committed by another
        host's transaction. So past a crash (or a restart), ``committed`` stands only if a
        checkpoint taken before the id could be lost hands out ids past it: the server's
        last checkpoint, when it was taken before this postmaster started (a clean stop's,
        which nothing of the old run came after). Any checkpoint taken since (an operator's
        CHECKPOINT, a backup's, max_wal_size's) counts the ids given out again, so it proves
        nothing; nor is the one that ends a crash recovery told from them (pg_control does
        not say which it is), so past a crash (and a backend's crash, which the postmaster
        outlives, ends in one such) ``committed`` is None: the store says it is unavailable,
        and the resume reads what the log holds, so nothing runs twice. An id the server
        has not given out again (it says the id is in the future) is ``aborted``: nothing of
        it was kept.

        pg_control keeps a checkpoint's time in whole seconds, so one in the second this
        postmaster started is not told from one taken after it (an end of recovery's, or
        an operator's CHECKPOINT once the ids were given out again): a restart within the
        same second is not resolved, even a clean one (``pg_ctl restart -m fast``, whose
        shutdown checkpoint most quick restarts put in the new start's second). Its
        committed write is None too (StoreUnavailable; the resume finds it in the log and
        runs nothing twice)."""
        import psycopg

        deadline = time.monotonic() + self._timeout
        while True:
            async with pool.connection() as conn:
                with _Watch(conn, self._answer):
                    try:
                        row = await (await conn.execute(_XACT_STATUS, (xid,))).fetchone()
                    except psycopg.errors.InvalidParameterValue:
                        # 'transaction ID ... is in the future': a crash forgot the id, and
                        # so all the transaction wrote (the server has not given it again).
                        return "aborted"
                    status = row[0] if row else None
                    if status == "committed" and (run is None or await _server_run(conn) != run):
                        try:
                            found = await conn.execute(_CHECKPOINT_NEXT_XID)
                            next_xid = _full_xid((await found.fetchone())[0])
                        except (psycopg.Error, ValueError, TypeError):
                            next_xid = None  # pg_control kept from this role: not known
                        if next_xid is None or next_xid <= xid:
                            return None
            if status != "in progress" or time.monotonic() >= deadline:
                return None if status == "in progress" else status
            await asyncio.sleep(0.05)

    def blob_store(self) -> BlobStore:
        """The attachments' blobs, in this database: what hosts on several machines share."""
        return PostgresBlobStore(self)

    async def aclose(self) -> None:
        self._closed = True
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._moved_to(loop)
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
        if self._retired:
            await asyncio.gather(*self._retired, return_exceptions=True)


# The most bytes a blob in the blobs table holds: PostgreSQL holds a value of at most 1 GiB
# (a BYTEA past it, or the message sending it, is refused), less room for the statement.
MAX_BLOB_BYTES = 1_000_000_000


def _within_a_value(size: int) -> None:
    """:class:`BlobTooLarge` when ``size`` bytes are more than a row of the blobs table
    holds."""
    if size > MAX_BLOB_BYTES:
        raise BlobTooLarge(
            f"{size:,} bytes; the PostgreSQL blob store keeps at most {MAX_BLOB_BYTES:,} a "
            "file (PostgreSQL's bound on one value, 1 GiB, less room for the statement)"
        )


class PostgresBlobStore(BlobStore):
    """Blobs in the ``blobs`` table of a :class:`PostgresStore`'s schema. Blob reads and
    writes are synchronous (the engine calls them on worker threads), so they use a
    connection of their own, one call at a time. A database that fails raises ``OSError``,
    as :class:`BlobStore` says; the next call connects again."""

    def __init__(self, store: PostgresStore) -> None:
        super().__init__(None)
        self._store = store
        self._conn: Any = None
        self._hashes_where_it_is = False

    def _connection(self) -> Any:
        import psycopg

        if self._conn is None or self._conn.closed:
            try:
                conn = psycopg.connect(
                    self._store.dsn,
                    autocommit=True,
                    connect_timeout=max(1, int(self._store._timeout)),
                )
            except psycopg.Error as e:
                raise self._failed(e) from None
            try:
                with _Watch(conn, self._store._answer):
                    conn.execute(_session(self._store.schema))
                    _create_sync(conn, self._store.schema)  # a script's files come first
            except BaseException as e:
                conn.close()  # not kept: a newer schema, the server gone again
                if isinstance(e, psycopg.Error | _NoAnswer):
                    raise self._failed(e) from None
                raise
            self._conn = conn
            # sha256() is PostgreSQL 11's: there a blob is hashed where it is, not sent here.
            self._hashes_where_it_is = conn.info.server_version >= 110000
        return self._conn

    def _failed(self, error: BaseException) -> OSError:
        if isinstance(error, _NoAnswer):
            return OSError(
                f"the PostgreSQL blob store at {self._store.where()} did not answer within "
                f"{error.seconds:g} s (answer_timeout), and its connection was dropped"
            )
        return OSError(
            f"the PostgreSQL blob store at {self._store.where()} failed ({_first_line(error)})"
        )

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _one(self, statement: str, params: tuple[Any, ...], *, every: bool = False) -> Any:
        """The first row of ``statement`` (``every``: all its rows), on this store's
        connection; a connection that was lost since its last use (the server restarted) is
        made again, and the statement sent once more: each statement here is a whole
        transaction, so one the lost connection cut took no effect, or took it once (the
        insert is idempotent)."""
        import psycopg

        with self._lock:
            for again in (False, True):
                conn = self._connection()
                try:
                    with _Watch(conn, self._store._answer):
                        cursor = conn.execute(statement, params)
                        if not cursor.description:
                            return None
                        return cursor.fetchall() if every else cursor.fetchone()
                except psycopg.OperationalError as e:
                    if again or not conn.closed:
                        raise self._failed(e) from None
                    self._conn = None
                except (psycopg.Error, _NoAnswer) as e:
                    raise self._failed(e) from None
        raise AssertionError("unreachable")

    def put(self, data: bytes) -> str:
        _within_a_value(len(data))
        digest = hashlib.sha256(data).hexdigest()
        # A row written over since (other bytes under the name) is written again, as a
        # file is (BlobStore.put).
        self._one(
            "INSERT INTO blobs (digest, data) VALUES (%s, %s) ON CONFLICT (digest) DO UPDATE "
            "SET data = EXCLUDED.data WHERE blobs.data IS DISTINCT FROM EXCLUDED.data",
            (digest, data),
        )
        return digest

    def put_file(self, f: Readable) -> tuple[str, int]:
        # Measured first: a file past the bound is refused before it is read into memory.
        start = f.tell()
        _within_a_value(f.seek(0, os.SEEK_END) - start)
        f.seek(start)
        return super().put_file(f)

    def read(self, digest: str, offset: int, length: int) -> bytes:
        # A row's version is the transaction that wrote it (xmin), which an UPDATE changes.
        row = self._one(
            "SELECT substring(data FROM %s FOR %s), xmin::text FROM blobs WHERE digest = %s",
            (offset + 1, length, digest),
        )
        if row is None:
            raise FileMissing("its bytes are gone from the store")
        if not self.unchanged(digest, row[1], lambda: self._hashed(digest, row[1])):
            raise FileMissing(WRITTEN_OVER)
        return bytes(row[0])

    def _hashed(self, digest: str, version: str) -> bool:
        """Whether the row of ``digest``, still at ``version``, holds the bytes it names:
        hashed by the server where it can (a blob of up to 1 GB was read whole into this
        process's memory to be hashed), here on PostgreSQL 10."""
        if self._hashes_where_it_is:
            row = self._one(
                "SELECT encode(sha256(data), 'hex'), xmin::text FROM blobs WHERE digest = %s",
                (digest,),
            )
            return row is not None and row[1] == version and row[0] == digest
        row = self._one("SELECT data, xmin::text FROM blobs WHERE digest = %s", (digest,))
        return (
            row is not None and row[1] == version and hashlib.sha256(row[0]).hexdigest() == digest
        )

    def missing(self, blobs: Mapping[str, int]) -> list[str]:
        rows = self._one(
            "SELECT digest, octet_length(data), xmin::text FROM blobs WHERE digest = ANY(%s)",
            (list(blobs),),
            every=True,
        )
        found: dict[str, tuple[int, str]] = {row[0]: (row[1], row[2]) for row in rows}
        gone = []
        for digest, size in blobs.items():
            had = found.get(digest)
            if (
                had is None
                or had[0] != size
                or not self.unchanged(
                    digest, had[1], functools.partial(self._hashed, digest, had[1])
                )
            ):
                gone.append(digest)
        return gone


class _Uncommitted(Exception):
    """The connection was lost before the transaction's COMMIT was sent: nothing of it took
    effect, so it may simply run again (``__cause__``: the driver's error)."""


class _CommitUnknown(Exception):
    """A write's connection was lost once its COMMIT may have reached the server: whether it
    took effect is the server's to say, asked by its id (``__cause__``: the driver's
    error)."""

    def __init__(self, xid: int, value: Any, run: str | None) -> None:
        super().__init__(xid)
        self.xid = xid
        self.value = value  # what the transaction returns, if it committed
        self.run = run  # the server's run it was made in (_RUN), if known


async def _server_run(conn: Any) -> str | None:
    """The server's run (:data:`_RUN`) as ``conn`` finds it, or None if the server keeps
    its statistics from the role: a write lost at COMMIT is then resolved as past a crash."""
    import psycopg

    try:
        return (await (await conn.execute(_RUN)).fetchone())[0]
    except psycopg.Error:
        if conn.closed:
            raise
        return None


def _full_xid(text: str | None) -> int | None:
    """A transaction id as pg_control_checkpoint() gives it (``epoch:xid``), as
    txid_current() does (64 bits, the epoch's above); None for NULL (not known)."""
    if text is None:
        return None
    epoch, _, xid = text.rpartition(":")
    return (int(epoch or 0) << 32) | int(xid)


def _closed() -> StoreUnavailable:
    """The error of a transaction of a store that was closed (``aclose``) first."""
    return StoreUnavailable(
        "the session log was closed (aclose) while this used it; nothing written is "
        "lost: open it again and resume the script"
    )


def no_answer(where: str, seconds: float, then: str) -> StoreUnavailable:
    """The error of a server at ``where`` that took a connection and then answered nothing
    for ``seconds`` (``answer_timeout``); ``then``: what to do once it answers."""
    return StoreUnavailable(
        f"the PostgreSQL server of the session log at {where} did not answer within "
        f"{seconds:g} s (answer_timeout), and its connection was dropped; nothing written is "
        f"lost: check the server (a stopped or overloaded server process, a network cut), "
        f"then {then}"
    )


class _NoAnswer(Exception):
    """The server did not answer on a connection within ``seconds``: the connection was
    dropped, and whatever the transaction sent may or may not take effect once the server
    runs again (a write whose COMMIT it had read commits then)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds)
        self.seconds = seconds


def _cut(conn: Any) -> None:
    """Shut down ``conn``'s socket, as a network that resets it would: every wait of the
    driver on it ends at once with a lost connection, which the pool then drops. Not
    closed: the driver owns the descriptor, and one closed under its wait would leave that
    wait for ever (or, its number reused, watch another connection)."""
    with contextlib.suppress(Exception):  # closed already: nothing waits on it
        fd = conn.pgconn.socket  # psycopg.OperationalError once the connection is closed
        sock = socket.socket(fileno=fd)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.detach()


class _Watcher:
    """One thread that fires the deadlines of the watches made without an event loop
    (:class:`_Watch` of the blob store's blocking calls, the CLI's check): a thread's timer
    for each started a thread per statement, 0.13 ms for each chunk of a file a script
    reads. The thread starts with the first deadline and ends once none was set for
    :attr:`IDLE_S`, so a host that stops using the store has nothing left running."""

    IDLE_S = 5.0

    def __init__(self) -> None:
        self._order = itertools.count()
        self._reset()

    def _reset(self) -> None:
        """Nothing armed and no thread: as made, and in a forked child (see below), which
        has no thread, whose lock the parent's thread may have held at the fork, and whose
        armed deadlines are the parent's statements' (fired there, one would cut the
        parent's connection through the descriptor the child inherited)."""
        self._cond = threading.Condition()
        # [when (monotonic), order, what to call or None once cancelled]: a heap of them.
        self._due: list[list[Any]] = []
        self._cancelled = 0
        self._thread: threading.Thread | None = None

    def arm(self, seconds: float, fire: Callable[[], None]) -> list[Any]:
        """Call ``fire`` on the watching thread in ``seconds``, unless :meth:`cancel`
        takes back the entry returned first."""
        entry = [time.monotonic() + seconds, next(self._order), fire]
        with self._cond:
            heapq.heappush(self._due, entry)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="codemode-postgres-watch", daemon=True
                )
                self._thread.start()
            elif self._due[0] is entry:
                self._cond.notify()
        return entry

    def cancel(self, entry: list[Any]) -> None:
        with self._cond:
            if entry[2] is None:
                return  # fired, or cancelled already
            entry[2] = None
            self._cancelled += 1
            # Cancelled entries wait in the heap until their time: thousands of statements
            # within one answer timeout are swept out once they are most of it.
            if self._cancelled > 64 and 2 * self._cancelled > len(self._due):
                self._due = [e for e in self._due if e[2] is not None]
                heapq.heapify(self._due)
                self._cancelled = 0

    def _run(self) -> None:
        try:
            self._watch()
        finally:  # ended for good, or by an error: the next deadline starts a thread anew
            with self._cond:
                if self._thread is threading.current_thread():
                    self._thread = None

    def _watch(self) -> None:
        with self._cond:
            while True:
                while self._due and self._due[0][2] is None:
                    heapq.heappop(self._due)
                    self._cancelled -= 1
                if not self._due:
                    self._cond.wait(self.IDLE_S)
                    if not self._due:
                        self._thread = None  # under the lock: the next arm() starts one
                        return
                    continue
                entry = self._due[0]
                left = entry[0] - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                heapq.heappop(self._due)
                fire, entry[2] = entry[2], None
                self._cond.release()
                try:
                    fire()
                except Exception:  # a watch's failure must not stop the others'
                    logger.warning("a PostgreSQL answer watch failed", exc_info=True)
                finally:
                    self._cond.acquire()


_WATCHER = _Watcher()
os.register_at_fork(after_in_child=_WATCHER._reset)


class _Watch:
    """``with _Watch(conn, seconds):`` bounds the block's wait for the server on ``conn``:
    past ``seconds`` the connection is cut (:func:`_cut`), which ends the driver's wait on
    it at once with a lost connection, and the block's error is :class:`_NoAnswer`.

    Not a cancellation (``asyncio.timeout``, ``within``): psycopg answers one mid-statement
    by asking the server to cancel it and waiting up to 10 s more for the server that does
    not answer. Nor a task of its own for the talk, to time from outside: that cost each
    transaction 35 us of CPU. The timer is the event loop's, or with no loop in this thread
    (the blob store's blocking calls) the one watching thread's (:class:`_Watcher`); one
    that runs late because the host itself
    was stopped waits again (the stall rule, :meth:`~runner._conversation.Deadline.restarted`).
    """

    __slots__ = ("_deadline", "_done", "_loop", "_timer", "conn", "cut")

    def __init__(self, conn: Any, seconds: float, *, blocking: bool = False) -> None:
        self.conn = conn
        self.cut = False
        self._done = False
        self._deadline = Deadline.seconds(seconds)
        self._timer: asyncio.TimerHandle | list[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        if not blocking:  # ``blocking``: the block holds this thread's loop, if it has one
            with contextlib.suppress(RuntimeError):
                self._loop = asyncio.get_running_loop()

    def _arm(self, seconds: float) -> None:
        if self._loop is not None:
            self._timer = self._loop.call_later(seconds, self._fire)
        else:
            self._timer = _WATCHER.arm(seconds, self._fire)

    def _fire(self) -> None:
        if self._done:
            return  # a thread's timer that ran as the block ended
        if self._deadline.restarted():
            self._arm(self._deadline.allowance)
            return
        self.cut = True
        _cut(self.conn)

    def __enter__(self) -> _Watch:
        self._arm(self._deadline.allowance)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: object
    ) -> None:
        self._done = True
        if isinstance(self._timer, list):
            _WATCHER.cancel(self._timer)
        elif self._timer is not None:
            self._timer.cancel()
        if self.cut and isinstance(error, Exception):
            raise _NoAnswer(self._deadline.allowance) from error


async def _attempt(pool: Any, make: Callable[[int], sql.Tx], write: bool, seconds: float) -> Any:
    """Run the transaction ``make(now_ms)`` once, on a connection of ``pool``, waiting at
    most ``seconds`` for the server's answers (:class:`_NoAnswer`); raises
    :class:`_Uncommitted` if its connection was lost before its COMMIT was sent, and
    :class:`_CommitUnknown` if a write's was lost after (a read's value is returned: every
    answer it needed had come, and it changed nothing)."""
    import psycopg

    committing = False
    conn: Any = None
    xid = 0
    value: Any = None
    try:
        # In pipeline mode, so a statement whose answer the transaction does not need
        # waits for the next that it does: BEGIN goes with the query of the time, and the
        # last writes with COMMIT. A transaction holds its connection, and its row locks,
        # across every round trip, and each costs a turn of a loop that may be busy.
        async with pool.connection() as conn:
            with _Watch(conn, seconds):
                async with conn.pipeline() as pipeline, conn.transaction():
                    if write:
                        now, xid = await (await conn.execute(_NOW_AND_XID)).fetchone()
                    else:
                        await conn.execute(
                            "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"
                        )
                        now = (await (await conn.execute(_NOW)).fetchone())[0]
                    tx = make(now)
                    answer: Any = None
                    while True:
                        try:
                            q = tx.send(answer)
                        except StopIteration as stop:
                            committing = True  # from here on, the COMMIT may reach the server
                            value = stop.value
                            return value
                        answer = await _execute(conn, pipeline, q)
    except psycopg.Error as e:
        # Only a lost connection: an error the server answered (a full disk, a deadlock)
        # is the store's to report, not to try again. (A session the server ended, for
        # idling in a transaction or at a shutdown, may say so in an error of another
        # class, its connection closed.)
        if conn is None or not conn.closed:
            raise
        if not committing:
            raise _Uncommitted() from e
        if not write:
            return value
        raise _CommitUnknown(xid, value, _RUNS.get(conn)) from e


async def _execute(conn: Any, pipeline: Any, q: sql.Q) -> Any:
    """Send ``q``; wait for the server only if the transaction needs its answer."""
    text = q.sql.replace("?", "%s") + _LOCKS[q.lock]
    if q.fetch == "many":
        await conn.cursor().executemany(text, q.params)
        return None
    cursor = await conn.execute(text, q.params)
    if q.fetch == "one":
        return await cursor.fetchone()
    if q.fetch == "all":
        return await cursor.fetchall()
    if q.fetch == "count":
        await pipeline.sync()
        return cursor.rowcount
    return None


def _schema(schema: str) -> Generator[tuple[str, tuple[Any, ...]], Any, None]:
    """Make the log's tables unless they are made: statements to run in one transaction,
    each sent back its first row (so the async pool and the blob store's own connection
    run the same steps)."""

    def version() -> Generator[tuple[str, tuple[Any, ...]], Any, int | None]:
        # codemode's schema_version has one column, an integer, beside a scripts table.
        found = yield (
            "SELECT to_regclass(%s) IS NOT NULL, to_regclass(%s) IS NOT NULL, "
            "(SELECT string_agg(attname || ' ' || format_type(atttypid, NULL), ', ' "
            "ORDER BY attnum) FROM pg_attribute WHERE attrelid = to_regclass(%s) "
            "AND attnum > 0 AND NOT attisdropped), current_setting('server_encoding'), "
            "current_database()",
            (f'"{schema}".schema_version', f'"{schema}".scripts', f'"{schema}".schema_version'),
        )
        if found[3] != "UTF8":
            # Its text columns keep what the database's encoding can: in LATIN1 or
            # SQL_ASCII a script, a tenant or an error with an emoji failed its write with
            # a raw UnicodeEncodeError from the driver.
            raise ConfigError(
                f"the PostgreSQL database {found[4]!r} is encoded in {found[3]}, which cannot "
                "keep every script and message: the session log needs a UTF8 database; give "
                "[codemode.store] dsn one made with ENCODING 'UTF8'"
            )
        if not found[0]:
            return None
        if not found[1] or found[2] != "version integer":
            # Another application's table of that name, whose rows an upgrade would write
            # over (or whose version would read as a newer codemode's).
            raise ConfigError(
                f"the schema {schema!r} has a schema_version table codemode did not make (its "
                f"columns: {found[2]!s:.80}{'' if found[1] else '; no scripts table'}): does "
                "another application use it? Give [codemode.store] schema one of its own"
            )
        row = yield ("SELECT max(version) FROM schema_version", ())
        return row[0]

    # A log already made is left alone: even `CREATE INDEX IF NOT EXISTS` locks its table
    # against writes, and the hosts already running must not wait on (or deadlock with) a
    # host that starts. (Only a log of an older schema is changed, once.)
    current = yield from version()
    if current is None or current < SCHEMA_VERSION:
        # Hosts that start at once must not race to make (or upgrade) the tables: one does,
        # the others find them made.
        yield ("SELECT pg_advisory_xact_lock(hashtext('codemode schema'))", ())
        current = yield from version()
    if current is None:
        yield (f'CREATE SCHEMA IF NOT EXISTS "{schema}"', ())
        for statement in [*tables.statements("postgres"), *_MORE_TABLES]:
            yield (statement, ())
        yield ("INSERT INTO schema_version VALUES (%s)", (SCHEMA_VERSION,))
    elif current < SCHEMA_VERSION:
        # Schema 2's keys were unique in the whole log; a key now names a script within its
        # tenant. Its rows satisfy the new index already (unique keys are unique per tenant).
        for statement in [*tables.DROPPED_INDEXES, *tables.statements("postgres")]:
            yield (statement, ())
        yield ("UPDATE schema_version SET version = %s", (SCHEMA_VERSION,))
    elif current > SCHEMA_VERSION:
        raise ConfigError(
            f"the PostgreSQL session log in schema {schema!r} was written by a newer codemode "
            f"(schema {current}; this one reads up to {SCHEMA_VERSION}): upgrade codemode"
        )
    # The log's exclusions rest on its unique indexes (one script per tenant and key): one
    # dropped by hand would let a keyed start run twice, without a word.
    row = yield (
        "SELECT string_agg(i, ', ') FROM unnest(%s::text[]) AS i WHERE NOT EXISTS "
        "(SELECT 1 FROM pg_indexes WHERE schemaname = %s AND indexname = i)",
        (list(tables.UNIQUE_INDEXES), schema),
    )
    if row[0]:
        raise ConfigError(
            f"the PostgreSQL session log in schema {schema!r} is not as codemode made it: "
            f"its unique index {row[0]} is missing (dropped by hand?), without which a script "
            "or a keyed start could be logged twice; restore the log, or make the index again "
            "as engine/log/_schema.py makes it"
        )


# What a server says when it may take the connection a little later; any other refusal it
# gives (no such database or user, a wrong password, no pg_hba.conf entry) stands.
_NOT_YET = (
    "starting up",
    "shutting down",
    "recovery mode",
    # A standby: not consistent yet, or with hot_standby off, until it is promoted.
    "accepting connections",
    "too many clients",
    # The role's or the database's CONNECTION LIMIT, reached by other sessions.
    "too many connections",
    "slots are",
)
# Refusals libpq makes itself, with no word from the server to say they stand: they do.
_CLIENT_REFUSALS = (
    "fe_sendauth",
    "password is required",
    "invalid connection option",
    # libpq's word for an option's value it cannot take (`sslmode=bogus`, `port=abc`).
    "invalid integer value",
    "invalid port number",
    'value: "',  # invalid sslmode value: "bogus" (and gssencmode, target_session_attrs...)
)


async def _prepare(psycopg: Any, dsn: str, schema: str, timeout: float, answer: float) -> None:
    """Connect once, directly, and make (or check) the log's tables. Not through the pool:
    it retries every failure until its timeout and then says only that it timed out, so a
    mistake in the dsn would cost the whole timeout and hide its reason. A server that
    refuses connections for now (down, starting up, full) is tried again until ``timeout``;
    one that refuses them for good, or a dsn that does not parse, fails at once. One that
    does not answer within ``answer`` seconds once connected is :class:`_NoAnswer`. A
    connection the server ends midway (a restart, ``pg_terminate_backend``) is made again,
    until ``timeout``, after 50 ms to 1 s as :func:`_connect` waits: its transaction took
    no effect. Past it, :class:`_Uncommitted`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = 0.05
    while True:
        conn, _ = await _connect(psycopg, dsn, max(deadline - loop.time(), 1.0))
        try:
            with _Watch(conn, answer):
                await conn.execute(_session(schema))
                async with conn.transaction():
                    await _create(conn, schema)
            return
        except psycopg.OperationalError as e:
            # Only a lost connection: the server's answer on one that stands (a full disk,
            # no rights) is the open's to report.
            if not conn.closed:
                raise
            if loop.time() >= deadline:
                raise _Uncommitted() from e
        finally:
            await conn.close()
        # Not again at once: a server that ends each session as it begins (a proxy or a
        # pooler in front of one that is down) would fork a backend for each, hundreds a
        # second, for the whole timeout.
        await asyncio.sleep(max(0.0, min(delay, deadline - loop.time())))
        delay = min(2 * delay, 1.0)


async def _connect(psycopg: Any, dsn: str, timeout: float) -> tuple[Any, bool]:
    """A connection made directly, and whether the server refused one first: one that
    refuses connections for now (down, starting up, full) is asked again every 50 ms to 1 s
    until ``timeout``; one that refuses them for good, or a dsn that does not parse, raises
    ``psycopg.OperationalError`` at once."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay, refused = 0.05, False
    while True:
        try:
            conn = await psycopg.AsyncConnection.connect(
                dsn, autocommit=True, connect_timeout=max(1, int(timeout))
            )
            return conn, refused
        except psycopg.OperationalError as e:
            if _for_good(e) or loop.time() + delay >= deadline:
                raise
            refused = True
            await asyncio.sleep(delay)
            delay = min(2 * delay, 1.0)


def _for_good(error: BaseException) -> bool:
    """Whether the server refused a connection for good (a database, a user, a password, a
    dsn that is wrong: no waiting mends it), not for now (down, starting up, full)."""
    said = str(error)
    return ("FATAL:" in said and not any(n in said for n in _NOT_YET)) or any(
        n in said for n in _CLIENT_REFUSALS
    )


async def _create(conn: Any, schema: str) -> None:
    steps = _schema(schema)
    row = None
    while True:
        try:
            statement, params = steps.send(row)
        except StopIteration:
            return
        cursor = await conn.execute(statement, params)
        row = await cursor.fetchone() if cursor.description else None


def _create_sync(conn: Any, schema: str) -> None:
    steps = _schema(schema)
    row = None
    with conn.transaction():
        while True:
            try:
                statement, params = steps.send(row)
            except StopIteration:
                return
            cursor = conn.execute(statement, params)
            row = cursor.fetchone() if cursor.description else None


async def _drop_idle(pool: Any) -> None:
    """Drop ``pool``'s connections made until now, for new ones: a server that cut one (a
    restart) cut the others too; one whose session stalled may have left the others'
    stalled as well (a network cut takes them all). Idle ones are closed now,
    ones in use when they come back. Not checked one by one (psycopg_pool's ``check()``):
    a check of a stalled session waits for it, as would every transaction behind it."""
    await pool.drain()


def _forget(task: asyncio.Future[Any]) -> None:
    """Take the outcome of a transaction whose caller is gone (so asyncio does not report
    it as never retrieved)."""
    if not task.cancelled():
        task.exception()


# A dsn's password: a URL's (postgresql://user:PASSWORD@host), or a keyword's
# (password=PASSWORD, or quoted).
_PASSWORDS = (
    re.compile(r"://[^/@:]*:([^@/]+)@"),
    re.compile(r"\bpassword\s*=\s*'((?:[^'\\]|\\.)*)'"),
    re.compile(r"\bpassword\s*=\s*([^\s']\S*)"),
)


def _without_secrets(text: str, dsn: str) -> str:
    """``text`` (a driver's error, which may quote the dsn or a piece of it) without the
    dsn's password, whole or percent-decoded."""
    for pattern in _PASSWORDS:
        for found in pattern.findall(dsn):
            for secret in {found, urllib.parse.unquote(found)}:
                if len(secret) >= 3:  # shorter, it would blot out the text itself
                    text = text.replace(secret, "***")
    return text


def database_at(dsn: str) -> str:
    """The database ``dsn`` names, as people read it (``host:port/dbname``), without any
    password."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        info = conninfo_to_dict(dsn)
    except Exception:
        return "the database in the dsn"
    host = info.get("host") or "localhost"
    return f"{host}:{info.get('port') or 5432}/{info.get('dbname') or info.get('user') or ''}"


def cannot_reach(dsn: str, error: BaseException, *, ended: bool = False) -> str:
    """What a log whose server is down, or does not answer, says (``error``: the driver's,
    without the dsn's password). ``ended``: the server took the connection and ended it
    (restarting, or its sessions terminated), so the dsn is right and not to be checked."""
    said = _without_secrets(_first_line(error), dsn)
    if ended:
        said = f"the server ended the connection ({said})"
    check = "" if ended else " (or check [codemode.store] dsn)"
    return (
        f"cannot reach the PostgreSQL session log at {database_at(dsn)}: {said}; try again "
        f"once the server runs{check}"
    )


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]
