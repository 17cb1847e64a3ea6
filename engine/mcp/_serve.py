"""``codemode mcp serve``: code mode as an MCP server, for any MCP client.

The server has two tools:

- ``run_code``: the engine's own definition, the tools' TypeScript declarations in its
  description;
- ``continue_script``: continue a script that paused (after a person answered an approval,
  or after this server restarted), by its id.

A call that needs approval is asked through MCP elicitation when the client supports it
(accept with ``approve: true`` runs it; anything else refuses it, and the script sees the
refusal); otherwise the result says the script is paused and how a person answers
(``codemode approve``), after which ``continue_script`` goes on. Each step of a script sends a
progress notification when the client asked for progress. Files the script shows and media it
returns (an MCP tool's image, say) reach the client as MCP image or audio content. Scripts live
in the engine's session log, so with a durable store they survive a restart of the server.

When an upstream server changes its tools and the ``run_code`` description changes with them,
the clients are sent ``notifications/tools/list_changed``.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from engine._codemode import CodeMode
from engine._errors import CallNotWaiting, CodeModeError
from engine._live import takes_live
from engine._mcp import MEDIA_TYPES
from engine._result import RunResult
from engine._tools import Tool
from runner import FileReader, LiveRun, ScriptRunner, Step
from sandbox import protocol
from sandbox.protocol import Script

logger = logging.getLogger("codemode.mcp")

CONTINUE = "continue_script"
SERVER_NAME = "codemode"

# The progress reporter of the MCP request whose script is stepping, if it asked for one.
_progress: contextvars.ContextVar[Callable[[Step], Awaitable[None]] | None] = (
    contextvars.ContextVar("codemode_mcp_progress", default=None)
)


class ProgressRunner(ScriptRunner):
    """A runner that reports each step it runs to the MCP request driving the script."""

    def __init__(self, inner: ScriptRunner) -> None:
        self.inner = inner
        self._live = takes_live(inner)

    async def run(
        self,
        script: Script,
        files: FileReader | None = None,
        *,
        tenant: str = "default",
        live: bool = False,
    ) -> Step:
        if live and self._live:
            step = await self.inner.run(script, files, tenant=tenant, live=True)
        else:
            step = await self.inner.run(script, files, tenant=tenant)
        return await _reported(step)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _reported(step: Step) -> Step:
    """``step``, reported to the MCP request driving the script; its live run (if any)
    reports the segments it runs too."""
    report = _progress.get()
    if report is not None:
        with contextlib.suppress(Exception):  # a client that left does not stop the script
            await report(step)
    if step.live is not None:
        step.live = _ProgressLive(step.live)
    return step


class _ProgressLive(LiveRun):
    """A live run whose segments are reported as steps (see :class:`ProgressRunner`)."""

    def __init__(self, inner: LiveRun) -> None:
        self.inner = inner
        self.known, self.waiting = inner.known, inner.waiting

    @property
    def memory_bytes(self) -> int:
        return self.inner.memory_bytes

    async def resume(self, records: list[protocol.Record]) -> Step:
        return await _reported(await self.inner.resume(records))

    async def close(self) -> None:
        await self.inner.close()


class CodeModeServer:
    """An MCP server in front of one :class:`CodeMode` (see the module docstring)."""

    def __init__(self, engine: CodeMode, *, elicitation: bool = True) -> None:
        if not isinstance(engine.runner, ProgressRunner):
            engine.runner = ProgressRunner(engine.runner)
        self.engine = engine
        self.elicitation = elicitation
        self._sessions: weakref.WeakSet[Any] = weakref.WeakSet()
        self._description = engine.definition()["description"]
        if engine._mcp is not None:
            engine._mcp.subscribe(self._tools_changed)

    # ---- the MCP side ----

    def server(self) -> Any:
        """The SDK's low-level ``Server`` with the handlers of this one."""
        from mcp.server.lowlevel import Server

        return Server(
            SERVER_NAME,
            version=_version(),
            instructions=(
                "Write a script for run_code that calls the tools declared in its description; "
                "only what the script prints and returns comes back."
            ),
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    def tools(self) -> list[dict[str, Any]]:
        """The tool definitions this server lists, in MCP shape."""
        return [
            self.engine.definition("mcp"),
            {
                "name": CONTINUE,
                "description": (
                    "Continue a script that paused (it waited for a person's approval, or this "
                    "server restarted), by the script id its result gave. Returns what "
                    "run_code would: the script's result, or where it paused again."
                ),
                "inputSchema": {
                    "type": "object",
                    "properties": {"script_id": {"type": "string", "minLength": 1}},
                    "required": ["script_id"],
                    "additionalProperties": False,
                },
            },
        ]

    async def _list_tools(self, ctx: Any, params: Any) -> Any:
        import mcp_types as types

        self._sessions.add(ctx.session)
        return types.ListToolsResult.model_validate({"tools": self.tools()})

    async def _call_tool(self, ctx: Any, params: Any) -> Any:
        import mcp_types as types

        self._sessions.add(ctx.session)
        arguments = params.arguments or {}
        try:
            result = await self._answer(ctx, params.name, arguments)
        except CodeModeError as e:
            return types.CallToolResult.model_validate(
                {"content": [{"type": "text", "text": str(e)}], "isError": True}
            )
        return types.CallToolResult.model_validate(content_of(result))

    async def _answer(self, ctx: Any, name: str, arguments: dict[str, Any]) -> RunResult:
        engine = self.engine
        session = ctx.session
        steps = 0

        async def report(step: Step) -> None:
            nonlocal steps
            steps += 1
            calls = len(step.calls) if step.outcome == "calls" else 0
            message = f"step {steps}: {step.outcome}" + (f", {calls} calls" if calls else "")
            await session.report_progress(steps, None, message)

        token = _progress.set(report)
        try:
            if name == "run_code":
                code = arguments.get("code")
                if not isinstance(code, str):
                    raise CodeModeError('run_code takes {"code": "<the script>"}')
                result = await engine.run_code(code)
            elif name == CONTINUE:
                script_id = arguments.get("script_id")
                if not isinstance(script_id, str) or not script_id:
                    raise CodeModeError(f'{CONTINUE} takes {{"script_id": "<id>"}}')
                result = await engine.resume(script_id)
            else:
                raise CodeModeError(engine.direct_call_error(name))
            while result.status == "paused" and self._can_elicit(session):
                if not await self._ask(session, ctx, result):
                    break
                result = await engine.resume(result.script_id)
        finally:
            _progress.reset(token)
        return result

    def _can_elicit(self, session: Any) -> bool:
        if not self.elicitation:
            return False
        import mcp_types as types

        capability = types.ClientCapabilities(elicitation=types.ElicitationCapability())
        try:
            return bool(session.check_client_capability(capability))
        except Exception:
            return False

    async def _ask(self, session: Any, ctx: Any, result: RunResult) -> bool:
        """Ask a person, through the client, about each call waiting for approval; True when
        each got an answer (so the script can go on)."""
        waiting = [w for w in result.waiting if w.get("reason") == "approval"]
        if not waiting or len(waiting) != len(result.waiting):
            return False
        for call in waiting:
            arguments = orjson.dumps(call["arguments"], option=orjson.OPT_INDENT_2).decode()
            if len(arguments) > 4000:
                arguments = arguments[:4000] + "\n..."
            try:
                answer = await session.elicit_form(
                    message=(
                        f"A script wants to call tools.{call['name']} with:\n{arguments}\n"
                        "Allow this call?"
                    ),
                    requested_schema={
                        "type": "object",
                        "properties": {
                            "approve": {
                                "type": "boolean",
                                "title": "Allow this call",
                                "description": "true runs the call; false refuses it",
                            }
                        },
                        "required": ["approve"],
                    },
                    related_request_id=ctx.request_id,
                )
            except Exception as e:
                logger.warning("elicitation failed, the script stays paused: %s", e)
                return False
            approved = answer.action == "accept" and (answer.content or {}).get("approve") is True
            try:
                if approved:
                    await self.engine.approve(result.script_id, call["call_id"])
                else:
                    why = {"decline": "declined", "cancel": "dismissed"}.get(
                        answer.action, "did not allow"
                    )
                    await self.engine.reject(
                        result.script_id,
                        call["call_id"],
                        f"a person {why} tools.{call['name']}",
                    )
            except CallNotWaiting:
                pass  # answered elsewhere meanwhile: that answer stands
        return True

    def _tools_changed(self, tools: list[Tool]) -> None:
        """Tell the clients when the run_code description changed (new tools are deferred,
        so this is only when a declared tool changed or went away)."""
        import asyncio

        description = self.engine.definition()["description"]
        if description == self._description:
            return
        self._description = description
        for session in list(self._sessions):
            task = asyncio.ensure_future(session.send_tool_list_changed())
            task.add_done_callback(_quiet)

    # ---- transports ----

    async def run_stdio(self) -> None:
        """Serve one client over this process's stdin and stdout until it closes them."""
        from mcp.server.stdio import stdio_server

        server = self.server()
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options(_notifications()))

    async def run_http(
        self,
        host: str,
        port: int,
        *,
        path: str = "/mcp",
        on_ready: Callable[[str], None] | None = None,
    ) -> None:
        """Serve clients over streamable HTTP at ``http://host:port/mcp`` until cancelled.
        Port 0 takes a free port; ``on_ready`` is told the URL once the socket listens."""
        import socket

        import uvicorn

        server = self.server()
        app = server.streamable_http_app(streamable_http_path=path, host=host)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        config = uvicorn.Config(app, log_level="warning", lifespan="on")
        if on_ready is not None:
            on_ready(f"http://{shown}:{bound}{path}")
        try:
            await uvicorn.Server(config).serve(sockets=[sock])
        finally:
            sock.close()


