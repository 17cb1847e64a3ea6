"""The corpus of real-world tool schemas in tests/engine/schemas, as tools."""

from __future__ import annotations

import json
from pathlib import Path

from engine._tools import Tool, load_mcp_tools, unique_tools

SCHEMAS = Path(__file__).parent / "schemas"


def load_corpus() -> list[Tool]:
    """Every tool of tests/engine/schemas: a file holding {"tools": [...]} is a source named
    after the file; a file holding a plain list has no source."""
    tools: list[Tool] = []
    for path in sorted(SCHEMAS.glob("*.json")):
        data = json.loads(path.read_text())
        tools += load_mcp_tools(data, source=path.stem if isinstance(data, dict) else None)
    return unique_tools(tools)
