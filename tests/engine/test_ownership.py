"""One host drives a script at a time: several hosts that resume one script at once (engine
objects in one process, or host processes) run each approved call once and agree on one
outcome; a host that stalls past its lease cannot write over its successor."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from engine import (
    PROPOSED,
    CallNotWaiting,
    CodeMode,
    CodeModeError,
    ConfigError,
    LogStore,
    MemoryStore,
    RunResult,
    ScriptRecord,
    StoreUnavailable,
    ToolsMissing,
    tool,
)
from engine._drive import Drive, lease_clock
from engine.log import Lease
from runner import HOST_BUSY
from tests._needs import require
from tests.engine.conftest import EnteredRunner, InProcessRunner
from tests.engine.host_processes import NOTE_SOURCE, host_result, ledger, wait_for

ROOT = Path(__file__).resolve().parents[2]


def _needs_compiler() -> None:
    """The type check's compiler (TypeScript's native tsc, which `make install` installs)."""
    from engine.languages.javascript import CompilerMissing, find_compiler

    try:
        find_compiler()
    except CompilerMissing as e:
        require(str(e))


def _pay_tools(effects: list[int], gate: asyncio.Event | None = None) -> list:
    @tool(needs_approval=True)
    async def pay(cents: int) -> str:
        """Pay, after a person approves."""
        effects.append(cents)
        if gate is not None:
            await gate.wait()
        return "paid"

    @tool(read_only=True)
    def price(sku: str) -> int:
        """A price."""
        return 30

    return [pay, price]


SCRIPT = """
const cents = await tools.price({ sku: "A1" });
const receipt = await tools.pay({ cents });
return { cents, receipt };
"""


async def test_hosts_resuming_at_once_run_the_call_once(
    make_store: Callable[[], LogStore],
) -> None:
    """Four engines on one log resume an approved script at once: the call runs once, the
    one that drives it finishes, the others say the script is driven elsewhere; later every
    resume returns the one outcome."""
    effects: list[int] = []
    gate = asyncio.Event()
    hosts = [
        CodeMode(_pay_tools(effects, gate), runner=InProcessRunner(), store=make_store())
        for _ in range(4)
    ]
    try:
        paused = await hosts[0].run_code(SCRIPT)
        assert paused.status == "paused", paused.text
        call_id = paused.waiting[0]["call_id"]
        await hosts[1].approve(paused.script_id, call_id)
        with pytest.raises(CallNotWaiting):  # the approval delivered twice
            await hosts[2].approve(paused.script_id, call_id)

        driving = asyncio.create_task(hosts[3].resume(paused.script_id))
        while not effects:  # hosts[3] is inside the call, holding the script
            await asyncio.sleep(0.01)
        others = await asyncio.gather(*(h.resume(paused.script_id) for h in hosts[:3]))
        assert [r.status for r in others] == ["elsewhere"] * 3, [r.text for r in others]
        assert "another host" in others[0].text
        # When a resume could take it, if that host stopped: the lease's end.
        assert re.search(
            r"its lease runs out in about \d+ s; resume the script then\.$", others[0].text
        )
        gate.set()
        done = await driving
        assert done.status == "finished" and done.value == {"cents": 30, "receipt": "paid"}
        assert effects == [30]
        again = await asyncio.gather(*(h.resume(paused.script_id) for h in hosts))
        assert {orjson.dumps(r.to_dict()) for r in again} == {orjson.dumps(done.to_dict())}
    finally:
        gate.set()
        for h in hosts:
            await h.aclose()


async def test_resume_can_wait_for_the_host_that_drives(
    make_store: Callable[[], LogStore],
) -> None:
    """resume(wait=...) waits for the driving host to let go and returns the outcome."""
    effects: list[int] = []
    gate = asyncio.Event()
    store = make_store()
    a = CodeMode(
        _pay_tools(effects, gate), runner=InProcessRunner(), store=store, poll_interval=0.02
    )
    b = CodeMode(
        _pay_tools(effects, gate), runner=InProcessRunner(), store=make_store(), poll_interval=0.02
    )
    try:
        paused = await a.run_code(SCRIPT)
        await a.approve(paused.script_id, paused.waiting[0]["call_id"])
        driving = asyncio.create_task(a.resume(paused.script_id))
        while not effects:
            await asyncio.sleep(0.01)
        waiting = asyncio.create_task(b.resume(paused.script_id, wait=60))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        gate.set()
        done, waited = await driving, await waiting
        assert waited.to_dict() == done.to_dict() and effects == [30]
    finally:
        gate.set()
        await a.aclose()
        await b.aclose()


async def test_idempotent_start_continues_the_script(make_store: Callable[[], LogStore]) -> None:
    """A host that replays the model's run_code call (same key) continues that script: its
    calls do not run again, and the result is the same."""
    effects: list[int] = []
    host = CodeMode(_pay_tools(effects), runner=InProcessRunner(), store=make_store())
    replayed = CodeMode(_pay_tools(effects), runner=InProcessRunner(), store=make_store())
    try:
        seen: list[str] = []
        first = await host.run_code(SCRIPT, key="toolu_01", on_start=seen.append)
        assert first.status == "paused" and seen == [first.script_id]
        again = await replayed.run_code(SCRIPT, key="toolu_01", on_start=seen.append)
        assert again.script_id == first.script_id and seen == [first.script_id] * 2
        assert again.status == "paused" and again.waiting == first.waiting
        await replayed.approve(first.script_id, first.waiting[0]["call_id"])
        done = await host.run_code(SCRIPT, key="toolu_01")
        assert done.value == {"cents": 30, "receipt": "paid"} and effects == [30]
        assert (await replayed.run_code(SCRIPT, key="toolu_01")).to_dict() == done.to_dict()
        other = await host.run_code(SCRIPT, key="toolu_02")
        assert other.script_id != first.script_id
    finally:
        await host.aclose()
        await replayed.aclose()


async def test_a_keyed_start_waits_for_the_host_that_drives_the_script(
    make_store: Callable[[], LogStore],
) -> None:
    """A model loop's replayed run_code (same key) while another host drives the script (a
    worker that took it after the approval) gives "elsewhere" at once, or with ``wait`` the
    script's outcome once that host is done: the README's loops gave the model "Script is
    running on another host" as the tool's answer."""
    effects: list[int] = []
    gate = asyncio.Event()
    worker = CodeMode(_pay_tools(effects, gate), runner=InProcessRunner(), store=make_store())
    loop = CodeMode(_pay_tools(effects), runner=InProcessRunner(), store=make_store())
    try:
        paused = await loop.run_code(SCRIPT, key="toolu_07")
        await loop.approve(paused.script_id, paused.waiting[0]["call_id"])
        driving = asyncio.create_task(worker.resume(paused.script_id))
        while not effects:  # the worker is inside the call, holding the script
            await asyncio.sleep(0.01)
        now = await loop.run_code(SCRIPT, key="toolu_07")
        assert now.status == "elsewhere", now.text
        waited = asyncio.create_task(loop.run_code(SCRIPT, key="toolu_07", wait=60))
        await asyncio.sleep(0.2)
        assert not waited.done()
        gate.set()
        done = await waited
        assert done.status == "finished" and done.value == {"cents": 30, "receipt": "paid"}
        assert (await driving).to_dict() == done.to_dict() and effects == [30]
        with pytest.raises(CodeModeError, match="must be a number of seconds"):
            await loop.run_code(SCRIPT, key="toolu_07", wait=-1)
    finally:
        gate.set()
        await worker.aclose()
        await loop.aclose()


async def test_a_key_names_a_script_within_its_tenant(make_store: Callable[[], LogStore]) -> None:
    """Tenant B's start with a key tenant A used starts B's own script: it neither gets A's
    outcome (A's script finished), nor drives A's script on (paused, its call approved), nor
    waits for A's start with that key that this host still runs. Each tenant's start again
    with the key is idempotent."""
    effects: list[int] = []
    entered, gate = asyncio.Event(), asyncio.Event()

    @tool
    def secret(who: str) -> str:
        """A tenant's secret."""
        return f"secret of {who}"

    @tool
    async def slow(who: str) -> str:
        """Ends once the test lets it."""
        entered.set()
        await gate.wait()
        return f"slow for {who}"

    tools = [secret, slow, *_pay_tools(effects)]
    store = make_store()
    host = CodeMode(tools, runner=InProcessRunner(), store=store, type_check="off")
    other = CodeMode(tools, runner=InProcessRunner(), store=make_store(), type_check="off")
    try:
        a = await host.run_code("return await tools.secret({ who: 'A' })", tenant="A", key="k1")
        assert a.status == "finished" and a.value == "secret of A", a.text
        b = await other.run_code("return 'B own script'", tenant="B", key="k1")
        assert b.status == "finished" and b.value == "B own script", b.text
        assert b.script_id != a.script_id
        again_a = await other.run_code(
            "return await tools.secret({ who: 'A' })", tenant="A", key="k1"
        )
        assert again_a.to_dict() == a.to_dict()
        again_b = await host.run_code("return 'B own script'", tenant="B", key="k1")
        assert again_b.to_dict() == b.to_dict()
        # The key with other code is no start again of that call: the host gave one key
        # to two calls (a provider that numbers its tool-use ids per turn), and would hand
        # the model the other script's answer.
        with pytest.raises(ConfigError, match="started with other code"):
            await host.run_code("return 0", tenant="B", key="k1")
        with pytest.raises(ConfigError, match="started in javascript, not python"):
            await host.run_code("return 'B own script'", tenant="B", key="k1", language="python")

        paused = await host.run_code(SCRIPT, tenant="A", key="k2")
        assert paused.status == "paused", paused.text
        await host.approve(paused.script_id, paused.waiting[0]["call_id"])
        mine = await other.run_code("return 'B again'", tenant="B", key="k2")
        assert mine.value == "B again" and mine.script_id != paused.script_id, mine.text
        assert effects == [], "tenant B's start drove tenant A's script on"
        assert (await store.get_script(paused.script_id)).tenant == "A"

        running = asyncio.ensure_future(
            host.run_code("return await tools.slow({ who: 'A' })", tenant="A", key="k3")
        )
        await asyncio.wait_for(entered.wait(), 30)
        own = await asyncio.wait_for(host.run_code("return 'B third'", tenant="B", key="k3"), 30)
        assert own.value == "B third" and not running.done(), own.text
        gate.set()
        assert (await running).value == "slow for A"
        scripts = await store.scripts()
        assert sorted(s.tenant for s in scripts) == ["A", "A", "A", "B", "B", "B"]
    finally:
        gate.set()
        await host.aclose()
        await other.aclose()


