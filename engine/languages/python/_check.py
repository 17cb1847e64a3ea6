"""Checking a Python script against the tools' stubs, with ``ty``, before its first call.

A script that calls a tool that does not exist, leaves out a required argument or passes one
of the wrong type (at any depth, a missing key of a nested ``TypedDict`` too) would fail at
that call, after the calls before it took effect. The check finds those before any call
runs, with the checker's message and the script's own line.

As for JavaScript (``engine.languages.javascript``), only what concerns a call to a tool is
reported: the script is checked twice in one run, once against the stubs
(``check_stubs``: results ``Any``, so a script may use them freely) and once with ``tools``
``Any``; an error found in both is about the script's own typing and is left to the run. A
script the checker cannot parse is not refused either: the run reports its syntax error.
The script is the body of an async function, so the check wraps it in one, each line
indented by one space (so line n + 2 of the file is line n of the script).

The checker is ``ty`` (PyPI, one static binary), chosen by measuring on a 2-core VM against
mypy and pyright, all three catching a wrong argument name and type and a missing required
key: ty 0.08-0.2 s and about 45 MB per check, mypy (no cache) 2.1-2.6 s and 110 MB, pyright
(Node) 3.8-6.3 s and 135 MB. It runs as a bounded subprocess (``engine.languages._check``)
with no environment, and it reads only the check's own files and its bundled typeshed: it is
given an empty Python environment and configuration, so a script's ``import`` cannot make it
read a host module and show its contents to the model in an error.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import sys
import tempfile
from pathlib import Path

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
from engine.languages.python._stubs import SCRIPT_ERROR_STUBS, SCRIPT_ERRORS
from sandbox.names import closest_names, no_such_tool, unwritable_tool
from sandbox.replay import source_lines

CHECKER_ENV = "CODEMODE_TY"

_NAMES = ", ".join(("tools", "files", *SCRIPT_ERRORS))
_TYPED = f"from tools import {_NAMES}\nasync def __cm_script():\n"
_UNTYPED = f"from untyped_tools import {_NAMES}\nasync def __cm_script():\n"
_UNTYPED_STUB = "from typing import Any\ntools: Any\nfiles: Any\n" + SCRIPT_ERROR_STUBS
_OFFSET = 2  # header lines before the script's first
_DIAGNOSTIC = re.compile(r"^(typed|untyped)\.py:(\d+):(\d+): error\[([\w-]+)\] (.*)$")
_ANY_DIAGNOSTIC = re.compile(r"^\S+:\d+:\d+: (error|warning|info)\[", re.MULTILINE)
# Rust's report of a failed allocation, or of a thread it could not make room for (the data
# rlimit counts thread stacks); ty's own when it cannot read its typeshed ("Allocation error :
# not enough memory").
_OUT_OF_MEMORY = (
    "memory allocation of",
    "out of memory",
    "not enough memory",
    "cannot allocate memory",
    "threadpoolbuilderror",
    "failed to spawn thread",
)
# Where in ty's source a panic was, and how to see more of it: nothing a model can use (the
# panic's message is the line after).
_NOT_SAID = re.compile(r"thread '[^']*' (?:\(\d+\) )?panicked at |note: run with `RUST_BACKTRACE")
# One thread: a check reads four small files, and one check per core runs at a time.
CHECKER_SETTINGS = {"TY_MAX_PARALLELISM": "1"}
_NO_OVERLOAD = re.compile(r"No overload of bound method `Tools\.(\w+)` matches arguments")
_NO_TOOL = re.compile(r"Object of type `Tools` has no attribute `(\w+)`")
_DECLARED_TOOL = re.compile(r"async def (\w+)\(\s*self\b")
# A tool a script reaches with getattr alone, as the stubs' note on it says.
_REACHED_BY_GETATTR = re.compile(r'# tools "([^"]+)": call it as await getattr\(tools, ')


def find_checker() -> Path:
    """``ty``: ``$CODEMODE_TY``, or the binary the ``ty`` package installed.

    Raises :class:`CompilerMissing` saying how to install it.
    """
    given = os.environ.get(CHECKER_ENV)
    if given:
        path = Path(given)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise CompilerMissing(
            f"{CHECKER_ENV}={given} is not an executable file; point it at ty, or unset it"
        )
    try:
        from ty import find_ty_bin

        return Path(find_ty_bin())
    except (ImportError, FileNotFoundError) as e:
        raise CompilerMissing(
            f"ty, the checker of Python scripts, is not installed ({type(e).__name__}); "
            "install it with `pip install 'codemode[python]'` (`make install` does), or set "
            f"{CHECKER_ENV} to its binary"
        ) from None


class PythonTypeChecker(BoundedChecker):
    """Checks Python scripts with ``ty`` (see :class:`BoundedChecker`; ``checker`` is its
    path, default :func:`find_checker`)."""

    language = "python"
    program = "ty"
    repair = (
        f"point {CHECKER_ENV} at ty (or unset it to use the one "
        "`pip install 'codemode[python]'` installs)"
    )

    def __init__(
        self,
        checker: str | Path | None = None,
        *,
        timeout: float = TIMEOUT_S,
        memory: int | str = MEMORY_BYTES,
    ) -> None:
        super().__init__(checker, timeout=timeout, memory=memory)

    @staticmethod
    def find() -> Path:
        return find_checker()

    async def _check(self, code: str, declarations: str) -> Checked:
        # Each line as Python counts lines (a lone CR ends one too), so each is indented.
        futures = _leading_futures(code)
        body = "".join(
            " pass\n" if n in futures else f" {line}\n"
            for n, line in enumerate(source_lines(code, self.language), 1)
        )
        with tempfile.TemporaryDirectory(prefix="codemode-check-") as directory:
            folder = Path(directory)
            isolate(folder)
            (folder / "tools.pyi").write_text(declarations, encoding="utf-8")
            (folder / "untyped_tools.pyi").write_text(_UNTYPED_STUB, encoding="utf-8")
            (folder / "typed.py").write_text(_TYPED + body, encoding="utf-8")
            (folder / "untyped.py").write_text(_UNTYPED + body, encoding="utf-8")
            output, failure, cut = await self._run(folder)
        checked = Checked(failure=failure)
        if failure is None:
            checked.problems = _problems(output, code, declarations, cut=cut)
        return checked

    async def _run(self, folder: Path) -> tuple[str, str | None, bool]:
        """The checker's output, why the check could not finish (or None), and whether the
        output was cut at OUTPUT_BYTES."""
        argv = checker_argv(self.path, "typed.py", "untyped.py")
        ran = await run_bounded(
            argv, folder, timeout=self.timeout, memory=self.memory, env=CHECKER_SETTINGS
        )
        if ran is None:
            return "", timed_out(self.timeout), False
        output, status = ran.output, ran.status
        if status != 0 and any(sign in output.lower() for sign in _OUT_OF_MEMORY):
            return output, out_of_memory(self.memory), ran.cut
        if ran.cut or status == 0 or (status == 1 and _ANY_DIAGNOSTIC.search(output)):
            return output, None, ran.cut  # clean, or errors were reported
        if status in FAULTED and not _ANY_DIAGNOSTIC.search(output):
            return output, out_of_memory(self.memory), ran.cut
        if status in (-signal.SIGXCPU, -signal.SIGKILL):
            return output, out_of_cpu(self.timeout), ran.cut
        lines = [
            line
            for line in output.splitlines()
            if line.strip() and "WARN" not in line and not _NOT_SAID.match(line)
        ]
        return output, crashed(lines[0].strip()[:300] if lines else f"status {status}"), ran.cut


def _leading_futures(code: str) -> set[int]:
    """The lines of the script's leading ``from __future__ import ...`` statements (after
    its docstring, if any), which the run takes out of its body as a module's
    (``sandbox.python._future_flags``): in the check's function they are a syntax error,
    and a script that began with one, as models begin files, was not checked at all. Each
    such line is a ``pass`` there."""
    if "__future__" not in code:
        return set()
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()  # the run says why
    start = 0 if ast.get_docstring(tree, clean=False) is None else 1
    lines: set[int] = set()
    for node in tree.body[start:]:
        if not (isinstance(node, ast.ImportFrom) and node.module == "__future__") or node.level:
            break
        lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def isolate(folder: Path) -> None:
    """Give ``folder`` an empty Python environment (``env``) and configuration
    (``ty.toml``): ty run there with :func:`checker_argv` resolves imports in the folder's
    files and its bundled typeshed only, and no user or project setting applies."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (folder / "env" / "lib" / version / "site-packages").mkdir(parents=True)
    (folder / "env" / "pyvenv.cfg").write_text("home = /nonexistent\n", encoding="utf-8")
    (folder / "ty.toml").write_text("", encoding="utf-8")


