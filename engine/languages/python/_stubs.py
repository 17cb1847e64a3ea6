"""What the model reads about the tools when it writes Python: stubs and the ``run_code`` tool.

A declarations block looks like this::

    class Tools:
        async def github__list_prs(
            self,
            *,
            repo: str,  # Repository as owner/name.
            state: Literal["open", "closed", "all"] | None = ...,
        ) -> list[Github__list_prs_PR]:
            \"\"\"List pull requests of a repository.\"\"\"
        async def tool_search(self, *, query: str, limit: int | None = ...) -> str:
            \"\"\"Find tools by what they do, or by exact names ...\"\"\"

    tools: Tools

    class Github__list_prs_PR(TypedDict):
        number: int
        title: str

Each tool is an async method of ``Tools`` taking its input's properties as keyword
arguments (an optional one has a default, ``= ...``), with its description's first line as
its docstring (the whole description in a search answer) and its result type (``Any`` when
it declares no output schema). An optional argument may be given None: the sandbox leaves
it out, as JavaScript leaves out ``undefined``. An object type is a ``TypedDict`` (the
functional form when a key is not a Python name); each ``$ref`` target is a named type,
declared once after ``tools``, so a recursive schema stays finite, and a model several
tools' schemas define is one class, as in TypeScript, as is an object several tools write
out alike under one property's name. A tool whose properties
are not all Python names takes ``**kwargs: Unpack[<Tool>_Input]``. Python has no
intersection type: an ``allOf`` of several object types is ``Any``. A tool named a keyword
or with a leading ``_`` (which a script may not write as an attribute) is comments: a note
saying to call it with ``getattr``, then its description and signature. The schema walk is
shared with TypeScript (``engine.languages._walk``), and so are the 12 KiB rules
(``engine.languages._dialect``).

The type check reads the same stubs with every name it needs from ``builtins`` and
``typing`` under a private alias (``_str``), so a tool or a key called ``list`` or ``str``
cannot shadow a type, with results ``Any``, and with each tool taking either its keywords or
one mapping (``tools.x({"key": 1})``), as the sandbox does.
"""

from __future__ import annotations

import keyword
import re
from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import orjson

from engine._naming import BUILTIN_TOOLS, SKILL, TOOL_SEARCH
from engine._tools import Tool
from engine.languages._dialect import MAX_SUMMARY, Dialect, description_lines
from engine.languages._walk import (
    CLOSED,
    MAX_ENUM,
    Document,
    Member,
    Namer,
    Rendered,
    Walker,
    base_type,
    first_line,
    hidden_escaped,
    is_plain_object,
    json_text,
    result_document,
    type_prefix,
)

INDENT = "    "
# A signature that fits on one line of this many characters (and has no comments) is
# written on one line.
LINE_WIDTH = 100

# Names a stub writes in type expressions. The check's stubs import each under a private
# alias (`_str`), so nothing in the stub can shadow it.
_BUILTIN_NAMES = ("str", "int", "float", "bool", "list", "dict")
_TYPING_NAMES = ("Any", "Literal", "Never", "NotRequired", "TypeAlias", "TypedDict", "overload")
_TYPE_NAMES = frozenset({*_BUILTIN_NAMES, *_TYPING_NAMES, "Unpack"})

CHECK_IMPORTS = (
    "from builtins import "
    + ", ".join(f"{n} as _{n}" for n in _BUILTIN_NAMES)
    + "\nfrom typing import "
    + ", ".join(f"{n} as _{n}" for n in _TYPING_NAMES)
    + "\nfrom typing_extensions import Unpack as _Unpack\n"
)

_JSON_SCALARS = {"string": "str", "number": "float", "integer": "int", "boolean": "bool"}

_BUILTINS: dict[str, tuple[str, list[tuple[str, str, bool]]]] = {
    TOOL_SEARCH: (
        'Find tools by what they do, or by exact names ("get_user, list_orders"); answers '
        "with their declarations, as text.",
        [("query", "str", True), ("limit", "int", False)],
    ),
    SKILL: (
        "Load a skill by name; answers with its instructions and the declarations of its "
        "tools, as text.",
        [("name", "str", True)],
    ),
}

_HEADER = "class Tools:\n"
_FOOTER = "\ntools: Tools\n\n"

