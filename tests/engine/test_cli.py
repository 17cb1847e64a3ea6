"""The `codemode` command, run as a new user runs it: a subprocess from the repository root."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests._needs import require
from tests.engine.conftest import cli_taking_ctrl_c

ROOT = Path(__file__).resolve().parents[2]


def codemode(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args],
        capture_output=True,
        text=True,
        input=stdin,
        cwd=cwd,
        timeout=120,
        env=None if env is None else {**os.environ, **env},
    )


def test_stale_prs_example_prints_the_spec_format() -> None:
    """The spec's stale-PRs script runs end to end through the CLI in the spec's format."""
    proc = codemode("run", "examples/stale_prs.js", "--tools", "examples/tracker_tools.py")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        "Script finished.\nPrinted:\n2 stale PRs\nReturned:\n"
        '[{"number":15,"reviews":2},{"number":12,"reviews":0}]\n'
    )


def test_run_json_from_stdin_with_a_fence() -> None:
    """--json prints JSON lines: the script's id before its first step, then the whole result;
    a fenced script on stdin runs."""
    script = "```js\nconst prs = await tools.github__list_prs({ repo: 'acme/api' });\nreturn prs.length\n```"
    proc = codemode("run", "-", "--tools", "examples/tracker_tools.py", "--json", stdin=script)
    assert proc.returncode == 0, proc.stderr
    started, line = proc.stdout.splitlines()
    result = json.loads(line)
    assert json.loads(started) == {"script_id": result["script_id"]}
    assert result["status"] == "finished"
    assert result["value"] == 4
    assert result["content"] == [{"type": "text", "text": result["text"]}]


def test_typed_script_is_checked_unless_the_config_says_off(tmp_path: Path) -> None:
    """`run` type-checks a script against the tools' declarations before its first call (a
    typed script, as models write them); `type_check = "off"` in codemode.toml skips it."""
    from engine.languages.javascript import CompilerMissing, find_compiler
    from tests._needs import require

    try:
        find_compiler()
    except CompilerMissing as e:
        require(str(e))
    script = tmp_path / "wrong.ts"
    script.write_text(
        "const prs: { number: number }[] = await tools.github__list_prs({ repo: 'acme/api' });\n"
        "return await tools.github__get_reviews({ number: String(prs[0].number) });\n"
    )
    checked = codemode("run", str(script), "--tools", "examples/tracker_tools.py")
    assert "TypeCheckError" in checked.stdout and "line 2: " in checked.stdout, checked
    described = codemode("describe", "--tools", "examples/tracker_tools.py")
    assert "type-checked against the declarations" in described.stdout
    config = tmp_path / "codemode.toml"
    config.write_text('[codemode]\ntype_check = "off"\n')
    unchecked = codemode(
        "run", str(script), "--tools", "examples/tracker_tools.py", "--config", str(config)
    )
    assert "TypeCheckError" not in unchecked.stdout and "Script failed." in unchecked.stdout
    assert "number" in unchecked.stdout, unchecked


def test_describe_and_search() -> None:
    """describe prints the run_code description; search prints a tool_search answer."""
    described = codemode("describe", "--tools", "examples/tracker_tools.py")
    assert described.returncode == 0, described.stderr
    assert "github__list_prs(input:" in described.stdout
    searched = codemode(
        "search", "reviews of a pull request", "--tools", "examples/tracker_tools.py"
    )
    assert searched.returncode == 0, searched.stderr
    assert "github__get_reviews" in searched.stdout


def test_the_check_off_warning_only_where_scripts_run() -> None:
    """Without the compiler, describe and search (which run no script) say nothing of the
    type check; run says once that its script runs unchecked, and why."""
    missing = {"CODEMODE_TSC": "/nonexistent/tsc"}
    tools = ("--tools", "examples/tracker_tools.py")
    for args in (("describe", *tools), ("search", "reviews", *tools)):
        quiet = codemode(*args, env=missing)
        assert quiet.returncode == 0 and quiet.stderr == "", quiet
    ran = codemode("run", "-", *tools, stdin="return 1", env=missing)
    assert ran.returncode == 0, ran
    assert ran.stderr.count("type check off") == 1 and "/nonexistent/tsc" in ran.stderr


def test_a_broken_type_checker_is_the_hosts_to_fix() -> None:
    """A checker that fails on every script (CODEMODE_TSC=/bin/false) told the model to write
    its script more simply: the script still does not run, the model is told it is not at
    fault, and stderr names the checker and what the host does about it."""
    tools = ("--tools", "examples/tracker_tools.py")
    ran = codemode("run", "-", *tools, stdin="return 1", env={"CODEMODE_TSC": "/bin/false"})
    assert ran.returncode == 1 and "Script failed." in ran.stdout, ran
    assert "more simply" not in ran.stdout and "no fault of the script" in ran.stdout, ran
    said = [line for line in ran.stderr.splitlines() if "/bin/false" in line]
    assert len(said) == 1 and "does not work" in said[0] and "CODEMODE_TSC" in said[0], ran


def test_mcp_json_tools_describe(tmp_path: Path) -> None:
    """A JSON file of MCP-shaped definitions is enough to describe and search."""
    tools = tmp_path / "tools.json"
    tools.write_text(
        json.dumps(
            {
                "tools": [
                    {
                        "name": "get-weather",
                        "description": "The weather in a city.",
                        "inputSchema": {
                            "type": "object",
                            "properties": {"city": {"type": "string"}},
                            "required": ["city"],
                        },
                    }
                ]
            }
        )
    )
    proc = codemode("describe", "--tools", str(tools))
    assert proc.returncode == 0, proc.stderr
    assert "get_weather(input: { city: string })" in proc.stdout
    # Not enough to run calls: refused before the script starts (each call failed for good,
    # "run by no handler on this host", a resumed script's too).
    ran = codemode("run", "-", "--tools", str(tools), stdin="return 1")
    one_clear_line(ran, "holds tool definitions without handlers", "give a .py file of tools")


def test_paused_script_resumes_through_the_cli(tmp_path: Path) -> None:
    """A script waiting for approval pauses; `resume --approve` finishes it from the log."""
    script = "return await tools.github__comment({ number: 12, body: 'ping' })"
    data = str(tmp_path / "data")
    first = codemode(
        "run",
        "-",
        "--tools",
        "examples/tracker_tools.py",
        "--data-dir",
        data,
        "--json",
        stdin=script,
    )
    assert first.returncode == 3, first.stderr
    paused = json.loads(first.stdout.splitlines()[-1])
    assert paused["status"] == "paused"
    call_id = paused["waiting"][0]["call_id"]
    # A host without the script's tools refuses to resume it, and records no answer first.
    other = tmp_path / "other_tools.py"
    other.write_text(
        "def add(a: int, b: int) -> int:\n    'Add.'\n    return a + b\n\nTOOLS = [add]\n"
    )
    for answer in ("--approve", "--reject"):
        refused = codemode(
            "resume",
            paused["script_id"],
            answer,
            call_id,
            "--tools",
            str(other),
            "--data-dir",
            data,
        )
        assert refused.returncode == 2, refused
        one_clear_line(refused, "github__comment, which this host does not have")
    # Answers that cannot all be recorded record none: a call given two answers, or an id
    # that is no call of the script's next to one that is.
    tracker = ("--tools", "examples/tracker_tools.py", "--data-dir", data)
    for answers, said in (
        (("--approve", call_id, "--reject", call_id), "is given more than one answer"),
        (("--approve", call_id, "--approve", "call_typo"), "has no call 'call_typo'"),
    ):
        refused = codemode("resume", paused["script_id"], *answers, *tracker)
        assert refused.returncode == 2, refused
        one_clear_line(refused, said)
    shown = codemode("show", paused["script_id"], "--data-dir", data, "--json")
    assert [c["state"] for c in json.loads(shown.stdout)["calls"]] == ["awaiting_approval"]
    second = codemode(
        "resume",
        paused["script_id"],
        "--approve",
        call_id,
        "--tools",
        "examples/tracker_tools.py",
        "--data-dir",
        data,
    )
    assert second.returncode == 0, second.stderr
    assert '"status":"posted"' in second.stdout


def test_bad_inputs_get_clear_errors(tmp_path: Path) -> None:
    """A missing tools file, a tools file with no tools and a bad config each say what is wrong."""
    missing = codemode("describe", "--tools", "nope.py")
    assert missing.returncode == 2 and "no tools file" in missing.stderr
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    none = codemode("describe", "--tools", str(empty))
    assert none.returncode == 2 and "defines no tools" in none.stderr
    config = tmp_path / "codemode.toml"
    config.write_text("[codemode.limits]\nmemory = 'heaps'\n")
    bad = codemode("describe", "--tools", "examples/tracker_tools.py", "--config", str(config))
    assert bad.returncode == 2 and "memory" in bad.stderr


def test_a_tools_file_that_is_a_directory_says_so(tmp_path: Path) -> None:
    """`--tools .` (a folder of tools) said "no tools file at .", of a path that is there."""
    one_clear_line(
        codemode("describe", "--tools", str(tmp_path)),
        f"the tools file {tmp_path} is a directory: give the file itself",
    )


def test_resume_without_a_log_says_what_it_needs() -> None:
    """resume needs the session log: without --data-dir it says so and runs nothing."""
    proc = codemode("resume", "abc", "--tools", "examples/tracker_tools.py")
    assert proc.returncode == 2 and "--data-dir" in proc.stderr


def test_a_log_in_memory_is_not_offered_for_resuming(tmp_path: Path) -> None:
    """``[codemode.store] kind = "memory"`` keeps the log in the process even with a
    data_dir: a paused run does not print its id as if it could be resumed, and the log
    commands refuse, naming the kind (they used to print the id, and list an empty log)."""
    config = tmp_path / "codemode.toml"
    config.write_text(
        f'[codemode]\ndata_dir = "{tmp_path / "data"}"\n[codemode.store]\nkind = "memory"\n'
    )
    paused = codemode(
        "run", "-", "--tools", "examples/tracker_tools.py", "--config", str(config),
        stdin='return await tools.github__comment({ number: 1, body: "hi" });',
    )  # fmt: skip
    assert paused.returncode == 3, paused.stderr
    assert "codemode: script " not in paused.stderr
    assert "cannot be resumed" in paused.stderr and 'kind = "memory"' in paused.stderr
    one_clear_line(codemode("scripts", "--config", str(config)), 'kind = "memory"', "sqlite")


def test_a_data_dir_flag_beats_the_config_s_store(tmp_path: Path) -> None:
    """``--data-dir DIR`` (as ``mcp serve`` prints it in its approval commands) names the
    SQLite log in DIR, whatever store a codemode.toml names: the commands used that store
    instead (here one in memory; a PostgreSQL database, in a directory that has one)."""
    data = str(tmp_path / "data")
    paused = codemode(
        "run", "-", "--tools", "examples/tracker_tools.py", "--data-dir", data, "--json",
        stdin='return await tools.github__comment({ number: 1, body: "hi" });',
    )  # fmt: skip
    assert paused.returncode == 3, paused.stderr
    script_id = json.loads(paused.stdout.splitlines()[0])["script_id"]
    config = tmp_path / "codemode.toml"
    config.write_text('[codemode.store]\nkind = "memory"\n')
    listed = codemode("scripts", "--config", str(config), "--data-dir", data)
    assert listed.returncode == 0, listed.stderr
    assert script_id in listed.stdout


def test_resume_of_an_unknown_script(tmp_path: Path) -> None:
    """resume of a script the log does not hold names it."""
    tools = ["--tools", "examples/tracker_tools.py", "--data-dir", str(tmp_path)]
    assert codemode("run", "-", *tools, stdin="return 1").returncode == 0
    proc = codemode("resume", "nope", *tools)
    assert proc.returncode == 2 and "no script 'nope'" in proc.stderr


# --- bad input: one line naming the problem and the fix, exit code 2, no traceback ----------


def one_clear_line(proc: subprocess.CompletedProcess[str], *needles: str, code: int = 2) -> str:
    """The process failed with exit code ``code`` and one line on stderr holding every
    needle."""
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_paths_the_system_refuses_are_one_clear_line(tmp_path: Path) -> None:
    """A data_dir or tools file whose name is too long, a home directory that does not exist,
    a session log that is a directory: one line naming the path (each was a traceback:
    OSError from Path.is_file, RuntimeError from expanduser)."""
    long = str(tmp_path / ("a" * 300))
    one_clear_line(codemode("scripts", "--data-dir", long), "cannot look for the session log")
    one_clear_line(codemode("run", "-", "--tools", long + ".py", stdin="return 1"), "tools file")
    one_clear_line(
        codemode("run", "-", *TRACKER, "--data-dir", long, stdin="return 1"),
        "cannot be looked at (File name too long)",
    )
    config = tmp_path / "codemode.toml"
    config.write_text('[codemode]\ndata_dir = "~nosuchuser4213/x"\n')
    one_clear_line(codemode("scripts", "--config", str(config)), "data_dir '~nosuchuser4213/x'")
    (tmp_path / "d" / "codemode.sqlite3").mkdir(parents=True)
    one_clear_line(
        codemode("scripts", "--data-dir", str(tmp_path / "d")), "is a directory, not a session log"
    )


def test_tools_file_that_raises_on_import(tmp_path: Path) -> None:
    """A tools file that raises while loading is named with its line and the error."""
    tools = tmp_path / "tools.py"
    tools.write_text("import os\n\nraise RuntimeError('no database URL')\n")
    proc = codemode("describe", "--tools", str(tools))
    one_clear_line(proc, str(tools), "line 3", "RuntimeError: no database URL", "traceback")


def test_tools_file_with_a_syntax_error(tmp_path: Path) -> None:
    """A syntax error in the tools file names the file, the line and the problem."""
    tools = tmp_path / "tools.py"
    tools.write_text("from engine import tool\n\ndef broken(:\n    pass\n")
    proc = codemode("describe", "--tools", str(tools))
    one_clear_line(proc, str(tools), "line 3", "syntax error")


def test_tools_file_that_exits(tmp_path: Path) -> None:
    """A tools file that calls sys.exit does not end the command silently."""
    tools = tmp_path / "tools.py"
    tools.write_text("import sys\nsys.exit(5)\n")
    proc = codemode("describe", "--tools", str(tools))
    one_clear_line(proc, str(tools), "SystemExit")


@pytest.mark.parametrize(
    ("raised", "said"),
    [
        ("BaseException('no way')", "BaseException: no way"),
        ("asyncio.CancelledError()", "CancelledError: (no message)"),
        ("GeneratorExit()", "GeneratorExit"),
        ("Odd()", "Odd: (its message cannot be read: ValueError)"),
    ],
)
def test_tools_file_that_raises_a_base_exception_or_an_unreadable_error(
    tmp_path: Path, raised: str, said: str
) -> None:
    """What a tools file raises while loading, whatever its kind and whether or not its
    message can be read, is one line and exit code 2, not a traceback and exit code 1."""
    tools = tmp_path / "tools.py"
    tools.write_text(
        "import asyncio\n\nclass Odd(Exception):\n    def __str__(self):\n"
        f"        raise ValueError('no')\n\nraise {raised}\n"
    )
    proc = codemode("describe", "--tools", str(tools))
    one_clear_line(proc, str(tools), "line 7", said)


@pytest.mark.parametrize(
    ("body", "said", "not_said"),
    [
        ("sys.exit(4)", "raised SystemExit(4) on the event loop", "another host"),
        ("raise KeyboardInterrupt", "raised KeyboardInterrupt on the event loop", "Ctrl-C"),
    ],
    ids=["sys.exit", "KeyboardInterrupt"],
)
def test_an_async_tool_that_ends_the_event_loop_is_named(
    tmp_path: Path, body: str, said: str, not_said: str
) -> None:
    """An async tool's sys.exit(4) or KeyboardInterrupt ends the command (asyncio lets them
    end the loop), but not silently with its 4 ("another host drives the script"), nor as
    "interrupted (Ctrl-C)" with 130 when no Ctrl-C was pressed: a line says what ended it,
    exit code 2, and the script waits in the log, its call running there to resume."""
    tools = tmp_path / "tools.py"
    tools.write_text(
        "import sys\nfrom engine import tool\n\n@tool\nasync def leave(n: int) -> int:\n"
        f'    """Leave."""\n    {body}\n'
    )
    data = str(tmp_path / "data")
    proc = codemode(
        "run", "-", "--tools", str(tools), "--data-dir", data, stdin="await tools.leave({ n: 4 })"
    )
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and not_said not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("codemode: script ") and len(lines) == 2, lines
    assert said in lines[1]
    shown = codemode("show", lines[0].split()[-1], "--data-dir", data)
    assert shown.returncode == 0 and "tools.leave  running" in shown.stdout, shown.stdout


def test_tools_file_imports_a_module_beside_it(tmp_path: Path) -> None:
    """A tools file can import a helper module next to it, as `python tools.py` could."""
    (tmp_path / "helpers.py").write_text("GREETING = 'hello'\n")
    tools = tmp_path / "tools.py"
    tools.write_text(
        "from engine import tool\nfrom helpers import GREETING\n\n"
        "@tool\ndef greet(name: str) -> str:\n    'Greet someone.'\n    return GREETING + name\n"
    )
    proc = codemode("describe", "--tools", str(tools))
    assert proc.returncode == 0, proc.stderr
    assert "greet(input:" in proc.stdout


def test_two_tools_with_the_same_name(tmp_path: Path) -> None:
    """Two tools of one name are refused naming the file, the name and the fix."""
    tools = tmp_path / "tools.py"
    tools.write_text(
        "from engine import tool\n\n"
        "@tool\ndef lookup(q: str) -> str:\n    'One.'\n    return q\n\n"
        "@tool(name='lookup')\ndef other(q: str) -> str:\n    'Two.'\n    return q\n\n"
        "TOOLS = [lookup, other]\n"
    )
    proc = codemode("describe", "--tools", str(tools))
    one_clear_line(proc, str(tools), "two tools are named 'lookup'", "give each tool its own name")


def test_tools_list_of_plain_functions(tmp_path: Path) -> None:
    """A TOOLS list may hold plain typed functions: they become tools as @tool makes them."""
    tools = tmp_path / "tools.py"
    tools.write_text(
        "def add(a: int, b: int) -> int:\n    'Add two numbers.'\n    return a + b\n\n"
        "TOOLS = [add]\n"
    )
    proc = codemode("run", "-", "--tools", str(tools), stdin="return await tools.add({a: 2, b: 3})")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith("Returned:\n5\n")


def test_tools_list_with_something_else(tmp_path: Path) -> None:
    """A TOOLS entry that is neither a tool nor a function is named."""
    tools = tmp_path / "tools.py"
    tools.write_text("TOOLS = [42]\n")
    one_clear_line(codemode("describe", "--tools", str(tools)), "42 is not a tool")


def test_search_with_an_empty_query() -> None:
    """`codemode search ""` says the query is empty and what to give."""
    proc = codemode("search", "", "--tools", "examples/tracker_tools.py")
    one_clear_line(proc, "query is empty", "--help")


def test_search_limits_out_of_range() -> None:
    """--limit 0, a negative or a word is refused naming the range; so is a huge query."""
    for limit in ("0", "-3", "51", "many"):
        proc = codemode("search", "prs", "--limit", limit, "--tools", "examples/tracker_tools.py")
        one_clear_line(proc, "--limit", repr(limit), "1 to 50")
    long_query = codemode("search", "x" * 1001, "--tools", "examples/tracker_tools.py")
    one_clear_line(long_query, "1,001 characters")


def test_search_json() -> None:
    """search --json prints the answer and the matching tools' names as JSON."""
    proc = codemode(
        "search", "reviews of a pull request", "--json", "--tools", "examples/tracker_tools.py"
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["query"] == "reviews of a pull request" and data["limit"] == 8
    assert data["tools"][0] == "github__get_reviews" and data["exact"] is False
    assert "github__get_reviews(input:" in data["text"]
    exact = json.loads(
        codemode(
            "search", "github__list_prs", "--json", "--tools", "examples/tracker_tools.py"
        ).stdout
    )
    assert exact["exact"] is True and exact["tools"] == ["github__list_prs"]


def test_output_into_a_closed_pipe_ends_quietly() -> None:
    """`codemode ... | head -1` when head has left: no traceback, SIGPIPE's exit code.

    The pipe's read end is closed before the command starts, so its first write fails
    whatever the pipe holds (a reader that leaves after one line fails the same write later).
    """
    for args in (("describe",), ("search", "pull requests"), ("run", "-", "--json")):
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "engine.cli", *args, "--tools", "examples/tracker_tools.py"],
                stdout=write_end,
                stderr=subprocess.PIPE,
                input=b"return 1",
                cwd=ROOT,
                timeout=120,
            )
        finally:
            os.close(write_end)
        assert (proc.returncode, proc.stderr) == (141, b""), (args, proc.stderr)


