"""Sync tool handlers run in the engine's own threads, bounded and fair between tenants and
scripts: one script's slow calls cannot time out another's fast ones, and a call that timed
out while its thread runs on says it may still take effect and stops taking others' room."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from engine import CodeMode, CodeModeError, ConfigError, tool
from engine._drive import MAX_CHUNK
from engine._tool_threads import Ticket, ToolThreads, shared_threads
from engine.log import MemoryStore
from runner import FileReader, ScriptRunner, Step
from sandbox.protocol import Script
from sandbox.runtime import run_in_process

# Bounds every wait on the test's events, so a failing run ends instead of hanging.
BOUND = 60


class OwnThreadRunner(ScriptRunner):
    """Runs each step in this process on a thread of its own, never on asyncio's default
    executor, so what the tools do there cannot stall the steps themselves."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(2, thread_name_prefix="test-runner")

    async def run(
        self,
        script: Script,
        files: FileReader | None = None,
        *,
        tenant: str = "default",
        live: bool = False,
    ) -> Step:
        loop = asyncio.get_running_loop()
        return Step.from_ran(await loop.run_in_executor(self.pool, run_in_process, script))

    async def aclose(self) -> None:
        self.pool.shutdown(wait=False)


async def until(condition: Callable[[], bool], what: str) -> None:
    """Yield to the event loop until ``condition()`` holds (bounded, so a bug cannot hang)."""
    for _ in range(BOUND * 500):
        if condition():
            return
        await asyncio.sleep(0.002)
    raise AssertionError(f"gave up waiting for {what}")


async def test_one_scripts_slow_sync_calls_do_not_time_out_anothers_fast_tool() -> None:
    """Script A has 40 slow sync calls in flight; a fast sync tool called by another script
    of the same tenant, and by another tenant, still runs at once instead of queueing behind
    A's calls until its timeout."""
    loop = asyncio.get_running_loop()
    release = threading.Event()
    slow_started = asyncio.Event()

    @tool
    def slow(i: int) -> int:
        """Wait for the test."""
        loop.call_soon_threadsafe(slow_started.set)
        release.wait(BOUND)
        return i

    @tool(timeout=BOUND / 4)
    def fast() -> str:
        """Answer at once."""
        return "fast"

    engine = CodeMode([slow, fast], runner=OwnThreadRunner())
    many = "Array.from({ length: 40 }, (_, i) => tools.slow({ i }))"
    hog = asyncio.create_task(
        engine.run_code(f"return (await Promise.all({many})).length", tenant="a")
    )
    try:
        await slow_started.wait()
        same_tenant = await engine.run_code("return await tools.fast()", tenant="a")
        other_tenant = await engine.run_code("return await tools.fast()", tenant="b")
    finally:
        release.set()
    assert same_tenant.value == "fast", same_tenant.text
    assert other_tenant.value == "fast", other_tenant.text
    assert (await hog).value == 40
    await engine.aclose()


async def test_a_call_timed_out_while_the_log_confirms_its_lease_says_so() -> None:
    """A call granted a thread that then waits for its drive to confirm the lease (its
    ``begin``: a renewal, the log slow) and passes its timeout there never ran: it was told
    no tool thread came free and the host was busy, which sent its operator to the threads.
    The thread is given back."""
    from engine._tool_threads import timed_out

    threads = ToolThreads(1)
    ticket = Ticket("t", "s")
    confirming: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    ticket.begin = lambda: confirming
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await threads.call(ticket, lambda: "ran", {})
    said = timed_out("pay", 0.05, ticket, threads)
    assert ticket.state == "waiting" and said.startswith("tools.pay did not run: "), said
    assert "the host's log did not confirm" in said and "busy" not in said, said
    other = Ticket("t", "s2")
    async with asyncio.timeout(BOUND):
        assert await threads.call(other, lambda: "ran", {}) == "ran"


