"""The pydantic-ai adapter with FunctionModel: code mode over the agent's tools, and a
script that waits for a person as pydantic-ai's own approval request."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    Tool,
    ToolDenied,
)
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from engine import ToolDefinitionError
from engine.adapters.pydantic_ai import CodeModeToolset, engine_tools
from tests.engine.conftest import InProcessRunner

CODE = """
const prs = await tools.list_prs({ repo: "acme/api" });
try {
  return await tools.comment({ number: prs[0], body: "ping" });
} catch (e) {
  return `not posted: ${e.message}`;
}
"""
posted: list[tuple[int, str]] = []


def list_prs(repo: str) -> list[int]:
    """List the open pull requests of a repository."""
    return [12, 15]


def comment(number: int, body: str) -> str:
    """Comment on a pull request."""
    posted.append((number, body))
    return f"posted on #{number}"


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Calls run_code once, then answers with what the script returned."""
    assert [t.name for t in info.function_tools] == ["run_code"]
    assert "comment(input: {" in (info.function_tools[0].description or "")
    returns = [
        p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)
    ]
    if not returns:
        return ModelResponse(
            parts=[ToolCallPart("run_code", {"code": CODE}, tool_call_id="call_1")]
        )
    return ModelResponse(parts=[TextPart(f"The script said: {returns[-1].content}")])


def _toolset(data: Path) -> CodeModeToolset:
    return CodeModeToolset(
        [list_prs, Tool(comment, requires_approval=True)],
        data_dir=data,
        runner=InProcessRunner(),
        type_check="off",
    )


def _agent(toolset: CodeModeToolset) -> Agent[None, Any]:
    return Agent(FunctionModel(model), toolsets=[toolset], output_type=[str, DeferredToolRequests])


async def _first_run(data: Path) -> tuple[DeferredToolRequests, list[ModelMessage]]:
    toolset = _toolset(data)
    try:
        run = await _agent(toolset).run("Ping the first open PR.")
    finally:
        await toolset.aclose()
    requests = run.output
    assert isinstance(requests, DeferredToolRequests)
    (part,) = requests.approvals
    assert (part.tool_name, part.tool_call_id) == ("run_code", "call_1")
    meta = requests.metadata["call_1"]
    assert [(w["name"], w["arguments"], w["reason"]) for w in meta["waiting"]] == [
        ("comment", {"number": 12, "body": "ping"}, "approval")
    ]
    return requests, run.all_messages()


async def _answered(toolset: CodeModeToolset, history: list[ModelMessage], answer: Any) -> Any:
    """The agent's run on from ``history`` with ``answer`` to its request for call_1."""
    return await _agent(toolset).run(
        message_history=history,
        deferred_tool_results=DeferredToolResults(approvals={"call_1": answer}),
    )


async def test_an_approval_through_pydantic_ai_in_a_new_process(tmp_path: Path) -> None:
    posted.clear()
    _requests, history = await _first_run(tmp_path)
    assert posted == []
    # Later, a new toolset on the same log (a restarted host); the person approves as
    # pydantic-ai users do.
    toolset = _toolset(tmp_path)
    try:
        run = await _answered(toolset, history, True)
    finally:
        await toolset.aclose()
    assert run.output == "The script said: Script finished.\nReturned:\nposted on #12"
    assert posted == [(12, "ping")]


async def test_a_script_a_worker_drives_after_the_approval_is_waited_for(tmp_path: Path) -> None:
    """Approved elsewhere, the script is driven on by a worker when the agent's run resumes:
    its run_code waits for the worker's outcome, which the model sees (it was told 'Script
    is running on another host', and the comment's answer never reached it)."""
    import asyncio

    from engine import CodeMode, CodeModeError

    with pytest.raises(CodeModeError, match="must be a number of seconds"):
        CodeModeToolset([list_prs], wait=-1)
    posted.clear()
    requests, history = await _first_run(tmp_path)
    meta = requests.metadata["call_1"]
    running, gate = asyncio.Event(), asyncio.Event()

    async def held(number: int, body: str) -> str:
        """Comment on a pull request."""
        running.set()
        await gate.wait()
        return comment(number, body)

    tools = engine_tools([list_prs, Tool(held, name="comment", requires_approval=True)])
    worker = CodeMode(tools, runner=InProcessRunner(), data_dir=tmp_path, type_check="off")
    toolset = _toolset(tmp_path)
    try:
        await worker.approve(meta["script_id"], meta["waiting"][0]["call_id"])
        driving = asyncio.create_task(worker.resume(meta["script_id"]))
        await running.wait()  # the worker holds the script, inside the comment
        resumed = asyncio.create_task(_answered(toolset, history, True))
        # Without waiting, the run's run_code is answered "elsewhere" by now; waiting, it
        # waits on the worker until its call returns.
        await asyncio.wait({resumed}, timeout=0.5)
        gate.set()
        run = await resumed
        assert (await driving).status == "finished"
    finally:
        gate.set()
        await toolset.aclose()
        await worker.aclose()
    assert run.output == "The script said: Script finished.\nReturned:\nposted on #12"
    assert posted == [(12, "ping")]