def test_runner_serve_with_a_bad_log_level() -> None:
    """`runner serve --log-level loud` names the levels it takes."""
    proc = codemode(
        "runner", "serve", "--listen", "127.0.0.1:0", "--insecure-no-token", "--log-level", "loud"
    )
    one_clear_line(proc, "--log-level", "'loud'", "DEBUG, INFO, WARNING, ERROR, CRITICAL")


def test_runner_serve_with_bad_seconds() -> None:
    """A negative, not-a-number or non-numeric time option is one line, not a traceback."""
    for option, value in (
        ("--slot-wait", "-1"),
        ("--read-timeout", "nan"),
        ("--idle-timeout", "x"),
    ):
        proc = codemode(
            "runner", "serve", "--listen", "127.0.0.1:0", "--insecure-no-token", option, value
        )
        one_clear_line(proc, option, repr(value), "seconds")


def test_data_dir_that_is_a_file(tmp_path: Path) -> None:
    """--data-dir pointing at a file says it must be a directory, and touches nothing."""
    target = tmp_path / "notes.txt"
    target.write_text("keep me\n")
    proc = codemode(
        "run",
        "-",
        "--tools",
        "examples/tracker_tools.py",
        "--data-dir",
        str(target),
        stdin="return 1",
    )
    one_clear_line(proc, str(target), "is a file, not a directory")
    assert target.read_text() == "keep me\n"


