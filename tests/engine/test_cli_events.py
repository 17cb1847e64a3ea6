"""`codemode run/resume --events` and the live progress line on a terminal."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine import Event
from engine._progress import ProgressLine
from engine.cli import _AfterTheLiveLine
from tests.engine.conftest import cli_taking_ctrl_c
from tests.engine.test_cli import ROOT, codemode


def test_events_as_json_lines_through_a_pause(tmp_path: Path) -> None:
    """--events FILE gets every event of `run` and then of `resume`, one JSON object a
    line; the exit codes are 3 (paused), then 0."""
    script = "const prs = await tools.github__list_prs({ repo: 'acme/api' });\nreturn await tools.github__comment({ number: prs[0].number, body: 'ping' })"
    data, events = str(tmp_path / "data"), tmp_path / "events.jsonl"
    tools = ("--tools", "examples/tracker_tools.py", "--data-dir", data, "--events", str(events))
    first = codemode("run", "-", *tools, "--json", stdin=script)
    assert first.returncode == 3, first.stderr
    paused = json.loads(first.stdout.splitlines()[-1])
    call_id = paused["waiting"][0]["call_id"]
    second = codemode("resume", paused["script_id"], "--approve", call_id, *tools)
    assert second.returncode == 0, second.stderr
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    assert [e["kind"] for e in lines] == [
        "started",
        "step",
        "call.proposed",
        "call.approved",
        "call.running",
        "call.done",
        "step",
        "call.proposed",
        "call.waiting",
        "paused",
        "call.approved",  # --approve, in the second process
        "resumed",
        "call.running",
        "call.done",
        "step",
        "ended",
    ]
    assert {e["script_id"] for e in lines} == {paused["script_id"]}
    assert lines[-1]["status"] == "finished" and lines[-1]["steps"] == 3
    assert lines[9]["waiting"] == [
        {"call_id": call_id, "tool": "github__comment", "reason": "approval"}
    ]
    # Not a terminal: no live line on stderr.
    assert "\r" not in first.stderr + second.stderr


def test_events_to_a_file_that_cannot_be_written(tmp_path: Path) -> None:
    proc = codemode(
        "run",
        "examples/stale_prs.js",
        "--tools",
        "examples/tracker_tools.py",
        "--events",
        str(tmp_path / "no" / "such" / "dir" / "e.jsonl"),
    )
    assert proc.returncode == 2
    assert "cannot write the events to" in proc.stderr


WAITING_TOOLS = """
import time
from pathlib import Path
from engine import tool

@tool
def wait() -> str:
    \"\"\"Returns once the events' reader has left.\"\"\"
    while not Path(__file__).with_name("left").exists():
        time.sleep(0.01)
    return "ok"

TOOLS = [wait]
"""


def test_events_to_a_pipe_whose_reader_left(tmp_path: Path) -> None:
    """--events to a pipe whose reader reads a line and leaves: the lines stop, and the run
    goes on to its result. A traceback was logged at each event after ("an on_event
    listener failed ... BrokenPipeError")."""
    tools = tmp_path / "waiting_tools.py"
    tools.write_text(WAITING_TOOLS)
    fifo = tmp_path / "events"
    os.mkfifo(fifo)
    read: list[bytes] = []

    def read_a_line_and_leave() -> None:
        with open(fifo, "rb") as reader:
            read.append(reader.readline())
        (tmp_path / "left").touch()

    reader = threading.Thread(target=read_a_line_and_leave)
    reader.start()
    try:
        proc = codemode(
            "run", "-", "--tools", str(tools), "--events", str(fifo),
            stdin="return await tools.wait()",
        )  # fmt: skip
    finally:
        (tmp_path / "left").touch()  # the tool ends, whatever happened
        if reader.is_alive():  # the command never opened the pipe: let the reader open it
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join()
    assert json.loads(read[0])["kind"] == "started"
    assert (proc.returncode, proc.stdout) == (0, "Script finished.\nReturned:\nok\n")
    assert proc.stderr == ""


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_a_run_whose_events_fifo_has_no_reader(
    tmp_path: Path, signum: int, code: int
) -> None:
    """--events to a FIFO no one reads: opening it waits for a reader, and SIGTERM (or
    Ctrl-C) ends the command at once, as while it reads what it was given. SIGTERM never
    ended it (the event loop's handler waited for the open), only SIGKILL did."""
    fifo = tmp_path / "events"
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        cli_taking_ctrl_c("run", "examples/stale_prs.js", "--tools", "examples/tracker_tools.py",
                          "--events", str(fifo)),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=ROOT,
    )  # fmt: skip
    try:
        wchan = Path(f"/proc/{proc.pid}/wchan")
        deadline = time.monotonic() + 60
        # The kernel's wait in a FIFO's open for the other end.
        while wchan.read_text() != "wait_for_partner":
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)  # a backstop: it ends at once
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == code, err
    assert "Traceback" not in err and "without finishing the cleanup" not in err, err


