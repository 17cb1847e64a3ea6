"""What reaches the model: the text of a `run_code` result.

``Script finished.``, what the script printed, then the value it returned (a string as
itself, any other value as JSON); or ``Script failed.``, the error, the lines of the script
in its stack, then what it printed. Past 24 KiB the middle is cut out with a note, so the
start and the end stay.
"""

from __future__ import annotations

from typing import Any

import orjson

from sandbox.protocol import Ran

# The model is told this bound, so the session sets it, not the limits table.
TEXT_BUDGET = 24 * 1024


def render_value(ran: Ran) -> str | None:
    """The returned value as the model sees it, or ``None`` for ``undefined``."""
    if ran.value_text is not None:
        return ran.value_text
    if not ran.returned:
        return None
    if isinstance(ran.value, str):
        return ran.value
    return orjson.dumps(ran.value).decode()


def render_finished(ran: Ran) -> str:
    parts = ["Script finished."]
    if ran.printed:
        parts += ["Printed:", ran.printed.rstrip("\n")]
    value = render_value(ran)
    if value is not None:
        parts += ["Returned:", value]
    return cut("\n".join(parts))


def render_failed(ran: Ran) -> str:
    error = ran.error
    parts = ["Script failed."]
    if error is not None:
        parts.append(f"{error.name}: {error.message}" if error.message else error.name)
        for line in error.lines:
            parts.append(f"  at line {line.line}: {line.text.strip()}")
    if ran.printed:
        parts += ["Printed:", ran.printed.rstrip("\n")]
    return cut("\n".join(parts))


def render_paused(waiting: list[dict[str, Any]]) -> str:
    lines = ["Script paused."]
    for call in waiting:
        lines.append(f"  {call['reason']}: tools.{call['name']} (call {call['call_id']})")
    lines.append("It continues from where it stopped when these are answered.")
    return "\n".join(lines)


def cut(text: str, budget: int = TEXT_BUDGET) -> str:
    """``text`` within ``budget`` bytes of UTF-8: the middle cut out, with a note."""
    data = text.encode("utf-8")
    if len(data) <= budget:
        return text
    keep = budget - 80
    head = data[: keep // 2].decode("utf-8", "ignore")
    tail = data[-(keep - keep // 2) :].decode("utf-8", "ignore")
    dropped = len(data) - len(head.encode()) - len(tail.encode())
    return f"{head}\n[... {dropped:,} bytes cut from the middle ...]\n{tail}"
