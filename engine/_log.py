"""The session log: every script and every call it made, durable across restarts.

The log is the whole state of a script. A call is written before it runs (``running``, the
receipt) and again after (``done`` or ``failed``), so a host killed at any point resumes
without running a recorded call again. A call found ``running`` after a restart may or may
not have taken effect; it is settled as failed with a message that says so, never re-run.

``SqliteStore`` is the default (one file under a data directory the host chooses, one row per
call); ``MemoryStore`` serves tests behind the same interface.
"""

from __future__ import annotations

import abc
import copy
import sqlite3
import threading
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import orjson

from engine._errors import ConfigError, ScriptNotFound

# Call states, in the order a call moves through them.
PROPOSED = "proposed"  # recorded; the worker has not answered yet
AWAITING_APPROVAL = "awaiting_approval"  # a person must approve it
APPROVED = "approved"  # approved; runs at the next step
AWAITING_CLIENT = "awaiting_client"  # the client runs it and sends the result
RUNNING = "running"  # claimed: it is running, or the host died while it ran
DONE = "done"
FAILED = "failed"
SETTLED = frozenset({DONE, FAILED})

# Script states.
ACTIVE = "active"
PAUSED = "paused"
FINISHED = "finished"
SCRIPT_FAILED = "failed"
ENDED = frozenset({FINISHED, SCRIPT_FAILED})


@dataclass
class ScriptRecord:
    """A script in the log: its code, its fixed clock, and what its runs have used."""

    id: str
    code: str
    tenant: str
    now_ms: int
    seed: int
    created_ms: int
    status: str = ACTIVE
    held: bool = False
    steps: int = 0
    total_compute_ms: float = 0.0
    total_file_bytes: int = 0
    outcome: dict[str, Any] | None = None  # the final result, once ended
    files: list[dict[str, Any]] = field(default_factory=list)  # id, mime, size, blob, skill


@dataclass
class CallEntry:
    """One call a script made, at its position in the script's call order."""

    script_id: str
    index: int
    call_id: str
    name: str
    arguments: dict[str, Any]
    state: str = PROPOSED
    result: Any = None
    error: str | None = None
    note: str | None = None  # why it waits, who refused it
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def settled(self) -> bool:
        return self.state in SETTLED


class LogStore(abc.ABC):
    """Where scripts and their calls are kept. Every write is durable when it returns."""

    @abc.abstractmethod
    def create_script(self, record: ScriptRecord) -> None: ...

    @abc.abstractmethod
    def get_script(self, script_id: str) -> ScriptRecord:
        """The script, or :class:`ScriptNotFound`."""

    @abc.abstractmethod
    def update_script(self, script_id: str, **changes: Any) -> None: ...

    @abc.abstractmethod
    def add_calls(self, entries: list[CallEntry]) -> None:
        """Append calls; their indexes continue the script's call order."""

    @abc.abstractmethod
    def calls(self, script_id: str) -> list[CallEntry]:
        """The script's calls in call order."""

    @abc.abstractmethod
    def update_call(self, script_id: str, index: int, **changes: Any) -> None: ...

    @abc.abstractmethod
    def scripts(self, status: str | None = None) -> list[ScriptRecord]: ...

    def close(self) -> None:  # noqa: B027 - optional
        """Release the store's resources."""


