"""Upstream MCP servers as tool sources, in a Python host: results, annotations, closing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import time
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest

pytest.importorskip("mcp")

import mcp_types as types

from engine import CodeMode
from engine._mcp import unwrap
from engine.mcp import McpServers, parse_servers
from engine.mcp._upstream import RELIST_PAUSE, RELIST_RETRY
from runner._conversation import STALLED_S
from tests.engine.conftest import InProcessRunner

LAB = Path(__file__).parent / "fastmcp_server.py"


def _lab(tmp: Path, **settings: object) -> dict[str, object]:
    return {
        "mcpServers": {"lab": {"command": sys.executable, "args": [str(LAB), str(tmp)], **settings}}
    }


def test_a_call_tool_result_object_is_unwrapped_like_a_dict() -> None:
    result = types.CallToolResult(content=[types.TextContent(type="text", text='{"a": 1}')])
    assert unwrap(result) == {"a": 1}
    structured = types.CallToolResult(content=[], structured_content={"b": 2})
    assert unwrap(structured) == {"b": 2}


def test_config_problems_name_the_server() -> None:
    specs, problems = parse_servers(
        {
            "mcpServers": {
                "ok": {"command": "x"},
                "both": {"command": "x", "url": "http://h"},
                "bad": {"command": "x", "approval": "sometimes"},
            }
        }
    )
    assert [s.name for s in specs] == ["ok"]
    assert {p.server for p in problems} == {"both", "bad"}
    assert all(str(p).startswith(f"MCP server {p.server!r}: ") for p in problems)


def test_where_a_server_is_names_no_secret_of_its_config() -> None:
    """The text that says how a server is reached is in errors a model reads: a key in its
    arguments or its URL stays in the config."""
    specs, problems = parse_servers(
        {
            "mcpServers": {
                "cmd": {"command": "svc", "args": ["--api-key", "sk-live-SECRET"]},
                "bare": {"command": "svc"},
                "web": {"url": "https://user:pw@example.com:8443/mcp?api_key=SECRET#frag"},
                "v6": {"url": "http://[::1]:9000/mcp?token=SECRET"},
            }
        }
    )
    assert not problems
    wheres = {spec.name: spec.where() for spec in specs}
    assert wheres == {
        "cmd": "svc ...",
        "bare": "svc",
        "web": "https://example.com:8443/mcp",
        "v6": "http://[::1]:9000/mcp",
    }


def test_what_no_command_line_or_http_request_can_carry_is_a_config_problem() -> None:
    """A header's value HTTP cannot carry (a token read from a file keeps its line break)
    failed the start with the SDK's error, which showed the value: the credential was in the
    problem line and the log. A URL that cannot be read failed the start as a server that
    "closed before it connected", and a NUL in a command's text as "cannot connect ...:
    ValueError: embedded null byte". Each is a problem of the config, naming the key."""
    specs, problems = parse_servers(
        {
            "mcpServers": {
                "token": {"url": "https://h/mcp", "headers": {"Authorization": "Bearer sk-1\n"}},
                "accent": {"url": "https://h/mcp", "headers": {"X-Key": "sk-\u00e9"}},
                "name": {"url": "https://h/mcp", "headers": {"X Key": "v"}},
                "v6": {"url": "http://[::1/mcp"},
                "port": {"url": "http://h:http/mcp"},
                "nohost": {"url": "http:///mcp"},
                "arg": {"command": "svc", "args": ["a\0b"]},
                "env": {"command": "svc", "env": {"A=B": "v"}},
                "fine": {"url": "https://h:8443/mcp", "headers": {"Authorization": "Bearer a b"}},
            }
        }
    )
    assert [s.name for s in specs] == ["fine"]
    said = {p.server: p.message for p in problems}
    assert "sk-" not in str(problems), problems
    assert said["token"].startswith(
        "\"headers\" > 'Authorization': its value (not shown) holds what no HTTP header may: a "
        "line break"
    ), said
    assert said["accent"] == said["token"].replace("'Authorization'", "'X-Key'"), said
    assert said["name"].startswith("\"headers\" > 'X Key' is no HTTP header name"), said
    assert said["v6"].startswith(
        "\"url\" 'http://[::1/mcp' cannot be read as a URL (Invalid IPv6 URL)"
    ), said
    assert said["port"].startswith("\"url\" 'http://h:http/mcp' cannot be read as a URL"), said
    assert said["nohost"].startswith("\"url\" 'http:///mcp' names no host"), said
    assert said["arg"].startswith('"args" holds a NUL character'), said
    assert said["env"].startswith("\"env\" > 'A=B' is no environment variable's name"), said


async def test_a_lost_server_is_named_without_its_arguments(tmp_path: Path) -> None:
    """A server that dies during a call: the script's error names it, not its command line
    (which may hold a key)."""
    script = tmp_path / "dies.py"
    script.write_text(
        "from mcp.server.mcpserver import MCPServer\n"
        "server = MCPServer('dies')\n"
        "@server.tool()\n"
        "def die() -> str:\n"
        "    import os\n"
        "    os._exit(3)\n"
        "server.run()\n"
    )
    servers = await McpServers.start(
        {
            "mcpServers": {
                "svc": {
                    "command": sys.executable,
                    "args": [str(script), "--api-key", "sk-live-SECRET123"],
                    "approval": "never",
                }
            }
        }
    )
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    try:
        result = await engine.run_code("return await tools.svc__die({})")
        assert result.status == "failed" and "'svc'" in result.text, result.text
        assert "SECRET" not in result.text and f"({sys.executable} ...)" in result.text
    finally:
        await engine.aclose()


async def test_a_server_is_told_its_client_is_codemode(tmp_path: Path) -> None:
    """The client a server's logs name is code mode and its version (the SDK's default
    named it "mcp" 0.1.0)."""
    from engine.mcp._config import codemode_version

    servers = await McpServers.start(_lab(tmp_path))
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    try:
        result = await engine.run_code("return await tools.lab__client({})")
        assert result.value == {"result": f"codemode {codemode_version()}"}, result.text
    finally:
        await engine.aclose()


async def test_annotations_set_approval_and_read_only(tmp_path: Path) -> None:
    servers = await McpServers.start(_lab(tmp_path))
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    try:
        by_name = {t.name: t for t in engine.tools}
        assert by_name["lab__add"].read_only and not by_name["lab__add"].needs_approval
        assert by_name["lab__wipe"].needs_approval and not by_name["lab__wipe"].read_only
        assert not by_name["lab__grow"].needs_approval  # destructiveHint false
    finally:
        await engine.aclose()
    overridden = await McpServers.start(
        _lab(
            tmp_path,
            approval="always",
            tools={
                "wipe": {"approval": False, "sequential": True},
                "grow": {"readOnly": True},
            },
        )
    )
    try:
        by_name = {t.name: t for t in overridden.tools}
        assert by_name["lab__add"].needs_approval  # "always", per server
        assert not by_name["lab__wipe"].needs_approval  # per tool
        assert by_name["lab__grow"].read_only
        # Its calls run alone (the key was refused as unknown).
        assert by_name["lab__wipe"].sequential and not by_name["lab__grow"].sequential
    finally:
        await overridden.aclose()
    # "readOnly": false on a tool the server hints read-only: a tool with effects, which a
    # crash's cut call never runs again (it was left idempotent) and a person approves
    effects = await McpServers.start(_lab(tmp_path, tools={"add": {"readOnly": False}}))
    try:
        add = {t.name: t for t in effects.tools}["lab__add"]
        assert not add.read_only and not add.idempotent
        assert add.needs_approval
    finally:
        await effects.aclose()
    idempotent = await McpServers.start(
        _lab(tmp_path, tools={"add": {"readOnly": False, "idempotent": True}})
    )
    try:
        add = {t.name: t for t in idempotent.tools}["lab__add"]
        assert not add.read_only and add.idempotent
    finally:
        await idempotent.aclose()


