"""Checking a script against the tools' declarations, with the TypeScript compiler, before
its first call.

A script that calls a tool that does not exist, leaves out a required argument or passes one
of the wrong type (at any depth) would fail at that call, after the calls before it took
effect. The check finds those before any call runs, with the compiler's message and the
script's own line.

Only what would fail at run time or pass a wrong value to a tool is reported. A model's
script is not strict TypeScript (``const o = {}; o.n = 1`` is fine JavaScript and a
TypeScript error), so the script is compiled twice in one program: once against the tools'
declarations and once with ``tools`` declared ``any``. An error found in both is about the
script's own typing and is left to the run; an error found only against the declarations is
about a call to a tool, and fails the script. Results are declared ``any`` in the check
(``unknown`` in what the model reads, to tell it to look), so a script may use them freely.
A script the compiler cannot parse is not refused here either: the run reports its syntax
error as the model expects. Inputs are declared as the model read them in ``run_code``
(``_declarations``), but for arrays, ``readonly`` (a tool only reads them, so a script may
pass one ``as const``), for every tool, deferred ones included, with ``tool_search`` and
``skill``; ``files`` and ``console`` are ``any``.

The compiler is TypeScript 7's native ``tsc`` (npm ``typescript@7``, one ~24 MB binary). It
runs as a subprocess of the host with no environment, under rlimits (data segment, CPU, no
files written, no core) and a wall-clock timeout, on a script the engine has already bounded
(``engine._source``: 256 KiB), and its output is read up to a bound. Measured on a 2-core VM:
30-50 ms and about 25 MB of memory per check.
"""

from __future__ import annotations

import os
import platform
import re
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from engine._tools import Tool
from engine.languages._check import (
    FAULTED,
    MEMORY_BYTES,
    TIMEOUT_S,
    BoundedChecker,
    Checked,
    CompilerMissing,
    TypeProblem,
    crashed,
    out_of_cpu,
    out_of_memory,
    run_bounded,
    shown_explained,
    timed_out,
)
from engine.languages._walk import Namer
from engine.languages.javascript._declarations import CHECK_RESULT, builtin_member, declare_tool
from sandbox.names import no_such_tool
from sandbox.replay import source_lines

COMPILER_ENV = "CODEMODE_TSC"

# One line, the same length in both files, so line n + 1 of a file is line n of the script.
_HEADER = (
    "declare const tools: {tools}; declare const files: any; declare const console: any; "
    "export {{}}; async function __cm_script() {{\n"
)
# `// @ts-nocheck` as a comment of its own line (see _asks_no_check).
_NO_CHECK = re.compile(r"//[ \t]*@ts-nocheck\b")
_SPACES = re.compile(r"\s*")
_TYPED = _HEADER.format(tools='import("./tools").Tools')
_UNTYPED = _HEADER.format(tools="any")
_FOOTER = "\n}\n"

# Options that report what the program gets wrong, not how strictly it is typed (without
# strictNullChecks, `prs.find(...)?.number` may be passed where a number is declared: it may
# well be one when the script runs).
_FLAGS = (
    # The program is exactly the files given: an import or a reference in a script must not
    # make the compiler read a host file and show its types (a JSON file's keys, a string
    # constant) to the model in an error.
    "--noResolve",
    "--noEmit",
    "--pretty",
    "false",
    "--ignoreConfig",
    "--singleThreaded",
    "--skipLibCheck",
    "--strict",
    "false",
    "--noImplicitAny",
    "false",
    "--target",
    "esnext",
    # ES2023 (QuickJS-ng has all of it) reads fewer lib files than esnext: about a third
    # less time per check. A script using a newer built-in gets the same error in both
    # compilations, so it is never refused for it.
    "--lib",
    "es2023",
    "--module",
    "esnext",
)
_OUT_OF_MEMORY = ("out of memory", "cannot allocate memory", "failed to create new OS thread")
# As the runtime reports a fault: "[signal SIGSEGV: segmentation violation ...]" after a
# panic, or "SIGSEGV: segmentation violation" then "PC=..." when it cannot panic.
_FAULTS = ("SIGSEGV: segmentation violation", "SIGBUS: bus error")
_ANY_DIAGNOSTIC = re.compile(r"^\S+\(\d+,\d+\): error TS\d+: ", re.MULTILINE)
_DIAGNOSTIC = re.compile(r"^(typed|untyped)\.ts\((\d+),(\d+)\): error TS(\d+): (.*)$")
# A call of a tool the declarations have not, in tsc's words (with its one guess or none),
# said as the run says it, with the closest tools and how to find one; and the tools the
# check's declarations declare, each a member of `Tools` (see check_declarations).
_NO_TOOL = re.compile(
    r"Property '([^']+)' does not exist on type 'Tools'\.(?: Did you mean '[^']+'\?)?"
)
_DECLARED_TOOL = re.compile(r'^  "?([\w$]+)"?(?:<Result = any>)?\(', re.MULTILINE)
# A tool call's promise used as its result (a forgotten await), in tsc's words.
_PROMISE = "'Promise<"
_AWAIT_HINT = "Did you forget to use 'await'?"


