"""Tool names: the JavaScript-safe form of a name, unique names, the built-in names.

A script calls a tool as ``tools.<name>(...)``, so every name the model sees is an ASCII
JavaScript identifier. Names from third parties (``get-weather``, ``list.files``,
``2fa_verify``) get a stable sanitized form; a tool from a named source (an MCP server) is
``<source>__<tool>``. Splitting names into words, and the "did you mean" list of a call to
a tool that does not exist, are :mod:`sandbox.names` (the sandbox uses them too).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping

from sandbox.protocol import RUN_CODE

# Longest name we hand out. JavaScript has no limit, but a name is read by the model in every
# declaration, and some providers cap tool names at 64 characters.
MAX_NAME = 64

# The longest key that names a start (a model's tool-use id is a few dozen characters), and
# so the longest call id the API formats take back.
MAX_KEY = 256

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
    names: Iterable[tuple[str, str | None]],
    reserved: Iterable[str] = BUILTIN_NAMES,
    kept: Mapping[tuple[str, str | None], str] | None = None,
) -> list[str]:
    """The sanitized names of ``(name, source)`` pairs, made unique; one name per pair, in order.

    When two pairs sanitize to the same name, a pair whose name already is that name (and has
    no source) keeps it, and every other one gets ``_<hash>`` of its original name and source.
    A name in ``reserved`` is never handed out. The result depends on the pairs, not on their
    order, so adding a tool never renames another one that did not collide. A pair in
    ``kept`` (the names handed out before, when a server's tools change) keeps its name, and a
    newcomer that collides with it is the one renamed: a tool the model was shown is never
    renamed under it. Two equal pairs are the caller's error (``ValueError``).
    """
    pairs = list(names)
    seen: set[tuple[str, str | None]] = set()
    for pair in pairs:
        if pair in seen:
            origin = f" from {pair[1]!r}" if pair[1] else ""
            raise ValueError(f"two tools are named {pair[0]!r}{origin}")
        seen.add(pair)
    reserved = set(reserved)
    kept = {p: n for p, n in (kept or {}).items() if p in seen and n not in reserved}
    taken = reserved | set(kept.values())
    wanted = [sanitize_name(name, source) for name, source in pairs]
    counts: dict[str, int] = {}
    for candidate in wanted:
        counts[candidate] = counts.get(candidate, 0) + 1
    result: list[str] = []
    lengths: dict[int, int] = {}  # the pairs renamed (by index): their digests' lengths
    for index, ((name, source), candidate) in enumerate(zip(pairs, wanted, strict=True)):
        if (name, source) in kept:
            result.append(kept[name, source])
            continue
        # Pairs are unique, so at most one pair per candidate is spelled exactly like it.
        plain = candidate not in taken and (
            counts[candidate] == 1 or (source is None and name == candidate)
        )
        result.append(candidate)
        if not plain:
            lengths[index] = 6
    # Two renamed pairs can share their digest's first six digits: 5,000 tools that sanitize
    # alike (names in Chinese, each "tool") hold such a pair about one time in two, and the
    # engine refused them. Each pair of a shared name takes a longer digest, all of them (not
    # the second one met), so the names still depend on the pairs, not on their order.
    while lengths:
        for index, length in lengths.items():
            (name, source), candidate = pairs[index], wanted[index]
            digest = _digest(f"{source or ''}\0{name}", length)
            result[index] = f"{candidate[: MAX_NAME - length - 1]}_{digest}"
        given = Counter(result[index] for index in lengths)
        lengths = {
            index: length + 2
            for index, length in lengths.items()
            if result[index] in taken or result[index] in counts or given[result[index]] > 1
        }
    if len(set(result)) != len(result):  # pragma: no cover - the hashes above make this unreachable
        raise ValueError("tool names are not unique after sanitizing")
    return result
