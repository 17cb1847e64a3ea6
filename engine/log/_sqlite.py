"""The session log in one SQLite file, shared by every host process on one machine.

Each write is one ``BEGIN IMMEDIATE`` transaction, so writers from any process are serialized
by SQLite's own lock, and a fenced write's check of the lease token and its change are one
atomic step.

No fsync on the event loop. Transactions take microseconds and run on the loop itself, on a
connection that never waits: it does not checkpoint (a checkpoint syncs the database file;
the store thread's connection does them) and gives up at once when another connection holds
the write lock, and then the transaction runs on the thread, which waits its turn. A write
that must reach the disk before it returns (see ``SqlStore._tx``) commits there without a
sync, then waits for an ``fsync`` of the write-ahead log: the same durability as
``synchronous=FULL``, which in WAL mode is that ``fsync`` at the commit. The ``fsync`` is the
kernel's asynchronous one where Linux has it (``engine.log._aio``), else it runs on the
store's thread. Commit and sync both on the thread cost three times as much: the hop, and a
second connection whose page cache each write of the other's made stale.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from engine._errors import ConfigError, StoreUnavailable
from engine._files import BlobStore
from engine.log import _rows as rows
from engine.log import _schema as schema
from engine.log import _sql as sql
from engine.log._aio import UNSUPPORTED, AioSync
from engine.log._sqlbase import SqlStore

logger = logging.getLogger("codemode")

SCHEMA_VERSION = 3
# The oldest schema read as this one without an upgrade: 2 differs by its keys' index alone.
OLDEST_READ = 2

# Every this many writes on the loop, one goes to the thread instead, whose connection
# checkpoints the write-ahead log when it has grown (the loop's connection never does).
CHECKPOINT_EVERY = 64


# How long opening the log waits for another process's write lock.
OPEN_BUSY_MS = 30_000


class SqliteStore(SqlStore):
    """The log in ``<directory>/codemode.sqlite3`` (WAL, synchronous commits).

    ``directory`` is made if missing. ``clock`` gives the store's time in seconds, by which
    leases expire (every host on the machine shares it). ``read_only``: a log that is there,
    opened to be read by a process that may not write it or its directory (a person
    inspecting another account's log); nothing is made, upgraded or written, and a write
    raises the read-only :class:`StoreUnavailable`.
    """

    FILE_NAME = "codemode.sqlite3"
    local = True

    def __init__(
        self,
        directory: str | Path,
        clock: Callable[[], float] = time.time,
        *,
        read_only: bool = False,
    ) -> None:
        directory = Path(directory)
        if directory.exists() and not directory.is_dir():
            raise ConfigError(
                f"the data directory {directory} is a file: give a directory for the session "
                "log (it is made if missing)"
            )
        if not read_only:
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise ConfigError(f"cannot make the data directory {directory}: {e}") from None
        self.path = directory / self.FILE_NAME
        self._read_only = read_only
        self._clock = clock
        self._closed = False
        # A thread of its own, for the syncs, the checkpoints and the transactions that must
        # wait for another connection's lock: its connection stays on it.
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="codemode-sqlite")
        self._db: sqlite3.Connection | None = None
        self._syncing = False  # the connection's synchronous setting: FULL (True) or NORMAL
        try:
            self._thread.submit(self._open_to_read if read_only else self._open).result()
            self._fast = self._open_fast()
        except BaseException:
            self._thread.shutdown(wait=True)
            raise
        # The loop's connection is one transaction at a time: a second loop (another thread)
        # that finds it busy uses the store's thread.
        self._fast_lock = threading.Lock()
        self._fast_writes = 0
        self._wal: int | None = None  # the write-ahead log's file, opened on the thread
        # The syncs by Linux AIO, on the loop that made it (None: not made yet, or on the
        # thread); off for good once the machine or the file system cannot.
        self._aio: AioSync | None = None
        self._aio_off = False
        self._thread_syncs = 0  # syncs on the thread now, which may open or close _wal

    def blob_store(self) -> BlobStore:
        """The attachments' blobs, as files beside the log (``<directory>/blobs``)."""
        return BlobStore(self.path.parent / "blobs")

    def _open(self) -> None:
        try:
            db = sqlite3.connect(str(self.path), isolation_level=None, timeout=30)
            _check_ours(db, self.path)  # before WAL mode, which another program's file keeps
            (mode,) = db.execute("PRAGMA journal_mode=WAL").fetchone()
        except sqlite3.Error as e:
            raise _open_error(self.path, e) from None
        if str(mode).lower() != "wal":
            # Without it, a commit on the loop's connection would sync there, and readers
            # would wait for writers: the store's design rests on WAL.
            db.close()
            raise ConfigError(
                f"the session log {self.path} cannot use SQLite's write-ahead log here (its "
                f"journal mode stayed {mode!r}; a network filesystem cannot share the memory "
                "WAL needs): put data_dir on a local filesystem"
            )
        # Each write says whether it must reach the disk before it returns (see SqlStore._tx).
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(f"PRAGMA busy_timeout={OPEN_BUSY_MS}")
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            db.close()
            if e.sqlite_errorcode & 0xFF not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                raise _open_error(self.path, e) from None  # a full disk's I/O error, say
            # Another process holds the log's write lock past the busy timeout.
            raise StoreUnavailable(
                f"the session log {self.path} could not be opened ({e}): another process "
                "holds it; try again once it lets go"
            ) from None
        try:
            (version,) = db.execute("PRAGMA user_version").fetchone()
            if version > SCHEMA_VERSION:
                raise _newer(self.path, version)
            if version < SCHEMA_VERSION:
                try:
                    _migrate(db, version)
                    for statement in schema.statements("sqlite"):
                        db.execute(statement)
                except sqlite3.Error as e:
                    if _primary(e) != sqlite3.SQLITE_ERROR:
                        raise  # damage, a full disk, ...: the open's error (below)
                    # "no such column", "already exists": tables of the names codemode uses
                    # that codemode did not make.
                    raise ConfigError(
                        f"the session log {self.path} has tables codemode did not make ({e}): "
                        "if it is no codemode log, give data_dir a directory of its own"
                    ) from None
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException as e:
            db.close()  # which rolls back what the transaction wrote
            if isinstance(e, sqlite3.Error):  # the upgrade's COMMIT on a full disk, say
                raise _open_error(self.path, e) from None
            raise
        self._db = db

    def _open_to_read(self) -> None:
        """Open the log to read it only (see the class): a log whose writers have it open
        shares their write-ahead log; one closed cleanly, in a directory this process may not
        write (where the WAL's shared memory cannot be made), is read as the file holds it."""
        try:
            db = self._connect(check_same_thread=True)
            (version,) = db.execute("PRAGMA user_version").fetchone()
        except sqlite3.Error as e:
            raise _open_error(self.path, e) from None
        if not OLDEST_READ <= version <= SCHEMA_VERSION:
            _check_ours(db, self.path)
            (tables,) = db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            db.close()
            if not tables:
                # No codemode made it (a file touched, or one whose first write failed):
                # "of an older codemode", as it was called, sent the reader to upgrade it.
                raise ConfigError(
                    f"the session log {self.path} is empty: no codemode log was ever written "
                    "to it; check the data_dir (run or worker makes the log)"
                )
            if version > SCHEMA_VERSION:
                raise _newer(self.path, version)
            raise ConfigError(
                f"the session log {self.path} is of an older codemode (schema {version}), "
                "which only a host that may write it upgrades: run one there (resume, "
                "worker) once, then read it"
            )
        self._db = db

    def _connect(self, *, check_same_thread: bool) -> sqlite3.Connection:
        """A connection to the log: read-only ones by URI (see :meth:`_open_to_read`)."""
        if not self._read_only:
            return sqlite3.connect(
                str(self.path), isolation_level=None, timeout=0, check_same_thread=False
            )
        uri = f"{self.path.absolute().as_uri()}?mode=ro"
        db = sqlite3.connect(
            uri, uri=True, isolation_level=None, check_same_thread=check_same_thread
        )
        try:
            # The WAL's shared memory is opened (or found impossible to make) at a first read.
            db.execute("PRAGMA user_version").fetchone()
            return db
        except sqlite3.OperationalError as e:
            db.close()
            if e.sqlite_errorcode != sqlite3.SQLITE_READONLY_DIRECTORY:
                raise
        return sqlite3.connect(
            f"{uri}&immutable=1",
            uri=True,
            isolation_level=None,
            check_same_thread=check_same_thread,
        )

    def _open_fast(self) -> sqlite3.Connection:
        """The connection for transactions on the event loop: never waits for a lock (busy
        timeout 0), never checkpoints, never syncs (NORMAL in WAL mode syncs nothing at a
        commit). Used from whichever thread runs the loop, one transaction at a time."""
        try:
            db = self._connect(check_same_thread=False)
        except sqlite3.Error as e:
            raise _open_error(self.path, e) from None
        db.execute("PRAGMA busy_timeout=0")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA wal_autocheckpoint=0")
        return db

    async def _tx(self, make: Callable[[int], sql.Tx], *, write: bool, sync: bool = True) -> Any:
        if self._closed:
            raise _closed_error()
        now = int(self._clock() * 1000)
        sync = write and sync
        loop = asyncio.get_running_loop()
        try:
            if self._fast_lock.acquire(blocking=False):
                try:
                    value = self._run_fast(make, now, write)
                except _Busy:
                    committed = False  # another connection writes: wait for it on the thread
                else:
                    committed = True
                finally:
                    self._fast_lock.release()
                if committed:
                    if sync:
                        await self._sync(loop)
                    return value
            return await loop.run_in_executor(self._thread, self._run, make(now), write, sync)
        except sqlite3.OperationalError as e:  # locked past the busy timeout, disk full, ...
            if e.sqlite_errorcode & 0xFF == sqlite3.SQLITE_ERROR:
                # "no such table", "no such column": the file's tables are not as codemode
                # made them, which waiting does not mend.
                raise StoreUnavailable(
                    f"the session log {self.path} is damaged ({e}): its tables are not as "
                    "codemode made them; restore it from a backup, or give a new data_dir",
                    permanent=True,
                ) from None
            if e.sqlite_errorcode & 0xFF == sqlite3.SQLITE_READONLY:
                # A read-only file, directory or mount (chattr +i, a ro mount): waiting
                # does not help, so it is not "resume once it can" (exit code 2, not 75).
                raise StoreUnavailable(
                    f"the session log {self.path} is read-only for this process ({e}): make "
                    "the file and its directory writable (permissions, chattr -i, the "
                    "mount), then run the command again",
                    permanent=True,
                ) from None
            raise StoreUnavailable(
                f"the session log {self.path} could not be written ({e}); nothing written is "
                "lost: resume the script once it can"
            ) from None
        except (sqlite3.DatabaseError, orjson.JSONDecodeError, rows.BadRow) as e:
            # "database disk image is malformed", or a row whose JSON is not JSON (changed
            # by hand, or by another program writing the file).
            raise _damaged(self.path, e) from None
        except OSError as e:  # the log's fsync failed: the write may not be on the disk
            raise StoreUnavailable(
                f"the session log {self.path} could not be synced to the disk ({e}); check "
                "the disk, then resume the script"
            ) from None

    def _run_fast(self, make: Callable[[int], sql.Tx], now: int, write: bool) -> Any:
        """The transaction on the loop's connection, or :class:`_Busy` (nothing done) if it
        would have to wait for a lock."""
        if write:
            self._fast_writes += 1
            if self._fast_writes % CHECKPOINT_EVERY == 0:
                raise _Busy  # this one on the thread, which checkpoints if the log grew
        try:
            return _transaction(self._fast, make(now), write)
        except sqlite3.OperationalError as e:
            if e.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                raise _Busy from None
            raise

    async def _sync(self, loop: asyncio.AbstractEventLoop) -> None:
        """Make every commit so far durable (an ``fsync`` of the write-ahead log): by Linux
        AIO when the log is open and no sync on the thread may be changing it, else on the
        thread (:meth:`_sync_log`).

        The log opened at the first sync stays the log until :meth:`aclose`, so it is not
        checked again before each sync: this store's connections hold a shared lock on the
        database file while they are open (WAL mode), and SQLite deletes the log only when
        its last connection closes, under an exclusive one. (An ``fstat`` of it before each
        sync cost more than the call: a query of its times makes the next write set them
        finely, so the ``fsync`` commits the file system's journal too, 0.05 to 0.08 ms a
        sync on ext4.)"""
        wal = self._wal
        aio = None
        if wal is not None and not self._thread_syncs:
            aio = self._aio_for(loop)
        if wal is not None and aio is not None:
            try:
                await aio.fsync(wal)
                return
            except OSError as e:
                if e.errno not in UNSUPPORTED:
                    raise
                if not self._aio_off:
                    logger.info(
                        "session log %s: fsync by Linux AIO refused (%s); syncing on a thread",
                        self.path,
                        e,
                    )
                self._aio_off = True
                self._release_aio()  # a sync waiting on it now comes here too
            if self._closed:
                raise _closed_error()
        self._thread_syncs += 1
        try:
            await loop.run_in_executor(self._thread, self._sync_log)
        finally:
            self._thread_syncs -= 1

    def _aio_for(self, loop: asyncio.AbstractEventLoop) -> AioSync | None:
        aio = self._aio
        if aio is not None and aio.loop is loop:
            return aio
        if aio is not None:
            if not aio.loop.is_closed():
                return None  # another loop's: this one syncs on the thread
            self._release_aio()
        if self._aio_off:
            return None
        self._aio = AioSync.make(loop)
        self._aio_off = self._aio is None
        return self._aio

    def _release_aio(self) -> None:
        """Let the AIO context go, on the thread (its ``io_destroy`` waits for a sync in
        flight)."""
        aio, self._aio = self._aio, None
        if aio is not None:
            held = [aio.detach()]
            self._thread.submit(held.clear)

    def _sync_log(self) -> None:
        """Make every commit so far durable: ``fsync`` the write-ahead log (on the store's
        thread). Frames a checkpoint already moved out of it are in the database file, which
        the checkpoint synced. The log is opened at the first sync and kept (see
        :meth:`_sync`); it may be new, so its directory is synced too, once: a file's data
        lasts, but its name lasts only with its directory's (SQLite's FULL does the same for
        a log it creates)."""
        if self._wal is not None:
            os.fsync(self._wal)
            return
        wal = os.open(f"{self.path}-wal", os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(wal)
            directory = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        except BaseException:
            os.close(wal)
            raise
        self._wal = wal

    def _run(self, tx: sql.Tx, write: bool, sync: bool) -> Any:
        db = self._db
        assert db is not None
        # In WAL mode FULL syncs the log at this commit (and so every commit before it, from
        # any connection). Set only when it changes: a statement less for most transactions.
        if write and sync != self._syncing:
            db.execute("PRAGMA synchronous=FULL" if sync else "PRAGMA synchronous=NORMAL")
            self._syncing = sync
        return _transaction(db, tx, write)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._fast_lock:
            self._fast.close()
        self._release_aio()

        def close() -> None:
            if self._wal is not None:
                os.close(self._wal)
            if self._db is not None:
                self._db.close()

        await asyncio.get_running_loop().run_in_executor(self._thread, close)
        self._thread.shutdown(wait=True)


def _primary(error: sqlite3.Error) -> int:
    """SQLite's primary result code for ``error``; 0 for one the sqlite3 module raised itself
    (a closed connection's ProgrammingError, say), which has none."""
    return (getattr(error, "sqlite_errorcode", None) or 0) & 0xFF


def _no_room(path: Path, error: sqlite3.Error) -> bool:
    """Whether ``error`` came of the disk under the log at ``path`` being full (of bytes or
    of inodes). SQLite says so as "database or disk is full" only when a write fails; the
    write-ahead log's shared memory that cannot grow is "disk I/O error", and its file that
    cannot be made "unable to open database file", so the disk itself is asked."""
    if _primary(error) not in (
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_CANTOPEN,
    ):
        return False
    try:
        disk = os.statvfs(path.parent)
    except OSError:
        return _primary(error) == sqlite3.SQLITE_FULL
    if disk.f_flag & os.ST_RDONLY or disk.f_blocks == 0:
        # A read-only mount (an image, a pseudo-filesystem) has no room to give either, and
        # was told "free space, then run again" (exit 75: a supervisor retried for ever).
        return False
    # Under a megabyte: a log's first pages, its WAL and shared memory need more than that.
    return disk.f_bavail * disk.f_frsize < 1 << 20 or (disk.f_files > 0 and disk.f_favail == 0)


def _open_error(path: Path, error: sqlite3.Error) -> ConfigError | StoreUnavailable:
    """The log at ``path`` could not be opened: a file that is not SQLite's, or is damaged,
    is said as such (for good), a full disk too (run the command again once there is room:
    exit code 75), anything else as SQLite says it."""
    if _primary(error) in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
        # A file whose first pages are not SQLite's: as damage found later, but it may be
        # some other program's file too.
        return _damaged(path, error, _NOT_OURS)
    if _no_room(path, error):
        return StoreUnavailable(
            f"cannot open the session log {path}: the disk it is on is full ({error}); free "
            "space on it, then run the command again"
        )
    if path.is_dir():  # which SQLite calls "unable to open database file"
        return ConfigError(
            f"the session log {path} is a directory, not a file: move it away, or give "
            "another data_dir"
        )
    return ConfigError(f"cannot open the session log {path}: {error}")


# What a damaged log's error says first, of a file that may be no codemode log at all.
_NOT_OURS = "if it is no codemode log, give data_dir a directory of its own; if it is one, "


def _damaged(path: Path, error: Exception, first: str = "") -> StoreUnavailable:
    """The log at ``path`` is damaged (``error`` says how), for good: what to do about it."""
    return StoreUnavailable(
        f"the session log {path} is damaged ({error}): {first}check it with sqlite3 {path} "
        "'PRAGMA integrity_check', and restore it from a backup (or '.recover' what it can "
        "into a new file)",
        permanent=True,
    )


# The tables any codemode made in its log, in each release (schema_version before 2).
OUR_TABLES = frozenset({"scripts", "calls", "schema_version"})


def _check_ours(db: sqlite3.Connection, path: Path) -> None:
    """Refuse, and close, a file of a schema older than the oldest read (0: a new file, or
    another program's database) that holds tables no codemode made: the log's tables were
    added to another program's database, or it was called a log of an older codemode, to
    upgrade. A file of a schema read as it is, codemode's, is not looked at."""
    (version,) = db.execute("PRAGMA user_version").fetchone()
    if version >= OLDEST_READ:
        return
    names = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    theirs = sorted(n for n in names if n not in OUR_TABLES and not n.startswith("sqlite_"))
    if theirs:
        db.close()
        raise ConfigError(
            f"the session log {path} holds tables codemode did not make ({', '.join(theirs[:5])}"
            f"{', ...' if len(theirs) > 5 else ''}): if it is no codemode log, give data_dir a "
            "directory of its own"
        )


def _newer(path: Path, version: int) -> ConfigError:
    return ConfigError(
        f"the session log {path} was written by a newer codemode (schema {version}; this one "
        f"reads up to {SCHEMA_VERSION}): upgrade codemode"
    )


def _closed_error() -> StoreUnavailable:
    return StoreUnavailable(
        "the session log was closed (aclose) while this used it; nothing written is lost: "
        "open it again and resume the script"
    )


class _Busy(Exception):
    """The loop's connection would have had to wait: run the transaction on the thread."""


def _transaction(db: sqlite3.Connection, tx: sql.Tx, write: bool) -> Any:
    """Run ``tx`` in one transaction of ``db``; rolled back if it raises."""
    # A read is one deferred transaction too: one snapshot for all its statements.
    db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
    try:
        answer: Any = None
        while True:
            try:
                q = tx.send(answer)
            except StopIteration as stop:
                value = stop.value
                break
            answer = _execute(db, q)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return value


def _execute(db: sqlite3.Connection, q: sql.Q) -> Any:
    if q.fetch == "many":
        db.executemany(q.sql, q.params)
        return None
    cursor = db.execute(q.sql, q.params)
    if q.fetch == "one":
        return cursor.fetchone()
    if q.fetch == "all":
        return cursor.fetchall()
    if q.fetch == "count":
        return cursor.rowcount
    return None


def _migrate(db: sqlite3.Connection, version: int) -> None:
    """Bring a log of schema ``version`` up to this one (the statements then make what is
    new). The first release's (before 2): add the columns it lacks, and take the sizes it
    kept in ``extra``. Before 3: a key was unique in the whole log, not within its tenant;
    its index goes (every log's keys are unique within their tenants too)."""
    for statement in schema.DROPPED_INDEXES:
        db.execute(statement)
    if version >= 2:
        return
    for table in ("scripts", "calls"):
        have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        if not have:
            continue  # a new log: the schema makes the table
        for spec in schema.added_since_first_release(table):
            if spec[0] not in have:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {schema.column('sqlite', spec)}")
        if table == "calls" and "extra" in have:
            db.execute(
                "UPDATE calls SET argument_bytes = length(arguments), result_bytes = COALESCE("
                "json_extract(CAST(extra AS TEXT), '$.result_bytes'), length(result))"
            )
        if table == "scripts":
            db.execute("UPDATE scripts SET updated_ms = created_ms WHERE updated_ms = 0")
