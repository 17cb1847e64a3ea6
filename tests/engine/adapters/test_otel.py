"""OpenTelemetry spans from a script's events, checked with the SDK's in-memory exporter."""

from __future__ import annotations

import re

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from engine import CodeMode, Limits, ToolCallError, tool
from engine.adapters.otel import Tracing
from tests.engine.conftest import InProcessRunner


@tool
async def fetch(n: int) -> int:
    """Fetch a number."""
    return n


@tool
def boom() -> int:
    """Always fails."""
    raise ToolCallError("boom failed")


@pytest.fixture
def exporter():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter, provider
    provider.shutdown()


async def test_spans_for_script_steps_and_calls_with_the_limit_met(exporter) -> None:
    spans_out, provider = exporter
    engine = CodeMode(
        [fetch, boom],
        runner=InProcessRunner(),
        type_check="off",
        limits=Limits(calls=4),
        on_event=Tracing(provider),
    )
    code = """
    const [a, b] = await Promise.all([tools.fetch({ n: 1 }), tools.fetch({ n: 2 })]);
    try { await tools.boom({}); } catch (e) {}
    for (let i = 0; i < 10; i++) await Promise.all([tools.fetch({ n: i }), tools.fetch({ n: i })]);
    """
    parent = provider.get_tracer("host").start_span("agent turn")
    from opentelemetry import trace

    with trace.use_span(parent, end_on_exit=True):
        result = await engine.run_code(code)
    await engine.aclose()
    assert result.status == "failed" and result.limit == "calls"
    spans = spans_out.get_finished_spans()
    by_name: dict[str, list] = {}
    for s in spans:
        by_name.setdefault(s.name, []).append(s)
    (script,) = by_name["codemode.script"]
    assert script.parent is not None and script.parent.span_id == parent.get_span_context().span_id
    assert script.attributes["codemode.script_id"] == result.script_id
    assert script.attributes["codemode.status"] == "failed"
    assert script.attributes["codemode.limit"] == "calls"
    assert script.attributes["codemode.steps"] == 3
    assert script.status.status_code == StatusCode.ERROR
    assert script.status.description == "limit met: calls"
    steps = sorted(by_name["codemode.step"], key=lambda s: s.attributes["codemode.step"])
    assert [s.attributes["codemode.step"] for s in steps] == [1, 2, 3]
    assert [s.attributes["codemode.calls"] for s in steps] == [2, 1, 0]
    # The third run met the calls limit inside the sandbox: that step's status says so.
    assert [s.attributes["codemode.outcome"] for s in steps] == ["calls", "calls", "failed"]
    assert [s.status.status_code for s in steps] == [StatusCode.UNSET] * 2 + [StatusCode.ERROR]
    assert steps[2].status.description == "limit met: calls"
    for s in steps:
        assert s.parent.span_id == script.context.span_id
        for stat in ("cpu_ms", "heap_bytes", "run_ms", "wait_ms", "results_bytes"):
            assert f"codemode.{stat}" in s.attributes
        assert s.start_time <= s.end_time
    calls = by_name["codemode.call"]
    assert sorted((c.attributes["codemode.tool"], c.status.status_code) for c in calls) == [
        ("boom", StatusCode.ERROR),
        ("fetch", StatusCode.UNSET),
        ("fetch", StatusCode.UNSET),
    ]
    assert all(c.parent.span_id == script.context.span_id for c in calls)
    boom_span = next(c for c in calls if c.attributes["codemode.tool"] == "boom")
    assert boom_span.status.description == "boom failed"
    fetch_span = next(c for c in calls if c.attributes["codemode.tool"] == "fetch")
    assert fetch_span.attributes["codemode.result_bytes"] == 1
    # The calls' decisions are events on the script's span.
    assert [e.name for e in script.events].count("call.proposed") == 3


