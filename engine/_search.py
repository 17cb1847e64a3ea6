"""``tools.tool_search``: find tools (and skills) by what they do, or by exact names.

The ranking is BM25 over a few weighted fields of each tool: the words of its name (with the
source prefix, split on ``_``, camelCase and digits) count three times, its parameters'
names one and a half, its description and its parameters' descriptions once. Words are
lowercased and lightly stemmed (``listing prs`` meets ``list_prs``). A query that names a tool
exactly ranks that tool first, by a name of more than one word (``post_message``; a name of
one plain word, ``search``, is a word like the query's others). Ties break by name, so the
answer is stable.

The answer is text for the model: the declarations of the best matches, each with its whole
description, within 12 KiB (the first is always declared), then the other matches by name,
then the skills that match, each with its description's first line, and how to load them
(a description as a tool's, cut at ``MAX_DESCRIPTION`` characters).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine._errors import ToolCallError
from engine._tools import Tool
from engine.languages import dialect
from engine.languages._dialect import BUDGET, MAX_DESCRIPTION
from engine.languages._walk import first_line
from sandbox.names import split_words, terms

MAX_QUERY = 1000
MAX_LIMIT = 50
# How many other matches, and how many tool names in a "no match" answer, are listed.
MAX_OTHERS = 30
MAX_LISTED = 80

# Field weights: a word in the name says more about a tool than a word in its description.
NAME_WEIGHT = 3.0
PARAM_NAME_WEIGHT = 1.5
TEXT_WEIGHT = 1.0
# Standard BM25 constants.
K1 = 1.2
B = 0.75
# Added to the score of a tool the query names exactly, so it always comes first.
EXACT_BONUS = 100.0


@dataclass(frozen=True)
class SkillInfo:
    """A skill as search shows it: its name, what it is for, and the tools it is about."""

    name: str
    description: str = ""
    tools: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class Found:
    """What a query found: ``tools`` best first (all of them, not only those declared),
    ``skills`` best first, and whether the query named the tools exactly."""

    tools: list[Tool]
    skills: list[SkillInfo]
    exact: bool


@dataclass
class _Entry:
    key: str
    weights: dict[str, float]
    length: float


def _parameter_text(schema: Any) -> tuple[list[str], list[str]]:
    """The names and descriptions of a schema's top-level properties."""
    names: list[str] = []
    texts: list[str] = []
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if isinstance(properties, dict):
        for name, sub in properties.items():
            names.append(str(name))
            if isinstance(sub, dict) and isinstance(sub.get("description"), str):
                texts.append(sub["description"])
    return names, texts


def _entry(key: str, fields: Iterable[tuple[float, Iterable[str]]]) -> _Entry:
    weights: dict[str, float] = {}
    length = 0.0
    for weight, words in fields:
        for word in words:
            weights[word] = weights.get(word, 0.0) + weight
            length += weight
    return _Entry(key, weights, length)


def _tool_entry(tool: Tool) -> _Entry:
    name_terms = terms(tool.name)
    name_terms += [t for t in terms(tool.original_name) if t not in name_terms]
    param_names, param_texts = _parameter_text(tool.input_schema)
    return _entry(
        tool.name,
        [
            (NAME_WEIGHT, name_terms),
            (PARAM_NAME_WEIGHT, [t for n in param_names for t in terms(n, numbers=False)]),
            (TEXT_WEIGHT, terms(tool.description, numbers=False)),
            (TEXT_WEIGHT, [t for text in param_texts for t in terms(text, numbers=False)]),
        ],
    )


class _Ranking:
    """BM25 over a fixed set of entries, each term's entries listed with it: a query costs
    the entries its terms are in, not every entry for every term (a script's 500-word query
    over 5,000 tools held the host's event loop 0.1 s a search, and a script may search
    many times at once)."""

    def __init__(self, entries: list[_Entry]) -> None:
        count = len(entries)
        average = sum(e.length for e in entries) / count if count else 1.0
        # Each term's entries, in the entries' order, each with its weight and length norm.
        self.postings: dict[str, list[tuple[str, float, float]]] = {}
        for entry in entries:
            norm = K1 * (1 - B + B * entry.length / (average or 1.0))
            for term, tf in entry.weights.items():
                self.postings.setdefault(term, []).append((entry.key, tf, norm))
        self.idf = {
            term: math.log(1 + (count - len(found) + 0.5) / (len(found) + 0.5))
            for term, found in self.postings.items()
        }

    def scores(self, query_terms: Sequence[str]) -> dict[str, float]:
        result: dict[str, float] = {}
        for term in dict.fromkeys(query_terms):
            idf = self.idf.get(term, 0.0)
            for key, tf, norm in self.postings.get(term, ()):
                # Summed in the query's order of terms for each entry, as ever: the same
                # floats, so the same ranking and ties.
                result[key] = result.get(key, 0.0) + idf * tf * (K1 + 1) / (tf + norm)
        return result


