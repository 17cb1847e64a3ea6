"""sandbox/jsontext.py: the standard library's path writes and reads JSON exactly as orjson
does, so a call canonicalized by one on one run and by the other on the next matches its
record (replay compares the bytes), and a value reads the same whichever parsed it."""

from __future__ import annotations

import json
import math
import random
import struct
from collections.abc import Iterator
from enum import IntEnum
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox import jsontext, protocol
from sandbox.jsontext import ITEM_WEIGHT, LONG_TEXT

FUZZ = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Strings that need escapes, control characters, non-ASCII of every width, keys that sort
# differently by UTF-16 than by code point ("\uffff" < "😀" by code point, not by UTF-16).
SPECIAL = ['"', "\\", "/", "\b\f\n\r\t", "\x00\x1f\x7f", "\u2028\u2029", "é", "\uffff", "😀", "𝄞"]
text = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(SPECIAL)
integers = st.integers(-(2**63), 2**64 - 1) | st.sampled_from([0, -1, 2**53, 2**63, -(2**63)])
floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [1e-5, 1.5e-5, -9.99e-5, 1e-6, 1e-7, 2.5e-9, 1e-10, 1e-4, 1e16, 1e21, 1e22, 5e-324, -0.0]
)
scalars = st.none() | st.booleans() | integers | floats | text
json_data = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(text, inner, max_size=5),
    max_leaves=40,
)


