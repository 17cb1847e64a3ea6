"""Mistakes a host makes through the API: each is one error of the engine's family, raised
when the host makes it (not at the first run), naming the problem and the fix."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import engine
from engine import (
    CodeMode,
    CodeModeError,
    Config,
    ConfigError,
    Limits,
    MemoryStore,
    RunnerConfig,
    Skill,
    SqliteStore,
    StoreUnavailable,
    Tool,
    ToolDefinitionError,
    build_runner,
    tool,
)
from tests.engine.conftest import InProcessRunner


def test_every_public_error_is_a_codemode_error() -> None:
    """One family: a host that catches CodeModeError catches every error the engine raises."""
    errors = [
        value
        for name in engine.__all__
        if inspect.isclass(value := getattr(engine, name)) and issubclass(value, BaseException)
    ]
    assert {e.__name__ for e in errors} >= {"ToolCallError", "ToolDefinitionError"}
    for error in errors:
        assert issubclass(error, CodeModeError), error


# --- tools -----------------------------------------------------------------------------------


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def test_a_plain_function_is_a_tool(inproc: InProcessRunner) -> None:
    """A typed function passed without @tool becomes a tool as @tool would make it."""
    code_mode = CodeMode([add], runner=inproc)
    assert [t.name for t in code_mode.tools] == ["add"]
    assert code_mode.tools[0].description == "Add two numbers."
    result = await code_mode.run_code("return await tools.add({ a: 2, b: 3 })")
    assert result.value == 5, result.text


def test_tools_that_are_not_a_list_of_tools() -> None:
    """One tool where the list belongs, or something that is not a tool, is named."""
    with pytest.raises(ToolDefinitionError, match=r"pass \[add\], not add"):
        CodeMode(add)  # type: ignore[arg-type]
    with pytest.raises(ToolDefinitionError, match="is a list of tools"):
        CodeMode("add")  # type: ignore[arg-type]
    with pytest.raises(ToolDefinitionError, match="42 is not a tool"):
        CodeMode([add, 42])  # type: ignore[list-item]
    with pytest.raises(ToolDefinitionError, match="no type annotation"):
        CodeMode([lambda x: x])


async def test_client_tool_from_a_function(inproc: InProcessRunner) -> None:
    """@tool(client=True) declares a tool the client runs: the call pauses the script until
    the client's result comes back through client_result, checked against the output schema."""

    @tool(client=True)
    def pick_file(prompt: str) -> str:
        """Ask the user to pick a file."""
        raise AssertionError("a client tool's body never runs on the host")

    assert pick_file.client and pick_file.handler is None
    code_mode = CodeMode([pick_file], runner=inproc)
    paused = await code_mode.run_code("return await tools.pick_file({ prompt: 'Which?' })")
    assert paused.status == "paused", paused.text
    (waiting,) = paused.waiting
    assert waiting["reason"] == "client" and waiting["arguments"] == {"prompt": "Which?"}
    await code_mode.client_result(paused.script_id, waiting["call_id"], "report.pdf")
    result = await code_mode.resume(paused.script_id)
    assert (result.status, result.value) == ("finished", "report.pdf")


async def test_client_result_that_breaks_the_output_schema(inproc: InProcessRunner) -> None:
    """A client tool's result is checked against its return annotation."""

    @tool(client=True)
    def count_files() -> int:
        """How many files the user has."""
        ...

    code_mode = CodeMode([count_files], runner=inproc)
    paused = await code_mode.run_code(
        "try { return await tools.count_files({}) } catch (e) { return e.message }"
    )
    await code_mode.client_result(paused.script_id, paused.waiting[0]["call_id"], "many")
    result = await code_mode.resume(paused.script_id)
    assert "does not match its output schema" in result.value


