"""Tools: schemas derived from typed functions, MCP definitions, checks at build and call time."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import datetime
import enum
import itertools
import json
import logging
import math
import re
import sys
import threading
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, Literal

import orjson
import pytest
from pydantic import BaseModel, Field, computed_field, field_serializer

from engine import CodeMode, Limits
from engine import _tools as engine_tools
from engine._functions import _Arguments, parse_docstring, tool
from engine._naming import sanitize_name, unique_names
from engine._schema import (
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_DEPTH,
    NotJSONData,
    holds_at_most,
    to_json_data,
)
from engine._tools import (
    INLINE_RESULT_ITEMS,
    Tool,
    ToolCallError,
    ToolContext,
    ToolDefinitionError,
    load_mcp_tools,
    unique_tools,
)
from runner._conversation import STALLED_S
from sandbox import protocol
from sandbox.names import closest_names, split_words, stem
from tests.engine.conftest import InProcessRunner

CTX: ToolContext[dict[str, str]] = ToolContext(
    host={"user": "ada"}, tenant="acme", script_id="s1", call_id="c1", call_index=0
)


def call(t: Tool, arguments: Any, ctx: ToolContext[Any] = CTX) -> Any:
    return asyncio.run(t.invoke(arguments, ctx))


def call_error(t: Tool, arguments: Any) -> str:
    with pytest.raises(ToolCallError) as info:
        call(t, arguments)
    assert info.value.tool == t.name
    return str(info.value)


# What the script reads of a result that is not JSON data, after what was returned: only its
# author can fix it, and the host's log tells them how (warned).
NOT_PASSED_ON = (
    ", which is not JSON data, so its result could not be passed on: a defect of the tool on "
    "the host's side, not of the script"
)
# The same, after a result's other defects (a cycle, one that breaks its output schema).
PASSED_ON_NOT = NOT_PASSED_ON.removeprefix(", which is not JSON data")


def warned(caplog: pytest.LogCaptureFixture) -> str:
    """The host's last warning: what a tool's author reads."""
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert said, "no warning in the host's log"
    return said[-1]


def test_an_optional_parameters_error_is_the_one_of_the_shape_its_value_takes() -> None:
    """Every ``x: T | None`` is an ``anyOf``: a list given for ``list[int] | None`` is wrong
    where the list is wrong, not "an array that matches none of the allowed shapes"."""

    @tool
    def typed(items: list[int] | None = None, limit: int | None = None, name: str = "") -> str:
        """Take typed arguments."""
        return "ok"

    assert call_error(typed, {"items": [1, "two"]}) == (
        "tools.typed: invalid arguments: at items[1]: expected integer, got string"
    )
    assert call_error(typed, {"items": "1,2", "limit": "5"}) == (
        "tools.typed: invalid arguments: at items: expected array or null, got string; "
        "at limit: expected integer or null, got string"
    )
    either = Tool(
        name="either",
        description="Take either.",
        input_schema={
            "type": "object",
            "properties": {
                "v": {"anyOf": [{"type": "string", "minLength": 3}, {"type": "integer"}]},
                "w": {"oneOf": [{"type": "integer"}, {"type": "number"}]},
            },
        },
        handler=lambda **kw: kw,
    )
    assert call_error(either, {"v": "ab"}) == (
        "tools.either: invalid arguments: at v: expected at least 3 characters"
    )
    assert call_error(either, {"v": [1]}) == (
        "tools.either: invalid arguments: at v: expected string or integer, got array"
    )
    assert call_error(either, {"w": 1}) == (
        "tools.either: invalid arguments: at w: an integer that matches more than one of the "
        "allowed shapes"
    )


# --- models used by the typed tools below (module level, so annotations resolve) -----------


class Address(BaseModel):
    street: str
    city: str = "Oslo"


class User(BaseModel):
    id: int
    name: str
    joined: datetime.date


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Status(enum.StrEnum):
    OPEN = "open"


@dataclasses.dataclass
class Point:
    x: float
    y: float


class Aliased(BaseModel):
    """A model whose JSON name differs from its field name."""

    the_name: str = Field(alias="theName")


class _Opaque(BaseModel):
    """A model holding a value pydantic cannot dump as JSON."""

    model_config = {"arbitrary_types_allowed": True}
    thing: object


# --- @tool: schema derivation ---------------------------------------------------------------


def test_tool_derives_name_description_and_typed_schema() -> None:
    """Types, defaults, Optional, Literal, lists and dicts map to the JSON Schema pydantic
    writes; required are the parameters without defaults; no titles; extra arguments refused."""

    @tool
    def find_orders(
        customer: str,
        limit: int = 10,
        ratio: float | None = None,
        status: Literal["open", "shipped"] = "open",
        tags: list[str] | None = None,
        counts: dict[str, int] | None = None,
        urgent: bool = False,
    ) -> list[int]:
        """Find a customer's orders.

        Newest first.
        """
        return []

    assert find_orders.name == "find_orders"
    assert find_orders.description == "Find a customer's orders.\n\nNewest first."
    assert find_orders.summary == "Find a customer's orders."
    schema = find_orders.input_schema
    assert schema["type"] == "object"
    assert schema["required"] == ["customer"]
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    assert props["customer"] == {"type": "string"}
    assert props["limit"] == {"type": "integer", "default": 10}
    assert props["ratio"] == {"anyOf": [{"type": "number"}, {"type": "null"}], "default": None}
    assert props["status"] == {"type": "string", "enum": ["open", "shipped"], "default": "open"}
    assert props["tags"]["anyOf"][0] == {"type": "array", "items": {"type": "string"}}
    assert props["counts"]["anyOf"][0] == {
        "type": "object",
        "additionalProperties": {"type": "integer"},
    }
    assert "title" not in json.dumps(schema)
    assert find_orders.output_schema == {"type": "array", "items": {"type": "integer"}}


def test_tool_descriptions_from_annotated_and_google_docstring() -> None:
    """`Annotated[..., Field(description=...)]` describes a parameter and wins over the
    docstring's Args entry; Args entries describe the rest and leave the description."""

    @tool
    def get_weather(
        city: Annotated[str, Field(description="City name, e.g. Oslo.")],
        units: Literal["metric", "imperial"] = "metric",
        days: int = 1,
    ) -> None:
        """Get the weather.

        Args:
            city: Ignored, the annotation says it.
            units: Unit system.
            days (int): How many days
                of forecast.

        Returns:
            Nothing.
        """

    props = get_weather.input_schema["properties"]
    assert props["city"]["description"] == "City name, e.g. Oslo."
    assert props["units"]["description"] == "Unit system."
    assert props["days"]["description"] == "How many days of forecast."
    assert get_weather.description == "Get the weather.\n\nReturns:\n    Nothing."
    assert get_weather.output_schema == {"type": "null"}


def test_numpy_docstring_parameters() -> None:
    """A NumPy-style Parameters section is parsed and taken out of the description."""
    description, params = parse_docstring(
        """Sum two numbers.

        Parameters
        ----------
        a : int
            The first.
        b : int
            The second,
            on two lines.

        Returns
        -------
        int
        """
    )
    assert params == {"a": "The first.", "b": "The second, on two lines."}
    assert description.startswith("Sum two numbers.")
    assert "Returns" in description and "The first" not in description


def test_nested_models_become_defs_and_arrive_as_instances() -> None:
    """A pydantic model parameter is a `$ref` into `$defs`; at call time the handler gets a
    model instance, and a date string becomes a `date`."""
    seen: dict[str, Any] = {}

    @tool
    def ship(to: Address, on: datetime.date, points: list[Point]) -> dict[str, str]:
        """Ship a parcel."""
        seen.update(to=to, on=on, points=points)
        return {"city": to.city}

    schema = ship.input_schema
    assert schema["properties"]["to"] == {"$ref": "#/$defs/Address"}
    assert set(schema["$defs"]) == {"Address", "Point"}
    assert schema["properties"]["on"] == {"type": "string", "format": "date"}
    result = call(
        ship, {"to": {"street": "Main 1"}, "on": "2025-01-31", "points": [{"x": 1, "y": 2}]}
    )
    assert result == {"city": "Oslo"}
    assert isinstance(seen["to"], Address)
    assert seen["on"] == datetime.date(2025, 1, 31)
    assert seen["points"] == [Point(1.0, 2.0)]


def test_context_parameter_is_left_out_and_filled_by_the_host() -> None:
    """A parameter annotated ToolContext[...] is not in the schema; the host's context is
    passed to it; the model cannot send it (extra properties are refused)."""

    @tool
    async def whoami(ctx: ToolContext[dict[str, str]], greeting: str = "hi") -> str:
        """Say who is asking."""
        return f"{greeting} {ctx.host['user']} ({ctx.tenant}, call {ctx.call_index})"

    assert set(whoami.input_schema["properties"]) == {"greeting"}
    assert call(whoami, {}) == "hi ada (acme, call 0)"
    assert "unexpected property" in call_error(whoami, {"ctx": {"host": "evil"}})


def test_context_parameter_of_a_plain_handler() -> None:
    """A handler given to Tool(...) directly gets the context under its annotated parameter."""

    def handler(city: str, context: ToolContext[Any]) -> str:
        return f"{city}:{context.call_id}"

    t = Tool(
        "weather",
        input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
        handler=handler,
    )
    assert call(t, {"city": "Oslo"}) == "Oslo:c1"


def test_context_inside_another_type_is_refused() -> None:
    """The context must be a parameter of its own, or the model would be asked for it."""

    def bad(items: list[ToolContext[Any]]) -> None: ...

    with pytest.raises(ToolDefinitionError, match="parameter of its own"):
        tool(bad)

    def two(a: ToolContext[Any], b: ToolContext[Any]) -> None: ...

    with pytest.raises(ToolDefinitionError, match="two ToolContext"):
        tool(two)


def test_context_parameter_named_like_an_input_property_is_refused() -> None:
    """The handler's context parameter would clash with the argument of the same name."""

    def handler(ctx: ToolContext[Any], **kwargs: Any) -> None: ...

    with pytest.raises(ToolDefinitionError, match="context parameter 'ctx'"):
        Tool(
            "t",
            input_schema={"type": "object", "properties": {"ctx": {"type": "string"}}},
            handler=handler,
        )


def test_parameter_names_that_shadow_pydantic_are_fine() -> None:
    """Parameters called `json`, `schema` or `model_config` do not clash with pydantic."""

    @tool
    def odd(json: str, schema: int, model_config: bool = False) -> str:
        """Odd names."""
        return f"{json}{schema}{model_config}"

    assert set(odd.input_schema["properties"]) == {"json", "schema", "model_config"}
    assert call(odd, {"json": "a", "schema": 1}) == "a1False"


def test_return_annotation_any_or_missing_has_no_output_schema() -> None:
    """No output schema when the return annotation is missing or Any."""

    @tool
    def a(x: int):
        """A."""
        return x

    @tool
    def b(x: int) -> Any:
        """B."""
        return x

    assert a.output_schema is None and b.output_schema is None


def test_decorator_options() -> None:
    """@tool(...) sets name, description and flags."""

    @tool(
        name="wire-money", description="Send money.", needs_approval=True, deferred=True, timeout=5
    )
    def send(amount: int) -> None:
        """Ignored."""

    assert send.name == "wire_money" and send.original_name == "wire-money"
    assert send.description == "Send money."
    assert send.needs_approval and send.deferred and send.timeout == 5.0
    assert not send.client


class _Lookup:
    """A tool as a callable object, holding what it needs."""

    def __init__(self) -> None:
        self.table = {3: "three"}

    def __call__(self, key: int, ctx: ToolContext[Any]) -> str:
        """Look a key up.

        Args:
            key: what to look up
        """
        return f"{self.table[key]} for {ctx.tenant}"


@pytest.mark.parametrize("name", ["", "  ", 3])
def test_a_given_name_that_is_no_name_is_refused(name: object) -> None:
    """name="" was taken as no name given: the tool was quietly named after the function."""

    def lookup(key: int) -> str:
        """Look a key up."""
        return str(key)

    with pytest.raises(ToolDefinitionError, match=r"^@tool: name is a non-empty string"):
        tool(name=name)(lookup)  # type: ignore[arg-type]


