"""``@tool``: a :class:`Tool` from a typed Python function.

The name is the function's, the description its docstring, the input schema pydantic's schema
of its parameters and the output schema pydantic's schema of its return annotation. At each
call the arguments, already checked against the schema, are validated into the annotated
types (so a nested model arrives as an instance) and the result is dumped through the return
annotation (so a ``datetime`` becomes its ISO string).
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar, get_args, get_origin, overload

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    create_model,
)
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema

from engine._argument_keys import Check as KeyCheck
from engine._argument_keys import key_check, keys_made_text
from engine._schema import json_adapter
from engine._tools import (
    Tool,
    ToolCallError,
    ToolDefinitionError,
    is_context_annotation,
    mentions_context,
)

F = TypeVar("F", bound=Callable[..., Any])


class _NoFieldTitles(GenerateJsonSchema):
    # A field's title only repeats its name; leaving it out keeps declarations short.
    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


_SCHEMA_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties"})
_DATA = frozenset({"default", "enum", "const", "examples"})  # values, not schemas


def _drop_titles(schema: Any) -> Any:
    """The schema without ``title`` keywords (a property *named* title stays)."""
    if isinstance(schema, list):
        return [_drop_titles(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key in _DATA:
            result[key] = value
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            result[key] = {k: _drop_titles(v) for k, v in value.items()}
        else:
            result[key] = _drop_titles(value)
    return result


@dataclass(frozen=True)
class _Arguments:
    """The pydantic model of a function's parameters, and which field is which parameter.

    Fields have neutral names (``p0``, ``p1``) with the parameter names as aliases, so a
    parameter called ``json`` or ``model_config`` cannot clash with pydantic's own names.
    """

    model: type[BaseModel]
    fields: tuple[tuple[str, str], ...]  # (field name, parameter name)
    # Where keys that pydantic would make one are looked for, for the few tools whose
    # parameters hold dicts with keys other than text (none for the rest: nothing is walked).
    keys: KeyCheck | None = None

    def bind(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        if self.keys is not None:
            # {"1": .., "01": ..} for a dict[int, str]: pydantic keeps the last, silently.
            made_one = self.keys(arguments, [])
            if made_one is not None:
                raise ToolCallError(f"tools.{tool}: invalid arguments: {made_one}", tool=tool)
        try:
            instance = self.model.model_validate(arguments)
        except ValidationError as e:
            first = e.errors(include_url=False)[:3]
            text = "; ".join(
                f"at {'.'.join(str(p) for p in err['loc']) or '(the top level)'}: {_said(err)}"
                for err in first
            )
            raise ToolCallError(f"tools.{tool}: invalid arguments: {text}", tool=tool) from None
        return {param: getattr(instance, field) for field, param in self.fields}


def _said(error: Any) -> str:
    """A pydantic error's message, in the script's terms where pydantic's mislead: a number
    past 64 bits was "Unable to parse input string as an integer" (the script passed no
    string)."""
    if error["type"] == "int_parsing_size" and isinstance(error.get("input"), float):
        return f"expected an integer within 64 bits, got {error['input']:g}"
    return str(error["msg"])


_GOOGLE_HEADER = re.compile(
    r"(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments)\s*:\s*\Z"
)
_GOOGLE_ENTRY = re.compile(r"\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)\Z")
_NUMPY_ENTRY = re.compile(r"(\w+)\s*(?::.*)?\Z")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a docstring into the description and the parameter descriptions.

    Understands a Google-style ``Args:`` section and a NumPy-style ``Parameters`` section
    (underlined with dashes); the section is taken out of the description, and everything
    else (``Returns:``, examples) stays. Descriptions are joined into single lines.
    """
    lines = inspect.cleandoc(doc).splitlines() if doc else []
    for i, line in enumerate(lines):
        stripped = line.strip()
        numpy = stripped == "Parameters" and _underline(lines, i + 1)
        if not (numpy or _GOOGLE_HEADER.match(stripped)):
            continue
        indent = len(line) - len(line.lstrip())
        start = i + (2 if numpy else 1)
        end = start
        while end < len(lines):
            text = lines[end]
            if text.strip() and len(text) - len(text.lstrip()) <= indent and not numpy:
                break
            # A NumPy section ends at the next underlined header.
            if numpy and text.strip() and _underline(lines, end + 1):
                break
            end += 1
        params = _parse_entries(lines[start:end], numpy)
        rest = [*lines[:i], *lines[end:]]
        return "\n".join(rest).strip(), params
    return "\n".join(lines).strip(), {}


