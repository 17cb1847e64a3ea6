"""Slots: at most N steps at once, fair between tenants, bounded waits.

Ordering is explicit: a test lets queued tasks reach their wait with ``settle()`` (yielding
to the event loop), and time comes from a fake clock; no test sleeps on the assumption
that the machine is fast.
"""

from __future__ import annotations

import asyncio

import pytest

from runner import ProcessRunner, RunError, Slots, default_slot_count
from runner import _slots as slots_module
from runner._slots import SlotUse
from sandbox.protocol import Clock, Limits, Script


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def settle() -> None:
    """Let every ready task run until it blocks."""
    for _ in range(10):
        await asyncio.sleep(0)


def waiter(slots: Slots, tenant: str) -> asyncio.Task[SlotUse]:
    return asyncio.get_running_loop().create_task(slots.acquire(tenant))


async def test_a_tenant_alone_takes_every_slot() -> None:
    slots = Slots(3)
    for _ in range(3):
        await slots.acquire("a")
    assert slots.held["a"] == 3 and slots.in_use == 3


async def test_while_another_tenant_waits_a_tenant_keeps_all_but_one() -> None:
    slots = Slots(3)
    held = [await slots.acquire("a") for _ in range(3)]
    b = waiter(slots, "b")
    a_more = waiter(slots, "a")
    await settle()
    assert not b.done() and not a_more.done()

    slots.release(held.pop())  # the freed slot goes to b: a already has all but one
    await settle()
    assert b.done() and not a_more.done()
    assert slots.held == {"a": 2, "b": 1}

    slots.release(held.pop())  # a holds 1 of 3 and nobody else waits: a may take it
    await settle()
    assert a_more.done()


async def test_a_tenant_at_all_but_one_waits_for_its_turn() -> None:
    slots = Slots(2)
    a1 = await slots.acquire("a")
    b1 = await slots.acquire("b")
    a2, b2 = waiter(slots, "a"), waiter(slots, "b")
    await settle()
    slots.release(a1)  # a and b each hold at most 1 of 2 while the other waits
    await settle()
    assert a2.done() and not b2.done()
    slots.release(b1)
    await settle()
    assert b2.done()


async def test_the_tenant_holding_fewest_slots_goes_first_then_the_oldest() -> None:
    slots = Slots(4)
    held = [await slots.acquire("a") for _ in range(3)]
    held.append(await slots.acquire("b"))
    queued = {name: waiter(slots, name) for name in ("a", "b", "c")}
    await settle()
    slots.release(held[0])  # holds: a 2, b 1, c 0: c goes first
    await settle()
    assert [n for n, t in queued.items() if t.done()] == ["c"]
    slots.release(held[1])  # holds: a 1, b 1, c 1: the oldest waiter, a
    await settle()
    assert [n for n, t in queued.items() if t.done()] == ["a", "c"]


async def test_a_step_that_waits_past_script_wait_gets_a_run_error() -> None:
    slots = Slots(1, script_wait=0.01)
    await slots.acquire("a")
    with pytest.raises(RunError, match=r"no sandbox slot came free within 0\.01 s"):
        await slots.acquire("b")
    assert slots.waiting() == 0 and slots.held == {"a": 1}


async def test_script_wait_zero_refuses_at_once_when_all_are_busy() -> None:
    slots = Slots(1, script_wait=0)
    await slots.acquire("a")
    with pytest.raises(RunError, match="CODEMODE_SANDBOX_SLOTS or script_wait"):
        await slots.acquire("a")


async def test_a_cancelled_wait_leaves_no_trace_and_lets_others_through() -> None:
    slots = Slots(2)
    a1, a2 = await slots.acquire("a"), await slots.acquire("a")
    b = waiter(slots, "b")
    a3 = waiter(slots, "a")
    await settle()
    b.cancel()
    await settle()
    assert slots.waiting() == 1
    slots.release(a1)  # with b gone, a alone waits again: it may take every slot
    await settle()
    assert a3.done()
    slots.release(a2)
    slots.release(a3.result())
    assert slots.in_use == 0