async def test_a_timed_out_sync_call_says_it_may_take_effect_and_frees_room() -> None:
    """A sync call past its timeout runs on in its thread: the script is told it may or may
    not take effect (as for an interrupted call). Its thread still counts against its own
    script, whose next call does not run, but no longer against others: with one tool
    thread, another tenant's call runs."""
    release = threading.Event()

    @tool(timeout=0.2)
    def stuck() -> str:
        """Hang until the test ends."""
        release.wait(BOUND)
        return "late"

    @tool(timeout=BOUND / 4)
    def fast() -> str:
        """Answer at once."""
        return "fast"

    engine = CodeMode([stuck, fast], runner=OwnThreadRunner(), tool_threads=1)
    code = """
    const out = [];
    for (const i of [1, 2]) {
      try { await tools.stuck() } catch (e) { out.push(e.message) }
    }
    return out
    """
    try:
        first, second = (await engine.run_code(code, tenant="a")).value
        other = await engine.run_code("return await tools.fast()", tenant="b")
    finally:
        release.set()
    assert first == (
        "tools.stuck timed out after 0.2 s while its handler ran; a handler cannot be "
        "stopped, so the call may or may not take effect; check before calling it again"
    )
    # Its own timed-out call holds the script's one thread: said so (it read "the host is
    # busy with other calls; it can be called again", and again it waited in vain).
    assert second == (
        "tools.stuck did not run: this script's 1 tool thread stayed taken by its earlier "
        "calls for 0.2 s (a call that timed out keeps its thread until its handler returns); "
        "call it again once they end"
    )
    assert other.value == "fast", other.text
    threads = engine._tool_threads
    await until(lambda: threads.stuck == 0, "the stuck thread to end")
    assert (threads.running, threads.by_tenant, threads.by_script) == (0, {}, {})
    await engine.aclose()


async def _states_once(
    engine: CodeMode, code: str, holding: asyncio.Event
) -> tuple[asyncio.Task[Any], str, list[str]]:
    """``code`` started on ``engine`` (its only script), and once ``holding`` is set (its
    first calls hold their threads): its task, its id, and its calls' states in the log."""
    running = asyncio.create_task(engine.run_code(code))
    async with asyncio.timeout(BOUND):
        await holding.wait()
    (record,) = await engine.store.scripts()
    return running, record.id, [c.state for c in await engine.store.calls(record.id)]


async def test_calls_that_wait_for_a_thread_are_claimed_as_their_turn_comes() -> None:
    """With eight tool threads (two a script), a script's ten parallel sync calls: the two
    that take the script's threads are claimed with their step, and the eight that wait for
    them stay approved in the log while they wait, so a host that died then would leave them
    to run on resume rather than tell the script they were interrupted though they never
    ran. A hold that lands while they wait keeps them from beginning; released, each runs
    once."""
    loop = asyncio.get_running_loop()
    both_run = asyncio.Event()
    release = threading.Event()
    ran: list[int] = []

    @tool
    def job(i: int) -> int:
        """The first two wait for the test."""
        if i < 2:
            ran.append(i)
            if len(ran) == 2:
                loop.call_soon_threadsafe(both_run.set)
            release.wait(BOUND)
            return i * 10
        ran.append(i)
        return i * 10

    engine = CodeMode([job], runner=OwnThreadRunner(), tool_threads=8)
    code = "return await Promise.all(Array.from({ length: 10 }, (_, i) => tools.job({ i })))"
    try:
        running, script_id, states = await _states_once(engine, code, both_run)
        assert states == ["running"] * 2 + ["approved"] * 8
        await engine.hold(script_id)
    finally:
        release.set()
    held = await running
    assert held.status == "paused" and sorted(ran) == [0, 1], held.text
    states = [c.state for c in await engine.store.calls(script_id)]
    assert states == ["done"] * 2 + ["approved"] * 8
    await engine.release(script_id)
    done = await engine.resume(script_id)
    assert done.value == [i * 10 for i in range(10)], done.text
    assert sorted(ran) == list(range(10))
    await engine.aclose()


class _SlowClaims(MemoryStore):
    """A memory log whose receipts take ``delay`` seconds (a log over a network), with
    ``lone``, only those of one call; their sizes."""

    def __init__(self, delay: float, *, lone: bool = False) -> None:
        super().__init__()
        self.delay = delay
        self.lone = lone
        self.sizes: list[int] = []

    async def claim(self, lease: Any, indexes: Sequence[int], *, lasting: bool = True) -> Any:
        self.sizes.append(len(indexes))
        if not self.lone or len(indexes) == 1:
            await asyncio.sleep(self.delay)
        return await super().claim(lease, indexes, lasting=lasting)


