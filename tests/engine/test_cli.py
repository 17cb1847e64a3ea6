"""The `codemode` command, run as a new user runs it: a subprocess from the repository root."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def codemode(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args],
        capture_output=True,
        text=True,
        input=stdin,
        cwd=ROOT,
        timeout=120,
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


def test_resume_without_a_log_says_what_it_needs() -> None:
    """resume needs the session log: without --data-dir it says so and runs nothing."""
    proc = codemode("resume", "abc", "--tools", "examples/tracker_tools.py")
    assert proc.returncode == 2 and "--data-dir" in proc.stderr


def test_resume_of_an_unknown_script(tmp_path: Path) -> None:
    """resume of a script the log does not hold names it."""
    proc = codemode(
        "resume", "nope", "--tools", "examples/tracker_tools.py", "--data-dir", str(tmp_path)
    )
    assert proc.returncode == 2 and "no script 'nope'" in proc.stderr


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
    call_id = paused["waiting"][0]["call_id"]
    approved = codemode("approve", paused["script_id"], call_id, "--data-dir", data)
    assert approved.returncode == 0, approved.stderr
    again = codemode("approve", paused["script_id"], call_id, "--data-dir", data)
    assert again.returncode == 2 and "is approved, not awaiting approval" in again.stderr

    worker = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "worker", *tools],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
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