async def test_waits_and_slot_time_come_from_the_clock() -> None:
    clock = FakeClock()
    held: list[tuple[str, float]] = []
    slots = Slots(1, clock=clock, on_release=lambda tenant, s: held.append((tenant, s)))
    first = await slots.acquire("a")
    assert first.waited == 0
    second = waiter(slots, "b")
    await settle()
    clock.now += 5
    slots.release(first)
    await settle()
    assert second.result().waited == 5
    clock.now += 2
    slots.release(second.result())
    assert held == [("a", 5), ("b", 2)]


def test_slot_count_comes_from_the_variable_or_the_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_slot_count({"CODEMODE_SANDBOX_SLOTS": "5"}) == 5
    monkeypatch.setattr(slots_module.psutil, "cpu_count", lambda: 1)
    assert default_slot_count({}) == 2
    monkeypatch.setattr(slots_module.psutil, "cpu_count", lambda: 64)
    assert default_slot_count({}) == 8
    monkeypatch.setattr(slots_module.psutil, "cpu_count", lambda: 4)
    assert default_slot_count({"CODEMODE_SANDBOX_SLOTS": ""}) == 4


@pytest.mark.parametrize("value", ["0", "-2", "four"])
def test_a_bad_slot_count_is_refused_by_name(value: str) -> None:
    with pytest.raises(ValueError, match=f"CODEMODE_SANDBOX_SLOTS={value!r} is not a positive"):
        default_slot_count({"CODEMODE_SANDBOX_SLOTS": value})


@pytest.mark.parametrize("count", [0, -1, 2.5, True, "2"])
def test_slots_must_be_a_whole_number_of_one_or_more(count: object) -> None:
    """2.5 was taken (and let three steps run at once); "2" was a raw TypeError."""
    with pytest.raises(ValueError, match="slots must be a whole number, at least 1, not"):
        Slots(count)  # type: ignore[arg-type]


@pytest.mark.parametrize("wait", [-1, float("nan"), "5", True])
def test_script_wait_must_be_seconds_of_zero_or_more(wait: object) -> None:
    with pytest.raises(ValueError, match="script_wait must be zero or more seconds, not"):
        Slots(2, script_wait=wait)  # type: ignore[arg-type]
    assert Slots(2, script_wait=0).script_wait == 0


async def test_the_process_runner_holds_a_slot_for_each_step(standin_python: str) -> None:
    """A runner with one slot and no wait refuses a second step while one is in flight."""
    held: list[str] = []
    slots = Slots(1, script_wait=0, on_release=lambda tenant, _: held.append(tenant))
    hang = Script(
        id="hang",
        code="// standin: hang\n",
        clock=Clock(now_ms=0, seed=1),
        limits=Limits(compute_ms=100),
    )
    quick = Script(id="quick", code="return 1", clock=Clock(now_ms=0, seed=1))
    async with ProcessRunner(mode="fork", python=standin_python, slots=slots) as runner:
        first = asyncio.create_task(runner.run(hang))
        while slots.in_use == 0:
            await asyncio.sleep(0)
        with pytest.raises(RunError, match="no sandbox slot"):
            await runner.run(quick, tenant="other")
        step = await first
        assert step.limit is not None and step.limit.name == "compute_ms"
        assert (await runner.run(quick)).value == 1
        assert slots.in_use == 0 and held == ["default", "default"]


async def test_a_release_callback_that_raises_cannot_keep_the_slot() -> None:
    """on_release is told after the slot is given back: a host's accounting that raises
    fails that hold's release, and the next tenant still gets the slot."""

    def broken(tenant: str, seconds: float) -> None:
        raise RuntimeError("the host's accounting failed")

    slots = Slots(1, on_release=broken)
    first = await slots.acquire("a")
    second = waiter(slots, "b")
    await settle()
    with pytest.raises(RuntimeError, match="accounting failed"):
        slots.release(first)
    await settle()
    assert second.done() and slots.in_use == 1
