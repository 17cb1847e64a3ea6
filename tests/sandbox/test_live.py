"""Live runs (protocol version 2) in this process: ``runtime.LiveInProcess`` against replay.

A live run stops at each step's calls and goes on when given their records; a replay runs
the script from the start with the records so far. Every step of the two must be the same,
byte for byte (value, printed text, error, calls, shown files), which is what makes a live
process a cache of the log. The real process's side is in tests/runner/test_live.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from sandbox import protocol, runtime
from sandbox.protocol import Ran, Record, Script
from tests.sandbox.conftest import rec, script

Answer = Callable[[str, dict[str, Any]], Record]


def answer(name: str, arguments: dict[str, Any]) -> Record:
    """A deterministic tool: ``fail`` in the arguments makes an error, else an echo."""
    if arguments.get("fail"):
        return Record(name=name, arguments=arguments, error=f"{name} refused {arguments}")
    return Record(name=name, arguments=arguments, result={"echo": arguments, "tool": name})


def outcome(ran: Ran) -> bytes:
    """What must be identical between live and replay: all of ``ran`` but its stats."""
    body = ran.model_dump(mode="json", exclude_unset=True, exclude={"stats"})
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def replay_steps(s: Script, tool: Answer = answer, most: int = 50) -> list[Ran]:
    """Every step of ``s`` by replay: a new run with the records so far, each time."""
    records: list[Record] = []
    steps = []
    for _ in range(most):
        ran = runtime.run_in_process(s.model_copy(update={"records": list(records)}))
        steps.append(ran)
        if ran.outcome != "calls":
            return steps
        records += [tool(c.name, c.arguments) for c in ran.calls]
    raise AssertionError("the script did not end")


def live_steps(s: Script, tool: Answer = answer, most: int = 50) -> list[Ran]:
    """Every step of ``s`` by one live run, resumed with each step's records."""
    live = runtime.LiveInProcess(s)
    ran = live.start()
    steps = [ran]
    for _ in range(most):
        if ran.outcome != "calls":
            assert live.waiting == 0
            return steps
        assert live.waiting == len(ran.calls)
        ran = live.resume([tool(c.name, c.arguments) for c in ran.calls])
        steps.append(ran)
    raise AssertionError("the script did not end")


# Scripts whose printed order, calls or value depend on when calls settle.
CORPUS = {
    "sequential": """
        let total = 0;
        for (let i = 0; i < 6; i++) { const r = await tools.echo({ i }); total += r.echo.i; }
        return total;""",
    "parallel": """
        const rs = await Promise.all([1, 2, 3].map((n) => tools.search({ n })));
        return rs.map((r) => r.echo.n);""",
    "interleaved": """
        const a = tools.echo({ n: 1 });
        a.then(() => console.log("a settled"));
        Promise.resolve().then(() => console.log("microtask"));
        async function slow() { for (let i = 0; i < 3; i++) await null; console.log("slow"); }
        async function call() { const r = await tools.search({ q: "x" }); console.log("call"); return r; }
        const [r] = await Promise.all([call(), slow(), a]);
        console.log("then", r.tool);
        const b = await tools.echo({ n: 2 });
        return [r.echo, b.echo];""",
    "race": """
        let order = [];
        const p = [tools.echo({ k: 1 }).then(() => order.push(1)),
                   (async () => { await null; await null; order.push(2);
                                  await tools.echo({ k: order.join() }); })()];
        await Promise.all(p);
        return order;""",
    "errors": """
        const out = [];
        try { await tools.echo({ fail: true }); } catch (e) { out.push(e.message, e.tool); }
        const s = await Promise.allSettled([tools.echo({ fail: 1 }), tools.search({ q: 1 })]);
        out.push(s.map((x) => x.status));
        return out;""",
    "uncaught": """
        console.log("before");
        await tools.echo({ x: 1 });
        await tools.echo({ fail: true });
        return "never";""",
    "unawaited": """
        tools.echo({ fire: "and forget" });
        console.log("returning");
        return 1;""",
    "stuck_after_calls": """
        await tools.echo({ x: 1 });
        await new Promise(() => {});""",
    "random_and_date": """
        const a = Math.random();
        await tools.echo({ a });
        return [a, Math.random(), Date.now()];""",
}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_live_and_replay_agree_byte_for_byte(name: str) -> None:
    s = script(CORPUS[name])
    replayed = [outcome(r) for r in replay_steps(s)]
    lived = [outcome(r) for r in live_steps(s)]
    assert lived == replayed


