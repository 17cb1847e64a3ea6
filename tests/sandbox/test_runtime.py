"""The script semantics of sandbox/runtime.py and sandbox/prelude.js, run in this process.

Replay, the JS world (tools, console, clock, randomness), error reports, bounded output and
the limits that apply inside one run. Nothing here is confined: see test_process_outputs.py
for the same outputs through a real sandbox process.
"""

from __future__ import annotations

import gc
import re
from typing import Any

import pytest

from sandbox import protocol, runtime
from sandbox.names import closest_names
from sandbox.protocol import PRINTED_HEAD, PRINTED_TAIL, VALUE_BOUND, Ran
from sandbox.replay import bare_ending
from tests.sandbox.conftest import (
    DAY_MS,
    NEVER_CALLED,
    NOW_MS,
    SEED,
    TOOLS,
    KiB,
    MiB,
    caught,
    rec,
    run,
    script,
    value,
)
from tests.sandbox.test_python import run as python_run


def roundtrip(ran: Ran) -> Ran:
    """The Ran as the runner would read it off the wire."""
    return protocol.decode(protocol.encode(ran), ("ran",))


def assert_limit(ran: Ran, name: str) -> None:
    """The run failed because limit ``name`` was met, and its message says what to raise."""
    assert ran.outcome == "failed", ran
    assert ran.limit is not None, ran.error
    assert ran.limit.name == name
    assert name in ran.limit.message
    # What the script can do, never the host's setting: the model cannot change it.
    assert ran.limit.message.endswith(protocol.REMEDIES[name])
    assert "[codemode.limits]" not in ran.limit.message
    assert ran.error is not None and ran.error.message.endswith(protocol.REMEDIES[name])


# ---------------------------------------------------------------------------------------------
# The spec's example, step by step
# ---------------------------------------------------------------------------------------------

STALE_PRS = """\
const prs = await tools.list_prs({ repo: "acme/api", state: "open" });
const stale = prs.filter((pr) => Date.parse(pr.updated_at) < Date.now() - 14 * 864e5);
console.log(`${stale.length} stale PRs`);
const reviews = await Promise.all(stale.map((pr) => tools.get_reviews({ number: pr.number })));
return stale.map((pr, i) => ({ number: pr.number, reviews: reviews[i].length }));"""

PRS = [
    {"number": 12, "updated_at": "2025-11-02T10:00:00Z"},  # two months before 2026-01-01
    {"number": 14, "updated_at": "2025-12-30T09:00:00Z"},  # two days before: not stale
    {"number": 15, "updated_at": "2025-12-10T17:30:00Z"},  # three weeks before
]
LIST_PRS = rec("list_prs", {"repo": "acme/api", "state": "open"}, result=PRS)
REVIEWS = [
    rec("get_reviews", {"number": 12}, result=[]),
    rec("get_reviews", {"number": 15}, result=[{"user": "ann"}, {"user": "bo"}]),
]


def test_stale_prs_step_1_asks_for_list_prs_only():
    """With an empty log the script stops at its first call, which is the only one reported."""
    ran = run(STALE_PRS)
    assert ran.outcome == "calls"
    assert [(c.name, c.arguments) for c in ran.calls] == [
        ("list_prs", {"repo": "acme/api", "state": "open"})
    ]
    assert ran.printed == ""
    assert not ran.returned


def test_stale_prs_step_2_asks_for_both_reviews_at_once_in_program_order():
    """With list_prs recorded, both get_reviews of the Promise.all come back in one step."""
    ran = run(STALE_PRS, [LIST_PRS])
    assert ran.outcome == "calls"
    assert [(c.name, c.arguments) for c in ran.calls] == [
        ("get_reviews", {"number": 12}),
        ("get_reviews", {"number": 15}),
    ]
    assert ran.printed == "2 stale PRs\n"


def test_stale_prs_step_3_finishes_with_the_spec_value_and_printed_text():
    """With every call recorded the script finishes; the value survives the wire as JSON."""
    ran = run(STALE_PRS, [LIST_PRS, *REVIEWS])
    assert ran.outcome == "finished", ran.error
    assert ran.calls == []
    assert ran.printed == "2 stale PRs\n"
    assert ran.printed_bytes == len("2 stale PRs\n")
    assert protocol.canonical_json(ran.value) == (
        b'[{"number":12,"reviews":0},{"number":15,"reviews":2}]'
    )
    assert roundtrip(ran).value == ran.value
    assert ran.stats.results_bytes > 0


def test_stale_prs_depends_on_the_fixed_clock():
    """The clock comes from the record: a month earlier, no PR is stale and no review is asked."""
    ran = run(STALE_PRS, [LIST_PRS], now_ms=NOW_MS - 60 * DAY_MS)
    assert ran.outcome == "finished"
    assert ran.value == []
    assert ran.printed == "0 stale PRs\n"


# ---------------------------------------------------------------------------------------------
# Calls: results, errors, unknown tools, argument checks
# ---------------------------------------------------------------------------------------------


def test_recorded_result_resolves_with_the_parsed_json():
    """A recorded result is the value of the call's promise, as JSON data."""
    result = {"a": [1, 2.5, "x", None, True], "b": {"c": {}}}
    assert value("return await tools.echo({ n: 1 })", [rec("echo", {"n": 1}, result=result)]) == (
        result
    )


def test_recorded_error_rejects_with_an_error_the_script_can_catch():
    """A recorded error rejects with an Error carrying the tool's message; catch sees it."""
    code = (
        "try { await tools.echo({}); return 'no throw'; }\n"
        "catch (e) { return [e instanceof Error, e.name, e.message]; }"
    )
    assert value(code, [rec("echo", error="rate limited, try later")]) == [
        True,
        "Error",
        "rate limited, try later",
    ]


def test_recorded_error_uncaught_fails_the_run_with_the_tools_message():
    """An uncaught tool error fails the run with the tool's message and the script's line."""
    ran = run("const x = 1;\nawait tools.echo({});", [rec("echo", error="no such repo")])
    assert ran.outcome == "failed"
    assert ran.error is not None
    assert (ran.error.name, ran.error.message) == ("Error", "no such repo")
    assert [(x.line, x.text) for x in ran.error.lines] == [(2, "await tools.echo({});")]
    assert ran.limit is None


def test_unknown_tool_throws_naming_the_closest_tools():
    """A call to a tool that does not exist throws, catchably, naming the closest names."""
    name, message = caught("await tools.list_pr({});")
    assert name == "Error"
    assert "tools.list_pr does not exist" in message
    assert "tools.list_prs" in message
    assert "tool_search" in message


def test_a_member_of_a_name_that_is_no_tool_says_so():
    """`tools.github.list_prs(...)`, the namespace written as an object: it was "not a
    function". A tool named with two underscores says how to write it; another name says
    it does not exist, with the closest tools. A name that is no tool keeps a function's own
    members, and `then`, so that awaiting it is what it was."""
    tools = ["github__list_prs", "github__get_reviews", "echo"]
    name, message = caught('await tools.github.list_prs({ repo: "a/b" });', tools=tools)
    assert (name, message) == (
        "Error",
        "tools.github.list_prs is not a tool: write tools.github__list_prs",
    )
    _, message = caught("await tools.echoo.run({});", tools=tools)
    assert message.startswith("tools.echoo does not exist; the closest tools are tools.echo")
    assert value(
        "return [typeof tools.nope, tools.nope.name, typeof tools.nope.call, "
        "(await tools.nope) === tools.nope]",
        tools=tools,
    ) == ["function", "nope", "function", True]


def test_unknown_tool_names_what_the_engine_would():
    """The sandbox's "closest tools" are the engine's (one rule, sandbox.names): a reworded
    name finds the tool by its words, not only by spelling."""
    tools = ["github__list_prs", "get_weather", "slack__post_message"]
    _, message = caught("await tools.prs_list({});", tools=tools)
    assert closest_names("prs_list", tools) == ["github__list_prs"]
    assert "the closest tools are tools.github__list_prs." in message


def test_unknown_tool_uncaught_fails_without_asking_for_a_call():
    """An unknown tool's error is thrown at the call site: nothing is sent to the host."""
    ran = run("await tools.get_usr({ id: 1 });")
    assert ran.outcome == "failed"
    assert ran.calls == []
    assert ran.error is not None and "tools.get_user" in ran.error.message


@pytest.mark.parametrize("tools", [["echo"], ["echo", "run_code"]])
def test_run_code_is_refused_inside_a_script(tools):
    """``tools.run_code`` throws (catchably), even when the host lists it among the tools."""
    name, message = caught("await tools.run_code({ code: 'return 1' });", tools=tools)
    assert name == "Error"
    assert "tools.run_code cannot be called from a script" in message
    assert "tools.run_code," not in message and not message.endswith("tools.run_code.")
    assert value("return 'run_code' in tools", tools=tools) is False


@pytest.mark.parametrize(
    ("argument", "given"),
    [("[1, 2]", "an array"), ("'abc'", "a string"), ("42", "42"), ("null", "null")],
)
def test_non_object_arguments_throw_a_type_error(argument, given):
    """A call takes one object of arguments; anything else is a TypeError, which rejects the
    call's promise, as an async function's own check would (no call is made)."""
    name, message = caught(f"await tools.echo({argument});")
    assert name == "TypeError"
    assert "tools.echo takes one object of arguments" in message
    assert message.endswith(f"it was given {given}")
    assert run(f"tools.echo({argument}).catch(() => 0); return 1").calls == []


def test_a_call_with_wrong_arguments_rejects_so_allsettled_and_catch_take_it() -> None:
    """A call with arguments JSON cannot carry (a NaN, a BigInt) or over a per-call limit
    is not made and its promise rejects: `Promise.allSettled` keeps the other calls'
    results and `.catch` runs (it threw at the call, failing the whole batch, and naming
    the call that went out before it as one "nothing awaited"). Unawaited, it is one line
    as any call that failed."""
    code = (
        "const rs = await Promise.allSettled([1, NaN, 3].map((v) => tools.echo({ v })));\n"
        "const caught = await tools.echo({ v: 10n }).catch((e) => e.name);\n"
        "return [rs.map((r) => r.status), rs[1].reason.message, caught];"
    )
    records = [rec("echo", {"v": 1}, result=1), rec("echo", {"v": 3}, result=3)]
    ran = run(code, records)
    assert ran.outcome == "finished", ran.error
    assert ran.value == [
        ["fulfilled", "rejected", "fulfilled"],
        "the argument.v is NaN, which JSON cannot carry",
        "TypeError",
    ]
    assert ran.printed == ""
    left = run("tools.echo({ v: NaN });\nreturn 1;")
    assert left.outcome == "finished" and left.calls == []
    assert left.printed.startswith(
        "line 1: Warning: tools.echo(...) failed and nothing awaited it: "
    )


def test_a_second_argument_is_a_type_error_not_dropped():
    """``tools.echo({...}, more)``: the second argument would be lost, so the call throws
    at its site, sending nothing (it used to run with the first alone)."""
    name, message = caught("await tools.echo({ a: 1 }, { b: 2 });")
    assert name == "TypeError"
    assert message.endswith("it was given 2 arguments")
    assert run("await tools.echo({ a: 1 }, 2);").calls == []


@pytest.mark.parametrize(
    ("expression", "shown"),
    [
        ("JSON.stringify(tools)", '["echo","get_reviews","list_prs"]'),
        ("`${tools}`", "[tools: echo, get_reviews, list_prs]"),
        ("String(tools)", "[tools: echo, get_reviews, list_prs]"),
        ("tools + ''", "[tools: echo, get_reviews, list_prs]"),
    ],
)
def test_tools_itself_shows_as_the_tools_names(expression, shown):
    """A model looking at ``tools`` (printing it, putting it in a string) sees the tools'
    names; each of these threw "tools.toString does not exist" (or toJSON, valueOf)."""
    assert value(f"return {expression};", tools=["list_prs", "echo", "get_reviews"]) == shown
    ran = run("console.log(tools);", tools=["list_prs", "echo", "get_reviews"])
    assert ran.printed == '["echo","get_reviews","list_prs"]\n'


def test_tools_named_like_object_methods_are_still_tools():
    """A tool named toString or toJSON is that tool, not the names."""
    ran = run("await tools.toString({}); await tools.toJSON({});", tools=["toString", "toJSON"])
    assert [c.name for c in ran.calls] == ["toString"]


@pytest.mark.parametrize(
    ("expression", "path", "what"),
    [
        ("{ f: () => 1 }", "the argument.f", "a function"),
        ("{ when: new Date() }", "the argument.when", "a Date"),
        ("{ m: new Map([[1, 2]]) }", "the argument.m", "a Map (pass Object.fromEntries(map))"),
        ("{ s: new Set([1]) }", "the argument.s", "a Set (pass [...set])"),
        ("{ p: new (class Point { constructor() { this.x = 1 } })() }", "the argument.p", "Point"),
        (
            "(() => { const o = { a: {} }; o.a.back = o; return { o }; })()",
            "the argument.o.a.back",
            "refers to itself",
        ),
        ("{ n: NaN }", "the argument.n", "NaN"),
        ("{ deep: { xs: [1, Infinity] } }", "the argument.deep.xs[1]", "Infinity"),
        ("{ big: 10n }", "the argument.big", "BigInt"),
        ("{ xs: [1, undefined, 3] }", "the argument.xs[1]", "undefined"),
        ("{ s: Symbol('x') }", "the argument.s", "symbol"),
        # A generator read "a non-plain object", an iterator "a Iterator", an error "a Error".
        ("{ it: (function* () {})() }", "the argument.it", "is an iterator (pass [...iterator])"),
        ("{ it: [1].values() }", "the argument.it", "is an iterator (pass [...iterator])"),
        ("{ it: (async function* () {})() }", "the argument.it", "is an async generator (collect"),
        ("{ e: new Error('x') }", "the argument.e", "is an Error;"),
        (
            "{ q: new URLSearchParams('a=1') }",
            "the argument.q",
            "is a URLSearchParams (pass Object.fromEntries(params), or String(params))",
        ),
        # A key that is no name is quoted, as a cycle's path has it ("the argument.b c").
        ("{ 'b c': [NaN] }", 'the argument["b c"][0]', "NaN"),
        ("{ a: { '0': [1, 2n] } }", 'the argument.a["0"][1]', "BigInt"),
        # An object met twice is named where it is met first.
        ("(() => { const s = new Set(); return { a: [1, s, s] }; })()", "the argument.a[1]", "Set"),
    ],
)
def test_non_plain_data_throws_a_type_error_naming_the_path(expression, path, what):
    """Arguments must be plain JSON data; the TypeError names where the bad value is."""
    name, message = caught(f"await tools.echo({expression});")
    assert name == "TypeError"
    assert message.startswith(path + " ")
    assert what in message


@pytest.mark.parametrize(
    "nested",
    [
        "let v = {};\nfor (let i = 0; i < 200; i++) v = { a: v };",
        "const v = { a: { b: { c: { d: { e: { f: { g: { h: { i: { when: new Date(0) } } } } } } } } } };",
    ],
)
def test_a_refused_argument_deep_in_the_data_names_the_calls_line(nested: str) -> None:
    """A call refused for a value deep in its arguments fails at the script's line that made
    it (the refusal was made more frames deep than a stack keeps, and named no line)."""
    ran = run(f"{nested}\nconst a = 1;\nawait tools.echo({{ value: v }});")
    assert ran.error is not None and ran.error.name == "TypeError", ran
    assert [x.line for x in ran.error.lines] == [nested.count("\n") + 3], ran.error
    # A getter of the script's that throws inside them is its own error, at its own line.
    ran = run(
        "const v = { a: { get b() { throw new RangeError('mine'); } } };\nawait tools.echo(v);"
    )
    assert ran.error is not None and (ran.error.name, ran.error.message) == ("RangeError", "mine")
    assert [x.line for x in ran.error.lines] == [1, 2]


def test_bad_argument_does_not_make_the_call():
    """A call refused at the call site is not sent, and does not take a position in the log."""
    code = "try { tools.echo({ f: () => 1 }); } catch (e) {}\nreturn await tools.echo({ n: 1 });"
    assert value(code, [rec("echo", {"n": 1}, result="first")]) == "first"


def test_undefined_properties_are_left_out_and_no_argument_sends_an_empty_object():
    """``{a: 1, b: undefined}`` sends ``{a: 1}``; ``tools.x()``, ``tools.x(undefined)`` send {}."""
    ran = run("tools.echo({ a: 1, b: undefined }); tools.search(); tools.get_user(undefined);")
    assert ran.outcome == "calls"
    assert [(c.name, c.arguments) for c in ran.calls] == [
        ("echo", {"a": 1}),
        ("search", {}),
        ("get_user", {}),
    ]


def test_shared_subobjects_and_null_prototype_objects_are_plain_data():
    """Only cycles are refused: the same object twice, or Object.create(null), is fine."""
    code = (
        "const x = { k: 1 }; const o = Object.create(null); o.v = 2;\ntools.echo({ x, y: [x], o });"
    )
    ran = run(code)
    assert ran.outcome == "calls", ran.error
    assert ran.calls[0].arguments == {"x": {"k": 1}, "y": [{"k": 1}], "o": {"v": 2}}


# ---------------------------------------------------------------------------------------------
# Replay: divergence, unanswered calls, every call is made, stuck scripts
# ---------------------------------------------------------------------------------------------


def test_divergence_in_arguments_names_the_position_and_both_calls():
    """Call i with other arguments than record i fails, naming i, the record and the new call."""
    records = [rec("echo", {"n": 1}, result=1), rec("echo", {"n": 2}, result=2)]
    ran = run("await tools.echo({ n: 1 });\nawait tools.echo({ n: 3 });", records)
    assert ran.outcome == "failed"
    assert ran.error is not None
    assert ran.error.name == "DivergenceError"
    assert "call 2 " in ran.error.message
    assert 'tools.echo({"n":2})' in ran.error.message
    assert 'tools.echo({"n":3})' in ran.error.message
    assert ran.limit is None


def test_divergence_in_name_fails():
    """Call i to another tool than record i fails the same way."""
    ran = run("await tools.search({ q: 'x' });", [rec("echo", {"q": "x"}, result=1)])
    assert ran.outcome == "failed"
    assert ran.error is not None and ran.error.name == "DivergenceError"
    assert "call 1 " in ran.error.message
    assert 'tools.echo({"q":"x"})' in ran.error.message
    assert 'tools.search({"q":"x"})' in ran.error.message


def test_key_order_in_arguments_does_not_matter():
    """Arguments compare as canonical JSON: other key orders, at any depth, are the same call."""
    record = rec("echo", {"a": 1, "b": [{"y": 2, "x": {"q": 1, "p": 0}}]}, result="same")
    assert value(
        "return await tools.echo({ b: [{ x: { p: 0, q: 1 }, y: 2 }], a: 1 });", [record]
    ) == ("same")


def test_divergence_cannot_be_caught():
    """A try/catch around the diverging call does not swallow it: the run ends failed."""
    code = (
        "try { await tools.echo({ n: 2 }); } catch (e) { console.log('caught', e); }\n"
        "return 'swallowed';"
    )
    ran = run(code, [rec("echo", {"n": 1}, result=1)])
    assert ran.outcome == "failed"
    assert ran.error is not None and ran.error.name == "DivergenceError"
    assert "caught" not in ran.printed


def test_divergence_keeps_what_was_printed_before_it():
    """The failed run still reports what the script printed up to the divergence."""
    ran = run("console.log('before');\nawait tools.echo({ n: 2 });", [rec("echo", {"n": 1})])
    assert ran.outcome == "failed"
    assert ran.printed == "before\n"


@pytest.mark.parametrize("version", [1, protocol.LIVE_VERSION])
def test_divergence_names_the_script_lines_that_made_the_call(version: int) -> None:
    """A divergence names the script's lines that made the call that differs, innermost
    first, as any failure does: it named none, and a model had to guess which of its calls
    was steered by what."""
    records = [rec("echo", {"n": 1}, result=1), rec("echo", {"n": 2}, result=2)]
    code = "function f(n) {\n  return tools.echo({ n });\n}\nawait f(1);\nawait f(3);"
    ran = runtime.run_in_process(script(code, records).model_copy(update={"version": version}))
    assert ran.error is not None and ran.error.name == "DivergenceError", ran
    assert [(x.line, x.text) for x in ran.error.lines] == [
        (2, "  return tools.echo({ n });"),
        (5, "await f(3);"),
    ]


# A run that ends before making all the log's calls: how it ended, and the words that say so.
_ENDED_EARLY = {
    "return 'early';": "returned",
    "await new Promise(() => {});": "stopped, waiting on nothing it could complete,",
}


@pytest.mark.parametrize("version", [1, protocol.LIVE_VERSION])
@pytest.mark.parametrize("ending", sorted(_ENDED_EARLY))
def test_a_run_that_ends_before_the_logs_calls_diverges(ending: str, version: int) -> None:
    """A run that returns or is stuck while the log holds calls it never made (an earlier
    run went on past that point and the host ran them) fails as a divergence that names the
    first call it left out; it finished with the calls lost, their effects unreported."""
    records = [rec("echo", {"n": n}, result=n) for n in (1, 2, 3)]
    code = f"console.log('first');\nawait tools.echo({{ n: 1 }});\n{ending}"
    ran = runtime.run_in_process(script(code, records).model_copy(update={"version": version}))
    assert ran.outcome == "failed", ran
    assert ran.error is not None and ran.error.name == "DivergenceError"
    assert ran.error.message.startswith(
        'call 2 is missing: the script\'s earlier run made tools.echo({"n":2}), this run '
        f"{_ENDED_EARLY[ending]} after 1 call of the log's 3."
    )
    assert ran.limit is None and ran.printed == "first\n"
    # Version 1 settles recorded calls as they are made: what else may have steered it.
    assert ("protocol version 1" in ran.error.message) == (version == 1)