def check_declarations(tools: Sequence[Tool]) -> str:
    """The module the check reads: ``export interface Tools`` declaring every tool as the
    model reads it (inputs), with results ``any``, and the builtins."""
    namer = Namer({"Tools", CHECK_RESULT})
    members: list[str] = []
    types: list[str] = []
    for tool in tools:
        member, declared = declare_tool(tool, namer, comments=False, full=False, results=False)
        members.append(member)
        types.append(declared)
    members += [builtin_member(b, results=False) for b in ("tool_search", "skill")]
    return "export interface Tools {\n" + "".join(members) + "}\n" + "".join(types)


def find_compiler() -> Path:
    """The native ``tsc`` of TypeScript 7: ``$CODEMODE_TSC``, or the platform package npm
    installs under ``node_modules`` (of this checkout, then of the working directory).

    Raises :class:`CompilerMissing` saying where it looked and how to install it.
    """
    given = os.environ.get(COMPILER_ENV)
    if given:
        path = Path(given)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise CompilerMissing(
            f"{COMPILER_ENV}={given} is not an executable file; point it at TypeScript 7's "
            "native tsc, or unset it"
        )
    package = f"typescript-{_platform()}-{_arch()}"
    relative = Path("node_modules", "@typescript", package, "lib", "tsc")
    roots = [Path(__file__).resolve().parents[3], Path.cwd()]
    for root in roots:
        path = root / relative
        if path.is_file() and os.access(path, os.X_OK):
            return path
    looked = ", ".join(str(root / relative) for root in dict.fromkeys(roots))
    raise CompilerMissing(
        f"TypeScript 7's compiler is not installed (looked for {looked}); install it with "
        "`npm install typescript@7` in the project (`make install` does), or set "
        f"{COMPILER_ENV} to its native tsc"
    )


def _platform() -> str:
    return {"win32": "win32", "darwin": "darwin"}.get(sys.platform, sys.platform)


def _arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64"}.get(machine, machine)