async def test_many_fast_calls_that_wait_for_threads_each_run_once() -> None:
    """Two hundred parallel calls of a fast sync tool with one thread for the script, on a
    log whose receipts take a while: each waits its turn, claimed in chunks that grow (up
    to MAX_CHUNK) while the tool ends faster than a receipt is written, and each runs once,
    its result in its place; of fifty, the half whose arguments are wrong fail as they
    come, beside the chunks, and the rest run once."""
    ran: list[int] = []

    @tool
    def job(i: int) -> int:
        """Answer at once."""
        ran.append(i)
        return i

    store = _SlowClaims(0.02)
    engine = CodeMode(
        [job], runner=OwnThreadRunner(), store=store, tool_threads=4, type_check="off"
    )
    code = "return await Promise.all(Array.from({ length: 200 }, (_, i) => tools.job({ i })))"
    result = await engine.run_code(code)
    assert result.value == list(range(200)), result.text
    assert sorted(ran) == list(range(200))
    assert 1 < max(store.sizes) <= MAX_CHUNK and len(store.sizes) < 50, store.sizes
    # Calls that fail before their thread comes (their arguments) are settled all the same.
    code = """
    const all = await Promise.allSettled(
      Array.from({ length: 50 }, (_, i) => tools.job({ i: i % 2 ? String(i) : i }))
    );
    return all.filter((r) => r.status === "rejected").length
    """
    ran.clear()
    assert (await engine.run_code(code)).value == 25
    assert sorted(ran) == list(range(0, 50, 2))
    for record in await engine.store.scripts():
        states = {c.state for c in await engine.store.calls(record.id)}
        assert states <= {"done", "failed"} and record.status == "finished", states
    await engine.aclose()


async def test_a_call_behind_a_repeatable_sync_call_waits_unclaimed() -> None:
    """An idempotent sync call takes the script's one thread like any other: a call with
    effects behind it waits unclaimed, not claimed and then waiting (which a crash would
    make "interrupted" though it never began)."""
    loop = asyncio.get_running_loop()
    started = asyncio.Event()
    release = threading.Event()

    @tool(idempotent=True)
    def look() -> int:
        """Holds the script's one thread until the test lets it go."""
        loop.call_soon_threadsafe(started.set)
        release.wait(BOUND)
        return 1

    @tool
    def pay() -> int:
        """An effect."""
        return 2

    engine = CodeMode([look, pay], runner=OwnThreadRunner(), tool_threads=4)
    code = "return await Promise.all([tools.look(), tools.pay()])"
    try:
        running, _, states = await _states_once(engine, code, started)
        assert states == ["running", "approved"]
    finally:
        release.set()
    assert (await running).value == [1, 2]
    await engine.aclose()


async def test_a_waiting_call_that_fails_while_a_chunk_is_claimed_is_settled_once() -> None:
    """A call waiting for a thread whose arguments are wrong is claimed alone to record its
    failure; a chunk of receipts claimed meanwhile, as a thread comes, leaves it out (taken,
    it left the call running in the log, unsettled, and the script read it as interrupted)."""

    @tool
    def job(i: int) -> int:
        """Answer at once."""
        return i * 10

    engine = CodeMode(
        [job],
        runner=OwnThreadRunner(),
        store=_SlowClaims(0.05, lone=True),
        tool_threads=8,
        type_check="off",
    )
    code = """
    const all = await Promise.allSettled([0, 1, 2, "3", 4].map((i) => tools.job({ i })));
    return all.map((r) => (r.status === "fulfilled" ? r.value : r.reason.message));
    """
    result = await engine.run_code(code)
    value = result.value
    assert value[:3] + value[4:] == [0, 10, 20, 40], result.text
    assert value[3].startswith("tools.job: invalid arguments: at i: expected integer"), value
    await engine.aclose()


