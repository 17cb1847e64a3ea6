"""Code mode for a pydantic-ai agent (the ``pydantic-ai`` extra: ``pip install
codemode[pydantic-ai]``).

:class:`CodeModeToolset` is a pydantic-ai toolset with one tool, ``run_code``, over the
agent's own tools: plain functions or pydantic-ai ``Tool`` objects (``requires_approval=True``
becomes the engine's ``needs_approval``). The agent writes scripts that call them::

    tools = [list_prs, Tool(comment, requires_approval=True)]
    toolset = CodeModeToolset(tools, data_dir=".codemode")
    agent = Agent(model, toolsets=[toolset], output_type=[str, DeferredToolRequests])

A script that waits for a person is pydantic-ai's own approval request: the run ends with
``DeferredToolRequests`` whose ``approvals`` hold the ``run_code`` call, and whose
``metadata[tool_call_id]`` says what the script waits on (``script_id``, ``waiting``: each
``{call_id, name, arguments, reason}``). Answer as pydantic-ai does, with
``DeferredToolResults(approvals={tool_call_id: True})``: the tool approves what the script
waited on when the person was asked (never a call it asks for after those, which is a new
request) and runs it on. ``await toolset.answer(requests, approve=False, message=...)``
refuses them instead (the script sees an error it can handle, and the model sees the script's
result, not a bare denial); an approval given elsewhere (``codemode approve``, another host)
counts too. A bare denial (``approvals={tool_call_id: False}`` or ``ToolDenied(message)``)
never calls the tool, so the toolset finds it in the run's messages before the next model
request: it refuses what the script waits on with the denial's message (the script sees
that error, as with ``answer(approve=False)``) and every approval the script asks for after
it, and drives the script to its end in the log; the model sees pydantic-ai's denial, not
the script's result. ``run_code`` is idempotent on the model's tool-call id (within its
conversation, and its turn when the model gives an id again: see ``_key``), so the answer
may come in another process, on the same log, much later.

The tool returns the result's text; the files the script showed and the images it returned
come with it as pydantic-ai's ``BinaryContent``, so the model sees them in the tool's result:
images and PDFs, which every model pydantic-ai runs takes in a tool result (the text says
another, audio or video, was not attached).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import inspect
from collections.abc import Callable, Sequence
from typing import Any

try:
    from pydantic_ai import DeferredToolRequests, DeferredToolResults, RunContext
    from pydantic_ai import Tool as AgentTool
    from pydantic_ai._function_schema import takes_ctx as takes_run_context
    from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry, ToolFailed
    from pydantic_ai.messages import BinaryContent, ModelResponse, ToolCallPart, ToolReturnPart
    from pydantic_ai.toolsets import FunctionToolset
except ImportError as e:  # the extra is not installed: say which one installs it
    raise ImportError(
        f"engine.adapters.pydantic_ai needs pydantic-ai ({e}): pip install 'codemode[pydantic-ai]'"
    ) from None

from engine._codemode import ELSEWHERE_WAIT, CodeMode, _check_wait, _keepable
from engine._errors import (
    CallNotWaiting,
    CodeModeError,
    ConfigError,
    ToolCallError,
    ToolDefinitionError,
)
from engine._functions import as_tools, check_tool_list
from engine._functions import tool as engine_tool
from engine._result import RunResult
from engine._schema import script_argument
from engine._source import normalize
from engine._tools import Tool
from engine.adapters._formats import attachable, media_data, not_taken
from engine.log import AWAITING_APPROVAL, ENDED, ScriptRecord

RUN_CODE = "run_code"


def engine_tools(tools: Sequence[AgentTool[Any] | Callable[..., Any] | Tool]) -> list[Tool]:
    """The engine's tools for pydantic-ai tools and plain functions (same names, schemas and
    descriptions, from the functions' signatures and docstrings). A ``Tool``'s own
    ``name``, ``description``, ``requires_approval`` (``needs_approval``), ``timeout``,
    ``sequential`` and ``defer_loading`` (``deferred``) carry over; one with a ``prepare``
    or ``args_validator`` function, which no script's call could honour, is refused."""
    check_tool_list(tools, AgentTool)
    found: list[Tool] = []
    for t in tools:
        if isinstance(t, Tool):
            found.append(t)
        elif isinstance(t, AgentTool):
            if t.takes_ctx:
                raise _takes_run_context(t.name)
            for option in ("prepare", "args_validator"):
                if getattr(t, option, None) is not None:
                    # Silently dropped, a tool meant for some runs only, or a check the host
                    # counts on, would reach every script unchecked.
                    raise ToolDefinitionError(
                        f"tool {t.name!r} has {option}=..., which code mode cannot "
                        "apply (a script's calls are checked against the tool's schema only); "
                        "give the engine only the tools this agent may call, and check "
                        "arguments in the tool itself"
                    )
            # A description given to the Tool wins over the docstring's, as in pydantic-ai.
            given = t.description if t.description != t.function_schema.description else None
            make = engine_tool(
                name=t.name,
                description=given,
                needs_approval=bool(t.requires_approval),
                timeout=getattr(t, "timeout", None),
                deferred=bool(getattr(t, "defer_loading", False)),
                # Its calls must not overlap others: a script's Promise.all ran them at once.
                sequential=bool(getattr(t, "sequential", False)),
            )
            found.append(_pydantic_ai_errors(make(t.function)))
        else:
            if callable(t) and takes_run_context(t):  # as an agent's @agent.tool takes it
                raise _takes_run_context(getattr(t, "__name__", repr(t)))
            # as_tools names what is no tool (None, a class): @tool took None as its options.
            found.append(_pydantic_ai_errors(*as_tools([t])))
    return found


