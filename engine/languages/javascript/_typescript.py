"""JSON Schema to TypeScript types, for declaring tools to the model.

The types describe what a script passes and gets back; they are read by the model, never
compiled at run time, so they aim to be accurate where it helps the model and short
everywhere. Every definition a schema reaches with a local ``$ref`` becomes a named type,
declared once, so a recursive schema stays finite. Rendering is a pure function of the
schema and the names already taken: the same input gives the same bytes.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from engine._naming import is_identifier

INDENT = "  "
# An object type whose members fit on one line of this many characters is written inline.
INLINE_WIDTH = 80
# Past this nesting, a schema is declared `unknown` (schemas are bounded at 64 levels anyway).
MAX_RENDER_DEPTH = 40
# Enums with more values than this are declared by their base type.
MAX_ENUM = 64
# A property's comment: its description's first line, cut at this many characters.
MAX_PROPERTY_COMMENT = 160
# A `default` whose JSON is longer than this is not shown in the comment.
MAX_DEFAULT_SHOWN = 40

# Keywords that say something about a value's type. A branch of anyOf/oneOf/allOf with none of
# them (say, only `required`) constrains the value without changing its type, so it is skipped.
_TYPE_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "additionalProperties",
        "patternProperties",
        "items",
        "prefixItems",
        "enum",
        "const",
        "$ref",
        "anyOf",
        "oneOf",
        "allOf",
    }
)

# Precedence of a rendered type: what it needs parentheses around it to sit in an array or
# an intersection.
_UNION, _INTERSECTION, _ATOM = 0, 1, 2


@dataclass(frozen=True)
class _T:
    text: str
    prec: int = _ATOM
    members: tuple[str, ...] = ()  # of a union


_UNKNOWN = _T("unknown")
_NEVER = _T("never")


class Namer:
    """Type names already used in one declarations block, so every new one is unique."""

    def __init__(self, taken: set[str] | None = None) -> None:
        self.taken: set[str] = set(taken or ())

    def fresh(self, base: str) -> str:
        name = base
        n = 2
        while name in self.taken:
            name = f"{base}_{n}"
            n += 1
        self.taken.add(name)
        return name

    def copy(self) -> Namer:
        return Namer(self.taken)


def type_prefix(tool_name: str) -> str:
    """The prefix of a tool's named types: its name with a capital first letter."""
    return tool_name[:1].upper() + tool_name[1:]


def _pascal(segment: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_]+", "_", segment).strip("_") or "Type"
    return cleaned[:1].upper() + cleaned[1:]