async def test_closing_the_engine_ends_every_session_and_child(tmp_path: Path) -> None:
    config = _lab(tmp_path)
    config["mcpServers"]["lab2"] = config["mcpServers"]["lab"]  # type: ignore[index]
    servers = await McpServers.start(config)
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    result = await engine.run_code(
        "return [await tools.lab__add({a: 1, b: 2}), await tools.lab2__add({a: 3, b: 4})]"
    )
    assert result.value == [{"result": 3}, {"result": 7}], result.text
    children = [
        p for p in psutil.Process().children(recursive=True) if str(LAB) in " ".join(p.cmdline())
    ]
    assert len(children) == 2
    await engine.aclose()
    _gone, alive = psutil.wait_procs(children, timeout=30)
    assert not alive, alive
    assert not [
        p for p in psutil.Process().children(recursive=True) if str(LAB) in " ".join(p.cmdline())
    ]


async def test_a_streamable_http_server_with_headers(tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(LAB), str(tmp_path), "--http", stdout=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    try:
        async with asyncio.timeout(60):
            url = (await process.stdout.readline()).decode().strip()
        servers = await McpServers.start(
            {"mcpServers": {"lab": {"url": url, "headers": {"X-Lab": "from-config"}}}}
        )
        assert not servers.problems, servers.problems
        engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
        try:
            result = await engine.run_code(
                "return [await tools.lab__add({a: 5, b: 6}), await tools.lab__header({})]"
            )
            assert result.value == [{"result": 11}, {"result": "from-config"}], result.text
            process.kill()
            await process.wait()
            # The server is gone: the call fails at once, naming it; nothing hangs.
            async with asyncio.timeout(60):
                gone = await engine.run_code(
                    "try { return await tools.lab__add({a: 1, b: 1}); } catch (e) { return e.message; }"
                )
            assert "MCP server 'lab'" in gone.value and url in gone.value, gone.text
        finally:
            await engine.aclose()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@contextlib.asynccontextmanager
async def _lab_over_http(tmp_path: Path, *flags: str) -> AsyncIterator[CodeMode]:
    """An engine whose one MCP server is the lab over streamable HTTP (``flags`` its own),
    both ended on the way out."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(LAB), str(tmp_path), "--http", *flags, stdout=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    engine = None
    try:
        async with asyncio.timeout(60):
            url = (await process.stdout.readline()).decode().strip()
        servers = await McpServers.start({"mcpServers": {"lab": {"url": url}}})
        engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
        yield engine
    finally:
        await _end_lab(engine, process)


async def _end_lab(engine: CodeMode | None, process: asyncio.subprocess.Process) -> None:
    """Close the engine (and the MCP servers it holds), then end the lab's server."""
    if engine is not None:
        await engine.aclose()
    if process.returncode is None:
        process.kill()
        await process.wait()


@pytest.mark.parametrize("answers", ["events", "json"])
async def test_an_http_servers_answers_are_held_to_the_bound_of_a_message(
    tmp_path: Path, answers: str
) -> None:
    """Over HTTP, as over stdio, a message may be up to MAX_MESSAGE: an answer as an event
    past the SDK's own 1 MiB failed ("Server-sent event exceeded the 1048576 byte limit"),
    and one as a JSON body was read whole however large (1 GiB took 5.5 GB)."""
    flags = ["--json"] if answers == "json" else []
    async with _lab_over_http(tmp_path, *flags) as engine:
        code = "const t = await tools.lab__big({ mib: %d });\nreturn typeof t === 'string' ? t.length : t.result.length;"
        three = await asyncio.wait_for(engine.run_code(code % 3), 120)
        assert three.value == 3 * 1024 * 1024, three.text
        if answers == "json":  # 2 x 40 MiB (text and structured content) in one body
            over = await asyncio.wait_for(engine.run_code(code % 40), 120)
            assert over.status == "failed", over.text
            assert "it sent an answer over 64 MiB" in over.text, over.text


@pytest.mark.parametrize("answers", ["events", "json"])
async def test_an_http_server_that_ends_mid_call_is_named_as_one_that_went_away(
    tmp_path: Path, answers: str
) -> None:
    """A server over HTTP that ends mid-call failed the call as one it "refused" when it
    answered with events ("refused the call: SSE stream ended without a response"), which a
    model takes for a call that did not run: it may have, as with an answer of JSON, and
    the server is reconnected as then."""
    flags = ["--json"] if answers == "json" else []
    async with _lab_over_http(tmp_path, *flags) as engine:
        code = "try { await tools.lab__crash({}); } catch (e) { return e.message; }"
        result = await asyncio.wait_for(engine.run_code(code), 60)
        assert result.status == "finished", result.text
        message = result.value
        assert message.startswith("the MCP server 'lab' (http://127.0.0.1:"), message
        assert "closed its connection during the call of 'crash'" in message, message
        assert "may or may not have taken effect; the server is being restarted" in message


async def _relaying_proxy(seen: list[str]) -> asyncio.Server:
    """A forward proxy for plain HTTP on loopback: each request (its target in absolute
    form, as a client sends one to a proxy) is sent on to its server in origin form on a
    connection of its own, and the answer relayed back; ``seen`` gets "METHOD /path"."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(1 << 16):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        line, _, rest = head.partition(b"\r\n")
        method, target, version = line.split(b" ")
        url = urllib.parse.urlsplit(target.decode())
        seen.append(f"{method.decode()} {url.path}")
        up_reader, up_writer = await asyncio.open_connection(url.hostname, url.port)
        headers = [
            h
            for h in rest.split(b"\r\n")
            if h and not h.lower().startswith((b"connection:", b"proxy-connection:"))
        ]
        # One request a connection: the server's answer says "close", so the client opens
        # a new one for its next request.
        up_writer.write(
            b" ".join([method, url.path.encode(), version])
            + b"\r\n"
            + b"\r\n".join([*headers, b"Connection: close"])
            + b"\r\n\r\n"
        )
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def test_an_http_server_is_reached_through_the_environments_proxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP_PROXY / HTTPS_PROXY apply to an MCP server's URL, as with the SDK's own client
    (a transport of the engine's own made httpx leave them out: a host behind a proxy could
    not reach its servers), and an answer through the proxy is held to MAX_MESSAGE too."""
    seen: list[str] = []
    proxy = await _relaying_proxy(seen)
    port = proxy.sockets[0].getsockname()[1]
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
    try:
        async with _lab_over_http(tmp_path, "--json") as engine:
            added = await asyncio.wait_for(
                engine.run_code("return await tools.lab__add({a: 2, b: 3});"), 60
            )
            assert added.status == "finished", added.text
            assert "POST /mcp" in seen, seen
            code = "const t = await tools.lab__big({ mib: 40 });\nreturn t.length;"
            over = await asyncio.wait_for(engine.run_code(code), 120)
            assert over.status == "failed", over.text
            assert "it sent an answer over 64 MiB" in over.text, over.text
    finally:
        proxy.close()


async def test_an_http_error_answer_says_its_status_and_a_broken_one_what_is_wrong(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An HTTP error answer to a call says its status and the first line of its body (the
    SDK said only "Server returned an error response"), a JSON-RPC error in it is the
    server's message, and an answer that is no JSON says so in one line (it was a pydantic
    report, and the SDK logged a traceback of its own code), as does an event of a stream
    (it read "refused the call: Failed to parse SSE message: 1 validation error for ...")."""
    async with _lab_over_http(tmp_path, "--broken") as engine:
        said = {}
        names = ("http_error", "not_json", "not_json_event", "rpc_error", "detail_error")
        for name in (*names, "huge_error"):
            code = f"try {{ await tools.lab__{name}({{}}); }} catch (e) {{ return e.message; }}"
            result = await asyncio.wait_for(engine.run_code(code), 60)
            assert result.status == "finished", result.text
            said[name] = result.value
        huge = said.pop("huge_error")  # an error's body, read whole, is bounded too
        assert huge.startswith("the MCP server 'lab' ") and "over 64 MiB" in huge, huge
        assert said == {
            "http_error": "the MCP server 'lab' refused the call: HTTP 500 Internal Server "
            "Error: internal oops",
            "not_json": "the MCP server 'lab' answered the call with no JSON-RPC message "
            "(Invalid JSON: key must be a string at line 1 column 2)",
            "not_json_event": "the MCP server 'lab' answered the call with no JSON-RPC "
            "message (Invalid JSON: key must be a string at line 1 column 2)",
            "rpc_error": "the MCP server 'lab' refused the call: rate limited",
            "detail_error": "the MCP server 'lab' refused the call: HTTP 503 Service "
            'Unavailable: {"detail": "upstream down"}',
        }
        added = await asyncio.wait_for(
            engine.run_code("return await tools.lab__add({a: 1, b: 2});"), 60
        )
        assert added.value == {"result": 3}, added.text  # the session serves on
        assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


def test_only_an_unknown_sessions_error_sends_a_call_again() -> None:
    """A call is sent again only on the error of a session the server does not know (it
    ran nothing): never on a tool's own error that speaks of sessions."""
    from mcp.shared.exceptions import MCPError

    from engine.mcp._upstream import _session_gone

    assert _session_gone(MCPError(-32600, "Session not found"))
    assert _session_gone(MCPError(-32001, "Session not found"))
    assert _session_gone(MCPError(-32600, "Session terminated"))
    assert not _session_gone(MCPError(-32000, "Session not found"))
    assert not _session_gone(MCPError(-32600, "the user's session was not found in the CRM"))


def test_only_the_clients_own_error_of_a_cut_answer_says_the_call_may_have_run() -> None:
    """A server's own error of the code the SDK gives a cut answer (CONNECTION_CLOSED is
    JSON-RPC's first server error code, which servers use) is the server's refusal."""
    from mcp.shared.exceptions import MCPError

    from engine.mcp._upstream import _cut_off

    assert _cut_off(MCPError(-32000, "SSE stream ended without a response")) is not None
    assert _cut_off(MCPError(-32000, "SSE stream failed: the event is too long")) is not None
    assert _cut_off(MCPError(-32000, "rate limited")) is None
    assert _cut_off(MCPError(-32603, "SSE stream ended without a response")) is None


async def _start_lab_http(tmp_path: Path, port: str) -> tuple[asyncio.subprocess.Process, str]:
    """The lab over streamable HTTP on ``port`` ("0": any free one), and its URL."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(LAB), str(tmp_path), "--http", "--port", port,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    async with asyncio.timeout(60):
        return process, (await process.stdout.readline()).decode().strip()


def _port(url: str) -> str:
    return url.rsplit(":", 1)[1].split("/")[0]


async def test_an_http_server_that_restarted_gets_a_new_session(tmp_path: Path) -> None:
    """A server over HTTP that restarts while the engine is idle no longer knows its
    session: its 404 ("Session not found") made every later call fail for ever. The call it
    refused (it ran nothing) is sent again on a new session."""
    process, url = await _start_lab_http(tmp_path, "0")
    engine = None
    try:
        servers = await McpServers.start({"mcpServers": {"lab": {"url": url}}})
        assert not servers.problems, servers.problems
        engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
        first = await engine.run_code("return await tools.lab__add({a: 1, b: 2})")
        assert first.value == {"result": 3}, first.text
        process.kill()
        await process.wait()
        process, again = await _start_lab_http(tmp_path, _port(url))
        assert again == url
        for n in range(2):
            result = await asyncio.wait_for(
                engine.run_code(f"return await tools.lab__add({{a: {n}, b: 10}})"), 60
            )
            assert result.value == {"result": n + 10}, result.text
    finally:
        await _end_lab(engine, process)


async def test_a_message_too_large_ends_the_connection_and_names_the_server(
    tmp_path: Path,
) -> None:
    """A result over MAX_MESSAGE (here 2 x 40 MiB: FastMCP sends text and structured
    content) is refused as it is read, in linear time, naming the server and why; the server
    is restarted and the script's next call is served."""
    from engine.mcp._stdio import MAX_MESSAGE

    assert MAX_MESSAGE < 2 * 40 * 1024 * 1024
    servers = await McpServers.start(_lab(tmp_path))
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    try:
        result = await engine.run_code(
            "let big; try { big = await tools.lab__big({mib: 40}); } catch (e) { big = e.message; }"
            "return [big, await tools.lab__add({a: 1, b: 2})];"
        )
        big, added = result.value
        assert "MCP server 'lab'" in big and "a message over 64 MiB" in big, big
        assert added == {"result": 3}
    finally:
        await engine.aclose()


RAW = Path(__file__).parent / "raw_server.py"


def _raw(
    tmp: Path, tools: object, *args: str, **settings: object
) -> dict[str, dict[str, dict[str, object]]]:
    """The config of a hand-written server, "raw", whose tools/list answer holds ``tools``
    (text sent as it is, or dumped to JSON)."""
    text = tools if isinstance(tools, str) else json.dumps(tools)
    (tmp / "tools.json").write_text(text)
    command = [str(RAW), str(tmp / "tools.json"), *args]
    return {"mcpServers": {"raw": {"command": sys.executable, "args": command, **settings}}}


def _read_only(*names: str) -> list[dict[str, object]]:
    """Definitions of tools ``names`` that take any object and are hinted read-only (so no
    call of them waits for approval)."""
    read_only = {"readOnlyHint": True}
    return [{"name": n, "inputSchema": {"type": "object"}, "annotations": read_only} for n in names]


async def _raw_problem(tmp: Path, tools: str, *args: str, **settings: object) -> str:
    """The one problem of a hand-written server whose tools/list answer holds ``tools``
    (``args``: its mode)."""
    servers = await McpServers.start(_raw(tmp, tools, *args, **settings))
    try:
        assert servers.servers == [] and len(servers.problems) == 1, servers.problems
        return str(servers.problems[0])
    finally:
        await servers.aclose()


async def test_a_result_that_breaks_mcp_and_a_listing_never_answered(tmp_path: Path) -> None:
    """A call's result that is not a CallToolResult is one error naming the server and what
    is wrong (it was pydantic's text, with its links); a server that says its tools changed
    and never answers the listing that follows holds its calls only for its initTimeout
    (each waited for ever), and its tools stay as they were."""
    tools = _read_only("badresult", "change", "echo", "refuse", "surrogate")
    servers = await McpServers.start(_raw(tmp_path, tools, initTimeout=1))
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    try:
        # JSON with a lone surrogate escaped (json.dumps and JSON.stringify write one):
        # read as U+FFFD, where the SDK's parser dropped the answer and the call hung.
        odd = await asyncio.wait_for(engine.run_code("return await tools.raw__surrogate({})"), 30)
        assert odd.value == "caf\ufffd", odd.text
        refused = await engine.run_code(
            "try { await tools.raw__refuse({}) } catch (e) { return e.message }"
        )
        # One line of the server's report (over HTTP the SDK's is pydantic's, with links).
        assert refused.value == "the MCP server 'raw' refused the call: cannot do it:", refused.text
        bad = await engine.run_code(
            "try { await tools.raw__badresult({}) } catch (e) { return e.message }"
        )
        assert bad.value == (
            "the MCP server 'raw' answered the call of 'badresult' with a result that is not "
            "valid MCP (content: Input should be a valid list); the server's maintainer must "
            "fix it"
        ), bad.text
        changed = await asyncio.wait_for(
            engine.run_code(
                "const a = await tools.raw__change({});\n"
                "return [a.called, (await tools.raw__echo({ n: 1 })).called];"
            ),
            60,
        )
        assert changed.value == ["change", "echo"], changed.text
        assert [t.name for t in engine.tools] == [
            "raw__badresult",
            "raw__change",
            "raw__echo",
            "raw__refuse",
            "raw__surrogate",
        ]
    finally:
        await engine.aclose()


async def test_an_error_with_no_text_names_the_server_and_the_tool(tmp_path: Path) -> None:
    """A result with isError and no text block fails the call naming who answered so (it
    read "the tool reported an error", which sent the script's author nowhere); so does the
    tool's handler, called by the host."""
    from engine import ToolCallError

    tools = [
        {"name": "mute", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}}
    ]
    servers = await McpServers.start(_raw(tmp_path, tools))
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    said = (
        "the MCP server 'raw' answered the call of 'mute' with an error and no text "
        "saying what it was; its own log may say more"
    )
    try:
        result = await engine.run_code(
            "try { await tools.raw__mute({}) } catch (e) { return e.message }"
        )
        assert result.value == said, result.text
        handler = next(t.handler for t in servers.tools if t.name == "raw__mute")
        assert handler is not None
        with pytest.raises(ToolCallError) as raised:
            await handler()
        assert str(raised.value) == said
    finally:
        await engine.aclose()


