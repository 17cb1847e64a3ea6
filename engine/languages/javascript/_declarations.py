"""What the model reads about the tools: TypeScript declarations and the ``run_code`` tool.

A declarations block looks like this (types from ``engine.languages.javascript._typescript``)::

    declare const tools: {
      /** List pull requests of a repository. */
      github__list_prs(input: {
        /** Repository as owner/name. */
        repo: string;
        state?: "open" | "closed" | "all";
      }): Promise<Github__list_prs_PR[]>;
      /** Find tools by what they do, or by exact names ... */
      tool_search(input: { query: string; limit?: number }): Promise<string>;
    };
    type Github__list_prs_PR = { number: number; title: string; updated_at: string };

Each tool is a method of ``tools`` taking one ``input`` object: its description's first line
as a comment (the whole description in a search answer), its input type, and its result type
(``unknown`` when it declares no output schema; a named type when it is a model, an object
with a ``title``). Each ``$ref`` target is a named type after the ``tools`` object, prefixed
with its tool's name, so names never clash across tools; a type several tools' schemas
define alike (pydantic's model in each one's ``$defs``) is declared once, under the name it
got first (see ``Namer.declared``), and so is an object written out alike in several places
of the block under one property's name (an MCP server's zod schema inlined into each tool),
unless it fits on one line (see ``Walker._object``).

A block holds at most 12 KiB, by the rules every language shares (``engine.languages._dialect``).
"""

from __future__ import annotations

from collections.abc import Sequence

from engine._naming import SKILL, TOOL_SEARCH
from engine._tools import Tool
from engine.languages._dialect import BUDGET, MAX_SUMMARY, Dialect, description_lines
from engine.languages._walk import Document, Namer, result_document, type_prefix
from engine.languages.javascript._typescript import (
    INDENT,
    Renderer,
    comment_text,
    first_line,
    literal,
)

_BUILTINS: dict[str, tuple[str, str]] = {
    TOOL_SEARCH: (
        'Find tools by what they do, or by exact names ("get_user, list_orders"); answers '
        "with their declarations, as text.",
        "tool_search(input: { query: string; limit?: number }): Promise<string>;",
    ),
    SKILL: (
        "Load a skill by name; answers with its instructions and the declarations of its "
        "tools, as text.",
        "skill(input: { name: string }): Promise<string>;",
    ),
}

_HEADER = "declare const tools: {\n"
_FOOTER = "};\n"


def builtin_member(name: str, *, results: bool = True) -> str:
    """The member of ``tools`` that declares builtin ``name`` (``tool_search``, ``skill``);
    ``results=False`` declares its result ``any``, as :func:`declare_tool` does."""
    member = _BUILTINS[name][1]
    if not results:
        member = member.replace("Promise<string>", "Promise<any>")
    return f"{INDENT}{member}\n"


def _comment(tool: Tool, full: bool) -> str:
    if not full:
        summary = first_line(tool.description, MAX_SUMMARY)
        return f"{INDENT}/** {summary} */\n" if summary else ""
    lines = [comment_text(line) for line in description_lines(tool.description)]
    if not lines:
        return ""
    if len(lines) == 1:
        return f"{INDENT}/** {lines[0]} */\n"
    body = "".join(f"{INDENT} *{' ' + line if line else ''}\n" for line in lines)
    return f"{INDENT}/**\n{body}{INDENT} */\n"


# The type parameter of each tool's result in the type check's declarations, a name no type
# of theirs takes (see check_declarations).
CHECK_RESULT = "Result"


def declare_tool(
    tool: Tool, namer: Namer, *, comments: bool, full: bool, results: bool = True
) -> tuple[str, str]:
    """One tool's member of ``tools`` and the declarations of its named types.

    New type names are taken from ``namer``; pass a copy when the declaration may be
    dropped. ``results=False`` declares every result ``any`` (the type check's choice: a
    script may use a result freely, see engine.languages.javascript), and lets a call name
    it (``tools.list_prs<PR[]>({ ... })``, which runs: the type argument is stripped).
    """
    renderer = Renderer(namer, comments=comments)
    renderer.checking = not results  # the type check's declarations (see Renderer)
    prefix = type_prefix(tool.name)
    input_type = renderer.render(
        tool.input_schema,
        Document(tool.input_schema, prefix, f"{prefix}_Input", inline_root=True),
        1,
    ).text
    result_type = "unknown" if results else CHECK_RESULT
    if results and tool.output_schema is not None:
        result_type = renderer.result(result_document(tool.output_schema, prefix)).text
    # A tool with no required input may be called as tools.x(): the sandbox sends {}.
    required = tool.input_schema.get("required")
    optional = "?" if not required and tool.input_schema.get("type") == "object" else ""
    # In a type, `new(...)` is a construct signature: a method named `new` is quoted.
    name = literal(tool.name) if tool.name == "new" else tool.name
    if not results:
        name += f"<{CHECK_RESULT} = any>"
    member = (
        f"{_comment(tool, full)}{INDENT}{name}(input{optional}: {input_type}): "
        f"Promise<{result_type}>;\n"
    )
    types = "".join(f"{declaration}\n" for declaration in renderer.drain())
    return member, types


