"""The ``codemode`` command.

    codemode run SCRIPT.js|SCRIPT.py [--tools TOOLS] [--language L] [--json] [--events FILE] ...
    codemode resume SCRIPT_ID [--tools TOOLS] --data-dir DIR [--approve CALL_ID] [--reject CALL_ID]
    codemode scripts [--status STATUS] [--data-dir DIR | --config codemode.toml]
    codemode show SCRIPT_ID [--data-dir DIR | --config codemode.toml]
    codemode approve SCRIPT_ID CALL_ID / reject SCRIPT_ID CALL_ID [--message TEXT]
    codemode hold SCRIPT_ID / release SCRIPT_ID
    codemode worker --tools TOOLS --config codemode.toml
    codemode describe --tools TOOLS [--language L] [--json [--format anthropic|openai_chat|...]]
    codemode search QUERY --tools TOOLS [--language L] [--limit N] [--json]
    codemode runner serve --listen HOST:PORT ...
    codemode mcp serve [--config mcp.json] [--upstream CMD] [--tools TOOLS] [--http HOST:PORT]
    codemode version

``TOOLS`` is a Python file of tools or a JSON file of MCP tool definitions; the commands that
build an engine (run, resume, worker, describe, search) add the tools of the MCP servers of
codemode.toml's ``[codemode.mcpServers.NAME]`` tables (``--tools`` may then be left out;
``run`` and ``resume`` without either run a script with no tools),
started as ``codemode mcp serve`` starts them and ended however the command ends. A script
may be a bare body, a Markdown code fence, or an ``async () => { ... }`` function; ``-`` reads
stdin.
``--language`` (``javascript`` or ``python``) is the scripts' language; ``run`` takes a
``.py`` script as Python, and otherwise the config's ``language`` (JavaScript by default).

Exit codes: 0 finished, 1 the script failed, 2 a mistake in the command, its files or its
config (one line on stderr naming it and the fix, never a traceback), 3 paused, 4 another host
drives the script, 75 no runner took a step in time or the session log did not answer (the
script waits in the log: resume it later), 74 its output or its events could not be written
(a full disk), 130 interrupted, 141 its reader left (``| head``:
it ends quietly), 143 terminated.

While ``run`` or ``resume`` drives a script, a terminal on stderr shows a live line (steps,
calls, elapsed time); ``--events FILE`` writes each event as a JSON line (``-``: stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import errno
import functools
import logging
import os
import shlex
import signal
import sys
import sysconfig
import threading
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Mapping
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

import orjson

from engine import log
from engine._aside import output_aside
from engine._codemode import CodeMode, RunResult, check_ids
from engine._config import Config, StoreConfig, build_runner, not_a_directory
from engine._errors import (
    CallNotWaiting,
    CodeModeError,
    ConfigError,
    StepUnavailable,
    StoreUnavailable,
    ToolDefinitionError,
)
from engine._events import Listener
from engine._files import Attachment
from engine._loading import load_tools
from engine._progress import EventLines, ProgressLine
from engine._render import ESCAPES, escaped
from engine._search import MAX_LIMIT, MAX_QUERY
from engine._source import MAX_CODE_BYTES
from engine._stopping import (
    INTERRUPT_GRACE,
    INTERRUPTED,
    TERMINATED,
    Stopped,
    give_up,
    stoppable_inputs,
)
from engine._tools import Tool, described
from engine.adapters import FORMATS
from engine.languages import LANGUAGES
from engine.log import LogStore, ScriptRecord, SqliteStore
from engine.log._rules import not_waiting
from runner import FileReader, ScriptRunner, Step

if TYPE_CHECKING:
    from engine.mcp import McpServers
from sandbox.protocol import Script, size_text
from sandbox.replay import source_lines

# A script's status as the exit code of `run` and `resume` (the README's table says each).
EXIT_CODES = {"finished": 0, "failed": 1, "paused": 3, "elsewhere": 4}
MISTAKE = 2
# The output (or the --events lines) could not be written: a full disk (sysexits' EX_IOERR).
OUTPUT_FAILED = os.EX_IOERR
# No runner took a step in time, or the session log did not answer (sysexits'
# EX_TEMPFAIL): the same command may work later.
UNAVAILABLE = os.EX_TEMPFAIL


def _interruptible(command: Coroutine[Any, Any, int]) -> int:
    """``asyncio.run(command)``, where Ctrl-C (SIGINT) or SIGTERM (what a service manager or
    ``kill`` sends) cancels the command, so it ends what it started, and a cleanup that then
    hangs cannot keep the process: see :data:`INTERRUPT_GRACE`. Exits 130 after SIGINT and
    143 after SIGTERM, as a shell reports a process those signals ended."""

    sigint = False

    async def guarded() -> int:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        terminated = False

        def bounded(code: int) -> None:
            timer = threading.Timer(INTERRUPT_GRACE, give_up, (code,))
            timer.daemon = True
            timer.start()

        def on_sigterm() -> None:
            nonlocal terminated
            if terminated:  # a second SIGTERM: do not wait for the cleanup
                give_up(TERMINATED)
            terminated = True
            bounded(TERMINATED)
            task.cancel()

        cancel = signal.getsignal(signal.SIGINT)  # asyncio's: it cancels this task
        if callable(cancel):

            def interrupted(signum: int, frame: Any) -> None:
                nonlocal sigint
                sigint = True
                bounded(INTERRUPTED)
                signal.signal(signal.SIGINT, lambda *_: give_up(INTERRUPTED))
                cancel(signum, frame)

            signal.signal(signal.SIGINT, interrupted)
        # A command that handles SIGTERM itself (the worker's graceful stop) replaces this.
        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
        try:
            return await command
        except Stopped as e:  # while it read what it was given: nothing started to end
            print(_STOPPED_BY[e.code], file=sys.stderr)
            return e.code
        except asyncio.CancelledError:
            if terminated:
                print(_STOPPED_BY[TERMINATED], file=sys.stderr)
                return TERMINATED
            raise

    try:
        return asyncio.run(guarded())
    except SystemExit as e:
        # Raised on the event loop by the host's own code (an async tool's handler calling
        # sys.exit(), which asyncio lets end the loop): not an exit code of ours, whose
        # meanings it would borrow (4 is "another host drives the script") without a word.
        code = e.code if e.code is None or isinstance(e.code, int) else type(e.code).__name__
        print(
            f"codemode: the host's code raised SystemExit({code}) on the event loop (an async "
            "tool that calls sys.exit()), which ends the command; the log keeps what the "
            "script did: make the tool raise an error instead, then resume the script",
            file=sys.stderr,
        )
        return MISTAKE
    except KeyboardInterrupt as e:
        if sigint or not _raised_by_host_code(e):
            raise
        # As SystemExit above: an async tool that raised it ended the loop, and the command
        # said "interrupted (Ctrl-C)", exit 130, with no Ctrl-C pressed.
        print(
            "codemode: the host's code raised KeyboardInterrupt on the event loop (an async "
            "tool that raises it), which ends the command; the log keeps what the script "
            "did: make the tool raise an error instead, then resume the script",
            file=sys.stderr,
        )
        return MISTAKE


_STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()


def _raised_by_host_code(error: BaseException) -> bool:
    """Whether ``error`` was raised in code outside Python's own library: a host's handler,
    not Python's handler of a SIGINT that came before the command's own was in place."""
    frames = traceback.extract_tb(error.__traceback__)
    if isinstance(error.__context__, asyncio.CancelledError) or not frames:
        return False  # asyncio.run's answer to a SIGINT: it cancelled the command
    return not Path(frames[-1].filename).resolve().is_relative_to(_STDLIB)


# What the command says when a signal ended it, by its exit code.
_STOPPED_BY = {
    INTERRUPTED: "codemode: interrupted (Ctrl-C)",
    TERMINATED: "codemode: terminated (SIGTERM)",
}


def _version() -> str:
    try:
        return metadata.version("codemode")
    except metadata.PackageNotFoundError:
        return "0+unknown"


class _Parser(argparse.ArgumentParser):
    """argparse, but a mistake is one line naming it and where help is, exit code 2."""

    # The parsers of the commands, by name (the top parser's).
    commands: Mapping[str, argparse.ArgumentParser]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = {}

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        """argparse's, but an option the command does not take is named by the command's
        parser, whose help lists the options it takes (argparse's top parser named it, and
        pointed at `codemode --help`, which lists the commands)."""
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            by = self.commands.get(getattr(parsed, "command", None) or "", self)
            by.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed


# What --json prints for approve, reject, hold and release.
ANSWER_JSON = (
    'print what was done as a JSON line: {"command", "script_id", "call_id" (approve, '
    'reject), "changed" (false: held, or released, already)}'
)

# `scripts --limit`: no listing a person reads comes near it, and the store's LIMIT takes it.
MAX_LISTED = 1_000_000


def _from_1_to(high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from 1 to ``high``, or a one-line mistake."""

    def parse(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            number = 0
        if not 1 <= number <= high:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to {high:,}")
        return number

    return parse


def _query(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "the query is empty: give words that say what the tool does, or exact tool names"
        )
    if len(text) > MAX_QUERY:
        raise argparse.ArgumentTypeError(
            f"the query is {len(text):,} characters, over the {MAX_QUERY:,} a query may have"
        )
    return text


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="codemode",
        description=(
            "Run model-written JavaScript or Python that calls your tools, in a confined sandbox."
        ),
    )
    parser.add_argument("--version", action="version", version=f"codemode {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    parser.commands = commands.choices

    def common(
        p: argparse.ArgumentParser,
        *,
        json: str | None = "print the whole result as JSON",
        tools: bool = True,
    ) -> None:
        """The options every command takes; ``json``: what --json prints (None: no --json,
        for a command that prints no result); ``tools``: whether it takes --tools (the
        commands on the log alone run no tool, and one they took would be ignored)."""
        if tools:
            p.add_argument(
                "--tools",
                help="a .py file of tools or a .json file of MCP tools (worker, describe and "
                "search need it unless codemode.toml has [codemode.mcpServers.NAME]; run and "
                "resume without either run a script with no tools)",
            )
        p.add_argument("--config", help="a codemode.toml (default: ./codemode.toml if present)")
        p.add_argument(
            "--data-dir",
            help="the directory of the session log (default: codemode.toml's store; run keeps "
            "it in memory without one, and the commands on the log need one)",
        )
        if json is not None:
            p.add_argument("--json", action="store_true", help=json)
        p.add_argument("-v", "--verbose", action="store_true", help="log each script step")

    def language(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--language",
            choices=LANGUAGES,
            help="the language scripts are written in (default: the config's, javascript)",
        )

    def events(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--events",
            metavar="FILE",
            help="write each event (steps, calls, pauses, the end) as a JSON line; - for stderr",
        )

    run = commands.add_parser("run", help="run a script and print what the model would see")
    run.add_argument("script", help="the script file, or - for stdin")
    run.add_argument(
        "--tenant",
        default="default",
        help="the tenant the script runs for: its tools see it as ctx.tenant, the limits are "
        "asked for it, and scripts lists it (default: default)",
    )
    run.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="[ID=]PATH",
        help="a file the script reads (files.text, files.csv, ...) by the file's name, or by "
        "ID with ID=PATH; again for more files",
    )
    common(run)
    language(run)
    events(run)

    resume = commands.add_parser("resume", help="continue a paused script from its log")
    resume.add_argument("script_id")
    resume.add_argument("--approve", action="append", default=[], metavar="CALL_ID")
    resume.add_argument("--reject", action="append", default=[], metavar="CALL_ID")
    resume.add_argument("--message", default="", help="the reason given with --reject")
    common(resume)
    events(resume)

    scripts = commands.add_parser("scripts", help="list the scripts in the session log")
    scripts.add_argument(
        "--status", choices=["active", "paused", "finished", "failed"], help="only these"
    )
    scripts.add_argument(
        "--limit",
        type=_from_1_to(MAX_LISTED),
        default=100,
        help="at most this many, oldest first (default: %(default)s)",
    )
    common(scripts, tools=False)

    show = commands.add_parser("show", help="print one script: its code, calls and outcome")
    show.add_argument("script_id")
    common(show, tools=False)

    for verb, what in (("approve", "approve"), ("reject", "refuse")):
        answer = commands.add_parser(
            verb, help=f"{what} a call a paused script waits on (a worker or resume drives it on)"
        )
        answer.add_argument("script_id")
        answer.add_argument("call_id")
        if verb == "reject":
            answer.add_argument("--message", default="", help="the reason the script sees")
        common(answer, json=ANSWER_JSON, tools=False)

    for verb, what in (
        ("hold", "interrupt a script: no step runs and no call goes out until it is released"),
        ("release", "end a script's hold (resume it, or let a worker drive it on)"),
    ):
        held = commands.add_parser(verb, help=what)
        held.add_argument("script_id")
        common(held, json=ANSWER_JSON, tools=False)

    worker = commands.add_parser(
        "worker", help="drive scripts that wait for no one (after an approval lands anywhere)"
    )
    common(worker, json=None)

    describe = commands.add_parser("describe", help="print the run_code tool definition")
    describe.add_argument(
        "--format",
        choices=FORMATS,
        default="anthropic",
        help="the model API whose tool shape --json prints (default: anthropic)",
    )
    common(describe)
    language(describe)

    search = commands.add_parser("search", help="print what tools.tool_search answers")
    search.add_argument("query", type=_query)
    search.add_argument(
        "--limit", type=_from_1_to(MAX_LIMIT), default=8, help=f"tools to declare, 1 to {MAX_LIMIT}"
    )
    common(search)
    language(search)

    runner = commands.add_parser("runner", help="run scripts for engines on other machines")
    runner.add_argument(
        "runner_args", nargs=argparse.REMAINDER, help="serve --listen HOST:PORT ..."
    )

    mcp = commands.add_parser("mcp", help="code mode as an MCP server (mcp serve --help)")
    mcp.add_argument("mcp_args", nargs=argparse.REMAINDER, help="serve [--config mcp.json] ...")

    commands.add_parser("version", help="print the version")
    return parser


