"""What reaches the model: the text of a `run_code` result.

``Script finished.``, what the script printed, then the value it returned (a string as
itself, unless it would read as other JSON or as nothing; any other value as JSON); or
``Script failed.``, the error, the lines of the script in its stack, then what it printed.
Past 24 KiB the middle is cut out with a note, so the start and the end stay.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import Any

import orjson

from engine._ending import Ending
from engine.adapters._formats import checked_media_type, named_media
from engine.languages._walk import BIDI_CONTROLS, CONTROL
from sandbox.protocol import is_media, text_encoding

# The model is told this bound, so the session sets it, not the limits table.
TEXT_BUDGET = 24 * 1024


def render_value(ending: Ending) -> str | None:
    """The returned value as the model sees it, or ``None`` for ``undefined``."""
    if ending.value_text is not None:
        return ending.value_text
    if not ending.returned:
        return None
    if isinstance(ending.value, str):
        # A string as itself, but for one that would read as other JSON (`"23"`, `"true"`,
        # `"[1,2]"`) or as nothing (`""`): quoted, so the model can tell it from the number.
        return orjson.dumps(ending.value).decode() if _reads_as_json(ending.value) else ending.value
    return orjson.dumps(ending.value).decode()


def _reads_as_json(text: str) -> bool:
    if not text.strip():
        return True
    if text[0] not in '-0123456789tfn[{"' and not text[0].isspace():
        return False  # most text: no parse
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


def render_finished(ending: Ending, left_out: list[dict[str, Any]]) -> str:
    """The text of a finished script; ``left_out`` the returned media blocks not attached
    (:func:`engine.adapters._formats.returned_left_out`), named so if named here."""
    parts = ["Script finished."]
    if ending.printed:
        parts += ["Printed:", ending.printed.rstrip("\n")]
    value = render_value(ending)
    if value is not None:
        parts += ["Returned:", value]
        whole = "\n".join(parts)  # at most 4 bytes a character: most texts pass unencoded
        if (
            ending.value_text is None
            and len(whole) * 4 > TEXT_BUDGET
            and len(whole.encode()) > TEXT_BUDGET
        ):
            # Image or audio blocks returned are named in the text, not spelled out, by the
            # adapters (which attach them); the cut below would leave part of their base64
            # here, which nothing could name then: named before the cut instead.
            named = named_media(ending.value, left_out)
            if named is not None:
                parts[-1] = orjson.dumps(named).decode()
    return _text(parts)


def render_failed(ending: Ending) -> str:
    error = ending.error
    parts = ["Script failed."]
    if error is not None:
        parts.append(f"{error.name}: {error.message}" if error.message else error.name)
        for line in error.lines:
            parts.append(f"  at line {line.line}: {line.text.strip()}")
    if ending.printed:
        parts += ["Printed:", ending.printed.rstrip("\n")]
    return _text(parts)


def _text(parts: list[str]) -> str:
    """The lines of a result as the model reads them: a NUL (which a script may print or
    return, and which is no text: PostgreSQL's text takes none, nor do some model APIs) as
    U+FFFD, as the JavaScript sandbox prints it; cut to the budget. The value returned keeps
    it (``RunResult.value``)."""
    return cut("\n".join(parts).replace("\x00", "\ufffd"))


def render_paused(waiting: list[dict[str, Any]]) -> str:
    lines = ["Script paused."]
    for call in waiting:
        lines.append(f"  {call['reason']}: tools.{call['name']} (call {call['call_id']})")
    lines.append("It continues from where it stopped when these are answered.")
    return cut("\n".join(lines))  # a script may wait on a thousand calls at once


def cut(text: str, budget: int = TEXT_BUDGET) -> str:
    """``text`` within ``budget`` bytes of UTF-8: the middle cut out, with a note. The note
    says what the notes it cut out had said was cut before (the sandbox's, of printed
    output or a returned string), so the model is told the whole of what it does not see."""
    data = text.encode("utf-8")
    if len(data) <= budget:
        return text
    keep = budget - 200
    head = data[: keep // 2].decode("utf-8", "ignore")
    tail = data[-(keep - keep // 2) :].decode("utf-8", "ignore")
    kept = len(head.encode()), len(tail.encode())
    dropped = len(data) - kept[0] - kept[1]
    middle = data[kept[0] : len(data) - kept[1]].decode("utf-8", "ignore")
    earlier = " and ".join(m[1] for m in _EARLIER_CUT.finditer(middle))
    before = f", where {earlier} had been cut" if earlier else ""
    return f"{head}\n[... {dropped:,} bytes cut from the middle{before} ...]\n{tail}"


# The sandbox's notes of what it cut (sandbox/replay.py: printed output, a returned string
# or value), which a cut here may take out.
_EARLIER_CUT = re.compile(r"\[\.\.\. ([0-9][^\]\n]{0,60}) cut \.\.\.\]")


def render_shown(
    files: list[dict[str, Any]],
    read: Callable[[dict[str, Any], int], bytes | None],
    *,
    text_budget: int,
    media_budget: int,
) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """Each file the script showed: a text file as its text, a media file as itself.

    Returns the text to append to the result, what was shown, and MCP content blocks for the
    media. Text beyond ``text_budget`` bytes in all is cut; media beyond ``media_budget`` is
    left out with a note (the sandbox already refused it; this is the engine's own check),
    and so is a file ``read`` finds gone (it returns ``None``) and media whose bytes are not
    of its type (``checked_media_type``). ``read(file, n)`` gives the
    file's first ``n`` bytes: of a text file, only what the budget can show is read.
    """
    parts: list[str] = []
    shown: list[dict[str, Any]] = []
    media: list[dict[str, Any]] = []
    text_left, media_left = text_budget, media_budget
    for f in files:
        name, mime, size = f["id"], f["mime"], f["size"]
        meta = {"id": name, "mime": mime, "size": size}
        if is_media(mime):
            if size > media_left:
                parts.append(
                    f"Shown: {name} ({mime}, {size:,} bytes) was left out: over shown_media"
                )
                continue
            raw = read(f, size)
            if raw is None:
                parts.append(_gone(name, mime, size))
                continue
            sent = checked_media_type(mime, raw)
            if sent is None:
                what = "it is empty" if not raw else f"its bytes are not {mime}"
                parts.append(
                    f"Shown: {name} ({mime}, {size:,} bytes) was left out: {what} (a model API "
                    "refuses a request that holds it)"
                )
                continue
            mime = sent
            meta["mime"] = mime
            media_left -= size
            data = base64.b64encode(raw).decode()
            media.append(_media_block(name, mime, data))
            parts.append(f"Shown: {name} ({mime}, {size:,} bytes), attached.")
        else:
            room = max(text_left, 0)
            # What the budget can show, and a character's worth more to see where it is cut.
            raw = read(f, size if size <= room else room + 4)
            if raw is None:
                parts.append(_gone(name, mime, size))
                continue
            text = raw.decode(text_encoding(raw), "replace")
            if _binary(text):
                # Its bytes as text put control characters and replacement marks in front
                # of the model (a terminal's escapes, NULs): named, not shown.
                parts.append(
                    f"Shown: {name} ({mime}, {size:,} bytes) was left out: it is not text "
                    "(binary data, and not an image, audio, video or PDF)"
                )
                continue
            text = CONTROL.sub("\ufffd", text)
            encoded = text.encode()
            if len(encoded) > room or len(raw) < size:
                kept = encoded[:room].decode("utf-8", "ignore")
                cut = len(encoded) - len(kept.encode()) + max(size - len(raw), 0)
                text = f"{kept}\n[... {cut:,} bytes of {name} cut ...]"
            text_left -= min(len(encoded), room)
            parts.append(f"Shown: {name} ({mime}, {size:,} bytes)\n{text}")
        shown.append(meta)
    return ("\n" + "\n".join(parts) if parts else ""), shown, media


def _binary(text: str) -> bool:
    """Whether a file's first bytes (``text``, decoded) are binary data, not text: a NUL, or
    three in ten characters control characters or not of the encoding (random bytes: about
    six in ten; a log with a terminal's colours: one in twenty)."""
    if "\x00" in text:
        return True
    odd = len(CONTROL.findall(text)) + text.count("\ufffd")
    return odd * 10 > len(text) * 3


def _gone(name: str, mime: str, size: int) -> str:
    return f"Shown: {name} ({mime}, {size:,} bytes) was left out: its bytes are gone from the store"


def _media_block(name: str, mime: str, data: str) -> dict[str, Any]:
    if mime.startswith("image/"):
        return {"type": "image", "data": data, "mimeType": mime}
    if mime.startswith("audio/"):
        return {"type": "audio", "data": data, "mimeType": mime}
    return {
        "type": "resource",
        "resource": {"uri": f"attachment:{name}", "mimeType": mime, "blob": data},
    }


# What the log holds came from scripts, models, tools and the host's callers: shown to a
# person (the CLI) or written in a log line, a control character (a terminal's escape
# sequence, a line break that would forge a row or a log line) is written as its escape.
# Tabs stay.
ESCAPES = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7F, 0xA0)] if c != 0x09}
# Line and paragraph separators, and the marks and overrides that reorder what a terminal
# shows (code reviewed before an approval read in another order than it runs: Trojan
# Source, CVE-2021-42574).
ESCAPES.update(
    {
        c: f"\\u{c:04x}"
        for c in (
            0x2028,
            0x2029,
            0x061C,
            0x200E,
            0x200F,
            *BIDI_CONTROLS,
        )
    }
)


def escaped(text: str) -> str:
    """``text`` with its control characters as escapes (see :data:`ESCAPES`)."""
    return text.translate(ESCAPES)