async def test_an_unchecked_first_step_runs_while_the_start_is_written(
    make_store: Callable[[], LogStore],
) -> None:
    """Without the type check, a new script's first step is under way before its start is
    in the log (the store's start here waits for it: run one after the other, they would
    never end); the script is recorded, stepped once and finished as ever."""
    runner = EnteredRunner()
    store = make_store()
    start = store.start

    async def start_after_the_step_began(record, owner, ttl_ms):  # type: ignore[no-untyped-def]
        await asyncio.wait_for(runner.entered.wait(), 10)
        return await start(record, owner, ttl_ms)

    store.start = start_after_the_step_began  # type: ignore[method-assign]
    engine = CodeMode([], runner=runner, store=store, type_check="off")
    try:
        result = await engine.run_code("return 6 * 7")
        assert result.status == "finished" and result.value == 42, result.text
        assert len(runner.steps) == 1 and result.steps == 1
        record = await store.get_script(result.script_id)
        assert record.steps == 1 and record.outcome == result.to_dict()
    finally:
        await engine.aclose()


class _Busy(InProcessRunner):
    """Notes, for each step, whether its caller said it works beside it (runner.HOST_BUSY)."""

    def __init__(self) -> None:
        super().__init__()
        self.busy: list[bool] = []

    async def run(self, script, files=None, *, tenant="default", live=False):  # type: ignore[no-untyped-def]
        self.busy.append(HOST_BUSY.get())
        return await super().run(script, files, tenant=tenant, live=live)


@pytest.mark.parametrize("live", [False, True])
async def test_only_the_step_run_beside_the_start_tells_the_runner_the_host_is_busy(
    make_store: Callable[[], LogStore], live: bool
) -> None:
    """The first step of an unchecked script runs while the engine writes the start, and
    says so to the runner (which may keep its process off the host's CPU); the steps after
    it run while the engine waits, and do not."""

    @tool
    async def echo(x: int) -> int:
        """Give x back."""
        return x

    runner = _Busy()
    engine = CodeMode([echo], runner=runner, store=make_store(), type_check="off", live=live)
    try:
        result = await engine.run_code("await tools.echo({x: 1}); await tools.echo({x: 2})")
        assert result.status == "finished", result.text
        assert runner.busy == ([True] if live else [True, False, False])
        assert HOST_BUSY.get() is False  # set in the step's own context only
    finally:
        await engine.aclose()


@pytest.mark.parametrize("live", [False, True])
async def test_a_start_of_a_script_begun_before_drops_its_early_step(
    make_store: Callable[[], LogStore], live: bool
) -> None:
    """A keyed start delivered again begins a first step, then finds the key in the log: that
    step is dropped (its live run closed) and the script begun before goes on; its approved
    call runs once."""
    effects: list[int] = []
    store = make_store()
    first_runner, again_runner = InProcessRunner(), InProcessRunner()
    host = CodeMode(
        _pay_tools(effects), runner=first_runner, store=store, type_check="off", live=live
    )
    again = CodeMode(
        _pay_tools(effects), runner=again_runner, store=store, type_check="off", live=live
    )
    try:
        first = await host.run_code(SCRIPT, key="toolu_01")
        assert first.status == "paused", first.text
        repeated = await again.run_code(SCRIPT, key="toolu_01")
        assert repeated.script_id == first.script_id and repeated.status == "paused"
        assert len(again_runner.steps) >= 1  # the early step, and the resumed script's own
        assert all(run.closed for run in again_runner.lives), "a dropped live run was kept"
        await again.approve(first.script_id, first.waiting[0]["call_id"])
        done = await again.run_code(SCRIPT, key="toolu_01")
        assert done.value == {"cents": 30, "receipt": "paid"} and effects == [30]
        assert [s.id for s in await store.scripts()] == [first.script_id]
    finally:
        await host.aclose()
        await again.aclose()
    assert all(run.closed for run in first_runner.lives + again_runner.lives)


async def test_hosts_starting_one_key_at_once_run_its_call_once(
    make_store: Callable[[], LogStore],
) -> None:
    """Five hosts given the same unchecked start at once each begin its first step while
    they write the start; one start wins, the others drop their steps: the call with effects
    runs once, and every host returns the one outcome or "elsewhere"."""
    effects: list[int] = []

    @tool
    async def charge(cents: int) -> str:
        """Charge, with effects."""
        effects.append(cents)
        await asyncio.sleep(0.05)
        return "charged"

    store = make_store()
    runners = [InProcessRunner() for _ in range(5)]
    hosts = [
        CodeMode([charge], runner=r, store=store, type_check="off", live=live)
        for r, live in zip(runners, [True, False, True, False, True], strict=True)
    ]
    code = "const r = await tools.charge({ cents: 5 }); return r;"
    try:
        results = await asyncio.gather(*(h.run_code(code, key="toolu_same") for h in hosts))
        assert effects == [5]
        assert len({r.script_id for r in results}) == 1
        done = [r for r in results if r.status == "finished"]
        assert done and all(r.value == "charged" for r in done), [r.text for r in results]
        assert all(r.status in ("finished", "elsewhere") for r in results)
        assert len(await store.scripts()) == 1
    finally:
        for h in hosts:
            await h.aclose()
    assert all(run.closed for r in runners for run in r.lives)


async def test_a_start_cancelled_while_it_is_written_leaves_no_step_running(
    tmp_path: Path,
) -> None:
    """run_code cancelled while its start is written: the first step begun with it is
    cancelled or its live run closed, and no process of it is left (a real runner)."""
    from engine import SqliteStore
    from runner import ProcessRunner
    from tests.runner.support import zombies

    effects: list[int] = []
    store = SqliteStore(tmp_path / "log")
    stuck = asyncio.Event()

    async def never_written(record, owner, ttl_ms):  # type: ignore[no-untyped-def]
        stuck.set()
        await asyncio.sleep(3600)

    store.start = never_written  # type: ignore[method-assign]
    runner = ProcessRunner(mode="pool", slots=2)
    engine = CodeMode(_pay_tools(effects), runner=runner, store=store, type_check="off", live=True)
    try:
        task = asyncio.create_task(engine.run_code("await tools.price({ sku: 'A1' }); return 1"))
        await asyncio.wait_for(stuck.wait(), 10)
        await asyncio.sleep(0.5)  # the step reaches its call and its process waits, live
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert runner.live_runs == 0, "a live run of a cancelled start was kept"
        assert effects == []
    finally:
        await engine.aclose()
        await store.aclose()
    assert zombies() == []


async def test_resume_without_a_tool_the_script_calls_runs_nothing(
    make_store: Callable[[], LogStore],
) -> None:
    """A host whose tools lack one the script has called refuses to drive it before any call
    runs, naming the tool; the script waits for a host that has it."""
    effects: list[int] = []
    store = make_store()
    full = CodeMode(_pay_tools(effects), runner=InProcessRunner(), store=store)
    paused = await full.run_code(SCRIPT)
    await full.approve(paused.script_id, paused.waiting[0]["call_id"])
    (price,) = [t for t in _pay_tools(effects) if t.name == "price"]
    lacking = CodeMode([price], runner=InProcessRunner(), store=make_store())
    try:
        with pytest.raises(ToolsMissing, match=r"calls pay, which this host does not have"):
            await lacking.resume(paused.script_id)
        assert effects == []
        done = await full.resume(paused.script_id)
        assert done.status == "finished" and effects == [30]
        record = await store.get_script(paused.script_id)
        assert set(record.tools) == {"pay", "price"}
        assert all(v.startswith("sha256:") for v in record.tools.values())
    finally:
        await full.aclose()
        await lacking.aclose()


