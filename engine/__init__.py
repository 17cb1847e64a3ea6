"""The host side of code mode: tools, declarations, the replay loop and the session log.

from engine import CodeMode, tool

@tool
def weather(city: str) -> dict:
    "The weather in a city."
    ...

result = await CodeMode(tools=[weather]).run_code(code)
print(result.text)
"""

from engine._codemode import CodeMode, RunResult
from engine._config import Config, RunnerConfig, build_runner
from engine._errors import (
    CallAbandoned,
    CallNotWaiting,
    CodeModeError,
    ConfigError,
    FilesMissing,
    ScriptNotFound,
    StepUnavailable,
    StoreUnavailable,
    ToolCallError,
    ToolDefinitionError,
    ToolsMissing,
)
from engine._events import Event
from engine._files import Attachment, BlobStore
from engine._functions import tool
from engine._limits import Limits, parse_size
from engine._render import TEXT_BUDGET
from engine._skills import Skill
from engine._source import ScriptTooLarge, normalize
from engine._tools import Tool, ToolContext, load_mcp_tools
from engine._worker import PROPOSED, Worker, proposed_worker
from engine.languages import LANGUAGES, Language
from engine.languages.javascript import TypeChecker
from engine.languages.python import PythonTypeChecker
from engine.log import (
    CallEntry,
    LeaseLost,
    LogStore,
    MemoryStore,
    PostgresStore,
    ScriptRecord,
    SqliteStore,
)

__all__ = [
    "LANGUAGES",
    "PROPOSED",
    "TEXT_BUDGET",
    "Attachment",
    "BlobStore",
    "CallAbandoned",
    "CallEntry",
    "CallNotWaiting",
    "CodeMode",
    "CodeModeError",
    "Config",
    "ConfigError",
    "Event",
    "FilesMissing",
    "Language",
    "LeaseLost",
    "Limits",
    "LogStore",
    "MemoryStore",
    "PostgresStore",
    "PythonTypeChecker",
    "RunResult",
    "RunnerConfig",
    "ScriptNotFound",
    "ScriptRecord",
    "ScriptTooLarge",
    "Skill",
    "SqliteStore",
    "StepUnavailable",
    "StoreUnavailable",
    "Tool",
    "ToolCallError",
    "ToolContext",
    "ToolDefinitionError",
    "ToolsMissing",
    "TypeChecker",
    "Worker",
    "build_runner",
    "load_mcp_tools",
    "normalize",
    "parse_size",
    "proposed_worker",
    "tool",
]
