"""The replay loop: steps, the worker, approvals, client tools, holds and the result text."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from engine import (
    Attachment,
    BlobStore,
    CallNotWaiting,
    CodeMode,
    CodeModeError,
    ConfigError,
    Limits,
    MemoryStore,
    RunResult,
    SqliteStore,
    StepUnavailable,
    StoreUnavailable,
    Tool,
    ToolContext,
    ToolDefinitionError,
    tool,
)
from runner import (
    TEXT_BOUNDS,
    FileMissing,
    FileReader,
    ProcessRunner,
    ProcessStats,
    RunError,
    ScriptRunner,
    Step,
)
from sandbox.protocol import MAX_DEPTH, Call, Script, ScriptError, Stats
from tests.engine.conftest import InProcessRunner
from tests.runner.conftest import make_standin_python

STALE_PRS = """
const prs = await tools.github__list_prs({ repo: "acme/api", state: "open" });
const stale = prs.filter((pr) => Date.parse(pr.updated_at) < Date.now() - 14 * 864e5);
console.log(`${stale.length} stale PRs`);
const reviews = await Promise.all(stale.map((pr) => tools.github__get_reviews({ number: pr.number })));
return stale.map((pr, i) => ({ number: pr.number, reviews: reviews[i].length }));
"""

NOW = 1767225600.0  # 2026-01-01T00:00:00Z


def _github(calls: list[tuple[str, Any]]) -> list[Tool]:
    @tool(name="github__list_prs")
    def list_prs(repo: str, state: str = "open") -> list[dict[str, Any]]:
        """List pull requests."""
        calls.append(("list_prs", repo))
        return [
            {"number": 12, "updated_at": "2025-11-01T00:00:00Z"},
            {"number": 15, "updated_at": "2025-12-01T00:00:00Z"},
            {"number": 20, "updated_at": "2025-12-30T00:00:00Z"},
        ]

    @tool(name="github__get_reviews")
    async def get_reviews(number: int) -> list[dict[str, Any]]:
        """Reviews of a pull request."""
        calls.append(("get_reviews", number))
        return [{"by": "a"}, {"by": "b"}] if number == 15 else []

    return [list_prs, get_reviews]


@pytest.mark.parametrize("live", [False, True], ids=["replay", "live"])
async def test_stale_prs_runs_in_three_steps(inproc: InProcessRunner, live: bool) -> None:
    """The spec's example: list, then both reviews at once, then the spec's result text;
    by replay, each step re-runs the script with the calls recorded so far, live the first
    run goes on twice."""
    calls: list[tuple[str, Any]] = []
    engine = CodeMode(_github(calls), runner=inproc, clock=lambda: NOW, live=live)
    result = await engine.run_code(STALE_PRS)
    assert result.status == "finished"
    assert result.text == (
        "Script finished.\nPrinted:\n2 stale PRs\nReturned:\n"
        '[{"number":12,"reviews":0},{"number":15,"reviews":2}]'
    )
    assert result.value == [{"number": 12, "reviews": 0}, {"number": 15, "reviews": 2}]
    if live:
        assert [len(s.records) for s in inproc.steps] == [0] and inproc.segments == 2
    else:
        assert [len(s.records) for s in inproc.steps] == [0, 1, 3]
    assert calls == [("list_prs", "acme/api"), ("get_reviews", 12), ("get_reviews", 15)]
    assert result.content == [{"type": "text", "text": result.text}]


async def test_fifty_sequential_calls_run_each_handler_once(inproc: InProcessRunner) -> None:
    """A script with 50 sequential calls finishes, and each handler ran exactly once."""
    seen: list[int] = []

    @tool
    def bump(n: int) -> int:
        """Add one."""
        seen.append(n)
        return n + 1

    engine = CodeMode([bump], runner=inproc)
    code = "let n = 0; for (let i = 0; i < 50; i++) n = await tools.bump({ n }); return n"
    result = await engine.run_code(code)
    assert result.status == "finished", result.text
    assert result.value == 50
    assert seen == list(range(50))
    assert len(inproc.steps) + inproc.segments == 51  # the start and 50 steps (live or not)


async def test_worker_refuses_and_answers_by_id(inproc: InProcessRunner) -> None:
    """A worker may refuse a call with its message; the script catches it as an Error."""
    ran: list[str] = []

    @tool
    def delete_repo(name: str) -> str:
        """Delete a repository."""
        ran.append(name)
        return "deleted"

    triggers: list[dict[str, Any]] = []

    def worker(trigger: dict[str, Any]) -> dict[str, Any]:
        triggers.append(trigger)
        call = trigger["tool_calls"][0]
        return {call["id"]: {"type": "tool.error", "message": "not on a Friday"}}

    engine = CodeMode([delete_repo], runner=inproc, worker=worker)
    code = "try { await tools.delete_repo({ name: 'x' }) } catch (e) { return 'no: ' + e.message }"
    result = await engine.run_code(code)
    assert result.value == "no: not on a Friday"
    assert ran == []
    trigger = triggers[0]
    assert trigger["type"] == "codemode.calls"
    assert trigger["tool_calls"][0]["type"] == "function"
    assert trigger["tool_calls"][0]["function"] == {
        "name": "delete_repo",
        "arguments": '{"name":"x"}',
    }


async def test_worker_without_an_answer_fails_the_call(inproc: InProcessRunner) -> None:
    """A call no answer runs or refuses fails, and the script can catch the error."""

    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    engine = CodeMode([ping], runner=inproc, worker=lambda trigger: {})
    code = "try { await tools.ping() } catch (e) { return e.message }"
    result = await engine.run_code(code)
    assert "no answer" in result.value


async def test_a_worker_that_fails_or_answers_wrong_is_in_the_hosts_log(
    inproc: InProcessRunner, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker that raises, or answers a call with what no answer is: the host's log says
    so (only the model saw it), and a wrong answer is not called no answer."""

    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    def failing(trigger: Any) -> Any:
        raise ValueError("policy db down")

    def misspelled(trigger: Any) -> Any:
        return {c["id"]: {"type": "tool.cal"} for c in trigger["tool_calls"]}

    code = "try { await tools.ping() } catch (e) { return e.message }"
    with caplog.at_level(logging.WARNING, logger="codemode"):
        failed = await CodeMode([ping], runner=inproc, worker=failing).run_code(code)
        wrong = await CodeMode([ping], runner=inproc, worker=misspelled).run_code(code)
    assert failed.value == "the host's worker failed on these calls: ValueError: policy db down"
    assert wrong.value.startswith("the host's worker answered {'type': 'tool.cal'} for this call")
    logged = caplog.text
    assert "the host's worker failed" in logged and "policy db down" in logged
    assert "answered {'type': 'tool.cal'}" in logged


async def test_calls_of_one_step_run_concurrently(inproc: InProcessRunner) -> None:
    """Calls a step asks for together run at the same time, not one after another."""
    started = asyncio.Event()
    both = asyncio.Event()
    count = 0

    @tool
    async def wait_for_peer(i: int) -> int:
        """Meet the other call."""
        nonlocal count
        count += 1
        if count == 2:
            both.set()
        await asyncio.wait_for(both.wait(), 5)
        started.set()
        return i

    engine = CodeMode([wait_for_peer], runner=inproc)
    code = "return await Promise.all([tools.wait_for_peer({i: 1}), tools.wait_for_peer({i: 2})])"
    result = await engine.run_code(code)
    assert result.value == [1, 2]


async def test_approval_pauses_then_resumes(inproc: InProcessRunner) -> None:
    """A call that needs approval pauses the script; approving it resumes and runs it once."""
    posted: list[str] = []

    @tool(needs_approval=True)
    def post(text: str) -> str:
        """Post a message."""
        posted.append(text)
        return "ok"

    engine = CodeMode([post], runner=inproc)
    result = await engine.run_code("return await tools.post({ text: 'hi' })")
    assert result.status == "paused"
    assert [w["reason"] for w in result.waiting] == ["approval"]
    assert posted == []
    await engine.approve(result.script_id, result.waiting[0]["call_id"])
    result = await engine.resume(result.script_id)
    assert result.status == "finished"
    assert result.value == "ok"
    assert posted == ["hi"]


@pytest.mark.parametrize(("message", "seen"), [("too loud", "too loud"), (404, "404")])
async def test_rejection_is_an_error_the_script_sees(
    inproc: InProcessRunner, message: Any, seen: str
) -> None:
    """A person's refusal reaches the script as an Error with the refusal's message; a
    message that is no string is its text, as a client_result's error is (404 raised
    TypeError from inside: len() of an int)."""

    @tool(needs_approval=True)
    def post(text: str) -> str:
        """Post a message."""
        return "ok"

    engine = CodeMode([post], runner=inproc)
    result = await engine.run_code(
        "try { await tools.post({ text: 'hi' }) } catch (e) { return e.message }"
    )
    await engine.reject(result.script_id, result.waiting[0]["call_id"], message)
    result = await engine.resume(result.script_id)
    assert result.value == seen