async def test_a_host_lacking_a_tool_the_script_began_with_leaves_its_call_unrecorded(
    make_store: Callable[[], LogStore],
) -> None:
    """A host lacking a tool the script began with but has not called yet (its MCP server
    down, a rolling deploy) stops when the script calls it, recording nothing of that step:
    a host that has the tool drives the script on. The script's call to it failed with
    "does not exist", and the script with it, for good."""
    effects: list[int] = []
    store = make_store()

    @tool(read_only=True)
    def stock(sku: str) -> int:
        """Units in stock."""
        return 7

    full = CodeMode([*_pay_tools(effects), stock], runner=InProcessRunner(), store=store)
    code = SCRIPT.replace(
        "return { cents, receipt };",
        "return { cents, receipt, left: await tools.stock({ sku: 'A1' }) };",
    )
    paused = await full.run_code(code)
    await full.approve(paused.script_id, paused.waiting[0]["call_id"])
    lacking = CodeMode(_pay_tools(effects), runner=InProcessRunner(), store=make_store())
    try:
        with pytest.raises(ToolsMissing, match=r"calls stock, which this host does not have"):
            await lacking.resume(paused.script_id)
        assert effects == [30]  # the approved call ran; the next, to stock, was not recorded
        calls = await store.calls(paused.script_id)
        assert [c.name for c in calls] == ["price", "pay"]
        done = await full.resume(paused.script_id)
        assert done.status == "finished", done.text
        assert done.value == {"cents": 30, "receipt": "paid", "left": 7} and effects == [30]
    finally:
        await full.aclose()
        await lacking.aclose()


async def test_a_worker_passes_over_a_script_it_cannot_drive(
    make_store: Callable[[], LogStore], caplog: pytest.LogCaptureFixture
) -> None:
    """A worker whose tools lack one a ready script called leaves that script once, and
    drives the other ready scripts meanwhile: it neither spins on the one it cannot drive
    nor starves the rest behind it."""

    @tool(client=True)
    def ask(question: str) -> str:
        """Ask the client."""
        raise AssertionError("answered by the client")

    effects: list[int] = []
    store = make_store()
    full = CodeMode([*_pay_tools(effects), ask], runner=InProcessRunner(), store=store)
    (price,) = [t for t in _pay_tools(effects) if t.name == "price"]
    worker = CodeMode([price, ask], runner=InProcessRunner(), store=make_store())
    try:
        lacking = await full.run_code(SCRIPT)
        await full.approve(lacking.script_id, lacking.waiting[0]["call_id"])
        other = await full.run_code(
            'const sku = await tools.ask({ question: "which?" });\n'
            "return await tools.price({ sku });"
        )
        await full.client_result(other.script_id, other.waiting[0]["call_id"], "A1")
        stop = asyncio.Event()
        work = asyncio.create_task(worker.work(stop=stop))
        try:
            for _ in range(200):
                if (await store.get_script(other.script_id)).status == "finished":
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.2)  # time to look at the first script again, if it would
        finally:
            stop.set()
            await work
        assert (await store.get_script(other.script_id)).status == "finished"
        left = [r for r in caplog.records if "worker left script" in r.getMessage()]
        assert len(left) == 1 and lacking.script_id in left[0].getMessage()
        assert effects == [] and (await store.get_script(lacking.script_id)).status == "paused"
        done = await full.resume(lacking.script_id)
        assert done.status == "finished" and effects == [30]
    finally:
        await full.aclose()
        await worker.aclose()


@pytest.mark.parametrize("ended", [True, False], ids=["ended-there", "driven-there"])
async def test_a_worker_that_lost_its_script_says_so(
    caplog: pytest.LogCaptureFixture, ended: bool
) -> None:
    """A worker whose lease ran out while its call ran (the host stalled) and whose script
    another host took over says it lost the script to that host (and how it ended there, if
    it did), not that it drove it to that end: two workers' logs must not both claim one
    script's outcome."""
    caplog.set_level(logging.INFO, "codemode")
    now = [1000.0]
    store = MemoryStore(clock=lambda: now[0])  # the lease runs out when the test says
    effects: list[int] = []
    gate, running = asyncio.Event(), asyncio.Event()
    holding, let_go = asyncio.Event(), asyncio.Event()

    @tool(needs_approval=True)
    async def pay(cents: int) -> str:
        """Pay, after a person approves."""
        effects.append(cents)
        running.set()
        await gate.wait()
        return "paid"

    @tool
    async def hold_on() -> str:
        """Wait until the test lets go."""
        holding.set()
        await let_go.wait()
        return "held"

    code = (
        SCRIPT
        if ended
        else "let paid;\ntry { paid = await tools.pay({ cents: 30 }); }\n"
        'catch (e) { paid = "interrupted"; }\nreturn [paid, await tools.hold_on({})];'
    )
    (price,) = [t for t in _pay_tools([]) if t.name == "price"]
    worker = CodeMode([pay, hold_on, price], runner=InProcessRunner(), store=store)
    other = CodeMode([pay, hold_on, price], runner=InProcessRunner(), store=store)
    stop = asyncio.Event()
    work = taken = None
    try:
        paused = await other.run_code(code)
        await other.approve(paused.script_id, paused.waiting[0]["call_id"])
        work = asyncio.create_task(worker.work(stop=stop))
        await running.wait()
        now[0] += 3600  # the worker stalled past its lease: the other host takes over
        taken = asyncio.create_task(other.resume(paused.script_id))
        if ended:
            assert (await taken).status == "failed" and "interrupted" in (await taken).text
        else:
            await holding.wait()  # the other host drives it on
        gate.set()  # the worker wakes: its write is refused
        for _ in range(500):
            if any(r.getMessage().startswith("worker") for r in caplog.records):
                break
            await asyncio.sleep(0.01)
        said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("worker")]
        lost = (
            f"worker lost script={paused.script_id} to another host, which took it over once "
            "this host's lease ran out"
        )
        assert said == [lost + "; status there: failed" if ended else lost]
        assert effects == [30], "the call ran once"
        let_go.set()
        assert (await taken).status == ("failed" if ended else "finished")
    finally:
        stop.set()
        let_go.set()
        if work is not None:
            await work
        if taken is not None:
            await taken
        await worker.aclose()
        await other.aclose()


async def test_each_script_records_the_tools_it_started_with() -> None:
    """The tools' fingerprint a script records is that of the engine's tools when it started,
    also after an MCP server changed them (it is made once per tool set, not per script)."""
    from engine import MemoryStore
    from engine._tools import tool_fingerprint

    effects: list[int] = []
    store = MemoryStore()
    tools = _pay_tools(effects)
    engine = CodeMode(tools, runner=InProcessRunner(), store=store, type_check="off")

    @tool
    def extra(x: int) -> int:
        """An MCP server's tool."""
        return x

    try:
        first = await engine.run_code("return 1")
        engine._mcp_tools_changed([extra])
        second = await engine.run_code("return 2")
        third = await engine.run_code("return 3")
        recorded = [(await store.get_script(r.script_id)).tools for r in (first, second, third)]
        assert recorded[0] == tool_fingerprint(tools)
        assert recorded[1] == recorded[2] == tool_fingerprint([*tools, extra])
        assert set(recorded[1]) == {"pay", "price", "extra"}
        recorded[1]["pay"] = "changed"  # a record's copy: the next script's is its own
        fourth = await engine.run_code("return 4")
        assert (await store.get_script(fourth.script_id)).tools == recorded[2]
    finally:
        await engine.aclose()


async def test_hosts_of_a_postgres_log_share_its_attachments(postgres: str) -> None:
    """A script's files are kept in the log's database, so a host with no disk in common with
    the one that started the script reads them."""
    import uuid as _uuid

    from engine import Attachment, PostgresStore

    schema = f"files_{_uuid.uuid4().hex[:12]}"
    effects: list[int] = []
    a = CodeMode(
        _pay_tools(effects), runner=InProcessRunner(), store=PostgresStore(postgres, schema=schema)
    )
    b = CodeMode(
        _pay_tools(effects), runner=InProcessRunner(), store=PostgresStore(postgres, schema=schema)
    )
    script = """
    const text = await files.text("notes.txt");
    await tools.pay({ cents: text.length });
    return (await files.text("notes.txt")).slice(6);
    """
    try:
        paused = await a.run_code(script, files=[Attachment("notes.txt", data=b"hello world")])
        assert paused.status == "paused", paused.text
        await b.approve(paused.script_id, paused.waiting[0]["call_id"])
        done = await b.resume(paused.script_id)
        assert done.status == "finished" and done.value == "world", done.text
        assert effects == [11]
    finally:
        await a.aclose()
        await b.aclose()


async def test_repeated_deliveries_of_a_start_or_a_resume_share_one_run(
    make_store: Callable[[], LogStore],
) -> None:
    """A start delivered again while it runs (a model's retry, a queue's) returns that start's
    result, on_start told its id; a resume delivered again while it runs waits for it and
    takes its outcome (after a pause it resumes in turn). An approval that lands as a resume
    pauses is picked up by that resume or the next."""
    effects: list[int] = []
    engine = CodeMode(_pay_tools(effects), runner=InProcessRunner(), store=make_store())
    started: list[str] = []
    script = SCRIPT.replace("return", "await tools.pay({ cents: 1 });\nreturn")
    try:
        firsts = await asyncio.gather(
            *(engine.run_code(script, key="toolu_1", on_start=started.append) for _ in range(5))
        )
        assert {r.status for r in firsts} == {"paused"}, [r.text for r in firsts]
        assert len({r.script_id for r in firsts}) == 1 and started == [firsts[0].script_id] * 5
        paused = firsts[0]
        assert len(await engine.store.scripts()) == 1

        # The second pay waits for a person too: approve it the moment the resume pauses on
        # it (before that resume lets the script go), as a person as quick as the host would.
        async def approve(script_id: str, call_id: str) -> None:
            with contextlib.suppress(CallNotWaiting):  # a pause seen by a later resume too
                await engine.approve(script_id, call_id)

        def approve_at_pause(event) -> None:
            if event.kind == "paused":
                call_id = event.waiting[0]["call_id"]
                asyncio.get_running_loop().create_task(approve(event.script_id, call_id))

        engine.add_listener(approve_at_pause)
        await engine.approve(paused.script_id, paused.waiting[0]["call_id"])
        ends = await asyncio.wait_for(
            asyncio.gather(*(engine.resume(paused.script_id) for _ in range(5))), 60
        )
        # The first resume may have looked before the approval landed (paused); every later
        # one waited for the one before it, so none found the script driven elsewhere.
        assert ends[0].status in ("finished", "paused"), ends[0].text
        assert {r.status for r in ends[1:]} == {"finished"}, [r.text for r in ends]
        assert effects == [30, 1], "each approved call ran once"
    finally:
        await engine.aclose()


