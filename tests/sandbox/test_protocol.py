"""The wire protocol of sandbox/protocol.py: encode/decode, refusals, canonical JSON."""

from __future__ import annotations

import orjson
import pytest

from sandbox import protocol
from sandbox.protocol import (
    Call,
    Clock,
    ErrorLine,
    FileInfo,
    LimitMet,
    Limits,
    ProtocolError,
    Ran,
    ReadRequest,
    Record,
    Script,
    ScriptError,
    Stats,
    Unconfined,
)

SCRIPT = Script(
    id="s-1",
    code="const r = await tools.echo({ a: 1 });\nreturn r;",
    records=[
        Record(name="echo", arguments={"a": 1}, result={"ok": [1, 2.5, "x", None]}),
        Record(name="echo", arguments={"a": 2}, error="nope"),
    ],
    tools=["echo", "search"],
    files=[FileInfo(id="f1", mime="text/plain", size=12, skill="runbooks")],
    clock=Clock(now_ms=1_767_225_600_000, seed=2**63 + 5),
    limits=Limits(calls=5, memory=16 * protocol.MiB, compute_ms=300),
)

MESSAGES = {
    "ready": protocol.ready(),
    "unconfined": Unconfined(error="seccomp: not permitted"),
    "script": SCRIPT,
    "read": ReadRequest(file="f1", offset=10, len=4096),
    "ran-finished": Ran(
        outcome="finished",
        value=[{"number": 12, "reviews": 0}],
        printed="hi\n",
        printed_bytes=3,
        shown=["f1"],
        stats=Stats(cpu_ms=1.5, heap_bytes=1000, results_bytes=20, file_bytes=0),
    ),
    "ran-cut": Ran(outcome="finished", value_text="ab\n[... cut ...]\nyz", value_bytes=10**8),
    "ran-failed": Ran(
        outcome="failed",
        error=ScriptError(
            name="LimitError",
            message="calls limit met",
            lines=[ErrorLine(line=3, text="await tools.echo({});")],
        ),
        limit=LimitMet(name="calls", message="calls limit met"),
    ),
    "ran-calls": Ran(
        outcome="calls",
        calls=[Call(name="echo", arguments={"a": 1}), Call(name="search", arguments={})],
    ),
}


def kind_of(key: str) -> str:
    return key.split("-")[0]


@pytest.mark.parametrize("key", list(MESSAGES))
def test_every_message_round_trips(key):
    """encode then decode gives back an equal message, as one line ending in a newline."""
    message = MESSAGES[key]
    line = protocol.encode(message)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert list(orjson.loads(line)) == [kind_of(key)]
    back = protocol.decode(line, (kind_of(key),))
    assert type(back) is type(message)
    assert back == message


def test_script_line_carries_version_and_language_even_when_defaulted():
    """The process checks the script's version: the line always states it, and the language."""
    body = orjson.loads(protocol.encode(Script(id="x", code="1", clock=Clock(now_ms=0, seed=0))))
    assert body["script"]["version"] == protocol.VERSION
    assert body["script"]["language"] == "javascript"


def test_script_limits_left_out_take_the_spec_defaults():
    """A script line without limits decodes to the spec's defaults."""
    line = b'{"script":{"id":"x","code":"1","clock":{"now_ms":0,"seed":0}}}'
    script = protocol.decode(line, ("script",))
    assert script.limits == Limits()
    assert (script.limits.calls, script.limits.memory, script.limits.compute_ms) == (
        1000,
        256 * protocol.MiB,
        5000,
    )


@pytest.mark.parametrize(
    "limits",
    [
        '{"compute_ms": 17592186044416}',  # 2**44: past the CPU timer's time_t
        '{"memory": 4611686018427387904}',  # 2**62: past what setrlimit converts
        '{"calls": 9007199254740992}',  # 2**53: past what JSON numbers keep
    ],
)
def test_script_limits_past_what_the_sandbox_takes_are_refused(limits: str) -> None:
    """A peer's limits past what the sandbox can apply are a protocol error naming the limit
    (they crashed the sandbox process, or failed its lockdown with an OverflowError)."""
    line = (
        b'{"script":{"id":"x","code":"1","clock":{"now_ms":0,"seed":0},"limits":'
        + limits.encode()
        + b"}}"
    )
    name = limits.split('"')[1]
    with pytest.raises(protocol.ProtocolError, match=name):
        protocol.decode(line, ("script",))


