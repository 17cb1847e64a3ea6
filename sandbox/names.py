"""Near misses: the names closest to one that does not exist ("did you mean").

One rule for every such list, in the sandbox (a script's unknown tool, file) and in the engine
(a tool or a skill the log names): names equal but for case, close in spelling, or sharing a
word, stemmed. It lives here because the sandbox imports nothing of the engine's; the engine's
search takes its words from here too. Standard library only: it is imported before lockdown.
"""

from __future__ import annotations

import difflib
import keyword
import re
import unicodedata
from collections.abc import Iterable

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# A run of letters and digits of any script; within it, Han and kana (written without spaces
# between words), whose every two characters are taken as a word.
_ANY_RUN = re.compile(r"[^\W_]+")
_UNSPACED = re.compile(r"([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+)")

# Words too common in tool descriptions to tell tools apart.
_STOPWORDS_TEXT = """
    a an and are as at be by can do for from get has have i in into is it its me my of on or so
    that the their them this to use used uses using was what when which with you your
"""
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())


def split_words(text: str) -> list[str]:
    """The words of a name or a text, lowercase: ``github__listPRs`` -> github, list, prs.

    Splits on anything that is not a letter or digit, on camelCase humps, and between letters
    and digits; a run that mixes letters and digits is also kept whole, so ``2fa`` gives
    2fa, 2, fa and a query for "2fa" meets it.
    """
    # Accents dropped (café meets cafe); the letters of other scripts kept: a tool described
    # in Russian or Japanese was found by no word of its description.
    plain = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    words: list[str] = []
    for run in _ANY_RUN.findall(plain):
        if not run.isascii():
            for i, part in enumerate(_UNSPACED.split(run.lower())):
                if i % 2 == 0:
                    words.extend([part] if part else [])
                else:
                    words.extend(part[j : j + 2] for j in range(max(len(part) - 1, 1)))
            continue
        parts = [w.lower() for w in _WORD.findall(run)]
        if len(parts) > 1 and any(p.isdigit() for p in parts):
            words.append(run.lower())
        words.extend(parts)
    return words


def stem(word: str) -> str:
    """A light stem, so plurals and -ing/-ed forms meet: listing, lists, listed -> list.

    Deliberately crude (no dictionary): it only has to map a word and its common inflections
    to the same key, on both sides of a search.
    """
    w = word
    if len(w) > 4 and w.endswith("ies"):
        w = w[:-3] + "y"
    elif len(w) > 4 and w.endswith("sses"):
        w = w[:-2]
    elif len(w) > 5 and w.endswith("ing"):
        w = w[:-3]
    elif len(w) > 4 and w.endswith("ed"):
        w = w[:-2]
    elif len(w) > 2 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    if w != word and len(w) > 2 and w[-1] == w[-2] and w[-1] not in "lsz":
        w = w[:-1]  # running -> runn -> run; but calling -> call
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]  # create, created, creating -> creat
    return w


def terms(text: str, *, numbers: bool = True) -> list[str]:
    """The stemmed words of ``text`` without stopwords, in order (with repeats).

    ``numbers=False`` also drops words that are only digits: in prose ("$1, $2", "30 s") they
    say little about what a tool does, and would match any query with a number in it.
    """
    return [
        stem(w) for w in split_words(text) if w not in STOPWORDS and (numbers or not w.isdigit())
    ]


def spelled_otherwise(name: str, names: Iterable[str]) -> str | None:
    """The one of ``names`` that is ``name`` in another Unicode normalization, or None: a
    name from macOS writes é as e and an accent mark, which a model writes as one character
    (and was told "no file 'é.txt' (did you mean 'é.txt'?)")."""
    wanted = unicodedata.normalize("NFC", name)
    same = [n for n in names if unicodedata.normalize("NFC", n) == wanted]
    return same[0] if len(same) == 1 else None


# How a script finds tools, in each language (prelude.js says the JavaScript one itself).
_FIND_TOOLS = {
    "python": 'await tools.tool_search(query="...")',
    "javascript": 'await tools.tool_search({ query: "..." })',
}


def no_such_tool(
    name: str,
    names: Iterable[str],
    said: str | None = None,
    *,
    language: str = "python",
    line: str = "",
) -> str:
    """What a script in ``language`` is told of ``tools.<name>`` when ``names`` has no such
    tool (``said``, else that it does not exist): the closest tools, and how to find one.
    ``line``, the script's line that names it, may show the name cut at a hyphen."""
    names = list(names)
    # Each `tools.<name>-...` the line writes, the first that names a tool saying it.
    for found in re.finditer(rf"\btools\s*\.\s*({re.escape(name)}(?:-[A-Za-z_]\w*)+)", line):
        hyphened = _hyphened_tool(found[1], names, language)
        if hyphened is not None:
            return hyphened
    message = said or f"tools.{name} does not exist"
    near = closest_names(name, names)
    if near:
        message += "; the closest tools are " + ", ".join(f"tools.{n}" for n in near)
    return f"{message}. Find tools with {_FIND_TOOLS[language]}."