def checker_argv(checker: Path, *files: str) -> list[str]:
    """The command that checks ``files`` in a folder :func:`isolate` prepared."""
    return [
        str(checker),
        "check",
        "--config-file",
        "ty.toml",
        "--python",
        "env",
        "--python-version",
        f"{sys.version_info.major}.{sys.version_info.minor}",
        "--python-platform",
        "linux",
        "--output-format",
        "concise",
        "--no-progress",
        "--color",
        "never",
        *files,
    ]


# What ty calls the value of a call not awaited (the stubs' tools are async methods).
_COROUTINE = "`CoroutineType["
# What ty says of str.join given no iterable of strings (a coroutine among them).
_JOIN_MISMATCH = "No overload of bound method `str.join` matches arguments"


def _problems(output: str, code: str, declarations: str, *, cut: bool = False) -> list[TypeProblem]:
    lines = source_lines(code, "python")  # as the checked file has them (see _check)
    script_lines = len(lines)
    found = [m.groups() for m in map(_DIAGNOSTIC.match, output.splitlines()) if m]
    typed = [
        TypeProblem(int(row) - _OFFSET, int(column) - 1, code, message)
        for file, row, column, code, message in found
        if file == "typed"
    ]
    if any(p.code == "invalid-syntax" for p in typed):
        return []  # not parsed as Python: the run reports the syntax error
    untyped = {
        (int(row) - _OFFSET, int(column) - 1, code)
        for file, row, column, code, _ in found
        if file == "untyped"
    }
    # Output cut at OUTPUT_BYTES (thousands of errors) ends before the untyped file's later
    # errors, or all of them: a typed error it did not reach was reported as about a call.
    # ty writes a file's errors in line order, so the lines before the last untyped error
    # read are whole; one past them cannot be told, and is left to the run.
    seen = max((row for row, _, _ in untyped), default=0) if cut else script_lines + 1
    kept: list[TypeProblem] = []
    keyed: set[int] = set()  # lines where a key's value is left to the tool
    for p in typed:
        if (p.line, p.column, p.code) in untyped or not 1 <= p.line <= script_lines:
            continue
        if p.line >= seen:
            continue
        if not _widened(str(p.message), lines[p.line - 1][max(p.column - 1, 0) :]):
            kept.append(p)
        elif _KEY_ARGUMENT.search(str(p.message)):
            keyed.add(p.line)
    # A dict written in the call whose keys are wrong: ty says which, and before that that
    # the dict is not the tool's arguments, which says nothing more; nor does it of one whose
    # wrong keys' values are left to the tool (see _widened).
    said = {p.line for p in kept if not _DICT_ARGUMENT.search(str(p.message))} | keyed
    kept = [p for p in kept if p.line not in said or not _DICT_ARGUMENT.search(str(p.message))]
    calls = _tool_calls(code) if kept else {}
    if calls is None:
        # Not Python as the run parses it (a script indented as a whole, which the check's
        # own indent hid from ty): the run says why, before any call.
        return []
    inputs = {typed: tool for tool, typed in _INPUT_FORM.findall(declarations)}
    return shown_explained(
        kept,
        lambda p: _explained(
            str(p.message),
            declarations,
            inputs,
            _call_at(calls, p.line, p.column),
            lines[p.line - 1],
        ),
    )


