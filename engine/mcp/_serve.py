"""``codemode mcp serve``: code mode as an MCP server, for any MCP client.

The server has two tools:

- ``run_code``: the engine's own definition, the tools' TypeScript declarations in its
  description;
- ``continue_script``: continue a script that paused (after a person answered an approval,
  or after this server restarted), by its id.

A call that needs approval is asked through MCP elicitation when the client supports it
(accept with ``approve: true`` runs it; anything else refuses it, and the script sees the
refusal); otherwise the result says the script is paused and how a person answers
(``codemode approve`` with the flags that reach this server's log, or, when the log is in
memory, that no one can and what to change), after which ``continue_script`` goes on. A
script another host drives then (a ``codemode worker`` that took it once the answer landed)
is waited for, and its outcome is the answer.
Each step of a script, and each call that returns, fails or waits, sends a progress
notification (from the engine's events) when the client asked for progress. Files the script
shows and media it returns (an MCP tool's image, say) reach the client as MCP image or audio
content. Scripts live in the engine's session log, so with a durable store they survive a
restart of the server.

When an upstream server changes its tools and the ``run_code`` description changes with them,
the clients are sent ``notifications/tools/list_changed``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import itertools
import logging
import os
import resource
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import orjson
from pydantic_core import from_json

from engine._codemode import ELSEWHERE_WAIT, CodeMode
from engine._errors import CallNotWaiting, CodeModeError, ConfigError
from engine._events import Event
from engine._result import RunResult
from engine._schema import only_argument, script_argument
from engine._tools import Tool
from engine.mcp._config import SERVER_NAME, codemode_version
from engine.mcp._stdio import MAX_MESSAGE, deep_id, unread_answer, well_formed_json
from engine.mcp._upstream import summary
from sandbox.protocol import size_text

logger = logging.getLogger("codemode.mcp")

CONTINUE = "continue_script"
# Seconds requests in flight have to end when the HTTP server stops; a script cut short is
# in the session log, where continue_script (or `codemode resume`) takes it up.
STOP_GRACE = 2
# While a request waits for the outcome of a script another host drives, it says so this
# often (seconds): a client that ends a request which shows no progress for a while (the
# TypeScript SDK's 60 s, with resetTimeoutOnProgress) keeps it.
ELSEWHERE_TELL = 10.0
# Seconds a connection to the HTTP server has to send a whole request head, and its body
# (see BODY_PROGRESS), from when it opens or its last answer ends. uvicorn waits for a first
# request for ever, and for the rest of one whose first byte came (its keep-alive timer
# stops at any byte): a client that connects and says nothing, or a byte a minute, held a
# connection and its descriptor.
REQUEST_WAIT = 30.0
# During a request's body the wait starts again each time this many bytes of it came since
# it last started: a slow client still sending a large body is not cut off, one that sends a
# byte a minute is.
BODY_PROGRESS = 64 * 1024
# How often the HTTP server says it closes connections for want of open files (seconds).
CROWDED_TELL = 10.0
# Connections waiting to be accepted by the HTTP server, and accepted at a time.
LISTEN_BACKLOG = 128


class CodeModeServer:
    """An MCP server in front of one :class:`CodeMode` (see the module docstring)."""

    def __init__(
        self, engine: CodeMode, *, elicitation: bool = True, log_flags: str | None = None
    ) -> None:
        """``log_flags`` are the ``codemode approve`` flags that reach ``engine``'s session
        log (``--data-dir /abs/dir``); None says the log is in memory, out of reach of any
        other process, and a paused result says so."""
        self.engine = engine
        self.elicitation = elicitation
        self.log_flags = log_flags
        self._sessions: weakref.WeakSet[Any] = weakref.WeakSet()
        self._description = engine.definition()["description"]
        self._progress: dict[str, _Progress] = {}
        # Scripts whose approval the client was asked for and could not give (its error):
        # their result says to ask again, not that the client cannot be asked.
        self._ask_failed: dict[str, str] = {}
        engine.add_listener(self._on_event)
        if engine._mcp is not None:
            engine._mcp.subscribe(self._tools_changed)

    # ---- the MCP side ----

    def server(self) -> Any:
        """The SDK's low-level ``Server`` with the handlers of this one."""
        from mcp.server.lowlevel import Server

        return Server(
            SERVER_NAME,
            version=codemode_version(),
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
                    "server restarted) or that ran on another host, by the script id its "
                    "result gave. Returns what run_code would: the script's result, or where "
                    "it paused again."
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
        return types.CallToolResult.model_validate(self.content_of(result))

    async def _answer(self, ctx: Any, name: str, arguments: dict[str, Any]) -> RunResult:
        engine = self.engine
        session = ctx.session
        progress = _Progress(session)
        ids: list[str] = []

        def started(script_id: str) -> None:
            ids.append(script_id)
            self._progress[script_id] = progress

        try:
            if name == "run_code":
                code = script_argument(arguments)
                result = await engine.run_code(code, on_start=started)
            elif name == CONTINUE:
                script_id = only_argument(arguments, name, "script_id", "<id>")
                started(script_id)
                result = await self._resume(script_id, progress)
            else:
                raise CodeModeError(engine.direct_call_error(name, ("run_code", CONTINUE)))
            while result.status == "paused" and self._can_elicit(session):
                if not await self._ask(session, ctx, result):
                    break
                result = await self._resume(result.script_id, progress)
        finally:
            for script_id in ids:
                if self._progress.get(script_id) is progress:
                    del self._progress[script_id]
            await progress.close()  # every notification is sent before the result
        return result

    async def _resume(self, script_id: str, progress: _Progress) -> RunResult:
        """``engine.resume(script_id)``, but a script another host drives (a ``codemode
        worker`` that took it once its approval landed) is waited for, up to
        :data:`ELSEWHERE_WAIT` seconds, and its outcome is the result (the client was
        answered ``elsewhere`` at once, its result out of the model's reach)."""
        result = await self.engine.resume(script_id)
        deadline = time.monotonic() + ELSEWHERE_WAIT
        while result.status == "elsewhere" and (left := deadline - time.monotonic()) > 0:
            progress.tell("the script runs on another host; waiting for its outcome")
            result = await self.engine.resume(script_id, wait=min(ELSEWHERE_TELL, left))
        return result

    def _on_event(self, event: Event) -> None:
        """The engine's events, as progress notifications to the request driving the script."""
        progress = self._progress.get(event.script_id)
        if progress is None:
            return
        if event.kind == "step":
            stats = event.stats or {}
            calls = stats.get("calls") or 0
            progress.tell(
                f"step {event.step}: {stats.get('outcome')}" + (f", {calls} calls" if calls else "")
            )
        elif event.kind in ("call.done", "call.failed", "call.waiting"):
            what = {"call.done": "done", "call.failed": "failed"}.get(
                event.kind, f"waits for {event.reason}"
            )
            progress.tell(f"tools.{event.tool} {what}")

    def _can_elicit(self, session: Any) -> bool:
        """Whether approvals are asked of ``session``'s client: it declared elicitation in
        form mode, or in no mode named (which MCP reads as form mode). A client of URL mode
        alone is sent no form, which MCP forbids (it refused each one, and the result said to
        ask again, for ever)."""
        if not self.elicitation:
            return False
        capabilities = getattr(session, "client_capabilities", None)
        elicitation = getattr(capabilities, "elicitation", None)
        if elicitation is None:
            return False
        return elicitation.form is not None or elicitation.url is None

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
                # One line: a client's answer that is no elicitation result was pydantic's
                # whole report, links included, in the log and in the model's result.
                why = summary(e)
                if type(e).__name__ == "ValidationError":
                    why = f"its answer does not follow MCP: {why}"
                logger.warning("elicitation failed, the script stays paused: %s", why)
                self._ask_failed[result.script_id] = why
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
        try:
            with _stdin_lines() as stdin:
                async with (
                    stdio_server(stdin=stdin) as (sdk_read, write),
                    anyio.create_task_group() as tasks,
                ):
                    handed, read = anyio.create_memory_object_stream[Any](0)
                    tasks.start_soon(_answer_refused, stdin.lines, sdk_read, handed, write)
                    await server.run(
                        read, write, server.create_initialization_options(_notifications())
                    )
                    tasks.cancel_scope.cancel()
        except* (BrokenPipeError, ConnectionResetError):
            # The client went away while an answer was being written (killed, or it closed
            # its end mid-script): that ends the serving, as its closing stdin does. Output
            # goes nowhere from here, so the exit's flush of stdout raises nothing more.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            print("codemode: the MCP client went away; stopping", file=sys.stderr)

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

        app = self.http_app(host, path)
        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=STOP_GRACE,
            http=_prompt_requests(connection_room()),
            # asyncio accepts up to this many connections at a time, before any is made a
            # protocol that could close one: uvicorn's 2,048 ran past the open-file limit in
            # a burst, past connection_room's share.
            backlog=LISTEN_BACKLOG,
        )
        _check_uvicorn(config)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(LISTEN_BACKLOG)
        except OSError as e:  # in use, no such host, an address not of this machine
            sock.close()
            why = e.strerror or str(e)
            raise ConfigError(
                f"--http {host}:{port}: cannot listen there ({why}); give a free port (0 takes "
                "one) on an address of this machine"
            ) from None
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        web = _web_server()(config)
        serving = asyncio.ensure_future(web.serve(sockets=[sock]))
        if on_ready is not None:
            on_ready(f"http://{shown}:{bound}{path}")
        try:
            await asyncio.shield(serving)
        except asyncio.CancelledError:
            # Stopped (a signal): uvicorn's own shutdown, which ends the requests in flight
            # after STOP_GRACE and then the SDK's sessions. Cancelling uvicorn instead
            # printed a traceback of its lifespan task at every stop.
            web.should_exit = True
            await serving
            raise
        finally:
            sock.close()

    def http_app(self, host: str, path: str = "/mcp") -> Any:
        """The ASGI app that serves this server over streamable HTTP at ``path``, to clients
        that name ``host`` (the SDK's guard against DNS rebinding)."""
        app = self.server().streamable_http_app(streamable_http_path=path, host=host)
        return _answering_once(_refusing_requests_without_id(app))

    def content_of(self, result: RunResult) -> dict[str, Any]:
        """The ``CallToolResult`` (as a dict) for a script's result: ``RunResult.to_mcp()``,
        with how to go on when the script paused."""
        answer = result.to_mcp()
        if result.status == "paused":
            answer["content"][0]["text"] += self._how_to_continue(result)
        elif result.status == "elsewhere":
            answer["content"][0]["text"] += (
                f"\nScript id: {result.script_id}\nCall {CONTINUE} with this script id for "
                "its result."
            )
        return answer

    def _how_to_continue(self, result: RunResult) -> str:
        approvals = [w for w in result.waiting if w.get("reason") == "approval"]
        lines = [f"\nScript id: {result.script_id}"]
        failed = self._ask_failed.pop(result.script_id, None)
        # A hold's pause waits on no call (RunResult says so). Not read again from the log:
        # a hold that landed since a pause for approval said both that and the hold.
        held = not result.waiting
        if held:
            # continue_script answers "held" again until then (a model called it for ever).
            flags = self.log_flags
            release = "" if flags is None else f": `codemode release {result.script_id} {flags}`"
            lines.append(
                "It is held: no step of it runs until a person releases it, outside this "
                f"conversation{release}. Once they have, call {CONTINUE} with this script id "
                "to go on."
            )
        if not approvals:
            if not held:
                lines.append(f"Call {CONTINUE} with this script id to go on.")
        elif failed is not None:
            lines.append(
                f"It waits for a person's approval; asking them through the client failed "
                f"({failed[:300]}). Call {CONTINUE} with this script id to ask again."
            )
        elif self.log_flags is None:
            # No process but this one holds the log, and this one has no way to ask.
            ask = (
                "serve a client that supports MCP elicitation, which asks for approvals"
                if self.elicitation
                else "serve without --no-elicitation to a client that supports MCP elicitation"
            )
            lines.append(
                "It waits for a person's approval, which no one can give: this server keeps "
                "its session log in memory, out of reach of `codemode approve`. To have calls "
                "approved, restart `codemode mcp serve` with `--data-dir DIR` (then "
                "`codemode approve SCRIPT_ID CALL_ID --data-dir DIR` answers them), or "
                f"{ask}."
            )
        else:
            flags = self.log_flags
            lines.append(
                "A person answers each call waiting for approval, outside this conversation: "
                + "; ".join(
                    f"`codemode approve {result.script_id} {w['call_id']} {flags}`"
                    for w in approvals
                )
                + f" (or `codemode reject` with the same arguments). Once they have, call "
                f"{CONTINUE} with this script id to go on."
            )
        return "\n".join(lines)


