"""McpServers' tools as a host reads and wraps them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from engine import CodeMode
from engine.mcp import McpServers
from tests.engine.conftest import InProcessRunner

LAB = Path(__file__).parent / "fastmcp_server.py"


async def test_a_servers_tools_handler_answers_the_value_and_one_the_host_sets_is_its_own(
    tmp_path: Path,
) -> None:
    """The handler of an upstream server's tool answers the value a script sees (it answered
    the engine's own record of the answer, an ``Answer``, which a host's wrapper could not
    read as the value); a handler the host sets in its place is what a call runs, and a
    result of it that breaks the output schema is the host's tool's defect, not the
    server's."""
    config = {"mcpServers": {"lab": {"command": sys.executable, "args": [str(LAB), str(tmp_path)]}}}
    servers = await McpServers.start(config)
    engine: CodeMode | None = None
    try:
        add = next(t for t in servers.tools if t.original_name == "add")
        inner = add.handler
        assert inner is not None
        assert await inner(a=1, b=2) == {"result": 3}

        async def tenfold(**arguments: Any) -> Any:  # a host's wrapper
            if arguments["a"] == 0:
                return {"result": "none"}
            return {"result": (await inner(**arguments))["result"] * 10}

        add.handler = tenfold
        engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
        code = "try { return await tools.lab__add({ a: %d, b: 2 }) } catch (e) { return e.message }"
        wrapped = await engine.run_code(code % 1)
        assert wrapped.value == {"result": 30}, wrapped.text
        broken = await engine.run_code(code % 0)
        assert broken.value == (
            "tools.lab__add returned a result that does not match its output schema: at result: "
            "expected integer, got string, so its result could not be passed on: a defect of the "
            "tool on the host's side, not of the script"
        ), broken.text
    finally:
        if engine is not None:
            await engine.aclose()
        await servers.aclose()
