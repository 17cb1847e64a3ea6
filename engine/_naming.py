"""Tool names: the JavaScript-safe form of a name, splitting names into words, near misses.

A script calls a tool as ``tools.<name>(...)``, so every name the model sees is an ASCII
JavaScript identifier. Names from third parties (``get-weather``, ``list.files``,
``2fa_verify``) get a stable sanitized form; a tool from a named source (an MCP server) is
``<source>__<tool>``. The same words, stemmed, feed ``tool_search`` and the "did you mean"
list of a call to a tool that does not exist.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import unicodedata
from collections.abc import Iterable

from sandbox.protocol import RUN_CODE

# Longest name we hand out. JavaScript has no limit, but a name is read by the model in every
# declaration, and some providers cap tool names at 64 characters.
MAX_NAME = 64

# The tools the engine answers itself, which a script calls like a host's tools.
TOOL_SEARCH = "tool_search"
SKILL = "skill"
BUILTIN_TOOLS = (TOOL_SEARCH, SKILL)
# Names the engine declares itself; a host tool that sanitizes to one of them is renamed.
BUILTIN_NAMES = frozenset({RUN_CODE, *BUILTIN_TOOLS})

# Property names that are special on a JavaScript object, so a tool must not take them:
# `tools.__proto__` is the prototype, and a `then` would make `tools` look like a promise.
_SPECIAL = frozenset({"__proto__", "constructor", "prototype", "then", "toString", "valueOf"})

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]+")
_RUN = re.compile(r"[A-Za-z0-9]+")
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")

# Words too common in tool descriptions to tell tools apart.
_STOPWORDS_TEXT = """
    a an and are as at be by can do for from get has have i in into is it its me my of on or so
    that the their them this to use used uses using was what when which with you your
"""
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())


def is_identifier(name: str) -> bool:
    """True when ``name`` is an ASCII JavaScript identifier (no ``$``)."""
    return bool(_IDENT.match(name))


def _sanitize_part(part: str) -> str:
    # Fold accents to ASCII first so "météo" reads as "meteo", not "m_t_o".
    ascii_part = unicodedata.normalize("NFKD", part).encode("ascii", "ignore").decode()
    cleaned = _NOT_IDENT.sub("_", ascii_part).strip("_") or "tool"
    if cleaned[0].isdigit():
        cleaned = "_" + cleaned
    return cleaned


def sanitize_name(name: str, source: str | None = None) -> str:
    """The JavaScript identifier a tool named ``name`` (from ``source``, if any) is called by.

    Runs of characters other than ASCII letters, digits and ``_`` become one ``_``; a name that
    starts with a digit gets a leading ``_``; a tool from a source is ``<source>__<name>``.
    A name longer than :data:`MAX_NAME` is cut and ends with a hash of the whole, so two long
    names stay apart. The same input always gives the same output.
    """
    if is_identifier(name) and source is None:
        result = name
    else:
        result = _sanitize_part(name)
        if source is not None:
            result = f"{_sanitize_part(source)}__{result.lstrip('_') or 'tool'}"
    if result in _SPECIAL:
        result += "_tool"
    if len(result) > MAX_NAME:
        digest = _digest(f"{source or ''}\0{name}")
        result = f"{result[: MAX_NAME - len(digest) - 1]}_{digest}"
    return result


def _digest(text: str, length: int = 6) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def unique_names(
    names: Iterable[tuple[str, str | None]], reserved: Iterable[str] = BUILTIN_NAMES
) -> list[str]:
    """The sanitized names of ``(name, source)`` pairs, made unique; one name per pair, in order.

    When two pairs sanitize to the same name, a pair whose name already is that name (and has
    no source) keeps it, and every other one gets ``_<hash>`` of its original name and source.
    A name in ``reserved`` is never handed out. The result depends on the pairs, not on their
    order, so adding a tool never renames another one that did not collide. Two equal pairs
    are the caller's error (``ValueError``).
    """
    pairs = list(names)
    taken = set(reserved)
    seen: set[tuple[str, str | None]] = set()
    for pair in pairs:
        if pair in seen:
            origin = f" from {pair[1]!r}" if pair[1] else ""
            raise ValueError(f"two tools are named {pair[0]!r}{origin}")
        seen.add(pair)
    wanted = [sanitize_name(name, source) for name, source in pairs]
    counts: dict[str, int] = {}
    for candidate in wanted:
        counts[candidate] = counts.get(candidate, 0) + 1
    result: list[str] = []
    for (name, source), candidate in zip(pairs, wanted, strict=True):
        # Pairs are unique, so at most one pair per candidate is spelled exactly like it.
        plain = candidate not in taken and (
            counts[candidate] == 1 or (source is None and name == candidate)
        )
        if plain:
            result.append(candidate)
            continue
        length = 6
        while True:
            digest = _digest(f"{source or ''}\0{name}", length)
            renamed = f"{candidate[: MAX_NAME - length - 1]}_{digest}"
            if renamed not in taken and renamed not in counts:
                break
            length += 2
        result.append(renamed)
    if len(set(result)) != len(result):  # pragma: no cover - the hashes above make this unreachable
        raise ValueError("tool names are not unique after sanitizing")
    return result


def split_words(text: str) -> list[str]:
    """The words of a name or a text, lowercase: ``github__listPRs`` -> github, list, prs.

    Splits on anything that is not a letter or digit, on camelCase humps, and between letters
    and digits; a run that mixes letters and digits is also kept whole, so ``2fa`` gives
    2fa, 2, fa and a query for "2fa" meets it.
    """
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    words: list[str] = []
    for run in _RUN.findall(ascii_text):
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
        spelling = difflib.SequenceMatcher(None, lowered, low, autojunk=False).ratio()
        have = set(terms(candidate))
        overlap = len(wanted & have) / len(wanted | have) if wanted and have else 0.0
        score = max(spelling, overlap + 0.1 if overlap else 0.0)
        if spelling >= 0.6 or overlap > 0:
            scored.append((score, candidate))
    scored.sort(key=lambda item: (-item[0], item[1]))
    return [candidate for _, candidate in scored[:n]]
