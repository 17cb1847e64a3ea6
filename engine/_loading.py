"""Loading a host's tools from a file, for the CLI.

A Python file defines tools with ``@tool`` (or builds ``Tool`` objects); if it has a ``TOOLS``
list, that list is the tools, otherwise every module-level ``Tool`` in definition order. A
JSON file holds MCP tool definitions (a list, or ``{"tools": [...]}``): enough to describe
and search them, not to run them.
"""

from __future__ import annotations

import runpy
import sys
import traceback
from pathlib import Path
from typing import Any

import orjson

from engine._errors import ConfigError, ToolDefinitionError
from engine._functions import as_tools
from engine._stopping import Stopped
from engine._tools import Tool, load_mcp_tools


def load_tools(path: str | Path) -> tuple[list[Tool], dict[str, Any]]:
    """The tools a file defines, and the file's namespace (for a ``CONTEXT`` or ``WORKER``)."""
    path = Path(path)
    try:
        there = path.is_file()
    except OSError as e:  # a directory it may not search, a name too long
        raise ConfigError(f"cannot look for the tools file {path} ({e.strerror or e})") from None
    if not there:
        if path.is_dir():  # a folder of tools (or "."): the file in it is what is wanted
            raise ConfigError(
                f"the tools file {path} is a directory: give the file itself (a .py file of "
                "@tool functions, or a .json file of MCP tools)"
            )
        raise ConfigError(f"no tools file at {path}")
    if path.suffix == ".json":
        try:
            data = orjson.loads(path.read_bytes())
        except OSError as e:
            raise ConfigError(f"cannot read the tools file {path} ({e.strerror or e})") from None
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
    # As `python tools.py` would, so the file can import modules that sit beside it: its
    # folder first while it loads, then last, where a module there that a tool imports later
    # is still found but does not stand in for a package the engine imports after it (a
    # helper named mcp.py beside the tools hid the MCP SDK: the MCP servers failed to start).
    folder = str(path.absolute().parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        namespace = runpy.run_path(str(path), run_name="codemode_tools")
    except ToolDefinitionError as e:
        raise ConfigError(f"{path}: {e}") from None
    except SyntaxError as e:
        where = f"{path}, line {e.lineno}" if e.lineno else str(path)
        raise ConfigError(f"{where}: syntax error: {e.msg}; fix the tools file") from None
    except (KeyboardInterrupt, Stopped):
        raise  # the user's Ctrl-C (or SIGTERM) while the file loads: the command stops
    except BaseException as e:
        # The host's own code failed while loading (a BaseException of its own, a
        # CancelledError or a GeneratorExit included: running the file awaits nothing, so
        # they are the file's): say where, in one line, and how to see the whole traceback.
        raise ConfigError(
            f"{path}{_line_in(e, path)}: loading the tools raised {type(e).__name__}: "
            f"{_first_line(e)}; fix it (run `python {path}` to see the traceback)"
        ) from None
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)
            sys.path.append(folder)
    declared = namespace.get("TOOLS")
    if declared is not None:
        if not isinstance(declared, list | tuple):
            raise ConfigError(f"{path}: TOOLS must be a list of tools")
        try:
            tools = as_tools(declared)
        except ToolDefinitionError as e:
            raise ConfigError(f"{path}: TOOLS: {e}") from None
    else:
        tools = [value for value in namespace.values() if isinstance(value, Tool)]
    if not tools:
        raise ConfigError(f"{path} defines no tools (use @tool, or a TOOLS list)")
    worker = namespace.get("WORKER")
    if worker is not None and not callable(worker):
        raise ConfigError(
            f"{path}: WORKER is {type(worker).__name__}; make it a function that takes the "
            "calls trigger"
        )
    return tools, namespace


def _line_in(error: BaseException, path: Path) -> str:
    """``, line N`` for the innermost frame of the traceback that is in the tools file."""
    line = None
    target = str(path.resolve())
    for frame, lineno in traceback.walk_tb(error.__traceback__):
        try:
            if str(Path(frame.f_code.co_filename).resolve()) == target:
                line = lineno
        except (OSError, ValueError):
            continue
    return f", line {line}" if line is not None else ""


def _first_line(error: BaseException) -> str:
    try:
        text = str(error).strip().splitlines()
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # the file's own __str__
        return f"(its message cannot be read: {type(e).__name__})"
    first = text[0] if text else "(no message)"
    return first if len(first) <= 300 else first[:297] + "..."