async def test_a_client_result_json_cannot_carry_names_the_tool(inproc: InProcessRunner) -> None:
    """An integer past 64 bits from the client fails the call as a host tool's result does,
    naming the tool and what a result must be (the script read "Integer exceeds 64-bit
    range" alone)."""

    @tool(client=True)
    def count_files() -> Any:
        """How many files the user has."""
        ...

    code_mode = CodeMode([count_files], runner=inproc)
    paused = await code_mode.run_code(
        "try { return await tools.count_files({}) } catch (e) { return e.message }"
    )
    await code_mode.client_result(paused.script_id, paused.waiting[0]["call_id"], {"n": 2**70})
    result = await code_mode.resume(paused.script_id)
    assert result.value == (
        "tools.count_files returned a result that cannot be sent to the script (Integer "
        "exceeds 64-bit range); the tool must return JSON data (integers within 64 bits, text "
        "without lone surrogates)"
    )


def test_mcp_tool_with_an_empty_input_schema_takes_any_object() -> None:
    """inputSchema {} (sent by real servers) declares a tool that takes any object; so does
    one with properties but no type. A schema of another type is still refused."""
    empty = Tool.from_mcp({"name": "ping", "inputSchema": {}})
    assert empty.input_schema == {"type": "object"}
    untyped = Tool.from_mcp(
        {"name": "find", "inputSchema": {"properties": {"q": {"type": "string"}}}}
    )
    assert untyped.input_schema["type"] == "object"
    assert "find(input?: { q?: string })" in CodeMode([empty, untyped]).definition()["description"]
    with pytest.raises(ToolDefinitionError, match='"type": "string"'):
        Tool.from_mcp({"name": "bad", "inputSchema": {"type": "string"}})


# --- limits ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"calls": -1}, "calls = -1 must be a whole number, 0 or more"),
        ({"calls": 1.5}, "calls = 1.5 must be a whole number"),
        ({"memory": "lots"}, "memory = 'lots' is not a size"),
        ({"memory": 1024}, "memory = 1024 is under 1 MiB"),
        ({"compute_ms": 0}, "compute_ms = 0 is under 1 ms; give at least 1"),
        # A word under a millisecond said only "must be at least 1", not what it was taken as.
        ({"compute_ms": "0.0005s"}, "compute_ms = '0.0005s' is under 1 ms"),
        # Taken, it failed every script, saying "do less work in all" to its model.
        ({"total_compute_ms": 0}, "total_compute_ms = 0 is under 1 ms; give at least 1"),
        ({"total_compute_ms": "0.1ms"}, "total_compute_ms = '0.1ms' is under 1 ms"),
        ({"compute_ms": -5}, "compute_ms = -5 is negative"),  # it said "is not a time"
        # The sandbox's CPU timer took it up to 2**43 ms and crashed past that (time_t).
        ({"compute_ms": 2**44}, "compute_ms = 17,592,186,044,416 is over 2,147,483,647"),
        ({"results": True}, "results = True is not a number"),
        ({"arguments": 2**60}, "the largest limit the sandbox takes"),
    ],
)
def test_bad_limits_are_refused_when_made(kwargs: dict[str, object], named: str) -> None:
    """A bad limit fails at Limits(...), naming it, not as a pydantic error at the first run."""
    with pytest.raises(ConfigError, match=named.replace("(", r"\(")):
        Limits(**kwargs)  # type: ignore[arg-type]


def test_an_unknown_limit_is_refused_listing_the_limits(tmp_path: Path) -> None:
    """Limits(foo=1) is refused as [codemode.limits] foo is: a ConfigError naming the unknown
    limit and listing every limit, not a bare TypeError from the dataclass."""
    with pytest.raises(ConfigError) as made:
        Limits(memroy="1gb")  # type: ignore[call-arg]
    config = tmp_path / "codemode.toml"
    config.write_text("[codemode.limits]\nmemroy = '1gb'\n")
    with pytest.raises(ConfigError) as loaded:
        Config.load(config)
    listing = "the limits are " + ", ".join(sorted(vars(Limits())))
    for error in (made, loaded):
        assert "unknown limit 'memroy'" in str(error.value)
        assert str(error.value).endswith(listing)
    with pytest.raises(ConfigError, match="unknown limit 'calls_max'"):
        dataclasses.replace(Limits(), calls_max=5)  # type: ignore[call-arg]