def _structured(schema: dict[str, object], name: str = "structured") -> dict[str, object]:
    """The definition of a read-only tool ``name`` whose output schema is ``schema``."""
    return {
        "name": name,
        "inputSchema": {"type": "object"},
        "outputSchema": schema,
        "annotations": {"readOnlyHint": True},
    }


async def test_a_pattern_only_the_linear_time_engine_reads_is_checked(tmp_path: Path) -> None:
    """A result is checked against its tool's output schema by the engine's check alone. The
    SDK's client checked it first with Python's ``re``, which refused a pattern only the
    linear-time engine reads (``\\p{L}``), of a tool the engine declared: every call failed
    as "Invalid schema"."""
    schema = {"type": "object", "properties": {"word": {"type": "string", "pattern": "^\\p{L}+$"}}}
    servers = await McpServers.start(_raw(tmp_path, [_structured(schema)]))
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    try:
        word = await engine.run_code(
            "try { return await tools.raw__structured({ value: { word: 'café' } }) }"
            " catch (e) { return e.message }"
        )
        assert word.value == {"word": "café"}, word.text
    finally:
        await engine.aclose()


# Past this the test has failed: a backtracking check holds the event loop, and with it the
# call's own timeout, so the hang is ended here (the call answers in about a second).
@pytest.mark.timeout(60)
async def test_a_result_is_checked_against_its_output_schema_in_linear_time(
    tmp_path: Path,
) -> None:
    """A result is checked against its tool's output schema in linear time. The SDK's client
    checked it first with Python's backtracking ``re``, on the event loop: a pattern of
    ``^(a+)+$`` and a result of 64 a's and a '!' held every script and server past every
    timeout (27 of them: 6 s). The call has a timeout of its own, so a check that is slow but
    lets the loop run fails it saying so; the answer is the refusal."""
    schema = {"type": "object", "properties": {"run": {"type": "string", "pattern": "^(a+)+$"}}}
    servers = await McpServers.start(_raw(tmp_path, [_structured(schema)], timeout=20))
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    try:
        run = await engine.run_code(
            "try { return await tools.raw__structured({ value: { run: 'a'.repeat(64) + '!' } }) }"
            " catch (e) { return e.message }"
        )
        assert run.value == (
            "the MCP server 'raw' answered the call of 'structured' with a result that does not "
            'match the tool\'s output schema (at run: does not match the pattern "^(a+)+$"); '
            "the server's maintainer must fix it"
        ), run.text
    finally:
        await engine.aclose()