def _config_path(args: argparse.Namespace) -> str | None:
    if args.config is not None and not args.config.strip():  # "$CONFIG" unset: not ./
        raise ConfigError("--config is empty (an unset variable?): give the codemode.toml to read")
    if Path(str(args.config)).suffix.lower() == ".json":  # as `codemode mcp serve` takes one
        raise ConfigError(
            f"--config {args.config}: give a codemode.toml; an mcpServers .json file is for "
            "`codemode mcp serve --config`, and the other commands start the servers of "
            "[codemode.mcpServers.NAME] tables in codemode.toml"
        )
    if args.config:
        return str(args.config)
    if Path("codemode.toml").is_file():
        return "codemode.toml"
    return None


def _config(args: argparse.Namespace) -> Config:
    path = _config_path(args)
    with stoppable_inputs():  # a FIFO given as the config blocks its read
        config = Config.load(path) if path is not None else Config()
    return config.with_data_dir(getattr(args, "data_dir", None))


@contextlib.asynccontextmanager
async def _engine(
    args: argparse.Namespace,
    *,
    needs_runner: bool,
    config: Config | None = None,
    on_event: list[Listener] | None = None,
) -> AsyncIterator[tuple[CodeMode, TextIO]]:
    """The engine of a command: the ``--tools`` file's tools and those of the MCP servers
    of ``[codemode.mcpServers.NAME]`` in codemode.toml, started as ``codemode mcp serve``
    starts them. Closed on every way out (an error, Ctrl-C), which ends their processes.
    With it, the stream of the command's own output: while the engine is open, what is
    written to stdout (sys.stdout, descriptor 1) goes to stderr."""
    config = config or _config(args)
    with _host_prints_aside() as out:
        async with _engine_of(args, needs_runner, config, on_event) as engine:
            yield engine, out


