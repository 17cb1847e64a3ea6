"""Walking a tool's JSON Schema to declare its types, in any script language.

What a schema means as a type is decided here once: which keyword wins (``$ref``, ``const``,
``enum``, ``type``, an object's keywords, an array's), how anyOf/oneOf/allOf combine, what
a tuple and an object's extra keys are, which definitions become named types and when a
named type would be, directly, itself. A language's renderer (``javascript._typescript``,
``python._stubs``) subclasses :class:`Walker` and says only how each kind of type is
written. Every definition a schema reaches with a local ``$ref`` becomes a named type,
declared once, so a recursive schema stays finite. Rendering is a pure function of the
schema and the names already taken: the same input gives the same bytes.
"""

from __future__ import annotations

import abc
import hashlib
import json
import re
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import unquote

# Past this nesting, a schema is declared unknown (schemas are bounded at 64 levels anyway).
MAX_RENDER_DEPTH = 40
# Enums with more values than this are declared by their base type.
MAX_ENUM = 64
# A property's comment: its description's first line, cut at this many characters.
MAX_PROPERTY_COMMENT = 160
# A `default` whose JSON is longer than this is not shown in the comment.
MAX_DEFAULT_SHOWN = 40

# Keywords that say something about a value's type. A branch of allOf with none of them (say,
# only `required`) constrains the value without changing its type, so it is skipped; a branch
# of anyOf/oneOf with none of them takes values of any type, so the union is unknown.
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
# an intersection (TypeScript's concern; other languages may ignore it).
UNION, INTERSECTION, ATOM = 0, 1, 2


@dataclass(frozen=True)
class Rendered:
    """A type as written in the language: its text, precedence, and members of a union."""

    text: str
    prec: int = ATOM
    members: tuple[str, ...] = ()


@dataclass(frozen=True)
class Member:
    """One property of an object type: its key, type, whether required, and its comment."""

    key: str
    type: Rendered
    required: bool
    comment: str = ""


# The extra keys of an object: none allowed, any (or of one type), or as the schema says.
CLOSED = Rendered("<closed>")


class Namer:
    """Type names already used in one declarations block, so every new one is unique, and
    the named types declared in it by what they are (:attr:`declared`), so that a type
    several tools share is declared once."""

    def __init__(self, taken: set[str] | None = None) -> None:
        self.taken: set[str] = set(taken or ())
        # The next suffix to try after `base`: every lower one is taken (names are never
        # given back), so a thousand objects of one name cost linear time, not quadratic.
        self._next: dict[str, int] = {}
        # Document.key -> the name the type was declared under. Pydantic puts a model in the
        # `$defs` of every tool that uses it: an `Item` of five tools was declared five times,
        # under five names, as five types the model could not tell were one.
        self.declared: dict[str, str] = {}
        # The keys of the objects written out in more than one place of the block (see
        # Walker._object), which a language that writes objects where they are names instead;
        # None: it names none. `met` counts them, in a first pass over the block's tools.
        self.repeated: frozenset[str] | None = None
        self.met: dict[str, int] | None = None

    def fresh(self, base: str) -> str:
        name = base
        n = self._next.get(base, 2)
        while name in self.taken:
            name = f"{base}_{n}"
            n += 1
        self._next[base] = n
        self.taken.add(name)
        return name

    def copy(self) -> Namer:
        namer = Namer(self.taken)
        namer._next = dict(self._next)
        namer.declared = dict(self.declared)
        namer.repeated, namer.met = self.repeated, self.met
        return namer


def result_document(schema: Any, prefix: str) -> Document:
    """A tool's output schema as a document of named types: named after the model it is
    (its ``title``: ``Get_user_User``) or else ``<Prefix>_Result``."""
    title = schema.get("title") if isinstance(schema, dict) else None
    name = pascal(title) if isinstance(title, str) and title.strip() else "Result"
    return Document(schema, prefix, f"{prefix}_{name}")


def type_prefix(tool_name: str) -> str:
    """The prefix of a tool's named types: its name with a capital first letter."""
    return tool_name[:1].upper() + tool_name[1:]


