"""codemode.toml read by Config: what a file with its settings in the wrong place is told."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine import CodeMode, Config, ConfigError


@pytest.mark.parametrize(
    ("text", "said"),
    [
        # A setting above any table (no [codemode] line): it was called an unknown table.
        (
            'data_dir = "log"\n',
            "'data_dir' is outside any table; the settings go under [codemode]: put a "
            "[codemode] line above them",
        ),
        # With a [codemode] table already, they are told to move into it: a second
        # [codemode] line (the advice they were given) is not TOML.
        (
            'live = true\nlive_wait = 5\n[codemode]\ndata_dir = "log"\n',
            "'live', 'live_wait' are outside any table; the settings go under [codemode]: "
            "move them under the [codemode] table",
        ),
        (
            'data_dir = "log"\n[codemode]\nqueue_timeout = 10\n',
            "'data_dir' is outside any table; the settings go under [codemode]: move it under "
            "the [codemode] table",
        ),
        # A table of ours without its prefix is told its name.
        (
            "[limits]\ncalls = 3\n",
            "unknown table [limits]; the settings go under [codemode]: write [codemode.limits]",
        ),
        (
            "[codemode]\nqueue_timeout = 10\n[codemode.limits]\nsteps = 9\n[limits]\ncalls = 3\n",
            "unknown table [limits]; the settings go under [codemode]: move its keys into "
            "[codemode.limits]",
        ),
        ("[tool.codemode]\nx = 1\n", "unknown table(s) 'tool'; the settings go under [codemode]"),
        # A setting written as a table was told to write [codemode.data_dir], which the
        # config then refused ("must be the path of a directory").
        (
            '[data_dir]\npath = "x"\n',
            "unknown table [data_dir]; data_dir is a setting, not a table: write "
            "`data_dir = ...` under [codemode]",
        ),
    ],
)
def test_settings_outside_codemode_are_told_where_they_go(
    tmp_path: Path, text: str, said: str
) -> None:
    path = tmp_path / "codemode.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        Config.load(path)
    assert str(caught.value).startswith(f"{path}: "), caught.value
    assert said in str(caught.value), caught.value


def test_keys_of_any_type_outside_codemode_are_named() -> None:
    """A mapping given by hand may have keys that are no strings: Config.from_mapping({1:
    {}}) raised KeyError '1' (the keys were turned into strings, then looked up)."""
    table: dict[Any, Any] = {1: {}}
    with pytest.raises(ConfigError, match=r"^config: unknown table\(s\) 1; "):
        Config.from_mapping(table)
    keys: dict[Any, Any] = {"a": 2, 1: 2}
    with pytest.raises(ConfigError, match=r"^config: 1, 'a' are outside any table; "):
        Config.from_mapping(keys)


def test_a_boolean_is_shown_as_the_file_spells_it() -> None:
    """``type_check = false`` was refused as "type_check = False", Python's spelling."""
    with pytest.raises(ConfigError, match=r"\[codemode\] type_check = false; use "):
        Config.from_mapping({"codemode": {"type_check": False}})
    # A keyword of CodeMode(...) is said as Python spells it (the file's spelling leaked in).
    with pytest.raises(ConfigError, match=r"^tool_threads = True must be"):
        CodeMode(tool_threads=True)