def test_a_run_that_returns_early_is_told_as_diverged_only() -> None:
    """A run that returns before the log's later calls ends on the divergence alone: the
    checks of a finished run (its value, a warning of a value never returned) are not run
    for an ending that is not one, and do not add their lines to the failure's."""
    records = [rec("echo", {"n": n}, result=n) for n in (1, 2)]
    ran = run("await tools.echo({ n: 1 });\nconst summary = { a: 1 };", records)
    assert ran.error is not None and ran.error.name == "DivergenceError", ran
    assert ran.printed == "", ran.printed


def test_a_limit_or_an_error_before_the_logs_calls_is_told_as_it_is() -> None:
    """A run stopped by a limit, or failed by the script's own error, before the log's later
    calls ends on that limit or error, not as a divergence: it fails either way."""
    records = [rec("echo", {"n": 1}, result="x" * 2000), rec("echo", {"n": 2}, result=2)]
    ran = run("await tools.echo({ n: 1 });\nawait tools.echo({ n: 2 });", records, results=1000)
    assert_limit(ran, "results")
    ran = run("await tools.echo({ n: 1 });\nthrow new TypeError('early');", records)
    assert ran.error is not None and (ran.error.name, ran.error.message) == ("TypeError", "early")
    # An error of the script's own named as the run's when it waits on nothing.
    own = (
        "class StuckError extends Error { constructor(m) { super(m); this.name = 'StuckError'; } }"
        "\nawait tools.echo({ n: 1 });\nthrow new StuckError('my own');"
    )
    ran = run(own, records)
    assert ran.error is not None and (ran.error.name, ran.error.message) == (
        "StuckError",
        "my own",
    ), ran.error


def test_unanswered_call_is_not_an_error_the_script_can_catch():
    """A new call never settles: neither catch nor finally runs, and the step reports the call."""
    code = (
        "try { await tools.echo({ n: 1 }); console.log('resolved'); }\n"
        "catch (e) { console.log('caught'); }\n"
        "finally { console.log('finally'); }\n"
        "return 'done';"
    )
    ran = run(code)
    assert ran.outcome == "calls"
    assert [c.arguments for c in ran.calls] == [{"n": 1}]
    assert ran.printed == ""
    assert not ran.returned


def test_unanswered_call_then_handlers_never_run():
    """``.then``/``.catch`` handlers on a new call do not run in this run."""
    ran = run("tools.echo({}).then(() => console.log('then'), () => console.log('catch'));")
    assert ran.outcome == "calls"
    assert ran.printed == ""


def test_a_call_made_and_not_awaited_is_still_made():
    """Every call a script makes is made: returning with a call unanswered reports the call."""
    ran = run("tools.echo({ n: 1 });\nreturn 'early';")
    assert ran.outcome == "calls"
    assert [(c.name, c.arguments) for c in ran.calls] == [("echo", {"n": 1})]
    assert not ran.returned
    # With the call recorded, the same script finishes.
    assert value("tools.echo({ n: 1 });\nreturn 'early';", [rec("echo", {"n": 1}, result=0)]) == (
        "early"
    )


def test_a_script_that_throws_after_a_new_call_reports_the_call():
    """A call the script made before it threw is still made."""
    ran = run("tools.echo({ n: 1 });\nthrow new Error('later');")
    assert ran.outcome == "calls"
    assert [c.arguments for c in ran.calls] == [{"n": 1}]


def test_calls_of_one_run_are_reported_together_in_program_order():
    """Calls issued before the script awaits all go out in one step, in the order made."""
    code = """\
const a = tools.search({ q: "a" });
const inner = (async () => { return await tools.get_user({ id: 7 }); })();
const b = tools.echo({ n: 2 });
await Promise.all([b, inner, a]);"""
    ran = run(code)
    assert ran.outcome == "calls"
    assert [(c.name, c.arguments) for c in ran.calls] == [
        ("search", {"q": "a"}),
        ("get_user", {"id": 7}),
        ("echo", {"n": 2}),
    ]


def test_new_calls_follow_the_recorded_ones():
    """With two of three parallel calls recorded, the step asks only for the third."""
    code = "return await Promise.all([1, 2, 3].map((n) => tools.echo({ n })));"
    records = [rec("echo", {"n": 1}, result=10), rec("echo", {"n": 2}, result=20)]
    ran = run(code, records)
    assert ran.outcome == "calls"
    assert [c.arguments for c in ran.calls] == [{"n": 3}]
    assert value(code, [*records, rec("echo", {"n": 3}, result=30)]) == [10, 20, 30]


def test_stuck_script_fails_saying_it_can_never_complete():
    """A script that awaits a promise nothing can resolve fails instead of hanging."""
    ran = run("console.log('waiting');\nawait new Promise(() => {});\nreturn 1;")
    assert ran.outcome == "failed"
    assert ran.error is not None
    assert "can never complete" in ran.error.message
    assert ran.printed == "waiting\n"
    assert ran.limit is None


def test_stuck_after_recorded_calls_is_still_stuck():
    """Recorded calls settle; a never-resolved promise after them is still a stuck script."""
    ran = run("await tools.echo({});\nawait new Promise(() => {});", [rec("echo", result=1)])
    assert ran.outcome == "failed"
    assert ran.error is not None and "can never complete" in ran.error.message


# ---------------------------------------------------------------------------------------------
# Determinism: Date, Math.random, performance
# ---------------------------------------------------------------------------------------------

CLOCK_PROBE = """\
const d = new Date();
return {
  now: Date.now(), date: d.getTime(), iso: d.toISOString(), text: Date(),
  random: [Math.random(), Math.random(), Math.random(), Math.random()],
  perf: performance.now(),
};"""


def test_date_and_random_are_the_same_on_every_run():
    """Two runs with the same clock see the same time, date text and random sequence."""
    first, second = value(CLOCK_PROBE), value(CLOCK_PROBE)
    assert first == second
    assert first["now"] == first["date"] == NOW_MS
    assert first["iso"] == "2026-01-01T00:00:00.000Z"
    assert first["text"] == value("return new Date(Date.now()).toString()")
    assert all(0 <= x < 1 for x in first["random"])
    assert len(set(first["random"])) == 4
    assert first["perf"] == 0


def test_another_seed_gives_another_random_sequence():
    """Math.random follows the record's seed."""
    first = value(CLOCK_PROBE)["random"]
    other = value(CLOCK_PROBE, seed=SEED + 1)["random"]
    assert first != other
    assert value(CLOCK_PROBE, seed=SEED + 1)["random"] == other
    # The seed's 64 bits all count: the engine draws 63.
    high = value(CLOCK_PROBE, seed=SEED + 2**40)["random"]
    assert high not in (first, other)
    uuids = "return [crypto.randomUUID(), crypto.randomUUID()]"
    assert value(uuids, seed=SEED) != value(uuids, seed=SEED + 2**62)


def test_another_clock_gives_another_time():
    """Date follows the record's now_ms."""
    later = value(CLOCK_PROBE, now_ms=NOW_MS + 1234)
    assert later["now"] == later["date"] == NOW_MS + 1234


def test_date_still_works_as_a_date():
    """Explicit dates, Date.parse/UTC, instanceof and subclasses behave as usual."""
    code = """\
class Stamp extends Date {}
return [
  new Date(2020, 0, 1).getFullYear(), new Date(0).toISOString(),
  Date.parse("2020-01-01T00:00:00Z"), Date.UTC(2020, 0, 1),
  new Date() instanceof Date, new Date(5).constructor === Date, typeof Date(),
  new Stamp().getTime(), new Stamp() instanceof Date, Date.name,
];"""
    assert value(code) == [
        2020,
        "1970-01-01T00:00:00.000Z",
        1577836800000,
        1577836800000,
        True,
        True,
        "string",
        NOW_MS,
        True,
        "Date",
    ]


def test_the_real_clock_is_not_reachable_through_date():
    """Neither Date's prototype chain nor its constructor property hands out the real clock."""
    code = """\
const times = [];
for (let C = Date; C; C = Object.getPrototypeOf(C)) {
  if (Object.prototype.hasOwnProperty.call(C, "now")) times.push(C.now());
}
times.push(new (new Date().constructor)().getTime(), Date.prototype.constructor.now());
return times;"""
    times = value(code)
    assert times and all(t == NOW_MS for t in times)


def test_weakref_and_finalization_registry_are_absent():
    """Garbage-collection timing differs between runs, so the script cannot observe it."""
    assert value("return [typeof WeakRef, typeof FinalizationRegistry]") == [
        "undefined",
        "undefined",
    ]


def test_host_functions_are_not_left_on_the_global_object():
    """The prelude removes its host bindings before the script runs."""
    assert (
        value("return [typeof __cm_call, typeof __cm_print, typeof __cm_done]") == ["undefined"] * 3
    )


# ---------------------------------------------------------------------------------------------
# console
# ---------------------------------------------------------------------------------------------


def test_console_formats_values():
    """Strings as themselves, data as JSON, Map/Set, Errors as "Name: message" and the line
    they were made at, cycles marked."""
    code = r"""
console.log("plain text", "two");
console.info({ a: 1, b: [1, "x", null] });
console.warn(undefined, null, 1.5, true, 10n);
console.error(new TypeError("bad input"));
console.log(new Map([["k", { v: 1 }]]), new Set([1, "x"]));
const o = { a: 1 }; o.self = o; console.log(o);
console.debug([1, [2, [3]]], function named() {});
console.log();
"""
    assert run(code).printed == (
        "plain text two\n"
        '{"a":1,"b":[1,"x",null]}\n'
        "undefined null 1.5 true 10n\n"
        "TypeError: bad input\n    at line 5\n"
        'Map(1) {"k" => {"v":1}} Set(2) {1, "x"}\n'
        '{"a":1,"self":[Circular]}\n'
        "[1,[2,[3]]] [Function named]\n"
        "\n"
    )


def test_an_errors_cause_and_an_aggregates_errors_are_shown() -> None:
    """An error's cause and an AggregateError's errors follow it, as Node.js shows them
    less their stacks, in console output and in the error a script fails with (they were
    left out, and with them what went wrong first); a cycle of causes is marked, and a
    cause that cannot be read leaves the error as it was."""
    code = r"""
const inner = new TypeError("no such sku");
console.log(new Error("outer", { cause: inner }));
console.log(new AggregateError([new Error("x1"), inner], "many"));
console.log({ e: new Error("wrapped", { cause: { code: 404 } }) }, new Error("plain"));
const loop = new Error("loop"); loop.cause = loop; console.log(loop);
const bad = new Error("bad"); Object.defineProperty(bad, "cause", { get() { throw new Error("no"); } });
try { throw bad; } catch (e) { console.log(e.message); }
throw new Error("sync failed", { cause: inner });"""
    ran = run(code)
    assert ran.printed == (
        "Error: outer { [cause]: TypeError: no such sku }\n    at line 3\n"
        "AggregateError: many { [errors]: [Error: x1,TypeError: no such sku] }\n    at line 4\n"
        '{"e":Error: wrapped { [cause]: {"code":404} }} Error: plain\n    at line 5\n'
        "Error: loop { [cause]: [Circular] }\n    at line 6\n"
        "bad\n"
    )
    assert ran.error is not None
    assert (ran.error.name, ran.error.message) == (
        "Error",
        "sync failed { [cause]: TypeError: no such sku }",
    )
    assert [x.line for x in ran.error.lines] == [9]
    unreadable = run(
        "const e = new Error('bad'); Object.defineProperty(e, 'cause', "
        "{ get() { throw 1; } }); throw e;"
    )
    assert unreadable.error is not None and unreadable.error.message == "bad"


def test_console_shows_what_json_would_make_empty_as_node_does() -> None:
    """A RegExp, binary data, an iterator and a weak collection print as Node.js shows them,
    where JSON writes {} or an object of indexes (`console.log(/\\d+/g)` printed `{}`, and a
    TextEncoder's bytes `{"0":104,"1":105}`)."""
    code = r"""
function* g() {}
async function* ag() {}
console.log(/\d+/g, new RegExp("a/b", "u"));
console.log(new TextEncoder().encode("hi"), new BigInt64Array([5n]), new Float64Array(1));
console.log(new ArrayBuffer(4), new DataView(new ArrayBuffer(2)), new WeakMap(), new WeakSet());
console.log(g(), [1].values(), new Map().keys(), "ab".matchAll(/a/g), ag());
console.log({ re: /x/i, it: g() });
console.log(Object.assign(g(), { n: 1 }), { lastIndex: 0, source: "x" });
console.log(new URL("https://a.example/?q=1&q=2").searchParams, { p: new URLSearchParams() });
"""
    assert run(code).printed == (
        "/\\d+/g /a\\/b/u\n"
        "Uint8Array(2) [104,105] BigInt64Array(1) [5n] Float64Array(1) [0]\n"
        "ArrayBuffer { byteLength: 4 } DataView { byteLength: 2 } WeakMap { <items unknown> } "
        "WeakSet { <items unknown> }\n"
        "Object [Generator] {} Object [Array Iterator] {} Object [Map Iterator] {} "
        "Object [RegExp String Iterator] {} Object [AsyncGenerator] {}\n"
        '{"re":/x/i,"it":Object [Generator] {}}\n'
        # with keys of its own, an object is its keys; an object is no RegExp for its names
        '{"n":1} {"lastIndex":0,"source":"x"}\n'
        'URLSearchParams {"q" => "1", "q" => "2"} {"p":URLSearchParams {}}\n'
    )


def test_console_shows_a_boxed_primitive_as_node_does() -> None:
    """A boxed primitive prints as Node.js shows it, its value in brackets: it printed {},
    and a String the object of its indexes (`{"0":"a","1":"b"}`). Its kind's valueOf is the
    engine's own, whatever the script put on the prototype; an object that only inherits
    from Number.prototype is no number."""
    code = (
        "String.prototype.valueOf = () => 'forged';\n"
        "console.log(new Number(1), new String('ab'), new Boolean(false), Object(5n), "
        "Object(Symbol('s')), new Number(-0));\n"
        "console.log([new Number(2)], { s: new String('x') }, Object.create(Number.prototype));\n"
        "console.log('%s %d %j', new Number(3), new Number(4), new String('y'));"
    )
    assert run(code).printed == (
        '[Number: 1] [String: "ab"] [Boolean: false] [BigInt: 5n] [Symbol: Symbol(s)] '
        "[Number: -0]\n"
        '[[Number: 2]] {"s":[String: "x"]} {}\n'
        '[Number: 3] 4 "y"\n'
    )


def test_console_shows_a_boxed_primitives_own_keys_after_it() -> None:
    """A boxed primitive's own keys follow it, as an object's are printed (Node.js:
    `[Number: 1] { note: 'kept?' }`): they were left out, `[Number: 1]`. A String box's
    indexes, its text, are not among them; a cycle through the box is [Circular]; a String
    box longer than a printed value's budget shows no keys (nor makes a key per character)."""
    code = (
        "const n = new Number(1); n.note = 'kept?'; n.self = n;\n"
        "const s = new String('ab'); s[5] = 'five'; s.extra = [1, 2];\n"
        "console.log(n, s, new Number(2));\n"
        "console.log({ price: Object.assign(new Number(9.5), { currency: 'EUR' }) });"
    )
    assert run(code).printed == (
        '[Number: 1] {"note":"kept?","self":[Circular]} [String: "ab"] {"5":"five","extra":[1,2]} '
        "[Number: 2]\n"
        '{"price":[Number: 9.5] {"currency":"EUR"}}\n'
    )
    printed = run(
        "const big = new String('x'.repeat(1e7)); big.extra = 1; console.log(big);"
    ).printed
    assert printed.startswith('[String: "xxx') and "extra" not in printed


def test_console_shows_a_subclass_or_bare_boxed_primitive_as_node_does() -> None:
    """A boxed primitive of a subclass, or whose prototype is null, prints as Node.js shows
    it, `[Number (Money): 5]`, `[Number (null prototype): 7]`: they printed {} (only a box
    whose prototype was its kind's own was told), whatever the script later names Number.
    structuredClone refuses a Symbol box, as the HTML spec has it (it was copied as {})."""
    code = (
        "class Money extends Number {}\n"
        "const m = new Money(5); m.currency = 'EUR';\n"
        "const bare = Object.setPrototypeOf(new Number(7), null);\n"
        "Number = function () {};\n"
        "console.log(m, bare, Object.setPrototypeOf(Object(Symbol('s')), null));\n"
        "console.log(Object.create(Money.prototype), structuredClone(new Money(3)));\n"
        "try { structuredClone(Object(Symbol('x'))); } catch (e) { console.log(e.name); }\n"
        # A String's indexes are keys: one of no prototype printed as an object of them.
        "console.log(Object.setPrototypeOf(new String('ab'), null),"
        " Object.assign(Object.create(null), { 0: 'a' }));"
    )
    assert run(code).printed == (
        '[Number (Money): 5] {"currency":"EUR"} [Number (null prototype): 7] '
        "[Symbol (null prototype): Symbol(s)]\n"
        "{} [Number: 3]\n"
        "DataCloneError\n"
        '[String (null prototype): "ab"] {"0":"a"}\n'
    )


def test_a_printed_error_is_followed_by_the_line_it_was_made_at() -> None:
    """An error printed as an argument of its own (a `catch` that logs and goes on, a pattern
    models write) is followed by the script's line it was made at, where Node.js prints its
    stack: the first of the script's frames (a helper's throw, not its caller; the call a
    failed tool call was made at; the script's line under an error the engine throws), not a
    frame of the engine's, nor what the script set `e.stack` to. No line for an object that
    only inherits from Error, or for an error inside another value. The same after
    TypeScript's types are stripped."""
    code = """const items = [{ r: {} }];
function check(x) {
  return x.r.reviews.length;
}
for (const item of items) {
  try { check(item); } catch (err) { console.log("failed", err); }
}
try { await tools.echo({ a: 1 }); } catch (e) { console.error(e); }
const p = tools.echo({ a: 2 });
try { p.filter(Boolean); } catch (e) { console.log(e); }
const own = new Error("own"); own.stack = "at x (<input>:99999999:1)"; console.log(own);
console.log(Object.create(Error.prototype), { inside: new Error("inside") });
console.group("g"); console.warn("%s:", "fmt", new RangeError("left over")); console.groupEnd();
console.dir(new TypeError("dir"));
await p;"""
    records = [rec("echo", {"a": 1}, error="no such sku"), rec("echo", {"a": 2}, result=1)]
    expected = (
        "failed TypeError: cannot read property 'length' of undefined\n    at line 3\n"
        "Error: no such sku\n    at line 8\n"
        'TypeError: tools.echo(...) gives a promise, not its result: write "await '
        'tools.echo(...)"\n    at line 10\n'
        "Error: own\n    at line 11\n"
        'Error {"inside":Error: inside}\n'
        "g\n  fmt: RangeError: left over\n      at line 13\n"
        "TypeError: dir\n    at line 14\n"
    )
    ran = run(code, records)
    assert ran.outcome == "finished", ran.error
    assert ran.printed == expected
    typed = run(
        "interface Item { r: { reviews?: string[] } }\n"
        "const item: Item = { r: {} };\n"
        "try { item.r.reviews!.length; } catch (e: unknown) { console.log(e); }"
    )
    assert typed.printed == "TypeError: cannot read property 'length' of undefined\n    at line 3\n"


def test_console_shows_an_objects_undefined_functions_and_symbols() -> None:
    """A key whose value is undefined (a misspelled field read: `c.emial`), a function or a
    symbol is shown, as Node.js shows it: JSON leaves it out, and printed `{}` hid the typo."""
    code = (
        "const c = { name: 'Cy' };\n"
        "console.log({ name: c.name, mail: c.emial, f() {}, s: Symbol('k') }, [undefined, 1]);"
    )
    assert run(code).printed == (
        '{"name":"Cy","mail":undefined,"f":[Function f],"s":Symbol(k)} [undefined,1]\n'
    )


def test_console_survives_lone_surrogates_and_unprintable_values():
    """Lone surrogates become U+FFFD; a value whose formatting throws is marked, not fatal."""
    code = r"""
console.log("a\ud800b", "\udc00");
console.log({ toJSON() { throw new Error("nope"); } });
const { proxy, revoke } = Proxy.revocable({}, {});
revoke();
console.log(proxy);
console.dir(proxy);
return "ok";"""
    ran = run(code)
    assert ran.outcome == "finished", ran.error
    # A revoked Proxy, whose prototype cannot be read: printing it failed the script.
    revoked = "[unprintable: TypeError: revoked proxy]\n"
    assert ran.printed == "a\ufffdb \ufffd\n[unprintable: Error: nope]\n" + revoked * 2
    assert roundtrip(ran).printed == ran.printed


def test_console_cannot_be_replaced_to_hide_output():
    """console is frozen; printing still reaches the host."""
    ran = run("try { console.log = () => {}; } catch (e) {}\nconsole.log('still here');")
    assert ran.printed == "still here\n"


# ---------------------------------------------------------------------------------------------
# Bounded output: printed text, returned values, thrown values
# ---------------------------------------------------------------------------------------------

NOTE_ROOM = 200  # the "[... cut ...]" note between head and tail


