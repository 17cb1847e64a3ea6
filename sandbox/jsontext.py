"""JSON text in a process whose heap is bounded: orjson for light data, the standard
library's json past :data:`LONG_TEXT`, with the same results.

orjson takes a buffer of its own before it writes or parses: about twelve bytes a character
of text, and some 220 bytes an item of data (measured under RLIMIT_DATA, which counts what
it reserves). When the heap limit refuses it, orjson crashes the process (SIGSEGV) where the
standard library needs about the text itself and raises MemoryError, the memory limit. A
Python script's heap is the process's, so a call, a result or a value of a few MiB under a
small ``memory`` crashed its process. A sandbox process that runs a Python script calls
:func:`bound_heap` once it has read it; from then on data heavier than :data:`LONG_TEXT`
goes through the standard library. A JavaScript run's process keeps hundreds of MiB beside
QuickJS's heap: it takes the standard library's path only for data too heavy for that room
(two million small items of a tool's result crashed it). Elsewhere (the host, a run in the
host's process) orjson does all of it: the standard library's path is slower (some 40 times
for many small items).

The two paths agree byte for byte (:func:`dumps`) and value for value (:func:`loads`),
errors included, since replay compares the canonical text of a call made on one run with
that of its record, which another run may have encoded the other way. orjson's float text
is Python's ``repr`` but for exponents -5 to -9 (``0.00001``, ``1e-7``); a test checks the
agreement over varied data, so an orjson that changes it is caught.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
from json.encoder import encode_basestring
from typing import Any

import orjson

# The weight (see `weight`) past which JSON is written or parsed by the standard library in
# the sandbox process: orjson's buffer for it stays near 16 MiB, within the room a Python run
# keeps beside its script's `memory` (sandbox/__main__.py's PYTHON_RUN_ROOM).
LONG_TEXT = 1024 * 1024
# What one item of data (a number, a string, a list...) weighs, beside its text: about what
# orjson reserves for it, in characters of text.
ITEM_WEIGHT = 24

# Largest and smallest integers orjson reads as integers (past them, as floats) and writes.
_U64_MAX = 2**64 - 1
_I64_MIN = -(2**63)
# How deep orjson reads (past it: "depth limit exceeded") and writes ("Recursion limit").
_READ_DEPTH = 1024
_WRITE_DEPTH = 254

_bounded = False
_long_text = LONG_TEXT


def bound_heap(long_text: int = LONG_TEXT) -> None:
    """Say this process's heap is bounded (the sandbox process, before it runs a script):
    data heavier than ``long_text`` goes through the standard library from now on."""
    global _bounded, _long_text
    _bounded, _long_text = True, long_text


def warm_up() -> None:
    """Take the standard library's paths once, refusals included, before lockdown."""
    value = {"b": [1.5e-5, None, True, 2**63, "é\n"], "a": {}}
    std_loads(std_dumps(value, sort_keys=True).decode())
    for bad in ("\ud800", 2**64, {1: 2}):
        with contextlib.suppress(orjson.JSONEncodeError):
            std_dumps(bad)
    for text in ("NaN", '"\\ud800"', "[1,", "18446744073709551616"):
        with contextlib.suppress(orjson.JSONDecodeError):
            std_loads(text)


def text_weight(text: str) -> int:
    """A text's weight: its length, four times that when it is not ASCII (a character is up
    to four bytes of UTF-8, which orjson's buffer is sized from)."""
    return len(text) if text.isascii() else 4 * len(text)


def weight(value: Any, bound: int = LONG_TEXT) -> int:
    """The weight of data: its strings' :func:`text_weight` and :data:`ITEM_WEIGHT` an item.

    The walk stops once past ``bound`` (the figure is then only known to be over it), so it
    costs little for light data and at most ``bound`` for heavy data."""
    total = 0
    stack = [iter((value,))]
    while stack:
        for item in stack[-1]:
            total += ITEM_WEIGHT
            kind = type(item)
            if kind is str:
                total += text_weight(item)
            if total > bound:
                return total
            if kind is dict:
                stack.append(itertools.chain.from_iterable(item.items()))
                break
            if kind is list or kind is tuple:
                stack.append(iter(item))
                break
        else:
            stack.pop()
    return total


def over(total: int) -> bool:
    """True when data of weight ``total`` must go through the standard library here."""
    return _bounded and total > _long_text


def heavy(value: Any) -> bool:
    """True when ``value`` must be written by the standard library here."""
    return _bounded and weight(value, _long_text) > _long_text


_ITSELF: Any = object()


def dumps(value: Any, *, sort_keys: bool = False, weighing: Any = _ITSELF) -> bytes:
    """JSON of data as orjson writes it (``sort_keys``: OPT_SORT_KEYS), as UTF-8 bytes.
    ``weighing``: the data whose weight picks the path, when ``value`` only wraps it (its
    wrapping's own weight, walked at every call, would cost more than the data's).

    Raises ``orjson.JSONEncodeError`` as orjson would: a string with a lone surrogate, an
    integer past 64 bits, a key that is not a string, nesting past 254 levels."""
    if heavy(value if weighing is _ITSELF else weighing):
        return std_dumps(value, sort_keys=sort_keys)
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS if sort_keys else None)