def test_data_dir_with_a_dot_is_a_directory(tmp_path: Path) -> None:
    """--data-dir sess.v1 is a directory holding the log, as any other name."""
    data = tmp_path / "sess.v1"
    proc = codemode(
        "run",
        "-",
        "--tools",
        "examples/tracker_tools.py",
        "--data-dir",
        str(data),
        stdin="return 1",
    )
    assert proc.returncode == 0, proc.stderr
    assert (data / "codemode.sqlite3").is_file()


def test_script_that_is_not_utf8(tmp_path: Path) -> None:
    """A script file (or stdin) that is not UTF-8 says so instead of a decode traceback."""
    script = tmp_path / "s.js"
    script.write_bytes(b"return '\xff'")
    one_clear_line(
        codemode("run", str(script), "--tools", "examples/tracker_tools.py"), "not UTF-8"
    )


def test_a_script_on_stdin_is_named_so() -> None:
    """A script on stdin that is not UTF-8, or too long, is "the script on stdin" (it was
    "the script - is over 262,144 bytes")."""
    too_long = codemode("run", "-", "--tools", "examples/tracker_tools.py", stdin="//" * 200_000)
    one_clear_line(too_long, "the script on stdin is over 262,144 bytes")
    not_utf8 = subprocess.run(
        [sys.executable, "-m", "engine.cli", "run", "-", "--tools", "examples/tracker_tools.py"],
        capture_output=True,
        input=b"return '\xff'",
        cwd=ROOT,
        timeout=120,
    )
    said = subprocess.CompletedProcess(
        not_utf8.args, not_utf8.returncode, not_utf8.stdout.decode(), not_utf8.stderr.decode()
    )
    one_clear_line(said, "the script on stdin is not UTF-8 text")


def test_run_says_what_its_tenant_option_is() -> None:
    """`run --help` says what --tenant does (it had no words: a user could not tell what it
    changes)."""
    proc = codemode("run", "--help", env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("  --tenant")]
    assert line == "  --tenant TENANT       the tenant the script runs for: its tools see it as", (
        line
    )


def test_unknown_option_and_missing_arguments() -> None:
    """argparse's own mistakes are one line too, with where help is."""
    one_clear_line(codemode("run"), "required", "codemode run --help")
    one_clear_line(
        codemode("describe", "--tools", "examples/tracker_tools.py", "--bogus"), "--bogus"
    )


def test_bad_slots_variable_is_a_config_error() -> None:
    """A bad CODEMODE_SANDBOX_SLOTS, read by the runner below, comes back as one line."""
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "run", "-", "--tools", "examples/tracker_tools.py"],
        capture_output=True,
        text=True,
        input="return 1",
        cwd=ROOT,
        timeout=120,
        env={**os.environ, "CODEMODE_SANDBOX_SLOTS": "lots"},
    )
    one_clear_line(proc, "CODEMODE_SANDBOX_SLOTS='lots'")


def test_config_with_relative_token_file_outside_the_working_directory(tmp_path: Path) -> None:
    """A relative token_file is read from the config's folder, once (not joined twice): the
    run gets as far as the service, which is not there: exit code 75, as the same command
    may work once the service is up."""
    folder = tmp_path / "conf"
    folder.mkdir()
    (folder / "runner.token").write_text("t" * 32 + "\n")
    (folder / "runner.token").chmod(0o600)  # as the README says (else a warning is a line)
    (folder / "codemode.toml").write_text(
        "[codemode]\nqueue_timeout = 0.5\n[codemode.runner]\n"
        'kind = "remote"\naddresses = ["127.0.0.1:9"]\ntoken_file = "runner.token"\n'
    )
    proc = subprocess.run(
        [
            sys.executable, "-m", "engine.cli", "run", "-", "--tools",
            str(ROOT / "examples/tracker_tools.py"), "--config", "conf/codemode.toml",
        ],
        capture_output=True, text=True, input="return 1", cwd=tmp_path, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    # The one try left before queue_timeout is logged first, then the step is given up.
    assert proc.returncode == 75 and "Traceback" not in proc.stderr, proc.stderr
    requeued, line = proc.stderr.strip().splitlines()
    assert "script step requeued" in requeued and "could not connect" in requeued, requeued
    assert "no runner took a step" in line and "resume it later" in line, line
    assert "token" not in line


def test_mcp_tools_file_with_an_empty_input_schema(tmp_path: Path) -> None:
    """One MCP tool with inputSchema {} no longer makes the whole tools file unusable."""
    tools = tmp_path / "tools.json"
    tools.write_text(
        json.dumps(
            [
                {"name": "ping", "description": "Check the server.", "inputSchema": {}},
                {
                    "name": "get-weather",
                    "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}},
                },
            ]
        )
    )
    proc = codemode("describe", "--tools", str(tools))
    assert proc.returncode == 0, proc.stderr
    assert "ping(input?: { [key: string]: unknown })" in proc.stdout


def test_tools_file_with_a_worker_that_is_not_a_function(tmp_path: Path) -> None:
    """WORKER = 5 is named when the file loads, not as a refusal of every call."""
    tools = tmp_path / "tools.py"
    tools.write_text(
        "from engine import tool\n\n@tool\ndef a(x: int) -> int:\n    'A.'\n    return x\n\n"
        "WORKER = 5\n"
    )
    proc = codemode("run", "-", "--tools", str(tools), stdin="return await tools.a({ x: 1 })")
    one_clear_line(proc, str(tools), "WORKER is int")


def test_token_file_that_never_ends(tmp_path: Path) -> None:
    """A token file that is not one short line (here /dev/zero) is refused, not read forever:
    in the engine's config and for runner serve."""
    (tmp_path / "codemode.toml").write_text(
        '[codemode.runner]\nkind = "remote"\naddresses = ["127.0.0.1:9"]\n'
        'token_file = "/dev/zero"\n'
    )
    run = codemode(
        "run", "-", "--tools", "examples/tracker_tools.py",
        "--config", str(tmp_path / "codemode.toml"), stdin="return 1",
    )  # fmt: skip
    one_clear_line(run, "/dev/zero is over 4,096 bytes")
    serve = codemode("runner", "serve", "--listen", "127.0.0.1:0", "--token-file", "/dev/zero")
    one_clear_line(serve, "--token-file", "/dev/zero is over 4,096 bytes")


def test_paused_without_a_data_dir_says_it_cannot_be_resumed() -> None:
    """A script that pauses in a run without --data-dir had its log in memory: the command
    says so (and how to keep it) instead of leaving the user to try resume."""
    script = "return await tools.github__comment({ number: 12, body: 'ping' })"
    proc = codemode("run", "-", "--tools", "examples/tracker_tools.py", stdin=script)
    assert proc.returncode == 3, proc.stderr
    assert "(script id " in proc.stdout
    assert "cannot be resumed" in proc.stderr and "--data-dir" in proc.stderr


def test_an_answer_to_a_call_that_waits_for_none_says_what_the_call_is(tmp_path: Path) -> None:
    """`approve` (or `reject`) of a call that needed no approval and ran says so (it said the
    call was "answered already, by another host or person", which no one did); of one a
    person refused, that it was refused."""
    data = str(tmp_path / "data")
    script = (
        "await tools.github__get_reviews({ number: 12 });\n"
        "return await tools.github__comment({ number: 12, body: 'ping' });"
    )
    tools = ["--tools", "examples/tracker_tools.py", "--data-dir", data]
    paused = json.loads(codemode("run", "-", *tools, "--json", stdin=script).stdout.split("\n")[1])
    script_id = paused["script_id"]
    calls = json.loads(codemode("show", script_id, "--data-dir", data, "--json").stdout)["calls"]
    ran, waits = (c["call_id"] for c in calls)
    for command in ("approve", "reject"):
        answer = codemode(command, script_id, ran, "--data-dir", data)
        assert answer.returncode == 2, answer.stderr
        assert answer.stderr == (
            f"codemode: call {ran} of script {script_id} is done, not awaiting approval (it "
            "needed no approval: it ran)\n"
        )
    assert codemode("reject", script_id, waits, "--data-dir", data).returncode == 0
    again = codemode("approve", script_id, waits, "--data-dir", data)
    assert again.returncode == 2
    assert again.stderr.endswith(
        "has failed, not awaiting approval (refused already, by another host or person)\n"
    ), again.stderr


def test_an_answer_to_a_client_call_says_who_gives_its_result(tmp_path: Path) -> None:
    """`approve` (or `reject`) of a call waiting for the client's result (a client tool) says
    the host gives that result, and how: the CLI has no way to, and it said only that the
    call waits for the client."""
    tools = tmp_path / "tools.py"
    tools.write_text(
        "from engine import tool\n"
        "@tool(client=True)\n"
        "def ask_user(question: str) -> str:\n"
        '    """Ask the user."""\n'
    )
    data = ["--data-dir", str(tmp_path / "data")]
    script = 'return await tools.ask_user({ question: "ok?" })'
    ran = codemode("run", "-", "--tools", str(tools), *data, "--json", stdin=script)
    assert ran.returncode == 3, ran.stderr
    (waiting,) = json.loads(ran.stdout.splitlines()[1])["waiting"]
    script_id, call_id = json.loads(ran.stdout.splitlines()[0])["script_id"], waiting["call_id"]
    for command in ("approve", "reject"):
        answer = codemode(command, script_id, call_id, *data)
        one_clear_line(
            answer,
            f"call {call_id} of script {script_id} is awaiting client, not awaiting approval",
            "which the host gives with engine.client_result(script_id, call_id, result)",
        )


def test_json_of_an_answer_and_options_a_command_does_not_take(tmp_path: Path) -> None:
    """approve, reject, hold and release print what they did as JSON with --json (they took
    --json, 'print the whole result as JSON', and printed their line of text); worker, which
    prints no result, takes no --json (it took it, and did nothing with it); an option a
    command does not take names the command's help (it named `codemode --help`)."""
    data = str(tmp_path / "data")
    script = "return await tools.github__comment({ number: 12, body: 'ping' })"
    first = codemode("run", "-", "--tools", "examples/tracker_tools.py", "--data-dir", data,
                     "--json", stdin=script)  # fmt: skip
    paused = json.loads(first.stdout.splitlines()[-1])
    script_id, call_id = paused["script_id"], paused["waiting"][0]["call_id"]
    said = [
        json.loads(codemode(*command, "--data-dir", data, "--json").stdout)
        for command in (
            ("hold", script_id),
            ("hold", script_id),
            ("release", script_id),
            ("approve", script_id, call_id),
        )
    ]
    assert said == [
        {"command": "hold", "script_id": script_id, "changed": True},
        {"command": "hold", "script_id": script_id, "changed": False},
        {"command": "release", "script_id": script_id, "changed": True},
        {"command": "approve", "script_id": script_id, "call_id": call_id, "changed": True},
    ]
    for command, *args, unknown in (
        ("worker", "--data-dir", data, "--json"),
        ("reject", script_id, call_id, "--data-dir", data, "--bogus"),
    ):
        refused = codemode(command, *args, unknown)
        assert refused.returncode == 2
        assert refused.stderr == (
            f"codemode {command}: unrecognized arguments: {unknown} (see codemode {command} "
            "--help)\n"
        )


def _worker(tools: list[str]) -> subprocess.Popen[str]:
    """`codemode worker` with these options, its stderr kept."""
    return subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "worker", *tools],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_scripts_show_approve_and_a_worker(tmp_path: Path) -> None:
    """A paused script is listed and shown; an approval recorded by one command is driven on
    by a worker process, without anyone resuming it."""
    data = str(tmp_path / "data")
    tools = ["--tools", "examples/tracker_tools.py", "--data-dir", data]
    script = "return await tools.github__comment({ number: 12, body: 'ping' })"
    first = codemode("run", "-", *tools, "--json", stdin=script)
    assert first.returncode == 3, first.stderr
    started, paused_line = first.stdout.splitlines()
    paused = json.loads(paused_line)
    assert json.loads(started)["script_id"] == paused["script_id"]
    listed = codemode("scripts", "--data-dir", data, "--status", "paused")
    assert listed.returncode == 0 and paused["script_id"] in listed.stdout
    shown = codemode("show", paused["script_id"], "--data-dir", data)
    assert shown.returncode == 0, shown.stderr
    assert "awaiting_approval" in shown.stdout and "tools.github__comment" in shown.stdout
    # What the person is asked to approve.
    assert '      args: {"number":12,"body":"ping"}\n' in shown.stdout
    call_id = paused["waiting"][0]["call_id"]
    approved = codemode("approve", paused["script_id"], call_id, "--data-dir", data)
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.startswith(f"approved call {call_id} of script "), approved.stdout
    assert (
        "(lease token 1, let go)"
        in codemode("show", paused["script_id"], "--data-dir", data).stdout
    )
    again = codemode("approve", paused["script_id"], call_id, "--data-dir", data)
    assert again.returncode == 2 and "is approved, not awaiting approval" in again.stderr
    assert "(approved already, by another host or person: it runs when" in again.stderr

    worker = _worker(tools)
    try:
        deadline = time.monotonic() + 60
        while True:
            shown = codemode("show", paused["script_id"], "--data-dir", data, "--json")
            if json.loads(shown.stdout)["script"]["status"] == "finished":
                break
            assert time.monotonic() < deadline, "the worker did not drive the script"
            time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    calls = json.loads(shown.stdout)["calls"]
    assert [c["state"] for c in calls] == ["done"] and calls[0]["result"]["status"] == "posted"
    assert json.loads(shown.stdout)["script"]["code"] == script  # as show prints it