def _web_server() -> Any:
    import uvicorn

    class Web(uvicorn.Server):
        """uvicorn's server, minus its signal handling: the command's handles SIGTERM and
        SIGINT (uvicorn's took them over and raised them again once stopped, so one signal
        reached the command twice, the second time meaning \"stop at once\")."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Web


def connection_room() -> int | None:
    """How many connections the HTTP server holds open at once: half the open-file limit
    (``ulimit -n``), the rest being the engine's (its sandboxes' pipes, the session log,
    upstream servers); None when the limit is infinite. Past the limit, accepting failed
    with "too many open files", which asyncio logs and tries again at once (a million lines
    in 20 s), and no client was served."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft // 2


def _check_uvicorn(config: Any) -> None:
    """Raise ConfigError, naming the installed uvicorn's version, when its h11 protocol lacks
    what :func:`_prompt_requests` builds on (its own parts, not uvicorn's API: a uvicorn
    without them would serve with no wait for a request and no room kept, or fail at the
    first connection)."""
    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol
    from uvicorn.server import ServerState

    missing = [n for n in ("on_response_complete",) if not callable(getattr(H11Protocol, n, None))]
    try:
        probe = config.http(
            config=config,
            server_state=ServerState(),
            app_state={},
            _loop=asyncio.get_running_loop(),
        )
    except TypeError as e:
        missing.append(f"the constructor it had ({e})")
    else:
        missing += [n for n in ("conn", "connections", "loop") if not hasattr(probe, n)]
    if missing:
        raise ConfigError(
            "codemode mcp serve --http builds on the h11 protocol of uvicorn 0.55, and that of "
            f"the uvicorn installed ({uvicorn.__version__}) lacks its {', '.join(missing)}: "
            "install uvicorn 0.55 (pip install 'uvicorn==0.55.*')"
        )