def _pydantic_ai_errors(made: Tool) -> Tool:
    """``made``, whose handler's pydantic-ai exceptions fail the call as the engine's
    :class:`ToolCallError`: ``ModelRetry`` or ``ToolFailed`` (pydantic-ai's way for a tool
    to tell the model what went wrong) with its message, which the script sees (it did, and
    the host's log got a traceback of an unexpected error); ``ApprovalRequired`` or
    ``CallDeferred`` (its way to ask for a person, or to be answered later) with what to do
    instead: no script's call can be deferred from inside the tool (the script read
    "Error: ApprovalRequired", and the host's log a traceback)."""
    handler = made.handler
    if handler is None:
        return made

    def failed(e: BaseException) -> ToolCallError:
        if isinstance(e, ModelRetry | ToolFailed):
            return ToolCallError(e.message, tool=made.name)
        return ToolCallError(
            f"tools.{made.name} raised pydantic-ai's {type(e).__name__}, which code mode "
            "cannot honour from inside a call; the host must declare the tool "
            "Tool(..., requires_approval=True) to have a person approve its calls",
            tool=made.name,
        )

    if inspect.iscoroutinefunction(handler):

        @functools.wraps(handler)
        async def deferring_async(*args: Any, **kwargs: Any) -> Any:
            try:
                return await handler(*args, **kwargs)
            except _RAISED as e:
                raise failed(e) from None

        made.handler = deferring_async
    else:

        @functools.wraps(handler)
        def deferring(*args: Any, **kwargs: Any) -> Any:
            try:
                return handler(*args, **kwargs)
            except _RAISED as e:
                raise failed(e) from None

        made.handler = deferring
    return made


_RAISED = (ApprovalRequired, CallDeferred, ModelRetry, ToolFailed)


def _takes_run_context(name: str) -> ToolDefinitionError:
    return ToolDefinitionError(
        f"tool {name!r} takes pydantic-ai's RunContext, which a script's call cannot give "
        "it; take engine.ToolContext instead (CodeMode(context=...) reaches it as ctx.host)"
    )


def _refuse_toolset_options(options: dict[str, Any]) -> None:
    """:class:`ConfigError` naming those of ``options`` that are pydantic-ai's options for a
    toolset's own tools and not :class:`CodeMode`'s (which ``CodeMode`` would refuse as an
    unknown keyword, saying nothing of why)."""
    toolset = set(inspect.signature(FunctionToolset.__init__).parameters)
    theirs = sorted(k for k in options if k in toolset and k not in _ENGINE_OPTIONS)
    if theirs:
        raise ConfigError(
            f"CodeModeToolset does not take pydantic-ai's toolset option "
            f"{', '.join(f'{k}=' for k in theirs)}: its one tool is run_code, and the agent's "
            "tools run in scripts (a Tool's own requires_approval, timeout and sequential "
            "carry over); of the toolset's options it takes id, max_retries, sequential and "
            "metadata, and the engine's (data_dir, limits, call_timeout, ...)"
        )


_ENGINE_OPTIONS = frozenset(inspect.signature(CodeMode.__init__).parameters)