async def test_an_approval_that_changes_the_code_is_refused_saying_so(tmp_path: Path) -> None:
    """ToolApproved(override_args=...) with other code: refused, naming the approval and
    what to do (it raised the engine's refusal of a key the host never gave, 'give this call
    its own key'); the script waits as it was, and an approval as it is runs it."""
    from pydantic_ai import ToolApproved

    from engine import ConfigError

    posted.clear()
    _requests, history = await _first_run(tmp_path)
    edited = ToolApproved(override_args={"code": 'return "edited"'})
    toolset = _toolset(tmp_path)
    try:
        with pytest.raises(ConfigError) as refused:
            await _answered(toolset, history, edited)
        (script,) = await toolset.engine.store.scripts()
        assert str(refused.value) == (
            "the approval of run_code call 'call_1' changed its code "
            "(ToolApproved(override_args=...)), which code mode cannot do: its script "
            f"{script.id} waits with the code the model wrote; approve it as it is, or deny "
            "it (False, ToolDenied) for the model to write another"
        )
        run = await _answered(toolset, history, True)
    finally:
        await toolset.aclose()
    assert run.output == "The script said: Script finished.\nReturned:\nposted on #12"
    assert posted == [(12, "ping")]


async def test_two_conversations_calls_of_one_id_are_each_answered_as_their_own(
    tmp_path: Path,
) -> None:
    """Conversations of one toolset whose model numbers its calls alike (call_1 in each): an
    approval without the request's metadata approves its own script's call (the next
    conversation's request had taken its place: the person was asked again), and a bare
    denial refuses its own script's (taken for an earlier conversation's, delivered already,
    it left its script waiting in the log for good)."""
    posted.clear()
    toolset = _toolset(tmp_path)
    agent = _agent(toolset)
    try:
        first = await agent.run("Ping the first open PR.")
        second = await agent.run("Ping it again.")
        approved = await _answered(toolset, first.all_messages(), True)
        denied = await _answered(toolset, second.all_messages(), False)
        third = await agent.run("And once more.")
        await _answered(toolset, third.all_messages(), False)
        statuses = [r.status for r in await toolset.engine.store.scripts()]
    finally:
        await toolset.aclose()
    assert approved.output == "The script said: Script finished.\nReturned:\nposted on #12"
    assert denied.output == "The script said: The tool call was denied."
    assert posted == [(12, "ping")]
    assert statuses == ["finished"] * 3


async def test_a_refusal_reaches_the_script(tmp_path: Path) -> None:
    """answer(approve=False) refuses; answer given no bool (approve="no", which approved
    every call the scripts waited on: any text is true), or not the run's requests (its str
    output: an AttributeError), is refused saying what to give, and answers nothing."""
    from engine import ConfigError

    posted.clear()
    requests, history = await _first_run(tmp_path)
    toolset = _toolset(tmp_path)
    try:
        with pytest.raises(ConfigError, match=r"^approve is True or False, not 'no'$"):
            await toolset.answer(requests, approve="no")  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="answer takes the DeferredToolRequests a run"):
            await toolset.answer("Done.", approve=True)  # type: ignore[arg-type]
        results = await toolset.answer(requests, approve=False, message="not on Fridays")
        run = await _agent(toolset).run(message_history=history, deferred_tool_results=results)
    finally:
        await toolset.aclose()
    assert run.output == "The script said: Script finished.\nReturned:\nnot posted: not on Fridays"
    assert posted == []


@pytest.mark.parametrize(
    ("denial", "seen"),
    [(False, "The tool call was denied."), (ToolDenied("not on Fridays"), "not on Fridays")],
)
async def test_a_bare_denial_reaches_the_script(
    tmp_path: Path, denial: bool | ToolDenied, seen: str
) -> None:
    """pydantic-ai answers a denied call without calling the tool: the script, which used to
    stay paused in the log for good, sees the denial's message as answer(approve=False)
    gives it, and ends; the model sees pydantic-ai's denial."""
    posted.clear()
    _requests, history = await _first_run(tmp_path)
    toolset = _toolset(tmp_path)
    try:
        run = await _answered(toolset, history, denial)
        assert run.output == f"The script said: {seen}"
        (record,) = await toolset.engine.store.scripts()
        assert record.status == "finished" and record.outcome is not None, record
        assert record.outcome["value"] == f"not posted: {seen}", record.outcome
    finally:
        await toolset.aclose()
    assert posted == []