def test_a_worker_told_to_stop_leaves_its_script_at_the_next_step(tmp_path: Path) -> None:
    """SIGTERM while the worker drives a long script: the call running then ends, the script
    is left in the log before its next step (no call left running, its lease given up) and
    the worker exits 0 at once. It drove the script to its end first, however long, and
    further signals did nothing."""
    tools_file = tmp_path / "slow_tools.py"
    tools_file.write_text(
        "import asyncio\n"
        "from engine import tool\n"
        "@tool(needs_approval=True)\n"
        "def gate(x: int) -> int:\n"
        '    """Approval gate."""\n'
        "    return x\n"
        "@tool\n"
        "async def slow(seconds: float) -> float:\n"
        '    """Sleep."""\n'
        "    await asyncio.sleep(seconds)\n"
        "    return seconds\n"
    )
    data = str(tmp_path / "data")
    tools = ["--tools", str(tools_file), "--data-dir", data]
    code = "await tools.gate({ x: 1 }); for (let i = 0; i < 1000; i++) await tools.slow({ seconds: 0.2 });"
    first = codemode("run", "-", *tools, "--json", stdin=code)
    assert first.returncode == 3, first.stderr
    paused = json.loads(first.stdout.splitlines()[1])
    approved = codemode(
        "approve", paused["script_id"], paused["waiting"][0]["call_id"], "--data-dir", data
    )
    assert approved.returncode == 0, approved.stderr
    worker = _worker(tools)
    try:
        deadline = time.monotonic() + 60
        while True:
            shown = json.loads(
                codemode("show", paused["script_id"], "--data-dir", data, "--json").stdout
            )
            if len(shown["calls"]) >= 4:
                break
            assert time.monotonic() < deadline, "the worker did not drive the script"
            time.sleep(0.2)
    finally:
        signalled = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert err.endswith("codemode: terminated (SIGTERM); the worker stopped\n"), err
    assert time.monotonic() - signalled < 5
    shown = json.loads(codemode("show", paused["script_id"], "--data-dir", data, "--json").stdout)
    # Left for the next worker: no lease on it, not ended.
    assert shown["script"]["status"] in ("active", "paused"), shown["script"]
    assert shown["script"]["lease"]["expires_ms"] == 0  # given up
    assert {c["state"] for c in shown["calls"]} == {"done"}


def test_log_commands_with_bad_input(tmp_path: Path) -> None:
    """scripts, show, approve and worker without a log, or naming what the log does not hold:
    one clear line each, exit code 2."""
    tools = ["--tools", "examples/tracker_tools.py"]
    for command in (["scripts"], ["show", "abc"], ["approve", "abc", "call_1"], ["worker", *tools]):
        proc = codemode(*command)
        one_clear_line(proc, "needs the session log", "--data-dir")
    # A mistyped --data-dir: said so, and no log is made there.
    typo = tmp_path / "typo" / "data"
    for command in (["scripts"], ["show", "abc"], ["approve", "abc", "c"], ["resume", "abc"]):
        extra = tools if command[0] == "resume" else []
        proc = codemode(*command, *extra, "--data-dir", str(typo))
        one_clear_line(proc, "there is no session log in", str(typo), "--data-dir")
    assert not (tmp_path / "typo").exists()
    data = ["--data-dir", str(tmp_path / "data")]
    made = codemode("run", "-", *tools, *data, stdin="return 1")
    assert made.returncode == 0, made.stderr
    one_clear_line(codemode("show", "nope", *data), "no script 'nope'")
    one_clear_line(codemode("approve", "nope", "call_1", *data), "no script 'nope'")
    # An id that is not UTF-8 (a terminal's stray byte): no script, not a traceback.
    one_clear_line(codemode("show", "\udcff", *data), "no script '\\udcff'")
    one_clear_line(codemode("approve", "\udcff", "c", *data), "no script '\\udcff'")
    one_clear_line(codemode("resume", "\udcff", *tools, *data), "no script '\\udcff'")
    # A reason with no rejection to give it went nowhere, unsaid.
    one_clear_line(
        codemode("resume", "abc", *tools, *data, "--approve", "c", "--message", "ok"),
        "--message is the reason given with --reject",
    )


def test_show_and_scripts_print_what_the_log_holds_as_text(tmp_path: Path) -> None:
    """Text in the log came from models, scripts and tools: `scripts` and `show` print its
    control characters as escapes (a terminal's escape sequence, a line break that forges a
    row of `scripts`), and number the code's lines as the engine's errors do (by newline
    alone: a form feed in a comment is no line break)."""
    from engine import CodeMode, SqliteStore
    from tests.engine.conftest import InProcessRunner

    async def write() -> str:
        store = SqliteStore(tmp_path / "data")
        engine = CodeMode([], runner=InProcessRunner(), store=store, type_check="off")
        try:
            code = '// a\x0cform feed \u202e}\u2066\nthrow new Error("\\x1b]0;title\\x07 here")'
            result = await engine.run_code(code, tenant="evil\x1b[2J\nFAKE-ROW finished")
            return result.script_id
        finally:
            await engine.aclose()

    script_id = asyncio.run(write())
    data = ["--data-dir", str(tmp_path / "data")]
    listed = codemode("scripts", *data)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("\n") == 1 and "\x1b" not in listed.stdout
    assert "tenant evil\\x1b[2J\\x0aFAKE-ROW finished" in listed.stdout
    shown = codemode("show", script_id, *data)
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout and "\x0c" not in shown.stdout
    assert "\n     1  // a\\x0cform feed \\u202e}\\u2066\n     2  throw new Error(" in shown.stdout
    assert "\\x1b]0;title\\x07 here" in shown.stdout
    assert "at line 2" in shown.stdout


def test_show_numbers_a_script_files_lines_as_its_errors_do(tmp_path: Path) -> None:
    """A script run from a file ends with a line break, and one written on Windows ends each
    line with CRLF: `show` numbers its lines as they are (it showed a last, empty line past
    the file's end, and "\\x0d" ending every line), and `scripts --json` counts them so. A
    lone carriage return ends a line too, as in the script's errors ("at line 4"): `show`
    split lines by "\\n" alone, and its numbers named other lines than the errors'."""
    data = ["--data-dir", str(tmp_path / "data")]
    script = tmp_path / "script.js"
    script.write_bytes(b"const a = `x\ry`;\r\n\r\nreturn a.lengthh.x;\r\n")
    ran = codemode("run", str(script), *TRACKER, *data, "--json")
    assert ran.returncode == 1, ran.stderr
    assert "at line 4" in json.loads(ran.stdout.splitlines()[-1])["text"], ran.stdout
    script_id = json.loads(ran.stdout.splitlines()[0])["script_id"]
    shown = codemode("show", script_id, *data)
    assert shown.returncode == 0, shown.stderr
    code = shown.stdout.split("code:\n", 1)[1].split("calls:", 1)[0]
    assert code == ("     1  const a = `x\n     2  y`;\n     3  \n     4  return a.lengthh.x;\n"), (
        code
    )
    listed = codemode("scripts", *data, "--json")
    assert json.loads(listed.stdout)["code_lines"] == 4, listed.stdout


def test_show_prints_each_calls_arguments_cut_short_and_escaped(tmp_path: Path) -> None:
    """`show` prints what each call was asked (a person deciding on an approval reads it
    there): its JSON on one line, cut at 400 characters with what was left out, a
    terminal's escapes and bidi controls shown as escapes."""
    data = ["--data-dir", str(tmp_path / "data")]
    script = 'await tools.github__comment({ number: 12, body: "\u202e\x1b[2J" + "x".repeat(1000) })'
    first = codemode("run", "-", *TRACKER, *data, "--json", stdin=script)
    assert first.returncode == 3, first.stderr
    script_id = json.loads(first.stdout.splitlines()[0])["script_id"]
    shown = codemode("show", script_id, *data)
    assert shown.returncode == 0, shown.stderr
    (line,) = [x for x in shown.stdout.splitlines() if x.startswith("      args: ")]
    assert line.startswith('      args: {"number":12,"body":"\\u202e\\u001b[2Jxxx')
    assert "\x1b" not in shown.stdout and "\u202e" not in shown.stdout
    # 400 characters of the JSON, then what was left: the rest of its 1,033 (the bidi
    # control is one character of it, shown as six).
    rest = "... (633 more characters; show --json prints them)"
    assert line.endswith("x" + rest), line
    assert len(line) == len("      args: ") + 400 + 5 + len(rest)


TRACKER = ("--tools", "examples/tracker_tools.py")


def _on_a_terminal(stream: str, *args: str) -> tuple[subprocess.CompletedProcess[bytes], bytes]:
    """Run ``codemode ARGS`` with its ``stream`` ("stdout" or "stderr") a terminal (a pty),
    the other piped: the process, and what it wrote to the terminal."""
    import pty

    main, side = pty.openpty()
    try:
        piped = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, stream: side}
        proc = subprocess.run(
            [sys.executable, "-m", "engine.cli", *args], **piped, cwd=ROOT, timeout=120
        )
        os.close(side)
        written = b""
        with contextlib.suppress(OSError):  # EIO once the terminal's other side is closed
            while chunk := os.read(main, 65536):
                written += chunk
    finally:
        os.close(main)
    return proc, written