@pytest.mark.parametrize("cancelled", [False, True], ids=["driven", "cancelled"])
async def test_calls_claimed_ahead_of_their_threads_are_approved_again_at_aclose(
    tmp_path: Path, cancelled: bool
) -> None:
    """aclose() while a sync call with effects runs on the script's one thread and the next
    call's receipt was written ahead of its thread: the call running is interrupted, as after
    a crash, but the one claimed ahead never began, and is approved again, to run on resume
    (it was left running in the log, and the next host told the script it was interrupted).
    So too when the run_code was cancelled first, and the host waited to hear the running
    call out."""
    loop = asyncio.get_running_loop()
    first_runs = asyncio.Event()
    release = threading.Event()
    ran: list[int] = []

    @tool
    def job(i: int) -> int:
        """An effect; the second call holds the script's thread until the test lets it go."""
        ran.append(i)
        if i == 1:
            loop.call_soon_threadsafe(first_runs.set)
            release.wait(BOUND)
        return i * 10

    code = """
    const all = await Promise.allSettled([0, 1, 2, 3].map((i) => tools.job({ i })));
    return all.map((r) => (r.status === "fulfilled" ? r.value : r.reason.message));
    """
    first = CodeMode([job], runner=OwnThreadRunner(), data_dir=tmp_path, tool_threads=4)
    try:
        running, script_id, _ = await _states_once(first, code, first_runs)
        # The third call's receipt is written as the second begins, ahead of its thread.
        for _ in range(BOUND * 500):
            states = await first.store.calls(script_id)
            if states[2].state == "running":
                break
            await asyncio.sleep(0.002)
        assert [c.state for c in states] == ["done", "running", "running", "approved"]
        if cancelled:
            running.cancel()
            with pytest.raises(asyncio.CancelledError):
                await running
        await first.aclose()
        if not cancelled:
            with pytest.raises(CodeModeError, match="the engine closed"):
                await running
    finally:
        release.set()
    second = CodeMode([job], runner=OwnThreadRunner(), data_dir=tmp_path, tool_threads=4)
    try:
        result = await second.resume(script_id, wait=0)
    finally:
        await second.aclose()
    value = result.value
    assert value[0] == 0 and value[2:] == [20, 30], result.text
    assert "interrupted" in value[1], value
    assert sorted(ran) == [0, 1, 2, 3]  # each once


class Gates:
    """Sync handlers that each wait for the test to let them end, by name."""

    def __init__(self) -> None:
        self.events: dict[str, threading.Event] = {}

    def handler(self, name: str) -> tuple[Callable[..., Any], dict[str, Any]]:
        event = self.events[name] = threading.Event()

        def wait() -> str:
            event.wait(BOUND)
            return name

        return wait, {}

    def open_all(self) -> None:
        for event in self.events.values():
            event.set()


async def test_a_free_thread_goes_to_the_tenant_then_the_script_holding_fewest() -> None:
    """Not first come, first served: with tenant a holding two of three threads, a call of
    tenant b that came last goes first; then, within tenant a, the script holding none."""
    threads = ToolThreads(3, per_script=3, per_tenant=3)
    gates = Gates()
    tickets: dict[str, Ticket] = {}
    tasks: dict[str, asyncio.Task[Any]] = {}

    def start(name: str, tenant: str, script: str) -> None:
        tickets[name] = Ticket(tenant, script)
        fn, kwargs = gates.handler(name)
        tasks[name] = asyncio.create_task(threads.call(tickets[name], fn, kwargs))

    try:
        for name in ["x", "y", "z"]:
            start(name, "a", "s1")
        await until(lambda: threads.running == 3, "three calls to run")
        start("a-s1", "a", "s1")
        start("a-s2", "a", "s2")
        start("b-s3", "b", "s3")
        await until(lambda: threads.waiting() == 3, "three calls to wait")
        gates.events["x"].set()
        await until(lambda: tickets["b-s3"].state == "running", "tenant b to be admitted")
        assert tickets["a-s1"].state == tickets["a-s2"].state == "waiting"
        gates.events["y"].set()
        await until(lambda: tickets["a-s2"].state == "running", "script s2 to be admitted")
        assert tickets["a-s1"].state == "waiting"
    finally:
        gates.open_all()
    assert sorted(await asyncio.gather(*tasks.values())) == sorted(tasks)
    threads.close()