async def test_a_step_that_meets_a_limit_and_a_pause(exporter, tmp_path) -> None:
    spans_out, provider = exporter

    @tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        return "paid"

    engine = CodeMode(
        [pay],
        runner=InProcessRunner(),
        data_dir=tmp_path,
        type_check="off",
        limits=Limits(memory="8mb"),
        on_event=Tracing(provider),
    )
    heavy = await engine.run_code('const a = []; while (true) a.push("x".repeat(1 << 16));')
    assert heavy.limit == "memory", heavy.text
    paused = await engine.run_code("return await tools.pay({ amount: 3 })")
    assert paused.status == "paused"
    await engine.approve(paused.script_id, paused.waiting[0]["call_id"])
    done = await engine.resume(paused.script_id)
    await engine.aclose()
    assert done.status == "finished"
    spans = spans_out.get_finished_spans()
    step = next(
        s
        for s in spans
        if s.name == "codemode.step" and s.attributes["codemode.script_id"] == heavy.script_id
    )
    assert step.status.status_code == StatusCode.ERROR
    assert step.status.description == "limit met: memory"
    assert step.attributes["codemode.limit"] == "memory"
    drives = [
        s
        for s in spans
        if s.name == "codemode.script" and s.attributes["codemode.script_id"] == paused.script_id
    ]
    assert [
        (s.attributes["codemode.resumed"], s.attributes["codemode.status"]) for s in drives
    ] == [
        (False, "paused"),
        (True, "finished"),
    ]
    assert drives[0].attributes["codemode.waiting"] == 1
    assert drives[1].status.status_code == StatusCode.OK


class _RefusingOnce(InProcessRunner):
    """A runner that refuses the first step for good (its host gets StepUnavailable)."""

    def __init__(self) -> None:
        super().__init__()
        self.tries = 0

    async def run(self, script, files=None, *, tenant="default"):  # type: ignore[no-untyped-def]
        from runner import RunError

        self.tries += 1
        if self.tries == 1:
            raise RunError("no runner here", permanent=True)
        return await super().run(script, files, tenant=tenant)


async def test_a_drive_that_raises_ends_its_span(exporter) -> None:
    from engine import Event, StepUnavailable

    spans_out, provider = exporter
    events: list[Event] = []
    engine = CodeMode(
        runner=_RefusingOnce(), type_check="off", on_event=[Tracing(provider), events.append]
    )
    with pytest.raises(StepUnavailable):
        await engine.run_code("return 5")
    assert [e.kind for e in events] == ["started", "left"]
    assert events[-1].error is not None and "no runner here" in events[-1].error
    result = await engine.resume(events[0].script_id)
    await engine.aclose()
    assert result.value == 5
    drives = [s for s in spans_out.get_finished_spans() if s.name == "codemode.script"]
    assert [(s.attributes["codemode.status"], s.status.status_code) for s in drives] == [
        ("left", StatusCode.ERROR),
        ("finished", StatusCode.OK),
    ]


