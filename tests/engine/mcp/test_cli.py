"""The `codemode` commands that build an engine (run, resume, worker, describe, search) use
the MCP servers of codemode.toml's `[codemode.mcpServers.NAME]` tables, as `codemode mcp
serve` does, and end their processes on every way out: a finished script, a paused one, an
error, Ctrl-C. Real servers: `@modelcontextprotocol/server-memory` (Node, from
node_modules; `make install`) and the FastMCP server in fastmcp_server.py."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psutil
import pytest

pytest.importorskip("mcp")

from tests._needs import require
from tests.engine.conftest import cli_taking_ctrl_c

ROOT = Path(__file__).parents[3]
MEMORY = ROOT / "node_modules" / ".bin" / "mcp-server-memory"
LAB = Path(__file__).parent / "fastmcp_server.py"
TIMEOUT = 120  # a backstop only: nothing here waits on time

pytestmark = pytest.mark.timeout(300)


def _toml(tmp: Path) -> None:
    """A codemode.toml in ``tmp`` with two servers, each naming ``tmp`` in its process (the
    lab in its arguments, memory in its environment), so a test can find what is left."""
    if not MEMORY.exists():
        require("Node and the npm MCP servers (run `make install`): no mcp-server-memory")
    (tmp / "codemode.toml").write_text(
        f"""
[codemode]
data_dir = "data"

[codemode.mcpServers.lab]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(LAB))}, {json.dumps(str(tmp))}]

[codemode.mcpServers.memory]
command = {json.dumps(str(MEMORY))}
env = {{ MEMORY_FILE_PATH = {json.dumps(str(tmp / "memory.jsonl"))} }}
unannotated = "run"
"""
    )


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "engine.cli", *args]


def codemode(tmp: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The command run from ``tmp`` (so it reads tmp/codemode.toml), as a user runs it."""
    return subprocess.run(
        _command(*args),
        capture_output=True,
        text=True,
        input=stdin,
        cwd=tmp,
        timeout=TIMEOUT,
        env=_env(),
    )


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)  # run from tmp, the repository's modules still import
    return env


@pytest.fixture(autouse=True)
def _nothing_left(tmp_path: Path) -> Iterator[None]:
    """Whatever a failed test leaves running is ended (the check is in each test)."""
    yield
    for process in left_running(tmp_path, processes=True):
        with contextlib.suppress(psutil.Error):
            process.kill()


def left_running(tmp: Path, *, processes: bool = False) -> list[Any]:
    """The processes still alive that belong to ``tmp``'s servers (their command lines, or
    with ``processes`` the processes)."""
    found: list[Any] = []
    for process in psutil.process_iter(["cmdline", "status"]):
        try:
            if process.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            cmdline = " ".join(process.info["cmdline"] or ())
            environ = process.environ() if str(tmp) not in cmdline else {}
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if str(tmp) in cmdline or str(tmp) in environ.get("MEMORY_FILE_PATH", ""):
            found.append(process if processes else f"{process.pid} {cmdline}")
    return found


BOTH = (
    'await tools.memory__create_entities({ entities: [{ name: "ada", entityType: "person", '
    "observations: [] }] });\n"
    "const graph = await tools.memory__read_graph({});\n"
    "return [await tools.lab__add({ a: 2, b: 3 }), graph.entities.map((e) => e.name)];\n"
)