@pytest.mark.parametrize("bad", ["", "x" * 257, "s1\\n2026-12-03 CRITICAL forged", "\\u001b[2J"])
def test_a_script_id_that_is_no_short_name_is_refused(bad: str) -> None:
    """A peer's script id is named in every runner's logs: one that is empty, over 256
    characters or holds a control character (a line break forged log lines) is refused."""
    line = b'{"script":{"id":"' + bad.encode() + b'","code":"1","clock":{"now_ms":0,"seed":0}}}'
    with pytest.raises(protocol.ProtocolError, match="id"):
        protocol.decode(line, ("script",))


def test_large_now_ms_and_seed_survive():
    """64-bit clock values are not truncated on the wire."""
    back = protocol.decode(protocol.encode(SCRIPT), ("script",))
    assert back.clock.now_ms == 1_767_225_600_000
    assert back.clock.seed == 2**63 + 5


@pytest.mark.parametrize(
    "clock",
    [{"now_ms": 2**63 - 1, "seed": 1}, {"now_ms": -1, "seed": 1}, {"now_ms": 1, "seed": -1}],
)
def test_a_clock_past_what_dates_hold_is_refused(clock: dict[str, int]) -> None:
    """A clock past the year 9999 (or before 1970), or a negative seed, is a protocol error:
    a Python script's clock failed with an OverflowError (read as the sandbox crashing), and
    a JavaScript Date was NaN."""
    line = protocol.encode(SCRIPT).replace(
        orjson.dumps(SCRIPT.clock.model_dump()), orjson.dumps(clock)
    )
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(line, ("script",))


@pytest.mark.parametrize(
    "line",
    [b"not json", b"{", b"", b'{"ran": {"outcome": "finished"}', b"\xff\xfe"],
)
def test_decode_refuses_non_json(line):
    """A line that is not JSON is a ProtocolError that says so."""
    with pytest.raises(ProtocolError, match="not JSON"):
        protocol.decode(line, ("ran",))


@pytest.mark.parametrize(
    "line",
    [
        b"[]",
        b'"ran"',
        b"42",
        b"null",
        b"{}",
        b'{"ran": {"outcome": "finished"}, "read": {"file": "f", "offset": 0, "len": 1}}',
    ],
)
def test_decode_refuses_a_wrong_envelope(line):
    """Only a one-key object is a message envelope."""
    with pytest.raises(ProtocolError, match="envelope"):
        protocol.decode(line, ("ran", "read"))


def test_decode_refuses_an_unexpected_kind():
    """A valid message of a kind the reader does not expect now is refused, naming both."""
    line = protocol.encode(protocol.ready())
    with pytest.raises(ProtocolError, match=r"'ready' message where ran or read"):
        protocol.decode(line, ("ran", "read"))
    with pytest.raises(ProtocolError, match="'bogus'"):
        protocol.decode(b'{"bogus": {}}', ("ran",))


@pytest.mark.parametrize(
    ("line", "where"),
    [
        (b'{"ran": {"outcome": "finished", "extra": 1}}', "extra"),
        (b'{"ran": {"outcome": "finished", "stats": {"cpu_ms": 1, "gpu_ms": 2}}}', "gpu_ms"),
        (b'{"ready": {"version": 1, "oldest": 1, "languages": [], "x": 0}}', "x"),
        (b'{"script": {"id": "x", "code": "", "clock": {"now_ms": 0, "seed": 0}, "y": 1}}', "y"),
    ],
)
def test_decode_refuses_extra_fields(line, where):
    """A field the protocol does not have, at any depth, is refused and named."""
    with pytest.raises(ProtocolError, match=where):
        protocol.decode(line, ("ran", "ready", "script"))


@pytest.mark.parametrize(
    ("line", "match"),
    [
        (b'{"ran": {"outcome": "failed"}}', "must carry an error"),
        (b'{"ran": {"outcome": "failed", "error": null}}', "must carry an error"),
        (b'{"ran": {"outcome": "calls"}}', "at least one call"),
        (b'{"ran": {"outcome": "calls", "calls": []}}', "at least one call"),
        (b'{"ran": {"outcome": "maybe"}}', "outcome"),
        (b'{"ran": {"outcome": "calls", "calls": [{"name": "x", "arguments": [1]}]}}', "arguments"),
        (b'{"read": {"file": "f", "offset": -1, "len": 1}}', "offset"),
        (
            b'{"script": {"id": "x", "code": "", "clock": {"now_ms": 0, "seed": 0},'
            b' "language": "ruby"}}',
            "language",
        ),
        (
            b'{"script": {"id": "x", "code": "", "clock": {"now_ms": 0, "seed": 0},'
            b' "limits": {"memory": 10}}}',
            "memory",
        ),
        (b'{"ran": null}', "ran"),
    ],
)
def test_decode_refuses_malformed_messages(line, match):
    """A message of the right kind with the wrong shape is a ProtocolError naming the problem."""
    with pytest.raises(ProtocolError, match=match):
        protocol.decode(line, ("ran", "read", "script"))