def _underline(lines: list[str], index: int) -> bool:
    text = lines[index].strip() if index < len(lines) else ""
    return len(text) > 2 and set(text) == {"-"}


def _parse_entries(lines: list[str], numpy: bool) -> dict[str, str]:
    params: dict[str, list[str]] = {}
    entry_indent: int | None = None
    current: str | None = None
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if entry_indent is None:
            entry_indent = indent
        if indent <= entry_indent:
            match = (_NUMPY_ENTRY if numpy else _GOOGLE_ENTRY).match(line.strip())
            if match:
                current = match.group(1)
                first = "" if numpy else match.group(2)
                params[current] = [first] if first else []
                continue
        if current is not None:
            params[current].append(line.strip())
    return {name: " ".join(parts).strip() for name, parts in params.items() if parts}


def _has_description(annotation: Any, default: Any) -> bool:
    if isinstance(default, FieldInfo) and default.description:
        return True
    if get_origin(annotation) is Annotated:
        return any(
            isinstance(meta, FieldInfo) and meta.description for meta in get_args(annotation)[1:]
        )
    return False


def _from_function(
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    needs_approval: bool,
    client: bool,
    deferred: bool,
    timeout: float | None,
    read_only: bool,
    idempotent: bool,
    sequential: bool,
) -> Tool:
    if name is not None and (not isinstance(name, str) or not name.strip()):
        # Not truthiness: name="" would quietly fall back to the function's own name.
        raise ToolDefinitionError(
            f"@tool: name is a non-empty string (or left out for the function's name), not {name!r}"
        )
    tool_name = name or getattr(fn, "__name__", "") or ""
    # A partial has no name of its own: the function it binds names it in messages.
    label = f"tool {tool_name or getattr(getattr(fn, 'func', None), '__name__', '')!r}"
    if not callable(fn):
        raise ToolDefinitionError(f"@tool decorates a function, not {fn!r}")
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise ToolDefinitionError(f"{label}: a generator cannot be a tool; return a list")
    if isinstance(fn, functools.partial):
        # Its signature keeps the arguments it binds, as parameters with defaults: the model
        # would be declared them, and could pass its own (another user's id, say).
        raise ToolDefinitionError(
            f"{label}: a functools.partial is not a tool: what it binds would still be "
            "arguments the model could pass; write a function that calls it, or take what "
            "the host supplies from a ToolContext parameter"
        )
    if isinstance(fn, type):
        # Its __call__ is type's: the "tool" would make instances, declared as taking its
        # __init__'s parameters badly, or as "Call self as a function."
        raise ToolDefinitionError(
            f"{label}: the class {fn.__name__} is not a tool; decorate a function (or a "
            "callable object) that uses it"
        )
    # A callable object's types are its __call__'s; its name must be given.
    typed = fn if inspect.isroutine(fn) else type(fn).__call__
    if not tool_name:
        raise ToolDefinitionError(
            f'@tool: {fn!r:.80} has no name; give one, as tool(name="lookup")(obj)'
        )
    try:
        hints = typing.get_type_hints(typed, include_extras=True)
    except Exception as e:
        raise ToolDefinitionError(
            f"{label}: its annotations cannot be resolved ({type(e).__name__}: {e}); define "
            "the types they name at module level, before the function (@tool reads them "
            "when it runs)"
        ) from None
    doc_description, param_docs = parse_docstring(inspect.getdoc(typed) or "")
    fields: dict[str, Any] = {}
    mapping: list[tuple[str, str]] = []
    context_param: str | None = None
    for index, param in enumerate(inspect.signature(fn).parameters.values()):
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            star = "*" if param.kind is param.VAR_POSITIONAL else "**"
            raise ToolDefinitionError(
                f"{label}: it takes {star}{param.name}; a tool's arguments are named, so "
                "declare each one as a parameter"
            )
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolDefinitionError(
                f"{label}: parameter {param.name!r} is positional-only; arguments are passed "
                "by name, so remove the '/'"
            )
        if param.name not in hints and param.name in ("self", "cls") and index == 0:
            # @tool on a method in its class body: the function, not yet bound.
            raise ToolDefinitionError(
                f"{label}: its first parameter is {param.name!r}: @tool was put on a method in "
                f"its class body; make the tool of the bound method instead, "
                f"tool(instance.{getattr(fn, '__name__', 'method')}) (or a @staticmethod)"
            )
        if param.name not in hints:
            raise ToolDefinitionError(
                f"{label}: parameter {param.name!r} has no type annotation; annotate it, so "
                "the model knows what to pass"
            )
        annotation = hints[param.name]
        if is_context_annotation(annotation):
            if context_param is not None:
                raise ToolDefinitionError(
                    f"{label}: it takes two ToolContext parameters ({context_param}, "
                    f"{param.name}); take one"
                )
            context_param = param.name
            continue
        if mentions_context(annotation):
            raise ToolDefinitionError(
                f"{label}: parameter {param.name!r} holds a ToolContext inside another type; "
                "the context must be a parameter of its own, or the model would be asked for it"
            )
        extra: dict[str, Any] = {"alias": param.name}
        doc = param_docs.get(param.name)
        if doc and not _has_description(annotation, param.default):
            extra["description"] = doc
        default = ... if param.default is param.empty else param.default
        field = f"p{index}"
        fields[field] = (Annotated[annotation, Field(**extra)], default)
        mapping.append((field, param.name))
    try:
        model = create_model(
            f"{tool_name}_arguments",
            __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=False),
            **fields,
        )
        schema = _drop_titles(
            model.model_json_schema(by_alias=True, schema_generator=_NoFieldTitles)
        )
    except Exception as e:
        raise ToolDefinitionError(
            f"{label}: its parameters have no JSON Schema ({_why(e)}); use JSON-friendly types "
            "such as str, int, float, bool, list, dict, Literal, enums, dataclasses or pydantic "
            "models"
        ) from None
    schema.setdefault("properties", {})
    output_schema, adapter = _result_schema(label, hints.get("return", inspect.Signature.empty))
    result = Tool(
        tool_name,
        description=description if description is not None else doc_description,
        input_schema=schema,
        output_schema=output_schema,
        # A client tool's function only declares it: the client runs the call.
        handler=None if client else fn,
        needs_approval=needs_approval,
        client=client,
        deferred=deferred,
        timeout=timeout,
        read_only=read_only,
        idempotent=idempotent,
        sequential=sequential,
    )
    result._arguments = _Arguments(model, tuple(mapping), key_check(model.__pydantic_core_schema__))
    result._result_adapter = adapter
    result._keys_made_text = adapter is not None and keys_made_text(adapter.core_schema)
    result._context_param = context_param
    return result


