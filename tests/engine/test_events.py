"""The events a script emits as it runs: their order and content for parallel calls, a
failure and an approval; and the `script step` log record's structured fields."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson
import pytest

from engine import CodeMode, Event, ToolCallError, tool
from engine._events import SLOW_LISTENERS
from tests.engine.conftest import InProcessRunner

SCRIPT = """
const [a, b] = await Promise.all([tools.fetch({ n: 1 }), tools.fetch({ n: 2 })]);
let err = null;
try { await tools.boom({}); } catch (e) { err = e.message; }
const paid = await tools.pay({ amount: a + b });
return { paid, err };
"""


@tool
async def fetch(n: int) -> int:
    """Fetch a number."""
    return n * 10


@tool
def boom() -> int:
    """Always fails."""
    raise ToolCallError("the boom tool failed")


@tool(needs_approval=True)
def pay(amount: int) -> str:
    """Pay an amount."""
    return f"paid {amount}"


def _summary(events: list[Event]) -> list[tuple[Any, ...]]:
    """Each event as (kind, the call's number or the step, what matters of it)."""
    out: list[tuple[Any, ...]] = []
    for e in events:
        call = int(e.call_id.rsplit("_", 1)[1]) if e.call_id else None
        if e.kind == "step":
            assert e.stats is not None
            out.append(("step", e.step, e.stats["outcome"], e.stats["calls"]))
        elif e.kind.startswith("call."):
            out.append((e.kind, call, e.tool, e.reason or e.error))
        elif e.kind == "paused":
            out.append(("paused", [(w["tool"], w["reason"]) for w in e.waiting or []]))
        elif e.kind == "ended":
            out.append(("ended", e.status, e.steps, e.error))
        else:
            out.append((e.kind,))
    # Parallel calls end in any order: compare the two ends of the first step as a set.
    i = out.index(("call.done", 1, "fetch", None)) if ("call.done", 1, "fetch", None) in out else -1
    if i > 0 and out[i - 1] == ("call.done", 2, "fetch", None):
        out[i - 1], out[i] = out[i], out[i - 1]
    return out


async def test_events_in_order_with_parallel_calls_a_failure_and_an_approval(tmp_path) -> None:
    events: list[Event] = []
    engine = CodeMode(
        [fetch, boom, pay],
        runner=InProcessRunner(),
        data_dir=tmp_path,
        type_check="off",
        on_event=events.append,
    )
    try:
        paused = await engine.run_code(SCRIPT)
        assert paused.status == "paused"
        # A person approves in another process: a second engine on the same log.
        other: list[Event] = []
        approver = CodeMode([], runner=InProcessRunner(), data_dir=tmp_path, on_event=other.append)
        await approver.approve(paused.script_id, paused.waiting[0]["call_id"])
        await approver.aclose()
        # With its tool and tenant, as every call's event (they were None).
        assert [(e.kind, e.call_id, e.tool, e.tenant) for e in other] == [
            ("call.approved", paused.waiting[0]["call_id"], "pay", "default")
        ]
        done = await engine.resume(paused.script_id)
    finally:
        await engine.aclose()
    assert done.status == "finished", done.text
    assert done.value == {"paid": "paid 30", "err": "the boom tool failed"}
    assert _summary(events) == [
        ("started",),
        ("step", 1, "calls", 2),
        ("call.proposed", 1, "fetch", None),
        ("call.proposed", 2, "fetch", None),
        ("call.approved", 1, "fetch", None),
        ("call.approved", 2, "fetch", None),
        ("call.running", 1, "fetch", None),
        ("call.running", 2, "fetch", None),
        ("call.done", 1, "fetch", None),
        ("call.done", 2, "fetch", None),
        ("step", 2, "calls", 1),
        ("call.proposed", 3, "boom", None),
        ("call.approved", 3, "boom", None),
        ("call.running", 3, "boom", None),
        ("call.failed", 3, "boom", "the boom tool failed"),
        ("step", 3, "calls", 1),
        ("call.proposed", 4, "pay", None),
        ("call.waiting", 4, "pay", "approval"),
        ("paused", [("pay", "approval")]),
        ("resumed",),
        ("call.running", 4, "pay", None),
        ("call.done", 4, "pay", None),
        ("step", 4, "finished", 0),
        ("ended", "finished", 4, None),
    ]
    # Every event names the script, and serializes as one JSON line.
    assert {e.script_id for e in events} == {done.script_id}
    assert all(e.tenant == "default" for e in events)
    step = events[1].to_dict()
    assert set(step["stats"]) == {
        "outcome",
        "calls",
        "results_bytes",
        "wait_ms",
        "run_ms",
        "heap_bytes",
        "cpu_ms",
        "check_ms",
        "live",
    }
    assert orjson.loads(orjson.dumps(step)) == step
    proposed = events[2]
    assert proposed.stats == {"argument_bytes": len(b'{"n":1}')}
    assert [e.stats for e in events if e.kind == "call.done" and e.tool == "pay"] == [
        {"result_bytes": len(b'"paid 30"')}
    ]
    times = [e.time for e in events]
    assert times == sorted(times)


NOTES: list[str] = []


@tool
def note(n: int) -> int:
    """Write a note (a sync tool with effects: it runs in a tool thread)."""
    NOTES.append(f"ran {n}")
    return n


async def test_a_sync_call_is_running_once_its_thread_begins_it(tmp_path) -> None:
    """A sync call that waits for a tool thread is said to run when its thread begins it,
    after its receipt: it was said to run as it began to wait (a host's progress showed
    three calls running on one thread), before a receipt was written for it."""
    NOTES.clear()

    def heard(event: Event) -> None:
        if event.kind == "call.running":
            NOTES.append(f"running {event.call_id}")

    engine = CodeMode(
        [note],
        runner=InProcessRunner(),
        data_dir=tmp_path,
        tool_threads=1,
        type_check="off",
        on_event=heard,
    )
    try:
        result = await engine.run_code(
            "return await Promise.all([1, 2, 3].map((n) => tools.note({ n })));"
        )
    finally:
        await engine.aclose()
    assert result.value == [1, 2, 3], result.text
    # One thread: each call is said to run after the one before it ran, and before it runs.
    assert [line.split()[0] for line in NOTES] == ["running", "ran"] * 3, NOTES


async def test_a_failed_script_ends_with_its_error_and_limit() -> None:
    events: list[Event] = []
    engine = CodeMode(runner=InProcessRunner(), type_check="off", on_event=events.append)
    try:
        result = await engine.run_code("throw new TypeError('bad')")
    finally:
        await engine.aclose()
    assert result.status == "failed"
    assert [e.kind for e in events] == ["started", "step", "ended"]
    assert events[-1].to_dict() | {"time": 0, "script_id": ""} == {
        "kind": "ended",
        "script_id": "",
        "time": 0,
        "tenant": "default",
        "status": "failed",
        "steps": 1,
        "error": "TypeError",
    }


async def test_a_listener_that_raises_is_logged_and_the_script_goes_on(caplog) -> None:
    def bad(event: Event) -> None:
        raise RuntimeError("listener bug")

    seen: list[str] = []
    engine = CodeMode(
        [fetch],
        runner=InProcessRunner(),
        type_check="off",
        on_event=[bad, lambda e: seen.append(e.kind)],
    )
    with caplog.at_level(logging.ERROR, logger="codemode"):
        result = await engine.run_code("return await tools.fetch({ n: 4 })")
    await engine.aclose()
    assert result.value == 40
    assert seen[0] == "started" and seen[-1] == "ended"
    assert "an on_event listener failed on started" in caplog.text


async def test_a_listener_that_fails_at_each_event_is_logged_once(caplog) -> None:
    """A listener with a bug on one line fails at every event: that is one traceback in the
    host's log, not one an event (ten a step); a failure on another line is logged too."""

    def bad(event: Event) -> None:
        if event.kind == "ended":
            raise KeyError("ended")  # another line, another failure
        raise RuntimeError("listener bug")

    engine = CodeMode([fetch], runner=InProcessRunner(), type_check="off", on_event=bad)
    with caplog.at_level(logging.ERROR, logger="codemode"):
        for n in (1, 2):
            result = await engine.run_code(f"return await tools.fetch({{ n: {n} }})")
            assert result.value == n * 10
    await engine.aclose()
    failed = [r for r in caplog.records if "an on_event listener failed" in r.getMessage()]
    assert [r.getMessage().split(" of script")[0] for r in failed] == [
        "an on_event listener failed on started",
        "an on_event listener failed on ended",
    ]
    assert "RuntimeError: listener bug" in (failed[0].exc_text or "")
    assert "KeyError: 'ended'" in (failed[1].exc_text or "")


async def test_a_slow_listener_is_said_to_hold_the_loop_once(caplog) -> None:
    """A listener that takes long holds the event loop, and every script of the engine with
    it: the log says so, once, naming what it took (nothing said why all stalled)."""

    def slow(event: Event) -> None:
        if event.kind == "step":
            time.sleep(SLOW_LISTENERS + 0.05)

    engine = CodeMode([fetch], runner=InProcessRunner(), type_check="off", on_event=slow)
    with caplog.at_level(logging.WARNING, logger="codemode"):
        result = await engine.run_code("return await tools.fetch({ n: 4 })")  # two steps
    await engine.aclose()
    assert result.value == 40
    slow_lines = [r.getMessage() for r in caplog.records if "listeners took" in r.getMessage()]
    assert len(slow_lines) == 1, slow_lines
    assert slow_lines[0].startswith("the on_event listeners took 0.")
    assert "on step of script" in slow_lines[0]


async def test_a_listener_that_raises_cancelled_error_does_not_end_the_run(caplog) -> None:
    """A listener that reads a cancelled task's result raises CancelledError (no Exception):
    it is the listener's failure, logged, and the script goes on (run_code raised it, the
    script left undriven)."""
    cancelled = asyncio.get_running_loop().create_future()
    cancelled.cancel()

    def bad(event: Event) -> None:
        cancelled.result()

    engine = CodeMode([fetch], runner=InProcessRunner(), type_check="off", on_event=bad)
    with caplog.at_level(logging.ERROR, logger="codemode"):
        result = await engine.run_code("return await tools.fetch({ n: 4 })")
    await engine.aclose()
    assert result.status == "finished" and result.value == 40
    assert "an on_event listener failed on started" in caplog.text
    assert "CancelledError" in caplog.text


async def test_a_listener_that_raises_on_a_failed_call_logs_its_own_error_alone(caplog) -> None:
    """A listener that fails on ``call.failed`` (emitted while the engine handles the tool's
    exception) is logged with its own traceback: the tool's error was chained to it as
    "during handling of the above exception", blaming the tool in the host's log."""

    def bad(event: Event) -> None:
        if event.kind == "call.failed":
            raise RuntimeError("listener bug")

    engine = CodeMode([boom], runner=InProcessRunner(), type_check="off", on_event=bad)
    with caplog.at_level(logging.ERROR, logger="codemode"):
        result = await engine.run_code("try { await tools.boom({}) } catch (e) { return 1 }")
    await engine.aclose()
    assert result.value == 1
    failed = [r for r in caplog.records if "listener failed on call.failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_text is not None
    assert "listener bug" in failed[0].exc_text
    assert "During handling" not in failed[0].exc_text


def test_on_event_must_be_callables() -> None:
    from engine import ConfigError

    with pytest.raises(ConfigError, match="on_event takes functions"):
        CodeMode(on_event=["not a function"])  # type: ignore[list-item]
    # Text and a mapping are no list of functions: each is named whole (it said "not 'p'"
    # of on_event="print", and "not 'log'" of {"log": print}).
    with pytest.raises(ConfigError, match=r"a function of one Event, or a list, not 'print'$"):
        CodeMode(on_event="print")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"or a list, not \{'log': <built-in function print>"):
        CodeMode(on_event={"log": print})  # type: ignore[arg-type]


def test_a_listener_that_takes_no_event_is_refused_when_given() -> None:
    """A listener that cannot take the Event (`lambda: ...`, two required arguments) failed
    on every event of every script, each a logged traceback; it is refused when given. One
    that takes it, or more with defaults, or anything, is kept."""
    from engine import ConfigError

    def two(event: Event, other: int) -> None: ...

    for bad in (lambda: None, two):
        with pytest.raises(ConfigError, match="does not take one argument"):
            CodeMode(on_event=bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="does not take one argument"):
            CodeMode().add_listener(bad)  # type: ignore[arg-type]

    def defaults(event: Event, extra: int = 0) -> None: ...

    for good in (lambda e: None, defaults, print, lambda *a: None):
        CodeMode(on_event=good)


async def test_an_async_listener_is_refused_not_silently_dropped(caplog) -> None:
    """An async function as a listener was called, never awaited, and did nothing (a
    RuntimeWarning at most): it is refused when given. One that slips past the check (a
    lambda that calls one) is logged at each event, its coroutine closed, and the script
    goes on."""
    from engine import ConfigError

    seen: list[str] = []

    async def on_event(event: Event) -> None:
        seen.append(event.kind)

    class Listener:
        async def __call__(self, event: Event) -> None:
            seen.append(event.kind)

    for listener in (on_event, Listener()):
        with pytest.raises(ConfigError, match="is an async function"):
            CodeMode(runner=InProcessRunner(), on_event=listener)
        with pytest.raises(ConfigError, match="is an async function"):
            CodeMode(runner=InProcessRunner()).add_listener(listener)
    engine = CodeMode(runner=InProcessRunner(), type_check="off", on_event=lambda e: on_event(e))
    with caplog.at_level(logging.ERROR, logger="codemode"):
        result = await engine.run_code("return 1")
    await engine.aclose()
    assert result.value == 1 and seen == []
    assert "an on_event listener returned an awaitable on started" in caplog.text
    # Once, not at each of the run's three events.
    assert caplog.text.count("returned an awaitable") == 1


async def test_script_step_fields_are_on_the_log_record(caplog) -> None:
    engine = CodeMode([fetch], runner=InProcessRunner(), type_check="off")
    with caplog.at_level(logging.INFO, logger="codemode"):
        result = await engine.run_code("return await tools.fetch({ n: 1 })", tenant="acme")
    await engine.aclose()
    records = [r for r in caplog.records if r.getMessage().startswith("script step ")]
    assert [r.step for r in records] == [1, 2]  # type: ignore[attr-defined]
    last = records[-1]
    assert last.script == result.script_id  # type: ignore[attr-defined]
    assert last.tenant == "acme"  # type: ignore[attr-defined]
    assert last.outcome == "finished"  # type: ignore[attr-defined]
    assert last.limit == "-"  # type: ignore[attr-defined]
    assert f"run_ms={last.run_ms:.1f}" in last.getMessage()  # type: ignore[attr-defined]


async def test_a_start_by_a_known_key_resumes_and_client_results_are_events(tmp_path) -> None:
    """run_code with the key of a paused script (the chat loop's second turn) is a `resumed`
    drive; a client's answer is the call's `call.done`."""

    @tool(client=True)
    def ask_user(question: str) -> str:
        """Ask the person at the keyboard."""
        raise AssertionError("a client tool never runs on the host")

    events: list[Event] = []
    engine = CodeMode(
        [ask_user, pay],
        runner=InProcessRunner(),
        data_dir=tmp_path,
        type_check="off",
        on_event=events.append,
    )
    code = "const a = await tools.ask_user({ question: 'how much?' }); return await tools.pay({ amount: Number(a) })"
    try:
        first = await engine.run_code(code, key="toolu_1")
        assert first.waiting[0]["reason"] == "client"
        await engine.client_result(first.script_id, first.waiting[0]["call_id"], "7")
        second = await engine.run_code(code, key="toolu_1")
        assert second.status == "paused" and second.waiting[0]["name"] == "pay"
        await engine.approve(second.script_id, second.waiting[0]["call_id"])
        done = await engine.run_code(code, key="toolu_1")
    finally:
        await engine.aclose()
    assert done.value == "paid 7"
    kinds = [e.kind for e in events]
    assert kinds[kinds.index("paused") :] == [
        "paused",
        "call.done",  # the client's answer
        "resumed",
        "step",
        "call.proposed",
        "call.waiting",
        "paused",
        "call.approved",
        "resumed",
        "call.running",
        "call.done",
        "step",
        "ended",
    ]
    client_done = events[kinds.index("paused") + 1]
    assert (client_done.tool, client_done.stats) == ("ask_user", {"result_bytes": 3})
    assert {e.script_id for e in events} == {done.script_id}


async def test_a_start_by_the_key_of_an_ended_script_emits_nothing(tmp_path) -> None:
    """Each script's events end with `paused`, `ended` or `left`: a start by the key of a
    script that ended gives its outcome again, as `resume` does, and emits no `resumed`
    that nothing would close."""
    events: list[Event] = []
    engine = CodeMode(
        [fetch],
        runner=InProcessRunner(),
        data_dir=tmp_path,
        type_check="off",
        on_event=events.append,
    )
    try:
        first = await engine.run_code("return await tools.fetch({ n: 4 })", key="toolu_9")
        ran = [e.kind for e in events]
        again = await engine.run_code("return await tools.fetch({ n: 4 })", key="toolu_9")
    finally:
        await engine.aclose()
    assert (first.value, again.value, again.script_id) == (40, 40, first.script_id)
    assert ran[0] == "started" and ran[-1] == "ended"
    assert [e.kind for e in events] == ran