def _prompt_requests(room: int | None) -> Any:
    """uvicorn's HTTP/1.1 protocol (h11, named so that an installed httptools is not taken
    instead), closing a connection whose client has not sent a whole request within
    :data:`REQUEST_WAIT` seconds of its opening or of its last answer's end (or, mid-body,
    of the last :data:`BODY_PROGRESS` bytes). A request the server is answering (a script
    that runs, an event stream) is not timed: only the client's own sending is.

    Past ``room`` connections, those that have waited longest for a request are closed (the
    newcomer itself when every other one has a request in hand), so clients that connect and
    say nothing cannot lock out one that asks."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    # The connections waiting for a request, longest waiting first.
    waiting: dict[Any, None] = {}
    told = [-CROWDED_TELL]

    class PromptRequests(H11Protocol):
        _due: asyncio.TimerHandle | None = None
        _came = 0  # bytes received since the wait last started

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._came += len(data)
            if (
                self._came >= BODY_PROGRESS
                and self._due is not None
                and self.conn.their_state is h11.SEND_BODY
            ):
                self._expect()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._expect()
            if room is not None and len(self.connections) > room:
                self._make_room()

        def _make_room(self) -> None:
            assert room is not None
            excess = sum(not c.transport.is_closing() for c in self.connections) - room
            # Those waiting on their client, silent or stopped mid-request (a flood of half
            # bodies locked out every newcomer), longest waiting first; this newcomer last.
            # Not silent ones first: a client's own connection, idle between its requests,
            # was closed under it while older half bodies stayed. Never one whose request
            # came whole: its answer is the server's to give.
            others = (c for c in list(waiting) if c is not self and c._client_owes())
            for other in itertools.chain(others, [self]):
                if excess <= 0:
                    break
                if not other.transport.is_closing():
                    other._close()
                    excess -= 1
            now = time.monotonic()
            if now - told[0] >= CROWDED_TELL:
                told[0] = now
                logger.warning(
                    "%d HTTP connections are open, the most this server holds (half of "
                    "ulimit -n): those waiting longest for a request are closed; raise the "
                    "open-file limit if that many clients are expected",
                    room,
                )

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._expect()

        def _client_owes(self) -> bool:
            """Waiting for its client: for a request, or the rest of its head, or of its
            body while no answer is being sent (none begun, or one given early: a 404 or
            406 that did not read the body)."""
            state = self.conn.their_state
            return state is h11.IDLE or (
                state is h11.SEND_BODY and self.conn.our_state is not h11.SEND_BODY
            )

        def connection_lost(self, exc: Exception | None) -> None:
            waiting.pop(self, None)
            if self._due is not None:
                self._due.cancel()
            super().connection_lost(exc)

        def _expect(self) -> None:
            self._came = 0
            waiting.pop(self, None)
            if self._due is not None:
                self._due.cancel()
            if not self.transport.is_closing():
                waiting[self] = None
                self._due = self.loop.call_later(REQUEST_WAIT, self._overdue)

        def _overdue(self) -> None:
            self._due = None
            if self.transport.is_closing() or not self._client_owes():
                return  # the request came whole, or is being answered: the server's turn
            logger.info(
                "an HTTP client sent no whole request within %g s; its connection is closed",
                REQUEST_WAIT,
            )
            self._close()

        def _close(self) -> None:
            waiting.pop(self, None)
            if self.conn.our_state is h11.IDLE:
                self.conn.send(h11.ConnectionClosed())
            # Mid-body, the app reading it sees the client disconnect.
            self.transport.close()

    return PromptRequests


def _refusing_requests_without_id(app: Any) -> Any:
    """``app`` (the SDK's), but for a request whose id is not one (null, true, an object),
    which the SDK reads as a notification: it answered 202 and nobody answered the request,
    whose client waited until its own timeout, told nothing, while the message went on to
    the session as a notification (a ``notifications/cancelled`` so cancelled a call). Such a
    POST is answered 400 with the JSON-RPC error the stdio server sends for that line
    (:func:`_unanswered`), and not handed on, as on stdio. The body's parts are kept (not
    copied) until the answer begins, and read again only when the SDK answered 202."""

    async def refusing(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await app(scope, receive, send)
            return
        parts: list[bytes] = []
        refused = False

        async def receiving() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                parts.append(message.get("body", b""))
            return message

        async def sending(message: Any) -> None:
            nonlocal refused
            if refused:
                return  # the rest of the SDK's 202
            if message["type"] == "http.response.start":
                body = b"".join(parts) if message["status"] == 202 else b""
                parts.clear()
                refusal = _unanswered(body.decode("utf-8", "replace")) if body else None
                if refusal is not None:
                    refused = True
                    data = refusal.model_dump_json(by_alias=True, exclude_unset=True).encode()
                    headers = [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(data)).encode()),
                    ]
                    await send({"type": "http.response.start", "status": 400, "headers": headers})
                    await send({"type": "http.response.body", "body": data})
                    # What the SDK does next is hand the message to its session.
                    unhanded.cancel()
                    return
            await send(message)

        with anyio.CancelScope() as unhanded:
            await app(scope, receiving, sending)

    return refusing


def _answering_once(app: Any) -> Any:
    """``app`` (the SDK's), but for a second answer to one HTTP request. The SDK answers a
    notification 202, then hands it to its session; when the session ended meanwhile (a
    client that leaves mid-request sends its notifications/cancelled beside the DELETE that
    ends its session) it answers again and raises, and uvicorn printed two tracebacks of the
    SDK's code (modelcontextprotocol/python-sdk#2741). Such a message has no one to go to:
    it is dropped, in one line of the log."""

    async def answered_once(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        answered = False

        async def sending(message: Any) -> None:
            nonlocal answered
            if answered:
                return  # the SDK's second answer, which uvicorn refuses
            answered = message["type"] == "http.response.body" and not message.get("more_body")
            await send(message)

        try:
            await app(scope, receive, sending)
        except anyio.ClosedResourceError:
            if not answered:
                raise
            logger.info("a message came for an MCP session that had ended; it is dropped")

    return answered_once


class _EndedSession(logging.Filter):
    """The SDK logs a message its ended session could not take with a traceback of its own
    code; :func:`_answering_once` says it in one line. So it logs a request whose client left
    mid-body, which this says in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        from starlette.requests import ClientDisconnect

        error = record.exc_info[1] if record.exc_info else None
        if record.msg != "Error handling POST request":
            return True
        if isinstance(error, ClientDisconnect):
            # A client that left, or was cut off (REQUEST_WAIT), before its body was whole.
            logger.info("an HTTP client left before its request was whole; it is dropped")
            return False
        return not isinstance(error, anyio.ClosedResourceError)


logging.getLogger("mcp.server.streamable_http").addFilter(_EndedSession())


class _Progress:
    """The progress notifications of one MCP request, sent in order by one task."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self._count = 0
        self._queue: asyncio.Queue[tuple[int, str] | None] = asyncio.Queue()
        self._task = asyncio.ensure_future(self._send())

    def tell(self, message: str) -> None:
        self._count += 1
        self._queue.put_nowait((self._count, message))

    async def _send(self) -> None:
        while (item := await self._queue.get()) is not None:
            # A no-op when the client asked for no progress; a client that left does not
            # stop the script.
            with contextlib.suppress(Exception):
                await self._session.report_progress(item[0], None, item[1])

    async def close(self) -> None:
        self._queue.put_nowait(None)
        await self._task


@contextlib.contextmanager
def _stdin_lines() -> Iterator[Any]:
    """This process's stdin as the async lines the SDK's ``stdio_server`` reads.

    The SDK reads stdin in a worker thread, which no cancellation reaches: a signal could not
    end the server until its client closed stdin (a terminal never does; a supervisor
    kills it, and what it started with it). This reads without a thread, so cancelling
    ends the read. As the SDK does, fd 0 points at the null device meanwhile, so no child
    reads the client's messages; it is put back on the way out.
    """
    wire = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    blocking = os.get_blocking(wire)
    os.set_blocking(wire, False)
    try:
        yield _Lines(wire)
    finally:
        os.set_blocking(wire, blocking)  # the file description may be a terminal's
        os.dup2(wire, 0)
        os.close(wire)


class _Lines:
    """The lines of a non-blocking file descriptor, read on the event loop (not a thread).

    Each line handed out is kept in :attr:`lines` until :func:`_answer_refused` takes it
    with what the SDK made of it."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = bytearray()
        self._ended = False
        self.lines: collections.deque[str] = collections.deque()

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        line = await self._line()
        self.lines.append(line)
        return line

    async def _line(self) -> str:
        searched = 0
        while True:
            end = self._buffer.find(b"\n", searched)
            if end >= 0:
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]
                return _text(line)
            if self._ended:
                if not self._buffer:
                    raise StopAsyncIteration
                line = bytes(self._buffer)
                self._buffer.clear()
                return _text(line)
            searched = len(self._buffer)
            if searched > MAX_MESSAGE:  # no MCP message is that large: end, not run out of memory
                logger.error(
                    "the client sent a message over %s; ending the session",
                    size_text(MAX_MESSAGE),
                )
                raise StopAsyncIteration
            chunk = await self._read()
            self._ended = not chunk
            self._buffer += chunk

    async def _read(self) -> bytes:
        loop = asyncio.get_running_loop()
        while True:
            try:
                return os.read(self._fd, 1 << 16)
            except BlockingIOError:
                pass
            readable: asyncio.Future[None] = loop.create_future()
            loop.add_reader(self._fd, _settle, readable)
            try:
                await readable
            finally:
                loop.remove_reader(self._fd)