def hyphened_reference(undefined: str, names: Iterable[str], line: str) -> str | None:
    """What a JavaScript script is told when ``undefined`` is not defined on ``line`` because
    the line writes a tool's name with a hyphen, as an MCP server spells it
    (``tools.get-price({ ... })`` reads as ``tools.get - price(...)``, and ``price`` is what
    JavaScript finds undefined), and the tool is there with ``_`` for each ``-`` or as
    written; else None (the error says what JavaScript says)."""
    found = re.search(
        rf"\btools\s*\.\s*([A-Za-z_$][\w$]*(?:-[A-Za-z_$][\w$]*)*-{re.escape(undefined)}(?![\w$])"
        r"(?:-[A-Za-z_$][\w$]*)*)",
        line,
    )
    if found is None:
        return None
    # The name matched, not the line's first `tools.<same start>-...`: `tools.get-x` earlier
    # on the line named tools.get_x for "price is not defined", or lost the hint.
    return _hyphened_tool(found[1], list(names), "javascript")


def _hyphened_tool(written: str, names: list[str], language: str) -> str | None:
    """What to say of ``tools.<written>(...)``, ``written`` a tool's name as an MCP server
    spells it (``get-user``), which the language reads as ``tools.get`` minus ``user(...)``,
    when the tool is there with ``_`` for each ``-``, or as written; else None."""
    name, _, rest = written.partition("-")
    joined = written.replace("-", "_")
    arguments = "{ ... }" if language == "javascript" else "..."
    if joined in names:
        called = f"tools.{joined}({arguments})"
    elif written in names:
        called = (
            f'tools["{written}"]({arguments})'
            if language == "javascript"
            else f'getattr(tools, "{written}")(...)'
        )
    else:
        return None
    return (
        f"tools.{written} reads as tools.{name} minus {rest.replace('-', ' minus ')} "
        f"(a name cannot have a '-'): the tool is called as await {called}"
    )


def unwritable_tool(name: str, written: str | None = None, *, language: str = "python") -> str:
    """What a script is told of ``tools.<written>`` (``written``: ``name`` unless given)
    written as an attribute, for the tool ``name``: in Python, which a script reads through
    getattr alone, its name starts with an underscore (``_2fa_verify``) or is a keyword
    (``class``); in either language, it was written starting with a digit
    (``tools.2fa_verify`` of the tool ``_2fa_verify``). The type check and the run say the
    same."""
    written = written or name
    if language == "javascript":
        return (
            f"tools.{written} cannot be written as an attribute (a name cannot start with a "
            f"digit): the tool is tools.{name}, called as await tools.{name}({{ ... }})"
        )
    if written[:1].isdigit():
        why = "a name cannot start with a digit"
    elif keyword.iskeyword(written):
        why = f"`{written}` is a keyword of Python"
    else:
        why = "a script reads none whose name starts with an underscore"
    return (
        f"tools.{written} cannot be written as an attribute ({why}): call it as "
        f'await getattr(tools, "{name}")(...)'
    )


def closest_names(name: str, names: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` of ``names`` closest to ``name``, best first, for "no tool named ..." errors.

    A name equal but for case comes first; then names ranked by the larger of their spelling
    similarity and the share of words they have in common (so ``send_slack_message`` finds
    ``slack__post_message``). Names that are neither similar nor share a word are left out.
    Ties break by name, so the answer is stable.
    """
    lowered = name.lower()
    wanted = set(terms(name))
    scored: list[tuple[float, str]] = []
    for candidate in dict.fromkeys(names):
        if candidate == name:
            continue
        low = candidate.lower()
        if low == lowered:
            scored.append((2.0, candidate))
            continue
        have = set(terms(candidate))
        overlap = len(wanted & have) / len(wanted | have) if wanted and have else 0.0
        # The spelling counts only from this on. ratio() costs the product of the lengths:
        # for a name of 16,000 characters (a model's, a client's) over 500 tools, 5 s of the
        # event loop; its bounds from the lengths, then the letters, rule such names out.
        floor = overlap + 0.1 if overlap else 0.6
        matcher = difflib.SequenceMatcher(None, lowered, low, autojunk=False)
        spelling = 0.0
        if matcher.real_quick_ratio() >= floor and matcher.quick_ratio() >= floor:
            spelling = matcher.ratio()
        score = max(spelling, overlap + 0.1 if overlap else 0.0)
        if spelling >= 0.6 or overlap > 0:
            scored.append((score, candidate))
    scored.sort(key=lambda item: (-item[0], item[1]))
    return [candidate for _, candidate in scored[:n]]