def test_callable_objects_are_tools_and_partials_are_refused() -> None:
    """A callable object is typed by its __call__ (it was refused as "annotations cannot be
    resolved ... define the types at module level"), under the name given. A
    functools.partial is refused, saying why: what it binds stays in its signature as
    parameters with defaults, which the model would be declared and could override."""
    import functools

    lookup = tool(name="lookup")(_Lookup())
    assert lookup.description == "Look a key up."
    assert lookup.input_schema["properties"] == {
        "key": {"type": "integer", "description": "what to look up"}
    }
    assert call(lookup, {"key": 3}) == "three for acme"
    with pytest.raises(ToolDefinitionError, match=r"has no name; give one, as tool\(name="):
        tool(_Lookup())

    def transfer(amount: int, account: str) -> str:
        """Transfer."""
        return account

    # Named by the function it binds (it has no name of its own: "tool ''").
    with pytest.raises(ToolDefinitionError, match=r"^tool 'transfer': a functools\.partial is not"):
        tool(functools.partial(transfer, account="ada"))


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def f(x): ...", "has no type annotation"),
        ("def f(*args: int): ...", "takes *args"),
        ("def f(**kw: int): ...", "takes **kw"),
        ("def f(x: int, /): ...", "positional-only"),
        ("class Opaque: ...\ndef f(x: Opaque): ...", "no JSON Schema"),
        ("class Opaque: ...\ndef f(x: int) -> Opaque: ...", "return annotation"),
        # @tool on a method in its class body: annotating self is no fix.
        ("def f(self, x: int) -> int: ...", "make the tool of the bound method instead"),
    ],
)
def test_functions_that_cannot_be_tools_are_refused(source: str, message: str) -> None:
    """Each refusal names the tool, the problem and the fix."""
    namespace: dict[str, Any] = {}
    exec(source, namespace)
    with pytest.raises(ToolDefinitionError, match=re.escape(message)) as info:
        tool(namespace["f"])
    assert "'f'" in str(info.value)


@pytest.mark.parametrize("source", ["def f(x: Opaque) -> int: ...", "def f(x: int) -> Opaque: ..."])
def test_a_type_with_no_schema_is_named_with_pydantics_reason(source: str) -> None:
    """A return annotation's refusal said only "(PydanticSchemaGenerationError)" (a
    typing.TypedDict's too, where pydantic says to use typing_extensions'); both say
    pydantic's first sentence, not its advice on settings that are not the tool's."""
    namespace: dict[str, Any] = {}
    exec(f"class Opaque: ...\n{source}", namespace)
    with pytest.raises(ToolDefinitionError) as info:
        tool(namespace["f"])
    said = str(info.value)
    assert "(PydanticSchemaGenerationError: Unable to generate pydantic-core schema for" in said
    assert "arbitrary_types_allowed" not in said


# --- invoke ---------------------------------------------------------------------------------


def test_sync_handler_runs_in_a_worker_thread_and_async_in_the_loop() -> None:
    """A sync handler must not block the event loop; an async one runs on it."""
    main = threading.get_ident()

    @tool
    def sync_tool() -> int:
        """Sync."""
        return threading.get_ident()

    @tool
    async def async_tool() -> int:
        """Async."""
        return threading.get_ident()

    assert call(sync_tool, {}) != main
    assert call(async_tool, {}) == main


def test_invalid_arguments_name_the_path_and_what_was_expected() -> None:
    """The message names the tool, the failing path and the expectation, concisely."""
    t = Tool(
        "create_order",
        input_schema={
            "type": "object",
            "properties": {
                "customer": {"type": "string"},
                "items": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                        "required": ["sku"],
                    },
                },
                "mode": {"enum": ["fast", "slow"]},
            },
            "required": ["customer"],
            "additionalProperties": False,
        },
        handler=lambda **kw: kw,
    )
    message = call_error(t, {"customer": "c", "items": [{"sku": "a"}, {"sku": "b", "qty": "2"}]})
    assert message == (
        "tools.create_order: invalid arguments: at items[1].qty: expected integer, got string"
    )
    assert call_error(t, {}) == (
        'tools.create_order: invalid arguments: missing required property "customer"'
    )
    assert 'missing required property "sku" in items[0]' in call_error(
        t, {"customer": "c", "items": [{}]}
    )
    assert 'expected one of "fast", "slow", got "medium"' in call_error(
        t, {"customer": "c", "mode": "medium"}
    )
    assert 'unexpected property "extra"' in call_error(t, {"customer": "c", "extra": 1})
    assert call_error(t, [1, 2]) == "tools.create_order takes an object, not an array"


class _Labelled(BaseModel):
    labels: dict[int, str]
    parts: list[_Labelled] = []


class _Named(BaseModel):
    plain: dict[str, str]
    parts: list[_Named] = []


class _ByNumber(BaseModel):
    kind: Literal["number"]
    labels: dict[int, str]


class _ByName(BaseModel):
    kind: Literal["name"]
    labels: dict[str, str]


def test_keys_that_pydantic_would_make_one_fail_the_call_naming_them() -> None:
    """JSON keys are text: a `dict[int, str]` given "1", "01" and "1.0" validated to one key,
    1, holding the last value alone, without a word. The call fails naming where and which
    keys; a tool whose dicts keep their keys as sent gets no check at all."""
    seen: list[Any] = []

    @tool
    def keyed(labels: dict[int, str], flags: dict[bool, int] | None = None) -> int:
        """Keyed."""
        seen.append(labels)
        return len(labels)

    @tool
    def nested(item: _Labelled, rows: tuple[dict[float, str], ...] = ()) -> str:
        """Nested."""
        return "ok"

    given = {"labels": {"1": "a", "01": "b", "1.0": "c"}}
    assert call_error(keyed, given) == (
        'tools.keyed: invalid arguments: at labels: the keys "1", "01" and "1.0" are all the '
        "key 1 to the tool; send one of them"
    )
    assert call_error(keyed, {"labels": {}, "flags": {"true": 1, "on": 2}}) == (
        'tools.keyed: invalid arguments: at flags: the keys "true" and "on" are both the key '
        "true to the tool; send one of them"
    )
    item = {"labels": {"2": "x"}, "parts": [{"labels": {"3": "a", "03": "b"}}]}
    assert call_error(nested, {"item": item}) == (
        'tools.nested: invalid arguments: at item.parts.0.labels: the keys "3" and "03" are '
        "both the key 3 to the tool; send one of them"
    )
    assert "at rows.1: the keys" in call_error(
        nested, {"item": {"labels": {}}, "rows": [{"1": "a"}, {"1": "a", "1e0": "b"}]}
    )
    assert seen == []
    # Keys that stay apart pass as ever, and a key that is no number is pydantic's to refuse.
    assert call(keyed, {"labels": {"1": "a", "2": "b", "-1": "c"}}) == 3
    assert seen == [{1: "a", 2: "b", -1: "c"}]
    assert "at labels.x" in call_error(keyed, {"labels": {"x": "a", "1": "b"}})

    @tool
    def plain(
        named: _Named,
        data: dict[str, Any],
        rows: list[dict],
        either: dict[int, str] | dict[str, str],
    ) -> str:
        """Plain."""
        seen.append(either)
        return "ok"

    assert isinstance(plain._arguments, _Arguments) and plain._arguments.keys is None

    # Of a union with a tag, the branch the tag names is the one checked.
    @tool
    def tagged(item: Annotated[_ByNumber | _ByName, Field(discriminator="kind")]) -> str:
        """Tagged."""
        return "ok"

    pair = {"1": "a", "01": "b"}
    assert call(tagged, {"item": {"kind": "name", "labels": pair}}) == "ok"
    assert call_error(tagged, {"item": {"kind": "number", "labels": pair}}) == (
        'tools.tagged: invalid arguments: at item.labels: the keys "1" and "01" are both the '
        "key 1 to the tool; send one of them"
    )
    assert isinstance(keyed._arguments, _Arguments) and keyed._arguments.keys is not None
    # Of a union, pydantic may pick the dict that keeps the keys apart: no check is made.
    arguments: dict[str, Any] = {"named": {"plain": pair}, "data": {}, "rows": [], "either": pair}
    assert call(plain, arguments) == "ok"
    assert seen[-1] == pair


async def test_keys_made_one_fail_the_call_in_either_language() -> None:
    """Sent from a script, as JavaScript writes the keys and as Python does (its int key 1
    goes as "1", beside "01")."""

    @tool
    def keyed(labels: dict[int, str]) -> str:
        """Keyed."""
        return repr(labels)

    engine = CodeMode([keyed], runner=InProcessRunner(), type_check="off")
    try:
        scripts: tuple[tuple[Literal["javascript", "python"], str], ...] = (
            ("javascript", 'return await tools.keyed({ labels: { "1": "a", "01": "b" } })'),
            ("python", 'return await tools.keyed(labels={1: "a", "01": "b"})'),
        )
        for language, code in scripts:
            result = await engine.run_code(code, language=language)
            assert result.error is not None, result.value
            assert result.error["message"] == (
                'tools.keyed: invalid arguments: at labels: the keys "1" and "01" are both the '
                "key 1 to the tool; send one of them"
            )
    finally:
        await engine.aclose()


class _Record(BaseModel):
    data: dict[str, Any]


def test_a_result_whose_keys_the_dump_makes_one_fails_the_call_naming_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """pydantic's JSON dump makes a key that is not text its text: {1: "a", "1": "b"} from a
    tool annotated `-> dict` reached the script as {"1": "b"}, without a word. The call
    fails naming where and which keys; keys that stay apart pass as ever."""
    returned: dict[str, Any] = {}

    @tool
    def bare() -> dict:
        """Bare."""
        return returned["value"]

    @tool
    def typed() -> dict[str, Any]:
        """Typed."""
        return returned["value"]

    @tool
    def record() -> _Record:
        """A model."""
        return returned["value"]

    @tool
    def unannotated():
        """No annotation."""
        return returned["value"]

    returned["value"] = {1: "a", "1": "b"}
    said = "tools.bare returned an object with the keys 1 and '1'"
    assert call_error(bare, {}) == said + NOT_PASSED_ON
    assert warned(caplog) == (
        f"{said}, which is not JSON data; both are '1' as JSON's keys, which are strings: "
        "return one of them; the call failed"
    )
    returned["value"] = {"x": [{"ok": 1}, {datetime.date(2025, 1, 2): 1, "2025-01-02": 2}]}
    said = (
        "tools.typed returned an object with the keys datetime.date(2025, 1, 2) and "
        "'2025-01-02' at x[1]"
    )
    assert call_error(typed, {}) == said + NOT_PASSED_ON
    assert warned(caplog) == (
        f"{said}, which is not JSON data; both are '2025-01-02' as JSON's keys, which are "
        "strings: return one of them; the call failed"
    )
    # A model's field the tool set after it was made (or model_construct's), with or without
    # the annotation that dumps it.
    made = _Record(data={})
    made.data = {"n": [{2: "a", "2": "b", 2.5: "c"}]}
    returned["value"] = made
    for t in (record, unannotated):
        said = call_error(t, {})
        assert "returned an object with the keys 2 and '2' at data.n[0]" in said, said
    # Keys that stay apart are made text, as before.
    returned["value"] = {1: "a", 2: {3: "b"}}
    assert call(bare, {}) == {"1": "a", "2": {"3": "b"}}
    # Only a dump that may make keys text is looked at.
    assert bare._keys_made_text and typed._keys_made_text and record._keys_made_text
    assert not tool(lambda: {"a": 1})._keys_made_text

    @tool
    def plain() -> list[Address]:
        """Plain."""
        return []

    assert not plain._keys_made_text


def test_invalid_argument_messages_stay_short_for_huge_values() -> None:
    """The model's own huge value is not echoed back in the message."""
    t = Tool(
        "t",
        input_schema={"type": "object", "properties": {"n": {"enum": ["a", "b"]}}},
        handler=lambda **kw: None,
    )
    message = call_error(t, {"n": "x" * 100_000})
    assert len(message) < 300


def test_timeout_fails_the_call_catchably() -> None:
    """A call past its timeout fails with `tools.x timed out after N s`, sync or async, and
    says that it may have taken effect: an async handler was stopped midway, a sync one runs
    on (a thread cannot be stopped)."""

    @tool(timeout=0.1)
    async def slow_async() -> None:
        """Slow."""
        await asyncio.sleep(5)

    def slow_sync() -> None:
        time.sleep(0.5)

    assert call_error(slow_async, {}) == (
        "tools.slow_async timed out after 0.1 s and was stopped, so it may or may not have "
        "taken effect; check before calling it again"
    )
    assert call_error(Tool("slow_sync", handler=slow_sync, timeout=0.1), {}) == (
        "tools.slow_sync timed out after 0.1 s while its handler ran; a handler cannot be "
        "stopped, so the call may or may not take effect; check before calling it again"
    )


