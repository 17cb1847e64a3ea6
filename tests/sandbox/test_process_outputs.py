"""Outputs through a real, confined sandbox process (``runner.ProcessRunner`` in exec mode).

The in-process tests (test_runtime.py) cover the semantics; these check that huge outputs
and runaway scripts still give a bounded, well-formed Step when they go through the process,
its pipes and the runner's line bounds. Each test starts a new process (~0.3 s), so there are
few of them.
"""

from __future__ import annotations

import asyncio

from runner import ProcessRunner, Step
from runner._conversation import wall_seconds
from sandbox import protocol
from sandbox.protocol import PRINTED_HEAD, PRINTED_TAIL, VALUE_BOUND, KiB, MiB, Script
from tests.sandbox.conftest import script

NOTE_ROOM = 200


def step(s: Script) -> Step:
    """One step of ``s`` in a new sandbox process."""

    async def go() -> Step:
        async with ProcessRunner() as runner:
            return await runner.run(s)

    return asyncio.run(go())


def assert_well_formed(result: Step) -> None:
    """The step is what a ran line can carry, and small enough to hand to the engine."""
    body = result.model_dump(mode="python", exclude_unset=True, exclude={"process"})
    ran = protocol.Ran.model_validate(body)
    assert ran.returned == result.returned
    line = protocol.encode(ran)
    assert len(line) < VALUE_BOUND + 64 * KiB
    protocol.decode(line, ("ran",))


def test_printing_100_mb_in_a_process_is_bounded():
    """A process that prints 100 MB reports head and tail, the true total, in a small line."""
    result = step(script("console.log('P'.repeat(100e6));\nreturn 'printed';", memory=1024 * MiB))
    assert result.outcome == "finished", result.error
    assert result.value == "printed"
    assert result.printed_bytes == 100_000_001
    assert len(result.printed) <= PRINTED_HEAD + PRINTED_TAIL + NOTE_ROOM
    assert result.printed.startswith("PPP") and result.printed.endswith("PPP\n")
    assert "of printed output cut" in result.printed
    assert_well_formed(result)


def test_returning_a_100_mb_string_in_a_process_is_bounded():
    """A process that returns a 100 MB string reports it cut, with its size."""
    result = step(script("return 'R'.repeat(100e6);", memory=1024 * MiB))
    assert result.outcome == "finished", result.error
    assert result.returned
    assert result.value_bytes == 100_000_000
    assert result.value_text is not None
    assert "of the returned string cut" in result.value_text
    assert len(result.value_text) <= VALUE_BOUND + NOTE_ROOM
    assert_well_formed(result)


def test_throwing_a_non_error_in_a_process_is_a_well_formed_failure():
    """A thrown plain object (and a huge one) becomes a failed Step with a bounded message."""
    result = step(script("throw { code: 42, detail: 'd'.repeat(1e7) };"))
    assert result.outcome == "failed"
    assert result.error is not None
    assert result.error.message.startswith('{"code":42,"detail":"ddd')
    assert len(result.error.message) <= 20 * KiB
    assert result.limit is None
    assert_well_formed(result)


def test_busy_loop_meets_compute_ms():
    """``for(;;){}`` with compute_ms=300 is stopped and reported as the compute_ms limit."""
    result = step(script("for (;;) {}", compute_ms=300))
    assert result.outcome == "failed"
    assert result.limit is not None
    assert result.limit.name == "compute_ms"
    assert result.limit.message.endswith(protocol.REMEDIES["compute_ms"])
    assert result.process is not None
    assert result.process.wall_ms < wall_seconds(300) * 1000 + 500


def test_an_unhandled_rejection_gets_its_line_in_a_confined_process():
    """The rejection tracker (set through ctypes, its callback made before lockdown) works
    under seccomp: an async function that failed unawaited gets its line, and the run's
    value stands."""
    code = "async function main() {\n  throw new Error('boom');\n}\nmain();\nreturn 'after'"
    result = step(script(code))
    assert result.outcome == "finished" and result.value == "after", result.error
    assert result.printed == (
        "line 2: Warning: an async function or promise failed and nothing awaited it: Error: boom\n"
    )


def test_an_unhandled_reason_whose_reading_loops_ends_on_compute_ms():
    """A reason is read when the run ends, as a thrown error is: a getter's loop there is
    the script's CPU, and the process is stopped on compute_ms."""
    code = (
        "Promise.reject(Object.defineProperty(new Error('x'), 'name', { get() { for (;;) {} } }));"
    )
    result = step(script(code, compute_ms=300))
    assert result.outcome == "failed" and result.limit is not None, result.error
    assert result.limit.name == "compute_ms"


def test_a_returned_dict_whose_items_never_end_meets_the_memory_limit():
    """A Python script returns a dict subclass whose ``items()`` never ends: the copy made
    of it as data fills the heap outside the script's code, and the run still reports its
    memory limit (the partial copy, held by the error's frames, left no room to report it:
    the process died without a ``ran``, a crash)."""
    code = (
        "import itertools\n"
        "class D(dict):\n"
        "    def items(self):\n"
        "        return ((str(i), i) for i in itertools.count())\n"
        "return D(a=1)"
    )
    s = script(code, memory=32 * MiB).model_copy(update={"language": "python"})
    result = step(s)
    assert result.outcome == "failed", result.value
    assert result.limit is not None and result.limit.name == "memory", result.error
    assert_well_formed(result)