class CodeModeToolset(FunctionToolset[Any]):
    """One ``run_code`` tool over ``tools``; ``engine_options`` go to :class:`CodeMode`
    (``data_dir``, ``store``, ``limits``, ``runner``, ...), or pass ``engine``.

    Of pydantic-ai's own toolset options, those that concern the one tool it gives go to
    its ``FunctionToolset``: ``id`` (a durable agent's toolsets need one), ``max_retries``
    (for the ``run_code`` arguments a model must send again), ``sequential`` (``run_code``
    runs alone, not beside the agent's other tool calls) and ``metadata``. Its others, about
    the tools it would run itself, are refused by name: the agent's tools run in scripts,
    with their own options (a ``Tool``'s carry over).

    ``wait`` (seconds) is how long a ``run_code`` call waits for the outcome of its script
    while another host drives it (a ``codemode worker`` that took it after an approval);
    only one driven still then is answered as running elsewhere."""

    def __init__(
        self,
        tools: Sequence[AgentTool[Any] | Callable[..., Any] | Tool] = (),
        *,
        engine: CodeMode | None = None,
        id: str | None = None,
        max_retries: int | None = None,
        sequential: bool = False,
        metadata: dict[str, Any] | None = None,
        wait: float = ELSEWHERE_WAIT,
        **engine_options: Any,
    ) -> None:
        _refuse_toolset_options(engine_options)
        _check_wait(wait)
        self.wait = wait
        if engine is not None and (tools or engine_options):
            given = ", ".join([*(["tools"] if tools else []), *engine_options])
            raise ConfigError(
                f"CodeModeToolset takes an engine or the tools and options to make one, not "
                f"both: {given} would be ignored beside engine=...; give them to that "
                "CodeMode, or leave engine out"
            )
        tools = engine.tools if engine is not None else engine_tools(tools)
        client = [t.name for t in tools if t.client]
        if client:
            # A script that called one would pause for an answer no pydantic-ai run can give
            # (only approvals re-run a tool), and the model would read "Script paused".
            raise ToolDefinitionError(
                f"client tools ({', '.join(client)}) are not supported through pydantic-ai: "
                "nothing in an agent run delivers their answers; run them on the host, or "
                "drive CodeMode yourself (client_result, resume)"
            )
        self.engine = engine if engine is not None else CodeMode(tools, **engine_options)
        definition = self.engine.definition()
        run_code = AgentTool.from_schema(
            self._run_code,
            name=RUN_CODE,
            description=definition["description"],
            json_schema=definition["input_schema"],
            takes_ctx=True,
        )
        super().__init__(
            [run_code], id=id, max_retries=max_retries, sequential=sequential, metadata=metadata
        )
        # The run_code calls (by conversation and call id, see _key) whose bare denial this
        # toolset has delivered (or found nothing to deliver to), so each is looked up in
        # the log once.
        self._denials_seen: set[str] = set()
        # For each run_code call (by its key in the log) whose script this toolset asked a
        # person about, the calls it named: an approval of that run_code call approves
        # those, never a later one.
        self._asked: dict[str, set[str]] = {}

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, Any]:
        # Called before each model request, with the messages so far: where a bare denial,
        # which pydantic-ai answers without calling the tool, first shows.
        await self._deliver_denials(ctx)
        return await super().get_tools(ctx)

    async def _deliver_denials(self, ctx: RunContext[Any]) -> None:
        """Refuse what each script whose run_code call was denied waits on (see the module
        docstring)."""
        calls: dict[str, int] = {}  # each run_code call id: how many calls gave it so far
        for message in ctx.messages:
            for part in getattr(message, "parts", ()):
                if (
                    isinstance(message, ModelResponse)
                    and isinstance(part, ToolCallPart)
                    and part.tool_name == RUN_CODE
                ):
                    calls[part.tool_call_id] = calls.get(part.tool_call_id, 0) + 1
                if not (
                    isinstance(part, ToolReturnPart)
                    and part.tool_name == RUN_CODE
                    and part.outcome == "denied"
                ):
                    continue
                conversation = getattr(message, "conversation_id", None)
                # By the conversation's key: by the call's id alone, a denial of another
                # conversation's call of that id (a provider's call_0) was taken for this
                # one's, and this script waited in the log for good.
                # The denial answers the last call that gave its id (see _key).
                earlier = max(calls.get(part.tool_call_id, 0) - 1, 0)
                seen = _key(part.tool_call_id, conversation, earlier)
                if seen not in self._denials_seen:
                    await self._deny(part.tool_call_id, conversation, earlier, str(part.content))
                    self._denials_seen.add(seen)

    async def _key_of(self, tool_call_id: str, conversation: str | None, earlier: int = 0) -> str:
        """The session log's key for the run_code call ``tool_call_id`` of ``conversation``
        after ``earlier`` calls that gave the same id (see :func:`_key`), or the call's id
        alone when a script keyed so, as keys were made before they were scoped by
        conversation, is still to finish (one waiting for its approval then). One read of
        the log, for that script alone."""
        if conversation and not earlier:
            bare = _key(tool_call_id, None)
            before = await self.engine.store.script_by_key("default", bare)
            if before is not None and before.status not in ENDED:
                return bare
        return _key(tool_call_id, conversation, earlier)

    async def _script(
        self, tool_call_id: str, conversation: str | None, earlier: int
    ) -> ScriptRecord | None:
        """The script the run_code call ``tool_call_id`` of ``conversation`` (after
        ``earlier`` calls of that id) started, if any."""
        key = await self._key_of(tool_call_id, conversation, earlier)
        return await self.engine.store.script_by_key("default", key)

    async def _deny(
        self, tool_call_id: str, conversation: str | None, earlier: int, message: str
    ) -> None:
        record = await self._script(tool_call_id, conversation, earlier)
        if record is None:
            return  # never started: nothing waits
        result = await self.engine.resume(record.id)
        # Each pass refuses at least one call the script asked for, and a script's calls are
        # bounded by its limits; so is this loop.
        while result.status == "paused":
            asked = [w for w in result.waiting if w["reason"] == "approval"]
            if not asked:
                break  # held, or waiting on another host: it goes on there
            for call in asked:
                with contextlib.suppress(CallNotWaiting):
                    await self.engine.reject(result.script_id, call["call_id"], message)
            result = await self.engine.resume(result.script_id)

    async def _run_code(self, ctx: RunContext[Any], **arguments: Any) -> str | list[Any]:
        # pydantic-ai checks no arguments against a schema it was given: a call without
        # code, or with another argument, raised a TypeError out of the agent's run.
        try:
            code = script_argument(arguments)
        except CodeModeError as e:
            raise ModelRetry(str(e)) from None
        key = None
        if ctx.tool_call_id:
            earlier = _earlier_calls(ctx.messages, ctx.tool_call_id)
            key = await self._key_of(ctx.tool_call_id, ctx.conversation_id, earlier)
        seen = await self._seen(ctx, key) if ctx.tool_call_approved else set()
        try:
            result = await self.engine.run_code(code, key=key, wait=self.wait)
        except ConfigError:
            # An approval that changed the code (ToolApproved(override_args=...)) met the
            # engine's refusal of a key that names another script, which told the host to
            # give this call its own key: it gave none.
            if ctx.tool_call_approved and (record := await self._other_code(key, code)):
                raise ConfigError(
                    f"the approval of run_code call {ctx.tool_call_id!r:.80} changed its code "
                    "(ToolApproved(override_args=...)), which code mode cannot do: its script "
                    f"{record.id} waits with the code the model wrote; approve it as it is, "
                    "or deny it (False, ToolDenied) for the model to write another"
                ) from None
            raise
        if seen and result.status == "paused":
            # A person approved the run_code call: approve what they saw its script wait on
            # (a call answered meanwhile, here or elsewhere, is left as it is), and run it
            # on. Never a call it asks for after those: nobody has seen that one yet.
            approved = False
            for call in result.waiting:
                if call["reason"] == "approval" and call["call_id"] in seen:
                    with contextlib.suppress(CallNotWaiting):
                        await self.engine.approve(result.script_id, call["call_id"])
                        approved = True
            if approved:
                result = await self.engine.resume(result.script_id, wait=self.wait)
        # By the log's key, which is the conversation's: another conversation's call of the
        # same id (a provider's call_0) took this one's, and its approval was asked again.
        asked = key or ""
        self._asked.pop(asked, None)
        if result.status == "paused" and any(w["reason"] == "approval" for w in result.waiting):
            self._asked[asked] = {w["call_id"] for w in result.waiting}
            raise ApprovalRequired(metadata=_waiting(result))
        text, media = attachable(result, "pydantic_ai")
        if media:  # shown files and returned images, in the tool's result as pydantic-ai's own
            return [text, *(not_taken(*m, "pydantic_ai") or _binary(m[1]) for m in media)]
        return text

    async def _other_code(self, key: str | None, code: str) -> ScriptRecord | None:
        """The script ``key`` names when it was started with other code than ``code``."""
        record = None if key is None else await self.engine.store.script_by_key("default", key)
        if record is None or record.code == normalize(code, record.language):
            return None
        return record

    async def _seen(self, ctx: RunContext[Any], key: str | None) -> set[str]:
        """The calls of the approved run_code call's script (``key`` in the log) that the
        person saw waiting:
        those its request named (``DeferredToolResults.metadata``, as :meth:`answer` and
        a host that passes the request's metadata back give it), or that this toolset
        asked about; in another process without the metadata, those waiting in the log
        before the script is driven on (nothing drives it while it waits for this)."""
        meta = ctx.tool_call_metadata
        if isinstance(meta, dict) and isinstance(meta.get("waiting"), list):
            return {w["call_id"] for w in meta["waiting"] if isinstance(w, dict) and "call_id" in w}
        asked = self._asked.get(key or "")
        if asked is not None:
            return asked
        if key is None:
            return set()
        record = await self.engine.store.script_by_key("default", key)
        if record is None:
            return set()
        calls = await self.engine.store.calls(record.id)
        return {c.call_id for c in calls if c.state == AWAITING_APPROVAL}

    async def answer(
        self, requests: DeferredToolRequests, *, approve: bool, message: str = ""
    ) -> DeferredToolResults:
        """Approve, or refuse with ``message``, every call the paused scripts wait on; the
        results to pass to the next run (``agent.run(..., deferred_tool_results=...)``)."""
        if not isinstance(requests, DeferredToolRequests):
            raise ConfigError(
                f"answer takes the DeferredToolRequests a run ended with (run.output when the "
                f"run waits for a person), not {requests!r:.80}"
            )
        if not isinstance(approve, bool):
            # "no" from a form, or any other text, would approve every call the scripts wait on.
            raise ConfigError(f"approve is True or False, not {approve!r:.80}")
        approvals: dict[str, Any] = {}
        metadata: dict[str, dict[str, Any]] = {}
        for part in requests.approvals:
            if part.tool_name != RUN_CODE:
                continue
            meta = requests.metadata.get(part.tool_call_id, {})
            for call in meta.get("waiting", []):
                if call["reason"] != "approval":
                    continue
                with contextlib.suppress(CallNotWaiting):
                    if approve:
                        await self.engine.approve(meta["script_id"], call["call_id"])
                    else:
                        await self.engine.reject(meta["script_id"], call["call_id"], message)
            approvals[part.tool_call_id] = True  # run_code runs on, and tells the model
            metadata[part.tool_call_id] = meta  # what was answered: run_code approves no more
        return DeferredToolResults(approvals=approvals, metadata=metadata)

    async def aclose(self) -> None:
        await self.engine.aclose()