@contextlib.contextmanager
def _host_prints_aside() -> Iterator[TextIO]:
    """While it lasts, what the host's code prints (a tools file as it is imported, a tool's
    debug line as it runs, a subprocess a tool runs) goes to stderr: stdout is the command's
    result, and a tool's print() landed among `run --json`'s JSON lines, or before `Script
    finished.` as if the script had printed it. Yields the stream of the command's own
    output (see :func:`output_aside`)."""
    with output_aside() as out:
        kept = sys.stdout
        terminal = sys.stderr is not None and sys.stderr.isatty()
        sys.stdout = _AfterTheLiveLine(sys.stderr) if terminal else sys.stderr
        try:
            yield out
        finally:
            for stream in (sys.stdout, sys.stderr):  # a line the host left without its break
                if stream is not None:
                    with contextlib.suppress(OSError, ValueError):
                        stream.flush()
            sys.stdout = kept


class _AfterTheLiveLine:
    """The host's sys.stdout while a command runs with stderr a terminal: each line the
    host's code prints clears stderr's live line (:class:`ProgressLine`) first, which a
    tool's print() was written onto the end of. A line is written whole, in one write, so
    the live line's redraw (on the event loop's thread) cannot fall inside it; text without
    its line break waits for it, or for a flush. The part of a line a flush wrote (a tool's
    ``print("working...", end="", flush=True)``) is written again with the rest if the live
    line was drawn over it since (else the rest goes on after it: a tool printing a dot at a
    time writes each once), and only its last row of the terminal (the rows above it stay
    on the screen). All else is stderr's own."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._pending = ""
        self._flushed = ""  # of the line being written: what a flush wrote of its last row
        self._seen = ProgressLine.drawn  # the live line's draws when this last wrote
        self._lock = threading.Lock()  # tools print from their threads

    def write(self, text: str) -> int:
        with self._lock:
            self._pending += text
            if "\n" in self._pending:
                lines, _, self._pending = self._pending.rpartition("\n")
                self._emit(lines + "\n")
        return len(text)

    def flush(self) -> None:
        with self._lock:
            if self._pending:
                flushed = self._flushed + self._pending
                self._emit(self._pending)
                # What a terminal shows of it: past a carriage return, the line was redrawn;
                # of a line longer than a row, the last row alone is the cursor's.
                flushed = flushed.rpartition("\r")[2]
                row = len(flushed) % self._columns() or min(len(flushed), self._columns())
                self._flushed = flushed[len(flushed) - row :]
                self._pending = ""
            self._stream.flush()

    def _emit(self, text: str) -> None:
        if self._flushed and ProgressLine.drawn == self._seen:
            self._stream.write(text)  # the part line is still there: the rest goes on
        else:
            self._stream.write("\r\x1b[K" + self._flushed + text)
        self._flushed = ""
        self._seen = ProgressLine.drawn

    def _columns(self) -> int:
        try:
            return max(os.get_terminal_size(self._stream.fileno()).columns, 1)
        except (AttributeError, OSError, ValueError):  # not a terminal after all
            return 80

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.asynccontextmanager
async def _engine_of(
    args: argparse.Namespace,
    needs_runner: bool,
    config: Config,
    on_event: list[Listener] | None,
) -> AsyncIterator[CodeMode]:
    tools: list[Tool] = []
    namespace: dict[str, Any] = {}
    if args.tools is not None:  # read before any server starts: a mistake here starts none
        with stoppable_inputs():  # its import may wait (for a server, a lock, input)
            tools, namespace = load_tools(args.tools)
        if needs_runner and all(t.handler is None and not t.client for t in tools):
            # Definitions alone: every call would fail for good in the log ("run by no
            # handler on this host"), a resumed script's included.
            held = "tool definitions without handlers" if tools else "no tools at all"
            raise ConfigError(
                f"{args.tools} holds {held}, enough for `describe` and `search` but not to "
                "run calls: give a .py file of tools, or the MCP servers as "
                "[codemode.mcpServers.NAME] tables in codemode.toml"
            )
    language = _language(args, config)
    runner: ScriptRunner = _NoRunner()
    if needs_runner:
        # Made and warmed before the MCP servers start: the fork server's start (about half a
        # second of CPU) overlaps theirs, and the reading and checking of the script.
        runner = build_runner(config.runner)
        runner.warm(language)
    servers: McpServers | None = None
    try:
        servers = await _mcp_servers(args, config)
        # A script may need no tools (it computes, or reads its --file attachments): `run`
        # runs it with none, and `resume` resumes it (one that waits on a tool is refused,
        # naming it). The other commands have nothing to do without tools.
        if servers is None and args.tools is None and args.command not in ("run", "resume"):
            raise ConfigError(
                "give --tools FILE (a .py file of tools or a .json file of MCP tools), or MCP "
                "servers as [codemode.mcpServers.NAME] tables in codemode.toml"
            )
        if servers is not None and not servers.servers and not tools:
            raise ConfigError("no tools: no MCP server could be used and no --tools file was given")
        if not needs_runner:  # describe, search: no script runs, so no log is opened or made
            config = dataclasses.replace(config, data_dir=None, store=StoreConfig("memory"))
        options = config.engine_options(runner=False)
        options["language"] = language
        engine = CodeMode(
            tools,
            context=namespace.get("CONTEXT"),
            worker=namespace.get("WORKER"),
            on_event=on_event,
            mcp=servers,
            runner=runner,
            **options,
        )
    except BaseException as e:
        # The engine that would have closed them was not made.
        if servers is not None:
            await servers.aclose()
        await runner.aclose()
        if isinstance(e, ToolDefinitionError):  # two tools of one name, a bad skill
            raise ConfigError(f"{args.tools or 'the MCP servers'}: {e}") from None
        raise
    try:
        yield engine
    finally:
        await engine.aclose()


async def _mcp_servers(args: argparse.Namespace, config: Config) -> McpServers | None:
    """The configured MCP servers, started; None when codemode.toml names none."""
    path = _config_path(args)
    if path is None or not config.mcp_servers:
        return None
    from engine.mcp._cli import start_servers, toml_servers

    specs, problems = toml_servers(config, path)
    return await start_servers(specs, problems=problems)


def _language(args: argparse.Namespace, config: Config) -> Any:
    given = getattr(args, "language", None)
    if given is not None:
        return given
    script = getattr(args, "script", "")
    if script.endswith(".py"):
        return "python"
    if script.endswith((".js", ".mjs", ".ts", ".mts")):
        return "javascript"  # the file says so, whatever the config's default
    return config.language


def _needs_log(args: argparse.Namespace, command: str, *, made: bool = True) -> Config:
    """The config of a command that works on the session log; with ``made``, one that only
    reads or answers what is in it, so a log that is not there (a mistyped ``--data-dir``)
    is an error, not an empty log made there."""
    config = _config(args)
    if not config.store.lasting(config.data_dir):
        raise CodeModeError(f"{command} needs the session log: {_keep_the_log(config)}")
    if made and config.store.kind == "postgres":
        _postgres_log_there(config, command)
    if made and config.store.kind != "postgres" and config.data_dir is not None:
        path = Path(config.data_dir) / SqliteStore.FILE_NAME
        try:
            if Path(config.data_dir).is_file():
                raise not_a_directory(Path(config.data_dir))
            there = path.is_file()
        except OSError as e:  # a directory it may not search, a name too long
            raise ConfigError(
                f"{command}: cannot look for the session log in {config.data_dir} "
                f"({e.strerror or e}); check --data-dir (or data_dir in codemode.toml)"
            ) from None
        if not there and path.is_dir():
            raise ConfigError(
                f"{command}: {path} is a directory, not a session log; check --data-dir (or "
                "data_dir in codemode.toml)"
            )
        if not there:
            raise CodeModeError(
                f"{command}: there is no session log in {config.data_dir} ({path.name} is not "
                "there); check --data-dir (or data_dir in codemode.toml)"
            )
    return config


def _reader(config: Config) -> LogStore:
    """The log of a command that only reads it (scripts, show): a SQLite log this process
    may not write (another account's, a read-only mount) is read all the same."""
    return config.store.build(config.data_dir, read_only=True)


def _postgres_log_there(config: Config, command: str) -> None:
    """Raise ConfigError when the server answers and has no log in the configured schema (a
    mistyped ``schema``): opening the store would make an empty one there. A server that
    does not answer is left to the store, which says so."""
    try:
        import psycopg
    except ImportError:  # the store says what to install
        return
    from engine.log._postgres import _NoAnswer, _Watch, cannot_reach, database_at, no_answer

    store = config.store
    try:
        # A server that takes the connection and then answers nothing (a stopped server
        # process) would hold the command for good. The query blocks the command's event
        # loop: the watch's timer is a thread's.
        with (
            psycopg.connect(store.resolved_dsn(), autocommit=True, connect_timeout=10) as conn,
            _Watch(conn, store.answer_timeout, blocking=True),
        ):
            found = conn.execute(
                "SELECT 1 FROM information_schema.tables WHERE table_schema = %s "
                "AND table_name = 'scripts'",
                (store.schema,),
            ).fetchone()
    except _NoAnswer as e:
        said = no_answer(
            database_at(store.resolved_dsn()), e.seconds, f"run the command again ({store.where})"
        )
        raise StoreUnavailable(f"{command}: {said}") from None
    except getattr(psycopg.errors, "ConnectionTimeout", ()) as e:
        # The server took the connection and never answered (a stopped postmaster, a port
        # that is not PostgreSQL's): the store would wait for it as long again, then say so.
        raise StoreUnavailable(f"{command}: {cannot_reach(store.resolved_dsn(), e)}") from None
    except (psycopg.Error, OSError):
        return
    if found is None:
        raise ConfigError(
            f"{command}: there is no session log in the PostgreSQL schema {store.schema!r} "
            f"({store.where}); check schema and dsn there"
        )


def _keep_the_log(config: Config) -> str:
    """What to do so that the log outlives the command."""
    if config.store.kind == "memory":
        return (
            f'{config.store.where} kind = "memory" keeps it in the process; use kind = '
            '"sqlite" (with a data_dir) or "postgres"'
        )
    return "pass --data-dir DIR (or set data_dir, or a [codemode.store] in codemode.toml)"


async def _scripts(args: argparse.Namespace) -> int:
    store = _reader(_needs_log(args, "scripts"))
    try:
        found = await store.scripts(args.status, limit=args.limit + 1)
    finally:
        await store.aclose()
    more = len(found) > args.limit
    del found[args.limit :]
    if args.json:
        for record in found:
            sys.stdout.write(orjson.dumps(_script_json(record)).decode() + "\n")
    else:
        if not found:
            print("no scripts" + (f" {args.status}" if args.status else ""))
        for record in found:
            print(
                f"{record.id}  {record.status:<8}  {_when(record.created_ms)}  steps "
                f"{record.steps}  tenant {_shown(record.tenant)}"
                + ("  held" if record.held else "")
            )
    if more:  # with --json too: its lines alone would not say they stop short
        first = "script" if args.limit == 1 else f"{args.limit:,} scripts"
        print(
            f"codemode: the first {first}, oldest first; there are more: "
            "raise --limit, or filter with --status",
            file=sys.stderr,
        )
    return 0


# The script's own output, printed to a terminal: its line breaks and tabs are its layout.
_TERMINAL = {c: e for c, e in ESCAPES.items() if c != 0x0A}


def _shown(text: object) -> str:
    """``text`` for a terminal: control characters as escapes (see ``ESCAPES``)."""
    return escaped(str(text))


def _to_stdout(text: str) -> str:
    """``text`` as it is for a pipe; on a terminal, laid out as written but with its other
    control characters as escapes: what a script printed, or a tool's description (an MCP
    server's), must not drive the terminal nor reorder what it shows."""
    return text.translate(_TERMINAL) if sys.stdout.isatty() else text


# How much of a call's arguments `show` prints, in characters of their JSON.
SHOWN_ARGUMENTS = 400


def _cut(text: str, most: int) -> str:
    """``text``, or its first ``most`` characters and what was left out."""
    if len(text) <= most:
        return text
    return f"{text[:most]}... ({len(text) - most:,} more characters; show --json prints them)"


async def _show(args: argparse.Namespace) -> int:
    check_ids(args.script_id)  # before the store opens: nothing to close
    store = _reader(_needs_log(args, "show"))
    try:
        record = await store.get_script(args.script_id)
        calls = await store.calls(args.script_id)
    finally:
        await store.aclose()
    if args.json:
        # With its code, as show prints it (scripts --json keeps to its lines' count).
        data = {
            "script": {**_script_json(record), "code": record.code},
            "calls": [dataclasses.asdict(c) for c in calls],
        }
        sys.stdout.write(orjson.dumps(data).decode() + "\n")
        return 0
    lease = record.lease
    print(f"script {record.id}  {record.status}" + ("  held" if record.held else ""))
    print(
        f"  {record.language}, tenant {_shown(record.tenant)}, created "
        f"{_when(record.created_ms)}, steps {record.steps}"
    )
    print(
        f"  compute {record.total_compute_ms:,.0f} ms, files read "
        f"{size_text(record.total_file_bytes)}"
        + (f", key {_shown(record.key)}" if record.key else "")
    )
    if lease is not None:
        held = lease.expires_ms > time.time() * 1000
        # A lease given up has no end; one that ran out was not renewed: its host stopped,
        # stalled or lost the log (a takeover is free).
        until = (
            f"until {_when(lease.expires_ms)}"
            if held
            else "let go"
            if lease.expires_ms == 0
            else f"ran out at {_when(lease.expires_ms)}: its host stopped or stalled"
        )
        print(f"  owner {_shown(lease.owner)} (lease token {lease.token}, {until})")
    print(f"  tools {_shown(', '.join(sorted(record.tools))) or '(not recorded)'}")
    print("code:")
    for number, line in enumerate(_code_lines(record), 1):
        print(f"  {number:>4}  {_shown(line)}")
    print(f"calls: {len(calls)}")
    for c in calls:
        sizes = f"args {size_text(c.argument_bytes)}"
        if c.result_bytes is not None:
            sizes += f", result {size_text(c.result_bytes)}"
        times = ""
        if c.started_ms is not None:
            end = _when(c.ended_ms) if c.ended_ms is not None else "..."
            times = f"  {_when(c.started_ms)} to {end}"
        print(
            f"  #{c.index + 1} {_shown(c.call_id)}  tools.{_shown(c.name)}  {c.state}  "
            f"({sizes}){times}"
        )
        # What the call was asked to do: the one thing a person deciding on an approval
        # must see, so every call shows it (cut short; show --json prints it whole).
        print(f"      args: {_shown(_cut(orjson.dumps(c.arguments).decode(), SHOWN_ARGUMENTS))}")
        for label, text in (("note", c.note), ("error", c.error), ("owner", c.owner)):
            if text:
                head, *rest = str(text).split("\n")
                print(f"      {label}: {_shown(head)}")
                for part in rest:
                    print(f"      {' ' * len(label)}  {_shown(part)}")
    if record.outcome is not None:
        print("outcome:")
        for line in str(record.outcome.get("text", "")).split("\n"):
            print(f"  {_shown(line)}")
    return 0


async def _answer(args: argparse.Namespace) -> int:
    """approve, reject, hold or release: an answer recorded in the log, no step run."""
    config = _needs_log(args, args.command)
    store = config.store.build(config.data_dir)
    engine = CodeMode([], runner=_NoRunner(), store=store)
    try:
        if args.command == "approve":
            await engine.approve(args.script_id, args.call_id)
        elif args.command == "reject":
            await engine.reject(args.script_id, args.call_id, args.message)
        else:
            # An unknown id is named, not held; an ended script is never stepped again.
            record = await engine.store.get_script(args.script_id)
            if args.command == "hold" and record.status in log.ENDED:
                raise CodeModeError(
                    f"script {args.script_id} has {record.status}: no step of it runs again, "
                    "so there is nothing to hold"
                )
            held = engine.hold if args.command == "hold" else engine.release
            await held(args.script_id)
    finally:
        await engine.aclose()
    if args.json:
        _print_answer(args, None if args.command in ("approve", "reject") else record)
    elif args.command == "hold" and record.held:
        print(f"script {args.script_id} was held already; nothing changed")
    elif args.command == "hold":
        print(f"held script {args.script_id}: no step runs until it is released (codemode release)")
    elif args.command == "release" and not record.held:
        print(f"script {args.script_id} was not held; nothing changed")
    elif args.command == "release" and record.status in log.ENDED:
        print(f"released script {args.script_id} (it has {record.status}: nothing to resume)")
    elif args.command == "release":
        print(f"released script {args.script_id}: resume it (or a worker drives it on)")
    else:
        done = {"approve": "approved", "reject": "rejected"}[args.command]
        print(f"{done} call {args.call_id} of script {args.script_id}")
    return 0


def _print_answer(args: argparse.Namespace, record: ScriptRecord | None) -> None:
    """What approve, reject, hold or release did, as the JSON line of :data:`ANSWER_JSON`."""
    said: dict[str, Any] = {"command": args.command, "script_id": args.script_id}
    if record is None:
        said["call_id"] = args.call_id
        said["changed"] = True  # a call that waits for no answer is an error (exit 2)
    else:
        said["changed"] = record.held != (args.command == "hold")
    sys.stdout.write(orjson.dumps(said).decode() + "\n")


async def _worker(args: argparse.Namespace) -> int:
    _needs_log(args, "worker", made=False)  # a worker may start before any host
    async with _engine(args, needs_runner=True) as (engine, _):
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        signalled: list[int] = []

        def stopping(code: int) -> None:
            # The first signal: the script being driven is left at its next step (its
            # running calls end first), for another host. One whose calls have not ended
            # INTERRUPT_GRACE seconds later, or a second signal, stops at once.
            if stop.is_set():
                give_up(code)
            signalled.append(code)
            stop.set()
            timer = threading.Timer(INTERRUPT_GRACE, give_up, (code,))
            timer.daemon = True
            timer.start()

        loop.add_signal_handler(signal.SIGINT, stopping, INTERRUPTED)
        loop.add_signal_handler(signal.SIGTERM, stopping, TERMINATED)
        print("codemode: worker driving ready scripts; stop it with Ctrl-C", file=sys.stderr)
        await engine.work(stop=stop)
    if signalled:  # it stopped without a word
        print(f"{_STOPPED_BY[signalled[0]]}; the worker stopped", file=sys.stderr)
    return 0


def _script_json(record: ScriptRecord) -> dict[str, Any]:
    data = dataclasses.asdict(record)
    data.pop("code")
    data["code_lines"] = len(_code_lines(record))
    return data


def _code_lines(record: ScriptRecord) -> list[str]:
    """The script's lines as the engine's errors number them (``source_lines``: a CRLF or a
    lone CR ends a line, and in JavaScript U+2028 and U+2029 too). A file's last line break
    starts no line (an empty last line was shown past the file's end)."""
    lines = source_lines(record.code, record.language)
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return lines


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


class _NoRunner(ScriptRunner):
    """For commands that run no script (describe, search): starts no process."""

    async def run(
        self,
        script: Script,
        files: FileReader | None = None,
        *,
        tenant: str = "default",
        live: bool = False,
    ) -> Step:
        raise CodeModeError("this command runs no script")


def _print_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")


def _say_how_to_approve(args: argparse.Namespace, result: RunResult) -> None:
    """After a script paused on approvals, the command that approves them and goes on, on
    stderr: the result is what a model reads (what the script waits on), and a person at
    this terminal was left to find in the README how to answer."""
    calls = [w["call_id"] for w in result.waiting if w.get("reason") == "approval"]
    if args.json or result.status != "paused" or not calls:
        return
    flags: list[str] = []
    for call_id in calls:
        flags += ["--approve", call_id]
    # Absolute, as mcp serve's log flags are (engine.mcp._cli._log_flags): the person may
    # answer from another directory, or another terminal.
    for flag, path in (
        ("--tools", args.tools),
        ("--config", _config_path(args)),  # ./codemode.toml too, read without --config
        ("--data-dir", args.data_dir),
    ):
        if path is not None:
            flags += [flag, str(Path(path).absolute())]
    command = shlex.join(["codemode", "resume", result.script_id, *flags])
    sys.stderr.write(
        f"codemode: to approve and go on: {command} (--reject CALL_ID --message TEXT refuses "
        "one; codemode approve answers without going on)\n"
    )


def _print_result(
    result: RunResult, as_json: bool, *, kept: bool = True, config: Config | None = None
) -> int:
    if as_json:  # JSON lines: `run` wrote the script's id first
        sys.stdout.write(orjson.dumps(result.to_dict()).decode() + "\n")
    else:
        # What the script printed must not drive the terminal (set its title, clear it,
        # write the clipboard); a pipe gets the text as it is.
        sys.stdout.write(_to_stdout(result.text) + "\n")
        if result.status == "paused":
            sys.stdout.write(f"(script id {result.script_id})\n")
            if not kept:
                # Without a data dir the log lived in this process: say so, not "resume it".
                sys.stderr.write(
                    "codemode: the session log was in memory, so this script cannot be "
                    "resumed; to continue scripts with codemode resume, "
                    f"{_keep_the_log(config or Config())}\n"
                )
    return EXIT_CODES[result.status]


async def _run(args: argparse.Namespace) -> int:
    script = "the script on stdin" if args.script == "-" else f"the script {args.script}"
    try:
        with stoppable_inputs():
            raw = _read_script(args)
        if len(raw) > MAX_CODE_BYTES:
            raise CodeModeError(
                f"{script} is over {MAX_CODE_BYTES:,} bytes, the most a script may be; write "
                "a shorter script that reads its data with tool calls or files"
            )
        code = raw.decode("utf-8")
    except OSError as e:
        raise CodeModeError(f"cannot read {script}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise CodeModeError(
            f"{script} is not UTF-8 text (byte {e.start}); save it as UTF-8"
        ) from None
    files = _attachments(args.file)
    config = _config(args)
    async with _watching(args) as listeners:
        result, kept = await _run_with(args, code, files, config, listeners)
    exit_code = _print_result(result, args.json, kept=kept, config=config)
    if kept:
        _say_how_to_approve(args, result)
    return exit_code


def _read_script(args: argparse.Namespace) -> bytes:
    """The script's bytes, up to one past the most a script may be."""
    if args.script == "-":
        if sys.stdin is None:  # started with fd 0 closed
            raise CodeModeError("the script is - but stdin is closed: give it a file or pipe")
        if sys.stdin.isatty():  # else the command waits without a word, as if it hung
            sys.stderr.write(
                "codemode: reading the script from the terminal: type or paste it, then "
                "Ctrl-D on a new line (or give a file: codemode run script.js)\n"
            )
            sys.stderr.flush()
        return sys.stdin.buffer.read(MAX_CODE_BYTES + 1)
    with open(args.script, "rb") as f:
        return f.read(MAX_CODE_BYTES + 1)  # bounded: a path such as /dev/zero never ends


def _attachments(given: list[str]) -> list[Attachment]:
    """The files ``--file`` gives: ``PATH``, read by the file's name, or ``ID=PATH`` (a path
    that is a file of that name, ``=`` and all, is a path)."""
    attachments = []
    for value in given:
        ident, given_id, path = value.partition("=")
        if not given_id or os.path.lexists(value):
            ident, path = os.path.basename(value.rstrip(os.sep)), value
        if not ident.strip() or not path:
            raise ConfigError(
                f"--file {value!r} names no file: give a path (the script reads the file by "
                "its name) or ID=PATH, as --file sales.csv=exports/2024.csv"
            )
        attachments.append(Attachment(ident, path=path))
    return attachments


async def _run_with(
    args: argparse.Namespace,
    code: str,
    files: list[Attachment],
    config: Config,
    listeners: list[Listener],
) -> tuple[RunResult, bool]:
    kept = config.store.lasting(config.data_dir)

    def started(out: TextIO, script_id: str) -> None:
        # Before the first step, so a host that dies mid-script knows what to resume.
        if args.json:
            out.write(orjson.dumps({"script_id": script_id}).decode() + "\n")
        elif kept:  # a log in memory dies with this run: its id would help no one
            clear = ProgressLine.clearing() if sys.stderr.isatty() else ""  # the live line
            sys.stderr.write(f"{clear}codemode: script {script_id}\n")
        out.flush()

    try:
        engine_and_out = _engine(args, needs_runner=True, config=config, on_event=listeners)
        async with engine_and_out as (engine, out):
            on_start = functools.partial(started, out)
            result = await engine.run_code(code, tenant=args.tenant, files=files, on_start=on_start)
    except StepUnavailable as e:
        if kept:
            raise
        raise StepUnavailable(
            # Its advice ends "resume it later" (or "then resume the script"): not this one.
            f"{e}, but this run kept its log in memory, so it cannot be resumed: run it again "
            f"(to be able to resume it, {_keep_the_log(config)})",
            permanent=e.permanent,
        ) from None
    return result, kept


@contextlib.asynccontextmanager
async def _watching(args: argparse.Namespace) -> AsyncIterator[list[Listener]]:
    """The listeners ``--events`` and a terminal ask for: the JSON lines, the live line."""
    listeners: list[Listener] = []
    lines: EventLines | None = None
    async with contextlib.AsyncExitStack() as stack:
        if args.events:
            if args.events == "-":
                stream = sys.stderr.buffer
            else:
                try:
                    # Unbuffered: each line is flushed anyway, and a write that failed
                    # leaves nothing for the close to fail on again. A FIFO's open waits
                    # for its reader.
                    with stoppable_inputs():
                        stream = stack.enter_context(open(args.events, "ab", buffering=0))  # noqa: SIM115
                except OSError as e:
                    raise CodeModeError(
                        f"cannot write the events to {args.events}: {e.strerror or e}"
                    ) from None
            lines = EventLines(stream)
            listeners.append(lines)
        if sys.stderr.isatty() and args.events != "-":
            listeners.append(await stack.enter_async_context(ProgressLine(sys.stderr).run()))
        yield listeners
    if lines is not None and lines.failed is not None:
        raise _OutputFailed(f"the events to {args.events}", lines.failed)


async def _resume(args: argparse.Namespace) -> int:
    if args.message and not args.reject:  # it would go nowhere, unsaid
        raise CodeModeError(
            "resume: --message is the reason given with --reject; add --reject CALL_ID, or "
            "leave --message out"
        )
    _needs_log(args, "resume")
    async with _watching(args) as listeners:
        result = await _resume_with(args, listeners)
    exit_code = _print_result(result, args.json)
    _say_how_to_approve(args, result)
    return exit_code


async def _resume_with(args: argparse.Namespace, listeners: list[Listener]) -> RunResult:
    async with _engine(args, needs_runner=True, on_event=listeners) as (engine, _):
        if args.approve or args.reject:
            # Before any answer is recorded: a resume this host refuses changes nothing.
            await engine.check_tools(args.script_id)
            await _check_answers(engine, args)
        for call_id in args.approve:
            await _answered_once(engine.approve(args.script_id, call_id))
        for call_id in args.reject:
            await _answered_once(engine.reject(args.script_id, call_id, args.message))
        return await engine.resume(args.script_id)


async def _answered_once(answer: Awaitable[None]) -> None:
    """Record an answer ``resume`` was given. The call waited for it when _check_answers
    looked: if another host or person answered it since, that is said on stderr and the
    script is resumed all the same, as the command asked, with the answer that stands."""
    try:
        await answer
    except CallNotWaiting as e:
        sys.stderr.write(f"codemode: {e}; resuming with that answer\n")


async def _check_answers(engine: CodeMode, args: argparse.Namespace) -> None:
    """Refuse, before any is recorded, answers that could not all be: a call named twice
    (``--approve A --reject A``) or one that waits for no approval. Another host may still
    answer one first (see _answered_once)."""
    named = [*args.approve, *args.reject]
    twice = sorted({c for c in named if named.count(c) > 1})
    if twice:
        raise CallNotWaiting(f"call {twice[0]!r} is given more than one answer; give each call one")
    calls = {entry.call_id: entry for entry in await engine.store.calls(args.script_id)}
    for call_id in named:
        if call_id not in calls:
            raise CallNotWaiting.no_call(args.script_id, call_id)
        if calls[call_id].state != log.AWAITING_APPROVAL:
            raise CallNotWaiting(not_waiting(calls[call_id], log.AWAITING_APPROVAL))


async def _describe(args: argparse.Namespace) -> int:
    async with _engine(args, needs_runner=False) as (engine, _):
        definition = engine.definition(args.format)
    if args.json:
        _print_json(definition)
    else:
        print(_to_stdout(definition.get("description") or definition["function"]["description"]))
    return 0


async def _search(args: argparse.Namespace) -> int:
    async with _engine(args, needs_runner=False) as (engine, out):
        with contextlib.redirect_stdout(out):
            return _print_search(args, engine)


def _print_search(args: argparse.Namespace, engine: CodeMode) -> int:
    answer = engine.search(args.query, limit=args.limit)
    if args.json:
        found = engine._index.find(args.query)  # the engine's own: an index is built once
        _print_json(
            {
                "query": args.query,
                "limit": args.limit,
                "exact": found.exact,
                "tools": [t.name for t in found.tools],
                "skills": [s.name for s in found.skills],
                "text": answer,
            }
        )
    else:
        print(_to_stdout(answer))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` (default: the process's arguments); the exit code. As the
    program (no ``argv``), the process exits then even if a thread the host's code started
    has not ended (see :func:`_leave_host_threads`)."""
    code = _command(argv)
    if argv is None:
        _leave_host_threads(code)
    return code


def _leave_host_threads(code: int) -> None:
    """Arm the exit with ``code`` for when the process has not ended :data:`INTERRUPT_GRACE`
    seconds after the command did: the interpreter waits for every thread that is no daemon
    (a tools file's own, say) and runs the atexit functions, for ever for a thread that
    never ends. Ctrl-C meanwhile exits at once."""

    def leave() -> None:
        left = [
            t.name for t in threading.enumerate() if not (t.daemon or t is threading.main_thread())
        ]
        held, fix = (
            (f"the thread {left[0]!r} that the tools' code started", "make it a daemon thread")
            if left
            else ("an atexit function of the tools' code", "make it return")
        )
        print(
            f"codemode: {held} has not ended {INTERRUPT_GRACE:g} s after the command; "
            f"exiting without it ({fix}, or end it)",
            file=sys.stderr,
        )
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)

    timer = threading.Timer(INTERRUPT_GRACE, leave)
    timer.daemon = True
    timer.start()
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, lambda *_: os._exit(INTERRUPTED))


def _command(argv: list[str] | None) -> int:
    if sys.stderr is None:  # started with descriptor 2 closed: what it says goes nowhere
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - for the process's life
    if sys.stdout is None:  # descriptor 1 closed: nowhere for the result (or a script's id)
        print(
            "codemode: stdout is closed (started with >&-): there is nowhere to write what "
            "the command answers; run it with stdout open (>/dev/null to drop it)",
            file=sys.stderr,
        )
        return OUTPUT_FAILED
    try:
        code = _main(argv)
        sys.stdout.flush()  # here, so a reader that left is met inside this try
        return code
    except BrokenPipeError:
        # The reader stopped reading (`codemode describe | head`), as it meant to; a run's
        # result is in its log when there is a data dir. Point stdout at /dev/null so the
        # interpreter's final flush does not fail again, and exit as SIGPIPE would have.
        _stdout_to_devnull()
        return 128 + signal.SIGPIPE
    except _OutputFailed as e:
        print(f"codemode: {e}", file=sys.stderr)
        return OUTPUT_FAILED
    except OSError as e:
        if e.errno not in _WRITE_FAILED:
            raise
        # Past _main, a write fails so on stdout (the log's own writes are StoreUnavailable).
        _stdout_to_devnull()
        failed = _OutputFailed("the output", e, command=_command_named(argv))
        print(f"codemode: {failed}", file=sys.stderr)
        return OUTPUT_FAILED


def _command_named(argv: list[str] | None) -> str | None:
    """The command ``argv`` names (its first word that is no option: the top level takes
    none with a value), for what a failure says after the parse."""
    words = sys.argv[1:] if argv is None else argv
    return next((w for w in words if not w.startswith("-")), None)


# What a write to a file that cannot take it fails with: a full disk, a quota, an I/O error.
_WRITE_FAILED = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO}


class _OutputFailed(Exception):
    """What the command writes (its output, its events) could not be written, and what
    stands of what it did: ``command`` (None: one that ran a script)."""

    def __init__(self, what: str, error: OSError, *, command: str | None = None) -> None:
        if command in _ANSWERS:
            done = "what it did stands in the log all the same (codemode show SCRIPT_ID)"
        elif command in _READS:
            done = "free space where it goes (or send it elsewhere), then run the command again"
        else:
            done = "what the script did is in its log, if it has one (codemode show SCRIPT_ID)"
        super().__init__(f"cannot write {what} ({error.strerror or error}); {done}")


# The commands that change a script in the log, then print what they did; those that only
# read (and write nothing anywhere but their output, so running them again costs nothing).
_ANSWERS = frozenset({"approve", "reject", "hold", "release"})
_READS = frozenset({"scripts", "show", "describe", "search", "version"})


def _stdout_to_devnull() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


class _OneLine(logging.Formatter):
    """The engine's warnings as the command's other messages: ``codemode: ...``, one line,
    an exception's traceback (the host's worker that raised, say) left to ``-v``. On a
    terminal each clears the live line first (see :class:`ProgressLine`), which it was
    written onto the end of."""

    def __init__(self, *, terminal: bool) -> None:
        super().__init__()
        self.terminal = terminal

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        # A tool's traceback, written out in the message (engine/_calls.py): folded into
        # one line it made a line of a thousand characters after the script's own output.
        trace = getattr(record, "trace", None)
        if isinstance(trace, str) and trace and text.endswith(trace):
            text = f"{text[: -len(trace)].rstrip()} (-v shows the traceback)"
        elif record.exc_info and record.exc_info[1] is not None:
            text += f" ({described(record.exc_info[1])}; -v shows the traceback)"
        clear = ProgressLine.clearing() if self.terminal else ""
        return f"{clear}codemode: {' '.join(text.splitlines())}"


def _warnings_in_one_line() -> None:
    """Write the engine's warnings (logger ``codemode``) to stderr by :class:`_OneLine`;
    without a handler, Python's last resort wrote them bare, with whole tracebacks."""
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)
    handler.setFormatter(_OneLine(terminal=sys.stderr.isatty()))
    engine_log = logging.getLogger("codemode")
    engine_log.addHandler(handler)
    engine_log.propagate = False


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    if getattr(args, "verbose", False):
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    else:
        # psycopg warns at every reconnect attempt of its pool (several lines a second while
        # a database is down); the store's own error names the database and what to do.
        logging.getLogger("psycopg").setLevel(logging.ERROR)
        if args.command not in ("runner", "mcp"):  # services, which set their own logging
            _warnings_in_one_line()
    try:
        if args.command == "run":
            return _interruptible(_run(args))
        if args.command == "resume":
            return _interruptible(_resume(args))
        if args.command == "scripts":
            return _interruptible(_scripts(args))
        if args.command == "show":
            return _interruptible(_show(args))
        if args.command in ("approve", "reject", "hold", "release"):
            return _interruptible(_answer(args))
        if args.command == "worker":
            return _interruptible(_worker(args))
        if args.command == "describe":
            return _interruptible(_describe(args))
        if args.command == "search":
            return _interruptible(_search(args))
        if args.command == "runner":
            return _runner_command(args.runner_args)
        if args.command == "mcp":
            from engine.mcp._cli import main as mcp_main

            return mcp_main(args.mcp_args)
        if args.command == "version":
            print(f"codemode {_version()}")
            return 0
        _parser().print_help()
        return 2
    except (StepUnavailable, StoreUnavailable) as e:
        print(f"codemode: {e}", file=sys.stderr)
        return MISTAKE if e.permanent else UNAVAILABLE
    except CodeModeError as e:
        print(f"codemode: {e}", file=sys.stderr)
        return MISTAKE
    except KeyboardInterrupt:
        # As SIGTERM is said: a Ctrl-C that ended the command said nothing of it.
        print(_STOPPED_BY[INTERRUPTED], file=sys.stderr)
        return INTERRUPTED


def _runner_command(argv: list[str]) -> int:
    if not argv or argv[0] != "serve":
        print(
            "usage: codemode runner serve --listen HOST:PORT [--token-file PATH] ...",
            file=sys.stderr,
        )
        return 2
    from runner.service_main import main as serve_main

    return serve_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