async def test_client_tool_waits_for_the_client(inproc: InProcessRunner) -> None:
    """A client tool pauses the script until the client sends its result."""
    pick = Tool(
        "pick_file",
        description="Let the user pick a file.",
        input_schema={"type": "object", "properties": {}},
        client=True,
    )
    engine = CodeMode([pick], runner=inproc)
    result = await engine.run_code("const f = await tools.pick_file(); return f.name")
    assert result.status == "paused"
    assert result.waiting[0]["reason"] == "client"
    await engine.client_result(result.script_id, result.waiting[0]["call_id"], {"name": "a.txt"})
    result = await engine.resume(result.script_id)
    assert result.value == "a.txt"


async def test_a_client_result_over_the_results_limit_is_not_kept(
    inproc: InProcessRunner, tmp_path: Any
) -> None:
    """A client's answer larger than the script may read is kept as its size, not its bytes
    (as a host tool's is), and the script ends on the results limit."""
    pick = Tool(
        "pick_file",
        description="Let the user pick a file.",
        input_schema={"type": "object", "properties": {}},
        client=True,
    )
    engine = CodeMode([pick], runner=inproc, data_dir=tmp_path, limits=Limits(results=1000))
    paused = await engine.run_code("return (await tools.pick_file()).length")
    await engine.client_result(paused.script_id, paused.waiting[0]["call_id"], "x" * 5_000_000)
    [call] = await engine.store.calls(paused.script_id)
    assert (call.state, call.result, call.result_bytes) == ("done", None, 5_000_002)
    done = await engine.resume(paused.script_id)
    await engine.aclose()
    assert done.status == "failed" and done.limit == "results", done.text


def _nested(levels: int) -> Any:
    deep: Any = []
    for _ in range(levels):
        deep = [deep]
    return deep


@pytest.mark.parametrize(
    ("result", "said"),
    [
        (_nested(MAX_DEPTH), f"nested deeper than {MAX_DEPTH} levels"),
        (float("nan"), "returned the number NaN, which is not JSON data"),
        ({"a": float("inf")}, "returned the number Infinity at a, which is not JSON data"),
    ],
    ids=["deep", "nan", "infinity"],
)
async def test_a_client_result_for_a_tool_this_engine_lacks_is_still_data_the_sandbox_takes(
    inproc: InProcessRunner, tmp_path: Any, result: Any, said: str
) -> None:
    """An engine without the client tool's declaration (another host's) records no result
    a declared tool's call would fail on: one nested past MAX_DEPTH was kept, and every run
    of the script then failed, 'ProtocolError: a malformed 'script' message'; NaN and
    Infinity reached the script as null. The call fails instead, as a declared tool's."""
    pick = Tool(
        "pick_file",
        description="Let the user pick a file.",
        input_schema={"type": "object", "properties": {}},
        client=True,
    )
    engine = CodeMode([pick], runner=inproc, data_dir=tmp_path, type_check="off")
    code = "try { return await tools.pick_file() } catch (e) { return e.message }"
    paused = await engine.run_code(code)
    await engine.aclose()
    other = CodeMode([], runner=inproc, data_dir=tmp_path)
    await other.client_result(paused.script_id, paused.waiting[0]["call_id"], result)
    await other.aclose()
    engine = CodeMode([pick], runner=inproc, data_dir=tmp_path, type_check="off")
    done = await engine.resume(paused.script_id)
    await engine.aclose()
    assert done.status == "finished", done.text
    assert said in done.value, done.value


async def test_a_client_result_for_a_call_that_waits_for_no_client_is_refused_unchecked(
    inproc: InProcessRunner, caplog: pytest.LogCaptureFixture
) -> None:
    """A client's result sent for a host tool's call (one waiting for approval, one done) is
    refused with CallNotWaiting before it is checked: checked first against that tool's
    output schema, it logged "tools.pay returned a result that does not match its output
    schema", of a tool that never ran. The call still waits for its approval."""

    @tool(needs_approval=True)
    def pay(cents: int) -> str:
        """Pay."""
        return f"paid {cents}"

    engine = CodeMode([pay], runner=inproc, type_check="off")
    try:
        paused = await engine.run_code("return await tools.pay({ cents: 3 })")
        call_id = paused.waiting[0]["call_id"]
        with caplog.at_level(logging.INFO, logger="codemode"):
            with pytest.raises(CallNotWaiting, match="is awaiting approval, not awaiting client"):
                await engine.client_result(paused.script_id, call_id, {"not": "a string"})
            await engine.approve(paused.script_id, call_id)
            done = await engine.resume(paused.script_id)
            assert done.value == "paid 3", done.text
            with pytest.raises(CallNotWaiting, match="is done, not awaiting client"):
                await engine.client_result(paused.script_id, call_id, {"not": "a string"})
        assert not [r for r in caplog.records if "output schema" in r.getMessage()], caplog.text
    finally:
        await engine.aclose()


@pytest.mark.parametrize(
    ("language", "code", "number"),
    [
        ("javascript", "try { await tools.measure() } catch (e) { return e.message }", "NaN"),
        (
            "python",
            "try:\n    await tools.measure()\nexcept ToolError as e:\n    return str(e)",
            "nan",
        ),
    ],
)
async def test_a_client_result_that_is_no_json_names_the_number_as_the_script_writes_it(
    inproc: InProcessRunner, tmp_path: Any, language: str, code: str, number: str
) -> None:
    """A client's answer that holds NaN is refused naming it as the calling script writes
    it, as a host tool's is: a JavaScript script read Python's "nan"."""
    measure = Tool(
        "measure",
        description="Measure on the client.",
        input_schema={"type": "object", "properties": {}},
        client=True,
    )
    engine = CodeMode([measure], runner=inproc, data_dir=tmp_path, type_check="off")
    paused = await engine.run_code(code, language=language)  # type: ignore[arg-type]
    await engine.client_result(paused.script_id, paused.waiting[0]["call_id"], float("nan"))
    done = await engine.resume(paused.script_id)
    await engine.aclose()
    assert done.status == "finished", done.text
    assert done.value.startswith(f"tools.measure returned the number {number}, which is not JSON")


async def test_a_closed_engine_refuses_at_once() -> None:
    """run_code, resume and work on an engine after aclose() raise a CodeModeError at once.
    (With a process runner, a step asked the closed runner again every retry_delay until
    queue_timeout: run_code hung five minutes.)"""
    engine = CodeMode([], runner=InProcessRunner(), type_check="off")
    first = await engine.run_code("return 1")
    await engine.aclose()
    await engine.aclose()  # twice is fine
    for started in (
        lambda: engine.run_code("return 2"),
        lambda: engine.resume(first.script_id),
        lambda: engine.work(),
    ):
        with pytest.raises(CodeModeError, match=r"this engine is closed \(aclose\)"):
            await asyncio.wait_for(started(), 30)


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_an_answer_to_a_closed_engine_is_refused(tmp_path: Path, store: str) -> None:
    """An approval, refusal, client result, hold or release given to a closed engine is
    refused as the closed engine's (on the memory store an approval was taken and lost
    without a word; on SQLite it read as StoreUnavailable, which a host retries)."""

    @tool(needs_approval=True)
    def send(to: str) -> str:
        """Send."""
        return "sent"

    log_store = MemoryStore() if store == "memory" else SqliteStore(tmp_path)
    engine = CodeMode([send], runner=InProcessRunner(), store=log_store, type_check="off")
    paused = await engine.run_code('return await tools.send({ to: "a" })')
    call_id = paused.waiting[0]["call_id"]
    await engine.aclose()
    for answer in (
        lambda: engine.approve(paused.script_id, call_id),
        lambda: engine.reject(paused.script_id, call_id, "no"),
        lambda: engine.client_result(paused.script_id, call_id, 1),
        lambda: engine.hold(paused.script_id),
        lambda: engine.release(paused.script_id),
        lambda: engine.check_tools(paused.script_id),
    ):
        with pytest.raises(CodeModeError, match=r"this engine is closed \(aclose\)"):
            await answer()


@pytest.mark.parametrize("read_only", [False, True])
async def test_an_outcome_the_log_cannot_take_says_the_call_ran(read_only: bool) -> None:
    """A call that ran, whose result the log could not take (a full disk), is named in the
    error, with what the resume will do: the message said "nothing written is lost: resume
    the script once it can", and the resume then failed the script on the interrupted call."""

    class FullDisk(MemoryStore):
        async def settle(self, lease: Any, settlements: Any) -> bool:
            raise StoreUnavailable(
                "the session log could not be written (database or disk is full); nothing "
                "written is lost: resume the script once it can"
            )

    @tool(read_only=read_only)
    def send(to: str) -> str:
        """Send."""
        return "sent"

    engine = CodeMode([send], runner=InProcessRunner(), store=FullDisk(), type_check="off")
    try:
        with pytest.raises(StoreUnavailable) as caught:
            await engine.run_code('return await tools.send({ to: "a" })')
    finally:
        await engine.aclose()
    said = str(caught.value)
    assert said.startswith("tools.send (call ") and "ran, but the log could not take" in said
    assert "disk is full" in said
    assert ("runs again" if read_only else "finds it interrupted") in said, said