async def test_a_key_given_again_with_other_code_while_its_start_runs_is_refused(
    make_store: Callable[[], LogStore],
) -> None:
    """A start whose key this host is starting now with other code (or in another language)
    is one key given to two calls, not that call delivered again: it raises ConfigError at
    once, as it does once the first is in the log. It took the first script's result as its
    own, the model handed another script's answer without a word."""
    entered, gate = asyncio.Event(), asyncio.Event()

    @tool
    async def slow(who: str) -> str:
        """Ends once the test lets it."""
        entered.set()
        await gate.wait()
        return f"slow for {who}"

    engine = CodeMode([slow], runner=InProcessRunner(), store=make_store(), type_check="off")
    code = "return await tools.slow({ who: 'A' })"
    try:
        first = asyncio.ensure_future(engine.run_code(code, key="toolu_9"))
        await asyncio.wait_for(entered.wait(), 30)
        with pytest.raises(ConfigError, match="'toolu_9' names a script this host is starting"):
            await asyncio.wait_for(engine.run_code("return 'another call'", key="toolu_9"), 30)
        with pytest.raises(ConfigError, match="starting now in javascript, not python"):
            await asyncio.wait_for(engine.run_code(code, key="toolu_9", language="python"), 30)
        again = asyncio.ensure_future(engine.run_code(code, key="toolu_9"))
        gate.set()
        done = await asyncio.wait_for(first, 30)
        assert done.status == "finished" and done.value == "slow for A", done.text
        assert (await asyncio.wait_for(again, 30)).to_dict() == done.to_dict()
        assert len(await engine.store.scripts()) == 1
    finally:
        gate.set()
        await engine.aclose()


async def test_a_keyed_start_cut_during_its_check_is_checked_when_started_again(
    make_store: Callable[[], LogStore],
) -> None:
    """A host cut off while it type-checks a keyed start (here its run_code is cancelled)
    leaves nothing that could run unchecked: the key's next start checks the script, the
    check refuses it, and no call runs. (The start used to be written before the check, and
    the next start went on with the script unchecked and ran its calls.)"""
    from engine import TypeChecker

    _needs_compiler()
    entered = asyncio.Event()

    class Stuck(TypeChecker):
        async def check(self, code: str, declarations: str):  # type: ignore[no-untyped-def]
            entered.set()
            await asyncio.Event().wait()

    effects: list[int] = []
    store = make_store()
    refused = (
        'const cents = await tools.price({ sku: "A1" });\nreturn await tools.pay({ cent: cents });'
    )
    first = CodeMode(_pay_tools(effects), runner=InProcessRunner(), store=store, type_check=Stuck())
    second = CodeMode(_pay_tools(effects), runner=InProcessRunner(), store=make_store())
    try:
        cut = asyncio.create_task(first.run_code(refused, key="toolu_cut"))
        await entered.wait()
        cut.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await cut
        again = await second.run_code(refused, key="toolu_cut")
        assert again.status == "failed" and again.error is not None
        assert again.error["name"] == "TypeCheckError", again.text
        assert await store.calls(again.script_id) == [] and effects == []
        assert (await second.run_code(refused, key="toolu_cut")).text == again.text
    finally:
        await first.aclose()
        await second.aclose()


async def test_an_on_start_callback_that_fails_leaves_the_script_free(
    make_store: Callable[[], LogStore],
) -> None:
    """A host's ``on_start`` that raises: run_code raises it, and the script waits in the
    log, free for the key's next start at once (it was held for the whole lease, and every
    start or resume said it was driven elsewhere, by this very host)."""
    effects: list[int] = []
    engine = CodeMode(
        _pay_tools(effects), runner=InProcessRunner(), store=make_store(), type_check="off"
    )
    ids: list[str] = []

    def broken(script_id: str) -> None:
        ids.append(script_id)
        raise RuntimeError("the host's callback failed")

    try:
        with pytest.raises(RuntimeError, match="the host's callback failed"):
            await engine.run_code(SCRIPT, key="toolu_cb", on_start=broken)
        again = await engine.run_code(SCRIPT, key="toolu_cb")
        assert again.status == "paused" and again.script_id == ids[0], again.text
        with pytest.raises(RuntimeError):
            await engine.run_code("return 1", on_start=broken)
        assert (await engine.resume(ids[1])).value == 1
    finally:
        await engine.aclose()


async def test_a_resume_while_this_host_drives_the_script_waits_for_it(
    make_store: Callable[[], LogStore],
) -> None:
    """A resume that lands on the host whose keyed start drives the script (the model's
    call and an approval webhook, say) waits for that drive and gives its outcome: it used
    to answer that the script ran on another host, naming this one."""
    gate = asyncio.Event()
    effects: list[int] = []
    engine = CodeMode(_pay_tools(effects, gate), runner=InProcessRunner(), store=make_store())
    ids: list[str] = []
    tasks: list[asyncio.Task[RunResult]] = []
    try:
        paused = await engine.run_code(SCRIPT, key="toolu_r", on_start=ids.append)
        await engine.approve(paused.script_id, paused.waiting[0]["call_id"])
        tasks.append(asyncio.create_task(engine.run_code(SCRIPT, key="toolu_r")))
        while not effects:
            await asyncio.sleep(0.01)
        tasks.append(asyncio.create_task(engine.resume(ids[0])))
        await asyncio.sleep(0.1)
        assert not tasks[1].done(), f"the resume did not wait: {tasks[1].result().text}"
        gate.set()
        first, second = await asyncio.gather(*tasks)
        assert first.status == second.status == "finished", (first.text, second.text)
        assert first.text == second.text and effects == [30]
    finally:
        gate.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await engine.aclose()


async def test_a_burst_of_checked_starts_on_postgres_completes(postgres: str) -> None:
    """A hundred starts at once on a PostgreSQL log with the type check on, each delivered
    three times: every one returns its script's pause, each script is checked once, and no
    start waits out the pool (the stall of a burst that crowded it)."""
    from engine import PostgresStore, TypeChecker

    _needs_compiler()

    class Counted(TypeChecker):
        checks = 0

        async def check(self, code: str, declarations: str):  # type: ignore[no-untyped-def]
            Counted.checks += 1
            return await super().check(code, declarations)

    effects: list[int] = []
    store = PostgresStore(postgres, schema=f"burst_{uuid.uuid4().hex[:12]}", max_connections=4)
    engine = CodeMode(
        _pay_tools(effects), runner=InProcessRunner(), store=store, type_check=Counted()
    )
    try:
        orders = range(100)
        results = await asyncio.gather(
            *(
                engine.run_code(SCRIPT.replace('"A1"', f'"A{n}"'), key=f"order-{n}")
                for n in [*orders, *orders, *orders]
            )
        )
        assert {r.status for r in results} == {"paused"}, {r.text for r in results}
        for n in orders:
            assert len({r.script_id for r in results[n::100]}) == 1, "one script per order"
        assert len(await store.scripts(limit=1000)) == 100
        assert Counted.checks == 100, "each script is checked once, when it starts"
    finally:
        await engine.aclose()


# ---- host processes ----

TOOLS = (
    NOTE_SOURCE
    + '''
import os, time
from engine import tool

@tool(read_only=True)
def price(sku: str) -> int:
    """A price."""
    return 30

@tool(needs_approval=True)
def pay(cents: int) -> str:
    """Pay, after a person approves; waits for the GO file when there is one to wait for."""
    _note(f"pay {cents} {os.getpid()}")
    go = os.environ.get("GO")
    while go and not os.path.exists(go):
        time.sleep(0.02)
    return "paid"
'''
)


def _host_env(tmp_path: Path) -> dict[str, str]:
    """A host process's ledger, and its temporary files under ``tmp_path``: a host killed in
    the middle of a type check cannot remove its check's directory, and pytest removes these."""
    tmp = tmp_path / "host-tmp"
    tmp.mkdir(exist_ok=True)
    return {"LEDGER": str(tmp_path / "ledger"), "TMPDIR": str(tmp)}


