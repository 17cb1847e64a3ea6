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
(``unknown`` when it declares no output schema). Each ``$ref`` target is a named type after
the ``tools`` object, prefixed with its tool's name, so names never clash across tools.

A block holds at most ``budget`` bytes of UTF-8 (12 KiB). Tools are declared in the order
given, and the first that does not fit ends the block: it and every tool after it are left
out (the first tool is always declared, however large). A tool that does not fit with its
property comments is tried once more without them. The order of the tools is the host's
priority, so it matters: the same tools in the same order always give the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine._naming import BUILTIN_TOOLS, SKILL, TOOL_SEARCH
from engine._tools import Tool, ToolDefinitionError
from engine.languages.javascript._typescript import (
    INDENT,
    Document,
    Namer,
    Renderer,
    comment_text,
    first_line,
)
from engine.languages.javascript._typescript import type_prefix as _type_prefix
from sandbox.protocol import RUN_CODE

KiB = 1024
BUDGET = 12 * KiB
# A tool's summary comment in `run_code`, and its whole description in a search answer, are
# cut at these many characters.
MAX_SUMMARY = 300
MAX_DESCRIPTION = 4000

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


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _comment(tool: Tool, full: bool) -> str:
    if not full:
        summary = first_line(tool.description, MAX_SUMMARY)
        return f"{INDENT}/** {summary} */\n" if summary else ""
    text = tool.description.strip()
    if len(text) > MAX_DESCRIPTION:
        text = text[: MAX_DESCRIPTION - 3].rstrip() + "..."
    lines = [comment_text(line) for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    if not lines:
        return ""
    if len(lines) == 1:
        return f"{INDENT}/** {lines[0]} */\n"
    body = "".join(f"{INDENT} *{' ' + line if line else ''}\n" for line in lines)
    return f"{INDENT}/**\n{body}{INDENT} */\n"


def declare_tool(
    tool: Tool, namer: Namer, *, comments: bool, full: bool, results: bool = True
) -> tuple[str, str]:
    """One tool's member of ``tools`` and the declarations of its named types.

    New type names are taken from ``namer``; pass a copy when the declaration may be
    dropped. ``results=False`` declares every result ``any`` (the type check's choice: a
    script may use a result freely, see engine.languages.javascript).
    """
    renderer = Renderer(namer, comments=comments)
    prefix = _type_prefix(tool.name)
    input_type = renderer.render(
        tool.input_schema, Document(tool.input_schema, prefix, f"{prefix}_Input"), 1
    ).text
    result_type = "unknown" if results else "any"
    if results and tool.output_schema is not None:
        doc = Document(tool.output_schema, prefix, f"{prefix}_Result")
        result_type = renderer.render(tool.output_schema, doc, 1).text
    # A tool with no required input may be called as tools.x(): the sandbox sends {}.
    required = tool.input_schema.get("required")
    optional = "?" if not required and tool.input_schema.get("type") == "object" else ""
    member = (
        f"{_comment(tool, full)}{INDENT}{tool.name}(input{optional}: {input_type}): "
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
    """The declarations block of ``tools`` within ``budget`` bytes, and the tools it declares.

    Declares the tools in order until one does not fit (see the module docstring); the first
    is always declared. ``builtins`` (``tool_search``, ``skill``) are declared after them and
    count toward the budget. ``full_descriptions`` puts each tool's whole description in its
    comment (as a search answer does) instead of its first line. Deferred tools are declared
    like any other: leaving them out is the caller's choice.

    Raises :class:`ToolDefinitionError` when two tools share a name (make them unique with
    ``unique_tools`` first).
    """
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ToolDefinitionError(
            f"two tools are called {', '.join(twice)}; make names unique with unique_tools"
        )
    fixed = "".join(
        f"{INDENT}/** {_BUILTINS[b][0]} */\n{INDENT}{_BUILTINS[b][1]}\n" for b in builtins
    )
    used = _size(_HEADER) + _size(fixed) + _size(_FOOTER)
    namer = Namer()
    members: list[str] = []
    types: list[str] = []
    declared: list[Tool] = []
    for index, tool in enumerate(tools):
        chosen: tuple[str, str, Namer] | None = None
        for comments in (True, False):
            trial = namer.copy()
            member, declared_types = declare_tool(
                tool, trial, comments=comments, full=full_descriptions
            )
            size = _size(member) + _size(declared_types)
            chosen = (member, declared_types, trial)
            if used + size <= budget:
                break
        else:
            if index > 0:
                break  # the block stops here; tool_search finds the rest
        assert chosen is not None
        member, declared_types, namer = chosen
        used += _size(member) + _size(declared_types)
        members.append(member)
        types.append(declared_types)
        declared.append(tool)
    block = _HEADER + "".join(members) + fixed + _FOOTER + "".join(types)
    return block, declared


def run_code_tool(
    tools: Sequence[Tool],
    *,
    budget: int = BUDGET,
    skills: bool = False,
    notes: Sequence[str] = (),
) -> dict[str, Any]:
    """The ``run_code`` tool definition (``name``, ``description``, ``input_schema``).

    The description tells the model how to write a script, then declares the tools that are
    not deferred, within ``budget``, with ``tool_search`` (and ``skill`` when ``skills``),
    then says how many tools were left out. ``notes`` are paragraphs other features add (such
    as ``files``), placed before the declarations. Nothing in it depends on anything but its
    arguments, so it stays the same for a whole session and the model's cached prefix holds.
    """
    visible = [t for t in tools if not t.deferred]
    builtins = BUILTIN_TOOLS if skills else (TOOL_SEARCH,)
    block, declared = declare_tools(visible, budget, builtins=builtins)
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
        "only through `tools`. `Date` and `Math.random` are fixed for a script and give the "
        "same values every time it runs.",
        "`await tools.tool_search({ query })` finds tools that are not declared below, by "
        "what they do or by exact names. It answers with text (their declarations): print "
        "it, then call the tools in your next script.",
    ]
    if skills:
        paragraphs.append(
            '`await tools.skill({ name: "..." })` loads a skill: it answers with the skill\'s '
            "instructions and its tools' declarations, as text to print."
        )
    paragraphs.extend(notes)
    paragraphs.append(f"The tools, in TypeScript:\n```ts\n{block}```")
    left_out = len(tools) - len(declared)
    if left_out:
        paragraphs.append(
            f"{left_out} more tool{'s are' if left_out != 1 else ' is'} not declared here; "
            "find them with `tools.tool_search`."
        )
    return {
        "name": RUN_CODE,
        "description": "\n\n".join(paragraphs),
        "input_schema": {
            "type": "object",
            "properties": {
                "code": {
                    "type": "string",
                    "description": "The body of an async JavaScript function that calls "
                    "`await tools.<name>({ ... })`; `return` the value to send back.",
                }
            },
            "required": ["code"],
            "additionalProperties": False,
        },
    }
