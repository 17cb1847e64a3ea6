"""`codemode mcp serve`, driven by the `mcp` SDK's own client over stdio and streamable HTTP,
over real upstream servers: the reference servers from npm (`make install` puts them in
node_modules; these tests need Node) and the FastMCP server in fastmcp_server.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp_types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests._needs import require

ROOT = Path(__file__).parents[3]
BIN = ROOT / "node_modules" / ".bin"
CODEMODE = Path(sys.executable).parent / "codemode"
LAB = Path(__file__).parent / "fastmcp_server.py"
TIMEOUT = 90  # a backstop only: nothing here waits on time

pytestmark = pytest.mark.timeout(240)


def _config(tmp: Path, *names: str) -> Path:
    for name in ("everything", "memory", "filesystem"):
        if name in names and not (BIN / f"mcp-server-{name}").exists():
            require(f"Node and the npm MCP servers (run `make install`): no mcp-server-{name}")
    (tmp / "files").mkdir(exist_ok=True)
    servers: dict[str, Any] = {
        "everything": {"command": str(BIN / "mcp-server-everything"), "args": ["stdio"]},
        "memory": {
            "command": str(BIN / "mcp-server-memory"),
            "env": {"MEMORY_FILE_PATH": str(tmp / "memory.jsonl")},
            "unannotated": "run",
        },
        "filesystem": {"command": str(BIN / "mcp-server-filesystem"), "args": [str(tmp / "files")]},
        "lab": {"command": sys.executable, "args": [str(LAB), str(tmp)]},
    }
    path = tmp / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {n: servers[n] for n in names}}))
    return path


def _args(tmp: Path, config: Path, extra: list[str], *, data_dir: bool = True) -> list[str]:
    keep = ["--data-dir", "data"] if data_dir else []  # relative: the server runs in tmp
    return ["mcp", "serve", "--config", str(config), *keep, *extra]


@contextlib.asynccontextmanager
async def serve(
    transport: str,
    tmp: Path,
    config: Path,
    *extra: str,
    elicit: Any = None,
    on_message: Any = None,
    data_dir: bool = True,
) -> AsyncIterator[ClientSession]:
    """A client session with `codemode mcp serve` run as a child, over ``transport``, with
    its session log in tmp/data (in memory without ``data_dir``)."""
    args = _args(tmp, config, list(extra), data_dir=data_dir)
    kwargs: dict[str, Any] = {"elicitation_callback": elicit} if elicit else {}
    if on_message is not None:
        kwargs["message_handler"] = on_message
    if transport == "stdio":
        params = StdioServerParameters(command=str(CODEMODE), args=args, cwd=str(tmp))
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write, **kwargs) as session,
        ):
            await session.initialize()
            yield session
        return
    process = await asyncio.create_subprocess_exec(
        str(CODEMODE), *args, "--http", "127.0.0.1:0", cwd=str(tmp), stderr=subprocess.PIPE
    )
    assert process.stderr is not None
    try:
        url = None
        async with asyncio.timeout(TIMEOUT):
            while url is None:
                line = (await process.stderr.readline()).decode()
                assert line, "codemode mcp serve ended before it served"
                if "serving MCP at " in line:
                    url = line.split("serving MCP at ", 1)[1].split()[0]
        drain = asyncio.create_task(_drain(process.stderr))
        async with (
            streamable_http_client(url) as (read, write),
            ClientSession(read, write, **kwargs) as session,
        ):
            await session.initialize()
            yield session
        drain.cancel()
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            async with asyncio.timeout(TIMEOUT):
                await process.wait()


async def _http_served(engine: Any) -> tuple[asyncio.Task[None], str, str, int]:
    """``engine`` served over HTTP on a free loopback port by a CodeModeServer, in a task:
    the task, and the URL, host and port it serves at, once it does (stop it with
    :func:`_stop_serving`)."""
    from engine.mcp import _serve

    server = _serve.CodeModeServer(engine)
    ready = asyncio.Event()
    urls: list[str] = []

    def on_ready(url: str) -> None:
        urls.append(url)
        ready.set()

    serving = asyncio.create_task(server.run_http("127.0.0.1", 0, on_ready=on_ready))
    try:
        await asyncio.wait_for(ready.wait(), TIMEOUT)
    except BaseException:
        await _stop_serving(serving, engine)
        raise
    host, port = urls[0].split("//")[1].split("/")[0].split(":")
    return serving, urls[0], host, int(port)


async def _stop_serving(serving: asyncio.Task[None], engine: Any) -> None:
    serving.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await serving
    await engine.aclose()


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


async def run(
    session: ClientSession, code: str, progress: list[str] | None = None
) -> types.CallToolResult:
    async def report(value: float, total: float | None, message: str | None) -> None:
        if progress is not None:
            progress.append(f"{value:g} {message}")

    return await session.call_tool(
        "run_code", {"code": code}, read_timeout_seconds=TIMEOUT, progress_callback=report
    )


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def returned(result: types.CallToolResult) -> Any:
    body = text(result)
    assert "Returned:\n" in body, body
    rest = body.split("Returned:\n", 1)[1]
    try:
        return json.loads(rest.split("\n", 1)[0])
    except json.JSONDecodeError:
        return rest  # a string is shown as itself


# A tools file of one tool, for the tests that speak the protocol by hand.
ADD_TOOLS = "def add(a: int, b: int) -> int:\n    'Add.'\n    return a + b\n\nTOOLS = [add]\n"


def _opening_lines() -> list[str]:
    """The lines a hand-written client opens a session with: initialize, then initialized."""
    return [
        json.dumps(_initialize()),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ]


def _initialize(
    capabilities: dict[str, Any] | None = None, version: str = "2025-06-18"
) -> dict[str, Any]:
    """The initialize request (id 1) of a client written by hand."""
    params = {
        "protocolVersion": version,
        "capabilities": capabilities or {},
        "clientInfo": {"name": "raw", "version": "0"},
    }
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}


def _serve_raw(tmp: Path, *, stderr: int) -> subprocess.Popen[str]:
    """`codemode mcp serve --tools tools.py` run in ``tmp`` for a client written by hand:
    its stdin and stdout are pipes of text."""
    return subprocess.Popen(
        [str(CODEMODE), "mcp", "serve", "--tools", "tools.py"],
        cwd=tmp,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )


@contextlib.contextmanager
def _raw_exchange(tmp: Path, lines: list[str]) -> Iterator[Callable[[], Any]]:
    """`codemode mcp serve` over stdio as a child (see :func:`_serve_raw`), sent ``lines``:
    a function giving the next message it writes (``queue.Empty`` after TIMEOUT); the child
    is ended (its stdin closed, killed if it lingers) on the way out."""
    process = _serve_raw(tmp, stderr=subprocess.DEVNULL)
    assert process.stdin is not None and process.stdout is not None
    read: queue.Queue[str] = queue.Queue()
    out = process.stdout

    def reader() -> None:
        for line in out:
            read.put(line)

    threading.Thread(target=reader, daemon=True).start()
    try:
        process.stdin.write("\n".join(lines) + "\n")
        process.stdin.flush()
        yield lambda: json.loads(read.get(timeout=TIMEOUT))
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


TRANSPORTS = pytest.mark.parametrize("transport", ["stdio", "http"])


@TRANSPORTS
async def test_lists_run_code_over_the_upstream_tools(transport: str, tmp_path: Path) -> None:
    config = _config(tmp_path, "everything", "memory", "filesystem", "lab")
    async with serve(transport, tmp_path, config) as session:
        listed = (await session.list_tools()).tools
        assert [t.name for t in listed] == ["run_code", "continue_script"]
        description = listed[0].description or ""
        assert (
            "everything__get_sum(" in description and "more tools are not declared" in description
        )
        assert listed[0].input_schema["required"] == ["code"]
        # A tool that is not there: the error names the two that are.
        wrong = await session.call_tool("run_script", {"code": "return 1"})
        assert wrong.is_error and "the tools are run_code and continue_script" in text(wrong)
        # Those left out of the description for its budget are found by tool_search.
        result = await run(
            session,
            'const names = ["memory__create_entities", "filesystem__read_text_file", "lab__add"];'
            'return await Promise.all(names.map(async n => (await tools.tool_search({ query: n })).includes(n + "(")));',
        )
        assert returned(result) == [True, True, True], text(result)


@TRANSPORTS
async def test_a_script_chains_calls_across_two_servers(transport: str, tmp_path: Path) -> None:
    config = _config(tmp_path, "everything", "memory")
    progress: list[str] = []
    async with serve(transport, tmp_path, config) as session:
        result = await run(
            session,
            """
            const sum = await tools.everything__get_sum({ a: 20, b: 22 });
            await tools.memory__create_entities({ entities: [
              { name: "answer", entityType: "fact", observations: [String(sum)] } ] });
            const graph = await tools.memory__read_graph({});
            return graph.entities.map(e => [e.name, e.observations[0]]);
            """,
            progress,
        )
        assert not result.is_error, text(result)
        assert returned(result) == [["answer", "The sum of 20 and 22 is 42."]]
        # A progress notification per step and per call: three calls in turn, then the end.
        assert progress == [
            "1 step 1: calls, 1 calls",
            "2 tools.everything__get_sum done",
            "3 step 2: calls, 1 calls",
            "4 tools.memory__create_entities done",
            "5 step 3: calls, 1 calls",
            "6 tools.memory__read_graph done",
            "7 step 4: finished",
        ], progress
    # The memory server really wrote it: the chain reached the second server.
    assert "The sum of 20 and 22 is 42." in (tmp_path / "memory.jsonl").read_text()


@TRANSPORTS
async def test_an_upstream_tool_error_is_caught_by_the_script(
    transport: str, tmp_path: Path
) -> None:
    config = _config(tmp_path, "lab", "filesystem")
    async with serve(transport, tmp_path, config) as session:
        result = await run(
            session,
            """
            const caught = [];
            try { await tools.lab__fail({ reason: "no budget" }); } catch (e) { caught.push(e.message); }
            try { await tools.filesystem__read_text_file({ path: "/etc/passwd" }); } catch (e) { caught.push(e.message); }
            return caught;
            """,
        )
        assert not result.is_error, text(result)
        lab, files = returned(result)
        assert "lab refused: no budget" in lab
        assert "denied" in files.lower() or "outside" in files.lower(), files


@TRANSPORTS
async def test_an_image_reaches_the_client_as_image_content(transport: str, tmp_path: Path) -> None:
    config = _config(tmp_path, "everything")
    async with serve(transport, tmp_path, config) as session:
        result = await run(session, "return await tools.everything__get_tiny_image({});")
        assert not result.is_error, text(result)
        images = [c for c in result.content if isinstance(c, types.ImageContent)]
        assert len(images) == 1 and images[0].mime_type == "image/png"
        import base64

        assert base64.b64decode(images[0].data).startswith(b"\x89PNG")
        assert images[0].data not in text(result)  # named in the text, not spelled out


@TRANSPORTS
async def test_an_approval_answered_through_elicitation(transport: str, tmp_path: Path) -> None:
    config = _config(tmp_path, "lab")
    asked: list[str] = []

    async def elicit(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        allow = "alpha" in params.message
        return types.ElicitResult(action="accept", content={"approve": allow})

    async with serve(transport, tmp_path, config, elicit=elicit) as session:
        result = await run(
            session,
            """
            const a = await tools.lab__wipe({ target: "alpha" });
            let b;
            try { b = await tools.lab__wipe({ target: "beta" }); } catch (e) { b = e.message; }
            return [a, b];
            """,
        )
        assert not result.is_error, text(result)
        a, b = returned(result)
    assert a == {"result": "wiped alpha"}
    assert "refused" in b or "did not allow" in b or "declined" in b, b
    assert len(asked) == 2 and "tools.lab__wipe" in asked[0]
    assert (tmp_path / "wiped-alpha").exists() and not (tmp_path / "wiped-beta").exists()


async def test_an_elicitation_that_fails_says_to_ask_again(tmp_path: Path) -> None:
    """A client that can be asked, whose asking failed (its own error): the paused result
    said the client could not be asked and to restart the server; it says the asking failed
    and that continue_script asks again, which then does."""
    config = _config(tmp_path, "lab")
    tries: list[str] = []

    async def elicit(ctx: Any, params: types.ElicitRequestParams) -> Any:
        tries.append(params.message)
        if len(tries) == 1:
            return types.ErrorData(code=-1, message="the user's window crashed")
        return types.ElicitResult(action="accept", content={"approve": True})

    async with serve("stdio", tmp_path, config, elicit=elicit, data_dir=False) as session:
        paused = await run(session, 'return await tools.lab__wipe({ target: "eps" });')
        body = text(paused)
        assert "asking them through the client failed (the user's window crashed)" in body, body
        assert "its session log in memory" not in body, body
        script_id = body.split("Script id: ", 1)[1].split()[0]
        done = await session.call_tool("continue_script", {"script_id": script_id})
        assert returned(done) == {"result": "wiped eps"}, text(done)
    assert len(tries) == 2


@TRANSPORTS
async def test_an_approval_answered_through_a_paused_result(transport: str, tmp_path: Path) -> None:
    """The paused result's `codemode approve` command, run as printed from another directory,
    reaches the server's log (given as a relative --data-dir), and continue_script goes on."""
    config = _config(tmp_path, "lab")
    async with serve(transport, tmp_path, config) as session:  # this client has no elicitation
        paused = await run(session, 'return await tools.lab__wipe({ target: "gamma" });')
        body = text(paused)
        assert "Script paused." in body and "codemode approve" in body, body
        script_id = body.split("Script id: ", 1)[1].split()[0]
        command = "codemode approve " + body.split("`codemode approve ", 1)[1].split("`", 1)[0]
        argv = shlex.split(command)
        assert argv[2] == script_id
        assert argv[4:] == ["--data-dir", str(tmp_path / "data")]
        assert not (tmp_path / "wiped-gamma").exists()
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        _cli(*argv[1:], cwd=elsewhere)
        done = await session.call_tool("continue_script", {"script_id": script_id})
        assert returned(done) == {"result": "wiped gamma"}
    assert (tmp_path / "wiped-gamma").exists()


