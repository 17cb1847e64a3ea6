"""The SQL stores' tables, stated once: each column's name, kind and constraint, in row order.

Each store writes its own dialect's DDL from this (:func:`statements`); the transactions
(``engine.log._sql``) and the row conversions (``engine.log._rows``) take their column lists
from it too, so a column is added in one place.
"""

from __future__ import annotations

from typing import Literal

Dialect = Literal["sqlite", "postgres"]

# The kinds of value a column holds, as each dialect spells them. JSON data is kept as orjson
# bytes (``blob``), never in a JSON type, so it reads back byte for byte.
_TYPES = {
    "sqlite": {"text": "TEXT", "int": "INTEGER", "real": "REAL", "blob": "BLOB"},
    "postgres": {"text": "TEXT", "int": "BIGINT", "real": "DOUBLE PRECISION", "blob": "BYTEA"},
}

# (name, kind, constraint); "first": the first release's logs have the column already.
SCRIPTS: list[tuple[str, str, str]] = [
    ("id", "text", "PRIMARY KEY"),
    ("key", "text", ""),
    ("code", "text", "NOT NULL"),
    ("tenant", "text", "NOT NULL"),
    ("language", "text", "NOT NULL DEFAULT 'javascript'"),
    ("now_ms", "int", "NOT NULL"),
    ("seed", "int", "NOT NULL"),
    ("created_ms", "int", "NOT NULL"),
    ("updated_ms", "int", "NOT NULL DEFAULT 0"),
    ("status", "text", "NOT NULL"),
    ("held", "int", "NOT NULL DEFAULT 0"),
    ("steps", "int", "NOT NULL DEFAULT 0"),
    ("total_compute_ms", "real", "NOT NULL DEFAULT 0"),
    ("total_file_bytes", "int", "NOT NULL DEFAULT 0"),
    ("outcome", "blob", ""),
    ("files", "blob", ""),
    ("tools", "blob", ""),
    ("lease_owner", "text", ""),
    ("lease_token", "int", "NOT NULL DEFAULT 0"),
    ("lease_expires_ms", "int", "NOT NULL DEFAULT 0"),
]
CALLS: list[tuple[str, str, str]] = [
    ("script_id", "text", "NOT NULL REFERENCES scripts(id)"),
    ("idx", "int", "NOT NULL"),
    ("call_id", "text", "NOT NULL"),
    ("name", "text", "NOT NULL"),
    ("arguments", "blob", "NOT NULL"),
    ("argument_bytes", "int", "NOT NULL DEFAULT 0"),
    ("state", "text", "NOT NULL"),
    ("result", "blob", ""),
    ("result_bytes", "int", ""),
    ("error", "text", ""),
    ("note", "text", ""),
    ("owner", "text", ""),
    ("token", "int", ""),
    ("created_ms", "int", "NOT NULL DEFAULT 0"),
    ("started_ms", "int", ""),
    ("ended_ms", "int", ""),
]
_CALLS_KEY = "PRIMARY KEY (script_id, idx)"
# A key names a script within its tenant: two tenants' keys never meet.
_INDEXES = [
    "CREATE UNIQUE INDEX IF NOT EXISTS scripts_tenant_key ON scripts(tenant, key)",
    "CREATE INDEX IF NOT EXISTS scripts_updated ON scripts(status, updated_ms)",
    "CREATE INDEX IF NOT EXISTS calls_call_id ON calls(script_id, call_id)",
]
# The indexes that keep the log's rows unique (PostgreSQL's names for the primary keys): what
# the log's exclusions rest on, checked when a PostgreSQL log is opened.
UNIQUE_INDEXES = ("scripts_pkey", "calls_pkey", "scripts_tenant_key")
# What schema 3 changed: the unique index on scripts(key) alone, which let one tenant's start
# find another's script by its key, gives way to scripts_tenant_key (made by the statements).
DROPPED_INDEXES = ["DROP INDEX IF EXISTS scripts_key"]
# The columns the first release's SQLite logs have; the others are added when one is opened.
FIRST_RELEASE = {
    "scripts": {
        "id", "code", "tenant", "now_ms", "seed", "created_ms", "status", "held", "steps",
        "total_compute_ms", "total_file_bytes", "outcome", "files",
    },
    "calls": {
        "script_id", "idx", "call_id", "name", "arguments", "state", "result", "error", "note",
    },
}  # fmt: skip

SCRIPT_COLUMNS = ", ".join(name for name, _, _ in SCRIPTS)
CALL_COLUMNS = ", ".join(name for name, _, _ in CALLS)


def column(dialect: Dialect, spec: tuple[str, str, str]) -> str:
    """One column as its dialect declares it."""
    name, kind, constraint = spec
    return f"{name} {_TYPES[dialect][kind]} {constraint}".rstrip()


def statements(dialect: Dialect) -> list[str]:
    """The statements that make the tables and their indexes, unless they are made."""
    scripts = ",\n    ".join(column(dialect, c) for c in SCRIPTS)
    calls = ",\n    ".join([*(column(dialect, c) for c in CALLS), _CALLS_KEY])
    return [
        f"CREATE TABLE IF NOT EXISTS scripts (\n    {scripts}\n)",
        f"CREATE TABLE IF NOT EXISTS calls (\n    {calls}\n)",
        *_INDEXES,
    ]


def added_since_first_release(table: str) -> list[tuple[str, str, str]]:
    """The columns of ``table`` that the first release's logs lack."""
    specs = SCRIPTS if table == "scripts" else CALLS
    return [c for c in specs if c[0] not in FIRST_RELEASE[table]]
