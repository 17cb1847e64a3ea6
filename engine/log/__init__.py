"""The session log: scripts, their calls, and who drives each script, in a store many hosts
share (memory, SQLite, PostgreSQL), with the conformance suite every store passes."""

from engine.log._memory import MemoryStore
from engine.log._postgres import PostgresStore
from engine.log._records import (
    ACTIVE,
    APPROVED,
    APPROVED_NOTE,
    AWAITING_APPROVAL,
    AWAITING_CLIENT,
    DONE,
    ENDED,
    FAILED,
    FINISHED,
    PAUSED,
    PROPOSED,
    REFUSED_NOTE,
    RUNNING,
    SCRIPT_FAILED,
    SEED_BITS,
    SETTLED,
    CallConflict,
    CallEntry,
    Decision,
    Lease,
    LeaseLost,
    ScriptRecord,
    Settlement,
    StepUsage,
)
from engine.log._rules import NOT_KEPT
from engine.log._sqlite import SqliteStore
from engine.log._store import DEFAULT_LEASE_MS, LogStore, Started

__all__ = [
    "ACTIVE",
    "APPROVED",
    "APPROVED_NOTE",
    "AWAITING_APPROVAL",
    "AWAITING_CLIENT",
    "DEFAULT_LEASE_MS",
    "DONE",
    "ENDED",
    "FAILED",
    "FINISHED",
    "NOT_KEPT",
    "PAUSED",
    "PROPOSED",
    "REFUSED_NOTE",
    "RUNNING",
    "SCRIPT_FAILED",
    "SEED_BITS",
    "SETTLED",
    "CallConflict",
    "CallEntry",
    "Decision",
    "Lease",
    "LeaseLost",
    "LogStore",
    "MemoryStore",
    "PostgresStore",
    "ScriptRecord",
    "Settlement",
    "SqliteStore",
    "Started",
    "StepUsage",
]