async def test_async_with_closes_the_engine_even_on_an_error() -> None:
    """``async with CodeMode(...) as engine`` is the engine, closed at the block's end, by
    an exception too."""
    with pytest.raises(RuntimeError, match="the host's own"):
        async with CodeMode([], runner=InProcessRunner(), type_check="off") as engine:
            assert (await engine.run_code("return 1")).status == "finished"
            raise RuntimeError("the host's own")
    with pytest.raises(CodeModeError, match=r"this engine is closed \(aclose\)"):
        await engine.run_code("return 2")


def test_a_result_as_data_holds_every_field_and_shares_its_value() -> None:
    """What the log keeps of an outcome: every field and the content blocks. Not a copy:
    the value of a script that returned 256 KiB, copied field by field, cost its return
    50 to 80 ms."""
    value = [{"i": i, "tags": ["a", "b"]} for i in range(3)]
    result = RunResult("s", "finished", "text", value=value, returned=True, steps=2)
    data = result.to_dict()
    assert data == dataclasses.asdict(result) | {"content": result.content}
    assert data["value"] is value
    assert RunResult.from_dict(data) == result


async def test_hold_stops_steps_until_release(inproc: InProcessRunner) -> None:
    """An interrupt holds a script: no step runs and no call goes out until it is released."""
    ran: list[int] = []

    @tool(needs_approval=True)
    def step(i: int) -> int:
        """A step."""
        ran.append(i)
        return i

    engine = CodeMode([step], runner=inproc)
    result = await engine.run_code("return await tools.step({ i: 1 })")
    await engine.approve(result.script_id, result.waiting[0]["call_id"])
    await engine.hold(result.script_id)
    steps_before = len(inproc.steps)
    held = await engine.resume(result.script_id)
    assert held.status == "paused" and "held" in held.text
    assert ran == [] and len(inproc.steps) == steps_before
    await engine.release(result.script_id)
    done = await engine.resume(result.script_id)
    assert done.value == 1 and ran == [1]


@pytest.mark.parametrize("store", ["memory", "sqlite"])
@pytest.mark.parametrize("live", [True, False])
async def test_a_hold_that_lands_while_a_call_runs_stops_the_script_after_it(
    inproc: InProcessRunner, tmp_path: Path, store: str, live: bool
) -> None:
    """A hold that landed while a call ran let the next step run all the same: it could
    finish the script, held ("no step runs"). The write of the call's result finds the hold
    (its fence reads the script's row anyway): the call's result is kept, no step runs after
    it, and the script pauses held until released."""
    ran: list[int] = []
    engine: CodeMode

    @tool
    async def charge(amount: int, ctx: ToolContext) -> str:
        """Charge the card."""
        ran.append(amount)
        await engine.hold(ctx.script_id)  # a person holds the script while the call runs
        return f"charged {amount}"

    log_store = MemoryStore() if store == "memory" else SqliteStore(tmp_path)
    engine = CodeMode([charge], runner=inproc, store=log_store, live=live)
    code = "const r = await tools.charge({ amount: 5 });\nreturn r;"
    steps_before = len(inproc.steps)
    held = await engine.run_code(code)
    assert (held.status, ran) == ("paused", [5]), held.text
    assert "held" in held.text and len(inproc.steps) == steps_before + 1
    await engine.release(held.script_id)
    done = await engine.resume(held.script_id)
    assert (done.status, done.value, ran) == ("finished", "charged 5", [5])
    await engine.aclose()


async def test_tool_context_reaches_the_handler(inproc: InProcessRunner) -> None:
    """The host's context is given to a handler that asks for it, never by the model."""

    @tool
    def whoami(ctx: ToolContext[dict[str, str]]) -> str:
        """Who is calling."""
        return f"{ctx.host['user']}@{ctx.tenant}#{ctx.call_index}"

    assert "ctx" not in whoami.input_schema.get("properties", {})
    engine = CodeMode([whoami], runner=inproc, context={"user": "ana"})
    result = await engine.run_code("return await tools.whoami()", tenant="acme")
    assert result.value == "ana@acme#0"


async def test_tool_errors_are_catchable(inproc: InProcessRunner) -> None:
    """A tool that raises, times out or returns non-JSON fails the call; the script goes on."""

    @tool
    def boom() -> str:
        """Raise."""
        raise RuntimeError("disk on fire")

    @tool(timeout=0.2)
    async def hang() -> str:
        """Hang."""
        await asyncio.sleep(30)
        return "late"

    @tool
    def weird() -> Any:
        """Return a set."""
        return {1, 2}

    engine = CodeMode([boom, hang, weird], runner=inproc)
    code = """
    const out = [];
    for (const name of ["boom", "hang", "weird"]) {
      try { await tools[name]() } catch (e) { out.push(e.message) }
    }
    return out
    """
    result = await engine.run_code(code)
    assert result.status == "finished", result.text
    boom_msg, hang_msg, weird_msg = result.value
    assert "disk on fire" in boom_msg
    assert "timed out" in hang_msg
    assert "set" in weird_msg and "JSON" in weird_msg
    # and the engine serves the next script
    again = await engine.run_code("return 1")
    assert again.value == 1


async def test_run_code_arguments_that_give_the_code_twice_are_refused(
    inproc: InProcessRunner,
) -> None:
    """OpenAI's arguments are JSON text, which may give a key twice: the parse kept the
    last code, and the first script was dropped without a word to the model. Given twice,
    the call starts no script and says so; code that holds "code" in it, or an argument
    object nested under it, is a call as any other."""
    engine = CodeMode([], runner=inproc, type_check="off")
    try:
        twice = await engine.call_tool("run_code", '{"code": "return 1", "code": "return 2"}')
        assert twice.status == "failed" and twice.text == (
            'run_code takes only {"code": "<the script>"}; its arguments give code 2 times: '
            "give it once"
        ), twice.text
        assert await engine.store.scripts() == []
        # The second spelled with an escape, as JSON may spell any key.
        escaped = await engine.call_tool("run_code", r'{"code": "return 1", "\u0063ode": "2"}')
        assert "its arguments give code 2 times" in escaped.text, escaped.text
        assert await engine.store.scripts() == []
        quoted = await engine.call_tool("run_code", r'{"code": "return {\"code\": 3}.code"}')
        assert quoted.value == 3, quoted.text
        nested = await engine.call_tool("run_code", '{"code": "return 4", "x": {"code": 1}}')
        assert nested.text.endswith("leave out 'x'"), nested.text
    finally:
        await engine.aclose()


async def test_invalid_arguments_are_refused_before_the_handler(inproc: InProcessRunner) -> None:
    """Every call is checked against the input schema before it runs (this is the run-time
    check, which a call meets when the type check is off or cannot see it)."""
    ran: list[int] = []

    @tool
    def square(n: int) -> int:
        """Square a number."""
        ran.append(n)
        return n * n

    engine = CodeMode([square], runner=inproc, type_check="off")
    result = await engine.run_code(
        "try { await tools.square({ n: 'x' }) } catch (e) { return e.message }"
    )
    assert "n" in result.value and ran == []


async def test_unknown_tool_names_the_closest(inproc: InProcessRunner) -> None:
    """A call to a tool that does not exist throws, naming the closest tools (at run time,
    with the type check off; with it on, the compiler names them before the script runs)."""
    calls: list[tuple[str, Any]] = []
    engine = CodeMode(_github(calls), runner=inproc, type_check="off")
    result = await engine.run_code("await tools.github__list_pr({})")
    assert result.status == "failed"
    assert "tools.github__list_prs" in result.text


async def test_tool_search_from_a_script(inproc: InProcessRunner) -> None:
    """tools.tool_search answers as text with the matching declarations."""
    calls: list[tuple[str, Any]] = []
    engine = CodeMode(_github(calls), runner=inproc)
    result = await engine.run_code("return await tools.tool_search({ query: 'reviews' })")
    assert result.status == "finished", result.text
    assert "github__get_reviews" in result.value


async def test_results_over_the_limit_end_the_script(
    inproc: InProcessRunner, caplog: pytest.LogCaptureFixture
) -> None:
    """The results limit counts what calls return, over the whole script. The model reads
    what it can do; the host's log says which setting raises the limit."""

    @tool
    def blob() -> str:
        """A big result."""
        return "x" * 5000

    engine = CodeMode([blob], runner=inproc, limits=Limits(results=8000))
    with caplog.at_level(logging.WARNING, logger="codemode"):
        result = await engine.run_code("await tools.blob(); await tools.blob(); return 1")
    assert result.status == "failed"
    assert result.limit == "results"
    assert "ask tools for less" in result.text and "[codemode.limits]" not in result.text
    (hint,) = [r.getMessage() for r in caplog.records if "ended on a limit" in r.getMessage()]
    assert f"script={result.script_id}" in hint and hint.endswith("raise [codemode.limits] results")