def test_interleaved_order_is_settled_at_the_empty_queue() -> None:
    """Version 2 settles recorded calls when the job queue is next empty; version 1 at once
    (so old logs replay as they were written)."""
    code = CORPUS["interleaved"]
    v2 = replay_steps(script(code))[-1]
    assert v2.printed.splitlines()[:2] == ["microtask", "slow"]
    v1 = replay_steps(script(code).model_copy(update={"version": 1}))[-1]
    assert v1.printed.splitlines()[0] == "a settled"


def test_uncaught_tool_error_names_the_scripts_line_live_and_replayed() -> None:
    """The Error a recorded failure rejects with is made at the call: its stack has the
    script's line, live or replayed."""
    ran = live_steps(script(CORPUS["uncaught"]))[-1]
    assert ran.outcome == "failed" and ran.error is not None
    assert ran.error.message.startswith("echo refused")
    assert [line.line for line in ran.error.lines] == [4]
    assert ran.printed == "before\n"


def test_printed_and_shown_accumulate_over_segments() -> None:
    data = b"a,b\n1,2\n"
    files = [protocol.FileInfo(id="f.csv", mime="text/csv", size=len(data))]
    code = """
        console.log("one"); files.show("f.csv");
        await tools.echo({ x: 1 });
        console.log("two", await files.text("f.csv"));
        await tools.echo({ x: 2 });
        return "done";"""
    s = script(code).model_copy(update={"files": files})

    def fetch(_id: str, offset: int, length: int) -> bytes:
        return data[offset : offset + length]

    live = runtime.LiveInProcess(s, fetch)
    first = live.start()
    assert first.printed == "one\n" and first.shown == ["f.csv"]
    second = live.resume([answer("echo", {"x": 1})])
    assert second.printed == "one\ntwo a,b\n1,2\n\n"
    assert second.stats.file_bytes == len(data)
    last = live.resume([answer("echo", {"x": 2})])
    assert last.outcome == "finished" and last.value == "done"
    assert last.printed == second.printed and last.shown == ["f.csv"]
    replayed = runtime.run_in_process(
        s.model_copy(update={"records": [answer("echo", {"x": 1}), answer("echo", {"x": 2})]}),
        fetch,
    )
    assert outcome(replayed) == outcome(last)


def test_resume_takes_exactly_the_calls_it_waits_for() -> None:
    """Wrong count, name or arguments: ResumeError, and the run is left as it was."""
    live = runtime.LiveInProcess(script("return (await tools.echo({ a: 1 })).echo.a"))
    assert live.start().outcome == "calls"
    assert live.known == 0 and live.waiting == 1
    bad = [
        ([], "waits for 1 results, it was sent 0"),
        ([rec("echo", {"a": 1}, result=1), rec("echo", {"a": 1}, result=1)], "sent 2"),
        ([rec("search", {"a": 1}, result=1)], "result 1 is for tools.search"),
        ([rec("echo", {"a": 2}, result=1)], 'tools.echo({"a":2})'),
    ]
    for records, why in bad:
        with pytest.raises(runtime.ResumeError, match=why.replace("(", r"\(").replace(")", r"\)")):
            live.resume(records)
        assert live.waiting == 1
    ran = live.resume([rec("echo", {"a": 1}, result={"echo": {"a": 7}})])
    assert ran.outcome == "finished" and ran.value == 7
    assert live.known == 1 and live.waiting == 0
    with pytest.raises(runtime.ResumeError, match=r"closed|not waiting"):
        live.resume([])


def test_a_version_1_script_is_never_live() -> None:
    with pytest.raises(ValueError, match="version 2"):
        runtime.LiveInProcess(script("return 1").model_copy(update={"version": 1}))
    v1 = script("await tools.echo({}); return 1").model_copy(update={"version": 1})
    run = runtime.Run(v1, runtime._Collect())
    assert run.execute().outcome == "calls"
    assert run.resume_problem([rec("echo", {}, result=1)]) is not None


def test_closed_live_run_refuses_resume() -> None:
    live = runtime.LiveInProcess(script("await tools.echo({}); return 1"))
    live.start()
    live.close()
    assert live.waiting == 0 and live.memory_bytes == 0
    with pytest.raises(runtime.ResumeError, match="closed"):
        live.resume([rec("echo", {}, result=1)])


