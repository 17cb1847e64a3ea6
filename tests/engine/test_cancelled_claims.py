"""A run_code cancelled between a call's receipt and its handler: the call never ran, so the
resume runs it (once), rather than telling the script it was interrupted."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from engine import CodeMode, Event, tool
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


async def test_a_cancel_that_lands_while_the_receipt_is_written_leaves_the_call_to_run(
    tmp_path: Path,
) -> None:
    """Cancelled as the step that asked for a call ends: the cancel lands while the call's
    receipt is made durable (written, then synced), so the drive never learnt it had
    claimed the call, and the call stayed running in the log; the resume told the script
    "tools.charge was interrupted" though it never ran. It runs on resume, once."""
    ran: list[int] = []
    engine = CodeMode(
        [_ledger_tool(ran)], runner=InProcessRunner(), data_dir=tmp_path, type_check="off"
    )
    ids: list[str] = []
    try:
        code = "return await tools.charge({ cents: 5 })"
        await _cancel_on(engine, code, lambda e: e.kind == "step", ids)
        assert ran == []
        result = await asyncio.wait_for(engine.resume(ids[0]), 30)
    finally:
        await engine.aclose()
    assert (result.status, result.value) == ("finished", "charged 5"), result.text
    assert ran == [5]


async def test_a_cancel_before_parallel_calls_begin_leaves_them_to_run(tmp_path: Path) -> None:
    """Cancelled once two calls made together were claimed, before either handler began (the
    tasks that run them had not started): both stayed running in the log, and the resume
    said each was interrupted. They run on resume, each once."""
    ran: list[int] = []
    engine = CodeMode(
        [_ledger_tool(ran)], runner=InProcessRunner(), data_dir=tmp_path, type_check="off"
    )
    ids: list[str] = []
    try:
        code = "return await Promise.all([tools.charge({ cents: 1 }), tools.charge({ cents: 2 })])"
        await _cancel_on(engine, code, lambda e: e.kind == "call.approved", ids)
        assert ran == []
        result = await asyncio.wait_for(engine.resume(ids[0]), 30)
    finally:
        await engine.aclose()
    assert (result.status, result.value) == ("finished", ["charged 1", "charged 2"]), result.text
    assert sorted(ran) == [1, 2]