# ty types a value a script builds before the call by its kind, not its value: a dict made
# in a variable (`opts = {"state": "open"}`) is `dict[str, str]`, whose keys it does not
# know, and a text computed at run time is `str`. Where a tool takes a TypedDict or one of
# some literals, it cannot tell such a value from a wrong one; that is left to the tool's
# own check of its arguments when the call is made. So is text made from a literal
# (`"OPEN".lower()`, a `LiteralString`) and a dict passed as keywords (`**opts`). A dict or
# literal written in the call is still checked here (ty names each wrong, missing or unknown
# key there on its own).
_ARGUMENT = re.compile(r"is incorrect: Expected `(.+)`, found `(.+)`$")
# The same of a key's value in a dict written in the call (`{"state": state}`, `opts={...}`),
# which ty places at the value: the expected type, then the value's.
_KEY_ARGUMENT = re.compile(
    r"^Invalid argument to key .* with declared type `([^`]+)` on [^:]*: value of type `([^`]+)`$"
)
# A dict built before the call, alone, in a list or one of a union (`None | dict[str, str]`
# for a variable given a dict in an `if`; `list[X | dict[str, str]]` for `xs + [x]`).
_BUILT = re.compile(r"(?:list\[)*(?:.* \| )?dict\[.*")
_PLAIN = re.compile(r"(?:list\[)*(?:str|int|float|bool|LiteralString)\]*")
# An argument ty places at its keyword (`start={...}`) or its value, written in the call.
_WRITTEN = re.compile(r"\s*(?:\w+\s*=\s*)?(?:[{\[]|dict\()")
_DECLARED_TYPE = re.compile(r"\b(?!Literal\b|None\b|Any\b|NotRequired\b)[A-Z]\w*")
# A list written in the call (`edits=[edit]`) that ty types with a dict among its items'
# kinds: a dict built before the call, as above, or one written there, which ty checks key by
# key on its own.
_WRITTEN_LIST = re.compile(r"\s*(?:\w+\s*=\s*)?\[")


