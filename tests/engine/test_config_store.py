"""[codemode.store] in codemode.toml: which session log, checked before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import Config, ConfigError, MemoryStore, PostgresStore, SqliteStore
from engine._config import data_directory


def _config(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "codemode.toml"
    path.write_text(text)
    return Config.load(path)


def test_default_store_is_sqlite_in_data_dir(tmp_path: Path) -> None:
    config = _config(tmp_path, '[codemode]\ndata_dir = "log"\n')
    assert config.data_dir is not None
    store = config.store.build(config.data_dir)
    assert isinstance(store, SqliteStore) and store.path.parent == tmp_path / "log"
    assert isinstance(Config().store.build(None), MemoryStore)
    assert config.store.lease_ms == 30_000


def test_sqlite_store_without_a_data_dir_is_refused(tmp_path: Path) -> None:
    """kind = "sqlite" asks for a log on disk: without a data_dir it is a ConfigError saying
    to set one (as kind = "postgres" without a dsn is), never a log in memory that dies with
    the process. A data_dir given apart from the file (--data-dir) is where it goes."""
    config = _config(tmp_path, '[codemode.store]\nkind = "sqlite"\n')
    with pytest.raises(ConfigError) as caught:
        config.store.build(None)
    message = str(caught.value)
    assert str(tmp_path / "codemode.toml") in message and "[codemode.store]" in message
    assert 'kind = "sqlite" needs a data_dir' in message and "--data-dir" in message
    store = config.store.build(tmp_path / "elsewhere")
    assert isinstance(store, SqliteStore) and store.path.parent == tmp_path / "elsewhere"
    memory = _config(tmp_path, '[codemode.store]\nkind = "memory"\n')
    assert isinstance(memory.store.build(None), MemoryStore)
    assert isinstance(memory.store.build(tmp_path / "unused"), MemoryStore)


def test_postgres_store_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_DSN", "postgresql://app@db.internal/codemode")
    config = _config(
        tmp_path,
        '[codemode.store]\nkind = "postgres"\ndsn_env = "MY_DSN"\nschema = "agents"\nlease_ms = 5000\n',
    )
    store = config.store.build(None)
    assert isinstance(store, PostgresStore)
    assert (store.dsn, store.schema, config.store.lease_ms) == (
        "postgresql://app@db.internal/codemode",
        "agents",
        5000,
    )


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ('kind = "mysql"', 'kind = \'mysql\'; use "sqlite", "postgres" or "memory"'),
        ('kind = "postgres"', "needs dsn"),
        ('kind = "postgres"\ndsn = "x"\ndsn_env = "Y"', "dsn or dsn_env, not both"),
        ('dsn = "postgresql://x"', 'is for kind = "postgres" only'),
        ("lease_ms = 5", "lease_ms must be whole milliseconds, 100 to 604,800,000"),
        # Past a week (the other times' bound), it overflowed the store's time column: an
        # OverflowError (SQLite) or NumericValueOutOfRange (PostgreSQL) traceback at start.
        ("lease_ms = 9223372036854775807", "lease_ms must be whole milliseconds, 100 to"),
        ("max_connections = 0", "max_connections must be a whole number"),
        ("answer_timeout = 0", "answer_timeout must be seconds, over 0"),
        ('answer_timeout = "30"', "answer_timeout must be seconds, over 0"),
        ("colour = 1", "unknown key(s) 'colour'"),
    ],
)
def test_bad_store_table_is_refused(tmp_path: Path, table: str, named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _config(tmp_path, f"[codemode.store]\n{table}\n")
    assert named in str(caught.value) and "[codemode.store]" in str(caught.value)


def test_a_long_bad_type_check_is_quoted_cut_short(tmp_path: Path) -> None:
    """A wrong value is quoted up to a bound, as every other key's (a long one was quoted
    whole, a screenful for a pasted block)."""
    with pytest.raises(ConfigError) as caught:
        _config(tmp_path, f'[codemode]\ntype_check = "{"x" * 5000}"\n')
    assert "type_check = 'xxx" in str(caught.value) and len(str(caught.value)) < 300


def test_postgres_answer_timeout_reaches_the_store(tmp_path: Path) -> None:
    """[codemode.store] answer_timeout is the PostgreSQL store's bound on a wait for the
    server's answers (30 s when not given)."""
    table = '[codemode.store]\nkind = "postgres"\ndsn = "postgresql://x"\n'
    default = _config(tmp_path, table).store.build(None)
    given = _config(tmp_path, table + "answer_timeout = 2.5\n").store.build(None)
    assert isinstance(default, PostgresStore) and isinstance(given, PostgresStore)
    assert (default._answer, given._answer) == (30.0, 2.5)


