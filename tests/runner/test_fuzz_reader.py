"""Fuzzing the runner's reader of a process's lines (`ready`, `read`, `ran`).

Whatever bytes a process writes, the conversation ends with an Outcome (a checked ``ran``,
a named protocol fault, a refused reader, or the end of the stream), never an exception or
a wait past the end of its input, and the Step made from it is a failed step with a name or
the process's own report with its strings within their bounds.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from runner import TEXT_BOUNDS, ProcessStats, RunError, Step
from runner import _conversation as conv
from sandbox import protocol
from sandbox.protocol import Clock, FileInfo, Limits, Record, Script
from tests._fuzz import derandomized

# Derandomized, so the suite gives the same verdict on every run; no example database, so a
# run leaves no files behind.
FUZZ = derandomized(200)

SCRIPT = Script(
    id="fuzz",
    code="return 1",
    records=[Record(name="t", arguments={}, result=1)],
    tools=["t", "u"],
    files=[FileInfo(id="f.txt", mime="text/plain", size=5000)],
    clock=Clock(now_ms=0, seed=1),
    limits=Limits(calls=3, file_bytes=4096, call_arguments=200, step_arguments=300),
)


class _Bytes:
    """A FileReader that serves ``x`` bytes and counts them."""

    def __init__(self) -> None:
        self.served = 0

    async def read(self, file_id: str, offset: int, length: int) -> bytes:
        self.served += length
        return b"x" * length


def _converse(data: bytes) -> tuple[conv.Outcome, _Bytes, list[bytes]]:
    async def go() -> tuple[conv.Outcome, _Bytes, list[bytes]]:
        stream = asyncio.StreamReader(limit=1 << 16)
        stream.feed_data(data)
        stream.feed_eof()
        written: list[bytes] = []

        async def write(line: bytes) -> None:
            written.append(line)

        files = _Bytes()
        deadline = conv.Deadline.seconds(60)
        outcome = await conv.converse(conv.LineReader(stream), write, SCRIPT, files, deadline)
        return outcome, files, written

    return asyncio.run(go())


def _check(data: bytes) -> None:
    outcome, files, _ = _converse(data)
    # Finite input ends the conversation by itself: never by the deadline.
    assert not outcome.timed_out
    assert outcome.file_bytes == files.served <= SCRIPT.limits.file_bytes
    if outcome.ran is not None:
        assert conv.check_ran(outcome.ran, SCRIPT) is None
    step = conv.step_from(
        outcome, SCRIPT, ProcessStats(), term_signal=None, exit_code=0, killed_by_us=False
    )
    assert isinstance(step, Step)
    if step.outcome == "failed":
        assert step.error is not None
    if step.error is not None:
        assert len(step.error.name) <= TEXT_BOUNDS["name"] + 100
        assert len(step.error.message) <= TEXT_BOUNDS["message"] + 100
        assert len(step.error.lines) <= 8
    assert step.process is not None and step.process.file_bytes == files.served


@FUZZ
@given(st.binary(max_size=4096))
def test_arbitrary_bytes(data: bytes) -> None:
    _check(data)


@FUZZ
@given(st.lists(st.binary(max_size=300).map(lambda b: b.replace(b"\n", b"")), max_size=8))
def test_arbitrary_lines(lines: list[bytes]) -> None:
    _check(b"\n".join(lines) + b"\n")


# Adversarial JSON: values of every type, and messages shaped like the ones a runner reads.
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=40)
)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)
_ints = st.integers(min_value=-(2**40), max_value=2**40)
_names = st.sampled_from(["t", "u", "x", "", "f.txt", "g.txt"]) | st.text(max_size=20)
_call = st.fixed_dictionaries(
    {"name": _names, "arguments": st.dictionaries(st.text(max_size=5), _json, max_size=3)}
)
_error = st.fixed_dictionaries(
    {"name": st.text(max_size=30), "message": st.text(max_size=200)},
    optional={
        "lines": st.lists(
            st.fixed_dictionaries({"line": _ints, "text": st.text(max_size=50)}), max_size=12
        )
    },
)
_ran = st.fixed_dictionaries(
    {"outcome": st.sampled_from(["finished", "failed", "calls", "other"])},
    optional={
        "value": _json,
        "value_text": st.text(max_size=50),
        "value_bytes": _ints,
        "error": _error,
        "limit": st.fixed_dictionaries({"name": st.text(max_size=20), "message": st.text()}),
        "calls": st.lists(_call, max_size=5),
        "printed": st.text(max_size=100),
        "printed_bytes": _ints,
        "shown": st.lists(_names, max_size=6),
        "stats": st.dictionaries(
            st.sampled_from(["cpu_ms", "heap_bytes", "results_bytes", "file_bytes", "x"]),
            _ints | st.floats(),
        ),
        "extra": _json,
    },
)
_read = st.fixed_dictionaries(
    {"file": _names, "offset": _ints, "len": _ints},
    optional={"extra": _json},
)
_message: Any = (
    st.fixed_dictionaries({"ran": _ran})
    | st.fixed_dictionaries({"read": _read})
    | st.fixed_dictionaries({"ready": _json})
    | st.dictionaries(st.sampled_from(["ran", "read", "script", "bytes"]), _json, max_size=2)
    | _json
)


def _line(message: Any) -> bytes:
    # The standard library writes what orjson will not: integers past 64 bits, NaN.
    return json.dumps(message).encode() + b"\n"


@FUZZ
@given(st.lists(_message, min_size=1, max_size=6))
def test_adversarial_messages(messages: list[Any]) -> None:
    _check(b"".join(_line(m) for m in messages))


@FUZZ
@given(st.lists(_read, min_size=1, max_size=12))
def test_reads_stay_within_file_bytes(reads: list[dict[str, Any]]) -> None:
    """However a process asks, the runner serves at most ``file_bytes``."""
    data = b"".join(_line({"read": r}) for r in reads)
    _check(data)
    _, files, written = _converse(data)
    assert files.served <= SCRIPT.limits.file_bytes
    assert all(len(answer) <= protocol.MAX_SMALL_LINE + conv.MAX_READ for answer in written)


def test_a_line_past_its_bound_is_a_named_fault() -> None:
    """A line longer than ``ran`` may be is refused once it passes the bound, not buffered."""
    bound = conv.ran_bound(SCRIPT)
    outcome, _, _ = _converse(b"x" * (bound + 10))
    assert outcome.problem is not None and "over the bound" in outcome.problem


def _await_ready(data: bytes) -> object:
    async def go() -> object:
        stream = asyncio.StreamReader(limit=1 << 16)
        stream.feed_data(data)
        stream.feed_eof()
        try:
            return await conv.await_ready(conv.LineReader(stream), conv.Deadline.seconds(60))
        except (RunError, conv.UnconfinedError, protocol.ProtocolError) as e:
            return e

    return asyncio.run(go())


_ready = st.fixed_dictionaries(
    {},
    optional={
        "version": _ints | _json,
        "oldest": _ints | _json,
        "languages": st.lists(st.text(max_size=12), max_size=3) | _json,
        "extra": _json,
    },
)


@FUZZ
@given(
    st.binary(max_size=2048)
    | st.lists(
        st.fixed_dictionaries({"ready": _ready})
        | st.fixed_dictionaries({"unconfined": st.fixed_dictionaries({"error": _json})})
        | _message,
        min_size=1,
        max_size=3,
    ).map(lambda ms: b"".join(_line(m) for m in ms))
)
def test_the_ready_line(data: bytes) -> None:
    """The first line gives a Ready, or a named reason the process cannot run scripts."""
    answer = _await_ready(data)
    assert isinstance(answer, protocol.Ready | RunError | conv.UnconfinedError) or (
        isinstance(answer, protocol.ProtocolError) and str(answer)
    )
