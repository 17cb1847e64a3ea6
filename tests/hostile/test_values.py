"""Hostile values: data a script controls that the sandbox's Python must turn into a named,
catchable or script-ending error, never a crash ("SandboxCrash"). Run the three ways of the
``run`` fixture: a crash would show through the real confined process.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest

from sandbox import protocol
from sandbox.protocol import MAX_DEPTH, Record
from tests.hostile.conftest import NOW_MS


def nested(depth: int, inner: str = "1") -> str:
    """JS for an array value nested ``depth`` levels deep."""
    return f"(() => {{ let v = {inner}; for (let i = 0; i < {depth}; i++) v = [v]; return v; }})()"


def assert_crossed(ran: Any) -> None:
    """Whatever the run gave, it is a well-formed ``ran`` line both sides can read."""
    body = ran.model_dump(mode="python", exclude_unset=True, exclude={"process"})
    line = protocol.encode(protocol.Ran.model_validate(body))
    protocol.decode(line, ("ran",))


def test_arguments_at_the_depth_bound_are_sent(run: Any) -> None:
    """An argument object nesting exactly MAX_DEPTH levels is a new call."""
    ran = run(f"await tools.echo({{ v: {nested(MAX_DEPTH - 1)} }})")
    assert ran.outcome == "calls", ran.error
    assert_crossed(ran)


@pytest.mark.parametrize("depth", [MAX_DEPTH, 300, 2000])
def test_arguments_past_the_depth_bound_throw_at_the_call_site(run: Any, depth: int) -> None:
    """Deeper arguments are a catchable TypeError naming the bound, not a crash."""
    code = (
        f"try {{ await tools.echo({{ v: {nested(depth)} }}); }}\n"
        "catch (e) { return [e.name, e.message]; }"
    )
    ran = run(code)
    assert ran.outcome == "finished", ran.error
    name, message = ran.value
    assert name == "TypeError"
    assert f"deeper than {MAX_DEPTH} levels" in message and "MAX_DEPTH" in message
    assert_crossed(ran)


def test_tojson_cannot_smuggle_depth_past_the_check(run: Any) -> None:
    """A toJSON on Object.prototype does not change what is sent: the checked copy is."""
    code = (
        f"Object.prototype.toJSON = function () {{ return {nested(400)}; }};\n"
        "Array.prototype.toJSON = Object.prototype.toJSON;\n"
        "await tools.echo({ a: [1, { b: 2 }] });"
    )
    ran = run(code)
    assert ran.outcome == "calls", ran.error
    assert ran.calls[0].arguments == {"a": [1, {"b": 2}]}


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 300, 2000])
def test_a_returned_value_past_the_depth_bound_fails_the_run(run: Any, depth: int) -> None:
    """A returned value deeper than MAX_DEPTH fails the run with an error naming the bound."""
    ran = run(f"return {nested(depth)}")
    assert ran.outcome == "failed"
    assert ran.error.name == "TypeError"
    assert "the returned value nests deeper than 128 levels" in ran.error.message
    assert "MAX_DEPTH" in ran.error.message
    assert_crossed(ran)


def test_a_returned_value_at_the_depth_bound_is_returned(run: Any) -> None:
    ran = run(f"return {nested(MAX_DEPTH)}")
    assert ran.outcome == "finished", ran.error
    value = ran.value
    for _ in range(MAX_DEPTH):
        value = value[0]
    assert value == 1


def test_tojson_returning_deep_data_fails_the_run(run: Any) -> None:
    ran = run(f"return {{ toJSON() {{ return {nested(300)}; }} }}")
    assert ran.outcome == "failed"
    assert "MAX_DEPTH" in ran.error.message


def test_a_huge_line_number_in_a_stack(run: Any) -> None:
    """An Error whose stack the script set to name a 5,000-digit line fails the run as that
    error, at the line it was made at: what a script writes in `e.stack` names no line."""
    ran = run("const e = new Error('x');\ne.stack = '<input>:' + '9'.repeat(5000) + ':1';\nthrow e")
    assert ran.outcome == "failed"
    assert (ran.error.name, ran.error.message) == ("Error", "x")
    assert [x.line for x in ran.error.lines] == [1]
    assert_crossed(ran)


VALUES = {
    "-0": ("return -0", 0),
    "1e308": ("return 1e308", 1e308),
    "2**64": ("return 2 ** 64", 2.0**64),
    "a symbol key": ("return { [Symbol('s')]: 1, a: 2 }", {"a": 2}),
    "a lone surrogate key": ("return { ['\\ud800']: 1 }", {"\ufffd": 1}),
    "a Proxy": ("return new Proxy({ a: 1 }, {})", {"a": 1}),
}


@pytest.mark.parametrize("name", sorted(VALUES))
def test_odd_returned_values(run: Any, name: str) -> None:
    code, expected = VALUES[name]
    ran = run(code)
    assert ran.outcome == "finished", ran.error
    assert ran.value == expected
    assert_crossed(ran)


FAILING_VALUES = {
    "a BigInt": ("return 1n", "TypeError", "the returned value is not JSON data: it is a BigInt"),
    # The script's own code that throws as the value is read fails the run with its error,
    # at its line (it was "TypeError: the returned value is not JSON data: g", no line).
    "a getter that throws": (
        "return { get a() { throw new RangeError('g'); } }",
        "RangeError",
        "g",
    ),
    "a Proxy that throws": (
        "return new Proxy({}, { ownKeys() { throw new Error('p'); } })",
        "Error",
        "p",
    ),
    "toJSON that throws": ("return { toJSON() { throw new Error('t'); } }", "Error", "t"),
    "toJSON that throws null": ("return { toJSON() { throw null; } }", "Uncaught", "null"),
    # A built-in's data whose prototype was set to null: JSON wrote {} (or indexes) of it.
    "a Date of no prototype": (
        "return [Object.setPrototypeOf(new Date(0), null)]",
        "TypeError",
        "the returned value is not JSON data: value[0] is a Date, which JSON turns into {}",
    ),
    "bytes of no prototype": (
        "return { b: Object.setPrototypeOf(new Uint8Array(2), null) }",
        "TypeError",
        "the returned value is not JSON data: value.b is binary data",
    ),
    # JSON writes null for it: the model read null as the answer.
    "NaN": (
        "return { avg: [0 / 0] }",
        "TypeError",
        "the returned value is not JSON data: value.avg[0] is NaN",
    ),
}


@pytest.mark.parametrize("name", sorted(FAILING_VALUES))
def test_values_that_are_not_data_fail_the_run_by_name(run: Any, name: str) -> None:
    code, error, message = FAILING_VALUES[name]
    ran = run(code)
    assert ran.outcome == "failed"
    assert (ran.error.name, ran.error.message[: len(message)]) == (error, message)
    assert ran.limit is None
    if error != "TypeError":
        assert [line.line for line in ran.error.lines] == ([] if error == "Uncaught" else [1])
    assert_crossed(ran)


@pytest.mark.parametrize(
    "getter",
    ["get message() { throw new Error('g'); }", "get name() { throw new Error('g'); }"],
)
def test_a_thrown_error_that_cannot_be_read_names_its_line(run: Any, getter: str) -> None:
    """An error whose name or message throws as it is read is said so, at the line that threw
    it (it named no line)."""
    ran = run(f"class Odd extends Error {{ {getter} }}\nconst a = 1;\nthrow new Odd();")
    assert ran.outcome == "failed"
    assert ran.error.message == "an error that cannot be read: Error: g", ran.error
    assert [line.line for line in ran.error.lines] == [1, 3]


ARGUMENTS = {
    "NaN": ("{ a: NaN }", "the argument.a is NaN"),
    "Infinity": ("{ a: [Infinity] }", "the argument.a[0] is Infinity"),
    "a BigInt": ("{ a: 1n }", "is a BigInt"),
    "a symbol": ("{ a: Symbol() }", "is a symbol"),
    "a getter that throws": ("{ get a() { throw new Error('g'); } }", "g"),
    "a Proxy that throws": ("new Proxy({}, { ownKeys() { throw new Error('p'); } })", "p"),
    "a cycle": ("(() => { const o = {}; o.o = o; return o; })()", "refers to itself"),
    # Copied by its keys, it was sent as {}.
    "a Date of no prototype": (
        "{ d: Object.setPrototypeOf(new Date(0), null) }",
        "the argument.d is a Date",
    ),
    "a Map of no prototype": (
        "{ m: Object.setPrototypeOf(new Map([[1, 2]]), null) }",
        "the argument.m is a Map (pass Object.fromEntries(map))",
    ),
}


@pytest.mark.parametrize("name", sorted(ARGUMENTS))
def test_arguments_that_are_not_data_throw_at_the_call_site(run: Any, name: str) -> None:
    args, expected = ARGUMENTS[name]
    ran = run(f"try {{ await tools.echo({args}); }} catch (e) {{ return e.message; }}")
    assert ran.outcome == "finished", ran.error
    assert expected in ran.value


def test_odd_arguments_that_are_data(run: Any) -> None:
    """-0, huge numbers and lone surrogates in keys are sent as JSON has them."""
    ran = run("await tools.echo({ z: -0, h: 2 ** 64, ['\\udc00k']: 1e308 })")
    assert ran.outcome == "calls", ran.error
    assert ran.calls[0].arguments == {"z": 0, "h": 2.0**64, "\ufffdk": 1e308}


def test_a_recorded_result_past_the_depth_bound_is_refused_by_the_protocol() -> None:
    """A record deeper than MAX_DEPTH cannot be sent to the sandbox: a ProtocolError names it."""
    deep: Any = 1
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(ValueError, match="MAX_DEPTH"):
        Record(name="echo", arguments={}, result=deep)
    line = (
        b'{"script":{"id":"s","code":"1","clock":{"now_ms":0,"seed":0},"records":[{"name":"e",'
        b'"arguments":{},"result":' + b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1) + b"}]}}"
    )
    with pytest.raises(protocol.ProtocolError, match="MAX_DEPTH"):
        protocol.decode(line, ("script",))


def test_a_ran_line_past_the_depth_bound_is_refused() -> None:
    """A lying process's deep value or arguments: ProtocolError naming MAX_DEPTH."""
    deep = b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)
    for line in (
        b'{"ran":{"outcome":"finished","value":' + deep + b"}}",
        b'{"ran":{"outcome":"calls","calls":[{"name":"e","arguments":{"a":' + deep + b"}}]}}",
        b'{"ran":{"outcome":"finished","value":' + b"[" * 5000 + b"]" * 5000 + b"}}",
    ):
        with pytest.raises(protocol.ProtocolError, match="MAX_DEPTH"):
            protocol.decode(line, ("ran",))
    at_bound = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    ran = protocol.decode(b'{"ran":{"outcome":"finished","value":' + at_bound + b"}}", ("ran",))
    assert ran.returned