def test_a_module_beside_the_tools_file_does_not_hide_the_mcp_sdk(tmp_path: Path) -> None:
    """A helper module beside the tools file named as a package the engine imports after
    loading them (mcp.py, the MCP SDK's name): the tools file's folder stood first on the
    import path for the rest of the command, so the SDK was that file and the server
    "closed before it connected", its tools gone. The file is still importable by the
    tools (a sibling module they import, as `python tools.py` would)."""
    if not MEMORY.exists():
        require("Node and the npm MCP servers (run `make install`): no mcp-server-memory")
    folder = tmp_path / "mine"  # not the working directory, which `python -m` puts first
    folder.mkdir()
    (folder / "mcp.py").write_text("NOTE = 'a helper of the host, not the MCP SDK'\n")
    (folder / "helpers.py").write_text("GREETING = 'hello'\n")
    (folder / "tools.py").write_text(
        "from engine import tool\n"
        "from helpers import GREETING\n"
        "@tool\n"
        "def greet() -> str:\n"
        '    """Greet."""\n'
        "    return GREETING\n"
    )
    (tmp_path / "codemode.toml").write_text(
        f"""
[codemode.mcpServers.memory]
command = {json.dumps(str(MEMORY))}
env = {{ MEMORY_FILE_PATH = {json.dumps(str(tmp_path / "memory.jsonl"))} }}
"""
    )
    script = "return [await tools.greet(), await tools.memory__read_graph({})]"
    proc = codemode(tmp_path, "run", "-", "--tools", "mine/tools.py", "--json", stdin=script)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["value"] == ["hello", {"entities": [], "relations": []}], result["text"]
    assert left_running(tmp_path) == []


def test_run_uses_the_configured_servers_and_ends_them(tmp_path: Path) -> None:
    """`codemode run` with no --tools calls tools of both servers; nothing is left running."""
    _toml(tmp_path)
    (tmp_path / "script.js").write_text(BOTH)
    proc = codemode(tmp_path, "run", "script.js", "--json")
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads(proc.stdout.strip().splitlines()[-1])
    assert result["value"] == [{"result": 5}, ["ada"]], result
    assert left_running(tmp_path) == []


def test_describe_and_search_declare_the_servers_tools(tmp_path: Path) -> None:
    _toml(tmp_path)
    described = codemode(tmp_path, "describe")
    assert described.returncode == 0, described.stderr
    assert "lab__add" in described.stdout and "memory__read_graph" in described.stdout
    found = codemode(tmp_path, "search", "add two whole numbers", "--json")
    assert found.returncode == 0, found.stderr
    assert "lab__add" in orjson.loads(found.stdout)["tools"]
    assert left_running(tmp_path) == []


def test_resume_approves_a_servers_call_and_an_error_ends_the_servers(tmp_path: Path) -> None:
    """A destructive lab tool pauses `run`; `resume --approve` runs it through the servers
    it starts again. `resume` of a script the log lacks fails after the servers started:
    they end too."""
    _toml(tmp_path)
    paused = codemode(
        tmp_path, "run", "-", "--json", stdin='return await tools.lab__wipe({ target: "x" });'
    )
    assert paused.returncode == 3, paused.stderr
    first, second = paused.stdout.strip().splitlines()
    script_id = orjson.loads(first)["script_id"]
    call_id = orjson.loads(second)["waiting"][0]["call_id"]
    assert not (tmp_path / "wiped-x").exists()
    assert left_running(tmp_path) == []
    done = codemode(tmp_path, "resume", script_id, "--approve", call_id, "--json")
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout)["value"] == {"result": "wiped x"}
    assert (tmp_path / "wiped-x").exists()
    missing = codemode(tmp_path, "resume", "nope")
    assert missing.returncode == 2 and "no script 'nope'" in missing.stderr
    assert left_running(tmp_path) == []


