"""Byte sizes as settings give them: ``4194304``, ``"4mb"``, ``"512 KiB"``, ``"1.5g"``.

What every byte-size option takes (codemode.toml's, ``Limits``, the engine's and the
runner's), parsed here, where the runner can read it and the engine builds on it; the
sandbox never parses a size.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from sandbox.protocol import MAX_LIMIT, GiB, KiB, MiB

# A size or time word is a short text; a longer one is refused before it is parsed.
MAX_WORD = 64
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": KiB,
    "kb": KiB,
    "kib": KiB,
    "m": MiB,
    "mb": MiB,
    "mib": MiB,
    "g": GiB,
    "gb": GiB,
    "gib": GiB,
    "t": 1024 * GiB,
    "tb": 1024 * GiB,
    "tib": 1024 * GiB,
}
# ASCII digits only: int() and float() would also take other scripts' digits.
_SIZE_WORD = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", re.ASCII)


def parse_size(raw: Any, what: str = "size") -> int:
    """Bytes from an int or a word such as ``"4mb"``, ``"512 KiB"``, ``"1.5g"``: what every
    byte-size setting takes (the config's, ``Limits``, the engine's and the runner's options).

    Raises ``ValueError`` naming ``what`` for anything else, a negative number, or more than
    :data:`MAX_LIMIT` bytes.
    """
    if isinstance(raw, int) and not isinstance(raw, bool):
        if raw < 0:
            raise ValueError(f"{what} = {raw} is negative")
        return bounded(raw, raw, what)
    if isinstance(raw, str) and len(raw) <= MAX_WORD:
        match = _SIZE_WORD.fullmatch(raw)
        if match and match.group(2).lower() in _SIZE_UNITS:
            # Exact arithmetic: a float would turn "1e400"-sized words into inf.
            value = Fraction(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
            return bounded(int(value), raw, what)
    raise ValueError(
        f'{what} = {shown(raw)} is not a size: give bytes (4194304) or a word such as "4mb", '
        '"512kb", "1gb"'
    )


def bounded(value: int, raw: Any, what: str) -> int:
    """``value`` (parsed from ``raw``), or ``ValueError`` when it is over :data:`MAX_LIMIT`."""
    if value > MAX_LIMIT:
        raise ValueError(
            f"{what} = {shown(raw)} is over {MAX_LIMIT:,}, the largest limit the sandbox "
            "takes; give a smaller value"
        )
    return value


def shown(raw: Any) -> str:
    """``raw`` as a message shows it: its repr, cut short (a setting can be huge)."""
    text = repr(raw) if raw is None or isinstance(raw, str | int | float) else type(raw).__name__
    return text if len(text) <= MAX_WORD + 2 else text[:MAX_WORD] + "..."