def test_run_prints_to_a_terminal_what_the_script_printed_without_its_escapes(
    tmp_path: Path,
) -> None:
    """On a terminal, `run` prints the script's output with its control characters as
    escapes, its line breaks and tabs kept: a model's script set the window's title and
    cleared the screen. Piped, the text is as the script made it."""
    script = tmp_path / "esc.js"
    script.write_text('console.log("A\\x1b]0;pwned\\x07B\\tC\\nD\\u202e"); return 1')
    proc, out = _on_a_terminal("stdout", "run", str(script), *TRACKER)
    assert proc.returncode == 0, proc.stderr
    text = out.decode().replace("\r\n", "\n")
    assert "Printed:\nA\\x1b]0;pwned\\x07B\tC\nD\\u202e\n" in text, text
    piped = codemode("run", str(script), *TRACKER)
    assert "A\x1b]0;pwned\x07B\tC\nD\u202e\n" in piped.stdout


def test_describe_and_search_print_a_tools_description_without_its_hidden_marks(
    tmp_path: Path,
) -> None:
    """A tool's description (an MCP server's, say) with a bidi override and a terminal's
    escape sequence: `describe` and `search` print what the model reads, which leaves out
    both, on a terminal and piped (the override was written raw, reordering what the
    terminal showed)."""
    tools = tmp_path / "tools.py"
    tools.write_text(
        "from engine import tool\n"
        "@tool\n"
        "def refund(order: str) -> str:\n"
        '    """Refund an order. \\u202eevil\\u202c \\x1b]0;pwned\\x07"""\n'
        "    return order\n"
    )
    for args in (("describe",), ("search", "refund")):
        proc, out = _on_a_terminal("stdout", *args, "--tools", str(tools))
        assert proc.returncode == 0, proc.stderr
        text = out.decode()
        assert "Refund an order. evil" in text, text
        assert "\u202e" not in text and "\x1b" not in text, text
        piped = codemode(*args, "--tools", str(tools))
        assert "Refund an order. evil" in piped.stdout, piped.stdout
        assert "\u202e" not in piped.stdout and "\x1b" not in piped.stdout, piped.stdout


def test_a_warning_on_a_terminal_clears_the_live_line_first(tmp_path: Path) -> None:
    """On a terminal, stderr's live line (steps, calls, time) is cleared before a warning of
    the engine's is written (a tool that raised), and before a line a tool prints (which
    goes to stderr): each was written onto the end of the live line, `codemode: 1 step, 1
    call (1 running), 0.4 scodemode: tool call ...`."""

    tools = tmp_path / "tools.py"
    tools.write_text(
        "from engine import tool\n"
        "@tool\n"
        "def lookup(user_id: int) -> str:\n"
        '    """Look a user up."""\n'
        "    print('debug: looking up', user_id)\n"
        "    return {1: 'ana'}[user_id]\n"
    )
    script = tmp_path / "s.js"
    script.write_text("return await tools.lookup({user_id: 2})")
    proc, err = _on_a_terminal("stderr", "run", str(script), "--tools", str(tools))
    assert proc.returncode == 1, err
    text = err.decode()
    assert "codemode: 1 step" in text, text  # the live line was drawn
    assert "\r\x1b[Kcodemode: tool call raised script=" in text, text
    assert "\r\x1b[Kdebug: looking up 2\r\n" in text, text


def test_a_warning_on_a_terminal_does_not_wipe_a_tools_part_line() -> None:
    """A tool's part line (`print("working...", end="", flush=True)`), then a warning of the
    engine's, which clears the terminal's line first: the rest of the tool's line is written
    with its part again (it stood alone, "done", the part wiped by the warning's clear)."""
    import io
    import logging

    from engine.cli import _AfterTheLiveLine, _OneLine

    err = io.StringIO()
    out = _AfterTheLiveLine(err)
    warned = logging.makeLogRecord({"msg": "tool call raised", "levelno": logging.WARNING})
    print("working...", end="", flush=True, file=out)
    err.write(_OneLine(terminal=True).format(warned) + "\n")
    print("done", file=out)
    assert err.getvalue().endswith("codemode: tool call raised\n\r\x1b[Kworking...done\n"), (
        err.getvalue()
    )


def test_a_script_read_from_a_terminal_is_asked_for() -> None:
    """`run -` with stdin a terminal says it reads the script from there and how to end it:
    it waited without a word, as if it hung. Piped, stdin is read without one (the other
    tests' `stdin=`)."""
    import pty

    main, side = pty.openpty()
    try:
        os.write(main, b"return 6 * 7\n\x04")  # the line, then Ctrl-D on a new line
        proc = subprocess.run(
            [sys.executable, "-m", "engine.cli", "run", "-", *TRACKER],
            stdin=side,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
    finally:
        os.close(side)
        os.close(main)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Script finished.\nReturned:\n42\n", proc.stdout
    assert proc.stderr.startswith(
        "codemode: reading the script from the terminal: type or paste it, then Ctrl-D on a "
        "new line (or give a file: codemode run script.js)\n"
    ), proc.stderr


def test_scripts_says_when_it_listed_as_many_as_its_limit(tmp_path: Path) -> None:
    """`scripts` lists the oldest first, up to --limit: at the limit, a line on stderr says
    there are more (the newest, a paused one waiting for approval, went unseen)."""
    from engine import CodeMode, SqliteStore
    from tests.engine.conftest import InProcessRunner

    async def write() -> None:
        engine = CodeMode([], runner=InProcessRunner(), store=SqliteStore(tmp_path / "data"))
        try:
            for i in range(3):
                await engine.run_code(f"return {i}")
        finally:
            await engine.aclose()

    asyncio.run(write())
    data = ["--data-dir", str(tmp_path / "data")]
    listed = codemode("scripts", "--limit", "2", *data)
    assert listed.returncode == 0 and listed.stdout.count("\n") == 2
    assert "there are more: raise --limit, or filter with --status" in listed.stderr
    assert codemode("scripts", "--limit", "3", *data).stderr == ""
    # With --json too: its lines alone stopped short without a word.
    lines = codemode("scripts", "--limit", "2", "--json", *data)
    assert lines.returncode == 0 and len(lines.stdout.splitlines()) == 2, lines
    assert "there are more: raise --limit" in lines.stderr, lines.stderr
    # One is one script ("the first 1 scripts" before).
    one = codemode("scripts", "--limit", "1", *data)
    assert one.returncode == 0 and one.stdout.count("\n") == 1, one
    assert "codemode: the first script, oldest first; there are more" in one.stderr, one.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["scripts"],
        ["show", "abc"],
        ["approve", "abc", "call_1"],
        ["reject", "abc", "call_1"],
        ["hold", "abc"],
        ["release", "abc"],
    ],
)
def test_commands_on_the_log_take_no_tools(tmp_path: Path, command: list[str]) -> None:
    """The commands that read or answer the log run no tool: --tools is refused by name (it
    was taken and ignored, a file that is not there too), and they work without it."""
    from engine import CodeMode, SqliteStore
    from tests.engine.conftest import InProcessRunner

    async def write() -> None:
        engine = CodeMode([], runner=InProcessRunner(), store=SqliteStore(tmp_path / "data"))
        try:
            await engine.run_code("return 1")
        finally:
            await engine.aclose()

    asyncio.run(write())
    data = ["--data-dir", str(tmp_path / "data")]
    refused = codemode(*command, *data, "--tools", "nosuch.py")
    one_clear_line(refused, f"codemode {command[0]}", "unrecognized arguments: --tools nosuch.py")
    # What they do needs no tools: scripts lists the log; the others name the unknown id.
    without = codemode(*command, *data)
    if command == ["scripts"]:
        assert without.returncode == 0 and without.stdout.count("\n") == 1, without
    else:
        one_clear_line(without, "no script 'abc'")


@pytest.mark.parametrize("limit", ["0", "-5", "99999999999999999999", "ten"])
def test_scripts_limit_out_of_range(tmp_path: Path, limit: str) -> None:
    """`scripts --limit` takes a whole number from 1 up: anything else is one line naming the
    option (a huge one was an OverflowError traceback from SQLite; 0 or less was taken as 1)."""
    proc = codemode("scripts", "--limit", limit, "--data-dir", str(tmp_path / "data"))
    one_clear_line(proc, "--limit", repr(limit))


def test_run_from_a_closed_stdin() -> None:
    """`run -` with no stdin at all (closed, as `<&-` leaves it): one clear line, not an
    AttributeError traceback."""
    one_clear_line(_run_in_shell('exec "$@" <&-', "-"), "stdin", "closed")