def test_printing_100_logs_of_1_mib_keeps_head_and_tail_and_counts_all():
    """100 MiB printed in 100 logs: head and tail kept, the true total counted, line small."""
    code = """\
const chunk = "x".repeat(1024 * 1024 - 6);
console.log("FIRST " + chunk);
for (let i = 0; i < 98; i++) console.log(chunk + "      ");
console.log(chunk + " LAST!");"""
    ran = run(code)
    assert ran.outcome == "finished"
    assert ran.printed_bytes == 100 * (MiB + 1)
    assert len(ran.printed) <= PRINTED_HEAD + PRINTED_TAIL + NOTE_ROOM
    assert ran.printed.startswith("FIRST xxx")
    assert ran.printed.endswith("x LAST!\n")
    assert re.search(r"\[\.\.\. [\d.,]+ MiB of printed output cut \.\.\.\]", ran.printed)
    line = protocol.encode(ran)
    assert len(line) < 200 * KiB
    assert roundtrip(ran).printed == ran.printed


def test_printing_one_100_mb_log_is_bounded():
    """One console.log of 100 MB: printed text bounded, printed_bytes the true total."""
    ran = run("console.log('y'.repeat(100e6)); return 'ok';", memory=1024 * MiB)
    assert ran.outcome == "finished", ran.error
    assert ran.value == "ok"
    assert ran.printed_bytes == 100_000_001
    assert len(ran.printed) <= PRINTED_HEAD + PRINTED_TAIL + NOTE_ROOM
    assert "of printed output cut" in ran.printed
    assert len(protocol.encode(ran)) < 200 * KiB


@pytest.mark.parametrize(
    ("value", "rest"),
    [
        ("Array.from({ length: 1e6 }, (_, i) => i % 10)", r",\.\.\. (\d+) more items\]"),
        (
            "Object.fromEntries(Array.from({ length: 1e5 }, (_, i) => ['k' + i, { v: [i] }]))",
            r",\.\.\. (\d+) more keys\}",
        ),
        (
            "new Map(Array.from({ length: 1e5 }, (_, i) => [i, 'v' + i]))",
            r", \.\.\. (\d+) more entries\}",
        ),
        ("new Set(Array.from({ length: 1e5 }, (_, i) => i))", r", \.\.\. (\d+) more items\}"),
        # Holes, a billion of them: formatted whole, the text alone was past any heap.
        ("Array(1e9)", r",\.\.\. (\d+) more items\]"),
    ],
)
def test_logging_a_big_value_formats_only_what_printed_text_keeps(value: str, rest: str):
    """console.log of a big array, object, Map or Set stops formatting it once its text has
    half of what printed text keeps (PRINTED_HEAD + PRINTED_TAIL); the rest is a count. Formatted
    whole, an object of 300,000 small entries took about 9 s of the script's compute_ms,
    for text that the printed head and tail then threw away."""
    ran = run(f"console.log({value}); return 1;")
    assert ran.outcome == "finished", ran.error
    assert "of printed output cut" not in ran.printed
    left = re.search(rest + "\n$", ran.printed)
    assert left and int(left.group(1)) > 0
    assert (PRINTED_HEAD + PRINTED_TAIL) // 2 <= ran.printed_bytes <= PRINTED_HEAD + PRINTED_TAIL


def test_logging_small_values_is_unchanged_by_the_bound():
    ran = run("console.log([1, , 3], { m: new Map([[1, new Set([2])]]) }, [], {}, Array(2));")
    assert ran.printed == '[1,,3] {"m":Map(1) {1 => Set(1) {2}}} [] {} [,]\n'


def test_output_past_the_head_but_within_head_and_tail_is_whole():
    """Printed text longer than the head but within head and tail is all kept: it said
    "[... 0 bytes of printed output cut ...]" in its middle."""
    ran = run("console.log('x'.repeat(100000)); console.log('end');")
    assert ran.printed == "x" * 100000 + "\nend\n"


def test_short_output_is_not_cut():
    """Output under the bound is kept whole, with no note."""
    ran = run("for (let i = 0; i < 1000; i++) console.log('line ' + i);")
    assert ran.printed == "".join(f"line {i}\n" for i in range(1000))
    assert "cut" not in ran.printed
    assert ran.printed_bytes == len(ran.printed)


def test_returning_a_100_mb_string_is_cut_in_the_middle():
    """A huge returned string comes back as its head and tail with a note, and its size."""
    ran = run("return 'A' + 'z'.repeat(100e6 - 2) + 'B';", memory=1024 * MiB)
    assert ran.outcome == "finished", ran.error
    assert ran.returned
    assert ran.value is None
    assert ran.value_bytes == 100_000_000
    assert ran.value_text is not None
    assert ran.value_text.startswith("Azzz")
    assert ran.value_text.endswith("zzzB")
    assert "characters of the returned string cut" in ran.value_text
    assert len(ran.value_text) <= VALUE_BOUND + NOTE_ROOM
    line = protocol.encode(ran)
    assert len(line) < VALUE_BOUND + 64 * KiB
    back = roundtrip(ran)
    assert back.returned and back.value_text == ran.value_text


def test_a_returned_string_s_cut_counts_what_it_cut_in_astral_characters_too():
    """The note counts the cut in the string's own length (UTF-16 units, as ``.length``):
    a string of astral characters (two units each) was said to have lost its length less
    the code points kept, which counted neither."""
    ran = run("const s = 'a' + '\\u{1F600}'.repeat(200000); return s;")
    assert ran.outcome == "finished", ran.error
    assert ran.value_text is not None
    left_out = 1 + 2 * 200_000 - VALUE_BOUND  # .length less the two halves kept
    assert f"[... {left_out:,} characters of the returned string cut ...]" in ran.value_text


def test_a_returned_string_past_the_bound_only_in_json_comes_as_itself():
    """A string within VALUE_BOUND characters whose JSON is past it in bytes (a CSV's escaped
    newlines) comes as itself, as a longer one does: it came as its JSON, cut, and the model
    read the CSV as one line of \\n."""
    csv = "a,b,c\n" * 40_000
    ran = run("return 'a,b,c\\n'.repeat(40000);")
    assert ran.outcome == "finished", ran.error
    assert ran.value_text == csv
    assert ran.value_bytes == len(csv) + 40_000 + 2  # each newline escaped, and the quotes


def test_returning_a_large_object_is_cut_as_json():
    """A returned value whose JSON is over VALUE_BOUND comes back as cut JSON text."""
    code = "return Array.from({ length: 100000 }, (_, i) => ({ i, s: 'abcdefghij' }));"
    ran = run(code)
    assert ran.outcome == "finished"
    assert ran.returned
    assert ran.value_text is not None
    assert ran.value_text.startswith('[{"i":0,"s":"abcdefghij"},')
    assert ran.value_text.endswith('{"i":99999,"s":"abcdefghij"}]')
    assert "of the returned value cut" in ran.value_text
    full = len(b'{"i":,"s":"abcdefghij"}') * 100000 + sum(len(str(i)) for i in range(100000))
    assert ran.value_bytes == full + 99999 + 2  # commas and brackets
    assert len(protocol.encode(ran)) < VALUE_BOUND + 64 * KiB


def test_a_value_just_under_the_bound_is_sent_whole():
    """A value whose JSON fits in VALUE_BOUND is sent as data, not as text."""
    text = "q" * (VALUE_BOUND - 2)
    ran = run(f"return 'q'.repeat({len(text)});")
    assert ran.value == text
    assert ran.value_text is None


def test_returning_undefined_is_no_value():
    """``return`` / ``return undefined`` / no return: finished with no value."""
    for code in ("return;", "return undefined;", "const x = 1;"):
        ran = run(code)
        assert ran.outcome == "finished"
        assert not ran.returned
        assert not roundtrip(ran).returned


def test_returning_null_is_a_value():
    """``return null`` is a value (None), unlike undefined, and stays one over the wire."""
    ran = run("return null;")
    assert ran.outcome == "finished"
    assert ran.returned
    assert ran.value is None
    assert b'"value":null' in protocol.encode(ran)
    assert roundtrip(ran).returned


def test_returned_values_are_json_data():
    """Dates become their ISO text, undefined members drop out, -0 is 0."""
    code = "return { when: new Date(0), gone: undefined, xs: [undefined, -0, 1e300] };"
    assert value(code) == {"when": "1970-01-01T00:00:00.000Z", "xs": [None, 0, 1e300]}


CYCLE = (
    "the returned value is not JSON data: {0} an object that holds it (a cycle, which JSON "
    "cannot carry); return a copy without that reference"
)


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ("const o = { a: 1 };\no.o = o;\nreturn o;", "value.o refers back to"),
        (
            "const o = { a: { 'b c': [1] } };\no.a['b c'].push(o.a);\nreturn o;",
            'value.a["b c"][1] refers back to',
        ),
        ("const xs = [[]];\nxs[0].push(xs);\nreturn { xs };", "value.xs[0][0] refers back to"),
        # A cycle JSON meets through a toJSON of the script's: not found by the walk.
        ("const o = { toJSON() { const c = {}; c.c = c; return c; } };\nreturn o;", "it holds"),
    ],
)
def test_returning_a_cyclic_object_fails_naming_where(code: str, said: str) -> None:
    """A value that refers back to an object holding it fails the run, saying where the cycle
    closes (JSON's own "circular reference" said neither where nor what to do)."""
    ran = run(code)
    assert ran.outcome == "failed"
    assert ran.error is not None and ran.error.name == "TypeError"
    assert ran.error.message == CYCLE.format(said)
    assert roundtrip(ran).error == ran.error


def test_returning_a_bigint_fails_naming_json():
    """BigInt has no JSON form: the run fails and says the value is not JSON data."""
    ran = run("return 10n;")
    assert ran.outcome == "failed"
    assert ran.error is not None and "not JSON data" in ran.error.message


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (
            'return new Map([["a", 1]]);',
            "it is a Map, which JSON turns into {}; return Object.fromEntries(map), or [...map] "
            "for its entries",
        ),
        ("return new Map();", "it is a Map, which JSON turns into {}"),
        (
            "return { ok: {}, counts: [1, new Set([2])] };",
            "value.counts[1] is a Set, which JSON turns into {}; return [...set]",
        ),
        (
            "try { null.x; } catch (e) { e.tool = 't'; return { error: e }; }",
            "value.error is an Error, which JSON turns into {} (its message is lost); "
            "return error.message, or String(error)",
        ),
        ("return [/a+/];", "value[0] is a RegExp, which JSON turns into {}"),
        (
            "return { total: 10n };",
            "value.total is a BigInt, which JSON cannot carry; return String(n), or "
            "Number(n) if it fits",
        ),
        ("return { b: new Uint8Array([1, 2]) };", "value.b is binary data"),
        ("return new ArrayBuffer(2);", "it is binary data"),
        ("class Empty {}\nreturn { e: new Empty() };", "value.e is an Empty, which"),
        (
            "return new URL('https://a.example/?q=1').searchParams;",
            "it is a URLSearchParams, which JSON turns into {}; return Object.fromEntries(params), "
            "or String(params) for its query",
        ),
        # JSON writes null for these: the model read null, as if there were no value.
        (
            "const total = 10;\nreturn { avg: total / 0, n: [NaN] };",
            "value.avg is Infinity, which JSON writes as null; return null where there "
            "is no number, or check the arithmetic that made it",
        ),
        ("return [1, 0 / 0];", "value[1] is NaN, which JSON writes as null"),
        ("return NaN;", "it is NaN, which JSON writes as null"),
        # "an URLSearchParams", "an User" before; "an Update" stays
        ("class User {}\nreturn [new User()];", "value[0] is a User, which"),
        ("class Update {}\nreturn [new Update()];", "value[0] is an Update, which"),
        (
            "return { it: [1].values() };",
            "value.it is an iterator (a generator's, or of keys(), values(), entries(), "
            "matchAll()), which JSON turns into {}; return [...iterator]",
        ),
        # A generator read "an object of no class ...; return the plain data it holds".
        ("function* ids() { yield 1; }\nreturn ids();", "it is an iterator (a generator's"),
        (
            "async function* pages() { yield 1; }\nreturn { pages: pages() };",
            "value.pages is an async generator, which JSON turns into {}; collect its "
            "values into an array (`for await (const x of gen) items.push(x)`) and return that",
        ),
        (
            "let v = 1;\nfor (let i = 0; i < 100000; i++) v = [v];\nreturn v;",
            "it nests deeper than 128 levels of objects and arrays",
        ),
        # JSON gives nothing for these: the run ended as if the script returned nothing.
        (
            "const total = () => 3;\nreturn total;",
            "it is a function, which JSON drops; call it (`return f()`), or return the data it "
            "makes",
        ),
        ("return async function f() {};", "it is a function, which JSON drops"),
        ('return Symbol("s");', "it is a Symbol, which JSON drops; return its description"),
    ],
)
def test_a_returned_map_or_set_fails_instead_of_reading_as_empty(code: str, said: str) -> None:
    """JSON.stringify makes {} of a Map or a Set (an Error, a RegExp, an iterator, an object of
    a class with no fields; an object of indexes of binary data): returned, the model read an
    empty answer.
    The run fails saying what to return instead (a Map with a toJSON of the script's, and an
    empty object of its own, are data as before)."""
    ran = run(code)
    assert ran.outcome == "failed" and ran.error is not None and ran.error.name == "TypeError"
    assert ran.error.message.startswith("the returned value is not JSON data: " + said)
    assert value("return { a: {}, b: [new Date(0)] };") == {
        "a": {},
        "b": ["1970-01-01T00:00:00.000Z"],
    }
    # an object of the script's class with fields, and one with no prototype, are data
    code = "class P { constructor() { this.x = 1; } }\nreturn [new P(), Object.create(null)];"
    assert value(code) == [{"x": 1}, {}]
    code = 'Map.prototype.toJSON = function () { return [...this]; };\nreturn new Map([["a", 1]]);'
    assert value(code) == [["a", 1]]
    # A function inside data is left out, as JSON has it; returning nothing stays nothing.
    assert value("return { a: 1, f() { return 2; } };") == {"a": 1}
    # A boxed number, truth value or text is the value it boxes, as JSON has it (a Number
    # and a Boolean failed as objects "which JSON turns into {}").
    code = "return { n: new Number(3), b: new Boolean(false), s: new String('a') };"
    assert value(code) == {"n": 3, "b": False, "s": "a"}
    assert run("return;").outcome == "finished"


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ("return { a: [1, 2, NaN] };", "value.a[2] is NaN, which JSON writes as null"),
        ("return { x: { 'b c': [10n] } };", 'value.x["b c"][0] is a BigInt'),
        ("return [[0, [1 / 0]]];", "value[0][1][0] is Infinity"),
        ("return { '': NaN };", 'value[""] is NaN'),
        # An object met twice is named where JSON meets it first.
        ("const o = {};\nreturn { a: [o, o, { z: new Set() }] };", "value.a[2].z is a Set"),
        ("return { p: [Promise.resolve(1)] };", "value.p[0] is a promise, not data"),
        # A toJSON's own data is not in the returned value: its key alone names it.
        ("return { d: { toJSON() { return { s: NaN }; } } };", 'at key "s" it holds NaN'),
    ],
)
def test_a_returned_value_that_is_not_data_is_named_by_its_whole_path(code: str, said: str) -> None:
    """What JSON cannot carry inside the returned value is named by its path from the top, as
    a cycle and a tool's argument are (it said `at key "2"` alone, which of many)."""
    ran = run(code)
    assert ran.outcome == "failed" and ran.error is not None and ran.error.name == "TypeError"
    assert ran.error.message.startswith("the returned value is not JSON data: " + said)


def test_lone_surrogates_in_returned_values_do_not_crash():
    """A returned string or key with a lone surrogate finishes, with U+FFFD in its place."""
    ran = run(r"return { ['k\ud800']: 'v\udc00', s: 'ok \\ud800 stays text' };")
    assert ran.outcome == "finished", ran.error
    assert ran.value == {"k\ufffd": "v\ufffd", "s": "ok \\ud800 stays text"}
    assert roundtrip(ran).value == ran.value


def test_lone_surrogates_in_a_cut_string_do_not_crash():
    """A huge string cut inside a surrogate pair still comes back as well-formed text."""
    ran = run("return 'a' + '\\u{1F600}'.repeat(200000);")
    assert ran.outcome == "finished", ran.error
    assert ran.value_text is not None
    protocol.encode(ran)


def test_lone_surrogates_in_arguments_do_not_crash():
    """Arguments with lone surrogates are sent with U+FFFD, and replay against that record."""
    ran = run(r"await tools.echo({ s: 'a\ud800', ['\udc00']: 1 });")
    assert ran.outcome == "calls", ran.error
    assert ran.calls[0].arguments == {"s": "a\ufffd", "\ufffd": 1}
    code = r"return await tools.echo({ s: 'a\ud800', ['\udc00']: 1 });"
    assert value(code, [rec("echo", {"s": "a\ufffd", "\ufffd": 1}, result=5)]) == 5


@pytest.mark.parametrize(
    ("thrown", "message"),
    [("42", "42"), ("'str'", "str"), ("{ a: 1 }", '{"a":1}'), ("undefined", "undefined")],
)
def test_throwing_a_non_error_is_a_well_formed_failure(thrown, message):
    """A thrown non-Error value fails the run with its text as the message."""
    ran = run(f"throw {thrown};")
    assert ran.outcome == "failed"
    assert ran.error is not None
    assert ran.error.message == message
    assert roundtrip(ran).error == ran.error


def test_throwing_null_is_a_well_formed_failure():
    """``throw null`` fails the run with a bounded, well-formed error.

    QuickJS throws null when it cannot allocate the out-of-memory error, so the sandbox reads
    a thrown null as the memory limit unless the script writes one itself; a null thrown
    from a variable is read as the limit.
    """
    ran = run("throw null;")
    assert ran.outcome == "failed"
    assert ran.error is not None and ran.error.message == "null" and ran.limit is None
    assert roundtrip(ran).error == ran.error
    hidden = run("const nothing = null;\nthrow nothing;")
    assert hidden.limit is not None and hidden.limit.name == "memory"
    assert roundtrip(hidden).error == hidden.error


@pytest.mark.parametrize(
    "code",
    [
        "throw new Error('m'.repeat(1e7));",
        "throw 's'.repeat(1e7);",
        "throw { big: 's'.repeat(1e7) };",
        "const e = new Error('m'); e.name = 'N'.repeat(1e7); throw e;",
    ],
)
def test_a_huge_error_is_bounded(code):
    """An error with a 10 MB message or name is cut, so the ran line stays small."""
    ran = run(code)
    assert ran.outcome == "failed"
    assert ran.error is not None
    assert len(ran.error.message) <= 20 * KiB
    assert len(ran.error.name) <= 300
    assert "characters cut" in ran.error.message + ran.error.name
    assert len(protocol.encode(ran)) < 64 * KiB


# ---------------------------------------------------------------------------------------------
# Error lines
# ---------------------------------------------------------------------------------------------


def test_runtime_error_reports_its_line_and_text():
    """A TypeError on line 3 is reported with line 3 and its text, numbered as written."""
    ran = run("const a = 1;\nconst b = null;\nconst c = b.missing;\nreturn c;")
    assert ran.outcome == "failed"
    assert ran.error is not None
    assert ran.error.name == "TypeError"
    assert [(x.line, x.text) for x in ran.error.lines] == [(3, "const c = b.missing;")]


@pytest.mark.parametrize("lf", ["\r", "\r\n", "\u2028", "\u2029"])
def test_a_line_is_the_line_javascript_counts(lf: str) -> None:
    """QuickJS ends a line at any of JavaScript's line terminators: the text shown for a
    line number is that line's (a lone CR showed the line after it, or none)."""
    ran = run(f"const t = 2;{lf}const u = 3;\nnull.x;\nconst v = 'not this one';")
    assert ran.error is not None
    assert [(x.line, x.text) for x in ran.error.lines] == [(3, "null.x;")]


def test_syntax_error_reports_its_line():
    """A SyntaxError names the line the parser stopped on."""
    ran = run("const a = 1;\nconst b = 2;\nconst c = ;\nreturn a;")
    assert ran.outcome == "failed"
    assert ran.error is not None
    assert ran.error.name == "SyntaxError"
    assert [x.line for x in ran.error.lines] == [3]
    assert ran.error.lines[0].text == "const c = ;"


@pytest.mark.parametrize("pair", ["()", "[]"])
def test_source_nested_past_the_parsers_stack_says_so(pair: str) -> None:
    """A script whose brackets nest a hundred thousand deep failed with "RangeError: Maximum
    call stack size exceeded", which said neither that it was the parse nor what to do."""
    ran = run("return " + pair[0] * 100_000 + "1" + pair[1] * 100_000)
    assert ran.outcome == "failed" and ran.error is not None
    assert (ran.error.name, ran.error.message) == (
        "SyntaxError",
        "the script nests too deeply to parse (parentheses, brackets, braces or operators "
        "inside one another, thousands deep); flatten it",
    )
    # A recursion that runs out of stack is the script's RangeError, at its line, as before.
    ran = run("function f() { return f(); }\nreturn f();")
    assert ran.error is not None and ran.error.name == "RangeError"
    assert [line.line for line in ran.error.lines][:1] == [1]