async def test_a_keyed_start_whose_log_read_fails_leaves_no_span_open(exporter) -> None:
    """The chat loop's run_code of a paused script again (same key) while the log fails to
    give its calls: no drive began, so the listeners hear nothing (they heard ``resumed`` and
    never ``left``: its span stayed open, unexported); the next one is a whole drive."""
    from engine import Event, MemoryStore, StoreUnavailable

    class Failing(MemoryStore):
        down = False

        async def calls(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            if self.down:
                raise StoreUnavailable("the session log did not answer (down for this test)")
            return await super().calls(*args, **kwargs)

    @tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        return "paid"

    spans_out, provider = exporter
    store, tracing = Failing(), Tracing(provider)
    events: list[Event] = []
    engine = CodeMode(
        [pay],
        runner=InProcessRunner(),
        store=store,
        type_check="off",
        on_event=[tracing, events.append],
    )
    code = "return await tools.pay({ amount: 3 })"
    try:
        paused = await engine.run_code(code, key="toolu_01")
        store.down = True
        with pytest.raises(StoreUnavailable):
            await engine.run_code(code, key="toolu_01")
        assert [e.kind for e in events][-1] == "paused" and tracing._scripts == {}
        store.down = False
        await engine.approve(paused.script_id, paused.waiting[0]["call_id"])
        done = await engine.run_code(code, key="toolu_01")
    finally:
        await engine.aclose()
    assert done.status == "finished" and tracing._scripts == {}
    drives = [s for s in spans_out.get_finished_spans() if s.name == "codemode.script"]
    assert [s.attributes["codemode.status"] for s in drives] == ["paused", "finished"]


async def test_a_call_that_outlives_its_drive_ends_with_its_drive(exporter, tmp_path) -> None:
    """The engine closed while a call ran: the drive left, and the call never reported an
    end. Its span ends with the drive's, as an error, instead of staying open (unexported,
    and kept by the listener for the life of the process)."""
    import asyncio

    from engine import CodeModeError

    spans_out, provider = exporter
    running, release = asyncio.Event(), asyncio.Event()

    @tool
    async def charge(cents: int) -> str:
        """Charge (an effect)."""
        running.set()
        await release.wait()
        return "charged"

    tracing = Tracing(provider)
    engine = CodeMode(
        [charge], runner=InProcessRunner(), data_dir=tmp_path, type_check="off", on_event=tracing
    )
    run = asyncio.create_task(engine.run_code("return await tools.charge({ cents: 5 })"))
    await running.wait()
    await engine.aclose()
    release.set()
    with pytest.raises(CodeModeError):
        await run
    assert tracing._calls == {} and tracing._scripts == {}
    ended = {s.name: s for s in spans_out.get_finished_spans()}
    call = ended["codemode.call"]
    assert call.status.status_code == StatusCode.ERROR
    assert "the drive left" in (call.status.description or "")
    assert (
        call.parent is not None and call.parent.span_id == ended["codemode.script"].context.span_id
    )


async def test_a_cancelled_drive_is_left_and_its_spans_end(exporter) -> None:
    """The caller's timeout cancelled run_code while its call ran: the listeners hear
    ``left`` (error: CancelledError) and the script's and the call's spans end, instead of
    no event at all and two spans the listener kept open for the life of the process."""
    import asyncio

    from engine import Event

    spans_out, provider = exporter
    running = asyncio.Event()

    @tool
    async def slow(n: int) -> int:
        """Slow."""
        running.set()
        await asyncio.sleep(3600)
        return n

    events: list[Event] = []
    tracing = Tracing(provider)
    engine = CodeMode(
        [slow], runner=InProcessRunner(), type_check="off", on_event=[tracing, events.append]
    )
    run = asyncio.create_task(engine.run_code("return await tools.slow({ n: 1 })"))
    await running.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    await engine.aclose()
    assert events[-1].kind == "left" and events[-1].error == "CancelledError"
    assert tracing._scripts == {} and tracing._calls == {}
    ended = {s.name: s.status.status_code for s in spans_out.get_finished_spans()}
    assert ended["codemode.script"] == ended["codemode.call"] == StatusCode.ERROR


@pytest.mark.parametrize(
    ("adapter", "package", "extra"),
    [("otel", "opentelemetry", "otel"), ("pydantic_ai", "pydantic_ai", "pydantic-ai")],
)
def test_an_adapter_without_its_extra_names_the_extra(
    adapter: str, package: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Imported without its packages, an adapter's ImportError names the extra that installs
    them (it was a bare ModuleNotFoundError), as the PostgreSQL store's does."""
    import importlib
    import sys

    monkeypatch.setitem(sys.modules, package, None)  # as if not installed
    monkeypatch.delitem(sys.modules, f"engine.adapters.{adapter}", raising=False)
    with pytest.raises(ImportError, match=rf"pip install 'codemode\[{extra}\]'"):
        importlib.import_module(f"engine.adapters.{adapter}")


def test_a_tracer_provider_of_the_wrong_kind_is_refused_when_given() -> None:
    """Tracing given no tracer provider (a name) says what to give (an AttributeError, 'str'
    object has no attribute 'get_tracer')."""
    from engine import ConfigError

    with pytest.raises(ConfigError) as raised:
        Tracing("my-service")  # type: ignore[arg-type]
    assert str(raised.value) == (
        "tracer_provider is 'my-service'; give an OpenTelemetry TracerProvider "
        "(opentelemetry.sdk.trace.TracerProvider), or leave it out for the global one"
    )


def test_the_class_given_as_a_listener_is_refused_when_given() -> None:
    """on_event=Tracing (not Tracing()) made a Tracing of each event, and each failed, a
    logged traceback an event; it is refused saying to give an instance."""
    from engine import ConfigError

    said = "on_event listener Tracing is a class; give an instance of it, Tracing(...), or"
    with pytest.raises(ConfigError, match=re.escape(said)):
        CodeMode(on_event=Tracing)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=re.escape(said)):
        CodeMode().add_listener(Tracing)  # type: ignore[arg-type]
