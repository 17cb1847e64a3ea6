"""The ``run_code`` tool and its result in each model API's own shape.

The engine's own shapes are Anthropic's for the tool (``name``, ``description``,
``input_schema``) and MCP's for the result (text, then each media file the script showed as
an MCP content block). Each API takes something else:

- **Anthropic Messages**: a ``tool_result`` block under the ``tool_use`` id; its content holds
  the text and the images (JPEG, PNG, GIF, WebP) and PDFs; ``is_error`` when the script
  failed.
- **OpenAI Chat Completions**: a ``tool`` message takes text only, so the media go in a
  ``user`` message right after it (images as data URLs, PDFs as files, WAV and MP3 as audio).
- **OpenAI Responses**: one ``function_call_output`` item whose output holds the text, the
  images and the PDFs.
- **MCP**: a ``CallToolResult`` (``content``, ``isError``); the image and audio blocks a
  script returned (an MCP tool's, passed on) come after the shown files, as content.

A media file an API cannot take is left out of that API's content, and the text's line for it
says so in place of "attached" (``Shown: logo.svg (image/svg+xml, 812 bytes), not attached:
the Anthropic API takes no image/svg+xml in a tool result.``), so the model knows it was shown
and not attached; one the text names no line for (a block the script returned) gets a line of
its own. The blocks a script returned are attached within what the files it showed leave of
the ``shown_files`` and ``shown_media`` budgets, as the engine decided when the script ended
(``RunResult.returned_left_out``); the text names the others as left out. The tests check
every shape against the official SDKs' types (``anthropic``, ``openai``, ``mcp``).
"""

from __future__ import annotations

import binascii
import re
from typing import Any, Literal, Protocol, get_args

import orjson

from engine._errors import CodeModeError
from engine._limits import config_hint
from engine._mcp import MEDIA_TYPES
from engine._naming import MAX_KEY
from sandbox.protocol import is_media


