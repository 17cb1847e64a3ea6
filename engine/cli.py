"""The ``codemode`` command.

    codemode run SCRIPT.js --tools TOOLS [--json] [--data-dir DIR] [--config codemode.toml]
    codemode resume SCRIPT_ID --tools TOOLS --data-dir DIR [--approve CALL_ID] [--reject CALL_ID]
    codemode describe --tools TOOLS
    codemode search QUERY --tools TOOLS
    codemode runner serve --listen HOST:PORT ...
    codemode version

``TOOLS`` is a Python file of tools or a JSON file of MCP tool definitions. A script may be a
bare body, a Markdown code fence, or an ``async () => { ... }`` function; ``-`` reads stdin.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from importlib import metadata
from pathlib import Path

import orjson

from engine._codemode import CodeMode, RunResult
from engine._config import Config, build_runner
from engine._errors import CodeModeError
from engine._loading import load_tools
from runner import FileReader, ScriptRunner, Step
from sandbox.protocol import Script


def _version() -> str:
    try:
        return metadata.version("codemode")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="codemode",
        description="Run model-written JavaScript that calls your tools, in a confined sandbox.",
    )
    parser.add_argument("--version", action="version", version=f"codemode {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

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
    search.add_argument("query")
    search.add_argument("--limit", type=int, default=8)
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


def _engine(args: argparse.Namespace, *, needs_runner: bool) -> CodeMode:
    config = _config(args)
    tools, namespace = load_tools(args.tools)
    data_dir = args.data_dir or config.data_dir
    runner: ScriptRunner = build_runner(config.runner) if needs_runner else _NoRunner()
    return CodeMode(
        tools,
        runner=runner,
        data_dir=data_dir,
        limits=config.limits,
        context=namespace.get("CONTEXT"),
        worker=namespace.get("WORKER"),
        queue_timeout=config.queue_timeout,
    )


class _NoRunner(ScriptRunner):
    """For commands that run no script (describe, search): starts no process."""

    async def run(
        self, script: Script, files: FileReader | None = None, *, tenant: str = "default"
    ) -> Step:
        raise CodeModeError("this command runs no script")


def _print_result(result: RunResult, as_json: bool) -> int:
    if as_json:  # JSON lines: `run` wrote the script's id first
        sys.stdout.write(orjson.dumps(result.to_dict()).decode() + "\n")
    else:
        sys.stdout.write(result.text + "\n")
        if result.status == "paused":
            sys.stdout.write(f"(script id {result.script_id})\n")
    return {"finished": 0, "paused": 3, "elsewhere": 4}.get(result.status, 1)


async def _run(args: argparse.Namespace) -> int:
    if args.script == "-":
        code = sys.stdin.read()
    else:
        try:
            code = Path(args.script).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise CodeModeError(f"cannot read the script {args.script}: {e}") from None
    engine = _engine(args, needs_runner=True)

    def started(script_id: str) -> None:
        # Before the first step, so a host that dies mid-script knows what to resume.
        if args.json:
            sys.stdout.write(orjson.dumps({"script_id": script_id}).decode() + "\n")
        else:
            sys.stderr.write(f"codemode: script {script_id}\n")
        sys.stdout.flush()

    try:
        result = await engine.run_code(code, tenant=args.tenant, on_start=started)
    finally:
        await engine.aclose()
    return _print_result(result, args.json)


async def _resume(args: argparse.Namespace) -> int:
    if not (args.data_dir or _config(args).data_dir):
        raise CodeModeError("resume needs the session log: pass --data-dir (or set data_dir)")
    engine = _engine(args, needs_runner=True)
    try:
        for call_id in args.approve:
            await engine.approve(args.script_id, call_id)
        for call_id in args.reject:
            await engine.reject(args.script_id, call_id, args.message)
        result = await engine.resume(args.script_id)
    finally:
        await engine.aclose()
    return _print_result(result, args.json)


def main(argv: list[str] | None = None) -> int:
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
                print(orjson.dumps(definition, option=orjson.OPT_INDENT_2).decode())
            else:
                print(definition["description"])
            return 0
        if args.command == "search":
            print(_engine(args, needs_runner=False).search(args.query, limit=args.limit))
            return 0
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
