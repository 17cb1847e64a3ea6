"""Keys of a tool's arguments that pydantic would make one: a ``dict[int, str]`` parameter
given the JSON keys ``"1"``, ``"01"`` and ``"1.0"`` validates to ``{1: ...}`` holding the last
value alone, without a word. :func:`key_check` finds, once, where a tool's parameters hold
dicts whose keys validate into something other than the text sent; the check it returns walks
only those places of a call's arguments, and tools with none of them get no check at all.
:func:`keys_made_text` tells, once, whether a tool's results go through a dump that may make
keys that are not text into text (``{1: "a", "1": "b"}`` dumped as ``{"1": "b"}``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from pydantic_core import CoreConfig, SchemaValidator, ValidationError

# (arguments at this place, their path from the top) -> a message, or None: keys stay apart.
Check = Callable[[Any, list[str | int]], str | None]

# Schemas that hold the one schema their value is checked by first.
_WRAPPERS = ("nullable", "default", "function-after", "function-before", "function-wrap")
_ITEMS = ("list", "set", "frozenset", "generator", "deque")


def key_check(schema: Mapping[str, Any]) -> Check | None:
    """The check of the arguments a pydantic core ``schema`` (an arguments model's) validates,
    or None when no dict in it has keys that validate into other than the text sent."""
    definitions = _definitions(schema)
    if not _reaches(schema, _keys_validated, None, definitions, set()):
        return None  # most tools: no check is made at their calls
    # A schema that holds itself (a model with a list of itself) meets its own check before
    # it is made: first taken to have none, then, if it turns out to have one, made again
    # with a stand-in that calls it.
    checked: set[str] = set()
    while True:
        compiler = _Compiler(definitions, checked)
        check = compiler.compile(schema, None)
        wrong = {ref for ref in compiler.assumed if compiler.done.get(ref) is not None}
        if wrong <= checked:
            return check
        checked |= wrong


def keys_made_text(schema: Mapping[str, Any]) -> bool:
    """Whether pydantic, dumping a value as a core ``schema`` (a return annotation's) has it
    in JSON mode, may make a key that is not text into text: a dict whose keys are not text,
    a value of any type (whose dicts' keys pydantic infers), or a serializer of the type's own
    (whose value it infers)."""
    return _reaches(schema, _keys_inferred, None, _definitions(schema), set())


def _definitions(schema: Mapping[str, Any]) -> dict[str, Any]:
    if schema.get("type") == "definitions":
        return {d["ref"]: d for d in schema["definitions"]}
    return {}


def _keys_validated(schema: Mapping[str, Any], config: CoreConfig | None) -> bool:
    # A dict whose keys pydantic validates into other than the text sent.
    return schema.get("type") == "dict" and not _as_sent(
        schema.get("keys_schema", {"type": "any"}), config
    )


def _keys_inferred(schema: Mapping[str, Any], config: CoreConfig | None) -> bool:
    # A place whose dumped keys may be made text (see keys_made_text).
    serialization = schema.get("serialization")
    if isinstance(serialization, dict) and serialization.get("type") != "format":
        return True
    if schema.get("type") == "any":
        return True
    keys = schema.get("keys_schema", {"type": "any"})
    return schema.get("type") == "dict" and keys.get("type") != "str"


def _reaches(
    schema: Any,
    hit: Callable[[Mapping[str, Any], CoreConfig | None], bool],
    config: CoreConfig | None,
    definitions: dict[str, Any],
    seen: set[str],
) -> bool:
    """Whether ``schema`` holds, or refers to one that holds, a schema that ``hit`` takes (a
    model that holds itself through a list of itself is looked through once)."""
    if isinstance(schema, list):
        return any(_reaches(item, hit, config, definitions, seen) for item in schema)
    if not isinstance(schema, dict):
        return False
    config = schema.get("config", config)
    if hit(schema, config):
        return True
    ref = schema.get("schema_ref") if schema.get("type") == "definition-ref" else None
    if isinstance(ref, str):
        if ref in seen:
            return False
        seen.add(ref)
        return _reaches(definitions.get(ref), hit, config, definitions, seen)
    return any(
        _reaches(value, hit, config, definitions, seen)
        for key, value in schema.items()
        if key not in ("metadata", "serialization")
    )


class _Compiler:
    def __init__(self, definitions: dict[str, Any], checked: set[str]) -> None:
        self.definitions = definitions
        self.checked = checked  # the schemas that hold themselves and have a check
        self.done: dict[str, Check | None] = {}  # a referred schema's check, made once
        self.compiling: dict[str, list[Check | None]] = {}
        self.assumed: set[str] = set()  # those met while made, taken to have no check

    def compile(self, schema: Mapping[str, Any], config: CoreConfig | None) -> Check | None:
        kind = schema.get("type")
        config = schema.get("config", config)
        if kind == "definitions":
            return self.compile(schema["schema"], config)
        if kind == "definition-ref":
            return self.referred(schema["schema_ref"], config)
        if "ref" in schema:
            return self.referred(schema["ref"], config, schema)
        return self.compile_here(schema, config)

    def referred(
        self, ref: str, config: CoreConfig | None, schema: Mapping[str, Any] | None = None
    ) -> Check | None:
        if ref in self.done:
            return self.done[ref]
        if ref in self.compiling:
            if ref not in self.checked:
                self.assumed.add(ref)
                return None
            pending = self.compiling[ref]
            return lambda value, path: pending[0](value, path) if pending[0] else None
        cell: list[Check | None] = [None]
        self.compiling[ref] = cell
        target = schema if schema is not None else self.definitions.get(ref)
        if target is not None:
            cell[0] = self.compile_here(target, target.get("config", config))
        del self.compiling[ref]
        self.done[ref] = cell[0]
        return cell[0]

    def compile_here(self, schema: Mapping[str, Any], config: CoreConfig | None) -> Check | None:
        kind = schema.get("type")
        if kind in _WRAPPERS or kind in ("model", "dataclass"):
            return self.compile(schema["schema"], config) if "schema" in schema else None
        if kind == "json-or-python":
            return self.compile(schema["python_schema"], config)
        if kind == "lax-or-strict":
            return self.compile(schema["lax_schema"], config)
        if kind == "chain":
            return self.compile(schema["steps"][0], config)
        if kind == "tagged-union" and isinstance(schema.get("discriminator"), str):
            # The tag names the one branch pydantic takes.
            by_tag = {tag: self.compile(b, config) for tag, b in schema["choices"].items()}
            return _tagged(schema["discriminator"], by_tag) if any(by_tag.values()) else None
        if kind in ("union", "tagged-union"):
            choices = schema["choices"]
            branches = [
                b[0] if isinstance(b, tuple) else b
                for b in (choices.values() if isinstance(choices, dict) else choices)
            ]
            compiled = [(self.compile(b, config), b) for b in branches]
            if any(c is None and _takes_objects(b) for c, b in compiled):
                # pydantic may pick the branch that keeps the keys apart (a dict[str, str]
                # beside a dict[int, str]): keys made one by another are no sure thing.
                return None
            checks = [c for c, _ in compiled if c is not None]
            return _first(checks) if checks else None
        if kind in _ITEMS:
            inner = (
                self.compile(schema["items_schema"], config) if "items_schema" in schema else None
            )
            return None if inner is None else _items(inner)
        if kind == "tuple":
            positions = [self.compile(s, config) for s in schema.get("items_schema", [])]
            if not any(positions):
                return None
            return _tuple(positions, schema.get("variadic_item_index"))
        if kind == "dict":
            keys = schema.get("keys_schema", {"type": "any"})
            values = schema.get("values_schema")
            value_check = self.compile(values, config) if values is not None else None
            validator = None if _as_sent(keys, config) else self.validator(keys, config)
            if validator is None and value_check is None:
                return None
            return _dict(validator, value_check)
        if kind in ("model-fields", "typed-dict"):
            fields = schema["fields"].items()
            named = [
                (_input_names(name, f), self.compile(f["schema"], config)) for name, f in fields
            ]
            return _fields(named)
        if kind == "dataclass-args":
            named = [
                (_input_names(f["name"], f), self.compile(f["schema"], config))
                for f in schema["fields"]
            ]
            return _fields(named)
        return None

    def validator(self, keys: Mapping[str, Any], config: CoreConfig | None) -> SchemaValidator:
        # With the definitions a key's type may refer to, and the config of the model that
        # holds it (a strict model's keys are checked strictly, as pydantic checks them).
        schema: Any = keys
        if self.definitions:
            schema = {
                "type": "definitions",
                "schema": keys,
                "definitions": list(self.definitions.values()),
            }
        return SchemaValidator(schema, config)


def _as_sent(keys: Mapping[str, Any], config: CoreConfig | None) -> bool:
    """Whether keys of this schema stay the text sent: any key, or text with no change made
    to it (a str's to_lower or strip_whitespace, its model's, a validator's function, may
    make two one)."""
    plain = {k: v for k, v in keys.items() if k not in ("metadata", "ref", "serialization")}
    if plain == {"type": "any"}:
        return True
    changed = config is not None and any(
        config.get(k) for k in ("str_to_lower", "str_to_upper", "str_strip_whitespace")
    )
    return plain == {"type": "str"} and not changed


# Schemas of values that are never a JSON object: a union's branch of one of these cannot be
# the one pydantic picks for an object.
_NO_OBJECTS = frozenset(
    {
        "none",
        "bool",
        "int",
        "float",
        "decimal",
        "str",
        "bytes",
        "date",
        "time",
        "datetime",
        "timedelta",
        "literal",
        "enum",
        "uuid",
        "url",
        "multi-host-url",
        "complex",
        *_ITEMS,
        "tuple",
    }
)


def _takes_objects(schema: Mapping[str, Any]) -> bool:
    if schema.get("type") in _WRAPPERS and "schema" in schema:
        return _takes_objects(schema["schema"])
    return schema.get("type") not in _NO_OBJECTS


def _input_names(name: str, field: Mapping[str, Any]) -> tuple[str, ...]:
    """The keys a field may be given by: its alias (or each of its choices of one key), and
    its own name."""
    alias = field.get("validation_alias")
    names: list[str] = []
    if isinstance(alias, str):
        names.append(alias)
    elif isinstance(alias, list):
        for choice in alias:
            if isinstance(choice, list) and len(choice) == 1 and isinstance(choice[0], str):
                names.append(choice[0])
    if name not in names:
        names.append(name)
    return tuple(names)


def _first(checks: list[Check]) -> Check:
    # A union's branches: the first that finds keys made one says so.
    if len(checks) == 1:
        return checks[0]

    def check(value: Any, path: list[str | int]) -> str | None:
        for c in checks:
            found = c(value, path)
            if found is not None:
                return found
        return None

    return check


def _tagged(field: str, by_tag: dict[Any, Check | None]) -> Check:
    def check(value: Any, path: list[str | int]) -> str | None:
        if not isinstance(value, dict):
            return None
        try:
            branch = by_tag.get(value.get(field))
        except TypeError:  # a tag that is no key (a list): pydantic refuses it
            return None
        return branch(value, path) if branch is not None else None

    return check


def _items(inner: Check) -> Check:
    def check(value: Any, path: list[str | int]) -> str | None:
        if isinstance(value, list):
            for i, item in enumerate(value):
                found = inner(item, [*path, i])
                if found is not None:
                    return found
        return None

    return check


def _tuple(positions: list[Check | None], variadic: int | None) -> Check:
    # pydantic's tuple: a schema for each position, of which the one at `variadic` (if any)
    # takes as many items as there are beyond the others.
    def check(value: Any, path: list[str | int]) -> str | None:
        if not isinstance(value, list):
            return None
        after = 0 if variadic is None else len(positions) - variadic - 1
        for i, item in enumerate(value):
            if variadic is None or i < variadic:
                at = i
            elif i >= len(value) - after:
                at = len(positions) - (len(value) - i)
            else:
                at = variadic
            c = positions[at] if 0 <= at < len(positions) else None
            found = c(item, [*path, i]) if c is not None else None
            if found is not None:
                return found
        return None

    return check


def _fields(named: list[tuple[tuple[str, ...], Check | None]]) -> Check | None:
    checked = [(names, c) for names, c in named if c is not None]
    if not checked:
        return None

    def check(value: Any, path: list[str | int]) -> str | None:
        if isinstance(value, dict):
            for names, c in checked:
                for name in names:
                    if name in value:
                        found = c(value[name], [*path, name])
                        if found is not None:
                            return found
        return None

    return check


def _dict(validator: SchemaValidator | None, values: Check | None) -> Check:
    def check(value: Any, path: list[str | int]) -> str | None:
        if not isinstance(value, dict):
            return None
        if validator is not None and len(value) > 1:
            found = _made_one(validator, value, path)
            if found is not None:
                return found
        if values is not None:
            for key, item in value.items():
                found = values(item, [*path, key])
                if found is not None:
                    return found
        return None

    return check


def _made_one(
    validator: SchemaValidator, value: dict[str, Any], path: list[str | int]
) -> str | None:
    """The message for the first keys of ``value`` that ``validator`` makes one key, if any."""
    sent: dict[Any, list[str]] = {}
    for key in value:
        try:
            made = validator.validate_python(key)
        except (ValidationError, TypeError):
            continue  # pydantic's own validation says what is wrong with it
        try:
            sent.setdefault(made, []).append(key)
        except TypeError:  # an unhashable key pydantic would refuse too
            continue
    for made, keys in sent.items():
        if len(keys) > 1:
            shown = [json.dumps(k, ensure_ascii=False) for k in keys[:5]]
            more = f" and {len(keys) - 5:,} more" if len(keys) > 5 else ""
            listed = (
                f"{', '.join(shown)}{more}" if more else f"{', '.join(shown[:-1])} and {shown[-1]}"
            )
            return (
                f"{_where(path)}the keys {listed} are {'both' if len(keys) == 2 else 'all'} the "
                f"key {_shown(made)} to the tool; send one of them"
            )
    return None


def _where(path: list[str | int]) -> str:
    return f"at {'.'.join(str(p) for p in path)}: " if path else ""


def _shown(key: Any) -> str:
    """A key as the tool takes it: a number as Python writes it, text and true as JSON does."""
    if isinstance(key, str):
        return json.dumps(str(key), ensure_ascii=False)
    if isinstance(key, bool) or key is None:
        return json.dumps(key)
    return repr(key) if type(key) in (int, float) else str(key)