def _why(e: Exception) -> str:
    """Why pydantic made no schema: its error's type and first sentence ("Please use
    `typing_extensions.TypedDict` instead of `typing.TypedDict` on Python < 3.12."), which
    the type's name alone did not say. The sentences after it advise on pydantic's own
    settings (`arbitrary_types_allowed`), which are not the tool's to set."""
    lines = str(e).strip().splitlines()
    if not lines:
        return type(e).__name__
    first, stop, _ = lines[0].partition(". ")
    return f"{type(e).__name__}: {first}{stop.strip()}"


def _result_schema(
    label: str, annotation: Any
) -> tuple[dict[str, Any] | None, TypeAdapter[Any] | None]:
    if annotation is inspect.Signature.empty or annotation is Any:
        return None, None
    try:
        adapter: TypeAdapter[Any] = json_adapter(annotation)
        schema = adapter.json_schema(mode="serialization", schema_generator=_NoFieldTitles)
    except Exception as e:
        raise ToolDefinitionError(
            f"{label}: its return annotation {annotation!r} has no JSON Schema "
            f"({_why(e)}); return JSON-friendly types, or annotate it Any"
        ) from None
    title = schema.get("title")
    schema = _drop_titles(schema)
    if isinstance(title, str) and schema.get("type") == "object":
        # A model's name (pydantic's, a dataclass's, a TypedDict's): the declarations give
        # the result the type another tool's schema defines by that name (see Namer.declared).
        schema["title"] = title
    return schema, adapter