HOST = """
import asyncio, sys, json, os
sys.path.insert(0, {root!r})
from engine import CodeMode, CallNotWaiting
from engine._loading import load_tools
from tests.engine.conftest import InProcessRunner

async def main():
    tools, _ = load_tools({tools!r})
    engine = CodeMode(tools, runner=InProcessRunner(), data_dir={data!r},
                      lease_ms=int(os.environ.get("LEASE_MS", "30000")))
    action = sys.argv[1]
    if action == "start":
        result = await engine.run_code(open(sys.argv[2]).read())
    else:
        script_id, call_id = sys.argv[2], sys.argv[3]
        if call_id != "-":
            try:
                await engine.approve(script_id, call_id)
            except CallNotWaiting:
                pass  # another host had it delivered too
        result = await engine.resume(script_id)
    print(json.dumps(result.to_dict()), flush=True)
    await engine.aclose()

asyncio.run(main())
"""


def _host(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    tools = tmp_path / "tools.py"
    tools.write_text(TOOLS)
    program = HOST.format(root=str(ROOT), tools=str(tools), data=str(tmp_path / "data"))
    proc = subprocess.Popen(
        [sys.executable, "-c", program, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **_host_env(tmp_path), **(env or {})},
        cwd=ROOT,
    )
    return proc


def _script(tmp_path: Path) -> str:
    path = tmp_path / "script.js"
    path.write_text(SCRIPT)
    return str(path)


def test_host_processes_resuming_at_once_run_the_call_once(tmp_path: Path) -> None:
    """Four host processes get the approval and resume at once: the call runs once, and every
    host returns the one outcome or says another host drives the script."""
    paused = host_result(_host(tmp_path, "start", _script(tmp_path)))
    call_id = paused.waiting[0]["call_id"]
    hosts = [_host(tmp_path, "resume", paused.script_id, call_id) for _ in range(4)]
    results = [host_result(h) for h in hosts]
    assert [line.split()[:2] for line in ledger(tmp_path)] == [["pay", "30"]]
    finished = [r for r in results if r.status == "finished"]
    assert finished and all(r.status in ("finished", "elsewhere") for r in results)
    assert {orjson.dumps(r.to_dict()) for r in finished} == {orjson.dumps(finished[0].to_dict())}
    assert finished[0].value == {"cents": 30, "receipt": "paid"}


def test_a_host_stalled_past_its_lease_cannot_overwrite_its_successor(tmp_path: Path) -> None:
    """A host stopped (SIGSTOP) while its call runs loses the script when its lease lapses;
    the successor settles that call as interrupted and ends the script; the stalled host,
    continued, finishes its call (which ran once) but its writes are refused, and it returns
    the successor's outcome."""
    paused = host_result(_host(tmp_path, "start", _script(tmp_path)))
    go = tmp_path / "go"
    env = {"LEASE_MS": "400", "GO": str(go)}
    stalled = _host(tmp_path, "resume", paused.script_id, paused.waiting[0]["call_id"], env=env)
    try:
        wait_for(lambda: len(ledger(tmp_path)) == 1, "the call to start")
        stalled.send_signal(signal.SIGSTOP)
        time.sleep(0.8)  # past the stalled host's lease (400 ms)
        successor = host_result(_host(tmp_path, "resume", paused.script_id, "-", env=env))
        assert successor.status == "failed", successor.text
        assert "interrupted" in successor.text
    finally:
        stalled.send_signal(signal.SIGCONT)
    go.write_text("")
    late = host_result(stalled)
    assert late.to_dict() == successor.to_dict(), "the successor's outcome stands"
    assert len(ledger(tmp_path)) == 1, "the call ran once"
    final = host_result(_host(tmp_path, "resume", paused.script_id, "-"))
    assert final.to_dict() == successor.to_dict()


# ---- a randomized trial: three host processes on one PostgreSQL log, killed at random ----

TRIAL_TOOLS = (
    NOTE_SOURCE
    + '''
from engine import tool

@tool
def reserve(order: int) -> str:
    """Reserve an order's stock."""
    _note(f"reserve {order}")
    return "reserved"

@tool
def charge(order: int) -> str:
    """Charge an order."""
    _note(f"charge {order}")
    return "charged"

@tool(needs_approval=True)
def ship(order: int) -> str:
    """Ship an order, after a person approves."""
    _note(f"ship {order}")
    return "shipped"
'''
)

# Reserve and charge go on live (with live steps on); ship waits for a person.
TRIAL_SCRIPT = """
const reserved = await tools.reserve({ order: ORDER });
const charged = await tools.charge({ order: ORDER });
const shipped = await tools.ship({ order: ORDER });
return { order: ORDER, reserved, charged, shipped };
"""

# A host: drives scripts that wait for no one in the background, and answers the driver's
# commands (JSON lines on stdin) concurrently, each with one JSON line on stdout.
TRIAL_HOST = """
import asyncio, json, sys
sys.path.insert(0, {root!r})
from engine import CallNotWaiting, CodeMode, PostgresStore
from engine._loading import load_tools
from tests.engine.conftest import InProcessRunner

async def main():
    tools, _ = load_tools({tools!r})
    store = PostgresStore({dsn!r}, schema={schema!r})
    # The type check is on, as a host's default: a burst of checked starts used to stall
    # the pool here (test_a_burst_of_checked_starts_on_postgres_completes). Off, each start
    # begins its first step while it writes the start.
    engine = CodeMode(tools, runner=InProcessRunner(), store=store, lease_ms=3000,
                      poll_interval=0.05, live={live!r}, type_check={type_check!r})
    worker = asyncio.create_task(engine.work())

    async def handle(command):
        try:
            await act(command)
        except Exception as e:  # the log overloaded: the driver sends it again
            print(json.dumps({{"order": command["order"], "error": str(e)}}), flush=True)

    async def act(command):
        if command["op"] == "start":
            script = {script!r}.replace("ORDER", str(command["order"]))
            result = await engine.run_code(script, key=f"order-{{command['order']}}")
        else:
            try:
                await engine.approve(command["script_id"], command["call_id"])
            except CallNotWaiting:
                pass
            result = await engine.resume(command["script_id"])
        print(json.dumps({{"order": command["order"], "result": result.to_dict()}}), flush=True)

    tasks = set()
    while line := await asyncio.to_thread(sys.stdin.readline):
        task = asyncio.create_task(handle(json.loads(line)))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

asyncio.run(main())
"""


class _TrialHost:
    def __init__(self, tmp_path: Path, dsn: str, schema: str, live: bool, checked: bool) -> None:
        tools = tmp_path / "trial_tools.py"
        tools.write_text(TRIAL_TOOLS)
        program = TRIAL_HOST.format(
            root=str(ROOT),
            tools=str(tools),
            dsn=dsn,
            schema=schema,
            script=TRIAL_SCRIPT,
            live=live,
            type_check="on" if checked else "off",
        )
        # What a host says on stderr is kept next to the ledger, for a failure's post-mortem.
        self._stderr = (tmp_path / f"host-{uuid.uuid4().hex[:6]}.err").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", program],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            bufsize=1,
            env={**os.environ, **_host_env(tmp_path)},
            cwd=ROOT,
        )
        self.lines: list[dict] = []
        self.asked: dict[int, int] = {}  # order -> commands sent, and answered (a line each)
        self.answered: dict[int, int] = {}
        self._reader = asyncio.get_running_loop().run_in_executor(None, self._read)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = orjson.loads(line)
            self.lines.append(message)
            self.answered[message["order"]] = self.answered.get(message["order"], 0) + 1

    def busy_with(self, order: int) -> bool:
        """Whether a command for ``order`` is still unanswered here (and the host runs)."""
        alive = self.proc.poll() is None
        return alive and self.asked.get(order, 0) > self.answered.get(order, 0)

    def send(self, command: dict) -> None:
        assert self.proc.stdin is not None
        order = command["order"]
        self.asked[order] = self.asked.get(order, 0) + 1
        try:
            self.proc.stdin.write(orjson.dumps(command).decode() + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # killed: the driver sends it again elsewhere

    async def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        await self._reader
        self._stderr.close()

    async def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.kill()
        self.proc.wait()
        await self._reader
        self._stderr.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("live", "checked"),
    [(True, True), (False, True), (True, False)],
    ids=["live", "replay", "live-unchecked"],
)
async def test_randomized_trial_three_hosts_on_postgres(
    tmp_path: Path, postgres: str, live: bool, checked: bool
) -> None:
    """100 scripts with a reservation, a charge and an approved shipment, driven by three host
    processes on one PostgreSQL log, with live steps and without, and with the type check
    off (each start begins its first step while it writes the start); every start, approval
    and resume goes to two random hosts, and hosts are SIGKILLed at random (with live runs
    waiting in them) and started again. Afterwards: no effect ran twice, none was lost (every
    finished script's effects are in the ledger), no script has two outcomes, every script
    ended."""
    import random

    from engine import PostgresStore

    if checked:
        _needs_compiler()
    rng = random.Random(20261201)
    schema = f"trial_{uuid.uuid4().hex[:12]}"
    orders = range(100)
    hosts = [_TrialHost(tmp_path, postgres, schema, live, checked) for _ in range(3)]
    retired: list[_TrialHost] = []
    store = PostgresStore(postgres, schema=schema)
    known: dict[int, dict] = {}  # order -> the paused result that names its call
    sent: dict[int, float] = {}  # order -> when its last command went out
    kills = 0
    try:
        deadline = time.monotonic() + 240
        while True:
            if time.monotonic() > deadline:
                stuck = [
                    s
                    for s in await store.scripts(limit=10_000)
                    if s.status not in ("finished", "failed")
                ]
                said = [
                    (tmp_path / f).read_text()[-2000:]
                    for f in sorted(os.listdir(tmp_path))
                    if f.endswith(".err")
                ]
                raise AssertionError(
                    f"the trial did not end: {len(stuck)} scripts left, e.g. {stuck[:3]}; hosts said: {said}"
                )
            for host in hosts:
                for line in host.lines:
                    result = line.get("result") or {"status": "error"}
                    if result["status"] == "paused" and result["waiting"]:
                        known.setdefault(line["order"], result)
            ended = {
                s.key
                for s in await store.scripts(limit=10_000)
                if s.status in ("finished", "failed")
            }
            pending = [o for o in orders if f"order-{o}" not in ended]
            if not pending:
                break
            now = time.monotonic()
            for order in pending:
                if now - sent.get(order, -10.0) < 3.0:
                    continue  # give the last delivery time to land
                if now - sent.get(order, -10.0) < 30.0 and any(h.busy_with(order) for h in hosts):
                    # As a client does, wait for an answer (or a while) before sending again:
                    # a driver that piles commands on hosts slowed by a loaded machine
                    # measures its own flood (every host's pool times out), not ownership.
                    continue
                sent[order] = now
                for host in rng.sample(hosts, 2):
                    paused = known.get(order)
                    if paused is None:
                        host.send({"op": "start", "order": order})
                    else:
                        call_id = paused["waiting"][0]["call_id"]
                        host.send(
                            {
                                "op": "approve",
                                "order": order,
                                "script_id": paused["script_id"],
                                "call_id": call_id,
                            }
                        )
            await asyncio.sleep(rng.uniform(0.2, 0.6))
            if kills < 6 and rng.random() < 0.5:
                victim = rng.randrange(len(hosts))
                await hosts[victim].kill()
                retired.append(hosts[victim])
                hosts[victim] = _TrialHost(tmp_path, postgres, schema, live, checked)
                kills += 1
        assert kills >= 3, "the trial must kill hosts to mean anything"

        effects = (tmp_path / "ledger").read_text().splitlines()
        duplicated = sorted({e for e in effects if effects.count(e) > 1})
        assert duplicated == [], f"effects that ran twice: {duplicated}"
        stored = {s.key: s for s in await store.scripts(limit=10_000)}
        assert len(stored) == 100, "one script per order, however often it was started"
        finished = [s for s in stored.values() if s.status == "finished"]
        assert finished
        for s in finished:  # no result lost: each finished script saw its three effects
            order = int(s.key.removeprefix("order-"))
            assert s.outcome["value"] == {
                "order": order,
                "reserved": "reserved",
                "charged": "charged",
                "shipped": "shipped",
            }
            assert {f"reserve {order}", f"charge {order}", f"ship {order}"} <= set(effects)
        for host in hosts + retired:
            for line in host.lines:
                result = line.get("result") or {"status": "error"}
                if result["status"] in ("finished", "failed"):
                    outcome = stored[f"order-{line['order']}"].outcome
                    assert result == outcome, "a host returned an outcome the log does not hold"
    finally:
        for host in hosts:
            await host.close()
        await store.aclose()