class ToolIndex:
    """Every tool a script may call (deferred ones too), and the skills, ready to search.

    Built once per set of tools; :meth:`search` is a pure function of the query, so the same
    query always gets the same answer.
    """

    def __init__(
        self,
        tools: Sequence[Tool],
        skills: Sequence[SkillInfo] = (),
        *,
        before: ToolIndex | None = None,
    ) -> None:
        """``before``: the index this one follows (a skill added, an MCP server's tools
        changed), whose work for the same tools (the very same objects) is kept: the words of
        5,000 tools took two seconds of the event loop to find again for each skill added."""
        self.tools = list(tools)
        self.skills = list(skills)
        self._by_name = {tool.name: tool for tool in self.tools}
        # Other names a query may use for a tool: the name it was declared with, and its name
        # without the source prefix (`list_prs` for `github__list_prs`). Two tools can share
        # one (`create_issue` on GitHub and on Jira), so each maps to a list.
        self._aliases: dict[str, list[Tool]] = {}
        for tool in self.tools:
            for alias in dict.fromkeys((tool.original_name, tool.name.partition("__")[2])):
                if alias and alias not in self._by_name:
                    self._aliases.setdefault(alias, []).append(tool)
        # Each tool's entry, by the tool itself (a Tool is equal to itself alone).
        made = before._entries if before is not None else {}
        self._entries: dict[Tool, _Entry] = {
            tool: made.get(tool) or _tool_entry(tool) for tool in self.tools
        }
        self._tools: _Ranking
        if before is not None and before.tools == self.tools:
            self._tools = before._tools  # the same tools in the same order: the same ranking
        else:
            self._tools = _Ranking(list(self._entries.values()))
        self._skills = _Ranking(
            [
                _entry(
                    s.name,
                    [
                        (NAME_WEIGHT, terms(s.name)),
                        (TEXT_WEIGHT, terms(s.description, numbers=False)),
                        (TEXT_WEIGHT, [t for name in s.tools for t in terms(name)]),
                    ],
                )
                for s in self.skills
            ]
        )

    def rank(self, query: str) -> list[Tool]:
        """The tools that match ``query``, best first (ties by name)."""
        scores = self._tools.scores(terms(query))
        for word in _words(query):
            named = self._named(word)
            # A name of one plain word ("search", "delete": notion__search, redis__delete)
            # is a word of the query as much as a name: its name's weight ranks the tool, and
            # a bonus put it over the tool the query is about ("search the web",
            # "delete a warehouse"). A query of names alone is an exact query (find).
            if named and len(split_words(word)) > 1:
                for tool in named:
                    scores[tool.name] = scores.get(tool.name, 0.0) + EXACT_BONUS
        ordered = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
        return [self._by_name[name] for name, _ in ordered]

    def _named(self, word: str) -> list[Tool]:
        tool = self._by_name.get(word)
        return [tool] if tool is not None else self._aliases.get(word, [])

    def rank_skills(self, query: str) -> list[SkillInfo]:
        """The skills that match ``query``, best first (ties by name)."""
        scores = self._skills.scores(terms(query))
        by_name = {s.name: s for s in self.skills}
        for word in _words(query):
            if word in by_name:
                scores[word] = scores.get(word, 0.0) + EXACT_BONUS
        ordered = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
        return [by_name[name] for name, _ in ordered]

    def exact(self, query: str) -> list[Tool] | None:
        """The tools a query of exact names (``"get_audience, find_customers"``) names, in
        its order, or None when a word of it names no tool, or names two (an original name
        two sources share)."""
        named = [self._named(word) for word in _words(query)]
        if not named or any(len(tools) != 1 for tools in named):
            return None  # a word that names no tool, or more than one
        return list(dict.fromkeys(tools[0] for tools in named))

    def find(self, query: str) -> Found:
        """What a query finds: the tools it names exactly, or else the tools and skills that
        match it, best first (:meth:`search` words the answer for the model)."""
        exact = self.exact(query)
        if exact is not None:
            return Found(tools=exact, skills=[], exact=True)
        return Found(tools=self.rank(query), skills=self.rank_skills(query), exact=False)

    def search(self, query: Any, limit: Any = 8, language: str = "javascript") -> str:
        """The answer to ``tools.tool_search({ query, limit })``, as text for the model.

        A query of exact tool names answers just those tools. Otherwise: the declarations of
        the best ``limit`` matches with their whole descriptions (within 12 KiB; the first is
        always declared), the other matches by name, and the skills that match. With no match,
        it says so and lists the tools' names. Declarations are in ``language``'s types
        (the language of the script that asks).

        Raises :class:`ToolCallError` (what the script's call fails with) for a query that is
        not text, is empty or is over :data:`MAX_QUERY` characters, or a ``limit`` outside 1
        to :data:`MAX_LIMIT`.
        """
        if not isinstance(query, str) or not query.strip():
            raise ToolCallError(
                "tools.tool_search needs a query: words that say what the tool does, or "
                'exact tool names ("get_user, list_orders")'
            )
        if len(query) > MAX_QUERY:
            raise ToolCallError(
                f"tools.tool_search: the query is {len(query):,} characters, over the "
                f"{MAX_QUERY:,} a query may have; search with a few words"
            )
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise ToolCallError(
                f"tools.tool_search: limit must be a whole number, 1 to {MAX_LIMIT}"
            )
        shown = _shown(query)
        found = self.find(query)
        speech = dialect(language)  # declarations in the script's language
        if found.exact:
            exact = found.tools
            block, declared = speech.declare_tools(exact, BUDGET, full_descriptions=True)
            names = ", ".join(t.name for t in declared)
            text = f"The declarations of {names}:\n{speech.fenced(block)}"
            rest = [t.name for t in exact if t not in declared]
            if rest:
                text += (
                    f"\nNot declared here, past the {BUDGET // 1024} KiB an answer holds: "
                    f"{', '.join(rest)}; search for each by its name."
                )
            return text
        matches, skills = found.tools, found.skills
        parts: list[str] = []
        if matches:
            block, declared = speech.declare_tools(matches[:limit], BUDGET, full_descriptions=True)
            count = len(matches)
            parts.append(
                f"{count} tool{'s match' if count != 1 else ' matches'} {shown}, best first. "
                f"Call them in your next script.\n{speech.fenced(block)}"
            )
            others = [t.name for t in matches if t not in declared]
            if others:
                listed = ", ".join(others[:MAX_OTHERS])
                more = f", and {len(others) - MAX_OTHERS} more" if len(others) > MAX_OTHERS else ""
                parts.append(f"Other matches: {listed}{more}.")
        elif skills:
            parts.append(f"No tool matches {shown}.")
        else:
            parts.append(f"No tool matches {shown}. {self._names()}")
        if skills:
            lines = ["Skills that match:"]
            for skill in skills[:limit]:
                about = f" (tools: {', '.join(skill.tools)})" if skill.tools else ""
                summary = first_line(skill.description, MAX_DESCRIPTION)
                lines.append(
                    f"- skill {skill.name}: {summary}{about} — load it with "
                    + speech.skill_call(skill.name)
                )
            parts.append("\n".join(lines))
        return "\n".join(parts)

    def _names(self) -> str:
        names = [t.name for t in self.tools]
        if not names:
            return "There are no tools."
        listed = ", ".join(names[:MAX_LISTED])
        more = f", and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else ""
        return f"The tools are: {listed}{more}. Search with other words, or by a tool's name."


def _words(query: str) -> list[str]:
    return [w for w in re.split(r"[\s,;]+", query.strip()) if w]


def _shown(query: str) -> str:
    text = " ".join(query.split())
    if len(text) > 100:
        text = text[:97] + "..."
    return '"' + text.replace('"', "'") + '"'
