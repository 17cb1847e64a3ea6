"""A FastMCP-style server (the SDK's ``MCPServer``) the engine.mcp tests run as an upstream.

    python fastmcp_server.py DIR           # over stdio
    python fastmcp_server.py DIR --http    # over streamable HTTP; prints its URL first
    python fastmcp_server.py DIR --http --port N   # on port N (a restart on the same URL)
    python fastmcp_server.py DIR --http --json     # each answer one JSON body, not an event
    python fastmcp_server.py DIR --http --broken   # a call of a tool named in BROKEN
        (``http_error``, ``not_json``, ...) gets that broken HTTP answer instead of the tool's

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
from typing import Any

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


def _text_add() -> Any:
    def add(a: int, b: int) -> str:  # named as the first: its schemas' titles are the same
        """Add two whole numbers."""
        return str(a + b)

    return add


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
async def retype(ctx: Context) -> str:
    """Make `add` answer text (its input and description as they were) and tell the client
    the tools changed."""
    server.remove_tool("add")
    server.add_tool(_text_add(), annotations=ToolAnnotations(readOnlyHint=True))
    await ctx.request_context.session.send_tool_list_changed()
    return "retyped"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def header(ctx: Context) -> str:
    """The X-Lab header of the HTTP request that carried this call ("" over stdio)."""
    return (ctx.headers or {}).get("x-lab", "")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def client(ctx: Context) -> str:
    """The name and version the client gave in its initialize request."""
    params = ctx.request_context.session.client_params
    return f"{params.client_info.name} {params.client_info.version}" if params else ""


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


# What a call of each of these tools gets over HTTP with --broken: status, type, body.
BROKEN = {
    "http_error": (500, "text/plain", b"internal oops\nat handler.py:12"),
    "not_json": (200, "application/json", b"{not json"),
    "not_json_event": (200, "text/event-stream", b"event: message\ndata: {not json\n\n"),
    "rpc_error": (
        500,
        "application/json",
        b'{"jsonrpc": "2.0", "id": null, "error": {"code": -32000, "message": "rate limited"}}',
    ),
    "detail_error": (503, "application/json", b'{"detail": "upstream down"}'),
    # None: 65 MiB of body, sent a MiB at a time (past the bound on an MCP message).
    "huge_error": (500, "text/event-stream", None),
}


def _fine() -> str:
    return "fine"


# Each a tool of its own, answered as BROKEN says over HTTP with --broken ("fine" else).
for _name, (_status, _kind, _) in BROKEN.items():
    server.tool(
        name=_name,
        description=f"Answered with HTTP {_status} and a {_kind} body over HTTP with --broken.",
        annotations=ToolAnnotations(readOnlyHint=True),
    )(_fine)


def _broken(app: Any) -> Any:
    """``app``, but a call of a tool in BROKEN gets that answer."""
    import json

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            name = (json.loads(body).get("params") or {}).get("name")
        except (ValueError, AttributeError):
            name = None
        if name in BROKEN:
            status, kind, text = BROKEN[name]
            headers = [(b"content-type", kind.encode())]
            await send({"type": "http.response.start", "status": status, "headers": headers})
            if text is None:
                for _ in range(65):
                    await send(
                        {"type": "http.response.body", "body": b"x" * (1 << 20), "more_body": True}
                    )
                text = b""
            await send({"type": "http.response.body", "body": text})
            return
        given = False

        async def again() -> Any:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await app(scope, again, send)

    return wrapped


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
    if "--broken" in sys.argv:
        app = _broken(app)
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
