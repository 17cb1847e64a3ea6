"""Scripts and calls as rows of the SQL stores (SQLite, PostgreSQL), in the column order of
``engine.log._schema``.

Values are stored as orjson bytes, never as a database's JSON type, so what a run reads back
is byte for byte what was written (a JSON type may reorder keys or change numbers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from engine.log import _records as r
from engine.log import _schema as schema


class BadRow(ValueError):
    """A row whose values are not of the types codemode writes (changed by hand or by
    another program: SQLite keeps what it is given): the log is damaged."""


_KINDS: dict[str, tuple[type, ...] | None] = {
    "text": (str,),
    "int": (int,),
    "real": (int, float),
    "blob": None,  # JSON, checked once loaded
}


# Times and counts a host reads as dates or sizes: within what a date can be. A seed is no
# date: any of its 63 bits.
_MOST = 1 << 53
_BOUNDS = {"seed": (0, (1 << r.SEED_BITS) - 1)}

_Types = tuple[tuple[str, tuple[type, ...] | None, int, int], ...]


def _column_types(columns: list[tuple[str, str, str]]) -> _Types:
    """Each column's name, types and bounds, in row order, from the schema: a column that may
    be NULL takes None too."""
    types = []
    for name, kind, constraint in columns:
        allowed = _KINDS[kind]
        if allowed is not None and "NOT NULL" not in constraint and "PRIMARY" not in constraint:
            allowed = (*allowed, type(None))
        types.append((name, allowed, *_BOUNDS.get(name, (-_MOST, _MOST))))
    return tuple(types)


_SCRIPT_TYPES = _column_types(schema.SCRIPTS)
_CALL_TYPES = _column_types(schema.CALLS)


def _check(row: Sequence[Any], types: _Types, what: str) -> None:
    for value, (name, allowed, low, high) in zip(row, types, strict=True):
        if allowed is None:
            continue
        if isinstance(value, bool) or not isinstance(value, allowed):
            raise BadRow(f"a {what} row holds {type(value).__name__} in its {name} column")
        if isinstance(value, int | float) and not low <= value <= high:
            raise BadRow(f"a {what} row holds {value!r:.40} in its {name} column")


def _loaded(blob: bytes | memoryview | None, kind: type, what: str) -> Any:
    value = load(blob)
    if value is not None and not isinstance(value, kind):
        raise BadRow(f"a {what} row's JSON holds {type(value).__name__}, not {kind.__name__}")
    return value


def dump(value: Any) -> bytes | None:
    return None if value is None else orjson.dumps(value)


def load(blob: bytes | memoryview | None) -> Any:
    return None if blob is None else orjson.loads(blob)


def script_row(
    record: r.ScriptRecord, *, updated_ms: int, lease: r.Lease | None = None
) -> tuple[Any, ...]:
    """The script's row, with ``lease`` (the record's own lease is not written)."""
    return (
        record.id,
        record.key,
        record.code,
        record.tenant,
        record.language,
        record.now_ms,
        record.seed,
        record.created_ms,
        updated_ms,
        record.status,
        int(record.held),
        record.steps,
        record.total_compute_ms,
        record.total_file_bytes,
        dump(record.outcome),
        dump(record.files),
        dump(record.tools),
        lease.owner if lease else None,
        lease.token if lease else 0,
        lease.expires_ms if lease else 0,
    )


def script_from_row(row: Sequence[Any]) -> r.ScriptRecord:
    _check(row, _SCRIPT_TYPES, "script")
    if row[9] not in (r.ACTIVE, r.PAUSED, *r.ENDED):
        raise BadRow(f"a script row's status is {row[9]!r:.40}, which codemode never writes")
    owner, token, expires = row[17], row[18], row[19]
    return r.ScriptRecord(
        id=row[0],
        key=row[1],
        code=row[2],
        tenant=row[3],
        language=row[4],
        now_ms=row[5],
        seed=row[6],
        created_ms=row[7],
        updated_ms=row[8],
        status=row[9],
        held=bool(row[10]),
        steps=row[11],
        total_compute_ms=row[12],
        total_file_bytes=row[13],
        outcome=_loaded(row[14], dict, "script"),
        files=_loaded(row[15], list, "script") or [],
        tools=_loaded(row[16], dict, "script") or {},
        lease=r.Lease(row[0], owner, token, expires) if owner is not None else None,
    )


def call_row(e: r.CallEntry, *, claim: tuple[str, int, int] | None = None) -> tuple[Any, ...]:
    """The call's row; ``claim``: written claimed (running) by ``(owner, token, now_ms)``."""
    state, owner, token, started_ms = e.state, e.owner, e.token, e.started_ms
    if claim is not None:
        state, (owner, token, started_ms) = r.RUNNING, claim
    return (
        e.script_id,
        e.index,
        e.call_id,
        e.name,
        dump(e.arguments),
        e.argument_bytes,
        state,
        dump(e.result),
        e.result_bytes,
        e.error,
        e.note,
        owner,
        token,
        e.created_ms,
        started_ms,
        e.ended_ms,
    )


def call_from_row(row: Sequence[Any]) -> r.CallEntry:
    _check(row, _CALL_TYPES, "call")
    if row[6] not in r.CALL_STATES:
        raise BadRow(f"a call row's state is {row[6]!r:.40}, which codemode never writes")
    return r.CallEntry(
        script_id=row[0],
        index=row[1],
        call_id=row[2],
        name=row[3],
        arguments=_loaded(row[4], dict, "call"),
        argument_bytes=row[5],
        state=row[6],
        result=load(row[7]),
        result_bytes=row[8],
        error=row[9],
        note=row[10],
        owner=row[11],
        token=row[12],
        created_ms=row[13],
        started_ms=row[14],
        ended_ms=row[15],
    )
