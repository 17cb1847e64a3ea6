"""A run_code cancelled, or whose engine closed, between a call's receipt and its handler: the
call never ran, so the resume runs it (once), rather than telling the script it was
interrupted; and such a run_code says the engine closed, not that another host drives it."""

from __future__ import annotations

import asyncio
import gc
import types
from pathlib import Path
from typing import Any

import pytest

from engine import CodeMode, CodeModeError, Event, MemoryStore, StoreUnavailable, tool
from engine._drive import Drive
from engine._tool_threads import Ticket
from engine.log import Lease
from runner import Step
from tests.engine.conftest import InProcessRunner


def _ledger_tool(ran: list[int]) -> Any:
    @tool
    def charge(cents: int) -> str:
        """Charge (an effect: not read-only, not idempotent)."""
        ran.append(cents)
        return f"charged {cents}"

    return charge


async def _cancel_on(engine: CodeMode, code: str, when: Any, ids: list[str]) -> asyncio.Task[Any]:
    """Start ``code`` and cancel its run_code from the listener as ``when(event)`` first
    holds; the cancellation lands at the drive's next wait."""
    run: asyncio.Task[Any] | None = None

    def listen(event: Event) -> None:
        nonlocal run
        if run is not None and when(event):
            run.cancel()
            run = None

    engine.add_listener(listen)
    run = task = asyncio.create_task(engine.run_code(code, on_start=ids.append))
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 30)
    return task


@pytest.mark.parametrize(
    ("code", "cancel_at", "value", "cents"),
    [
        # The cancel lands while the call's receipt is made durable (written, then synced),
        # so the drive never learnt it had claimed the call.
        ("return await tools.charge({ cents: 5 })", "step", "charged 5", [5]),
        # Two calls made together were claimed, before either handler began (the tasks that
        # run them had not started).
        (
            "return await Promise.all([tools.charge({ cents: 1 }), tools.charge({ cents: 2 })])",
            "call.approved",
            ["charged 1", "charged 2"],
            [1, 2],
        ),
    ],
    ids=["as-the-receipt-is-written", "before-parallel-calls-begin"],
)
async def test_a_cancel_before_a_claimed_call_begins_leaves_it_to_run(
    tmp_path: Path, code: str, cancel_at: str, value: Any, cents: list[int]
) -> None:
    """Cancelled after the log had calls claimed (running) but before any handler began:
    they stayed running in the log, and the resume told the script "tools.charge was
    interrupted" though they never ran. They run on resume, each once."""
    ran: list[int] = []
    engine = CodeMode(
        [_ledger_tool(ran)], runner=InProcessRunner(), data_dir=tmp_path, type_check="off"
    )
    ids: list[str] = []
    try:
        await _cancel_on(engine, code, lambda e: e.kind == cancel_at, ids)
        assert ran == []
        result = await asyncio.wait_for(engine.resume(ids[0]), 30)
    finally:
        await engine.aclose()
    assert (result.status, result.value) == ("finished", value), result.text
    assert sorted(ran) == cents


class _Releases(MemoryStore):
    """A memory log that says when a lease is given up."""

    def __init__(self) -> None:
        super().__init__()
        self.released = asyncio.Event()

    async def release(self, lease: Lease) -> None:
        await super().release(lease)
        self.released.set()


class _StepsPastTheRelease(InProcessRunner):
    """A step that ends only once the log saw its lease given up, and a runner whose close
    waits for ``drive`` (the run_code) to end: the order in which aclose met a step that
    ended as it gave the script's lease up."""

    def __init__(self, store: _Releases) -> None:
        super().__init__()
        self.store = store
        self.entered = asyncio.Event()
        self.drive: asyncio.Task[Any] | None = None

    async def run(self, *args: Any, **kwargs: Any) -> Step:
        self.entered.set()
        await self.store.released.wait()
        return await super().run(*args, **kwargs)

    async def aclose(self) -> None:
        if self.drive is not None:
            await asyncio.wait([self.drive])