def _never(lease: Lease) -> None:
    raise AssertionError(f"the lease of {lease.script_id} was kept: its release failed")


async def _drive_of(store: LogStore, script_id: str) -> tuple[Drive, Lease]:
    """A new script ``script_id`` started in ``store`` by ``host:1:a`` with a 300 ms lease,
    and the drive of it."""
    record = ScriptRecord(id=script_id, code="return 1", tenant="t", now_ms=0, seed=1, created_ms=0)
    started = await store.start(record, "host:1:a", 300)
    assert started.lease is not None
    drive = await Drive.resume(
        store, started.lease, 300, started.record, kept=_never, taken_at=lease_clock()
    )
    return drive, started.lease


async def test_a_renewal_that_loses_its_cancellation_still_lets_the_lease_go() -> None:
    """A drive's close stops its lease renewals even when a renewal swallows the cancellation
    (Python 3.11's asyncio.wait_for does, when a pool hands over a connection at that moment):
    the lease is given up, and no renewal extends it afterwards. Before, close waited forever
    on a renewer that lived on, and the lease of a paused script never lapsed."""
    from engine import MemoryStore

    class Swallowing(MemoryStore):
        def __init__(self) -> None:
            super().__init__()
            self.renewing = asyncio.Event()
            self.renewals = 0

        async def renew(self, lease, ttl_ms):  # type: ignore[no-untyped-def]
            self.renewals += 1
            self.renewing.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(3600)  # until cancelled, and the cancellation is lost
            return await super().renew(lease, ttl_ms)

    store = Swallowing()
    drive, lease = await _drive_of(store, "s1")
    await asyncio.wait_for(store.renewing.wait(), 10)
    await asyncio.wait_for(drive.close(), 10)  # hung here before
    renewals = store.renewals
    await asyncio.sleep(0.5)  # five renewal periods
    assert store.renewals == renewals, "a renewal ran after the drive closed"
    now = (await store.get_script("s1")).lease
    assert now is not None and now.expires_ms == 0, now
    other = await store.acquire("s1", "host:2:b", 300)
    assert other is not None and other.token == lease.token + 1


async def test_a_drive_renews_its_lease_until_it_closes_or_loses_it() -> None:
    """A drive that outlives its lease keeps it (renewed at a third of its time), so no other
    host can take the script; close stops the renewals and gives it up. A drive whose lease
    another host took stops renewing at once."""
    from engine import MemoryStore

    class Counting(MemoryStore):
        renewals = 0

        async def renew(self, lease, ttl_ms):  # type: ignore[no-untyped-def]
            self.renewals += 1
            return await super().renew(lease, ttl_ms)

    store = Counting()
    drive, _ = await _drive_of(store, "s1")
    await asyncio.sleep(1.0)  # over three leases
    assert store.renewals >= 3, store.renewals
    assert await store.acquire("s1", "host:2:b", 300) is None, "a renewed lease was taken"
    await drive.close()
    renewals = store.renewals
    other = await store.acquire("s1", "host:2:b", 300)
    assert other is not None
    await asyncio.sleep(0.3)
    assert store.renewals == renewals, "a renewal ran after the drive closed"

    # Taken over while it drives: the next renewal finds the lease lost, and none follows.
    drive, lease = await _drive_of(store, "s2")
    await store.release(lease)
    assert await store.acquire("s2", "host:2:b", 60_000) is not None
    before = store.renewals
    await asyncio.sleep(0.5)
    assert store.renewals == before + 1, "a drive went on renewing a lease it lost"
    await drive.close()


async def test_a_tenant_or_key_no_log_keeps_is_refused_before_anything_is_recorded(
    make_store: Callable[[], Any],
) -> None:
    """A tenant that is no name (None, a number, empty, past 256 characters) or a tenant or
    key with a lone surrogate or a NUL: the same CodeModeError on every store, and nothing
    recorded. (None was SQLite's IntegrityError, a surrogate a UnicodeEncodeError, a number
    a tenant the log kept as given.)"""
    from engine import CodeModeError

    store = make_store()
    engine = CodeMode([], runner=InProcessRunner(), store=store, type_check="off")
    try:
        for tenant in (None, 5, "", "t" * 257, "a\ud800", "a\x00b"):
            with pytest.raises(CodeModeError, match=r"tenant = .* must be a string of 1 to 256"):
                await engine.run_code("return 1", tenant=tenant)  # type: ignore[arg-type]
        for key in ("\udfff", "k\x00"):
            with pytest.raises(CodeModeError, match=r"key = .* must be a string of 1 to 256"):
                await engine.run_code("return 1", key=key)
        assert await store.scripts() == []
        result = await engine.run_code("return 1", tenant="acme", key="toolu_01")
        assert result.value == 1
    finally:
        await engine.aclose()


async def test_an_id_or_wait_no_log_keeps_is_refused_as_unknown(
    make_store: Callable[[], Any],
) -> None:
    """A script id or call id from outside that no log can hold (not a string, empty, past
    256 characters, a lone surrogate, a NUL) is an id the log lacks, on every store and every
    method that takes one (they were a TypeError, a UnicodeEncodeError); a ``wait`` that is
    not seconds (NaN spun on the log at full speed) is refused."""
    from engine import CallNotWaiting, CodeModeError, ScriptNotFound

    store = make_store()
    engine = CodeMode([], runner=InProcessRunner(), store=store, type_check="off")
    try:
        done = await engine.run_code("return 1")
        for bad in (None, 5, ["x"], "", "x" * 257, "\ud800", "a\x00b"):
            for call in (
                engine.resume(bad),  # type: ignore[arg-type]
                engine.hold(bad),  # type: ignore[arg-type]
                engine.release(bad),  # type: ignore[arg-type]
                engine.check_tools(bad),  # type: ignore[arg-type]
                engine.approve(bad, "c"),  # type: ignore[arg-type]
                engine.reject(bad, "c"),  # type: ignore[arg-type]
                engine.client_result(bad, "c", 1),  # type: ignore[arg-type]
            ):
                with pytest.raises(ScriptNotFound, match=r"no script .* in the session log"):
                    await call
            if bad != "":
                with pytest.raises(CallNotWaiting, match="has no call"):
                    await engine.approve(done.script_id, bad)  # type: ignore[arg-type]
        for wait in (float("nan"), -1, "5", True, None):
            with pytest.raises(CodeModeError, match=r"wait = .* must be a number of seconds"):
                await engine.resume(done.script_id, wait=wait)  # type: ignore[arg-type]
        assert (await engine.resume(done.script_id, wait=float("inf"))).value == 1
    finally:
        await engine.aclose()


