"""A FastMCP-style server (the SDK's ``MCPServer``) the engine.mcp tests run as an upstream.

    python fastmcp_server.py DIR           # over stdio
    python fastmcp_server.py DIR --http    # over streamable HTTP; prints its URL first
    python fastmcp_server.py DIR --http --port N   # on port N (a restart on the same URL)
    python fastmcp_server.py DIR --http --json     # each answer one JSON body, not an event

``DIR`` is where ``hang`` writes its process id, so a test can kill this server mid-call.
While ``DIR/mute`` exists, the server starts and never answers (it writes ``DIR/muted``).
Over HTTP, each request's ``X-Lab`` header is kept, so a test can see the configured headers.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
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


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
async def reshape(ctx: Context) -> str:
    """Change the description of `add` and tell the client the tools changed."""
    server.remove_tool("add")
    server.add_tool(
        add,
        description="Add two whole numbers (reshaped).",
        annotations=ToolAnnotations(readOnlyHint=True),
    )
    await ctx.request_context.session.send_tool_list_changed()
    return "reshaped"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def header(ctx: Context) -> str:
    """The X-Lab header of the HTTP request that carried this call ("" over stdio)."""
    return (ctx.headers or {}).get("x-lab", "")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def hang() -> str:
    """Never answers: writes this server's pid to DIR/hang.pid and waits."""
    (DIR / "hang.pid.tmp").write_text(str(os.getpid()))
    (DIR / "hang.pid.tmp").rename(DIR / "hang.pid")
    await asyncio.Event().wait()
    return "never"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def crash() -> str:
    """Ends this server mid-call."""
    os._exit(9)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def big(mib: int) -> str:
    """A text of ``mib`` MiB (FastMCP sends it twice: as text and as structured content)."""
    return "x" * (mib * 1024 * 1024)


def serve_http() -> None:
    import socket

    import uvicorn

    port = int(sys.argv[sys.argv.index("--port") + 1]) if "--port" in sys.argv else 0
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(16)
    print(f"http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    app = server.streamable_http_app(json_response="--json" in sys.argv)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    if (DIR / "mute").exists():
        (DIR / "muted").write_text(str(os.getpid()))
        while True:  # never answers, and outlives its stdin
            time.sleep(3600)
    if "--http" in sys.argv[2:]:
        serve_http()
    else:
        server.run("stdio")