async def test_a_run_code_the_engine_closes_under_raises_rather_than_say_elsewhere() -> None:
    """aclose() gives the lease up under a drive whose step then ends: the drive's next write
    is refused (the lease is gone), which a drive reads as another host having taken the
    script over, and run_code answered "Script is running on another host (<this host>)",
    a script nobody ran. It raises CodeModeError saying the engine closed (as every other
    run_code aclose ends does), and the script waits in the log."""
    ran: list[int] = []
    store = _Releases()
    runner = _StepsPastTheRelease(store)
    engine = CodeMode([_ledger_tool(ran)], runner=runner, store=store, type_check="off")
    ids: list[str] = []
    run = asyncio.create_task(
        engine.run_code("return await tools.charge({ cents: 5 })", on_start=ids.append)
    )
    runner.drive = run
    await asyncio.wait_for(runner.entered.wait(), 30)
    await asyncio.wait_for(engine.aclose(), 30)
    with pytest.raises(CodeModeError, match="engine closed"):
        await run
    assert ran == []
    again = CodeMode([_ledger_tool(ran)], runner=InProcessRunner(), store=store, type_check="off")
    try:
        result = await asyncio.wait_for(again.resume(ids[0]), 30)
    finally:
        await again.aclose()
    assert (result.status, result.value) == ("finished", "charged 5"), result.text
    assert ran == [5]


class _CancelsAsItSettles(MemoryStore):
    """A memory log that cancels ``run`` as a call's outcome is being written, before the
    write ends: a caller's timeout landing on the write."""

    def __init__(self) -> None:
        super().__init__()
        self.run: asyncio.Task[Any] | None = None

    async def settle(self, *args: Any, **kwargs: Any) -> bool:
        if self.run is not None:
            self.run.cancel()
            self.run = None
            await asyncio.sleep(0)  # the cancel lands on the drive's wait for this write
        return await super().settle(*args, **kwargs)


async def test_a_cancel_that_lands_while_a_calls_outcome_is_written_still_records_it() -> None:
    """The call ran and returned; run_code was cancelled while its outcome was being written.
    The write was dropped (put back for a next commit that never came), the call stayed
    running in the log, and the resume said "tools.charge was interrupted" of a charge made.
    The write goes on, before the lease is given up: the resume goes on with its result."""
    ran: list[int] = []
    store = _CancelsAsItSettles()
    engine = CodeMode([_ledger_tool(ran)], runner=InProcessRunner(), store=store, type_check="off")
    ids: list[str] = []
    try:
        run = asyncio.create_task(
            engine.run_code("return await tools.charge({ cents: 5 })", on_start=ids.append)
        )
        store.run = run
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(run, 30)
        assert ran == [5]
        result = await asyncio.wait_for(engine.resume(ids[0]), 30)
    finally:
        await engine.aclose()
    assert (result.status, result.value) == ("finished", "charged 5"), result.text
    assert ran == [5]


async def test_a_cancel_before_an_async_handler_begins_leaves_the_call_to_run(
    tmp_path: Path,
) -> None:
    """Cancelled as an async tool's call goes to its handler, before the handler's task took
    its first step: the handler never ran (the cancel stopped the task first), yet the call
    stayed running in the log and the resume said it was interrupted. It runs on resume."""
    ran: list[int] = []

    @tool
    async def charge(cents: int) -> str:
        """Charge (an effect)."""
        ran.append(cents)
        return f"charged {cents}"

    engine = CodeMode([charge], runner=InProcessRunner(), data_dir=tmp_path, type_check="off")
    ids: list[str] = []
    try:
        code = "return await tools.charge({ cents: 5 })"
        await _cancel_on(engine, code, lambda e: e.kind == "call.running", ids)
        assert ran == []
        result = await asyncio.wait_for(engine.resume(ids[0]), 30)
    finally:
        await engine.aclose()
    assert (result.status, result.value) == ("finished", "charged 5"), result.text
    assert ran == [5]


class _CancelsAsCallsAreWritten(MemoryStore):
    """A memory log that cancels ``run`` as a step's new calls (with their receipts) are
    about to be written: the write never happens."""

    def __init__(self) -> None:
        super().__init__()
        self.run: asyncio.Task[Any] | None = None

    async def add_calls(self, *args: Any, **kwargs: Any) -> list[int]:
        if self.run is not None and kwargs.get("claim"):
            self.run.cancel()
            self.run = None
            await asyncio.sleep(0)  # the cancel lands here, before anything is written
        return await super().add_calls(*args, **kwargs)