async def test_bad_ownership_options_are_refused() -> None:
    """A key that is not a short string, a lease under 100 ms or a poll interval that is not
    positive seconds: one clear error, and no script is recorded."""
    from engine import CodeModeError, ConfigError, MemoryStore

    store = MemoryStore()
    engine = CodeMode([], runner=InProcessRunner(), store=store)
    for key in (123, "", "k" * 257):
        with pytest.raises(CodeModeError, match="must be a string of 1 to 256 characters"):
            await engine.run_code("return 1", key=key)  # type: ignore[arg-type]
    assert await store.scripts() == []
    with pytest.raises(ConfigError, match="lease_ms = 5 must be whole milliseconds"):
        CodeMode([], runner=InProcessRunner(), lease_ms=5)
    with pytest.raises(ConfigError, match="poll_interval = 0 must be seconds"):
        CodeMode([], runner=InProcessRunner(), poll_interval=0)
    await engine.aclose()


async def test_closing_the_engine_ends_the_calls_it_runs(tmp_path: Path) -> None:
    """aclose() while calls hang (an async handler and a sync one, no call timeout): each
    run_code ends at once on a CodeModeError naming the call, rather than when the handler
    would end (never); the async handler is cancelled. The calls stay running in the log,
    as after a crash: the next engine runs the read-only one again and tells the script the
    other was interrupted."""
    started = threading.Barrier(3)  # both handlers and this test
    cancelled = asyncio.Event()
    runs = 0
    stuck = threading.Event()

    @tool(read_only=True)
    async def look(n: int) -> int:
        """Look (changes nothing)."""
        nonlocal runs
        runs += 1
        if runs > 1:
            return n
        try:
            await asyncio.to_thread(started.wait, 30)
            await asyncio.sleep(3600)
        finally:
            cancelled.set()
        return n

    @tool
    def charge(cents: int) -> str:
        """Charge (an effect)."""
        started.wait(30)
        stuck.wait(60)
        return "charged"

    first = CodeMode(
        [look, charge],
        runner=InProcessRunner(),
        data_dir=tmp_path,
        type_check="off",
        call_timeout=None,
    )
    ids: list[str] = []
    runs_code = [
        asyncio.create_task(first.run_code(code, on_start=ids.append))
        for code in ("return await tools.look({ n: 7 })", "return await tools.charge({ cents: 5 })")
    ]
    await asyncio.to_thread(started.wait, 30)  # both calls run
    await first.aclose()
    try:
        for run, tool_name in zip(runs_code, ("look", "charge"), strict=True):
            with pytest.raises(CodeModeError, match=rf"closed while tools\.{tool_name} ran"):
                await asyncio.wait_for(run, 30)
        assert cancelled.is_set()
        second = CodeMode(
            [look, charge], runner=InProcessRunner(), data_dir=tmp_path, type_check="off"
        )
        try:
            again = [await second.resume(i, wait=0) for i in ids]
        finally:
            await second.aclose()
    finally:
        stuck.set()
    by_value = {r.status: r for r in again}
    assert by_value["finished"].value == 7
    assert "interrupted" in by_value["failed"].text, by_value["failed"].text


async def test_an_engine_closed_while_it_drives_a_script_lets_it_go(tmp_path: Path) -> None:
    """aclose() while run_code drives a script (a call running): the script's lease is given
    up at once, so a new engine on the log goes on with it without waiting the lease out;
    the run_code that was under way ends on a CodeModeError naming what happened."""
    running, release = asyncio.Event(), asyncio.Event()

    @tool
    async def charge(cents: int) -> str:
        """Charge (an effect)."""
        running.set()
        await release.wait()
        return "charged"

    first = CodeMode([charge], runner=InProcessRunner(), data_dir=tmp_path, type_check="off")
    ids: list[str] = []
    run = asyncio.create_task(
        first.run_code("return await tools.charge({ cents: 5 })", on_start=ids.append)
    )
    await running.wait()
    await first.aclose()
    release.set()
    with pytest.raises(CodeModeError, match="closed"):
        await run
    second = CodeMode([charge], runner=InProcessRunner(), data_dir=tmp_path, type_check="off")
    try:
        result = await second.resume(ids[0], wait=0)
    finally:
        await second.aclose()
    # Taken over at once: the call that was running may or may not have taken effect.
    assert result.status == "failed" and "interrupted" in result.text, result.text


async def test_an_engine_closed_while_its_worker_decides_ends_the_run(tmp_path: Path) -> None:
    """aclose() while an async worker has not answered: run_code waited for ever (the
    worker was not cancelled, as a running call's handler is). It ends on a CodeModeError,
    the calls proposed in the log, and a new engine whose worker answers runs them."""
    asked = asyncio.Event()

    async def undecided(trigger: dict[str, Any]) -> str:
        asked.set()
        await asyncio.Event().wait()  # a person who never answers
        return PROPOSED

    @tool
    def charge(cents: int) -> str:
        """Charge (an effect)."""
        return "charged"

    first = CodeMode([charge], runner=InProcessRunner(), data_dir=tmp_path, worker=undecided)
    ids: list[str] = []
    run = asyncio.create_task(
        first.run_code("return await tools.charge({ cents: 5 })", on_start=ids.append)
    )
    await asked.wait()
    await first.aclose()
    with pytest.raises(CodeModeError, match="closed while the host's worker decided"):
        await run
    second = CodeMode([charge], runner=InProcessRunner(), data_dir=tmp_path)
    try:
        assert (await second.resume(ids[0])).value == "charged"
    finally:
        await second.aclose()


class _Charges:
    """A sync tool with an effect, ``charge``, whose thread waits until ``finish`` is set;
    ``started`` is set as a call begins, and ``done`` lists the charges that took effect."""

    def __init__(self) -> None:
        self.started, self.finish = threading.Event(), threading.Event()
        self.done: list[int] = []

        @tool
        def charge(cents: int) -> str:
            """Charge (an effect)."""
            self.started.set()
            self.finish.wait(60)
            self.done.append(cents)
            return f"charged {cents}"

        self.tool = charge

    async def cancel_once_started(self, run: asyncio.Task[Any]) -> None:
        """Cancel ``run`` once a call began; it must end at once, a thread still waiting."""
        done = len(self.done)
        await asyncio.to_thread(self.started.wait, 30)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(run, 10)
        assert len(self.done) == done


async def test_a_cancelled_run_code_records_the_call_its_thread_finishes(tmp_path: Path) -> None:
    """run_code cancelled (a caller's timeout, a request the client left) while a sync
    handler runs: the cancellation is not held up by the thread, which nothing can stop, and
    what the thread did is recorded when it ends, before the lease is given up, so a resume
    finds the call done (the script goes on with its result) rather than "interrupted" (as
    if the charge may not have happened: a model would then charge again). Another host
    meanwhile finds the script still held. An async handler is still cancelled, and its
    call interrupted."""
    charges = _Charges()

    @tool
    async def refund(cents: int) -> str:
        """Refund (an effect)."""
        charges.started.set()
        await asyncio.sleep(3600)
        return "refunded"

    tools = [charges.tool, refund]
    engine = CodeMode(tools, runner=InProcessRunner(), data_dir=tmp_path, type_check="off")
    other = CodeMode(tools, runner=InProcessRunner(), data_dir=tmp_path, type_check="off")
    try:
        ids: list[str] = []
        code = "const r = await tools.charge({ cents: 5 }); return r + '!'"
        await charges.cancel_once_started(
            asyncio.create_task(engine.run_code(code, on_start=ids.append))
        )
        held = await other.resume(ids[0], wait=0)
        assert held.status == "elsewhere", held.text
        charges.finish.set()
        result = await asyncio.wait_for(engine.resume(ids[0]), 30)
        assert (result.status, result.value) == ("finished", "charged 5!"), result.text
        assert charges.done == [5]

        charges.started.clear()
        ids.clear()
        code = "return await tools.refund({ cents: 5 })"
        await charges.cancel_once_started(
            asyncio.create_task(engine.run_code(code, on_start=ids.append))
        )
        again = await asyncio.wait_for(engine.resume(ids[0]), 30)
        assert again.status == "failed" and "interrupted" in again.text, again.text
    finally:
        charges.finish.set()
        await engine.aclose()
        await other.aclose()


async def test_an_engine_closed_while_it_hears_out_a_cancelled_call_leaves_it_running(
    tmp_path: Path,
) -> None:
    """aclose() while a cancelled drive waits for a sync handler's thread: aclose does not
    wait for the thread (it may never end), the call stays running in the log, as after a
    crash, and the next engine tells the script it was interrupted."""
    charges = _Charges()
    first = CodeMode([charges.tool], runner=InProcessRunner(), data_dir=tmp_path, type_check="off")
    ids: list[str] = []
    try:
        code = "return await tools.charge({ cents: 5 })"
        await charges.cancel_once_started(
            asyncio.create_task(first.run_code(code, on_start=ids.append))
        )
        await asyncio.wait_for(first.aclose(), 10)
        second = CodeMode(
            [charges.tool], runner=InProcessRunner(), data_dir=tmp_path, type_check="off"
        )
        try:
            result = await second.resume(ids[0], wait=0)
        finally:
            await second.aclose()
    finally:
        charges.finish.set()
    assert result.status == "failed" and "interrupted" in result.text, result.text


