"""MCP tools' results reach the script parsed, as the spec says: structured content when
there is some, else the text, parsed when it is JSON; isError fails the call."""

from __future__ import annotations

import datetime
from typing import Any

import mcp.types as mcp_types
import pytest

from engine import CodeMode, RunResult, Tool
from engine._mcp import unwrap
from engine._tools import ToolCallError
from tests.engine.conftest import InProcessRunner


def _nested(levels: int) -> list[Any]:
    """An empty list inside ``levels - 1`` others."""
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


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
        # JSON nested deeper than data may cross stays text, at any depth (parsed, a text
        # 200 deep failed its call as nested too deep, where one 2,000 deep was text).
        ("[" * 200 + "]" * 200, "[" * 200 + "]" * 200),
        ("[" * 2000 + "]" * 2000, "[" * 2000 + "]" * 2000),
        ("[" * 128 + "]" * 128, _nested(128)),
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


@pytest.mark.parametrize("live", [True, False])
async def test_a_structured_result_with_nan_fails_its_call_naming_it(live: bool) -> None:
    """An SDK CallToolResult whose structured content holds NaN or an infinity (a server
    may send them, and the SDK's parse reads them) reached the script as null, without a
    word: its JSON-mode dump writes them so. The call fails naming the number and where."""
    answer = mcp_types.CallToolResult.model_validate_json(
        '{"content": [], "structuredContent": {"price": 1.5, "stock": [3, NaN]}}'
    )
    tool = Tool.from_mcp({"name": "item", "inputSchema": {}}, lambda: answer, source="shop")
    engine = CodeMode([tool], runner=InProcessRunner(), live=live)
    try:
        code = "try { return await tools.shop__item() } catch (e) { return e.message }"
        result = await engine.run_code(code)
    finally:
        await engine.aclose()
    assert result.value == (
        "tools.shop__item returned the number NaN at stock[1], which is not JSON data, so its "
        "result could not be passed on: a defect of the tool on the host's side, not of the "
        "script"
    )
    # What the SDK's model holds of other kinds is read as before (a date as its text).
    given = {"a": [1, "b", None], "on": datetime.date(2026, 12, 7)}
    assert unwrap(mcp_types.CallToolResult(content=[], structuredContent=given)) == {
        "a": [1, "b", None],
        "on": "2026-12-07",
    }


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


@pytest.mark.parametrize("source", [None, "crm"])
@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_host_handlers_result_that_breaks_its_output_schema_is_the_hosts(
    kind: str, source: str | None, inproc: InProcessRunner
) -> None:
    """A result of a host's handler given with ``Tool.from_mcp`` that does not match its
    output schema is the host's tool's defect, said as for any host tool, with a ``source``
    too (that names the tool, not an MCP server: it was said to be "the MCP server 'crm'"'s
    to fix); no MCP server answered it (an upstream server's says the server's maintainer
    must fix it)."""
    answer = {"content": [{"type": "text", "text": '{"hits": "none"}'}]}

    async def async_search() -> dict[str, Any]:
        return answer

    definition = {
        "name": "search",
        "inputSchema": {},
        "outputSchema": {"type": "object", "properties": {"hits": {"type": "array"}}},
    }
    handler = async_search if kind == "async" else lambda: answer
    tool = Tool.from_mcp(definition, handler, source=source)
    result = await _call_of(tool, inproc)
    assert result.value == (
        f"tools.{tool.name} returned a result that does not match its output schema: at hits: "
        "expected array, got string, so its result could not be passed on: a defect of the "
        "tool on the host's side, not of the script"
    ), result.text


async def _call_of(tool: Tool, inproc: InProcessRunner) -> RunResult:
    """A script's call of ``tool`` (taking no arguments): what it returned, or its error's
    message."""
    engine = CodeMode([tool], runner=inproc)
    try:
        return await engine.run_code(
            f"try {{ return await tools.{tool.name}() }} catch (e) {{ return e.message }}"
        )
    finally:
        await engine.aclose()


@pytest.mark.parametrize("source", [None, "crm"])
async def test_a_host_handlers_error_with_no_text_is_the_tools(
    source: str | None, inproc: InProcessRunner
) -> None:
    """A host's handler given with ``Tool.from_mcp`` that answers ``isError`` with no text
    fails the call naming the tool, with a ``source`` too (that names the tool, not an MCP
    server: it was said to be "the MCP server 'crm'"'s error)."""
    tool = Tool.from_mcp(
        {"name": "search", "inputSchema": {}},
        lambda: {"content": [], "isError": True},
        source=source,
    )
    result = await _call_of(tool, inproc)
    assert result.value == (
        "the MCP tool 'search' reported an error and gave no text saying what it was"
    ), result.text


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_from_mcp_tools_handler_answers_the_value_a_host_can_wrap(
    kind: str, inproc: InProcessRunner
) -> None:
    """The handler of a ``Tool.from_mcp`` tool answers the value the script sees, so a host
    that wraps it gets that value (it got the engine's own record of the answer: nested in
    an envelope, the script read its fields, and a wrapper that read it as a dict failed,
    "'Answer' object is not a mapping")."""
    answer = {"content": [{"type": "text", "text": '{"hits": [1, 2]}'}]}

    async def async_search() -> dict[str, Any]:
        return answer

    tool = Tool.from_mcp(
        {"name": "search", "inputSchema": {}},
        async_search if kind == "async" else lambda: answer,
    )
    inner = tool.handler
    assert inner is not None

    async def async_wrapped() -> dict[str, Any]:  # a host's envelope
        return {"wrapped": await inner(), **(await inner())}

    def wrapped() -> dict[str, Any]:
        return {"wrapped": inner(), **inner()}

    tool.handler = async_wrapped if kind == "async" else wrapped
    engine = CodeMode([tool], runner=inproc)
    try:
        result = await engine.run_code(
            "try { return await tools.search() } catch (e) { return e.message }"
        )
    finally:
        await engine.aclose()
    assert result.value == {"wrapped": {"hits": [1, 2]}, "hits": [1, 2]}, result.text