async def test_a_host_stalled_while_a_call_runs_takes_its_result() -> None:
    """The host stops (its event loop does not run, as under SIGSTOP) past a call's timeout
    while the handler's thread finishes: once the host runs again the call's result is taken
    (the call failed, its effect done and its result lost: 'timed out after 2 s converting
    its result to JSON data ... have the tool return less', or, stopped sooner, 'while its
    handler ran')."""
    loop = asyncio.get_running_loop()
    timeout = 2.0
    began = threading.Event()

    def stall() -> None:
        began.set()
        time.sleep(timeout + 2 * STALLED_S)

    def effect() -> str:
        loop.call_soon_threadsafe(stall)
        began.wait()  # the host stalls now: the handler ends meanwhile
        return "done"

    assert await Tool("effect", handler=effect, timeout=timeout).invoke({}, CTX) == "done"


async def test_an_async_handler_that_blocks_the_loop_still_times_out() -> None:
    """An async handler that blocks the event loop between its awaits (a blocking library),
    each time for longer than a stalled host's bound, meets its timeout: the loop's timers run
    late then as a stopped host's do, and the stall rule started its deadline again at each
    (it ran to its end, past any timeout)."""

    async def blocking() -> str:
        for _ in range(3):
            time.sleep(STALLED_S + 0.6)
            await asyncio.sleep(0)
        return "done"

    with pytest.raises(ToolCallError, match="timed out"):
        await Tool("blocking", handler=blocking, timeout=0.5).invoke({}, CTX)


class _ShortList(list[Any]):
    def __len__(self) -> int:  # says it holds nothing
        return 0


class _NoValues(dict[str, Any]):
    def values(self) -> Any:  # says it holds nothing
        return ()


@dataclasses.dataclass(slots=True)
class _Slotted:  # no __dict__
    a: Any
    b: Any


class _Extra(BaseModel, extra="allow"):  # its members in __pydantic_extra__
    pass


class _Computed(BaseModel):  # its member made as it is dumped
    held: Any = Field(exclude=True)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def pair(self) -> list[Any]:
        return [self.held, self.held]


_PAIRS: dict[str, Any] = {
    "dict": lambda x: {"a": x, "b": x},
    "list_len": lambda x: _ShortList([x, x]),
    "dict_values": lambda x: _NoValues(a=x, b=x),
    "slots_dataclass": lambda x: _Slotted(x, x),
    "model_extra": lambda x: _Extra(**{"a": x, "b": x}),
    "model_computed": lambda x: _Computed(held=x),
}


@pytest.mark.parametrize("shape", sorted(_PAIRS))
@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_result_huge_as_json_fails_at_once_whatever_its_containers_say(
    kind: str, shape: str
) -> None:
    """An object holding one other twice, sixteen deep: a few objects in memory, 2**16
    copies as JSON. The conversion copied it for every place it stood, past the call's
    timeout and the results budget, without bound: forty deep, a host's memory went to 8 GB,
    an async handler's result held the event loop for ever, and a sync handler's thread
    converted on after aclose. Its items are counted first, up to what the script's results
    budget could hold: the call fails at once, catchably, saying so. So too with containers
    the count did not read as the conversion does: a list subclass whose __len__ says 0, a
    dict subclass whose values() say nothing, a dataclass with slots (no __dict__), a model's
    extra fields, a model's computed field (the object it is made of excluded, so that it
    stands once in the count). Each is counted by what it holds."""

    def deep() -> Any:
        d: Any = "v"
        for _ in range(16):
            d = _PAIRS[shape](d)
        return d

    async def adag() -> Any:
        return deep()

    dag = Tool("dag", handler=adag if kind == "async" else deep)
    assert await _what_a_call_reads(dag) == (
        "tools.dag returned more than 32,768 items, which take more than the 64 KiB of "
        "results a script may read (an object that stands in several places counts in "
        "each); have the tool return less (a page, a summary)"
    )


def test_what_is_not_json_data_is_named_with_its_article() -> None:
    """A U read "you" takes "a", as the sandboxes' own messages have it: a tool "returned an
    UUID". Bytes of either kind take none, as in a Python script's messages (one rule, in
    sandbox.protocol: the engine's copy said "a bytearray")."""

    class Update:
        pass

    for value, said in [
        (uuid.UUID(int=5), "a UUID"),
        (collections.UserDict(), "a UserDict"),
        (Update(), "an Update"),
        (object(), "an object"),
        (bytearray(b"x"), "bytearray"),
    ]:
        with pytest.raises(NotJSONData) as e:
            to_json_data([value])
        assert e.value.what == f"{said} at [0]"


def _poser(posed: type) -> Any:
    """An object whose __class__ says it is a ``posed``."""

    class Posing:
        @property
        def __class__(self) -> Any:  # type: ignore[override]
            return posed

    return Posing()


def test_a_result_whose_class_says_it_is_data_is_named_by_its_type() -> None:
    """An object whose __class__ says dict (or list, or str) passed isinstance, and its call
    failed with the conversion's own error ("TypeError: descriptor 'items' for 'dict'
    objects doesn't apply to a 'Posing' object") as if the handler had raised it: it is read
    by its type, and named as what it is."""

    def returning(value: Any) -> Any:
        return lambda: value

    for posed in (dict, list, str, int):
        assert isinstance(_poser(posed), posed)
        assert call_error(Tool("a", handler=returning({"x": _poser(posed)})), {}) == (
            "tools.a returned a Posing at x" + NOT_PASSED_ON
        )


def test_a_subclass_of_dict_or_list_is_converted_as_what_it_holds() -> None:
    """Its own items() or __iter__ may say anything (more than it holds, endlessly): it is
    read as JSON's encoder reads it, by what it holds."""

    class Items(dict[str, Any]):
        def items(self) -> Any:
            return iter([("x", 1)] * 3)

    class Endless(list[Any]):
        def __iter__(self) -> Any:
            return itertools.count()

    assert to_json_data({"d": Items(a=1), "l": Endless([1, 2]), "t": (1,)}) == {
        "d": {"a": 1},
        "l": [1, 2],
        "t": [1],
    }
    # An OrderedDict in its own order (it keeps it apart from the dict's: move_to_end).
    ordered = collections.OrderedDict(a=1, b=2, c=3)
    ordered.move_to_end("a")
    assert list(to_json_data({"o": ordered})["o"]) == ["b", "c", "a"]


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_generator_is_read_only_as_far_as_the_results_budget(kind: str) -> None:
    """A generator result was read whole before anything was counted: an endless one took
    the host's memory past the call's timeout until the process died (an async handler's on
    the event loop). It is read until what it yielded passes the results budget."""
    yielded = 0

    def rows() -> Iterator[str]:
        nonlocal yielded
        for _ in range(200_000):
            yielded += 1
            yield "x" * 100

    async def arows() -> Iterator[str]:
        return rows()

    def sync_rows() -> Iterator[str]:
        return rows()

    said = await _what_a_call_reads(Tool("rows", handler=arows if kind == "async" else sync_rows))
    assert said == (
        "tools.rows returned a generator that yields more than the 64 KiB of results a script "
        "may read; have the tool yield less (a page, a summary)"
    )
    assert yielded == 64 * 1024 // 102 + 1


async def _what_a_call_reads(one: Tool) -> Any:
    """What a script reads of its call to ``one``: the result, or the error's message (with
    64 KiB of results to read)."""
    engine = CodeMode(
        [one],
        runner=InProcessRunner(),
        type_check="off",
        call_timeout=60,
        limits=Limits(results=64 * 1024),
    )
    try:
        code = f"try {{ return await tools.{one.name}() }} catch (e) {{ return e.message }}"
        return (await asyncio.wait_for(engine.run_code(code), 30)).value
    finally:
        await engine.aclose()


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_result_that_holds_itself_says_where_the_cycle_closes(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A result whose member refers back to an object holding it counted as endless, and
    its call read "returned more than 32,768 items ... (an object that stands in several
    places counts in each)": the call names the cycle and where it closes. What to do about
    it is for the tool's author, in the host's log (the script was told to have the tool
    return a copy, and the host nothing)."""

    def tree() -> dict[str, Any]:
        top: dict[str, Any] = {"name": "root", "items": [{"id": 1}, {"id": 2}]}
        top["items"][1]["parent"] = top
        return top

    async def atree() -> dict[str, Any]:
        return tree()

    said = (
        "tools.tree returned a cycle at items[1].parent: it refers back to an object that "
        "holds it, which JSON cannot carry"
    )
    assert await _what_a_call_reads(Tool("tree", handler=atree if kind == "async" else tree)) == (
        said + PASSED_ON_NOT
    )
    assert warned(caplog) == (
        f"{said}; have the tool return a copy without that reference; the call failed"
    )


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_result_whose_conversion_passes_the_timeout_says_the_call_took_effect(
    kind: str,
) -> None:
    """The call's timeout bounds its result's conversion too (an async handler's was not
    bounded at all), and a call that timed out there says its handler returned: it took
    effect (a sync one's said its handler still ran)."""
    release = threading.Event()

    class Slow(BaseModel):
        n: int

        @field_serializer("n")
        def slowly(self, n: int) -> int:
            release.wait(20)  # the conversion, in a thread, waits until the test has seen
            return n

    # More items than are converted on the event loop: the conversion runs in a thread.
    many = [Slow(n=1), *range(2_500)]

    def sync_handler() -> list[Any]:
        return many

    async def async_handler() -> list[Any]:
        return many

    t = Tool("slow", handler=async_handler if kind == "async" else sync_handler, timeout=0.5)
    engine = CodeMode([t], runner=InProcessRunner(), type_check="off")
    try:
        code = "try { return await tools.slow() } catch (e) { return e.message }"
        result = await asyncio.wait_for(engine.run_code(code), 20)
    finally:
        release.set()
        await engine.aclose()
    assert result.value == (
        "tools.slow timed out after 0.5 s converting its result to JSON data: its handler had "
        "returned, so the call took effect, but its result is lost; have the tool return less"
    )


async def test_an_async_handler_raising_stop_iteration_says_so_as_a_sync_one() -> None:
    """Python turns a coroutine's StopIteration into "coroutine raised StopIteration", which
    named neither the tool nor the likely cause: it reads as a sync handler's does."""

    async def find(id: int) -> dict[str, int]:
        return next(u for u in [{"id": 1}] if u["id"] == id)

    with pytest.raises(ToolCallError) as info:
        await tool(find).invoke({"id": 2}, CTX)
    assert str(info.value) == (
        "tools.find failed: its handler raised StopIteration (a next() that found nothing?)"
    )


def test_a_number_past_64_bits_for_an_integer_says_so() -> None:
    """A script's 1e21 for an ``int`` read "Unable to parse input string as an integer,
    exceeded maximum size": the script passed a number, not a string."""

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    assert call_error(add, {"a": 1e21, "b": 1}) == (
        "tools.add: invalid arguments: at a: expected an integer within 64 bits, got 1e+21"
    )
    assert call(add, {"a": 2**64, "b": 1}) == 2**64 + 1  # an integer of Python's, as given


def test_a_handlers_own_timeout_error_is_not_reported_as_ours() -> None:
    """TimeoutError raised by the handler (a network timeout) keeps its own message."""

    async def handler() -> None:
        raise TimeoutError("upstream API did not answer")

    assert call_error(Tool("t", handler=handler, timeout=30), {}) == (
        "TimeoutError: upstream API did not answer"
    )


def test_a_bugs_exception_says_its_type_to_the_model_and_its_traceback_to_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A handler's bug (a KeyError, an AttributeError: Python's own exceptions but
    Exception, ValueError and RuntimeError, which a handler raises on purpose) reads as
    ``Type: message`` (the model read "2" for ``users[2]``), and the host's log has its
    traceback (it had nothing); a ToolCallError, a failure said on purpose, is not logged."""

    def lookup(user_id: int) -> dict[str, str]:
        users = {1: {"name": "a"}}
        return users[user_id]

    def attr() -> None:
        None.foo  # type: ignore[attr-defined]  # noqa: B018

    def chosen() -> None:
        raise ToolCallError("quota exceeded, try tomorrow")

    def plain() -> None:
        raise ValueError("no such sku")

    async def main() -> list[str]:
        tools = [tool(lookup), tool(attr), tool(chosen), tool(plain)]
        engine = CodeMode(tools, runner=InProcessRunner())
        try:
            said = []
            for code in (
                "return await tools.lookup({ user_id: 2 })",
                "return await tools.attr()",
                "return await tools.chosen()",
                "return await tools.plain()",
            ):
                result = await engine.run_code(code)
                assert result.error is not None, result.text
                said.append(result.error["message"])
            return said
        finally:
            await engine.aclose()

    with caplog.at_level(logging.INFO, logger="codemode"):
        said = asyncio.run(main())
    assert said == [
        "KeyError: 2",
        "AttributeError: 'NoneType' object has no attribute 'foo'",
        "quota exceeded, try tomorrow",
        "no such sku",
    ]
    raised = [r for r in caplog.records if "tool call raised" in r.getMessage()]
    assert [r.levelname for r in raised] == ["WARNING", "WARNING", "INFO"]
    logged = [r.getMessage() for r in raised]
    assert "tool=lookup: KeyError: 2\nTraceback (most recent call last):" in logged[0]
    assert "return users[user_id]" in logged[0]
    assert "tool=attr" in logged[1]


def test_handler_errors_become_call_errors() -> None:
    """The tool's message reaches the script; an empty message gives the class name."""

    def fails() -> None:
        raise ValueError("no such repository: acme/nope")

    def empty() -> None:
        raise KeyError

    def explicit() -> None:
        raise ToolCallError("quota exceeded, try tomorrow")

    assert call_error(Tool("a", handler=fails), {}) == "no such repository: acme/nope"
    assert call_error(Tool("b", handler=empty), {}) == "KeyError"
    assert call_error(Tool("c", handler=explicit), {}) == "quota exceeded, try tomorrow"


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (404, "404"),
        ({"code": 7}, "{'code': 7}"),
        ("", "tools.refuse failed"),
        (None, "tools.refuse failed"),
    ],
)
async def test_a_tool_call_error_of_any_value_fails_its_call_with_its_text(
    given: Any, said: str
) -> None:
    """ToolCallError(404) failed its call with the engine's "TypeError: object of type
    'int' has no len()", a dict ended run_code with a TypeError, and an empty message gave
    the model nothing to read."""

    def refuse() -> None:
        raise ToolCallError(given)

    engine = CodeMode([Tool("refuse", handler=refuse)], runner=InProcessRunner())
    try:
        result = await engine.run_code(
            "try { await tools.refuse() } catch (e) { return e.message }"
        )
        assert result.value == said, result.text
    finally:
        await engine.aclose()