def _wait_for(path: Path, process: subprocess.Popen[Any]) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_mid_call_ends_the_servers(tmp_path: Path, signum: int, code: int) -> None:
    """Ctrl-C (or SIGTERM, what a service manager sends) while a server's call hangs: exit
    130 (143), and neither server runs on."""
    _toml(tmp_path)
    (tmp_path / "script.js").write_text(
        "await tools.memory__read_graph({});\nreturn await tools.lab__hang({});\n"
    )
    process = subprocess.Popen(
        cli_taking_ctrl_c("run", "script.js"),
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(tmp_path / "hang.pid", process)
        assert len(left_running(tmp_path)) >= 2  # both servers run now
        process.send_signal(signum)
        _, err = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == code, err
    assert left_running(tmp_path) == []


def test_worker_serves_until_ctrl_c_and_ends_the_servers(tmp_path: Path) -> None:
    _toml(tmp_path)
    process = subprocess.Popen(
        _command("worker"),
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        seen: list[str] = []  # the servers' own stderr comes first
        while not seen or "worker driving ready scripts" not in seen[-1]:
            line = process.stderr.readline()
            assert line, "".join(seen)  # the worker ended before it served
            seen.append(line)
        assert len(left_running(tmp_path)) >= 2
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0
    assert left_running(tmp_path) == []


def test_without_tools_or_servers_describe_says_what_to_give_and_run_needs_none(
    tmp_path: Path,
) -> None:
    (tmp_path / "script.js").write_text("return 1;")
    proc = codemode(tmp_path, "describe")
    assert proc.returncode == 2
    assert "--tools FILE" in proc.stderr and "[codemode.mcpServers.NAME]" in proc.stderr
    # A script that calls no tool runs with none (see test_cli's test of run without tools).
    proc = codemode(tmp_path, "run", "script.js")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Script finished.\nReturned:\n1\n"


def test_an_mcp_servers_json_file_as_the_config_says_where_it_goes(tmp_path: Path) -> None:
    """`codemode mcp serve --config mcp.json` reads an mcpServers file; the other commands'
    --config is a codemode.toml, and such a file given to one said "is not valid TOML:
    Invalid statement (at line 1, column 1)"."""
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {"lab": {"command": "x"}}}))
    proc = codemode(tmp_path, "run", "-", "--config", "mcp.json", stdin="return 1")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "codemode: --config mcp.json: give a codemode.toml; an mcpServers .json file is for "
        "`codemode mcp serve --config`, and the other commands start the servers of "
        "[codemode.mcpServers.NAME] tables in codemode.toml"
    ]