async def test_a_result_that_breaks_its_output_schema_is_the_servers_to_fix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A server's result that does not match its tool's output schema fails the call naming
    the server and the tool, and saying the server's maintainer must fix it (it named no
    server, and called it a defect of the tool on the host's side); one with no
    structuredContent says so (it said only how the text read instead fell short, as
    "expected object, got string"). No warning of a host tool's defect is logged."""
    schema = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    tools = [_structured(schema), _structured(schema, "echo")]
    caplog.set_level(logging.WARNING)
    servers = await McpServers.start(_raw(tmp_path, tools))
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    try:
        code = "try { return await tools.raw__%s({ value: {} }) } catch (e) { return e.message }"
        structured = await engine.run_code(code % "structured")
        assert structured.value == (
            "the MCP server 'raw' answered the call of 'structured' with a result that does not "
            "match the tool's output schema (missing required property \"x\"); the server's "
            "maintainer must fix it"
        ), structured.text
        text = await engine.run_code(code % "echo")  # answered as JSON text alone
        assert text.value == (
            "the MCP server 'raw' answered the call of 'echo' with no structuredContent, which "
            "the tool's output schema asks for (its content, read as the result instead, does "
            'not match the schema: missing required property "x"); the server\'s maintainer '
            "must fix it"
        ), text.text
    finally:
        await engine.aclose()
    assert not [r.getMessage() for r in caplog.records if "output schema" in r.getMessage()]