async def test_limits_per_tenant(inproc: InProcessRunner) -> None:
    """A host can give limits per tenant; each step asks for the tenant's."""

    @tool
    def one() -> int:
        """One."""
        return 1

    def limits(tenant: str) -> Limits:
        return Limits(calls=1) if tenant == "small" else Limits()

    engine = CodeMode([one], runner=inproc, limits=limits)
    code = "await tools.one(); await tools.one(); return 2"
    assert (await engine.run_code(code, tenant="big")).value == 2
    small = await engine.run_code(code, tenant="small")
    assert small.limit == "calls"


async def test_a_limits_function_that_raises_after_a_call_ran_loses_no_result(
    inproc: InProcessRunner, tmp_path: Path
) -> None:
    """The limits function is the host's code (a quota looked up in its database, say). One
    that began to raise while a call ran made the engine lose that call's result: it was
    asked again for the results budget before the result was written, so the call stayed
    running in the log and a resume would find it interrupted. Now the result is written
    and the script goes on. Its error at the next start reaches the host as it is, with a
    note naming the limits function and the tenant."""
    down = False
    ran: list[int] = []

    @tool
    def charge(amount: int) -> str:
        """Charge the card."""
        nonlocal down
        ran.append(amount)
        down = True  # the quota database goes away while the call runs
        return f"charged {amount}"

    def limits(tenant: str) -> Limits:
        if down:
            raise ConnectionError("quota database unreachable")
        return Limits()

    engine = CodeMode([charge], runner=inproc, store=SqliteStore(tmp_path), limits=limits)
    result = await engine.run_code("return await tools.charge({ amount: 5 })")
    assert (result.status, result.value, ran) == ("finished", "charged 5", [5])
    with pytest.raises(ConnectionError, match="quota database unreachable") as raised:
        await engine.run_code("return 1", tenant="acme")
    assert raised.value.__notes__ == ["raised by the engine's limits function, for tenant 'acme'"]
    await engine.aclose()


async def test_fenced_and_function_scripts(inproc: InProcessRunner) -> None:
    """Models write a bare body, a Markdown fence or an async function; all run."""
    engine = CodeMode([], runner=inproc)
    fenced = "```javascript\nconsole.log('a');\nreturn 1\n```"
    arrow = "async () => {\n  return 2;\n}"
    assert (await engine.run_code(fenced)).value == 1
    assert (await engine.run_code(arrow)).value == 2
    typed_arrow = "async (): Promise<number[]> => {\n  const n: number = 3;\n  return [n];\n}"
    typed_function = (
        "(async function main(): Promise<Record<string, number>> {\n  return { a: 4 };\n})"
    )
    assert (await engine.run_code(typed_arrow)).value == [3]
    assert (await engine.run_code(typed_function)).value == {"a": 4}
    failing = "```js\nconst a = 1;\nnull.x;\n```"
    result = await engine.run_code(failing)
    assert "at line 3: null.x;" in result.text
    # A brace in a regex literal is no block's: the function is unwrapped all the same (it
    # was run as an expression statement, and its value, the returned one, went nowhere).
    for body, value in [
        ('const re = /[{]/;\n  return "x{".replace(re, "");', "x"),
        ("return [/}/.test('}'), 6 / 3 / 2, /\\//.source];", [True, 1, "\\/"]),
        ("const half = 8\n  / 2;\n  return { half };", {"half": 4}),
    ]:
        arrow = f"async () => {{\n  {body}\n}}"
        assert (await engine.run_code(arrow)).value == value, arrow


async def test_a_hashbang_line_is_taken_as_node_js_takes_it(inproc: InProcessRunner) -> None:
    """A script that begins as a Node.js file does (`#!/usr/bin/env node`) runs, its lines
    numbered as written (it failed with a SyntaxError read as Python: "the script reads as
    Python, and run_code runs JavaScript here")."""
    engine = CodeMode([], runner=inproc)
    assert (await engine.run_code("#!/usr/bin/env node\nreturn 1")).value == 1
    fenced = await engine.run_code("```js\n#!/usr/bin/env node\nconst a = 1;\nnull.x;\n```")
    assert "at line 4: null.x;" in fenced.text and "Python" not in fenced.text, fenced.text
    # Only at the start, as Node.js has it: elsewhere it is no comment.
    later = await engine.run_code("const a = 1;\n#!/usr/bin/env node\nreturn a")
    assert later.error is not None and later.error["name"] == "SyntaxError", later.text
    await engine.aclose()


async def test_a_fence_of_another_language_is_named(inproc: InProcessRunner) -> None:
    """A ```python fence sent where scripts are JavaScript (or a ```ts one to Python) ran as
    the other language and failed on its first line ("not a function"): it fails saying which
    language scripts are here, and nothing runs."""
    engine = CodeMode([], runner=inproc, type_check="off")
    result = await engine.run_code("```python\nprint('hi')\nreturn 1\n```")
    assert result.status == "failed" and result.error == {"name": "ScriptError"}
    assert result.text == (
        "Script failed.\nScriptError: the script is a ```python code fence, but scripts here "
        "are JavaScript: write it in JavaScript"
    )
    result = await engine.run_code("```ts\nreturn 1\n```", language="python")
    assert "```ts code fence, but scripts here are Python" in result.text
    assert (await engine.run_code("```py\nreturn 1\n```", language="python")).value == 1
    assert (await engine.run_code("```\nreturn 1\n```")).value == 1
    # A byte order mark before a script (some editors save one) is no part of it.
    assert (await engine.run_code("\ufeffreturn 1", language="python")).value == 1
    assert (await engine.run_code("\ufeff```js\nreturn 2\n```")).value == 2


async def test_garbage_script_gets_a_clear_error(inproc: InProcessRunner) -> None:
    """A megabyte of garbage is refused with a message, and the next script runs."""
    engine = CodeMode([], runner=inproc)
    result = await engine.run_code("@#$%^" * 200_000)
    assert result.status == "failed"
    assert "over the" in result.text and "bytes" in result.text
    small_garbage = await engine.run_code("@#$%^ }}} (((")
    assert small_garbage.status == "failed" and "SyntaxError" in small_garbage.text
    assert (await engine.run_code("return 'fine'")).value == "fine"


async def test_result_text_is_cut_in_the_middle(inproc: InProcessRunner) -> None:
    """Past 24 KiB the middle is cut with a note, so the start and the end stay."""
    engine = CodeMode([], runner=inproc)
    code = "console.log('START'); console.log('y'.repeat(100000)); return 'END'"
    result = await engine.run_code(code)
    assert len(result.text.encode()) <= 24 * 1024
    assert result.text.startswith("Script finished.\nPrinted:\nSTART")
    assert result.text.endswith("END")
    assert "cut from the middle" in result.text


async def test_a_cut_of_text_cut_before_counts_both(inproc: InProcessRunner) -> None:
    """Printed text the run cut (past its first and last 64 KiB) and cut again to the text
    budget: the note says what both cut, not only its own ~100 KiB of the 10 MB. An error
    message is cut once, to the bound every runner holds it to, and its count is whole."""
    engine = CodeMode([], runner=inproc)
    printed = await engine.run_code("console.log('x'.repeat(10_000_000)); return 'END'")
    notes = re.findall(r"\[\.\.\. [^\]]* \.\.\.\]", printed.text)
    assert len(notes) == 1, notes
    assert re.fullmatch(
        r"\[\.\.\. [0-9,]+ bytes cut from the middle, where 9\.4 MiB of printed output had "
        r"been cut \.\.\.\]",
        notes[0],
    )
    thrown = await engine.run_code("throw new Error('e'.repeat(100_000))")
    notes = re.findall(r"\[\.\.\. [^\]]* \.\.\.\]", thrown.text)
    assert notes == ["[... 91,856 characters cut ...]"]


async def test_a_pause_on_many_calls_stays_within_the_text_budget(
    inproc: InProcessRunner,
) -> None:
    """A script that waits on 1,500 approvals at once: the model's text keeps the budget
    (it was 72 KB, every waiting call a line), cut in the middle as other results are;
    ``waiting`` still names every call."""
    from engine import TEXT_BUDGET

    @tool(needs_approval=True)
    def post(i: int) -> int:
        """Post."""
        return i

    engine = CodeMode([post], runner=inproc, type_check="off", limits=Limits(calls=2000))
    result = await engine.run_code(
        "return await Promise.all(Array.from({ length: 1500 }, (_, i) => tools.post({ i })))"
    )
    await engine.aclose()
    assert result.status == "paused" and len(result.waiting) == 1500
    assert len(result.text.encode()) <= TEXT_BUDGET
    assert result.text.startswith("Script paused.\n  approval: tools.post")
    assert "cut from the middle" in result.text
    assert result.text.endswith("It continues from where it stopped when these are answered.")


async def test_failed_text_has_error_lines_and_printed(inproc: InProcessRunner) -> None:
    """A script that throws gives Script failed., the error, its lines, then the printed text."""
    engine = CodeMode([], runner=inproc)
    code = "console.log('before');\nfunction f() {\n  throw new Error('bad thing');\n}\nf();"
    result = await engine.run_code(code)
    assert result.text == (
        "Script failed.\nError: bad thing\n  at line 3: throw new Error('bad thing');\n"
        "  at line 5: f();\nPrinted:\nbefore"
    )