def pascal(segment: str) -> str:
    """A key or a definition's name as part of a type name (``user-id`` -> ``User_id``)."""
    cleaned = re.sub(r"[^A-Za-z0-9_]+", "_", segment).strip("_") or "Type"
    return cleaned[:1].upper() + cleaned[1:]


# Control characters other than tab and line ends: a NUL is not allowed in Python source, and
# none of them is text a model should read.
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# The bidi embeddings, overrides and isolates: they reorder what a person reads (Trojan
# Source, CVE-2021-42574).
BIDI_CONTROLS = (*range(0x202A, 0x202F), *range(0x2066, 0x206A))
# A subdivision flag (Scotland's, Wales's) is the black flag, tag characters spelling a CLDR
# subdivision code (a region's two letters or three digits, then one to four letters or
# digits) and a cancel tag (UTS #51): the one use of tag characters that shows as what it
# is, and too short to carry a hidden sentence.
_TAG_ALNUM = "\U000e0030-\U000e0039\U000e0061-\U000e007a"
_SUBDIVISION_FLAG = (
    "\U0001f3f4(?:[\U000e0061-\U000e007a]{2}|[\U000e0030-\U000e0039]{3})"
    f"[{_TAG_ALNUM}]{{1,4}}\U000e007f"
)
# Characters that hide text or reorder it for the person who reads a listing: the bidi
# controls, and the Unicode tag characters, invisible on screen while a model reads them
# (instructions smuggled into a server's tool description), but those of a subdivision flag
# (matched as group 1, and kept). Dropped: no description needs them.
HIDDEN = re.compile(
    f"({_SUBDIVISION_FLAG})|[" + "".join(map(chr, BIDI_CONTROLS)) + "\U000e0000-\U000e007f]"
)


def hidden_escaped(text: str, astral: str) -> str:
    """The source ``text`` of a string literal with its :data:`HIDDEN` characters written as
    escapes: ``\\uXXXX`` within the Basic Multilingual Plane, else ``astral % code``
    (``"\\u{%x}"`` in JavaScript, ``"\\U%08x"`` in Python). A value the model must send back
    exactly (an enum's, a key) stays that value, and a person reading it sees the marks."""

    def escaped(m: re.Match[str]) -> str:
        if m[1]:
            return m[1]
        code = ord(m[0])
        return f"\\u{code:04x}" if code <= 0xFFFF else astral % code

    return HIDDEN.sub(escaped, text)


def printable(text: str) -> str:
    """``text`` with its control characters (but tab and line ends) as spaces, and the
    characters that hide or reorder text (:data:`HIDDEN`) left out; a subdivision flag stays
    whole."""
    return CONTROL.sub(" ", HIDDEN.sub(_flag_only, text))


def _flag_only(m: re.Match[str]) -> str:
    return m[1] or ""


def one_line(text: str) -> str:
    """``text`` with its whitespace runs (line ends too) and control characters as single
    spaces."""
    return " ".join(printable(text).split())


def first_line(text: str, limit: int, clean: Callable[[str], str] = one_line) -> str:
    """The first non-empty line of ``text``, made safe by ``clean``, cut at ``limit``
    characters."""
    for line in text.strip().splitlines():
        line = clean(line)
        if line:
            if len(line) <= limit:
                return line
            # Cut through a flag, the tag characters left would be hidden ones.
            return printable(line[: limit - 3]).rstrip() + "..."
    return ""