@pytest.mark.parametrize(
    ("code", "message", "line"),
    [
        ("const a = 1;\nconst b = 2;\nreturn /(abc/.test(a);", "expecting ')'", 3),
        (
            "const half = 4 / 2 / 1;\nconst re = /[a-z]+/g;\nconst bad = /[z-a]/;",
            "invalid class range",
            3,
        ),
        ("const a = 1;\nreturn /a/gg;", "invalid regular expression flags", 2),
        (
            "class A {\n  #x = 1;\n  get() { return this.#y; }\n}\nreturn new A().get();",
            "undefined private field '#y'",
            3,
        ),
    ],
)
def test_a_syntax_error_quickjs_places_nowhere_names_its_line(
    code: str, message: str, line: int
) -> None:
    """A regex literal that is no regex, or a private name no class declares, names its line
    (QuickJS gives these SyntaxErrors no position: they named no line at all)."""
    ran = run(code)
    assert ran.error is not None and (ran.error.name, ran.error.message) == ("SyntaxError", message)
    assert [x.line for x in ran.error.lines] == [line], ran.error


@pytest.mark.parametrize(
    ("code", "line"),
    [
        ('const a = 1;\nthrow "no such user";', 2),
        ("const id = 7;\nconst a = 1;\nif (id) {\n  throw `no user ${id}: ${a}`;\n}", 4),
        ("const a = 1;\nif (a) throw '';", 2),
        ("const a = 1;\nthrow 404;", 2),
        # Not told apart, or not thrown by a throw of the script's: no line.
        ('function f() { throw "same"; }\nfunction g() { throw "same"; }\ng();', None),
        ('const a = 1;\nawait Promise.reject("x");\nthrow "x";', None),
        ("const a = 1;\nthrow { code: 5 };", None),
    ],
)
def test_a_thrown_text_or_number_names_the_throw_of_it(code: str, line: int | None) -> None:
    """A value that is no Error carries no stack: the one `throw` of the script's that gives
    that text or number names its line (it named none)."""
    ran = run(code)
    assert ran.error is not None and ran.error.name == "Uncaught", ran
    assert [x.line for x in ran.error.lines] == ([] if line is None else [line]), ran.error


@pytest.mark.parametrize(
    ("code", "name"),
    [
        ('const a = 1;\natob("@@@");', "InvalidCharacterError"),
        ('const a = 1;\nthrow new DOMException("stopped", "AbortError");', "AbortError"),
    ],
)
def test_a_dom_exception_names_its_line(code: str, name: str) -> None:
    """A DOMException, atob's or the script's own, names the line it was made at (it keeps
    its frames as a value of its own, which the stack accessor does not give: it named no
    line), and printed, is followed by it."""
    ran = run(code)
    assert ran.error is not None and ran.error.name == name, ran
    assert [x.line for x in ran.error.lines] == [2]
    printed = run(f"try {{\n{code}\n}} catch (e) {{ console.log(e); }}").printed
    assert printed.endswith("\n    at line 3\n"), printed


def test_atobs_error_stack_reads_as_any_errors() -> None:
    """atob's and btoa's DOMException reads `e.stack` as any error's: "Name: message", then
    the script's frames (it was QuickJS's frames alone, the engine's among them: `at
    __cm_main (<input>:2:7)`, `at begin (<input>:1851:17)`)."""
    for call in ('atob("@@@")', 'btoa("€")'):
        stack = value(f"const a = 1;\ntry {{ {call}; }} catch (e) {{ return e.stack; }}")
        assert stack.startswith("InvalidCharacterError: "), stack
        assert stack.endswith("\n    at <input>:2:7"), stack
        assert "__cm_main" not in stack and "begin" not in stack, stack


def test_a_dom_exception_the_script_makes_reads_e_stack_as_any_errors() -> None:
    """A DOMException the script makes (`new DOMException(...)`, or of a class extending it)
    reads `e.stack` as any error's, "Name: message" then the script's frames (it read QuickJS's
    frames alone, the engine's among them: `at begin (<input>:301887:17)`); the built-ins the
    engine called are not in a stack either (atob's read `at apply (native)`). The constructor
    still reads as the native one."""
    code = """\
class Stop extends DOMException { constructor(m) { super(m, "DataError"); } }
function abort() { return new DOMException("stopped", "AbortError"); }
let bad; try { atob("@@@"); } catch (e) { bad = e; }
const made = [abort(), new Stop("no")];
return [...made.map((e) => e.stack), bad.stack, made[0] instanceof DOMException,
  bad instanceof DOMException, bad.constructor === DOMException, made[1] instanceof Stop,
  DOMException.name, DOMException.ABORT_ERR, made[0].code];"""
    assert value(code) == [
        "AbortError: stopped\n    at abort (<input>:2:31)\n    at <input>:4:15",
        "DataError: no\n    at Stop (<input>:1:59)\n    at <input>:4:28",
        "InvalidCharacterError: The string to be decoded is not correctly encoded\n"
        "    at <input>:3:16",
        True, True, True, True, "DOMException", 20, 20,
    ]  # fmt: skip


def test_nested_function_error_reports_the_lines_of_its_stack():
    """An error deep in the script's functions reports each of its frames, innermost first."""
    code = """\
function outer(x) {
  return inner(x) + 1;
}
function inner(x) {
  throw new RangeError("too far: " + x);
}
return outer(3);"""
    ran = run(code)
    assert ran.error is not None
    assert (ran.error.name, ran.error.message) == ("RangeError", "too far: 3")
    assert [x.line for x in ran.error.lines] == [5, 2, 7]
    assert ran.error.lines[0].text == '  throw new RangeError("too far: " + x);'


def test_prelude_frames_are_not_reported():
    """An error thrown inside the prelude (an argument check) reports only the script's line."""
    n_lines = 2
    ran = run("const f = () => 1;\nawait tools.echo({ f });")
    assert ran.error is not None and ran.error.name == "TypeError"
    assert [(x.line, x.text) for x in ran.error.lines] == [(2, "await tools.echo({ f });")]
    assert all(1 <= x.line <= n_lines for x in ran.error.lines)


def test_error_after_a_recorded_call_reports_its_line():
    """Line numbers stay right after an await resumed the script."""
    ran = run("const r = await tools.echo({});\n\nr.nope.deeper;", [rec("echo", result={})])
    assert ran.error is not None
    assert [x.line for x in ran.error.lines] == [3]


@pytest.mark.parametrize(
    ("code", "lines", "frames"),
    [
        ('const a = 1;\nconst b = 2;\nJSON.parse("{bad");', [3], ["at <input>:3"]),
        (
            "const a = 1;\nfunction f(t) {\n  return JSON.parse(t);\n}\nf('[1,\\n,]');",
            [3, 5],
            ["at f (<input>:3", "at <input>:5"],
        ),
        ('const a = 1;\nconst b = 2;\neval("let x = ;");', [3], ["at <input>:3"]),
        ('const a = 1;\nconst b = 2;\neval("\\n\\nnull.x");', [3], ["at <input>:3"]),
        (
            "const a = 1;\nawait null;\nawait Promise.resolve('{').then((t) => JSON.parse(t));",
            [3],
            None,
        ),
    ],
)
def test_text_parsed_as_the_script_runs_names_no_line_of_it(
    code: str, lines: list[int], frames: list[str] | None
) -> None:
    """A JSON.parse or eval that fails names the script's lines that ran it, not the line of
    the text it parsed (`JSON.parse("{bad")` on line 3 named line 1 first, `e.stack` read `at
    <input>:1:2`, and eval'd code's line 3 was named as the script's line 3)."""
    ran = run(code)
    assert ran.error is not None, ran
    assert [x.line for x in ran.error.lines] == lines, ran.error
    if frames is not None:  # `e.stack`'s frames, the script's lines as numbered there
        read = run(f"try {{ {code}\n}} catch (e) {{ return e.stack; }}")
        shown = [line.strip() for line in read.value.splitlines()[1:] if "<input>" in line]
        assert [re.sub(r":\d+\)?$", "", frame) for frame in shown] == frames, read.value


@pytest.mark.parametrize(
    ("code", "lines"),
    [
        # QuickJS named the statement after the assignment: `return a`, `return n`.
        ("const a = 1;\na = 2;\nreturn a;", [(2, "a = 2;")]),
        (
            "const n = 1;\nfunction bump() {\n  n++;\n  return n;\n}\nreturn bump();",
            [(3, "  n++;"), (6, "return bump();")],
        ),
        (
            "const { data } = { data: 1 };\nif (data) {\n  data = 3;\n  data;\n}",
            [(3, "  data = 3;")],
        ),
        # Named right already: kept.
        ("const t = 0;\nfor (const x of [1]) {\n  t += x;\n}", [(3, "  t += x;")]),
        ("for (const i = 0; i < 3; i++) {\n  i;\n}", [(1, "for (const i = 0; i < 3; i++) {")]),
    ],
)
def test_a_const_given_another_value_names_its_line_and_says_let(
    code: str, lines: list[tuple[int, str]]
) -> None:
    """A const the script assigns to fails at the assignment's line, saying to declare it with
    let (it named the line of the statement after the assignment, and said only "'a' is
    read-only")."""
    ran = run(code)
    assert ran.error is not None and ran.error.name == "TypeError", ran
    assert ran.error.message.endswith("is read-only" + runtime._CONST_AGAIN), ran.error
    assert [(x.line, x.text) for x in ran.error.lines] == lines


def test_a_read_only_property_is_no_const() -> None:
    """A frozen object's property, read-only too, is said as QuickJS says it, at its line,
    a const of the same name or not."""
    code = (
        "const a = 0;\nconst o = Object.freeze({ a: 1 });\n"
        "class A { set() { o.a = 2; } }\nnew A().set();\nreturn a;"
    )
    ran = run(code)
    assert ran.error is not None and ran.error.message == "'a' is read-only", ran.error
    assert [x.line for x in ran.error.lines] == [3, 4]


@pytest.mark.parametrize(
    ("code", "callee"),
    [
        ("const o = {};\no.fetch(1);", "o.fetch"),
        ("const o = {}; o.fetch(1);", "o.fetch"),  # the first line's columns, as QuickJS counts
        ("const x = 5;\nconst r = x.map((y) => y * 2);", "x.map"),
        ("let total = 3;\ntotal(1);", "total"),
        ("const a = { b: {} };\nawait a.b.c({ q: 1 });", "a.b.c"),
        ("const o = { list: 'abc' };\nconst z = o.list.map(f => f).filter(Boolean);", "o.list.map"),
        ("const o = {};\nconst n = o.a({ k: o }, 'a(b').length;", "o.a"),
        ("const o = { f: 1 };\nconst z = o.f?.(1);", "o.f"),
        ("const o = {}; const n = 4;\nconst z = o.half(n / 2, '(');", "o.half"),
        ("const é = {};\nconst n = 'é'; é.run(n);", "é.run"),
        ("const o = {}; // o.z(\nif (o) o.y();", "o.y"),
        ("function f(o) {\n  return o.go(1);\n}\nf({});", "o.go"),
        ("const p = Promise.resolve(1);\nawait p.then((x) => x.y());", "x.y"),
        ("const o: any = {};\nconst n: number = 1; o.fetch<string>(n);", "o.fetch"),
        # Not told for sure: the column is in a call's arguments, where another call begins;
        # the callee is no name; the line goes on a call begun above; a protocol's function
        # of the script's own.
        ("const o = {}; const g = (x) => x;\nconst z = o.a(g(1));", None),
        ("const o = {};\nconst z = o['k'](1);", None),
        ("const h = () => 1;\nh()(2);", None),
        ("const o = {}; const g = (x) => x;\nconst z = o.a(\n  g(1));", None),
        ("const o = {};\nconst z = `${o.bar()}`;", None),
        ("const o = {};\nconst z = o.bar(/\\(/);", None),
        ("const o = { [Symbol.toPrimitive]: 5 };\nconst f = (x) => x;\nf(o + 1);", None),
        ("const o = { [Symbol.iterator]: () => ({ next: 5 }) };\nfor (const x of o) o.f(x);", None),
        ("const a = 1;\n[1].map(5);", None),
    ],
)
def test_a_call_of_what_is_not_a_function_names_the_callee(code: str, callee: str | None) -> None:
    """QuickJS's "not a function" names the callee, as Node.js does (`o.fetch is not a
    function`), read at the column of the script's line where the error was made, when that
    line says which call it was for sure; else QuickJS's words stand. (It named none.)"""
    ran = run(code)
    assert ran.error is not None and ran.error.name == "TypeError", ran
    expected = "not a function" if callee is None else f"{callee} is not a function"
    assert ran.error.message == expected, ran.error


@pytest.mark.parametrize("made", ["'counts: ' + d", "`${d}`", "String(d)", "d * 2"])
def test_an_object_of_no_primitive_value_says_so(made: str) -> None:
    """An object with no toString or valueOf (Object.create(null)'s) made into text or a number
    says what failed and what to write, where QuickJS says "toPrimitive" alone."""
    ran = run(f"const d = Object.create(null);\nd.a = 1;\nconst s = {made};")
    assert ran.error is not None and ran.error.name == "TypeError", ran
    assert ran.error.message.startswith("cannot convert object to primitive value: "), ran.error
    assert "JSON.stringify" in ran.error.message
    assert [x.line for x in ran.error.lines] == [3]


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ("for (const x of r) console.log(x);", "value is not iterable: for...of, spread"),
        ("const all = [...r];", "value is not iterable: for...of, spread"),
        ("const m = new Map(r);", "value is not iterable: for...of, spread"),
        ("for (const x of r.rows) console.log(x);", "undefined is not iterable: for...of,"),
        ("for (const x of r.none ?? null) f(x);", "null is not iterable: for...of,"),
    ],
)
def test_a_loop_over_what_is_no_array_says_what_to_loop_over(code: str, said: str) -> None:
    """A loop, spread or destructuring of a tool's result that is an object, or of a field it
    does not have, says what iteration takes and what to write, where QuickJS says "value is
    not iterable" or "cannot read property 'Symbol.iterator' of undefined"."""
    code = "const r = await tools.echo({});\nconst f = (x) => x;\n" + code
    ran = run(code, [rec("echo", {}, result={"items": [1]})])
    assert ran.error is not None and ran.error.name == "TypeError", ran
    assert ran.error.message.startswith(said), ran.error
    assert [x.line for x in ran.error.lines] == [3]


def test_a_loop_over_a_function_or_a_number_is_not_told_it_is_an_object() -> None:
    """QuickJS says "value is not iterable" of any value with no iterator: the line says what
    iteration takes without calling a function or a number a plain object, and names the
    fix for a function that gives the array (`for (const f of files.list)`)."""
    for code in ("for (const f of files.list) f;", "const [a] = 5;"):
        ran = run(code)
        assert ran.error is not None and ran.error.name == "TypeError", ran
        message = ran.error.message
        assert message.startswith("value is not iterable: "), message
        assert "not a plain object, a number or a function" in message, message
        assert "for a function, over what it gives (`f()`)" in message, message


@pytest.mark.parametrize("items", ["[]", "new Float64Array(0)"])
def test_reduce_of_an_empty_array_says_to_give_an_initial_value(items: str) -> None:
    """reduce of an empty array with no initial value (a filter that kept nothing) says so and
    what to write, where QuickJS says "empty array" alone."""
    ran = run(f"const items = {items};\nreturn items.reduceRight((a, b) => a + b);")
    assert ran.error is not None and ran.error.name == "TypeError", ran
    assert ran.error.message == (
        "reduce of an empty array with no initial value; give reduce one as its second "
        "argument, as `items.reduce((sum, x) => sum + x, 0)`"
    )
    assert [x.line for x in ran.error.lines] == [2]


# ---------------------------------------------------------------------------------------------
# Limits
# ---------------------------------------------------------------------------------------------


def test_calls_limit_ends_the_run_at_the_call_past_it():
    """calls=5, five calls recorded: the 6th call ends the run, even inside a try."""
    records = [rec("echo", {"i": i}, result=i) for i in range(5)]
    code = "try { for (let i = 0; ; i++) await tools.echo({ i }); } catch (e) { return 'caught'; }"
    ran = run(code, records, calls=5)
    assert_limit(ran, "calls")
    assert "the script's 6th call is over the 5 calls" in ran.limit.message  # type: ignore[union-attr]
    assert ran.calls == []
    assert ran.error is not None and [x.line for x in ran.error.lines] == [1]


def test_a_limit_a_call_meets_names_the_line_that_made_it() -> None:
    """The call past `calls`, the call past `arguments` and the calls of a step past
    `step_arguments` end the run at the script's line that made the call (they named none),
    as an error's lines do."""
    records = [rec("echo", {"i": i}, result=i) for i in range(3)]
    loop = "async function each(n) {\n  for (let i = 0; i < n; i++) await tools.echo({ i });\n}\n"
    for ran, name in [
        (run(loop + "await each(9);", records, calls=3), "calls"),
        (run(loop + "await each(9);", records, arguments=25), "arguments"),
    ]:
        assert_limit(ran, name)
        assert ran.error is not None
        # After an await, a stack holds the frames resumed since: the loop's, not its caller's.
        assert [(x.line, x.text) for x in ran.error.lines] == [
            (2, "  for (let i = 0; i < n; i++) await tools.echo({ i });"),
        ], name
    code = "const s = 'y'.repeat(400);\nawait Promise.all([1, 2, 3].map((i) =>\n  tools.echo({ i, s })));"
    ran = run(code, step_arguments=1000)
    assert_limit(ran, "step_arguments")
    assert ran.error is not None and ran.error.lines[0].line == 3


def test_calls_limit_counts_recorded_calls():
    """Recorded calls count: 3 recorded plus 3 new in one step is past calls=5."""
    records = [rec("echo", {"i": i}, result=i) for i in range(3)]
    code = (
        "for (let i = 0; i < 3; i++) await tools.echo({ i });\n"
        "await Promise.all([3, 4, 5].map((i) => tools.echo({ i })));"
    )
    assert_limit(run(code, records, calls=5), "calls")
    # Exactly at the limit is fine: the step asks for calls 4 and 5.
    code_at = code.replace("[3, 4, 5]", "[3, 4]")
    ran = run(code_at, records, calls=5)
    assert ran.outcome == "calls"
    assert [c.arguments for c in ran.calls] == [{"i": 3}, {"i": 4}]


def test_results_limit_counts_the_results_read():
    """results: the recorded results read over the script pass the limit and end the run."""
    records = [rec("echo", {"i": i}, result="x" * 1000) for i in range(3)]
    code = "for (let i = 0; i < 3; i++) await tools.echo({ i });\nreturn 'read all';"
    assert value(code, records, results=3100) == "read all"
    ran = run(code, records, results=2500)
    assert_limit(ran, "results")
    assert ran.stats.results_bytes > 2500


def test_results_limit_counts_bytes_not_characters():
    """A non-ASCII result counts its UTF-8 bytes: 1,000 'é' are 2,002 bytes of JSON."""
    ran = run("await tools.echo({});\nreturn 1;", [rec("echo", result="é" * 1000)], results=1500)
    assert_limit(ran, "results")


def test_arguments_limit_counts_recorded_calls_over_the_whole_script():
    """arguments: recorded calls' arguments count; the call that passes the total ends the run."""
    payload = "p" * 1000
    records = [rec("echo", {"i": i, "s": payload}, result=i) for i in range(3)]
    code = f"for (let i = 0; i < 4; i++) await tools.echo({{ i, s: '{payload}' }});"
    ran = run(code, records, arguments=3500)
    assert_limit(ran, "arguments")
    # The same new call alone is well under the limit.
    alone = run(f"await tools.echo({{ i: 3, s: '{payload}' }});", arguments=3500)
    assert alone.outcome == "calls"


def test_call_arguments_limit_throws_a_catchable_range_error():
    """call_arguments: a too-large call throws RangeError at the call site, and is not made."""
    name, message = caught("await tools.echo({ s: 'y'.repeat(2000) });", call_arguments=1000)
    assert name == "RangeError"
    assert "call_arguments" in message
    assert message.endswith(protocol.REMEDIES["call_arguments"])
    ran = run(
        "try { tools.echo({ s: 'y'.repeat(2000) }); } catch (e) {}\nreturn 'no call';",
        call_arguments=1000,
    )
    assert ran.outcome == "finished" and ran.value == "no call"


def test_call_arguments_limit_uncaught_names_the_limit():
    """An uncaught call_arguments error fails the run with limit call_arguments."""
    ran = run("await tools.echo({ s: 'y'.repeat(2000) });", call_arguments=1000)
    assert_limit(ran, "call_arguments")
    assert ran.error is not None and ran.error.name == "RangeError"
    assert [x.line for x in ran.error.lines] == [1]


def test_a_script_throwing_a_look_alike_range_error_is_not_a_limit():
    """Only the sandbox's own per-call limit errors set ``limit``."""
    ran = run("throw new RangeError('call_arguments limit met: made up');")
    assert ran.outcome == "failed"
    assert ran.limit is None


def test_step_arguments_limit_counts_the_calls_of_one_step():
    """step_arguments: the new calls of one step together pass the limit and end the run."""
    code = "await Promise.all([1, 2, 3].map((i) => tools.echo({ i, s: 'y'.repeat(400) })));"
    assert_limit(run(code, step_arguments=1000), "step_arguments")
    two = run(code.replace("[1, 2, 3]", "[1, 2]"), step_arguments=1000)
    assert two.outcome == "calls" and len(two.calls) == 2


def test_step_arguments_does_not_count_recorded_calls():
    """Recorded calls belong to earlier steps: only this step's new calls count."""
    code = "await Promise.all([1, 2, 3, 4].map((i) => tools.echo({ i, s: 'y'.repeat(400) })));"
    records = [rec("echo", {"i": i, "s": "y" * 400}, result=i) for i in (1, 2)]
    ran = run(code, records, step_arguments=1000)
    assert ran.outcome == "calls", ran.error
    assert [c.arguments["i"] for c in ran.calls] == [3, 4]


