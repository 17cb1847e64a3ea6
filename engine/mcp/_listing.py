"""Each tool of an upstream server's ``tools/list`` answer is checked on its own.

The SDK checks a ``tools/list`` answer whole, before any result type a caller gives
(``ClientSession.send_request`` validates the method's result for the negotiated protocol
version first), so one tool without ``inputSchema`` or with a name that is not a string
would make every tool of that server unusable. :class:`ToolListings` sits between the
transport and the session: it notes the ids of the ``tools/list`` requests the session
sends and, in each answer to one, checks every tool by itself with the SDK's own checks
(that protocol version's result, then ``mcp_types.Tool``); the tools that fail are taken
out of the answer, each noted with its place, its name and why, and the session reads the
rest as it would any answer. An answer whose own fields are wrong (``tools`` not a list)
passes unchanged, and the SDK refuses it whole, as it should.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine._tools import typed_input

# What one refused tool's reason quotes of the checks' errors.
SHOWN_ERRORS = 3


class ToolListings:
    """The ``tools/list`` answers of one connection (see the module docstring).

    ``version`` gives the negotiated protocol version (``None`` before ``initialize``).
    ``refused`` collects one line per tool taken out since the caller last cleared it.
    """

    def __init__(self, version: Callable[[], str | None]) -> None:
        self._version = version
        self._pending: set[Any] = set()
        self.refused: list[str] = []

    def outgoing(self, stream: Any) -> Any:
        """``stream`` (the transport's write stream), noting each ``tools/list`` sent."""
        return _Outgoing(stream, self._pending)

    def incoming(self, item: Any) -> Any:
        """``item`` (a message from the server) with the refused tools taken out of an
        answer to ``tools/list``; anything else as it is."""
        from mcp.shared.message import SessionMessage
        from mcp_types import JSONRPCError, JSONRPCResponse

        if not isinstance(item, SessionMessage):
            return item
        message = item.message
        if isinstance(message, JSONRPCError) and message.id in self._pending:
            self._pending.discard(message.id)
        if not isinstance(message, JSONRPCResponse) or message.id not in self._pending:
            return item
        self._pending.discard(message.id)
        version = self._version()
        result = message.result
        tools = result.get("tools")
        if version is None or not isinstance(tools, list) or not _fields_valid(result, version):
            return item
        kept: list[Any] = []
        changed = False
        for index, listed in enumerate(tools):
            tool = _typed_input(listed)
            changed = changed or tool is not listed
            why = _refusal(result, version, tool)
            if why is not None:
                self.refused.append(
                    f"{_which(index, tool)} is left out, its definition does not follow MCP "
                    f"({why}); the server's other tools serve"
                )
            elif _as_task_only(tool):
                self.refused.append(
                    f"{_which(index, tool)} is left out: it may only be called as a task "
                    '(execution.taskSupport "required"), which codemode does not do; the '
                    "server's other tools serve"
                )
            else:
                kept.append(tool)
        if len(kept) == len(tools) and not changed:
            return item
        answer = message.model_copy(update={"result": {**result, "tools": kept}})
        return SessionMessage(message=answer, metadata=item.metadata)


class _Outgoing:
    """A write stream that notes the id of each ``tools/list`` request it carries."""

    def __init__(self, stream: Any, pending: set[Any]) -> None:
        self._stream = stream
        self._pending = pending

    async def send(self, item: Any, /) -> None:
        from mcp_types import JSONRPCRequest

        message = getattr(item, "message", None)
        if isinstance(message, JSONRPCRequest) and message.method == "tools/list":
            self._pending.add(message.id)
        await self._stream.send(item)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> _Outgoing:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _fields_valid(result: dict[str, Any], version: str) -> bool:
    """Whether the answer holds but for its tools (checked with none)."""
    from mcp_types import methods

    try:
        methods.validate_server_result("tools/list", version, {**result, "tools": []})
    except Exception:
        return False
    return True


def _typed_input(tool: Any) -> Any:
    """``tool`` with an input schema that names no type (``{}``, which servers publish, or
    properties alone) made an object's, as ``Tool.from_mcp`` reads one (``typed_input``): MCP
    asks for ``type: "object"``, and the listing's check left such a tool out."""
    if not isinstance(tool, dict):
        return tool
    schema = tool.get("inputSchema")
    if isinstance(schema, dict) and "type" not in schema:
        return {**tool, "inputSchema": typed_input(schema)}
    return tool


def _as_task_only(tool: dict[str, Any]) -> bool:
    execution = tool.get("execution")
    return isinstance(execution, dict) and execution.get("taskSupport") == "required"


def _refusal(result: dict[str, Any], version: str, tool: Any) -> str | None:
    """``None`` when the SDK takes ``tool`` (alone in ``result``), else what is wrong."""
    from mcp_types import Tool, methods
    from pydantic import ValidationError

    try:
        methods.validate_server_result("tools/list", version, {**result, "tools": [tool]})
        Tool.model_validate(tool, by_name=False)
    except ValidationError as e:
        errors = e.errors()
        wrong = "; ".join(_error(error) for error in errors[:SHOWN_ERRORS])
        more = f" (and {len(errors) - SHOWN_ERRORS} more)" if len(errors) > SHOWN_ERRORS else ""
        return wrong + more
    return None


def _error(error: Any) -> str:
    loc = tuple(error["loc"])
    if loc[:2] == ("tools", 0):  # the surface check holds the tool in a listing of one
        loc = loc[2:]
    return f"{path_text(loc) or 'the definition'}: {error['msg']}"


def path_text(loc: tuple[int | str, ...]) -> str:
    """A validation error's place as a person writes it: ``tools[0].inputSchema``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text


def _which(index: int, tool: Any) -> str:
    """The tool as a person finds it: its name when it has one, and its place."""
    name = tool.get("name") if isinstance(tool, dict) else None
    if isinstance(name, str):
        return f"tool {name[:100]!r} (tools[{index}] of its listing)"
    return f"the tool at tools[{index}] of its listing"