async def test_a_problem_shows_the_servers_control_characters_escaped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What a server says is in its problem lines, which are printed to a terminal and
    logged: a property name that clears the screen and a carriage return that overwrites
    the line with a line of its own reached both as they were."""
    schema = {"type": "object", "properties": {"a\u001b[2J\rall fine": {"type": "bogus"}}}
    caplog.set_level(logging.WARNING, logger="codemode.mcp")
    servers = await McpServers.start(_raw(tmp_path, [{"name": "x", "inputSchema": schema}]))
    try:
        [problem] = [str(p) for p in servers.problems]
    finally:
        await servers.aclose()
    assert "properties.a\\x1b[2J\\x0dall fine.type" in problem, problem
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert problem in logged and "\x1b" not in logged and "\r" not in logged, logged


async def test_a_result_of_too_many_blocks_fails_its_call_saying_so(tmp_path: Path) -> None:
    """A result of more content blocks than code mode reads fails its call naming the server
    and the count, before the SDK makes a model of each block (two million one-letter blocks,
    54 MiB, took 35 s of the event loop and 3.8 GB); one at the bound is read."""
    from engine.mcp._upstream import MAX_BLOCKS

    tools = [
        {"name": "blocks", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}}
    ]
    servers = await McpServers.start(_raw(tmp_path, tools))
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    try:
        code = "try { return (await tools.raw__blocks({ n: %d })).length } catch (e) { return e.message }"
        over = await engine.run_code(code % (MAX_BLOCKS + 1))
        assert over.value == (
            f"the MCP server 'raw' answered a call with {MAX_BLOCKS + 1:,} content blocks, more "
            f"than the {MAX_BLOCKS:,} code mode reads; ask it for less (filter, page, select "
            "fields)"
        ), over.text
        at = await engine.run_code(code % MAX_BLOCKS)
        assert at.value == 2 * MAX_BLOCKS - 1, at.text  # the texts, joined by line ends
    finally:
        await engine.aclose()


async def test_a_server_that_says_its_tools_changed_again_and_again_holds_no_call(
    tmp_path: Path,
) -> None:
    """A server that announces changed tools while each listing runs: the listings one
    announcement leads to are bounded, so a call returns with the server's answer (it waited
    out its timeout, the listings never ending)."""
    tools = _read_only("spam", "echo")
    servers = await McpServers.start(_raw(tmp_path, tools, timeout=20))
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    try:
        result = await asyncio.wait_for(
            engine.run_code(
                "const a = await tools.raw__spam({});\n"
                "return [a.called, (await tools.raw__echo({})).called];"
            ),
            15,
        )
        assert result.value == ["spam", "echo"], result.text
    finally:
        await engine.aclose()


async def test_a_server_that_says_its_tools_changed_without_pause_is_listed_paced(
    tmp_path: Path,
) -> None:
    """A server that says its tools changed every 20 ms, 100 times over, each listing taking
    0.1 s: the listings are paced (each begins RELIST_PAUSE times as long after the last as
    that one took, or RELIST_RETRY when a call waits for it), so it is listed a few times
    during the flood, not about twenty (back to back, a large listing took the host from
    every other server); another server's calls go on meanwhile, and once the flood is over
    the tools it last announced are the ones seen."""
    tools = _read_only("flood", "sleep")
    (tmp_path / "flood").mkdir()
    (tmp_path / "calm").mkdir()
    flood = _raw(tmp_path / "flood", tools, "--flood")["mcpServers"]["raw"]
    calm = _raw(tmp_path / "calm", tools)["mcpServers"]["raw"]
    servers = await McpServers.start({"mcpServers": {"flood": flood, "calm": calm}})
    last = asyncio.Event()
    servers.subscribe(lambda now: last.set() if any(t.name == "flood__v100" for t in now) else None)
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    try:
        result = await asyncio.wait_for(
            engine.run_code(
                "let calm = 0, state;\n"
                "do {\n"
                "  await tools.calm__sleep({ seconds: 0.4 });\n"
                "  calm += 1;\n"
                "  state = await tools.flood__flood({});\n"
                "} while (!state.over);\n"
                "return [calm, state.sent, state.during];"
            ),
            60,
        )
        calm_calls, sent, during = result.value
        # The calm server answered while the flood went on (the script saw it not over).
        assert sent == 100 and calm_calls >= 2, result.text
        # Back to back, 19 listings in its 2 s; paced, 2 s over a listing and its pause (4 at
        # 0.5 s), and one begun before the flood's first announcement ends it.
        assert 1 <= during <= _flood_paced() + 1, result.text
        async with asyncio.timeout(30):
            await last.wait()
        flooded = sorted(t.name for t in engine.tools if t.source == "flood")
        assert flooded == ["flood__flood", "flood__sleep", "flood__v100"]
    finally:
        await engine.aclose()


def _flood_paced() -> float:
    """The listings paced in the --flood server's 2 s flood, each taking 0.1 s: over a
    listing and its pause, cut to RELIST_RETRY at most when a call waits for it."""
    return 2 / (0.1 + min(0.1 * RELIST_PAUSE, RELIST_RETRY))


async def test_a_flooding_server_that_scripts_call_is_listed_paced(tmp_path: Path) -> None:
    """Four scripts that call the --flood server back to back, each call answered during
    the flood and so waiting for a listing: the listings stay paced (each call cut the pause
    to nothing, and it was listed back to back, 19 times in its 2 s flood)."""
    servers = await McpServers.start(_raw(tmp_path, _read_only("flood", "sleep"), "--flood"))
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    code = (
        "let s, n = 0;\n"
        "do { s = await tools.raw__flood({}); n++ } while (!s.over);\n"
        "return [s.during, n];"
    )
    try:
        results = await asyncio.wait_for(
            asyncio.gather(*(engine.run_code(code) for _ in range(4))), 60
        )
        during = max(r.value[0] for r in results)
        assert all(r.value[1] >= 2 for r in results), [r.text for r in results]
        assert 1 <= during <= _flood_paced() + 1, [r.text for r in results]
    finally:
        await engine.aclose()


async def test_a_change_announced_as_a_server_is_first_listed_is_listed(tmp_path: Path) -> None:
    """A server that says its tools changed while the engine lists them on connecting is
    listed again: the announcement was lost (the mark of stale tools cleared once that
    listing ended), and its tools stayed as first listed until it announced another."""
    servers = await McpServers.start(_raw(tmp_path, _read_only("echo"), "--changed-first"))
    later = asyncio.Event()
    servers.subscribe(lambda now: later.set() if any(t.name == "raw__later" for t in now) else None)
    try:
        if not any(t.name == "raw__later" for t in servers.tools):
            async with asyncio.timeout(30):
                await later.wait()
        assert sorted(t.name for t in servers.tools) == ["raw__echo", "raw__later"]
    finally:
        await servers.aclose()


async def test_a_tool_a_server_adds_during_a_call_is_there_when_the_call_returns(
    tmp_path: Path,
) -> None:
    """A server that adds a tool and says so before it answers the call (as MCP allows):
    once the call returns, the next script calls the new tool, each time. Its listings take
    0.3 s, so the changes came within the pause after the last listing (RELIST_PAUSE), and
    the call returned with the tools as they were ("tools.raw__b does not exist")."""
    servers = await McpServers.start(_raw(tmp_path, _read_only("add"), "--grow"))
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    try:
        for name in ("a", "b", "c"):
            await engine.run_code(f'return await tools.raw__add({{ name: "{name}" }});')
            result = await engine.run_code(f"return await tools.raw__{name}({{}});")
            assert result.value == {"called": name, "arguments": {}}, result.text
    finally:
        await engine.aclose()


async def test_a_call_waiting_for_a_listing_longer_than_its_timeout_returns_its_result(
    tmp_path: Path,
) -> None:
    """A call the server answered, having said its tools changed, whose listing takes
    longer than the tool's timeout (3 s; the listing 8 s): it returns the server's answer,
    the tools as last listed (it timed out, "may or may not have taken effect", its result
    lost)."""
    config = _raw(tmp_path, _read_only("add"), "--grow", initTimeout=10, timeout=3)
    servers = await McpServers.start(config)
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    try:
        result = await asyncio.wait_for(
            engine.run_code(
                "try { return await tools.raw__add({ name: 'a', list_seconds: 8 }) }\n"
                "catch (e) { return e.message }"
            ),
            30,
        )
        assert result.value == {
            "called": "add",
            "arguments": {"name": "a", "list_seconds": 8},
        }, result.text
    finally:
        await engine.aclose()


async def test_a_listing_of_changed_tools_that_timed_out_pauses_the_next_briefly(
    tmp_path: Path,
) -> None:
    """A server whose listing of its changed tools timed out (initTimeout 2 s), then well
    again, says its tools changed with no call waiting: they are listed within about
    RELIST_RETRY, not paused for four times the listing's 2 s (8 s; 2 min by default)."""
    config = _raw(tmp_path, _read_only("add", "later"), "--grow", initTimeout=2)
    servers = await McpServers.start(config)
    listed = asyncio.Event()
    servers.subscribe(lambda now: listed.set() if any(t.name == "raw__b" for t in now) else None)
    tools = {t.name: t for t in servers.tools}
    try:
        # The listing it says it needs takes 3 s: the call returns once it timed out.
        await tools["raw__add"].handler(name="a", list_seconds=3)
        assert "raw__a" not in {t.name for t in servers.tools}
        # Answered once the server is done with that listing; its change said 0.2 s after.
        await tools["raw__later"].handler(name="b")
        async with asyncio.timeout(RELIST_RETRY + 3):
            await listed.wait()
        assert {"raw__a", "raw__b"} <= {t.name for t in servers.tools}
    finally:
        await servers.aclose()