def test_ran_returned_distinguishes_undefined_from_null_over_the_wire():
    """No value (undefined) and a null value stay different through encode/decode."""
    undefined = Ran(outcome="finished")
    null = Ran(outcome="finished", value=None)
    assert not undefined.returned and null.returned
    assert b'"value"' not in protocol.encode(undefined)
    assert b'"value":null' in protocol.encode(null)
    assert not protocol.decode(protocol.encode(undefined), ("ran",)).returned
    assert protocol.decode(protocol.encode(null), ("ran",)).returned
    assert protocol.decode(b'{"ran": {"outcome": "finished", "value": null}}', ("ran",)).returned


def test_ran_cut_value_counts_as_returned():
    """A value sent as cut text (value_text) is a returned value too."""
    ran = protocol.decode(protocol.encode(MESSAGES["ran-cut"]), ("ran",))
    assert ran.returned
    assert ran.value is None
    assert ran.value_bytes == 10**8


@pytest.mark.parametrize("falsy", [0, False, "", [], {}])
def test_falsy_returned_values_are_values(falsy):
    """0, false, "", [] and {} are values, not "nothing returned"."""
    ran = protocol.decode(protocol.encode(Ran(outcome="finished", value=falsy)), ("ran",))
    assert ran.returned
    assert ran.value == falsy


def test_canonical_json_sorts_keys_at_every_depth():
    """Canonical JSON: keys sorted at every depth, no spaces, UTF-8 as itself."""
    a = {"b": [{"z": 1, "y": {"q": 2, "p": 3}}], "a": "é", "c": {"k": None, "j": True}}
    b = {"c": {"j": True, "k": None}, "a": "é", "b": [{"y": {"p": 3, "q": 2}, "z": 1}]}
    expected = '{"a":"é","b":[{"y":{"p":3,"q":2},"z":1}],"c":{"j":true,"k":null}}'.encode()
    assert protocol.canonical_json(a) == expected
    assert protocol.canonical_json(b) == expected


def test_canonical_json_keeps_array_order():
    """Arrays are ordered data: their order is not normalised."""
    assert protocol.canonical_json([2, 1]) != protocol.canonical_json([1, 2])


def test_record_failed_property():
    """A record with an error message is a failed call; one with a result is not."""
    assert Record(name="x", arguments={}, error="bad").failed
    assert not Record(name="x", arguments={}, result=None).failed


def test_process_heap_is_twice_memory_and_at_least_512_mib() -> None:
    """The spec's heap rule, stated once: the lockdown, the runner and its messages use it."""
    MiB = protocol.MiB
    assert protocol.process_heap(64 * MiB) == 512 * MiB
    assert protocol.process_heap(256 * MiB) == 512 * MiB
    assert protocol.process_heap(300 * MiB) == 600 * MiB


def test_out_of_memory_message_names_the_heap_the_process_had() -> None:
    """A process killed for memory is told the heap it had: 512 MiB for memory = 64 MiB, not
    twice 64 MiB."""
    from runner._base import ProcessStats
    from runner._conversation import Outcome, step_from

    small = SCRIPT.model_copy(update={"limits": Limits(memory=64 * protocol.MiB)})
    step = step_from(
        Outcome(),
        small,
        ProcessStats(max_rss_bytes=1),
        term_signal=None,
        exit_code=1,
        killed_by_us=False,
        stderr_tail="MemoryError",
    )
    assert step.limit is not None and step.limit.name == "memory"
    assert "512 MiB" in step.limit.message


def test_unfit_is_the_one_admission_rule() -> None:
    """A runner admits a step whose version is in its range and whose language it runs; the
    reason it gives otherwise names both sides."""
    assert protocol.unfit(SCRIPT) is None
    assert protocol.unfit(SCRIPT, 1, 3, ["python", "javascript"]) is None
    v = protocol.VERSION
    newer = SCRIPT.model_copy(update={"version": v + 1})
    assert (
        protocol.unfit(newer) == f"it takes script versions 1 to {v}, the step is version {v + 1}"
    )
    assert protocol.unfit(newer, v + 1, v + 1) is None
    assert (
        protocol.unfit(SCRIPT, v + 1, v + 2)
        == f"it takes script versions {v + 1} to {v + 2}, the step is version {v}"
    )
    assert protocol.unfit(SCRIPT, languages=["python"]) == "it runs python, not javascript"


def test_a_runner_refuses_a_step_its_sandbox_does_not_admit() -> None:
    """The runner checks the process's ``ready`` with the same rule, before sending."""
    from runner._base import RunError
    from runner._conversation import check_version

    check_version(protocol.ready(), SCRIPT)
    older = protocol.Ready(version=protocol.VERSION, oldest=1, languages=["python"])
    with pytest.raises(RunError, match="the sandbox cannot run this step: it runs python"):
        check_version(older, SCRIPT)


