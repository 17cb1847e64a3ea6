"""``codemode mcp serve``: the command line of the MCP server (see ``engine.mcp._serve``).

    codemode mcp serve [--config mcp.json] [--config codemode.toml] [--upstream CMD]...
                       [--server NAME]... [--tools tools.py] [--http HOST:PORT]
                       [--data-dir DIR] [--no-elicitation] [-v]

``--config`` takes an ``mcpServers`` JSON file (``.json``) or a ``codemode.toml`` (its
``[codemode.mcpServers.*]`` tables and engine settings), and may be given more than once.
``--upstream "npx -y @modelcontextprotocol/server-memory"`` adds a stdio server, named after
its package (``memory``) unless written ``NAME=COMMAND``. ``--server`` serves only the
servers named. A server that cannot be used is one line on stderr naming it; the others
serve. Over stdio the MCP messages use stdout, so everything else goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import logging
import re
import shlex
import signal
import sys
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, NoReturn

from engine._aside import output_aside
from engine._codemode import CodeMode
from engine._config import Config, build_runner
from engine._errors import CodeModeError, ConfigError, ToolDefinitionError
from engine._loading import load_tools
from engine._stopping import (
    INTERRUPT_GRACE,
    INTERRUPTED,
    TERMINATED,
    Stopped,
    end_children,
    give_up,
    stoppable_inputs,
)
from engine._tools import Tool
from engine.log import LogStore, MemoryStore, SqliteStore
from engine.mcp._config import ServerProblem, ServerSpec, load_servers_file, parse_servers
from engine.mcp._serve import CodeModeServer
from engine.mcp._servers import McpServers
from runner import parse_address

_LAUNCHERS = {"npx", "uvx", "node", "python", "python3", "bunx", "pnpm", "deno"}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="codemode mcp serve",
        description="Serve code mode to an MCP client: one run_code tool over your MCP servers.",
    )
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        help="an mcpServers .json file or a codemode.toml (repeatable)",
    )
    parser.add_argument(
        "--upstream",
        action="append",
        default=[],
        metavar="[NAME=]COMMAND",
        help="a stdio MCP server to run, as a command line (repeatable)",
    )
    parser.add_argument(
        "--server", action="append", default=None, metavar="NAME", help="serve only these"
    )
    parser.add_argument("--tools", help="a .py file of tools to serve beside the MCP servers")
    parser.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP, not stdio")
    parser.add_argument("--data-dir", help="where the session log lives (default: in memory)")
    parser.add_argument(
        "--no-elicitation",
        action="store_true",
        help="never ask for approvals through the client; pause the script instead",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log each script step")
    return parser


def main(argv: list[str]) -> int:
    """Run ``codemode mcp ARGV``; the exit code."""
    if not argv or argv[0] != "serve":
        print("usage: codemode mcp serve [--config mcp.json] ... (see --help)", file=sys.stderr)
        return 2
    args = _parser().parse_args(argv[1:])
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return asyncio.run(_until_signal(_serve(args)))
    except CodeModeError as e:
        print(f"codemode: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


async def _serve(args: argparse.Namespace) -> int:
    # Over stdio, stdout is the MCP client's: a tools file that prints as it is imported
    # wrote a line there that is no MCP message (the SDK diverts stdout so only as it serves).
    aside = output_aside() if not args.http else contextlib.nullcontext()
    # A read or an import that waits ends at SIGTERM or Ctrl-C.
    with stoppable_inputs(), aside:
        config, toml, specs, problems = _read_configs(args)
        host_tools: list[Tool] = []
        namespace: dict[str, object] = {}
        if args.tools:
            host_tools, namespace = load_tools(args.tools)
    servers = await start_servers(specs, problems=problems, only=args.server)
    if not servers.servers and not host_tools:
        await servers.aclose()
        raise ConfigError(
            "no tools to serve: no MCP server could be used and no --tools file was given"
        )
    config = config.with_data_dir(args.data_dir)
    try:
        engine = CodeMode(
            host_tools,
            runner=build_runner(config.runner),
            store=config.store.build(config.data_dir),
            data_dir=config.data_dir,
            limits=config.limits,
            context=namespace.get("CONTEXT"),
            queue_timeout=config.queue_timeout,
            type_check=config.type_check,
            language=config.language,
            lease_ms=config.store.lease_ms,
            mcp=servers,
        )
    except ToolDefinitionError as e:
        await servers.aclose()
        raise ConfigError(f"{args.tools or 'the tools'}: {e}") from None
    server = CodeModeServer(
        engine,
        elicitation=not args.no_elicitation,
        log_flags=_log_flags(engine.store, toml, args.data_dir),
    )
    sources = [f"MCP servers {', '.join(servers.servers)}"] if servers.servers else []
    if args.tools:
        count = len(host_tools)
        sources.append(f"{count} tool{'s' if count != 1 else ''} of {args.tools}")
    names = " and ".join(sources)
    try:
        if args.http:
            host, port = _address(args.http)

            def ready(url: str) -> None:
                exposed = _exposure(host)  # once it listens: an address that is none says so
                if exposed is not None:
                    print(f"codemode: warning: {exposed}", file=sys.stderr)
                print(f"codemode: serving MCP at {url} over {names}", file=sys.stderr)
                sys.stderr.flush()

            await server.run_http(host, port, on_ready=ready)
        else:
            print(f"codemode: serving MCP on stdio over {names}", file=sys.stderr)
            await server.run_stdio()
    finally:
        await engine.aclose()
    return 0


async def _until_signal(serving: Coroutine[Any, Any, int]) -> int:
    """Run the command until it ends, or until SIGTERM/SIGINT cancels it (0 then): it closes
    what it started in order, from its start on (a server still starting included). A close
    that has not ended :data:`INTERRUPT_GRACE` seconds after the signal (a sync tool that
    never returns keeps its thread, which the exit waits for), or a second signal, ends the
    processes this one started and exits at once, as the CLI's commands do."""
    task = asyncio.ensure_future(serving)
    loop = asyncio.get_running_loop()
    signalled = False

    def stop(code: int) -> None:
        nonlocal signalled
        if signalled:
            give_up(code)
        signalled = True
        timer = threading.Timer(INTERRUPT_GRACE, give_up, (code,))
        timer.daemon = True
        timer.start()
        task.cancel()

    loop.add_signal_handler(signal.SIGTERM, stop, TERMINATED)
    loop.add_signal_handler(signal.SIGINT, stop, INTERRUPTED)
    try:
        return await task
    except Stopped:  # while it read its configs and tools: nothing started yet
        return 0
    except asyncio.CancelledError:
        if not task.cancelled():
            raise
        return 0
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        if signalled:
            # The signal cancelled the close wherever it was: what it had not ended yet (an
            # upstream server that ignores its stdin's end and SIGTERM, in a session of its
            # own) would outlive this process.
            end_children()