async def test_a_cancel_before_a_steps_calls_are_written_approves_nothing_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Cancelled before the calls a step asked for were written with their receipts: none is
    in the log, so none is to be approved again (looking them up failed, with an IndexError
    in the host's log, and the calls beside them in the log were left running). The resume
    runs the step again and the call once."""
    ran: list[int] = []
    store = _CancelsAsCallsAreWritten()
    engine = CodeMode([_ledger_tool(ran)], runner=InProcessRunner(), store=store, type_check="off")
    ids: list[str] = []
    try:
        run = asyncio.create_task(
            engine.run_code("return await tools.charge({ cents: 5 })", on_start=ids.append)
        )
        store.run = run
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(run, 30)
        result = await asyncio.wait_for(engine.resume(ids[0]), 30)
    finally:
        await engine.aclose()
    assert (result.status, result.value) == ("finished", "charged 5"), result.text
    assert ran == [5]
    assert "not approved again" not in caplog.text


class _HeldSettle(_Releases):
    """A memory log whose writes of outcomes wait for ``go``; ``settling``: one began."""

    def __init__(self) -> None:
        super().__init__()
        self.settling = asyncio.Event()
        self.go = asyncio.Event()

    async def settle(self, *args: Any, **kwargs: Any) -> bool:
        self.settling.set()
        await self.go.wait()
        return await super().settle(*args, **kwargs)


async def _cancelled_again_as_it_settles(
    store: _HeldSettle, ran: list[int], **options: Any
) -> tuple[CodeMode, str, Drive]:
    """An engine on ``store`` whose run_code of one charge was cancelled as the charge's
    outcome was written (held by the store), and again at every await until it ended (as
    anyio cancels): the engine, the script's id and its drive (whose close goes on once the
    store lets the write end). The caller lets it (``store.go``) and closes the engine."""
    engine = CodeMode(
        [_ledger_tool(ran)], runner=InProcessRunner(), store=store, type_check="off", **options
    )
    ids: list[str] = []
    try:
        run = asyncio.create_task(
            engine.run_code("return await tools.charge({ cents: 5 })", on_start=ids.append)
        )
        await asyncio.wait_for(store.settling.wait(), 30)
        [drive] = engine._driving
        while not run.done():
            run.cancel()
            await asyncio.sleep(0.01)
        with pytest.raises(asyncio.CancelledError):
            await run
    except BaseException:
        store.go.set()
        await engine.aclose()
        raise
    return engine, ids[0], drive


async def test_a_cancel_while_the_drive_waits_for_its_outcomes_to_be_written_gives_the_lease_up() -> (
    None
):
    """Cancelled as a call's outcome was written, and cancelled again (anyio cancels at every
    await) while the drive's close waited for that write: the close ended there, before it
    stopped the renewals, and the lease was renewed for as long as the engine ran, so no
    other host could take the script. The close goes on once the write ends."""
    ran: list[int] = []
    store = _HeldSettle()
    engine, script_id, _ = await _cancelled_again_as_it_settles(store, ran, lease_ms=600)
    try:
        assert not store.released.is_set()  # the outcome is written under the lease first
        store.go.set()
        await asyncio.wait_for(store.released.wait(), 10)
        record = await store.get_script(script_id)
        assert record is not None and record.lease is not None
        assert record.lease.expires_ms == 0
        result = await asyncio.wait_for(engine.resume(script_id), 30)
    finally:
        store.go.set()
        await engine.aclose()
    assert (result.status, result.value) == ("finished", "charged 5"), result.text
    assert ran == [5]


async def test_a_resume_on_the_host_whose_close_goes_on_waits_for_it() -> None:
    """Cancelled twice as above, then resumed on the same host while the close still waited
    for the outcome's write (the lease held and renewed meanwhile): the drive had been let
    go of already, and the resume answered "Script is running on another host", naming this
    one. It waits for the close, then finishes the script."""
    ran: list[int] = []
    store = _HeldSettle()
    engine, script_id, _ = await _cancelled_again_as_it_settles(store, ran)
    try:
        again = asyncio.create_task(engine.resume(script_id))
        for _ in range(20):  # turns of the loop for the resume to answer, if it would
            await asyncio.sleep(0)
        assert not again.done(), again.result().text
        store.go.set()
        result = await asyncio.wait_for(again, 30)
    finally:
        store.go.set()
        await engine.aclose()
    assert (result.status, result.value) == ("finished", "charged 5"), result.text
    assert ran == [5]


async def _cancelled_with_an_outcome_pending(
    store: MemoryStore, ran: list[int]
) -> tuple[CodeMode, str]:
    """An engine on ``store`` whose run_code (a charge beside a call that never ends) was
    cancelled exactly as the charge's outcome waited in the drive's pending settlements, and
    the script's id. The caller closes the engine."""
    loop = asyncio.get_running_loop()
    run: asyncio.Task[Any] | None = None

    def cancel_once_pending() -> None:
        # The outcome waits in the drive's pending settlements for the next commit: the
        # cancel lands on the turns of the loop it gives the other calls' endings. Asked at
        # each turn, however many a loaded machine takes, until run_code ends (the caller's
        # wait_for bounds it).
        if run is not None and any(drive._pending for drive in engine._driving):
            run.cancel()
        elif run is None or not run.done():
            loop.call_soon(cancel_once_pending)

    @tool
    def charge(cents: int) -> str:
        """Charge (an effect)."""
        ran.append(cents)
        loop.call_soon_threadsafe(cancel_once_pending)
        return f"charged {cents}"

    @tool
    async def wait() -> None:
        """Wait for ever."""
        await asyncio.Event().wait()

    engine = CodeMode([charge, wait], runner=InProcessRunner(), store=store, type_check="off")
    ids: list[str] = []
    run = asyncio.create_task(
        engine.run_code(
            "return await Promise.all([tools.charge({ cents: 5 }), tools.wait()])",
            on_start=ids.append,
        )
    )
    try:
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(run, 30)
    except BaseException:
        await engine.aclose()
        raise
    return engine, ids[0]