class RunResult(Protocol):
    """What this module reads of an ``engine.RunResult`` (which imports this module)."""

    @property
    def status(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def shown(self) -> list[dict[str, Any]]: ...
    @property
    def media(self) -> list[dict[str, Any]]: ...
    @property
    def value(self) -> Any: ...
    @property
    def returned_left_out(self) -> list[dict[str, Any]]: ...


Format = Literal["anthropic", "openai_chat", "openai_responses", "mcp"]
FORMATS: tuple[str, ...] = get_args(Format)

_ANTHROPIC_IMAGES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
# Chat Completions and Responses take these image types as data URLs.
_OPENAI_IMAGES = _ANTHROPIC_IMAGES
_OPENAI_AUDIO = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/mpeg": "mp3", "audio/mp3": "mp3"}
_PDF = "application/pdf"
# The first bytes of each type whose bytes the APIs check: media sent as one of these whose
# bytes were not (a text file named .png, or a JPEG) failed the whole request ("Could not
# process image"), and the conversation with it.
_SIGNATURES = {
    "image/png": re.compile(rb"\x89PNG\r\n\x1a\n"),
    "image/jpeg": re.compile(rb"\xff\xd8\xff"),
    "image/gif": re.compile(rb"GIF8[79]a"),
    "image/webp": re.compile(rb"RIFF....WEBP", re.DOTALL),
    _PDF: re.compile(rb"%PDF-"),
    # Chat Completions' audio: a WAV file, an MP3 (its ID3 tag, or a frame's sync bits).
    **dict.fromkeys(("audio/wav", "audio/x-wav"), re.compile(rb"RIFF....WAVE", re.DOTALL)),
    **dict.fromkeys(("audio/mpeg", "audio/mp3"), re.compile(rb"ID3|\xff[\xe0-\xff]")),
}


def checked_media_type(mime: str, data: bytes) -> str | None:
    """The type to send media ``data`` declared as ``mime`` under: ``mime`` when the APIs
    take it at its word or its bytes are of it, the type its bytes are of when that is
    another the APIs check (a JPEG named .png), and None when they are of none."""
    if mime not in _SIGNATURES:
        return mime
    for kind in (mime, *_SIGNATURES):
        if _SIGNATURES[kind].match(data):
            return kind
    return None


def check_format(format: str) -> Format:
    if format not in FORMATS:
        raise CodeModeError(f"format = {format!r}; use one of {', '.join(FORMATS)}")
    return format  # type: ignore[return-value]


def tool_definition(tool: dict[str, Any], format: Format) -> dict[str, Any]:
    """``tool`` (``name``, ``description``, ``input_schema``) as ``format``'s tool definition.

    OpenAI's tools are ``strict`` when the schema allows it (every property required, no
    others), as ``run_code``'s does, so the model's arguments always match it.
    """
    name, description, schema = tool["name"], tool["description"], tool["input_schema"]
    if check_format(format) == "anthropic":
        return {"name": name, "description": description, "input_schema": schema}
    if format == "mcp":
        return {"name": name, "description": description, "inputSchema": schema}
    strict = schema.get("additionalProperties") is False and set(schema.get("required", [])) == set(
        schema.get("properties", {})
    )
    if format == "openai_chat":
        function = {"name": name, "description": description, "parameters": schema}
        return {"type": "function", "function": {**function, "strict": strict}}
    return {
        "type": "function",
        "name": name,
        "description": description,
        "parameters": schema,
        "strict": strict,
    }


def result_for(result: RunResult, format: Format, call_id: str | None = None) -> Any:
    """``result`` as ``format``'s tool result for the model's call ``call_id`` (the
    ``tool_use`` id, the ``tool_call_id`` or the ``call_id``; MCP needs none).

    Anthropic: a ``tool_result`` block; Chat Completions: a list of messages (the ``tool``
    message, then a ``user`` message with the media when there are any); Responses: a
    ``function_call_output`` item; MCP: a ``CallToolResult``.
    """
    if check_format(format) == "mcp":
        return {"content": mcp_content(result), "isError": result.status == "failed"}
    # No API issues an id with a control character, a lone surrogate (no JSON text holds
    # one) or of more than a few dozen characters, nor takes one back: echoed, it failed the
    # model's next request, or went into its conversation (Chat Completions' media message
    # names the call: a newline in the id began a line of the host's choosing there).
    if (
        not isinstance(call_id, str)
        or not 0 < len(call_id) <= MAX_KEY
        or _NOT_AN_ID.search(call_id) is not None
    ):
        raise CodeModeError(
            f"a tool result for {_TAKES[format][1]} needs the id of the model's call to "
            f"run_code, as its turn gave it: 1 to {MAX_KEY} characters of text without control "
            f"characters (got {call_id!r:.80}); keep it from the model's turn, even across a pause"
        )
    text, media = attachable(result, format)
    if format == "anthropic":
        blocks = [{"type": "text", "text": text}]
        for name, block in media:
            blocks.append(_anthropic_block(name, block))
        answer: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": blocks}
        if result.status == "failed":
            answer["is_error"] = True
        return answer
    if format == "openai_chat":
        messages: list[dict[str, Any]] = [
            {"role": "tool", "tool_call_id": call_id, "content": text}
        ]
        if media:
            parts: list[dict[str, Any]] = [
                {"type": "text", "text": f"The media of the run_code call {call_id}:"}
            ]
            parts += [_chat_part(name, block) for name, block in media]
            messages.append({"role": "user", "content": parts})
        return messages
    output: list[dict[str, Any]] = [{"type": "input_text", "text": text}]
    output += [_responses_part(name, block) for name, block in media]
    return {"type": "function_call_output", "call_id": call_id, "output": output}


# Control characters (C0, DEL, C1) and lone surrogates.
_NOT_AN_ID = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def attachable(result: RunResult, api: str) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """``result``'s text and its media, each named (the shown files', then the image and
    audio blocks it returned, see :func:`with_returned`), less the shown files ``api`` (a
    format, or ``"pydantic_ai"``) cannot take, which the text says are not attached."""
    text, returned, shown_from = _with_returned(result)
    media = list(zip(_media_names(result), result.media, strict=True))
    media += [(f"returned {b['type']} {i}", b) for i, b in returned]  # as the text counts them
    if shown_from is None and any(media_data(b)[0] not in _TAKES[api][0] for _, b in media):
        shown_from = _value_span(text, result)[2]
    return _not_attached(text, media, api, shown_from or 0)


def not_taken(name: str, block: dict[str, Any], api: str) -> str | None:
    """The line saying media ``name`` is not attached when ``api`` cannot take ``block`` (a
    block the script returned: no ``Shown:`` line of the text names it), else None."""
    mime = media_data(block)[0]
    takes, said = _TAKES[api]
    return None if mime in takes else _left_out(name, mime, said)


def mcp_content(result: RunResult) -> list[dict[str, Any]]:
    """``result`` as MCP content blocks: its text, each media file it showed, then each
    image or audio block it returned; the text names those returned blocks instead of
    spelling out their bytes."""
    text, returned = with_returned(result)
    return [{"type": "text", "text": text}, *result.media, *returned]


def with_returned(result: RunResult) -> tuple[str, list[dict[str, Any]]]:
    """``result``'s text, each image or audio block it returned named in it instead of
    spelled out, and those blocks (for every API: the model sees them as it sees files the
    script showed), less those the engine left out (``result.returned_left_out``, see
    :func:`returned_left_out`), which the text names as left out."""
    text, returned, _ = _with_returned(result)
    return text, [block for _, block in returned]


def _with_returned(
    result: RunResult,
) -> tuple[str, list[tuple[int, dict[str, Any]]], int | None]:
    """:func:`with_returned`, each block with its place among those returned (from 1), and
    where in the text the files shown may begin (see :func:`_value_span`; None when the
    value was not looked for)."""
    text = result.text
    returned: list[tuple[int, dict[str, Any]]] = []
    found_media = _returned_media(result.value)
    if not found_media:  # most results: the value is not spelled out again to look
        return text, returned, None
    left_out = {b["index"]: b["limit"] for b in result.returned_left_out}
    # The data as the value's JSON spells it (orjson's, engine._render; base64 needs no
    # escapes), so only the block's own string is replaced, never other text that matches;
    # one at a time, in order, since blocks of the same bytes may be named apart. Within the
    # value's own span: a file shown after it may hold that JSON (or a "Returned:" line) too.
    at, end, shown_from = _value_span(text, result)
    for index, (block, size, mime) in enumerate(found_media, 1):
        limit = left_out.get(index)
        if limit is None:
            blob = {"type": block["type"], "data": block["data"], "mimeType": mime}
            returned.append((index, blob))
        quoted = f'"data":"{block["data"]}"'
        found = text.find(quoted, at, end)
        if found >= 0:
            name = f'"data":"{media_name(mime, size, limit)}"'
            text = text[:found] + name + text[found + len(quoted) :]
            at = found + len(name)
            end += len(name) - len(quoted)
            shown_from += len(name) - len(quoted) if shown_from else 0
    return text, returned, shown_from


def _value_span(text: str, result: RunResult) -> tuple[int, int, int]:
    """Where the returned value's JSON is in ``result``'s text, as engine._render wrote it
    after ``Returned:``, and where the files it showed may begin (its end; 0 when it is not
    found). The whole text when it is not there: a text cut in the middle, one built by
    hand. Empty when the text names the blocks already (one too long for its budget, see
    engine._render): nothing is left to name."""
    try:
        rendered = orjson.dumps(result.value).decode().replace("\x00", "\ufffd")  # as _render
    except orjson.JSONEncodeError:  # a RunResult built by hand, of no JSON value
        return 0, len(text), 0
    found = _returned_at(text, rendered)
    if found >= 0:
        return found, found + len(rendered), found + len(rendered)
    named = named_media(result.value, result.returned_left_out)
    if named is not None:
        rendered = orjson.dumps(named).decode()
        found = _returned_at(text, rendered)
        if found >= 0:
            return 0, 0, found + len(rendered)
    return 0, len(text), 0


def _returned_at(text: str, rendered: str) -> int:
    """Where ``rendered`` (a value's JSON) is in ``text`` after the ``Returned:`` line
    engine._render wrote, or -1. The script may have printed that line and that JSON too
    (what it printed comes first): the value is the one the text ends on, or the files it
    showed or its left-out line follow (the first such; else the first found)."""
    marked = f"\nReturned:\n{rendered}"
    first = found = text.find(marked)
    while found >= 0:
        end = found + len(marked)
        if end == len(text) or text.startswith(("\nShown: ", "\nLeft out: "), end):
            return found + len("\nReturned:\n")
        found = text.find(marked, found + 1)
    return first if first < 0 else first + len("\nReturned:\n")


def media_name(mime: str, size: int, limit: str | None = None) -> str:
    """What the text says in place of a returned image or audio block's base64: where it
    is, or that it was left out, over ``limit``."""
    where = "below" if limit is None else f"left out: over {limit}"
    return f"<{mime}, {size:,} bytes, {where}>"


def named_media(value: Any, left_out: list[dict[str, Any]]) -> Any:
    """``value`` with the data of each image or audio block it returned (see
    :func:`with_returned`) as its name, or ``None`` when it returned none; ``left_out`` as
    :func:`returned_left_out` gave it."""
    found = _returned_media(value)
    if not found:
        return None
    limits = {b["index"]: b["limit"] for b in left_out}
    names = {
        id(block): media_name(mime, size, limits.get(index))
        for index, (block, size, mime) in enumerate(found, 1)
    }
    if isinstance(value, dict):
        return {**value, "data": names[id(value)]}
    return [{**b, "data": names[id(b)]} if id(b) in names else b for b in value]


def returned_left_out(value: Any, files: int, media_bytes: int) -> list[dict[str, Any]]:
    """The image and audio blocks of returned ``value`` not attached, given room for
    ``files`` blocks and ``media_bytes`` bytes (what ``shown_files`` and ``shown_media``
    leave after the files the script showed): each ``{index, mimeType, bytes, limit}``,
    ``index`` its place among the blocks (from 1), ``limit`` the one it is over. In order,
    as shown files are: one over the bytes left is left out, and a smaller one after it may
    still fit. The engine decides this once, as a script ends, and every API keeps to it."""
    left_out = []
    for index, (_, size, mime) in enumerate(_returned_media(value), 1):
        limit = "shown_files" if files <= 0 else "shown_media" if size > media_bytes else None
        if limit is None:
            files -= 1
            media_bytes -= size
        else:
            left_out.append({"index": index, "mimeType": mime, "bytes": size, "limit": limit})
    return left_out


def returns_media(value: Any) -> bool:
    """Whether returned ``value`` holds image or audio blocks (see :func:`with_returned`)."""
    return bool(_returned_media(value))


def left_out_line(left_out: list[dict[str, Any]], limits: dict[str, int]) -> str:
    """The line of the text that says how many returned blocks were left out, over which
    limit (its value in ``limits``), and what the script can do; empty when none was."""
    if not left_out:
        return ""
    over: dict[str, int] = {}
    for b in left_out:
        over[b["limit"]] = over.get(b["limit"], 0) + 1
    why = {
        "shown_files": "{n:,} files shown and media blocks returned in all",
        "shown_media": "{n:,} bytes of media shown and returned in all",
    }
    parts = [
        f"{count:,} over {limit} ({why[limit].format(n=limits[limit])}; the host raises it "
        f"as {config_hint(limit)})"
        for limit, count in over.items()
    ]
    blocks = "block" if len(left_out) == 1 else "blocks"
    return (
        f"\nLeft out: {len(left_out):,} returned image or audio {blocks}, not attached: "
        f"{' and '.join(parts)}; return fewer or smaller blocks, or show fewer files."
    )


def _returned_media(value: Any) -> list[tuple[dict[str, Any], int, str]]:
    """The image and audio blocks the script returned, each with its size in bytes and the
    type to send it under: those whose data is base64 of some bytes of that type (see
    :func:`checked_media_type`; anything else is not media, and stays text)."""
    blocks = value if isinstance(value, list) else [value]
    found = []
    for b in blocks:
        if not (
            isinstance(b, dict)
            and b.get("type") in MEDIA_TYPES
            and isinstance(b.get("data"), str)
            and isinstance(b.get("mimeType"), str)
            and b["mimeType"].lower().startswith(f"{b['type']}/")  # an image is image/...
            and b["data"]
        ):
            continue
        try:
            data = binascii.a2b_base64(b["data"], strict_mode=True)
        except (binascii.Error, ValueError):
            continue
        # MIME types are case-insensitive: image/PNG is a PNG, which the APIs take as image/png.
        mime = checked_media_type(b["mimeType"].lower(), data)
        if mime is not None:
            found.append((b, len(data), mime))
    return found


def _media_names(result: RunResult) -> list[str]:
    """The name of each media block: the shown files that are media, in the same order."""
    names = [s["id"] for s in result.shown if is_media(s["mime"])]
    if len(names) != len(result.media):  # a result made by hand: name them by position
        names = [f"file {i}" for i in range(1, len(result.media) + 1)]
    return names


def media_data(block: dict[str, Any]) -> tuple[str, str]:
    """A media block's MIME type and base64 data."""
    if block["type"] == "resource":
        return block["resource"]["mimeType"], block["resource"]["blob"]
    return block["mimeType"], block["data"]


def _left_out(name: str, mime: str, api: str) -> str:
    return f"{name} ({mime}) is not attached: {api} takes no {mime} in a tool result."


# What each API takes in a tool result, and its name in the line that says it took none.
_TAKES = {
    "anthropic": (_ANTHROPIC_IMAGES | {_PDF}, "the Anthropic API"),
    "openai_chat": (_OPENAI_IMAGES | set(_OPENAI_AUDIO) | {_PDF}, "Chat Completions"),
    "openai_responses": (_OPENAI_IMAGES | {_PDF}, "the Responses API"),
    # What every API pydantic-ai maps a tool's BinaryContent to takes: another type failed
    # the agent's next model request (NotImplementedError: "Unsupported binary content type
    # in Anthropic tool returns: audio/wav"), and every request of that conversation after.
    "pydantic_ai": (_ANTHROPIC_IMAGES | {_PDF}, "the pydantic-ai toolset"),
}


def _not_attached(
    text: str, media: list[tuple[str, dict[str, Any]]], format: str, shown_from: int
) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """``text`` and ``media`` less each file ``format`` cannot take whose ``Shown: ...,
    attached.`` line the text has from ``shown_from`` on (past the value returned: a line
    the script printed is not one): that line says it is not attached, and why (it said
    attached, and a line after it said not). The last such line is the file's: the engine
    writes the shown files' lines after all the script printed or returned, which may hold
    one alike (where the value returned is not found: none, a string, a failure). Files with
    no such line stay, for their parts to say so."""
    takes, api = _TAKES[format]
    kept = []
    for name, block in media:
        mime = media_data(block)[0]
        if mime not in takes:
            line = re.compile(
                rf"^(Shown: {re.escape(name)} \({re.escape(mime)}, [\d,]+ bytes\)), attached\.$",
                re.MULTILINE,
            )
            found = max(line.finditer(text, shown_from), key=re.Match.start, default=None)
            if found is not None:
                why = f", not attached: {api} takes no {mime} in a tool result."
                text = text[: found.end(1)] + why + text[found.end() :]
                continue
        kept.append((name, block))
    return text, kept


def _anthropic_block(name: str, block: dict[str, Any]) -> dict[str, Any]:
    mime, data = media_data(block)
    if mime in _ANTHROPIC_IMAGES:
        return {"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}}
    if mime == _PDF:
        return {
            "type": "document",
            "source": {"type": "base64", "media_type": _PDF, "data": data},
            "title": name,
        }
    return {"type": "text", "text": _left_out(name, mime, "the Anthropic API")}


def _chat_part(name: str, block: dict[str, Any]) -> dict[str, Any]:
    mime, data = media_data(block)
    if mime in _OPENAI_IMAGES:
        return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}
    if mime in _OPENAI_AUDIO:
        return {"type": "input_audio", "input_audio": {"data": data, "format": _OPENAI_AUDIO[mime]}}
    if mime == _PDF:
        return {
            "type": "file",
            "file": {"file_data": f"data:{_PDF};base64,{data}", "filename": name},
        }
    return {"type": "text", "text": _left_out(name, mime, "Chat Completions")}


def _responses_part(name: str, block: dict[str, Any]) -> dict[str, Any]:
    mime, data = media_data(block)
    if mime in _OPENAI_IMAGES:
        return {"type": "input_image", "image_url": f"data:{mime};base64,{data}"}
    if mime == _PDF:
        return {"type": "input_file", "file_data": f"data:{_PDF};base64,{data}", "filename": name}
    return {"type": "input_text", "text": _left_out(name, mime, "the Responses API")}