async def test_a_server_restarted_is_not_paced_by_its_last_listing_before(
    tmp_path: Path,
) -> None:
    """A server whose listing of changed tools took 2 s (the next paused for 8 s), then
    restarted, says its tools changed with no call waiting: they are listed at once, not
    after the pause its last connection left."""
    from engine import ToolCallError

    servers = await McpServers.start(_raw(tmp_path, _read_only("add", "later", "exit"), "--grow"))
    listed = asyncio.Event()
    servers.subscribe(lambda now: listed.set() if any(t.name == "raw__b" for t in now) else None)
    tools = {t.name: t for t in servers.tools}
    try:
        await tools["raw__add"].handler(name="a", list_seconds=2)
        with pytest.raises(ToolCallError, match="closed its connection"):
            await tools["raw__exit"].handler()
        # Sent once it is connected again; its change said 0.2 s after the answer.
        await tools["raw__later"].handler(name="b")
        async with asyncio.timeout(3):
            await listed.wait()
    finally:
        await servers.aclose()


async def test_a_call_in_flight_when_the_servers_are_closed_says_so(tmp_path: Path) -> None:
    """A call in flight when its host closes the servers fails saying the server was closed
    by this host, and that it may or may not have taken effect (the session's end answered
    it "Connection closed", read as the server refusing the call)."""
    from engine import ToolCallError

    servers = await McpServers.start(_raw(tmp_path, _read_only("sleep")))
    (sleep,) = [t for t in servers.tools if t.name == "raw__sleep"]
    call = asyncio.ensure_future(sleep.handler(seconds=30))
    await asyncio.sleep(0.5)  # sent, and the server sleeping on it
    await servers.aclose()
    with pytest.raises(ToolCallError) as raised:
        await call
    said = str(raised.value)
    assert "refused" not in said, said
    assert "closed by this host during the call of 'sleep'" in said, said
    assert said.endswith("check before calling it again"), said


async def test_a_call_waiting_for_a_reconnect_when_the_servers_are_closed_says_so(
    tmp_path: Path,
) -> None:
    """A call that waits for its server to reconnect when its host closes the servers fails
    at once, saying the server was closed by this host and the call not sent (it waited out
    the reconnect's wait, then said the server was being reconnected)."""
    from engine import ToolCallError

    servers = await McpServers.start(_raw(tmp_path, _read_only("crash", "echo")))
    tools = {t.name: t for t in servers.tools}
    upstream = servers._upstreams["raw"]
    with pytest.raises(ToolCallError):
        await tools["raw__crash"].handler()
    async with asyncio.timeout(30):
        while upstream._connected.is_set():  # the connection's end seen
            await asyncio.sleep(0.01)
    call = asyncio.ensure_future(tools["raw__echo"].handler())
    await asyncio.sleep(0)  # the call waits for the reconnect
    await servers.aclose()
    with pytest.raises(ToolCallError) as raised:
        async with asyncio.timeout(10):
            await call
    assert "was closed by this host while the call of 'echo' waited for it to reconnect" in str(
        raised.value
    ), raised.value


async def test_a_call_refused_for_a_lost_session_when_the_servers_are_closed_says_so(
    tmp_path: Path,
) -> None:
    """A call that a restarted server over HTTP refused ("Session not found") waits for a
    new session; when its host closes the servers meanwhile it fails at once, saying the
    server was closed by this host and the call not sent (it waited out the reconnect's
    wait, 30 s, then said the server was not connected again yet)."""
    from engine import ToolCallError

    process, url = await _start_lab_http(tmp_path, "0")
    try:
        servers = await McpServers.start({"mcpServers": {"lab": {"url": url}}})
        tools = {t.name: t for t in servers.tools}
        upstream = servers._upstreams["lab"]
        try:
            assert unwrap(await tools["lab__add"].handler(a=1, b=2)) == {"result": 3}
            process.kill()
            await process.wait()
            process, again = await _start_lab_http(tmp_path, _port(url))
            assert again == url
            call = asyncio.ensure_future(tools["lab__add"].handler(a=5, b=5))
            async with asyncio.timeout(30):
                # The call refused and the session dropped: it waits for a new one.
                while upstream._connected.is_set() and not call.done():
                    await asyncio.sleep(0)
        finally:
            await servers.aclose()
        with pytest.raises(ToolCallError) as raised:
            async with asyncio.timeout(10):
                await call
        assert "was closed by this host while the call of 'add' waited for it to reconnect" in (
            str(raised.value)
        ), raised.value
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_a_server_that_exits_while_its_child_holds_its_output_is_restarted(
    tmp_path: Path,
) -> None:
    """A server that exits while a process it started holds its stdout gives no end of
    stream: its call ends at once naming the server and why, the server is restarted and
    the next call goes through; the child (in the server's process group) is ended. (The
    call waited out its timeout, 300 s by default, and so did every later one.)"""
    import psutil

    tools = _read_only("crash", "echo")
    servers = await McpServers.start(_raw(tmp_path, tools))
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    try:
        crashed = await asyncio.wait_for(
            engine.run_code("try { await tools.raw__crash({}) } catch (e) { return e.message }"),
            60,
        )
        assert "the MCP server 'raw'" in str(crashed.value), crashed.text
        assert "it exited (status 1) while a process it started still holds its output" in str(
            crashed.value
        )
        again = await asyncio.wait_for(engine.run_code("return await tools.raw__echo({})"), 60)
        assert again.value == {"called": "echo", "arguments": {}}, again.text
    finally:
        await engine.aclose()
    sleeping = [
        p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "3600"]
    ]
    for _ in range(100):
        if not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in sleeping):
            break
        await asyncio.sleep(0.05)
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in sleeping)


async def test_a_listing_that_breaks_mcp_names_what_is_wrong(tmp_path: Path) -> None:
    """An answer whose own fields break MCP (``tools`` not a list) is refused whole, and the
    problem says what is wrong with it, not only that a ValidationError happened."""
    problem = await _raw_problem(tmp_path, '{"fine": {"inputSchema": {"type": "object"}}}')
    assert problem.startswith("MCP server 'raw': "), problem
    assert "tools: Input should be a valid list" in problem, problem
    assert "leave it out of the config" in problem, problem


async def test_a_tool_that_breaks_mcp_is_left_out_and_named_while_the_rest_serve(
    tmp_path: Path,
) -> None:
    """The SDK refuses a whole tools/list answer for one bad definition: each tool is
    checked on its own instead, on every page, so the good ones serve and each bad one is a
    problem naming it (or its place, when its name is not a string) and what is wrong."""
    read_only = {"readOnlyHint": True}
    pages = [
        [
            {"name": "fine", "inputSchema": {"type": "object"}, "annotations": read_only},
            {"name": "no_schema"},
            {"name": 7, "inputSchema": {"type": "object"}},
        ],
        [
            {"name": "text", "inputSchema": {"type": "string"}},
            {"name": "later", "inputSchema": {"type": "object"}, "annotations": read_only},
            # {} is what servers publish for "takes any object", as Tool.from_mcp reads it
            # (it was left out: "inputSchema.type: Field required").
            {"name": "any", "inputSchema": {}, "annotations": read_only},
            # Only to be called as a task, which codemode does not do: each call failed.
            {
                "name": "task",
                "inputSchema": {"type": "object"},
                "execution": {"taskSupport": "required"},
            },
        ],
    ]
    servers = await McpServers.start(_raw(tmp_path, pages, "--pages"))
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    try:
        assert servers.servers == ["raw"], servers.problems
        assert [t.name for t in engine.tools] == ["raw__fine", "raw__later", "raw__any"]
        problems = [str(p) for p in servers.problems]
        assert len(problems) == 4, problems
        no_schema, number, text, task = problems
        assert task == (
            "MCP server 'raw': tool 'task' (tools[3] of its listing) is left out: it may only "
            'be called as a task (execution.taskSupport "required"), which codemode does not '
            "do; the server's other tools serve"
        )
        assert no_schema.startswith("MCP server 'raw': tool 'no_schema' (tools[1] of its listing)")
        assert "inputSchema: Field required" in no_schema, no_schema
        assert number.startswith("MCP server 'raw': the tool at tools[2] of its listing")
        assert "name: Input should be a valid string" in number, number
        assert text.startswith("MCP server 'raw': tool 'text' (tools[0] of its listing)"), text
        assert "inputSchema.type: Input should be 'object'" in text, text
        assert all("the server's other tools serve" in p for p in problems), problems
        result = await engine.run_code(
            "return [await tools.raw__fine({a: 1}), await tools.raw__later({}),"
            " await tools.raw__any({b: 2})]"
        )
        assert result.value == [
            {"called": "fine", "arguments": {"a": 1}},
            {"called": "later", "arguments": {}},
            {"called": "any", "arguments": {"b": 2}},
        ], result.text
    finally:
        await engine.aclose()