def test_live_line_on_a_terminal() -> None:
    """With stderr on a terminal, `run` keeps one line up to date (steps, calls, time) and
    clears it before the result; stdout is the result alone."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "engine.cli",
            "run",
            "examples/stale_prs.js",
            "--tools",
            "examples/tracker_tools.py",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=slave,
        stdin=subprocess.DEVNULL,
    )
    os.close(slave)
    seen = bytearray()

    def read() -> None:
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the last writer closed the terminal
                return
            if not chunk:
                return
            seen.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    out, _ = proc.communicate(timeout=120)
    reader.join(timeout=30)
    os.close(master)
    assert proc.returncode == 0
    assert out.decode().startswith("Script finished.")
    text = seen.decode()
    assert "codemode: 3 steps, 3 calls" in text, text
    assert text.endswith("\r\x1b[K"), text


def _screen(written: str) -> list[str]:
    """The lines a terminal shows for ``written``: a carriage return goes back to the
    line's start, where what follows writes over it; ESC [K clears the line from there."""
    lines, line, column = [], "", 0
    for part in re.split(r"(\r|\n|\x1b\[K)", written):
        if part == "\n":
            lines.append(line)
            line, column = "", 0
        elif part == "\r":
            column = 0
        elif part == "\x1b[K":
            line = line[:column]
        else:
            line = line[:column] + part + line[column + len(part) :]
            column += len(part)
    return [*lines, line]


def test_a_tools_part_line_is_not_lost_under_the_live_line() -> None:
    """A tool's progress written without its line break and flushed (print("working...",
    end="", flush=True)) was erased by the live line's next redraw, and the rest of its line
    (" done") was then written onto the end of the live line. The line is written whole
    again with its rest, after the live line is cleared."""
    stderr = io.StringIO()
    tools_stdout = _AfterTheLiveLine(stderr)
    live = ProgressLine(stderr)
    live.draw()
    print("working...", end="", flush=True, file=tools_stdout)
    live.draw()  # the live line's tick, on the event loop's thread
    print(" done", file=tools_stdout)
    print("step", end="", flush=True, file=tools_stdout)
    print(" 1\rstep 2", end="", flush=True, file=tools_stdout)  # its own redraw
    live.draw()
    print(" of 2", file=tools_stdout)
    live.draw()
    assert _screen(stderr.getvalue()) == [
        "working... done",
        "step 2 of 2",
        "codemode: 0 steps, 0 calls, 0.0 s",
    ], repr(stderr.getvalue())


def test_a_tool_printing_a_dot_at_a_time_writes_each_dot_once() -> None:
    """Each flush wrote the whole part line again (to mend one the live line drew over),
    so a tool printing 10,000 dots one at a time wrote 50 MB to the terminal. The part line
    is written again only when the live line was drawn over it since, and only its last
    row (a wider one would leave its rows above on the screen twice)."""
    stderr = io.StringIO()
    tools_stdout = _AfterTheLiveLine(stderr)
    for _ in range(10_000):
        print(".", end="", flush=True, file=tools_stdout)
    assert len(stderr.getvalue()) < 10_000 + 10, len(stderr.getvalue())
    ProgressLine(stderr).draw()
    before = len(stderr.getvalue())
    print(" done", file=tools_stdout)
    rewritten = stderr.getvalue()[before:]
    # 10,000 is 125 rows of 80: the last row, whole, is the cursor's.
    assert rewritten == "\r\x1b[K" + "." * 80 + " done\n", repr(rewritten)


def test_progress_line_counts() -> None:
    """Calls running and waiting are counted by call: a call refused (failed, never
    running) took one off the running count, and one approved after it waited was counted
    waiting to the end."""
    stream = io.StringIO()
    line = ProgressLine(stream)
    for kind, call in [
        ("started", None),
        ("step", None),
        ("call.proposed", "c1"),
        ("call.proposed", "c2"),
        ("call.proposed", "c3"),
        ("call.running", "c1"),
        ("call.running", "c2"),
        ("call.done", "c1"),
        ("call.failed", "c3"),  # refused: it never ran
    ]:
        line(Event(kind, "s", 0.0, step=1, call_id=call))  # type: ignore[arg-type]
    assert line.text().startswith("codemode: 1 step, 3 calls (1 running), ")
    line(Event("call.waiting", "s", 0.0, call_id="c4"))
    assert ", 1 waiting, " in line.text()
    line(Event("call.approved", "s", 0.0, call_id="c4"))
    line(Event("call.done", "s", 0.0, call_id="c2"))
    assert line.text().startswith("codemode: 1 step, 3 calls, "), line.text()
    line.clear()
    assert stream.getvalue().endswith("\r\x1b[K")


def test_the_readme_documents_every_exit_code() -> None:
    """The README's table of exit codes names each code the CLI returns."""
    import re
    import signal

    from engine.cli import (
        EXIT_CODES,
        INTERRUPTED,
        MISTAKE,
        OUTPUT_FAILED,
        TERMINATED,
        UNAVAILABLE,
    )

    readme = (ROOT / "README.md").read_text()
    table = dict(re.findall(r"^\| (\d+) \| (.+?) \|$", readme, re.M))
    codes = {
        *EXIT_CODES.values(),
        MISTAKE,
        UNAVAILABLE,
        OUTPUT_FAILED,
        INTERRUPTED,
        TERMINATED,
        128 + signal.SIGPIPE,
    }
    assert {int(c) for c in table} == codes
    for status, code in EXIT_CODES.items():
        meaning = table[str(code)]
        word = {"elsewhere": "another host"}.get(status, status)
        assert word in meaning, (status, meaning)
