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
        outcome=load(row[14]),
        files=load(row[15]) or [],
        tools=load(row[16]) or {},
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
    return r.CallEntry(
        script_id=row[0],
        index=row[1],
        call_id=row[2],
        name=row[3],
        arguments=load(row[4]),
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