class _UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ broke")


class _HostsOwnBase(BaseException):
    """A BaseException that is not an Exception, as some libraries raise."""


def test_odd_exceptions_of_a_sync_handler_become_call_errors() -> None:
    """What a handler raises in its tool thread is the call's failure, whatever it is: an
    exception whose ``__str__`` fails gives its class name, and KeyboardInterrupt, SystemExit
    or another BaseException (which in a thread stop nothing but the call) name themselves
    instead of reaching the event loop and stopping the host."""

    def raiser(error: BaseException) -> Any:
        def handler() -> None:
            raise error

        return handler

    assert call_error(Tool("a", handler=raiser(_UnprintableError())), {}) == "_UnprintableError"
    for error, said in [
        (SystemExit(3), "tools.b failed: SystemExit: 3"),
        (KeyboardInterrupt(), "tools.b failed: KeyboardInterrupt"),
        (_HostsOwnBase("mine"), "tools.b failed: _HostsOwnBase: mine"),
        (asyncio.CancelledError(), "tools.b failed: it was cancelled"),
    ]:
        assert call_error(Tool("b", handler=raiser(error)), {}) == said


class _OddText(str):
    def strip(self, chars: str | None = None) -> Any:  # not text
        return 5


class _OddTextError(ValueError):
    def __str__(self) -> str:
        return _OddText("quota exceeded")


def test_an_exception_whose_text_is_a_str_subclass_gives_its_text() -> None:
    """An exception whose __str__ gave a str subclass with methods of its own failed its call
    with the engine's own error reading it ("TypeError: object of type 'int' has no len()"),
    not the handler's message: its text is read as plain text."""

    def handler() -> None:
        raise _OddTextError()

    assert call_error(Tool("a", handler=handler), {}) == "quota exceeded"


def test_an_exception_group_says_what_it_holds() -> None:
    """A handler that fails inside a task group (its own, anyio's, the MCP SDK's) raises an
    ExceptionGroup, whose text only counts its errors: the call's message names them, as a
    Python script's own group does, nested groups flattened, three at most."""

    async def one() -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(_fail(ConnectionError("refused by db:5432")))

    async def nested() -> None:
        raise ExceptionGroup(
            "outer",
            [
                ValueError("no 1"),
                ExceptionGroup("inner", [KeyError("k"), TimeoutError()]),
                ValueError("no 4"),
            ],
        )

    def many() -> None:
        raise ExceptionGroup("many", [ValueError(str(i)) for i in range(500)])

    assert call_error(Tool("a", handler=one), {}) == (
        "unhandled errors in a TaskGroup (1 sub-exception): ConnectionError: refused by db:5432"
    )
    assert call_error(Tool("b", handler=nested), {}) == (
        "outer (3 sub-exceptions): ValueError: no 1; KeyError: 'k'; TimeoutError; and 1 more"
    )
    assert call_error(Tool("c", handler=many), {}) == (
        "many (500 sub-exceptions): ValueError: 0; ValueError: 1; ValueError: 2; and more"
    )


async def _fail(error: Exception) -> None:
    raise error


def test_odd_exceptions_of_an_async_handler() -> None:
    """On the event loop, a handler's own BaseException, or a CancelledError nobody asked
    for (a future it awaited was cancelled), is the call's failure; KeyboardInterrupt and
    SystemExit stop the process there, as asyncio has them do; and a call that is cancelled
    is cancelled."""

    async def own_base() -> None:
        raise _HostsOwnBase("mine")

    async def awaited_cancelled() -> None:
        future = asyncio.get_running_loop().create_future()
        future.cancel()
        await future

    async def unprintable() -> None:
        raise _UnprintableError()

    async def exits() -> None:
        raise SystemExit(3)

    assert call_error(Tool("a", handler=own_base), {}) == "tools.a failed: _HostsOwnBase: mine"
    assert call_error(Tool("b", handler=awaited_cancelled), {}) == (
        "tools.b failed: it was cancelled"
    )
    assert call_error(Tool("c", handler=unprintable), {}) == "_UnprintableError"
    with pytest.raises(SystemExit):
        call(Tool("d", handler=exits), {})

    started = asyncio.Event()

    async def hangs() -> None:
        started.set()
        await asyncio.sleep(3600)

    async def cancel_a_call() -> None:
        task = asyncio.create_task(Tool("e", handler=hangs).invoke({}, CTX))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_a_call())


def test_results_are_converted_to_json_data() -> None:
    """Models dump in JSON mode, dataclasses become objects, tuples arrays; an annotated
    return type dumps through pydantic (a datetime becomes its ISO string)."""

    @tool
    def when() -> list[datetime.datetime]:
        """When."""
        return [datetime.datetime(2025, 1, 2, 3, 4, 5)]

    assert call(
        Tool("m", handler=lambda: User(id=1, name="a", joined=datetime.date(2024, 5, 6))), {}
    ) == {
        "id": 1,
        "name": "a",
        "joined": "2024-05-06",
    }
    assert call(Tool("d", handler=lambda: {"p": Point(1, 2), "t": (1, "x")}), {}) == {
        "p": {"x": 1, "y": 2},
        "t": [1, "x"],
    }
    assert call(when, {}) == ["2025-01-02T03:04:05"]
    result = call(Tool("e", handler=lambda: {"color": Color.RED, "n": Level.HIGH}), {})
    assert result == {"color": "red", "n": 3}
    assert type(result["color"]) is str and type(result["n"]) is int
    # A str enum's member as a key is its text, as it is as a value (JSON's encoder refused
    # it: "Dict key must be str").
    result = call(Tool("k", handler=lambda: {Status.OPEN: [1], "x": {Status.OPEN: 2}}), {})
    assert result == {"open": [1], "x": {"open": 2}}
    assert [type(k) for k in (*result, *result["x"])] == [str, str, str]


def test_models_with_aliases_go_out_as_their_schemas_say() -> None:
    """A model's JSON names are its aliases, in the schemas and in what a call returns: a
    tool returning one (typed, or not) matches its output schema. It was dumped by field
    name, so every call of a tool typed ``-> Aliased`` failed its own output schema."""

    @tool
    def typed() -> list[Aliased]:
        """Typed."""
        return [Aliased(theName="a")]

    @tool
    def take(item: Aliased) -> str:
        """Take one."""
        return item.the_name

    assert typed.output_schema is not None
    assert typed.output_schema["$defs"]["Aliased"]["required"] == ["theName"]
    assert call(typed, {}) == [{"theName": "a"}]
    assert call(Tool("untyped", handler=lambda: {"x": Aliased(theName="b")}), {}) == {
        "x": {"theName": "b"}
    }
    assert call(take, {"item": {"theName": "c"}}) == "c"