def _key(tool_call_id: str, conversation: str | None, earlier: int = 0) -> str:
    """The session log's key for the run_code call ``tool_call_id`` of ``conversation``
    (pydantic-ai's id of it, which a run given the history keeps) after ``earlier`` calls of
    the conversation that gave the same id: the ids are the model's or its provider's to
    choose, and some number them per turn (``call_0``) or give every call of a tool one id
    (pydantic-ai's TestModel). By the id alone, a later conversation's run_code was taken
    for the first one's, its old result given for the same code; by the conversation and
    the id, the next turn's run_code in the same conversation was, and the agent's run ended
    on the engine's ConfigError for a key of other code. The count is the conversation's,
    so a run given the history keys each call as the first run did. A key no log can keep
    (too long, a NUL, a lone surrogate) is its digest, so that call too is idempotent (its
    CodeModeError ended the agent's run)."""
    raw = f"{conversation}/{tool_call_id}" if conversation else tool_call_id
    if earlier:
        raw = f"{raw}#{earlier + 1}"
    if _keepable(raw):
        return raw
    return "sha256:" + hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()


def _earlier_calls(messages: Sequence[Any], tool_call_id: str) -> int:
    """How many run_code calls of the conversation ``messages`` gave ``tool_call_id``
    before the one that runs now: those of the model's responses before the last that
    gave it (its calls are those that run)."""
    counts = [
        sum(
            1
            for part in message.parts
            if isinstance(part, ToolCallPart)
            and part.tool_name == RUN_CODE
            and part.tool_call_id == tool_call_id
        )
        for message in messages
        if isinstance(message, ModelResponse)
    ]
    while counts and not counts[-1]:
        counts.pop()
    return sum(counts[:-1])


def _binary(block: dict[str, Any]) -> BinaryContent:
    """An MCP media block of the result as pydantic-ai's content."""
    mime, data = media_data(block)
    return BinaryContent(data=base64.b64decode(data), media_type=mime)


def _waiting(result: RunResult) -> dict[str, Any]:
    return {"script_id": result.script_id, "waiting": result.waiting, "text": result.text}


__all__ = ["CodeModeToolset", "engine_tools"]