# The error classes a script has in scope besides ``tools`` and ``files`` (sandbox/python.py
# raises them), as the type check declares them, so ``except ToolError as e: e.tool`` checks.
SCRIPT_ERRORS = ("ToolError", "LimitError", "FileError")
SCRIPT_ERROR_STUBS = (
    "class ToolError(Exception):\n    tool: str\n"
    "class LimitError(Exception): ...\n"
    "class FileError(Exception): ...\n"
)


def is_python_name(name: str) -> bool:
    """True when ``name`` can be written as a Python name: an ASCII identifier that is not a
    keyword (tool names are ASCII identifiers already)."""
    return name.isascii() and name.isidentifier() and not keyword.iskeyword(name)


def _string(value: str) -> str:
    # JSON's string escapes are Python's too; the marks that hide or reorder text escaped.
    return hidden_escaped(json_text(value), "\\U%08x")


def python_literal(value: Any) -> str:
    """JSON data as a Python literal (``None``, ``True``, ``{"a": [1, 2]}``); raises
    ValueError or TypeError for what JSON cannot hold."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, int | float):
        return json_text(value)  # NaN and infinities are refused, as in JSON
    if isinstance(value, list):
        return "[" + ", ".join(python_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{"
            + ", ".join(f"{_string(str(k))}: {python_literal(v)}" for k, v in value.items())
            + "}"
        )
    raise TypeError(f"not JSON data: {type(value).__name__}")


class StubRenderer(Walker):
    """Renders the schemas of one tool as Python types (see :class:`Walker`); object types
    become ``TypedDict`` classes, collected in :attr:`classes`. ``check`` writes the type
    check's spelling (private aliases)."""

    names_objects = True

    def __init__(self, namer: Namer, *, comments: bool, check: bool = False) -> None:
        super().__init__(namer, comments=comments)
        self.check = check
        self.unknown = Rendered(self.n("Any"))
        self.never = Rendered(self.n("Never"))
        self.null = Rendered("None")
        self.classes: deque[str] = deque()

    def value_text(self, value: Any) -> str:
        return python_literal(value)

    def n(self, name: str) -> str:
        """A builtin or typing name as this stub spells it."""
        return f"_{name}" if self.check else name

    def const(self, value: Any) -> Rendered:
        if value is None:
            return self.null
        if isinstance(value, bool | int | str):
            return Rendered(f"{self.n('Literal')}[{_literal(value)}]")
        return self.scalar(base_type(value))

    def enum(self, values: list[Any]) -> Rendered:
        literals = [v for v in values if isinstance(v, bool | int | str)]
        if len(values) > MAX_ENUM or len(literals) + (None in values) < len(values):
            return self.union([self.scalar(base_type(v)) for v in values])
        unique = list(dict.fromkeys(_literal(v) for v in literals))
        parts = [Rendered(f"{self.n('Literal')}[{', '.join(unique)}]")] if unique else []
        if None in values:
            parts.append(self.null)
        return self.union(parts)

    def scalar(self, kind: str) -> Rendered:
        if kind == "null":
            return self.null
        name = _JSON_SCALARS.get(kind)
        return Rendered(self.n(name)) if name else self.unknown

    def array(self, item: Rendered) -> Rendered:
        return Rendered(f"{self.n('list')}[{item.text}]")

    def tuple_type(self, elements: list[tuple[Rendered, bool]], rest: Rendered | None) -> Rendered:
        # A script passes and gets lists, never tuples: a list of what its places hold.
        items = [t for t, _ in elements] + ([rest] if rest is not None else [])
        return self.array(self.union(items) if items else self.unknown)

    def object(
        self, members: list[Member], extra: Rendered | None, level: int, hint: str
    ) -> Rendered:
        if not members:
            value = self.never if extra is CLOSED else (extra or self.unknown)
            return Rendered(f"{self.n('dict')}[{self.n('str')}, {value.text}]")
        return Rendered(self.typed_dict(self.namer.fresh(hint), members, extra))

    def written_out(self, members: list[Member], extra: Rendered | None, hint: str) -> str:
        # What the class would hold, without declaring it (object() declares one).
        return orjson.dumps(
            [
                [[m.key, m.type.text, m.required, m.comment] for m in members],
                None if extra is None else extra.text,
            ]
        ).decode()

    def typed_dict(self, name: str, members: list[Member], extra: Rendered | None) -> str:
        """Declare the ``TypedDict`` ``name`` (in :attr:`classes`) and return its name."""
        open_ = extra is not None and extra is not CLOSED
        if all(self._key_is_name(m.key) for m in members):
            bases = (
                f"{self.n('TypedDict')}, extra_items={self.n('Any')}"
                if open_
                else self.n("TypedDict")
            )
            lines = [f"class {name}({bases}):"]
            for m in members:
                lines.append(f"{INDENT}{m.key}: {self._value(m)}{_comment(m.comment)}")
        else:
            lines = [f'{name} = {self.n("TypedDict")}("{name}", {{']
            for m in members:
                lines.append(f"{INDENT}{_string(m.key)}: {self._value(m)},{_comment(m.comment)}")
            extra_items = f", extra_items={self.n('Any')}" if open_ else ""
            lines.append(f"}}{extra_items})")
        self.classes.append("\n".join(lines))
        return name

    def _key_is_name(self, key: str) -> bool:
        # In a class body a key is a name in scope: one called `str` would shadow the type
        # (the check's private aliases cannot be shadowed so).
        return is_python_name(key) and (self.check or key not in _TYPE_NAMES)

    def _value(self, member: Member) -> str:
        if member.required:
            return member.type.text
        return f"{self.n('NotRequired')}[{member.type.text}]"

    def union(self, parts: list[Rendered]) -> Rendered:
        texts: dict[str, None] = {}  # ordered, and a lookup is not a scan
        for part in parts:
            if part.text == self.unknown.text:
                return self.unknown
            if part.text == self.never.text:
                continue
            for piece in part.members or (part.text,):
                texts.setdefault(piece)
        if not texts:
            return self.never
        if len(texts) == 1:
            return Rendered(next(iter(texts)))
        return Rendered(" | ".join(texts), 0, tuple(texts))

    def intersection(self, parts: list[Rendered]) -> Rendered:
        kept = [p for p in parts if p.text != self.unknown.text]
        if any(p.text == self.never.text for p in kept):
            return self.never
        distinct = list(dict.fromkeys(p.text for p in kept))
        if len(distinct) == 1:
            return kept[0]
        return self.unknown  # Python has no intersection type

    def named(self, doc: Document, pointer: str, name: str) -> Rendered:
        schema = doc.resolve(pointer)
        if is_plain_object(schema):
            members, extra = self.members(schema, doc, 0)
            if members:
                return Rendered(self.typed_dict(name, members, extra))
        return super().named(doc, pointer, name)

    def declaration(self, name: str, body: Rendered) -> str:
        # The classes met while rendering this type, then the type itself when it is not
        # one of them.
        parts = list(self.classes)
        self.classes.clear()
        if body.text != name:
            parts.append(f"{name}: {self.n('TypeAlias')} = {body.text}")
        return "\n".join(parts)

    def declarations(self) -> str:
        """Every declaration still to write: the classes met, then the named types."""
        out = [*self.classes]
        self.classes.clear()
        out += [d for d in self.drain() if d]
        return "".join(f"{d}\n" for d in out)


