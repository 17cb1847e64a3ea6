"""One upstream MCP server, held open through the official ``mcp`` SDK.

An :class:`Upstream` owns one task that opens the transport (a child process over stdio, or
streamable HTTP), runs the ``ClientSession`` and closes both, in that task, as the SDK's
context managers require. Calls come from any task and go through the open session.

A connection that ends (the child exited, the HTTP peer went away) fails the calls in flight
with an error naming the server, and the task connects again, with a growing pause, until the
upstream is closed. A server that cannot be started or does not answer ``initialize`` in time
the first time is a problem reported by name and is not retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import errno
import functools
import logging
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO

import orjson

from engine._errors import ToolCallError
from engine._tools import call_deadline, exception_leaves
from engine.mcp._config import SERVER_NAME, ServerSpec, codemode_version
from engine.mcp._listing import ToolListings, path_text
from engine.mcp._stdio import MAX_MESSAGE, UNPARSED, stdio_transport
from runner import cancel_and_wait, peer_text, wait_ended
from runner import within as stall_bound
from sandbox.protocol import size_text

logger = logging.getLogger("codemode.mcp")

# The longest pause between two attempts to reconnect a server that dropped.
MAX_RECONNECT_DELAY = 30.0
# A call waits this long at most for a server that is reconnecting.
RECONNECT_WAIT = 30.0
# Tool listings are paged; a server that pages past this many is not listed further.
MAX_PAGES = 100
# The most content blocks a call's result may hold: the SDK makes a model of each (a 54 MiB
# result of two million one-letter blocks took 35 s of the event loop and 3.8 GB), and no
# script reads more (its results limit, 8 MiB by default, is a few bytes a block).
MAX_BLOCKS = 10_000
# A server's listing of its changed tools begins at least this many times as long after the
# last one ended as that one took (reading it, and building its tools): one that announces a
# change right after each listing (of 5,000 tools) was listed back to back, and took most of
# the event loop from every other server and script. So relisting takes at most about a fifth
# of the host's time; a cheap listing's pause is as short, and announcements that come during
# a pause make one listing after it. A call during which the server announced a change waits
# for a listing begun after it, its pause cut to RELIST_RETRY at most: not to none, as calls
# that each waited had a flooding server listed back to back (19 listings in 2 s, not 4).
RELIST_PAUSE = 4
# The most a listing of changed tools that failed or timed out pauses the next: paced by its
# time, a listing that timed out (after initTimeout, 30 s by default) paused the next for
# two minutes, a server that recovered meanwhile staying stale, with nothing said. Also the
# most a call waiting for a listing waits out the pause before it.
RELIST_RETRY = 1.0


class Upstream:
    """A live session with one MCP server (see the module docstring).

    ``on_tools`` is called (on the event loop) with the server's tool definitions each time
    they are listed: after connecting, and after the server says its tools changed; and with
    one line for each tool that listing left out (its definition does not follow MCP, see
    ``engine.mcp._listing``; or it came past :data:`MAX_PAGES`), naming it and why.
    """

    def __init__(
        self,
        spec: ServerSpec,
        on_tools: Callable[[Upstream, list[dict[str, Any]], list[str]], None],
        *,
        errlog: TextIO | None = None,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self._on_tools = on_tools
        self._errlog = errlog
        self._session: Any = None
        self._listings = ToolListings(lambda: None)
        self._connected = asyncio.Event()
        self._lost = asyncio.Event()
        self._stop = asyncio.Event()
        self._first: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._task: asyncio.Task[None] | None = None
        self._refresh: asyncio.Task[None] | None = None
        self._stale = False
        # Set but while a listing of changed tools runs, or is about to: what a call waits for.
        self._settled = asyncio.Event()
        self._settled.set()
        # The loop's time before which the next listing of changed tools waits (RELIST_PAUSE),
        # and before which it waits when a call waits for it (RELIST_RETRY at most).
        self._relist_after = 0.0
        self._forced_after = 0.0
        # Announcements of changed tools, counted: those before the last listing (a
        # listing's or on connecting) began, and those a call waits for to be listed.
        self._announced = 0
        self._listed = 0
        self._wanted = 0
        # Set, and replaced, as a listing ends or the listing task does: a call waits on it.
        self._listing_ended = asyncio.Event()
        # Set by a call that wants a listing: it ends the pause before one.
        self._hurry = asyncio.Event()
        self.problem: str | None = None
        self.last_error: str | None = None
        # Why the transport ended the connection itself (the server broke the protocol).
        self.broken: str | None = None
        # Why the last message from the server that could not be read was not.
        self.unreadable: str | None = None
        # The request a connection waits for the server to answer while it is made.
        self._step: str | None = None

    async def start(self) -> str | None:
        """Connect and list the tools; ``None``, or the one-line problem that stopped it."""
        self._task = asyncio.create_task(self._run(), name=f"mcp-upstream-{self.name}")
        problem = await asyncio.shield(self._first)
        self.problem = problem
        return problem

    async def aclose(self) -> None:
        """Close the session and end the server's process (if it runs one); idempotent."""
        self._stop.set()
        if self._refresh is not None:
            await cancel_and_wait(self._refresh)
            self._settled.set()  # a task cancelled before it began set nothing
            self._wake_waiters()
        if self._task is not None:
            if not self._connected.is_set():
                # Starting (or restarting) it: nothing to finish, and the start would wait
                # out "initTimeout" for a server that does not answer.
                self._task.cancel()
            await wait_ended(self._task)
            self._task = None

    # ---- the connection ----

    async def _run(self) -> None:
        _SERVING.set(self.name)  # this task's own context: the SDK's lines name the server
        try:
            await self._connecting()
        finally:
            if not self._first.done():
                self._first.set_result("closed before it connected")

    async def _connecting(self) -> None:
        delay = 0.5
        while not self._stop.is_set():
            try:
                await self._connect_once()
                delay = 0.5
            except Exception as e:
                # What the server said is in it, and it is logged: see ServerProblem.
                problem = peer_text(
                    _describe(e, self.spec, self.broken, self.unreadable, self._step)
                )
                if not self._first.done():
                    self._first.set_result(problem)
                    return
                self.last_error = problem
                logger.warning(
                    "MCP server %r: %s; trying again in %.1f s", self.name, problem, delay
                )
            if self._stop.is_set():
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._stop.wait()
            delay = min(delay * 2, MAX_RECONNECT_DELAY)

    async def _connect_once(self) -> None:
        import anyio
        from mcp_types import Implementation

        self._step = None
        async with contextlib.AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(self._transport())
            # A stream of our own between the transport and the session, so the end of the
            # transport (a child that exited) is seen at once, even with no call in flight.
            send, receive = anyio.create_memory_object_stream[Any](0)
            lost = asyncio.Event()
            self._lost = lost
            listings = ToolListings(lambda: session.protocol_version)
            self._listings = listings

            async def pump() -> None:
                try:
                    async with send:
                        async for message in read:
                            await send.send(self._bounded(listings.incoming(message)))
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    pass
                finally:
                    lost.set()

            pump_task = asyncio.create_task(pump())
            stack.push_async_callback(cancel_and_wait, pump_task)
            session = await stack.enter_async_context(
                _client_session()(
                    receive,
                    listings.outgoing(write),
                    message_handler=self._on_message,
                    # The server's logs name its client: the SDK's default is "mcp" 0.1.0.
                    client_info=Implementation(name=SERVER_NAME, version=codemode_version()),
                )
            )
            async with asyncio.timeout(self.spec.init_timeout):
                self._step = "initialize"
                await _first_of(session.initialize(), lost)
                self._step = "tools/list"
                # Unmarked before the listing: a change announced while it runs is listed
                # after it (unmarked after, the announcement was lost, the tools stale until
                # the server's next one).
                self._stale = False
                began = self._announced
                definitions, refused = await _first_of(self._list(session), lost)
                self._step = None
            self._session = session
            # A server made anew is paced anew: a restarted one did not inherit the pause.
            self._relist_after = self._forced_after = 0.0
            self._on_tools(self, definitions, refused)
            self._ended_listing(began)
            if self._stale:
                self._start_relist()
            self._connected.set()
            if not self._first.done():
                self._first.set_result(None)
            logger.info("MCP server %r connected: %d tools", self.name, len(definitions))
            try:
                stop = asyncio.ensure_future(self._stop.wait())
                dropped = asyncio.ensure_future(lost.wait())
                await asyncio.wait({stop, dropped}, return_when=asyncio.FIRST_COMPLETED)
                stop.cancel()
                dropped.cancel()
            finally:
                self._connected.clear()
                self._session = None
            if lost.is_set() and not self._stop.is_set():
                self.last_error = "its connection ended"
                logger.warning("MCP server %r: its connection ended; reconnecting", self.name)

    def _bounded(self, item: Any) -> Any:
        """``item`` (a message from the server), but for an answer whose ``content`` has
        more than :data:`MAX_BLOCKS` blocks: that one is the result of an error saying so,
        before the session makes a model of each block."""
        from mcp.shared.message import SessionMessage
        from mcp_types import JSONRPCResponse

        message = getattr(item, "message", None)
        if not isinstance(message, JSONRPCResponse) or not isinstance(message.result, dict):
            return item
        content = message.result.get("content")
        if not isinstance(content, list) or len(content) <= MAX_BLOCKS:
            return item
        text = (
            f"the MCP server {self.name!r} answered a call with {len(content):,} content "
            f"blocks, more than the {MAX_BLOCKS:,} code mode reads; ask it for less (filter, "
            "page, select fields)"
        )
        result = {"content": [{"type": "text", "text": text}], "isError": True}
        answer = message.model_copy(update={"result": result})
        return SessionMessage(message=answer, metadata=item.metadata)

    def _transport(self) -> contextlib.AbstractAsyncContextManager[Any]:
        spec = self.spec
        self.broken = None
        if spec.command is not None:
            return stdio_transport(spec, self._errlog or sys.stderr, self._broke)
        return _http(spec, self._broke)

    def _broke(self, why: str) -> None:
        self.broken = why
        logger.warning("MCP server %r: %s; restarting it", self.name, why)

    async def _list(self, session: Any) -> tuple[list[dict[str, Any]], list[str]]:
        """The server's tool definitions, every page, and the lines naming those left out."""
        from mcp_types import PaginatedRequestParams

        definitions: list[dict[str, Any]] = []
        listings = self._listings
        listings.refused = []
        cursor = None
        for _ in range(MAX_PAGES):
            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            definitions.extend(
                t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in page.tools
            )
            cursor = page.next_cursor
            if not cursor:
                break
        refused = list(dict.fromkeys(listings.refused))
        if cursor:
            refused.append(
                f"its tools/list answer goes on past {MAX_PAGES} pages (it still gives a "
                "nextCursor), so the tools of the pages after them are left out"
            )
        return definitions, refused

    async def _on_message(self, message: Any) -> None:
        from mcp_types import ToolListChangedNotification

        if isinstance(message, ToolListChangedNotification):
            # Marked now (the SDK calls this before it reads the next message, so before the
            # result of a call during which the tools changed); listed by a task of its own.
            self._stale = True
            self._announced += 1
            self._start_relist()
        elif isinstance(message, Exception):
            # One line a message, and a warning only for the server's first: a server that
            # prints a banner or its logs to stdout does it again and again.
            first = self.unreadable is None
            self.unreadable = _first_line(message)
            sent = _sent(message)
            logger.log(
                logging.WARNING if first else logging.DEBUG,
                "MCP server %r wrote what is not an MCP message (%s)%s; a server on stdio may "
                "write only MCP messages to stdout (its logs go to stderr)",
                self.name,
                self.unreadable,
                f": {sent}" if sent else "",
            )

    def _start_relist(self) -> None:
        """List the tools again, by a task of its own, unless one runs (it lists them again
        while they are marked stale)."""
        if self._stop.is_set():
            return  # closing: aclose may be past its wait for the task
        if self._refresh is None or self._refresh.done():
            self._settled.clear()  # the task lists at once, or sets it for its pause
            self._refresh = asyncio.create_task(self._relist())

    def _ended_listing(self, began: int) -> None:
        """A listing begun after ``began`` announcements ended (listed or failed)."""
        self._listed = max(self._listed, began)
        self._wake_waiters()

    def _wake_waiters(self) -> None:
        """Wake the calls waiting for a listing (:meth:`tools_current`), each to look again."""
        self._listing_ended.set()
        self._listing_ended = asyncio.Event()

    async def _relist(self) -> None:
        """List the tools again while the server says they changed, each listing paced
        (:data:`RELIST_PAUSE`), the pause cut to :data:`RELIST_RETRY` at most when a call
        waits for the listing (:meth:`tools_current`)."""
        loop = asyncio.get_running_loop()
        try:
            # The session of the moment: one made anew meanwhile was listed as it was made.
            while self._stale and (session := self._session) is not None:
                waited = self._wanted > self._listed
                pause = (self._forced_after if waited else self._relist_after) - loop.time()
                if pause > 0:
                    self._settled.set()  # a call meanwhile returns with the tools as listed
                    self._hurry.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(pause):
                            await self._hurry.wait()
                    continue
                self._settled.clear()
                self._stale = False
                announced = self._announced
                began = loop.time()
                listed = False
                try:
                    listed = await self._relist_once(session)
                finally:
                    ended = loop.time()
                    took = RELIST_PAUSE * (ended - began)
                    self._relist_after = ended + (took if listed else min(took, RELIST_RETRY))
                    self._forced_after = min(self._relist_after, ended + RELIST_RETRY)
                    self._settled.set()  # its waiters are woken, whatever comes next
                    self._ended_listing(announced)
        finally:
            self._settled.set()
            self._wake_waiters()

    async def _relist_once(self, session: Any) -> bool:
        """One listing of the changed tools, given to ``on_tools``; False when it failed."""
        try:
            # Bounded as the first listing is: a server that announces a change and never
            # answers the listing must not hold every call to it (each waits for the
            # listing, so that its tools are current when the call returns).
            async with asyncio.timeout(self.spec.init_timeout):
                definitions, refused = await self._list(session)
        except TimeoutError:
            logger.warning(
                "MCP server %r: it said its tools changed, and did not list them within "
                "%g s; its tools stay as they were",
                self.name,
                self.spec.init_timeout,
            )
            return False
        except Exception as e:
            logger.warning(
                "MCP server %r: listing its changed tools failed: %s",
                self.name,
                peer_text(str(e)),
            )
            return False
        self._on_tools(self, definitions, refused)
        return True

    async def tools_current(self, before: int) -> None:
        """Wait until the tools are current for a call that returns: when the server
        announced a change during it (``before``: the announcements when it began), until a
        listing begun after that is done, its pause cut to :data:`RELIST_RETRY` at most;
        else until a listing that runs
        (or is about to) is done, not one that waits out its pause (:data:`RELIST_PAUSE`).
        A listing that fails ends the wait, the tools as they were."""
        wanted = self._announced
        if wanted == before:
            await self._settled.wait()
            return
        self._wanted = max(self._wanted, wanted)
        self._hurry.set()
        while self._listed < wanted:
            refresh = self._refresh
            if refresh is None or refresh.done():
                return  # the connection ended, or the host closes it
            await self._listing_ended.wait()

    # ---- calls ----

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        again: bool = True,
        wait: float = RECONNECT_WAIT,
        within: float | None = None,
    ) -> Any:
        """Call ``tool`` on the server; its ``CallToolResult`` (unwrapped by the caller).

        Raises :class:`ToolCallError` naming the server when it is not connected, when its
        connection ends during the call, or when it answers with a protocol error. A server
        over HTTP that no longer knows its session (it restarted) refused the call before
        running it: the session is made anew and the call sent once more (``again``). A
        server that is reconnecting is waited for ``wait`` seconds at most; one that does not
        answer within ``within`` seconds (None: no bound here) fails the call, saying so.
        Answered, the call waits for its tools to be current (:meth:`tools_current`) at most
        half the time its tool call has left (``engine._tools.call_deadline``), then returns
        the result with the tools as last listed.
        """
        from mcp.shared.exceptions import MCPError

        if not self._connected.is_set():
            if self._stop.is_set() or self._task is None or self._task.done():
                raise ToolCallError(f"the MCP server {self.name!r} is closed")
            why = f" ({self.last_error})" if self.last_error else ""
            await self._reconnected(
                tool,
                wait,
                None,
                f"the MCP server {self.name!r} is not connected{why}, so the call was not "
                "sent; it is being reconnected: try the call again later",
            )
        session, lost = self._session, self._lost
        if lost.is_set() or session is None:
            raise ToolCallError(f"the MCP server {self.name!r} is reconnecting; try again")
        # Within: a host stopped meanwhile (SIGSTOP, a paused virtual machine) is no call the
        # server did not answer; its answer, come meanwhile, is the call's.
        bound = stall_bound(within)
        announced = self._announced
        try:
            async with bound:
                result = await _first_of(session.call_tool(tool, arguments), lost)
        except TimeoutError:
            if within is None:
                raise
            raise ToolCallError(
                f"the MCP server {self.name!r} did not answer the call of {tool!r} within "
                f"{within:g} s, the most a call to an MCP server waits unless its config says "
                '("timeout"), so it may or may not have taken effect; check before calling it '
                "again"
            ) from None
        except _Lost:
            raise self._lost_during(tool) from None
        except MCPError as e:
            if lost.is_set() or self._stop.is_set():
                raise self._lost_during(tool) from None
            cut = _cut_off(e) if self.spec.url is not None else None
            if cut is not None:
                # The call was sent, and the server went away before its result (it ended
                # mid-call): as when an answer of JSON is cut, the connection is made anew.
                self.broken = cut
                lost.set()
                raise self._lost_during(tool) from None
            if again and self.spec.url is not None and _session_gone(e):
                logger.warning(
                    "MCP server %r no longer knows its session (it restarted?); reconnecting",
                    self.name,
                )
                lost.set()  # the connection's task sees it, and connects anew
                await self._reconnected(
                    tool,
                    wait,
                    lost,
                    f"the MCP server {self.name!r} lost its session and is not connected "
                    "again yet; the call was not run: try it again later",
                )
                return await self.call(tool, arguments, again=False, wait=wait, within=within)
            raise ToolCallError(_refusal(self.name, str(e.message))) from None
        except (ValueError, RuntimeError) as e:
            # The SDK's checks of the answer (a pydantic ValidationError for a result that
            # is not a CallToolResult; a RuntimeError for one that asks for input, which no
            # call here allows): the server's fault, said once. The output schema is checked
            # by Tool.checked, not here (see _client_session).
            if lost.is_set():
                raise self._lost_during(tool) from None
            raise ToolCallError(
                f"the MCP server {self.name!r} answered the call of {tool!r} with a result "
                f"that is not valid MCP ({summary(e)}); the server's maintainer must fix it"
            ) from None
        deadline = call_deadline()
        if deadline is None:
            await self.tools_current(announced)
            return result
        # At most half the time the call has left (the rest is its result's check): a
        # listing that outlasted the call's timeout lost the result the server had given.
        left = (deadline - asyncio.get_running_loop().time()) / 2
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(left, 0)):
                await self.tools_current(announced)
        return result

    async def _reconnected(
        self, tool: str, wait: float, gone: asyncio.Event | None, late: str
    ) -> None:
        """Wait at most ``wait`` seconds for the server to be connected (by a connection
        other than the one whose end is ``gone``), for a call of ``tool`` not sent yet.

        Raises :class:`ToolCallError`: saying ``late`` when the wait runs out; saying the
        server was closed by this host as soon as it is (else the call waited out ``wait``,
        then said the server was being reconnected)."""

        async def connected() -> None:
            while self._lost is gone or not self._connected.is_set():
                if self._connected.is_set():
                    await asyncio.sleep(0.05)  # the old connection not yet seen ended
                else:
                    await self._connected.wait()

        try:
            async with asyncio.timeout(wait):
                await _first_of(connected(), self._stop)
        except _Lost:
            raise ToolCallError(
                f"the MCP server {self.name!r} was closed by this host while the call of "
                f"{tool!r} waited for it to reconnect; the call was not sent"
            ) from None
        except TimeoutError:
            raise ToolCallError(late) from None

    def _lost_during(self, tool: str) -> ToolCallError:
        if self._stop.is_set():  # (see call for one closed before it was sent)
            # Closed by its host (McpServers.aclose): the session's end answered the call
            # "Connection closed", which read as the server refusing it.
            return ToolCallError(
                f"the MCP server {self.name!r} was closed by this host during the call of "
                f"{tool!r}, so the call may or may not have taken effect; check before "
                "calling it again"
            )
        why = f" ({self.broken})" if self.broken else ""
        return ToolCallError(
            f"the MCP server {self.name!r} ({self.spec.where()}) closed its connection during "
            f"the call of {tool!r}{why}, so the call may or may not have taken effect; the "
            "server is being restarted"
        )


