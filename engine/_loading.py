"""Loading a host's tools from a file, for the CLI.

A Python file defines tools with ``@tool`` (or builds ``Tool`` objects); if it has a ``TOOLS``
list, that list is the tools, otherwise every module-level ``Tool`` in definition order. A
JSON file holds MCP tool definitions (a list, or ``{"tools": [...]}``): enough to describe
and search them, not to run them.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import orjson

from engine._errors import ConfigError
from engine._tools import Tool, ToolDefinitionError, load_mcp_tools


def load_tools(path: str | Path) -> tuple[list[Tool], dict[str, Any]]:
    """The tools a file defines, and the file's namespace (for a ``CONTEXT`` or ``WORKER``)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"no tools file at {path}")
    if path.suffix == ".json":
        try:
            data = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError as e:
            raise ConfigError(f"{path} is not JSON: {e}") from None
        try:
            return load_mcp_tools(data), {}
        except ToolDefinitionError as e:
            raise ConfigError(f"{path}: {e}") from None
    if path.suffix != ".py":
        raise ConfigError(
            f"{path}: a tools file is a .py file of tools or a .json file of MCP tools"
        )
    try:
        namespace = runpy.run_path(str(path), run_name="codemode_tools")
    except ToolDefinitionError as e:
        raise ConfigError(f"{path}: {e}") from None
    declared = namespace.get("TOOLS")
    if declared is not None:
        if not isinstance(declared, list | tuple) or not all(isinstance(t, Tool) for t in declared):
            raise ConfigError(f"{path}: TOOLS must be a list of tools")
        tools = list(declared)
    else:
        tools = [value for value in namespace.values() if isinstance(value, Tool)]
    if not tools:
        raise ConfigError(f"{path} defines no tools (use @tool, or a TOOLS list)")
    return tools, namespace