async def test_a_bare_denial_refuses_what_the_script_asks_after_it(tmp_path: Path) -> None:
    """A script that tries another approval once the first is denied is refused that one
    too, and ends: nothing is left waiting for an approval the model does not know of."""
    posted.clear()
    code = """
    const out = [];
    for (const body of ["ping", "ping again"]) {
      try { out.push(await tools.comment({ number: 12, body })); }
      catch (e) { out.push(e.message); }
    }
    return out;
    """

    def twice(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [
            p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)
        ]
        if not returns:
            call = ToolCallPart("run_code", {"code": code}, tool_call_id="call_2")
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart(str(returns[-1].content))])

    toolset = _toolset(tmp_path)
    agent = Agent(FunctionModel(twice), toolsets=[toolset], output_type=[str, DeferredToolRequests])
    try:
        first = await agent.run("Ping twice.")
        assert isinstance(first.output, DeferredToolRequests)
        run = await agent.run(
            message_history=first.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={"call_2": False}),
        )
        assert run.output == "The tool call was denied."
        (record,) = await toolset.engine.store.scripts()
        assert record.status == "finished" and record.outcome is not None, record
        assert record.outcome["value"] == ["The tool call was denied."] * 2, record.outcome
    finally:
        await toolset.aclose()
    assert posted == []


def test_a_tool_that_takes_run_context_is_refused() -> None:
    def needs_ctx(ctx: RunContext[None], x: int) -> int:
        """Needs the run context."""
        return x

    with pytest.raises(ToolDefinitionError, match="takes pydantic-ai's RunContext"):
        CodeModeToolset([Tool(needs_ctx, takes_ctx=True)], type_check="off")


def test_a_tools_own_options_carry_over() -> None:
    """A pydantic-ai Tool's description, timeout, defer_loading and sequential are the
    engine tool's (the description was the docstring's, whatever the Tool said; sequential
    was dropped); prepare and args_validator, which no script's call would run, are refused
    rather than dropped."""
    made = engine_tools(
        [
            Tool(
                comment,
                description="Post to the team.",
                timeout=7,
                defer_loading=True,
                sequential=True,
            ),
            Tool(list_prs),
        ]
    )
    assert [(t.description, t.timeout, t.deferred, t.sequential) for t in made] == [
        ("Post to the team.", 7.0, True, True),
        ("List the open pull requests of a repository.", None, False, False),
    ]

    async def only_admins(ctx: RunContext[None], definition: Any) -> Any:
        return None

    def check(ctx: RunContext[None], number: int, body: str) -> None:
        return None

    with pytest.raises(
        ToolDefinitionError, match=r"has prepare=\.\.\., which code mode cannot apply"
    ):
        engine_tools([Tool(comment, prepare=only_admins)])
    with pytest.raises(ToolDefinitionError, match=r"has args_validator=\.\.\."):
        engine_tools([Tool(comment, args_validator=check)])


async def test_client_tools_are_refused() -> None:
    """A client tool's call paused the script for an answer no agent run could deliver:
    the model read "Script paused." and the script stayed in the log for good."""
    from engine import CodeMode, tool

    @tool(client=True)
    def pick_file(prompt: str) -> str:
        """Let the user pick a file."""

    with pytest.raises(ToolDefinitionError, match=r"client tools \(pick_file\) are not"):
        CodeModeToolset([list_prs, pick_file], type_check="off")
    engine = CodeMode([pick_file], runner=InProcessRunner(), type_check="off")
    with pytest.raises(ToolDefinitionError, match="client tools"):
        CodeModeToolset(engine=engine)
    await engine.aclose()


async def test_what_a_script_shows_reaches_the_model_as_binary_content() -> None:
    from pydantic_ai.messages import BinaryContent

    from engine import Skill
    from tests.engine.adapters.test_formats import PNG

    seen: list[Any] = []

    def shows(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [
            p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)
        ]
        if not returns:
            code = 'files.show("charts/chart.png"); return "shown"'
            return ModelResponse(parts=[ToolCallPart("run_code", {"code": code}, tool_call_id="c")])
        seen.append(returns[-1].content)
        return ModelResponse(parts=[TextPart("ok")])

    skill = Skill("charts", "Charts.", "Show the chart.", files={"chart.png": PNG})
    toolset = CodeModeToolset(
        [list_prs], skills=[skill], runner=InProcessRunner(), type_check="off"
    )
    try:
        run = await Agent(FunctionModel(shows), toolsets=[toolset]).run("Show me the chart.")
    finally:
        await toolset.aclose()
    assert run.output == "ok"
    ((text, image),) = seen
    assert text.startswith("Script finished.")
    assert isinstance(image, BinaryContent)
    assert (image.data, image.media_type) == (PNG, "image/png")


