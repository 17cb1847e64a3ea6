"""Property tests for what reads a host's config: size and time words, the limits table, a
whole ``codemode.toml``. Whatever the input, the answer is a value in range or a
:class:`ConfigError` with a short message: never another exception, a hang, or memory that
grows with the input.

Examples are derandomized (the same every run) so the suite stays deterministic; hypothesis
still shrinks any failure to its smallest input.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from engine import Config, ConfigError, Limits, parse_size
from engine._limits import LIMIT_NAMES, MAX_LIMIT
from tests._fuzz import derandomized

FUZZ = derandomized(200, HealthCheck.function_scoped_fixture)
# A message names the value cut short, so a huge input never makes a huge message.
MAX_MESSAGE = 600

UNITS = ["", "b", "k", "kb", "KiB", "m", "MB", "mib", "g", "GB", "gib", "t", "ms", "s", "min"]
size_words = st.builds(
    lambda ws1, number, ws2, unit, ws3: f"{ws1}{number}{ws2}{unit}{ws3}",
    st.sampled_from(["", " ", "\t", "\n"]),
    st.one_of(
        st.integers(min_value=0, max_value=10**30).map(str),
        st.decimals(allow_nan=False, allow_infinity=False, places=3).map(str),
        st.text(alphabet="0123456789.-+e_", min_size=1, max_size=400),
    ),
    st.sampled_from(["", " "]),
    st.sampled_from(UNITS),
    st.sampled_from(["", " ", "\n"]),
)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=80),
    size_words,
)
values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


def _short_config_error(call: Any) -> Any:
    """``call()``'s value, or None when it raised a ConfigError with a bounded message."""
    try:
        return call()
    except ConfigError as e:
        assert len(str(e)) <= MAX_MESSAGE, str(e)[:200]
        assert str(e).strip(), "an empty message"
        return None


@FUZZ
@given(st.one_of(size_words, json_scalars, st.text(max_size=2000)))
def test_parse_size_gives_bytes_in_range_or_a_config_error(raw: Any) -> None:
    """parse_size: an int from 0 to MAX_LIMIT, or a ConfigError naming the value."""
    size = _short_config_error(lambda: parse_size(raw, what="memory"))
    if size is not None:
        assert isinstance(size, int) and 0 <= size <= MAX_LIMIT


def test_parse_size_of_a_huge_word_is_refused_at_once() -> None:
    """Words far past any size (a million digits, 1e400 bytes) are refused, not computed."""
    for raw in ("9" * 1_000_000, "9" * 400 + "gb", "1" + "0" * 20 + "gib", "0." + "9" * 100000):
        with pytest.raises(ConfigError) as caught:
            parse_size(raw)
        assert len(str(caught.value)) <= MAX_MESSAGE


@FUZZ
@given(st.dictionaries(st.sampled_from([*sorted(LIMIT_NAMES), "memroy", ""]), values, max_size=6))
def test_limits_table_gives_limits_or_a_config_error(table: dict[str, Any]) -> None:
    """Any [codemode.limits] table: Limits within range, or a ConfigError."""
    limits = _short_config_error(lambda: Limits.from_mapping(table))
    if limits is not None:
        for name in LIMIT_NAMES:
            value = getattr(limits, name)
            assert isinstance(value, int) and 0 <= value <= MAX_LIMIT
        assert limits.for_run() is not None  # the sandbox takes them as they are


keys = st.one_of(
    st.sampled_from(
        [
            *("codemode", "limits", "runner", "data_dir", "queue_timeout", "kind", "mode"),
            *("slots", "script_wait", "data_limit", "addresses", "token", "token_file", "tls"),
            *("cooldown", *sorted(LIMIT_NAMES)),
        ]
    ),
    st.text(max_size=10),
)
tables = st.recursive(
    st.dictionaries(keys, values, max_size=5),
    lambda inner: st.dictionaries(keys, st.one_of(values, inner), max_size=5),
    max_leaves=20,
)


@FUZZ
@given(st.one_of(tables, st.fixed_dictionaries({"codemode": tables})))
def test_config_mapping_gives_a_config_or_a_config_error(data: dict[str, Any]) -> None:
    """Any mapping, as TOML would give it: a Config, or a ConfigError."""
    config = _short_config_error(lambda: Config.from_mapping(data))
    if config is not None:
        assert isinstance(config.limits, Limits)
        assert 0 < config.queue_timeout < float("inf")


toml_text = st.one_of(
    st.text(max_size=400),
    st.text(alphabet=string.printable, max_size=400),
    st.lists(
        st.sampled_from(
            [
                "[codemode]\n",
                "[codemode.limits]\n",
                "[codemode.runner]\n",
                'memory = "4mb"\n',
                "memory = 1e400\n",
                "calls = -1\n",
                "queue_timeout = nan\n",
                'kind = "remote"\n',
                'addresses = ["a:1"]\n',
                "a = [[[[[[[[[[]]]]]]]]]]\n",
                'data_dir = "x"\n',
                "[[codemode]]\n",
                "x = {a = {b = {c = 1}}}\n",
                "slots = 99999999999999999999\n",
            ]
        ),
        max_size=8,
    ).map("".join),
)


@FUZZ
@given(toml_text)
def test_config_file_gives_a_config_or_a_config_error(tmp_path: Path, text: str) -> None:
    """Any text in codemode.toml: a Config, or a ConfigError."""
    path = tmp_path / "codemode.toml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    _short_config_error(lambda: Config.load(path))


@pytest.mark.parametrize("depth", [100, 2000, 200_000])
def test_deeply_nested_toml_is_a_config_error(tmp_path: Path, depth: int) -> None:
    """TOML nested past the parser's recursion is refused as a ConfigError, not a crash."""
    path = tmp_path / "codemode.toml"
    path.write_text("a = " + "[" * depth + "]" * depth + "\n")
    with pytest.raises(ConfigError):
        Config.load(path)


def test_a_huge_config_file_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    """A config far larger than any real one is refused by its size."""
    path = tmp_path / "codemode.toml"
    with path.open("wb") as f:
        f.write(b"# " + b"x" * (4 << 20) + b"\n")
    with pytest.raises(ConfigError, match="too large"):
        Config.load(path)