def test_limits_take_size_and_time_words() -> None:
    """Limits(...) takes the words the config takes."""
    limits = Limits(memory="4mb", compute_ms="2s", shown="1.5 KiB")  # type: ignore[arg-type]
    assert (limits.memory, limits.compute_ms, limits.shown) == (4 << 20, 2000, 1536)


def test_limits_option_that_is_not_limits() -> None:
    """CodeMode(limits=...) takes Limits or a function; a table is refused with the fix."""
    with pytest.raises(ConfigError, match=r"Limits\.from_mapping"):
        CodeMode([add], runner=InProcessRunner(), limits={"calls": 5})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"the Limits class; pass Limits\(\)"):
        CodeMode([add], runner=InProcessRunner(), limits=Limits)  # type: ignore[arg-type]


def test_an_async_limits_function_is_refused_when_the_engine_is_made() -> None:
    """Its coroutine was never awaited: each run_code failed saying the function "gave
    coroutine", and Python warned of a coroutine never awaited."""

    async def limits(tenant: str) -> Limits:
        return Limits()

    with pytest.raises(ConfigError, match="is an async function; give a plain function"):
        CodeMode([add], runner=InProcessRunner(), limits=limits)  # type: ignore[arg-type]


async def test_limits_function_failing_leaves_no_script() -> None:
    """A limits function that gives no Limits fails run_code before the script is recorded:
    no "active" script is left behind that could never run."""
    store = MemoryStore()
    code_mode = CodeMode(
        [add],
        runner=InProcessRunner(),
        store=store,
        limits=lambda tenant: {"calls": 5},  # type: ignore[arg-type,return-value]
    )
    with pytest.raises(ConfigError, match="gave dict for tenant 'default'"):
        await code_mode.run_code("return 1")
    assert await store.scripts() == []


def test_a_bad_type_check_or_language_is_a_config_error() -> None:
    """type_check and language are options like live_wait: a wrong one is a ConfigError that
    names the values it may take."""
    with pytest.raises(ConfigError, match=r'type_check = \'maybe\'; use "on", "off", a Type'):
        CodeMode([add], runner=InProcessRunner(), type_check="maybe")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r'language = \'ruby\'; use "javascript" or "python"'):
        CodeMode([add], runner=InProcessRunner(), language="ruby")  # type: ignore[arg-type]


# --- the data directory ----------------------------------------------------------------------


async def test_data_dir_with_a_dot_is_a_directory(tmp_path: Path) -> None:
    """data_dir="sess.v1" is a directory like any other, the log a file inside it."""
    data = tmp_path / "sess.v1"
    code_mode = CodeMode([add], runner=InProcessRunner(), data_dir=data)
    result = await code_mode.run_code("return 1")
    await code_mode.aclose()
    assert result.status == "finished"
    assert data.is_dir() and (data / "codemode.sqlite3").is_file()


def test_data_dir_that_is_a_file(tmp_path: Path) -> None:
    """A data_dir that is a file is refused and left alone; a session log there is named."""
    text = tmp_path / "notes"
    text.write_text("keep me")
    with pytest.raises(ConfigError, match="is a file, not a directory"):
        CodeMode([add], runner=InProcessRunner(), data_dir=text)
    assert text.read_text() == "keep me"
    old_log = tmp_path / "sess.v1"
    sqlite3.connect(old_log).execute("create table t (x)").connection.close()
    with pytest.raises(ConfigError, match="if it is a session log, move it into a directory"):
        CodeMode([add], runner=InProcessRunner(), data_dir=old_log)


def test_data_dir_that_cannot_be_made(tmp_path: Path) -> None:
    """A data_dir under a file cannot be made: a ConfigError, not an OSError."""
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="cannot make the directory"):
        CodeMode([add], runner=InProcessRunner(), data_dir=tmp_path / "file" / "log")