async def test_a_returned_image_reaches_the_model_as_binary_content() -> None:
    """An image block the script returns (an MCP tool's, passed on) is the model's image, as
    in every other API, and the text names it; it reached the model as base64 text."""
    import base64

    from pydantic_ai.messages import BinaryContent

    from tests.engine.adapters.test_formats import PNG

    seen: list[Any] = []
    data = base64.b64encode(PNG).decode()

    def returns_image(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [
            p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)
        ]
        if not returns:
            code = f'return {{type: "image", data: "{data}", mimeType: "image/png"}}'
            return ModelResponse(parts=[ToolCallPart("run_code", {"code": code}, tool_call_id="c")])
        seen.append(returns[-1].content)
        return ModelResponse(parts=[TextPart("ok")])

    toolset = CodeModeToolset([list_prs], runner=InProcessRunner(), type_check="off")
    try:
        await Agent(FunctionModel(returns_image), toolsets=[toolset]).run("Chart it.")
    finally:
        await toolset.aclose()
    ((text, image),) = seen
    assert "<image/png, 70 bytes, below>" in text and data not in text
    assert isinstance(image, BinaryContent)
    assert (image.data, image.media_type) == (PNG, "image/png")


async def test_returned_images_past_the_shown_budgets_are_left_out_for_pydantic_ai() -> None:
    """500 images a script returns were 500 BinaryContent in the tool's result (a model API
    refuses a request of some 100 images, and every later one of the conversation): as in
    every API, 4 (shown_files) are attached and the text names the rest as left out."""
    from pydantic_ai.messages import BinaryContent

    from tests.engine.adapters.test_formats import _images

    seen: list[Any] = []

    def returns_images(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [
            p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)
        ]
        if not returns:
            call = ToolCallPart("run_code", {"code": _images(500)}, tool_call_id="c")
            return ModelResponse(parts=[call])
        seen.append(returns[-1].content)
        return ModelResponse(parts=[TextPart("ok")])

    toolset = CodeModeToolset([list_prs], runner=InProcessRunner(), type_check="off")
    try:
        await Agent(FunctionModel(returns_images), toolsets=[toolset]).run("Chart it.")
    finally:
        await toolset.aclose()
    ((text, *images),) = seen
    assert len(images) == 4 and all(isinstance(i, BinaryContent) for i in images)
    assert (
        "Left out: 496 returned image or audio blocks, not attached: 496 over shown_files" in text
    )


REPOS = """
try { return await tools.delete_repo({ name: "staging" }); }
catch (e) { return await tools.delete_repo({ name: "production" }); }
"""
TWO_REPOS = """
await tools.delete_repo({ name: "staging" });
return await tools.delete_repo({ name: "production" });
"""
deleted: list[str] = []


def delete_repo(name: str) -> str:
    """Delete a repository."""
    deleted.append(name)
    return "deleted"