def _literal(value: bool | int | str) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    return _string(value)


def _comment(text: str) -> str:
    return f"  # {text}" if text else ""


# Quotes a docstring escapes, each of the run: three or more (escaping the first three alone
# left a fourth, and `x""""` was written `x\"` then `"""`, closing it: the description's next
# lines read as code), and, on the line the closing quotes follow, those that end it.
_QUOTES = re.compile(r'"{3,}')
_CLOSING = re.compile(r'"{3,}|"+\Z')


def _escaped(line: str, closing: bool) -> str:
    """A line of a docstring as its source writes it; ``closing``: the closing quotes follow
    it on its line."""
    quotes = _CLOSING if closing else _QUOTES
    return quotes.sub(lambda m: '\\"' * len(m[0]), line.rstrip().replace("\\", "\\\\"))


def _docstring(lines: list[str], indent: str) -> str:
    if len(lines) == 1:
        return f'{indent}"""{_escaped(lines[0], True)}"""\n'
    escaped = [_escaped(line, False) for line in lines]
    body = "".join(f"{indent}{line}\n" if line else "\n" for line in escaped[1:])
    return f'{indent}"""{escaped[0]}\n{body}{indent}"""\n'


def _doc_lines(tool: Tool, full: bool) -> list[str]:
    if not full:
        summary = first_line(tool.description, MAX_SUMMARY)
        return [summary] if summary else []
    lines = [line.rstrip() for line in description_lines(tool.description)]
    common = min((len(x) - len(x.lstrip()) for x in lines[1:] if x.strip()), default=0)
    return [lines[0].strip(), *(x[common:] for x in lines[1:])] if lines else []


