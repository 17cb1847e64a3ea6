"""The spec's limits table, with its defaults, and the parsing of `[codemode.limits]`.

Sizes take bytes or a word such as ``"4mb"``; a limit left out keeps its default; unknown keys
and bad values are refused with a message that names them. Limits that apply inside one run
go to the sandbox with each script; totals over all of a script's runs are the engine's.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from typing import Any

from engine._errors import ConfigError
from sandbox import protocol
from sandbox.protocol import KiB, MiB

GiB = 1024 * MiB

_UNITS = {
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
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min)?\s*$")


# The defaults are stated once, in the protocol, which the sandbox can import.
_DEFAULTS = protocol.DEFAULT_LIMITS


@dataclass(frozen=True)
class Limits:
    """What one script may use. Sizes in bytes, times in milliseconds, the rest counts."""

    calls: int = _DEFAULTS["calls"]
    results: int = _DEFAULTS["results"]
    arguments: int = _DEFAULTS["arguments"]
    call_arguments: int = _DEFAULTS["call_arguments"]
    step_arguments: int = _DEFAULTS["step_arguments"]
    memory: int = _DEFAULTS["memory"]
    compute_ms: int = _DEFAULTS["compute_ms"]
    total_compute_ms: int = _DEFAULTS["total_compute_ms"]
    file_bytes: int = _DEFAULTS["file_bytes"]
    total_file_bytes: int = _DEFAULTS["total_file_bytes"]
    streams: int = _DEFAULTS["streams"]
    shown_files: int = _DEFAULTS["shown_files"]
    shown: int = _DEFAULTS["shown"]
    shown_media: int = _DEFAULTS["shown_media"]

    @classmethod
    def from_mapping(cls, table: dict[str, Any], *, where: str = "[codemode.limits]") -> Limits:
        """Limits from a TOML-like table; raises :class:`ConfigError` naming a bad key."""
        known = {f.name for f in fields(cls)}
        values: dict[str, int] = {}
        for key, raw in table.items():
            if key not in known:
                raise ConfigError(
                    f"{where} has an unknown limit {key!r}; the limits are "
                    + ", ".join(sorted(known))
                )
            values[key] = _parse_limit(key, raw, where)
        limits = cls(**values)
        if limits.memory < MiB:
            raise ConfigError(f"{where} memory = {limits.memory} is under 1 MiB; raise it")
        if limits.compute_ms < 1:
            raise ConfigError(f"{where} compute_ms must be at least 1")
        return limits

    def for_run(self) -> protocol.Limits:
        """The limits that apply inside one run, as the sandbox takes them."""
        inside = set(protocol.Limits.model_fields)
        return protocol.Limits(**{k: v for k, v in asdict(self).items() if k in inside})


def _parse_limit(key: str, raw: Any, where: str) -> int:
    if isinstance(raw, bool):
        raise ConfigError(f"{where} {key} = {raw!r} is not a number")
    if key.endswith("_ms"):
        return _parse_duration(key, raw, where)
    if key in protocol.COUNT_LIMITS:
        if isinstance(raw, int) and raw >= 0:
            return raw
        raise ConfigError(f"{where} {key} = {raw!r} must be a whole number, 0 or more")
    return parse_size(raw, what=f"{where} {key}")


def parse_size(raw: Any, *, what: str = "size") -> int:
    """Bytes from an int or a word such as ``"4mb"``, ``"512 KiB"``, ``"1.5g"``."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        if raw < 0:
            raise ConfigError(f"{what} = {raw} is negative")
        return raw
    if isinstance(raw, str):
        match = _SIZE.match(raw)
        if match and match.group(2).lower() in _UNITS:
            return int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    raise ConfigError(
        f'{what} = {raw!r} is not a size: give bytes (4194304) or a word such as "4mb", '
        '"512kb", "1gb"'
    )


def _parse_duration(key: str, raw: Any, where: str) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        return raw
    if isinstance(raw, str):
        match = _DURATION.match(raw)
        if match:
            scale = {"ms": 1, None: 1, "s": 1000, "m": 60_000, "min": 60_000}[match.group(2)]
            return int(float(match.group(1)) * scale)
    raise ConfigError(
        f'{where} {key} = {raw!r} is not a time: give milliseconds (5000) or "5s", "500ms"'
    )
