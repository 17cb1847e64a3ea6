"""The spec's limits table, with its defaults, and the parsing of `[codemode.limits]`.

Sizes take bytes or a word such as ``"4mb"``; a limit left out keeps its default; unknown keys
and bad values are refused with a message that names them. Limits that apply inside one run
go to the sandbox with each script; totals over all of a script's runs are the engine's.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from fractions import Fraction
from typing import Any

from engine._errors import ConfigError
from runner import sizes
from sandbox import protocol
from sandbox.protocol import MiB

# Sizes are parsed in the runner, which reads them too; the largest limit is
# the largest the sandbox takes.
MAX_LIMIT = sizes.MAX_LIMIT
_MAX_WORD = sizes.MAX_WORD
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min)?\s*", re.ASCII)


# The defaults are stated once, in the protocol, which the sandbox can import.
_DEFAULTS = protocol.DEFAULT_LIMITS

# The longest time in seconds a setting may be: past it a value is a typo, and an unbounded
# one (1e300 seconds) would overflow the timers it sets.
MAX_SECONDS = 7 * 24 * 3600.0
# What a time in seconds may be (see is_seconds), as the messages say it.
SECONDS = f"seconds, over 0 and at most {MAX_SECONDS:,.0f} (a week)"


def is_seconds(value: Any) -> bool:
    """Whether ``value`` is a time in seconds a setting may be (see :data:`SECONDS`)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 < value <= MAX_SECONDS
    )


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

    def __new__(cls, *args: Any, **kwargs: Any) -> Limits:
        # Before the generated __init__, which would refuse an unknown keyword with a bare
        # TypeError: Limits(foo=1) is refused as [codemode.limits] foo is, listing the limits.
        _refuse_unknown(kwargs, "Limits()")
        return super().__new__(cls)

    def __post_init__(self) -> None:
        # Checked here, not at the first run: a bad limit is the host's mistake, and a script
        # started with it could only fail. Size words ("4mb") are taken as in the config.
        values = _checked({f.name: getattr(self, f.name) for f in fields(self)}, "Limits:")
        for name, value in values.items():
            object.__setattr__(self, name, value)

    @classmethod
    def from_mapping(cls, table: dict[str, Any], *, where: str = "[codemode.limits]") -> Limits:
        """Limits from a TOML-like table; raises :class:`ConfigError` naming a bad key."""
        if not isinstance(table, Mapping):
            raise ConfigError(f"{where} must be a table of limits, not {type(table).__name__}")
        _refuse_unknown(table, where)
        return cls(**_checked(dict(table), where))

    def for_run(self) -> protocol.Limits:
        """The limits that apply inside one run, as the sandbox takes them (made once per
        ``Limits``: a step asks for them every time)."""
        return _for_run(self)


@functools.lru_cache(maxsize=256)
def _for_run(limits: Limits) -> protocol.Limits:
    inside = set(protocol.Limits.model_fields)
    return protocol.Limits(**{k: v for k, v in asdict(limits).items() if k in inside})


# Every limit's name, as the config, the sandbox and the log spell it.
LIMIT_NAMES = frozenset(f.name for f in fields(Limits))


def config_hint(name: str) -> str:
    """Where the host raises limit ``name``. The engine logs it when a script ends on the
    limit; the model's message says what the script can do instead, since only the host can
    change a limit."""
    return f"[codemode.limits] {name}"


def _refuse_unknown(names: Iterable[Any], where: str) -> None:
    """:class:`ConfigError` naming the first of ``names`` that is no limit, and the limits."""
    for name in names:
        if name not in LIMIT_NAMES:
            raise ConfigError(
                f"{where} has an unknown limit {_shown(name)}; the limits are "
                + ", ".join(sorted(LIMIT_NAMES))
            )


LimitsOption = Limits | Callable[[str], Limits]


def limits_option(value: Any) -> LimitsOption:
    """What ``CodeMode(limits=...)`` takes: a :class:`Limits`, a function from tenant to
    limits, or None for the defaults; :class:`ConfigError` for anything else."""
    if value is None:
        return Limits()
    if value is Limits:
        raise ConfigError("limits is the Limits class; pass Limits() or Limits(calls=200, ...)")
    if inspect.iscoroutinefunction(value):
        # Asked at each step, where its coroutine was never awaited: a step failed saying
        # it "gave coroutine".
        raise ConfigError(
            f"limits {value!r:.80} is an async function; give a plain function from tenant "
            "to Limits"
        )
    if isinstance(value, Limits) or callable(value):
        return value
    raise ConfigError(
        f"limits is {type(value).__name__}, not Limits: give Limits(calls=200, ...), "
        "Limits.from_mapping(table), or a function from tenant to Limits"
    )