def test_memory_limit_ends_a_growing_script():
    """memory: a script that grows an array past 16 MiB fails with limit memory."""
    ran = run(
        "const a = [];\nfor (;;) a.push(new Array(1000).fill(1.5));",
        memory=16 * MiB,
    )
    assert_limit(ran, "memory")
    assert "16 MiB" in ran.limit.message  # type: ignore[union-attr]


def test_memory_limit_for_many_small_objects():
    """A Map grown past the heap fails with limit memory too (QuickJS may throw null here)."""
    ran = run("const m = new Map();\nfor (let i = 0; ; i++) m.set(i, 'v' + i);", memory=16 * MiB)
    assert_limit(ran, "memory")


# Each ending that hands the host text the heap holds once but cannot copy again (made
# well-formed, then to UTF-8 for the binding, 2 bytes a character of "é"). They ended as a
# StuckError (the error's report ran out of memory, leaving the run with no ending), a
# TypeError or an InternalError of the sandbox (the binding handed Python None for a string
# it could not copy), or finished with the printed text lost.
@pytest.mark.parametrize(
    "code",
    [
        'throw new Error("é".repeat(12_000_000));',
        'await 1; throw new Error("é".repeat(12_000_000));',
        'throw new Error("é".repeat(5_000_000));',
        'return { a: "é".repeat(5_000_000) };',
        'await tools.echo({ s: "é".repeat(5_000_000) });',
        'console.log("é".repeat(5_000_000));',
    ],
)
def test_an_ending_too_large_to_copy_out_is_the_memory_limit(code: str) -> None:
    ran = run(code, memory=16 * MiB)
    assert_limit(ran, "memory")
    assert ran.error is not None and ran.error.name == "LimitError"
    assert ran.limit is not None and ran.error.message == ran.limit.message
    assert ran.stats.heap_bytes == 16 * MiB


def test_the_same_endings_under_the_default_memory_are_the_scripts_own():
    """What the endings above report when the heap has room: the error, the value, the call,
    the printed text; and a script's own `throw null` as thrown (QuickJS throws null when it
    cannot allocate an error: a null thrown by a script that writes none is that)."""
    thrown = run('throw new Error("é".repeat(5_000_000));')
    assert thrown.error is not None and thrown.error.name == "Error" and thrown.limit is None
    assert thrown.error.message.startswith("éé") and "characters cut" in thrown.error.message
    assert run('return { a: "é".repeat(5_000_000) };').value_bytes == 10_000_008
    called = run('await tools.echo({ s: "é".repeat(1_000_000) });')
    assert called.outcome == "calls" and called.calls[0].arguments == {"s": "é" * 1_000_000}
    printed = run('console.log("é".repeat(5_000_000));')
    assert printed.outcome == "finished" and printed.printed_bytes == 10_000_001
    for code in ("throw null;", "await null; throw null;", "await Promise.reject(null)"):
        ran = run(code)
        assert ran.limit is None and ran.error is not None, code
        assert (ran.error.name, ran.error.message) == ("Uncaught", "null")
    assert run("try { throw null } catch (e) { return e === null }").value is True
    # Only the value null: the text "null" (a template of a null value, as models write) and
    # an error of the script's that speaks of memory are the script's own errors.
    for code, name, message in [
        ("const first = null;\nif (!first) throw `${first}`;", "Uncaught", "null"),
        ('await Promise.reject("null");', "Uncaught", "null"),
        ('throw "";', "Uncaught", '""'),  # said, not a bare "Uncaught"
        (
            "class InternalError extends Error {}\n"
            'const e = new InternalError("out of memory in the cache"); e.name = "InternalError";'
            "\nthrow e;",
            "InternalError",
            "out of memory in the cache",
        ),
    ]:
        ran = run(code)
        assert ran.limit is None and ran.error is not None, code
        assert (ran.error.name, ran.error.message) == (name, message)


def test_deep_recursion_is_a_catchable_range_error():
    """Runaway recursion is a RangeError the script can catch, not a crash."""
    code = (
        "function f(n) { return f(n + 1) + 1; }\n"
        "try { f(0); } catch (e) { return [e.name, e instanceof RangeError]; }"
    )
    assert value(code) == ["RangeError", True]
    ran = run("function f(n) { return f(n + 1) + 1; }\nf(0);")
    assert ran.outcome == "failed"
    assert ran.error is not None and ran.error.name == "RangeError"
    assert ran.limit is None


def test_stats_report_results_and_heap():
    """stats carry the results read and the heap the run used."""
    ran = run("await tools.echo({});", [rec("echo", result="abc")])
    assert ran.stats.results_bytes == len(b'"abc"')
    assert ran.stats.heap_bytes > 0
    assert ran.stats.cpu_ms >= 0


def test_a_prepared_context_count_stands_until_the_run_has_used_its_share():
    """A run on a prepared context starts from the count its maker took (``count_heap``, in
    the child before its script): a short run reports it without walking the heap again; a
    run that works past HEAP_WALK_SHARE times that walk's CPU is counted anew, and holds
    what it allocated."""
    prepared = runtime.Prepared()
    prepared.count_heap()
    assert prepared.heap_walk is not None
    counted = prepared.heap_walk[2]
    ran = runtime.run_in_process(script("return 1"), prepared=prepared)
    assert ran.outcome == "finished"
    assert ran.stats.heap_bytes == counted

    prepared = runtime.Prepared()
    prepared.count_heap()
    assert prepared.heap_walk is not None
    counted = prepared.heap_walk[2]
    code = (
        "globalThis.keep = [];\n"
        "for (let i = 0; i < 200000; i++) keep.push({ i, s: 'x' + i });\n"
        "return keep.length"
    )
    ran = runtime.run_in_process(script(code), prepared=prepared)
    assert ran.outcome == "finished", ran.error
    assert ran.stats.heap_bytes > counted + 200_000 * 16


def _contexts() -> int:
    return sum(1 for o in gc.get_objects() if type(o).__name__ == "Context")


@pytest.mark.parametrize("live", [False, True])
def test_a_run_over_lets_its_context_go_at_once(live: bool) -> None:
    """A context's host functions refer back to its run: a run over must drop its context
    itself, or the context waits for the cycle collector (and frees its heap on whoever's
    clock that lands)."""
    script = protocol.Script(
        id="free",
        code="const r = await tools.t({}); return r",
        tools=["t"],
        clock=protocol.Clock(now_ms=NOW_MS, seed=SEED),
        version=protocol.LIVE_VERSION,
    )
    gc.collect()
    gc.disable()
    try:
        before = _contexts()
        if live:
            run = runtime.LiveInProcess(script)
            ran = run.start()
            assert ran.outcome == "calls"
            ran = run.resume([protocol.Record(name="t", arguments={}, result=3)])
        else:
            ran = runtime.run_in_process(
                script.model_copy(
                    update={"records": [protocol.Record(name="t", arguments={}, result=3)]}
                )
            )
        assert ran.outcome == "finished" and ran.value == 3
        assert _contexts() == before
    finally:
        gc.enable()


@pytest.mark.parametrize(
    "code",
    [
        'import x from "y";\nreturn 1;',
        'const a = 1;\nimport { x } from "y";\nreturn 1;',
        'import * as x from "y";',
        "export default 1;",
        'const m = await import("fs");',
        'import type { T } from "y";\nimport { x } from "y";\nconst a: T = x;',
    ],
)
def test_imports_and_exports_say_a_script_has_no_modules(code: str) -> None:
    """A script that imports or exports fails with the parser's message and what to do
    instead, at its line (a dynamic import names none)."""
    ran = run(code)
    assert ran.outcome == "failed" and ran.error is not None
    assert ran.error.message.endswith(
        "; a script is the body of an async function and has no modules to import or "
        "export: reach the host through `tools` (await tools.name({...}))"
    ), ran.error
    assert all(x.text.lstrip().startswith(("import", "export")) for x in ran.error.lines)
    if "await import" not in code:
        assert ran.error.lines


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ('const r = await fetch("https://example.com");', "a script has no network: reach"),
        ("const x = new XMLHttpRequest();", "a script has no network"),
        ('const fs = require("fs");', "has no modules to import or export"),
        ("module.exports = 1;", "has no modules to import or export"),
        (
            "setTimeout(() => 1, 10);",
            "a script has no timers: it cannot wait for time to pass (its clock is fixed), so a retry needs no wait: call the tool again at once",
        ),
        ("clearImmediate(x);", "a script has no timers"),
        ("requestAnimationFrame(() => 1);", "a script has no timers"),
        ("return process.env.HOME;", "neither Node.js nor a browser"),
        ("return new ReadableStream();", "neither Node.js nor a browser"),
        ('return sessionStorage.getItem("k");', "neither Node.js nor a browser"),
        ("return window.location;", "neither Node.js nor a browser"),
        ('alert("done");', "neither Node.js nor a browser"),
        ("return new AbortController();", "(and structuredClone, crypto.randomUUID"),
        ("return new WeakRef({});", "garbage collection is not observable"),
    ],
)
def test_a_global_of_node_or_a_browser_says_what_a_script_has_instead(code: str, said: str) -> None:
    """A script that uses fetch, require, setTimeout, process and their kind fails with
    QuickJS's "X is not defined" and what a script has instead (it said only that)."""
    ran = run(code)
    assert ran.outcome == "failed" and ran.error is not None
    assert ran.error.name == "ReferenceError"
    assert ran.error.message.startswith(code.split("(")[0].split(".")[0].split(" ")[-1])
    assert " is not defined; " in ran.error.message and said in ran.error.message, ran.error
    assert [x.line for x in ran.error.lines] == [1]


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ('print("hi");', "print is not defined; print is Python's: a JavaScript script prints "
         "with console.log(...)"),
        ("return True;", "True is not defined; JavaScript writes true, false and null (Python's "
         "True, False, None)"),
        ("if (x === None) return 1;", "None is not defined; JavaScript writes true, false"),
    ],
)  # fmt: skip
def test_python_s_names_in_a_javascript_script_say_what_javascript_has(
    code: str, said: str
) -> None:
    """A model that writes Python in a JavaScript script (print, True, None) is told what
    JavaScript has; it was told only that the name is not defined."""
    ran = run("const x = 1; " + code)
    assert ran.outcome == "failed" and ran.error is not None
    assert ran.error.name == "ReferenceError"
    assert ran.error.message.startswith(said), ran.error
    assert [x.line for x in ran.error.lines] == [1]


@pytest.mark.parametrize(
    ("code", "undefined", "tool"),
    [
        ('return get_user({ login: "a" });', "get_user", "get_user"),
        ('return await getUser({ login: "a" });', "getUser", "get_user"),
        ("return ListPrs({});", "ListPrs", "list_prs"),
    ],
)
def test_a_tool_called_by_its_bare_name_says_to_call_it_through_tools(
    code: str, undefined: str, tool: str
) -> None:
    """A model writes ``get_user(...)`` for ``tools.get_user(...)``: QuickJS's "get_user is
    not defined" says how the tool is called (a name that is one but for case and
    underscores too); a name near a tool's but not one, or one the script caught, is left as
    QuickJS says it."""
    ran = run(code)
    assert ran.outcome == "failed" and ran.error is not None
    assert ran.error.message == (
        f"{undefined} is not defined; the host's tool {tool} is called through `tools`: "
        f"`await tools.{tool}({{...}})`"
    ), ran.error
    assert [x.line for x in ran.error.lines] == [1]
    near = run("return get_usr({});")
    assert near.error is not None and near.error.message == "get_usr is not defined"
    caught = run("try { get_user({}); } catch (e) { return e.message; }")
    assert caught.value == "get_user is not defined"


@pytest.mark.parametrize(
    ("code", "tools", "called"),
    [
        (
            "const p = await tools.get-price({ id: 1 });\nreturn p;",
            ("get_price", "echo"),
            "tools.get-price reads as tools.get minus price (a name cannot have a '-'): the "
            "tool is called as await tools.get_price({ ... })",
        ),
        (
            "return await tools.get-user-profile({ id: 1 });",
            ("get-user-profile", "echo"),
            "tools.get-user-profile reads as tools.get minus user minus profile (a name cannot "
            "have a '-'): the tool is called as await tools[\"get-user-profile\"]({ ... })",
        ),
        # The name found undefined is the one said, not the line's first tools.get-...: it
        # named tools.get_x, or (no tool get_x) lost the hint.
        *(
            (
                "const x = 1; return [tools.get-x, await tools.get-price({ id: 1 })];",
                tools,
                "tools.get-price reads as tools.get minus price (a name cannot have a '-'): "
                "the tool is called as await tools.get_price({ ... })",
            )
            for tools in [("get_x", "get_price"), ("get_price",)]
        ),
    ],
)
def test_a_tool_written_with_a_hyphen_says_how_it_is_called(
    code: str, tools: tuple[str, ...], called: str
) -> None:
    """`tools.get-price({...})`, a tool as an MCP server spells it, is `tools.get - price(...)`
    in JavaScript: the run said only "price is not defined" (names.py's hyphen message was
    reached by Python scripts alone); a name with no such tool keeps QuickJS's words."""
    ran = run(code, tools=tools)
    assert ran.outcome == "failed" and ran.error is not None
    assert (ran.error.name, ran.error.message) == ("ReferenceError", called)
    assert [x.line for x in ran.error.lines] == [1]
    other = run("return await tools.get-price({ id: 1 });", tools=("echo",))
    assert other.error is not None and other.error.message == "price is not defined"


FORGOT = 'tools.echo(...) gives a promise, not its result: write "await tools.echo(...)"'


@pytest.mark.parametrize(
    "use",
    [
        "r.length",
        "r.map((x) => x)",
        "r.filter(Boolean)",
        "r.forEach(() => 0)",
        "r.find(Boolean)",
        "r.reduce((a, b) => a + b, 0)",
        "r.includes(1)",
        "r.slice(0)",
        "r.join()",
        "[...r]",
        "(() => { for (const x of r) {} })()",
        "(async () => { for await (const x of r) {} })()",
        "(() => { const [a] = r; })()",
        "JSON.stringify(r)",
        "({ ...r })",
        "Object.assign({}, r)",
        "`${r}`",
        "r + 1",
        "r > 0",
    ],
)
@pytest.mark.parametrize("recorded", [False, True], ids=["new", "recorded"])
def test_a_call_used_without_await_says_to_await_it(use: str, recorded: bool) -> None:
    """A call's promise used as its result (a forgotten await) throws a TypeError naming
    the fix, whether the call is new or answered from the log (a live run and a replay
    fail the same way). It gave undefined, "not a function", "value is not iterable",
    "{}" or "[object Promise]"."""
    record = protocol.Record(name="echo", arguments={}, result=[1, 2])
    code = f"const r = tools.echo({{}});\nreturn await ({use});"
    if recorded:
        ran = run(code, records=[record])
    else:  # the run stops on the new call, and goes on with its result
        live = runtime.LiveInProcess(script(code))
        assert live.start().outcome == "calls"
        ran = live.resume([record])
        live.close()
    assert ran.outcome == "failed" and ran.error is not None
    assert (ran.error.name, ran.error.message) == ("TypeError", FORGOT), ran.error
    assert [x.line for x in ran.error.lines] == [2]


@pytest.mark.parametrize("recorded", [False, True], ids=["new", "recorded"])
def test_a_call_without_await_prints_and_passes_as_what_it_is(recorded: bool) -> None:
    """console.log of a call's promise says what it is and how to get its result, the same
    for a new call and a recorded one; passed to a tool or returned inside a value, it is
    refused as not data, naming the fix. Awaited, as a Promise.all member, with then() or
    catch(), it works as any promise."""
    records = [protocol.Record(name="echo", arguments={}, result=5)] * 2 if recorded else []
    printed = run("console.log(tools.echo({}), [tools.echo({})]); return 1", records=records)
    assert printed.printed == f"Promise {{ {FORGOT} }} [Promise {{ {FORGOT} }}]\n"
    if recorded:  # a new call stops the run first: then the same, once it is answered
        passed = run("return await tools.echo({ x: tools.echo({}) })", records=records)
        assert passed.error is not None
        assert passed.error.message == f"the argument.x is not data: {FORGOT}"
        returned = run("return { r: tools.echo({}) }", records=records)
        assert returned.error is not None and returned.error.message.endswith(FORGOT)
        works = run(
            "const p = tools.echo({});\n"
            "const [a] = await Promise.all([p]);\n"
            "const b = await p.then((v) => v + 1).catch(() => 0);\n"
            "return [a, b, await p, p instanceof Promise]",
            records=records[:1],  # its one call: the log holds what a run calls
        )
        assert works.outcome == "finished" and works.value == [5, 6, 5, True], works.error
    # Any other name a promise has not says so too (it read as undefined: "cannot read
    # property 'length' of undefined", "not a function", a destructured undefined).
    for code in (
        "const r = tools.echo({});\nreturn r.items.length;",
        "const n = tools.echo({});\nreturn n.toFixed(1);",
        "const { a } = tools.echo({});\nreturn a;",
    ):
        ran = run(code, records=[protocol.Record(name="echo", arguments={}, result=5)])
        assert ran.error is not None and ran.error.name == "TypeError", (code, ran)
        assert ran.error.message == FORGOT, ran.error


# ---- a call that failed and that nothing awaited ----

JS_NOPE = rec("echo", {"a": 1}, error="no such sku")
UNTAKEN = "Warning: tools.{}(...) failed and nothing awaited it: {}"


def _js_to_the_end(code: str, *, live: bool = False, version: int = protocol.VERSION) -> Ran:
    """The last run of ``code`` replayed step by step (or one live run resumed, ``live``):
    list_prs gives 1 and every other call fails with a message of its own (echo a=1 "no such
    sku", echo a=2 "also", any other "lost")."""
    messages = {'{"a":1}': "no such sku", '{"a":2}': "also"}

    def answers(ran: Ran) -> list[protocol.Record]:
        return [
            rec(c.name, c.arguments, result=1)
            if c.name == "list_prs"
            else rec(
                c.name,
                c.arguments,
                error=messages.get(protocol.canonical_json(c.arguments).decode(), "lost"),
            )
            for c in ran.calls
        ]

    if live:
        process = runtime.LiveInProcess(script(code))
        ran = process.start()
        for _ in range(10):
            if ran.outcome != "calls":
                process.close()
                return ran
            ran = process.resume(answers(ran))
        raise AssertionError("the script did not end")
    records: list[protocol.Record] = []
    for _ in range(10):
        ran = runtime.run_in_process(script(code, records).model_copy(update={"version": version}))
        if ran.outcome != "calls":
            return ran
        records += answers(ran)
    raise AssertionError("the script did not end")


def test_a_script_that_replaces_weakmaps_methods_keeps_the_calls_hints() -> None:
    """The calls' records are a WeakMap whose methods a script cannot replace."""
    code = (
        "for (const k of ['get', 'set', 'has']) WeakMap.prototype[k] = () => { throw new Error('mine'); };\n"
        "tools.echo({ a: 1 });\nconst r = tools.echo({});\nawait tools.list_prs({});\nreturn r.length;"
    )
    records = [JS_NOPE, rec("echo", {}, result=1), rec("list_prs", {}, result=1)]
    ran = run(code, records)
    assert ran.error is not None and ran.error.message == FORGOT, ran.error
    assert ran.printed == "line 2: " + UNTAKEN.format("echo", "no such sku") + "\n"


@pytest.mark.parametrize("how", ["replay", "live", "version 1"])
def test_a_failed_call_nothing_awaited_gets_a_line(how: str) -> None:
    """A call that failed and that the script never awaited is reported when the script
    ends, with its line, after what the script printed, as a Python script's is (before, the
    failure was lost); one that succeeded is not (a call made for its effect is no mistake).
    The same printed text live, replayed, and with calls settled at once (version 1)."""
    code = "tools.echo({ a: 1 });\ntools.echo({ a: 2 });\nawait tools.list_prs({});\nconsole.log('done');\nreturn 1"
    ran = _js_to_the_end(code, live=how == "live", version=1 if how == "version 1" else 2)
    assert ran.outcome == "finished" and ran.value == 1, ran.error
    assert ran.printed == (
        "done\nline 1: " + UNTAKEN.format("echo", "no such sku") + "\n"
        "line 2: " + UNTAKEN.format("echo", "also") + "\n"
    )


@pytest.mark.parametrize("how", ["replay", "live"])
def test_failed_calls_and_rejections_nothing_took_share_ten_lines(how: str) -> None:
    """Calls that failed unawaited and promises rejected with nothing to handle them get at
    most ten lines in all, the tenth saying how many more there were (900 failed calls were
    900 lines, and the printed text was cut down to make room for them)."""
    code = (
        "for (let i = 0; i < 13; i++) { tools.echo({ a: 3 + i }); Promise.reject(new Error('r' + i)); }\n"
        "await tools.list_prs({});\nreturn 1;"
    )
    ran = _js_to_the_end(code, live=how == "live")
    assert ran.outcome == "finished", ran.error
    lines = ran.printed.splitlines()
    assert len(lines) == 10, lines
    assert lines[:9] == ["line 1: " + UNTAKEN.format("echo", "lost")] * 9
    assert (
        lines[9]
        == "line 1: Warning: tools.echo(...) (and 16 more like it) failed and nothing awaited it: lost"
    )


