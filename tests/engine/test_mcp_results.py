"""MCP tools' results reach the script parsed, as the spec says: structured content when
there is some, else the text, parsed when it is JSON; isError fails the call."""

from __future__ import annotations

from typing import Any

import pytest

from engine import CodeMode, Tool
from engine._mcp import unwrap
from engine._tools import ToolCallError
from tests.engine.conftest import InProcessRunner


@pytest.mark.parametrize(
    ("result", "seen"),
    [
        ({"content": [{"type": "text", "text": '{"a": 1}'}]}, {"a": 1}),
        ({"content": [{"type": "text", "text": "plain words"}]}, "plain words"),
        ({"content": [{"type": "text", "text": "x"}], "structuredContent": {"b": 2}}, {"b": 2}),
        ("[1, 2, 3]", [1, 2, 3]),
        ("42", 42),
        ("-9007199254740992", -(2**53)),
        ("1.5e3", 1500.0),
        # A bare integer a number would round (an id sent as text) stays the text it was:
        # the script read 1152921504606847000, or 1.2345678901234568e+29 for the second.
        ("1152921504606846977", "1152921504606846977"),
        (" 123456789012345678901234567890\n", " 123456789012345678901234567890\n"),
        ({"content": [{"type": "text", "text": "-9007199254740993"}]}, "-9007199254740993"),
        # In JSON, a number still (the run warns that the script reads it rounded).
        ('{"id": 1152921504606846977}', {"id": 1152921504606846977}),
        ("{not json", "{not json"),
        ({"already": "data"}, {"already": "data"}),
        # A resource link or an embedded resource beside text: every block, in order (the
        # script got the text alone, the link and the resource's data left out).
        (
            {
                "content": [
                    {"type": "text", "text": "Here is the file:"},
                    {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "DATA"}},
                    {"type": "resource_link", "uri": "file:///r.pdf", "name": "r"},
                ]
            },
            [
                {"type": "text", "text": "Here is the file:"},
                {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "DATA"}},
                {"type": "resource_link", "uri": "file:///r.pdf", "name": "r"},
            ],
        ),
        (
            {"content": [{"type": "resource_link", "uri": "file:///r.pdf", "name": "r"}]},
            [{"type": "resource_link", "uri": "file:///r.pdf", "name": "r"}],
        ),
    ],
)
def test_unwrap(result: Any, seen: Any) -> None:
    """Each shape of MCP answer becomes the value the script sees."""
    assert unwrap(result) == seen


def test_is_error_fails_the_call() -> None:
    """isError makes the call fail with the tool's text."""
    with pytest.raises(ToolCallError, match="rate limited"):
        unwrap({"content": [{"type": "text", "text": "rate limited"}], "isError": True})


async def test_mcp_tool_result_is_parsed_in_the_script(inproc: InProcessRunner) -> None:
    """A script calling an MCP tool gets its JSON text parsed, and catches its isError."""

    async def search(query: str) -> dict[str, Any]:
        if query == "bad":
            return {"content": [{"type": "text", "text": "index offline"}], "isError": True}
        return {"content": [{"type": "text", "text": '{"hits": [1, 2]}'}]}

    tool = Tool.from_mcp(
        {
            "name": "search",
            "description": "Search.",
            "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
        search,
        source="docs",
    )
    engine = CodeMode([tool], runner=inproc)
    code = """
    const ok = await tools.docs__search({ query: "x" });
    let err; try { await tools.docs__search({ query: "bad" }) } catch (e) { err = e.message }
    return { hits: ok.hits.length, err };
    """
    result = await engine.run_code(code)
    assert result.value == {"hits": 2, "err": "index offline"}