async def test_ended_script_resumes_to_its_result() -> None:
    """Resuming a finished script answers its stored result without running it again."""
    runner = InProcessRunner()
    store = MemoryStore()
    engine = CodeMode([], runner=runner, store=store)
    first = await engine.run_code("return 7")
    again = await engine.resume(first.script_id)
    assert again.value == 7 and again.text == first.text
    assert len(runner.steps) == 1


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ broke")


@pytest.mark.parametrize("bad", ["kind", "other", "unprintable"])
async def test_bad_worker_answers_refuse_the_calls(inproc: InProcessRunner, bad: str) -> None:
    """A worker that raises (even an exception whose ``__str__`` fails, which ended the
    drive) or answers nonsense refuses the calls with a message."""

    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    def worker(trigger: dict[str, Any]) -> Any:
        if bad == "kind":
            return 42
        if bad == "unprintable":
            raise _Unprintable()
        raise RuntimeError("worker down")

    engine = CodeMode([ping], runner=inproc, worker=worker)
    result = await engine.run_code("try { await tools.ping() } catch (e) { return e.message }")
    assert "worker" in result.value


async def test_each_step_logs_a_script_step_line(
    inproc: InProcessRunner, caplog: pytest.LogCaptureFixture
) -> None:
    """One `script step` line per step on the codemode logger, with tenant, results bytes,
    wait, run time, heap, CPU and the limit met; a warning past half the compute allowance."""

    @tool
    def one() -> int:
        """One."""
        return 1

    engine = CodeMode([one], runner=inproc, limits=Limits(compute_ms=5000))
    with caplog.at_level(logging.INFO, logger="codemode"):
        await engine.run_code("await tools.one(); return 2", tenant="acme")
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("script step ")]
    assert len(lines) == 2
    for field in (
        "tenant=acme",
        "results_bytes=",
        "wait_ms=",
        "run_ms=",
        "heap_bytes=",
        "cpu_ms=",
        "limit=-",
    ):
        assert field in lines[0]
    assert "results_bytes=1 " in lines[1]

    caplog.clear()
    slow = CodeMode([], runner=inproc, limits=Limits(compute_ms=10))
    with caplog.at_level(logging.INFO, logger="codemode"):
        await slow.run_code("let x = 0; for (let i = 0; i < 3e6; i++) x += i; return x")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings and "over half" in warnings[0].getMessage()


async def test_a_tenant_s_line_breaks_forge_no_log_line(
    inproc: InProcessRunner, caplog: pytest.LogCaptureFixture
) -> None:
    """A tenant is the host's caller's text: its control characters are escapes in the log's
    lines (one line per step, as for any tenant), and as given in the record's fields and
    the events (a JSON log writes them as it escapes anything)."""
    tenant = "acme\nscript step script=forged tenant=root\x1b[2J"
    engine = CodeMode([], runner=inproc, limits=Limits(compute_ms=10))
    with caplog.at_level(logging.INFO, logger="codemode"):
        await engine.run_code(
            "let x = 0; for (let i = 0; i < 3e6; i++) x += i; return x", tenant=tenant
        )
    logged = [r for r in caplog.records if r.name == "codemode"]
    said = [r.getMessage() for r in logged if "tenant=" in r.getMessage()]
    assert len(said) == 2, said  # the step, and its warning: over half its allowance
    for message in said:
        assert "\n" not in message and "\x1b" not in message
        assert "tenant=acme\\x0ascript step script=forged tenant=root\\x1b[2J" in message
    step = next(r for r in logged if r.getMessage().startswith("script step script="))
    assert step.tenant == tenant  # type: ignore[attr-defined]


async def test_huge_result_is_not_stored_and_ends_the_script(inproc: InProcessRunner) -> None:
    """A result over the results budget on its own is not kept in the log; the script ends
    on the results limit."""
    store = MemoryStore()

    @tool
    def dump() -> str:
        """A 20 MB result."""
        return "z" * 20_000_000

    engine = CodeMode([dump], runner=inproc, store=store)
    result = await engine.run_code("const s = await tools.dump(); return s.length")
    assert result.limit == "results" and "results limit met" in result.text
    (call,) = await store.calls(result.script_id)
    assert call.result is None and call.result_bytes == 20_000_002


async def test_a_hanging_tool_meets_the_default_call_timeout(inproc: InProcessRunner) -> None:
    """A tool with no timeout of its own still has the engine's call deadline."""

    @tool
    async def hang() -> str:
        """Never answers."""
        await asyncio.sleep(3600)
        return "never"

    engine = CodeMode([hang], runner=inproc, call_timeout=0.2)
    result = await engine.run_code("try { await tools.hang() } catch (e) { return e.message }")
    assert result.value == (
        "tools.hang timed out after 0.2 s and was stopped, so it may or may not have taken "
        "effect; check before calling it again"
    )


class _Refusing(InProcessRunner):
    """A runner that cannot take steps: for a while, or for good."""

    def __init__(self, failures: int, permanent: bool = False) -> None:
        super().__init__()
        self.failures = failures
        self.permanent = permanent
        self.tries = 0

    async def run(self, script: Any, files: Any = None, *, tenant: str = "default") -> Any:
        self.tries += 1
        if self.tries <= self.failures:
            raise RunError("busy right now", permanent=self.permanent)
        return await super().run(script, files, tenant=tenant)


async def test_run_errors_requeue_the_step_until_a_runner_takes_it() -> None:
    """A runner that cannot take a step now gets it again a little later."""
    runner = _Refusing(failures=2)
    engine = CodeMode([], runner=runner, retry_delay=0.01, queue_timeout=5)
    assert (await engine.run_code("return 3")).value == 3
    assert runner.tries == 3