async def test_one_script_holds_at_most_its_share_and_stuck_threads_are_bounded() -> None:
    """A script gets at most per_script threads however many calls it makes; past ``spare``
    stuck calls, a stuck call keeps its place in the pool, so threads stay bounded."""
    threads = ToolThreads(4, per_script=2, per_tenant=4, spare=1)
    gates = Gates()
    tickets = [Ticket("a", "s1") for _ in range(5)]
    tasks = []
    try:
        for i, ticket in enumerate(tickets):
            fn, kwargs = gates.handler(str(i))
            tasks.append(asyncio.create_task(threads.call(ticket, fn, kwargs)))
        await until(lambda: threads.running == 2, "the script's two threads to run")
        assert [t.state for t in tickets] == ["running"] * 2 + ["waiting"] * 3
        # Give up on both running calls (a timeout): one goes to the spare thread, the
        # other, with no spare left, keeps its place in the pool.
        for task in tasks[:2]:
            task.cancel()
        await asyncio.gather(*tasks[:2], return_exceptions=True)
        assert (threads.running, threads.stuck) == (1, 1)
        assert threads.by_script["s1"] == 2  # both still count against their script
        assert [t.state for t in tickets[2:]] == ["waiting"] * 3
        gates.events["0"].set()
        gates.events["1"].set()
        await until(lambda: tickets[3].state == "running", "the script's next calls to run")
        assert threads.stuck == 0 and threads.by_script["s1"] == 2
    finally:
        gates.open_all()
    assert await asyncio.gather(*tasks[2:]) == ["2", "3", "4"]
    assert (threads.running, threads.stuck, threads.waiting()) == (0, 0, 0)
    threads.close()


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1, not 0"):
        ToolThreads(0)
    # The engine's option is a ConfigError naming it, as each of its options is.
    with pytest.raises(ConfigError, match="tool_threads = 0 must be a whole number, 1 or more"):
        CodeMode([], tool_threads=0)


_HANGS = """
import asyncio, sys, threading
sys.path.insert(0, {root!r})
from engine import CodeMode, tool
from tests.engine.conftest import InProcessRunner

@tool
def hang() -> int:
    \"\"\"Never returns.\"\"\"
    threading.Event().wait()
    return 1

async def main():
    engine = CodeMode([hang], runner=InProcessRunner(), call_timeout=0.2)
    result = await engine.run_code("try {{ await tools.hang(); }} catch (e) {{ return e.message; }}")
    print(result.value, flush=True)
    await engine.aclose()

asyncio.run(main())
"""


async def test_a_host_exits_after_aclose_though_a_sync_tool_never_returns() -> None:
    """A sync handler given up on at its timeout runs on in its thread, which must not hold
    the host's process at its exit once the engine is closed: the standard executor's
    threads are joined there, so a handler that never returns kept the process for ever."""
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _HANGS.format(root=root),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), 60)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError("the host did not exit after aclose()") from None
    assert process.returncode == 0, err.decode()
    assert "timed out" in out.decode(), out.decode()


_REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="none")


async def test_a_sync_call_sees_its_callers_context_and_raises_what_its_handler_did() -> None:
    """A sync handler runs in a copy of its caller's context, as under ``asyncio.to_thread``
    (a host's request id, a tracing span), and what it raises, or returns after its caller
    gave up, reaches the right place: the caller, or nobody."""
    threads = ToolThreads(2)

    def seen() -> str:
        return _REQUEST.get()

    def fails() -> None:
        raise LookupError("no such row")

    def stops() -> None:
        raise StopIteration  # which an asyncio future cannot carry

    async def as_request(name: str) -> str:
        _REQUEST.set(name)
        return await threads.call(Ticket("t", name), seen, {})

    assert await asyncio.gather(as_request("a"), as_request("b")) == ["a", "b"]
    with pytest.raises(LookupError, match="no such row"):
        await threads.call(Ticket("t", "s"), fails, {})
    async with asyncio.timeout(BOUND):  # it waited for ever once
        with pytest.raises(RuntimeError, match="StopIteration"):
            await threads.call(Ticket("t", "s"), stops, {})
    # Given up on while it runs, its late result goes nowhere, and its room comes back.
    began, release = threading.Event(), threading.Event()
    ticket = Ticket("t", "s")

    def hold() -> None:
        began.set()
        release.wait(BOUND)

    late = asyncio.ensure_future(threads.call(ticket, hold, {}))
    assert await asyncio.to_thread(began.wait, BOUND)  # its thread began
    late.cancel()
    with pytest.raises(asyncio.CancelledError):
        await late
    assert ticket.state == "running" and threads.by_script["s"] == 1
    release.set()
    await until(lambda: ticket.state == "done", "the thread to end")
    assert threads.running == threads.stuck == 0 and not threads.by_script
    threads.close()