def loads(text: str) -> Any:
    """Data of JSON text as orjson reads it. Raises ``orjson.JSONDecodeError`` where orjson
    would (its message says "depth limit" for nesting past 1,024 levels)."""
    if _bounded and text_weight(text) > _long_text:
        return std_loads(text)
    return orjson.loads(text)


# ---- the standard library's side ----


def std_dumps(value: Any, *, sort_keys: bool = False) -> bytes:
    """:func:`dumps` by the standard library: strings by its C encoder, which sizes its
    output exactly; the rest in Python, to write what orjson writes."""
    parts: list[str] = []
    try:
        _write(value, sort_keys, 0, parts)
    except SystemError as e:
        # "error return without exception set": a C function of CPython's that failed to
        # allocate lost its MemoryError. Writing plain data fails no other way: it is the heap
        # at its limit: a MemoryError with no text, as the interpreter raises it, which every
        # run reports as the memory limit (it was a SystemError).
        raise MemoryError from e
    try:
        return "".join(parts).encode("utf-8")
    except UnicodeEncodeError:
        raise orjson.JSONEncodeError("str is not valid UTF-8: surrogates not allowed") from None


def _write(value: Any, sort_keys: bool, depth: int, out: list[str]) -> None:
    kind = type(value)
    if kind is str:
        out.append(encode_basestring(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif kind is int:
        if not _I64_MIN <= value <= _U64_MAX:
            raise orjson.JSONEncodeError("Integer exceeds 64-bit range")
        out.append(int.__repr__(value))
    elif kind is float:
        out.append(float_text(value))
    elif kind is dict or kind is list or kind is tuple:
        if depth >= _WRITE_DEPTH:
            raise orjson.JSONEncodeError("Recursion limit reached")
        if kind is dict:
            items = value.items()
            if not all(type(key) is str for key in value):
                raise orjson.JSONEncodeError("Dict key must be str")
            if sort_keys:
                items = sorted(items, key=lambda pair: pair[0])
            out.append("{")
            for i, (key, item) in enumerate(items):
                out.append(f"{',' if i else ''}{encode_basestring(key)}:")
                _write(item, sort_keys, depth + 1, out)
            out.append("}")
        else:
            out.append("[")
            for i, item in enumerate(value):
                if i:
                    out.append(",")
                _write(item, sort_keys, depth + 1, out)
            out.append("]")
    else:
        raise orjson.JSONEncodeError(f"Type is not JSON serializable: {kind.__name__}")


def float_text(number: float) -> str:
    """A float as orjson writes it: ``null`` for NaN and the infinities, else ``repr`` but
    for exponents -5 (written out: ``0.000015``) to -9 (one digit: ``1.5e-7``)."""
    if math.isnan(number) or math.isinf(number):
        return "null"
    text = float.__repr__(number)
    mantissa, e, exponent = text.partition("e-0")
    if not e:
        return text
    if exponent != "5":
        return f"{mantissa}e-{exponent}"
    sign = "-" if mantissa.startswith("-") else ""
    return f"{sign}0.0000{mantissa.lstrip('-').replace('.', '')}"


def std_loads(text: str) -> Any:
    """:func:`loads` by the standard library: what orjson refuses is refused (NaN, a number
    past a double, a lone surrogate, nesting past 1,024 levels), an integer past 64 bits is
    a float, as orjson reads them."""
    try:
        value = json.loads(text, parse_constant=no_constant, parse_float=finite)
    except RecursionError:
        raise orjson.JSONDecodeError("depth limit exceeded", text, 0) from None
    except ValueError as e:  # both parsers' errors are ValueErrors
        raise orjson.JSONDecodeError(str(e), text, 0) from None
    try:
        return _as_read(value, 0, text)
    except RecursionError:
        raise orjson.JSONDecodeError("depth limit exceeded", text, 0) from None


def _as_read(value: Any, depth: int, text: str) -> Any:
    """``value`` as orjson would have read it; raises as it would have."""
    kind = type(value)
    if kind is str:
        _check_text(value, text)
    elif kind is int:
        if not _I64_MIN <= value <= _U64_MAX:
            return float(value)
    elif kind is dict or kind is list:
        if depth >= _READ_DEPTH:
            raise orjson.JSONDecodeError("depth limit exceeded", text, 0)
        if kind is dict:
            for key in value:
                _check_text(key, text)
                value[key] = _as_read(value[key], depth + 1, text)
        else:
            for i, item in enumerate(value):
                value[i] = _as_read(item, depth + 1, text)
    return value


def _check_text(value: str, text: str) -> None:
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise orjson.JSONDecodeError("lone surrogate in string", text, 0) from None


def no_constant(name: str) -> Any:
    """NaN and Infinity, which the standard library's parser takes and JSON (and orjson)
    does not."""
    raise ValueError(f"{name} is not JSON")


def finite(text: str) -> float:
    """A number, refused as orjson refuses it when it is past a double's range."""
    number = float(text)
    if math.isinf(number):
        raise ValueError(f"{text[:40]} is infinity when parsed as double")
    return number