def _widened(message: str, argument: str) -> bool:
    """Whether ``message`` is about an argument ty knows only by its kind (see above);
    ``argument`` is the script's text from where ty places it."""
    match = _ARGUMENT.search(message) or _KEY_ARGUMENT.search(message)
    if match is not None and argument.startswith("**"):
        # `tools.x(**opts)`: ty matches the type of every value of the dict against every
        # keyword the tool takes, whichever the dict has.
        return True
    if (
        match is not None
        and _WRITTEN_LIST.match(argument)
        and _BUILT.fullmatch(match[2])
        and _DECLARED_TYPE.search(match[1]) is not None
    ):
        return True
    if match is None or _WRITTEN.match(argument):
        return False  # written in the call (ty types a dict for a union of TypedDicts so)
    expected, found = match[1], match[2]
    if "Literal[" in found:
        return False  # written in the call: ty knows its value
    if _BUILT.fullmatch(found):
        return _DECLARED_TYPE.search(expected) is not None
    return "Literal[" in expected and _PLAIN.fullmatch(found) is not None


# The check's form of a tool that takes one mapping: `async def x(self, input: X_Input, /)`.
_INPUT_FORM = re.compile(r"async def (\w+)\(self, input: (\w+), /\)")
# ty's line for an argument that is not a tool's mapping of arguments.
_ARGUMENT_TO = re.compile(
    r"^Argument to bound method `Tools\.(\w+)` is incorrect: Expected `(\w+)`"
)
_DICT_ARGUMENT = re.compile(r"^Argument to bound method `Tools\.\w+` is incorrect: .*found `dict\[")


