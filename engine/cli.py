"""The ``codemode`` command.

    codemode run SCRIPT.js --tools TOOLS [--json] [--data-dir DIR] [--config codemode.toml]
    codemode resume SCRIPT_ID --tools TOOLS --data-dir DIR [--approve CALL_ID] [--reject CALL_ID]
    codemode describe --tools TOOLS
    codemode search QUERY --tools TOOLS [--limit N] [--json]
    codemode runner serve --listen HOST:PORT ...
    codemode version

``TOOLS`` is a Python file of tools or a JSON file of MCP tool definitions. A script may be a
bare body, a Markdown code fence, or an ``async () => { ... }`` function; ``-`` reads stdin.

Exit codes: 0 finished, 1 the script failed, 3 paused, 2 a mistake in the command, its files
or its config (one line on stderr naming it and the fix, never a traceback), 130 interrupted.
Output cut short by its reader (``| head``) ends quietly.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

import orjson

from engine._codemode import CodeMode, RunResult
from engine._config import Config, build_runner
from engine._errors import CodeModeError, ConfigError, StepUnavailable, ToolDefinitionError
from engine._loading import load_tools
from engine._search import MAX_LIMIT, MAX_QUERY, ToolIndex
from runner import FileReader, ScriptRunner, Step
from sandbox.protocol import Script


def _version() -> str:
    try:
        return metadata.version("codemode")
    except metadata.PackageNotFoundError:
        return "0+unknown"


class _Parser(argparse.ArgumentParser):
    """argparse, but a mistake is one line naming it and where help is, exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _search_limit(text: str) -> int:
    try:
        limit = int(text)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to {MAX_LIMIT}")
    return limit


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
        description="Run model-written JavaScript that calls your tools, in a confined sandbox.",
    )
    parser.add_argument("--version", action="version", version=f"codemode {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def common(p: argparse.ArgumentParser, *, tools_required: bool = True) -> None:
        p.add_argument(
            "--tools",
            required=tools_required,
            help="a .py file of tools or a .json file of MCP tools",
        )
        p.add_argument("--config", help="a codemode.toml (default: ./codemode.toml if present)")
        p.add_argument("--data-dir", help="where the session log lives (default: in memory)")
        p.add_argument("--json", action="store_true", help="print the whole result as JSON")
        p.add_argument("-v", "--verbose", action="store_true", help="log each script step")

    run = commands.add_parser("run", help="run a script and print what the model would see")
    run.add_argument("script", help="the script file, or - for stdin")
    run.add_argument("--tenant", default="default")
    common(run)

    resume = commands.add_parser("resume", help="continue a paused script from its log")
    resume.add_argument("script_id")
    resume.add_argument("--approve", action="append", default=[], metavar="CALL_ID")
    resume.add_argument("--reject", action="append", default=[], metavar="CALL_ID")
    resume.add_argument("--message", default="", help="the reason given with --reject")
    common(resume)

    describe = commands.add_parser("describe", help="print the run_code tool definition")
    common(describe)

    search = commands.add_parser("search", help="print what tools.tool_search answers")
    search.add_argument("query", type=_query)
    search.add_argument(
        "--limit", type=_search_limit, default=8, help=f"tools to declare, 1 to {MAX_LIMIT}"
    )
    common(search)

    runner = commands.add_parser("runner", help="run scripts for engines on other machines")
    runner.add_argument(
        "runner_args", nargs=argparse.REMAINDER, help="serve --listen HOST:PORT ..."
    )

    commands.add_parser("version", help="print the version")
    return parser


def _config(args: argparse.Namespace) -> Config:
    if args.config:
        return Config.load(args.config)
    if Path("codemode.toml").is_file():
        return Config.load("codemode.toml")
    return Config()


def _engine(
    args: argparse.Namespace, *, needs_runner: bool, config: Config | None = None
) -> CodeMode:
    config = config or _config(args)
    tools, namespace = load_tools(args.tools)
    data_dir = args.data_dir or config.data_dir
    runner: ScriptRunner = build_runner(config.runner) if needs_runner else _NoRunner()
    try:
        return CodeMode(
            tools,
            runner=runner,
            data_dir=data_dir,
            limits=config.limits,
            context=namespace.get("CONTEXT"),
            worker=namespace.get("WORKER"),
            queue_timeout=config.queue_timeout,
            type_check=config.type_check,
        )
    except ToolDefinitionError as e:  # two tools of one name, a bad skill: the file's fault
        raise ConfigError(f"{args.tools}: {e}") from None


class _NoRunner(ScriptRunner):
    """For commands that run no script (describe, search): starts no process."""

    async def run(
        self, script: Script, files: FileReader | None = None, *, tenant: str = "default"
    ) -> Step:
        raise CodeModeError("this command runs no script")


def _print_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")


def _print_result(result: RunResult, as_json: bool, *, kept: bool = True) -> int:
    if as_json:
        _print_json(result.to_dict())
    else:
        sys.stdout.write(result.text + "\n")
        if result.status == "paused":
            sys.stdout.write(f"(script id {result.script_id})\n")
            if not kept:
                # Without a data dir the log lived in this process: say so, not "resume it".
                sys.stderr.write(
                    "codemode: the session log was in memory, so this script cannot be "
                    "resumed; run it with --data-dir DIR to continue it with codemode resume\n"
                )
    return {"finished": 0, "paused": 3}.get(result.status, 1)


async def _run(args: argparse.Namespace) -> int:
    try:
        if args.script == "-":
            code = sys.stdin.buffer.read().decode("utf-8")
        else:
            code = Path(args.script).read_text(encoding="utf-8")
    except OSError as e:
        raise CodeModeError(f"cannot read the script {args.script}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise CodeModeError(
            f"the script {args.script} is not UTF-8 text (byte {e.start}); save it as UTF-8"
        ) from None
    config = _config(args)
    engine = _engine(args, needs_runner=True, config=config)
    kept = bool(args.data_dir or config.data_dir)
    try:
        result = await engine.run_code(code, tenant=args.tenant)
    except StepUnavailable as e:
        if kept:
            raise
        raise StepUnavailable(
            f"{e}; this run kept its log in memory, so run it again (with --data-dir DIR to "
            "be able to resume it)"
        ) from None
    finally:
        await engine.aclose()
    return _print_result(result, args.json, kept=kept)


async def _resume(args: argparse.Namespace) -> int:
    if not (args.data_dir or _config(args).data_dir):
        raise CodeModeError("resume needs the session log: pass --data-dir (or set data_dir)")
    engine = _engine(args, needs_runner=True)
    try:
        for call_id in args.approve:
            engine.approve(args.script_id, call_id)
        for call_id in args.reject:
            engine.reject(args.script_id, call_id, args.message)
        result = await engine.resume(args.script_id)
    finally:
        await engine.aclose()
    return _print_result(result, args.json)


def _search(args: argparse.Namespace) -> int:
    engine = _engine(args, needs_runner=False)
    answer = engine.search(args.query, limit=args.limit)
    if args.json:
        found = ToolIndex(engine.tools, [s.info() for s in engine.skills]).find(args.query)
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
        print(answer)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` (default: the process's arguments); the exit code."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # here, so a reader that left is met inside this try
        return code
    except BrokenPipeError:
        # The reader stopped reading (`codemode describe | head`), as it meant to; a run's
        # result is in its log when there is a data dir. Point stdout at /dev/null so the
        # interpreter's final flush does not fail again, and exit as SIGPIPE would have.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 128 + signal.SIGPIPE


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    if getattr(args, "verbose", False):
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "run":
            return asyncio.run(_run(args))
        if args.command == "resume":
            return asyncio.run(_resume(args))
        if args.command == "describe":
            definition = _engine(args, needs_runner=False).definition()
            if args.json:
                _print_json(definition)
            else:
                print(definition["description"])
            return 0
        if args.command == "search":
            return _search(args)
        if args.command == "runner":
            return _runner_command(args.runner_args)
        if args.command == "version":
            print(f"codemode {_version()}")
            return 0
        _parser().print_help()
        return 2
    except CodeModeError as e:
        print(f"codemode: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


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
