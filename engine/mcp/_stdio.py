"""The stdio transport to an upstream MCP server: a child process, one JSON-RPC message a line.

The SDK's ``stdio_client`` joins each chunk the server writes to the unfinished line and splits
the whole again, so a message of n bytes costs O(n²) on the event loop (a 40 MiB tool result:
100 s of CPU, every other script and client stalled meanwhile), and a line that never ends
grows without bound. This one reads in linear time and ends the connection at a message over
:data:`MAX_MESSAGE`, telling the upstream why. Otherwise it does what the SDK's does: the
server runs in a session of its own with the SDK's default environment plus its ``env``, and
closing ends it: its stdin closed, a pause, then its whole process group terminated.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator, Callable
from typing import Any, TextIO

import anyio
from pydantic_core import from_json

from engine.mcp._config import ServerSpec
from sandbox.protocol import size_text

logger = logging.getLogger("codemode.mcp")

# The largest MCP message code mode reads, from an upstream server (past it the connection
# ends and the server is restarted) or from a client of `codemode mcp serve` over stdio. Far
# above what a script may read in all (its results limit, 8 MiB by default) or may be.
MAX_MESSAGE = 64 * 1024 * 1024
# How long a server has to exit once its stdin is closed, before its group is terminated.
EXIT_GRACE = 2.0
# How long after a server exits its output may still end on its own. Past it, a process the
# server started holds the output open: the connection is taken as ended (calls to it would
# wait out their timeouts, and it would never be restarted).
OUTPUT_GRACE = 1.0


@contextlib.asynccontextmanager
async def stdio_transport(
    spec: ServerSpec, errlog: TextIO, broken: Callable[[str], None]
) -> AsyncIterator[tuple[Any, Any]]:
    """Start ``spec``'s command; the (read, write) streams a ``ClientSession`` takes.

    ``broken`` is told, in a few words, why the connection ends when the server broke it
    (a message over :data:`MAX_MESSAGE`); the read stream then ends as at the server's exit.
    """
    import mcp_types as types
    from mcp.client.stdio import get_default_environment
    from mcp.os.posix.utilities import terminate_posix_process_tree
    from mcp.shared.message import SessionMessage

    assert spec.command is not None
    process = await anyio.open_process(
        [spec.command, *spec.args],
        env=get_default_environment() | spec.env,
        stderr=errlog,
        cwd=spec.cwd,
        start_new_session=True,  # its own group, so closing ends its children too
    )
    read_writer, read_stream = anyio.create_memory_object_stream[Any](0)
    write_stream, write_reader = anyio.create_memory_object_stream[Any](0)
    reading = anyio.CancelScope()
    read_ended = anyio.Event()

    async def read() -> None:
        with reading:
            try:
                await read_lines()
            finally:
                read_ended.set()

    async def watch() -> None:
        """End the connection when the server exits and its output does not end with it
        (a process it started holds the pipe)."""
        await process.wait()
        with anyio.move_on_after(OUTPUT_GRACE):
            await read_ended.wait()
        if not read_ended.is_set():
            broken(
                f"it exited (status {process.returncode}) while a process it started still "
                "holds its output"
            )
            reading.cancel()

    async def read_lines() -> None:
        assert process.stdout is not None
        buffer = bytearray()
        searched = 0  # the buffer holds no newline before this
        async with read_writer:
            try:
                async for chunk in process.stdout:
                    buffer += chunk
                    while (end := buffer.find(b"\n", searched)) >= 0:
                        line = bytes(buffer[:end])
                        del buffer[: end + 1]
                        searched = 0
                        if line.strip():
                            await read_writer.send(_parsed(line, types, SessionMessage))
                    searched = len(buffer)
                    if searched > MAX_MESSAGE:
                        broken(
                            f"it sent a message over {size_text(MAX_MESSAGE)}, more than "
                            "code mode reads"
                        )
                        return
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
                pass

    async def write() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()  # the session sees the end, not a request hanging

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read)
        tasks.start_soon(write)
        tasks.start_soon(watch)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):  # the child must end, cancelled or not
                await _end(process, terminate_posix_process_tree)
                for stream in (read_stream, write_stream, read_writer, write_reader):
                    await stream.aclose()
            tasks.cancel_scope.cancel()


def _parsed(line: bytes, types: Any, session_message: Any) -> Any:
    """The message of one line, or the error saying why it is not one (the session logs it).
    A lone surrogate escaped in a string (``"\\ud800"``, which Python's and JavaScript's
    JSON writers make of a lone surrogate), and bytes that are no UTF-8, are read as U+FFFD.

    The line is parsed to Python values, then checked as a message: the check of the JSON
    itself (a union of four message types) took five times the time and the memory (a
    12 MiB result of half a million small blocks: 0.7 s and 800 MB). A line that is no
    message, or no JSON, is checked as JSON again, for the error that says why."""
    adapter = types.jsonrpc_message_adapter
    with contextlib.suppress(ValueError):
        return session_message(adapter.validate_python(from_json(line), by_name=False))
    try:
        return session_message(adapter.validate_json(line, by_name=False))
    except ValueError as e:
        # Bytes that are no UTF-8 (a file's Latin-1 text, sent as it is) read as U+FFFD, as
        # a lone surrogate is: the line was dropped, and the call waited out its timeout.
        readable = line.decode("utf-8", "replace").encode()
        for mended in (readable if readable != line else None, well_formed_json(readable)):
            if mended is not None:
                with contextlib.suppress(ValueError):
                    return session_message(adapter.validate_json(mended, by_name=False))
        return unread_answer(readable, e, types, session_message) or e


# How the SDK's HTTP client begins the error it makes of an answer, or of an event, that is
# no JSON-RPC message it can read.
UNPARSED = ("Failed to parse JSON response", "Failed to parse SSE message")


def unread_answer(line: bytes, error: ValueError, types: Any, session_message: Any) -> Any:
    """The error of the request ``line`` answers, when the SDK cannot read that answer (it
    nests past its parser's bound, or is not shaped as MCP says), as the SDK's HTTP client
    makes it of such an answer: the SDK drops a line it cannot read, and the request waited
    out its timeout. None when the line answers no request (no JSON object with a numeric
    ``id`` and a ``result`` or an ``error``)."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    except RecursionError:
        # Nested past Python's parser too (a thousand deep): the id is looked for at the
        # line's two ends alone; the SDK's parser's error says what is wrong.
        request = deep_id(line, ("result", "error"), refused=("method",))
        if request is None:
            return None
        value = {"id": request}
    else:
        if not isinstance(value, dict) or "method" in value or not {"result", "error"} & set(value):
            return None
        if not isinstance(value.get("id"), int) or isinstance(value.get("id"), bool):
            return None
        # What is wrong with it as the answer it is (a check as any message names each kind's
        # first problem: "JSONRPCRequest.method: Field required"); else the parser's bound.
        kind = types.JSONRPCError if "error" in value else types.JSONRPCResponse
        try:
            kind.model_validate(value, by_name=False)
        except ValueError as e:
            error = e
    data = types.ErrorData(code=types.PARSE_ERROR, message=f"{UNPARSED[0]}: {error}")
    return session_message(types.JSONRPCError(jsonrpc="2.0", id=value["id"], error=data))


# How far into each end of a line nested past the parsers its id is looked for (bytes).
_ENDS = 4096
# A JSON string, number or literal; possessive, so a failed match costs no backtracking.
_SCALAR = rb'(?:"(?:[^"\\]|\\.)*+"|-?[0-9]++(?:\.[0-9]++)?+(?:[eE][-+]?+[0-9]++)?+|true|false|null)'
_MEMBER = rb'\s*+"((?:[^"\\]|\\.)*+)"\s*+:\s*+'
# An id: an integer, or a string (quotes and all).
_ID = rb'(-?(?:0|[1-9][0-9]*+)|"(?:[^"\\]|\\.)*+")'
_HEAD_MEMBER = re.compile(_MEMBER + _SCALAR + rb"\s*+,")
_HEAD_ID = re.compile(rb'\s*+"id"\s*+:\s*+' + _ID + rb"\s*+,")
_NESTED = re.compile(_MEMBER + rb"[\[{]")
# An id as the object's last member (where the TypeScript SDK writes it).
_TAIL_ID = re.compile(rb',\s*+"id"\s*+:\s*+' + _ID + rb"\s*+\}\s*+\Z")


def deep_id(
    text: bytes, nested: tuple[str, ...], refused: tuple[str, ...] = (), *, strings: bool = False
) -> int | str | None:
    """The id of the JSON-RPC message ``text`` that nests past the parsers, read in bounded
    time from its first and last :data:`_ENDS` bytes alone: an ``"id"`` among the scalar
    members that open the object, or else its last member; an integer, or with ``strings``
    a string too (a client's ids may be either; the answers a client reads carry its own
    integer ids). None unless the first value that nests is a member named in ``nested``,
    and no member before it is named in ``refused``; None when neither end says the id
    exactly (a long one cut off is none).

    The parsers stop where the text nests too deep, so all past that point is unchecked and
    may be anything: reading the whole top level by hand (872f85f) took minutes on a tail
    of escaped quotes, and on the event loop."""
    head = text[:_ENDS]
    opening = re.match(rb"\s*+\{", head)
    if opening is None:
        return None
    position = opening.end()
    keys: list[str] = []
    request: int | str | None = None
    while True:
        if (found := _HEAD_ID.match(head, position)) is not None:
            request = _exact(found.group(1), strings)
            keys.append("id")
        elif (found := _HEAD_MEMBER.match(head, position)) is not None:
            keys.append(found.group(1).decode("utf-8", "replace"))
        else:
            break
        position = found.end()
    first = _NESTED.match(head, position)
    if first is None or first.group(1).decode("utf-8", "replace") not in nested:
        return None
    if set(keys) & set(refused) or ("id" in keys and request is None):
        return None  # not the message looked for, or an id not taken or too long
    if request is None and (tail := _TAIL_ID.search(text[-_ENDS:])) is not None:
        request = _exact(tail.group(1), strings)
    return request


def _exact(token: bytes, strings: bool) -> int | str | None:
    """The id ``token`` spells (digits, or a quoted string when ``strings``), or None: a
    string not taken, one that is no JSON string, or more digits than Python converts."""
    try:
        if token[:1] == b'"':
            value = json.loads(token) if strings else None
            return value if isinstance(value, str) else None
        return int(token)
    except ValueError:  # json.JSONDecodeError too
        return None


# An escaped surrogate (or a backslash and text that looks like one: the parse tells).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def well_formed_json(line: bytes | str) -> bytes | None:
    """``line``, a JSON text whose strings escape a lone surrogate, with each lone surrogate
    as U+FFFD (pairs kept); None when it has none, or is no JSON text (its own error stands).
    """
    raw = line.encode("utf-8", "surrogatepass") if isinstance(line, str) else line
    if not _SURROGATE_ESCAPE.search(raw):
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    mended = _without_lone_surrogates(value)
    return json.dumps(mended).encode()


def _without_lone_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [_without_lone_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_without_lone_surrogates(k): _without_lone_surrogates(v) for k, v in value.items()}
    return value


async def _end(process: Any, terminate: Any) -> None:
    """Close the server's stdin, give it :data:`EXIT_GRACE` to exit, then end its group."""
    for pipe in (process.stdin, process.stdout):
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await pipe.aclose()
        if pipe is process.stdin:
            with anyio.move_on_after(EXIT_GRACE):
                while process.returncode is None:
                    await anyio.sleep(0.02)
    await terminate(process, EXIT_GRACE)  # its children, or itself when it did not exit
    with anyio.move_on_after(EXIT_GRACE):
        await process.wait()
    # anyio's streams do not close asyncio's pipe transports, so the subprocess transport
    # would stay open (and complain when collected after the loop closed); as the SDK does.
    transport = getattr(getattr(process, "_process", None), "_transport", None)
    close = getattr(transport, "close", None)
    if callable(close):
        with contextlib.suppress(PermissionError):
            close()