def json_text(value: Any) -> str:
    """``value`` as JSON text, with the line separators escaped (older parsers end a line
    at them)."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=False, allow_nan=False)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


@dataclass
class Document:
    """One schema being declared (a tool's input or output schema) and its named types."""

    root: Any
    prefix: str  # the tool's type prefix
    root_name: str  # the name of the whole schema when a `$ref: "#"` reaches it
    # The whole is written where it is, never named for being written out elsewhere too
    # (a tool's input: its members are the call's arguments, read in its signature).
    inline_root: bool = False
    names: dict[str, str] = field(default_factory=dict)  # JSON pointer -> type name
    # Strongly connected components of the "is directly" graph (see `component`).
    _components: dict[str, int] = field(default_factory=dict)
    _count: int = 0
    _keys: dict[str, str | None] = field(default_factory=dict)

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

    def key(self, pointer: str) -> str | None:
        """What the type at ``pointer`` is, as text equal for two types exactly when they
        are one (see :attr:`Namer.declared`): its name (the definition's; the document's
        ``title``) and a digest of its schema with each local reference replaced by its
        target's key, so the same model in two tools' ``$defs`` has one key. Types that
        reach each other (a recursive model) are digested together, each reference among
        them by its target's name. None for a type that is not shared: one with a remote or
        broken reference or reaching one, a document with no ``title``, a schema past the
        render depth, recursive types two of which go by one name.

        Tarjan's algorithm, iterative and memoized, as :meth:`component` is: a chain of
        thousands of definitions costs linear time."""
        keys = self._keys
        if pointer in keys:
            return keys[pointer]
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []  # the open types, in the order they were met
        found: dict[str, tuple[Any, list[str]]] = {}  # pointer -> (schema, its references)
        work: list[tuple[str, int]] = []  # (pointer, its next reference to follow)

        def begin(at: str) -> None:
            node = self.resolve(at)
            refs = _refs(node, at == "")
            if node is None or refs is None or not _type_name(node, at):
                keys[at] = None
                return
            index[at] = low[at] = len(index)
            stack.append(at)
            found[at] = (node, refs)
            work.append((at, 0))

        begin(pointer)
        while work:
            at, next_ref = work[-1]
            refs = found[at][1]
            if next_ref < len(refs):
                work[-1] = (at, next_ref + 1)
                target = refs[next_ref]
                if target in keys:
                    continue  # done, in a component of its own
                if target in index:
                    low[at] = min(low[at], index[target])  # open: in this one's component
                else:
                    begin(target)
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[at])
            if low[at] == index[at]:  # `at` and what is above it on the stack: a component
                members = [stack.pop()]
                while members[-1] != at:
                    members.append(stack.pop())
                self._key_component(members, found)
        return keys[pointer]

    def _key_component(self, members: list[str], found: dict[str, tuple[Any, list[str]]]) -> None:
        """Key the types of one strongly connected component (see :meth:`key`)."""
        keys = self._keys
        inside = set(members)
        targets: dict[str, str | None] = {
            r: keys[r] for m in members for r in found[m][1] if r not in inside
        }
        if None in targets.values():
            keys.update(dict.fromkeys(members))
            return
        names = {m: _type_name(found[m][0], m) for m in members}
        if len(members) == 1 and members[0] not in found[members[0]][1]:
            at = members[0]
            digest = _digest(_keyed(found[at][0], at == "", targets.__getitem__))
            keys[at] = None if digest is None else f"{names[at]}:{digest}"
            return
        if len(set(names.values())) < len(members):
            keys.update(dict.fromkeys(members))
            return
        # Recursive: each reference among them by its target's name, all in one digest.
        targets.update({m: f"@{names[m]}" for m in members})
        digest = _digest(
            sorted([names[m], _keyed(found[m][0], m == "", targets.__getitem__)] for m in members)
        )
        for m in members:
            keys[m] = None if digest is None else f"{names[m]}:@{digest}"

    def component(self, pointer: str) -> int:
        """The id of the strongly connected component ``pointer`` is in, in the graph whose
        edges are the references a type *is* (``$ref``, through anyOf/oneOf/allOf) rather
        than holds in a property or an item. Two types in one component are each, directly,
        the other, which no language declares (``type A = B; type B = A | string``).

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


# Where a schema holds schemas that its type is declared from (see Walker.render): a map of
# them, one, one or a list, a list. Anything else in a schema is data to the declarations
# (`const`, `default`, a `not`), kept in a key as it is: a `$ref` there refers to nothing.
_SCHEMA_MAPS = frozenset({"properties"})
_SCHEMA_VALUES = frozenset({"additionalProperties", "items", "additionalItems"})
_SCHEMA_LISTS = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
# Where a document keeps its definitions: part of no type (each is one of its own).
_DEFINITIONS = ("$defs", "definitions")


class _Unkeyable(Exception):
    """A schema with a remote reference, or past the render depth: no key."""


def _keyed(schema: Any, root: bool, ref: Callable[[str], Any], depth: int = 0) -> Any:
    """``schema`` as its key holds it: each local reference in a place the declarations
    read a schema from is ``ref(pointer)``; its ``title`` (a shared type's name, which no
    declaration writes) and a whole document's definitions left out. Raises
    :class:`_Unkeyable`."""
    if depth > MAX_RENDER_DEPTH:
        raise _Unkeyable
    if not isinstance(schema, dict):
        return schema  # `true`, `false`
    out: dict[str, Any] = {}
    for k, v in schema.items():
        if k == "title" or (root and k in _DEFINITIONS):
            continue
        if k == "$ref":
            pointer = _local_pointer(v)
            if pointer is None:
                raise _Unkeyable
            out[k] = ref(pointer)
        elif k in _SCHEMA_MAPS and isinstance(v, dict):
            out[k] = {name: _keyed(sub, False, ref, depth + 1) for name, sub in v.items()}
        elif (k in _SCHEMA_LISTS or k in _SCHEMA_VALUES) and isinstance(v, list):
            out[k] = [_keyed(sub, False, ref, depth + 1) for sub in v]
        elif k in _SCHEMA_VALUES:
            out[k] = _keyed(v, False, ref, depth + 1)
        else:
            out[k] = v
    return out


def _refs(schema: Any, root: bool) -> list[str] | None:
    """The local references a schema's type is declared from (see :func:`_keyed`), in
    order; None if it cannot be keyed."""
    found: list[str] = []
    try:
        _keyed(schema, root, found.append)
    except _Unkeyable:
        return None
    return found


def _type_name(schema: Any, pointer: str) -> str:
    """The name a shared type goes by: its definition's (the pointer's last part), or the
    whole document's ``title``; "" when it has none."""
    if pointer:
        return pointer.rsplit("/", 1)[-1].replace("~1", "/").replace("~0", "~")
    title = schema.get("title") if isinstance(schema, dict) else None
    return title if isinstance(title, str) else ""