def _read_configs(
    args: argparse.Namespace,
) -> tuple[Config, str | None, list[ServerSpec], list[ServerProblem]]:
    """The config, the codemode.toml it was read from (if any), the servers and problems."""
    config = Config()
    specs: list[ServerSpec] = []
    problems: list[ServerProblem] = []
    # Where each server came from, by its name: a name given twice names both places (a
    # codemode.toml in the current directory is read without being named).
    origins: dict[str, str] = {}

    def add(found: list[ServerSpec], origin: str) -> None:
        for spec in found:
            if spec.name in origins:
                raise ConfigError(
                    f"two MCP servers are named {spec.name!r}: one in {origins[spec.name]}, one "
                    f"in {origin}; rename one (an --upstream is named as NAME=COMMAND)"
                )
            origins[spec.name] = origin
            specs.append(spec)

    tomls = [p for p in args.config if Path(p).suffix == ".toml"]
    if len(tomls) > 1:
        raise ConfigError(f"give one codemode.toml, not {len(tomls)}")
    if not tomls and Path("codemode.toml").is_file():
        tomls = ["codemode.toml"]
    if tomls:
        config = Config.load(tomls[0])
        found, problems = toml_servers(config, tomls[0])
        add(found, tomls[0])
    for path in args.config:
        suffix = Path(path).suffix
        if suffix == ".toml":
            continue
        if suffix != ".json":
            raise ConfigError(f"--config {path}: give an mcpServers .json file or a codemode.toml")
        found, bad = load_servers_file(path)
        add(found, path)
        problems += bad
    for text in args.upstream:
        add([_upstream(text)], "an --upstream")
    return config, tomls[0] if tomls else None, specs, problems