def _one_call(code: str, call_id: str = "c1") -> Agent[None, Any]:
    def calls(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
            return ModelResponse(parts=[TextPart("Done.")])
        return ModelResponse(parts=[ToolCallPart("run_code", {"code": code}, tool_call_id=call_id)])

    return Agent(FunctionModel(calls), output_type=[str, DeferredToolRequests])


def _runs_once(code: str, seen: list[Any]) -> FunctionModel:
    """A model that calls run_code with ``code`` once, notes in ``seen`` what it returned,
    and answers "ok"."""

    def calls(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1].parts[-1]
        if isinstance(last, ToolReturnPart):
            seen.append(last.content)
            return ModelResponse(parts=[TextPart("ok")])
        return ModelResponse(parts=[ToolCallPart("run_code", {"code": code}, tool_call_id="f")])

    return FunctionModel(calls)


@pytest.mark.parametrize("how", ["refuse", "approve", "bare", "bare, new process"])
async def test_an_approval_approves_only_the_calls_the_person_saw(tmp_path: Path, how: str) -> None:
    """Approving a run_code call approved whatever its script waited on once driven on: a
    refusal by answer() was followed by the script's next call, never shown to anyone, run
    unasked (production deleted), and an approval of one call approved the next one too.
    Each call the script asks for after those the person saw is asked about anew."""
    deleted.clear()

    def toolset() -> CodeModeToolset:
        tools = [Tool(delete_repo, requires_approval=True)]
        return CodeModeToolset(tools, data_dir=tmp_path, runner=InProcessRunner(), type_check="off")

    first = toolset()
    agent = _one_call(REPOS if how == "refuse" else TWO_REPOS)
    try:
        run = await agent.run("Clean up.", toolsets=[first])
        requests = run.output
        assert isinstance(requests, DeferredToolRequests)
        if how in ("refuse", "approve"):
            results = await first.answer(requests, approve=how == "approve", message="refused")
        else:
            results = DeferredToolResults(approvals={"c1": True})
        second = toolset() if how.endswith("new process") else first
        try:
            run = await agent.run(
                message_history=run.all_messages(),
                deferred_tool_results=results,
                toolsets=[second],
            )
            again = run.output
            assert isinstance(again, DeferredToolRequests), again
            (waiting,) = again.metadata["c1"]["waiting"]
            assert waiting["arguments"] == {"name": "production"}
            assert deleted == ([] if how == "refuse" else ["staging"])
            run = await agent.run(
                message_history=run.all_messages(),
                deferred_tool_results=DeferredToolResults(approvals={"c1": True}),
                toolsets=[second],
            )
            assert run.output == "Done."
        finally:
            if second is not first:
                await second.aclose()
    finally:
        await first.aclose()
    assert deleted == (["production"] if how == "refuse" else ["staging", "production"])


def test_a_plain_function_that_takes_run_context_is_refused() -> None:
    def needs_ctx(ctx: RunContext[None], x: int) -> int:
        """Needs the run context."""
        return x

    with pytest.raises(ToolDefinitionError, match="takes pydantic-ai's RunContext"):
        CodeModeToolset([needs_ctx], type_check="off")


async def test_tools_or_options_beside_an_engine_are_refused() -> None:
    from engine import CodeMode, ConfigError

    engine = CodeMode([engine_tools([list_prs])[0]], runner=InProcessRunner(), type_check="off")
    try:
        with pytest.raises(ConfigError, match="tools would be ignored"):
            CodeModeToolset([comment], engine=engine)
        with pytest.raises(ConfigError, match="data_dir would be ignored"):
            CodeModeToolset(engine=engine, data_dir="x")
    finally:
        await engine.aclose()


async def test_the_toolsets_own_options_reach_run_code() -> None:
    """pydantic-ai's toolset options about its one tool go to it (a durable agent's
    toolsets need an id); those about the tools it would run itself are refused by name,
    with what it takes instead (CodeMode refused them as unknown keywords)."""
    from engine import ConfigError

    seen: list[Any] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.extend(info.function_tools)
        return ModelResponse(parts=[TextPart("done")])

    toolset = CodeModeToolset(
        [list_prs],
        runner=InProcessRunner(),
        type_check="off",
        id="codemode",
        sequential=True,
        max_retries=3,
        metadata={"team": "a"},
    )
    try:
        assert toolset.id == "codemode"
        await Agent(FunctionModel(answer), toolsets=[toolset]).run("Hi.")
        (run_code,) = seen
        assert run_code.name == "run_code" and run_code.sequential is True
        assert run_code.metadata == {"team": "a"}
        assert toolset.max_retries == 3
    finally:
        await toolset.aclose()
    for options, named in (
        ({"timeout": 3.0}, "timeout="),
        ({"strict": True, "requires_approval": True}, "requires_approval=, strict="),
    ):
        with pytest.raises(ConfigError, match=f"toolset option {named}: its one tool is run_code"):
            CodeModeToolset([list_prs], runner=InProcessRunner(), **options)


async def test_a_tool_that_defers_itself_fails_its_call_saying_what_to_do() -> None:
    """pydantic-ai's ApprovalRequired or CallDeferred raised inside a tool (its way to ask
    for a person, or to answer later) fails the script's call with what to do instead; the
    script read "Error: ApprovalRequired", and the host's log got a traceback."""
    from pydantic_ai.exceptions import ApprovalRequired as Required
    from pydantic_ai.exceptions import CallDeferred

    def wire(amount: int) -> str:
        """Wire money."""
        raise Required

    async def later(x: int) -> str:
        """Answer later."""
        raise CallDeferred

    seen: list[Any] = []
    code = """
    const out = [];
    for (const call of [() => tools.wire({ amount: 5 }), () => tools.later({ x: 1 })]) {
      try { await call(); } catch (e) { out.push(e.message); }
    }
    return out;
    """

    def calls(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [
            p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)
        ]
        if not returns:
            return ModelResponse(parts=[ToolCallPart("run_code", {"code": code}, tool_call_id="d")])
        seen.append(returns[-1].content)
        return ModelResponse(parts=[TextPart("ok")])

    toolset = CodeModeToolset([wire, Tool(later)], runner=InProcessRunner(), type_check="off")
    try:
        await Agent(FunctionModel(calls), toolsets=[toolset]).run("Go.")
    finally:
        await toolset.aclose()
    (text,) = seen
    assert "tools.wire raised pydantic-ai's ApprovalRequired" in text, text
    assert "tools.later raised pydantic-ai's CallDeferred" in text, text
    assert "requires_approval=True" in text


async def test_run_code_arguments_the_schema_refuses_are_the_models_to_retry() -> None:
    """A run_code call without code, or with another argument, is a retry prompt the model
    reads, saying what run_code takes (pydantic-ai checks no arguments against the schema it
    was given: a TypeError came out of the agent's run)."""
    asked: Iterator[dict[str, Any]] = iter(
        [{}, {"code": "return 1", "timeout": 5}, {"code": 5}, {"code": "return 7"}]
    )
    retries: list[str] = []

    def calls(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1].parts[-1]
        if isinstance(last, ToolReturnPart) and last.outcome == "retried":
            retries.append(str(last.content))
        elif isinstance(last, ToolReturnPart):
            return ModelResponse(parts=[TextPart(str(last.content))])
        return ModelResponse(parts=[ToolCallPart("run_code", next(asked), tool_call_id="r")])

    toolset = CodeModeToolset([list_prs], runner=InProcessRunner(), type_check="off")
    agent = Agent(FunctionModel(calls), toolsets=[toolset], retries=3)
    try:
        run = await agent.run("Go.")
    finally:
        await toolset.aclose()
    assert run.output == "Script finished.\nReturned:\n7"
    assert retries == [
        'run_code takes only {"code": "<the script>"}',
        'run_code takes only {"code": "<the script>"}; leave out \'timeout\'',
        'run_code takes only {"code": "<the script>"}; code must be a string, not an integer',
    ]


@pytest.mark.parametrize("call_id", ["call_" + "7" * 400, "call\x00nul"])
async def test_a_tool_call_id_no_log_keeps_is_a_run_code_calls_key_all_the_same(
    tmp_path: Path, call_id: str
) -> None:
    """A run_code call whose id no session log can keep (the model's provider's to choose:
    longer than a key, a NUL) runs, waits and is approved in a new process as any other (its
    CodeModeError, "key = ... must be a string of 1 to 256 characters", ended the run)."""
    deleted.clear()

    def toolset() -> CodeModeToolset:
        tools = [Tool(delete_repo, requires_approval=True)]
        return CodeModeToolset(tools, data_dir=tmp_path, runner=InProcessRunner(), type_check="off")

    agent = _one_call('return await tools.delete_repo({ name: "staging" });', call_id)
    first = toolset()
    try:
        run = await agent.run("Clean up.", toolsets=[first])
    finally:
        await first.aclose()
    requests = run.output
    assert isinstance(requests, DeferredToolRequests), requests
    assert [p.tool_call_id for p in requests.approvals] == [call_id]
    # A new process, without the request's metadata: it finds the script by the call's key.
    second = toolset()
    try:
        run = await agent.run(
            message_history=run.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={call_id: True}),
            toolsets=[second],
        )
    finally:
        await second.aclose()
    assert run.output == "Done."
    assert deleted == ["staging"]