class TypeChecker(BoundedChecker):
    """Checks JavaScript scripts with TypeScript 7's compiler (see :class:`BoundedChecker`;
    ``compiler`` is its path, default :func:`find_compiler`)."""

    language = "javascript"
    program = "TypeScript 7's native tsc"
    repair = (
        f"point {COMPILER_ENV} at TypeScript 7's native tsc (or unset it to use the one "
        "`npm install typescript@7` installs)"
    )

    def __init__(
        self,
        compiler: str | Path | None = None,
        *,
        timeout: float = TIMEOUT_S,
        memory: int | str = MEMORY_BYTES,
    ) -> None:
        super().__init__(compiler, timeout=timeout, memory=memory)

    @staticmethod
    def find() -> Path:
        return find_compiler()

    @property
    def compiler(self) -> Path:
        return self.path

    async def _check(self, code: str, declarations: str) -> Checked:
        if _asks_no_check(code):
            return Checked()
        with tempfile.TemporaryDirectory(prefix="codemode-check-") as directory:
            folder = Path(directory)
            (folder / "tools.ts").write_text(declarations, encoding="utf-8")
            (folder / "typed.ts").write_text(_TYPED + code + _FOOTER, encoding="utf-8")
            (folder / "untyped.ts").write_text(_UNTYPED + code + _FOOTER, encoding="utf-8")
            output, failure, cut = await self._compile(folder)
        checked = Checked(failure=failure)
        if failure is None:
            # Lines as the compiler numbers them, which ends one at a lone CR and at U+2028
            # too: counted by LF, a wrong call after such a line was dropped as past the end.
            tools = _DECLARED_TOOL.findall(declarations)
            lines = source_lines(code, self.language)
            checked.problems = _problems(output, lines, tools, cut=cut)
        return checked

    async def _compile(self, folder: Path) -> tuple[str, str | None, bool]:
        """The compiler's output, why the check could not finish (or None), and whether the
        output was cut at OUTPUT_BYTES."""
        argv = [str(self.compiler), *_FLAGS, "tools.ts", "typed.ts", "untyped.ts"]
        ran = await run_bounded(argv, folder, timeout=self.timeout, memory=self.memory)
        if ran is None:
            return "", timed_out(self.timeout), False
        output, status = ran.output, ran.status
        first = output.strip().splitlines()[0][:300] if output.strip() else f"status {status}"
        # The Go runtime's own report of a failed allocation (its first lines vary with where
        # it failed), or of a thread it could not make room for: the data rlimit was met.
        head = "\n".join(output.lstrip().splitlines()[:5])
        if status != 0 and any(sign in head for sign in _OUT_OF_MEMORY):
            return output, out_of_memory(self.memory), ran.cut
        # Not every failed allocation gets reported: under load the runtime sometimes faults
        # at its data rlimit instead (the kernel's SIGSEGV or SIGBUS, or its own report of
        # one), 2 runs in 4 of the type bomb while the machine was busy.
        faulted = status in FAULTED or (status != 0 and any(sign in head for sign in _FAULTS))
        if faulted and not _ANY_DIAGNOSTIC.search(output):
            return output, out_of_memory(self.memory), ran.cut
        if ran.cut or status == 0 or (status in (1, 2) and _ANY_DIAGNOSTIC.search(output)):
            return output, None, ran.cut  # clean, or errors were reported
        if status == -signal.SIGXCPU or status == -signal.SIGKILL:
            return output, out_of_cpu(self.timeout), ran.cut
        return output, crashed(first), ran.cut


def _asks_no_check(code: str) -> bool:
    """Whether ``// @ts-nocheck`` is among the comments ``code`` begins with, where
    TypeScript reads it and checks nothing of the file. The check's own line before the
    script put it past the file's top, and a script that asked not to be checked was
    refused. (A scan, not one pattern: a pattern of repeated spaces and comments took time
    exponential in them.)"""
    at, end = 0, len(code)
    while True:
        at = _SPACES.match(code, at).end()  # type: ignore[union-attr]  # it always matches
        if code.startswith("//", at):
            line_end = code.find("\n", at)
            line_end = end if line_end < 0 else line_end
            if _NO_CHECK.match(code, at, line_end):
                return True
            at = line_end
        elif code.startswith("/*", at):
            closed = code.find("*/", at + 2)
            if closed < 0:
                return False
            at = closed + 2
        else:
            return False


def _problems(
    output: str, script_lines: list[str], tools: list[str], *, cut: bool = False
) -> list[TypeProblem]:
    # `file(line,col): error TSn: message`, then the message's details indented below it.
    found: list[tuple[str, int, int, int, list[str]]] = []
    for line in output.splitlines():
        match = _DIAGNOSTIC.match(line)
        if match:
            file, row, column, code, message = match.groups()
            if _PROMISE in message and _AWAIT_HINT not in message:
                # tsc says so in related information, which its plain output leaves out.
                message += " " + _AWAIT_HINT
            found.append((file, int(row) - 1, int(column), int(code), [message]))
        elif found and line.startswith("  "):
            found[-1][4].append(line.strip())
    typed = [
        TypeProblem(row, column, code, "\n    ".join(parts))
        for file, row, column, code, parts in found
        if file == "typed" and not _widened(parts[-1])
    ]
    # tsc reports nothing of what a program means once a file of it does not parse, so only
    # errors TS1xxx mean the script was not parsed (the run reports its syntax error); one of
    # those beside the others is a rule the parsed script breaks (an async function typed
    # `: number`, TS1064), and the calls' errors still count.
    if not any(code >= 2000 for _, _, _, code, _ in found):
        return []
    untyped = {(row, column, code) for file, row, column, code, _ in found if file == "untyped"}
    # Output cut at OUTPUT_BYTES (thousands of errors) ends before the untyped file's later
    # errors: a typed error at a line it did not reach was reported as about a call (a
    # namespace repeated 3,000 times gave 'A namespace declaration is only allowed at the
    # top level...'). tsc writes a file's errors in line order, so the lines before the last
    # untyped error it wrote are whole; one past them cannot be told, and is left to the run.
    seen = max((row for row, _, _ in untyped), default=0) if cut else len(script_lines) + 1
    kept = [
        p
        for p in typed
        if (p.line, p.column, p.code) not in untyped
        and 1 <= p.line <= len(script_lines)
        and p.line < seen
    ]
    return shown_explained(
        kept, lambda p: _explained(str(p.message), tools, script_lines[p.line - 1])
    )