def _run_in_shell(shell: str, source: str) -> subprocess.CompletedProcess[str]:
    """`codemode run SOURCE` over the tracker tools, started by ``sh -c SHELL`` (which
    execs ``"$@"``, the command, once it has set its stdin or limits up)."""
    command = [sys.executable, "-m", "engine.cli", "run", source]
    return subprocess.run(
        ["sh", "-c", shell, "sh", *command, "--tools", "examples/tracker_tools.py"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


@pytest.mark.parametrize("source", ["/dev/zero", "-"])
def test_a_script_that_never_ends_is_refused_at_the_size_bound(source: str) -> None:
    """`run /dev/zero` (or an endless stdin) reads no more than a script may be, then says
    so: it read until memory ran out before (here, under a 3 GB address-space bound, a
    MemoryError traceback; without one, the machine's memory)."""
    proc = _run_in_shell('ulimit -v 3000000; exec "$@" < /dev/zero', source)
    one_clear_line(proc, "over 262,144 bytes", "a script may be")


def test_a_read_only_log_is_a_mistake_to_fix_not_a_wait(tmp_path: Path) -> None:
    """A log file this process cannot write (chattr +i, a read-only mount, permissions) is
    one line saying to make it writable, exit code 2: it was exit 75 and "resume the script
    once it can", which waiting never makes true. Run as root, the command drops the
    capability that lets root write any file (setpriv, util-linux), so the file's own
    read-only mode applies, as it does to any other user."""
    data = tmp_path / "data"
    tools = ["--tools", "examples/tracker_tools.py", "--data-dir", str(data)]
    assert codemode("run", "examples/stale_prs.js", *tools).returncode == 0
    (data / "codemode.sqlite3").chmod(0o444)
    proc = _without_write_access("run", "examples/stale_prs.js", *tools)
    one_clear_line(proc, "is read-only for this process", "make the file and its directory")


def test_the_log_file_given_as_data_dir_is_told_to_give_its_directory(tmp_path: Path) -> None:
    """`scripts --data-dir DIR/codemode.sqlite3` (the log, not its directory) says to give
    DIR, as `run` does; a data_dir that is some other file says it is a file. Both said
    "there is no session log in ...", which the first one is."""
    data = tmp_path / "data"
    proc = codemode("run", "examples/stale_prs.js", *TRACKER, "--data-dir", str(data))
    assert proc.returncode == 0, proc.stderr
    log_file = str(data / "codemode.sqlite3")
    for command in ("scripts", "run"):
        one_clear_line(
            codemode(command, "examples/stale_prs.js", *TRACKER, "--data-dir", log_file)
            if command == "run"
            else codemode(command, "--data-dir", log_file),
            f"is a file, not a directory; give a directory (the session log is kept in it "
            f"as codemode.sqlite3); it is the session log itself: give its directory, {data}",
        )
    other = tmp_path / "notes.txt"
    other.write_text("notes")
    one_clear_line(codemode("show", "s1", "--data-dir", str(other)), "is a file, not a directory")


def test_a_worker_that_raises_is_one_line_on_stderr(tmp_path: Path) -> None:
    """A tools file's WORKER that raises: the script fails saying so, and stderr has one
    line, the engine's warning with the error, as the command's other messages (it had the
    warning bare and the worker's whole traceback); -v shows the traceback."""
    tools = tmp_path / "tools.py"
    tools.write_text(
        "from engine import tool\n"
        "@tool\n"
        "def add(a: int, b: int) -> int:\n"
        '    """Add."""\n'
        "    return a + b\n"
        "async def WORKER(trigger):\n"
        "    raise RuntimeError('the policy service is down')\n"
    )
    script = "return await tools.add({a: 1, b: 2})"
    ran = codemode("run", "-", "--tools", str(tools), stdin=script)
    assert "the host's worker failed on these calls" in ran.stdout, ran.stdout
    one_clear_line(
        ran,
        "codemode: the host's worker failed; the calls it was asked about are refused "
        "(RuntimeError: the policy service is down; -v shows the traceback)",
        code=1,
    )
    verbose = codemode("run", "-", "--tools", str(tools), "-v", stdin=script)
    assert "Traceback" in verbose.stderr, verbose.stderr


def test_a_tool_that_raises_is_one_line_on_stderr(tmp_path: Path) -> None:
    """A tool whose handler raises (a bug): the script fails with its error, and stderr has
    one line naming the call and the error; the traceback, which the engine's warning carries
    for a host's log, was folded into that line (a thousand characters of frames joined by
    spaces): -v shows it as it is."""
    tools = tmp_path / "tools.py"
    tools.write_text(
        "from engine import tool\n"
        "@tool\n"
        "def lookup(user_id: int) -> str:\n"
        '    """Look a user up."""\n'
        "    return {1: 'ana'}[user_id]\n"
    )
    script = "return await tools.lookup({user_id: 2})"
    ran = codemode("run", "-", "--tools", str(tools), stdin=script)
    assert "Error: KeyError: 2" in ran.stdout, ran.stdout
    line = one_clear_line(ran, "tool=lookup: KeyError: 2 (-v shows the traceback)", code=1)
    assert line.startswith("codemode: tool call raised script="), line
    assert line.endswith("(-v shows the traceback)"), line
    verbose = codemode("run", "-", "--tools", str(tools), "-v", stdin=script)
    assert "Traceback (most recent call last):\n" in verbose.stderr, verbose.stderr
    assert "    return {1: 'ana'}[user_id]\n" in verbose.stderr, verbose.stderr


def test_what_the_tools_print_goes_to_stderr_not_among_the_result(tmp_path: Path) -> None:
    """A tools file that prints as it is imported, and a tool that prints a debug line as it
    runs: stdout holds the command's result alone (`run --json`'s two JSON lines, which the
    prints landed among; `search --json`'s JSON), and the prints are on stderr. A subprocess
    the tool runs writes to descriptor 1 itself, past Python's sys.stdout: aside too."""
    tools = tmp_path / "tools.py"
    tools.write_text(
        "import subprocess\n"
        "from engine import tool\n"
        "print('loading tools')\n"
        "@tool\n"
        "def double(x: int) -> int:\n"
        '    """Double a number."""\n'
        "    print('debug: double', x)\n"
        "    subprocess.run(['echo', 'from a subprocess'], check=True)\n"
        "    return 2 * x\n"
    )
    script = "return await tools.double({x: 21})"
    data = ["--data-dir", str(tmp_path / "data")]
    ran = codemode("run", "-", "--tools", str(tools), *data, "--json", stdin=script)
    assert ran.returncode == 0, ran.stderr
    started, line = ran.stdout.splitlines()  # JSON lines, nothing else
    assert json.loads(line)["value"] == 42
    assert json.loads(started) == {"script_id": json.loads(line)["script_id"]}
    assert "loading tools\n" in ran.stderr and "debug: double 21\n" in ran.stderr, ran.stderr
    assert "from a subprocess\n" in ran.stderr, ran.stderr
    plain = codemode("run", "-", "--tools", str(tools), stdin=script)
    assert plain.stdout == "Script finished.\nReturned:\n42\n", plain.stdout
    found = codemode("search", "double", "--tools", str(tools), "--json")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["tools"] == ["double"]
    assert found.stderr.startswith("loading tools\n"), found.stderr


def test_a_paused_run_says_the_command_that_approves_and_goes_on(tmp_path: Path) -> None:
    """A run that pauses on approvals says on stderr the command that approves them and
    resumes the script (the result, a model's text, said what it waits on, not how a person
    at the terminal answers): that command, run as said from another directory, finishes
    the script (its paths are absolute: as given, relative, they named other files there)."""
    import shlex

    data = ["--data-dir", os.path.relpath(tmp_path / "data", ROOT)]
    script = 'return await tools.github__comment({ number: 12, body: "ping" })'
    ran = codemode("run", "-", *TRACKER, *data, stdin=script)
    assert ran.returncode == 3, ran.stderr
    (said,) = [x for x in ran.stderr.splitlines() if "to approve and go on" in x]
    command = shlex.split(said.split("to approve and go on: ", 1)[1].split(" (--reject", 1)[0])
    assert command[:2] == ["codemode", "resume"] and "--approve" in command, command
    resumed = codemode(*command[1:], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith("Script finished."), resumed.stdout
    assert "to approve and go on" not in resumed.stderr
    as_json = codemode("run", "-", *TRACKER, *data, "--json", stdin=script)
    assert as_json.returncode == 3 and "to approve and go on" not in as_json.stderr
    # A project's codemode.toml, read without --config, names the log: the command says so.
    project = tmp_path / "project"
    project.mkdir()
    (project / "codemode.toml").write_text('[codemode]\ndata_dir = "data"\n')
    tools = ["--tools", str(ROOT / "examples" / "tracker_tools.py")]
    ran = codemode("run", "-", *tools, stdin=script, cwd=project)
    assert ran.returncode == 3, ran.stderr
    (said,) = [x for x in ran.stderr.splitlines() if "to approve and go on" in x]
    command = shlex.split(said.split("to approve and go on: ", 1)[1].split(" (--reject", 1)[0])
    resumed = codemode(*command[1:], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith("Script finished."), resumed.stdout


def test_describe_and_search_make_no_log(tmp_path: Path) -> None:
    """`describe` and `search` run no script: a --data-dir (or a config's data_dir) given to
    them makes no session log there (each made the directory and an empty log)."""
    data = tmp_path / "data"
    described = codemode("describe", *TRACKER, "--data-dir", str(data))
    assert described.returncode == 0 and "tools." in described.stdout, described.stderr
    found = codemode("search", "pull requests", *TRACKER, "--data-dir", str(data))
    assert found.returncode == 0 and "github__list_prs" in found.stdout, found.stderr
    assert not data.exists()


def test_a_step_no_runner_took_in_a_run_without_a_log_says_to_run_it_again(
    tmp_path: Path,
) -> None:
    """No runner took the step (a runner service that is not there) and the log was in
    memory: the one error line says the script cannot be resumed and to run it again (it
    said "resume it later; this run kept its log in memory, so run it again")."""
    config = tmp_path / "codemode.toml"
    config.write_text(
        '[codemode]\nqueue_timeout = 0.5\n[codemode.runner]\nkind = "remote"\n'
        'addresses = ["127.0.0.1:1"]\ntoken = "t"\nconnect_timeout = 0.2\n'
    )
    ran = codemode("run", "-", *TRACKER, "--config", str(config), stdin="return 1")
    assert ran.returncode == 75, ran.stderr
    said = ran.stderr.strip().splitlines()[-1]
    assert said.startswith("codemode: no runner took a step of script"), said
    assert "resume it later, but this run kept its log in memory, so it cannot be resumed: " in said
    assert "run it again (to be able to resume it, pass --data-dir DIR" in said


def _without_write_access(*args: str) -> subprocess.CompletedProcess[str]:
    """``codemode ARGS`` under the files' own modes. Run as root, the command drops the
    capabilities that let root read and write any file (setpriv, util-linux)."""
    command = [sys.executable, "-m", "engine.cli", *args]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            require("setpriv (util-linux), to run a command as root without its override")
        command = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", *command]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)


def _chmod_tree(root: Path, directories: int, files: int) -> None:
    for path in [root, *root.rglob("*")]:
        path.chmod(directories if path.is_dir() else files)


@pytest.mark.parametrize("host", ["closed", "open"])
def test_scripts_and_show_read_a_log_they_may_not_write(tmp_path: Path, host: str) -> None:
    """`scripts` and `show` of a log in a directory this process may not write (another
    account's production log, a read-only mount) print it, and change nothing there: each
    was "data_dir ... is not writable by this process", exit 2. A log its host has open is
    read with what its write-ahead log holds (a step not yet checkpointed)."""
    data = tmp_path / "data"
    proc = codemode("run", "examples/stale_prs.js", *TRACKER, "--data-dir", str(data))
    assert proc.returncode == 0, proc.stderr
    script_id = proc.stderr.split()[-1]
    with contextlib.ExitStack() as stack:
        if host == "open":  # its host wrote a step the log file has not taken in yet
            db = stack.enter_context(contextlib.closing(sqlite3.connect(data / "codemode.sqlite3")))
            db.execute("PRAGMA wal_autocheckpoint = 0")
            db.execute("UPDATE scripts SET steps = 41")
            db.commit()
        before = sorted(p.name for p in data.rglob("*"))
        _chmod_tree(data, 0o555, 0o444)
        stack.callback(_chmod_tree, data, 0o755, 0o644)  # so tmp_path can be removed
        listed = _without_write_access("scripts", "--data-dir", str(data))
        shown = _without_write_access("show", script_id, "--data-dir", str(data))
        assert sorted(p.name for p in data.rglob("*")) == before
    steps = "steps 41" if host == "open" else "steps 3"
    assert listed.returncode == 0 and shown.returncode == 0, (listed.stderr, shown.stderr)
    assert script_id in listed.stdout and steps in listed.stdout, listed.stdout
    assert "finished" in shown.stdout and "tools.github__list_prs" in shown.stdout


@pytest.mark.parametrize("where", ["stdout", "events"])
def test_output_to_a_full_disk_is_one_clear_error(where: str) -> None:
    """The result, or the --events lines, written where no space is left (/dev/full, as a
    full disk): one line saying what failed and exit code 74 (sysexits' EX_IOERR), not an
    OSError traceback (exit 1, which means the script failed)."""
    args = ["run", "examples/stale_prs.js", "--tools", "examples/tracker_tools.py"]
    if where == "events":
        args += ["--events", "/dev/full"]
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "engine.cli", *args],
            stdout=full if where == "stdout" else subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
    one_clear_line(proc, "cannot write", "No space left on device", code=74)


def test_output_of_other_commands_to_a_full_disk_says_what_stands(tmp_path: Path) -> None:
    """A command that runs no script, its output on a full disk: it said "what the script did
    is in its log, if it has one" after `scripts` or `describe` too; one that only reads is
    run again once there is room, one that changed the log did so all the same."""
    data = tmp_path / "data"
    paused = codemode(
        "run", "-", "--tools", "examples/tracker_tools.py", "--data-dir", str(data), "--json",
        stdin='return await tools.github__comment({ number: 1, body: "hi" });',
    )  # fmt: skip
    assert paused.returncode == 3, paused.stderr
    script_id = json.loads(paused.stdout.splitlines()[0])["script_id"]
    said: dict[str, str] = {}
    for command in (
        ["scripts", "--data-dir", str(data)],
        ["describe", "--tools", "examples/tracker_tools.py"],
        ["hold", script_id, "--data-dir", str(data)],
    ):
        with open("/dev/full", "w") as full:
            proc = subprocess.run(
                [sys.executable, "-m", "engine.cli", *command],
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                cwd=ROOT,
                timeout=120,
            )
        said[command[0]] = one_clear_line(proc, "cannot write the output", code=74)
    for reader in ("scripts", "describe"):
        assert "then run the command again" in said[reader], said
        assert "what the script did" not in said[reader], said
    assert "what it did stands in the log all the same" in said["hold"], said
    shown = codemode("show", script_id, "--data-dir", str(data))
    assert "held" in shown.stdout.splitlines()[0], shown.stdout


STUCK_TOOLS = """
import threading
from pathlib import Path
from engine import tool

@tool
def stuck(n: int) -> int:
    \"\"\"Never returns: a sync tool blocked for good, which no one can stop.\"\"\"
    Path(__file__).with_name("stuck").write_text("running")
    threading.Event().wait()
    return n

TOOLS = [stuck]
"""


@pytest.mark.parametrize(
    ("signum", "code", "word"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
)
def test_ctrl_c_ends_a_run_whose_cleanup_cannot_finish(
    tmp_path: Path, signum: int, code: int, word: str
) -> None:
    """Ctrl-C (or SIGTERM) while a sync tool is stuck: the command is cancelled, and the
    process exits, 130 (143), ending what it started, though the tool's thread never
    returns (a daemon thread: the interpreter does not wait for it at exit); it used to wait
    for the thread for good (and SIGTERM killed it on the spot, its cleanup not run)."""
    returncode, _, err = _signalled_mid_call(tmp_path, STUCK_TOOLS, "stuck", signum)
    assert returncode == code, err
    assert "Traceback" not in err, err


def _signalled_mid_call(
    tmp_path: Path, tools_text: str, tool: str, signum: int, *extra: str
) -> tuple[int, str, str]:
    """`codemode run` of a script that calls the tools file's ``tool`` (``n: 1``), sent
    ``signum`` once the tool wrote ``tmp_path/<tool>``: its exit code, stdout and stderr,
    once no process it started is left."""
    tools = tmp_path / "tools.py"
    tools.write_text(tools_text)
    script = tmp_path / "script.js"
    script.write_text(f"return await tools.{tool}({{ n: 1 }})")
    process = subprocess.Popen(
        cli_taking_ctrl_c("run", str(script), "--tools", str(tools), *extra),
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / tool).exists():
            assert process.poll() is None and time.monotonic() < deadline, process.poll()
            time.sleep(0.05)
        started = psutil.Process(process.pid).children(recursive=True)
        process.send_signal(signum)
        out, err = process.communicate(timeout=120)  # a backstop: the grace is 10 s
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    _, alive = psutil.wait_procs(started, timeout=30)
    assert alive == []
    return process.returncode, out, err


def test_ctrl_c_during_a_run_says_so(tmp_path: Path) -> None:
    """Ctrl-C while a run's async tool runs: the command ends what it started and exits 130,
    saying it was interrupted, as SIGTERM is said (it exited without a word)."""
    tools = (
        "import asyncio\nfrom pathlib import Path\nfrom engine import tool\n\n"
        "@tool\nasync def wait(n: int) -> int:\n    'Wait.'\n"
        "    Path(__file__).with_name('wait').write_text('1')\n"
        "    await asyncio.Event().wait()\n    return n\n"
    )
    data = str(tmp_path / "data")
    returncode, out, err = _signalled_mid_call(
        tmp_path, tools, "wait", signal.SIGINT, "--data-dir", data
    )
    assert (returncode, out) == (130, ""), err
    assert err.endswith("\ncodemode: interrupted (Ctrl-C)\n"), err


@pytest.mark.parametrize(
    ("start", "said"),
    [
        ("threading.Thread(target=threading.Event().wait, name='poller').start()",
         "the thread 'poller' that the tools' code started has not ended 10 s after"),
        ("atexit.register(threading.Event().wait)",
         "an atexit function of the tools' code has not ended 10 s after"),
    ],
    ids=["thread", "atexit"],
)  # fmt: skip
def test_a_tools_thread_that_never_ends_does_not_keep_the_command(
    tmp_path: Path, start: str, said: str
) -> None:
    """A tools file that starts a thread of its own that never ends (no daemon: a client
    library's, say), or registers an atexit function that never returns: the command prints
    its result and exits, saying on stderr what it left, after the grace a cleanup has. The
    interpreter waited for it for ever, the result printed and the command never ending."""
    tools = tmp_path / "tools.py"
    tools.write_text(
        "import atexit, threading\n"
        "from engine import tool\n"
        f"{start}\n"
        "@tool\n"
        "def add(a: int, b: int) -> int:\n"
        '    """Add."""\n'
        "    return a + b\n"
    )
    ran = codemode("run", "-", "--tools", str(tools), stdin="return await tools.add({a: 1, b: 2})")
    assert ran.stdout == "Script finished.\nReturned:\n3\n", ran.stdout
    one_clear_line(ran, said, code=0)


def test_a_script_file_names_its_language_whatever_the_config_says(tmp_path: Path) -> None:
    """With language = "python" in codemode.toml, a .js or .ts file is JavaScript (it was run
    as Python, failing with an invalid syntax), as a .py file is Python."""
    (tmp_path / "codemode.toml").write_text('[codemode]\nlanguage = "python"\n')
    for name in ("a.js", "a.ts"):
        (tmp_path / name).write_text("const x: number = 1; return x + 1;")
        ran = codemode(
            "run", str(tmp_path / name), "--config", str(tmp_path / "codemode.toml"), *TRACKER
        )
        assert ran.returncode == 0 and ran.stdout.endswith("Returned:\n2\n"), ran.stdout


def test_a_mistyped_postgres_schema_is_an_error_not_an_empty_log(
    postgres: str, tmp_path: Path
) -> None:
    """`codemode scripts` with a schema where no log is: an error naming it, and nothing
    made there (it printed `no scripts` and made the tables). `run` makes the log there."""
    import psycopg

    schema = f"typo_{uuid.uuid4().hex[:12]}"
    config = tmp_path / "codemode.toml"
    config.write_text(
        f'[codemode.store]\nkind = "postgres"\ndsn = {json.dumps(postgres)}\nschema = "{schema}"\n'
    )
    for command in (("scripts",), ("show", "abc"), ("approve", "abc", "call_1")):
        refused = codemode(*command, "--config", str(config))
        one_clear_line(refused, f"there is no session log in the PostgreSQL schema '{schema}'")
    with psycopg.connect(postgres) as conn:
        made = conn.execute(
            "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (schema,)
        ).fetchone()
    assert made is None
    ran = codemode(
        "run", "-", "--tools", "examples/tracker_tools.py", "--config", str(config),
        stdin="return 1",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    listed = codemode("scripts", "--config", str(config))
    assert listed.returncode == 0 and "finished" in listed.stdout, listed


def test_show_tells_a_lease_that_ran_out_from_one_let_go(tmp_path: Path) -> None:
    """A lease whose host stopped renewing it (killed, stalled: SIGSTOP) ran out, which
    `show` said as "let go", the words for a lease its host gave up."""
    import asyncio

    from engine import SqliteStore
    from engine.log import ScriptRecord

    async def start() -> str:
        store = SqliteStore(tmp_path)
        record = ScriptRecord(
            id="s1", code="return 1", tenant="default", now_ms=0, seed=1, created_ms=0
        )
        await store.start(record, "host:1:abc", 1)  # a lease of 1 ms, never renewed
        await store.aclose()
        return record.id

    script_id = asyncio.run(start())
    time.sleep(0.01)
    shown = codemode("show", script_id, "--data-dir", str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    assert "(lease token 1, ran out at " in shown.stdout, shown.stdout
    assert ": its host stopped or stalled)" in shown.stdout


def test_an_answer_another_gave_first_is_said_and_the_resume_goes_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`resume --approve C` whose call another host or person answered after the command
    checked it (two operators at once): the loser exited 2 and did not resume the script; it
    says so on stderr and resumes, with the answer that stands."""
    from engine import CallNotWaiting
    from engine.cli import _answered_once
    from engine.log import FAILED, REFUSED_NOTE, CallEntry
    from engine.log._rules import not_waiting

    refused = CallEntry("s1", 0, "c1", "wipe", {}, 2, FAILED, note=REFUSED_NOTE)

    async def lost() -> None:
        raise CallNotWaiting(not_waiting(refused, "awaiting_approval"))

    asyncio.run(_answered_once(lost()))
    assert capsys.readouterr().err == (
        "codemode: call c1 of script s1 has failed, not awaiting approval (refused already, "
        "by another host or person); resuming with that answer\n"
    )


def test_closed_output_descriptors(tmp_path: Path) -> None:
    """Started with stderr closed, a run still runs (what it says goes nowhere; it died at
    once with exit 1, "the script failed", saying nothing); with stdout closed it refuses
    before it starts anything (it ran, crashed with a traceback, and left a script in the
    log that never ran)."""
    (tmp_path / "s.js").write_text("return 1")
    data = tmp_path / "data"

    def shell(redirect: str) -> subprocess.CompletedProcess[str]:
        command = (
            f"{sys.executable} -m engine.cli run {tmp_path / 's.js'} --tools "
            f"examples/tracker_tools.py --data-dir {data} {redirect}"
        )
        return subprocess.run(
            ["sh", "-c", command], capture_output=True, text=True, cwd=ROOT, timeout=120
        )

    quiet = shell("2>&-")
    assert quiet.returncode == 0 and "Returned:\n1" in quiet.stdout, quiet
    blind = shell(">&-")
    one_clear_line(blind, "stdout is closed", ">/dev/null to drop it", code=os.EX_IOERR)
    listed = codemode("scripts", "--data-dir", str(data))
    assert listed.stdout.count("finished") == 1 and "active" not in listed.stdout, listed


def test_empty_values_and_files_that_would_mislead(tmp_path: Path) -> None:
    """--data-dir "" (an unset variable) is refused, not the current directory; an empty
    JSON tools file is refused for run as one without handlers is; a config saved with a
    byte-order mark is read; --data-dir beats a PostgreSQL store whose dsn_env is unset; a
    runner option the runner refuses is named under its table."""
    empty = subprocess.run(
        [sys.executable, "-m", "engine.cli", "run", "-", "--tools",
         str(ROOT / "examples" / "tracker_tools.py"), "--data-dir", ""],
        capture_output=True, text=True, input="return 1", cwd=tmp_path, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    one_clear_line(empty, "--data-dir is empty")
    assert not (tmp_path / "codemode.sqlite3").exists()
    # --config "" read ./codemode.toml if there was one, and no config if not, unsaid.
    one_clear_line(codemode("describe", *TRACKER, "--config", ""), "--config is empty")
    blank = tmp_path / "blank.toml"
    blank.write_text('[codemode]\ndata_dir = ""\n')
    one_clear_line(
        codemode("scripts", "--config", str(blank)),
        "data_dir = '' must be the path of a directory (a non-empty string)",
    )
    none = tmp_path / "none.json"
    none.write_text("[]")
    one_clear_line(codemode("run", "-", "--tools", str(none), stdin="return 1"), "no tools at all")
    bom = tmp_path / "bom.toml"
    bom.write_bytes(b"\xef\xbb\xbf[codemode]\nqueue_timeout = 9\n")
    ran = codemode("run", "-", "--tools", "examples/tracker_tools.py", "--config", str(bom),
                   stdin="return 1")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    pg = tmp_path / "pg.toml"
    pg.write_text('[codemode.store]\nkind = "postgres"\ndsn_env = "CODEMODE_NO_SUCH_DSN"\n')
    data = tmp_path / "data"
    ran = codemode("run", "-", "--tools", "examples/tracker_tools.py", "--config", str(pg),
                   "--data-dir", str(data), stdin="return 2")  # fmt: skip
    assert ran.returncode == 0 and "Returned:\n2" in ran.stdout, ran.stderr
    unset = codemode("run", "-", "--tools", "examples/tracker_tools.py", "--config", str(pg),
                     stdin="return 2")  # fmt: skip
    one_clear_line(unset, "dsn_env = 'CODEMODE_NO_SUCH_DSN'", "is not set")
    small = tmp_path / "small.toml"
    small.write_text('[codemode.runner]\ndata_limit = "1kb"\n')
    ran = codemode("run", "-", "--tools", "examples/tracker_tools.py", "--config", str(small),
                   stdin="return 1")  # fmt: skip
    one_clear_line(ran, "[codemode.runner] data_limit is 1,024 bytes")


@pytest.mark.parametrize(
    ("command", "signum", "code"),
    [
        ("run", signal.SIGTERM, 143),
        ("run", signal.SIGINT, 130),
        ("mcp serve", signal.SIGTERM, 0),
    ],
)
def test_a_signal_stops_a_command_blocked_on_its_inputs(
    tmp_path: Path, command: str, signum: int, code: int
) -> None:
    """SIGTERM or Ctrl-C while the command waits on what it was given (here a tools file
    whose import waits) ends it at once; only SIGKILL ended it (the event loop's handlers
    wait for the loop, which the import held), and Ctrl-C took the 10 s grace."""
    started = tmp_path / "importing"
    tools = tmp_path / "slow_tools.py"
    tools.write_text(
        f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\ntime.sleep(600)\n"
    )
    (tmp_path / "s.js").write_text("return 1")
    args = [str(tmp_path / "s.js")] if command == "run" else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", *command.split(), *args, "--tools", str(tools)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=ROOT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=5)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == code, err
    assert "Traceback" not in err and "without finishing the cleanup" not in err, err


def test_hold_and_release_from_the_cli(tmp_path: Path) -> None:
    """A held script is released from the CLI (a resume said it was held until released,
    and no command released it); an unknown script is named."""
    data = str(tmp_path / "data")
    script = "return await tools.github__comment({ number: 12, body: 'ping' })"
    first = codemode("run", "-", "--tools", "examples/tracker_tools.py", "--data-dir", data,
                     "--json", stdin=script)  # fmt: skip
    assert first.returncode == 3, first.stderr
    paused = json.loads(first.stdout.splitlines()[-1])
    script_id, call_id = paused["script_id"], paused["waiting"][0]["call_id"]
    held = codemode("hold", script_id, "--data-dir", data)
    assert held.returncode == 0 and "held script" in held.stdout, held.stderr
    # Held twice, it says nothing changed, as a release of one not held does (it said
    # "held script ...: no step runs until it is released" again).
    again = codemode("hold", script_id, "--data-dir", data)
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"script {script_id} was held already; nothing changed\n"
    resumed = codemode("resume", script_id, "--tools", "examples/tracker_tools.py",
                       "--data-dir", data, "--approve", call_id)  # fmt: skip
    assert resumed.returncode == 3 and "held:" in resumed.stdout, resumed
    released = codemode("release", script_id, "--data-dir", data)
    assert released.returncode == 0 and "released script" in released.stdout, released.stderr
    done = codemode("resume", script_id, "--tools", "examples/tracker_tools.py",
                    "--data-dir", data)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    one_clear_line(codemode("hold", "nope", "--data-dir", data), "no script 'nope'")


def test_hold_of_an_ended_script_and_release_of_one_not_held_say_so(tmp_path: Path) -> None:
    """`hold` of a script that has finished is an error saying it runs no more (it said
    "held script ...: no step runs until it is released"), and `release` of a script that
    is not held says nothing changed (it said "released script ...: resume it")."""
    data = str(tmp_path / "data")
    run = codemode("run", "-", *TRACKER, "--data-dir", data, "--json", stdin="return 1")
    assert run.returncode == 0, run.stderr
    script_id = json.loads(run.stdout.splitlines()[-1])["script_id"]
    released = codemode("release", script_id, "--data-dir", data)
    assert released.returncode == 0, released.stderr
    assert released.stdout == f"script {script_id} was not held; nothing changed\n"
    one_clear_line(
        codemode("hold", script_id, "--data-dir", data),
        f"script {script_id} has finished: no step of it runs again",
    )
    listed = codemode("scripts", "--data-dir", data)
    assert "held" not in listed.stdout, listed.stdout


def test_search_json_builds_no_second_index(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """`search --json` answers from the engine's own index: it built a second one for the
    JSON's fields (two seconds of work for 5,000 tools, done twice)."""
    from engine import _search
    from engine.cli import main

    built: list[int] = []
    real = _search.ToolIndex.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        built.append(1)
        real(self, *args, **kwargs)

    monkeypatch.setattr(_search.ToolIndex, "__init__", counted)
    assert main(["search", "stale pull requests", "--json", *TRACKER]) == 0
    answer = json.loads(capfd.readouterr().out)
    assert answer["tools"] and answer["query"] == "stale pull requests", answer
    assert len(built) == 1


def test_run_attaches_files_by_their_names_or_ids(tmp_path: Path) -> None:
    """`run --file PATH` gives the script the file by its name, `--file ID=PATH` by ID, and
    a path whose file's name holds "=" is that file; a resume reads the recorded bytes after
    the files are gone. (run took no files: a script could read none from the CLI.)"""
    sales = tmp_path / "sales.csv"
    sales.write_bytes(b"region,amount\nnorth,10\nsouth,5\nnorth,7\n")
    odd = tmp_path / "x=y.json"
    odd.write_text('{"a": 1}')
    code = (
        "const totals = {};\n"
        'for await (const row of files.csv("sales.csv")) '
        "totals[row.region] = (totals[row.region] ?? 0) + Number(row.amount);\n"
        'const note = JSON.parse(await files.text("x=y.json"));\n'
        'const again = await files.text("q.csv");\n'
        "await tools.github__comment({number: 12, body: 'ping'});\n"
        "return [totals, note, again.length, files.list().map((f) => f.id)];"
    )
    data = tmp_path / "data"
    ran = codemode(
        "run", "-", *TRACKER, "--data-dir", str(data), "--json", "--file", str(sales),
        "--file", str(odd), "--file", f"q.csv={sales}", stdin=code,
    )  # fmt: skip
    assert ran.returncode == 3, ran.stderr
    paused = json.loads(ran.stdout.splitlines()[-1])
    script_id, call_id = paused["script_id"], paused["waiting"][0]["call_id"]
    sales.unlink()
    odd.unlink()
    resumed = codemode("resume", script_id, *TRACKER, "--data-dir", str(data), "--approve", call_id)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.endswith(
        'Returned:\n[{"north":17,"south":5},{"a":1},39,["sales.csv","x=y.json","q.csv"]]\n'
    ), resumed.stdout


def test_run_without_tools_runs_a_script_that_needs_none(tmp_path: Path) -> None:
    """`run` with no --tools and no MCP servers runs the script with no tools: one that
    computes, or reads the files given it. A call it makes is to a tool that does not exist,
    and fails before the script runs. `resume` takes no tools either (a script that waits on
    one says so); describe, search and worker still ask for tools: without any they have
    nothing to do."""
    notes = tmp_path / "notes.txt"
    notes.write_text("three short lines\nof text\nhere\n")
    data = tmp_path / "data"
    code = 'const t = await files.text("notes.txt"); console.log(t.split("\\n")[1]); return 6 * 7'
    ran = codemode("run", "-", "--data-dir", str(data), "--file", str(notes), stdin=code)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "Script finished.\nPrinted:\nof text\nReturned:\n42\n", ran.stdout
    python = tmp_path / "sum.py"
    python.write_text("return sum(range(10))\n")
    ran = codemode("run", str(python), "--json")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout.splitlines()[-1])["value"] == 45
    called = codemode("run", "-", stdin="return await tools.lookup({ id: 1 })")
    assert called.returncode == 1, called.stderr
    assert "tools.lookup does not exist" in called.stdout, called.stdout
    for command in (["describe"], ["search", "x"], ["worker", "--data-dir", str(data)]):
        one_clear_line(codemode(*command), "give --tools FILE")
    assert codemode("scripts", "--data-dir", str(data)).stdout.count("finished") == 1
    # `resume` takes none either; a script that waits on a tool then names it.
    code = 'return await tools.github__comment({ number: 1, body: "x" })'
    paused = codemode("run", "-", *TRACKER, "--data-dir", str(data), "--json", stdin=code)
    assert paused.returncode == 3, paused.stderr
    script_id = json.loads(paused.stdout.splitlines()[0])["script_id"]
    one_clear_line(
        codemode("resume", script_id, "--data-dir", str(data), "--approve", "0"),
        "calls github__comment, which this host does not have (it has: none)",
    )


def test_files_run_cannot_attach_are_one_clear_line(tmp_path: Path) -> None:
    """A --file that names no file, one that is not there or is a directory, two of one id,
    an id with a control character: one line naming it and what to do, and no script."""
    sales = tmp_path / "sales.csv"
    sales.write_bytes(b"region,amount\nnorth,10\nsouth,5\nnorth,7\n")
    data = tmp_path / "data"
    for given, said in (
        (["=" + str(sales)], "names no file: give a path"),
        (["a.csv="], "names no file"),
        ([str(tmp_path / "nope.csv")], f"cannot read attachment 'nope.csv' at {tmp_path}"),
        ([str(tmp_path)], "is not a regular file; give a file"),
        ([str(sales), f"sales.csv={sales}"], "two attachments have the id 'sales.csv'"),
        ([f"a\x01b={sales}"], "must be one line of text"),
    ):
        files = [arg for value in given for arg in ("--file", value)]
        ran = codemode("run", "-", *TRACKER, "--data-dir", str(data), *files, stdin="return 1")
        one_clear_line(ran, said)
    assert codemode("scripts", "--data-dir", str(data)).stdout.strip() in ("", "no scripts")