def test_a_call_whose_loop_was_closed_under_it_leaves_its_thread_working() -> None:
    """A loop closed by hand while a sync call runs (no asyncio.run to cancel it first):
    the thread that ends the call cannot answer it, and goes on waiting for work (it died,
    answering a future of the closed loop)."""
    threads = ToolThreads(1, spare=0)
    release = threading.Event()
    loop = asyncio.new_event_loop()
    ticket = Ticket("t", "s")
    call = loop.create_task(threads.call(ticket, release.wait, {"timeout": BOUND}))
    loop.run_until_complete(asyncio.sleep(0.05))
    assert ticket.state == "running" and not call.done()
    loop.close()
    executor = threads._executor
    assert executor is not None
    (thread,) = executor._threads
    release.set()
    for _ in range(BOUND * 100):  # until the thread is back waiting for work
        if executor._idle._value:
            break
        time.sleep(0.01)
    assert executor._idle._value == 1 and thread.is_alive()
    threads.close()


def test_a_thread_freed_after_its_requests_loop_ended_admits_the_next_requests_call() -> None:
    """One asyncio.run per request: a sync call that timed out runs on after its request's
    loop closed; when its thread ends, the call waiting for that thread in the next request
    is let in then (its release came from the thread, off any loop, and admitted the waiting
    call without waking its loop: it waited out its own timeout with a thread free)."""
    threads = ToolThreads(1, spare=0)
    release = threading.Event()

    async def second() -> str:
        asyncio.get_running_loop().call_later(0.1, release.set)
        return await asyncio.wait_for(threads.call(Ticket("t", "s2"), lambda: "ran", {}), BOUND)

    try:
        asyncio.run(leave_running(threads, release))
        assert threads.running == 1  # the first call's thread runs on
        assert asyncio.run(second()) == "ran"
        assert threads.running == 0 and not threads.by_script
    finally:
        release.set()
        threads.close()


def test_a_shared_pool_and_its_loop_go_once_the_loop_ended() -> None:
    """One asyncio.run per request, each with a call through the pool shared by tools
    invoked outside an engine: each ended loop and its pool are freed (a pool that held
    its loop strongly kept every request's loop alive, with its pool)."""
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def request() -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        assert await shared_threads().call(Ticket("t", "s"), lambda: 1, {}) == 1

    for _ in range(3):
        asyncio.run(request())
    for _ in range(BOUND * 100):  # a tool thread lets its last call go just after answering
        gc.collect()
        if all(r() is None for r in loops):
            break
        time.sleep(0.01)
    assert [r() for r in loops] == [None, None, None]


def test_a_thread_freed_while_the_next_loop_is_idle_is_released_all_the_same() -> None:
    """A call left running by a request whose loop closed ends while the next request's
    loop, run by hand, is not running, and that loop is then closed: the thread is released
    (handed to a loop that never ran again, it stayed counted as taken for good)."""
    threads = ToolThreads(1, spare=0)
    release = threading.Event()

    async def waits() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(threads.call(Ticket("t", "s2"), lambda: 1, {}), 0.05)

    try:
        asyncio.run(leave_running(threads, release))
        idle = asyncio.new_event_loop()
        idle.run_until_complete(waits())
        release.set()
        for _ in range(BOUND * 100):
            if threads.running == 0:
                break
            time.sleep(0.01)
        idle.close()
        assert threads.running == 0 and not threads.by_script
    finally:
        release.set()
        threads.close()


async def leave_running(threads: ToolThreads, release: threading.Event) -> None:
    """Leave a call of ``threads`` running in its thread until ``release`` is set, given up
    on by its caller (its timeout) once its thread began, as a request's loop ends."""
    began = threading.Event()

    def hold() -> None:
        began.set()
        release.wait(BOUND)

    call = asyncio.ensure_future(threads.call(Ticket("t", "s1"), hold, {}))
    assert await asyncio.to_thread(began.wait, BOUND)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