def check_tool_list(tools: object, *one: type) -> None:
    """Raise :class:`ToolDefinitionError` for one tool passed where a list of tools belongs:
    a :class:`Tool`, a function, a name, or an instance of ``one`` (a framework's tool)."""
    if isinstance(tools, (Tool, str, bytes, *one)) or (
        callable(tools) and not isinstance(tools, type)
    ):
        named = isinstance(tools, (Tool, *one))
        what = getattr(tools, "name" if named else "__name__", tools)
        raise ToolDefinitionError(f"tools is a list of tools; pass [{what}], not {what}")


def as_tools(tools: Iterable[Tool | Callable[..., Any]]) -> list[Tool]:
    """The engine's tools from what a host passes: each a :class:`Tool`, or a plain typed
    function, made a tool as ``@tool`` makes one. Raises :class:`ToolDefinitionError` for
    anything else, or for one tool passed where a list belongs."""
    check_tool_list(tools)
    result = []
    for item in tools:
        if isinstance(item, Tool):
            result.append(item)
        elif callable(item) and not isinstance(item, type):
            result.append(tool(item))
        else:
            raise ToolDefinitionError(
                f"{item!r} is not a tool: give a function (typed, with a docstring) or a Tool"
            )
    return result


@overload
def tool(fn: F, /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: bool = False,
    client: bool = False,
    deferred: bool = False,
    timeout: float | None = None,
    read_only: bool = False,
    idempotent: bool = False,
    sequential: bool = False,
) -> Callable[[F], Tool]: ...


def tool(
    fn: F | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: bool = False,
    client: bool = False,
    deferred: bool = False,
    timeout: float | None = None,
    read_only: bool = False,
    idempotent: bool = False,
    sequential: bool = False,
) -> Tool | Callable[[F], Tool]:
    """Make a :class:`Tool` of a typed function (sync or async), or of a callable object
    (typed by its ``__call__``, named with ``name=``); bare or with options. A
    ``functools.partial`` is refused: what it binds would stay arguments the model could pass.

    The name is the function's name; the description its docstring (first line the summary)
    without the ``Args:`` section, whose entries describe the parameters. The input schema is
    built by pydantic from the parameters (a description in ``Annotated[T, Field(...)]`` wins
    over the docstring's), and the output schema from the return annotation (none when it is
    missing or ``Any``). A parameter annotated ``ToolContext`` is left out of the schema and
    filled by the host at each call. At each call, the arguments are validated and converted
    into the annotated types (nested models become instances).

    ``client=True`` declares a tool the client runs (a file picker, a browser action): the
    function gives the name, description and schemas, and its body never runs on the host. A
    call pauses the script (``RunResult.waiting`` names it, reason ``client``) until the host
    hands the client's answer to :meth:`CodeMode.client_result`, checked against the output
    schema, and resumes.
    """

    def build(function: F) -> Tool:
        return _from_function(
            function,
            name=name,
            description=description,
            needs_approval=needs_approval,
            client=client,
            deferred=deferred,
            timeout=timeout,
            read_only=read_only,
            idempotent=idempotent,
            sequential=sequential,
        )

    return build(fn) if fn is not None else build