@pytest.mark.parametrize(
    ("tools", "said"),
    [
        (list_prs, "tools is a list of tools; pass [list_prs], not list_prs"),
        (Tool(list_prs, name="prs"), "tools is a list of tools; pass [prs], not prs"),
        ("list_prs", "tools is a list of tools; pass [list_prs], not list_prs"),
        ([None], "None is not a tool: give a function (typed, with a docstring) or a Tool"),
        ([list_prs, 3], "3 is not a tool: give a function (typed, with a docstring) or a Tool"),
    ],
)
def test_tools_that_are_no_list_of_tools_are_named_as_codemodes_are(tools: Any, said: str) -> None:
    """One tool where the list belongs, or an item that is no tool, is refused as CodeMode
    refuses it (a TypeError, 'function' object is not iterable; "@tool decorates a function,
    not 'l'"; an AttributeError, 'function' object has no attribute 'handler')."""
    with pytest.raises(ToolDefinitionError) as raised:
        CodeModeToolset(tools, type_check="off")
    assert str(raised.value) == said


async def test_media_no_model_takes_in_a_tool_result_is_named_not_attached() -> None:
    """A shown audio or video file, or a returned audio block, stays out of the tool's
    result, and its text says so; the images stay in. As BinaryContent they failed the
    agent's next request to Anthropic's models ("Unsupported binary content type in
    Anthropic tool returns: audio/wav"), and every request of that conversation after."""
    import base64

    from pydantic_ai.messages import BinaryContent
    from pydantic_ai.models import ModelRequestParameters
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    from engine import Skill
    from tests.engine.adapters.test_formats import PNG

    wav = b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(20)
    code = (
        'files.show("media/a.wav"); files.show("media/c.png"); files.show("media/v.mp4");\n'
        f'return {{type: "audio", data: "{base64.b64encode(wav).decode()}", mimeType: "audio/wav"}}'
    )
    history: list[ModelMessage] = []

    def shows(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("run_code", {"code": code}, tool_call_id="m")])
        history.extend(messages)
        return ModelResponse(parts=[TextPart("ok")])

    files = {"a.wav": wav, "c.png": PNG, "v.mp4": b"\x00\x00\x00\x18ftypmp42"}
    skill = Skill("media", "Media.", "Show them.", files=files)
    toolset = CodeModeToolset(
        [list_prs], skills=[skill], runner=InProcessRunner(), type_check="off"
    )
    try:
        await Agent(FunctionModel(shows), toolsets=[toolset]).run("Show them.")
    finally:
        await toolset.aclose()
    (part,) = history[-1].parts
    assert isinstance(part, ToolReturnPart)
    content: Any = part.content
    text, image, returned = content
    assert "Shown: media/c.png (image/png, 70 bytes), attached." in text
    for name, mime, size in (("a.wav", "audio/x-wav", 36), ("v.mp4", "video/mp4", 12)):
        assert (
            f"Shown: media/{name} ({mime}, {size} bytes), not attached: the pydantic-ai "
            f"toolset takes no {mime} in a tool result." in text
        ), text
    assert isinstance(image, BinaryContent) and image.media_type == "image/png"
    assert returned == (
        "returned audio 1 (audio/wav) is not attached: the pydantic-ai toolset takes no "
        "audio/wav in a tool result."
    )
    # What the agent's next request to Anthropic would send (mapped offline, sent nowhere).
    model = AnthropicModel("claude-sonnet-4-0", provider=AnthropicProvider(api_key="unused"))
    await model._map_message(history, ModelRequestParameters(), {})