def _digest(value: Any) -> str | None:
    """A digest of ``value`` (keyed schemas) as canonical JSON; None for what is not JSON
    data."""
    try:
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


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


def _is_typed(branch: Any) -> bool:
    # A branch with no type keyword (`true`, `{}`, only `required`) says nothing of the type.
    return branch is False or (isinstance(branch, dict) and bool(_TYPE_KEYWORDS & branch.keys()))


def _typed_branches(value: Any) -> list[Any]:
    if not isinstance(value, list):
        return []
    return [b for b in value if _is_typed(b)]


def is_plain_object(schema: Any) -> bool:
    """True when ``schema`` is an object type and nothing else (no reference, union,
    constant, enum or null): a language may declare it as a class of its own."""
    if not isinstance(schema, dict):
        return False
    if any(k in schema for k in ("$ref", "const", "anyOf", "oneOf", "allOf")):
        return False
    if isinstance(schema.get("enum"), list):
        return False
    if "type" in schema:
        return schema["type"] == "object"
    return any(k in schema for k in ("properties", "additionalProperties", "required"))


class Walker(abc.ABC):
    """Renders the schemas of one tool; named types it meets wait in :attr:`pending`.

    ``comments`` gives each property its description's first line (and its format and
    default) as a comment. Call :meth:`drain` after the tool's member is rendered, to get
    each named type's declaration. A language subclasses this and writes each kind of type:
    the methods below marked "the language's".
    """

    unknown = Rendered("unknown")
    never = Rendered("never")
    null = Rendered("null")

    def __init__(self, namer: Namer, *, comments: bool) -> None:
        self.namer = namer
        self.comments = comments
        self.pending: deque[tuple[Document, str, str]] = deque()
        # Declarations of objects named where they were met (see _object), not yet drained.
        self.written: deque[str] = deque()
        self._keying = False  # writing an object out for its key (see _key_of_object)
        # (id(doc), id(schema), hint) -> (doc, schema, key): the doc and schema kept, so
        # that neither id is another's while this walker lives (a tool's input document
        # is let go before its result's is made).
        self._object_keys: dict[tuple[int, int, str], tuple[Document, Any, str]] = {}
        # The named type being declared, to spot a type that is, directly, itself.
        self._declaring: tuple[Document, str] | None = None

    # -- the language's -----------------------------------------------------------------------

    def clean(self, text: str) -> str:
        """One line of text made safe inside the language's comment."""
        return one_line(text)

    @abc.abstractmethod
    def const(self, value: Any) -> Rendered: ...

    @abc.abstractmethod
    def enum(self, values: list[Any]) -> Rendered: ...

    @abc.abstractmethod
    def scalar(self, kind: str) -> Rendered:
        """``string``, ``number``, ``integer`` or ``boolean``; unknown for anything else."""

    @abc.abstractmethod
    def array(self, item: Rendered) -> Rendered: ...

    @abc.abstractmethod
    def tuple_type(self, elements: list[tuple[Rendered, bool]], rest: Rendered | None) -> Rendered:
        """A tuple: each element and whether it may be left out, then the type of the rest
        (None when the tuple is closed)."""

    @abc.abstractmethod
    def object(
        self, members: list[Member], extra: Rendered | None, level: int, hint: str
    ) -> Rendered:
        """An object of ``members``; ``extra`` is the type of other keys (None: the schema
        says nothing of them; :data:`CLOSED`: none allowed). ``hint`` names it where the
        language needs a name."""

    @abc.abstractmethod
    def union(self, parts: list[Rendered]) -> Rendered: ...

    @abc.abstractmethod
    def intersection(self, parts: list[Rendered]) -> Rendered: ...

    @abc.abstractmethod
    def declaration(self, name: str, body: Rendered) -> str:
        """The declaration of a named type."""

    # Whether every object type is a named type of its own (a Python class): then one
    # written out alike elsewhere in the block is that one (see _object).
    names_objects = False

    def written_out(self, members: list[Member], extra: Rendered | None, hint: str) -> str:
        """An object as written, for its key (see :meth:`_key_of_object`): as :meth:`object`
        writes it, unless that declares something (a language that names every object)."""
        return self.object(members, extra, 0, hint).text

    def named(self, doc: Document, pointer: str, name: str) -> Rendered:
        """The body of the named type ``name`` (a language that declares objects as classes
        names the class ``name``)."""
        return self.render(doc.resolve(pointer), doc, 0, hint=name, direct=True)

    # -- named types ------------------------------------------------------------------------

    def _name_for(self, doc: Document, pointer: str) -> str:
        name = doc.names.get(pointer)
        if name is None:
            key = doc.key(pointer)
            name = self.namer.declared.get(key) if key is not None else None
            if name is None:  # not declared in the block yet, by this tool or another
                if not pointer:
                    name = self.namer.fresh(doc.root_name)
                else:
                    last = pointer.rsplit("/", 1)[-1].replace("~1", "/").replace("~0", "~")
                    name = self.namer.fresh(f"{doc.prefix}_{pascal(last)}")
                self.pending.append((doc, pointer, name))
                if key is not None:
                    self.namer.declared[key] = name
            doc.names[pointer] = name
        return name

    def result(self, doc: Document) -> Rendered:
        """A tool's result type (``doc``: see :func:`result_document`). A model (an object
        type with a ``title``) is a named type, shared as a definition is, so a tool that
        returns what another takes is declared to return that very type. Anything else is
        written out where it is."""
        if is_plain_object(doc.root) and doc.key("") is not None:
            return Rendered(self._name_for(doc, ""))
        return self.render(doc.root, doc, 1, hint=doc.root_name)

    def drain(self) -> Iterator[str]:
        """Declarations of the named types met so far, and of those they meet in turn, each
        once, in the order they were met."""
        while self.pending or self.written:
            if self.written:
                yield self.written.popleft()
                continue
            doc, pointer, name = self.pending.popleft()
            self._declaring = (doc, pointer)
            body = self.named(doc, pointer, name)
            self._declaring = None
            yield self.declaration(name, body)

    def _ref(self, doc: Document, ref: Any, direct: bool) -> Rendered:
        pointer = _local_pointer(ref)
        if pointer is None or doc.resolve(pointer) is None:
            return self.unknown  # a remote or broken reference; compiling the schema refuses it
        # The body of `within` is this reference: if the target is, in turn, directly
        # `within`, naming it would make a type alias that is itself.
        within = self._declaring if direct else None
        if within and within[0] is doc and doc.component(pointer) == doc.component(within[1]):
            return self.unknown
        return Rendered(self._name_for(doc, pointer))

    # -- schemas ----------------------------------------------------------------------------

    def render(
        self, schema: Any, doc: Document, level: int, *, hint: str = "", direct: bool = False
    ) -> Rendered:
        """The type of ``schema``; ``level`` is the indentation of its first line, ``hint``
        the name an object here would take, and ``direct`` is true while the type being
        declared *is* this schema."""
        if schema is True:
            return self.unknown
        if schema is False:
            return self.never
        if not isinstance(schema, dict) or level > MAX_RENDER_DEPTH:
            return self.unknown
        hint = hint or doc.root_name
        parts: list[Rendered] = []
        if "$ref" in schema:
            parts.append(self._ref(doc, schema["$ref"], direct))
        elif "const" in schema:
            parts.append(self.const(schema["const"]))
        elif isinstance(schema.get("enum"), list) and schema["enum"]:
            parts.append(self.enum(schema["enum"]))
        elif "type" in schema:
            types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            parts.append(self.union([self._typed(t, schema, doc, level, hint) for t in types]))
        elif any(k in schema for k in ("properties", "additionalProperties", "required")):
            parts.append(self._object(schema, doc, level, hint))
        elif "items" in schema or "prefixItems" in schema:
            parts.append(self._array(schema, doc, level, hint))
        for key in ("anyOf", "oneOf"):
            branches = schema.get(key)
            if not isinstance(branches, list) or not all(_is_typed(b) for b in branches):
                # A branch of any type (pydantic's `Any | None` is `anyOf: [{}, {null}]`), or
                # only branches that constrain (`required`): the union narrows nothing.
                continue
            if branches:
                parts.append(
                    self.union(
                        [self.render(b, doc, level, hint=hint, direct=direct) for b in branches]
                    )
                )
        for branch in _typed_branches(schema.get("allOf")):
            parts.append(self.render(branch, doc, level, hint=hint, direct=direct))
        # OpenAPI's `nullable: true` is no JSON Schema keyword: the tool's validator refuses
        # null there, so the type does not offer it (a model that passed it failed the call).
        return self.intersection(parts) if parts else self.unknown

    def _typed(
        self, kind: Any, schema: dict[str, Any], doc: Document, level: int, hint: str
    ) -> Rendered:
        if kind == "null":
            return self.null
        if kind == "array":
            return self._array(schema, doc, level, hint)
        if kind == "object":
            return self._object(schema, doc, level, hint)
        return self.scalar(kind) if isinstance(kind, str) else self.unknown

    def _array(self, schema: dict[str, Any], doc: Document, level: int, hint: str) -> Rendered:
        prefix = schema.get("prefixItems")
        rest = schema.get("items")
        if not isinstance(prefix, list) and isinstance(rest, list):
            prefix, rest = rest, schema.get("additionalItems")  # draft 4-7 tuples
        if isinstance(prefix, list):
            minimum = schema.get("minItems")
            elements = [
                (
                    self.render(item, doc, level, hint=hint),
                    isinstance(minimum, int) and i >= minimum,
                )
                for i, item in enumerate(prefix)
            ]
            maximum = schema.get("maxItems")
            closed = rest is False or (isinstance(maximum, int) and maximum <= len(prefix))
            tail = None
            if isinstance(rest, dict) and rest and not closed:
                tail = self.render(rest, doc, level, hint=hint)
            return self.tuple_type(elements, tail)
        if isinstance(rest, dict | bool):
            return self.array(self.render(rest, doc, level, hint=hint))
        return self.array(self.unknown)

    def members(
        self, schema: dict[str, Any], doc: Document, level: int
    ) -> tuple[list[Member], Rendered | None]:
        """An object schema's members (its properties, then required keys it does not
        describe, as unknown) and the type of its other keys (see :meth:`object`)."""
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = [r for r in schema.get("required", []) or [] if isinstance(r, str)]
        members = [
            Member(
                key,
                self.render(sub, doc, level + 1, hint=f"{doc.prefix}_{pascal(key)}"),
                key in required,
                self._comment(sub),
            )
            for key, sub in properties.items()
        ]
        members += [Member(key, self.unknown, True) for key in required if key not in properties]
        extra = schema.get("additionalProperties")
        patterns = schema.get("patternProperties")
        if not properties:
            if extra is False and not patterns:
                return members, CLOSED
            if isinstance(extra, dict) and extra and not patterns:
                value = self.render(extra, doc, level + 1, hint=f"{doc.prefix}_{pascal('value')}")
                # A required key no property describes holds what the other keys hold (typed
                # unknown, it would not fit the index signature of a TypeScript object).
                return [replace(m, type=value) for m in members], value
            return members, self.unknown
        if extra is True or isinstance(extra, dict) or patterns:
            # A declared property must fit the other keys' type, so it can only say unknown.
            # Other keys allowed in so many words (`true`, `{}`: pydantic's extra="allow",
            # zod's passthrough) are declared, or the check refused a call that passed one.
            return members, self.unknown
        return members, None

    def _object(self, schema: dict[str, Any], doc: Document, level: int, hint: str) -> Rendered:
        namer = self.namer
        if not (self.names_objects or namer.repeated is not None or namer.met is not None) or (
            schema is doc.root and doc.inline_root
        ):
            members, extra = self.members(schema, doc, level)
            return self.object(members, extra, level, hint)
        # An object written out alike in several places of the block (a server's zod schema
        # of an entity, inlined into each tool's input and result) is one type: alike, under
        # one name (less its tool's prefix) and written out the same, every object in it too
        # (an `additionalProperties: false` that changes nothing written changes nothing).
        key = self._key_of_object(schema, doc, hint)
        if self._keying:
            return Rendered(key)  # in its holder's key, an object is its own key
        if namer.met is not None:
            namer.met[key] = namer.met.get(key, 0) + 1
        name = namer.declared.get(key)
        if name is None and self.names_objects:
            # A language that names every object: the first of its key is the one.
            members, extra = self.members(schema, doc, level)
            rendered = self.object(members, extra, level, hint)
            namer.declared[key] = rendered.text
            return rendered
        # One that writes objects where they are names those written out in several places,
        # where each was first met (see Dialect.names_repeated_objects).
        if name is None and namer.repeated is not None and key in namer.repeated:
            members, extra = self.members(schema, doc, 0)
            body = self.object(members, extra, 0, hint)
            if "\n" not in body.text:
                return body  # one line (`{ ok: boolean }`): shorter written out than named
            name = namer.declared[key] = namer.fresh(hint)
            self.written.append(self.declaration(name, body))
        if name is not None:
            return Rendered(name)
        members, extra = self.members(schema, doc, level)
        return self.object(members, extra, level, hint)

    def _key_of_object(self, schema: dict[str, Any], doc: Document, hint: str) -> str:
        """The key of an object written out where it is (see :meth:`_object`): the name it
        would take less its tool's prefix, and a digest of it as written, each object in it
        by its own key (so that each is written once for the keys, however deep)."""
        made = (id(doc), id(schema), hint)
        known = self._object_keys.get(made)
        if known is not None:
            return known[2]
        keying, self._keying = self._keying, True
        try:
            members, extra = self.members(schema, doc, 0)
            text = self.written_out(members, extra, hint)
        finally:
            self._keying = keying
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        key = f"\x00object {hint.removeprefix(f'{doc.prefix}_')}:{digest}"
        self._object_keys[made] = (doc, schema, key)
        return key

    def value_text(self, value: Any) -> str:
        """A JSON value (a default) as the language writes it."""
        return json_text(value)

    def _comment(self, schema: Any) -> str:
        if not self.comments or not isinstance(schema, dict):
            return ""
        pieces = []
        description = schema.get("description")
        line = ""
        if isinstance(description, str):
            line = first_line(description, MAX_PROPERTY_COMMENT, self.clean)
            if line:
                pieces.append(line if line.endswith((".", "?", "!")) else f"{line}.")
        fmt = schema.get("format")
        if isinstance(fmt, str) and fmt and len(fmt) < 40:
            pieces.append(f"Format: {self.clean(fmt)}.")
        bounds = _bounds(_non_null(schema))
        if bounds:
            # The tool's check refuses a value outside them: said here, the model need not
            # learn them by failing.
            pieces.append(self.clean(bounds))
        if "default" in schema:
            try:
                shown = self.value_text(schema["default"])
            except (TypeError, ValueError, RecursionError):
                shown = ""
            if shown and len(shown) <= MAX_DEFAULT_SHOWN and not _says_default(line, shown):
                pieces.append(f"Default: {self.clean(shown)}.")
        return " ".join(pieces)