def test_results_limit_ends_the_run_at_the_same_record_live_and_replayed() -> None:
    code = """
        const a = await tools.echo({ n: 1 });
        console.log("got a");
        const b = await tools.echo({ n: 2 });
        return "never";"""
    big = "x" * 3000

    def tool(name: str, arguments: dict[str, Any]) -> Record:
        return Record(name=name, arguments=arguments, result=big)

    s = script(code, results=5000)
    lived = live_steps(s, tool)
    assert [outcome(r) for r in lived] == [outcome(r) for r in replay_steps(s, tool)]
    assert lived[-1].limit is not None and lived[-1].limit.name == "results"
    assert lived[-1].printed == "got a\n"


def test_budgets_count_over_the_run_and_step_arguments_per_segment() -> None:
    """``calls`` counts over the whole live run; ``step_arguments`` starts again each
    segment (one 600-byte call per segment passes a 1,000-byte step bound)."""
    code = "for (let i = 0; i < 5; i++) await tools.echo({ pad: 'p'.repeat(600), i });"
    s = script(code, calls=3, step_arguments=1000)
    lived = live_steps(s)
    assert [r.outcome for r in lived] == ["calls", "calls", "calls", "failed"]
    assert lived[-1].limit is not None and lived[-1].limit.name == "calls"
    assert [outcome(r) for r in lived] == [outcome(r) for r in replay_steps(s)]


def test_cpu_figure_is_per_segment() -> None:
    live = runtime.LiveInProcess(
        script("let x = 0; for (let i = 0; i < 3e6; i++) x += i; await tools.echo({}); return 1")
    )
    first = live.start()
    last = live.resume([rec("echo", {}, result=1)])
    assert first.stats.cpu_ms > 5 * last.stats.cpu_ms


def test_results_and_end_lines() -> None:
    records = [
        rec("echo", {"a": [1, {"b": None}]}, result={"r": "é\u2028"}),
        rec("t", {}, error="no"),
    ]
    line = protocol.results_line(records)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    back = protocol.decode_resume(line)
    assert back == records
    assert protocol.decode_resume(protocol.END_LINE) is None
    assert protocol.decode_resume(b'{"results":[]}\n') == []
    for bad in (
        b"[]",
        b"{",
        b'{"results":{}}',
        b'{"end":{},"results":[]}',
        b"{}",
        b'{"ran":{}}',
        b'{"results":[{"name":"t"}]}',
        b'{"end":{"x":1}}',
    ):
        with pytest.raises(protocol.ProtocolError):
            protocol.decode_resume(bad)


def test_results_bound_has_room_for_a_full_step() -> None:
    limits = protocol.Limits(results=1000, step_arguments=2000)
    assert protocol.results_bound(limits) >= 2000 + 1000 + protocol.RAN_OVERHEAD


class _CountedWalks:
    """A QuickJS context that counts its heap walks (``memory()``)."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self.walks = 0

    def memory(self) -> dict[str, int]:
        self.walks += 1
        return self._ctx.memory()  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)


def test_a_live_run_does_not_walk_its_heap_at_every_call() -> None:
    """A step's stats say how much heap the script holds, and QuickJS counts it by walking
    every object. Counted at each call of a live run, that made each call of a script
    holding 500,000 objects cost 42 ms more, charged to its compute_ms. The count is taken
    again only once the run has used twenty times the last walk's CPU since, and stands in
    between."""
    s = script(
        """
        const kept = [];
        for (let i = 0; i < 200000; i++) kept.push({ i, s: "x" + i });
        let total = 0;
        for (let i = 0; i < 60; i++) total += (await tools.echo({ i })).echo.i;
        return [kept.length, total];"""
    )
    live = runtime.LiveInProcess(s)
    ran = live.start()
    run = live._run
    assert isinstance(run, runtime.Run)
    counted = run.ctx = _CountedWalks(run.ctx)
    heaps = []
    while ran.outcome == "calls":
        heaps.append(ran.stats.heap_bytes)
        ran = live.resume([answer(c.name, c.arguments) for c in ran.calls])
    assert ran.outcome == "finished" and ran.value == [200000, 1770]
    assert len(heaps) == 60 and min(heaps) > 200000 * 16  # the count stands between walks
    assert counted.walks <= 6, counted.walks  # at every call, it was 60