async def test_a_requeued_step_is_logged_once_not_at_every_try(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A step no runner takes is logged at its first requeue and then once a minute, not
    at every retry_delay (an unreachable service wrote a hundred such lines in five
    minutes)."""
    runner = _Refusing(failures=30)
    engine = CodeMode([], runner=runner, retry_delay=0.001, queue_timeout=30)
    with caplog.at_level(logging.WARNING, logger="codemode"):
        assert (await engine.run_code("return 3")).value == 3
    assert runner.tries == 31
    (line,) = [r.getMessage() for r in caplog.records if "requeued" in r.getMessage()]
    assert "up to queue_timeout 30 s): busy right now" in line


async def test_a_queue_timeout_under_the_retry_delay_still_tries_again() -> None:
    """A step refused once, with queue_timeout shorter than retry_delay, is tried again at
    queue_timeout (it was given up at once: "in 0.0 s of trying")."""
    runner = _Refusing(failures=1)
    engine = CodeMode([], runner=runner, retry_delay=3, queue_timeout=0.2)
    assert (await engine.run_code("return 3")).value == 3
    assert runner.tries == 2
    never = _Refusing(failures=10**6)
    engine = CodeMode([], runner=never, retry_delay=3, queue_timeout=0.2)
    with pytest.raises(StepUnavailable, match=r"of trying \(queue_timeout 0.2 s") as caught:
        await engine.run_code("return 4")
    assert never.tries == 2
    # Tried again at queue_timeout, not given up at once; a loaded machine may wake later.
    waited = re.search(r"in (\d+\.\d) s of trying", str(caught.value))
    assert waited is not None and float(waited.group(1)) >= 0.2, caught.value


async def test_queue_timeout_and_permanent_refusals_raise_step_unavailable() -> None:
    """Past the queue timeout, or when waiting cannot help, the host gets StepUnavailable and
    the script stays in the log, resumable."""
    engine = CodeMode([], runner=_Refusing(failures=10**6), retry_delay=0.01, queue_timeout=0.05)
    with pytest.raises(
        StepUnavailable, match=r"in \d+\.\d s of trying \(queue_timeout 0.05 s; the last try: "
    ) as waited:
        await engine.run_code("return 3")
    assert not waited.value.permanent  # the same step may be taken later
    refused = _Refusing(failures=1, permanent=True)
    engine = CodeMode([], runner=refused, retry_delay=10, queue_timeout=600)
    with pytest.raises(StepUnavailable, match="fix that") as info:
        await engine.run_code("return 4")
    assert refused.tries == 1 and info.value.permanent
    (record,) = await engine.store.scripts()
    assert (await engine.resume(record.id)).value == 4
    assert "busy right now" in str(info.value)


def test_direct_calls_are_refused_with_a_pointer_to_run_code() -> None:
    """Code mode is all or nothing: a direct call to a tool is refused with an error that
    says to call it from run_code."""
    calls: list[tuple[str, Any]] = []
    engine = CodeMode(_github(calls), runner=InProcessRunner())
    message = engine.direct_call_error("github__list_prs")
    assert "call it from run_code" in message and "tools.github__list_prs(" in message
    near = engine.direct_call_error("github__list_pr")
    assert "(the closest are tools.github__list_prs" in near and "which a script calls" in near
    # The name is the model's: said back within bounds, whatever it is (a name of 10,000
    # characters came back whole; None raised AttributeError).
    assert len(engine.direct_call_error("x" * 10_000)) < 300
    assert engine.direct_call_error(None).startswith("there is no tool 'None'")  # type: ignore[arg-type]


# ---- every way a script ends is a result: bad handler results, lying runners --------------


def _misbehaving_tools() -> list[Tool]:
    @tool
    def huge() -> int:
        """An integer past 64 bits."""
        return 2**70

    @tool
    def lone() -> str:
        """Text with a lone surrogate."""
        return "a\ud800b"

    @tool
    def deep() -> list[Any]:
        """Data nested past the wire's bound."""
        value: list[Any] = []
        for _ in range(300):
            value = [value]
        return value

    @tool
    def raises_lone() -> str:
        """An error whose message has a lone surrogate."""
        raise ValueError("bad \ud800 input")

    @tool
    def raises_huge() -> str:
        """An error with a 16 MB message."""
        raise ValueError("m" * 16_000_000)

    return [huge, lone, deep, raises_lone, raises_huge]


@pytest.mark.parametrize("name", ["huge", "lone", "deep", "raises_lone", "raises_huge"])
async def test_a_bad_handler_result_is_that_calls_error(
    inproc: InProcessRunner, tmp_path: Any, name: str
) -> None:
    """A result no script could be sent, or an error no log could keep, becomes the call's
    error: the script catches it, the log records it (never left `running`), and a resume
    gives the same result."""
    engine = CodeMode(_misbehaving_tools(), runner=inproc, data_dir=tmp_path)
    code = (
        f"try {{ return await tools.{name}({{}}) }} catch (e) {{ return 'caught: ' + e.message }}"
    )
    result = await engine.run_code(code)
    assert result.status == "finished", result.text
    assert result.value.startswith("caught: ")
    assert len(result.value) < 10_000
    if name == "huge":  # JSON's encoder refused it
        assert "returned a result JSON cannot carry" in result.value
        assert "a defect of the tool on the host's side" in result.value
    if name == "lone":  # declared `-> str`, the output check took the surrogate
        assert "returned text with a lone surrogate, which JSON cannot carry" in result.value
    [call] = await engine.store.calls(result.script_id)
    assert call.state == "failed" and call.error is not None
    assert len(call.error) < 10_000
    again = await engine.resume(result.script_id)
    assert again.value == result.value


async def test_an_integer_past_64_bits_names_the_fix_to_the_host(
    inproc: InProcessRunner, caplog: pytest.LogCaptureFixture
) -> None:
    """The fix is the tool author's: the host's log names it, and the script is told its
    call failed through no fault of its own (it was given the author's advice, and the host
    was told nothing)."""
    engine = CodeMode(_misbehaving_tools(), runner=inproc)
    with caplog.at_level(logging.WARNING, logger="codemode"):
        result = await engine.run_code("return await tools.huge({})")
    assert result.status == "failed"
    assert "tools.huge returned a result JSON cannot carry" in result.text
    assert "not of the script" in result.text and "64 bits" not in result.text
    assert any("64 bits" in r.getMessage() for r in caplog.records), caplog.records


async def test_a_script_with_a_lone_surrogate_fails_with_a_script_error(
    inproc: InProcessRunner, tmp_path: Any
) -> None:
    """SQLite cannot keep text with a lone surrogate: the script fails, saying where."""
    engine = CodeMode([], runner=inproc, data_dir=tmp_path)
    result = await engine.run_code("const a = 1;\nreturn '\ud800'")
    assert result.status == "failed"
    assert result.error == {"name": "ScriptError"}
    assert "line 2 has a lone surrogate (U+D800)" in result.text


async def test_a_script_with_a_nul_fails_with_a_script_error_on_every_store(
    make_store: Any,
) -> None:
    """A NUL in a script (a model's JSON arguments can hold one, as \\u0000) is refused as a
    lone surrogate is, on every store: PostgreSQL's text cannot keep it, and run_code raised
    its DataError there. Written as an escape, it runs."""
    engine = CodeMode([], runner=InProcessRunner(), store=make_store(), type_check="off")
    try:
        result = await engine.run_code('const a = 1;\nreturn "a\x00b"')
        assert result.status == "failed" and result.error == {"name": "ScriptError"}
        assert "line 2 has a NUL character (U+0000)" in result.text
        assert await engine.store.scripts() == []
        result = await engine.run_code('return "a\\u0000b"')
        assert result.value == "a\x00b"
    finally:
        await engine.aclose()


class _Lying(ScriptRunner):
    """A runner whose every step is ``make(script)``: what a lying or broken runner says."""

    def __init__(self, make: Any) -> None:
        self.make = make

    async def run(
        self, script: Script, files: FileReader | None = None, *, tenant: str = "default"
    ) -> Step:
        return self.make(script)


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


async def test_data_nested_past_the_encoder_from_a_runner_is_a_failed_result() -> None:
    """A returned value or call arguments nested 300 deep fail the script; nothing raises.
    (The protocol's models refuse such data when they parse it, so the lying runner builds
    its step without them, as a runner of the host's own could.)"""
    deep = _nested(300)
    value = CodeMode(
        [], runner=_Lying(lambda s: Step.model_construct(outcome="finished", value=deep))
    )
    result = await value.run_code("return 1")
    assert result.status == "failed" and result.error is not None
    assert result.error["name"] == "ProtocolError"

    @tool
    def t(a: Any = None) -> int:
        """A tool."""
        return 1

    calls = [Call.model_construct(name="t", arguments={"a": deep})]
    arguments = CodeMode(
        [t], runner=_Lying(lambda s: Step.model_construct(outcome="calls", calls=calls))
    )
    result = await arguments.run_code("return 1")
    assert result.status == "failed" and result.error is not None
    assert result.error["name"] == "ProtocolError"
    assert await arguments.store.calls(result.script_id) == []


async def test_a_runner_reporting_calls_past_the_limit_meets_it_naming_the_refused_call() -> None:
    """The engine re-checks the calls a runner reports: four new calls under calls = 3 end
    the script on the limit, the message naming the 4th call as refused, none of them made."""

    @tool
    def t() -> int:
        """A tool."""
        return 1

    calls = [Call(name="t", arguments={}) for _ in range(4)]
    engine = CodeMode(
        [t],
        runner=_Lying(lambda s: Step(outcome="calls", calls=calls)),
        limits=Limits(calls=3),
    )
    result = await engine.run_code("return 1")
    assert result.status == "failed" and result.limit == "calls", result.text
    assert "the script's 4th call is over the 3 calls one script may make" in result.text
    assert await engine.store.calls(result.script_id) == []


async def test_a_failure_without_a_name_is_shown_as_an_error() -> None:
    """A failed step whose error has no name still reads as an error to the model."""
    failed = Step(outcome="failed", error=ScriptError(name="", message=""))
    engine = CodeMode([], runner=_Lying(lambda s: failed))
    result = await engine.run_code("return 1")
    assert result.text == "Script failed.\nError"
    assert result.error is not None and result.error["name"] == "Error"


async def test_budgets_are_charged_what_the_runner_measured(inproc: InProcessRunner) -> None:
    """A process that reports negative CPU and file bytes refills no budget: the engine
    charges the runner's measures (10 ms and 100 bytes a step here)."""

    class Measured(ScriptRunner):
        async def run(
            self, script: Script, files: FileReader | None = None, *, tenant: str = "default"
        ) -> Step:
            step = await inproc.run(script, files, tenant=tenant)
            step.stats = Stats(cpu_ms=-1e9, file_bytes=-(10**12))
            step.process = ProcessStats(cpu_ms=10.0, file_bytes=100)
            return step

    @tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    engine = CodeMode([echo], runner=Measured(), limits=Limits(total_compute_ms=25))
    code = "for (const i of [1, 2, 3, 4]) await tools.echo({ text: 'x' + i }); return 'done'"
    result = await engine.run_code(code)
    assert result.limit == "total_compute_ms", result.text
    record = await engine.store.get_script(result.script_id)
    assert (record.steps, record.total_compute_ms, record.total_file_bytes) == (3, 30.0, 300)


async def test_a_run_the_runner_ended_on_the_total_cpu_says_the_total_was_used() -> None:
    """A run the runner ended at what was left of total_compute_ms, charged a little less
    than that (the timer and the charge are read apart), says the script used all of it:
    it said "used 1,498 ms of CPU in all, and one script may use 1,500 ms"."""
    message = "total_compute_ms limit met: the script's runs used all the CPU"
    ended = Step.failure(
        "LimitError", message, limit="total_compute_ms", process=ProcessStats(cpu_ms=1498.0)
    )
    engine = CodeMode([], runner=_Lying(lambda s: ended), limits=Limits(total_compute_ms=1500))
    result = await engine.run_code("for (;;) {}")
    assert result.limit == "total_compute_ms", result.text
    assert "have used all the 1,500 ms of CPU one script may use" in result.text, result.text
    assert "1,498" not in result.text


async def test_strings_from_the_process_are_bounded_in_the_result_and_the_log(
    tmp_path: Any,
) -> None:
    """A 16 MB error message and a 12 MB tool name from a lying process end up cut."""
    python = make_standin_python(tmp_path)
    async with ProcessRunner(mode="exec", python=python) as runner:
        engine = CodeMode([], runner=runner, data_dir=tmp_path / "log")
        for behaviour in ("big_error", "big_name"):
            result = await engine.run_code(f"// standin: {behaviour}\nreturn 1")
            assert result.status == "failed" and result.error is not None
            assert len(result.error["message"]) < 2 * TEXT_BOUNDS["message"]
            assert len(result.error["name"]) < 2 * TEXT_BOUNDS["name"]
            stored = (await engine.store.get_script(result.script_id)).outcome
            assert stored is not None and len(orjson.dumps(stored)) < 100_000
            assert len(result.text) < 100_000


@pytest.mark.parametrize("mode", ["pool", "exec"])
async def test_a_runner_whose_python_cannot_run_the_sandbox_fails_the_step_at_once(
    tmp_path: Path, mode: str
) -> None:
    """An interpreter without this project: the step fails at once, for good, saying what
    to give the runner and that the script waits in the log (it was requeued until
    queue_timeout, five minutes, then "resume it later", which could not help)."""
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 'No module named sandbox' >&2\nexit 1\n")
    python.chmod(0o755)
    async with ProcessRunner(mode=mode, python=str(python)) as runner:  # type: ignore[arg-type]
        engine = CodeMode([], runner=runner, data_dir=tmp_path / "log", queue_timeout=300)
        with pytest.raises(StepUnavailable) as raised:
            await engine.run_code("return 1")
        said = str(raised.value)
        assert raised.value.permanent and "No module named sandbox" in said, said
        assert "an interpreter that has this project installed" in said
        assert "fix that, then resume the script" in said
        (waiting,) = await engine.store.scripts()
        assert waiting.status == "active" and waiting.outcome is None
        await engine.aclose()


async def test_a_lying_process_deep_data_is_a_failed_result(tmp_path: Any) -> None:
    """End to end: a process that reports a value or arguments nested 300 deep fails the
    script with a protocol error, and records no call."""

    @tool
    def t(a: Any = None) -> int:
        """A tool."""
        return 1

    python = make_standin_python(tmp_path)
    async with ProcessRunner(mode="exec", python=python) as runner:
        engine = CodeMode([t], runner=runner, data_dir=tmp_path / "log")
        for behaviour in ("deep_value", "deep_arguments"):
            result = await engine.run_code(f"// standin: {behaviour}\nreturn 1")
            assert result.status == "failed" and result.error is not None
            assert result.error["name"] == "ProtocolError"
            assert "broke the protocol" in result.error["message"]
            assert await engine.store.calls(result.script_id) == []


@pytest.mark.parametrize(
    ("result", "error"),
    [
        ({"name": "a\ud800"}, None),
        (2**70, None),
        (None, "the client broke \ud800"),
        (None, "e" * 16_000_000),
    ],
    ids=["lone-surrogate-result", "integer-past-64-bits", "lone-surrogate-error", "huge-error"],
)
async def test_a_clients_bad_answer_is_that_calls_error(
    inproc: InProcessRunner, tmp_path: Any, result: Any, error: str | None
) -> None:
    """What a client sends that no log could keep becomes the call's error, bounded."""
    pick = Tool(
        "pick_file",
        description="Let the user pick a file.",
        input_schema={"type": "object", "properties": {}},
        client=True,
    )
    engine = CodeMode([pick], runner=inproc, data_dir=tmp_path)
    code = "try { return await tools.pick_file() } catch (e) { return 'caught: ' + e.message }"
    paused = await engine.run_code(code)
    await engine.client_result(paused.script_id, paused.waiting[0]["call_id"], result, error=error)
    done = await engine.resume(paused.script_id)
    assert done.status == "finished" and done.value.startswith("caught: ")
    assert len(done.value) < 10_000
    [call] = await engine.store.calls(paused.script_id)
    assert call.state == "failed"


async def test_a_clients_empty_error_says_the_client_failed(inproc: InProcessRunner) -> None:
    """client_result(..., error="") gave the script an Error with no message at all."""
    pick = Tool("pick_file", description="Pick.", input_schema={"type": "object"}, client=True)
    engine = CodeMode([pick], runner=inproc)
    code = "try { return await tools.pick_file() } catch (e) { return e.message }"
    paused = await engine.run_code(code)
    await engine.client_result(paused.script_id, paused.waiting[0]["call_id"], error="")
    done = await engine.resume(paused.script_id)
    assert done.value == "the client failed this call, saying nothing"


@pytest.mark.parametrize(("depth", "ok"), [(MAX_DEPTH, True), (MAX_DEPTH + 1, False)])
async def test_handler_results_nest_within_the_wires_one_bound(
    inproc: InProcessRunner, depth: int, ok: bool
) -> None:
    """A result nested MAX_DEPTH levels reaches the script; one level more is the call's
    error, naming the bound."""

    @tool
    def nested() -> Any:
        """Nested lists."""
        value: Any = 1
        for _ in range(depth):
            value = [value]
        return value

    engine = CodeMode([nested], runner=inproc)
    code = """
    try {
      let v = await tools.nested({}), levels = 0;
      while (Array.isArray(v)) { v = v[0]; levels++; }
      return levels;
    } catch (e) { return e.message }"""
    result = await engine.run_code(code)
    assert result.status == "finished", result.text
    if ok:
        assert result.value == depth
    else:
        assert f"nested deeper than {MAX_DEPTH} levels" in result.value


async def test_a_shown_file_whose_bytes_are_gone_is_left_out_with_a_note(
    inproc: InProcessRunner,
) -> None:
    """The script ends with a result even when a file it showed is gone from the store."""

    class Forgetful(BlobStore):
        def read(self, digest: str, offset: int, length: int) -> bytes:
            raise FileMissing("its bytes are gone from the store")

    engine = CodeMode([], runner=inproc, blobs=Forgetful())
    files = [
        Attachment(id="notes.md", data=b"# notes", mime="text/markdown"),
        Attachment(id="chart.png", data=b"\x89PNG", mime="image/png"),
    ]
    result = await engine.run_code(
        'files.show("notes.md"); files.show("chart.png"); return 1', files=files
    )
    assert result.status == "finished", result.text
    assert (
        "Shown: notes.md (text/markdown, 7 bytes) was left out: its bytes are gone" in result.text
    )
    assert "Shown: chart.png (image/png, 4 bytes) was left out" in result.text
    assert result.shown == [] and result.media == []


def test_one_engine_serves_one_event_loop_after_another(tmp_path: Path) -> None:
    """A host that keeps one CodeMode and runs each request with asyncio.run: every run_code
    finishes, and aclose on yet another loop ends what the engine started (one in four
    run_code raised "Event loop is closed", and aclose did every time). Needs a confined
    runner (libseccomp)."""
    import psutil

    from engine import tool as make_tool

    @make_tool
    def f(x: int) -> int:
        """Echo."""
        return x

    # Another test's helper process (a session-wide one) may share this worker: not ours.
    before = set(psutil.Process().children(recursive=True))
    engine = CodeMode([f], type_check="off", data_dir=tmp_path)
    for i in range(4):
        result = asyncio.run(engine.run_code(f"return await tools.f({{ x: {i} }})"))
        assert result.value == i, result.text
    asyncio.run(engine.aclose())
    children = psutil.Process().children(recursive=True)
    left = [p for p in children if p not in before and p.status() != "zombie"]
    assert left == [], [p.cmdline() for p in left]


async def test_an_engine_in_use_on_a_loop_refuses_another_threads_loop(
    inproc: InProcessRunner,
) -> None:
    """One engine driven from two threads' event loops at once: a run raised "Event loop is
    closed" deep in the warm pool, or hung, while the other went on. The second loop is
    refused, saying to make an engine per thread, and the first goes on serving."""
    engine = CodeMode([], runner=inproc)
    assert (await engine.run_code("return 1")).value == 1

    def elsewhere() -> None:
        asyncio.run(engine.run_code("return 2"))

    with pytest.raises(ConfigError, match="in use on another thread's event loop"):
        await asyncio.to_thread(elsewhere)
    assert (await engine.run_code("return 3")).value == 3
    await engine.aclose()


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"tool_threads": 0}, "tool_threads = 0 must be a whole number"),
        ({"tool_threads": True}, "tool_threads = True must be a whole number"),
        ({"tools": None}, "tools is a list, not None"),
        ({"mcp": 5}, "mcp is 5; give McpServers"),
        ({"skills": 5}, "skills is a list, not 5"),
        ({"on_event": 5}, "on_event takes a function of one Event, or a list"),
        ({"runner": 5}, "runner is 5; give a ScriptRunner"),
        ({"store": 5}, "store is 5; give a LogStore"),
        ({"blobs": 5}, "blobs is 5; give a BlobStore"),
        ({"clock": 5}, "clock is 5; give a function"),
    ],
)
def test_a_part_of_the_wrong_kind_is_refused_naming_it(given: dict[str, Any], said: str) -> None:
    """Each was a TypeError or AttributeError from deep inside, some only at run_code or at
    aclose: a ConfigError naming the option, before anything is made."""
    with pytest.raises(ConfigError, match=re.escape(said)):
        CodeMode(**given)