@pytest.fixture
def bounded(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process as the sandbox process: heavy data goes through the standard library."""
    monkeypatch.setattr(jsontext, "_bounded", True)
    yield


def same(a: Any, b: Any) -> bool:
    """Equal with types and float signs: what orjson would write for each."""
    return orjson.dumps(a, option=orjson.OPT_SORT_KEYS) == orjson.dumps(
        b, option=orjson.OPT_SORT_KEYS
    ) and type(a) is type(b)


@FUZZ
@given(json_data, st.booleans())
def test_both_paths_write_the_same_bytes(value: Any, sort_keys: bool) -> None:
    option = orjson.OPT_SORT_KEYS if sort_keys else None
    assert jsontext.std_dumps(value, sort_keys=sort_keys) == orjson.dumps(value, option=option)


@FUZZ
@given(json_data)
def test_both_paths_read_the_same_data(value: Any) -> None:
    text = orjson.dumps(value).decode()
    assert same(jsontext.std_loads(text), orjson.loads(text))
    # The standard library's own text of it, floats as repr and all.
    text = json.dumps(value, ensure_ascii=False)
    assert same(jsontext.std_loads(text), orjson.loads(text))
    ascii_text = json.dumps(value)  # every non-ASCII character escaped, pairs included
    assert same(jsontext.std_loads(ascii_text), orjson.loads(ascii_text))


def test_floats_are_written_as_orjson_writes_them() -> None:
    """Over every exponent and random bit patterns: Python's repr differs from orjson's
    text for exponents -5 to -9, which float_text writes as orjson does."""
    rng = random.Random(7)
    numbers = [float(f"{m}e{e}") for e in range(-325, 309) for m in ("1", "1.5", "9.999")]
    numbers += [
        struct.unpack("d", rng.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(20_000)
    ]
    numbers += [rng.random() * 10.0 ** rng.randint(-12, 25) for _ in range(20_000)]
    differ = 0
    for number in numbers:
        assert jsontext.float_text(number) == orjson.dumps(number).decode(), number
        differ += not (math.isnan(number) or math.isinf(number)) and jsontext.float_text(
            number
        ) != repr(number)
    assert differ > 1000  # the cases repr alone would get wrong are among them
    assert [jsontext.float_text(x) for x in (math.nan, math.inf, -math.inf)] == ["null"] * 3


@pytest.mark.parametrize(
    "value, message",
    [
        ("\ud800", "str is not valid UTF-8: surrogates not allowed"),
        ({"\udfff": 1}, "str is not valid UTF-8: surrogates not allowed"),
        (2**64, "Integer exceeds 64-bit range"),
        (-(2**63) - 1, "Integer exceeds 64-bit range"),
        ({1: 2}, "Dict key must be str"),
    ],
)
def test_writing_refuses_what_orjson_refuses(value: Any, message: str) -> None:
    with pytest.raises(orjson.JSONEncodeError, match=message):
        orjson.dumps(value)
    with pytest.raises(orjson.JSONEncodeError, match=message):
        jsontext.std_dumps(value)


def test_data_nested_past_what_orjson_writes_is_refused_alike(bounded: None) -> None:
    """data_problem relies on the 254 levels orjson writes; the standard library's path
    stops at the same level, so a heavy value too deep is refused with the same words."""
    for depth in (protocol.MAX_DEPTH, protocol.MAX_DEPTH + 1):
        light: Any = "x"
        for _ in range(depth):
            light = [light]
        heavy: Any = "é" * LONG_TEXT
        for _ in range(depth):
            heavy = [heavy]
        assert jsontext.heavy(heavy) and not jsontext.heavy(light)
        assert protocol.data_problem(heavy) == protocol.data_problem(light)
    assert protocol.data_problem(light) is not None and "MAX_DEPTH" in protocol.data_problem(light)


@pytest.mark.parametrize(
    "text",
    ['"\\ud800"', '["a", "\\udc00b"]', "NaN", "[Infinity]", "1e400", "[1,", '"\ud800"'],
)
def test_reading_refuses_what_orjson_refuses(text: str) -> None:
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(text)
    with pytest.raises(orjson.JSONDecodeError):
        jsontext.std_loads(text)


def test_reading_too_deep_says_depth_limit() -> None:
    text = "[" * 2000 + "]" * 2000
    for parse in (orjson.loads, jsontext.std_loads):
        with pytest.raises(orjson.JSONDecodeError, match="depth limit"):
            parse(text)


def test_integers_past_64_bits_are_read_as_floats() -> None:
    """As orjson reads them: JSON.stringify(2 ** 64) is 18446744073709552000."""
    for text in ("18446744073709552000", "[-9223372036854775809]", "18446744073709551615"):
        assert same(jsontext.std_loads(text), orjson.loads(text))


def test_the_threshold_edge_gives_the_same_canonical_text(bounded: None) -> None:
    """Data at LONG_TEXT goes through orjson, one unit over through the standard library,
    and canonical_json is the same bytes either way, as is the call text replay compares."""
    base = jsontext.weight({"k": ["", "é", 1.5e-5, 2**63, None]})
    for extra in (0, 1):
        value = {"k": ["x" * (LONG_TEXT - base + extra), "é", 1.5e-5, 2**63, None]}
        assert jsontext.weight(value) == LONG_TEXT + extra
        assert jsontext.heavy(value) == bool(extra)
        canonical = protocol.canonical_json(value)
        assert canonical == orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        assert canonical == jsontext.std_dumps(value, sort_keys=True)
        text = orjson.dumps(value).decode()
        assert jsontext.loads(text) == orjson.loads(text) == jsontext.std_loads(text)
    assert jsontext.weight("x" * 10) == ITEM_WEIGHT + 10
    assert jsontext.weight("é" * 10) == ITEM_WEIGHT + 40
    assert jsontext.weight([{"a": "bc"}]) == 4 * ITEM_WEIGHT + 3


def test_heavy_data_is_written_and_read_by_the_standard_library(
    bounded: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the sandbox process (bounded), text and data past LONG_TEXT never reach orjson;
    elsewhere orjson does it all."""
    heavy_value = {"s": "é" * (LONG_TEXT // 4 + 1)}
    heavy_text = orjson.dumps(heavy_value).decode()
    light_value = {"s": "é" * 100}

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("orjson used for heavy data")

    monkeypatch.setattr(orjson, "dumps", refuse)
    monkeypatch.setattr(orjson, "loads", refuse)
    assert jsontext.loads(heavy_text) == heavy_value
    assert jsontext.dumps(heavy_value).decode() == heavy_text
    monkeypatch.undo()
    monkeypatch.setattr(jsontext, "_bounded", False)
    calls: list[int] = []
    real = orjson.dumps

    def counted(value: Any, option: Any = None) -> bytes:
        calls.append(1)
        return real(value, option=option)

    monkeypatch.setattr(orjson, "dumps", counted)
    jsontext.dumps(heavy_value)
    jsontext.dumps(light_value)
    assert len(calls) == 2


def test_an_allocation_that_lost_its_memory_error_is_the_memory_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Near a run's memory limit, a C function of CPython's that fails to allocate can lose
    its MemoryError ("error return without exception set"). Writing plain data fails no
    other way, so it is a MemoryError, which the run reports as the memory limit (a Python
    script of 600,000 items under 16 MiB ended with "SystemError" about one run in twelve)."""

    def lost(*_: Any) -> None:
        raise SystemError("error return without exception set")

    monkeypatch.setattr(jsontext, "_write", lost)
    with pytest.raises(MemoryError):
        jsontext.std_dumps([1, 2, 3])


def test_a_data_check_weighs_the_data_alone(bounded: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """protocol.data_problem checks the depth inside a wrapping of lists: it weighs the data
    itself, not the wrapping (a walk down the wrapping at every check cost a live JavaScript
    segment two thirds of its CPU), and heavy data still goes the standard library's way."""
    weighed: list[Any] = []
    real = jsontext.weight

    def recorded(value: Any, bound: int = LONG_TEXT) -> int:
        weighed.append(value)
        return real(value, bound)

    monkeypatch.setattr(jsontext, "weight", recorded)
    value = {"v": [1, 2]}
    assert protocol.data_problem(value) is None
    assert weighed == [value]
    deep: Any = []
    for _ in range(protocol.MAX_DEPTH):
        deep = [deep]
    assert "nests deeper" in (protocol.data_problem(deep) or "")
    heavy_deep: Any = ["é" * (LONG_TEXT // 4 + 1)]
    for _ in range(protocol.MAX_DEPTH):
        heavy_deep = [heavy_deep]

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("orjson used for heavy data")

    monkeypatch.setattr(orjson, "dumps", refuse)
    assert "nests deeper" in (protocol.data_problem(heavy_deep) or "")
    assert protocol.data_problem(["é" * (LONG_TEXT // 4 + 1)]) is None


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -1,
        2**63,
        2**64 - 1,
        -(2**63),
        2**64,
        -(2**63) - 1,
        1.5,
        math.nan,
        -math.inf,
        IntEnum("N", "ONE").ONE,
        "x",
        [1],
        {"a": 1},
    ],
)
def test_a_scalar_is_judged_as_orjson_writes_it(value: object) -> None:
    """data_problem answers numbers, truth values and null without orjson's walk, and as
    orjson would: an integer past 64 bits cannot cross, a float orjson writes as null can."""
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError:
        written = False
    else:
        written = True
    problem = protocol.data_problem(value)
    assert (problem is None) == written, (value, problem)