class MemoryStore(LogStore):
    """A log in this process's memory, for tests. Copies in and out, as a database would."""

    def __init__(self) -> None:
        self._scripts: dict[str, ScriptRecord] = {}
        self._calls: dict[str, list[CallEntry]] = {}
        self._lock = threading.Lock()

    def create_script(self, record: ScriptRecord) -> None:
        with self._lock:
            self._scripts[record.id] = copy.deepcopy(record)
            self._calls[record.id] = []

    def get_script(self, script_id: str) -> ScriptRecord:
        with self._lock:
            try:
                return copy.deepcopy(self._scripts[script_id])
            except KeyError:
                raise ScriptNotFound(f"no script {script_id!r} in the session log") from None

    def update_script(self, script_id: str, **changes: Any) -> None:
        with self._lock:
            record = self._scripts[script_id]
            for key, value in changes.items():
                setattr(record, key, copy.deepcopy(value))

    def add_calls(self, entries: list[CallEntry]) -> None:
        with self._lock:
            for entry in entries:
                log = self._calls[entry.script_id]
                if entry.index != len(log):
                    raise ValueError(f"call {entry.index} out of order (log has {len(log)})")
                log.append(copy.deepcopy(entry))

    def calls(self, script_id: str) -> list[CallEntry]:
        with self._lock:
            return copy.deepcopy(self._calls.get(script_id, []))

    def update_call(self, script_id: str, index: int, **changes: Any) -> None:
        with self._lock:
            entry = self._calls[script_id][index]
            for key, value in changes.items():
                setattr(entry, key, copy.deepcopy(value))

    def scripts(self, status: str | None = None) -> list[ScriptRecord]:
        with self._lock:
            return [
                copy.deepcopy(r)
                for r in self._scripts.values()
                if status is None or r.status == status
            ]


_SCHEMA = """
CREATE TABLE IF NOT EXISTS scripts (
    id TEXT PRIMARY KEY,
    code TEXT NOT NULL,
    tenant TEXT NOT NULL,
    now_ms INTEGER NOT NULL,
    seed INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    status TEXT NOT NULL,
    held INTEGER NOT NULL DEFAULT 0,
    steps INTEGER NOT NULL DEFAULT 0,
    total_compute_ms REAL NOT NULL DEFAULT 0,
    total_file_bytes INTEGER NOT NULL DEFAULT 0,
    outcome BLOB,
    files BLOB
);
CREATE TABLE IF NOT EXISTS calls (
    script_id TEXT NOT NULL REFERENCES scripts(id),
    idx INTEGER NOT NULL,
    call_id TEXT NOT NULL,
    name TEXT NOT NULL,
    arguments BLOB NOT NULL,
    state TEXT NOT NULL,
    result BLOB,
    error TEXT,
    note TEXT,
    extra BLOB,
    PRIMARY KEY (script_id, idx)
);
CREATE INDEX IF NOT EXISTS scripts_status ON scripts(status);
"""

_JSON_SCRIPT = {"outcome", "files"}
_JSON_CALL = {"arguments", "result", "extra"}
_CALL_COLUMNS = {"index": "idx"}


