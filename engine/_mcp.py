"""Results of tools that speak MCP: what a script gets back from them.

An MCP tool answers with a ``CallToolResult``: ``content`` blocks (text, mostly), maybe
``structuredContent``, and ``isError``. The spec says a call "returns the tool's result,
parsed when it is JSON", so the script gets the structured content when there is some, else
the text, parsed when it is JSON; ``isError`` makes the call fail with the text. A result
with any other block (an image, audio, a resource link, an embedded resource) gives the
script its content blocks in order (``{type: "image", data, mimeType}`` and the text blocks
beside them), which it can return to show them. The SDK's
``CallToolResult`` objects are read as the dicts they stand for.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import BaseModel

from engine._errors import ToolCallError
from engine._schema import json_adapter
from sandbox.protocol import data_problem


def unwrap(result: Any, *, tool: str | None = None, server: str | None = None) -> Any:
    """The value a script sees for an MCP handler's result (see the module docstring).
    ``tool`` and ``server`` (its name there, and the server's) name an error that says
    nothing itself."""
    return answer(result, tool=tool, server=server).value


@dataclass(frozen=True, slots=True)
class Answer:
    """What an upstream MCP server answered (see :func:`answering`): the ``value`` a script
    sees, and whether it was read from the content of a ``CallToolResult`` that had no
    structured content (``unstructured``). The tool checks ``value`` against its output
    schema; ``tool`` and ``server`` (as :func:`unwrap` takes them) name who answered when it
    does not match."""

    value: Any
    unstructured: bool = False
    tool: str | None = None
    server: str | None = None

    def mismatch(self, problems: str) -> str:
        """The error of this answer, which does not match its tool's output schema
        (``problems``, as the schema check words them): the server is at fault, not the
        host."""
        if self.unstructured:
            what = (
                "no structuredContent, which the tool's output schema asks for (its content, read "
                f"as the result instead, does not match the schema: {problems})"
            )
        else:
            what = f"a result that does not match the tool's output schema ({problems})"
        return (
            f"the MCP server {self.server!r} answered the call of {self.tool!r} with {what}; "
            "the server's maintainer must fix it"
        )


def answer(result: Any, *, tool: str | None = None, server: str | None = None) -> Answer:
    """``result`` unwrapped as :func:`unwrap` does, with what the check of its output schema
    needs to say (see :class:`Answer`)."""
    named = functools.partial(Answer, tool=tool, server=server)
    if isinstance(result, BaseModel):  # the SDK's CallToolResult, or any content model
        name, structured = _structured(result)
        # Left out of the model's dump, which writes NaN and infinities as null (a server may
        # send them, and the SDK reads them: the script read null for a number without a
        # word); dumped keeping them, the result's checks refuse them, naming where.
        left_out = {name} if name is not None else None
        result = result.model_dump(by_alias=True, mode="json", exclude_none=True, exclude=left_out)
        if structured is not None:
            result["structuredContent"] = _ANY.dump_python(structured, mode="json")
    if isinstance(result, Mapping) and isinstance(result.get("content"), list):
        texts = [
            block.get("text", "")
            for block in result["content"]
            if isinstance(block, Mapping) and block.get("type") == "text"
        ]
        text = "\n".join(t for t in texts if isinstance(t, str))
        if result.get("isError"):
            raise ToolCallError(text or _unexplained(tool, server))
        if result.get("structuredContent") is not None:
            return named(result["structuredContent"])
        if any(isinstance(b, Mapping) and b.get("type") != "text" for b in result["content"]):
            # Images, audio, resource links, embedded resources: the blocks in order, the
            # text ones among them (the text alone left a link's or a resource's data out).
            blocks = [dict(b) for b in result["content"] if isinstance(b, Mapping)]
            return named(blocks, unstructured=True)
        return named(_parsed(text), unstructured=True)
    if isinstance(result, str):
        return named(_parsed(result))
    return named(result)


MEDIA_TYPES = ("image", "audio")

_ANY = json_adapter(Any)


def _structured(model: BaseModel) -> tuple[str | None, Any]:
    """The name of ``model``'s field of structured content (the SDK's is
    ``structured_content``, ``structuredContent`` by alias and in older versions) and what
    it holds; (None, None) for a model with no such field."""
    for name, field in type(model).model_fields.items():
        if "structuredContent" in (name, field.alias, field.serialization_alias):
            return name, getattr(model, name, None)
    return None, None


def _unexplained(tool: str | None, server: str | None) -> str:
    """The error of a result with ``isError`` and no text: who answered so, since the
    script's message is all its author has to go on."""
    if tool is None:
        return "the tool reported an error and gave no text saying what it was"
    if server is None:
        return f"the MCP tool {tool!r} reported an error and gave no text saying what it was"
    return (
        f"the MCP server {server!r} answered the call of {tool!r} with an error and no text "
        "saying what it was; its own log may say more"
    )


# JavaScript's numbers hold an integer exactly up to 2^53 either way.
_EXACT = 2**53


def _parsed(text: str) -> Any:
    """``text`` parsed when it is JSON, but for a bare integer that a number would round (an
    id the tool sent as text: the script read another one, and was told to have the tool
    return such numbers as strings, which it had)."""
    stripped = text.strip()
    if stripped[:1] in ("{", "[", '"') or stripped in ("true", "false", "null"):
        try:
            value = orjson.loads(stripped)
        except orjson.JSONDecodeError:
            return text
        # JSON nested deeper than data may cross to the script stays the text it was, as
        # JSON too deep for the parse (past 1,024 levels) does: parsed, its call failed as a
        # result nested too deep.
        return value if data_problem(value) is None else text
    if _numeric(stripped):
        try:
            number = orjson.loads(stripped)
        except orjson.JSONDecodeError:
            return text
        if stripped.lstrip("-").isdigit() and not -_EXACT <= number <= _EXACT:
            return text
        return number
    return text


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return bool(text) and text[0] in "-0123456789"


def wrap_handler(
    handler: Callable[..., Any], *, tool: str | None = None, server: str | None = None
) -> Callable[..., Any]:
    """``handler`` with its results unwrapped (``tool`` and ``server`` as :func:`unwrap`
    takes them); the same signature, sync or async."""
    return _wrapped(handler, functools.partial(unwrap, tool=tool, server=server))


def answering(handler: Callable[..., Any], *, tool: str, server: str) -> Callable[..., Any]:
    """``handler``, which calls ``tool`` on the upstream MCP server ``server``, with each
    result made an :class:`Answer`, which :class:`~engine.Tool` checks and passes on as its
    value; the same signature, sync or async. Only the engine calls it: a host that reads
    a tool's handler gets the value alone (:func:`wrap_handler`)."""
    return _wrapped(handler, functools.partial(answer, tool=tool, server=server))


def _wrapped(handler: Callable[..., Any], named: Callable[[Any], Any]) -> Callable[..., Any]:
    """``handler`` with ``named`` applied to each result; the same signature, sync or async."""
    if inspect.iscoroutinefunction(handler):

        @functools.wraps(handler)
        async def async_unwrapped(*args: Any, **kwargs: Any) -> Any:
            return named(await handler(*args, **kwargs))

        return async_unwrapped

    @functools.wraps(handler)
    def unwrapped(*args: Any, **kwargs: Any) -> Any:
        result = handler(*args, **kwargs)
        if inspect.isawaitable(result):
            return _await_unwrap(result, named)
        return named(result)

    return unwrapped


async def _await_unwrap(awaitable: Any, named: Callable[[Any], Any]) -> Any:
    return named(await awaitable)