class _Lost(Exception):
    pass


@functools.cache
def _client_session() -> type[Any]:
    """The SDK's ``ClientSession`` without its check of a result against the tool's output
    schema: that check runs Python's backtracking ``re`` on the event loop, so a server's
    ``"pattern": "^(a+)+$"`` and a result of 64 ``a``'s and a ``!`` held every script and
    server for hours, past every timeout; and it refused every result of a tool whose pattern
    only the linear-time engine reads (``\\p{L}``), which the engine had declared. The tool
    checks each result against its output schema itself (``Tool.checked``, with that engine).
    """
    from mcp import ClientSession

    class Session(ClientSession):
        async def validate_tool_result(self, name: str, result: Any) -> None:
            return None

    return Session


# What an HTTP server's 404 for an unknown session id reads as: the Python SDK's server
# says "Session not found" (INVALID_REQUEST), the TypeScript SDK's the same (-32001), and
# the client says "Session terminated" for a 404 with no body.
_SESSION_GONE = frozenset({"session not found", "session terminated", "session expired"})
_SESSION_GONE_CODES = frozenset({-32600, -32001})


def _session_gone(error: Any) -> bool:
    """Whether an HTTP server's error is the one of a session it does not know: that exact
    text and code, never a tool's own error that happens to speak of sessions (the call
    is sent again, which a call that ran must never be)."""
    code, message = _code_and_message(error)
    return message.rstrip(".").lower() in _SESSION_GONE and code in _SESSION_GONE_CODES


