"""Each per-run size limit at its edge, through a real confined process (pool mode).

A script just under a limit must finish (a step that carries up to `arguments` of recorded
calls must fit in the process); one byte over must fail naming the limit. The sizes are the
spec's defaults, so these steps carry tens of MiB: few tests, one warm runner.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from runner import ProcessRunner
from runner._process import Mode
from sandbox.protocol import Clock, Limits, MiB, Record, Script
from tests.sandbox.conftest import rec, script

LIMITS = Limits()
# `{"s":"..."}` is the string's length plus 8 bytes of JSON.
OVERHEAD = len('{"s":""}')


class _Runner:
    def __init__(self, mode: Mode = "pool") -> None:
        self.loop = asyncio.new_event_loop()
        self.runner = ProcessRunner(mode=mode, pool_size=1)

    def run(self, code: str, records: list[Any]) -> Any:
        return self.loop.run_until_complete(self.runner.run(script(code, records)))

    def close(self) -> None:
        self.loop.run_until_complete(self.runner.aclose())
        self.loop.close()


@pytest.fixture(scope="module")
def runner() -> Iterator[_Runner]:
    r = _Runner()
    yield r
    r.close()


def calls_of(sizes: list[int]) -> str:
    """A script that makes one call per size, each with arguments of exactly that many bytes."""
    return (
        f"const sizes = {sizes};\n"
        "for (const n of sizes) await tools.echo({ s: 'x'.repeat(n - 8) });\n"
        "return sizes.length;"
    )


def answered(sizes: list[int], result: Any = 1) -> list[Any]:
    return [rec("echo", {"s": "x" * (n - OVERHEAD)}, result=result) for n in sizes]


def assert_limit(step: Any, name: str) -> None:
    assert step.outcome == "failed", step.value
    assert step.limit is not None, step.error
    assert step.limit.name == name
    assert step.error.name == "LimitError" or name == "call_arguments", step.error


def test_arguments_just_under_finishes(runner: _Runner) -> None:
    """16 recorded calls of 4 MiB (the whole 64 MiB `arguments`) replay to the end."""
    sizes = [LIMITS.call_arguments] * (LIMITS.arguments // LIMITS.call_arguments)
    step = runner.run(calls_of(sizes), answered(sizes))
    assert step.outcome == "finished", step.error
    assert step.value == len(sizes)


def test_arguments_just_over_fails_naming_it(runner: _Runner) -> None:
    sizes = [LIMITS.call_arguments] * (LIMITS.arguments // LIMITS.call_arguments)
    step = runner.run(calls_of([*sizes, OVERHEAD + 1]), answered(sizes))
    assert_limit(step, "arguments")


def test_call_arguments_edge(runner: _Runner) -> None:
    step = runner.run(calls_of([LIMITS.call_arguments]), [])
    assert step.outcome == "calls", step.error
    step = runner.run(calls_of([LIMITS.call_arguments + 1]), [])
    assert step.outcome == "failed"
    assert step.limit is not None and step.limit.name == "call_arguments"
    assert "call_arguments" in step.error.message


def test_step_arguments_edge(runner: _Runner) -> None:
    """New calls of one step may pass exactly `step_arguments` together, not a byte more."""
    code = (
        "const sizes = %s;\n"
        "await Promise.all(sizes.map((n) => tools.echo({ s: 'x'.repeat(n - 8) })));"
    )
    most = LIMITS.call_arguments
    rest = LIMITS.step_arguments - most - (OVERHEAD + 1)
    step = runner.run(code % [most, rest, OVERHEAD + 1], [])
    assert step.outcome == "calls", step.error
    assert len(step.calls) == 3
    step = runner.run(code % [most, rest + 1, OVERHEAD + 1], [])
    assert_limit(step, "step_arguments")


def test_results_edge(runner: _Runner) -> None:
    """Recorded results read by one run may total exactly `results`, not a byte more."""
    each = LIMITS.results // 4
    results = ["y" * (each - 2)] * 4  # a JSON string is its length plus two quotes
    code = (
        "let n = 0;\nfor (let i = 0; i < 4; i++) n += (await tools.echo({ i })).length;\nreturn n;"
    )
    records = [rec("echo", {"i": i}, result=r) for i, r in enumerate(results)]
    step = runner.run(code, records)
    assert step.outcome == "finished", step.error
    assert step.value == 4 * (each - 2)
    records[-1] = rec("echo", {"i": 3}, result=results[-1] + "y")
    step = runner.run(code, records)
    assert_limit(step, "results")


@pytest.mark.parametrize("mode", ["pool", "exec"])
def test_twelve_calls_of_3_9_mib(runner: _Runner, mode: str) -> None:
    """12 recorded calls of 3.9 MiB (47 MiB, under `arguments`) finish, forked or exec'd."""
    sizes = [int(3.9 * MiB)] * 12
    if mode == "pool":
        step = runner.run(calls_of(sizes), answered(sizes))
    else:
        exec_runner = _Runner("exec")
        try:
            step = exec_runner.run(calls_of(sizes), answered(sizes))
        finally:
            exec_runner.close()
    assert step.outcome == "finished", step.error
    assert step.value == 12


def test_a_call_log_over_a_capped_heap_is_the_memory_limit() -> None:
    """A runner that capped the heap (data_limit) below what the step carries gets the memory
    limit met, named, not a crash or a ProtocolError."""
    sizes = [LIMITS.call_arguments] * 16  # a 64 MiB line, for a 100 MiB heap
    small = ProcessRunner(mode="pool", pool_size=1, data_limit=100 * MiB)
    loop = asyncio.new_event_loop()
    try:
        step = loop.run_until_complete(
            small.run(script(calls_of(sizes), answered(sizes), memory=64 * MiB))
        )
    finally:
        loop.run_until_complete(small.aclose())
        loop.close()
    assert step.outcome == "failed"
    assert step.limit is not None and step.limit.name == "memory", step.error
    assert step.error.name == "LimitError"
    assert "call log does not fit" in step.error.message


def test_a_result_of_millions_of_small_items_reaches_a_javascript_run() -> None:
    """A tool's result of two million zeros (4 MB of JSON, within `results`), at the default
    memory: orjson's buffer for it (some 220 bytes an item) did not fit beside QuickJS's
    heap, and the process crashed (SIGSEGV); heavy data now goes through the standard
    library there, as in a Python run."""
    records = [Record(name="z", arguments={}, result=[0] * 2_000_000)]
    runner = ProcessRunner(mode="pool", pool_size=1)
    loop = asyncio.new_event_loop()
    try:
        step = loop.run_until_complete(
            runner.run(
                Script(
                    id="many",
                    code="const r = await tools.z({}); return r.length",
                    tools=["z"],
                    clock=Clock(now_ms=0, seed=1),
                    records=records,
                )
            )
        )
    finally:
        loop.run_until_complete(runner.aclose())
        loop.close()
    assert step.outcome == "finished" and step.value == 2_000_000, step.error