def _signature(name: str, params: list[tuple[str, str]], result: str, check: bool) -> str:
    """``async def name(self, <params>) -> result:``; each param is (text, comment)."""
    head = f"{INDENT}async def {name}("
    return "\n".join(_params_lines(head, [("self", ""), *params], f") -> {result}:", check))


def _params_lines(
    head: str, params: list[tuple[str, str]], tail: str, inline: bool, indent: str = INDENT
) -> list[str]:
    """``head``, the params and ``tail`` on one line when ``inline`` or when no param has a
    comment and the line fits; else one param a line (one more ``indent`` in) with its
    comment, and ``tail`` on a line of its own at ``indent``."""
    line = head + ", ".join(p for p, _ in params) + tail
    if inline or (not any(c for _, c in params) and len(line) <= LINE_WIDTH):
        return [line]
    return [head, *(f"{indent}{INDENT}{p},{_comment(c)}" for p, c in params), f"{indent}{tail}"]


def declare_tool(
    tool: Tool,
    namer: Namer,
    *,
    comments: bool,
    full: bool,
    results: bool = True,
    check: bool = False,
) -> tuple[str, str]:
    """One tool's method of ``Tools`` and the declarations of its named types.

    New type names are taken from ``namer``; pass a copy when the declaration may be
    dropped. ``check`` writes the type check's stub (see the module docstring; its results
    are ``Any``, whatever ``results`` says); ``results=False`` declares every result ``Any``.
    """
    renderer = StubRenderer(namer, comments=comments and not check, check=check)
    any_ = renderer.unknown.text
    note = None
    if not is_python_name(tool.name) or tool.name.startswith("_"):
        # `tools.class(...)` is not Python, and a script may not write an attribute that
        # starts with `_` (`tools._2fa_verify`, `tools.__init__`): it calls them with getattr.
        # (The check reads the note too, to say so of `tools._2fa_verify(...)`.)
        note = (
            f'{INDENT}# tools "{tool.name}": call it as await getattr(tools, "{tool.name}")(...)\n'
        )
        if check:
            return note, ""
    prefix = type_prefix(tool.name)
    schema = tool.input_schema
    doc = Document(schema, prefix, f"{prefix}_Input")
    params: list[tuple[str, str]] = []
    mapping: str | None = None  # the input as one mapping, for the check's other form
    if is_plain_object(schema):
        members, extra = renderer.members(schema, doc, 1)
        # An optional argument given None is left out (as JavaScript's undefined), so None
        # is a value it takes; further in, None is null.
        members = [
            m if m.required else replace(m, type=renderer.union([m.type, renderer.null]))
            for m in members
        ]
        kwargs_form = all(is_python_name(m.key) and m.key != "self" for m in members)
        # The name of the `**` parameter, which must not be a key's; and a key `self` (only
        # in `**` form) makes the method's own `self` positional-only, so both can be passed.
        rest = _free_name("kwargs", {m.key for m in members})
        if any(m.key == "self" for m in members):
            params.append(("/", ""))
        if members and (check or not kwargs_form):
            mapping = renderer.typed_dict(namer.fresh(f"{prefix}_Input"), members, extra)
        if kwargs_form:
            if members:
                params.append(("*", ""))
            for m in members:
                default = "" if m.required else " = ..."
                params.append((f"{m.key}: {m.type.text}{default}", m.comment))
            if extra is not None and extra is not CLOSED:
                params.append((f"**{rest}: {extra.text}", ""))
            if not members and extra is None:
                params.append((f"**{rest}: {any_}", ""))
        else:
            params.append((f"**{rest}: {renderer.n('Unpack')}[{mapping}]", ""))
            mapping = mapping if check else None
    else:
        input_type = renderer.render(schema, doc, 1, hint=f"{prefix}_Input").text
        params += [(f"input: {input_type} = ..., /", ""), (f"**kwargs: {any_}", "")]
    result = any_
    if results and not check and tool.output_schema is not None:
        result = renderer.result(result_document(tool.output_schema, prefix)).text
    if check:
        member = _check_member(tool.name, params, mapping, any_, renderer.n("overload"))
    elif note is not None:
        # What the method would say, as comments: the note alone left the model (and a search
        # for the tool) without its description and arguments.
        lines = [*_doc_lines(tool, full), *_call_lines(params, result)]
        member = note + "".join(f"{INDENT}#   {line}".rstrip() + "\n" for line in lines)
    else:
        lines = _doc_lines(tool, full)
        signature = _signature(tool.name, params, result, check)
        body = _docstring(lines, INDENT * 2) if lines else None
        member = f"{signature}\n{body}" if body else f"{signature} ...\n"
    return member, renderer.declarations()


