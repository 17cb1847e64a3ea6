"""The runner conformance suite fails a runner that is wrong, and says what is wrong.

Each runner here wraps the real one (pool mode) and breaks it in one way, as a host's own
runner could be broken; each test runs the one check that must catch it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from runner import FileReader, ProcessRunner, ScriptRunner, Step
from runner._base import LiveRun
from sandbox.protocol import Record, Script
from tests.runner import conformance as c
from tests.runner.conftest import Harness, _harness


class _Wrapped(ScriptRunner):
    """The real runner, with a change to each script sent (``script_in``) or step returned
    (``step_out``; ``resumed`` for a live run's later segments)."""

    def __init__(self, python: str | None = None) -> None:
        if python is None:
            self.inner = ProcessRunner(mode="pool")
        else:
            self.inner = ProcessRunner(mode="pool", python=python)

    async def __aenter__(self) -> _Wrapped:
        await self.inner.__aenter__()
        return self

    async def aclose(self) -> None:
        await self.inner.aclose()

    def script_in(self, script: Script) -> Script:
        return script

    def step_out(self, step: Step, resumed: bool) -> Step:
        return step

    async def run(
        self,
        script: Script,
        files: FileReader | None = None,
        *,
        tenant: str = "default",
        live: bool = False,
    ) -> Step:
        step = await self.inner.run(self.script_in(script), files, tenant=tenant, live=live)
        return _wrap_live(self.step_out(step, False), self)


def _wrap_live(step: Step, outer: _Wrapped) -> Step:
    if step.live is not None:
        step.live = _WrappedLive(step.live, outer)
    return step


class _WrappedLive(LiveRun):
    def __init__(self, inner: LiveRun, outer: _Wrapped) -> None:
        self.inner, self.outer = inner, outer
        self.known, self.waiting = inner.known, inner.waiting

    @property
    def memory_bytes(self) -> int:
        return self.inner.memory_bytes

    async def resume(self, records: list[Record]) -> Step:
        return _wrap_live(self.outer.step_out(await self.inner.resume(records), True), self.outer)

    async def close(self) -> None:
        await self.inner.close()


def _limits(script: Script, **limits: Any) -> Script:
    return script.model_copy(update={"limits": script.limits.model_copy(update=limits)})


class _CutsPrinted(_Wrapped):
    """Keeps 60,000 characters of printed text (less than the sandbox keeps)."""

    def step_out(self, step: Step, resumed: bool) -> Step:
        return step.model_copy(update={"printed": step.printed[:60_000]})


class _SortsCalls(_Wrapped):
    """Gives a step's calls sorted by name and arguments, not in call order."""

    def step_out(self, step: Step, resumed: bool) -> Step:
        calls = sorted(step.calls, key=lambda call: (call.name, repr(call.arguments)))
        return step.model_copy(update={"calls": calls})


class _IgnoresCompute(_Wrapped):
    """Runs every script under the default compute_ms (5 s)."""

    def script_in(self, script: Script) -> Script:
        return _limits(script, compute_ms=5000)


class _IgnoresMemory(_Wrapped):
    """Runs every script under the default memory limit (256 MiB)."""

    def script_in(self, script: Script) -> Script:
        return _limits(script, memory=256 * 1024 * 1024)


class _AddsCompute(_Wrapped):
    """Runs every script with 1,000 ms more compute_ms than it asked for (a margin)."""

    def script_in(self, script: Script) -> Script:
        return _limits(script, compute_ms=script.limits.compute_ms + 1000)


class _AddsMemory(_Wrapped):
    """Runs every script with 100 MiB more memory than it asked for (a margin)."""

    def script_in(self, script: Script) -> Script:
        return _limits(script, memory=script.limits.memory + 100 * 1024 * 1024)


class _IgnoresFileBytes(_Wrapped):
    """Serves a script's reads up to the default file_bytes (64 MiB)."""

    def script_in(self, script: Script) -> Script:
        return _limits(script, file_bytes=64 * 1024 * 1024)


class _LiveSaysFinished(_Wrapped):
    """Reports a resumed live segment that stopped on calls as finished."""

    def step_out(self, step: Step, resumed: bool) -> Step:
        if resumed and step.outcome == "calls":
            return step.model_copy(update={"outcome": "finished", "calls": [], "live": None})
        return step


class _NeverCloses(_Wrapped):
    """Leaves its pool's processes and pipes at close (the test closes them after)."""

    left: list[ProcessRunner] = []

    async def aclose(self) -> None:
        self.left.append(self.inner)


@pytest.fixture
def broken(request: pytest.FixtureRequest) -> Iterator[Harness]:
    with _harness("pool", request.param) as harness:
        yield harness


def _fails(harness: Harness, check: Callable[[Harness], None], said: str) -> None:
    with pytest.raises(AssertionError, match=re.compile(said)):
        check(harness)


@pytest.mark.parametrize(
    ("broken", "check", "said"),
    [
        (_CutsPrinted, c.check_printed_text_whole, "came back as 60000: .* comes back whole"),
        (_SortsCalls, c.check_calls_in_call_order, "not in call order"),
        (_IgnoresCompute, c.check_compute_limit, "compute_ms 500 met another .* 5,000 ms"),
        (_IgnoresMemory, c.check_memory_limit, "limit of 32 MiB met another: .* 256 MiB"),
        (_AddsCompute, c.check_compute_limit, "compute_ms 500 met another .* 1,500 ms"),
        (_AddsMemory, c.check_memory_limit, "limit of 32 MiB met another: .* 132 MiB"),
        (_LiveSaysFinished, c.check_live_agrees_with_replay, r"step 2 live was .*finished"),
    ],
    indirect=["broken"],
    ids=[
        "printed-cut",
        "calls-sorted",
        "compute-ignored",
        "memory-ignored",
        "compute-margin",
        "memory-margin",
        "live-outcome",
    ],
)
def test_a_broken_runner_fails(broken: Harness, check: Any, said: str) -> None:
    _fails(broken, check, said)


def test_a_runner_that_leaves_its_processes_fails() -> None:
    with _harness("pool", _NeverCloses) as harness:
        try:
            _fails(harness, lambda h: c.check_cleanup(h, 4), "fds left open after close: {.+}")
        finally:
            while _NeverCloses.left:
                harness.run(_NeverCloses.left.pop().aclose())


def test_a_runner_that_serves_reads_past_file_bytes_fails(standin_python: str) -> None:
    with _harness("pool", lambda: _IgnoresFileBytes(standin_python)) as harness:
        _fails(harness, c.check_reads_stop_at_file_bytes, "served 67,108,864 bytes of reads")