def test_orjson_write_depth_is_what_data_problem_assumes() -> None:
    """data_problem relies on orjson refusing exactly the 255th level; pin it."""
    for depth, ok in ((254, True), (255, False)):
        value: Any = 1
        for _ in range(depth):
            value = [value]
        if ok:
            protocol.orjson.dumps(value)
        else:
            with pytest.raises(protocol.orjson.JSONEncodeError, match="Recursion limit"):
                protocol.orjson.dumps(value)
    assert protocol.data_problem({"a": 2**70}) is not None
    assert protocol.data_problem({"a": [{"b": 1}]}) is None


def test_memory_limit_is_reported_as_the_memory_limit(run: Any) -> None:
    """A heap exhausted is the `memory` limit met, named LimitError, as compute_ms is."""
    ran = run("const a = []; for (;;) a.push('x'.repeat(1e6) + a.length);")
    assert ran.outcome == "failed"
    assert ran.limit is not None and ran.limit.name == "memory"
    assert ran.error.name == "LimitError"
    assert ran.error.message == ran.limit.message
    # The heap used is reported as the limit it reached, not what was left after the failure.
    assert ran.stats.heap_bytes >= protocol.Limits().memory


def test_a_deep_jsonl_line_is_a_catchable_file_error() -> None:
    """A jsonl file whose line nests past MAX_DEPTH: a catchable error naming the bound."""
    from sandbox.protocol import Clock, FileInfo, Script
    from sandbox.runtime import run_in_process

    data = b'{"a":1}\n' + b"[" * 300 + b"]" * 300 + b"\n"
    script = Script(
        id="f",
        code="const out = []; try { for await (const r of files.jsonl('d.jsonl')) out.push(r); }"
        " catch (e) { out.push(e.message); } return out;",
        files=[FileInfo(id="d.jsonl", mime="application/jsonl", size=len(data))],
        clock=Clock(now_ms=NOW_MS, seed=1),
    )
    ran = run_in_process(script, lambda _f, offset, length: data[offset : offset + length])
    assert ran.outcome == "finished", ran.error
    assert "d.jsonl line 2 nests deeper than 128 levels" in ran.value[-1]