def test_the_approve_flags_reach_the_servers_log_from_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`codemode mcp serve` prints `codemode approve` with absolute flags that reach its own
    log: --data-dir as given, --config for a toml's data_dir or store; none for a log in
    memory."""
    from engine._config import Config
    from engine.log import LogStore
    from engine.mcp._cli import _log_flags

    def flags(toml: str | None, data_dir: str | None) -> str | None:
        config = Config.load(toml) if toml is not None else Config()
        given = data_dir or config.data_dir
        store: LogStore = config.store.build(Path(given) if given is not None else None)
        return _log_flags(store, toml, data_dir)

    monkeypatch.chdir(tmp_path)
    data = str(tmp_path / "d")
    assert flags(None, "d") == shlex.join(["--data-dir", data])
    assert flags(None, None) is None
    toml = tmp_path / "codemode.toml"
    toml.write_text('[codemode]\ndata_dir = "d"\n')
    assert flags("codemode.toml", None) == shlex.join(["--config", str(toml)])
    assert flags("codemode.toml", "e") == shlex.join(
        ["--config", str(toml), "--data-dir", str(tmp_path / "e")]
    )
    toml.write_text('[codemode]\ndata_dir = "d"\n[codemode.store]\nkind = "memory"\n')
    assert flags("codemode.toml", "d") is None


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_mcp_serve_on_stdio_ends_at_a_signal_while_its_client_stays(
    tmp_path: Path, signum: int
) -> None:
    """SIGTERM or Ctrl-C ends `codemode mcp serve` mid-call while its client still holds its
    stdin open (a terminal, a supervisor stopping it): the servers and sandboxes it started
    end with it. The SDK's stdin reader blocks in a thread no cancellation reaches, which
    used to keep the process until its stdin closed."""
    _toml(tmp_path)
    process = _signalled(
        cli_taking_ctrl_c("mcp", "serve"),
        tmp_path,
        when=tmp_path / "hang.pid",
        signum=signum,
        code="await tools.lab__hang({})",
    )
    assert process.returncode == 0
    assert left_running(tmp_path) == []


def test_mcp_serve_over_http_stops_quietly_at_sigterm(tmp_path: Path) -> None:
    """SIGTERM stops `codemode mcp serve --http` through uvicorn's own shutdown: exit 0, no
    traceback on stderr (cancelling uvicorn printed one of its lifespan task each time)."""
    process = subprocess.Popen(
        [
            *_command("mcp", "serve", "--http", "127.0.0.1:0"),
            "--upstream",
            shlex.join(["lab=" + sys.executable, str(LAB), str(tmp_path)]),
        ],
        cwd=tmp_path,
        env=_env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    try:
        seen: list[str] = []
        while not seen or "serving MCP at" not in seen[-1]:
            line = process.stderr.readline()
            assert line, "".join(seen)  # it ended before it served
            seen.append(line)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0
    assert "Traceback" not in err and "ERROR" not in err, err
    assert left_running(tmp_path) == []


def test_mcp_serve_over_http_where_others_reach_it_warns_that_it_asks_no_one() -> None:
    """The server authenticates no client, and a client approves its own scripts' calls
    through elicitation: on an address other machines reach, anyone who reaches it runs the
    tools (it said nothing)."""
    from engine.mcp._cli import _exposure

    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost", "LOCALHOST"):
        assert _exposure(host) is None, host
    for host in ("0.0.0.0", "::", "192.168.1.5", "example.com"):
        said = _exposure(host)
        assert said is not None and said.startswith(f"--http {host}: other machines"), said
        assert "serve on 127.0.0.1" in said, said


def test_mcp_serve_ends_at_sigterm_with_a_tool_that_never_returns(tmp_path: Path) -> None:
    """A sync tool of --tools that never returns keeps its thread, which the exit once
    waited for: SIGTERM ends `codemode mcp serve` as its stop (exit 0: the thread is a
    daemon's, left to the process's end), and what it started with it."""
    (tmp_path / "tools.py").write_text(
        "import time\n"
        "from pathlib import Path\n"
        "from engine import tool\n\n"
        "@tool(read_only=True)\n"
        "def stuck() -> str:\n"
        '    """Never returns."""\n'
        f"    Path({str(tmp_path / 'stuck')!r}).write_text('')\n"
        "    while True:\n"
        "        time.sleep(1)\n"
    )
    _toml(tmp_path)  # its servers show that what it started ends with it
    process = _signalled(
        _command("mcp", "serve", "--tools", "tools.py"),
        tmp_path,
        when=tmp_path / "stuck",
        code="return await tools.stuck({})",
    )
    assert process.returncode == 0
    assert left_running(tmp_path) == []


def _signalled(
    command: list[str],
    cwd: Path,
    *,
    when: Path,
    signum: int = signal.SIGTERM,
    code: str | None = None,
) -> subprocess.Popen[bytes]:
    """Run ``command`` (``codemode mcp serve`` on stdio, its stdin held open all along),
    call run_code with ``code`` when given, and once ``when`` exists send ``signum``; the
    process, ended (the signal's grace is 10 s; killed only past TIMEOUT)."""
    with _serving(command, cwd) as process:
        if code is not None:
            _call_run_code(process, code)
        deadline = time.monotonic() + TIMEOUT
        while not when.exists():
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        process.send_signal(signum)
        process.wait(timeout=TIMEOUT)
    return process


@contextlib.contextmanager
def _serving(command: list[str], cwd: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``command`` run from ``cwd`` with its three pipes; killed on the way out if it still
    runs."""
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def _send(process: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    """Write one JSON-RPC message to ``process``'s stdin."""
    assert process.stdin is not None
    process.stdin.write(orjson.dumps({"jsonrpc": "2.0", **message}) + b"\n")
    process.stdin.flush()


def _call_run_code(
    process: subprocess.Popen[bytes], code: str, capabilities: dict[str, Any] | None = None
) -> None:
    """Start an MCP session with ``process`` (``codemode mcp serve`` on stdio) by hand, as a
    client with ``capabilities``, and call run_code with ``code``, not waiting for its
    result; stdin stays open."""
    assert process.stdin is not None and process.stdout is not None

    def send(message: dict[str, Any]) -> None:
        _send(process, message)

    send(
        {
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": capabilities or {},
                "clientInfo": {"name": "test", "version": "0"},
            },
        }
    )
    assert b'"id":1' in process.stdout.readline()
    send({"method": "notifications/initialized"})
    send(
        {
            "id": 2,
            "method": "tools/call",
            "params": {"name": "run_code", "arguments": {"code": code}},
        }
    )


def test_mcp_serve_on_stdio_stops_quietly_when_its_client_goes_mid_call(tmp_path: Path) -> None:
    """A client that goes away mid-script (killed: both its pipes close) left the server's
    answer a broken pipe, and `codemode mcp serve` printed the SDK's task group traceback and
    exited 1: it says the client went away and exits 0, ending what it started."""
    _toml(tmp_path)
    with _serving(_command("mcp", "serve"), tmp_path) as process:
        assert process.stdin is not None and process.stdout is not None
        _call_run_code(process, "await tools.lab__hang({})")
        _wait_for(tmp_path / "hang.pid", process)
        process.stdout.close()
        process.stdin.close()
        process.wait(timeout=TIMEOUT)
        assert process.stderr is not None
        err = process.stderr.read().decode()
    assert process.returncode == 0, err
    assert "Traceback" not in err and "the MCP client went away" in err, err
    assert left_running(tmp_path) == []


@pytest.mark.parametrize(
    ("result", "said"),
    [
        (
            {"approve": True},
            "asking them through the client failed (its answer does not follow MCP: action: "
            "Field required). Call continue_script with this script id to ask again.",
        ),
        (5, "asking them through the client failed ("),
    ],
    ids=["no elicitation result", "unreadable"],
)
def test_mcp_serve_says_in_one_line_that_a_clients_elicitation_answer_is_not_mcp(
    tmp_path: Path, result: Any, said: str
) -> None:
    """A client that answers the approval it is asked with what is no elicitation result:
    the paused result (and the log) say so in one line, where they held pydantic's whole
    report, links included. An answer the SDK cannot read at all (no object where the
    result goes) was dropped at debug level: the request has no timeout, and run_code
    waited for ever; it fails at once too."""
    (tmp_path / "codemode.toml").write_text(
        f"[codemode.mcpServers.lab]\ncommand = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(LAB))}, {json.dumps(str(tmp_path))}]\n"
    )
    with _serving(_command("mcp", "serve"), tmp_path) as process:
        assert process.stdout is not None and process.stdin is not None
        _call_run_code(process, 'await tools.lab__wipe({ target: "x" })', {"elicitation": {}})
        asked = orjson.loads(process.stdout.readline())
        assert asked["method"] == "elicitation/create", asked
        _send(process, {"id": asked["id"], "result": result})
        ready, _, _ = select.select([process.stdout], [], [], TIMEOUT)
        assert ready, "run_code was not answered: the client's answer was dropped"
        answer = orjson.loads(process.stdout.readline())
        process.stdin.close()
        process.wait(timeout=TIMEOUT)
        assert process.stderr is not None
        err = process.stderr.read().decode()
    body = answer["result"]["content"][0]["text"]
    assert said in body, body
    assert "pydantic" not in body and "pydantic" not in err, err
    assert not (tmp_path / "wiped-x").exists()


def test_mcp_serve_ends_a_session_whose_client_sends_a_message_too_large(
    tmp_path: Path,
) -> None:
    """A client that writes a line with no end (over MAX_MESSAGE) ends the session with a
    line saying why, instead of the server holding all of it in memory, waiting for more."""
    from engine.mcp._stdio import MAX_MESSAGE

    process = subprocess.Popen(
        [
            *_command("mcp", "serve", "--upstream"),
            shlex.join(["lab=" + sys.executable, str(LAB), str(tmp_path)]),
        ],
        cwd=tmp_path,
        env=_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stdin is not None
    try:
        chunk = b"x" * (1 << 20)
        with contextlib.suppress(BrokenPipeError):  # it may end before the last chunk
            for _ in range(MAX_MESSAGE // len(chunk) + 2):
                process.stdin.write(chunk)
            process.stdin.flush()
        process.wait(timeout=TIMEOUT)  # it ends by itself: stdin is still open
        _, err = process.communicate()
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0
    assert "the client sent a message over 64 MiB; ending the session" in err.decode(), err
    assert left_running(tmp_path) == []


def test_mcp_serve_ends_at_sigterm_while_a_server_is_starting(tmp_path: Path) -> None:
    """SIGTERM while an upstream server is still starting (it never answers, and its
    initTimeout is an hour) ends `codemode mcp serve` through its own cleanup, which ends
    that server too; the signal used to kill the command outright before it served."""
    (tmp_path / "mcp.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "mute": {
                        "command": sys.executable,
                        "args": [str(LAB), str(tmp_path)],
                        "initTimeout": 3600,
                    }
                }
            }
        )
    )
    (tmp_path / "mute").write_text("")
    process = _signalled(
        _command("mcp", "serve", "--config", "mcp.json"), tmp_path, when=tmp_path / "muted"
    )
    assert process.returncode == 0
    assert left_running(tmp_path) == []


