"""A dialect: what the model reads about the tools in one script language.

A language declares each tool in its own types (TypeScript for JavaScript, stubs for Python)
and describes ``run_code`` in its own words; the rules of a declarations block are the same
for every language and live here:

A block holds at most ``budget`` bytes of UTF-8 (12 KiB). Tools are declared in the order
given, and the first that does not fit ends the block: it and every tool after it are left
out (the first tool is always declared, however large). A tool that does not fit with its
property comments is tried once more without them. The order of the tools is the host's
priority, so it matters: the same tools in the same order always give the same bytes.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

from engine._naming import BUILTIN_TOOLS, TOOL_SEARCH
from engine._tools import Tool, ToolDefinitionError
from engine.languages._walk import Namer, printable
from sandbox.protocol import RUN_CODE

KiB = 1024
BUDGET = 12 * KiB
# A tool's summary comment in `run_code`, and its whole description (a skill's first line) in
# a search answer, are cut at these many characters.
MAX_SUMMARY = 300
MAX_DESCRIPTION = 4000


def size(text: str) -> int:
    return len(text.encode("utf-8"))


def description_lines(description: str) -> list[str]:
    """A tool's whole description, cut at :data:`MAX_DESCRIPTION` characters, as lines
    without trailing empty ones (its control characters as spaces, see ``printable``)."""
    text = printable(description).strip()
    if len(text) > MAX_DESCRIPTION:
        text = text[: MAX_DESCRIPTION - 3].rstrip() + "..."
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


class Dialect(abc.ABC):
    """One script language's declarations and ``run_code`` description.

    A subclass sets :attr:`language` (as in a script record), :attr:`name` and
    :attr:`fence` (how an answer shows its declarations), :attr:`header` and
    :attr:`footer` (around the declared tools), :attr:`files_note` and
    :attr:`code_description`, and writes :meth:`declare_tool`, :meth:`builtin` and
    :meth:`guide`; one whose block of comments alone is no code sets :attr:`filler` and
    writes :meth:`is_comment`.
    """

    language: str
    name: str  # "TypeScript"
    fence: str  # "ts"
    header: str
    footer: str
    files_note: str  # the paragraph on `files`, in the language; `{shown}`: how many it may show
    code_description: str  # of run_code's `code` argument
    # Whether the language writes an object type where it is, and names those written out in
    # several places of a block (see Walker._object); one that names every object does not.
    names_repeated_objects = False
    # What a block needs before its footer when each member is comments alone and no builtin
    # is declared, to be code (Python's class body `...`); counted in the budget.
    filler = ""

    @abc.abstractmethod
    def declare_tool(
        self, tool: Tool, namer: Namer, *, comments: bool, full: bool, results: bool = True
    ) -> tuple[str, str]:
        """One tool's member and the declarations of its named types. New type names are
        taken from ``namer``; pass a copy when the declaration may be dropped.
        ``results=False`` declares every result as anything (the type check's choice)."""

    def is_comment(self, member: str) -> bool:
        """Whether a tool's ``member`` (from :meth:`declare_tool`) is comments alone, so
        that a block of such members needs :attr:`filler`."""
        return False

    @abc.abstractmethod
    def builtin(self, name: str) -> str:
        """The member declaring builtin ``name`` (``tool_search``, ``skill``), with its
        comment."""

    @abc.abstractmethod
    def skill_call(self, name: str | None = None) -> str:
        """How a script loads skill ``name`` (or any skill, when None)."""

    @abc.abstractmethod
    def guide(self, skills: bool) -> list[str]:
        """The paragraphs that tell the model how to write a script (``skills``: how to
        load one too)."""

    def run_code_tool(
        self,
        tools: Sequence[Tool],
        *,
        budget: int = BUDGET,
        skills: bool = False,
        notes: Sequence[str] = (),
    ) -> dict[str, Any]:
        """The ``run_code`` tool definition (``name``, ``description``, ``input_schema``).

        The description tells the model how to write a script, then declares the tools that
        are not deferred, within ``budget``, with ``tool_search`` (and ``skill`` when
        ``skills``), then says how many tools were left out. ``notes`` are paragraphs other
        features add (such as ``files``), placed before the declarations. Nothing in it
        depends on anything but its arguments, so it stays the same for a whole session and
        the model's cached prefix holds.
        """
        visible = [t for t in tools if not t.deferred]
        builtins = BUILTIN_TOOLS if skills else (TOOL_SEARCH,)
        block, declared = self.declare_tools(visible, budget, builtins=builtins)
        paragraphs = [*self.guide(skills), *notes]
        paragraphs.append(f"The tools, in {self.name}:\n{self.fenced(block)}")
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
                "properties": {"code": {"type": "string", "description": self.code_description}},
                "required": ["code"],
                "additionalProperties": False,
            },
        }

    def fenced(self, block: str) -> str:
        """Declarations as a fenced block of the language, for an answer."""
        return f"```{self.fence}\n{block}```"

    def declare_tools(
        self,
        tools: Sequence[Tool],
        budget: int = BUDGET,
        *,
        builtins: Sequence[str] = (),
        full_descriptions: bool = False,
    ) -> tuple[str, list[Tool]]:
        """The declarations block of ``tools`` within ``budget`` bytes, and the tools it
        declares.

        Declares the tools in order until one does not fit (see the module docstring); the
        first is always declared. ``builtins`` (``tool_search``, ``skill``) are declared
        after them and count toward the budget. ``full_descriptions`` puts each tool's whole
        description in its comment (as a search answer does) instead of its first line.
        Deferred tools are declared like any other: leaving them out is the caller's choice.

        Raises :class:`ToolDefinitionError` when two tools share a name (make them unique
        with ``unique_tools`` first).
        """
        names = [t.name for t in tools]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ToolDefinitionError(
                f"two tools are called {', '.join(twice)}; make names unique with unique_tools"
            )
        fixed = "".join(self.builtin(b) for b in builtins)
        # Counted until a member is code (a builtin is): a block of a search's answer that
        # the filler took past the budget was over it.
        filler = "" if fixed else self.filler
        used = size(self.header) + size(fixed) + size(filler) + size(self.footer)
        namer = Namer()
        if self.names_repeated_objects:
            # A first pass counts the objects written out in more than one place.
            counting = Namer()
            counting.met = {}
            for tool in tools:
                self.declare_tool(tool, counting, comments=True, full=full_descriptions)
            namer.repeated = frozenset(k for k, n in counting.met.items() if n > 1)
        members: list[str] = []
        types: list[str] = []
        declared: list[Tool] = []
        for index, tool in enumerate(tools):
            chosen: tuple[str, str, Namer, int] | None = None
            for comments in (True, False):
                trial = namer.copy()
                member, declared_types = self.declare_tool(
                    tool, trial, comments=comments, full=full_descriptions
                )
                freed = size(filler) if filler and not self.is_comment(member) else 0
                chosen = (member, declared_types, trial, freed)
                if used - freed + size(member) + size(declared_types) <= budget:
                    break
            else:
                if index > 0:
                    break  # the block stops here; tool_search finds the rest
            assert chosen is not None
            member, declared_types, namer, freed = chosen
            if freed:
                filler = ""
            used += size(member) + size(declared_types) - freed
            members.append(member)
            types.append(declared_types)
            declared.append(tool)
        block = self.header + "".join(members) + fixed + filler + self.footer + "".join(types)
        return block, declared