def test_one_tool_where_the_list_belongs_says_to_pass_a_list() -> None:
    """A @tool-made Tool alone (not callable) read 'tools is a list, not Tool('t')'."""
    with pytest.raises(ToolDefinitionError, match=re.escape("pass [t], not t")):
        CodeMode(Tool("t"))  # type: ignore[arg-type]


async def test_an_on_start_that_is_no_plain_function_is_refused_before_the_start(
    inproc: InProcessRunner,
) -> None:
    """on_start=5 raised once the start was in the log; an async one was never awaited."""

    async def told(script_id: str) -> None:
        pass

    engine = CodeMode([], runner=inproc)
    for wrong in (5, told):
        with pytest.raises(ConfigError, match="give a plain function of the script's id"):
            await engine.run_code("return 1", on_start=wrong)  # type: ignore[arg-type]
    assert await engine.store.scripts() == []


def test_an_engine_made_before_a_fork_says_so_in_the_child(tmp_path: Any) -> None:
    """A CodeMode made in a process that then forks (a web server's --preload) is its
    maker's: in the child, run_code waited for ever on the parent's fork server and
    threads, and an approval would write through the parent's SQLite connection. Each of
    them says to make the engine after the fork."""
    import os

    engine = CodeMode([], runner=InProcessRunner(), data_dir=tmp_path)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what each method raised, then leave at once
        said = []
        for call in (
            lambda: engine.run_code("return 1"),
            lambda: engine.approve("s1", "c1"),
            lambda: engine.resume("s1"),
        ):
            try:
                asyncio.run(asyncio.wait_for(call(), 10))
                said.append("no error")
            except BaseException as e:  # reported to the parent
                said.append(f"{type(e).__name__}: {e}")
        os.write(write, "\n".join(said).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        said = f.read().split("\n")
    os.waitpid(pid, 0)
    assert len(said) == 3, said
    for line in said:
        assert line.startswith("ConfigError: this CodeMode was made in another process"), said
    asyncio.run(engine.aclose())


@pytest.mark.parametrize("name", ["run_code", "tool_search", "skill"])
def test_a_host_tool_named_as_the_engines_own_is_refused(name: str) -> None:
    """A host's tool named tool_search, skill or run_code was renamed with a hash, unseen
    under that name, and a script calling the name reached the engine's own tool."""

    @tool(name=name)
    def mine(query: str) -> str:
        """The host's own."""
        return query

    with pytest.raises(ToolDefinitionError, match=f"a tool is named '{name}', the name of"):
        CodeMode([mine])


def test_a_data_dir_that_is_no_path_or_holds_a_file_named_blobs_is_a_config_error(
    tmp_path: Path,
) -> None:
    """Both raised a bare TypeError or FileExistsError (a traceback and exit 1 from the CLI),
    where every other data_dir mistake is a ConfigError naming it."""
    with pytest.raises(ConfigError, match="must be a path"):
        CodeMode(data_dir=5)  # type: ignore[arg-type]
    (tmp_path / "blobs").write_text("x")
    with pytest.raises(ConfigError, match="blobs cannot be made"):
        CodeMode(data_dir=tmp_path)


@pytest.mark.parametrize(
    ("returned", "shown"),
    [
        ("'23'", '"23"'),
        ("String(23)", '"23"'),
        ("'true'", '"true"'),
        ("'[1,2]'", '"[1,2]"'),
        ("''", '""'),
        ("'hello, world'", "hello, world"),
        ("'line one\\nline two'", "line one\nline two"),
        ("23", "23"),
    ],
)
async def test_a_returned_string_that_reads_as_other_json_is_quoted(
    inproc: InProcessRunner, returned: str, shown: str
) -> None:
    """A returned string is shown as itself, but for one that would read as another JSON
    value (`"23"` and 23 both showed `23`) or as nothing (`""`): quoted."""
    engine = CodeMode([], runner=inproc)
    result = await engine.run_code(f"return {returned};")
    await engine.aclose()
    assert result.text == f"Script finished.\nReturned:\n{shown}", result.text


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("javascript", 'console.log("p\\u0000q"); throw new Error("e\\u0000f");'),
        ("javascript", 'console.log("p\\u0000q"); return "a\\u0000b";'),
        ("python", 'print("p\\x00q")\nraise ValueError("e\\x00f")'),
        ("python", 'print("p\\x00q")\nreturn "a\\x00b"'),
    ],
)
async def test_the_text_the_model_reads_holds_no_nul(
    inproc: InProcessRunner, language: str, code: str
) -> None:
    """A NUL a script prints, returns or raises is U+FFFD in the text (it was there as
    itself, but for what JavaScript printed): a NUL is no text to a host that keeps the
    conversation in PostgreSQL, nor to some model APIs. The value returned keeps it."""
    engine = CodeMode([], runner=inproc, language=language)  # type: ignore[arg-type]
    result = await engine.run_code(code)
    await engine.aclose()
    assert "\x00" not in result.text and "p\ufffdq" in result.text, result.text
    if result.status == "finished":
        assert result.value == "a\x00b" and "a\ufffdb" in result.text
    else:
        assert "e\ufffdf" in result.text, result.text