async def test_a_listing_that_pages_without_end_is_cut_and_named(tmp_path: Path) -> None:
    """A server whose every page gives a nextCursor is listed MAX_PAGES times, not forever;
    its tools serve and the problem says the rest was left out."""
    from engine.mcp._upstream import MAX_PAGES

    servers = await McpServers.start(_raw(tmp_path, [], "--endless"))
    try:
        assert servers.servers == ["raw"]
        assert [str(p) for p in servers.problems] == [
            f"MCP server 'raw': its tools/list answer goes on past {MAX_PAGES} pages (it "
            "still gives a nextCursor), so the tools of the pages after them are left out"
        ]
    finally:
        await servers.aclose()


async def test_a_server_that_writes_text_to_stdout_is_named_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A server that prints a banner to stdout (as servers that log there do) still serves,
    and the log says so in one line naming the server and what it wrote, once: the SDK's
    pydantic report was three lines a bad line."""
    tools = [{"name": "ok", "inputSchema": {"type": "object"}}]
    with caplog.at_level(logging.DEBUG, logger="codemode"):
        servers = await McpServers.start(_raw(tmp_path, tools, "--banner"))
    try:
        assert servers.servers == ["raw"], servers.problems
    finally:
        await servers.aclose()
    said = [r for r in caplog.records if "wrote what is not an MCP message" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING, logging.DEBUG]
    message = said[0].getMessage()
    assert "\n" not in message and message.startswith("MCP server 'raw' wrote")
    assert "'Starting server v1.0 ...'" in message and "its logs go to stderr" in message


async def test_a_server_of_a_protocol_version_the_sdk_does_not_speak_is_named(
    tmp_path: Path,
) -> None:
    """A server that answers initialize with a protocol version the SDK does not speak: the
    problem says it answered, and what with (it read "cannot connect ... RuntimeError",
    which sent its owner to the network)."""
    problem = await _raw_problem(tmp_path, "[]", "--old-protocol")
    assert problem == (
        f"MCP server 'raw': answered initialize in a way code mode cannot use ({sys.executable} "
        "...): Unsupported protocol version from the server: 1999-01-01; update the server or "
        "leave it out of the config"
    ), problem


async def test_an_answer_that_cannot_be_read_is_named_at_once(tmp_path: Path) -> None:
    """An answer the SDK cannot parse (nested past its parser's bound) is dropped by the
    SDK, so the server seemed not to answer: the listing waited out initTimeout, and a call
    its timeout, then said it "timed out ... may or may not have taken effect". The request
    it answers fails at once, saying what could not be read, as over HTTP. So does one
    nested past Python's own parser too (5,000 deep), whose id was not found: it waited out
    the call's timeout."""
    deep = '{"type": "object", "properties": {"x": ' * 300 + "{}" + "}}" * 300
    tools = f'[{{"name": "deep", "inputSchema": {deep}}}]'
    problem = await _raw_problem(tmp_path, tools, initTimeout=30)
    assert "its answer to tools/list is not MCP" in problem, problem
    assert "recursion limit exceeded" in problem and "fix the server" in problem, problem
    listed = [
        {"name": name, "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}}
        for name in ("deep", "deeper", "scalar")
    ]
    servers = await McpServers.start(_raw(tmp_path, listed, timeout=30))
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    said = {}
    try:
        for name in ("deep", "deeper", "scalar"):
            code = (
                f"try {{ return await tools.raw__{name}({{}}); }} catch (e) {{ return e.message; }}"
            )
            said[name] = (await asyncio.wait_for(engine.run_code(code), 60)).value
    finally:
        await engine.aclose()
    for name in ("deep", "deeper"):
        assert said[name].startswith(
            "the MCP server 'raw' answered the call with no JSON-RPC message (Invalid JSON: "
            "recursion limit exceeded"
        ), said
    # What is wrong with it as an answer, not the first problem of a union of four kinds
    # ("JSONRPCRequest.method", a place without what is wrong there).
    assert said["scalar"] == (
        "the MCP server 'raw' answered the call with no JSON-RPC message (result: Input "
        "should be a valid dictionary)"
    ), said


def _read_in_a_thread(line: bytes) -> object:
    """``_parsed(line)`` in a thread, so a read that takes minutes fails the test, not
    hangs it (the thread is a daemon, left to end on its own)."""
    import threading

    from mcp.shared.message import SessionMessage

    from engine.mcp._stdio import _parsed

    got: list[object] = []
    reading = threading.Thread(
        target=lambda: got.append(_parsed(line, types, SessionMessage)), daemon=True
    )
    reading.start()
    reading.join(60)
    assert got, "reading one line took over a minute"
    return got[0]


def test_the_id_of_an_answer_nested_past_every_parser_is_read_at_its_ends_alone() -> None:
    """An answer nested past Python's parser too is looked for its id at its two ends: the
    parse stops where it nests, so what follows is unchecked, and reading it by hand took
    145 s on a tail of 80,000 escaped quotes in an unclosed string (the event loop frozen
    meanwhile). An id is read exactly or not at all: a long one was cut to 64 digits, a
    different id."""
    deep = b"[" * 2000
    hostile = b'{"jsonrpc":"2.0","id":1,"result":' + deep + b'"' + b'\\"' * 80_000
    answer = _read_in_a_thread(hostile)
    assert answer.message.id == 1, answer  # type: ignore[attr-defined]
    assert "recursion limit exceeded" in answer.message.error.message  # type: ignore[attr-defined]
    # The TypeScript SDK writes the id last.
    long_id = int("7" * 80)
    tail = b'{"jsonrpc":"2.0","result":' + deep + b"]" * 2000 + b', "id": %d}' % long_id
    assert _read_in_a_thread(tail).message.id == long_id  # type: ignore[attr-defined]
    for unknown in (
        b'{"jsonrpc":"2.0","result":' + deep + b', "id": ' + b"1" * 5000 + b"}",  # too long
        b'{"jsonrpc":"2.0","id":"1","result":' + deep,  # not an integer
        b'{"jsonrpc":"2.0","method":"m","id":1,"params":' + deep,  # a request
    ):
        assert isinstance(_read_in_a_thread(unknown), ValueError), unknown[:40]


async def test_a_notification_that_breaks_mcp_is_one_line_naming_the_server(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK logs a notification it cannot read with a traceback of its own code, and
    names no server: it is one line, naming the server and what is wrong."""
    listed = [
        {"name": "noisy", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}}
    ]
    servers = await McpServers.start(_raw(tmp_path, listed))
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    try:
        with caplog.at_level(logging.WARNING):
            result = await asyncio.wait_for(
                engine.run_code("return await tools.raw__noisy({})"), 60
            )
    finally:
        await engine.aclose()
    assert result.value == {"called": "noisy", "arguments": {}}, result.text
    lines = [r.getMessage() for r in caplog.records if "notification" in r.getMessage()]
    assert lines == [
        "MCP server 'raw': Failed to validate notification: notifications/message: "
        "params.level: Input should be 'alert', 'critical', 'debug', 'emergency', 'error', "
        "'info', 'notice' or 'warning'"
    ], lines
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


async def test_an_answer_with_bytes_that_are_no_utf8_is_read(tmp_path: Path) -> None:
    """An answer whose text holds a byte that is no UTF-8 (a file's Latin-1 text, sent as it
    is) reads it as U+FFFD, as a lone surrogate is read: the line was dropped, and the call
    waited out its timeout, then said it may or may not have taken effect."""
    listed = [
        {"name": "latin", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}}
    ]
    servers = await McpServers.start(_raw(tmp_path, listed, timeout=30))
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    try:
        result = await asyncio.wait_for(engine.run_code("return await tools.raw__latin({})"), 60)
    finally:
        await engine.aclose()
    assert result.value == "caf\ufffd", result.text


async def test_closing_does_not_wait_for_a_server_being_restarted(tmp_path: Path) -> None:
    """A server that dropped is restarted; closing meanwhile ends the restart at once, not
    when its initTimeout (an hour here) has passed, and leaves nothing running."""
    servers = await McpServers.start(_lab(tmp_path, initTimeout=3600))
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    try:
        (tmp_path / "mute").write_text("")  # the restart never answers
        result = await engine.run_code(
            "try { await tools.lab__crash({}); } catch (e) { return e.message; }"
        )
        assert "closed its connection during the call of 'crash'" in result.value
        while not (tmp_path / "muted").exists():
            await asyncio.sleep(0.05)
    finally:
        async with asyncio.timeout(60):  # a backstop: it used to wait the hour
            await engine.aclose()
    assert not [
        p for p in psutil.Process().children(recursive=True) if str(LAB) in " ".join(p.cmdline())
    ]


def test_a_cwd_that_is_no_directory_is_named_not_the_command() -> None:
    """The OS says "no such file" for a missing cwd as for a missing command."""
    from engine.mcp._upstream import _describe

    specs, problems = parse_servers(
        {"mcpServers": {"x": {"command": sys.executable, "cwd": "/nonexistent/dir"}}}
    )
    assert not problems
    said = _describe(FileNotFoundError(2, "No such file or directory"), specs[0])
    assert (
        said == f"cannot start {sys.executable!r}: its \"cwd\" '/nonexistent/dir' is no directory"
    )
    specs, _ = parse_servers({"mcpServers": {"x": {"command": "no-such-command-here"}}})
    said = _describe(FileNotFoundError(2, "No such file or directory"), specs[0])
    assert "no such command" in said


async def test_a_command_that_cannot_be_run_says_why_it_cannot_start(tmp_path: Path) -> None:
    """A script with no "#!" line, a directory: each is named as a command that cannot start
    and why (the first read "cannot connect ... OSError: [Errno 8] Exec format error")."""
    script = tmp_path / "server.sh"
    script.write_text("echo hi\n")
    script.chmod(0o755)
    servers = await McpServers.start(
        {"mcpServers": {"s": {"command": str(script)}, "d": {"command": str(tmp_path)}}}
    )
    try:
        said = {p.server: p.message for p in servers.problems}
    finally:
        await servers.aclose()
    assert said == {
        "s": f"cannot start {str(script)!r}: it is no program this system runs; give a script "
        'a "#!" line, or its interpreter as "command" and the script in "args"',
        "d": f"cannot start {str(tmp_path)!r}: it is a directory, not a program",
    }


async def test_a_call_to_a_server_that_cannot_reconnect_says_it_was_not_sent(
    tmp_path: Path,
) -> None:
    """A server that crashed and will not start again: a call waits for it at most half its
    own timeout, then fails saying it was not sent (it waited out the tool's timeout and
    said the call "may or may not have taken effect")."""
    tools = _read_only("crash", "echo")
    (tmp_path / "tools.json").write_text(json.dumps(tools))
    once = tmp_path / "once.sh"
    once.write_text(
        f"#!/bin/sh\nif [ -e {tmp_path}/started ]; then exit 7; fi\ntouch {tmp_path}/started\n"
        f"exec {sys.executable} {RAW} {tmp_path / 'tools.json'}\n"
    )
    once.chmod(0o755)
    servers = await McpServers.start({"mcpServers": {"raw": {"command": str(once), "timeout": 4}}})
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    try:
        crashed = await engine.run_code(
            "try { await tools.raw__crash({}) } catch (e) { return e.message }"
        )
        assert "MCP server 'raw'" in crashed.value, crashed.text
        result = await asyncio.wait_for(
            engine.run_code("try { await tools.raw__echo({}) } catch (e) { return e.message }"),
            30,
        )
        assert "the MCP server 'raw' is not connected" in result.value, result.text
        assert "so the call was not sent" in result.value and "timed out" not in result.value
    finally:
        await engine.aclose()


async def test_a_call_no_timeout_bounds_is_bounded_by_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that never answers a call, with no "timeout" in its config and no
    call_timeout in the engine: the call waited for ever, and its script with it. It fails
    at the default bound (here made short), saying so; a timeout the config sets stands."""
    from engine.mcp import _config

    monkeypatch.setattr(_config, "DEFAULT_CALL_TIMEOUT", 1.0)
    servers = await McpServers.start(_lab(tmp_path))
    engine = CodeMode(mcp=servers, runner=InProcessRunner(), type_check="off")
    try:
        async with asyncio.timeout(60):
            result = await engine.run_code(
                "try { await tools.lab__hang({}); } catch (e) { return e.message; }"
            )
        assert result.value == (
            "the MCP server 'lab' did not answer the call of 'hang' within 1 s, the most a "
            'call to an MCP server waits unless its config says ("timeout"), so it may or may '
            "not have taken effect; check before calling it again"
        ), result.text
    finally:
        await engine.aclose()


async def test_a_host_stalled_past_a_calls_default_bound_takes_its_answer(
    tmp_path: Path,
) -> None:
    """The host stops (its event loop does not run, as under SIGSTOP) past the default bound
    of a call to an MCP server as it makes the call: once it runs again, the call takes the
    server's answer (it failed at once, 'the MCP server 'lab' did not answer the call of
    'add' within 1 s ... so it may or may not have taken effect')."""
    servers = await McpServers.start(_lab(tmp_path))
    try:
        upstream = servers._upstreams["lab"]
        asyncio.get_running_loop().call_soon(time.sleep, 1.0 + 2 * STALLED_S)
        result = await upstream.call("add", {"a": 1, "b": 2}, within=1.0)
        assert unwrap(result) == {"result": 3}
    finally:
        await servers.aclose()


async def test_a_server_that_refuses_its_listing_is_named_for_it(tmp_path: Path) -> None:
    """A server that connects, then answers tools/list with an error (expired credentials):
    the problem said "cannot connect", which sent its owner to the network; it says which
    request the server refused and what it said."""
    problem = await _raw_problem(tmp_path, "[]", "--refuse-list")
    assert problem.startswith("MCP server 'raw': answered tools/list with an error ("), problem
    assert problem.endswith(
        "): license expired, run foo login; fix what it says (its setup, its credentials) or "
        "leave it out of the config"
    ), problem
    # One without tools/list (of resources or prompts alone) has nothing to fix: it said to
    # fix "its setup, its credentials".
    none = await _raw_problem(tmp_path, "[]", "--no-tools")
    assert none.startswith("MCP server 'raw': offers no tools ("), none
    assert none.endswith(
        "): it has no tools/list (Method not found), and code mode uses an MCP server's tools "
        "alone; leave it out of the config"
    ), none