@pytest.mark.parametrize("how", ["replay", "live", "version 1"])
def test_a_call_that_fails_after_the_script_returned_gets_a_line(how: str) -> None:
    """A call the script made and never awaited, answered (failed) only after its ending
    (nothing else was awaited after it): the line comes after the ending's, as a Python
    script's does (before, it was lost). A failure the script caught gets none."""
    code = "tools.echo({ a: 1 });\nconsole.log('end');\nreturn 'ret'"
    ran = _js_to_the_end(code, live=how == "live", version=1 if how == "version 1" else 2)
    assert ran.outcome == "finished" and ran.value == "ret", ran.error
    assert ran.printed == "end\nline 1: " + UNTAKEN.format("echo", "no such sku") + "\n"
    code = "tools.echo({ a: 1 }).catch(() => 0);\ntools.echo({ a: 2 });\nreturn 'ret'"
    ran = _js_to_the_end(code, live=how == "live", version=1 if how == "version 1" else 2)
    assert ran.printed == "line 2: " + UNTAKEN.format("echo", "also") + "\n"


@pytest.mark.parametrize(
    "code",
    [
        "try { await tools.echo({ a: 1 }); } catch (e) {}",
        "await tools.echo({ a: 1 }).catch(() => 0);",
        "await tools.echo({ a: 1 }).then(() => 0, () => 1);",
        "const p = tools.echo({ a: 1 });\nawait tools.list_prs({});\ntry { await p; } catch {}",
        "try { await Promise.all([tools.list_prs({}), tools.echo({ a: 1 }), tools.echo({ a: 2 })]); } catch {}",
        "await Promise.allSettled([tools.echo({ a: 1 })]);",
        "try { await Promise.race([tools.echo({ a: 1 })]); } catch {}",
        "try { await Promise.any([tools.echo({ a: 1 })]); } catch {}",
        "const f = async () => tools.echo({ a: 1 });\ntry { await f(); } catch {}",
        "try { await new Promise((ok) => ok(tools.echo({ a: 1 }))); } catch {}",
        "try { await tools.echo({ a: 1 }).finally(() => 0); } catch {}",
        "tools.echo({ a: 1 }).catch(() => 0);\nawait tools.list_prs({});",
    ],
)
def test_a_failure_something_took_gets_no_line(code: str) -> None:
    """Awaited, caught, chained, or taken by Promise.all and its kind (each reads the
    promise's constructor): no line; the failed call after it that nothing took still gets
    its line."""
    ran = _js_to_the_end(
        code + "\ntools.get_user({});\nawait tools.list_prs({ b: 1 });\nconsole.log('end');"
    )
    assert ran.printed == "end\nline {}: {}\n".format(
        code.count("\n") + 2, UNTAKEN.format("get_user", "lost")
    ), ran.error


UNHANDLED = "Warning: an async function or promise failed and nothing awaited it: {}"


@pytest.mark.parametrize("how", ["replay", "live", "version 1"])
def test_an_async_function_that_fails_unawaited_gets_a_line(how: str) -> None:
    """`main();` of an async main that throws, after its calls ran: the script finishes, and
    the error has a line at the line that threw, as a failed call nothing awaited does (it
    went nowhere before). The same text live, replayed, and with calls settled at once."""
    code = (
        "async function main() {\n  const n = await tools.list_prs({});\n"
        "  console.log('got', n);\n  throw new Error('boom');\n}\nmain();"
    )
    ran = _js_to_the_end(code, live=how == "live", version=1 if how == "version 1" else 2)
    assert ran.outcome == "finished" and ran.value is None, ran.error
    assert ran.printed == "got 1\nline 4: " + UNHANDLED.format("Error: boom") + "\n"


@pytest.mark.parametrize(
    ("code", "line"),
    [
        ("Promise.reject(new TypeError('t'));", "line 1: " + UNHANDLED.format("TypeError: t")),
        ("Promise.reject(null);", UNHANDLED.format("null")),
        ("Promise.reject('text');", UNHANDLED.format("text")),
        ("Promise.reject({ code: 7 });", UNHANDLED.format('{"code":7}')),
        (
            "(async () => { null.x; })();",
            "line 1: " + UNHANDLED.format("TypeError: cannot read property 'x' of null"),
        ),
        (
            "await tools.list_prs({}).then(() => { throw new RangeError('r'); }).finally(() => 0) && 0;",
            None,  # awaited: the script fails with it instead
        ),
        (
            "tools.list_prs({}).then(() => { throw new RangeError('r'); });\nawait tools.list_prs({ b: 1 });",
            "line 1: " + UNHANDLED.format("RangeError: r"),
        ),
    ],
)
def test_each_kind_of_unhandled_rejection_gets_a_line(code: str, line: str | None) -> None:
    """A value that is no Error is shown as a thrown one is, with no line number."""
    ran = _js_to_the_end(code)
    if line is None:
        assert ran.outcome == "failed" and ran.printed == "", ran.printed
        return
    assert ran.outcome == "finished", ran.error
    assert ran.printed == line + "\n"


@pytest.mark.parametrize(
    "code",
    [
        "async function main() { throw new Error('x'); }\nawait main().catch(() => 0);",
        "async function main() { throw new Error('x'); }\ntry { await main(); } catch {}",
        "const p = Promise.reject(new Error('x'));\nawait tools.list_prs({});\np.catch(() => 0);",
        "const p = (async () => { throw new Error('x'); })();\nawait Promise.allSettled([p]);",
        "const p = Promise.reject(new Error('x'));\ntry { await Promise.all([tools.list_prs({}), p]); } catch {}",
        "new Promise((_, no) => no(new Error('x'))).then(null, () => 0);",
        "async function main() { await tools.list_prs({}); }\nmain();",
    ],
)
def test_a_rejection_something_handled_gets_no_line(code: str) -> None:
    """Caught, awaited, handled later (after a call), taken by allSettled or all: no line."""
    ran = _js_to_the_end(code + "\nconsole.log('end');")
    assert ran.outcome == "finished", ran.error
    assert ran.printed == "end\n"


def test_a_failed_call_gets_one_line_not_two() -> None:
    """A call's promise that failed with nothing awaiting it is the call's line (which names
    the tool); an async function that awaited it and failed so is the function's."""
    code = "tools.echo({ a: 1 });\n(async () => { await tools.echo({ a: 2 }); })();\nawait tools.list_prs({});"
    ran = _js_to_the_end(code)
    assert ran.printed.splitlines() == [
        "line 1: " + UNTAKEN.format("echo", "no such sku"),
        "line 2: " + UNHANDLED.format("Error: also"),
    ]


def test_many_unhandled_rejections_show_ten_lines_and_keep_a_bounded_heap() -> None:
    """Ten lines, the last saying how many more; 3,000 with 100 KB reasons (300 MB) fit in
    a 32 MiB heap (only a hundred are kept), and all are counted."""
    ran = _js_to_the_end("for (let i = 0; i < 12; i++) Promise.reject(new Error('n' + i));")
    lines = ran.printed.splitlines()
    assert lines[:9] == ["line 1: " + UNHANDLED.format(f"Error: n{i}") for i in range(9)], (
        ran.printed
    )
    assert lines[9:] == [
        "line 1: Warning: an async function or promise (and 2 more like it) failed and nothing "
        "awaited it: Error: n9"
    ]
    ran = run(
        "for (let i = 0; i < 3000; i++) Promise.reject(new Error('x'.repeat(100000) + i));",
        memory=32 * MiB,
    )
    assert ran.outcome == "finished", ran.error
    assert "(and 2990 more like it)" in ran.printed
    # Handled at once, every other one: counted off again, past the hundred kept too.
    ran = run(
        "for (let i = 0; i < 3000; i++) { const p = Promise.reject(i); if (i % 2) p.catch(() => 0); }"
    )
    assert ran.printed.count("\n") == 10 and "(and 1490 more like it)" in ran.printed, ran.printed
    # Past the hundred kept, handled later: those still unhandled are counted on the lines
    # there are, or on one of their own when no kept one is left.
    make = "const ps = [];\nfor (let i = 0; i < {}; i++) ps.push(Promise.reject(new Error('r' + i)));\n"
    ran = run(make.format(105) + "for (const p of ps.slice(0, 97)) p.catch(() => {});")
    assert ran.printed.splitlines() == [
        "line 2: " + UNHANDLED.format("Error: r97"),
        "line 2: " + UNHANDLED.format("Error: r98"),
        "line 2: Warning: an async function or promise (and 5 more like it) failed and nothing "
        "awaited it: Error: r99",
    ]
    ran = run(make.format(103) + "for (const p of ps.slice(0, 100)) p.catch(() => {});")
    assert ran.printed == (
        "Warning: an async function or promise (and 2 more like it) failed and nothing awaited "
        "it: its error was not kept (over 100 failed unawaited at once)\n"
    )


def test_a_script_that_replaces_maps_methods_keeps_its_unhandled_lines() -> None:
    """The promises are kept in a Map whose methods a script cannot reach."""
    code = (
        "for (const k of ['set', 'delete', 'forEach', 'clear', 'get', 'has']) "
        "Map.prototype[k] = () => { throw new Error('mine'); };\n"
        "Object.defineProperty(Map.prototype, 'size', { get() { throw new Error('mine'); } });\n"
        "Object.defineProperty(Array.prototype, '0', { set() { throw new Error('mine'); } });\n"
        "Promise.reject(new Error('kept'));"
    )
    ran = run(code)
    assert ran.outcome == "finished", ran.error
    assert ran.printed == "line 4: " + UNHANDLED.format("Error: kept") + "\n"


@pytest.mark.parametrize("how", ["replay", "live"])
@pytest.mark.parametrize("key", ["get", "set", "value", "writable", "enumerable", "configurable"])
def test_a_script_that_puts_descriptor_keys_on_object_prototype_still_calls(
    how: str, key: str
) -> None:
    """A key of a property descriptor put on ``Object.prototype`` (``get``, ``value``, ...)
    changes none of the prelude's own descriptors: a call still gives its result (it failed
    with "Getter must be a function" after the tool ran), and what is made on first use
    (``URL``, ``Intl``, a call's promise) is made as before."""
    code = (
        f"Object.prototype[{key!r}] = 1;\n"
        "const n = await tools.list_prs({});\n"
        "const u = new URL('https://a.example/p?q=1');\n"
        "const f = new Intl.NumberFormat('en-US').format(1234.5);\n"
        "console.log(u.href, u.searchParams.get('q'), f);\n"
        "return n;"
    )
    ran = _js_to_the_end(code, live=how == "live")
    assert ran.outcome == "finished" and ran.value == 1, ran.error
    assert ran.printed == "https://a.example/p?q=1 1 1,234.5\n"


@pytest.mark.parametrize(
    ("reason", "shown"),
    [
        (
            "Object.defineProperty(new Error('x'), 'message', { get() { throw new Error('g'); } })",
            "Error: an error that cannot be read: Error: g",
        ),
        ("new Proxy({}, { get() { throw 1; }, ownKeys() { throw 2; } })", "[unprintable: Error]"),
        (
            "Object.defineProperty(new Error('x'), 'message', { get() { "
            "Promise.reject(new Error('inner')); console.log('ran'); return 'm'; } })",
            "Error: m",
        ),
        ("Symbol('s')", "Symbol(s)"),
        ("10n", "10n"),
        ("undefined", "undefined"),
        ("new Error('a\\nb\\0c')", "Error: a [...]"),
    ],
)
def test_a_hostile_or_odd_reason_still_gives_a_line_and_the_value(reason: str, shown: str) -> None:
    """A reason whose reading throws, prints or rejects again, and values that are no Error:
    a line each, and the script's value stands."""
    ran = run(f"Promise.reject({reason});\nreturn 1")
    assert ran.outcome == "finished" and ran.value == 1, ran.error
    assert ran.printed.splitlines()[-1].endswith(UNHANDLED.format(shown)), ran.printed


BARE = "Warning: the script ends with `{0}`, whose value goes nowhere: a script's result is what it returns, so write `return {0}`"


@pytest.mark.parametrize(
    ("code", "line"),
    [
        ("const x = 1;\nx", "line 2: " + BARE.format("x")),
        (
            "const d = { items: [1] };\nd.items[0];\n// the answer\n\n",
            "line 2: " + BARE.format("d.items[0]"),
        ),
        ("const d = { a: null };\n  d?.a", "line 2: " + BARE.format("d?.a")),
        ("const x: number = 1;\nx", "line 2: " + BARE.format("x")),  # TypeScript: its lines
        # A program's habit: its main function called, what it gives dropped.
        ("async function main() {\n  return 1;\n}\nmain();", "line 4: " + BARE.format("main()")),
        (
            "function main() {\n  return 1;\n}\nawait main()",
            "line 4: " + BARE.format("await main()"),
        ),
        (
            "const run = async () => 5;\nrun().catch(console.error);",
            "line 2: " + BARE.format("run().catch(console.error)"),
        ),
    ],
)
def test_a_script_that_ends_on_a_bare_name_gets_a_line(code: str, line: str) -> None:
    """A notebook's habit: the last expression as the answer. The script returned nothing,
    so its last line, a name or member alone, gets a line saying to return it; and so does a
    last line that calls a function of the script's that gives a value (`main();`)."""
    ran = run(code)
    assert ran.outcome == "finished" and ran.value is None, ran.error
    assert ran.printed == line + "\n"


@pytest.mark.parametrize(
    "code",
    [
        "const x = 1;\nreturn x",
        "const x = 1;\nconsole.log(x)",
        "const x = 1;\nlet y = 1; x",  # not alone on its line
        "const x = 1;\nif (x) {\n  x\n}",
        "async function main() {}\nmain()",
        "async function main() {\n  console.log(1);\n}\nmain();",  # it gives nothing
        "async function main() {\n  return 1;\n}\nmain().then(console.log);",  # handed on
        "function f() { return 1 }\nconsole.log(1);",  # not a call of the script's function
        "const x = [1];\nJSON.stringify(x)",
        "for (;;) {\n  break\n}\nthis",
        "const x = 1;\nx.toString()",
    ],
)
def test_a_script_that_does_not_end_on_a_bare_name_gets_none(code: str) -> None:
    ran = run(code)
    assert ran.outcome == "finished", ran.error
    assert ran.printed == "" or ran.printed == "1\n", ran.printed


@pytest.mark.parametrize(
    ("code", "fix", "said"),
    [
        ("async function main() {\n  return 1;\n}\nmain;", "await main()", "Warning"),
        ("const main = async () => {\n  return 1;\n};\nmain", "await main()", "Warning"),
        ("function main() {\n  return 1;\n}\nmain", "main()", "Warning"),
        ("async def main():\n    return 1\n\nmain", "await main()", "RuntimeWarning"),  # Python
    ],
)
def test_a_function_named_last_is_said_to_be_returned_called(
    code: str, fix: str, said: str
) -> None:
    """`main` alone as the last line: the line said `return main`, which returns the
    function, which is no data (a second failure before the answer)."""
    ran = python_run(code) if said == "RuntimeWarning" else run(code)
    assert ran.outcome == "finished" and ran.value is None, ran.error
    assert ran.printed == f"line 4: {said}: {bare_ending('main', fix)}\n"
    assert ran.printed.endswith(f"so write `return {fix}`\n")


ASSIGNED = (
    "Warning: the script ends giving `{0}` a value, which goes nowhere: a script's result is "
    "what it returns, so end it with `return {0}`"
)


@pytest.mark.parametrize(
    ("code", "printed"),
    [
        ("const r = 1;\nconst result = r * 2;", "line 2: " + ASSIGNED.format("result") + "\n"),
        (
            "const summary = {\n  a: 1,\n};\n// done\n",
            "line 1: " + ASSIGNED.format("summary") + "\n",
        ),
        ("let n: number = 5;", "line 1: " + ASSIGNED.format("n") + "\n"),  # TypeScript
        # `x` ends an expression begun above: the statement is y's.
        ("const x = 2;\nconst y = 1 +\n  x", "line 2: " + ASSIGNED.format("y") + "\n"),
        ("const x = 1;\nlet y = 1; x", ""),  # `x` is last, not alone on its line
        (
            "const t = [1]\n  .map((x) => x * 2)\n  .length;",
            "line 1: " + ASSIGNED.format("t") + "\n",
        ),
        ("const a = 1;\nconsole.log(a);", "1\n"),  # another statement after it
        ("for (const x of [1]) {\n  const y = x;\n}", ""),  # not at the top
        ("function f() {}\nconst main = f;", "line 2: " + ASSIGNED.format("main") + "\n"),
        ("const x = 1;\nreturn;", ""),
    ],
)
def test_a_script_that_ends_giving_a_name_a_value_gets_a_line(code: str, printed: str) -> None:
    """A model that builds its answer and forgets to return it (`const summary = {...}` as
    the last statement) read "Script finished." and nothing: a line now says to return it."""
    ran = run(code)
    assert ran.outcome == "finished" and ran.value is None, ran.error
    assert ran.printed == printed


@pytest.mark.parametrize(
    "code",
    [
        'return await tools.2fa_verify({ code: "1" });',
        'const n: number = 1;\nreturn await tools.2fa_verify({ code: "1" });',  # TypeScript
    ],
)
def test_a_tool_written_from_a_digit_says_its_name(code: str) -> None:
    """`tools.2fa_verify(...)` (the MCP tool "2fa_verify", named `_2fa_verify` here) failed
    with the parser's `Unexpected token, expected ";" (1:19)`."""
    ran = run(code, tools=["_2fa_verify"])
    assert ran.outcome == "failed" and ran.error is not None, ran
    assert (ran.error.name, ran.error.message) == (
        "SyntaxError",
        "tools.2fa_verify cannot be written as an attribute (a name cannot start with a digit): "
        "the tool is tools._2fa_verify, called as await tools._2fa_verify({ ... })",
    )
    assert [x.line for x in ran.error.lines] == [code.count("\n") + 1]
    # One no tool is named so keeps the parser's words.
    assert run("return tools.2fa;").error.message.startswith("Unexpected token")  # type: ignore[union-attr]


A_FUNCTION_ALONE = (
    "the script is a function that is never called, so none of its code ran: write its body "
    "as the script itself (a script is already the body of an async function: await works at "
    "its top level), giving any parameters it takes their values there"
)


@pytest.mark.parametrize(
    ("code", "line", "message"),
    [
        (
            "async function main(args) {\n  return await tools.echo({});\n}",
            1,
            NEVER_CALLED.format("main", "return await main(...)"),
        ),
        (
            "const LIMIT = 5;\nconst main = async () => {\n  return LIMIT;\n};",
            2,
            NEVER_CALLED.format("main", "return await main()"),
        ),
        ("const f = function () {};", 1, NEVER_CALLED.format("f", "return f()")),
        (
            "function helper(x) {\n  return x;\n}\n\nfunction go(n) {\n  return go(n);\n}\n",
            5,
            NEVER_CALLED.format("go", "return go(...)"),
        ),
        ("async (input) => {\n  await tools.echo(input);\n}", 1, A_FUNCTION_ALONE),
        ("async <T,>() => {\n  return 1;\n}", 1, A_FUNCTION_ALONE),  # TypeScript
        (
            "type In = { id: number };\nasync ({ id }: In) => {\n  return id;\n}\n// end",
            2,
            A_FUNCTION_ALONE,
        ),
    ],
)
def test_a_script_that_only_defines_functions_fails_saying_to_run_their_body(
    code: str, line: int, message: str
) -> None:
    """A model wraps its work in a function it never calls (`async function main(args)
    {...}`, the script one `async (input) => {...}`): none of it ran, and the script
    finished with nothing, as if it had worked. It fails, at the function's line, saying to
    write the body as the script or to call it."""
    ran = run(code)
    assert ran.outcome == "failed" and ran.error is not None, ran
    assert (ran.error.name, ran.error.message) == ("Error", message)
    assert [x.line for x in ran.error.lines] == [line]
    assert ran.printed == ""


@pytest.mark.parametrize(
    "code",
    [
        "function f() { return 1 }\nreturn f();",
        "async function main() {\n  console.log(1);\n}\nawait main();",
        "function f() {}\nconsole.log(1);",  # printed: something ran
        "const go = () => 1;\nconst x = go();",  # called at the top
        "function f() {}\nconst g = f;",  # handed on
        "const limit = (1 + 2);\nconst x = limit;",  # no function
        "(async () => {\n  console.log(1);\n})();",
        "",
        "// nothing",
    ],
)
def test_a_script_that_calls_its_functions_or_runs_code_is_not_said_to_define_only(
    code: str,
) -> None:
    ran = run(code)
    assert ran.outcome == "finished", ran.error


def test_a_function_that_made_calls_is_not_said_never_called() -> None:
    """A call answered from the log is code that ran, whatever the text looks like."""
    code = "const r = {\n  a: await tools.echo({}),\n};\nfunction f() {}"
    ran = run(code, [rec("echo", {}, result=1)])
    assert ran.outcome == "finished", ran.error


@pytest.mark.parametrize("how", ["replay", "live", "version 1"])
def test_a_bare_ending_after_calls_is_the_same_live_and_replayed(how: str) -> None:
    code = "const n = await tools.list_prs({});\nn"
    ran = _js_to_the_end(code, live=how == "live", version=1 if how == "version 1" else 2)
    assert ran.outcome == "finished", ran.error
    assert ran.printed == "line 2: " + BARE.format("n") + "\n"


