"""The public surface of each package is pinned: a name added or dropped is a decision,
made here, not an accident of an import."""

from __future__ import annotations

import engine
import runner

ENGINE = {
    "Attachment", "BlobStore", "CallEntry", "CallNotWaiting", "CodeMode", "CodeModeError",
    "Config", "ConfigError", "Limits", "LogStore", "MemoryStore", "PROPOSED", "RunResult",
    "RunnerConfig", "ScriptNotFound", "ScriptRecord", "ScriptTooLarge", "Skill", "SqliteStore",
    "StepUnavailable", "TEXT_BUDGET", "Tool", "ToolCallError", "ToolContext",
    "ToolDefinitionError", "TypeChecker", "Worker", "build_runner", "load_mcp_tools", "normalize",
    "parse_size", "proposed_worker", "tool",
}  # fmt: skip

RUNNER = {
    "FileMissing", "FileReader", "ProcessRunner", "ProcessStats", "RemoteRunner", "RunError",
    "RunnerService", "ScriptRunner", "Slots", "Step", "TEXT_BOUNDS", "bounded",
    "default_slot_count", "serve",
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