def test_an_unset_dsn_env_is_named_when_the_store_is_made(tmp_path: Path) -> None:
    """dsn_env is read when the store is made, not when the file is: a --data-dir that puts
    the log in SQLite does not need it set (it was refused before the flag was applied)."""
    config = _config(
        tmp_path, '[codemode.store]\nkind = "postgres"\ndsn_env = "CODEMODE_UNSET_DSN"\n'
    )
    with pytest.raises(ConfigError) as caught:
        config.store.build(None)
    assert "$CODEMODE_UNSET_DSN is not set" in str(caught.value)
    # Where it was set, once: the table was named twice ("x.toml: [codemode.store]: x.toml:
    # [codemode.store] dsn_env = ...").
    assert str(caught.value).count("[codemode.store]") == 1, str(caught.value)
    assert str(caught.value).startswith(f"{tmp_path / 'codemode.toml'}: [codemode.store] dsn_env")
    assert config.with_data_dir(tmp_path / "data").store.kind == "sqlite"


def test_a_bad_schema_name_says_where_it_was_set(tmp_path: Path) -> None:
    """The store refuses a schema that is not a plain identifier when it is made; the error
    names the config's table, as every other mistake in it does (it named the value only)."""
    config = _config(
        tmp_path, '[codemode.store]\nkind = "postgres"\ndsn = "postgresql://x"\nschema = "a b"\n'
    )
    with pytest.raises(ConfigError) as caught:
        config.store.build(None)
    assert "codemode.toml: [codemode.store]: the PostgreSQL schema name 'a b'" in str(caught.value)


def test_engine_lease_past_a_week_is_refused() -> None:
    """CodeMode(lease_ms=...) is bounded as codemode.toml's lease_ms is (one check)."""
    from engine import CodeMode

    with pytest.raises(ConfigError, match="lease_ms = 9223372036854775807 must be whole"):
        CodeMode([], store=MemoryStore(), lease_ms=2**63 - 1)


def test_data_dir_with_a_tilde_is_the_home_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """data_dir = "~/..." means the home directory, as in a shell, not a directory named
    "~" beside the config file (where the log went before, unseen)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    config = _config(tmp_path, '[codemode]\ndata_dir = "~/agents/log"\n')
    assert config.data_dir == tmp_path / "home" / "agents" / "log"


async def test_a_host_makes_the_clis_engine_from_a_config_file(tmp_path: Path) -> None:
    """`CodeMode(tools, **Config.load(path).engine_options())`: the engine the CLI makes from
    the same file (its log, limits, language and lease); CodeMode read no file, and a host
    had to copy the CLI's wiring to honour one."""
    from engine import CodeMode, tool

    path = tmp_path / "codemode.toml"
    path.write_text(
        '[codemode]\nlanguage = "python"\ndata_dir = "data"\n'
        "[codemode.limits]\ncalls = 1\n[codemode.store]\nlease_ms = 5000\n"
    )

    @tool
    def echo(x: int) -> int:
        """Echo."""
        return x

    engine = CodeMode([echo], **Config.load(path).engine_options(runner=False))
    try:
        assert engine.language == "python"
        assert engine.limits_for("default").calls == 1
        assert engine.lease_ms == 5000
        assert isinstance(engine.store, SqliteStore)
        assert (tmp_path / "data" / SqliteStore.FILE_NAME).exists()
    finally:
        await engine.aclose()


def test_a_data_dir_through_a_dangling_link_names_the_link(tmp_path: Path) -> None:
    """A data_dir that is (or is under) a link to a path that is not there was "cannot make
    the directory (File exists)", of a path that does not exist."""
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match=r"gone is a link that leads to .*nowhere, which is not"):
        data_directory(tmp_path / "gone")
    with pytest.raises(ConfigError, match=r"sub/log: .*gone is a link that leads to .*nowhere, "):
        data_directory(tmp_path / "gone" / "sub" / "log")
    assert not (tmp_path / "nowhere").exists()
    # Through a chain of links, the end of the chain (the first hop is there, as a link).
    (tmp_path / "first").symlink_to(tmp_path / "second")
    (tmp_path / "second").symlink_to(tmp_path / "end")
    with pytest.raises(ConfigError, match=r"first is a link that leads to .*/end, which is not"):
        data_directory(tmp_path / "first")