def test_titles_are_dropped_from_schemas_but_not_from_values() -> None:
    """Generated titles go; a property named title, or a default holding one, stays."""

    @tool
    def note(title: str, meta: dict[str, str] | None = None) -> None:
        """Write a note."""

    assert "title" in note.input_schema["properties"]
    assert "title" not in note.input_schema["properties"]["title"]

    @tool
    def tagged(meta: dict[str, str] = {"title": "kept"}) -> None:  # noqa: B006
        """Tagged."""

    assert tagged.input_schema["properties"]["meta"]["default"] == {"title": "kept"}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({1, 2}, "tools.bad returned a set, which is not JSON data; return a list"),
        (object(), "tools.bad returned an object, which is not JSON data"),
        (math.nan, "tools.bad returned the number nan, which is not JSON data; JSON has no NaN"),
        ({"a": [1, math.inf]}, "tools.bad returned the number inf at a[1], which is not JSON"),
        ({1: "x"}, "tools.bad returned an object with the int key 1, which is not JSON data"),
        (
            {"when": datetime.date(2024, 1, 1)},
            "tools.bad returned a date at when, which is not JSON data; return an ISO string",
        ),
        (b"bytes", "tools.bad returned bytes, which is not JSON data; return text"),
        (
            {"m": _Opaque(thing=object())},
            "tools.bad returned a _Opaque that pydantic cannot dump at m, which is not JSON "
            "data (Unable to serialize unknown type: <class 'object'>)",
        ),
    ],
)
def test_results_that_are_not_json_data_fail_the_call(
    value: Any, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A result that is not JSON data is the host's bug: the script is told what was returned
    and that it is not at fault; what to return instead (value.isoformat(), a list) is for
    the tool's author, in the host's log (the script was told to return an ISO string)."""
    said = call_error(Tool("bad", handler=lambda: value), {})
    assert said == message.partition(", which is not JSON")[0] + NOT_PASSED_ON
    assert warned(caplog).startswith(message) and warned(caplog).endswith("; the call failed")


def test_a_model_whose_types_are_not_all_defined_fails_its_call_naming_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """pydantic cannot dump a model that refers to a type never defined: the call fails as
    other results pydantic cannot dump do (the script read pydantic's bare text, two lines,
    without the tool's name)."""

    class Pending(BaseModel):
        later: Later  # type: ignore[name-defined]  # noqa: F821

    said = call_error(Tool("bad", handler=lambda: Pending.model_construct(later=1)), {})
    assert said == "tools.bad returned a Pending that pydantic cannot dump" + NOT_PASSED_ON
    told = warned(caplog)
    assert told.startswith(
        "tools.bad returned a Pending that pydantic cannot dump, which is not JSON data "
        "(`TypeAdapter[" + repr(Pending) + "]` is not fully defined"
    ), told
    assert "\n" not in told and "give its fields JSON types" not in told


def test_a_cyclic_result_fails_instead_of_recursing_forever() -> None:
    """A list that contains itself is refused with a message, not a RecursionError."""
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    assert "nested deeper than" in call_error(Tool("cyc", handler=lambda: cyclic), {})


def _nested(levels: int, innermost: Any) -> Any:
    value = innermost
    for _ in range(levels - 1):
        value = [value]
    return value


@pytest.mark.parametrize("innermost", [[], {}, [1]], ids=["list", "dict", "number"])
def test_a_result_nested_as_deep_as_data_may_cross_is_taken_and_one_level_more_is_not(
    innermost: Any,
) -> None:
    """The check of a tool's result and the sandbox's of the data it is sent agree at
    MAX_DEPTH levels of arrays and objects: a result one level deeper whose innermost one
    was empty (129 lists, the last []) passed the tool's check, then every run of the
    script failed on it, 'ProtocolError: a malformed 'script' message'."""
    deepest = _nested(protocol.MAX_DEPTH, innermost)
    assert call(Tool("deep", handler=lambda: deepest), {}) == deepest
    assert protocol.data_problem(deepest) is None
    deeper = [deepest]
    assert protocol.data_problem(deeper) is not None
    said = call_error(Tool("deeper", handler=lambda: deeper), {})
    assert f"nested deeper than {protocol.MAX_DEPTH} levels" in said


class _Pair(enum.Enum):
    ONE_TWO = (1, 2)


@pytest.mark.parametrize(
    ("innermost", "plain"),
    [
        (Point(1.0, 2.0), {"x": 1.0, "y": 2.0}),
        (Address(street="Main"), {"street": "Main", "city": "Oslo"}),
        (_Pair.ONE_TWO, [1, 2]),
    ],
    ids=["dataclass", "model", "enum"],
)
def test_a_dataclass_model_or_enum_at_the_deepest_level_is_taken_as_its_plain_data(
    innermost: Any, plain: Any
) -> None:
    """A dataclass, a model or an enum member is its plain data, at its own level: each was
    counted a level deeper than its fields, dump or value, so one at the deepest level data
    may cross was refused ('a value nested deeper than 128 levels'), though its plain data
    there crosses; one level more is refused, as the plain data is."""
    deepest = _nested(protocol.MAX_DEPTH, innermost)
    assert call(Tool("deep", handler=lambda: deepest), {}) == _nested(protocol.MAX_DEPTH, plain)
    said = call_error(Tool("deeper", handler=lambda: [deepest]), {})
    assert f"nested deeper than {protocol.MAX_DEPTH} levels" in said


def test_an_enum_member_whose_value_is_itself_is_refused() -> None:
    """A member is followed to its value at its own level, so one whose value is itself is
    refused after so many members, not followed for ever."""

    class Ring(enum.Enum):
        A = 1

    Ring.A._value_ = Ring.A  # type: ignore[assignment]  # a ring, as a host might make
    said = call_error(Tool("ring", handler=lambda: {"r": Ring.A}), {})
    assert said.startswith(
        f"tools.ring returned an enum member whose value is a member {protocol.MAX_DEPTH} "
        "levels deep at r, which is not JSON data"
    ), said


def test_result_is_checked_against_the_output_schema(caplog: pytest.LogCaptureFixture) -> None:
    """A result that does not fit the output schema fails the call, naming the tool; a
    defect of the tool's, said so to the script and warned in the host's log."""
    t = Tool(
        "get_user",
        output_schema={
            "type": "object",
            "properties": {"id": {"type": "integer"}},
            "required": ["id"],
        },
        handler=lambda: {"id": "7"},
    )
    said = (
        "tools.get_user returned a result that does not match its output schema: "
        "at id: expected integer, got string"
    )
    assert call_error(t, {}) == said + PASSED_ON_NOT
    assert warned(caplog) == (
        f"{said}; have the tool return what its output schema says, or correct the schema; "
        "the call failed"
    )


def test_a_result_with_a_lone_surrogate_is_the_tools_defect(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Text with a lone surrogate (which JSON cannot carry) from a tool with an output
    schema: the script was told the tool must return JSON data, advice for the tool's
    author, and the host was told nothing."""
    t = Tool("lone", handler=lambda: "a \ud800 b", output_schema={"type": "string"})
    said = "tools.lone returned text with a lone surrogate, which JSON cannot carry"
    assert call_error(t, {}) == said + PASSED_ON_NOT
    assert warned(caplog) == (
        f"{said}; the tool must return JSON data (text without lone surrogates); the call failed"
    )


def test_client_tools_and_tools_without_handler() -> None:
    """A client tool takes no handler; invoking a tool with no handler here fails clearly."""
    client = Tool("pick_file", client=True)
    assert "run by the client" in call_error(client, {})
    assert "no handler on this host" in call_error(Tool("remote"), {})
    with pytest.raises(ToolDefinitionError, match="takes no handler"):
        Tool("x", client=True, handler=lambda: None)


def test_schema_is_copied_at_construction() -> None:
    """A host that mutates its schema dict later cannot change the checked schema."""
    schema: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "string"}}}
    t = Tool("t", input_schema=schema, handler=lambda **kw: 1)
    schema["properties"]["a"]["type"] = "integer"
    assert t.input_schema["properties"]["a"]["type"] == "string"
    assert call(t, {"a": "x"}) == 1


# --- schemas refused at construction -------------------------------------------------------


def _deep(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ([], "it is an array, not a JSON Schema object"),
        ({"type": "string"}, 'has "type": "string"; a tool\'s input is an object'),
        ({"properties": {}}, 'it has no "type"'),
        (
            {"type": "object", "properties": {"a": {"type": "strin"}}},
            'at properties.a.type: "strin" is not a JSON Schema type; use string,',
        ),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/Gone"}}}, "keep every $ref"),
        ({"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}}, "$ref"),
        ({"type": "object", "properties": {"a": {"pattern": "(?<=x)y"}}}, "linear-time engine"),
        ({"type": "object", "properties": {"a": {"pattern": r"(a)\1"}}}, "backreferences"),
        (_deep(MAX_SCHEMA_DEPTH), f"nests deeper than {MAX_SCHEMA_DEPTH} levels"),
        (
            {"type": "object", "description": "x" * MAX_SCHEMA_BYTES},
            f"over the {MAX_SCHEMA_BYTES:,} bytes",
        ),
    ],
)
def test_bad_input_schemas_are_refused(schema: Any, message: str) -> None:
    """The error names the tool, the problem and the fix."""
    with pytest.raises(ToolDefinitionError) as info:
        Tool("lookup", source="crm", input_schema=schema)
    text = str(info.value)
    assert text.startswith("tool 'lookup' from 'crm': its input schema is not usable: ")
    assert message in text


def test_a_schema_that_holds_one_part_in_many_places_is_refused_at_its_bound() -> None:
    """A host's dict that holds one object in two properties, each holding the next alike,
    25 deep: 2**25 objects as JSON (1 GiB), in 50 levels. The depth check walked every copy,
    then the encoder wrote them, for minutes, before the size refused it; the walk stops at
    the bound (counted in reads of the objects' values, seen by a profile hook, not in
    seconds) and says why."""
    part: dict[str, Any] = {"type": "string"}
    for _ in range(25):
        part = {"type": "object", "properties": {"a": part, "b": part}}
    reads = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal reads
        reading = event == "c_call" and getattr(arg, "__name__", "") == "values"
        if reading and isinstance(getattr(arg, "__self__", None), dict):
            reads += 1
            # Raised in the walk itself: a walk of every copy fails at once, not after minutes.
            assert reads <= MAX_SCHEMA_BYTES, "the walk read every copy of the schema"

    sys.setprofile(count)
    try:
        with pytest.raises(ToolDefinitionError, match="in several places counts in each"):
            Tool("t", input_schema={"type": "object", "properties": {"x": part}})
    finally:
        sys.setprofile(None)
    assert 0 < reads <= MAX_SCHEMA_BYTES  # the hook saw the walk's reads


def _refused(schema: Any) -> tuple[str, int]:
    """What ``Tool`` says of ``schema`` as it refuses it, and the most memory it allocated
    meanwhile (bytes, tracemalloc's count: work, not time)."""
    tracemalloc.start()
    try:
        with pytest.raises(ToolDefinitionError) as info:
            Tool("t", input_schema=schema)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return str(info.value), peak


@pytest.mark.parametrize("container", [dict, tuple])
def test_a_string_held_in_many_places_is_refused_before_it_is_written(container: type) -> None:
    """One 20 KB string held in a thousand parts is 20 MB of JSON. The walk counted values,
    not bytes, so it passed it to the encoder, which wrote all of it before the size refused
    it (60,000 parts: 1.2 GB); the walk counts bytes and stops at the bound, so no more than
    a fraction of those 20 MB is ever allocated (a tuple, written as an array, alike)."""
    inner = {"type": "string", "description": "x" * 20_000}
    schema: dict[str, Any] = {"type": "object"}
    if container is dict:
        schema["properties"] = {f"p{i}": inner for i in range(1000)}
    else:
        schema["properties"] = {"p": {"enum": tuple(inner for _ in range(1000))}}
    said, peak = _refused(schema)
    assert f"over the {MAX_SCHEMA_BYTES:,} bytes" in said, said
    assert peak < 4 * 1024 * 1024, f"{peak:,} bytes allocated to refuse it"


@pytest.mark.parametrize("container", [list, tuple])
def test_a_long_array_is_refused_before_its_items_are_walked(container: type) -> None:
    """An array of 300,000 zeros is 600 KB of JSON. The walk pushed every item on its stack
    before it counted any (20,000,000 zeros: 6 s and 1.4 GB to refuse); it counts an array's
    brackets and commas first and stops there, so the refusal allocates next to nothing."""
    zeros = container([0] * 300_000)
    schema = {"type": "object", "properties": {"a": {"enum": zeros}}}
    said, peak = _refused(schema)
    assert f"over the {MAX_SCHEMA_BYTES:,} bytes" in said, said
    assert peak < 1024 * 1024, f"{peak:,} bytes allocated to refuse it"


@pytest.mark.parametrize("items", [0, 1, 2, 1000])
def test_a_schema_of_arrays_and_objects_just_within_the_bound_is_taken(items: int) -> None:
    """The brackets and commas the walk counts are those the encoder writes, no more: a schema
    of many small arrays and objects that is exactly the bound's bytes is taken."""
    schema: dict[str, Any] = {
        "type": "object",
        "examples": [[0] * items, {f"k{i}": [] for i in range(items)}],
        "description": "",
    }
    schema["description"] = "x" * (MAX_SCHEMA_BYTES - len(orjson.dumps(schema)))
    assert len(orjson.dumps(schema)) == MAX_SCHEMA_BYTES
    Tool("t", input_schema=schema)
    schema["examples"][0].append(0)
    with pytest.raises(ToolDefinitionError, match=f"over the {MAX_SCHEMA_BYTES:,} bytes"):
        Tool("t", input_schema=schema)


class _HidingList(list[Any]):
    """A list whose own len and iter say it holds nothing; orjson writes what it holds."""

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __len__(self) -> int:
        return 0


class _HidingDict(dict[str, Any]):
    """A dict whose own len, iter and values say it holds nothing; orjson writes its items."""

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def values(self) -> Any:
        return []


@pytest.mark.parametrize("container", [_HidingList, _HidingDict])
def test_a_container_that_hides_what_it_holds_is_counted_in_full(container: type) -> None:
    """The walk read a subclass's own len, iter and values, so a list or dict that said it
    held nothing passed it with its 1,000 parts of 20 KB, and orjson wrote them all (20 MB)
    before the size refused it; it reads what the container holds, as orjson does."""
    big = "x" * 20_000
    hiding = container(
        {f"k{i}": big for i in range(1000)} if container is _HidingDict else [big] * 1000
    )
    said, peak = _refused({"type": "object", "examples": [hiding]})
    assert f"over the {MAX_SCHEMA_BYTES:,} bytes of" in said, said
    assert peak < 4 * 1024 * 1024, f"{peak:,} bytes allocated to refuse it"


@dataclasses.dataclass
class _Text:
    text: str


class _Big(enum.Enum):
    TEXT = "x" * 20_000


@pytest.mark.parametrize(
    ("inner", "message"),
    [
        (_Text("x" * 20_000), "it holds a _Text, which is not JSON data; give only objects,"),
        (orjson.Fragment(b'"' + b"x" * 20_000 + b'"'), "it holds a Fragment, which is not JSON"),
        (datetime.datetime(2026, 1, 1), "it holds a datetime, which is not JSON data"),
        (uuid.UUID(int=1), "it holds a UUID, which is not JSON data"),
        (_Big.TEXT, f"over the {MAX_SCHEMA_BYTES:,} bytes of JSON a schema may take"),
    ],
)
def test_a_value_the_walk_does_not_enter_is_refused_before_it_is_written(
    inner: Any, message: str
) -> None:
    """A dataclass, a Fragment, a datetime or a UUID counted as one byte, though orjson
    writes it whole: a 20 KB one in 1,000 defaults was written, 20 MB, before the size
    refused it. Such a value is refused as not JSON data at once, and an enum member is
    counted as its value, so the refusal allocates a fraction of that."""
    properties = {f"p{i}": {"type": "string", "default": inner} for i in range(1000)}
    said, peak = _refused({"type": "object", "properties": properties})
    assert message in said, said
    assert peak < 4 * 1024 * 1024, f"{peak:,} bytes allocated to refuse it"


def test_an_enum_member_in_a_schema_is_taken_as_its_value() -> None:
    """A plain enum's member is JSON as its value (orjson writes it so); one whose value is a
    member again, round and round, is refused, not walked for ever."""
    Tool("t", input_schema={"type": "object", "properties": {"c": {"default": Color.RED}}})

    class Ring(enum.Enum):
        A = 1

    Ring.A._value_ = Ring.A  # type: ignore[assignment]  # a ring, as a host might make
    with pytest.raises(ToolDefinitionError, match="is there a cycle"):
        Tool("t", input_schema={"type": "object", "properties": {"c": {"default": Ring.A}}})


def test_a_schema_just_within_the_bound_is_taken() -> None:
    """The walk's count of bytes is at most what the encoder writes: a schema of exactly the
    bound's bytes is not refused by it."""
    schema: dict[str, Any] = {"type": "object", "description": ""}
    pad = MAX_SCHEMA_BYTES - len(orjson.dumps(schema))
    schema["description"] = "x" * pad
    assert len(orjson.dumps(schema)) == MAX_SCHEMA_BYTES
    Tool("t", input_schema=schema)
    schema["description"] += "x"
    with pytest.raises(ToolDefinitionError, match=f"over the {MAX_SCHEMA_BYTES:,} bytes"):
        Tool("t", input_schema=schema)


def test_an_unknown_meta_schema_is_named_as_such() -> None:
    """A `$schema` the validator does not know was refused with advice about `$ref`, which
    the schema may not even have; the message says what to do about the `$schema`."""
    with pytest.raises(ToolDefinitionError) as info:
        Tool("t", input_schema={"$schema": "https://example.com/my-meta", "type": "object"})
    text = str(info.value)
    assert "https://example.com/my-meta" in text and "$ref" not in text
    assert "drop the $schema" in text


def test_bad_output_schema_is_refused() -> None:
    """An output schema is checked too (it need not be an object)."""
    Tool("ok", output_schema={"type": "array", "items": {"type": "string"}})
    with pytest.raises(ToolDefinitionError, match="its output schema is not usable"):
        Tool("bad", output_schema={"type": 5})


def _within(seconds: float, fn: Any) -> Any:
    """Run fn in a thread; fail the test if it has not finished after `seconds`."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as e:  # handed to the test thread
            outcome["error"] = e

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"took longer than {seconds} s: a backtracking regex engine?"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def test_hostile_pattern_cannot_hang_validation() -> None:
    """Attack: ReDoS. `(a+)+$` against 50,000 a's and a b takes exponential time on a
    backtracking engine; on the linear engine it is instant. (That the linear engine is the
    one in use shows in test_bad_input_schemas_are_refused: it refuses lookbehind and
    backreferences, which a backtracking engine would accept.)"""
    t = Tool(
        "t",
        input_schema={
            "type": "object",
            "properties": {"s": {"type": "string", "pattern": "(a+)+$"}},
            "patternProperties": {"^(x+x+)+y$": {"type": "string"}},
        },
        handler=lambda **kw: "ran",
    )
    hostile = "a" * 50_000 + "b"
    message = _within(5, lambda: call_error(t, {"s": hostile}))
    assert message == 'tools.t: invalid arguments: at s: does not match the pattern "(a+)+$"'
    assert _within(5, lambda: call(t, {"s": "a" * 50_000})) == "ran"
    # A property name is matched against patternProperties too: it is the model's string.
    assert _within(5, lambda: call(t, {"x" * 50_000: "v"})) == "ran"


def test_huge_compiled_regex_is_refused() -> None:
    """Attack: a pattern whose compiled program is enormous; refused at construction."""
    with pytest.raises(ToolDefinitionError, match="pattern"):
        Tool(
            "t",
            input_schema={"type": "object", "properties": {"s": {"pattern": "(\\w{1000}){1000}"}}},
        )


def test_remote_refs_are_never_fetched() -> None:
    """Attack: SSRF through `$ref`. Compiling is offline; the error says retrieval is off."""
    with pytest.raises(ToolDefinitionError) as info:
        Tool("t", input_schema={"type": "object", "$ref": "http://169.254.169.254/latest"})
    assert "169.254.169.254" in str(info.value)


# --- names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "source", "expected"),
    [
        ("get_weather", None, "get_weather"),
        ("get-weather", None, "get_weather"),
        ("list.files", None, "list_files"),
        ("2fa_verify", None, "_2fa_verify"),
        ("send  email!", None, "send_email"),
        ("créer_note", None, "creer_note"),
        ("list_prs", "github", "github__list_prs"),
        ("list-prs", "my server", "my_server__list_prs"),
        ("2fa", "auth", "auth__2fa"),
        ("__proto__", None, "__proto___tool"),
        ("then", None, "then_tool"),
        ("???", None, "tool"),
    ],
)
def test_sanitize_name(name: str, source: str | None, expected: str) -> None:
    """Names become ASCII JavaScript identifiers, stably."""
    assert sanitize_name(name, source) == expected


def test_long_names_are_cut_with_a_hash() -> None:
    """Two long names that share a prefix stay apart, and within 64 characters."""
    a = sanitize_name("x" * 100 + "a")
    b = sanitize_name("x" * 100 + "b")
    assert len(a) == len(b) == 64 and a != b


def test_collisions_get_stable_suffixes_regardless_of_order() -> None:
    """`get-weather` and `get.weather` both sanitize to get_weather; the tool already called
    get_weather keeps it, the others get a hash suffix, and the order of the tools does not
    change anyone's name. A built-in's name is never handed out."""
    pairs: list[tuple[str, str | None]] = [
        ("get-weather", None),
        ("get.weather", None),
        ("get_weather", None),
        ("tool_search", None),
    ]
    names = unique_names(pairs)
    assert names[2] == "get_weather"
    assert names[0].startswith("get_weather_") and names[1].startswith("get_weather_")
    assert names[0] != names[1]
    assert names[3].startswith("tool_search_")
    reordered = unique_names(list(reversed(pairs)))
    assert list(reversed(reordered)) == names
    assert unique_names([("get-weather", None)]) == ["get_weather"]


def test_renamed_tools_whose_hashes_begin_alike_stay_apart() -> None:
    """`a/@/%b` and `a!/*#b` both sanitize to a_b, and the hashes that rename them share
    their first six digits (4c82f5): of 5,000 tools named in Chinese (each sanitized to
    "tool") such a pair is as likely as not. Both were given a_b_4c82f5 and the engine
    refused its tools ("not unique after sanitizing"); each takes a longer hash, whatever
    the order, and a tool already called a_b keeps its name."""
    pairs: list[tuple[str, str | None]] = [("a/@/%b", None), ("a!/*#b", None), ("a_b", None)]
    names = unique_names(pairs)
    assert names[2] == "a_b"
    assert names[0] != names[1] and all(n.startswith("a_b_4c82f5") for n in names[:2]), names
    assert list(reversed(unique_names(list(reversed(pairs))))) == names
    tools = unique_tools([Tool(name) for name, _ in pairs])
    assert [t.name for t in tools] == names


def test_a_name_handed_out_before_is_kept_when_a_newcomer_collides() -> None:
    """A server lists ``a_b`` (named h__a_b), then adds ``a-b``: the model was shown h__a_b, so
    it keeps that name and the newcomer is the one renamed (both were renamed, and a script
    calling h__a_b failed with 'does not exist'). Without a history both are renamed, as
    before."""
    fresh = unique_names([("a_b", "h"), ("a-b", "h")])
    assert all(n.startswith("h__a_b_") for n in fresh) and fresh[0] != fresh[1]
    kept = unique_names([("a_b", "h"), ("a-b", "h")], kept={("a_b", "h"): "h__a_b"})
    assert kept[0] == "h__a_b" and kept[1].startswith("h__a_b_"), kept
    # A kept name whose tool is gone holds nothing back; a kept built-in name is not kept.
    assert unique_names([("a-b", "h")], kept={("a_b", "h"): "h__a_b"}) == ["h__a_b"]
    assert unique_names([("x", None)], kept={("x", None): "tool_search"}) == ["x"]


def test_unique_tools_renames_copies_and_refuses_true_duplicates() -> None:
    """unique_tools returns renamed copies; two tools with one name and source are an error."""
    first, second = Tool("get-weather"), Tool("get.weather")
    result = unique_tools([first, second])
    assert [t.original_name for t in result] == ["get-weather", "get.weather"]
    assert len({t.name for t in result}) == 2
    assert first.name == "get_weather"  # the original is not modified
    with pytest.raises(ToolDefinitionError, match="two tools are named 'x'"):
        unique_tools([Tool("x"), Tool("x")])
    assert len(unique_tools([Tool("x", source="a"), Tool("x", source="b")])) == 2


def test_split_words_and_stem() -> None:
    """Words split on `__`, `_`, camelCase and digits; stems meet across inflections."""
    assert split_words("github__list_prs") == ["github", "list", "prs"]
    assert split_words("listPullRequests") == ["list", "pull", "requests"]
    assert split_words("getHTTPResponse") == ["get", "http", "response"]
    assert split_words("oauth2Token") == ["oauth2token", "oauth", "2", "token"]
    assert split_words("2fa_verify") == ["2fa", "2", "fa", "verify"]
    assert {stem(w) for w in ("list", "lists", "listing", "listed")} == {"list"}
    assert {stem(w) for w in ("create", "created", "creating", "creates")} == {"creat"}
    assert stem("repositories") == "repository" and stem("running") == "run"
    assert stem("pr") == stem("prs")


def test_closest_names() -> None:
    """A misspelt or reworded name finds the tools it probably meant; nonsense finds none."""
    names = ["slack__post_message", "github__list_prs", "get_weather", "Get_Weather2"]
    assert closest_names("get_wether", names)[0] == "get_weather"
    assert closest_names("GET_WEATHER", names)[0] == "get_weather"
    assert closest_names("send_slack_message", names)[0] == "slack__post_message"
    assert closest_names("list_prs", names) == ["github__list_prs"]
    assert closest_names("zzzz", names) == []
    assert len(closest_names("get", [f"get_{i}" for i in range(10)], n=3)) == 3


def test_a_name_far_longer_than_any_tools_is_not_spelt_against_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A name of thousands of characters (a model's direct call, an MCP client's) finds no
    near names without the spelling's comparison with each tool, which costs the product of
    the lengths: 16,000 characters over 500 tools held the event loop 5 s. The names a
    comparison could find are found as before."""
    import difflib

    compared: list[str] = []
    ratio = difflib.SequenceMatcher.ratio

    def counted(self: difflib.SequenceMatcher[str]) -> float:
        compared.append(self.b)
        return ratio(self)

    monkeypatch.setattr(difflib.SequenceMatcher, "ratio", counted)
    names = [f"server{i}__do_thing_number_{i}" for i in range(500)]
    engine = CodeMode([], runner=InProcessRunner(), type_check="off")
    said = engine.direct_call_error("ab_" * 5_000)
    assert said.startswith("there is no tool 'ab_ab_") and "closest" not in said
    assert closest_names("ab_" * 5_000, names) == [] and compared == []
    assert closest_names("server7__do_thing_numbr_7", names)[0] == "server7__do_thing_number_7"
    assert "server7__do_thing_number_7" in compared


# --- MCP -----------------------------------------------------------------------------------


def test_from_mcp_reads_the_mcp_shape() -> None:
    """name, description, inputSchema and outputSchema are read; annotations ignored."""
    definition = {
        "name": "list-prs",
        "title": "List PRs",
        "description": "List pull requests.",
        "inputSchema": {"type": "object", "properties": {"repo": {"type": "string"}}},
        "outputSchema": {"type": "array"},
        "annotations": {"readOnlyHint": True},
    }
    t = Tool.from_mcp(definition, lambda repo: [repo], source="github")
    assert t.name == "github__list_prs" and t.original_name == "list-prs"
    assert t.output_schema == {"type": "array"}
    assert call(t, {"repo": "a/b"}) == ["a/b"]
    assert t.definition()["name"] == "github__list_prs"
    with pytest.raises(ToolDefinitionError, match='has no "inputSchema"'):
        Tool.from_mcp({"name": "x"})
    with pytest.raises(ToolDefinitionError, match='non-empty string "name"'):
        Tool.from_mcp({"inputSchema": {"type": "object"}})


def test_load_mcp_tools_from_a_list_or_a_tools_list_result() -> None:
    """A tools/list result or a plain list loads; handlers are matched by original name; a
    bad entry is reported with its index."""
    defs = [
        {"name": "a-b", "inputSchema": {"type": "object"}},
        {"name": "a.b", "inputSchema": {"type": "object"}},
    ]
    tools = load_mcp_tools({"tools": defs}, handlers={"a-b": lambda: "ab"})
    assert len({t.name for t in tools}) == 2
    assert call(tools[0], {}) == "ab"
    assert [t.name for t in load_mcp_tools(defs[:1], source="srv")] == ["srv__a_b"]
    with pytest.raises(ToolDefinitionError, match=r"tools\[1\]: tool 'bad'"):
        load_mcp_tools([defs[0], {"name": "bad", "inputSchema": {"type": "array"}}])
    with pytest.raises(ToolDefinitionError, match="are a list"):
        load_mcp_tools({"not_tools": []})


def test_bad_flags_are_refused() -> None:
    """A timeout must be a positive number of seconds (True, which is 1 to Python, was one
    second); a description must be text."""
    for timeout in (0, -1, math.inf, "5", True):
        with pytest.raises(ToolDefinitionError, match="timeout"):
            Tool("t", timeout=timeout)  # type: ignore[arg-type]
    with pytest.raises(ToolDefinitionError, match="non-empty name"):
        Tool("  ")


def test_a_description_that_is_not_unicode_text_is_refused() -> None:
    """A lone surrogate (JSON's "\\ud800", which Python's json decodes) cannot be encoded, so
    every declaration holding it failed with a UnicodeEncodeError, long after the tool was
    built; it is refused when the tool is, as in a schema."""
    with pytest.raises(ToolDefinitionError, match=r"description.*surrogate"):
        Tool("t", description="Lists \ud800 things")
    definition = json.loads('{"name": "t", "description": "x \\ud83d", "inputSchema": {}}')
    with pytest.raises(ToolDefinitionError, match=r"description.*surrogate"):
        Tool.from_mcp(definition)


def test_a_name_or_source_that_is_not_unicode_text_is_refused() -> None:
    """A name with a lone surrogate (from JSON's "\\ud800") raised UnicodeEncodeError from
    Tool(...) once the name was long enough to be cut with a hash, and two such names that
    sanitize alike ("\\ud800x", "\\ud801x": both x) were refused as if they were one name
    ("give each tool its own name"); each is refused when its tool is built, naming it."""
    with pytest.raises(ToolDefinitionError, match=r"its name is not Unicode text.*character 70"):
        Tool("x" * 70 + "\ud800")
    definitions = json.loads(
        '[{"name": "\\ud800x", "inputSchema": {}}, {"name": "\\ud801x", "inputSchema": {}}]'
    )
    with pytest.raises(ToolDefinitionError, match=r"tools\[0\]: .* its name is not Unicode"):
        load_mcp_tools(definitions)
    with pytest.raises(ToolDefinitionError, match=r"its source is not Unicode text"):
        Tool("t", source="srv\udc80")
    # Named as every other problem of a tool is: with its source (the name's check said
    # "tool ..." alone, a copy of the description's check beside it).
    with pytest.raises(ToolDefinitionError, match=r"^tool '\\ud800x' from 'srv': its name is not"):
        Tool("\ud800x", source="srv")
    with pytest.raises(ToolDefinitionError, match=r"^tool 't' from 'srv': its description is"):
        Tool("t", source="srv", description="\ud800")


class _Recorded(BaseModel):
    """A model that records the thread that dumps it."""

    n: int
    threads: Any = Field(default=None, exclude=True)

    @field_serializer("n")
    def _record(self, n: int) -> int:
        self.threads.append(threading.current_thread())
        return n


def test_a_sync_handlers_result_is_converted_in_its_tool_thread() -> None:
    """Converting and checking a result is Python work proportional to its size (a result of
    two million small objects: 11 s), so a sync handler's result is converted in the tool
    thread that ran it; on the event loop it held every other script's calls and leases."""
    threads: list[threading.Thread] = []

    def handler() -> Any:
        return [_Recorded(n=1, threads=threads)]

    t = Tool("big", handler=handler, output_schema={"type": "array"})
    assert call(t, {}) == [{"n": 1}]
    assert threads and threads[0] is not threading.main_thread()

    def failing() -> Any:
        return {"n": math.nan}  # converting it fails, in the thread: the call's error

    assert "the number nan at n" in call_error(Tool("bad", handler=failing), {})


def test_an_async_handlers_big_result_is_converted_off_the_event_loop() -> None:
    """An async handler (every MCP tool's) runs on the event loop, and its result was
    converted there too, however big: a result of 300,000 small objects held every other
    script's calls and leases for about 2.5 s. Past INLINE_RESULT_ITEMS items it is converted
    in a thread; a small one still is on the loop, which costs no thread's hop."""
    threads: list[threading.Thread] = []

    async def big() -> Any:
        return {
            "rows": [{"i": i} for i in range(INLINE_RESULT_ITEMS)],
            "m": _Recorded(n=1, threads=threads),
        }

    result = call(Tool("big", handler=big), {})
    assert len(result["rows"]) == INLINE_RESULT_ITEMS and result["m"] == {"n": 1}
    assert threads and threads[0] is not threading.main_thread()

    threads.clear()

    async def small() -> Any:
        return [_Recorded(n=2, threads=threads)]

    assert call(Tool("small", handler=small), {}) == [{"n": 2}]
    assert threads == [threading.main_thread()]

    async def failing() -> Any:
        return [{"n": 1}] * INLINE_RESULT_ITEMS + [{"n": math.nan}]

    assert f"the number nan at [{INLINE_RESULT_ITEMS}].n" in call_error(
        Tool("bad", handler=failing), {}
    )


def test_holds_at_most_counts_items_and_stops_past_the_bound() -> None:
    assert holds_at_most({"a": 1, "b": [1, 2, 3]}, 5)
    assert not holds_at_most({"a": 1, "b": [1, 2, 3]}, 4)
    assert holds_at_most("x" * 10_000_000, 0)  # a string is one value, however long
    assert not holds_at_most([Point(1, 2)] * 3, 8)  # an object's attributes count
    assert holds_at_most([Point(1, 2)] * 3, 9)
    loop: list[Any] = []
    loop.append(loop)
    assert not holds_at_most(loop, 1_000)  # a cycle ends the walk at the bound

    class Odd(dict[str, int]):
        def values(self) -> Any:
            raise RuntimeError("no")

    # Counted by what it holds, as its conversion reads it, whatever its methods say.
    assert holds_at_most([Odd(a=1)], 2)
    assert not holds_at_most([Odd(a=1, b=2)], 2)

    @dataclasses.dataclass
    class Unread:
        x: int

        def __getattribute__(self, name: str) -> Any:  # says odd things of itself
            if name == "x":
                raise RuntimeError("no")
            return object.__getattribute__(self, name)

    assert not holds_at_most([Unread(1)], 1_000)  # its conversion, in a thread, says what


def test_a_type_defined_after_its_function_is_named_as_the_problem() -> None:
    """A module-level class defined after the function @tool decorates is not there yet when
    @tool resolves the annotations; the message said to define it "at module level", where
    it already was. It says to define it before the function."""
    source = (
        "from __future__ import annotations\n"
        "from engine import tool\n"
        "@tool\n"
        "def f(x: Later) -> int:\n"
        "    return 1\n"
        "class Later:\n"
        "    pass\n"
    )
    with pytest.raises(ToolDefinitionError) as info:
        exec(compile(source, "later.py", "exec"), {"__name__": "later"})
    assert "name 'Later' is not defined" in str(info.value)
    assert "before the function" in str(info.value)


class NanRatio(BaseModel):
    value: float


async def test_nan_and_infinity_in_a_typed_result_are_refused_not_nulled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A handler annotated to return a dict, a list or a model with a float field, that
    returns NaN or infinity: refused as not JSON data, as an unannotated one is (pydantic's
    dump wrote null, and the script read null for a number without a word)."""

    @tool
    def ratios() -> dict[str, float]:
        """Ratios."""
        return {"spring": 0.25, "summer": math.inf}

    @tool
    def listed() -> list[float]:
        """Listed."""
        return [1.0, math.nan]

    @tool
    def model() -> NanRatio:
        """A model."""
        return NanRatio(value=math.nan)

    engine = CodeMode([ratios, listed, model], runner=InProcessRunner(), type_check="off")
    try:
        for name, said in (
            ("ratios", "Infinity at summer"),
            ("listed", "NaN at [1]"),
            ("model", "NaN at value"),
        ):
            code = f"try {{ return await tools.{name}() }} catch (e) {{ return e.message }}"
            result = await engine.run_code(code)
            assert result.value == f"tools.{name} returned the number {said}" + NOT_PASSED_ON
            assert warned(caplog).endswith("JSON has no NaN or infinity; the call failed")
    finally:
        await engine.aclose()


def test_a_class_is_not_a_tool() -> None:
    """@tool on a class: refused, naming it (it said a parameter had no annotation, or made
    a tool declared as "Call self as a function.")."""

    class Weather:
        """The weather in a city."""

        def __init__(self, city: str) -> None:
            self.city = city

    with pytest.raises(ToolDefinitionError, match="the class Weather is not a tool"):
        tool(Weather)


async def test_a_handler_raising_stop_iteration_fails_its_call() -> None:
    """A sync handler whose next() found nothing raises StopIteration, which asyncio cannot
    put on the future the call waits on: the call waited for ever. It fails, saying so."""

    @tool
    def find(id: int) -> dict[str, int]:
        """Find a user."""
        return next(u for u in [{"id": 1}] if u["id"] == id)

    engine = CodeMode([find], runner=InProcessRunner(), type_check="off", call_timeout=30)
    try:
        code = "try { return await tools.find({ id: 2 }) } catch (e) { return e.message }"
        result = await asyncio.wait_for(engine.run_code(code), 20)
        assert result.value == (
            "tools.find failed: its handler raised StopIteration (a next() that found nothing?)"
        )
    finally:
        await engine.aclose()


async def test_an_async_handler_that_ignores_its_timeout_is_left_at_it() -> None:
    """An async handler that catches the cancellation at its timeout: the call stops waiting
    at the timeout and fails as timed out (it ran on to its end, 16 times its timeout, and
    its late result was taken as the answer)."""

    @tool(timeout=0.3)
    async def stubborn() -> str:
        """Ignores cancellation."""
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(3)
        return "done"

    engine = CodeMode([stubborn], runner=InProcessRunner(), type_check="off")
    try:
        began = time.monotonic()
        code = "try { return await tools.stubborn() } catch (e) { return e.message }"
        result = await engine.run_code(code)
        assert time.monotonic() - began < 2.5
        assert result.value.startswith("tools.stubborn timed out after 0.3 s"), result.value
    finally:
        await engine.aclose()


class _Swallower:
    """A handler that catches every cancellation and goes on until the test lets it end;
    ``calls`` counts how many times it ran."""

    def __init__(self) -> None:
        self.let_go = asyncio.Event()
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        while not self.let_go.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await self.let_go.wait()
        return "late"


@pytest.mark.parametrize("kind", ["async def", "async __call__", "returns a coroutine"])
async def test_a_handler_that_swallows_its_cancellation_is_left_to_itself(
    kind: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler that catches CancelledError and goes on: the call ends at its timeout with
    the usual error, the host's log says once which tool's handler runs on, and aclose does
    not wait for it. An object's async __call__, or a coroutine a sync function returned, was
    awaited without a task of its own: run_code waited for it for ever, and so did aclose."""
    monkeypatch.setattr(engine_tools, "STOP_GRACE", 0.05)
    swallower = _Swallower()

    async def as_function() -> str:
        return await swallower()

    handler: Any = {
        "async def": as_function,
        "async __call__": swallower,
        "returns a coroutine": lambda: swallower(),
    }[kind]
    engine = CodeMode(
        [Tool("stubborn", handler=handler, timeout=0.2)], runner=InProcessRunner(), type_check="off"
    )
    code = "try { return await tools.stubborn() } catch (e) { return e.message }"
    try:
        with caplog.at_level(logging.WARNING, logger="codemode"):
            # The bound only keeps a hang from holding the suite: no timing is asserted.
            result = await asyncio.wait_for(engine.run_code(code), 30)
            assert result.value == (
                "tools.stubborn timed out after 0.2 s and was stopped, so it may or may not "
                "have taken effect; check before calling it again"
            )
            await asyncio.wait_for(engine.aclose(), 30)
            for _ in range(600):
                if any("tools.stubborn" in r.getMessage() for r in caplog.records):
                    break
                await asyncio.sleep(0.05)
            swallower.let_go.set()
            await asyncio.sleep(0.1)  # its end, which says nothing more
        said = [r.getMessage() for r in caplog.records if "tools.stubborn" in r.getMessage()]
        assert said == [
            "tools.stubborn: its handler still runs 0.05 s after its call was given up and "
            "cancelled it (it catches asyncio.CancelledError, or cleans up slowly); nothing "
            "waits for it, and what it does is not the call's result; let CancelledError through"
        ]
        assert swallower.calls == 1
    finally:
        swallower.let_go.set()
        await engine.aclose()


async def test_a_handler_that_ends_as_its_call_is_given_up_is_not_said_to_run_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A handler that honours the cancellation, or catches it and returns at once: only the
    second is logged, as one that went on."""

    async def honours() -> None:
        await asyncio.sleep(30)

    async def returns() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return "late"
        return "on time"

    with caplog.at_level(logging.WARNING, logger="codemode"):
        for handler in (honours, returns):
            t = Tool(handler.__name__, handler=handler, timeout=0.1)
            with pytest.raises(ToolCallError, match=r"timed out after 0\.1 s and was stopped"):
                await t.invoke({}, CTX)
        await asyncio.sleep(0.1)  # the handlers' ends
    assert [r.getMessage() for r in caplog.records] == [
        "tools.returns: its handler went on after its call was given up and cancelled it, and "
        "returned (it catches asyncio.CancelledError); nothing waits for it, and what it does "
        "is not the call's result; let CancelledError through"
    ]


def test_an_mcp_tool_whose_input_schema_is_null_is_refused() -> None:
    """`"inputSchema": null` is no object schema: it was read as "takes nothing", and every
    call with arguments refused."""
    with pytest.raises(
        ToolDefinitionError, match='"inputSchema" is a null; MCP requires an object'
    ):
        load_mcp_tools([{"name": "search", "inputSchema": None}])


def test_a_schema_holding_nan_or_nesting_past_the_bound_says_so() -> None:
    """NaN or infinity in a schema (a default, a maximum): refused, naming the number (orjson
    wrote null: a NaN default was declared as null, and a NaN maximum was reported as
    "null is not of type number"). A schema nested 1,000 levels says it nests too deep (it
    said it was not JSON data)."""
    with pytest.raises(ToolDefinitionError, match="it holds the number nan, which JSON has not"):

        @tool
        def scale(x: float, factor: float = math.nan) -> float:
            """Scale."""
            return x * factor

    with pytest.raises(ToolDefinitionError, match="it holds the number inf"):
        Tool(
            "t",
            input_schema={"type": "object", "properties": {"x": {"maximum": math.inf}}},
            handler=lambda x: x,
        )
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(1000):
        node["a"] = {}
        node = node["a"]
    with pytest.raises(ToolDefinitionError, match="nests deeper than"):
        Tool("t", input_schema={"type": "object", "properties": deep}, handler=lambda: 1)


@pytest.mark.parametrize(
    "flag", ["needs_approval", "client", "deferred", "read_only", "idempotent", "sequential"]
)
def test_a_tools_flags_are_true_or_false(flag: str) -> None:
    """A flag given as anything but a bool is refused, not taken for its truth: read_only=
    "false" (a TOML or env string) would have let a call with effects run again."""
    with pytest.raises(ToolDefinitionError, match=f"{flag} is True or False, not 'false'"):
        Tool("t", **{flag: "false"})
    with pytest.raises(ToolDefinitionError, match=f"{flag} is True or False, not 1"):
        Tool("t", **{flag: 1})


class InFlight:
    """Tools that note when each call starts and ends, as the tools themselves see it."""

    def __init__(self) -> None:
        self.running: set[int] = set()
        self.seen: list[tuple[str, int, frozenset[int]]] = []  # (start|end, n, running then)

    async def __call__(self, n: int) -> int:
        self.seen.append(("start", n, frozenset(self.running)))
        self.running.add(n)
        for _ in range(3):  # a turn of the loop for every other call that runs beside it
            await asyncio.sleep(0)
        self.running.discard(n)
        self.seen.append(("end", n, frozenset(self.running)))
        return n

    def tools(self) -> list[Tool]:
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        return [
            Tool("read", input_schema=schema, handler=self),
            Tool("write", input_schema=schema, handler=self, sequential=True),
        ]


# Calls 3 and 6 are the sequential tool's.
TOGETHER = """
const calls = [["read", 1], ["read", 2], ["write", 3], ["read", 4], ["read", 5], ["write", 6]];
return await Promise.all(calls.map(([name, n]) => tools[name]({ n })));
"""
TURNS = [
    {
        ("start", 1, frozenset()),
        ("start", 2, frozenset({1})),
        ("end", 1, frozenset({2})),
        ("end", 2, frozenset()),
    },
    {("start", 3, frozenset()), ("end", 3, frozenset())},
    {
        ("start", 4, frozenset()),
        ("start", 5, frozenset({4})),
        ("end", 4, frozenset({5})),
        ("end", 5, frozenset()),
    },
    {("start", 6, frozenset()), ("end", 6, frozenset())},
]


def in_turns(seen: list[tuple[str, int, frozenset[int]]]) -> list[set[Any]]:
    """What the tools saw, cut where no call ran."""
    turns: list[set[Any]] = [set()]
    for event in seen:
        turns[-1].add(event)
        if event[0] == "end" and not event[2]:
            turns.append(set())
    return turns[:-1]


@pytest.mark.parametrize("live", [True, False], ids=["live", "replay"])
async def test_a_sequential_tools_call_runs_alone(tmp_path: Any, live: bool) -> None:
    """A call of a sequential tool runs while no other call of its script runs: of calls
    made together (Promise.all), those before it end first and those after it start once it
    ended, while the others still run together, as pydantic-ai runs a batch with a
    sequential tool (all ran at once: the flag did not exist, and pydantic-ai's was
    dropped)."""
    flight = InFlight()
    runner = InProcessRunner()
    engine = CodeMode(flight.tools(), runner=runner, data_dir=tmp_path, live=live, type_check="off")
    try:
        result = await engine.run_code(TOGETHER)
    finally:
        await engine.aclose()
    assert (result.status, result.value) == ("finished", [1, 2, 3, 4, 5, 6])
    assert in_turns(flight.seen) == TURNS
    assert (runner.segments > 0) == live


async def test_a_call_waiting_its_turn_when_the_host_stops_runs_on_the_next(
    tmp_path: Any,
) -> None:
    """A call whose turn had not come when its host stopped never ran, so the next host
    runs it, where a call that was running is found interrupted (claimed with it, it would
    be found interrupted too: "may or may not have taken effect")."""
    began = asyncio.Event()

    async def stop_here(n: int) -> int:
        began.set()
        await asyncio.sleep(3600)  # the host stops meanwhile
        return n

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    before, after = InFlight(), InFlight()
    first = CodeMode(
        [Tool("read", input_schema=schema, handler=stop_here), before.tools()[1]],
        runner=InProcessRunner(),
        data_dir=tmp_path,
        type_check="off",
    )
    code = """
    const calls = await Promise.allSettled([tools.read({ n: 1 }), tools.write({ n: 2 })]);
    return calls.map((c) => c.value ?? c.reason.message.split(":")[0]);
    """
    running = asyncio.ensure_future(first.run_code(code, key="k"))
    await began.wait()
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running
    await first.aclose()
    second = CodeMode(after.tools(), runner=InProcessRunner(), data_dir=tmp_path, type_check="off")
    try:
        result = await second.run_code(code, key="k")
    finally:
        await second.aclose()
    assert result.value == ["tools.read was interrupted", 2], result.text
    assert before.seen == []
    assert [(e, n) for e, n, _ in after.seen] == [("start", 2), ("end", 2)]


async def test_a_hold_that_lands_before_a_sequential_calls_turn_keeps_it_in(
    tmp_path: Any,
) -> None:
    """A hold that lands while the calls before a sequential tool's run: its call does not
    go out (it waits its turn, so it had not), and runs once the script is released."""
    flight = InFlight()

    async def read_and_hold(n: int, ctx: ToolContext[None]) -> int:
        await engine.hold(ctx.script_id)
        return await flight(n)

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    tools = [Tool("read", input_schema=schema, handler=read_and_hold), flight.tools()[1]]
    engine = CodeMode(tools, runner=InProcessRunner(), data_dir=tmp_path, type_check="off")
    code = "return await Promise.all([tools.read({ n: 1 }), tools.write({ n: 2 })])"
    try:
        paused = await engine.run_code(code)
        assert paused.status == "paused" and "held" in paused.text, paused.text
        assert [(e, n) for e, n, _ in flight.seen] == [("start", 1), ("end", 1)]
        await engine.release(paused.script_id)
        result = await engine.resume(paused.script_id)
    finally:
        await engine.aclose()
    assert result.value == [1, 2], result.text
    assert [(e, n) for e, n, _ in flight.seen][2:] == [("start", 2), ("end", 2)]


def test_a_client_tool_cannot_be_sequential() -> None:
    """The client runs a client tool's calls, when it will: no flag of the engine's orders
    them."""
    with pytest.raises(ToolDefinitionError, match="drop sequential=True or client=True"):
        Tool("pick", client=True, sequential=True)
    assert repr(Tool("w", handler=lambda: 1, sequential=True)) == "Tool('w', sequential=True)"


def test_mcp_tools_refuse_a_bad_source_or_handlers() -> None:
    """load_mcp_tools(source=5) or handlers given as a list say what they take, instead of
    a TypeError or AttributeError from inside."""
    tools = [{"name": "t", "inputSchema": {"type": "object"}}]
    with pytest.raises(ToolDefinitionError, match=r"source \(.*\) is a non-empty string or None"):
        load_mcp_tools(tools, source=5)  # type: ignore[arg-type]
    with pytest.raises(ToolDefinitionError, match=r"source \(.*\) .* not ''"):
        load_mcp_tools(tools, source="")
    with pytest.raises(ToolDefinitionError, match=r"handlers maps .* \(a dict\), not an array"):
        load_mcp_tools(tools, handlers=[print])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("language", "code", "numbers"),
    [
        (
            "javascript",
            "for (const name of ['nan', 'inf', 'ninf']) {\n"
            "  try { await tools[name]({}); } catch (e) { console.log(e.message); }\n"
            "}",
            ("NaN", "Infinity at x[1]", "-Infinity at x"),
        ),
        (
            "python",
            "for name in ['nan', 'inf', 'ninf']:\n"
            "    try:\n"
            "        await getattr(tools, name)()\n"
            "    except ToolError as e:\n"
            "        print(e)",
            ("nan", "inf at x[1]", "-inf at x"),
        ),
    ],
)
async def test_a_number_json_has_not_is_written_as_the_scripts_language_writes_it(
    inproc: InProcessRunner, language: str, code: str, numbers: tuple[str, ...]
) -> None:
    """A tool's result that holds NaN or an infinity is refused naming the number as the
    calling script writes it: a JavaScript script was told "tools.nan returned the number
    nan", Python's spelling, which JavaScript has not (its are NaN and Infinity)."""
    tools = [
        Tool("nan", handler=lambda: math.nan),
        Tool("inf", handler=lambda: {"x": [1, math.inf]}),
        Tool("ninf", handler=lambda: {"x": -math.inf}),
    ]
    engine = CodeMode(tools, runner=inproc, type_check="off")
    try:
        result = await engine.run_code(code, language=language)  # type: ignore[arg-type]
    finally:
        await engine.aclose()
    lines = [
        f"tools.{name} returned the number {number}{NOT_PASSED_ON}"
        for name, number in zip(("nan", "inf", "ninf"), numbers, strict=True)
    ]
    assert result.status == "finished", result.text
    for line in lines:
        assert line in result.text, result.text