_JSON_KINDS = {
    list: "a list (a batch, which MCP does not take)",
    str: "a string",
    bool: "true or false",
    type(None): "null",
}
# How deep a client's message may nest (objects and arrays, its own object included): the
# bound of the SDK's JSON parser (pydantic-core's).
MAX_NESTING = 201
_REQUEST_SHAPE = (
    '{"jsonrpc": "2.0", "id": a string or an integer, "method": a string, "params": an object}'
)


async def _answer_refused(lines: Any, sdk_read: Any, handed: Any, write: Any) -> None:
    """Hand the server what the SDK's stdin reader made of each line (from ``sdk_read`` to
    ``handed``), but for a line it would drop unanswered (it logs it at debug level): no
    JSON, a request of the wrong shape, or one whose id is none, taken as a notification.
    Such a line is answered with a JSON-RPC error instead (:func:`_unanswered`) through
    ``write``, and not handed on: a client waited until its own timeout, told nothing.

    The SDK's reader makes one item of each line of ``lines`` (a message, or the error of
    its parse), in order, so the line an item came from is the oldest not yet taken; only
    a line the SDK could not take as a request is looked at again (a check of every line
    before the SDK's own parse cost as much again: 0.26 s more on a 14.7 MB line)."""
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    async with sdk_read, handed:
        async for item in sdk_read:
            line = lines.popleft()
            refusal = None
            if isinstance(item, Exception):
                # An answer to the server's own request (an approval asked by elicitation)
                # the SDK cannot read: that request fails with its error at once, as the
                # SDK's client has it, instead of waiting for ever (it has no timeout).
                failed = (
                    unread_answer(line.encode(), item, types, SessionMessage)
                    if isinstance(item, ValueError)
                    else None
                )
                if failed is not None:
                    await handed.send(failed)
                    continue
                refusal = _unanswered(line)
            elif isinstance(item.message, types.JSONRPCNotification) and "id" in from_json(line):
                refusal = _unanswered(line)  # its id null, true, an object: read as none
            if refusal is None:
                await handed.send(item)
                continue
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                await write.send(SessionMessage(refusal))