def test_mcp_serve_says_what_it_serves(tmp_path: Path) -> None:
    """The line `codemode mcp serve` starts with names its sources: the tools of --tools
    (it said "over MCP servers none" when they were all it served)."""
    (tmp_path / "tools.py").write_text(
        'from engine import tool\n\n@tool\ndef ping() -> str:\n    """Pong."""\n    return "pong"\n'
    )
    proc = codemode(tmp_path, "mcp", "serve", "--tools", "tools.py", stdin="")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[0] == "codemode: serving MCP on stdio over 1 tool of tools.py"


def test_mcp_serve_names_where_two_servers_of_one_name_come_from(tmp_path: Path) -> None:
    """A server of codemode.toml (read from the current directory unasked) and one of
    --config with the same name: the refusal names both places (it said to name one with
    --upstream, which neither was)."""
    (tmp_path / "codemode.toml").write_text('[codemode.mcpServers.lab]\ncommand = "lab"\n')
    (tmp_path / "mcp.json").write_text('{"mcpServers": {"lab": {"command": "lab"}}}')
    proc = codemode(tmp_path, "mcp", "serve", "--config", "mcp.json", stdin="")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        "codemode: two MCP servers are named 'lab': one in codemode.toml, one in mcp.json; "
        "rename one (an --upstream is named as NAME=COMMAND)\n"
    )


