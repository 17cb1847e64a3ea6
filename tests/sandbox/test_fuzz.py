"""Property-based tests of what the sandbox reads from outside: the script line (its parse in
``sandbox.protocol`` and what ``python -m sandbox`` does with it) and the records and script
values a run handles. No input may crash the reader or a run: a line is a Script or a
ProtocolError, a run ends in a ``ran`` both sides can read, and the reader's memory stays
within a bound of the line's size.
"""

from __future__ import annotations

import tracemalloc
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox import protocol
from sandbox.__main__ import script_from
from sandbox.protocol import Clock, Record, Script
from sandbox.runtime import run_in_process

# Derandomized and without an example database: every run tries the same inputs, so the
# suite stays deterministic (a failure found once is found every time).
FUZZ = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Each example of these runs a script: fewer of them keep the file fast.
FUZZ_RUNS = settings(FUZZ, max_examples=60)

# JSON data as a tool might give it: any nesting hypothesis reaches, odd strings (NUL, any
# plane; lone surrogates have no UTF-8 form) and numbers of every size orjson writes.
text = st.text(st.characters(codec="utf-8"), max_size=20)
integers = st.integers(-(2**63), 2**64 - 1)
scalars = st.none() | st.booleans() | integers | st.floats(allow_nan=False) | text
json_data = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=30,
)

VALID = protocol.encode(
    Script(
        id="s",
        code="const r = await tools.t({ a: 1 }); return r",
        records=[Record(name="t", arguments={"a": 1}, result={"ok": [1, "x"]})],
        tools=["t"],
        clock=Clock(now_ms=0, seed=1),
    )
)


def read(line: bytes) -> Script | None:
    """What the process makes of a line: a Script, or None for a ProtocolError."""
    try:
        return script_from(line)
    except protocol.ProtocolError as e:
        assert str(e)  # it names the problem
        return None


@FUZZ
@given(st.binary(max_size=400))
def test_any_bytes_are_a_script_or_a_protocol_error(line: bytes) -> None:
    read(line)
    read(line + b"\n")


@FUZZ
@given(st.data())
def test_a_valid_line_mutated_is_a_script_or_a_protocol_error(data: st.DataObject) -> None:
    line = bytearray(VALID)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(line) - 1))
        action = data.draw(st.sampled_from(["replace", "insert", "delete", "repeat"]))
        byte = data.draw(st.sampled_from(b'{}[]":,\\0123456789ex-+. \n\x00\xff\xc3'))
        if action == "replace":
            line[at] = byte
        elif action == "insert":
            line.insert(at, byte)
        elif action == "delete":
            del line[at]
        else:
            line[at:at] = line[at : at + 8] * data.draw(st.integers(1, 300))
    read(bytes(line))


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(
            ["version", "id", "language", "code", "records", "tools", "files", "clock", "limits"]
        ),
        json_data,
    )
)
def test_any_json_in_a_script_envelope_is_a_script_or_a_protocol_error(body: Any) -> None:
    for line in (orjson.dumps({"script": body}), orjson.dumps(body)):
        read(line + b"\n")


@FUZZ
@given(json_data, json_data, st.integers(0, 300))
def test_records_of_any_data_are_read_within_memory_bounds(
    arguments: Any, result: Any, depth: int
) -> None:
    """A script line whose records hold any data (nested up to 300 levels) reads as a Script
    whose data is within MAX_DEPTH, or fails naming the bound; its parse takes memory in
    proportion to the line."""
    result_json = b"[" * depth + orjson.dumps(result) + b"]" * depth
    record = b'{"name":"t","arguments":' + orjson.dumps({"a": arguments})
    record += b',"result":' + result_json + b"}"
    line = (
        b'{"script":{"id":"s","code":"1","clock":{"now_ms":0,"seed":0},"records":['
        + b",".join([record] * 3)
        + b"]}}\n"
    )
    tracemalloc.start()
    try:
        script = read(line)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * len(line) + 256 * 1024
    if script is not None:
        for r in script.records:
            assert protocol.data_problem(r.result) is None
            assert protocol.data_problem(r.arguments) is None


# Scripts that call a tool with data built from JSON and return what they get back.
@FUZZ_RUNS
@given(json_data, json_data, st.sampled_from(["t", "u"]), st.booleans())
def test_runs_on_any_records_end_in_a_readable_ran(
    arguments: Any, result: Any, recorded_name: str, error: bool
) -> None:
    """Replaying any recorded data (or a recorded error, or a divergence) ends in a ran line
    that both sides read, whatever the data holds."""
    args_js = orjson.dumps({"a": arguments}).decode()
    code = f"const r = await tools.t({args_js});\nconsole.log(r);\nreturn [r, {args_js}];"

    def step(records: list[Record]) -> protocol.Ran:
        script = Script(
            id="f", code=code, records=records, tools=["t", "u"], clock=Clock(now_ms=0, seed=1)
        )
        return run_in_process(script)

    # Step 1 asks for the call; its arguments are recorded as the engine records them.
    first = step([])
    assert first.outcome == "calls", first.error
    answer: dict[str, Any] = {"error": "tool failed"} if error else {"result": result}
    ran = step([Record(name=recorded_name, arguments=first.calls[0].arguments, **answer)])
    line = protocol.encode(ran)
    back = protocol.decode(line, ("ran",))
    assert back.outcome == ran.outcome
    if recorded_name == "u":
        assert ran.outcome == "failed" and ran.error is not None
        assert ran.error.name == "DivergenceError"
    elif error:
        assert ran.outcome == "failed" and ran.error is not None
        assert ran.error.message == "tool failed"


@FUZZ_RUNS
@given(st.text(max_size=60))
def test_any_source_text_ends_in_a_readable_ran(code: str) -> None:
    """Whatever text the body is (NULs, lone surrogates, braces, comment marks), the run
    ends in a ran line, and nothing of it ran outside its function."""
    script = Script(id="c", code=code, tools=["t"], clock=Clock(now_ms=0, seed=1))
    ran = run_in_process(script)
    protocol.decode(protocol.encode(ran), ("ran",))