async def test_a_cancel_as_a_parallel_calls_outcome_goes_to_the_log_still_records_it() -> None:
    """A call ended while another ran, and run_code was cancelled as its outcome waited the
    two turns of the loop that gather the endings of other calls into one commit: the
    outcome was left unwritten, and the resume said "tools.charge was interrupted" of a
    charge made. It is written all the same."""
    ran: list[int] = []
    store = MemoryStore()
    engine, script_id = await _cancelled_with_an_outcome_pending(store, ran)
    try:
        result = await asyncio.wait_for(engine.resume(script_id), 30)
        calls = await store.calls(script_id)
    finally:
        await engine.aclose()
    assert ran == [5]
    assert calls[0].state == "done", result.text
    assert calls[1].state == "failed"  # tools.wait was cancelled as it ran: interrupted


class _FailsFirstSettle(MemoryStore):
    """A memory log whose first write of outcomes fails (the disk full); ``settled``: the
    calls each write was of."""

    def __init__(self) -> None:
        super().__init__()
        self.settled: list[list[int]] = []
        self.failed = False

    async def settle(self, lease: Lease, settlements: Any) -> bool:
        self.settled.append([s.index for s in settlements])
        if not self.failed:
            self.failed = True
            await asyncio.sleep(0.01)  # the other call's ending waits for this commit
            raise StoreUnavailable("the log did not take the write: disk full")
        return await super().settle(lease, settlements)


async def test_a_failed_write_of_parallel_outcomes_is_told_to_every_call_of_it() -> None:
    """Two calls ended together and their outcomes' write failed: it was raised to the call
    that wrote them, and the other, never told, wrote an empty batch and waited for ever (a
    task left behind for as long as the engine ran). Each is told of the failure."""

    @tool
    async def fetch(n: int) -> int:
        """Fetch."""
        return n

    store = _FailsFirstSettle()
    engine = CodeMode([fetch], runner=InProcessRunner(), store=store, type_check="off")
    try:
        run = engine.run_code(
            "return await Promise.all([tools.fetch({ n: 1 }), tools.fetch({ n: 2 })])"
        )
        with pytest.raises(StoreUnavailable, match="disk full"):
            await asyncio.wait_for(run, 30)
    finally:
        await engine.aclose()
    assert [] not in store.settled, store.settled