class SqliteStore(LogStore):
    """The session log in one SQLite file (WAL, synchronous writes).

    ``path`` is the file, or a directory (one that exists, or a name without a suffix) to keep
    it in as :data:`FILE_NAME`. A path that cannot be made or opened, or a file that is not a
    session log, is a :class:`ConfigError` naming it.

    Safe to use from several threads of one process and from several processes: each
    write is one committed transaction.
    """

    FILE_NAME = "codemode.sqlite3"

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        self._lock = threading.Lock()
        try:
            if path.is_dir() or not path.suffix:
                path.mkdir(parents=True, exist_ok=True)
                path = path / self.FILE_NAME
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
            self.path = path
            self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA busy_timeout=10000")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as e:
            # The host's path, not the engine's bug: one error of the engine's family.
            raise ConfigError(
                f"cannot open the session log at {path}: {e}; give a directory (or file) "
                "this process can create and write"
            ) from None

    def _write(self, sql: str, params: tuple[Any, ...] | list[tuple[Any, ...]]) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if isinstance(params, list):
                    self._db.executemany(sql, params)
                else:
                    self._db.execute(sql, params)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def create_script(self, record: ScriptRecord) -> None:
        self._write(
            "INSERT INTO scripts (id, code, tenant, now_ms, seed, created_ms, status, held,"
            " steps, total_compute_ms, total_file_bytes, outcome, files)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record.id,
                record.code,
                record.tenant,
                record.now_ms,
                record.seed,
                record.created_ms,
                record.status,
                int(record.held),
                record.steps,
                record.total_compute_ms,
                record.total_file_bytes,
                _dump(record.outcome),
                _dump(record.files),
            ),
        )

    def get_script(self, script_id: str) -> ScriptRecord:
        with self._lock:
            row = self._db.execute(
                "SELECT id, code, tenant, now_ms, seed, created_ms, status, held, steps,"
                " total_compute_ms, total_file_bytes, outcome, files FROM scripts WHERE id = ?",
                (script_id,),
            ).fetchone()
        if row is None:
            raise ScriptNotFound(f"no script {script_id!r} in the session log")
        return _script_from(row)

    def update_script(self, script_id: str, **changes: Any) -> None:
        names = {f.name for f in fields(ScriptRecord)}
        sets, values = [], []
        for key, value in changes.items():
            if key not in names:
                raise ValueError(f"no script field {key!r}")
            sets.append(f"{key} = ?")
            if key in _JSON_SCRIPT:
                value = _dump(value)
            elif key == "held":
                value = int(value)
            values.append(value)
        self._write(f"UPDATE scripts SET {', '.join(sets)} WHERE id = ?", (*values, script_id))

    def add_calls(self, entries: list[CallEntry]) -> None:
        self._write(
            "INSERT INTO calls (script_id, idx, call_id, name, arguments, state, result, error,"
            " note, extra) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    e.script_id,
                    e.index,
                    e.call_id,
                    e.name,
                    _dump(e.arguments),
                    e.state,
                    _dump(e.result),
                    e.error,
                    e.note,
                    _dump(e.extra),
                )
                for e in entries
            ],
        )

    def calls(self, script_id: str) -> list[CallEntry]:
        with self._lock:
            rows = self._db.execute(
                "SELECT script_id, idx, call_id, name, arguments, state, result, error, note,"
                " extra FROM calls WHERE script_id = ? ORDER BY idx",
                (script_id,),
            ).fetchall()
        return [
            CallEntry(
                script_id=r[0],
                index=r[1],
                call_id=r[2],
                name=r[3],
                arguments=_load(r[4]),
                state=r[5],
                result=_load(r[6]),
                error=r[7],
                note=r[8],
                extra=_load(r[9]) or {},
            )
            for r in rows
        ]

    def update_call(self, script_id: str, index: int, **changes: Any) -> None:
        names = {f.name for f in fields(CallEntry)}
        sets, values = [], []
        for key, value in changes.items():
            if key not in names:
                raise ValueError(f"no call field {key!r}")
            sets.append(f"{_CALL_COLUMNS.get(key, key)} = ?")
            values.append(_dump(value) if key in _JSON_CALL else value)
        self._write(
            f"UPDATE calls SET {', '.join(sets)} WHERE script_id = ? AND idx = ?",
            (*values, script_id, index),
        )

    def scripts(self, status: str | None = None) -> list[ScriptRecord]:
        sql = (
            "SELECT id, code, tenant, now_ms, seed, created_ms, status, held, steps,"
            " total_compute_ms, total_file_bytes, outcome, files FROM scripts"
        )
        with self._lock:
            if status is None:
                rows = self._db.execute(sql + " ORDER BY created_ms").fetchall()
            else:
                rows = self._db.execute(
                    sql + " WHERE status = ? ORDER BY created_ms", (status,)
                ).fetchall()
        return [_script_from(r) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _script_from(row: tuple[Any, ...]) -> ScriptRecord:
    return ScriptRecord(
        id=row[0],
        code=row[1],
        tenant=row[2],
        now_ms=row[3],
        seed=row[4],
        created_ms=row[5],
        status=row[6],
        held=bool(row[7]),
        steps=row[8],
        total_compute_ms=row[9],
        total_file_bytes=row[10],
        outcome=_load(row[11]),
        files=_load(row[12]) or [],
    )


def _dump(value: Any) -> bytes | None:
    return None if value is None else orjson.dumps(value)


def _load(blob: bytes | None) -> Any:
    return None if blob is None else orjson.loads(blob)