def test_a_run_that_fills_the_heap_reports_no_unhandled_lines() -> None:
    """The memory limit is the ending: no lines after it (the heap has no room for them)."""
    code = "Promise.reject(new Error('early'));\nconst a = [];\nfor (;;) a.push({ i: a.length });"
    ran = run(code, memory=8 * MiB)
    assert_limit(ran, "memory")
    assert ran.printed == ""


@pytest.mark.parametrize("how", ["replay", "live"])
@pytest.mark.parametrize(
    "code",
    [
        # Each step keeps what it made, so the heap fills whatever QuickJS's collector does
        # (a bare chain, `const f = () => Promise.resolve().then(f)`, leaves garbage the
        # collector may keep up with for good: whether it filled the heap, or ran until the
        # CPU limit, was up to where the collector's threshold fell).
        # Nothing handles the rejection, and the script waits on: it ended "stuck".
        "const kept = [];\n"
        "const f = () => { kept.push(new Array(64).fill(0)); return Promise.resolve().then(f); };\n"
        "f();\nawait new Promise(() => {});",
        # The script catches it, then goes on to a call and its end: it finished.
        "const kept = [];\n"
        "const f = () => { kept.push(new Array(64).fill(0)); return Promise.resolve().then(f); };\n"
        "const p = f().catch((e) => console.log('caught', e));\n"
        "await tools.list_prs({});\nawait p;\nreturn kept.length;",
    ],
)
def test_a_heap_filled_in_a_promise_job_is_the_memory_limit(code: str, how: str) -> None:
    """A promise chain that fills the heap runs out in a job, whose promise QuickJS rejects
    with null: the run is the memory limit met, as a run whose ending is that null (it was a
    StuckError, or a script that printed "caught null" and finished), live and replayed."""
    ran = _js_to_the_end(code, live=how == "live")
    assert_limit(ran, "memory")
    assert ran.error is not None and ran.error.name == "LimitError"


@pytest.mark.parametrize("how", ["replay", "live"])
def test_a_job_rejected_by_quickjs_out_of_memory_error_is_the_memory_limit(how: str) -> None:
    """The heap that runs out in a job rejects its promise with QuickJS's InternalError "out
    of memory" when the heap still holds that error (null when not): that is the memory limit
    too (it was a StuckError, in about one fresh process in two of the chain above). The
    error made here stands for it; an Error with those words is the script's own."""
    code = "Promise.reject(new InternalError('out of memory'));\nawait new Promise(() => {});"
    ran = _js_to_the_end(code, live=how == "live")
    assert_limit(ran, "memory")
    # Whether the script writes a null of its own (which keeps a null from being taken for
    # the heap's) does not matter for that error.
    writes_null = _js_to_the_end("const fail = () => { throw null; };\n" + code, live=how == "live")
    assert_limit(writes_null, "memory")
    own = _js_to_the_end(code.replace("InternalError", "Error"), live=how == "live")
    assert own.error is not None and own.error.name == "StuckError", own


def test_a_context_without_the_tracker_still_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A binding laid out otherwise gets no tracker (watch gives None): runs go on as they
    did before it, without the lines."""
    from sandbox import rejections

    monkeypatch.setattr(rejections, "watch", lambda ctx, function: None)
    ran = run("Promise.reject(new Error('x'));\nreturn 1")
    assert ran.outcome == "finished" and ran.value == 1 and ran.printed == ""


def test_lines_come_in_the_order_the_calls_failed_also_when_the_script_fails() -> None:
    """A message is cut to its first line (and 300 characters); a script that fails still
    reports its untaken calls, before its error; TypeScript keeps the script's lines."""
    code = (
        "for (let i = 0; i < 2; i++) {\n  tools.search({ i });\n}\n"
        "const two: number = 2;\ntools.echo({ a: 2 });\nawait tools.list_prs({});\n"
        "throw new Error('own');"
    )
    records = [
        rec("search", {"i": 0}, error="first\nsecond"),
        rec("search", {"i": 1}, error="x" * 400),
    ]
    records += [rec("echo", {"a": 2}, error="also"), rec("list_prs", {}, result=1)]
    ran = run(code, records)
    assert ran.outcome == "failed" and ran.error is not None and ran.error.message == "own"
    assert ran.printed.splitlines() == [
        "line 2: " + UNTAKEN.format("search", "first [...]"),
        "line 2: " + UNTAKEN.format("search", "x" * 300 + " [...]"),
        "line 5: " + UNTAKEN.format("echo", "also"),
    ]


def test_no_line_until_the_script_ends_and_none_for_a_memory_failure() -> None:
    """A run that stops on calls reports nothing yet (its last run reports, live or
    replayed); a run that met its memory limit reports nothing more."""
    code = "tools.echo({ a: 1 });\nawait tools.search({});"
    assert run(code, [JS_NOPE]).printed == ""
    ended = run(code, [JS_NOPE, rec("search", {}, result=1)])
    assert ended.printed == "line 1: " + UNTAKEN.format("echo", "no such sku") + "\n"
    heavy = "tools.echo({ a: 1 });\nawait tools.search({});\nconst a = [];\nwhile (true) a.push('x'.repeat(1000) + a.length);"
    ran = run(heavy, [JS_NOPE, rec("search", {}, result=1)], memory=16 * MiB)
    assert ran.limit is not None and ran.limit.name == "memory", ran.error
    assert ran.printed == ""


FOREACH = (
    "Warning: forEach does not wait for an async callback: the script goes on before its "
    "calls finish, without their results, and their errors are lost; write "
    "`for (const x of items) { await ... }`, or "
    "`await Promise.all(items.map(async (x) => ...))`"
)


def test_an_async_callback_given_to_foreach_gets_a_line() -> None:
    """forEach does not wait for an async callback: the script ends with none of the
    results (Node.js returns [] too). The model reads why, at each such line, after what
    the script printed; also when the script fails, and for TypeScript."""
    code = (
        "const out: number[] = [];\n"
        "[1, 2].forEach(async (n) => { out.push(await tools.echo({ n })); });\n"
        "console.log('went on');\n"
        "[3].forEach(\n  async function (n) { await tools.echo({ n }); });\n"
        "return out;"
    )
    ran = run(code, [rec("echo", {"n": n}, result=n) for n in (1, 2, 3)])
    assert ran.outcome == "finished" and ran.value == [], ran.error
    assert ran.printed.splitlines() == ["went on", "line 2: " + FOREACH, "line 4: " + FOREACH]
    failed = run("[1].forEach(async (n) => n);\nthrow new Error('own');")
    assert failed.outcome == "failed" and failed.printed == "line 1: " + FOREACH + "\n"


@pytest.mark.parametrize("how", ["replay", "live"])
def test_a_returned_value_changed_after_the_return_gets_a_line(how: str) -> None:
    """`items.map(async ...)` with no Promise.all: the script returns before the calls its
    code awaits have answered, and that code, run after the return, fills the value
    returned: the model got [] as if nothing was found. A line after the printed text says
    so, at the first such call's line. The same live and replayed."""
    code = (
        "const seen = [];\n"
        "[1, 2].map(async (n) => { seen.push(await tools.list_prs({ n })); console.log(n); });\n"
        "console.log('went on');\n"
        "return seen;"
    )
    ran = _js_to_the_end(code, live=how == "live")
    assert ran.outcome == "finished" and ran.value == [], ran.error
    many = runtime.changed_after_return(2, "tools.list_prs(...)")
    assert ran.printed == f"went on\n1\n2\nline 2: Warning: {many}\n"
    assert many.startswith("the returned value changed after the script returned: code ")
    assert "waiting on 2 calls (the first: tools.list_prs(...))" in many
    assert "await Promise.all(items.map(...))" in many
    one_call = (
        "const out = { n: 0 };\nawait tools.list_prs({ a: 1 });\n"
        "tools.list_prs({}).then((v) => { out.n = v; });\nreturn out;"
    )
    ran = _js_to_the_end(one_call, live=how == "live")
    assert ran.outcome == "finished" and ran.value == {"n": 0}, ran.error
    one = runtime.changed_after_return(1, "tools.list_prs(...)")
    assert ran.printed == f"line 3: Warning: {one}\n"
    assert "code waiting on tools.list_prs(...) changed it once the call answered" in one


@pytest.mark.parametrize(
    "code",
    [
        # Made for its effect: nothing waits on it.
        "tools.list_prs({});\nreturn [1]",
        # Waited on, for its effect or a line, and the value it could change is not changed.
        "tools.list_prs({}).catch(() => 0);\nreturn [1]",
        "const out = [];\ntools.list_prs({}).then((v) => console.log(v));\nreturn out",
        "tools.list_prs({}).then((v) => console.log(v));\nreturn 'text'",
        # Every call answered before the return.
        "const out = [];\nawait Promise.all([1, 2].map(async (n) => out.push(await tools.list_prs({ n }))));\nreturn out",
        "return [await Promise.race([tools.list_prs({ n: 1 }), tools.list_prs({ n: 2 })])]",
    ],
)
def test_no_changed_line_when_the_returned_value_stays_as_returned(code: str) -> None:
    for live in (False, True):
        ran = _js_to_the_end(code, live=live)
        assert ran.outcome == "finished", ran.error
        assert "returned value changed" not in ran.printed, ran.printed


def test_no_changed_line_for_a_value_over_the_bound() -> None:
    """A value the model reads cut is not kept for the comparison (its copy could take the
    room the code still running needs)."""
    code = (
        "const out = ['x'.repeat(300 * 1024)];\n"
        "tools.list_prs({}).then((v) => out.push(v));\nreturn out;"
    )
    ran = _js_to_the_end(code)
    assert ran.outcome == "finished" and ran.value_text is not None, ran.error
    assert "returned value changed" not in ran.printed, ran.printed
    small = _js_to_the_end(code.replace("300 * 1024", "1024"))
    assert "returned value changed" in small.printed, small.printed


def test_a_changed_line_gives_way_to_forEachs_and_to_a_failure() -> None:
    """forEach's line says the same (once is enough); a script that fails has its error."""
    foreach = "const out = [];\n[1].forEach(async (n) => { out.push(await tools.list_prs({ n })); });\nreturn out"
    ran = _js_to_the_end(foreach)
    assert ran.outcome == "finished" and ran.printed == "line 2: " + FOREACH + "\n"
    failing = "const out = [];\n[1].map(async (n) => { out.push(await tools.list_prs({ n })); });\nreturn new Map()"
    ran = _js_to_the_end(failing)
    assert ran.outcome == "failed" and ran.printed == "", ran.printed


def test_no_foreach_line_for_a_plain_callback_a_stop_or_a_memory_failure() -> None:
    assert run("[1].forEach((n) => console.log(n));\nreturn 1").printed == "1\n"
    stops = run("[1].forEach(async (n) => n);\nreturn await tools.echo({});")
    assert stops.outcome == "calls" and stops.printed == ""
    heavy = "[1].forEach(async (n) => n);\nconst a = [];\nwhile (true) a.push('x'.repeat(1000) + a.length);"
    ran = run(heavy, memory=16 * MiB)
    assert ran.limit is not None and ran.limit.name == "memory", ran.error
    assert ran.printed == ""


NOT_DATA = (
    "a promise, not data: await it for its value (for an array of promises, await Promise.all(...))"
)


def test_a_promise_that_is_no_calls_is_not_data_either() -> None:
    """An async function's promise (`items.map(async ...)` with no Promise.all) returned,
    passed to a tool or given to JSON.stringify fails naming the fix (it was "{}": a script
    returned [{}, {}] as if its tools had answered nothing); console.log says to await it."""
    records = [rec("echo", {"n": n}, result=n) for n in (1, 2)]
    code = (
        "const rs = [1, 2].map(async (n) => await tools.echo({ n }));\nconsole.log(rs);\nreturn rs;"
    )
    ran = run(code, records)
    assert ran.outcome == "failed" and ran.error is not None
    assert ran.error.message == f"the returned value is not JSON data: value[0] is {NOT_DATA}"

    assert (
        ran.printed
        == "[Promise { <await it for its value> },Promise { <await it for its value> }]\n"
    )
    assert caught("JSON.stringify({ p: Promise.resolve(1) })") == (
        "TypeError",
        f'at key "p" it holds {NOT_DATA}',
    )
    assert caught("JSON.stringify(Promise.resolve(1))") == ("TypeError", f"it is {NOT_DATA}")
    assert caught("await tools.echo({ p: (async () => 1)() })") == (
        "TypeError",
        f"the argument.p is {NOT_DATA}",
    )
    # What works with promises still does, and a call's promise keeps its own message.
    assert value("const ps = [1, 2].map(async (n) => n * 2);\nreturn await Promise.all(ps);") == [
        2,
        4,
    ]
    assert caught("JSON.stringify(tools.echo({}))", [rec("echo", {}, result=1)]) == (
        "TypeError",
        FORGOT,
    )


AWAIT_HINT = (
    "; `await` works only in an async function: make the function that holds it async "
    "(`async (x) => ...`, `async function f() {...}`) and await what it returns (for many, "
    "`await Promise.all(items.map(async (x) => ...))`), or loop with `for ... of`"
)


@pytest.mark.parametrize(
    "code",
    [
        "const rs = [1, 2].map((n) => await tools.echo({ n }));",
        "function f() {\n  return await tools.echo({});\n}",
        "[1].forEach(function (n) {\n  await tools.echo({ n });\n});",
        "class A {\n  m(): number {\n    return await tools.echo({});\n  }\n}",
        "function g() {\n  for await (const x of files.lines('f')) {}\n}",
    ],
)
def test_await_in_a_function_that_is_not_async_says_so(code: str) -> None:
    """QuickJS says "expecting ';'" or "Unexpected identifier 'tools'" there; the message
    says what is wrong and how to fix it, at the await's line."""
    ran = run(code + "\nreturn 1;")
    assert ran.outcome == "failed" and ran.error is not None
    assert ran.error.name == "SyntaxError" and ran.error.message.endswith(AWAIT_HINT), ran.error
    assert [x.line for x in ran.error.lines] == [code.count("\n", 0, code.index("await")) + 1]


@pytest.mark.parametrize(
    "code",
    [
        "const x = await tools.echo({ a: 1,, });",  # another mistake on an await's line
        "console.log('await me' +);",
        "function f() { return 1 +; }",
        # a SyntaxError the script's code throws, on a line with an await
        "const x = JSON.parse(await tools.echo({}));",
    ],
)
def test_other_syntax_errors_get_no_await_hint(code: str) -> None:
    ran = run(code, [rec("echo", {}, result="{bad")])
    assert ran.error is not None and ran.error.name == "SyntaxError"
    assert "async function" not in ran.error.message, ran.error


@pytest.mark.parametrize(("result", "kind"), [({"x": 1}, "an object"), ([1], "an array")])
def test_json_parse_of_a_result_says_it_is_data_already(result: Any, kind: str) -> None:
    """JSON.parse of a tool's result (already data) said "unexpected token: 'object'"."""
    code = "const r = await tools.echo({});\nreturn JSON.parse(r);"
    ran = run(code, [rec("echo", {}, result=result)])
    assert ran.outcome == "failed" and ran.error is not None
    assert (ran.error.name, ran.error.message) == (
        "SyntaxError",
        f"JSON.parse takes text, and it was given {kind}: a tool's result is already data, "
        "so use it as it is (JSON.stringify makes text of it)",
    )
    assert [x.line for x in ran.error.lines] == [2]
    parsed = value(
        "return [JSON.parse('[1]'), JSON.parse('{\"a\":2}', (k, v) => typeof v === 'number' ? v * 10 : v),"
        " JSON.parse(new String('3')), JSON.parse.name, JSON.parse.length]"
    )
    assert parsed == [[1], {"a": 20}, 3, "parse", 2]


def test_json_parse_of_a_call_not_awaited_says_the_await_is_missing() -> None:
    """JSON.parse of a call's promise (a forgotten await) said a tool's result is already
    data: it says the await is missing, as the promise's other misuses do."""
    code = "const r = tools.echo({});\nreturn JSON.parse(r);"
    ran = run(code, [rec("echo", {}, result="[1]")])
    assert ran.outcome == "failed" and ran.error is not None
    assert (ran.error.name, ran.error.message) == (
        "TypeError",
        'tools.echo(...) gives a promise, not its result: write "await tools.echo(...)"',
    )
    assert [x.line for x in ran.error.lines] == [2]


def test_other_undefined_names_and_caught_errors_keep_the_engines_message() -> None:
    """Only the globals a model reaches for get a hint, and only in the failure the model
    reads: a script's own typo, and an error the script catches, say what QuickJS said."""
    typo = run("return nope + 1;")
    assert typo.error is not None and typo.error.message == "nope is not defined"
    caught = run('try { fetch("x") } catch (e) { return e.message }')
    assert caught.outcome == "finished" and caught.value == "fetch is not defined"


@pytest.mark.parametrize(
    ("code", "line"),
    [
        ("function dec(t: any) { return t; }\n@dec\nclass A {}\nreturn 1;", 2),
        ("const dec = (t: any) => t;\nclass A {\n  @dec m() {}\n}\nreturn 1;", 3),
        ("const inj = (...a: any[]) => a;\nclass A {\n  constructor(@inj x: number) {}\n}", 3),
        ("const inj = (...a: any[]) => a;\nclass A {\n  m(a: number,@inj b: string) {}\n}", 3),
    ],
)
def test_decorators_say_they_are_not_supported(code: str, line: int) -> None:
    """A decorator, a parameter's among them (which said only "Unexpected token"), fails
    saying decorators are not supported, at its line."""
    ran = run(code)
    assert ran.outcome == "failed" and ran.error is not None
    assert ran.error.name == "SyntaxError"
    assert ran.error.message.endswith(
        "; decorators are not supported in a script: call the function instead"
    ), ran.error
    assert [x.line for x in ran.error.lines] == [line]


# ---- the web globals a script has ----


def test_crypto_gives_random_values_from_the_scripts_seed() -> None:
    """crypto.randomUUID and getRandomValues draw from the generator Math.random uses: the
    same values on every run of the script (another seed, others)."""
    code = (
        "const ids = [crypto.randomUUID(), crypto.randomUUID()];\n"
        "const bytes = Array.from(crypto.getRandomValues(new Uint8Array(6)));\n"
        "const words = crypto.getRandomValues(new Uint32Array(2)).length;\n"
        "let refused;\n"
        "try { crypto.getRandomValues(new Float64Array(1)); } catch (e) { refused = e.name; }\n"
        "try { crypto.getRandomValues(new Uint8Array(65537)); } catch (e) { refused += ' ' + e.name; }\n"
        "return [ids, bytes, words, refused];"
    )
    first = value(code)
    assert first == value(code)
    assert value(code, seed=SEED + 1)[0] != first[0]
    pattern = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
    assert all(pattern.match(i) for i in first[0]) and first[0][0] != first[0][1]
    assert len(first[1]) == 6 and all(0 <= b < 256 for b in first[1])
    assert first[2:] == [2, "TypeMismatchError QuotaExceededError"]


def test_structured_clone_as_browsers_have_it() -> None:
    code = """
        class Point { constructor() { this.x = 1; } }
        const a = { n: 1, d: new Date(5), m: new Map([[1, { y: 2 }]]), s: new Set(["s"]),
                    r: /a+/gi, u: new Uint16Array([1, 2]), e: new RangeError("bad"),
                    list: [1, , 3], p: new Point(), boxed: new String("b") };
        a.self = a;
        a.twice = [a.m, a.m];
        const b = structuredClone(a);
        const refused = [];
        for (const bad of [{ f() {} }, Symbol("s"), Promise.resolve(1), new WeakMap()]) {
          try { structuredClone(bad); } catch (e) { refused.push(e.name); }
        }
        return [b !== a, b.self === b, b.twice[0] === b.twice[1], b.m !== a.m, b.d.getTime(),
                b.m.get(1).y, b.s.has("s"), b.r.source + "/" + b.r.flags, Array.from(b.u),
                b.u instanceof Uint16Array, b.e instanceof RangeError, b.e.message, 1 in b.list,
                b.list.length, b.p instanceof Point, b.p.x, typeof b.boxed, String(b.boxed),
                refused];"""
    assert value(code) == [
        True, True, True, True, 5, 2, True, "a+/gi", [1, 2], True, True, "bad", False, 3,
        False, 1, "object", "b", ["DataCloneError"] * 4,
    ]  # fmt: skip


def test_structured_clone_of_a_value_nested_too_deeply_names_the_line() -> None:
    """A value nested past what the stack holds fails structuredClone at the script's line
    that cloned it (the RangeError was made deeper than a stack keeps, and named no line)."""
    ran = run("let v = {};\nfor (let i = 0; i < 100000; i++) v = { a: v };\nstructuredClone(v);")
    assert ran.error is not None and ran.error.name == "RangeError", ran
    assert ran.error.message == (
        "Maximum call stack size exceeded: structuredClone of a value nested too deeply; flatten it"
    )
    assert [x.line for x in ran.error.lines] == [3]


@pytest.mark.parametrize(
    "made",
    [
        "String(v)",
        "`${v}`",
        "v.join()",
        "v + ''",
        "[1, 2].join(v)",
        "[v, 1].sort()",
        "v.toLocaleString()",
        "(v.push(v), String(v))",
    ],
)
def test_text_of_an_array_nested_too_deeply_names_the_line(made: str) -> None:
    """An array made into text that is nested past what the stack holds, or holds itself, fails
    at the script's line that made the text (the RangeError was made deeper than a stack keeps,
    among the built-in's own frames, and named no line)."""
    ran = run(f"let v = [];\nfor (let i = 0; i < 100000; i++) v = [v];\nconst s = {made};")
    assert ran.error is not None and ran.error.name == "RangeError", ran
    assert ran.error.message == (
        "Maximum call stack size exceeded: an array made into text (by String, join or a "
        "template) holds itself or is nested too deeply; flatten it, or remove the cycle"
    )
    assert [x.line for x in ran.error.lines] == [3]