def _explained(message: str, tools: list[str], line: str) -> str:
    """tsc's ``message`` as the run says it, for a tool that does not exist (written on the
    script's ``line``: ``tools.get-price({...})`` is ``tools.get - price(...)``)."""
    unknown = _NO_TOOL.fullmatch(message)
    if unknown is None:
        return message
    return no_such_tool(unknown[1], tools, language="javascript", line=line)


# The compiler types a value a script keeps in a variable by its kind, not its value
# (`const opts = { state: "open" }` is `{ state: string }`), so it cannot tell such a value
# from a wrong one where a tool takes one of some literals: `Type 'string' is not assignable
# to type '"all" | "closed" | "open"'` as the innermost reason. That is left to the tool's
# own check of its arguments when the call is made; a wrong literal written in the call
# (`Type '"bogus"' is not ...`) is still refused here.
_WIDENED = re.compile(r"^Type '(?:string|number|boolean)' is not assignable to type '(.+)'\.$")
# A member, or the count tsc writes for the members of a long union it leaves out ("zone_21"
# | ... 48 more ... | "zone_9": an enum of some 25 values or more, whose value kept in a
# variable was refused).
_LITERAL = re.compile(
    r'^(?:"(?:[^"\\]|\\.)*"|-?[0-9][0-9.e+-]*|true|false|\.\.\. \d+ more \.\.\.)$'
)


# Results are declared `any` in the check, and the compiler infers `unknown` from an `any`
# where a generic takes it (`new Set(items.map((o) => o.id))` is a `Set<unknown>`,
# `Object.values(totals)` of a `{}` built over results an `unknown[]`): a value it knows
# nothing of, which may well be what the tool takes, is left to the tool's own check.
_UNKNOWN = re.compile(r"^(?:Type|Argument of type) 'unknown(?:\[\])*' is not assignable to ")


# A dictionary's keys are not in its type (`const params: Record<string, any> = { repo }`,
# then `params.state = ...`; `Object.fromEntries(...)`), so the compiler says a key the tool
# requires is missing from it, where it may well be: left to the tool's own check too.
_DICTIONARY = r"(?:Record<string, [^']+>|\{ \[\w+: string\]: [^']+\})"
_KEYS_UNKNOWN = re.compile(
    rf"^(?:Property '[^']+' is missing in type '{_DICTIONARY}' but required in type "
    rf"|Type '{_DICTIONARY}' is missing the following properties from type )"
)


# Nor is an array's length in its type (`const point = [48.85, 2.35]` is a `number[]`), so
# the compiler says it may be too short where a tool takes a tuple (a point, a range of
# dates), where it may well be long enough. A tuple of the wrong length is still refused
# ("Source has 1 element(s) but target requires 2").
_LENGTH_UNKNOWN = re.compile(r"^Target requires \d+ element\(s\) but source may have fewer\.$")


def _widened(reason: str) -> bool:
    """Whether ``reason`` (a diagnostic's innermost line) is about a value the compiler
    cannot know: a kind where literals are declared (the script's value may well be one of
    them), ``unknown``, a dictionary's keys, or an array's length."""
    if _UNKNOWN.match(reason) or _KEYS_UNKNOWN.match(reason) or _LENGTH_UNKNOWN.match(reason):
        return True
    match = _WIDENED.match(reason)
    return match is not None and all(_LITERAL.match(m) for m in match[1].split(" | "))