def content_of(result: RunResult) -> dict[str, Any]:
    """The ``CallToolResult`` (as a dict) for a script's result: its text, then each file it
    showed and each image or audio block it returned, as MCP content."""
    text = result.text
    media = list(result.media)
    for block in _returned_media(result.value):
        media.append({"type": block["type"], "data": block["data"], "mimeType": block["mimeType"]})
        # The bytes reach the client as content; the text names them instead of spelling them.
        text = text.replace(
            block["data"], f"<{block['mimeType']}, {len(block['data']) * 3 // 4:,} bytes, below>"
        )
    if result.status == "paused":
        text += _how_to_continue(result)
    return {
        "content": [{"type": "text", "text": text}, *media],
        "isError": result.status == "failed",
    }


def _returned_media(value: Any) -> list[dict[str, Any]]:
    blocks = value if isinstance(value, list) else [value]
    return [
        b
        for b in blocks
        if isinstance(b, dict)
        and b.get("type") in MEDIA_TYPES
        and isinstance(b.get("data"), str)
        and isinstance(b.get("mimeType"), str)
    ]


def _how_to_continue(result: RunResult) -> str:
    approvals = [w for w in result.waiting if w.get("reason") == "approval"]
    lines = [f"\nScript id: {result.script_id}"]
    if approvals:
        lines.append(
            "A person answers each call waiting for approval, outside this conversation: "
            + "; ".join(
                f"`codemode approve {result.script_id} {w['call_id']}` (or `codemode reject ...`)"
                for w in approvals
            )
            + f". Once they have, call {CONTINUE} with this script id to go on."
        )
    else:
        lines.append(f"Call {CONTINUE} with this script id to go on.")
    return "\n".join(lines)


def _notifications() -> Any:
    from mcp.server.lowlevel.server import NotificationOptions

    return NotificationOptions(tools_changed=True)


def _quiet(task: Any) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.info("could not tell a client its tools changed: %s", task.exception())


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("codemode")
    except metadata.PackageNotFoundError:
        return "0+unknown"