def declare_tools(
    tools: Sequence[Tool],
    budget: int = BUDGET,
    *,
    builtins: Sequence[str] = (TOOL_SEARCH,),
    full_descriptions: bool = False,
) -> tuple[str, list[Tool]]:
    """The TypeScript declarations block of ``tools`` within ``budget`` bytes, and the tools
    it declares (see :meth:`Dialect.declare_tools`)."""
    return JAVASCRIPT.declare_tools(
        tools, budget, builtins=builtins, full_descriptions=full_descriptions
    )


FILES_NOTE = (
    "The conversation's files are in `files`: `files.list()` and `files.stat(id)` give "
    "`{ id, mime, size }`; `await files.text(id)` reads a whole file; `files.show(id)` puts a "
    "file in front of you when the script ends ({shown}). Stream big files with "
    "`for await (const row of files.csv(id, { header, delimiter }))`, `files.lines(id)`, "
    "`files.jsonl(id)`, `files.chunks(id, { size, offset })` and `files.xlsx(id, { sheet })` "
    "(`await files.sheets(id)` names the sheets); each takes `{ limit, offset }`. Read files "
    "before calling tools: each run of the script reads them again."
)


class JavaScriptDialect(Dialect):
    """Scripts in JavaScript (TypeScript's types allowed), tools declared in TypeScript."""

    language = "javascript"
    name = "TypeScript"
    fence = "ts"
    header = _HEADER
    footer = _FOOTER
    files_note = FILES_NOTE
    names_repeated_objects = True
    code_description = (
        "The body of an async JavaScript function that calls "
        "`await tools.<name>({ ... })`; `return` the value to send back."
    )

    def declare_tool(
        self, tool: Tool, namer: Namer, *, comments: bool, full: bool, results: bool = True
    ) -> tuple[str, str]:
        return declare_tool(tool, namer, comments=comments, full=full, results=results)

    def builtin(self, name: str) -> str:
        return f"{INDENT}/** {_BUILTINS[name][0]} */\n{INDENT}{_BUILTINS[name][1]}\n"

    def skill_call(self, name: str | None = None) -> str:
        return (
            "await tools.skill({ name })"
            if name is None
            else (f"await tools.skill({{ name: {literal(name)} }})")
        )

    def guide(self, skills: bool) -> list[str]:
        paragraphs = [
            "Run a JavaScript script that calls tools, and get back what it prints and returns.",
            "`code` is the body of an async function. Call a tool with "
            "`await tools.<name>({ ... })`: it resolves to the tool's result, parsed when it is "
            "JSON. Run calls that do not depend on each other together, with `Promise.all`. A "
            "call that fails throws an `Error` with the tool's message, which the script can "
            "catch. The script may use TypeScript's types (annotations, interfaces and type "
            "aliases, `as`, `!`, generics, enums): they are removed before it runs.",
            "Only what the script prints with `console.log` and the value it returns come back "
            "to you; tool results stay in the script, so filter and summarize them there. A call "
            "costs you no turn.",
            "The script has no network, file system, timers or modules: it reaches the world "
            "only through `tools`. `Date`, `Math.random` and `crypto.randomUUID` are fixed for a "
            "script and give the same values every time it runs. `Intl` and `toLocaleString` "
            "format for en-US, in UTC.",
            "`await tools.tool_search({ query })` finds tools that are not declared below, by "
            "what they do or by exact names. It answers with text (their declarations): print "
            "it, then call the tools in your next script.",
        ]
        if skills:
            paragraphs.append(
                '`await tools.skill({ name: "..." })` loads a skill: it answers with the skill\'s '
                "instructions and its tools' declarations, as text to print."
            )
        return paragraphs


JAVASCRIPT = JavaScriptDialect()
run_code_tool = JAVASCRIPT.run_code_tool