def _says_default(description: str, shown: str) -> bool:
    """Whether a description says the default already (``Defaults to 10.``, a docstring's
    habit), so that a "Default: 10." after it would say it twice."""
    if not re.search(r"\bdefault", description, re.IGNORECASE):
        return False
    return shown in description or (len(shown) > 2 and shown.strip("\"'") in description)


# A pattern longer than this is left out of a comment (the tool's check still applies it).
MAX_PATTERN_SHOWN = 60


def _non_null(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema, or its one branch that is not null (pydantic's ``T | None``)."""
    branches = schema.get("anyOf")
    if isinstance(branches, list) and len(branches) == 2:
        others = [b for b in branches if not (isinstance(b, dict) and b.get("type") == "null")]
        if len(others) == 1 and isinstance(others[0], dict):
            return others[0]
    return schema


def _number(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return json_text(value)


def _bounds(schema: dict[str, Any]) -> str:
    """What a schema bounds of a value, in words: ``"1 to 10."``, ``"At least 3 characters,
    at most 50."``, ``"Matches ^[a-z]+$."``; "" for none."""
    said: list[str] = []
    low = _number(schema.get("minimum"))
    high = _number(schema.get("maximum"))
    above = _number(schema.get("exclusiveMinimum"))
    below = _number(schema.get("exclusiveMaximum"))
    if low is not None and high is not None:
        said.append(f"{low} to {high}")
    else:
        if low is not None:
            said.append(f"at least {low}")
        if high is not None:
            said.append(f"at most {high}")
    if above is not None:
        said.append(f"more than {above}")
    if below is not None:
        said.append(f"less than {below}")
    step = _number(schema.get("multipleOf"))
    if step is not None:
        said.append(f"a multiple of {step}")
    for key, word, unit in (
        ("minLength", "at least", "characters"),
        ("maxLength", "at most", "characters"),
        ("minItems", "at least", "items"),
        ("maxItems", "at most", "items"),
    ):
        count = schema.get(key)
        if isinstance(count, int) and not isinstance(count, bool):
            said.append(f"{word} {count:,} {unit}")
    if schema.get("uniqueItems") is True:
        # A set's: a list with an item twice is refused, which the type (number[]) hides.
        said.append("each item once")
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and 0 < len(pattern) <= MAX_PATTERN_SHOWN:
        said.append(f"matching {pattern}")
    if not said:
        return ""
    text = ", ".join(said)
    return text[0].upper() + text[1:] + "."


def base_type(value: Any) -> str:
    """The JSON type of a value: ``boolean``, ``number``, ``string``, ``null`` or
    ``unknown``."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    return "unknown"