@pytest.mark.parametrize("elicitation", [True, False])
async def test_a_paused_result_on_a_log_in_memory_says_no_one_can_approve(
    elicitation: bool, tmp_path: Path
) -> None:
    """Without a data dir no other process can reach the log: the result says so and what to
    do, and prints no `codemode approve` command that could only fail."""
    config = _config(tmp_path, "lab")
    extra = [] if elicitation else ["--no-elicitation"]
    async with serve("stdio", tmp_path, config, *extra, data_dir=False) as session:
        paused = await run(session, 'return await tools.lab__wipe({ target: "delta" });')
        body = text(paused)
    assert "Script paused." in body, body
    assert "its session log in memory" in body and "with `--data-dir DIR`" in body, body
    assert "codemode approve SCRIPT_ID CALL_ID --data-dir DIR" in body
    assert ("without --no-elicitation" in body) is not elicitation
    assert not (tmp_path / "wiped-delta").exists()


@TRANSPORTS
async def test_list_changed_mid_session(transport: str, tmp_path: Path) -> None:
    config = _config(tmp_path, "lab", "everything")
    async with serve(transport, tmp_path, config) as session:
        before = (await session.list_tools()).tools[0].description
        assert "lab__extra" not in (before or "")
        grown = await run(session, "return await tools.lab__grow({});")
        assert returned(grown) == {"result": "grown"}
        # At once, in the next script: found by tool_search, declared to the type check.
        result = await run(
            session,
            """
            const found = await tools.tool_search({ query: "lab__extra" });
            return [found.includes("lab__extra("), await tools.lab__extra({ word: "hi" })];
            """,
        )
        assert not result.is_error, text(result)
        assert returned(result) == [True, {"result": "HI!"}]
        after = (await session.list_tools()).tools[0].description
        assert after == before  # byte-identical: the new tool is deferred