def _explained(
    message: str,
    declarations: str,
    inputs: dict[str, str],
    call: ast.Call | None,
    line: str,
) -> str:
    """ty's ``message`` in the script's terms: one about no matching overload (a tool takes
    keywords or one mapping) with the keywords the tool takes and which of the call's are
    unknown or missing; a positional argument that is no mapping as the keywords to give;
    the check's mapping types (``Send_email_Input``, which no declaration the model read
    names) as the arguments of their tools; a tool call's coroutine used as its result (a
    forgotten await) with what to write. ``line`` is the script's line the message is of."""
    if _COROUTINE in message:
        return message + "; did you forget to `await` the call?"
    if message == _JOIN_MISMATCH:
        # ty's concise line names no type: a call not awaited (`names = tools.x()`, then
        # `", ".join(names)`) or a result that holds no strings. Only the declarations'
        # types make this one (the untyped check's same problem is left out).
        return (
            f"{message}; join takes strings: await a call for its result first (`await "
            "tools.name(...)`), and make other values text (`', '.join(map(str, xs))`)"
        )
    if (unknown := _NO_TOOL.fullmatch(message)) is not None:
        name = unknown[1]
        if name in _REACHED_BY_GETATTR.findall(declarations):
            # One the stubs declare by a note (it was said not to exist).
            return unwritable_tool(name)
        # As the run would say it: ty's text named no tool there is.
        return no_such_tool(name, _DECLARED_TOOL.findall(declarations), line=line)
    match = _NO_OVERLOAD.search(message) or _ARGUMENT_TO.search(message)
    keywords = _keywords(match.group(1), declarations) if match else None
    if match and keywords is not None:
        name = match.group(1)
        shown = keywords.replace("_NotRequired", "NotRequired")
        shown = re.sub(r"\b_(str|int|float|bool|list|dict|Any|Literal|Never)\b", r"\1", shown)
        if match.re is _NO_OVERLOAD:
            wrong = _mismatch(name, keywords, call)
            return f"tools.{name} takes ({shown}); {wrong or 'the call does not match'}"
        written = call.args[0] if call is not None and call.args else None
        if (
            match.group(2) in inputs
            and written is not None
            and not isinstance(written, ast.Dict | ast.Name | ast.Call | ast.Subscript)
        ):
            first = _top_level_split(keywords)[0].split(":", 1)[0].strip()
            return (
                f"tools.{name} takes keyword arguments ({shown}), as "
                f"tools.{name}({first}=...), or one dict of them"
            )
    for typed, tool in inputs.items():
        if typed in message:
            arguments = f"tools.{tool}'s arguments"
            message = message.replace(f"TypedDict `{typed}` constructor", arguments)
            message = message.replace(f"TypedDict `{typed}`", arguments)
            message = message.replace(f"`{typed}`", arguments)
    return message


def _keywords(name: str, declarations: str) -> str | None:
    """The keywords tool ``name`` takes, as its check declaration writes them."""
    for line in declarations.splitlines():
        signature = line.strip()
        if signature.startswith(f"async def {name}(self, *, "):
            return signature[len(f"async def {name}(self, *, ") : signature.rindex(") ->")]
    return None


def _mismatch(name: str, keywords: str, call: ast.Call | None) -> str | None:
    """Which of ``call``'s keywords tool ``name`` does not take, and which it takes that the
    call leaves out; None when the call cannot say (``**opts``) or names the right ones
    (then a value is of another type, as ty's own lines say)."""
    if call is None or any(k.arg is None for k in call.keywords):
        return None
    if call.args:
        return f"give keyword arguments, as tools.{name}(key=value), or one dict of them"
    params = [p.strip() for p in _top_level_split(keywords)]
    names = [p.split(":", 1)[0].strip() for p in params if p and not p.startswith(("*", "/"))]
    required = [
        p.split(":", 1)[0].strip()
        for p in params
        if p and not p.startswith(("*", "/")) and not p.endswith("= ...")
    ]
    given = [k.arg for k in call.keywords if k.arg is not None]
    said = []
    open_ended = any(p.startswith("**") for p in params)  # it takes other keywords too
    for unknown in (k for k in given if k not in names and not open_ended):
        near = closest_names(unknown, names)
        said.append(f"it takes no {unknown}" + (f" (did you mean {near[0]}?)" if near else ""))
    missing = [k for k in required if k not in given]
    if missing:
        listed = ", ".join(missing[:-1]) + " and " + missing[-1] if len(missing) > 1 else missing[0]
        said.append(f"{listed} {'is' if len(missing) == 1 else 'are'} missing")
    return "; ".join(said) or None


def _top_level_split(text: str) -> list[str]:
    """``text`` split at its commas outside brackets (``a: dict[str, int], b: int``)."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _tool_calls(code: str) -> dict[int, list[ast.Call]] | None:
    """The script's calls of ``tools.<name>(...)``, by line; None when it does not parse
    as the run parses it (``sandbox.python.compile_script``)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    calls: dict[int, list[ast.Call]] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "tools"
        ):
            calls.setdefault(node.lineno, []).append(node)
    return calls


def _call_at(calls: dict[int, list[ast.Call]], line: int, column: int) -> ast.Call | None:
    """The call ty's problem at ``line``, ``column`` (its 0-based column in the script, plus
    one) is about: the last one on the line that starts at or before it."""
    here = sorted(calls.get(line, []), key=lambda c: c.col_offset)
    before = [c for c in here if c.col_offset <= column - 1]
    return before[-1] if before else (here[0] if here else None)