# --- config and runners: errors from below come back as ConfigError --------------------------


def test_relative_token_file_is_read_from_the_configs_folder_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """token_file = "runner.token" in conf/codemode.toml, loaded from the folder above, is
    conf/runner.token (it was conf/conf/runner.token)."""
    folder = tmp_path / "conf"
    folder.mkdir()
    (folder / "runner.token").write_text("t" * 32)
    (folder / "codemode.toml").write_text(
        '[codemode.runner]\nkind = "remote"\naddresses = ["127.0.0.1:9"]\n'
        'token_file = "runner.token"\n'
    )
    monkeypatch.chdir(tmp_path)
    config = Config.load("conf/codemode.toml")
    monkeypatch.chdir("/")  # the config's paths do not depend on where it is used
    runner = build_runner(config.runner)
    assert runner.addresses == ["127.0.0.1:9"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("config", "named"),
    [
        (RunnerConfig("remote", {"addresses": ["h:1"], "token_file": "nope"}), "nope"),
        (RunnerConfig("remote", {"addresses": ["h:1"], "token": "t", "tls": "yes"}), "tls"),
        (RunnerConfig("remote", {"addresses": ["h:1"], "token": "t", "cooldown": -1}), "cooldown"),
        (RunnerConfig("local", {"slots": "many"}), "slots"),
        (RunnerConfig("local", {"script_wait": float("nan")}), "script_wait"),
        (RunnerConfig("local", {"data_limit": 1000}), "data_limit"),
        (RunnerConfig("local", {"addresses": ["h:1"]}), "addresses"),
        (RunnerConfig("elsewhere"), "kind"),
    ],
)
def test_build_runner_errors_are_config_errors(config: RunnerConfig, named: str) -> None:
    """What the runner below refuses (its ValueErrors) reaches the host as a ConfigError."""
    with pytest.raises(ConfigError, match=named):
        build_runner(config)


_REMOTE = '[codemode.runner]\nkind = "remote"\naddresses = ["127.0.0.1:9"]\n'


@pytest.mark.parametrize(
    ("table", "named"),
    [
        (_REMOTE + 'token_file = "missing.token"', "token_file: cannot read the token file"),
        (_REMOTE + 'token_file = "empty.token"', "token_file: the token file .* is empty"),
        # Another file named by mistake: its whole text was the token.
        (_REMOTE + 'token_file = "codemode.toml"', "token_file: the token file .* has 4 lines"),
        (_REMOTE + 'token_env = "CODEMODE_NO_SUCH_TOKEN"', r"token_env: no token: .*NO_SUCH"),
        (_REMOTE + 'token = "t"\nca_file = "empty.token"', "ca_file .* cannot load it"),
        ('[codemode.runner]\ndata_limit = "1kb"', "data_limit is 1,024 bytes"),
    ],
    ids=[
        "token_file missing",
        "token_file empty",
        "token_file of lines",
        "token_env unset",
        "ca_file",
        "data_limit",
    ],
)
def test_runner_errors_name_the_config_file_and_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: str, named: str
) -> None:
    """What the runner refuses when it is built from a file (a token file it cannot read) is
    said as the file's other errors are: the file, the table, the key (they said
    "[codemode.runner]: cannot read the token file ...", naming neither)."""
    monkeypatch.delenv("CODEMODE_NO_SUCH_TOKEN", raising=False)
    (tmp_path / "empty.token").write_text("")
    path = tmp_path / "codemode.toml"
    path.write_text(table + "\n")
    config = Config.load(path)
    with pytest.raises(ConfigError) as caught:
        build_runner(config.runner)
    assert str(caught.value).startswith(f"{path}: [codemode.runner] "), caught.value
    assert re.search(named, str(caught.value)), caught.value


