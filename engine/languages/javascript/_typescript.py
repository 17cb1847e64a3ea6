"""JSON Schema to TypeScript types, for declaring tools to the model.

The types describe what a script passes and gets back; they are read by the model, never
compiled at run time, so they aim to be accurate where it helps the model and short
everywhere. What a schema means is decided by the shared walk (``engine.languages._walk``);
this module writes it in TypeScript.
"""

from __future__ import annotations

from typing import Any

from engine._naming import is_identifier
from engine.languages._walk import (
    ATOM,
    CLOSED,
    INTERSECTION,
    MAX_ENUM,
    UNION,
    Member,
    Rendered,
    Walker,
    base_type,
    hidden_escaped,
    json_text,
    one_line,
)
from engine.languages._walk import first_line as _first_line

INDENT = "  "
# An object type whose members fit on one line of this many characters is written inline.
INLINE_WIDTH = 80

_UNKNOWN = Rendered("unknown")
_NEVER = Rendered("never")


def literal(value: Any) -> str:
    """A JSON value as a TypeScript literal type (``"open"``, ``3``, ``null``), its marks
    that hide or reorder text as escapes."""
    return hidden_escaped(json_text(value), "\\u{%x}")


def comment_text(text: str) -> str:
    """Text made safe inside a ``/** */`` comment, on one line."""
    # Cleaned first: what it leaves out (a bidi mark between `*` and `/`) could make a `*/`.
    return one_line(text).replace("*/", "*\\/")


def first_line(text: str, limit: int) -> str:
    """The first non-empty line of ``text``, safe in a comment, cut at ``limit`` characters."""
    return _first_line(text, limit, comment_text)


# The members every object inherits: TypeScript reads an object literal that leaves one out
# as having it (the inherited method), so a tool's `constructor?: string` refused every
# call without it ("Type 'Function' is not assignable to type 'string'").
PROTOTYPE_MEMBERS = frozenset(
    {
        "constructor", "toString", "toLocaleString", "valueOf", "hasOwnProperty",
        "isPrototypeOf", "propertyIsEnumerable",
    }
)  # fmt: skip


class Renderer(Walker):
    """Renders the schemas of one tool in TypeScript (see :class:`Walker`). ``checking``:
    for the type check's declarations, where a member named as an inherited one also takes
    what it inherits (see ``PROTOTYPE_MEMBERS``) and arrays are ``readonly``."""

    checking = False

    def clean(self, text: str) -> str:
        return comment_text(text)

    def const(self, value: Any) -> Rendered:
        return Rendered(literal(value))

    def enum(self, values: list[Any]) -> Rendered:
        if len(values) > MAX_ENUM:
            return self.union([Rendered(base_type(v)) for v in values])
        return self.union([Rendered(literal(v)) for v in values])

    def scalar(self, kind: str) -> Rendered:
        if kind == "string":
            return Rendered("string")
        if kind in ("number", "integer"):
            return Rendered("number")
        if kind == "boolean":
            return Rendered("boolean")
        return _UNKNOWN

    def array(self, item: Rendered) -> Rendered:
        return self._readonly(f"{_wrap(item, ATOM)}[]")

    def tuple_type(self, elements: list[tuple[Rendered, bool]], rest: Rendered | None) -> Rendered:
        texts = [f"{t.text}?" if optional else t.text for t, optional in elements]
        if rest is not None:
            texts.append(f"...{_wrap(rest, ATOM)}[]")
        return self._readonly(f"[{', '.join(texts)}]")

    def _readonly(self, text: str) -> Rendered:
        # A tool only reads the arrays a script passes, so the check takes a readonly one too
        # (`[...] as const`, `readonly T[]`, `Object.freeze([...])`): a mutable array type
        # refused it. `readonly` binds as `&` does, so an array of it needs parentheses.
        return Rendered(f"readonly {text}", INTERSECTION) if self.checking else Rendered(text)

    def object(
        self, members: list[Member], extra: Rendered | None, level: int, hint: str
    ) -> Rendered:
        lines: list[tuple[str, str]] = []  # (comment, member)
        for m in members:
            name = m.key if is_identifier(m.key) else literal(m.key)
            optional = "" if m.required else "?"
            text = m.type.text
            if self.checking and m.key in PROTOTYPE_MEMBERS:
                text = _union([m.type, Rendered("Function")]).text
            lines.append((m.comment, f"{name}{optional}: {text};"))
        if extra is CLOSED:
            if not lines:
                return Rendered("Record<string, never>")
        elif extra is not None:
            lines.append(("", f"[key: string]: {extra.text};"))
        return Rendered(_layout(lines, level))

    def union(self, parts: list[Rendered]) -> Rendered:
        return _union(parts)

    def intersection(self, parts: list[Rendered]) -> Rendered:
        return _intersection(parts)

    def declaration(self, name: str, body: Rendered) -> str:
        return f"type {name} = {body.text};"


def _wrap(t: Rendered, need: int) -> str:
    return t.text if t.prec >= need else f"({t.text})"


def _union(parts: list[Rendered]) -> Rendered:
    texts: dict[str, None] = {}  # ordered, and a lookup is not a scan
    for part in parts:
        if part.text == "unknown":
            return _UNKNOWN
        if part.text == "never":
            continue
        # A union we built is flattened into its members, so `T | null | null` cannot happen.
        for piece in part.members or (part.text,):
            texts.setdefault(piece)
    if not texts:
        return _NEVER
    if len(texts) == 1:
        only = next(iter(texts))
        return next((p for p in parts if p.text == only), Rendered(only))
    return Rendered(" | ".join(texts), UNION, tuple(texts))


def _intersection(parts: list[Rendered]) -> Rendered:
    kept = [p for p in parts if p.text != "unknown"]
    if any(p.text == "never" for p in kept):
        return _NEVER
    if not kept:
        return _UNKNOWN
    if len(kept) == 1:
        return kept[0]
    texts = list(dict.fromkeys(_wrap(p, INTERSECTION) for p in kept))
    return Rendered(" & ".join(texts), INTERSECTION) if len(texts) > 1 else kept[0]


def _layout(members: list[tuple[str, str]], level: int) -> str:
    if not members:
        return "{}"
    inline = "{ " + " ".join(m for _, m in members)[:-1] + " }"
    if not any(c for c, _ in members) and "\n" not in inline and len(inline) <= INLINE_WIDTH:
        return inline
    pad = INDENT * (level + 1)
    lines = ["{"]
    for comment, member in members:
        if comment:
            lines.append(f"{pad}/** {comment} */")
        lines.append(f"{pad}{member}")
    lines.append(f"{INDENT * level}}}")
    return "\n".join(lines)
