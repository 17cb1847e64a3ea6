"""Upstream MCP servers as tool sources, in a Python host: results, annotations, closing."""

from __future__ import annotations

import sys
from pathlib import Path

import psutil
import pytest

pytest.importorskip("mcp")

import mcp_types as types

from engine import CodeMode
from engine._mcp import unwrap
from engine.mcp import McpServers, parse_servers
from tests.engine.conftest import InProcessRunner

LAB = Path(__file__).parent / "fastmcp_server.py"


def _lab(tmp: Path, **settings: object) -> dict[str, object]:
    return {
        "mcpServers": {"lab": {"command": sys.executable, "args": [str(LAB), str(tmp)], **settings}}
    }


def test_a_call_tool_result_object_is_unwrapped_like_a_dict() -> None:
    result = types.CallToolResult(content=[types.TextContent(type="text", text='{"a": 1}')])
    assert unwrap(result) == {"a": 1}
    structured = types.CallToolResult(content=[], structured_content={"b": 2})
    assert unwrap(structured) == {"b": 2}


def test_config_problems_name_the_server() -> None:
    specs, problems = parse_servers(
        {
            "mcpServers": {
                "ok": {"command": "x"},
                "both": {"command": "x", "url": "http://h"},
                "bad": {"command": "x", "approval": "sometimes"},
            }
        }
    )
    assert [s.name for s in specs] == ["ok"]
    assert {p.server for p in problems} == {"both", "bad"}
    assert all(str(p).startswith(f"MCP server {p.server!r}: ") for p in problems)


async def test_annotations_set_approval_and_read_only(tmp_path: Path) -> None:
    servers = await McpServers.start(_lab(tmp_path))
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    try:
        by_name = {t.name: t for t in engine.tools}
        assert by_name["lab__add"].read_only and not by_name["lab__add"].needs_approval
        assert by_name["lab__wipe"].needs_approval and not by_name["lab__wipe"].read_only
        assert not by_name["lab__grow"].needs_approval  # destructiveHint false
    finally:
        await engine.aclose()
    overridden = await McpServers.start(
        _lab(
            tmp_path,
            approval="always",
            tools={"wipe": {"approval": False}, "grow": {"readOnly": True}},
        )
    )
    try:
        by_name = {t.name: t for t in overridden.tools}
        assert by_name["lab__add"].needs_approval  # "always", per server
        assert not by_name["lab__wipe"].needs_approval  # per tool
        assert by_name["lab__grow"].read_only
    finally:
        await overridden.aclose()


async def test_closing_the_engine_ends_every_session_and_child(tmp_path: Path) -> None:
    config = _lab(tmp_path)
    config["mcpServers"]["lab2"] = config["mcpServers"]["lab"]  # type: ignore[index]
    servers = await McpServers.start(config)
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    result = await engine.run_code(
        "return [await tools.lab__add({a: 1, b: 2}), await tools.lab2__add({a: 3, b: 4})]"
    )
    assert result.value == [{"result": 3}, {"result": 7}], result.text
    children = [
        p for p in psutil.Process().children(recursive=True) if str(LAB) in " ".join(p.cmdline())
    ]
    assert len(children) == 2
    await engine.aclose()
    _gone, alive = psutil.wait_procs(children, timeout=30)
    assert not alive, alive
    assert not [
        p for p in psutil.Process().children(recursive=True) if str(LAB) in " ".join(p.cmdline())
    ]