async def _declared_around(transport: str, tmp_path: Path, tool: str) -> tuple[str, str]:
    """The served run_code's description before and after a script calls the lab's
    ``tool``, which changes the lab's tools: after, once the client was told they changed."""
    config = _config(tmp_path, "lab")
    changed = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async with serve(transport, tmp_path, config, on_message=on_message) as session:
        before = (await session.list_tools()).tools[0].description or ""
        done = await run(session, f"return await tools.lab__{tool}({{}});")
        assert returned(done) == {"result": f"{tool}d"}, text(done)
        async with asyncio.timeout(TIMEOUT):
            await changed.wait()
        return before, (await session.list_tools()).tools[0].description or ""


@TRANSPORTS
async def test_a_changed_declaration_is_announced_to_the_client(
    transport: str, tmp_path: Path
) -> None:
    before, after = await _declared_around(transport, tmp_path, "reshape")
    assert "Add two whole numbers." in before
    assert "Add two whole numbers (reshaped)." in after
    assert after.replace(" (reshaped)", "") == before  # only that declaration changed


@TRANSPORTS
async def test_a_changed_result_type_is_declared_and_announced(
    transport: str, tmp_path: Path
) -> None:
    """A tool whose output schema alone changed (its input and description as they were) is
    declared again with its new result, and the client told."""
    before, after = await _declared_around(transport, tmp_path, "retype")
    assert "Promise<Lab__add_AddOutput>" in before and "Promise<Lab__add_AddOutput>" in after
    assert "type Lab__add_AddOutput = { result: number };" in before
    # Only that declaration changed.
    assert after.replace("result: string };", "result: number };", 1) == before


@TRANSPORTS
async def test_an_upstream_killed_mid_call(transport: str, tmp_path: Path) -> None:
    config = _config(tmp_path, "lab")
    async with serve(transport, tmp_path, config) as session:
        call = asyncio.create_task(
            run(session, "try { await tools.lab__hang({}); } catch (e) { return e.message; }")
        )
        pid_file = tmp_path / "hang.pid"
        async with asyncio.timeout(TIMEOUT):
            while not pid_file.exists():  # the call is in flight once the server wrote this
                await asyncio.sleep(0.05)
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        async with asyncio.timeout(TIMEOUT):
            result = await call
        message = returned(result)
        assert "'lab'" in message and "closed its connection" in message, message
        # The server was restarted: the next call reaches it.
        async with asyncio.timeout(TIMEOUT):
            again = await run(session, "return await tools.lab__add({ a: 1, b: 2 });")
        assert returned(again) == {"result": 3}


@TRANSPORTS
async def test_a_paused_script_resumes_after_a_restart(transport: str, tmp_path: Path) -> None:
    config = _config(tmp_path, "lab", "everything")
    code = """
      const sum = await tools.everything__get_sum({ a: 1, b: 1 });
      const wiped = await tools.lab__wipe({ target: "delta" });
      return [sum, wiped];
    """
    async with serve(transport, tmp_path, config) as session:
        body = text(await run(session, code))
        assert "Script paused." in body, body
        script_id = body.split("Script id: ", 1)[1].split()[0]
        call_id = body.split(f"codemode approve {script_id} ", 1)[1].split()[0]
    _cli("approve", script_id, call_id, "--data-dir", str(tmp_path / "data"))
    async with serve(transport, tmp_path, config) as session:  # a new server process
        done = await session.call_tool("continue_script", {"script_id": script_id})
        assert returned(done) == ["The sum of 1 and 1 is 2.", {"result": "wiped delta"}]


