"""``Step.from_ran``: the runner's report of a run, made from the process's ``ran``."""

from __future__ import annotations

import pytest

from runner import ProcessStats, Step
from runner._conversation import Deadline, wall_seconds
from sandbox.protocol import (
    PROCESS_CPU_SECONDS,
    Call,
    Clock,
    LimitMet,
    Limits,
    Ran,
    Record,
    Script,
    ScriptError,
    Stats,
)

RANS = [
    Ran(outcome="calls", calls=[Call(name="t", arguments={"i": 1})], stats=Stats(cpu_ms=1.5)),
    Ran(outcome="finished", value={"a": [1, 2]}, printed="hi\n", printed_bytes=3),
    Ran(outcome="finished"),
    Ran(outcome="finished", value=None),
    Ran(outcome="finished", value_text="cut", value_bytes=10),
    Ran(
        outcome="failed",
        error=ScriptError(name="E" * 1000, message="m" * 100_000),
        limit=LimitMet(name="memory", message="x" * 100_000),
    ),
]


@pytest.mark.parametrize("ran", RANS, ids=lambda r: r.outcome)
@pytest.mark.parametrize("process", [None, ProcessStats(cpu_ms=2.0, max_rss_bytes=1)])
def test_a_step_is_its_ran_with_what_the_runner_measured(
    ran: Ran, process: ProcessStats | None
) -> None:
    """The same step as pydantic's model_construct makes of every field of ``ran`` (fields
    set, dumps, whether a value was returned), with ``process`` and no live run; the process's
    strings cut to their bounds; ``ran`` itself unchanged."""
    before = ran.model_dump()
    step = Step.from_ran(ran, process)
    made = Step.model_construct(_fields_set=set(ran.model_fields_set), **dict(ran))
    made.process, made.live = process, None
    made = made.bounded()
    assert step == made and step.model_fields_set == made.model_fields_set
    assert step.model_dump(exclude_unset=True) == made.model_dump(exclude_unset=True)
    assert step.returned == ran.returned and step.process is process and step.live is None
    if step.error is not None:
        assert len(step.error.message) < len(ran.error.message)  # type: ignore[union-attr]
    assert ran.model_dump() == before
    assert Step.model_validate_json(step.model_dump_json()) == step
    step.live = object()  # a runner sets it after; never dumped
    assert "live" not in step.model_dump()


def test_a_replay_has_a_deadline_for_each_segment_it_may_run() -> None:
    """Version 2 re-arms compute_ms at each recorded batch, at most one a record: the step's
    wall deadline grows with its records, up to the process's whole CPU; version 1 has one
    allowance for the run."""

    def allowance(records: int, version: int = 2, compute_ms: int = 1000) -> float:
        script = Script(
            id="t",
            code="",
            tools=["t"],
            clock=Clock(now_ms=0, seed=1),
            limits=Limits(compute_ms=compute_ms),
            records=[Record(name="t", arguments={}, result=1)] * records,
            version=version,
        )
        return Deadline.for_step(script).allowance

    assert allowance(0) == wall_seconds(1000)
    assert allowance(3) == wall_seconds(4000)
    assert allowance(3, version=1) == wall_seconds(1000)
    assert allowance(10_000) == wall_seconds(PROCESS_CPU_SECONDS * 1000)