async def test_a_replayed_start_waits_for_the_cancelled_one_to_record_its_call(
    tmp_path: Path,
) -> None:
    """A keyed run_code cancelled while its sync handler runs, then delivered again on the
    same host (a request the client left and sent again): the second waits for the first's
    call to be recorded and goes on with the script, the call run once; it does not call its
    own host "another host"."""
    charges = _Charges()
    engine = CodeMode([charges.tool], runner=InProcessRunner(), data_dir=tmp_path, type_check="off")
    code = "return await tools.charge({ cents: 5 })"
    try:
        await charges.cancel_once_started(asyncio.create_task(engine.run_code(code, key="toolu_1")))
        again = asyncio.create_task(engine.run_code(code, key="toolu_1"))
        await asyncio.sleep(0.2)
        assert not again.done()  # it waits for the call, not "elsewhere"
        charges.finish.set()
        result = await asyncio.wait_for(again, 30)
    finally:
        charges.finish.set()
        await engine.aclose()
    assert (result.status, result.value) == ("finished", "charged 5"), result.text
    assert charges.done == [5]


async def test_a_retry_waiting_on_a_start_keeps_it_going_when_that_start_is_cancelled(
    tmp_path: Path,
) -> None:
    """A keyed start delivered again while the first runs waits for it; the first's client
    then leaves (its run_code cancelled): the run goes on for the retry, which gets the
    call's result, the call run once (the cancel interrupted the async call, and the retry
    got "tools.charge was interrupted"). With no one waiting, a cancel still interrupts."""
    started, finish, ran = asyncio.Event(), asyncio.Event(), []

    @tool
    async def charge(cents: int) -> str:
        """Charge."""
        started.set()
        await finish.wait()
        ran.append(cents)
        return f"charged {cents}"

    engine = CodeMode([charge], runner=InProcessRunner(), data_dir=tmp_path, type_check="off")
    code = "return await tools.charge({ cents: 5 })"
    try:
        first = asyncio.create_task(engine.run_code(code, key="toolu_1"))
        await started.wait()
        again = asyncio.create_task(engine.run_code(code, key="toolu_1"))
        await asyncio.sleep(0.05)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        await asyncio.sleep(0.05)
        assert not again.done()
        finish.set()
        result = await asyncio.wait_for(again, 30)
        assert (result.status, result.value) == ("finished", "charged 5"), result.text
        assert ran == [5]

        # Alone, a cancelled start interrupts its call, as before.
        started.clear()
        finish.clear()
        alone = asyncio.create_task(engine.run_code(code, key="toolu_2"))
        await started.wait()
        alone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await alone
        finish.set()
        (record,) = [r for r in await engine.store.scripts() if r.key == "toolu_2"]
        later = await engine.resume(record.id)
        assert later.status == "failed" and "interrupted" in later.text, later.text
        assert ran == [5]
    finally:
        finish.set()
        await engine.aclose()


async def test_a_cancelled_call_whose_thread_had_not_begun_runs_on_resume(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Cancelled while one sync call runs in the only tool thread and another waits for it:
    the one that runs is recorded when it ends; the one that waited never begins (a cancel
    stops what has not started) and stays approved (it was to be claimed as its thread
    came), so the resume runs it, once, and the script finishes with both results."""
    charges = _Charges()
    engine = CodeMode(
        [charges.tool],
        runner=InProcessRunner(),
        data_dir=tmp_path,
        type_check="off",
        tool_threads=1,
    )
    ids: list[str] = []
    code = "return await Promise.all([tools.charge({ cents: 1 }), tools.charge({ cents: 2 })])"
    try:
        await charges.cancel_once_started(
            asyncio.create_task(engine.run_code(code, on_start=ids.append))
        )
        charges.finish.set()
        result = await asyncio.wait_for(engine.resume(ids[0]), 30)
    finally:
        charges.finish.set()
        await engine.aclose()
    assert (result.status, result.value) == ("finished", ["charged 1", "charged 2"]), result.text
    assert sorted(charges.done) == [1, 2]
    assert "not approved again" not in caplog.text  # the approved call was left as it was


class _DownStore(MemoryStore):
    """A memory log whose claims fail as a database down does while ``down`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.down = True
        self.claims_failed = 0

    async def claim_ready(self, *args: Any, **kwargs: Any) -> Lease | None:
        if self.down:
            self.claims_failed += 1
            raise StoreUnavailable("the session log did not answer (down for this test)")
        return await super().claim_ready(*args, **kwargs)


async def test_a_worker_says_once_that_it_cannot_reach_the_log_and_once_that_it_can(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A worker that looks for work every poll_interval while its log is down warns when
    the outage begins, not at each look (a line a second), and says when the log answers
    again."""
    store = _DownStore()
    worker = CodeMode([], runner=InProcessRunner(), store=store, poll_interval=0.01)
    stop = asyncio.Event()
    work = asyncio.create_task(worker.work(stop=stop))
    try:
        for _ in range(500):
            if store.claims_failed >= 20:
                break
            await asyncio.sleep(0.01)
        assert store.claims_failed >= 20
        store.down = False
        for _ in range(500):
            if any("reached the session log" in r.getMessage() for r in caplog.records):
                break
            await asyncio.sleep(0.01)
    finally:
        stop.set()
        await work
        await worker.aclose()
    said = [r.getMessage() for r in caplog.records if "session log" in r.getMessage()]
    assert said[0].startswith("worker could not reach the session log, trying again: ")
    assert re.fullmatch(r"worker reached the session log again after \d+ s", said[1]), said
    assert len(said) == 2, said


async def test_a_host_idle_after_its_sqlite_log_was_locked_gives_its_kept_lease_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holds the SQLite log's write lock past the busy timeout as a call's
    result is written: run_code fails with StoreUnavailable, and the host keeps the lease
    (the log did not answer). Once the lock is let go, the host gives the lease up though it
    does nothing more, and another host's resume drives the script on (it said "running on
    another host" for the whole lease)."""
    from engine import SqliteStore
    from engine.log import _sqlite

    monkeypatch.setattr(_sqlite, "OPEN_BUSY_MS", 300)  # the wait for a lock, made short
    data = tmp_path / "log"
    locks: list[sqlite3.Connection] = []

    @tool(idempotent=True)
    def bump(n: int) -> int:
        """Add 100; the first time, take the log's write lock as another process would."""
        if not locks:
            lock = sqlite3.connect(
                str(data / SqliteStore.FILE_NAME), isolation_level=None, check_same_thread=False
            )
            lock.execute("BEGIN IMMEDIATE")
            locks.append(lock)
        return n + 100

    # A lease far longer than the test: it is given up, never left to run out.
    def host() -> CodeMode:
        return CodeMode(
            [bump],
            runner=InProcessRunner(),
            store=SqliteStore(data),
            type_check="off",
            lease_ms=600_000,
        )

    engine, other = host(), host()
    try:
        try:
            with pytest.raises(StoreUnavailable, match="database is locked"):
                await engine.run_code("return await tools.bump({ n: 1 });")
        finally:
            for lock in locks:
                lock.execute("ROLLBACK")
                lock.close()
        (record,) = await other.store.scripts()
        for _ in range(1200):  # until the host gave the lease up (at most a minute)
            lease = (await other.store.get_script(record.id)).lease
            if lease is None or lease.expires_ms == 0:
                break
            await asyncio.sleep(0.05)
        assert lease is not None and lease.expires_ms == 0, lease  # given up, not run out
        result = await asyncio.wait_for(other.resume(record.id), 60)
        assert result.status == "finished", result.text
        assert result.value == 101
    finally:
        await other.aclose()
        await engine.aclose()


async def test_a_host_closed_while_its_sqlite_log_is_locked_leaves_no_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host that keeps a lease while another process holds the SQLite log's write lock,
    and is closed before the lock is let go, leaves no task trying to give the lease up
    (aclose ends it); the lease runs out in the log as a stopped host's does."""
    from engine import SqliteStore
    from engine.log import _sqlite

    monkeypatch.setattr(_sqlite, "OPEN_BUSY_MS", 300)  # the wait for a lock, made short
    data = tmp_path / "log"
    locks: list[sqlite3.Connection] = []

    @tool
    def bump(n: int) -> int:
        """Add 100, then take the log's write lock as another process would."""
        lock = sqlite3.connect(
            str(data / SqliteStore.FILE_NAME), isolation_level=None, check_same_thread=False
        )
        lock.execute("BEGIN IMMEDIATE")
        locks.append(lock)
        return n + 100

    def giving_back() -> list[asyncio.Task[Any]]:
        return [t for t in asyncio.all_tasks() if t.get_name() == "kept leases"]

    engine = CodeMode([bump], runner=InProcessRunner(), store=SqliteStore(data), type_check="off")
    try:
        with pytest.raises(StoreUnavailable, match="database is locked"):
            await engine.run_code("return await tools.bump({ n: 1 });")
        assert giving_back()  # the lease kept, to be given up
        await engine.aclose()
        assert giving_back() == []
    finally:
        for lock in locks:
            lock.execute("ROLLBACK")
            lock.close()
        await engine.aclose()
    store = SqliteStore(data)
    try:
        (record,) = await store.scripts()
        assert record.lease is not None and record.lease.expires_ms > 0  # kept, not freed
    finally:
        await store.aclose()
