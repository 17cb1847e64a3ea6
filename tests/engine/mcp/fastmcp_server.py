"""A FastMCP-style server (the SDK's ``MCPServer``) the engine.mcp tests run as an upstream.

    python fastmcp_server.py DIR

``DIR`` is where ``hang`` writes its process id, so a test can kill this server mid-call.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

DIR = Path(sys.argv[1])
server = MCPServer("lab")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def fail(reason: str) -> str:
    """Always fails, with the reason given."""
    raise ToolError(f"lab refused: {reason}")


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def wipe(target: str) -> str:
    """Wipe a target (destructive: a person approves it first)."""
    (DIR / f"wiped-{target}").write_text("wiped")
    return f"wiped {target}"


def extra(word: str) -> str:
    """Shout a word back (added mid-session by grow)."""
    return word.upper() + "!"


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
async def grow(ctx: Context) -> str:
    """Add the tool `extra` and tell the client the tools changed."""
    server.add_tool(extra, annotations=ToolAnnotations(readOnlyHint=True))
    await ctx.request_context.session.send_tool_list_changed()
    return "grown"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def hang() -> str:
    """Never answers: writes this server's pid to DIR/hang.pid and waits."""
    (DIR / "hang.pid.tmp").write_text(str(os.getpid()))
    (DIR / "hang.pid.tmp").rename(DIR / "hang.pid")
    await asyncio.Event().wait()
    return "never"


if __name__ == "__main__":
    server.run("stdio")