def literal(value: Any) -> str:
    """A JSON value as a TypeScript literal type (``"open"``, ``3``, ``null``)."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=False, allow_nan=False)
    # Line separators are legal in JSON strings but read as line ends by older parsers.
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def comment_text(text: str) -> str:
    """Text made safe inside a ``/** */`` comment, on one line."""
    return " ".join(text.replace("*/", "*\\/").split())


def first_line(text: str, limit: int) -> str:
    """The first non-empty line of ``text``, cut at ``limit`` characters."""
    for line in text.strip().splitlines():
        line = comment_text(line)
        if line:
            return line if len(line) <= limit else line[: limit - 3].rstrip() + "..."
    return ""


@dataclass
class Document:
    """One schema being declared (a tool's input or output schema) and its named types."""

    root: Any
    prefix: str  # the tool's type prefix
    root_name: str  # the name of the whole schema when a `$ref: "#"` reaches it
    names: dict[str, str] = field(default_factory=dict)  # JSON pointer -> type name
    # Strongly connected components of the "is directly" graph (see `component`).
    _components: dict[str, int] = field(default_factory=dict)
    _count: int = 0

    def resolve(self, pointer: str) -> Any:
        node = self.root
        if not pointer:
            return node
        for raw in pointer[1:].split("/"):
            part = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
        return node

    def component(self, pointer: str) -> int:
        """The id of the strongly connected component ``pointer`` is in, in the graph whose
        edges are the references a type *is* (``$ref``, through anyOf/oneOf/allOf) rather
        than holds in a property or an item. Two types in one component are each, directly,
        the other, which TypeScript refuses (``type A = B; type B = A | string``).

        Tarjan's algorithm, iterative and memoized, so a schema of thousands of chained
        definitions costs linear time, not quadratic.
        """
        if pointer in self._components:
            return self._components[pointer]
        index: dict[str, int] = {pointer: 0}
        low: dict[str, int] = {pointer: 0}
        stack = [pointer]
        on_stack = {pointer}
        work = [(pointer, iter(_direct_refs(self.resolve(pointer))))]
        while work:
            node, edges = work[-1]
            for target in edges:
                if target in self._components or self.resolve(target) is None:
                    continue  # a finished component, or a reference to nothing
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(_direct_refs(self.resolve(target)))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = self._count = self._count + 1
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        self._components[member] = component
                        if member == node:
                            break
        return self._components[pointer]


def _local_pointer(ref: Any) -> str | None:
    """The JSON pointer of a local ``$ref`` (``#/$defs/A`` -> ``/$defs/A``), percent-decoded
    so two spellings of one target are one pointer; None for any other reference."""
    if isinstance(ref, str) and ref.startswith("#"):
        pointer = unquote(ref[1:])
        return "" if pointer in ("", "/") else pointer
    return None


def _direct_refs(schema: Any, depth: int = 0) -> Iterator[str]:
    """The references a schema *is*: its ``$ref`` and those of its anyOf/oneOf/allOf."""
    if not isinstance(schema, dict) or depth > MAX_RENDER_DEPTH:
        return
    pointer = _local_pointer(schema.get("$ref"))
    if pointer is not None:
        yield pointer
    for key in ("anyOf", "oneOf", "allOf"):
        branches = schema.get(key)
        if isinstance(branches, list):
            for branch in branches:
                yield from _direct_refs(branch, depth + 1)


class Renderer:
    """Renders the schemas of one tool; named types it meets wait in :attr:`pending`.

    ``comments`` puts property descriptions in ``/** */`` comments. Call :meth:`drain` after
    the tool's member is rendered, to get each named type's declaration.
    """

    def __init__(self, namer: Namer, *, comments: bool) -> None:
        self.namer = namer
        self.comments = comments
        self.pending: deque[tuple[Document, str, str]] = deque()
        # The named type being declared, to spot a type that is, directly, itself.
        self._declaring: tuple[Document, str] | None = None

    # -- named types ------------------------------------------------------------------------

    def _name_for(self, doc: Document, pointer: str) -> str:
        name = doc.names.get(pointer)
        if name is None:
            if not pointer:
                name = self.namer.fresh(doc.root_name)
            else:
                last = pointer.rsplit("/", 1)[-1].replace("~1", "/").replace("~0", "~")
                name = self.namer.fresh(f"{doc.prefix}_{_pascal(last)}")
            doc.names[pointer] = name
            self.pending.append((doc, pointer, name))
        return name

    def drain(self) -> Iterator[str]:
        """Declarations (``type X = ...;``) of the named types met so far, and of those they
        meet in turn, each once, in the order they were met."""
        while self.pending:
            doc, pointer, name = self.pending.popleft()
            self._declaring = (doc, pointer)
            body = self.render(doc.resolve(pointer), doc, 0, direct=True)
            self._declaring = None
            yield f"type {name} = {body.text};"

    def _ref(self, doc: Document, ref: Any, direct: bool) -> _T:
        pointer = _local_pointer(ref)
        if pointer is None or doc.resolve(pointer) is None:
            return _UNKNOWN  # a remote or broken reference; compiling the schema refuses those
        # The body of `within` is this reference: if the target is, in turn, directly
        # `within`, naming it would make a type alias that is itself.
        within = self._declaring if direct else None
        if within and within[0] is doc and doc.component(pointer) == doc.component(within[1]):
            return _UNKNOWN
        return _T(self._name_for(doc, pointer))

    # -- schemas ----------------------------------------------------------------------------

    def render(self, schema: Any, doc: Document, level: int, *, direct: bool = False) -> _T:
        """The TypeScript type of ``schema``; ``level`` is the indentation of its first line,
        and ``direct`` is true while the type being declared *is* this schema."""
        if schema is True:
            return _UNKNOWN
        if schema is False:
            return _NEVER
        if not isinstance(schema, dict) or level > MAX_RENDER_DEPTH:
            return _UNKNOWN
        parts: list[_T] = []
        if "$ref" in schema:
            parts.append(self._ref(doc, schema["$ref"], direct))
        elif "const" in schema:
            parts.append(_T(literal(schema["const"])))
        elif isinstance(schema.get("enum"), list) and schema["enum"]:
            parts.append(self._enum(schema["enum"]))
        elif "type" in schema:
            types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            parts.append(_union([self._typed(t, schema, doc, level) for t in types]))
        elif any(k in schema for k in ("properties", "additionalProperties", "required")):
            parts.append(self._object(schema, doc, level))
        elif "items" in schema or "prefixItems" in schema:
            parts.append(self._array(schema, doc, level))
        for key in ("anyOf", "oneOf"):
            branches = _typed_branches(schema.get(key))
            if branches:
                parts.append(_union([self.render(b, doc, level, direct=direct) for b in branches]))
        for branch in _typed_branches(schema.get("allOf")):
            parts.append(self.render(branch, doc, level, direct=direct))
        result = _intersection(parts) if parts else _UNKNOWN
        if schema.get("nullable") is True:
            result = _union([result, _T("null")])
        return result

    def _enum(self, values: list[Any]) -> _T:
        if len(values) > MAX_ENUM:
            return _union([_T(_base_type(v)) for v in values])
        return _union([_T(literal(v)) for v in values])

    def _typed(self, kind: Any, schema: dict[str, Any], doc: Document, level: int) -> _T:
        if kind == "string":
            return _T("string")
        if kind in ("number", "integer"):
            return _T("number")
        if kind == "boolean":
            return _T("boolean")
        if kind == "null":
            return _T("null")
        if kind == "array":
            return self._array(schema, doc, level)
        if kind == "object":
            return self._object(schema, doc, level)
        return _UNKNOWN

    def _array(self, schema: dict[str, Any], doc: Document, level: int) -> _T:
        prefix = schema.get("prefixItems")
        rest = schema.get("items")
        if not isinstance(prefix, list) and isinstance(rest, list):
            prefix, rest = rest, schema.get("additionalItems")  # draft 4-7 tuples
        if isinstance(prefix, list):
            minimum = schema.get("minItems")
            elements = []
            for i, item in enumerate(prefix):
                text = self.render(item, doc, level).text
                optional = isinstance(minimum, int) and i >= minimum
                elements.append(f"{text}?" if optional else text)
            maximum = schema.get("maxItems")
            closed = rest is False or (isinstance(maximum, int) and maximum <= len(prefix))
            if isinstance(rest, dict) and rest and not closed:
                elements.append(f"...{_wrap(self.render(rest, doc, level), _ATOM)}[]")
            return _T(f"[{', '.join(elements)}]")
        item = self.render(rest, doc, level) if isinstance(rest, dict | bool) else _UNKNOWN
        return _T(f"{_wrap(item, _ATOM)}[]")

    def _object(self, schema: dict[str, Any], doc: Document, level: int) -> _T:
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = [r for r in schema.get("required", []) or [] if isinstance(r, str)]
        members: list[tuple[str, str]] = []  # (comment, member)
        for key, sub in properties.items():
            name = key if is_identifier(key) else literal(key)
            optional = "" if key in required else "?"
            text = self.render(sub, doc, level + 1).text
            members.append((self._comment(sub), f"{name}{optional}: {text};"))
        for key in required:
            if key not in properties:
                name = key if is_identifier(key) else literal(key)
                members.append(("", f"{name}: unknown;"))
        extra = schema.get("additionalProperties")
        patterns = schema.get("patternProperties")
        if not properties:
            if extra is False and not patterns:
                if not members:
                    return _T("Record<string, never>")
            elif isinstance(extra, dict) and extra and not patterns:
                value = self.render(extra, doc, level + 1).text
                members.append(("", f"[key: string]: {value};"))
            else:
                members.append(("", "[key: string]: unknown;"))
        elif (isinstance(extra, dict) and extra) or patterns:
            # A declared property must fit the index signature, so it can only say `unknown`.
            members.append(("", "[key: string]: unknown;"))
        return _T(_layout(members, level))

    def _comment(self, schema: Any) -> str:
        if not self.comments or not isinstance(schema, dict):
            return ""
        pieces = []
        description = schema.get("description")
        if isinstance(description, str):
            line = first_line(description, MAX_PROPERTY_COMMENT)
            if line:
                pieces.append(line if line.endswith((".", "?", "!")) else f"{line}.")
        fmt = schema.get("format")
        if isinstance(fmt, str) and fmt and len(fmt) < 40:
            pieces.append(f"Format: {comment_text(fmt)}.")
        if "default" in schema:
            try:
                shown = literal(schema["default"])
            except (TypeError, ValueError):
                shown = ""
            if shown and len(shown) <= MAX_DEFAULT_SHOWN:
                pieces.append(f"Default: {comment_text(shown)}.")
        return " ".join(pieces)


def _typed_branches(value: Any) -> list[Any]:
    # A branch with no type keyword (only `required`, say) adds nothing to a type.
    if not isinstance(value, list):
        return []
    return [b for b in value if b is False or (isinstance(b, dict) and _TYPE_KEYWORDS & b.keys())]


def _base_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    return "unknown"


def _wrap(t: _T, need: int) -> str:
    return t.text if t.prec >= need else f"({t.text})"


def _union(parts: list[_T]) -> _T:
    texts: list[str] = []
    for part in parts:
        if part.text == "unknown":
            return _UNKNOWN
        if part.text == "never":
            continue
        # A union we built is flattened into its members, so `T | null | null` cannot happen.
        for piece in part.members or (part.text,):
            if piece not in texts:
                texts.append(piece)
    if not texts:
        return _NEVER
    if len(texts) == 1:
        return next((p for p in parts if p.text == texts[0]), _T(texts[0]))
    return _T(" | ".join(texts), _UNION, tuple(texts))


def _intersection(parts: list[_T]) -> _T:
    kept = [p for p in parts if p.text != "unknown"]
    if any(p.text == "never" for p in kept):
        return _NEVER
    if not kept:
        return _UNKNOWN
    if len(kept) == 1:
        return kept[0]
    texts = list(dict.fromkeys(_wrap(p, _INTERSECTION) for p in kept))
    return _T(" & ".join(texts), _INTERSECTION) if len(texts) > 1 else kept[0]


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