def _call_lines(params: list[tuple[str, str]], result: str) -> list[str]:
    """The signature of a tool reached by getattr (a bound method: no ``self``), for its
    comment: written as a method's is, each param with its comment when one has one."""
    # A key `self` made `self` positional-only (`/`): there is no `self` here.
    kept = [(text, comment) for text, comment in params if text != "/"]
    return _params_lines("(", kept, f") -> {result}", False, indent="")


def _free_name(name: str, taken: set[str]) -> str:
    """``name``, or ``name_`` (``name__``, ...) when ``taken`` holds it."""
    while name in taken:
        name += "_"
    return name


def _check_member(
    name: str, params: list[tuple[str, str]], mapping: str | None, any_: str, overload: str
) -> str:
    """The check's method: the keywords, or one mapping (``mapping``, default any)."""
    mapping = mapping or f"_dict[_str, {any_}]"
    if not params or params == [(f"**kwargs: {any_}", "")]:
        # One signature takes both forms when there are no keywords or they are anything.
        both = [(f"input: {mapping} = ..., /", ""), *params]
        return _signature(name, both, any_, True) + " ...\n"
    keywords = _signature(name, params, any_, True) + " ...\n"
    one = _signature(name, [(f"input: {mapping}, /", "")], any_, True) + " ...\n"
    return f"{INDENT}@{overload}\n{keywords}{INDENT}@{overload}\n{one}"


def builtin_member(name: str, *, check: bool = False) -> str:
    """The method of ``Tools`` that declares builtin ``name`` (``tool_search``, ``skill``);
    ``check`` writes the type check's (results ``Any``, both call forms)."""
    summary, fields = _BUILTINS[name]
    if not check:
        params = [("*", "")] + [
            (f"{key}: {type_}{'' if required else ' | None = ...'}", "")
            for key, type_, required in fields
        ]
        return f"{_signature(name, params, 'str', False)}\n{_docstring([summary], INDENT * 2)}"
    mapping = "_dict[_str, _Any]"
    params = [("*", "")] + [
        (f"{key}: _{type_}{'' if required else ' | None = ...'}", "")
        for key, type_, required in fields
    ]
    return _check_member(name, params, mapping, "_Any", "_overload")


def check_stubs(tools: Sequence[Tool]) -> str:
    """The module the type check reads (``tools.pyi``): every tool as the model reads its
    inputs, results ``Any``, both call forms, the builtins, ``tools``, ``files`` and the
    error classes a script may catch."""
    namer = Namer({"Tools", "Exception", *SCRIPT_ERRORS})
    members: list[str] = []
    types: list[str] = []
    for tool in tools:
        member, declared = declare_tool(tool, namer, comments=False, full=False, check=True)
        members.append(member)
        types.append(declared)
    members += [builtin_member(b, check=True) for b in BUILTIN_TOOLS]
    return (
        CHECK_IMPORTS
        + _HEADER
        + ("".join(members) or f"{INDENT}pass\n")
        + "\ntools: Tools\nfiles: _Any\n\n"
        + SCRIPT_ERROR_STUBS
        + "".join(types)
    )


FILES_NOTE = (
    "The conversation's files are in `files`: `files.list()` and `files.stat(id)` give "
    '`{"id", "mime", "size"}`; `await files.text(id)` reads a whole file; `files.show(id)` '
    "puts a file in front of you when the script ends ({shown}). Stream big files with "
    '`async for row in files.csv(id, header=True, delimiter=",")`, `files.lines(id)`, '
    "`files.jsonl(id)`, `files.chunks(id, size=..., offset=...)` and "
    "`files.xlsx(id, sheet=...)` (`await files.sheets(id)` names the sheets); each takes "
    "`limit=` and `offset=`. Read files before calling tools: each run of the script reads "
    "them again."
)