def _cli(*args: str, cwd: Path | None = None) -> str:
    out = subprocess.run(
        [str(CODEMODE), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        cwd=cwd,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


async def test_bad_configuration_names_the_server_and_the_others_serve(tmp_path: Path) -> None:
    config = _config(tmp_path, "lab")
    data = json.loads(config.read_text())
    data["mcpServers"]["missing"] = {"command": "no-such-command-for-codemode"}
    data["mcpServers"]["silent"] = {"command": "sleep", "args": ["600"], "initTimeout": 1}
    data["mcpServers"]["typo"] = {"comand": "x"}
    config.write_text(json.dumps(data))
    params = StdioServerParameters(
        command=str(CODEMODE),
        args=[
            *_args(tmp_path, config, []),
            "--server",
            "lab",
            "--server",
            "missing",
            "--server",
            "silent",
            "--server",
            "typo",
            "--server",
            "nosuch",
        ],
        cwd=str(tmp_path),
    )
    errlog = (tmp_path / "stderr.txt").open("w+")
    async with (
        stdio_client(params, errlog=errlog) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        result = await run(session, "return await tools.lab__add({ a: 2, b: 2 });")
        assert returned(result) == {"result": 4}
    errlog.seek(0)
    stderr = errlog.read().splitlines()
    # Each said once: not also by the library's warning of the same problem.
    assert len([line for line in stderr if "MCP server 'missing'" in line]) == 1, stderr
    lines = [line for line in stderr if line.startswith("codemode: MCP server")]
    by_server = {line.split("'")[1]: line for line in lines}
    assert set(by_server) == {"missing", "silent", "typo", "nosuch"}, lines
    assert "no such command" in by_server["missing"]
    assert "did not answer initialize within 1 s" in by_server["silent"]
    assert "comand" in by_server["typo"]
    assert "no server of that name" in by_server["nosuch"]


async def test_arguments_the_tools_do_not_take_are_refused_by_name(tmp_path: Path) -> None:
    """An argument run_code does not take is refused, not ignored: a model that passed a
    timeout expects it to have acted. An empty script is still a script (given with another
    argument, it is not said to be empty); an empty script id is said to be empty."""
    async with serve("stdio", tmp_path, _config(tmp_path, "lab")) as session:
        extra = await session.call_tool("run_code", {"code": "return 1", "timeout": 5})
        assert extra.is_error, text(extra)
        assert text(extra) == 'run_code takes only {"code": "<the script>"}; leave out \'timeout\''
        number = await session.call_tool("run_code", {"code": 5})
        assert text(number) == (
            'run_code takes only {"code": "<the script>"}; code must be a string, not an integer'
        )
        missing = await session.call_tool("run_code", {"script": "return 1"})
        assert missing.is_error and "leave out 'script'" in text(missing)
        assert not (await session.call_tool("run_code", {"code": ""})).is_error
        extra = await session.call_tool("run_code", {"code": "", "timeout": 5})
        # Not "code is empty": an empty script is one.
        assert text(extra) == 'run_code takes only {"code": "<the script>"}; leave out \'timeout\''
        again = await session.call_tool("continue_script", {"script_id": "x", "approve": True})
        assert again.is_error, text(again)
        assert 'takes only {"script_id": "<id>"}; leave out \'approve\'' in text(again)
        empty = await session.call_tool("continue_script", {"script_id": ""})
        assert text(empty) == 'continue_script takes only {"script_id": "<id>"}; script_id is empty'


def test_bad_json_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "mcp.json"
    bad.write_text('{"mcpServers": {"x": ')
    out = subprocess.run(
        [str(CODEMODE), "mcp", "serve", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "is not JSON" in out.stderr, out.stderr


async def test_servers_from_codemode_toml_and_upstream_flags(tmp_path: Path) -> None:
    (tmp_path / "codemode.toml").write_text(
        f"""
[codemode]
data_dir = "data"

[codemode.mcpServers.lab]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(LAB))}, {json.dumps(str(tmp_path))}]
"""
    )
    upstream = f"twin={sys.executable} {LAB} {tmp_path}"
    params = StdioServerParameters(
        command=str(CODEMODE),
        args=["mcp", "serve", "--config", "codemode.toml", "--upstream", upstream],
        cwd=str(tmp_path),
    )
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        result = await run(
            session,
            "return [await tools.lab__add({ a: 1, b: 1 }), await tools.twin__add({ a: 2, b: 2 })];",
        )
        assert returned(result) == [{"result": 2}, {"result": 4}], text(result)
    assert (tmp_path / "data").is_dir()  # the toml's data_dir holds the session log


def test_a_request_with_a_lone_surrogate_is_answered(tmp_path: Path) -> None:
    """A client's JSON with a lone surrogate escaped in a string (json.dumps and
    JSON.stringify write one) gets an answer, the surrogate read as U+FFFD: the SDK's parser
    refused the line and the request was never answered."""
    (tmp_path / "tools.py").write_text(ADD_TOOLS)

    def request(n: int, method: str, params: dict[str, object]) -> str:
        return json.dumps({"jsonrpc": "2.0", "id": n, "method": method, "params": params})

    lines = [
        *_opening_lines(),
        request(2, "tools/call", {"name": "run_code", "arguments": {"code": "return 'caf\udce9'"}}),
        request(3, "tools/call", {"name": "run_code", "arguments": {"code": "return 1 + 2"}}),
    ]
    assert "\\udce9" in lines[2]  # as json.dumps writes it
    with _raw_exchange(tmp_path, lines) as next_message:
        answers: dict[int, Any] = {}
        while len(answers) < 3:
            message = next_message()  # the line never answered: Empty
            if "id" in message:
                answers[message["id"]] = message
        texts = [answers[n]["result"]["content"][0]["text"] for n in (2, 3)]
        assert texts == ["Script finished.\nReturned:\ncaf\ufffd", "Script finished.\nReturned:\n3"]


async def test_a_client_of_url_elicitation_alone_is_sent_no_form(tmp_path: Path) -> None:
    """A client that declares elicitation in URL mode alone was sent a form, which MCP
    forbids; it refused it, and the result said to call continue_script to ask again, which
    asked again, for ever. Its result says how a person approves the call instead."""
    (tmp_path / "tools.py").write_text(
        "from engine import tool\n\n"
        "@tool(needs_approval=True)\n"
        "def wipe(target: str) -> str:\n    'Wipe.'\n    return 'wiped ' + target\n\n"
        "TOOLS = [wipe]\n"
    )
    process = await asyncio.create_subprocess_exec(
        str(CODEMODE),
        *("mcp", "serve", "--tools", "tools.py", "--data-dir", "data"),
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdin is not None and process.stdout is not None

    def send(message: dict[str, Any]) -> None:
        assert process.stdin is not None
        process.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")

    asked: list[str] = []
    try:
        send(_initialize({"elicitation": {"url": {}}}, "2025-11-25"))
        send({"method": "notifications/initialized"})
        code = "return await tools.wipe({ target: 'a' });"
        send(
            {
                "id": 2,
                "method": "tools/call",
                "params": {"name": "run_code", "arguments": {"code": code}},
            }
        )
        async with asyncio.timeout(TIMEOUT):
            while True:
                message = json.loads(await process.stdout.readline())
                if "method" in message and "id" in message:  # a request of the server's
                    asked.append(message["method"])
                    send({"id": message["id"], "error": {"code": -32602, "message": "no form"}})
                elif message.get("id") == 2:
                    break
    finally:
        process.stdin.close()
        async with asyncio.timeout(TIMEOUT):
            await process.wait()
    assert asked == []
    body = message["result"]["content"][0]["text"]
    assert body.startswith("Script paused."), body
    assert "`codemode approve " in body and "--data-dir " in body, body


def test_what_a_tools_file_prints_as_it_is_imported_goes_to_stderr(tmp_path: Path) -> None:
    """Over stdio, stdout is the client's: a tools file that printed as it was imported
    wrote a line there that is no MCP message, the first the client read."""
    (tmp_path / "tools.py").write_text(
        "import sys\n"
        "print('loading my tools')\n"
        "sys.stdout.write('and more\\n')\n\n"
        "def add(a: int, b: int) -> int:\n    'Add.'\n    return a + b\n\n"
        "TOOLS = [add]\n"
    )
    process = _serve_raw(tmp_path, stderr=subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(json.dumps(_initialize()) + "\n")
        process.stdin.flush()
        first = process.stdout.readline()  # the answer to initialize, once it serves
    finally:
        _, stderr = process.communicate(timeout=TIMEOUT)  # closes stdin: the server ends
    assert json.loads(first)["id"] == 1, first
    assert "loading my tools\nand more\n" in stderr, stderr


async def test_an_upstream_that_ignores_its_end_is_ended_when_the_client_leaves(
    tmp_path: Path,
) -> None:
    """The SDK's client closes `mcp serve`'s stdin, sends SIGTERM 2 s later and SIGKILL 2 s
    after that. An upstream server that ignores its stdin's end and SIGTERM took longer to
    end than that, so `mcp serve` was killed first and the server outlived it for good."""
    import psutil

    raw = Path(__file__).parent / "raw_server.py"
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"name": "echo", "inputSchema": {"type": "object"}}]))
    upstream = shlex.join(["stub=" + sys.executable, str(raw), str(tools), "--stubborn"])

    def stubs() -> list[psutil.Process]:
        found = []
        for p in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if p.cmdline()[-2:] == [str(tools), "--stubborn"]:  # not mcp serve itself
                    found.append(p)
        return found

    params = StdioServerParameters(
        command=str(CODEMODE), args=["mcp", "serve", "--upstream", upstream], cwd=str(tmp_path)
    )
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        listed = await session.list_tools()
        assert "run_code" in [t.name for t in listed.tools]
        assert len(stubs()) == 1
    left = stubs()
    _gone, alive = psutil.wait_procs(left, timeout=10)
    assert not alive, [p.cmdline() for p in alive]


async def _asgi(
    app: Any,
    method: str,
    body: dict[str, Any] | None,
    session: str | None = None,
    *,
    answering: Any = None,
) -> list[dict[str, Any]]:
    """The ASGI messages ``app`` sends for one HTTP request, served in this process as uvicorn
    serves it; ``answering`` is awaited while the answer's last part is being sent."""
    data = json.dumps(body).encode() if body is not None else b""
    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"accept", b"application/json, text/event-stream"),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(data)).encode()),
    ]
    if session is not None:
        headers += [(b"mcp-session-id", session.encode()), (b"mcp-protocol-version", b"2025-06-18")]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
    }
    parts = [{"type": "http.request", "body": data, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if parts:
            return parts.pop()
        await asyncio.Event().wait()  # the client stays until the answer ends
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        ended = message["type"] == "http.response.body" and not message.get("more_body")
        if ended and answering is not None:
            await answering()

    await app(scope, receive, send)
    return sent


@contextlib.asynccontextmanager
async def _lifespan(app: Any) -> AsyncIterator[None]:
    """``app`` started and, on the way out, stopped, as uvicorn does (ASGI's lifespan)."""
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    running = asyncio.ensure_future(app({"type": "lifespan"}, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    assert (await outbox.get())["type"] == "lifespan.startup.complete"
    try:
        yield
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        assert (await outbox.get())["type"] == "lifespan.shutdown.complete"
        await running


@contextlib.asynccontextmanager
async def _http_session(
    *tools: Any,
) -> AsyncIterator[tuple[Any, str, list[dict[str, Any]]]]:
    """An engine with ``tools`` and ``add`` served over HTTP in this process (:func:`_asgi`),
    and a session opened on it: the app, the session's id, and what the SDK sent for the
    session's ``notifications/initialized``."""
    from engine import CodeMode
    from engine.mcp._serve import CodeModeServer
    from tests.engine.conftest import InProcessRunner

    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    engine = CodeMode([add, *tools], runner=InProcessRunner())
    app = CodeModeServer(engine).http_app("127.0.0.1")
    try:
        async with _lifespan(app):
            opened = await _asgi(app, "POST", _initialize())
            session = dict(opened[0]["headers"])[b"mcp-session-id"].decode()
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            yield app, session, await _asgi(app, "POST", initialized, session)
    finally:
        await engine.aclose()


async def test_a_notification_that_comes_as_its_session_ends_is_answered_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A client that leaves mid-request sends notifications/cancelled beside the DELETE that
    ends its session. The SDK answers the notification 202, then finds its session ended and
    answered again, which uvicorn refused: two tracebacks of the SDK's code on stderr at
    such a client's leaving. The message is dropped, answered once, and nothing is logged as
    an error."""
    async with _http_session() as (app, session, _noted):
        deleted: list[dict[str, Any]] = []

        async def leave() -> None:
            deleted.extend(await _asgi(app, "DELETE", None, session))

        cancelled = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": 2, "reason": "the client left"},
        }
        with caplog.at_level(logging.INFO):
            sent = await _asgi(app, "POST", cancelled, session, answering=leave)
    assert deleted[0]["status"] == 200
    starts = [m["status"] for m in sent if m["type"] == "http.response.start"]
    assert starts == [202]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert "a message came for an MCP session that had ended" in caplog.text


async def test_a_request_whose_id_is_none_is_refused_over_http() -> None:
    """A request whose id is null, true or an object (a client's bug) is, to the SDK, a
    notification: it answered 202, nobody answered the request, whose client waited until
    its own timeout, and the message went on to the session (a ``notifications/cancelled``
    so cancelled a running call). It is answered 400 with the JSON-RPC error the stdio
    server sends, and not handed on; a real notification is still answered 202, and the
    session goes on."""
    go = asyncio.Event()
    began = asyncio.Event()

    async def wait() -> str:
        """Wait for the test."""
        began.set()
        await go.wait()
        return "waited"

    async with _http_session(wait) as (app, session, noted):
        refused = [
            await _asgi(app, "POST", {"jsonrpc": "2.0", "id": ident, "method": "ping"}, session)
            for ident in (None, True, {"a": 1})
        ]
        arguments = {"name": "run_code", "arguments": {"code": "return await tools.wait()"}}
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": arguments}
        running = asyncio.ensure_future(_asgi(app, "POST", call, session))
        await asyncio.wait_for(began.wait(), TIMEOUT)
        cancel = {"requestId": 2, "reason": "a client's bug"}
        cancelling = {"jsonrpc": "2.0", "id": None, "method": "notifications/cancelled"}
        refused.append(await _asgi(app, "POST", {**cancelling, "params": cancel}, session))
        # Answered after the session took any message before it (a cancel, handed on).
        pinged = await _asgi(app, "POST", {"jsonrpc": "2.0", "id": 7, "method": "ping"}, session)
        go.set()
        answered = await asyncio.wait_for(running, TIMEOUT)
    assert noted[0]["status"] == 202
    for sent in refused:
        assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [400]
        body = json.loads(b"".join(m.get("body", b"") for m in sent))
        assert body["id"] is None and body["error"]["code"] == -32600, body
        assert body["error"]["message"].startswith(
            "Invalid Request: id: Input should be a valid integer or a valid string"
        ), body
    assert pinged[0]["status"] == 200
    said = b"".join(m.get("body", b"") for m in answered)
    assert b"waited" in said and b"cancelled" not in said, said


_GATED = (
    "from engine import tool\n\n"
    "@tool(needs_approval=True)\n"
    "async def gated(word: str) -> str:\n    'Shout a word.'\n    return word.upper()\n\n"
    "TOOLS = [gated]\n"
)


@pytest.mark.parametrize("elicitation", [False, True])
async def test_a_script_a_worker_drives_after_its_approval_is_waited_for(
    elicitation: bool, tmp_path: Path
) -> None:
    """Approved elsewhere, the script is driven on by another host on the log (a worker)
    when continue_script (or the resume after the client's approval) comes: the request
    waits for that host's outcome, saying so as progress, and answers it (it answered at
    once 'Script is running on another host ... its result is in the session log', which
    the model cannot read)."""
    from engine import CodeMode, tool
    from tests.engine.conftest import InProcessRunner

    (tmp_path / "tools.py").write_text(_GATED)
    running, gate, waited = asyncio.Event(), asyncio.Event(), asyncio.Event()

    @tool(needs_approval=True)
    async def gated(word: str) -> str:
        """Shout a word."""
        running.set()
        await gate.wait()
        return word.upper()

    worker = CodeMode([gated], runner=InProcessRunner(), data_dir=tmp_path / "data")
    driving: list[asyncio.Task[Any]] = []

    async def hand_over() -> str:
        """Approve the paused script's call and have the worker take it, inside the call."""
        (paused,) = await worker.store.scripts(status="paused")
        (call,) = await worker.store.calls(paused.id)
        await worker.approve(paused.id, call.call_id)
        driving.append(asyncio.create_task(worker.resume(paused.id)))
        await running.wait()
        return paused.id

    async def elicit(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        await hand_over()
        return types.ElicitResult(action="accept", content={"approve": True})

    async def report(value: float, total: float | None, message: str | None) -> None:
        if "another host" in (message or ""):
            waited.set()

    params = StdioServerParameters(
        command=str(CODEMODE),
        args=["mcp", "serve", "--tools", "tools.py", "--data-dir", "data"],
        cwd=str(tmp_path),
    )
    kwargs: dict[str, Any] = {"elicitation_callback": elicit} if elicitation else {}
    code = "return await tools.gated({ word: 'hi' });"
    try:
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write, **kwargs) as session,
        ):
            await session.initialize()
            if elicitation:
                request = session.call_tool("run_code", {"code": code}, progress_callback=report)
            else:
                paused = await session.call_tool("run_code", {"code": code})
                assert "Script paused." in text(paused), text(paused)
                script_id = await hand_over()
                request = session.call_tool(
                    "continue_script", {"script_id": script_id}, progress_callback=report
                )
            answer = asyncio.create_task(request)
            async with asyncio.timeout(TIMEOUT):
                await asyncio.wait(
                    {answer, asyncio.create_task(waited.wait())},
                    return_when=asyncio.FIRST_COMPLETED,
                )
            gate.set()  # the worker's call returns, and the script ends there
            async with asyncio.timeout(TIMEOUT):
                done = await answer
            assert (await driving[0]).status == "finished"
    finally:
        gate.set()
        await worker.aclose()
    assert text(done) == "Script finished.\nReturned:\nHI", text(done)
    assert waited.is_set()


async def test_a_script_still_driven_elsewhere_says_to_continue_it(tmp_path: Path) -> None:
    """Past the wait, the answer for a script another host drives says how the model gets its
    result (it said the result is in the session log, which the model cannot read, and to
    resume, a call this server has not)."""
    from engine import CodeMode, tool
    from engine.mcp._serve import CodeModeServer
    from tests.engine.conftest import InProcessRunner

    running, gate = asyncio.Event(), asyncio.Event()

    @tool
    async def gated(word: str) -> str:
        """Shout a word."""
        running.set()
        await gate.wait()
        return word.upper()

    worker = CodeMode([gated], runner=InProcessRunner(), data_dir=tmp_path)
    here = CodeMode([gated], runner=InProcessRunner(), data_dir=tmp_path)
    ids: list[str] = []
    driving = asyncio.create_task(
        worker.run_code("return await tools.gated({ word: 'hi' });", on_start=ids.append)
    )
    try:
        await running.wait()
        elsewhere = await here.resume(ids[0])
        answer = CodeModeServer(here).content_of(elsewhere)
    finally:
        gate.set()
        await driving
        await here.aclose()
        await worker.aclose()
    body = answer["content"][0]["text"]
    assert elsewhere.status == "elsewhere"
    assert body.startswith("Script is running on another host"), body
    assert body.endswith(
        f"\nScript id: {ids[0]}\nCall continue_script with this script id for its result."
    ), body


async def test_a_held_script_says_a_person_releases_it(tmp_path: Path) -> None:
    """A script a person held answers continue_script with the `codemode release` that ends
    the hold (it said to call continue_script to go on, which answered the hold again, for
    as long as the model kept calling it)."""
    (tmp_path / "tools.py").write_text(_GATED)
    params = StdioServerParameters(
        command=str(CODEMODE),
        args=["mcp", "serve", "--tools", "tools.py", "--data-dir", "data"],
        cwd=str(tmp_path),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        code = "return await tools.gated({ word: 'hi' });"
        paused = text(await session.call_tool("run_code", {"code": code}))
        script_id = paused.split("Script id: ", 1)[1].split()[0]
        _cli("hold", script_id, "--data-dir", str(tmp_path / "data"))
        held = text(await session.call_tool("continue_script", {"script_id": script_id}))
        assert held.endswith(
            f"\nScript id: {script_id}\nIt is held: no step of it runs until a person releases "
            f"it, outside this conversation: `codemode release {script_id} --data-dir "
            f"{tmp_path / 'data'}`. Once they have, call continue_script with this script id to "
            "go on."
        ), held
        _cli("release", script_id, "--data-dir", str(tmp_path / "data"))
        again = text(await session.call_tool("continue_script", {"script_id": script_id}))
        assert "It is held" not in again and "`codemode approve " in again, again


async def test_a_hold_that_lands_after_a_pause_for_approval_says_one_thing(
    tmp_path: Path,
) -> None:
    """A person holds the script just as it pauses for an approval (before its answer is
    sent): the answer is the pause's, which says to approve the call, not that and the hold
    too (the server read the script again for the hold, and told the model both)."""
    from mcp import Client

    from engine import CodeMode, tool
    from engine.mcp._serve import CodeModeServer
    from tests.engine.conftest import InProcessRunner

    @tool(needs_approval=True)
    async def gated(word: str) -> str:
        """Shout a word."""
        return word.upper()

    data = tmp_path / "data"
    engine = CodeMode([gated], runner=InProcessRunner(), data_dir=data)
    held: list[str] = []

    def hold_at_pause(event: Any) -> None:
        # In the loop that drives the script, so the hold is in the log before the pause's
        # result reaches the server's answer.
        if event.kind == "paused" and not held:
            _cli("hold", event.script_id, "--data-dir", str(data))
            held.append(event.script_id)

    engine.add_listener(hold_at_pause)
    server = CodeModeServer(engine, log_flags=f"--data-dir {data}")
    try:
        async with Client(server.server()) as client:
            code = "return await tools.gated({ word: 'hi' });"
            body = text(await client.call_tool("run_code", {"code": code}))
            assert held, "the script never paused"
            assert (await engine.store.get_script(held[0])).held
            assert "It is held" not in body, body
            assert f"`codemode approve {held[0]} " in body, body
            # Paused on its hold, it says so, and to release it.
            again = text(await client.call_tool("continue_script", {"script_id": held[0]}))
            assert "It is held" in again and f"`codemode release {held[0]} " in again, again
            assert "`codemode approve " not in again, again
    finally:
        await engine.aclose()


async def test_an_http_client_that_sends_no_whole_request_is_cut_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """uvicorn waits for a connection's first request for ever, and for the rest of one whose
    first byte came: a client that connected and said nothing, or half a request head, held
    its connection (and a descriptor) for good; so did one that sent part of a body. Each is
    closed once REQUEST_WAIT has passed, while a request the server takes longer than that to
    answer is answered. The one cut off mid-body is a line of the log, not the SDK's error
    and traceback."""
    from engine import CodeMode, tool
    from engine.mcp import _serve
    from tests.engine.conftest import InProcessRunner

    monkeypatch.setattr(_serve, "REQUEST_WAIT", 0.5)
    caplog.set_level(logging.INFO)
    where: list[tuple[str, int]] = []

    async def cut_off(head: bytes) -> None:
        """Connect, send ``head`` (a part of a request), and wait for the server to close."""
        reader, writer = await asyncio.open_connection(*where[0])
        writer.write(head)
        await writer.drain()
        try:
            async with asyncio.timeout(TIMEOUT):
                assert await reader.read() == b""  # no answer: the connection ends
        finally:
            writer.close()

    @tool
    async def slow(word: str) -> str:
        """Answers once a silent client opened after this call began has been cut off (so
        later than the wait for this call's own request)."""
        await cut_off(b"")
        return word

    engine = CodeMode([slow], runner=InProcessRunner(), type_check="off")
    serving, url, host, port = await _http_served(engine)
    try:
        where.append((host, int(port)))
        await cut_off(b"")
        await cut_off(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        head = (
            f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{"
        )
        await cut_off(head.encode())  # a body that never comes whole
        async with (
            streamable_http_client(url) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            answer = await run(session, "return await tools.slow({ word: 'late' });")
            assert returned(answer) == "late", text(answer)
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
        assert "an HTTP client left before its request was whole" in caplog.text
    finally:
        await _stop_serving(serving, engine)


def test_a_malformed_line_over_stdio_is_answered_with_what_is_wrong(tmp_path: Path) -> None:
    """The SDK drops a line that is no JSON, or no request of the right shape, at debug
    level, and takes a request whose id is none (null, true, an object) as a notification:
    none was answered, and the client waited until its own timeout, told nothing. Each now
    gets a JSON-RPC error saying what is wrong (with the request's id when it has one), a
    notification or response of the wrong shape still none, and the session goes on."""
    (tmp_path / "tools.py").write_text(ADD_TOOLS)
    lines = [
        *_opening_lines(),
        "this is not json",
        '{"jsonrpc": "2.0", "id": 2, "method": "tools/list"',
        "[1, 2]",
        json.dumps({"jsonrpc": "2.0", "id": 3, "method": 7}),
        json.dumps({"jsonrpc": "2.0", "id": "four", "method": "tools/list", "params": [1]}),
        json.dumps({"id": 5, "method": "ping"}),
        json.dumps({"jsonrpc": "2.0", "id": None, "method": "ping"}),
        json.dumps({"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}),
        json.dumps({"jsonrpc": "2.0", "method": 7}),  # a notification: nothing to answer
        "",
        _nested_call(300, 10),
        json.dumps({"jsonrpc": "2.0", "id": 9, "method": "ping"}),
    ]
    with _raw_exchange(tmp_path, lines) as next_message:
        answers = []
        while True:
            message = next_message()
            if message.get("id") == 9:
                assert message["result"] == {}, message
                break
            if message.get("id") != 1:  # initialize's answer
                answers.append(message)
    shape = '; a request is {"jsonrpc": "2.0", "id": a string or an integer'
    expected = [
        (None, -32700, "Parse error: the line is not JSON (expected ident at line 1 column 2)"),
        (None, -32700, "Parse error: the line is not JSON (EOF while parsing an object"),
        (None, -32600, "Invalid Request: a message is one JSON object, not a list (a batch"),
        (3, -32600, "Invalid Request: method: Input should be a valid string" + shape),
        ("four", -32600, "Invalid Request: params: Input should be a valid dictionary" + shape),
        (5, -32600, "Invalid Request: jsonrpc: Field required" + shape),
        (None, -32600, "Invalid Request: id: Input should be a valid integer or a valid string"),
        (None, -32600, "Invalid Request: id: Input should be a valid integer or a valid string"),
        (10, -32700, "Parse error: the request nests deeper than this server reads (a message "),
    ]
    assert len(answers) == len(expected), answers
    for answer, (ident, code, start) in zip(answers, expected, strict=True):
        assert answer["id"] == ident and answer["error"]["code"] == code, answer
        assert answer["error"]["message"].startswith(start), answer


def _nested_call(depth: int, ident: int | str) -> str:
    """A tools/call request whose JSON nests ``depth`` objects deep in all."""
    nested: dict[str, Any] = {}
    for _ in range(depth - 4):  # the message, its params, their arguments, the innermost
        nested = {"a": nested}
    arguments = {"code": "return 1;", "n": nested}
    params = {"name": "run_code", "arguments": arguments}
    return json.dumps({"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params})


def test_a_request_nested_past_the_parser_is_answered_with_its_id_and_the_bound() -> None:
    """A valid request merely nested deeper than the SDK's parser takes was answered as
    "not JSON" with id null, so its client still waited out its own timeout. It is answered
    with its id, an integer or a string, whether it comes first or last, saying how deep a
    message may nest: as deep as MAX_NESTING says, and no deeper."""
    from engine.mcp._serve import MAX_NESTING, _unanswered

    types.jsonrpc_message_adapter.validate_json(_nested_call(MAX_NESTING, 4), by_name=False)
    for ident in (4, "req-7", 'a "quoted" \u00e9 id'):
        refused = _unanswered(_nested_call(MAX_NESTING + 1, ident))
        assert refused is not None and refused.id == ident, refused
        assert f"may nest {MAX_NESTING} objects and arrays deep" in refused.error.message
        last = json.loads(_nested_call(MAX_NESTING, 0))
        del last["id"]
        last["params"]["arguments"] = {"n": [last["params"]["arguments"]]}
        tail = f', "id": {json.dumps(ident)}}}'  # the id last, as TypeScript writes it
        refused = _unanswered(json.dumps(last)[:-1] + tail)
        assert refused is not None and refused.id == ident, refused


@pytest.mark.parametrize("sent", ["nothing", "part of a body", "part of a body answered early"])
async def test_http_clients_past_the_room_cannot_lock_out_one_that_asks(
    sent: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Past the open-file limit, accepting failed with "too many open files", which asyncio
    logged and tried again at once (a million lines in 20 s), and no client was served:
    1,100 silent connections to a server of ulimit -n 1,024 locked out every client. Past
    its room (half the limit; 4 here), the server closes the connections that have waited
    longest for a request, so a client that asks is served, and says so in a warning.
    Past its room, the server also closed only connections that had sent no whole request
    head: four that sent a head and one byte of body filled a room of four, and every
    newcomer was the one closed. Those waiting on their client mid-request are closed too,
    longest waiting first, also when the server answered before reading the body (a 404 for
    another path, as a 406 or a host check's refusal do): they were kept, and the newcomer
    closed again."""
    from engine import CodeMode, tool
    from engine.mcp import _serve
    from tests.engine.conftest import InProcessRunner

    monkeypatch.setattr(_serve, "connection_room", lambda: 4)
    monkeypatch.setattr(_serve, "REQUEST_WAIT", 600.0)  # only the room closes one here
    caplog.set_level(logging.INFO)

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    engine = CodeMode([add], runner=InProcessRunner(), type_check="off")
    serving, url, host, port = await _http_served(engine)
    waiting = []
    try:
        path = "/elsewhere" if sent.endswith("answered early") else "/mcp"
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{"
        ).encode()
        for _ in range(4):
            reader, writer = await asyncio.open_connection(host, port)
            if sent != "nothing":
                writer.write(head)
                await writer.drain()
            if path != "/mcp":
                async with asyncio.timeout(TIMEOUT):  # answered without its body being read
                    answer = await reader.readuntil(b"\r\n\r\n")
                    assert answer.startswith(b"HTTP/1.1 404"), answer
                    length = re.search(rb"content-length: (\d+)", answer, re.IGNORECASE)
                    assert length is not None, answer
                    await reader.readexactly(int(length.group(1)))
            waiting.append((reader, writer))
        async with (
            streamable_http_client(url) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            answer = await run(session, "return await tools.add({ a: 2, b: 3 });")
            assert returned(answer) == 5, text(answer)
        async with asyncio.timeout(TIMEOUT):
            assert await waiting[0][0].read() == b""  # the longest waiting: closed
    finally:
        for _, writer in waiting:
            writer.close()
        await _stop_serving(serving, engine)
    crowded = [r for r in caplog.records if "the most this server holds" in r.getMessage()]
    assert crowded and all(r.levelno == logging.WARNING for r in crowded), caplog.text


async def test_a_uvicorn_without_what_the_http_server_builds_on_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The HTTP server's waits and room build on parts of uvicorn's h11 protocol that are
    not its API (on_response_complete; a connection's conn, connections, loop), and uvicorn
    is not pinned: a uvicorn without them is refused at the start, naming its version."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from engine import CodeMode
    from engine._errors import ConfigError
    from engine.mcp import _serve
    from tests.engine.conftest import InProcessRunner

    engine = CodeMode([], runner=InProcessRunner(), type_check="off")
    server = _serve.CodeModeServer(engine)
    built = H11Protocol.__init__

    def without_loop(self: Any, *args: Any, **kwargs: Any) -> None:
        built(self, *args, **kwargs)
        del self.loop

    try:
        with monkeypatch.context() as patched:
            patched.delattr(H11Protocol, "on_response_complete")
            with pytest.raises(ConfigError, match=r"installed \(\d+\.\d+[^)]*\) lacks its on_resp"):
                await server.run_http("127.0.0.1", 0)
        with monkeypatch.context() as patched:
            patched.setattr(H11Protocol, "__init__", without_loop)
            with pytest.raises(ConfigError, match=r"lacks its loop: install uvicorn 0\.55"):
                await server.run_http("127.0.0.1", 0)
    finally:
        await engine.aclose()


async def test_half_a_head_after_an_answer_on_a_kept_connection_is_cut_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The wait for a request starts again when an answer ends (uvicorn's
    on_response_complete): a client answered once, after longer than the wait, that then
    sends half a request head on the same connection is cut off once REQUEST_WAIT has
    passed. (An app that answers late stands in for a script that runs.)"""
    from engine import CodeMode
    from engine.mcp import _serve
    from tests.engine.conftest import InProcessRunner

    monkeypatch.setattr(_serve, "REQUEST_WAIT", 0.5)

    async def late(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": message["type"] + ".complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        await asyncio.sleep(1.5)  # longer than the wait: only the server's own answering
        headers = [(b"content-length", b"2")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})

    monkeypatch.setattr(_serve.CodeModeServer, "http_app", lambda self, host, path: late)
    engine = CodeMode([], runner=InProcessRunner(), type_check="off")
    serving, _url, host, port = await _http_served(engine)
    writer = None
    try:
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(f"GET /mcp HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        await writer.drain()
        async with asyncio.timeout(TIMEOUT):
            answer = await reader.readuntil(b"\r\n\r\nok")
        assert answer.startswith(b"HTTP/1.1 200 ") and b"close" not in answer.lower(), answer
        writer.write(f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\n".encode())
        await writer.drain()
        async with asyncio.timeout(TIMEOUT):
            assert await reader.read() == b""  # cut off, with no answer
    finally:
        if writer is not None:
            writer.close()
        await _stop_serving(serving, engine)


async def test_a_large_body_still_coming_is_not_cut_off_and_a_trickle_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client had REQUEST_WAIT from its connection's start for its whole request, body
    included: a slow one still sending a large body was cut off. Mid-body the wait starts
    again at each BODY_PROGRESS bytes, so a body that keeps coming is answered, while one
    of a few bytes at a time is still cut off."""
    from engine import CodeMode
    from engine.mcp import _serve
    from tests.engine.conftest import InProcessRunner

    monkeypatch.setattr(_serve, "REQUEST_WAIT", 3.0)
    engine = CodeMode([], runner=InProcessRunner(), type_check="off")
    serving, _url, host, port = await _http_served(engine)
    writers = []
    try:
        pad = b" " * (4 * _serve.BODY_PROGRESS)
        body = json.dumps(_initialize()).encode()[:-1] + pad + b"}"

        def head(length: int) -> bytes:
            return (
                f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json"
                "\r\nAccept: application/json, text/event-stream\r\n"
                f"Content-Length: {length}\r\n\r\n"
            ).encode()

        trickle_reader, trickle = await asyncio.open_connection(host, int(port))
        writers.append(trickle)
        trickle.write(head(len(body)) + body[:10])

        async def keep_trickling() -> None:
            with contextlib.suppress(OSError):
                for byte in body[10:]:
                    trickle.write(bytes([byte]))
                    await trickle.drain()
                    await asyncio.sleep(0.05)

        trickling = asyncio.create_task(keep_trickling())
        reader, writer = await asyncio.open_connection(host, int(port))
        writers.append(writer)
        writer.write(head(len(body)))
        step = _serve.BODY_PROGRESS
        for start in range(0, len(body), step):  # four seconds in all, past the wait
            writer.write(body[start : start + step])
            await writer.drain()
            await asyncio.sleep(1.0)
        async with asyncio.timeout(TIMEOUT):
            answer = await reader.readuntil(b"\r\n\r\n")
            try:
                rest = await trickle_reader.read()
            except ConnectionError:  # its writes met the closed connection first
                rest = b""
            assert rest == b"", rest  # cut off, with no answer
        trickling.cancel()
        assert answer.startswith(b"HTTP/1.1 200 "), answer  # initialized
    finally:
        for each in writers:
            each.close()
        await _stop_serving(serving, engine)


def test_malformed_lines_from_a_file_on_stdin_are_answered(tmp_path: Path) -> None:
    """With stdin a regular file (``codemode mcp serve < requests``), the SDK read it
    itself and no line it drops was answered. They are, as from a pipe."""
    (tmp_path / "tools.py").write_text(ADD_TOOLS)
    lines = [
        *_opening_lines(),
        "this is not json",
        json.dumps({"jsonrpc": "2.0", "id": None, "method": "ping"}),
        json.dumps({"jsonrpc": "2.0", "method": 7}),  # a notification: nothing to answer
        json.dumps({"jsonrpc": "2.0", "id": 3, "method": 7}),
    ]
    requests = tmp_path / "requests"
    requests.write_text("\n".join(lines) + "\n")
    with requests.open() as stdin:
        done = subprocess.run(
            [str(CODEMODE), "mcp", "serve", "--tools", "tools.py"],
            cwd=tmp_path,
            stdin=stdin,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    refused = [(a["id"], a["error"]["code"]) for a in answers if "error" in a]
    assert refused == [(None, -32700), (None, -32600), (3, -32600)], done.stdout + done.stderr