PRINTED = r"""
class P { constructor() { this.x = 1; } }
const e = new TypeError("bad");
const cyc = {}; cyc.self = cyc;
console.log(1, -0, NaN, Infinity, 2n, true, null, undefined, "s", Symbol("q"), function named() {}, () => 1);
console.log({ a: [1, "x", { b: null }], d: new Date(0), bad: new Date(NaN) }, [undefined, () => 1]);
console.log(new Map([[1, { a: 2 }], ["k", [3]]]), new Set([1, "a", [2]]), e, new P(), cyc);
console.log({ toJSON() { return { t: 1 }; } }, Object.create(null), [[[[[[[[[[[1]]]]]]]]]]]);
console.log({ get g() { throw new Error("no"); } });
console.log(new Proxy({ a: 1 }, {}), [new Date(86400000)], { s: Symbol("x"), u: undefined, f() {} });
"""


def test_printing_script_values_reads_them_as_before(run: Any) -> None:
    """console.log of odd values (dates, cycles, proxies, getters that throw, toJSON, maps)
    reads them in prelude code and prints what it always printed (but -0, shown as Node.js
    shows it, which it printed as 0, an object's keys whose value is a symbol, undefined or
    a function, shown as Node.js shows them, which it left out, and an error's line, where
    Node.js prints its stack)."""
    ran = run(PRINTED)
    assert ran.outcome == "finished", ran.error
    assert ran.printed == (
        "1 -0 NaN Infinity 2n true null undefined s Symbol(q) [Function named] [Function]\n"
        '{"a":[1,"x",{"b":null}],"d":"1970-01-01T00:00:00.000Z","bad":Invalid Date} [undefined,[Function]]\n'
        'Map(2) {1 => {"a":2}, "k" => [3]} Set(3) {1, "a", [2]} TypeError: bad\n    at line 3 '
        '{"x":1} {"self":[Circular]}\n'
        '{"t":1} {} [[[[[[[[[[Array]]]]]]]]]]\n'
        "[unprintable: Error: no]\n"
        '{"a":1} ["1970-01-02T00:00:00.000Z"] {"s":Symbol(x),"u":undefined,"f":[Function f]}\n'
    )


def test_data_problem_from_many_threads_at_once() -> None:
    """The depth check reuses its nesting lists: each thread must have its own, or one
    thread's value could be checked in another's place (and a too-deep one pass)."""
    deep: Any = "x"
    for _ in range(protocol.MAX_DEPTH + 1):
        deep = [deep]
    wrong: list[str] = []

    def check(value: Any, fits: bool) -> None:
        for _ in range(3000):
            if (protocol.data_problem(value) is None) != fits:
                wrong.append(f"a value that {'fits' if fits else 'nests too deep'} was misjudged")
                return

    threads = [
        threading.Thread(target=check, args=(value, fits))
        for value, fits in [(deep, False), ({"a": [1, 2]}, True)] * 3
    ]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch between any two bytecodes: a race shows
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch)
    assert wrong == []