async def test_a_failed_write_of_a_cancelled_drives_outcome_is_logged_as_such(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """run_code was cancelled with a call's outcome pending (another call ran beside it), and
    the write the drive then made of it failed: the failure was raised in a task nobody
    awaited (asyncio's "Task exception was never retrieved", when at all), not the engine's
    warning that a cancelled drive's outcomes were not recorded."""
    store = _FailsFirstSettle()
    engine, _ = await _cancelled_with_an_outcome_pending(store, [])
    await engine.aclose()
    assert store.settled[:1] == [[0]]
    assert "call outcomes of a cancelled drive were not recorded" in caplog.text


async def test_a_drive_keeps_no_ticket_of_a_sync_call_that_ended() -> None:
    """Each sync call's place in the tool threads (its Ticket) was kept by its drive until
    the drive ended, for every call a long script made: only those of calls still running
    are."""
    seen: list[int] = []
    script_ids: list[str] = []

    @tool
    def count(n: int) -> int:
        """Count the tickets of this script's calls still held."""
        gc.collect()
        held = [o for o in gc.get_objects() if isinstance(o, Ticket) and o.script in script_ids]
        seen.append(len(held))
        return n

    engine = CodeMode([count], runner=InProcessRunner(), type_check="off")
    try:
        code = "let s = 0; for (let n = 0; n < 5; n++) s += await tools.count({ n }); return s"
        result = await asyncio.wait_for(engine.run_code(code, on_start=script_ids.append), 30)
    finally:
        await engine.aclose()
    assert (result.status, result.value) == ("finished", 10), result.text
    assert seen == [1] * 5  # the running call's alone


async def test_a_drive_whose_close_went_on_past_its_cancel_is_let_go_of() -> None:
    """A drive cancelled again while its close waited for its outcomes' write (its close goes
    on once the write ends) stayed among the engine's drives under way for as long as the
    engine ran, its calls and results with it. It is let go of once its close ends."""
    store = _HeldSettle()
    engine, _, drive = await _cancelled_again_as_it_settles(store, [])
    try:
        assert drive.closing is not None  # the close goes on past the cancel
        store.go.set()
        await asyncio.wait_for(asyncio.shield(drive.closing), 10)
        assert store.released.is_set()
        assert drive not in engine._driving
    finally:
        store.go.set()
        await engine.aclose()


@pytest.mark.parametrize("cancelled", ["other", "both"])
async def test_a_failed_write_whose_cancelled_waiter_is_not_its_writer_is_logged(
    caplog: pytest.LogCaptureFixture, cancelled: str
) -> None:
    """Two outcomes in one batch, written by the waiter that was not cancelled, the other's
    waiter cancelled meanwhile, and the write failed: the cancelled waiter's future held the
    error, read by nobody (asyncio's "Future exception was never retrieved"), and the
    engine's warning was not logged. The writer is told; the cancelled one's is logged. Both
    waiters cancelled: logged once for the write, not once for each of them."""

    class _Failing:
        def __init__(self) -> None:
            self.go = asyncio.Event()
            self.writes: list[list[int]] = []

        async def settle(self, lease: Any, settlements: list[Any]) -> bool:
            self.writes.append([s.index for s in settlements])
            await self.go.wait()
            raise StoreUnavailable("disk full")

    unretrieved: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: unretrieved.append(context))
    try:
        # A drive's group commit alone (its store is the part under test's other side).
        drive = Drive.__new__(Drive)
        drive._pending, drive._running = [], {0, 1, 2}
        drive._committing, drive._writes, drive._unheard = asyncio.Lock(), set(), None
        drive.store, drive.lease = _Failing(), None  # type: ignore[assignment]
        drive.record = types.SimpleNamespace(id="s1", held=False)  # type: ignore[assignment]
        first = asyncio.create_task(drive.settle(types.SimpleNamespace(index=0)))  # type: ignore[arg-type]
        while not drive.store.writes:  # type: ignore[attr-defined]
            await asyncio.sleep(0)
        writer = asyncio.create_task(drive.settle(types.SimpleNamespace(index=1)))  # type: ignore[arg-type]
        other = asyncio.create_task(drive.settle(types.SimpleNamespace(index=2)))  # type: ignore[arg-type]
        for _ in range(5):  # both pending, behind the first write
            await asyncio.sleep(0)
        drive.store.go.set()  # type: ignore[attr-defined]
        with pytest.raises(StoreUnavailable):
            await first
        while len(drive.store.writes) < 2:  # type: ignore[attr-defined]
            await asyncio.sleep(0)
        assert drive.store.writes == [[0], [1, 2]]  # type: ignore[attr-defined]
        other.cancel()
        if cancelled == "both":
            writer.cancel()
        results = await asyncio.gather(writer, other, return_exceptions=True)
        writers = "CancelledError" if cancelled == "both" else "StoreUnavailable"
        assert [type(r).__name__ for r in results] == [writers, "CancelledError"]
        while drive._writes:  # the cancelled writer's write goes on, and fails
            await asyncio.sleep(0)
        del first, writer, other, results
        for _ in range(3):
            await asyncio.sleep(0)
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert unretrieved == [], unretrieved
    assert caplog.text.count("call outcomes of a cancelled drive were not recorded script=s1") == 1