def _log_flags(store: LogStore, toml: str | None, data_dir: str | None) -> str | None:
    """The flags that make another ``codemode`` process (``approve``, ``reject``) reach
    ``store``, the session log this server was given by ``toml`` and ``--data-dir``, as
    absolute paths, so they work from any directory; None when the log is in memory, which
    no other process can reach."""
    if isinstance(store, MemoryStore):
        return None
    flags: list[str] = []
    if toml is not None:  # the store's settings (a PostgreSQL DSN, say) and its data_dir
        flags += ["--config", str(Path(toml).absolute())]
    if data_dir is not None and isinstance(store, SqliteStore):
        flags += ["--data-dir", str(Path(data_dir).absolute())]
    return shlex.join(flags)


def toml_servers(config: Config, path: str | Path) -> tuple[list[ServerSpec], list[ServerProblem]]:
    """The servers of the ``[codemode.mcpServers.NAME]`` tables of ``config``, read from the
    codemode.toml at ``path`` (a relative ``cwd`` is read from the file's folder), and the
    problem of each table that cannot be used. Every command that builds an engine reads
    its servers here."""
    if not config.mcp_servers:
        return [], []
    return parse_servers(config.mcp_servers, where=str(path), base=Path(path).absolute().parent)


async def start_servers(
    specs: list[ServerSpec],
    *,
    problems: list[ServerProblem] | None = None,
    only: list[str] | None = None,
) -> McpServers:
    """Start ``specs`` (``only`` these names, when given) with their stderr on ours, and say
    on stderr, one line each, which servers cannot be used while the others serve. The
    caller closes what this returns (``CodeMode.aclose`` does, once it holds it)."""
    servers = await McpServers.start(
        specs, only=only, errlog=sys.stderr, problems=problems or [], log_problems=False
    )
    for problem in servers.problems:
        print(f"codemode: {problem}", file=sys.stderr)
    return servers


def _upstream(given: str) -> ServerSpec:
    name = None
    text = given
    head, sep, rest = text.partition("=")
    if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", head):
        if not rest.strip():  # it was taken for a command named "a=", which no PATH has
            raise ConfigError(
                f"--upstream {given!r}: give the command after the name, as NAME=COMMAND"
            )
        name, text = head, rest
    try:
        words = shlex.split(text)
    except ValueError as e:  # named as given, its name too: that is what the user finds
        raise ConfigError(f"--upstream {given!r}: {e}") from None
    if not words:
        raise ConfigError("--upstream needs a command")
    return ServerSpec(name=name or _name_of(words), command=words[0], args=tuple(words[1:]))


def _name_of(words: list[str]) -> str:
    """A server's name from its command line: its package or program, without the
    ``mcp-server-``/``server-`` prefix (``npx -y @modelcontextprotocol/server-memory``:
    ``memory``)."""
    candidates = words
    if Path(words[0]).name in _LAUNCHERS:
        candidates = [w for w in words[1:] if not w.startswith("-")] or words
    base = candidates[0].rsplit("/", 1)[-1].split("@", 1)[0]
    base = re.sub(r"\.(py|js|mjs|ts)$", "", base)
    base = re.sub(r"^(mcp[-_]server[-_]|server[-_]|mcp[-_])", "", base)
    base = re.sub(r"[-_]mcp$", "", base)
    return re.sub(r"[^A-Za-z0-9_]+", "_", base).strip("_") or "server"


def _exposure(host: str) -> str | None:
    """The warning for serving at ``host`` when other machines may reach it (not loopback):
    the server asks no client who it is, and a client answers the approvals of its own
    scripts' calls."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: only localhost is known to stay on this machine
        loopback = host.lower() == "localhost"
    if loopback:
        return None
    return (
        f"--http {host}: other machines may reach this address, and the server asks no one "
        "who they are: whoever reaches it runs scripts with these tools and approves their "
        "calls through elicitation; serve on 127.0.0.1 (for others, behind a proxy that "
        "authenticates them)"
    )


def _address(text: str) -> tuple[str, int]:
    """``--http``'s HOST:PORT (``[::1]:8765``, as URLs write an IPv6 address; ``:8765`` on
    127.0.0.1), read as the runner's addresses are (a port of ASCII digits, 0 to 65535:
    str.isdigit took '²', which int() refused with a traceback)."""
    host, sep, _ = text.rpartition(":")
    try:
        return parse_address(text if host or not sep else "127.0.0.1" + text)
    except ValueError:
        raise ConfigError(
            f"--http {text[:80]!r}: give HOST:PORT, such as 127.0.0.1:8765 (a port is 0 to 65535)"
        ) from None
