"""Tools: what a script can call, how each is declared, checked and run.

A :class:`Tool` has a JavaScript-safe name, a description, an input schema (and maybe an
output schema) and a handler the host runs. It is built one of three ways:

- ``@tool`` on a typed Python function: the name, description and schemas come from the
  function, and a parameter annotated :class:`ToolContext` is filled by the host, never by
  the model;
- ``Tool.from_mcp(definition, handler)`` from an MCP tool definition (``load_mcp_tools`` for a
  whole ``tools/list`` answer);
- ``Tool(name, input_schema=..., handler=...)`` directly.

``@tool`` lives in ``engine._functions``. Schemas are checked and compiled when the tool is
built (see ``engine._schema``), so a bad schema fails when the host declares the tool, not
when the model first calls it.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import hashlib
import inspect
import io
import logging
import math
import re
import typing
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Generic, Protocol, TypeVar, get_args, get_origin

import jsonschema_rs
import orjson
from pydantic import TypeAdapter
from pydantic_core import PydanticSerializationError

from engine._errors import ToolCallError, ToolDefinitionError
from engine._mcp import Answer, wrap_handler
from engine._naming import sanitize_name, unique_names
from engine._schema import (
    NotJSONData,
    SchemaProblem,
    a_json_type,
    check_keys_apart,
    check_schema,
    compile_schema,
    cycle_at,
    holds_at_most,
    to_json_data,
    validation_problems,
)
from engine._tool_threads import Ticket, ToolThreads, shared_threads, timed_out
from runner import within
from sandbox.protocol import data_path, size_text

T = TypeVar("T")
logger = logging.getLogger("codemode")

# A handler's error message longer than this reaches the model cut in the middle.
MAX_ERROR_MESSAGE = 8 * 1024
# A result holding more items than this is converted and checked in a thread, not on the
# event loop: a few milliseconds of work at most on the loop (a thread's hop costs ~0.1 ms).
INLINE_RESULT_ITEMS = 2_000


@dataclass(frozen=True)
class ToolContext(Generic[T]):
    """What the host supplies to a handler at each call; never part of the input schema.

    ``host`` is whatever object the host passed to the engine (its user, its connections);
    the rest says which call this is. A handler takes it by declaring a parameter annotated
    ``ToolContext`` or ``ToolContext[MyHost]``.
    """

    host: T
    tenant: str
    script_id: str
    call_id: str
    call_index: int


class ArgumentBinder(Protocol):
    """Turns checked arguments into a handler's keyword arguments (``@tool`` supplies one)."""

    def bind(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments; raises :class:`ToolCallError` when they do not convert."""
        ...


_EMPTY_INPUT: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


class Tool:
    """One tool a script can call as ``tools.<name>(input)``.

    ``name`` is the JavaScript identifier the script uses (see :func:`sanitize_name`);
    ``original_name`` is the name it was declared with, which the host's handler or MCP server
    knows it by. ``handler`` takes the arguments as keyword arguments, plus the
    :class:`ToolContext` under the parameter annotated with it, and may be sync or async. A
    tool without a handler can be declared and searched, and fails when called; a ``client``
    tool is run by the client and takes none. ``deferred`` tools are left out of ``run_code``'s
    declarations and found with ``tool_search``. ``timeout`` (seconds) bounds one call.

    What a call does to the world: ``read_only`` (it changes nothing) and ``idempotent`` (a
    repeat has no effect beyond the first). A call of either kind that a crash interrupted
    simply runs again; any other call that was running when its host died may or may not have
    taken effect, so it is never run again: the script sees it as interrupted.

    ``sequential``: no call of it runs while another call of the same script runs, as
    pydantic-ai's ``sequential=True``: of the calls a script made together (a
    ``Promise.all``), those made before it end first, and those made after it start once it
    ended; the calls between two such run together. A call given up at its timeout, whose
    handler runs on, counts no more.

    Raises :class:`ToolDefinitionError` for a schema that is not a usable JSON Schema, an input
    schema that is not an object, or a bad flag.
    """

    __slots__ = (
        "_answering",
        "_arguments",
        "_context_param",
        "_handler",
        "_in_thread",
        "_input_validator",
        "_keys_made_text",
        "_output_validator",
        "_renames",
        "_result_adapter",
        "client",
        "deferred",
        "description",
        "idempotent",
        "input_schema",
        "name",
        "needs_approval",
        "original_name",
        "output_schema",
        "read_only",
        "sequential",
        "source",
        "timeout",
    )

    def __init__(
        self,
        name: str,
        *,
        description: str = "",
        input_schema: Mapping[str, Any] | None = None,
        output_schema: Mapping[str, Any] | None = None,
        handler: Callable[..., Any] | None = None,
        needs_approval: bool = False,
        client: bool = False,
        deferred: bool = False,
        timeout: float | None = None,
        source: str | None = None,
        read_only: bool = False,
        idempotent: bool = False,
        sequential: bool = False,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ToolDefinitionError(f"a tool needs a non-empty name, not {name!r}")
        if source is not None and (not isinstance(source, str) or not source.strip()):
            raise ToolDefinitionError(
                f"tool {name!r}: source (the name its tools are called by, <source>__<name>) "
                f"is a non-empty string or None, not {source!r}"
            )
        flags = {
            "needs_approval": needs_approval,
            "client": client,
            "deferred": deferred,
            "read_only": read_only,
            "idempotent": idempotent,
            "sequential": sequential,
        }
        for flag, given in flags.items():
            # Not truthiness: read_only="false" would let a call with effects run again.
            if not isinstance(given, bool):
                raise ToolDefinitionError(f"tool {name!r}: {flag} is True or False, not {given!r}")
        label = f"tool {name!r}" + (f" from {source!r}" if source else "")
        if not isinstance(description, str):
            raise ToolDefinitionError(f"{label}: its description must be a string")
        for what, text in (("name", name), ("source", source), ("description", description)):
            try:
                if text is not None:
                    text.encode("utf-8")
            except UnicodeEncodeError as e:
                # Hashed to rename the tool (a long name, or one that sanitizes as another
                # does), a name or source raised UnicodeEncodeError, or "give each tool its own
                # name"; a description no declaration could hold (orjson refuses it, as it
                # does a schema's strings).
                raise ToolDefinitionError(
                    f"{label}: its {what} is not Unicode text (a lone surrogate at character "
                    f"{e.start}); fix the {what}"
                ) from None
        self._renames: dict[str, Tool] = {}  # see renamed
        self.original_name = name
        self.source = source
        self.name = sanitize_name(name, source)
        self.description = description.strip()
        schema = _EMPTY_INPUT if input_schema is None else input_schema
        self._input_validator = _compile(label, "input schema", schema, must_be_object=True)
        # A copy, so a host that mutates its dict later cannot change what was checked.
        self.input_schema: dict[str, Any] = copy.deepcopy(dict(schema))
        self.output_schema: dict[str, Any] | None = None
        self._output_validator: jsonschema_rs.Validator | None = None
        if output_schema is not None:
            self._output_validator = _compile(
                label, "output schema", output_schema, must_be_object=False
            )
            self.output_schema = copy.deepcopy(dict(output_schema))
        if timeout is not None and (
            isinstance(timeout, bool)  # True is 1 to Python: a flag's value, not seconds
            or not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0)
        ):
            raise ToolDefinitionError(
                f"{label}: timeout must be a positive number of seconds or None, not {timeout!r}"
            )
        if client and handler is not None:
            raise ToolDefinitionError(
                f"{label}: a client tool is run by the client, so it takes no handler; "
                "drop the handler or client=True"
            )
        if client and sequential:
            raise ToolDefinitionError(
                f"{label}: a client tool is run by the client, which the engine cannot keep "
                "from running it beside other calls; drop sequential=True or client=True"
            )
        if handler is not None and not callable(handler):
            raise ToolDefinitionError(f"{label}: its handler {handler!r} is not callable")
        self.handler = handler
        self.needs_approval = bool(needs_approval)
        self.client = bool(client)
        self.deferred = bool(deferred)
        self.read_only = bool(read_only)
        self.idempotent = bool(idempotent) or self.read_only
        self.sequential = sequential
        self.timeout = float(timeout) if timeout is not None else None
        # Set by @tool (engine._functions): how arguments become the function's parameters,
        # and how its result is dumped through its return annotation.
        self._arguments: ArgumentBinder | None = None
        self._result_adapter: TypeAdapter[Any] | None = None
        # Whether that dump may make a key that is not text into text (see keys_made_text).
        self._keys_made_text = False
        self._context_param = _context_parameter(label, handler) if handler else None
        properties = self.input_schema.get("properties")
        if isinstance(properties, dict) and self._context_param in properties:
            raise ToolDefinitionError(
                f"{label}: the handler's context parameter {self._context_param!r} is "
                "also an input property; rename the parameter"
            )

    @property
    def summary(self) -> str:
        """The first line of the description (what ``run_code`` declares)."""
        return self.description.split("\n", 1)[0].strip()

    @property
    def handler(self) -> Callable[..., Any] | None:
        return self._handler

    @handler.setter
    def handler(self, handler: Callable[..., Any] | None) -> None:
        self._handler = handler
        # Set by engine.mcp for an upstream server's tool (engine._mcp.answering): what the
        # engine calls in place of the handler, whose results say the server answered them.
        # A handler the host sets is its own: its results are checked as a host tool's.
        self._answering: Callable[..., Any] | None = None
        # Known once, not at each call: an object's async __call__ (@tool takes callable
        # objects) is an async handler too.
        self._in_thread = not (
            handler is None
            or inspect.iscoroutinefunction(handler)
            or inspect.iscoroutinefunction(type(handler).__call__)
        )

    @property
    def in_thread(self) -> bool:
        """Whether the handler runs in a tool thread (a sync function), which nothing can
        stop once it began: cancelling the call only stops waiting for it."""
        return self._in_thread

    def renamed(self, name: str) -> Tool:
        """A copy of this tool that the script calls by ``name`` (already a valid name); the
        same copy each time for the same name."""
        # The same object, so that what is kept by tool (a search index's entries) is kept
        # for it when the tools change (an MCP server's): a fresh copy each time had the
        # words of 5,000 renamed tools found again for each change.
        clone = self._renames.get(name)
        if clone is None:
            clone = copy.copy(self)
            clone.name = name
            clone._renames = {}  # its own, not the copied reference to this tool's
            self._renames[name] = clone
        return clone

    def definition(self) -> dict[str, Any]:
        """The tool in MCP shape, under the name the script calls it by."""
        result: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
        }
        if self.output_schema is not None:
            result["outputSchema"] = self.output_schema
        return result

    def __repr__(self) -> str:
        flags = [
            flag
            for flag, on in (
                ("needs_approval", self.needs_approval),
                ("client", self.client),
                ("deferred", self.deferred),
                ("read_only", self.read_only),
                ("idempotent", self.idempotent and not self.read_only),
                ("sequential", self.sequential),
            )
            if on
        ]
        extra = "".join(f", {f}=True" for f in flags)
        if self.timeout is not None:
            extra += f", timeout={self.timeout:g}"
        if self.name != self.original_name:
            extra = f", original_name={self.original_name!r}{extra}"
        return f"Tool({self.name!r}{extra})"

    @classmethod
    def from_mcp(
        cls,
        definition: Mapping[str, Any],
        handler: Callable[..., Any] | None = None,
        *,
        source: str | None = None,
        needs_approval: bool = False,
        client: bool = False,
        deferred: bool = False,
        timeout: float | None = None,
        sequential: bool = False,
    ) -> Tool:
        """A tool from an MCP tool definition: ``name``, ``description``, ``inputSchema`` and
        optionally ``outputSchema`` and ``annotations``, of which ``readOnlyHint`` and
        ``idempotentHint`` say the tool is read-only or idempotent (``title`` and the rest are
        ignored).

        ``source`` (the server's name) makes the script call it ``<source>__<name>``.
        """
        if not isinstance(definition, Mapping):
            raise ToolDefinitionError(
                f"an MCP tool definition is an object, not {a_json_type(definition)}"
            )
        name = definition.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ToolDefinitionError(
                f'an MCP tool definition needs a non-empty string "name", not {name!r}'
            )
        if "inputSchema" not in definition:
            raise ToolDefinitionError(
                f'MCP tool {name!r} has no "inputSchema"; MCP requires one (an object schema)'
            )
        input_schema = definition["inputSchema"]
        if not isinstance(input_schema, Mapping):
            # null would be read as "takes nothing", refusing every call with arguments.
            raise ToolDefinitionError(
                f'MCP tool {name!r}: its "inputSchema" is {a_json_type(input_schema)}; MCP '
                "requires an object schema"
            )
        input_schema = typed_input(input_schema)
        description = definition.get("description") or ""
        if not isinstance(description, str):
            raise ToolDefinitionError(f'MCP tool {name!r}: "description" must be a string')
        hints = definition.get("annotations") or {}
        if not isinstance(hints, Mapping):
            raise ToolDefinitionError(f'MCP tool {name!r}: "annotations" must be an object')
        if handler is not None and callable(handler):
            # MCP answers are CallToolResults or text: the script gets them parsed. The
            # source is the host's name for its tools, no MCP server (engine.mcp names its
            # servers): an error with no text was said to be the server 'crm''s.
            handler = wrap_handler(handler, tool=name)
        return cls(
            name,
            description=description,
            input_schema=input_schema,
            output_schema=definition.get("outputSchema"),
            handler=handler,
            needs_approval=needs_approval,
            client=client,
            deferred=deferred,
            timeout=timeout,
            source=source,
            read_only=hints.get("readOnlyHint") is True,
            idempotent=hints.get("idempotentHint") is True,
            sequential=sequential,
        )

    async def invoke(
        self,
        arguments: Mapping[str, Any],
        ctx: ToolContext[Any],
        *,
        threads: ToolThreads | None = None,
        default_timeout: float | None = None,
        ticket: Ticket | None = None,
        room: int | None = None,
        language: str = "python",
    ) -> Any:
        """Run one call: check the arguments, run the handler, return its result as JSON data.

        A sync handler runs in one of ``threads`` (the engine's; by default a pool shared by
        tools invoked outside an engine), admitted fairly by ``ctx.tenant`` and
        ``ctx.script_id``, under ``ticket`` if given (whose ``state`` then says whether its
        thread began). The call is bounded by the tool's ``timeout``, else by
        ``default_timeout``, which the result's conversion counts against too. ``room`` is the
        most bytes of JSON a result may take (the script's ``results`` budget): one that holds
        more items than that fails before it is converted (see :meth:`checked`).

        Raises :class:`ToolCallError` with a message for the model when the arguments do not
        fit the input schema (naming the path and what was expected), when the handler raises
        (its message) or passes its timeout (saying whether it may still take effect), when
        the tool has no handler here, and when the result is not JSON data, is past ``room``
        or does not fit the output schema. A message that names a value writes it as a script in
        ``language`` (the calling script's; a host's own call reads Python's) does.
        """
        if not isinstance(arguments, Mapping):
            raise self._error(f"tools.{self.name} takes an object, not {a_json_type(arguments)}")
        arguments = dict(arguments)
        try:
            problems = validation_problems(self._input_validator, arguments)
        except UnicodeEncodeError:
            problems = "text with a lone surrogate, which JSON cannot carry"
        if problems:
            raise self._error(f"tools.{self.name}: invalid arguments: {problems}")
        if self.handler is None:
            where = "the client" if self.client else "no handler on this host"
            raise self._error(f"tools.{self.name} is run by {where}; it cannot be called here")
        kwargs = self._arguments.bind(self.name, arguments) if self._arguments else arguments
        if self._context_param:
            kwargs[self._context_param] = ctx
        timeout = self.timeout if self.timeout is not None else default_timeout
        return await self._run(
            kwargs, ctx, threads or shared_threads(), timeout, ticket, room, language
        )

    async def checked(self, result: Any, room: int | None = None, language: str = "python") -> Any:
        """``result`` as JSON data, checked against the output schema; raises
        :class:`ToolCallError` saying what is wrong, as :meth:`invoke` does. An upstream MCP
        server's answer (``engine._mcp.Answer``) is checked as its value, and one that breaks
        the output schema is said to be the server's to fix.

        A result of more than ``INLINE_RESULT_ITEMS`` items is converted in a thread: that is
        Python work in proportion to its size (300,000 small objects: about 2.5 s), which on
        the event loop would hold every other script's calls and leases (a sync handler's
        result is converted in the tool thread that ran it). Its items are counted first, up
        to half of ``room`` (each takes two bytes of JSON at least): the conversion copies an
        object for every place it stands, so a result small in memory can be without bound as
        JSON (an object holding one other twice, forty deep: 2**40 copies). A generator (any
        iterator) is read in the thread too, up to ``room``: its length is unknown until read.
        ``language`` is as :meth:`invoke`'s.
        """
        value = result.value if isinstance(result, Answer) else result
        if not _streamed(value) and holds_at_most(value, INLINE_RESULT_ITEMS):
            return self._check_result(result, None, language)
        return await asyncio.to_thread(self._check_result, result, room, language)

    def with_required_nulls(self, arguments: Any) -> Any:
        """``arguments`` with null for each required property they leave out that the input
        schema lets be null. A Python script's None is an argument left out (its sandbox
        cannot tell None from nothing), so for a required argument that takes null (``x: int
        | None`` with no default) it meant null. Anything else is returned as it is."""
        required = self.input_schema.get("required")
        if not isinstance(arguments, Mapping) or not isinstance(required, list):
            return arguments
        missing = [k for k in required if isinstance(k, str) and k not in arguments]
        if not missing:
            return arguments
        filled = {**arguments, **dict.fromkeys(missing)}
        # The schema decides which take null: a property whose null it refuses stays missing.
        refused = {
            e.instance_path[0]
            for e in self._input_validator.iter_errors(filled)
            if e.instance_path and e.instance_path[0] in missing
        }
        return {k: v for k, v in filled.items() if k not in refused}

    async def _run(
        self,
        kwargs: dict[str, Any],
        ctx: ToolContext[Any],
        threads: ToolThreads,
        timeout: float | None,
        given: Ticket | None = None,
        room: int | None = None,
        language: str = "python",
    ) -> Any:
        handler = self._answering or self.handler
        assert handler is not None
        ticket: Ticket | None = None
        in_thread = False  # the handler runs in a tool thread now, not on the event loop
        returned: list[bool] = []  # once the handler returned: its result is being converted
        # A host stopped meanwhile (SIGSTOP, a paused virtual machine) stopped the handler
        # too: the stall is not charged to a call in a tool thread (see Within). A handler on
        # the event loop is timed by the loop's clock alone: one that blocks the loop (a
        # blocking library, CPU work between awaits) runs its timer late as a stopped host
        # does, and Within would start its deadline again each time, for ever.
        scope = within(timeout) if self.in_thread else asyncio.timeout(timeout)
        try:
            async with scope:
                if not self.in_thread:
                    loop = asyncio.get_running_loop()
                    deadline = _DEADLINE.set(None if timeout is None else loop.time() + timeout)
                    try:
                        result = await _stoppable(handler(**kwargs), self.name)
                    finally:
                        _DEADLINE.reset(deadline)
                else:
                    # A sync handler runs in a tool thread, so it cannot stall the event loop
                    # nor, however slow, starve other scripts' calls (see engine._tool_threads).
                    # On timeout the thread runs on (Python cannot stop it); its result is
                    # dropped.
                    ticket = given or Ticket(ctx.tenant, ctx.script_id)
                    in_thread = True
                    result = await threads.call(
                        ticket,
                        self._run_and_check,
                        {"args": kwargs, "room": room, "returned": returned, "language": language},
                    )
                    in_thread = False
                if isinstance(result, _Checked):
                    return result.data
                if inspect.isawaitable(result):  # a sync function that returned a coroutine
                    ticket = None  # which runs on the event loop: stopped as an async handler
                    result = await _stoppable(result, self.name)
                returned.append(True)
                return await self.checked(result, room, language)
        except TimeoutError as e:
            if scope.expired():
                if returned:
                    raise self._error(
                        f"tools.{self.name} timed out after {timeout or 0.0:g} s converting "
                        "its result to JSON data: its handler had returned, so the call took "
                        "effect, but its result is lost; have the tool return less"
                    ) from None
                raise self._error(timed_out(self.name, timeout or 0.0, ticket, threads)) from None
            raise self._error(_call_message(e)) from e
        except ToolCallError as e:
            raise self._error(e.message or f"tools.{self.name} failed") from e
        except Exception as e:
            stop = e.__cause__
            if isinstance(e, RuntimeError) and isinstance(stop, StopIteration):
                # A coroutine that raised StopIteration: Python made it "coroutine raised
                # StopIteration", which said neither which tool nor why.
                raise self._error(self._stopped(stop)) from e
            raise self._error(_call_message(e)) from e
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this call is cancelled (its script's drive ends)
            # Nobody cancelled this call: the handler's own (a future it awaited was).
            raise self._error(f"tools.{self.name} failed: it was cancelled") from None
        except BaseException as e:
            # On the event loop's thread, these stop the process, as asyncio has them do. What
            # a handler raises in a tool thread cannot: a signal reaches the main thread only,
            # and sys.exit() there ends the thread. It is the call's failure, not the host's.
            if isinstance(e, KeyboardInterrupt | SystemExit) and not in_thread:
                raise
            raise self._error(f"tools.{self.name} failed: {described(e)}") from e

    def _run_and_check(
        self, args: dict[str, Any], room: int | None, returned: list[bool], language: str
    ) -> Any:
        # In the tool thread: the handler, then its result converted and checked there too.
        # That is Python work in proportion to the result's size (two million small objects:
        # 11 s), which on the event loop would hold every other script's calls and leases.
        handler = self._answering or self.handler
        assert handler is not None
        try:
            result = handler(**args)
        except StopIteration as e:
            # asyncio cannot set a StopIteration on the future the thread answers through:
            # the call waited for ever (a `next(...)` that found nothing).
            raise ToolCallError(self._stopped(e)) from None
        if inspect.isawaitable(result):
            return result
        returned.append(True)
        return _Checked(self._check_result(result, room, language))

    def _stopped(self, e: StopIteration) -> str:
        said = f" ({e})" if str(e) else ""
        return (
            f"tools.{self.name} failed: its handler raised StopIteration{said} (a next() that "
            "found nothing?)"
        )

    def _check_result(self, result: Any, room: int | None = None, language: str = "python") -> Any:
        answer = result if isinstance(result, Answer) else None  # an upstream server's
        if answer is not None:
            result = answer.value
        if _streamed(result):
            result = self._read_out(result, room)
        # Every item takes two bytes of JSON at least (itself and a comma or a bracket).
        if room is not None and not holds_at_most(result, room // 2):
            cycle = cycle_at(result, room // 2)
            if cycle is not None:
                # Counted, a cycle is endless: it read as too many items, not as what it is.
                raise self._defect(
                    f"returned a cycle at {data_path(cycle)}: it refers back to an object that "
                    "holds it, which JSON cannot carry",
                    "; have the tool return a copy without that reference",
                )
            raise self._error(
                f"tools.{self.name} returned more than {room // 2:,} items, which take more than "
                f"the {size_text(room)} of results a script may read (an object "
                "that stands in several places counts in each); have the tool return less "
                "(a page, a summary)"
            )
        data: Any = _MISSING
        if self._result_adapter is not None:
            try:
                data = self._result_adapter.dump_python(
                    result, mode="json", by_alias=True, warnings="error"
                )
            except (PydanticSerializationError, ValueError, TypeError):
                data = _MISSING  # the generic conversion below says what is wrong
        try:
            if self._keys_made_text and data is not _MISSING:
                check_keys_apart(result)  # {1: "a", "1": "b"} dumped as {"1": "b"}
            data = to_json_data(result if data is _MISSING else data)
        except NotJSONData as e:
            raise self._defect(
                f"returned {e.what}, which is not JSON data",
                e.hint,
                told=f"returned {e.what_in(language)}, which is not JSON data",
            ) from None
        if self._output_validator is not None:
            try:
                problems = validation_problems(self._output_validator, data)
            except UnicodeEncodeError:  # the validator takes no lone surrogate, nor does JSON
                raise self._defect(
                    "returned text with a lone surrogate, which JSON cannot carry",
                    "; the tool must return JSON data (text without lone surrogates)",
                ) from None
            if problems:
                if answer is not None:  # a server's answer: no defect of the host's tool
                    raise self._error(answer.mismatch(problems))
                raise self._defect(
                    f"returned a result that does not match its output schema: {problems}",
                    "; have the tool return what its output schema says, or correct the schema",
                )
        return data

    def _defect(self, what: str, advice: str, *, told: str | None = None) -> ToolCallError:
        """The error of a call whose result the tool's own defect keeps from the script:
        ``what`` it returned and why it cannot pass (``told``, if given, as the script's
        language names it). What to do about it (``advice``) is for the tool's author, who
        reads the host's log, warned here; the script can only be told its call failed
        through no fault of its own."""
        logger.warning("tools.%s %s%s; the call failed", self.name, what, advice)
        return self._error(
            f"tools.{self.name} {told or what}, so its result could not be passed on: a defect "
            "of the tool on the host's side, not of the script"
        )

    def unencodable(self, error: Exception) -> ToolCallError:
        """The error of a call whose result JSON's encoder refused (``error``): a defect of the
        tool, as :meth:`_defect` says it."""
        what = f"returned a result JSON cannot carry ({error})"
        return self._defect(what, "; " + UNSENDABLE_ADVICE)

    def _read_out(self, items: Iterator[Any], room: int | None) -> list[Any]:
        # A generator's items, read up to what the script may read: each takes two bytes of
        # JSON at least, and a string its length. Read whole, an endless one (a `while True:
        # yield`, itertools.count()) took the host's memory until it died, past the call's
        # timeout (on the event loop, for an async handler's, holding every other script).
        read: list[Any] = []
        size = 0
        for item in items:
            read.append(item)
            size += 2 + (len(item) if isinstance(item, str) else 0)
            if room is not None and size > room:
                raise self._error(
                    f"tools.{self.name} returned a generator that yields more than the "
                    f"{size_text(room)} of results a script may read; have the tool yield "
                    "less (a page, a summary)"
                )
        return read

    def _error(self, message: str) -> ToolCallError:
        if len(message) > MAX_ERROR_MESSAGE:
            half = MAX_ERROR_MESSAGE // 2
            message = f"{message[:half]} [...] {message[-half:]}"
        return ToolCallError(message, tool=self.name)


_MISSING = object()


def _streamed(result: Any) -> bool:
    """True for a result that is an iterator (a generator, ``map(...)``), which JSON reads as
    the list of its items; not for a file, which a tool returns by mistake (it is refused as
    not JSON data)."""
    return isinstance(result, Iterator) and not isinstance(result, io.IOBase)


def typed_input(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """An MCP tool's input schema, an object's when it names no type: real servers send {}
    (or properties without a type) for "takes any object", and MCP arguments are always an
    object, so that is what the tool is declared to take."""
    return schema if "type" in schema else {"type": "object", **schema}


# What a tool whose result JSON's encoder refused must do instead.
UNSENDABLE_ADVICE = (
    "the tool must return JSON data (integers within 64 bits, text without lone surrogates)"
)


def unsendable(name: str, error: Exception) -> str:
    """What the script reads when a result of ``tools.<name>`` that is JSON data to Python is
    refused by JSON's encoder (``error``, orjson's: an integer past 64 bits, a lone
    surrogate)."""
    return (
        f"tools.{name} returned a result that cannot be sent to the script ({error}); "
        + UNSENDABLE_ADVICE
    )


@dataclass(frozen=True)
class _Checked:
    """A result already converted and checked (in the tool thread that ran its handler)."""

    data: Any


# Python's own exceptions whose message says what went wrong by itself: a handler raises
# them on purpose ("no such sku"). Any other of Python's is a bug's, whose message alone may
# say nothing ("2" for a KeyError): the model is told its type too.
SAID_ON_PURPOSE = (Exception, ValueError, RuntimeError)


def _call_message(e: BaseException) -> str:
    """What the model reads of a handler's exception: its message, with its type first for
    one of Python's own that a handler hardly raises on purpose (``KeyError: 2``,
    ``AttributeError: 'NoneType' object has no attribute 'id'``)."""
    kind = type(e)
    # (An exception group's own text says what it is, and what it holds.)
    bug = kind.__module__ == "builtins" and kind not in SAID_ON_PURPOSE
    if bug and not issubclass(kind, BaseExceptionGroup):
        return described(e)
    return _message_of(e)


def _message_of(e: BaseException) -> str:
    """The exception's message, or its type's name when it has none (or its ``__str__``
    itself fails: the host's exception, whatever it does, says something). An exception
    group's says what it holds, as a Python script's own does ("... (2 sub-exceptions):
    ValueError: no 1; ValueError: no 2"): its text alone only counts them, and a handler
    that uses a task group (anyio's, the MCP SDK's) fails with one."""
    try:
        # As plain text: its __str__ may give a str subclass whose own methods say anything.
        text = str.strip(str.__str__(str(e)))
    except Exception:
        text = ""
    text = text or type(e).__name__
    if isinstance(e, BaseExceptionGroup):
        leaves = exception_leaves(e)
        shown = "; ".join(described(leaf) for leaf in leaves[:GROUP_SHOWN])
        if shown:
            text += f": {shown}"
            if len(leaves) >= GROUP_LEAVES:
                text += "; and more"
            elif len(leaves) > GROUP_SHOWN:
                text += f"; and {len(leaves) - GROUP_SHOWN} more"
    return text


# The errors of an exception group a call's message names; how many leaves are looked for.
GROUP_SHOWN = 3
GROUP_LEAVES = 100


def exception_leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    """The exceptions in ``group`` that are not groups, depth first, at most
    :data:`GROUP_LEAVES` of them (a host's group may nest deep or hold thousands)."""
    leaves: list[BaseException] = []
    stack: list[Iterator[BaseException]] = [iter(group.exceptions)]
    while stack and len(leaves) < GROUP_LEAVES:
        e = next(stack[-1], None)
        if e is None:
            stack.pop()
        elif isinstance(e, BaseExceptionGroup):
            if len(stack) < GROUP_LEAVES:
                stack.append(iter(e.exceptions))
        else:
            leaves.append(e)
    return leaves


def described(e: BaseException) -> str:
    """``Type: message`` (``SystemExit: 3``), for an exception whose message alone says little."""
    text = _message_of(e)
    name = type(e).__name__
    return text if text == name else f"{name}: {text}"


def _compile(
    label: str, what: str, schema: Any, *, must_be_object: bool
) -> jsonschema_rs.Validator:
    try:
        check_schema(schema, must_be_object=must_be_object)
        return compile_schema(dict(schema))
    except SchemaProblem as e:
        raise ToolDefinitionError(f"{label}: its {what} is not usable: {e}") from None


# --- the host's context parameter ---------------------------------------------------------


def is_context_annotation(annotation: Any) -> bool:
    """True for ``ToolContext``, ``ToolContext[X]`` (maybe ``Annotated``), or such a string."""
    if isinstance(annotation, str):
        return bool(re.fullmatch(r"(?:\w+\.)*ToolContext(?:\[.*\])?", annotation.strip()))
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation is ToolContext or get_origin(annotation) is ToolContext


def mentions_context(annotation: Any, depth: int = 0) -> bool:
    """True when ``ToolContext`` appears anywhere in the annotation, as in ``list[ToolContext]``."""
    if depth > 20:
        return False
    if is_context_annotation(annotation):
        return True
    return any(mentions_context(arg, depth + 1) for arg in get_args(annotation))


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:
        # Unresolvable forward references; fall back to the raw annotations, in which a
        # context parameter is still recognised by its spelling.
        return dict(getattr(fn, "__annotations__", {}) or {})


def _context_parameter(label: str, handler: Callable[..., Any]) -> str | None:
    try:
        params = inspect.signature(handler).parameters.values()
    except (TypeError, ValueError):
        return None
    hints = _hints(handler)
    found = [p.name for p in params if is_context_annotation(hints.get(p.name, p.annotation))]
    if len(found) > 1:
        raise ToolDefinitionError(
            f"{label}: its handler takes {len(found)} ToolContext parameters "
            f"({', '.join(found)}); take one"
        )
    return found[0] if found else None


# --- many tools ----------------------------------------------------------------------------


def unique_tools(tools: Iterable[Tool], before: Iterable[Tool] = ()) -> list[Tool]:
    """The tools with names made unique: a name two tools share after sanitizing gets a stable
    hash suffix on each tool whose original name differs from it, and a tool named like a
    built-in (``run_code``, ``tool_search``, ``skill``) is renamed the same way. A tool of
    ``before`` (the tools the model was shown) keeps its name; a newcomer that collides with
    it is renamed instead.

    Raises :class:`ToolDefinitionError` for two tools with the same original name and source.
    """
    items = list(tools)
    kept = {(t.original_name, t.source): t.name for t in before}
    try:
        names = unique_names(((t.original_name, t.source) for t in items), kept=kept)
    except ValueError as e:
        raise ToolDefinitionError(f"{e}; give each tool its own name") from None
    return [t if t.name == n else t.renamed(n) for t, n in zip(items, names, strict=True)]


def load_mcp_tools(
    data: Mapping[str, Any] | Sequence[Any],
    *,
    source: str | None = None,
    handlers: Mapping[str, Callable[..., Any]] | None = None,
    deferred: bool = False,
) -> list[Tool]:
    """Tools from MCP definitions: a ``tools/list`` result (``{"tools": [...]}``) or a list.

    ``handlers`` maps an original tool name to its handler; ``source`` prefixes every name.
    Names are made unique as :func:`unique_tools` does.
    """
    if isinstance(data, Mapping):
        if "tools" not in data:
            raise ToolDefinitionError(
                'MCP tool definitions are a list, or an object with the list under "tools"'
            )
        data = data["tools"]
    if isinstance(data, str | bytes) or not isinstance(data, Sequence):
        raise ToolDefinitionError(f"MCP tool definitions are a list, not {a_json_type(data)}")
    if handlers is not None and not isinstance(handlers, Mapping):
        raise ToolDefinitionError(
            f"handlers maps each tool's name to its handler (a dict), not {a_json_type(handlers)}"
        )
    handlers = handlers or {}
    tools = []
    for index, definition in enumerate(data):
        try:
            name = definition.get("name") if isinstance(definition, Mapping) else None
            tools.append(
                Tool.from_mcp(
                    definition,
                    handlers.get(name) if isinstance(name, str) else None,
                    source=source,
                    deferred=deferred,
                )
            )
        except ToolDefinitionError as e:
            raise ToolDefinitionError(f"tools[{index}]: {e}") from None
    return unique_tools(tools)


def tool_fingerprint(tools: Iterable[Tool]) -> dict[str, str]:
    """Each tool's name and a digest of its input schema: kept with a script, so the log says
    which tools it started with."""
    return {
        t.name: "sha256:"
        + hashlib.sha256(orjson.dumps(t.input_schema, option=orjson.OPT_SORT_KEYS)).hexdigest()
        for t in tools
    }


# A handler cancelled (at its timeout, or as its drive ends) that still runs this many
# seconds later caught the cancellation: the host's log is told.
STOP_GRACE = 5.0


# The loop's time at which the tool call an async handler runs for is given up (None:
# unbounded); set around the handler's start, so its task sees it (see call_deadline).
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "tool_call_deadline", default=None
)


def call_deadline() -> float | None:
    """The event loop's time at which the tool call an async handler serves is given up
    (its timeout), or None when no timeout bounds it; None outside a tool's handler."""
    return _DEADLINE.get()


async def _stoppable(handler: Awaitable[Any], name: str) -> Any:
    """Await an async handler (of ``tools.<name>``) as a task of its own: cancelled (its
    timeout, its drive's end), the call stops waiting at once and the handler is asked to
    stop. One that catches the cancellation runs on unawaited, as a sync handler's thread
    does, and what it returns is dropped (it held its call to the end, and its late result
    counted as an answer); the host's log says so once, when it ends so or is still running
    :data:`STOP_GRACE` seconds later. Nothing waits for it (``aclose`` neither)."""
    task = asyncio.ensure_future(handler)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            task.cancel()
            _Abandoned(task, name)
        elif not task.cancelled():
            task.exception()  # retrieved: it ended just as its call was given up
        raise


class _Abandoned:
    """A cancelled handler's task, watched until it ends or has had :data:`STOP_GRACE`."""

    def __init__(self, task: asyncio.Future[Any], name: str) -> None:
        self.name = name
        self.said = False
        self.timer = asyncio.get_running_loop().call_later(STOP_GRACE, self.still, task)
        task.add_done_callback(self.ended)

    def still(self, task: asyncio.Future[Any]) -> None:
        if not task.done():
            self.say(
                f"still runs {STOP_GRACE:g} s after its call was given up and cancelled it",
                "it catches asyncio.CancelledError, or cleans up slowly",
            )

    def ended(self, task: asyncio.Future[Any]) -> None:
        self.timer.cancel()
        if task.cancelled():
            return
        # Retrieved, so asyncio does not log it again: nobody awaits it any more.
        raised = task.exception()
        ended = "raised" if raised is not None else "returned"
        self.say(
            f"went on after its call was given up and cancelled it, and {ended}",
            "it catches asyncio.CancelledError",
        )

    def say(self, what: str, why: str) -> None:
        if not self.said:
            self.said = True
            logger.warning(
                "tools.%s: its handler %s (%s); nothing waits for it, and what it does is not "
                "the call's result; let CancelledError through",
                self.name,
                what,
                why,
            )