def test_bad_slots_variable_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default runner reads CODEMODE_SANDBOX_SLOTS; a bad value is a ConfigError."""
    monkeypatch.setenv("CODEMODE_SANDBOX_SLOTS", "lots")
    with pytest.raises(ConfigError, match="CODEMODE_SANDBOX_SLOTS='lots'"):
        CodeMode([add])


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[codemode]\nqueue_timeout = nan\n", "queue_timeout"),
        ("[codemode]\nqueue_timeout = inf\n", "queue_timeout"),
        # Past the week a time may be: it was told "must be seconds, over 0", which it was.
        *(
            (text, r"must be seconds, over 0 and at most 604,800 \(a week\)")
            for text in (
                "[codemode]\nqueue_timeout = 1e12\n",
                "[codemode]\nlive_wait = 604801\n",
                "[codemode.runner]\nscript_wait = 604801\n",
            )
        ),
        ('[codemode]\ndata_dir = ""\n', "data_dir"),
        # An address with no port was told it needed addresses = [...], which it had.
        (
            '[codemode.runner]\nkind = "remote"\naddresses = ["nohost"]\ntoken = "t"\n',
            r"\[codemode.runner\] runner address 'nohost' is not HOST:PORT",
        ),
        ("[codemode.runner]\nslots = 100000\n", "slots"),
        ('[codemode.runner]\nkind = "remote"\naddresses = ["h:1"]\ntoken_file = 5\n', "token_file"),
        # silence was left to the runner: 0 was refused without the file's name, and inf
        # taken, which turned off the check for a service gone silent.
        *(
            (
                f'[codemode.runner]\nkind = "remote"\naddresses = ["h:1"]\ntoken = "t"\n'
                f"silence = {value}\n",
                r"\[codemode.runner\] silence must be seconds, over 0",
            )
            for value in ("0", "inf", '"5"')
        ),
    ],
)
def test_config_values_out_of_range(tmp_path: Path, text: str, named: str) -> None:
    """Values TOML allows but no setting means (nan, inf, empty paths) are refused."""
    path = tmp_path / "codemode.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=named):
        Config.load(path)


# --- skills ----------------------------------------------------------------------------------


def test_skill_naming_a_missing_tool_is_refused() -> None:
    """A skill that names a tool the engine lacks is refused, naming the skill, the tool and
    the closest names; so are two skills of one name."""
    skill = Skill("billing", "Refunds.", "Refund carefully.", tools=("ad",))
    with pytest.raises(ToolDefinitionError) as caught:
        CodeMode([add], runner=InProcessRunner(), skills=[skill])
    message = str(caught.value)
    assert "skill billing" in message and "'ad'" in message and "closest tools are add" in message
    twice = Skill("billing", "Refunds.", "Again.")
    with pytest.raises(ToolDefinitionError, match="two skills are named 'billing'"):
        CodeMode([add], runner=InProcessRunner(), skills=[twice, twice])
    code_mode = CodeMode([add], runner=InProcessRunner())
    with pytest.raises(ToolDefinitionError, match="names tool 'ad'"):
        code_mode.add_skill(skill)
    assert code_mode.skills == []


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"worker": 5}, "worker is int"),
        ({"queue_timeout": 0}, "queue_timeout = 0"),
        ({"queue_timeout": float("nan")}, "queue_timeout = nan"),
        ({"retry_delay": -1}, "retry_delay = -1"),
        ({"call_timeout": "soon"}, "call_timeout = 'soon'"),
    ],
)
def test_engine_options_no_host_means(options: dict[str, object], named: str) -> None:
    """A worker that cannot be called, or times that are not seconds, fail at CodeMode(...)."""
    with pytest.raises(ConfigError, match=named):
        CodeMode([add], runner=InProcessRunner(), **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"tools": "list_prs"}, "tools is a list of tool names"),
        ({"tools": ("a", 5)}, "tools is a list of tool names"),
        ({"description": None}, "its description must be a string"),
        ({"files": {"notes.md": 5}}, "file 'notes.md' is int"),
    ],
)
def test_skill_made_wrongly(kwargs: dict[str, object], named: str) -> None:
    """A skill's parts of the wrong type are refused when the skill is made (a string of
    tool names was taken letter by letter)."""
    fields: dict[str, object] = {"name": "s", "description": "d", "instructions": "i"}
    with pytest.raises(ToolDefinitionError, match=named):
        Skill(**{**fields, **kwargs})  # type: ignore[arg-type]


def test_tables_that_are_not_tables() -> None:
    """Limits.from_mapping and Config.from_mapping of something not a mapping: ConfigError."""
    with pytest.raises(ConfigError, match="must be a table of limits, not int"):
        Limits.from_mapping(5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="a config is a table, not list"):
        Config.from_mapping([])  # type: ignore[arg-type]


def test_search_from_the_host_fails_as_the_scripts_call_would() -> None:
    """CodeMode.search("") raises the ToolCallError a script's tool_search gets: one family."""
    code_mode = CodeMode([add], runner=InProcessRunner())
    with pytest.raises(engine.ToolCallError, match="needs a query"):
        code_mode.search("")
    with pytest.raises(engine.ToolCallError, match="limit must be a whole number"):
        code_mode.search("add", limit=0)