# What the SDK's HTTP client makes the error of a call whose stream of events ended, or
# could not be read, before the result came (CONNECTION_CLOSED, its code): the call was
# sent, and may have run.
_CUT_OFF = ("SSE stream ended without a response", "SSE stream failed")
_CUT_OFF_CODE = -32000


# JSON-RPC's code for a method the server does not have.
_METHOD_NOT_FOUND = -32601


def _cut_off(error: Any) -> str | None:
    """Why an HTTP server's answer to a call was cut off (see :data:`_CUT_OFF`), in a few
    words; None for any other error (the server's own, which it may give that code too)."""
    code, message = _code_and_message(error)
    if code != _CUT_OFF_CODE or not message.startswith(_CUT_OFF):
        return None
    if message.startswith(_CUT_OFF[0]):
        return "its answer's stream of events ended before the result"
    return f"its answer's stream of events could not be read: {message.split(': ', 1)[-1][:300]}"


def _code_and_message(error: Any) -> tuple[Any, str]:
    """An MCP error's code and its message, stripped."""
    data = getattr(error, "error", None)
    code = getattr(data, "code", getattr(error, "code", None))
    return code, str(getattr(error, "message", "") or "").strip()


def _refusal(name: str, message: str) -> str:
    """One line for a call the server answered with an error, or with an answer the SDK
    cannot read (see :func:`_unparsed`: the server refused nothing)."""
    problem = _unparsed(message)
    if problem is not None:
        why = f" ({problem})" if problem else ""
        return f"the MCP server {name!r} answered the call with no JSON-RPC message{why}"
    lines = message.strip().splitlines() or ["(no message)"]
    return f"the MCP server {name!r} refused the call: {lines[0][:500]}"