async def test_a_tools_model_retry_or_tool_failed_is_its_calls_error_said_on_purpose(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """ModelRetry or ToolFailed raised in a tool (pydantic-ai's way to tell the model what
    went wrong) is the call's error, its message for the script, said on purpose as a
    ToolCallError is: the host's log got a warning and a traceback for each."""
    import logging

    from pydantic_ai.exceptions import ModelRetry, ToolFailed

    def find(name: str) -> int:
        """Find a user."""
        raise ModelRetry(f"no user {name!r}; give the full name")

    async def ban(name: str) -> int:
        """Ban a user."""
        raise ToolFailed("admins cannot be banned")

    seen: list[Any] = []
    code = """
    const out = [];
    for (const call of [() => tools.find({ name: "bo" }), () => tools.ban({ name: "root" })]) {
      try { await call(); } catch (e) { out.push(e.message); }
    }
    return out;
    """

    toolset = CodeModeToolset([find, Tool(ban)], runner=InProcessRunner(), type_check="off")
    caplog.set_level(logging.INFO, logger="codemode")
    try:
        await Agent(_runs_once(code, seen), toolsets=[toolset]).run("Go.")
    finally:
        await toolset.aclose()
    assert seen == [
        'Script finished.\nReturned:\n["no user \'bo\'; give the full name","admins cannot be banned"]'
    ]
    assert "tool call raised" not in caplog.text


async def test_a_call_id_a_later_conversation_uses_again_starts_a_script_of_its_own(
    tmp_path: Path,
) -> None:
    """Call ids are the model's or its provider's to choose, and some number them per turn
    (call_0): keyed by the id alone, a later conversation's run_code with the same id and
    code was given the first one's old result, without running. A run given the history
    continues its conversation, and finds its script."""
    counted: list[int] = []

    def count() -> int:
        """Count one more."""
        counted.append(len(counted) + 1)
        return len(counted)

    agent = _one_call("return await tools.count();", "call_0")
    toolset = CodeModeToolset([count], data_dir=tmp_path, runner=InProcessRunner())
    try:
        first = await agent.run("Count.", toolsets=[toolset])
        second = await agent.run("Count again, a new conversation.", toolsets=[toolset])
        returned = [
            str(p.content)
            for run in (first, second)
            for m in run.all_messages()
            for p in getattr(m, "parts", [])
            if isinstance(p, ToolReturnPart)
        ]
        assert counted == [1, 2]
        assert returned[0].endswith("Returned:\n1") and returned[1].endswith("Returned:\n2")
        assert await toolset.engine.store.script_by_key("default", "call_0") is None
    finally:
        await toolset.aclose()


async def test_a_script_waiting_under_its_call_id_alone_is_approved_all_the_same(
    tmp_path: Path,
) -> None:
    """A script started before keys were scoped by conversation (its key the call's id
    alone) and waiting for its approval is found by the approved call, and runs on once:
    started anew under the new key, it would have asked again for what it had asked."""
    deleted.clear()
    tools = [Tool(delete_repo, requires_approval=True)]
    code = 'return await tools.delete_repo({ name: "staging" });'
    toolset = CodeModeToolset(tools, data_dir=tmp_path, runner=InProcessRunner())
    try:
        waiting = await toolset.engine.run_code(code, key="c1")  # as the toolset keyed it
        assert waiting.status == "paused"
        agent = _one_call(code, "c1")
        run = await agent.run("Clean up.", toolsets=[toolset])
        requests = run.output
        assert isinstance(requests, DeferredToolRequests), requests
        run = await agent.run(
            message_history=run.all_messages(),
            deferred_tool_results=await toolset.answer(requests, approve=True),
            toolsets=[toolset],
        )
        assert run.output == "Done."
        assert deleted == ["staging"]
        scripts = await toolset.engine.store.scripts()
        assert [s.key for s in scripts] == ["c1"]
    finally:
        await toolset.aclose()


async def test_a_model_that_numbers_its_calls_per_turn_runs_each_turns_script(
    tmp_path: Path,
) -> None:
    """A model (or its provider) that numbers its tool calls per turn gives each turn's
    run_code the id call_0. Keyed by the conversation and that id, the second turn's was
    taken for the first's: its other code ended the agent's run on the engine's ConfigError.
    Each call of the id is keyed by how many came before it in the conversation, so each
    turn runs its own script; an approval given in a new run (a new toolset, from the
    history) goes on with the script of the call it answers, and a bare denial reaches the
    script of the call it denies."""
    posted.clear()
    codes = [
        'return (await tools.list_prs({ repo: "acme/api" })).length',
        CODE,
        CODE.replace('"ping"', '"ping again"'),
    ]

    def per_turn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [
            p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)
        ]
        if len(returns) < len(codes):
            code = codes[len(returns)]
            return ModelResponse(parts=[ToolCallPart("run_code", {"code": code}, "call_0")])
        return ModelResponse(parts=[TextPart(" | ".join(str(r.content) for r in returns))])

    def agent(toolset: CodeModeToolset) -> Agent[None, Any]:
        return Agent(
            FunctionModel(per_turn), toolsets=[toolset], output_type=[str, DeferredToolRequests]
        )

    toolset = _toolset(tmp_path)
    try:
        first = await agent(toolset).run("Count the PRs, then ping the first.")
    finally:
        await toolset.aclose()
    assert isinstance(first.output, DeferredToolRequests), first.output
    toolset = _toolset(tmp_path)
    try:
        second = await agent(toolset).run(
            message_history=first.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={"call_0": True}),
        )
        assert isinstance(second.output, DeferredToolRequests), second.output
        third = await agent(toolset).run(
            message_history=second.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={"call_0": False}),
        )
        scripts = {r.code.strip(): r for r in await toolset.engine.store.scripts()}
    finally:
        await toolset.aclose()
    assert third.output == (
        "Script finished.\nReturned:\n2 | Script finished.\nReturned:\nposted on #12 | "
        "The tool call was denied."
    ), third.output
    assert posted == [(12, "ping")]
    assert sorted(scripts) == sorted(c.strip() for c in codes)
    assert len({r.key for r in scripts.values()}) == 3
    outcomes = [scripts[c.strip()].outcome for c in codes]
    assert [o and o["value"] for o in outcomes] == [
        2,
        "posted on #12",
        "not posted: The tool call was denied.",
    ]


async def test_a_sequential_tools_calls_run_alone(tmp_path: Path) -> None:
    """A Tool(..., sequential=True) runs while no other call of the script runs, as
    pydantic-ai runs it beside the model's other calls: a script's Promise.all ran its
    calls at once (the flag was dropped)."""
    from tests.engine.test_tools import TOGETHER, TURNS, InFlight, in_turns

    flight = InFlight()

    async def read(n: int) -> int:
        """Read."""
        return await flight(n)

    async def write(n: int) -> int:
        """Write."""
        return await flight(n)

    returned: list[Any] = []
    toolset = CodeModeToolset(
        [read, Tool(write, sequential=True)],
        data_dir=tmp_path,
        runner=InProcessRunner(),
        type_check="off",
    )
    try:
        await Agent(_runs_once(TOGETHER, returned), toolsets=[toolset]).run("Go.")
    finally:
        await toolset.aclose()
    assert returned == ["Script finished.\nReturned:\n[1,2,3,4,5,6]"]
    assert in_turns(flight.seen) == TURNS