def limits_for(option: LimitsOption, tenant: str) -> Limits:
    """The limits for ``tenant``; :class:`ConfigError` when a function gives no Limits. What
    a function raises goes on as it is (a host may retry its own errors), with a note that
    names the limits function and the tenant."""
    try:
        limits = option(tenant) if callable(option) else option
    except Exception as e:
        e.add_note(f"raised by the engine's limits function, for tenant {tenant!r}")
        raise
    if not isinstance(limits, Limits):
        raise ConfigError(
            f"the limits function gave {type(limits).__name__} for tenant {tenant!r}, "
            "not Limits; return a Limits"
        )
    return limits


def _checked(values: dict[str, Any], where: str) -> dict[str, int]:
    """Each limit parsed (sizes and times may be words) and checked; ConfigError if not."""
    parsed = {key: _parse_limit(key, raw, where) for key, raw in values.items()}
    if parsed.get("memory", MiB) < MiB:
        raise ConfigError(f"{where} memory = {parsed['memory']} is under 1 MiB; raise it")
    # The value as given: "0.0005s" is 0 ms, which a bare "at least 1" did not say. A total
    # of 0 was taken, and every script failed, its model told to do less work in all.
    for name in ("compute_ms", "total_compute_ms"):
        if parsed.get(name, 1) < 1:
            raise ConfigError(
                f"{where} {name} = {_shown(values[name])} is under 1 ms; give at least 1 "
                '(milliseconds, or a word such as "5s")'
            )
    if parsed.get("compute_ms", 1) > protocol.MAX_COMPUTE_MS:
        raise ConfigError(
            f"{where} compute_ms = {parsed['compute_ms']:,} is over {protocol.MAX_COMPUTE_MS:,} "
            "(about 24.8 days of CPU), the most the sandbox's CPU timer takes; lower it"
        )
    return parsed


def _parse_limit(key: str, raw: Any, where: str) -> int:
    if isinstance(raw, bool):
        raise ConfigError(f"{where} {key} = {raw!r} is not a number")
    if key.endswith("_ms"):
        value = _parse_duration(key, raw, where)
    elif key in protocol.COUNT_LIMITS:
        if not (isinstance(raw, int) and raw >= 0):
            raise ConfigError(f"{where} {key} = {_shown(raw)} must be a whole number, 0 or more")
        value = _bounded(raw, raw, f"{where} {key}")
    else:
        value = parse_size(raw, what=f"{where} {key}")
    return value


def parse_size(raw: Any, *, what: str = "size") -> int:
    """Bytes from an int or a word such as ``"4mb"``, ``"512 KiB"``, ``"1.5g"``
    (:func:`runner.sizes.parse_size`).

    Raises :class:`ConfigError` for anything else, a negative number, or more than
    :data:`MAX_LIMIT` bytes.
    """
    try:
        return sizes.parse_size(raw, what)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _parse_duration(key: str, raw: Any, where: str) -> int:
    what = f"{where} {key}"
    if isinstance(raw, int) and not isinstance(raw, bool):
        if raw < 0:
            raise ConfigError(f"{what} = {raw} is negative")  # as a size's says
        return _bounded(raw, raw, what)
    if isinstance(raw, str) and len(raw) <= _MAX_WORD:
        match = _DURATION.fullmatch(raw)
        if match:
            scale = {"ms": 1, None: 1, "s": 1000, "m": 60_000, "min": 60_000}[match.group(2)]
            return _bounded(int(Fraction(match.group(1)) * scale), raw, what)
    raise ConfigError(
        f'{what} = {_shown(raw)} is not a time: give milliseconds (5000) or "5s", "500ms"'
    )


def _bounded(value: int, raw: Any, what: str) -> int:
    try:
        return sizes.bounded(value, raw, what)
    except ValueError as e:
        raise ConfigError(str(e)) from None


_shown = sizes.shown