def test_sqlite_store_at_a_path_it_cannot_use(tmp_path: Path) -> None:
    """SqliteStore (whose path is a directory) under a file or on a file: ConfigError naming
    it. Over a log file that is not SQLite, or one cut short: the log is damaged, for good,
    as damage found later is (a log cut short was "cannot open ...: malformed", without what
    to do)."""
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="cannot make the data directory"):
        SqliteStore(tmp_path / "file" / "log")
    with pytest.raises(ConfigError, match="is a file: give a directory"):
        SqliteStore(tmp_path / "file")
    (tmp_path / "data").mkdir()
    log_file = tmp_path / "data" / SqliteStore.FILE_NAME
    log_file.write_bytes(b"plain text, not a database" * 100)
    with pytest.raises(StoreUnavailable, match=r"is damaged .*no codemode log") as caught:
        SqliteStore(tmp_path / "data")
    assert caught.value.permanent and "restore it from a backup" in str(caught.value)
    log_file.unlink()
    asyncio.run(SqliteStore(tmp_path / "data").aclose())  # a log with its tables, on the disk
    db = sqlite3.connect(log_file)  # and pages enough that the schema's are cut off
    with db:
        db.execute("CREATE TABLE filler (b)")
        db.executemany("INSERT INTO filler VALUES (randomblob(4000))", [()] * 99)
    db.close()  # the last connection: its write-ahead log is checkpointed into the file
    with log_file.open("r+b") as f:
        f.truncate(8192)
    with pytest.raises(StoreUnavailable, match=r"is damaged \(database disk image is malformed\)"):
        SqliteStore(tmp_path / "data")


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_an_unknown_id_is_named_within_a_bound(
    store: str, tmp_path: Path, inproc: InProcessRunner
) -> None:
    """A script id or a call id a host passes on from a client may be huge: the error names
    it with its middle cut out (it echoed all of it: a megabyte of id, a megabyte of
    message), and still names a short one whole."""
    from engine import CallNotWaiting, ScriptNotFound

    log = MemoryStore() if store == "memory" else SqliteStore(tmp_path)
    engine = CodeMode([], runner=inproc, store=log)
    huge = "s" * 1_000_000
    with pytest.raises(ScriptNotFound) as missing:
        await engine.resume(huge)
    assert len(str(missing.value)) < 400 and "characters cut" in str(missing.value)
    with pytest.raises(ScriptNotFound, match=r"^no script 'nope' in the session log$"):
        await engine.resume("nope")
    done = await engine.run_code("return 1")
    with pytest.raises(CallNotWaiting) as no_call:
        await engine.approve(done.script_id, "c" * 1_000_000)
    assert len(str(no_call.value)) < 400 and "characters cut" in str(no_call.value)
    await engine.aclose()