def test_an_items_own_runaway_to_string_keeps_its_error() -> None:
    """An overflow in an item's own toString names that function's line, as before, and
    arrays made into text still read as the engine's own."""
    code = "const o = { toString() { return String([this]); } };\nreturn String([o]);"
    ran = run(code)
    assert ran.error is not None and ran.error.message == "Maximum call stack size exceeded"
    assert [x.line for x in ran.error.lines] == [1]
    code = "return [String([1, [2, 3]]), `${[]}`, [[1], 2].join('-'), [1.5].toLocaleString()]"
    assert value(code) == ["1,2,3", "", "1-2", "1.5"]
    assert caught("Array.prototype.toString.call(null);")[0] == "TypeError"


def test_text_encoder_and_decoder_are_utf_8() -> None:
    code = """
        const bytes = new TextEncoder().encode("aé€😀");
        const bad = new Uint8Array([0x61, 0xff, 0xe2, 0x82, 0x62, 0xf0, 0x9f]);
        let fatal;
        try { new TextDecoder("utf-8", { fatal: true }).decode(bad); } catch (e) { fatal = e.name; }
        const into = new Uint8Array(4);
        const result = new TextEncoder().encodeInto("aé€", into);
        return [Array.from(bytes), new TextDecoder().decode(bytes), new TextDecoder().decode(bad),
                fatal, result, Array.from(into),
                new TextDecoder().decode(new Uint8Array([0xef, 0xbb, 0xbf, 0x78]))];"""
    assert value(code) == [
        [97, 195, 169, 226, 130, 172, 240, 159, 152, 128],
        "aé€😀",
        "a\ufffd\ufffdb\ufffd",  # as Node.js and browsers decode it
        "TypeError",
        {"read": 2, "written": 3},
        [97, 195, 169, 0],
        "x",
    ]


def test_url_search_params_as_browsers_have_it() -> None:
    """Each result is what Node.js 22 gives for the same code."""
    code = """
        const p = new URLSearchParams("?a=1&b=x+y%20z&a=2&c&d=%zz");
        p.append("e", "f");
        p.set("a", "3");
        const sorted = new URLSearchParams([["z", "1"], ["a", "2"], ["z", "0"]]);
        sorted.sort();
        const built = new URLSearchParams({ q: "a b&c~*()!'", n: 2, u: "é" });
        p.delete("e");
        return [p.toString(), p.getAll("a"), p.get("b"), p.get("c"), p.get("d"), p.get("no"),
                p.has("d"), [...p.keys()], p.size, sorted.toString(), built.toString(),
                Object.fromEntries(built), String(built) === built.toString()];"""
    assert value(code) == [
        "a=3&b=x+y+z&c=&d=%25zz",
        ["3"],
        "x y z",
        "",
        "%zz",
        None,
        True,
        ["a", "b", "c", "d"],
        4,
        "a=2&z=1&z=0",
        "q=a+b%26c%7E*%28%29%21%27&n=2&u=%C3%A9",
        {"q": "a b&c~*()!'", "n": "2", "u": "é"},
        True,
    ]


def test_web_globals_are_the_engines_own_whatever_the_script_replaces() -> None:
    """They are made before the script exists (sandbox/web.js), from the built-ins as the
    engine has them: a script that replaces a global they use does not break them. Like Node's,
    they are not enumerable and a script may replace them."""
    code = """
        const keys = Object.keys(globalThis);
        globalThis.Uint8Array = null; Array.from = null; globalThis.parseInt = null;
        const bytes = crypto.getRandomValues(new Int8Array(3)).length;
        const query = new URLSearchParams([["a", "%41"]]).toString();
        const decoded = new URLSearchParams("b=%41").get("b");
        const text = new TextDecoder().decode(new TextEncoder().encode("é"));
        globalThis.structuredClone = () => "mine";
        return [keys.filter((k) => ["crypto", "structuredClone", "TextEncoder"].includes(k)),
                typeof crypto, bytes, query, decoded, text, structuredClone(1)];"""
    assert value(code) == [[], "object", 3, "a=%2541", "A", "é", "mine"]


def test_the_web_globals_refuse_what_they_cannot_take_saying_what_they_take() -> None:
    code = """
        const out = [];
        const t = (f) => { try { f(); out.push("no error"); } catch (e) { out.push(e.name + ": " + e.message); } };
        t(() => new TextDecoder("latin1"));
        t(() => new TextDecoder().decode("text"));
        t(() => new TextEncoder().encodeInto("a", new Uint16Array(2)));
        t(() => new URLSearchParams([["a", "b", "c"]]));
        t(() => structuredClone());
        t(() => crypto.getRandomValues([1, 2]));
        return out;"""
    assert value(code) == [
        'RangeError: TextDecoder decodes UTF-8 only in a script, not "latin1"',
        "TypeError: decode takes an ArrayBuffer, a typed array or a DataView",
        "TypeError: encodeInto writes into a Uint8Array",
        "TypeError: each pair of a URLSearchParams' init must be [name, value]",
        "TypeError: structuredClone requires a value to clone",
        "TypeMismatchError: getRandomValues takes an integer typed array (a Uint8Array, say)",
    ]


def test_console_log_formats_its_first_string_as_node_does() -> None:
    """A first argument with % specifiers formats the arguments after it, as Node.js's
    util.format (a model writes `console.log("%s has %d", repo, n)`): it printed the
    specifiers and the arguments after them."""
    ran = run(
        """
        console.log("%s has %d open PRs", "acme/api", 3);
        console.log("%c styled %s", "color: red", "text");
        console.log("%i %f %j %o", 3.9, "2.5x", { a: [1] }, [1]);
        console.log("100%% done, %s", "ok", "extra", { k: 1 });
        console.log("%s and %s", "only one");
        console.log("%d %s", -0, -0, -0);
        console.log("%z stays", 1);
        console.log("%s %s %s %d", null, undefined, 10n, Symbol("s"));
        console.log("%j", (() => { const o = {}; o.o = o; return o; })());
        console.log("100%");
        console.assert(false, "%s is wrong", "x");
        """
    )
    assert ran.outcome == "finished", ran.error
    assert ran.printed.splitlines() == [
        "acme/api has 3 open PRs",
        " styled text",
        '3 2.5 {"a":[1]} [1]',
        '100% done, ok extra {"k":1}',
        "only one and %s",
        "-0 -0 -0",
        "%z stays 1",
        "null undefined 10n NaN",
        "[Circular]",
        "100%",
        "Assertion failed: x is wrong",
    ]


def test_console_logs_j_says_circular_of_a_cycle_alone() -> None:
    """%j of a value JSON.stringify refuses for another reason (a BigInt, a toJSON that
    throws) throws that error, as util.format does: each printed [Circular], a cycle the
    value did not hold."""
    code = 'try { console.log("%%j", %s); } catch (e) { return [e.name, e.message]; }'
    assert value(code % "{ n: 1n }") == ["TypeError", "BigInt are forbidden in JSON.stringify"]
    assert value(code % '{ toJSON() { throw new RangeError("mine"); } }') == ["RangeError", "mine"]


def test_a_table_of_rows_with_keys_of_their_own_stays_in_bounds() -> None:
    """console.table of rows whose keys differ (a column each) prints the rows whose grid of
    cells fits, then how many more there were (5,000 such rows failed the script on the
    memory limit: a cell for every row and column, 25 million of them)."""
    ran = run("console.table(Array.from({ length: 5000 }, (_, i) => ({ ['k' + i]: i })));")
    assert ran.outcome == "finished", ran.error
    assert ran.printed.endswith(" more rows\n") and "│ k0 │ k1 │" in ran.printed


def test_the_rest_of_console_prints_as_node_lays_it_out() -> None:
    """console.table, group, count, assert, dir and time: a model's script that calls one
    failed with "not a function" (after any calls it had made); each prints what Node.js
    prints (values as console.log shows them), and time, as the clock, does not move."""
    ran = run(
        """
        console.table([{ a: 1, b: "x" }, { a: 22, c: true }]);
        console.table(new Map([["k", 1]]));
        console.table([{ a: 1, b: 2 }, 3], ["a"]);
        console.table("plain");
        console.group("G");
        console.log("in\\ntwo");
        console.group();
        console.count();
        console.groupEnd();
        console.groupEnd();
        console.count();
        console.countReset();
        console.count("x");
        console.assert(1 === 2, "nope", 3);
        console.assert(true, "fine");
        console.dir({ a: [1] }, { depth: 0 });
        console.dir("s");
        console.time("t");
        console.timeEnd("t");
        """
    )
    assert ran.outcome == "finished", ran.error
    assert ran.printed == (
        "┌─────────┬────┬─────┬──────┐\n"
        "│ (index) │ a  │ b   │ c    │\n"
        "├─────────┼────┼─────┼──────┤\n"
        '│ 0       │ 1  │ "x" │      │\n'
        "│ 1       │ 22 │     │ true │\n"
        "└─────────┴────┴─────┴──────┘\n"
        "┌───────────────────┬─────┬────────┐\n"
        "│ (iteration index) │ Key │ Values │\n"
        "├───────────────────┼─────┼────────┤\n"
        '│ 0                 │ "k" │ 1      │\n'
        "└───────────────────┴─────┴────────┘\n"
        "┌─────────┬───┐\n"
        "│ (index) │ a │\n"
        "├─────────┼───┤\n"
        "│ 0       │ 1 │\n"
        "│ 1       │   │\n"
        "└─────────┴───┘\n"
        "plain\n"
        "G\n"
        "  in\n"
        "  two\n"
        "    default: 1\n"
        "default: 2\n"
        "x: 1\n"
        "Assertion failed: nope 3\n"
        '{"a":[1]}\n'
        '"s"\n'
        "t: 0ms\n"
    )


def test_a_table_of_a_huge_object_is_cut() -> None:
    """console.table stops at the printed bound, as console.log does, and says how many rows
    it left out, instead of laying out text nobody keeps."""
    ran = run(
        "console.table(Array.from({ length: 100000 }, (_, i) => ({ i, s: 'x'.repeat(20) })));"
    )
    assert ran.outcome == "finished", ran.error
    assert "more rows" in ran.printed and len(ran.printed) < 200_000


def test_a_stack_the_script_reads_is_as_node_writes_it() -> None:
    """`e.stack` (printed in a catch, a habit) reads as Node.js's: "Name: message" first
    (QuickJS gives the frames alone: the message was not printed at all), then the script's
    frames only (the engine's, numbered past 300,000, named no line of the script), its top
    level as `at <input>:L:C`, the columns of its first line as written. What a script sets
    `e.stack` to, it reads back; the engine still names the lines the error was made at."""
    code = (
        "const p = tools.echo({ a: 1 });\n"
        "const out = [];\n"
        "try { p.filter(Boolean); } catch (e) { out.push(e.stack); }\n"
        "function f(x) { return [1].map((y) => x.q.z); }\n"
        "try { f({}); } catch (e) { out.push(e.stack); }\n"
        "const set = new Error('set'); set.stack = 'mine'; out.push(set.stack);\n"
        "await p;\n"
        "return out;"
    )
    ran = run(code, [rec("echo", {"a": 1}, result=1)])
    assert ran.outcome == "finished", ran.error
    assert ran.value == [
        'TypeError: tools.echo(...) gives a promise, not its result: write "await '
        'tools.echo(...)"\n    at <input>:3:7',
        "TypeError: cannot read property 'z' of undefined\n"
        "    at <anonymous> (<input>:4:39)\n"
        "    at map (native)\n"
        "    at f (<input>:4:28)\n"
        "    at <input>:5:7",
        "mine",
    ]
    # The first line's columns are numbered as the second's: the same text, the same column.
    first = value("try { null.x } catch (e) { return e.stack }")
    second = value("\ntry { null.x } catch (e) { return e.stack }")
    assert first == "TypeError: cannot read property 'x' of null\n    at <input>:1:7", first
    assert second == first.replace(":1:", ":2:"), second


def test_a_stack_the_script_reads_names_its_own_lines() -> None:
    """`e.stack` as the script reads it (printed, to see where it failed) numbers the lines
    as the model wrote them: it said line n + 1, the wrapper's line before the script's."""
    code = (
        "function f() {\n  throw new Error('boom');\n}\ntry {\n  f();\n} catch (e) {\n"
        "  return e.stack;\n}"
    )
    stack = value(code)
    assert re.findall(r"<input>:(\d+)", stack)[:2] == ["2", "5"], stack
    first = value("try { null.x } catch (e) { return e.stack }")
    assert re.findall(r"<input>:(\d+)", first)[:1] == ["1"], first


def test_a_result_with_an_integer_past_2_53_says_the_script_reads_it_rounded() -> None:
    """JavaScript's numbers hold integers exactly up to 2^53: an id past it (a snowflake, a
    database bigint) was read rounded without a word, and passed on it named another row.
    A warning says so, once a run; 2^53 itself and digits in a string get none."""
    big = 1234567890123456789
    records = [
        rec("echo", {"i": 0}, result={"id": big, "name": "a"}),
        rec("echo", {"i": 1}, result=[{"id": -big}]),
    ]
    code = (
        "const a = await tools.echo({ i: 0 });\nawait tools.echo({ i: 1 });\nreturn String(a.id);"
    )
    ran = run(code, records)
    assert ran.outcome == "finished" and ran.value == "1234567890123456800", ran.error
    assert ran.printed == (
        f"Warning: tools.echo(...) returned the integer {big}, past what JavaScript's numbers "
        "hold exactly (2^53): the script reads it rounded; have the tool return such numbers "
        "as strings\n"
    )
    exact = [rec("echo", {}, result={"id": 2**53, "s": str(big), "f": 1.5e300})]
    ran = run("return String((await tools.echo({})).id);", exact)
    assert ran.value == str(2**53) and ran.printed == ""


@pytest.mark.parametrize(
    "returned",
    [
        # A getter that answers otherwise at each read, and says when it is read.
        "let reads = 0;\nconst out = { get reads() { console.log('read'); return ++reads; } };",
        # A toJSON that does.
        "const out = [{ toJSON() { return Math.random(); } }];",
        "Object.prototype.toJSON = function () { return Math.random(); };\nconst out = {};",
    ],
)
def test_no_changed_line_for_a_value_that_reads_otherwise_each_time(returned: str) -> None:
    """A returned value whose reading runs the script's code is read once, at the return:
    not again once the calls have answered, where a getter that answered otherwise had the
    line say that code waiting on the call changed the value (and printed 'read' twice)."""
    code = returned + "\ntools.list_prs({}).then(() => {});\nreturn out;"
    for live in (False, True):
        ran = _js_to_the_end(code, live=live)
        assert ran.outcome == "finished", ran.error
        assert ran.printed == ("read\n" if "read" in returned else ""), ran.printed


def test_a_changed_line_for_a_getter_put_in_the_value_after_the_return() -> None:
    """A value that was plain data at the return and is not once the calls have answered
    was changed by the code that waited on them: the line says so."""
    code = (
        "const out = {};\n"
        "tools.list_prs({}).then(() => { Object.defineProperty(out, 'n', "
        "{ get: () => 1, enumerable: true }); });\nreturn out;"
    )
    for live in (False, True):
        ran = _js_to_the_end(code, live=live)
        assert ran.outcome == "finished" and ran.value == {}, ran.error
        one = runtime.changed_after_return(1, "tools.list_prs(...)")
        assert ran.printed == f"line 2: Warning: {one}\n"


@pytest.mark.parametrize(
    "replaced",
    [
        "Array.prototype[Symbol.iterator] = function () { throw new Error('mine'); };",
        "Promise.resolve = () => 7;\nPromise.reject = () => 7;",
        "globalThis.Symbol = {};",
    ],
)
@pytest.mark.parametrize("version", [1, protocol.VERSION])
def test_calls_and_streams_take_no_builtin_the_script_replaced(replaced: str, version: int) -> None:
    """A tool call's promise and a stream of files are made with the engine's own built-ins,
    whatever the script replaced before: the first call made its promise's prototype with the
    script's array iterator (and failed with its error), and a stream's next settled with
    its Promise.resolve ('iterator must return an object') and was found by its
    Symbol.asyncIterator."""
    code = (
        replaced + "\nconst r = await tools.echo({ a: 1 });\nconst lines = [];\n"
        "for await (const l of files.lines('f.txt')) lines.push(l);\nreturn [r, lines];"
    )
    made = protocol.Script(
        id="b",
        code=code,
        tools=["echo"],
        records=[rec("echo", {"a": 1}, result={"ok": True})],
        files=[protocol.FileInfo(id="f.txt", mime="text/plain", size=4)],
        clock=protocol.Clock(now_ms=0, seed=1),
        version=version,
    )
    ran = runtime.run_in_process(
        made, lambda _f, offset, length: b"a\nb\n"[offset : offset + length]
    )
    assert ran.outcome == "finished", ran.error
    assert ran.value == [{"ok": True}, ["a", "b"]]


@pytest.mark.parametrize(
    "replaced",
    [
        "String.prototype.charCodeAt = () => 114;",
        "String.prototype.charCodeAt = () => 0;",
        "String.prototype.slice = () => '[\"forged\"]';",
        "Array.prototype.map = () => ['forged'];\nArray.prototype.join = () => 'forged';",
    ],
)
def test_the_hosts_answers_are_read_with_the_engines_own_methods(replaced: str) -> None:
    """A call's answer, a file's and the closest tools' names are read with the prelude's
    copies of the string and array methods: a script that replaced charCodeAt had a call fail
    with "cannot read property 'resolve' of undefined" and files.list() say "the run has
    ended"; one that replaced slice read files.list() as what its slice gave."""
    code = (
        replaced + "\nconst r = await tools.echo({ a: 1 });\n"
        "let missing = '';\ntry { await tools.ech({}); } catch (e) { missing = e.message; }\n"
        "return [r, files.list()[0].id, missing];"
    )
    made = protocol.Script(
        id="a",
        code=code,
        tools=["echo"],
        records=[rec("echo", {"a": 1}, result={"ok": True})],
        files=[protocol.FileInfo(id="f.txt", mime="text/plain", size=4)],
        clock=protocol.Clock(now_ms=0, seed=1),
    )
    ran = runtime.run_in_process(made)
    assert ran.outcome == "finished", ran.error
    assert ran.value == [
        {"ok": True},
        "f.txt",
        "tools.ech does not exist; the closest tools are tools.echo. Find tools with await "
        'tools.tool_search({ query: "..." }).',
    ]


@pytest.mark.parametrize(
    "replaced",
    [
        "Array.prototype.push = () => 0;\nArray.prototype.join = () => 'J';\n"
        "Array.prototype.includes = () => true;\nArray.prototype.map = () => [];\n"
        "Array.prototype.pop = () => 0;",
        "Object.defineProperty(Array.prototype, '0', "
        "{ set() { throw new Error('setter'); }, configurable: true });",
        "Date.prototype.toString = () => 'forged';",
    ],
)
def test_console_log_and_date_take_no_array_method_the_script_replaced(replaced: str) -> None:
    """console.log and Date gather their parts in lists of the prelude's own: a script that
    replaced Array.prototype.push had console.log print 'J' for all it was given, and
    `new Date(2026, 0, 2)` read the machine's clock (its parts were never gathered), which
    no replay gives again; one that put a setter on Array.prototype had every value print
    '[unprintable: Error: setter]'; Date() gave what a replaced toString gave."""
    code = (
        replaced + "\nconsole.log({ a: [1, { b: 2 }] }, new Map([[1, 2]]), new Set([3]), "
        "new Error('x', { cause: new Error('y') }), 'two');\n"
        # Text, not an array: QuickJS's own JSON.stringify sets indexes of arrays of its own,
        # so a setter on Array.prototype fails any array returned.
        "return new Date(2026, 0, 2).toISOString() + ' | ' + Date();"
    )
    ran = run(code)
    assert ran.outcome == "finished", ran.error
    assert ran.value == "2026-01-02T00:00:00.000Z | Thu Jan 01 2026 00:00:00 GMT+0000"
    assert ran.printed.startswith(
        '{"a":[1,{"b":2}]} Map(1) {1 => 2} Set(1) {3} Error: x { [cause]: Error: y }\n'
    ), ran.printed
    assert ran.printed.endswith(" two\n"), ran.printed


def test_groups_tools_text_and_where_a_value_fails_take_no_method_the_script_replaced() -> None:
    """console.groupEnd, `${tools}` and the path a returned value's failure names use the
    prelude's own methods: a script's String.prototype.slice printed its text in front of
    the next line, its Array.prototype.join named the tools, and its RegExp.prototype.test
    wrote value.a as value["a"]."""
    group = run(
        "String.prototype.slice = () => 'X';\nconsole.group('g');\nconsole.log('in');\n"
        "console.groupEnd();\nconsole.log('out');"
    )
    assert group.printed == "g\n  in\nout\n", group.printed
    assert value("Array.prototype.join = () => 'J';\nreturn `${tools}`") == (
        "[tools: " + ", ".join(sorted(TOOLS)) + "]"
    )
    ran = run("RegExp.prototype.test = () => false;\nreturn { a: { b: [1, NaN] } };")
    assert ran.error is not None and "value.a.b[1] is NaN" in ran.error.message, ran.error
