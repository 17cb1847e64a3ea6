"""codemode.toml read by Config: what a file with its settings in the wrong place is told."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import Config, ConfigError


@pytest.mark.parametrize(
    ("text", "said"),
    [
        # A setting above any table (no [codemode] line): it was called an unknown table.
        (
            'data_dir = "log"\n',
            "'data_dir' is outside any table; the settings go under [codemode]: put a "
            "[codemode] line above them",
        ),
        (
            'live = true\nlive_wait = 5\n[codemode]\ndata_dir = "log"\n',
            "'live', 'live_wait' are outside any table",
        ),
        # A table of ours without its prefix is told its name.
        (
            "[limits]\ncalls = 3\n",
            "unknown table [limits]; the settings go under [codemode]: write [codemode.limits]",
        ),
        ("[tool.codemode]\nx = 1\n", "unknown table(s) 'tool'; the settings go under [codemode]"),
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