def test_mcp_serve_refuses_an_upstream_name_without_a_command(tmp_path: Path) -> None:
    """`--upstream memory=` (the command left out): it said it could not start the command
    'memory=', as if the whole text were one. A command whose quotes do not close is named as
    given, its name too (its name was left out)."""
    proc = codemode(tmp_path, "mcp", "serve", "--upstream", "memory=", stdin="")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        "codemode: --upstream 'memory=': give the command after the name, as NAME=COMMAND\n"
    )
    proc = codemode(tmp_path, "mcp", "serve", "--upstream", 'x=python3 "open', stdin="")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == "codemode: --upstream 'x=python3 \"open': No closing quotation\n"


def test_mcp_serve_over_http_where_it_cannot_listen_says_so(tmp_path: Path) -> None:
    """A port in use, a host that does not resolve: one line and exit 2, not a traceback;
    and [::1]:PORT is taken as the URL form it prints."""
    (tmp_path / "tools.py").write_text(
        "def add(a: int, b: int) -> int:\n    'Add.'\n    return a + b\n\nTOOLS = [add]\n"
    )
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        for address, why in ((f"127.0.0.1:{port}", "in use"), ("nohost.invalid:1234", "")):
            proc = codemode(tmp_path, "mcp", "serve", "--tools", "tools.py", "--http", address)
            assert proc.returncode == 2, proc
            lines = proc.stderr.strip().splitlines()
            assert len(lines) == 1 and "cannot listen there" in lines[0] and why in lines[0], lines
    finally:
        taken.close()
    from engine import ConfigError
    from engine.mcp._cli import _address

    assert _address("[::1]:8765") == ("::1", 8765)
    assert _address(":8765") == ("127.0.0.1", 8765)
    # Read as the runner's addresses: '²' was a traceback from int(), fullwidth digits were
    # read as 7300, 5,000 digits met int()'s own bound.
    for port in ("\u00b2", "\uff17\uff13\uff10\uff10", "9" * 5000, "70000"):
        with pytest.raises(ConfigError, match=r"give HOST:PORT, .*\(a port is 0 to 65535\)"):
            _address(f"127.0.0.1:{port}")