def test_a_segment_may_use_compute_ms_within_what_is_left_of_the_total() -> None:
    """Each segment's CPU timer: compute_ms, or what is left of total_compute_ms for the run
    when that is less (never 0, which would not fire)."""
    assert Limits(compute_ms=500).segment_ms(10_000.0) == 500
    left = Limits(compute_ms=500, compute_left_ms=1200)
    assert left.segment_ms() == left.segment_ms(700.0) == 500
    assert left.segment_ms(900.4) == 299
    assert left.segment_ms(5000.0) == 1


def test_compute_left_ms_is_version_3_and_fits_an_older_runner_without_it() -> None:
    """A version 2 script cannot carry compute_left_ms (its runner would refuse the field);
    :func:`protocol.fit` gives a runner of version 2 the step without it, and leaves it to
    :func:`protocol.unfit` to refuse versions it cannot bridge."""
    limits = Limits(compute_left_ms=300)
    script = SCRIPT.model_copy(update={"limits": limits})
    assert script.version == protocol.VERSION == protocol.COMPUTE_LEFT_VERSION == 3
    line = protocol.encode(script.model_copy(update={"version": 2}))
    with pytest.raises(ProtocolError, match="compute_left_ms needs script version 3"):
        protocol.decode(line, ("script",))
    older = protocol.fit(script, 2)
    assert older.version == 2 and older.limits.compute_left_ms is None
    assert b"compute_left_ms" not in protocol.encode(older)  # not even as null
    assert protocol.unfit(older, 1, 2) is None
    assert older.limits.compute_ms == limits.compute_ms and script.limits is limits
    assert protocol.fit(script, 3) is script
    assert protocol.fit(script, 1) is script and protocol.unfit(script, 1, 1) is not None


def test_a_cpu_timer_that_ends_a_run_names_the_limit_it_was_armed_for() -> None:
    """SIGPROF ends a run at compute_ms or at what was left of total_compute_ms. The runner
    tells them apart by what was left when the last segment began, when it knows that (a
    fresh run, a live segment), never by the CPU it reads at the end, which lags the timer
    under load (280 ms read for a 300 ms timer in CI); for a replay, by that CPU only when
    compute_ms was the lesser at the start, within 10%."""
    import signal

    from runner._base import ProcessStats
    from runner._conversation import Outcome, step_from

    def ended(
        left: int | None, run_cpu_ms: float | None, segment_used_ms: float | None
    ) -> str | None:
        limits = Limits(compute_ms=1000, compute_left_ms=left)
        step = step_from(
            Outcome(),
            SCRIPT.model_copy(update={"limits": limits}),
            ProcessStats(cpu_ms=1000.0),
            run_cpu_ms=run_cpu_ms,
            segment_used_ms=segment_used_ms,
            term_signal=signal.SIGPROF,
            exit_code=None,
            killed_by_us=False,
        )
        assert step.limit is not None
        return step.limit.name

    # Known where the segment began: armed for the total iff it left less than compute_ms.
    assert ended(300, 250.0, 0.0) == ended(1500, 100.0, 600.0) == "total_compute_ms"
    assert ended(1500, 1499.0, 400.0) == ended(1000, 990.0, 0.0) == "compute_ms"
    # A replay: less left than compute_ms at the start, or the run's CPU at what was left.
    assert ended(300, 100.0, None) == ended(1500, 1400.0, None) == "total_compute_ms"
    assert ended(1500, 1200.0, None) == ended(1500, None, None) == "compute_ms"
    assert ended(None, 1000.0, 0.0) == "compute_ms"  # no total sent: compute_ms, as before


def test_a_run_meets_the_total_only_when_it_was_sent_what_is_left_of_it() -> None:
    """The runner's re-check of a ``ran``: a limit a run cannot meet under its script's
    limits is a lie (total_compute_ms only with compute_left_ms; compute_left_ms never)."""
    from runner._conversation import check_ran

    def met(name: str, **limits: int) -> str | None:
        error = ScriptError(name="LimitError", message="x")
        ran = Ran(outcome="failed", error=error, limit=LimitMet(name=name, message="x"))
        return check_ran(ran, SCRIPT.model_copy(update={"limits": Limits(**limits)}))

    assert met("compute_ms") is None and met("memory") is None
    assert met("total_compute_ms", compute_left_ms=5) is None
    assert "which is no limit of a run" in (met("total_compute_ms") or "")
    assert "which is no limit of a run" in (met("compute_left_ms", compute_left_ms=5) or "")