def _unanswered(line: str) -> Any:
    """The JSON-RPC error that answers a client's ``line`` the SDK cannot take or would
    not answer, or None for a line it takes or one no answer is owed (blank, a notification
    or a response of the wrong shape: JSON-RPC answers neither). A request's error carries
    its id when the id is one (a string or an integer), else null."""
    import mcp_types as types
    from pydantic import ValidationError

    if not line.strip():
        return None
    try:
        message = from_json(line)
    except ValueError as e:
        if "recursion limit exceeded" not in str(e):
            why = f"Parse error: the line is not JSON ({e}); send one JSON-RPC message a line"
            return _error(types, None, types.PARSE_ERROR, why)
        # JSON maybe, too deep to read: its id is looked for at its ends (the rest is unread).
        why = (
            "Parse error: the request nests deeper than this server reads (a message may nest "
            f"{MAX_NESTING} objects and arrays deep, its own object included); send its "
            "arguments less nested"
        )
        ident = deep_id(line.encode(), ("params",), strings=True)
        return _error(types, ident, types.PARSE_ERROR, why)
    if not isinstance(message, dict):
        what = _JSON_KINDS.get(type(message), "a number")
        why = f"Invalid Request: a message is one JSON object, not {what}"
        return _error(types, None, types.INVALID_REQUEST, why)
    if "id" not in message or "method" not in message:
        return None  # a notification or a response: nothing to answer
    ident = message["id"]
    if not isinstance(ident, str | int) or isinstance(ident, bool):
        ident = None
    try:
        types.JSONRPCRequest.model_validate(message, by_name=False)
        return None  # not expected: the SDK took it as a request
    except ValidationError as e:
        problems: dict[str, list[str]] = {}
        for error in e.errors(include_url=False):
            field = str(error["loc"][0]) if error["loc"] else "the request"
            problems.setdefault(field, []).append(error["msg"])
    said = "; ".join(
        f"{field}: "
        + " or ".join(m.removeprefix("Input should be ") if i else m for i, m in enumerate(msgs))
        for field, msgs in problems.items()
    )
    why = f"Invalid Request: {said[:500]}; a request is {_REQUEST_SHAPE}"
    return _error(types, ident, types.INVALID_REQUEST, why)


def _error(types: Any, ident: str | int | None, code: int, message: str) -> Any:
    logger.info("a client's message was refused: %s", message)
    return types.JSONRPCError(
        jsonrpc="2.0", id=ident, error=types.ErrorData(code=code, message=message)
    )


def _text(line: bytes) -> str:
    """A client's line as text for the SDK, whose JSON parser refuses a lone surrogate
    escaped in a string (``"\\ud800"``, as Python's and JavaScript's JSON writers make it)
    and leaves the request unanswered: such a one is read as U+FFFD."""
    mended = well_formed_json(line)
    return (line if mended is None else mended + b"\n").decode("utf-8", "replace")


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _notifications() -> Any:
    from mcp.server.lowlevel.server import NotificationOptions

    return NotificationOptions(tools_changed=True)


def _quiet(task: Any) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.info("could not tell a client its tools changed: %s", task.exception())
