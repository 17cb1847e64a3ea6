"""JSON Schemas from hosts and third parties, and the JSON data that crosses to a script.

A tool's schemas may come from an MCP server the host does not control, so they are untrusted
input: bounded in size and depth, validated against the meta-schema, compiled once, never
allowed to fetch a remote ``$ref``, and compiled so that ``pattern`` and ``patternProperties``
run on a linear-time regex engine (the Rust ``regex`` crate, not the backtracking
``fancy-regex``): a string the model chose must never meet an unbounded backtracking engine.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import math
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any, cast

import jsonschema_rs
import orjson
from pydantic import BaseModel, ConfigDict, PydanticUserError, TypeAdapter
from pydantic_core import PydanticSerializationError, to_jsonable_python

from engine._argument_keys import keys_made_text
from engine._errors import CodeModeError
from sandbox.protocol import MAX_DEPTH, RUN_CODE, data_path, with_article

KiB = 1024

# Bounds on one schema: its JSON text and how deeply its containers nest.
MAX_SCHEMA_BYTES = 256 * KiB
MAX_SCHEMA_DEPTH = 64
# Bounds on one compiled regular expression (bytes of the compiled program and of the lazy
# DFA cache), so a huge `{1000}{1000}` repetition is refused instead of eating memory.
REGEX_SIZE_LIMIT = 1024 * KiB
REGEX_DFA_SIZE_LIMIT = 1024 * KiB
# How deeply a value returned by a handler may nest: the wire's one bound (a cycle would
# otherwise recurse forever).
MAX_DATA_DEPTH = MAX_DEPTH
# How many problems one validation message lists, and how long one quoted value may be.
MAX_ERRORS_SHOWN = 3
MAX_QUOTE = 60


class SchemaProblem(Exception):
    """A schema that cannot be used; the message says what is wrong and where."""


class NotJSONData(Exception):
    """A value that is not JSON data.

    ``what`` describes the value and where it sits (``a set at items[2]``), ``hint`` says what
    to return instead (empty, or starting with ``"; "``). ``javascript`` is ``what`` as a
    JavaScript script reads it, where that spells a value otherwise (``the number NaN``, not
    Python's ``nan``); see :meth:`what_in`.
    """

    def __init__(self, what: str, hint: str = "", *, javascript: str | None = None) -> None:
        super().__init__(f"{what}, which is not JSON data{hint}")
        self.what = what
        self.hint = hint
        self.javascript = javascript

    def what_in(self, language: str) -> str:
        """``what`` as a script in ``language`` writes it."""
        if language == "javascript" and self.javascript is not None:
            return self.javascript
        return self.what


def json_type(value: Any) -> str:
    """The JSON type name of a Python value, for messages (``object``, ``array``, ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def a_json_type(value: Any) -> str:
    """The JSON type of ``value`` with its article: ``an array``, ``a string``."""
    return with_article(json_type(value))


def only_argument(arguments: Any, tool: str, key: str, example: str, *, empty: bool = False) -> str:
    """The one argument the engine's own ``tool`` (``run_code``, ``continue_script``) takes, a
    string (non-empty unless ``empty``), from the model's ``arguments`` (an object, or its
    JSON text as OpenAI's APIs give it); else a :class:`CodeModeError` that says what it
    takes. Any other argument is refused, not ignored: a model that passed one (a timeout, a
    language) expects it to act."""
    takes = f'{tool} takes only {{"{key}": "{example}"}}'
    if isinstance(arguments, str):
        text = arguments
        try:
            arguments = orjson.loads(text)
        except orjson.JSONDecodeError as e:
            raise CodeModeError(f"{takes}; its arguments were no JSON ({e})") from None
        # JSON text may give a key twice, and its parse keeps the last: two scripts given,
        # the first was dropped without a word. (Looked at again only when the key's name
        # is there twice, or may be spelled with an escape, as most calls' is not.)
        if isinstance(arguments, dict) and (text.count(f'"{key}"') > 1 or "\\u" in text):
            try:
                given = [k for k, _ in json.loads(text, object_pairs_hook=_top_keys)]
            except RecursionError:  # deeper than Python's parse goes: another key, refused
                given = []
            if given.count(key) > 1:
                raise CodeModeError(
                    f"{takes}; its arguments give {key} {given.count(key)} times: give it once"
                )
    if not isinstance(arguments, dict):
        raise CodeModeError(
            f"{takes}; its arguments must be an object, not {a_json_type(arguments)}"
        )
    value = arguments.get(key)
    others = sorted(str(k) for k in arguments if k != key)
    if not isinstance(value, str) or not (value or empty) or others:
        extra = f"; leave out {', '.join(repr(k)[:80] for k in others)}" if others else ""
        if key in arguments and not isinstance(value, str):
            extra = f"; {key} must be a string, not {a_json_type(value)}" + extra
        elif value == "" and not empty:  # an empty script is one (script_argument)
            extra = f"; {key} is empty" + extra
        raise CodeModeError(takes + extra)
    return value


def _top_keys(pairs: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """A JSON object as its pairs, in order, a key given twice kept twice."""
    return pairs


def script_argument(arguments: Any) -> str:
    """The script of the model's call to ``run_code``, from its ``arguments`` (see
    :func:`only_argument`); an empty one is a script too, one that does nothing."""
    return only_argument(arguments, RUN_CODE, "code", "<the script>", empty=True)


def _depth(value: Any) -> int:
    """How deep ``value`` nests (past :data:`MAX_SCHEMA_DEPTH`, the first depth found past
    it); raises :class:`SchemaProblem` for a NaN or an infinity in it, which JSON has not
    (orjson writes them as null, so a schema's default of NaN was declared as null)."""
    # Iterative, so a hostile schema nested a million levels cannot blow the Python stack.
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    seen = 0  # bytes of JSON the walk has met so far, at least
    while stack:
        node, depth = stack.pop()
        rings = 0
        while isinstance(node, enum.Enum):  # orjson writes a member as its value
            node, rings = node.value, rings + 1
            if rings > MAX_SCHEMA_DEPTH:  # a member whose value is a member again, or itself
                raise SchemaProblem(
                    f"it holds an enum member whose value is a member, {MAX_SCHEMA_DEPTH} "
                    "times over (is there a cycle?); give the members' plain values"
                )
        # Counted in bytes, not values: a host's dict that holds one schema in two places,
        # each holding the next alike, is 2**depth values as JSON (25 deep, this walk and the
        # encoder after it held the host for minutes), and one 20 KB string held in 60,000
        # places had the encoder write 1.2 GB before the size refused it. Each count is at
        # most what the encoder writes, so no schema within the bound is refused here.
        # A container's brackets and commas are counted before its members are pushed, so a
        # long one is refused before the stack holds it again (an enum of 20,000,000 zeros
        # took 6 s and 1.4 GB to refuse when each zero was pushed, then counted).
        # A subclass's own len, iter and values are not read: orjson writes what it holds,
        # and one whose __iter__ hid 1,000 parts had them written, 20 MB, past this count.
        if isinstance(node, str):
            seen += len(node) + 2  # a character is a byte at least, and its quotes
        elif isinstance(node, dict):
            commas = max(dict.__len__(node) - 1, 0)
            keys = dict.__iter__(node)
            seen += 2 + commas + sum(len(k) + 3 if isinstance(k, str) else 1 for k in keys)
        elif isinstance(node, list | tuple):
            held = list.__len__(node) if isinstance(node, list) else tuple.__len__(node)
            seen += 2 + max(held - 1, 0)
        elif node is None or isinstance(node, bool | int | float):
            seen += 1
        else:
            # Anything else orjson writes whole, unseen by this count (a dataclass, a datetime,
            # a Fragment: a 20 KB one in 1,000 places was written, 20 MB, before the size
            # refused it), and the schema's compiler refuses it anyway.
            raise SchemaProblem(
                f"it holds {with_article(type(node).__name__)}, which is not JSON data; give "
                "only objects, arrays, strings, numbers, true, false and null"
            )
        if seen > MAX_SCHEMA_BYTES:
            raise SchemaProblem(
                f"it is over the {MAX_SCHEMA_BYTES:,} bytes of JSON a schema may take (a part "
                "it holds in several places counts in each); describe the input more briefly, "
                "or name a part held in several places once in $defs"
            )
        if isinstance(node, dict):
            children: Any = dict.values(node)
        elif isinstance(node, list | tuple):  # orjson writes a tuple as an array
            children = _held(node)
        else:
            if isinstance(node, float) and not math.isfinite(node):
                raise SchemaProblem(f"it holds the number {node}, which JSON has not")
            continue
        deepest = max(deepest, depth)
        if depth > MAX_SCHEMA_DEPTH:
            return depth
        stack.extend((child, depth + 1) for child in children)
    return deepest


def check_schema(schema: Any, *, must_be_object: bool) -> None:
    """Raise :class:`SchemaProblem` unless ``schema`` is a usable JSON Schema.

    Checks that it is a JSON object, within :data:`MAX_SCHEMA_BYTES` and
    :data:`MAX_SCHEMA_DEPTH`, and (with ``must_be_object``) that it describes an object, as a
    tool's input schema must. The meta-schema check happens when it is compiled.
    """
    if not isinstance(schema, Mapping):
        raise SchemaProblem(f"it is {with_article(json_type(schema))}, not a JSON Schema object")
    # The depth first: the encoder would fail on a deep one, saying less.
    depth = _depth(schema)
    if depth > MAX_SCHEMA_DEPTH:
        raise SchemaProblem(
            f"it nests deeper than {MAX_SCHEMA_DEPTH} levels; flatten it or use $defs"
        )
    try:
        size = len(orjson.dumps(schema))
    except (TypeError, orjson.JSONEncodeError) as e:
        raise SchemaProblem(f"it is not JSON data ({e})") from None
    if size > MAX_SCHEMA_BYTES:
        raise SchemaProblem(
            f"it is {size:,} bytes of JSON, over the {MAX_SCHEMA_BYTES:,} bytes a schema may "
            "take; describe the input more briefly"
        )
    if must_be_object:
        kind = schema.get("type")
        if kind != "object":
            found = 'has no "type"' if kind is None else f'has "type": {_quote(kind)}'
            raise SchemaProblem(
                f"it {found}; a tool's input is an object of named arguments, so its schema "
                'needs "type": "object" with the arguments under "properties"'
            )


def compile_schema(schema: dict[str, Any]) -> jsonschema_rs.Validator:
    """Compile a checked schema once, offline, with the linear-time regex engine.

    Raises :class:`SchemaProblem` for a schema the meta-schema refuses, a ``$ref`` that does
    not resolve inside the schema, or a pattern the linear engine cannot run (lookaround and
    backreferences need backtracking, which is exactly what is not allowed).
    """
    try:
        return jsonschema_rs.validator_for(
            schema,
            offline=True,
            pattern_options=jsonschema_rs.RegexOptions(
                size_limit=REGEX_SIZE_LIMIT, dfa_size_limit=REGEX_DFA_SIZE_LIMIT
            ),
        )
    except jsonschema_rs.ValidationError as e:
        raise SchemaProblem(_definition_error(e, schema.get("$schema"))) from None
    except (jsonschema_rs.ReferencingError, ValueError) as e:  # pragma: no cover - defensive
        raise SchemaProblem(_first_line(str(e))) from None


def _definition_error(e: jsonschema_rs.ValidationError, schema_uri: Any) -> str:
    where = data_path(e.instance_path)
    message = _first_line(e.message)
    if e.instance_path[-1:] == ["pattern"] or 'is not a "regex"' in message:
        return (
            f"the pattern at {where} is not a regular expression the linear-time engine can "
            f"run ({_quote(e.instance)}); lookaround and backreferences are not supported, so "
            "rewrite the pattern without them or drop it"
        )
    if e.instance_path[-1:] == ["type"]:
        return (
            f"at {where}: {_quote(e.instance)} is not a JSON Schema type; use string, number, "
            "integer, boolean, null, array or object"
        )
    if not e.instance_path and "meta-schema" in message:
        return (
            f"its $schema is not a draft the validator knows ({_quote(schema_uri)}); use one of "
            "drafts 4, 6, 7, 2019-09 and 2020-12, or drop the $schema"
        )
    if not e.instance_path:
        return f"{message}; keep every $ref inside the schema (as #/$defs/Name)"
    return f"at {where}: {message}"


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else text
    return line if len(line) <= 300 else line[:297] + "..."


def _quote(value: Any) -> str:
    try:
        text = orjson.dumps(value).decode()
    except (TypeError, orjson.JSONEncodeError):
        text = repr(value)
    return text if len(text) <= MAX_QUOTE else text[: MAX_QUOTE - 3] + "..."


def _describe(e: jsonschema_rs.ValidationError) -> str:
    # Our own words for the common cases: the library's messages quote the whole instance,
    # which can be megabytes of what the model sent.
    kind = e.kind
    got = json_type(e.instance)
    match kind:
        case jsonschema_rs.ValidationErrorKind.Type(types=types):
            return f"expected {' or '.join(types)}, got {got}"
        case jsonschema_rs.ValidationErrorKind.Required(property=prop):
            return f"missing required property {_quote(prop)}"
        case jsonschema_rs.ValidationErrorKind.AdditionalProperties(unexpected=unexpected):
            names = ", ".join(_quote(u) for u in unexpected[:5])
            return f"unexpected propert{'y' if len(unexpected) == 1 else 'ies'} {names}"
        case jsonschema_rs.ValidationErrorKind.Enum(options=options):
            shown = ", ".join(_quote(o) for o in options[:10])
            more = ", ..." if len(options) > 10 else ""
            return f"expected one of {shown}{more}, got {_quote(e.instance)}"
        case jsonschema_rs.ValidationErrorKind.Constant(expected_value=expected):
            return f"expected {_quote(expected)}, got {_quote(e.instance)}"
        case jsonschema_rs.ValidationErrorKind.Pattern(pattern=pattern):
            return f"does not match the pattern {_quote(pattern)}"
        case jsonschema_rs.ValidationErrorKind.MinLength(limit=limit):
            return f"expected at least {limit} characters"
        case jsonschema_rs.ValidationErrorKind.MaxLength(limit=limit):
            return f"expected at most {limit} characters"
        case jsonschema_rs.ValidationErrorKind.MinItems(limit=limit):
            return f"expected at least {limit} items"
        case jsonschema_rs.ValidationErrorKind.MaxItems(limit=limit):
            return f"expected at most {limit} items"
        case jsonschema_rs.ValidationErrorKind.Minimum(limit=limit):
            return f"expected a number >= {limit}, got {_quote(e.instance)}"
        case jsonschema_rs.ValidationErrorKind.Maximum(limit=limit):
            return f"expected a number <= {limit}, got {_quote(e.instance)}"
        case jsonschema_rs.ValidationErrorKind.ExclusiveMinimum(limit=limit):
            return f"expected a number > {limit}, got {_quote(e.instance)}"
        case jsonschema_rs.ValidationErrorKind.ExclusiveMaximum(limit=limit):
            return f"expected a number < {limit}, got {_quote(e.instance)}"
        case jsonschema_rs.ValidationErrorKind.Format(format=fmt):
            return f"expected a {fmt} string, got {_quote(e.instance)}"
        case (
            jsonschema_rs.ValidationErrorKind.AnyOf(context=branches)
            | jsonschema_rs.ValidationErrorKind.OneOfNotValid(context=branches)
        ):
            types = _types_wanted(branches, e.instance_path)
            if types:
                return f"expected {' or '.join(types)}, got {got}"
            return f"{with_article(got)} that matches none of the allowed shapes"
        case jsonschema_rs.ValidationErrorKind.OneOfMultipleValid():
            return f"{with_article(got)} that matches more than one of the allowed shapes"
        case jsonschema_rs.ValidationErrorKind.FalseSchema():
            return "no value is allowed here"
        case _:
            return _first_line(e.message) if len(e.message) <= 200 else f"invalid {got}"


def validation_problems(validator: jsonschema_rs.Validator, instance: Any) -> str | None:
    """None when ``instance`` is valid, else its first few problems on one line, each with
    the path it is at: ``at repo: expected string, got integer; at state: ...``.
    """
    problems: list[str] = []
    total = 0
    for error in _explained(validator.iter_errors(instance)):
        total += 1
        if len(problems) < MAX_ERRORS_SHOWN:
            path = error.instance_path
            if error.kind.name == "required":
                # Point at the missing property, not at the object that lacks it.
                problems.append(f"{_describe(error)}{_at_object(path)}")
            else:
                at = f"at {data_path(path)}: " if path else ""
                problems.append(f"{at}{_describe(error)}")
        elif total > 50:
            break
    if not problems:
        return None
    more = total - len(problems)
    if more > 0:
        problems.append(f"and {more}{'+' if total > 50 else ''} more")
    return "; ".join(problems)


def _explained(errors: Iterator[jsonschema_rs.ValidationError]) -> Iterator[Any]:
    """``errors``, each ``anyOf``/``oneOf`` that one shape alone could fit given its value's
    type (``list[int] | None`` given a list) as that shape's own errors, at their paths:
    ``at items[1]: expected integer, got string`` rather than "an array that matches none of
    the allowed shapes"."""
    for error in errors:
        kind = error.kind
        if isinstance(
            kind,
            jsonschema_rs.ValidationErrorKind.AnyOf
            | jsonschema_rs.ValidationErrorKind.OneOfNotValid,
        ):
            fitting = [
                branch
                for branch in kind.context
                if not (
                    len(branch) == 1
                    and branch[0].kind.name == "type"
                    and branch[0].instance_path == error.instance_path
                )
            ]
            if len(fitting) == 1 and fitting[0]:
                yield from _explained(iter(fitting[0]))
                continue
        yield error


def _types_wanted(branches: list[list[Any]], path: list[str | int]) -> list[str]:
    """The types an ``anyOf``'s shapes take, when each failed only on the value's type
    (``int | None`` given a string); else none."""
    types: list[str] = []
    for branch in branches:
        if len(branch) != 1 or branch[0].instance_path != path:
            return []
        kind = branch[0].kind
        if not isinstance(kind, jsonschema_rs.ValidationErrorKind.Type):
            return []
        types += [t for t in kind.types if t not in types]
    return types


def _at_object(path: list[str | int]) -> str:
    return f" in {data_path(path)}" if path else ""


def to_json_data(value: Any) -> Any:
    """``value`` as plain JSON data, or :class:`NotJSONData` naming what is not.

    Pydantic models dump in JSON mode by alias (as their schemas name them), dataclass
    instances become objects, tuples become arrays; everything else must already be JSON
    data: a dict with string keys, a list, a string, a finite number, a boolean or None.
    """
    return _convert(value, [], 0)


def holds_at_most(value: Any, items: int) -> bool:
    """True when the dicts, lists and tuples in ``value`` (pydantic models' and other
    objects' attributes counted as a dict's) hold ``items`` items or fewer in all. The walk
    stops once past ``items``, so it costs little whatever ``value``'s size: it tells whether
    converting ``value`` (work in proportion to its items) is cheap. False for a value whose
    walk raises (an object that says odd things of itself): its conversion will say what.

    A subclass of dict, list or tuple is counted by what it holds, read as :func:`to_json_data`
    reads it, whatever its own ``__len__``, ``values()`` or ``__iter__`` say."""
    stack = [value]
    try:
        while stack:
            v = stack.pop()
            kind = type(v)
            if kind is dict:
                children: Any = v.values()
            elif kind is list or kind is tuple:
                children = v
            elif v is None or kind is str or kind is int or kind is float or kind is bool:
                continue
            else:
                inner = _contents(v)
                if inner is None:
                    continue
                children = dict.values(inner) if isinstance(inner, dict) else _held(inner)
            items -= len(children)
            if items < 0:
                return False
            stack.extend(children)
    except Exception:
        return False
    return True


def cycle_at(value: Any, items: int) -> list[str | int] | None:
    """The path in ``value`` of a member that is a container holding it (``["self"]`` for
    ``d["self"] = d``), looked for among the first ``items`` items of the walk
    :func:`holds_at_most` counts; None when there is none there (or the walk raises)."""
    top = _contents(value)
    if top is None:
        return None
    holding = {id(value)}  # the containers from the top down to the one walked
    path: list[str | int] = []
    stack = [(id(value), _entries(top))]
    try:
        while stack:
            owner, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                holding.discard(owner)
                if path:
                    path.pop()
                continue
            items -= 1
            if items < 0:
                return None
            key, child = entry
            if id(child) in holding:
                return [*path, key]
            inner = _contents(child)
            if inner is not None:
                holding.add(id(child))
                path.append(key)
                stack.append((id(child), _entries(inner)))
    except Exception:
        return None
    return None


def check_keys_apart(value: Any, path: list[str | int] | None = None) -> None:
    """:class:`NotJSONData` naming the first dict in ``value`` (a tool's result, pydantic
    models and dataclasses looked into; at ``path``) with keys that pydantic's JSON dump makes
    one key, ``1`` and ``"1"`` both ``"1"`` (the dump keeps the last, without a word).

    Whether any key is not text is told by orjson, which refuses one (its C walk takes about
    a hundredth of the dump's time); only then is ``value`` walked, to find which keys."""
    try:
        orjson.dumps(value, default=_opened)
        return
    except (orjson.JSONEncodeError, TypeError, RecursionError):
        pass  # a key that is not text, or something else orjson refuses: walked to tell
    made = keys_made_one(value)
    if made is not None:
        at, keys, text = made
        shown = [repr(k) for k in keys]
        raise NotJSONData(
            _where(
                [*(path or []), *at],
                f"an object with the keys {', '.join(shown[:-1])} and {shown[-1]}",
            ),
            f"; {'both' if len(keys) == 2 else 'all'} are {text!r} as JSON's keys, which are "
            "strings: return one of them",
        )


def _opened(value: Any) -> Any:
    # What orjson walks on into for a value it has no form for: a model's fields; nothing
    # of anything else (its keys, if any, are not pydantic's to make text).
    if isinstance(value, BaseModel):
        return _model_fields(value)
    return None


def _model_fields(model: BaseModel) -> dict[str, Any]:
    """What a model's dump writes, by name: its fields, its extra ones and its computed ones
    (a computed field's value is made here too: uncounted, one that held a list 40 levels
    deep, each level the one below twice, was dumped as 2**40 copies)."""
    fields = {**vars(model), **(model.__pydantic_extra__ or {})}
    for name in type(model).model_computed_fields:
        fields[name] = getattr(model, name)
    return fields


def _dataclass_fields(value: Any) -> dict[str, Any]:
    """A dataclass instance's fields, by name (read as attributes: one with slots has no
    ``__dict__``, and one that subclasses a class without slots has one that misses them)."""
    names = _field_names(cast(Hashable, type(value)))  # a type is (mypy: type[Any] is not)
    return {name: getattr(value, name) for name in names}


@functools.lru_cache(maxsize=256)
def _field_names(kind: Any) -> tuple[str, ...]:
    # dataclasses.fields builds its answer anew each time it is asked, of each object.
    return tuple(f.name for f in dataclasses.fields(kind))


def _items(d: dict[Any, Any]) -> Any:
    """A dict's items as it holds them, whatever its own ``items()`` says, in its order: an
    OrderedDict's is its own (``move_to_end``), which ``dict.items`` does not read."""
    return OrderedDict.items(d) if isinstance(d, OrderedDict) else dict.items(d)


def keys_made_one(value: Any) -> tuple[list[str | int], list[Any], str] | None:
    """The first dict in ``value`` with keys that pydantic's JSON dump makes one key (``1``
    and ``"1"``, both ``"1"``): its path (as the dump names it), the keys, and that text.
    Walked on the failure's path only (see :func:`check_keys_apart`); each container once,
    no deeper than ``MAX_DATA_DEPTH``."""
    seen: set[int] = set()
    stack: list[tuple[Any, list[str | int]]] = [(value, [])]
    try:
        while stack:
            v, path = stack.pop()
            if id(v) in seen or len(path) > MAX_DATA_DEPTH:
                continue
            entries: Any
            if isinstance(v, dict):
                seen.add(id(v))
                made = _made_one(v)
                if made is not None:
                    return path, *made
                entries = [(k if isinstance(k, str) else _key_text(k), x) for k, x in v.items()]
            elif isinstance(v, list | tuple):
                seen.add(id(v))
                entries = enumerate(v)
            elif isinstance(v, BaseModel):
                seen.add(id(v))
                fields = type(v).model_fields
                entries = [
                    (f.serialization_alias or f.alias or name, getattr(v, name))
                    for name, f in fields.items()
                ] + list((v.__pydantic_extra__ or {}).items())
            elif dataclasses.is_dataclass(v) and not isinstance(v, type):
                seen.add(id(v))
                entries = list(_dataclass_fields(v).items())
            else:
                continue
            # Reversed: the first entry is walked first, as the dump meets it.
            stack.extend((x, [*path, k]) for k, x in reversed(list(entries)))
    except Exception:
        return None  # a value that says odd things of itself: the dump's own checks stand
    return None


def _made_one(d: dict[Any, Any]) -> tuple[list[Any], str] | None:
    # The keys of `d` that are one text as JSON data, with that text.
    if all(isinstance(k, str) for k in d):
        return None
    texts: dict[str, list[Any]] = {}
    for k in d:
        texts.setdefault(str.__str__(k) if isinstance(k, str) else _key_text(k), []).append(k)
    for text, keys in texts.items():
        if len(keys) > 1:
            return keys, text
    return None


def _key_text(key: Any) -> str:
    """A key as pydantic's JSON dump makes it text (1 -> "1", a date -> its ISO text)."""
    made = to_jsonable_python({key: None})
    return str(next(iter(made))) if isinstance(made, dict) and made else repr(key)


def _contents(value: Any) -> dict[Any, Any] | list[Any] | tuple[Any, ...] | None:
    """What ``value`` holds as :func:`holds_at_most` counts it: a dict, a list or a tuple
    (an object's attributes as its dict: a dataclass's fields, a pydantic model's extra and
    computed ones too), or None for a value that holds nothing."""
    if _posing(value):
        return None
    if isinstance(value, dict | list | tuple):
        return value
    if isinstance(value, BaseModel):
        return _model_fields(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _dataclass_fields(value)
    if hasattr(value, "__dict__") and not isinstance(value, type):
        attributes = vars(value)
        return attributes if isinstance(attributes, dict) else None
    return None


def _posing(value: Any) -> bool:
    """Whether ``value``'s ``__class__`` says another type than its own: isinstance reads
    it, so an object whose ``__class__`` says dict passed for one, and its conversion failed
    with Python's own error ("descriptor 'items' for 'dict' objects doesn't apply to a
    'Posing' object"), read as the handler's."""
    return getattr(value, "__class__", None) is not type(value)


def _entries(inner: dict[Any, Any] | list[Any] | tuple[Any, ...]) -> Iterator[tuple[Any, Any]]:
    # Each member with its key in a path: a dict's key as text, a sequence's index.
    if isinstance(inner, dict):
        return ((k if isinstance(k, str | int) else str(k), v) for k, v in _items(inner))
    return enumerate(_held(inner))


def _held(sequence: list[Any] | tuple[Any, ...]) -> list[Any] | tuple[Any, ...]:
    """What a list or tuple holds, a subclass's too, whatever its ``__len__`` and
    ``__iter__`` say: a subclass whose ``__len__`` said 0 was counted as empty, then its
    conversion copied each object as often as it stands (a DAG 40 deep: 2**40 copies), which
    held the event loop, or a tool thread and the host's memory, for ever."""
    kind = type(sequence)
    if kind is list or kind is tuple:
        return sequence
    if isinstance(sequence, list):
        return list.copy(sequence)
    return tuple.__getitem__(sequence, slice(None))


def _convert(value: Any, path: list[str | int], depth: int) -> Any:
    # A container at ``depth`` is level depth + 1: one at MAX_DATA_DEPTH that held nothing
    # (129 lists, the last empty) passed here, and the sandbox refused every run its record.
    if depth > MAX_DATA_DEPTH or (
        depth == MAX_DATA_DEPTH and isinstance(value, dict | list | tuple)
    ):
        raise NotJSONData(
            _where(path, f"a value nested deeper than {MAX_DATA_DEPTH} levels"),
            "; is there a cycle?",
        )
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is str:
        return value
    # Plain containers first, with their plain scalar items taken inline (the rules below, in
    # short): most results hold nothing else, and this walk costs in proportion to a result's
    # size (300,000 small objects: 5.2 s the long way, 1.6 s so).
    if kind is dict:
        result: dict[str, Any] = {}
        for key, item in value.items():
            t = type(item)
            if type(key) is str and (
                item is None
                or t is str
                or t is int
                or t is bool
                or (t is float and math.isfinite(item))
            ):
                result[key] = item
            elif not isinstance(key, str):
                raise NotJSONData(
                    _where(path, f"an object with the {type(key).__name__} key {key!r}")
                )
            else:
                if type(key) is not str:  # a StrEnum's member: its text, as such a value
                    key = str.__str__(key)  # (JSON's encoder refuses an enum key)
                result[key] = _convert(item, [*path, key], depth + 1)
        return result
    if kind is list:
        items: list[Any] = []
        for i, item in enumerate(value):
            t = type(item)
            if (
                item is None
                or t is str
                or t is int
                or t is bool
                or (t is float and math.isfinite(item))
            ):
                items.append(item)
            else:
                items.append(_convert(item, [*path, i], depth + 1))
        return items
    if _posing(value):
        raise NotJSONData(_where(path, with_article(kind.__name__)), _hint(value))
    if isinstance(value, enum.Enum):
        # A member is its value, at its own level (as a model's dump and a dataclass's fields
        # are below): one level more refused a member at the deepest level whose plain value
        # is taken. A member whose value is a member again, or itself, is followed so far.
        for _ in range(MAX_DATA_DEPTH):
            value = value.value
            if not isinstance(value, enum.Enum):
                return _convert(value, path, depth)
        raise NotJSONData(
            _where(path, f"an enum member whose value is a member {MAX_DATA_DEPTH} levels deep"),
            "; is there a cycle?",
        )
    # Subclasses of the JSON scalars (an IntFlag, a str subclass) become the plain type, so
    # what is recorded is plain data.
    if isinstance(value, bool | int):
        return int(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJSONData(
                _where(path, f"the number {value}"),
                "; JSON has no NaN or infinity",
                javascript=_where(path, f"the number {_JAVASCRIPT_NUMBERS[repr(value)]}"),
            )
        return float(value)
    if isinstance(value, BaseModel):
        try:
            if _model_keys_made_text(type(value)):
                check_keys_apart(value, path)  # {1: "a", "1": "b"} would dump as {"1": "b"}
            dumped = _model_adapter(type(value)).dump_python(value, mode="json", by_alias=True)
        except (PydanticSerializationError, PydanticUserError, ValueError, TypeError) as e:
            # A field of a type pydantic cannot dump (an arbitrary type, a failing serializer),
            # or a model whose types are not all defined (pydantic's text says what to do).
            fix = "" if isinstance(e, PydanticUserError) else "; give its fields JSON types"
            raise NotJSONData(
                _where(path, f"{with_article(type(value).__name__)} that pydantic cannot dump"),
                f" ({_first_line(str(e))[:200]}){fix}",
            ) from None
        return _convert(dumped, path, depth)  # plain data, so this ends
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _convert(_dataclass_fields(value), path, depth)  # a dict: its fields go deeper
    if isinstance(value, dict):
        result = {}
        for key, item in _items(value):  # its own items() may say anything
            if not isinstance(key, str):
                raise NotJSONData(
                    _where(path, f"an object with the {type(key).__name__} key {key!r}")
                )
            if type(key) is not str:
                key = str.__str__(key)
            result[key] = _convert(item, [*path, key], depth + 1)
        return result
    if isinstance(value, list | tuple):
        return [_convert(item, [*path, i], depth + 1) for i, item in enumerate(_held(value))]
    raise NotJSONData(_where(path, with_article(type(value).__name__)), _hint(value))


# Python's text of a number JSON has not, and JavaScript's: a JavaScript script was told a
# tool "returned the number nan", which no JavaScript writes.
_JAVASCRIPT_NUMBERS = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _where(path: list[str | int], what: str) -> str:
    return f"{what} at {data_path(path)}" if path else what


_HINTS: dict[str, Callable[[Any], str]] = {
    "datetime": lambda v: "; return an ISO string, as value.isoformat()",
    "date": lambda v: "; return an ISO string, as value.isoformat()",
    "set": lambda v: "; return a list",
    "frozenset": lambda v: "; return a list",
    "bytes": lambda v: "; return text, or base64 of the bytes",
    "Decimal": lambda v: "; return a float or a string",
}


def _hint(value: Any) -> str:
    hint = _HINTS.get(type(value).__name__)
    return hint(value) if hint else ""


def json_adapter(annotation: Any) -> TypeAdapter[Any]:
    """A pydantic adapter that dumps ``annotation``'s values as JSON data with NaN and
    infinity kept as numbers, so the checks of what a tool returns refuse them (pydantic's
    default writes null: a script read null for a number, without a word). A model's
    fields typed ``Any`` (or a bare ``dict``) still follow the model's own config."""
    try:
        return TypeAdapter(annotation, config=ConfigDict(ser_json_inf_nan="constants"))
    except PydanticUserError:  # a type whose config may not be given so
        return TypeAdapter(annotation)


@functools.lru_cache(maxsize=256)
def _model_adapter(model: type[BaseModel]) -> TypeAdapter[Any]:
    return json_adapter(model)


@functools.lru_cache(maxsize=256)
def _model_keys_made_text(model: type[BaseModel]) -> bool:
    return keys_made_text(_model_adapter(model).core_schema)
