"""The public surface of each package is pinned: a name added or dropped is a decision,
made here, not an accident of an import."""

from __future__ import annotations

import engine
import engine.log
import runner

ENGINE = {
    "Attachment", "BlobStore", "CallAbandoned", "CallEntry", "CallNotWaiting", "CodeMode", "CodeModeError",
    "Config", "ConfigError", "Event", "FilesMissing", "LANGUAGES", "Language", "LeaseLost", "Limits", "LogStore", "MemoryStore", "PROPOSED",
    "PostgresStore", "PythonTypeChecker", "RunResult", "RunnerConfig", "ScriptNotFound", "ScriptRecord",
    "ScriptTooLarge", "Skill", "SqliteStore", "StepUnavailable", "StoreUnavailable",
    "TEXT_BUDGET", "Tool", "ToolCallError", "ToolContext", "ToolDefinitionError",
    "ToolsMissing", "TypeChecker", "Worker", "build_runner", "load_mcp_tools", "normalize",
    "parse_size", "proposed_worker", "tool",
}  # fmt: skip

LOG = {
    "ACTIVE", "APPROVED", "APPROVED_NOTE", "AWAITING_APPROVAL", "AWAITING_CLIENT", "CallConflict",
    "CallEntry", "DEFAULT_LEASE_MS", "DONE", "Decision", "ENDED", "FAILED", "FINISHED", "Lease",
    "LeaseLost", "LogStore", "MemoryStore", "NOT_KEPT", "PAUSED", "PROPOSED", "PostgresStore",
    "REFUSED_NOTE", "RUNNING", "SCRIPT_FAILED", "SEED_BITS", "SETTLED", "ScriptRecord",
    "Settlement", "SqliteStore", "Started", "StepUsage",
}  # fmt: skip

RUNNER = {
    "FileMissing", "FileReader", "HOST_BUSY", "LiveRun", "MAX_TENANT", "ProcessRunner", "ProcessStats", "RemoteRunner",
    "RunError",
    "RunnerService", "ScriptRunner", "Slots", "Step", "TEXT_BOUNDS", "bounded",
    "default_live_count", "default_live_memory", "default_slot_count", "count_private", "serve",
    "keeps_live", "takes_live",
    # What the engine shares of the runner's: the stall rule's deadline and timeout, task
    # endings, and the remote runner's options, addresses and peers' text.
    "Deadline", "within", "cancel_and_wait", "wait_ended", "REMOTE_OPTIONS", "parse_address",
    "peer_text",
}  # fmt: skip


def test_engine_public_names() -> None:
    """engine.__all__ is exactly the pinned list, and every name in it exists."""
    assert set(engine.__all__) == ENGINE
    for name in engine.__all__:
        assert hasattr(engine, name), name


def test_runner_public_names() -> None:
    """runner.__all__ is exactly the pinned list, and every name in it exists."""
    assert set(runner.__all__) == RUNNER
    for name in runner.__all__:
        assert hasattr(runner, name), name


def test_log_public_names() -> None:
    """engine.log.__all__ (what a host writing its own store uses) is the pinned list."""
    assert set(engine.log.__all__) == LOG
    for name in engine.log.__all__:
        assert hasattr(engine.log, name), name