def _unparsed(message: str) -> str | None:
    """What is wrong with an answer the SDK could not read (an error that begins as
    ``UNPARSED``), or None for another error. The SDK's message is a whole pydantic report,
    links included: its problem line is kept, without the report's header and links."""
    lines = message.strip().splitlines()
    if not lines or not lines[0].startswith(UNPARSED):
        return None
    rest = [x for x in lines[1:] if x.strip()]
    if not rest:
        return ""
    problem = rest[0].strip()
    if not rest[0].startswith(" ") and len(rest) > 1 and rest[1].startswith(" "):
        problem = f"{problem}: {rest[1].strip()}"  # the place, then what is wrong there
    return problem.split(" [type=")[0][:300]


def summary(error: BaseException) -> str:
    """What was wrong with an answer, in one short line: a pydantic error's first problem
    (where and what, without its links), or the first line of the SDK's message."""
    errors = getattr(error, "errors", None)
    if type(error).__name__ == "ValidationError" and callable(errors):
        with contextlib.suppress(Exception):
            first = errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "the result"
            return f"{where}: {first.get('msg', 'invalid')}"
    lines = str(error).strip().splitlines()
    return lines[0][:300] if lines else type(error).__name__


async def _first_of(awaitable: Any, lost: asyncio.Event) -> Any:
    """``awaitable``'s result, or :class:`_Lost` as soon as the connection ends."""
    work = asyncio.ensure_future(awaitable)
    ended = asyncio.ensure_future(lost.wait())
    try:
        await asyncio.wait({work, ended}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        ended.cancel()
        if not work.done():
            await cancel_and_wait(work)
    if work.cancelled():
        raise _Lost()
    if work.exception() is not None and lost.is_set():
        raise _Lost()
    return work.result()


@contextlib.asynccontextmanager
async def _http(spec: ServerSpec, broke: Callable[[str], None]) -> Any:
    """The streams of an MCP session over streamable HTTP, each message held to
    :data:`MAX_MESSAGE` as over stdio: an SSE event (the SDK's own bound, 1 MiB by default,
    failed every result past it) and a JSON answer (the SDK reads one whole, however large:
    a server's 1 GiB answer took 5.5 GB of this process). The environment's proxies
    (``HTTPS_PROXY``, ``NO_PROXY``, ...) apply, as to the SDK's own client."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

    assert spec.url is not None
    client = httpx2.AsyncClient(
        headers=spec.headers or None,
        timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        # A hook, not a transport of our own: a client given a transport leaves out the
        # environment's proxies, and each proxy has a transport of its own; every answer
        # passes the hook, whichever carried it, before its body is read.
        event_hooks={"response": [_bounding(httpx2, broke)]},
    )
    async with (
        client,
        streamable_http_client(
            spec.url, http_client=client, max_sse_event_size=MAX_MESSAGE
        ) as streams,
    ):
        yield streams


class AnswerTooLarge(Exception):
    """An HTTP answer (not an event stream) past :data:`MAX_MESSAGE`."""


def _bounding(httpx2: Any, broke: Callable[[str], None]) -> Callable[[Any], Awaitable[None]]:
    """A response hook that cuts each answer that is no event stream off past MAX_MESSAGE
    (and tells ``broke`` why: the call in flight fails saying so)."""

    class Wrapped(httpx2.AsyncByteStream):
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        @property
        def elapsed(self) -> Any:  # what httpx's response reads once the body is read
            return getattr(self._inner, "elapsed", None)

        async def aclose(self) -> None:
            await self._inner.aclose()

    class Bounded(Wrapped):
        async def __aiter__(self) -> Any:
            seen = 0
            async for chunk in self._inner:
                seen += len(chunk)
                if seen > MAX_MESSAGE:
                    why = (
                        f"it sent an answer over {size_text(MAX_MESSAGE)}, the most an MCP "
                        "message may be here"
                    )
                    broke(why)
                    raise AnswerTooLarge(why)
                yield chunk

    class AsError(Wrapped):
        """An error answer to a request (HTTP 4xx, 5xx) as the JSON-RPC error the SDK passes
        on: the body itself when it is one, else one saying the status and the body's
        first line (the SDK's own stand-in said only "Server returned an error response").
        Its body is read whole, so it is given bounded."""

        def __init__(self, inner: Any, status: int, reason: str) -> None:
            super().__init__(inner)
            self._status = status
            self._reason = reason

        async def __aiter__(self) -> Any:
            body = bytearray()
            async for chunk in self._inner:
                body += chunk
            try:
                parsed = orjson.loads(body)
            except orjson.JSONDecodeError:
                parsed = None
            if isinstance(parsed, dict) and "jsonrpc" in parsed and "error" in parsed:
                yield bytes(body)
                return
            said = f"HTTP {self._status} {self._reason}".strip()
            first = bytes(body[:2000]).decode("utf-8", "replace").strip().split("\n")[0][:300]
            error = {"code": -32603, "message": f"{said}: {first}" if first else said}
            yield orjson.dumps({"jsonrpc": "2.0", "id": None, "error": error})

    async def bound(response: Any) -> None:
        kind = response.headers.get("content-type", "").lower()
        # 404 is left to the SDK: with a session, it means the server forgot it (see
        # _session_gone); before one, a method it does not have.
        status = response.status_code
        error = status >= 400 and status != 404 and response.request.method == "POST"
        if error or not kind.startswith("text/event-stream"):  # events: bounded one by one
            response.stream = Bounded(response.stream)
        if error:
            response.stream = AsError(response.stream, status, response.reason_phrase)
            response.headers["content-type"] = "application/json"

    return bound


# The upstream whose connection the running task serves: set in each upstream's own task,
# whose tasks (the SDK's, for that connection) inherit it.
_SERVING: contextvars.ContextVar[str | None] = contextvars.ContextVar("serving", default=None)


class _OneLine(logging.Filter):
    """The SDK's client logs what a server sent that it cannot read (an answer, a
    notification) with a traceback of its own code, and names no server: one line, what was
    wrong (:func:`summary`), its control characters escaped as in the other lines about what
    a server sent, and the server named first when this task serves one (what a call's
    request meets runs in the caller's task). ``known_only``: only then (the SDK's session
    logs as "client", a name other code may log under too)."""

    def __init__(self, *, known_only: bool = False) -> None:
        super().__init__()
        self._known_only = known_only

    def filter(self, record: logging.LogRecord) -> bool:
        server = _SERVING.get()
        error = record.exc_info[1] if record.exc_info else None
        if server is None and (self._known_only or error is None):
            return True
        text = record.getMessage()
        if error is not None:
            text = f"{text}: {peer_text(summary(error))}"
        record.msg = text if server is None else f"MCP server {server!r}: {text}"
        record.args = None
        record.exc_info = None
        record.exc_text = None
        return True


logging.getLogger("mcp.client.streamable_http").addFilter(_OneLine())
logging.getLogger("client").addFilter(_OneLine(known_only=True))


def _describe(
    error: BaseException,
    spec: ServerSpec,
    broken: str | None = None,
    unreadable: str | None = None,
    step: str | None = None,
) -> str:
    """One line for a server that could not be started or did not answer: ``broken`` says
    why the transport ended the connection, ``unreadable`` why a message it sent was not
    read (the SDK drops it, so the answer it held never comes), ``step`` the request it was
    answering (``initialize``, ``tools/list``) if it had begun to."""
    from mcp.shared.exceptions import MCPError
    from pydantic import ValidationError

    if isinstance(error, TimeoutError):
        if unreadable:
            return (
                f"did not answer initialize or tools/list readably within "
                f"{spec.init_timeout:g} s ({spec.where()}): a message it sent is not MCP "
                f"({unreadable}); fix the server or leave it out of the config"
            )
        return (
            f"did not answer initialize within {spec.init_timeout:g} s ({spec.where()}); check "
            'that it is an MCP server, or raise "initTimeout"'
        )
    if isinstance(error, ValidationError):
        # The SDK checks each answer whole: one bad tool definition refuses the listing.
        errors = error.errors()
        wrong = "; ".join(f"{path_text(e['loc']) or 'the answer'}: {e['msg']}" for e in errors[:3])
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        return (
            f"its {error.title} does not follow MCP, so none of its tools can be used "
            f"({spec.where()}): {wrong}{more}; fix the server or leave it out of the config"
        )
    if isinstance(error, _Lost):
        if broken:
            return f"{broken}, before it was ready ({spec.where()})"
        return (
            f"closed its connection before it was ready ({spec.where()}); run the command by "
            "hand to see why"
        )
    if isinstance(error, FileNotFoundError) and spec.command is not None:
        if spec.cwd is not None and not Path(spec.cwd).is_dir():
            return f'cannot start {spec.command!r}: its "cwd" {str(spec.cwd)!r} is no directory'
        return f'cannot start {spec.command!r}: no such command; check "command" and PATH'
    if isinstance(error, OSError) and spec.command is not None and step is None:
        # Its process could not be made: "cannot connect" sent one to the network.
        if Path(spec.command).is_dir():
            return f"cannot start {spec.command!r}: it is a directory, not a program"
        if isinstance(error, PermissionError):
            return f"cannot start {spec.command!r}: permission denied"
        if error.errno == errno.ENOEXEC:
            return (
                f"cannot start {spec.command!r}: it is no program this system runs; give a "
                'script a "#!" line, or its interpreter as "command" and the script in "args"'
            )
        return f"cannot start {spec.command!r}: {error.strerror or error}"
    if isinstance(error, BaseExceptionGroup):
        leaves = exception_leaves(error)
        if leaves:
            return _describe(leaves[0], spec, broken, unreadable, step)
    if isinstance(error, MCPError) and step is not None:
        problem = _unparsed(str(error.message))
        if problem is not None:
            return (
                f"its answer to {step} is not MCP ({spec.where()}): "
                f"{problem or 'it cannot be read'}; fix the server or leave it out of the config"
            )
        code, message = _code_and_message(error)
        if step == "tools/list" and code == _METHOD_NOT_FOUND:
            # A server of resources or prompts alone: nothing to fix in its setup.
            return (
                f"offers no tools ({spec.where()}): it has no tools/list ({message[:300]}), "
                "and code mode uses an MCP server's tools alone; leave it out of the config"
            )
        # It connected, and refused the request: "cannot connect" sent one to the network.
        return (
            f"answered {step} with an error ({spec.where()}): {str(error.message)[:300]}; "
            "fix what it says (its setup, its credentials) or leave it out of the config"
        )
    text = str(error).strip().splitlines()
    first = text[0] if text else type(error).__name__
    if isinstance(error, RuntimeError) and step is not None:
        # The SDK's refusal of an answer it cannot go on from (a protocol version it does
        # not speak): the server answered, so "cannot connect" sent one to the network.
        return (
            f"answered {step} in a way code mode cannot use ({spec.where()}): {first[:300]}; "
            "update the server or leave it out of the config"
        )
    return f"cannot connect ({spec.where()}): {type(error).__name__}: {first[:300]}"


def _first_line(error: Exception) -> str:
    """What is wrong with a message, in one line: a ValidationError's first error."""
    from pydantic import ValidationError

    if isinstance(error, ValidationError) and error.errors():
        text = str(error.errors()[0]["msg"])
    else:
        text = str(error).strip().split("\n", 1)[0] or type(error).__name__
    return text[:300]


def _sent(error: Exception) -> str:
    """What the server sent that was not a message (a ValidationError's input), shown
    briefly; empty when the error does not hold it."""
    from pydantic import ValidationError

    if not isinstance(error, ValidationError) or not error.errors():
        return ""
    sent = error.errors()[0].get("input")
    if isinstance(sent, bytes):
        sent = sent.decode("utf-8", "replace")
    if not isinstance(sent, str):
        return ""
    sent = sent.strip()
    return repr(sent if len(sent) <= 80 else sent[:77] + "...")