@pytest.mark.parametrize(
    ("language", "code", "hint"),
    [
        ("javascript", "def g():\n    return 1\nreturn g()", "reads as Python"),
        ("javascript", "import json\nr = await tools.echo(text='x')\nreturn r", "reads as Python"),
        ("python", "const r = await tools.echo({ text: 'x' });\nreturn r;", "reads as JavaScript"),
        ("javascript", "if (a) { return 1", None),  # JavaScript gone wrong: no hint
        ("python", "r = await tools.echo({'text': 'x'})\nreturn r +", None),
        # A check of the sandbox's own (a SyntaxError of a script that parses): no hint.
        ("python", "print('use console.log(x) === y')\nreturn type.__class__", None),
    ],
)
async def test_a_script_in_the_other_language_says_so(
    inproc: InProcessRunner, language: str, code: str, hint: str | None
) -> None:
    """Python sent to the JavaScript engine got only "Unexpected token" (and JavaScript to
    the Python one, "invalid syntax"): a syntax error in a script that reads as the other
    language says which language run_code runs."""

    @tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    engine = CodeMode([echo], runner=inproc, type_check="off", language=language)  # type: ignore[arg-type]
    result = await engine.run_code(code)
    await engine.aclose()
    assert result.error is not None and result.error["name"] == "SyntaxError", result.text
    if hint is None:
        assert "reads as" not in result.text, result.text
    else:
        assert hint in result.text and "run_code runs" in result.text, result.text


@pytest.mark.parametrize(
    ("code", "line"),
    [
        # Cut short, as a model's output may be: "Unexpected token (3:14)".
        ("const rows = [];\nfor (const x of [1, 2]) {\n  rows.push(x);", 2),
        ("const add = (a, b) => { return a + b;\nreturn add(1, 2);", 1),
        ("const xs = [1];\nxs.forEach((x) => {\n  if (x) {\n    console.log(x);\n  }\n);", 2),
    ],
)
async def test_a_block_never_closed_names_the_line_that_opened_it(
    inproc: InProcessRunner, code: str, line: int
) -> None:
    """A script whose `{` is never closed fails saying which line opened it (the parser named
    the end of the text, or a line before it, and said "Unexpected token", 'expected ";"')."""
    engine = CodeMode([], runner=inproc)
    result = await engine.run_code(code)
    await engine.aclose()
    assert result.error is not None and result.error["name"] == "SyntaxError", result.text
    assert f"; the `{{` on line {line} is never closed: close it with `}}`" in result.text
    # One that closes all its blocks and is wrong otherwise gets no such words.
    engine = CodeMode([], runner=inproc)
    result = await engine.run_code("const a = { b: 1 };\nconst c = (a;")
    await engine.aclose()
    assert result.error is not None and "never closed" not in result.text, result.text


async def test_a_script_s_seed_is_drawn_from_63_bits(inproc: InProcessRunner) -> None:
    """Math.random, crypto.randomUUID and uuid.uuid4 follow the seed: drawn from 32 bits, two
    of some 77,000 scripts shared one at even odds, and every id they made. Sixteen seeds all
    under 2**32 come once in 2**496 draws of 63 bits."""
    engine = CodeMode([], runner=inproc)
    seeds = []
    for _ in range(16):
        result = await engine.run_code("return 1")
        seeds.append((await engine.store.get_script(result.script_id)).seed)
    await engine.aclose()
    assert all(0 <= s < 2**63 for s in seeds)
    assert max(seeds) >= 2**32