# The modules a script may import, as the sandbox allows them (sandbox/python.py's ALLOWED,
# which the engine does not import: it loads some forty modules; a test holds the two equal),
# with what the model should know of the few that are partial.
SCRIPT_MODULES: dict[str, str] = {
    "abc": "",
    "array": "",
    "asyncio": (
        "asyncio (gather, create_task, TaskGroup, Semaphore, Lock, Event, Queue, wait, "
        "as_completed, sleep; no event loop)"
    ),
    "base64": "",
    "binascii": "",
    "bisect": "",
    "calendar": "",
    "cmath": "",
    "collections": "",
    "collections.abc": "",
    "contextlib": "",
    "copy": "",
    "csv": "",
    "dataclasses": "",
    "datetime": "",
    "decimal": "",
    "difflib": "",
    "enum": "",
    "fnmatch": "",
    "fractions": "",
    "functools": "",
    "gzip": "gzip (compress, decompress)",
    "hashlib": "",
    "heapq": "",
    "hmac": "",
    "html": "",
    "io": "io (StringIO)",
    "ipaddress": "",
    "itertools": "",
    "json": "",
    "logging": "",
    "math": "",
    "numbers": "",
    "operator": "",
    "pprint": "",
    "random": "",
    "re": "",
    "shlex": "shlex (split, join, quote)",
    "statistics": "",
    "string": "",
    "struct": "",
    "sys": "sys (stdout, stderr, exit, argv)",
    "textwrap": "",
    "time": "",
    "traceback": "traceback (print_exc, format_exc, print_exception, format_exception)",
    "types": "types (SimpleNamespace, MappingProxyType, the types of functions and values)",
    "typing": "",
    "unicodedata": "",
    "urllib.parse": "",
    "uuid": "",
    "warnings": "",
    "zlib": "",
}
ALLOWED_IMPORTS = ", ".join(about or name for name, about in SCRIPT_MODULES.items())


class PythonDialect(Dialect):
    """Scripts in Python, tools declared as stubs."""

    language = "python"
    name = "Python"
    fence = "python"
    header = _HEADER
    footer = _FOOTER
    files_note = FILES_NOTE
    code_description = (
        "The body of an async Python function that calls "
        "`await tools.<name>(key=value)`; `return` the value to send back."
    )

    def declare_tool(
        self, tool: Tool, namer: Namer, *, comments: bool, full: bool, results: bool = True
    ) -> tuple[str, str]:
        return declare_tool(tool, namer, comments=comments, full=full, results=results)

    # Tools reached by getattr alone, and no builtin (a search's answer): a class of comments
    # alone is no Python.
    filler = f"{INDENT}...\n"

    def is_comment(self, member: str) -> bool:
        return all(
            not line.strip() or line.lstrip().startswith("#") for line in member.splitlines()
        )

    def builtin(self, name: str) -> str:
        return builtin_member(name)

    def skill_call(self, name: str | None = None) -> str:
        return f"await tools.skill(name={'...' if name is None else _string(name)})"

    def guide(self, skills: bool) -> list[str]:
        paragraphs = [
            "Run a Python script that calls tools, and get back what it prints and returns.",
            "`code` is the body of an async function. Call a tool with "
            "`await tools.<name>(key=value, ...)`: it returns the tool's result, parsed when it "
            "is JSON. Run calls that do not depend on each other together, with `await "
            "asyncio.gather(tools.a(...), tools.b(...))` (after `import asyncio`). A call that "
            "fails raises `ToolError` with the tool's message (`str(e)`), which the script can "
            "catch. "
            "`return` a value made of dicts, lists, strings, numbers, booleans and None.",
            "Only what the script prints with `print` and the value it returns come back to "
            "you; tool results stay in the script, so filter and summarize them there. A call "
            "costs you no turn.",
            "The script has no network, file system, threads or processes: it reaches the world "
            "only through `tools`. It may import only these modules: "
            f"{ALLOWED_IMPORTS}. `time`, `datetime` and `random` are fixed for a script and "
            "give the same values every time it runs.",
            "`await tools.tool_search(query=...)` finds tools that are not declared below, by "
            "what they do or by exact names. It answers with text (their declarations): print "
            "it, then call the tools in your next script.",
        ]
        if skills:
            paragraphs.append(
                '`await tools.skill(name="...")` loads a skill: it answers with the skill\'s '
                "instructions and its tools' declarations, as text to print."
            )
        return paragraphs


PYTHON = PythonDialect()
