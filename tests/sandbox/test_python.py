"""Python scripts in this process (no confinement): the replay rules, limits, printed output,
values, errors and the in-interpreter refusals of sandbox/python.py.

The JavaScript runtime's cases (tests/sandbox/test_runtime.py, test_live.py) mirrored for
Python; the confined process is in tests/hostile and tests/runner.
"""

from __future__ import annotations

import gc
import linecache
import subprocess
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import orjson
import pytest

from sandbox import protocol, runtime
from sandbox.names import unwritable_tool
from sandbox.protocol import Clock, FileInfo, Limits, Ran, Record, Script
from tests._garbage import collect_runs_garbage
from tests.sandbox.conftest import NEVER_CALLED, NOW_MS, SEED, TOOLS, KiB, MiB, rec


def pyscript(
    code: str,
    records: Iterable[Record] = (),
    tools: Sequence[str] = TOOLS,
    *,
    now_ms: int = NOW_MS,
    seed: int = SEED,
    version: int = 1,
    files: Sequence[FileInfo] = (),
    **limits: int,
) -> Script:
    return Script(
        id="test",
        language="python",
        version=version,
        code=code,
        records=list(records),
        tools=list(tools),
        files=list(files),
        clock=Clock(now_ms=now_ms, seed=seed),
        limits=Limits(**limits),
    )


def run(code: str, records: Iterable[Record] = (), **kwargs: Any) -> Ran:
    fetch = kwargs.pop("fetch", None)
    # Runs share this process, as no two share a sandbox's.
    collect_runs_garbage()
    return runtime.run_in_process(pyscript(code, records, **kwargs), fetch)


def value(code: str, records: Iterable[Record] = (), **kwargs: Any) -> Any:
    ran = run(code, records, **kwargs)
    assert ran.outcome == "finished", ran.error
    return ran.value


def failed(code: str, records: Iterable[Record] = (), **kwargs: Any) -> protocol.ScriptError:
    ran = run(code, records, **kwargs)
    assert ran.outcome == "failed", ran
    assert ran.error is not None
    return ran.error


def caught(code: str, records: Iterable[Record] = (), **kwargs: Any) -> list[str]:
    """Run ``code`` in a try; [class name, message] of what it raised."""
    body = "\n".join("    " + line for line in code.split("\n"))
    wrapped = f"try:\n{body}\nexcept Exception as e:\n    return [type(e).__name__, str(e)]\n"
    result: list[str] = value(wrapped + "return ['none', '']", records, **kwargs)
    return result


# ---- the stale-PRs example, step by step ----

STALE = """\
import asyncio, datetime
prs = await tools.list_prs(repo="acme/api", state="open")
now = datetime.datetime.now(datetime.timezone.utc)
stale = [p for p in prs
         if now - datetime.datetime.fromisoformat(p["updated_at"].replace("Z", "+00:00"))
         > datetime.timedelta(days=14)]
reviews = await asyncio.gather(*[tools.get_reviews(number=p["number"]) for p in stale])
print(f"{len(stale)} stale")
return [{"number": p["number"], "reviews": len(r)} for p, r in zip(stale, reviews)]
"""
PRS = [
    {"number": 12, "updated_at": "2025-11-01T09:00:00Z"},
    {"number": 14, "updated_at": "2025-12-30T09:00:00Z"},
    {"number": 15, "updated_at": "2025-12-01T09:00:00Z"},
]
LIST = rec("list_prs", {"repo": "acme/api", "state": "open"}, result=PRS)


def test_stale_prs_steps() -> None:
    first = run(STALE)
    assert first.outcome == "calls"
    assert [(c.name, c.arguments) for c in first.calls] == [("list_prs", LIST.arguments)]
    second = run(STALE, [LIST])
    assert [(c.name, c.arguments) for c in second.calls] == [
        ("get_reviews", {"number": 12}),
        ("get_reviews", {"number": 15}),
    ]
    records = [LIST, rec("get_reviews", {"number": 12}, result=[])]
    records.append(rec("get_reviews", {"number": 15}, result=[{"s": 1}, {"s": 2}]))
    third = run(STALE, records)
    assert third.outcome == "finished", third.error
    assert third.value == [{"number": 12, "reviews": 0}, {"number": 15, "reviews": 2}]
    assert third.printed == "2 stale\n"


def test_the_clock_steers_the_script() -> None:
    later = run(STALE, [LIST], now_ms=NOW_MS + 40 * 86_400_000)
    assert len(later.calls) == 3


# ---- calls ----


def test_recorded_result_and_error() -> None:
    records = [rec("echo", {"a": 1}, result={"x": [1, 2]}), rec("echo", {"a": 2}, error="nope")]
    code = (
        "r = await tools.echo(a=1)\n"
        "try:\n    await tools.echo({'a': 2})\n"
        "except Exception as e:\n    return [r, type(e).__name__, str(e), e.tool]"
    )
    assert value(code, records) == [{"x": [1, 2]}, "ToolError", "nope", "echo"]


def test_uncaught_tool_error_fails_with_its_message_and_line() -> None:
    error = failed("x = 1\nawait tools.echo(a=2)", [rec("echo", {"a": 2}, error="nope")])
    assert (error.name, error.message) == ("ToolError", "nope")
    assert [(x.line, x.text) for x in error.lines] == [(2, "await tools.echo(a=2)")]


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (
            "try:\n    await tools.echo(a=2)\nexcept Exception as e:\n"
            "    raise ValueError('sync failed') from e",
            "sync failed (caused by ToolError: nope)",
        ),
        (
            "try:\n    {}['k']\nexcept KeyError:\n    raise ValueError('no k')",
            "no k (raised while handling KeyError: 'k')",
        ),
        (
            "try:\n    await tools.echo(a=2)\nexcept Exception:\n"
            "    raise ValueError('sync failed') from None",
            "sync failed",
        ),
        (
            "class E(Exception):\n    def __str__(self):\n        raise TypeError()\n"
            "raise ValueError('outer') from E()",
            "outer (caused by E: its message could not be made: str() of it raised TypeError)",
        ),
        ("raise ValueError('plain')", "plain"),
    ],
    ids=["from", "during", "from-none", "unreadable", "plain"],
)
def test_an_uncaught_errors_cause_is_said_as_cpythons_traceback_says_it(
    code: str, said: str
) -> None:
    """The error a failed script's error was raised from (``raise ... from e``) or while
    handling (in an ``except``), which CPython's traceback shows above it, follows its
    message: a tool's error wrapped by the script was lost."""
    error = failed(code, [rec("echo", {"a": 2}, error="nope")])
    assert (error.name, error.message) == ("ValueError", said)


def test_keyword_and_dict_forms_make_the_same_call_and_none_is_left_out() -> None:
    ran = run("await tools.echo(a=1, b=None, c={'d': None})")
    ran2 = run("await tools.echo({'a': 1, 'b': None, 'c': {'d': None}})")
    assert ran.calls == ran2.calls
    assert ran.calls[0].arguments == {"a": 1, "c": {"d": None}}
    assert run("await tools.echo()").calls[0].arguments == {}


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        ("tools.echo({'a': 1}, b=2)", "takes keyword arguments"),
        ("tools.echo([1])", "takes keyword arguments"),
        ("tools.echo(a={1, 2})", "a in the argument is a set (pass a list)"),
        ("tools.echo(a=float('nan'))", "a in the argument is nan"),
        ("tools.echo(a={'xs': [1, {2}]})", "a.xs[1] in the argument is a set (pass a list)"),
        ("tools.echo(a={(1,): 2})", "a in the argument has a key of type tuple"),
        # The key is named, not the dict ("a in the argument is nan", of a dict).
        (
            "tools.echo(a={'b': {float('nan'): 1}})",
            "a.b in the argument has a key that is nan; a number key becomes JSON text only "
            "when finite (an int: within 64 bits); make it a string",
        ),
        ("tools.echo(a={2**70: 1})", "a in the argument has a key that is an integer past 64"),
        ("tools.echo(a=2**70)", "integer too large"),
        ("x = []\nx.append(x)\ntools.echo(a=x)", "refers to itself"),
        ("import datetime\ntools.echo(a=datetime.date.today())", "isoformat"),
        ("class Order:\n    pass\ntools.echo(a=Order())", "a in the argument is an Order;"),
        (
            "async def f():\n    return 1\ntools.echo(a=[f()])",
            "a[0] in the argument is a coroutine (await it for its value; for a list of them, "
            "await asyncio.gather(*them));",
        ),
    ],
)
def test_arguments_that_are_not_data_raise_a_type_error(call: str, needle: str) -> None:
    """Raised where the call is awaited, as a coroutine's own check of its arguments would
    be (no call is made): gather with return_exceptions keeps the others' results."""
    awaited = call.replace("tools.echo", "await tools.echo")
    name, message = caught(awaited)
    assert name == "TypeError"
    assert needle in message
    ran = run(awaited)
    assert ran.outcome == "failed" and ran.calls == []
    code = (
        "import asyncio\n"
        + call.replace("tools.echo(", "bad = tools.echo(")
        + "\nrs = await asyncio.gather(tools.echo(b=1), bad, return_exceptions=True)\n"
        "return [type(r).__name__ for r in rs]"
    )
    kept = run(code, [rec("echo", {"b": 1}, result=1)])
    assert kept.outcome == "finished", kept.error
    assert kept.value == ["int", "TypeError"]


@pytest.mark.parametrize(
    ("code", "hint"),
    [
        ("async def main():\n    return 1\nreturn main", "call and await it"),
        ("def f():\n    return 1\nreturn f", "call it"),
    ],
)
def test_a_function_returned_says_to_call_it(code: str, hint: str) -> None:
    """`return main` for `return await main()`: it said "the returned value is a function;
    data must be plain (...)", not what to do (a JavaScript script's says to call it)."""
    assert failed(code).message == (
        f"the returned value is a function ({hint} for the data it makes); data must be plain "
        "(dict, list, tuple, str, int, float, bool, None); return plainer data"
    )


def test_tuples_and_numeric_keys_become_json() -> None:
    assert run("await tools.echo(a=(1, 2), b={1: 'x'})").calls[0].arguments == {
        "a": [1, 2],
        "b": {"1": "x"},
    }


def test_a_number_of_a_subclass_is_sent_as_its_value() -> None:
    """An int or float subclass is the number it holds, as json.dumps writes it and ==
    compares it: its own __int__ or __float__ said another (I(5) was sent as 999)."""
    code = (
        "class I(int):\n    def __int__(self):\n        return 999\n"
        "class F(float):\n    def __float__(self):\n        return 9.5\n"
        "await tools.echo(i=I(5), f=F(1.5))"
    )
    assert run(code).calls[0].arguments == {"i": 5, "f": 1.5}


def test_unknown_tool_names_the_closest() -> None:
    name, message = caught("await tools.get_usr(id=1)")
    assert name == "AttributeError"
    assert "tools.get_usr does not exist; the closest tools are tools.get_user" in message


def test_run_code_is_refused() -> None:
    _, message = caught("await tools.run_code(code='1')", tools=(*TOOLS, "run_code"))
    assert "cannot be called from a script" in message


def test_divergence_names_both_calls_and_cannot_be_caught() -> None:
    code = "try:\n    await tools.echo(a=2)\nexcept BaseException:\n    return 'caught'"
    error = failed(code, [rec("echo", {"a": 1}, result=1)])
    assert error.name == "DivergenceError"
    assert "tools.echo(a=1)" in error.message and "tools.echo(a=2)" in error.message
    assert "the clock (time, datetime) and random" in error.message


@pytest.mark.parametrize("version", [1, protocol.LIVE_VERSION])
def test_divergence_names_the_script_line_that_made_the_call(version: int) -> None:
    """A divergence names the script's line that made the call that differs, as any failure
    does: it named none."""
    records = [rec("echo", {"n": 1}, result=1), rec("echo", {"n": 2}, result=2)]
    error = failed("x = 1\nawait tools.echo(n=1)\nawait tools.echo(n=3)", records, version=version)
    assert error.name == "DivergenceError"
    assert [(x.line, x.text) for x in error.lines] == [(3, "await tools.echo(n=3)")]


@pytest.mark.parametrize("version", [1, protocol.LIVE_VERSION])
def test_a_run_that_returns_before_the_logs_calls_diverges(version: int) -> None:
    """A run that returns while the log holds calls it never made (an earlier run went on
    past that point: the order of a set holding NaN, whose hash is its address, steered it)
    fails as a divergence naming the first call it left out, in Python's words; it finished
    with the calls lost."""
    records = [rec("echo", {"n": n}, result=n) for n in (1, 2, 3)]
    code = "await tools.echo(n=1)\nreturn 'early'"
    error = failed(code, records, version=version)
    assert error.name == "DivergenceError"
    assert error.message.startswith(
        "call 2 is missing: the script's earlier run made tools.echo(n=2), this run returned "
        "after 1 call of the log's 3."
    )


def test_a_run_stuck_before_the_logs_calls_diverges_where_it_waits() -> None:
    """Stuck (waiting on nothing it can complete) before the log's later calls: the
    divergence names the line it waits at, as its stuck error would have."""
    records = [rec("echo", {"n": n}, result=n) for n in (1, 2)]
    code = "import asyncio\nawait tools.echo(n=1)\nawait asyncio.Event().wait()"
    error = failed(code, records)
    assert error.name == "DivergenceError" and "this run stopped, waiting" in error.message
    assert [(x.line, x.text) for x in error.lines] == [(3, "await asyncio.Event().wait()")]


def test_divergence_writes_the_calls_as_python_does() -> None:
    """The calls a divergence names are written as a Python script writes them (keywords, its
    True and None; a key that is no name in **{...}), not as JavaScript's object of
    arguments: a Python script was shown tools.echo({"on":false,"x":null})."""
    code = "return await tools.echo(on=True, items=[1.5, 'a'], **{'a-b': 3, 'class': 2})"
    error = failed(code, [rec("echo", {"on": False, "x": None}, result=1)])
    assert error.name == "DivergenceError"
    assert "earlier run made tools.echo(on=False, x=None), this run made " in error.message
    assert "tools.echo(items=[1.5, 'a'], on=True, **{'a-b': 3, 'class': 2})" in error.message


def test_unanswered_call_stops_the_run_and_later_code_does_not_run() -> None:
    ran = run("try:\n    await tools.echo(a=1)\nfinally:\n    print('finally')\nprint('after')")
    assert ran.outcome == "calls"
    assert ran.printed == ""


def test_a_call_made_and_not_awaited_is_still_made() -> None:
    ran = run("tools.echo(a=1)\nreturn 5")
    assert ran.outcome == "calls"
    assert ran.calls[0].arguments == {"a": 1}


def test_gather_makes_independent_calls_one_step_in_argument_order() -> None:
    code = (
        "import asyncio\n"
        "async def two(n):\n"
        "    a = await tools.echo(n=n)\n"
        "    return await tools.search(q=a)\n"
        "return await asyncio.gather(two(1), two(2), tools.get_user(id=3))"
    )
    first = run(code)
    assert [(c.name, c.arguments) for c in first.calls] == [
        ("get_user", {"id": 3}),
        ("echo", {"n": 1}),
        ("echo", {"n": 2}),
    ]
    records = [rec(c.name, c.arguments, result=c.arguments) for c in first.calls]
    second = run(code, records)
    assert [(c.name, c.arguments) for c in second.calls] == [
        ("search", {"q": {"n": 1}}),
        ("search", {"q": {"n": 2}}),
    ]
    records += [rec(c.name, c.arguments, result=c.arguments["q"]["n"]) for c in second.calls]
    assert value(code, records) == [1, 2, {"id": 3}]


def test_gather_raises_the_first_error_or_returns_them() -> None:
    records = [rec("echo", {"a": 1}, error="bad"), rec("echo", {"a": 2}, result=2)]
    code = "import asyncio\nreturn await asyncio.gather(tools.echo(a=1), tools.echo(a=2){})"
    assert failed(code.format(""), records).message == "bad"
    result = value(code.format(", return_exceptions=True").replace("return await", "r = await")
                   + "\nreturn [str(r[0]), r[1]]", records)  # fmt: skip
    assert result == ["bad", 2]


def test_create_task_and_sleep() -> None:
    code = (
        "import asyncio\n"
        "order = []\n"
        "async def a():\n    order.append('a1'); await asyncio.sleep(0); order.append('a2')\n"
        "t = asyncio.create_task(a())\n"
        "order.append('main')\n"
        "await asyncio.sleep(1)\n"
        "await t\n"
        "return order"
    )
    assert value(code) == ["main", "a1", "a2"]


def test_create_task_takes_a_tool_call_and_sleep() -> None:
    """``asyncio.create_task(tools.x(...))`` is the call's task (CPython's ensure_future of
    an awaitable), as is one of ``asyncio.sleep``; anything else is refused by name."""
    code = (
        "import asyncio\n"
        "t = asyncio.create_task(tools.echo(i=1))\n"
        "u = asyncio.create_task(tools.echo(i=2))\n"
        "s = asyncio.create_task(asyncio.sleep(0, 'slept'))\n"
        "return [await t, *(await asyncio.gather(u, s))]"
    )
    first = run(code)
    assert first.outcome == "calls"
    assert [(c.name, c.arguments) for c in first.calls] == [("echo", {"i": 1}), ("echo", {"i": 2})]
    records = [rec("echo", {"i": i}, result=i * 10) for i in (1, 2)]
    assert value(code, records) == [10, 20, "slept"]
    message = failed("import asyncio\nasyncio.create_task(5)").message
    assert message == (
        "asyncio.create_task takes a coroutine or a tool call, as "
        "asyncio.create_task(tools.name(...)), not int"
    )


def test_stuck_script_fails() -> None:
    code = "import asyncio\nasync def f():\n    await t\nt = asyncio.create_task(f())\nawait t"
    error = failed(code)
    assert error.name == "StuckError"


def test_awaiting_something_else_is_a_type_error() -> None:
    code = "class A:\n    def __await__(self):\n        yield 5\nawait A()"
    assert "awaits coroutines and tool calls, not int" in failed(code).message


# ---- a forgotten await ----

ECHO = rec("echo", {"a": 1}, result={"x": [1, 2]})
NOT_AWAITED = 'tools.echo(...) gives an awaitable, not its result: write "await tools.echo(...)"'


@pytest.mark.parametrize(
    "use",
    [
        "r['x']",
        "r['x'] = 1",
        "del r['x']",
        "r.get('x')",
        "r.x",
        "getattr(r, 'x', None)",
        "hasattr(r, 'items')",
        "len(r)",
        "list(r)",
        "for x in r:\n    pass",
        "a, b = r",
        "'x' in r",
        "if r:\n    pass",
        "not r",
        "r == {'x': [1, 2]}",
        "r != None",
        "r < 1",
        "r + 1",
        "1 + r",
        "r * 2",
        "r / 2",
        "r % 2",
        "r | {}",
        "-r",
        "abs(r)",
        "int(r)",
        "float(r)",
        "round(r, 2)",
        "[1, 2][r]",
        "f'{r:.2f}'",
        "'{0[x]}'.format(r)",
        "sum([r])",
        "sorted([r, r])",
        "import math\nmath.floor(r)",
        "import statistics\nstatistics.mean([r, r])",
        "import json\njson.dumps(r)",
        "import json\njson.dumps({'prs': [r]})",
        "import json, io\njson.dump(r, io.StringIO())",
        "import json\nclass E(json.JSONEncoder):\n    pass\njson.dumps(r, cls=E)",
        "import json\njson.loads(r)",
        "async def f():\n    async for x in r:\n        pass\nawait f()",
        # A session a tool's result would be ('_Call' object does not support the
        # asynchronous context manager protocol).
        "async with r as session:\n    pass",
        "with r as session:\n    pass",
        "import contextlib\nwith contextlib.ExitStack() as stack:\n    stack.enter_context(r)",
    ],
)
def test_a_call_used_as_its_result_is_a_type_error_naming_the_fix(use: str) -> None:
    """A tool call not awaited and used as the value it gives (an item, an attribute, a
    truth value, arithmetic, a comparison, a format, iteration) raises a TypeError that
    names the tool and says to await it (before, an AttributeError, an unhelpful
    TypeError, or no error at all: `if r:` was true, `r == x` false)."""
    assert caught(f"r = tools.echo(a=1)\n{use}", [ECHO]) == ["TypeError", NOT_AWAITED]


@pytest.mark.parametrize(("result", "kind"), [({"x": 1}, "dict"), ([1], "list")])
def test_json_loads_of_a_result_says_it_is_data_already(result: Any, kind: str) -> None:
    """A tool's result is data, not JSON text: json.loads of it says to use it as it is
    (CPython's message alone reads as if the tool had answered wrongly)."""
    code = "import json\nr = await tools.echo(a=1)\njson.loads(r)"
    assert caught(code, [rec("echo", {"a": 1}, result=result)]) == [
        "TypeError",
        f"the JSON object must be str, bytes or bytearray, not {kind}: a tool's result is "
        "already data, so use it as it is (json.dumps makes text of it)",
    ]
    assert value(
        "import json\nreturn [json.loads('[1]'), json.loads(b'2'), json.loads('1.5', parse_float=str)]"
    ) == [[1], 2, "1.5"]


@pytest.mark.parametrize("given", ["[tools.echo(a=1)]", "(tools.echo(a=1),)"])
def test_gather_of_a_list_says_to_unpack_it(given: str) -> None:
    """CPython's asyncio.gather([...]) says "unhashable type: 'list'"."""
    assert caught(f"import asyncio\nawait asyncio.gather({given})", [ECHO]) == [
        "TypeError",
        "asyncio.gather takes each awaitable as an argument of its own, not a list of them: "
        "write asyncio.gather(*calls)",
    ]
    code = "import asyncio\ncalls = [tools.echo(a=1)]\nreturn await asyncio.gather(*calls)"
    assert value(code, [ECHO]) == [{"x": [1, 2]}]


def test_a_call_not_awaited_prints_what_to_write() -> None:
    """What print, str, repr and an f-string show for a call not awaited says to await it
    (before: `<_Future pending>`); a tool whose name is no attribute is shown through
    getattr, as a script calls it."""
    code = (
        "r = tools.echo(a=1)\nprint(r)\nprint(f'got {r}')\n"
        "k = getattr(tools, 'class')(a=1)\nreturn [str(r) == repr(r), repr(k)]"
    )
    records = [ECHO, rec("class", {"a": 1}, result=1)]
    ran = run(code, records, tools=(*TOOLS, "class"))
    assert ran.outcome == "finished", ran.error
    assert ran.printed == f"<{NOT_AWAITED}>\ngot <{NOT_AWAITED}>\n"
    assert ran.value == [
        True,
        '<getattr(tools, "class")(...) gives an awaitable, not its result: '
        'write "await getattr(tools, "class")(...)">',
    ]


@pytest.mark.parametrize(
    "code", ['return await tools._2fa_verify(code="1")', "check = tools._2fa_verify\nreturn 1"]
)
def test_a_tool_written_as_an_attribute_it_cannot_be_says_how_to_call_it(code: str) -> None:
    """With the type check off, `tools._2fa_verify(...)` (a tool whose name starts with an
    underscore) read the run's word on the script's own attributes, "attributes whose names
    start with an underscore are available in scripts only on objects of the script's own
    classes", not the check's hint to call it with getattr."""
    error = failed(code, tools=(*TOOLS, "_2fa_verify"))
    assert (error.name, error.message) == ("AttributeError", unwritable_tool("_2fa_verify"))


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (
            'x = 1\nreturn await tools.class(a="x")',
            "tools.class cannot be written as an attribute (`class` is a keyword of Python): "
            'call it as await getattr(tools, "class")(...)',
        ),
        (
            'return await tools.2fa_verify(code="1")',
            "tools.2fa_verify cannot be written as an attribute (a name cannot start with a "
            'digit): call it as await getattr(tools, "_2fa_verify")(...)',
        ),
    ],
)
def test_a_tool_written_as_an_attribute_python_cannot_read_says_how_to_call_it(
    code: str, said: str
) -> None:
    """`tools.class(...)` of a tool named `class` failed with "invalid syntax (column 20)
    (scripts are Python 3.11)", as if a newer Python would take it; `tools.2fa_verify(...)`
    with "invalid decimal literal", of a tool the script may call as `_2fa_verify`."""
    error = failed(code, tools=(*TOOLS, "class", "_2fa_verify"))
    assert (error.name, error.message) == ("SyntaxError", said)
    assert error.lines[0].line == code.count("\n") + 1
    # A name no tool has keeps Python's words.
    assert failed("return tools.class").message.startswith("invalid syntax")


def test_tasks_and_gather_not_awaited_say_so_too() -> None:
    code = (
        "import asyncio\n"
        "async def fetch(n):\n    return n\n"
        "t = asyncio.create_task(fetch(1))\n"
        "g = asyncio.gather(tools.echo(a=1))\n"
        "out = [repr(t), repr(g)]\n"
        "for x in (t, g):\n"
        "    try:\n        x['k']\n    except TypeError as e:\n        out.append(str(e))\n"
        "await g\nawait t\nreturn out"
    )
    assert value(code, [ECHO]) == [
        "<asyncio.create_task(fetch(...)) gives a task, not its result: await the task for "
        "its result>",
        '<asyncio.gather(...) gives an awaitable, not its result: write "await '
        'asyncio.gather(...)">',
        "asyncio.create_task(fetch(...)) gives a task, not its result: await the task for "
        "its result",
        'asyncio.gather(...) gives an awaitable, not its result: write "await asyncio.gather(...)"',
    ]


def test_futures_still_compare_hash_and_stay_closed() -> None:
    """What a script rightly does with awaitables still works (identity, `in`, dict keys,
    gather of one twice, `is None`), and what was refused still is (copies, underscore and
    dunder attributes)."""
    code = (
        "import asyncio, copy\n"
        "a = tools.echo(a=1)\nb = tools.echo(a=2)\n"
        "seen = {a: 'a', b: 'b'}\n"
        "out = [a == a, a == b, a != b, b in [a, b], [a, b].index(b), seen[b], a is not None]\n"
        "out.append(await asyncio.gather(a, a))\n"
        "for f in (lambda: copy.copy(a), lambda: getattr(a, '_done'),\n"
        "          lambda: getattr(a, '__dict__')):\n"
        "    try:\n        f()\n    except Exception as e:\n"
        "        out.append([type(e).__name__, str(e).split(':')[0]])\n"
        "await b\nreturn out"
    )
    records = [ECHO, rec("echo", {"a": 2}, result=2)]
    assert value(code, records) == [
        True,
        False,
        True,
        True,
        1,
        "b",
        True,
        [{"x": [1, 2]}, {"x": [1, 2]}],
        ["TypeError", "tools.echo(...) gives an awaitable, not its result"],
        ["AttributeError", "the attribute '_done'"],
        ["AttributeError", "the attribute '__dict__'"],
    ]


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (
            "return {'p': [tools.echo(a=1)]}",
            f"p[0] in the returned value is not data: {NOT_AWAITED}",
        ),
        (
            "await tools.search(q=tools.echo(a=1))",
            f"q in the argument is not data: {NOT_AWAITED}",
        ),
    ],
)
def test_a_call_not_awaited_in_data_names_the_fix(code: str, message: str) -> None:
    assert failed(code, [ECHO]).message == message


# ---- failures nothing awaited ----


def _printed(code: str, records: Iterable[Record] = (), **kwargs: Any) -> str:
    ran = run(code, records, **kwargs)
    assert ran.outcome in ("finished", "failed"), ran
    return ran.printed


def _to_the_end(code: str, version: int = 1) -> Ran:
    """The last run of ``code``, replayed step by step: each call fails with a message of
    its own (echo a=1 "no such sku", echo a=2 "also", any other "lost")."""
    messages = {'{"a":1}': "no such sku", '{"a":2}': "also"}
    records: list[Record] = []
    for _ in range(10):
        ran = run(code, records, version=version)
        if ran.outcome != "calls":
            return ran
        for c in ran.calls:
            message = messages.get(orjson.dumps(c.arguments).decode(), "lost")
            records.append(rec(c.name, c.arguments, error=message))
    raise AssertionError("the script did not end")


NOPE = rec("echo", {"a": 1}, error="no such sku")


def test_a_failed_call_nothing_awaited_gets_a_line() -> None:
    """A call that failed and that the script never awaited is reported when the run ends,
    with its line, after what the script printed (before, the failure was lost); one that
    succeeded is not (it ran, as a task runs: a call made for its effect is no mistake)."""
    code = "tools.echo(a=1)\ntools.echo(a=2)\nprint('done')\nreturn 1"
    records = [NOPE, rec("echo", {"a": 2}, result=2)]
    ran = run(code, records)
    assert ran.outcome == "finished" and ran.value == 1
    assert ran.printed == (
        "done\nline 1: RuntimeWarning: tools.echo(...) failed and nothing awaited it: no such sku\n"
    )


def test_failures_nothing_took_get_at_most_ten_lines() -> None:
    """At most ten lines, the tenth saying how many more there were (900 failed calls were
    900 lines, and the printed text was cut down to make room for them)."""
    code = "for i in range(13):\n    tools.echo(i=i)\nreturn 1"
    ran = run(code, [rec("echo", {"i": i}, error="same") for i in range(13)])
    assert ran.outcome == "finished"
    lines = ran.printed.splitlines()
    assert lines == [
        "line 2: RuntimeWarning: tools.echo(...) failed and nothing awaited it: same"
    ] * 9 + [
        "line 2: RuntimeWarning: tools.echo(...) (and 3 more like it) failed and nothing "
        "awaited it: same"
    ]


def test_each_failed_call_gets_its_line_in_call_order_also_when_the_run_fails() -> None:
    code = "for i in range(3):\n    tools.echo(i=i)\ntools.search(q=1)\nawait tools.get_user(id=1)"
    records = [rec("echo", {"i": i}, error="same") for i in range(3)]
    records += [rec("search", {"q": 1}, error="down"), rec("get_user", {"id": 1}, error="own")]
    ran = run(code, records)
    assert ran.outcome == "failed" and ran.error is not None
    assert (ran.error.name, ran.error.message) == ("ToolError", "own")
    assert ran.printed == (
        "line 2: RuntimeWarning: tools.echo(...) failed and nothing awaited it: same\n" * 3
        + "line 3: RuntimeWarning: tools.search(...) failed and nothing awaited it: down\n"
    )


@pytest.mark.parametrize(
    "code",
    [
        "r = tools.echo(a=1)\ntry:\n    await r\nexcept ToolError:\n    pass",
        "import asyncio\nawait asyncio.gather(tools.echo(a=1), return_exceptions=True)",
        "import asyncio\nr = tools.echo(a=1)\nawait asyncio.sleep(0)\n"
        "await asyncio.gather(r, return_exceptions=True)",
        # gather takes every child's error, as asyncio's does: the first fails it, the
        # second is taken with nothing to show it (CPython is silent there too)
        "import asyncio\ntry:\n    await asyncio.gather(tools.echo(a=1), tools.echo(a=2))\n"
        "except ToolError:\n    pass",
        "import asyncio\nasync def f():\n    try:\n        await tools.echo(a=1)\n"
        "    except ToolError:\n        return 0\nawait asyncio.create_task(f())",
        "import asyncio\nasync def f():\n    await tools.echo(a=1)\n"
        "try:\n    await asyncio.create_task(f())\nexcept ToolError:\n    pass",
        "import asyncio\nt = asyncio.create_task(tools.echo(a=1))\n"
        "try:\n    await t\nexcept ToolError:\n    pass",
    ],
)
@pytest.mark.parametrize("version", [1, protocol.LIVE_VERSION])
def test_a_failure_something_took_gets_no_line(code: str, version: int) -> None:
    """Awaited, gathered, or inside a task whose error was taken: no line, whether calls
    settle at once (version 1) or when the queue is empty (version 2); the one failed call
    after it that nothing took still gets its line."""
    ran = _to_the_end(code + "\ntools.get_user(id=9)\nprint('end')", version)
    assert ran.printed == (
        "end\nline {}: RuntimeWarning: tools.get_user(...) failed and nothing awaited it: "
        "lost\n".format(code.count("\n") + 2)
    )


def test_a_task_or_gather_that_failed_with_nothing_to_take_it_gets_a_line() -> None:
    """The failure of a task (the tool call's it awaited, or the script's own error) or of
    a gather that nothing awaited is reported as the task's or the gather's, in the order
    they failed; a message is cut to its first line."""
    code = (
        "import asyncio\n"
        "async def price(n):\n    return await tools.echo(a=n)\n"
        "async def own():\n    {}['k']\n"
        "asyncio.create_task(price(1))\n"
        "asyncio.create_task(own())\n"
        "asyncio.gather(tools.search(q=1), tools.search(q=2))\n"
        "tools.get_user(id=1)\n"
        "return 'done'"
    )
    records = [
        rec("search", {"q": 1}, error="first"),
        rec("search", {"q": 2}, error="second"),
        rec("get_user", {"id": 1}, error="line one\nline two"),
        NOPE,
    ]
    ran = run(code, records)
    assert ran.outcome == "finished", ran.error
    assert ran.printed.splitlines() == [
        "line 8: RuntimeWarning: asyncio.gather(...) failed and nothing awaited it: "
        "ToolError: first",
        "line 9: RuntimeWarning: tools.get_user(...) failed and nothing awaited it: line one [...]",
        "line 7: RuntimeWarning: asyncio.create_task(own(...)) failed and nothing awaited it: "
        "KeyError: 'k'",
        "line 6: RuntimeWarning: asyncio.create_task(price(...)) failed and nothing awaited "
        "it: ToolError: no such sku",
    ]


def test_a_line_about_a_failure_bounds_it_and_survives_the_scripts_own_str() -> None:
    code = (
        "import asyncio\n"
        "class Odd(Exception):\n    def __str__(self):\n        raise ValueError('no')\n"
        "async def f():\n    raise Odd()\n"
        "asyncio.create_task(f())\n"
        "tools.echo(a=1)\nreturn 1"
    )
    lines = _printed(code, [rec("echo", {"a": 1}, error="x" * 5000)]).splitlines()
    assert lines == [
        "line 8: RuntimeWarning: tools.echo(...) failed and nothing awaited it: "
        + "x" * 300
        + " [...]",
        "line 7: RuntimeWarning: asyncio.create_task(f(...)) failed and nothing awaited it: "
        "Odd: its message could not be made: str() of it raised ValueError: no",
    ]


def test_no_line_until_the_run_ends_and_none_for_a_memory_failure() -> None:
    """A run that stops on calls reports nothing yet (its last run reports, live or
    replayed); a run that met its memory limit reports nothing more."""
    code = "tools.echo(a=1)\nawait tools.search(q=1)"
    ran = run(code, [NOPE])
    assert ran.outcome == "calls" and ran.printed == ""
    ran = run(code, [NOPE, rec("search", {"q": 1}, result=1)])
    assert ran.printed.startswith("line 1: RuntimeWarning: tools.echo(...) failed")
    ran = run("tools.echo(a=1)\nraise MemoryError", [NOPE])
    assert ran.limit is not None and ran.limit.name == "memory"
    assert ran.printed == ""


# ---- limits ----


@pytest.mark.parametrize("version", [1, 2])
def test_calls_limit(version: int) -> None:
    """The call past `calls` ends the run at the script's line that made it."""
    ran = run("for i in range(5):\n    await tools.echo(i=i)", calls=3, version=version)
    assert ran.outcome == "calls"
    records = [rec("echo", {"i": i}, result=i) for i in range(3)]
    ran = run("for i in range(5):\n    await tools.echo(i=i)", records, calls=3, version=version)
    assert ran.limit is not None and ran.limit.name == "calls"
    assert ran.error is not None and ran.error.name == "LimitError"
    assert [(x.line, x.text) for x in ran.error.lines] == [(2, "    await tools.echo(i=i)")]


def test_results_limit() -> None:
    records = [rec("echo", {"i": i}, result="x" * 600) for i in range(3)]
    ran = run("for i in range(3):\n    await tools.echo(i=i)", records, results=1 * KiB)
    assert ran.limit is not None and ran.limit.name == "results"
    assert ran.error is not None and [x.line for x in ran.error.lines] == [2]


def test_call_arguments_is_a_catchable_limit_error_and_a_limit_when_uncaught() -> None:
    assert caught("await tools.echo(s='x' * 2000)", call_arguments=1 * KiB)[0] == "LimitError"
    ran = run("await tools.echo(s='x' * 2000)", call_arguments=1 * KiB)
    assert ran.limit is not None and ran.limit.name == "call_arguments"
    look_alike = run("raise ValueError('call_arguments limit met')")
    assert look_alike.limit is None


def test_step_arguments_limit() -> None:
    ran = run("for i in range(4):\n    tools.echo(s='x' * 400)", step_arguments=1 * KiB)
    assert ran.limit is not None and ran.limit.name == "step_arguments"


def test_deep_recursion_is_a_catchable_recursion_error() -> None:
    code = "def f(n):\n    return f(n + 1)\ntry:\n    f(0)\nexcept RecursionError:\n    return 'ok'"
    assert value(code) == "ok"
    assert failed("def f(n):\n    return f(n + 1)\nf(0)").name == "RecursionError"


# ---- printed output and values ----


def test_print_accumulates_like_console_log() -> None:
    ran = run("print('a', 1, [2], sep='-')\nprint('b', end='')\nprint('c')\nprint()")
    assert ran.printed == "a-1-[2]\nbc\n\n"


def test_printing_a_lot_keeps_head_and_tail_and_counts_all() -> None:
    ran = run("for i in range(100):\n    print(str(i) * 1000)")
    assert ran.printed_bytes == sum(len(str(i)) * 1000 + 1 for i in range(100))
    assert ran.printed.startswith("0000")
    assert ran.printed.rstrip().endswith("99" * 10)
    assert "of printed output cut" in ran.printed
    assert len(ran.printed) < protocol.PRINTED_HEAD + protocol.PRINTED_TAIL + 200


def test_printing_one_character_at_a_time_keeps_the_last_ones() -> None:
    """Past the head, each write drops the oldest pieces of the tail: with one character a
    piece, that was a list's pop(0) of 65,536 pieces at each write (300,000 one-character
    prints took 3.4 s of the script's CPU, now 0.9 s). The tail is still exactly the last
    PRINTED_TAIL characters."""
    n = protocol.PRINTED_HEAD + protocol.PRINTED_TAIL + 50_000
    ran = run(f"for i in range({n}):\n    print(i % 10, end='')")
    assert ran.printed_bytes == n
    expected = "".join(str(i % 10) for i in range(n))
    assert ran.printed.startswith(expected[: protocol.PRINTED_HEAD])
    assert ran.printed.endswith(expected[-protocol.PRINTED_TAIL :])
    assert "of printed output cut" in ran.printed


def test_pprint_and_stdout_go_to_printed_text() -> None:
    assert run("import pprint\npprint.pprint({'a': 1})").printed == "{'a': 1}\n"


def test_returning_a_huge_string_is_cut() -> None:
    ran = run("return 'ab' * (50 * 1024 * 1024)")
    assert ran.outcome == "finished"
    assert ran.value_bytes == 100 * MiB
    assert ran.value_text is not None and "characters of the returned string cut" in ran.value_text


def test_a_returned_string_s_cut_counts_characters_as_len_does() -> None:
    """As JavaScript's counts in its ``.length``: an astral character is one."""
    ran = run("return 'a' + '\\U0001F600' * 300_000")
    assert ran.value_text is not None
    left_out = 1 + 300_000 - protocol.VALUE_BOUND
    assert f"[... {left_out:,} characters of the returned string cut ...]" in ran.value_text


def test_a_returned_string_past_the_bound_only_in_json_comes_as_itself() -> None:
    """As in JavaScript: 200,000 emoji are 800,000 bytes of JSON, under the bound in
    characters."""
    ran = run("return '\\U0001F600' * 200_000")
    assert ran.value_text == "\U0001f600" * 200_000


def test_returning_a_large_object_is_cut_as_json() -> None:
    ran = run("return [{'i': i} for i in range(100000)]")
    assert ran.value_text is not None and "of the returned value cut" in ran.value_text


def test_none_is_no_value_and_tuples_are_lists() -> None:
    assert not run("return None").returned
    assert not run("x = 1").returned
    assert value("return (1, 'a', {'k': [True, None, 1.5]})") == [1, "a", {"k": [True, None, 1.5]}]


def test_returning_what_is_not_data_fails_naming_the_type() -> None:
    error = failed("return {1, 2}")
    assert error.name == "TypeError"
    assert "the returned value is a set" in error.message
    # What to pass instead, for the kinds a model returns most.
    for code, said in [
        (
            "from dataclasses import dataclass\n@dataclass\nclass D:\n    x: int\nreturn [D(1)]",
            "[0] in the returned value is a D (pass dataclasses.asdict(value))",
        ),
        (
            "import enum\nclass Status(enum.Enum):\n    A = 1\nreturn Status.A",
            "the returned value is a Status (pass value.value, or value.name)",
        ),
        ("return b'x'", "the returned value is bytes (pass value.decode(), or base64"),
        # Said "you": it read "is an UUID".
        ("import uuid\nreturn uuid.uuid4()", "the returned value is a UUID;"),
        # And "is an UserDict"; a U read as in "up" keeps "an".
        (
            "from collections import UserDict\nreturn UserDict()",
            "the returned value is a UserDict;",
        ),
        ("class Update:\n    pass\nreturn Update()", "the returned value is an Update;"),
        ("import ipaddress\nreturn ipaddress.ip_address('::1')", "the returned value is an IPv6"),
    ]:
        assert failed(code).message.startswith(said), code


def test_what_scripts_have_not_says_what_they_have_instead() -> None:
    """vars() and functools.singledispatch are left out: the error says what to write."""
    assert failed("return vars()").message.startswith(
        "name 'vars' is not defined; a script reads an object's attributes by name"
    )
    assert failed("from functools import singledispatch").message == (
        "cannot import name 'singledispatch' from 'functools': it is left out of scripts (it "
        "reads annotations as code); choose by type with isinstance, or a dict of functions "
        "by type"
    )
    # Reached as the module's attribute, it said only "has no attribute ... in scripts".
    assert failed("import functools\nfunctools.singledispatchmethod").message == (
        "module 'functools' has no attribute 'singledispatchmethod': it is left out of scripts "
        "(it reads annotations as code); choose by type with isinstance, or a dict of "
        "functions by type"
    )


def test_lone_surrogates_do_not_crash() -> None:
    ran = run("print('\\ud800')\nreturn '\\udc00x'")
    assert ran.outcome == "finished"
    orjson.dumps(ran.model_dump())


def test_surrogates_cross_as_in_javascript() -> None:
    """A lone surrogate becomes U+FFFD (not ``?``) and a pair its character, in printed text,
    returned values and arguments alike, as a JavaScript string's do."""
    ran = run("s = 'a\\ud800b\\ud83d\\ude00'\nprint(s)\nawait tools.echo(s=s)")
    assert ran.printed == "a\ufffdb\U0001f600\n"
    assert ran.calls[0].arguments == {"s": "a\ufffdb\U0001f600"}
    echoed = rec("echo", {"s": "a\ufffdb\U0001f600"}, result=1)
    assert value(
        "s = 'a\\ud800b\\ud83d\\ude00'\nawait tools.echo(s=s)\nreturn {'k\\udc00': s}", [echoed]
    ) == {"k\ufffd": "a\ufffdb\U0001f600"}


# ---- errors ----


def test_runtime_error_lines_innermost_first() -> None:
    code = "def inner():\n    return 1 / 0\n\ndef outer():\n    return inner()\nouter()"
    error = failed(code)
    assert error.name == "ZeroDivisionError"
    assert [x.line for x in error.lines] == [2, 5, 6]


def test_syntax_error_reports_its_line() -> None:
    error = failed("x = 1\ny = (\n")
    assert error.name == "SyntaxError"
    assert error.lines and error.lines[0].line == 2


def test_syntax_error_reports_its_column() -> None:
    """The column is the script's own (1-based, as CPython counts it)."""
    error = failed("x = 1\nif x:\n    y = [1, 2\n")
    assert error.message == "'[' was never closed (column 9)", error
    assert [x.line for x in error.lines] == [3]


def test_a_top_level_yield_is_a_syntax_error() -> None:
    assert failed("x = 1\nyield x").name == "SyntaxError"


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (
            "from itertools import batched",
            "cannot import name 'batched' from 'itertools': it is new in Python 3.12, and "
            "scripts are Python 3.11",
        ),
        ("from json import lods", "cannot import name 'lods' from 'json'; did you mean loads"),
    ],
)
def test_a_name_a_module_has_not_says_which_module_and_what_to_do(code: str, said: str) -> None:
    """CPython's ImportError named '<unknown module name>' (the script's module has no
    __name__ of its own) and said nothing of the fix."""
    error = failed(code)
    assert error.name == "ImportError"
    assert error.message.startswith(said), error.message


def test_collections_abc_is_there_for_typed_code() -> None:
    """``from collections.abc import Iterable`` (typed code names it constantly) was refused
    as a module scripts do not have."""
    code = (
        "from collections.abc import Iterable, Mapping\nimport collections\n"
        "return [isinstance([1], Iterable), isinstance({}, collections.abc.Mapping), "
        "collections.abc.__name__]"
    )
    assert value(code) == [True, True, "collections.abc"]


@pytest.mark.parametrize(
    ("code", "hint"),
    [
        ("class A:\n    pass\nreturn A().__class__.__name__", "write type(x) for its class"),
        ("class A:\n    pass\nreturn A().__dict__", "dataclasses.asdict(x)"),
        ("try:\n    1 / 0\nexcept Exception as e:\n    return e.__cause__", "catch the error"),
    ],
)
def test_a_refused_dunder_models_reach_for_says_what_to_write(code: str, hint: str) -> None:
    error = failed(code)
    assert error.name == "SyntaxError" and hint in error.message, error.message


def test_leading_future_imports_apply_to_the_script() -> None:
    """A script may begin (after its docstring) with ``from __future__ import ...``, as a
    module does: in the function a script runs as it was a SyntaxError saying the import was
    not at the beginning when it was. Its features apply (annotations are not evaluated);
    one further down, or an unknown feature, is refused as CPython refuses it."""
    code = (
        '"""Report."""\nfrom __future__ import annotations\nfrom dataclasses import dataclass\n'
        "@dataclass\nclass P:\n    x: int\n    kids: list[P]\n"
        "def f(a: NotDefinedAnywhere) -> int:\n    return a\n"
        "return [str(P(1, [])), f(2)]"
    )
    assert value(code) == ["P(x=1, kids=[])", 2]
    late = failed("x = 1\nfrom __future__ import annotations\nreturn x")
    assert late.name == "SyntaxError" and "beginning of the file" in late.message
    assert [x.line for x in late.lines] == [2]
    unknown = failed("from __future__ import annotations, nonsense\nreturn 1")
    assert unknown.message.startswith("future feature nonsense is not defined")
    assert [x.line for x in unknown.lines] == [1]


def test_sys_exit_ends_the_script_as_a_program_ends() -> None:
    """`sys.exit()` (a program's habit: `sys.exit(main())`) ends the script: a status of 0 or
    none as finished, with what was printed; any other status, or a message, as failed,
    naming it and its line. `print(..., file=sys.stderr)` prints as `print` does."""
    ran = run(
        "import sys\n"
        "def main():\n"
        "    print('to stderr', file=sys.stderr)\n"
        "    sys.stdout.write('direct\\n')\n"
        "    return 0\n"
        "sys.exit(main())\n"
        "print('never')"
    )
    assert (ran.outcome, ran.printed) == ("finished", "to stderr\ndirect\n"), ran.error
    assert not ran.returned
    assert run("raise SystemExit").outcome == "finished"
    for code, message in [("import sys\nsys.exit(2)", "2"), ("raise SystemExit('bad')", "bad")]:
        error = failed(code)
        assert (error.name, error.message) == ("SystemExit", message)
        assert [x.line for x in error.lines] == [code.count("\n") + 1]
    assert value("import sys\nreturn [sys.argv, sys.maxsize == 2**63 - 1]") == [["<script>"], True]
    # Made at the first import, one module for the run, however imported.
    assert value("from sys import stderr\nimport sys\nreturn sys.stderr is stderr") is True
    # A status of the script's own class is no 0, whatever its __eq__ says or raises.
    for eq in ("return True", "raise ValueError('boom')"):
        code = f"import sys\nclass S:\n    def __eq__(self, o):\n        {eq}\nsys.exit(S())"
        assert failed(code).name == "SystemExit"


@pytest.mark.parametrize("made", ["asyncio.create_task(f(1))", "asyncio.gather(f(0), f(1))"])
def test_sys_exit_in_a_task_ends_the_script(made: str) -> None:
    """asyncio lets a task's SystemExit out of its loop, so the program ends there, whether
    or not anything awaits the task (the script went on, returned, and said only that the
    task failed and nothing awaited it); a status of 0 finishes it."""
    code = (
        "import asyncio, sys\n"
        "async def f(n):\n    if n:\n        print('exiting')\n        sys.exit(STATUS)\n"
        f"t = {made}\nawait asyncio.sleep(0)\nprint('went on')\nreturn 'went on'"
    )
    ran = run(code.replace("STATUS", "2"))
    error = ran.error
    assert ran.outcome == "failed" and ran.printed == "exiting\n" and error is not None, ran
    assert (error.name, error.message, [x.line for x in error.lines]) == ("SystemExit", "2", [5])
    ran = run(code.replace("STATUS", "0"))
    assert (ran.outcome, ran.printed, ran.returned) == ("finished", "exiting\n", False), ran


# ---- determinism ----


def test_clock_random_and_uuid_are_the_same_on_every_run() -> None:
    code = (
        "import time, datetime, random, uuid\n"
        "r = random.Random()\n"
        "return [time.time(), time.monotonic(), str(datetime.datetime.now()),\n"
        "        str(datetime.date.today()), datetime.datetime.utcnow().isoformat(),\n"
        "        random.random(), random.randint(1, 100), r.random(), str(uuid.uuid4()),\n"
        "        time.strftime('%Y-%m-%d %H:%M'), datetime.datetime.now().timestamp()]"
    )
    a, b = value(code), value(code)
    assert a == b
    assert a[0] == NOW_MS / 1000
    assert a[2] == "2026-01-01 00:00:00"
    assert a[9] == "2026-01-01 00:00"
    assert a[10] == NOW_MS / 1000
    assert value(code, seed=SEED + 1)[5] != a[5]
    high = value(code, seed=SEED + 2**62)  # the seed's high bits count too
    assert (high[5], high[8]) != (a[5], a[8])
    assert value(code, now_ms=NOW_MS + 1000)[0] == NOW_MS / 1000 + 1


def test_same_bytes_across_replays() -> None:
    code = (
        "import random\n"
        "names = {f'n{i}' for i in range(50)}\n"
        "for n in sorted(names)[:3]:\n    print(n, random.random())\n"
        "r = await tools.echo(x=list(sorted(names))[:2])\n"
        "return {'r': r, 'x': random.random()}"
    )
    records = [rec("echo", {"x": ["n0", "n1"]}, result={"ok": 1})]
    first, second = run(code, records), run(code, records)
    assert first.model_dump(exclude={"stats"}) == second.model_dump(exclude={"stats"})


# ---- files ----

CSV = b"name,n\nada,1\nbob,2\ncy,3\n"


def _fetch(_file: str, offset: int, length: int) -> bytes:
    return CSV[offset : offset + length]


FILES = [FileInfo(id="d.csv", mime="text/csv", size=len(CSV))]


def test_files_api() -> None:
    code = (
        "rows = []\n"
        "async for row in files.csv('d.csv', limit=2):\n    rows.append(row)\n"
        "lines = []\n"
        "async for line in files.lines('d.csv'):\n    lines.append(line)\n"
        "text = await files.text('d.csv')\n"
        "files.show('d.csv')\n"
        "return [files.list(), files.stat('d.csv')['size'], rows, len(lines), len(text)]"
    )
    ran = run(code, files=FILES, fetch=_fetch)
    assert ran.outcome == "finished", ran.error
    assert ran.value == [
        [{"id": "d.csv", "mime": "text/csv", "size": len(CSV)}],
        len(CSV),
        [{"name": "ada", "n": "1"}, {"name": "bob", "n": "2"}],
        4,
        len(CSV),
    ]
    assert ran.shown == ["d.csv"]


@pytest.mark.parametrize(
    ("code", "how"),
    [
        ("for row in files.csv('d.csv'):\n    pass", "read with `async for`, not `for`"),
        ("rows = list(files.lines('d.csv'))", "read with `async for`, not `for`"),
        ("with files.csv('d.csv') as rows:\n    pass", "opened with `async with`, not `with`"),
        ("rows = await files.csv('d.csv')", "read item by item, not awaited"),
    ],
)
def test_a_stream_read_as_a_list_says_to_use_async_for(code: str, how: str) -> None:
    """CPython's text named the sandbox's class: "'_Stream' object is not iterable"."""
    error = failed(code, files=FILES, fetch=_fetch)
    collect_runs_garbage()  # an awaited stream's coroutine, freed here, not in a later test
    kind = "lines" if "lines" in code else "csv"
    assert (error.name, error.message) == (
        "TypeError",
        f"files.{kind}(...) is a stream, {how}: write `async for row in files.{kind}(...):` "
        f"(or `[row async for row in files.{kind}(...)]`); `await files.text(id)` reads a "
        "whole file",
    )


def test_a_stream_left_early_frees_its_slot() -> None:
    code = (
        "n = 0\n"
        "for _ in range(10):\n"
        "    async for row in files.csv('d.csv'):\n        n += 1\n        break\n"
        "async with files.lines('d.csv') as lines:\n"
        "    async for line in lines:\n        break\n"
        "return n"
    )
    assert value(code, files=FILES, fetch=_fetch, streams=2) == 10


def test_a_stream_in_an_async_generator_left_early_frees_its_slot() -> None:
    """A generator of the script's own that reads a stream, left by ``break``, is closed
    where it is dropped, and with it the stream: the next one opens (closed in a task of
    its own only, each stream stayed open until the script next waited, and the third
    loop met the ``streams`` limit)."""
    code = (
        "async def rows():\n"
        "    async for line in files.lines('big.txt'):\n        yield line\n"
        "n = 0\n"
        "for _ in range(10):\n"
        "    async for line in rows():\n        n += 1\n        break\n"
        "return n"
    )
    # Past the first read's bytes, so that a stream left early is still open.
    big = b"line\n" * 400_000
    files = [FileInfo(id="big.txt", mime="text/plain", size=len(big))]

    def fetch(_file: str, offset: int, length: int) -> bytes:
        return big[offset : offset + length]

    assert value(code, files=files, fetch=fetch, streams=2) == 10


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ("files.stat({'d.csv'})", "id in files.stat(...) is a set (pass a list)"),
        ("await files.text(float('inf'))", "id in files.text(...) is inf, which JSON cannot"),
        (
            "[r async for r in files.lines('d.csv', limit=10**30)]",
            "options.limit in files.lines(...) is an integer too large for JSON data",
        ),
    ],
)
def test_files_given_what_is_not_data_names_the_files_method(code: str, said: str) -> None:
    """It said "id in the argument", as of a tool's argument, where no tool was called."""
    name, message = caught(code, files=FILES, fetch=_fetch)
    assert name == "TypeError" and message.startswith(said), message


def test_a_missing_file_is_a_catchable_error_naming_the_closest() -> None:
    name, message = caught("files.stat('d.cvs')", files=FILES, fetch=_fetch)
    assert name == "FileError"
    assert "d.csv" in message


def test_scripts_name_the_error_classes_they_catch() -> None:
    """ToolError, LimitError and FileError are in a script's scope, each caught by name,
    and read-only."""
    code = (
        "caught = []\n"
        "try:\n    await tools.echo(a=2)\n"
        "except ToolError as e:\n    caught.append(['tool', str(e), e.tool])\n"
        "try:\n    await tools.echo(s='x' * 2000)\n"
        "except LimitError as e:\n    caught.append(['limit', type(e).__name__])\n"
        "try:\n    files.stat('d.cvs')\n"
        "except FileError as e:\n    caught.append(['file', 'd.csv' in str(e)])\n"
        "try:\n    ToolError.tool = 'x'\n"
        "except AttributeError as e:\n    caught.append(['sealed', str(e)])\n"
        "return caught"
    )
    records = [rec("echo", {"a": 2}, error="nope")]
    assert value(code, records, files=FILES, fetch=_fetch, call_arguments=1 * KiB) == [
        ["tool", "nope", "echo"],
        ["limit", "LimitError"],
        ["file", True],
        ["sealed", "ToolError is read-only in scripts"],
    ]


# ---- live runs agree with replay ----

CORPUS = {
    "sequential": "t = 0\nfor i in range(4):\n    t += (await tools.echo(i=i))['echo']['i']\nreturn t",
    "gather": (
        "import asyncio\n"
        "async def f(n):\n    print('start', n)\n    r = await tools.search(n=n)\n"
        "    print('done', n)\n    return r['echo']['n']\n"
        "a = tools.echo(n=0)\n"
        "rs = await asyncio.gather(f(1), f(2), a, asyncio.sleep(0))\n"
        "print('then')\nb = await tools.echo(n=9)\nreturn [rs[:2], b['echo']]"
    ),
    "errors": (
        "out = []\ntry:\n    await tools.echo(fail=True)\nexcept Exception as e:\n"
        "    out.append([str(e), e.tool])\nreturn out"
    ),
    "uncaught": "print('before')\nawait tools.echo(x=1)\nawait tools.echo(fail=True)\nreturn 1",
    "unawaited": "tools.echo(fire=1)\nprint('returning')\nreturn 1",
    "unawaited_failures": (
        "import asyncio\n"
        "async def work(n):\n    return await tools.echo(n=n, fail=n == 2)\n"
        "t = asyncio.create_task(work(2))\n"
        "tools.echo(fire=1, fail=True)\n"
        "g = asyncio.gather(tools.search(q=1, fail=True), work(1))\n"
        "a = await tools.echo(n=0)\n"
        "print('got', a['echo']['n'], t, g)\n"
        "tools.echo(late=True, fail=True)\n"
        "return 'done'"
    ),
    "random": "import random\na = random.random()\nawait tools.echo(a=a)\nreturn [a, random.random()]",
    # A warning past the script's frames (see test_a_warning_past_the_scripts_frames_...).
    "warning_past_the_stack": (
        "import warnings\nawait tools.echo(n=1)\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        "    for level in range(1, 9):\n        warnings.warn('x', stacklevel=level)\n"
        "return [[w.filename, w.lineno] for w in seen]"
    ),
    # A task's exit ends the run where it comes, with a call made before it still to make.
    "task_exits": (
        "import asyncio, sys\n"
        "async def f():\n    r = await tools.echo(n=1)\n    print('f', r['echo'])\n"
        "    sys.exit(3)\n"
        "async def g():\n    for n in range(3):\n        await tools.echo(n=10 + n)\n"
        "        print('g', n)\n"
        "t, u = asyncio.create_task(f()), asyncio.create_task(g())\n"
        "await tools.echo(n=2)\nprint('main')\nawait tools.echo(n=3)\nreturn 'never'"
    ),
}


def _answer(name: str, arguments: dict[str, Any]) -> Record:
    if arguments.get("fail"):
        return Record(name=name, arguments=arguments, error=f"{name} refused")
    return Record(name=name, arguments=arguments, result={"echo": arguments})


def _bytes(ran: Ran) -> bytes:
    body = ran.model_dump(mode="json", exclude_unset=True, exclude={"stats"})
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_live_and_replay_agree_byte_for_byte(name: str) -> None:
    s = pyscript(CORPUS[name], version=protocol.LIVE_VERSION)
    replayed: list[Ran] = []
    records: list[Record] = []
    for _ in range(20):
        ran = runtime.run_in_process(s.model_copy(update={"records": list(records)}))
        replayed.append(ran)
        if ran.outcome != "calls":
            break
        records += [_answer(c.name, c.arguments) for c in ran.calls]
    live = runtime.LiveInProcess(s)
    ran = live.start()
    lived = [ran]
    while ran.outcome == "calls":
        assert live.waiting == len(ran.calls)
        ran = live.resume([_answer(c.name, c.arguments) for c in ran.calls])
        lived.append(ran)
    assert [_bytes(r) for r in lived] == [_bytes(r) for r in replayed]
    assert replayed[-1].outcome != "calls"


def test_resume_takes_exactly_the_calls_it_waits_for() -> None:
    live = runtime.LiveInProcess(pyscript("return await tools.echo(a=1)", version=2))
    ran = live.start()
    with pytest.raises(runtime.ResumeError):
        live.resume([rec("echo", {"a": 2}, result=1)])
    assert live.resume([rec("echo", {"a": 1}, result=7)]).value == 7
    assert ran.outcome == "calls"


# ---- what scripts may not do (the interpreter's fence; the OS is the boundary) ----


@pytest.mark.parametrize(
    "code",
    [
        "().__class__",
        "x = 1\nx.__class__.__bases__",
        "class A:\n    def m(self):\n        return self.__x",
        "def g():\n    yield 1\ng().gi_frame",
        "async def c():\n    pass\nc().cr_frame",
        "try:\n    1/0\nexcept Exception as e:\n    e.__traceback__.tb_frame",
        "(lambda: 0).__globals__",
        "__builtins__",
        "__import__('os')",
        "match 1:\n    case int(__class__=c):\n        pass",
        "def f(x: '().__class__'):\n    pass",
        "from . import x",
        "from json import __doc__",
    ],
)
def test_refused_constructs_fail_before_anything_runs(code: str) -> None:
    ran = run("print('ran')\n" + code)
    assert ran.outcome == "failed"
    assert ran.error is not None and ran.error.name == "SyntaxError", ran.error
    assert ran.printed == ""


@pytest.mark.parametrize(
    "code",
    [
        "getattr((), '__class__')",
        "getattr(1, 'real'); setattr(type('A', (), {})(), '__x', 1)",
        "'{0.__class__}'.format(1)",
        "'{a.__class__}'.format_map({'a': 1})",
        "str.format('{0.__class__}', 1)",
        "import string\nstring.Formatter().format('{0.__class__}', 1)",
        "import operator\noperator.attrgetter('__class__')(1)",
        "import operator\noperator.methodcaller('__dir__')(1)",
        "open('/etc/passwd')",
        "eval('1')",
        "exec('1')",
        "compile('1', 'x', 'eval')",
        "globals()",
        "import os",
        "import sys\nsys.path",
        "import sys\nsys.modules",
        "from sys import stdin",
        "import ctypes",
        "import subprocess",
        "import typing\ntyping.sys",
        "import typing\ntyping.get_type_hints",
        "import random\nrandom.SystemRandom",
        "import uuid\nuuid.uuid1()",
        "import io\nio.FileIO",
        "import json\njson.dumps = None",
    ],
)
def test_reaching_out_is_refused_with_a_clear_error(code: str) -> None:
    ran = run(code)
    assert ran.outcome == "failed", ran.value
    assert ran.error is not None
    assert ran.error.name in {"AttributeError", "NameError", "ImportError"}, ran.error


def test_classes_with_inheritance_work() -> None:
    code = (
        "class Base:\n    def __init__(self, x):\n        self.x = x\n"
        "class Child(Base):\n    def __init__(self, x):\n        super().__init__(x * 2)\n"
        "class Oops(Exception):\n    def __init__(self, m):\n        super().__init__('oops ' + m)\n"
        "try:\n    raise Oops('a')\nexcept Oops as e:\n    m = str(e)\n"
        "return [Child(2).x, m, type(Child(1)).__name__, Child.__qualname__]"
    )
    assert value(code) == [4, "oops a", "Child", "Child"]


def test_format_still_works() -> None:
    code = "import string\nreturn ['{0:>4}|{n:.2f}'.format(7, n=1.5), '{a}'.format_map({'a': 1}),\n"
    code += "        str.format('{}', 2), string.Formatter().format('{0[k]}', {'k': 3})]"
    assert value(code) == ["   7|1.50", "1", "2", "3"]


def test_allowed_modules_work() -> None:
    code = (
        "import json, re, math, statistics, collections, itertools, functools, decimal\n"
        "import fractions, csv, io, textwrap, heapq, bisect, copy, dataclasses, enum, base64\n"
        "import hashlib, unicodedata, difflib, operator, cmath, string, typing\n"
        "@dataclasses.dataclass\nclass P:\n    x: int\n    y: typing.Optional[str] = None\n"
        "class Color(enum.Enum):\n    RED = 1\n"
        "rows = list(csv.DictReader(io.StringIO('a,b\\n1,2\\n')))\n"
        "return [json.loads(json.dumps({'a': 1})), re.findall(r'\\d', 'a1b2'), math.sqrt(16),\n"
        "        statistics.mean([1, 2, 3]), collections.Counter('aab').most_common(1),\n"
        "        list(itertools.islice(itertools.count(), 3)), functools.reduce(operator.add, [1, 2]),\n"
        "        str(decimal.Decimal('1.1') + decimal.Decimal('2.2')), str(fractions.Fraction(1, 3)),\n"
        "        rows, textwrap.dedent('  x'), heapq.nsmallest(2, [3, 1, 2]), bisect.bisect([1, 3], 2),\n"
        "        copy.deepcopy([[1]]), dataclasses.asdict(P(1)), Color.RED.name,\n"
        "        base64.b64encode(b'x').decode(), hashlib.sha256(b'x').hexdigest()[:8],\n"
        "        unicodedata.name('a'), difflib.get_close_matches('appel', ['apple']),\n"
        "        string.ascii_lowercase[:3]]"
    )
    result = value(code)
    assert result[0] == {"a": 1}
    assert result[-1] == "abc"
    assert result[16] == "eA=="


def test_the_other_pure_modules_work() -> None:
    """The modules a script computes with that reach nothing of the system, as CPython's."""
    code = (
        "import abc, array, binascii, calendar, contextlib, fnmatch, gzip, hmac, hashlib\n"
        "import html, ipaddress, numbers, shlex, struct, types, zlib\n"
        "class A(abc.ABC):\n    @abc.abstractmethod\n    def f(self): ...\n"
        "with contextlib.suppress(TypeError):\n    A()\n"
        "order = []\n"
        "@contextlib.contextmanager\ndef cm(n):\n    order.append(n)\n    yield n\n"
        "    order.append(-n)\n"
        "with contextlib.ExitStack() as stack:\n    got = [stack.enter_context(cm(i)) for i in (1, 2)]\n"
        "ns = types.SimpleNamespace(a=1)\nns.b = 2\n"
        "net = ipaddress.ip_network('10.0.0.0/30')\n"
        "return [order, calendar.monthrange(2024, 2), calendar.isleap(2028),\n"
        "        calendar.day_name[0], calendar.timegm((2026, 1, 1, 0, 0, 0)),\n"
        "        calendar.month(2026, 2).splitlines()[1], html.escape('<&>'),\n"
        "        html.unescape('&lt;&#39;'), isinstance(1.5, numbers.Real),\n"
        "        list(struct.pack('<Ih', 1, -2)), struct.unpack('>H', b'\\x01\\x02')[0],\n"
        "        binascii.hexlify(b'ab').decode(), zlib.decompress(zlib.compress(b'z' * 9)).decode(),\n"
        "        gzip.decompress(gzip.compress(b'gz')).decode(), zlib.crc32(b'x'),\n"
        "        array.array('i', [1, 2]).tolist(), [str(h) for h in net.hosts()],\n"
        "        fnmatch.filter(['a.py', 'b.js'], '*.py'),\n"
        "        hmac.new(b'k', b'm', hashlib.sha256).hexdigest()[:12],\n"
        "        hmac.compare_digest(b'a', b'a'), shlex.split('a \"b c\"'), shlex.join(['a', 'b c']),\n"
        "        [ns.a, ns.b], isinstance(cm, types.FunctionType), types.NoneType is type(None)]"
    )
    assert value(code) == [
        [1, 2, -2, -1],
        [3, 29],
        True,
        "Monday",
        1767225600,
        "Mo Tu We Th Fr Sa Su",
        "&lt;&amp;&gt;",
        "<'",
        True,
        [1, 0, 0, 0, 254, 255],
        258,
        "6162",
        "z" * 9,
        "gz",
        2363233923,
        [1, 2],
        ["10.0.0.1", "10.0.0.2"],
        ["a.py"],
        "b60090e30522",
        True,
        ["a", "b c"],
        "a 'b c'",
        [1, 2],
        True,
        True,
    ]


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ("import contextlib\ncontextlib.chdir('/')", "no attribute 'chdir' in scripts"),
        ("import gzip\ngzip.open('a.gz')", "a script has no file system: gzip.compress(data)"),
        ("import gzip\ngzip.GzipFile", "a script has no file system"),
        ("import shlex\nshlex.shlex('a b')", "split, join and quote are there"),
        ("import shlex\nshlex.split(None)", "s argument must not be None"),
        ("import types\ntypes.CodeType", "no attribute 'CodeType' in scripts"),
        ("import types\ntypes.FrameType", "no attribute 'FrameType' in scripts"),
        ("import calendar\ncalendar.LocaleTextCalendar()", "a script has one locale"),
        ("import calendar\ncalendar.different_locale", "a script has one locale"),
        ("import calendar\ncalendar.main", "no attribute 'main' in scripts"),
        ("import warnings\nwarnings.warn_explicit", "no attribute 'warn_explicit' in scripts"),
        ("import warnings\nwarnings.filters", "no attribute 'filters' in scripts"),
    ],
)
def test_what_of_those_modules_reaches_the_system_is_not_there(code: str, said: str) -> None:
    """contextlib's chdir, gzip's files, shlex's lexer (it reads sys.stdin, the protocol's pipe,
    when given no text, as 3.11's split(None) does), types' code and frames, calendar's
    locales and command line, warnings' lists and warn_explicit (it reads a module's loader)."""
    assert said in failed(code).message


def test_redirected_output_and_warnings_are_cpythons() -> None:
    """contextlib.redirect_stdout takes what print writes, as in CPython (sys.stdout is the
    printed text while a script runs); warnings print as warning lines, and the script's
    filters and catch_warnings hold."""
    code = (
        "import contextlib, io, sys, warnings\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n    print('inside')\n"
        "with contextlib.redirect_stderr(buf):\n    print('err', file=sys.stderr)\n"
        "print('outside')\n"
        "warnings.warn('careful')\n"
        "with warnings.catch_warnings(record=True) as seen:\n    warnings.warn('kept')\n"
        "warnings.simplefilter('ignore')\nwarnings.warn('dropped')\n"
        "warnings.filterwarnings('error')\n"
        "try:\n    warnings.warn('raised')\nexcept UserWarning as e:\n    print('caught', e)\n"
        "return [buf.getvalue(), [str(w.message) for w in seen]]"
    )
    ran = run(code)
    assert ran.value == ["inside\n", ["kept"]]
    assert ran.printed == "err\noutside\nline 8: UserWarning: careful\ncaught raised\n"


_LOGGING_CASES = """\
import logging, io
logging.getLogger("early").warning("no config %s", 1)
logging.basicConfig(level=logging.DEBUG, format="%(levelname)s %(name)s %(funcName)s:%(lineno)d %(message)s")
log = logging.getLogger("app")
def work():
    log.debug("in work")
work()
logging.info("root info")
logging.getLogger("app.db").setLevel(logging.ERROR)
logging.getLogger("app.db").warning("quiet")
logging.LoggerAdapter(log, {}).info("adapted")
try:
    {}["k"]
except KeyError:
    log.exception("failed")
buf = io.StringIO()
handler = logging.StreamHandler(buf)
handler.setFormatter(logging.Formatter("{levelname}|{name}|{message}", style="{"))
own = logging.getLogger("own")
own.propagate = False
own.addHandler(handler)
own.error("kept %s", "here")
log.warning("level %d under %s", log.getEffectiveLevel(), log.parent.name)
logging.log(logging.ERROR, "by level %s", 40)
try:
    int("x")
except ValueError:
    logging.exception("at the top")
logging.basicConfig(level=logging.ERROR)
logging.disable(logging.INFO)
log.info("disabled")
out = buf.getvalue()
"""


def test_logging_writes_what_cpythons_writes() -> None:
    """logging (its last resort, basicConfig and its format, levels, the logger tree, a
    LoggerAdapter, `exception`, a handler and `{}` formatter of the script's own, disable)
    writes what CPython's writes for the same code, less the carets under part of a line;
    the script's line and function name the record."""
    native = subprocess.run(
        [
            sys.executable,
            "-c",
            "import linecache, sys\n"
            f"src = {_LOGGING_CASES!r}\n"
            "linecache.cache['<script>'] = (len(src), None, src.splitlines(True), '<script>')\n"
            "scope = {}\nexec(compile(src, '<script>', 'exec'), scope)\n"
            "sys.stdout.write(scope['out'])",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    ran = run(_LOGGING_CASES + "return out")
    assert ran.value == native.stdout == "ERROR|own|kept here\n"
    assert ran.printed == _without_carets(native.stderr)
    assert "work:6 in work" in ran.printed and "Traceback" in ran.printed


def test_a_log_record_is_the_same_on_every_run() -> None:
    """A record's time is the script's clock (UTC), its process and thread the same on
    every run (a live run and its replay print alike)."""
    code = (
        "import logging\nlogging.basicConfig(format='%(asctime)s|%(created)s|%(msecs)d|"
        "%(relativeCreated)d|%(process)d|%(thread)d|%(threadName)s|%(processName)s')\n"
        "logging.warning('x')\n"
        "r = logging.LogRecord('n', logging.INFO, 'p', 1, 'm', (), None)\n"
        "seen = []\nlogging.getLogger().addFilter(lambda rec: seen.append(rec) or False)\n"
        "logging.warning('filtered', extra={'user': 'u'})\n"
        "return [r.created, r.process, isinstance(seen[0], logging.LogRecord), seen[0].user]"
    )
    ran = run(code)
    assert ran.value == [NOW_MS / 1000, 1, True, "u"]
    assert (
        ran.printed == f"2026-01-01 00:00:00,000|{NOW_MS / 1000}|0|0|1|1|MainThread|MainProcess\n"
    )


def test_a_record_that_fails_is_said_with_the_scripts_line() -> None:
    """A record whose message and arguments do not fit (or whose `{}` field reads what
    scripts may not) is said as CPython says it, without the sandbox's frames."""
    code = (
        "import logging\nlogging.warning('%s', 1, 2)\n"
        "logging.getLogger().handlers[0].setFormatter(logging.Formatter('{msg.__class__}', style='{'))\n"
        "logging.warning('x')\nreturn 1"
    )
    ran = run(code)
    assert ran.value == 1
    assert ran.printed.startswith(
        "--- Logging error ---\n"
        "TypeError: not all arguments converted during string formatting\n"
        "Call stack:\n"
        '  File "<script>", line 2, in <module>\n'
        "    logging.warning('%s', 1, 2)\n"
        "Message: '%s'\n"
        "Arguments: (1, 2)\n"
        "--- Logging error ---\n"
        "AttributeError: the attribute '__class__': attributes whose names start with"
    )
    assert "sandbox" not in ran.printed


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ("import logging\nlogging.FileHandler('a.log')", "a script has no file system"),
        ("import logging\nlogging.basicConfig(filename='a.log')", "a script has no file system"),
        ("import logging\nlogging.basicConfig(levl=10)", "Unrecognised argument(s): levl"),
        ("import logging\nlogging.basicConfig(style='?')", "Style must be one of: %,{,$"),
    ],
)
def test_logging_to_a_file_says_where_a_scripts_log_goes(code: str, said: str) -> None:
    assert said in failed(code).message


def test_a_dropped_run_s_redirect_and_warnings_leave_the_process_as_it_was() -> None:
    """A run stopped on calls inside ``redirect_stdout`` and ``catch_warnings``: when the
    garbage collector closes its coroutines (their ``with`` blocks left then, after the run),
    this process's sys.stdout and warnings are as they were."""
    import sys
    import warnings

    before = sys.stdout, sys.stderr, warnings.showwarning, warnings.filters
    code = (
        "import contextlib, io, warnings\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        "    with warnings.catch_warnings():\n"
        "        warnings.simplefilter('ignore')\n"
        "        await tools.echo(x=1)\n"
    )
    assert run(code).outcome == "calls"
    gc.collect()
    assert (sys.stdout, sys.stderr, warnings.showwarning, warnings.filters) == before


# ---- limits at their edges (the same core counts them as for JavaScript) ----

ONE = len('{"s":""}')


@pytest.mark.parametrize("over", [0, 1])
def test_call_arguments_edge(over: int) -> None:
    ran = run(f"await tools.echo(s='x' * {KiB - ONE + over})", call_arguments=KiB)
    if over:
        assert ran.limit is not None and ran.limit.name == "call_arguments"
    else:
        assert ran.outcome == "calls" and ran.limit is None


@pytest.mark.parametrize("over", [0, 1])
def test_step_arguments_edge(over: int) -> None:
    code = f"tools.echo(s='x' * {KiB - ONE})\ntools.echo(s='y' * {KiB - ONE + over})"
    ran = run(code, step_arguments=2 * KiB)
    if over:
        assert ran.limit is not None and ran.limit.name == "step_arguments"
    else:
        assert ran.outcome == "calls" and len(ran.calls) == 2


@pytest.mark.parametrize("over", [0, 1])
def test_arguments_edge(over: int) -> None:
    sizes = [KiB - ONE, KiB - ONE + over]
    records = [rec("echo", {"s": "x" * n}, result=1) for n in sizes]
    code = f"for n in {sizes}:\n    await tools.echo(s='x' * n)\nreturn 'done'"
    ran = run(code, records, arguments=2 * KiB)
    if over:
        assert ran.limit is not None and ran.limit.name == "arguments"
    else:
        assert ran.value == "done"


@pytest.mark.parametrize("over", [0, 1])
def test_results_edge(over: int) -> None:
    records = [rec("echo", {}, result="r" * (KiB - 2))]
    ran = run("return len(await tools.echo())", records, results=KiB - over)
    if over:
        assert ran.limit is not None and ran.limit.name == "results"
    else:
        assert ran.value == KiB - 2


@pytest.mark.parametrize("over", [0, 1])
def test_printed_head_and_tail_edge(over: int) -> None:
    """Printed text is cut once it is longer than the head and the tail together (past the
    head alone, the tail still holds the rest)."""
    n = protocol.PRINTED_HEAD + protocol.PRINTED_TAIL - 1 + over
    ran = run(f"print('p' * {n})")
    assert ran.printed_bytes == n + 1
    assert ("of printed output cut" in ran.printed) == bool(over)
    if not over:
        assert ran.printed == "p" * n + "\n"


@pytest.mark.parametrize("over", [0, 1])
def test_returned_string_edge(over: int) -> None:
    n = protocol.VALUE_BOUND - 2 + over  # its JSON: two quotes more
    ran = run(f"return 'v' * {n}")
    if over:
        assert ran.value_text is not None and ran.value_bytes == n + 2
    else:
        assert ran.value_text is None and ran.value == "v" * n


def test_warnings_print_without_the_sandboxs_files() -> None:
    """A warning goes to the printed text as CPython words it, with the script's line when
    it is the script's, and never the sandbox's own file and line (where a coroutine never
    awaited is dropped), each once a run, as CPython's default shows it."""
    code = (
        "import re\nasync def g():\n    pass\ndef h():\n    g()\nh()\nt = g()\n"
        'for i in range(3):\n    re.compile("[[a]" + "a" * i)\nreturn 1'
    )
    ran = run(code)
    assert ran.outcome == "finished", ran.error
    assert ran.printed == (
        "line 5: RuntimeWarning: coroutine 'g' was never awaited\n"
        "line 9: FutureWarning: Possible nested set at position 1\n"
        "RuntimeWarning: coroutine 'g' was never awaited\n"
    )
    # Nothing is kept from the run before (re's own cache of patterns aside).
    again = run(code.replace("[[a]", "[[b]"))
    assert again.printed == ran.printed


def test_a_warning_past_the_scripts_frames_names_none_of_the_sandboxs() -> None:
    """The stack ends at the script's top level, as a program's ends at its module: a
    warning's stacklevel past it is past the stack (CPython's file "sys", line 1), where it
    named the sandbox's files and lines, which differ between a live run and its replay."""
    code = (
        "import warnings\ndef helper():\n    warnings.warn('deep', stacklevel=2)\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        "    warnings.simplefilter('always')\n"
        "    for level in (0, 1, 2, 3, 40):\n        warnings.warn('x', stacklevel=level)\n"
        "    helper()\n"
        "warnings.warn('past', stacklevel=2)\nhelper()\n"
        "return [[w.filename, w.lineno, str(w.message)] for w in seen]"
    )
    ran = run(code)
    assert ran.value == [["<script>", 7, "x"]] * 2 + [["sys", 1, "x"]] * 3 + [
        ["<script>", 8, "deep"]
    ], ran.error
    assert ran.printed == "UserWarning: past\nline 10: UserWarning: deep\n"


def test_a_finalizers_error_that_cannot_be_read_is_one_line() -> None:
    """What a ``__del__`` raises is one warning line at the script's line, once a run, even
    when the error's own ``__str__`` raises: never the sandbox's hook, its frames or an
    object's address (which differ from run to run, so a replay would print otherwise)."""
    code = (
        "class E(Exception):\n    def __str__(self):\n        raise ValueError('no')\n"
        "class C:\n    def __del__(self):\n        raise E()\n"
        "for i in range(2):\n    c = C()\n    del c\nprint('after')\nreturn 1"
    )
    ran = run(code)
    assert ran.outcome == "finished", ran.error
    assert ran.printed == (
        "line 6: Warning: an exception in C.__del__ was ignored: E: its message could not be "
        "made: str() of it raised ValueError: no\nafter\n"
    )
    assert run(code).printed == ran.printed


def test_format_however_it_is_named_still_formats() -> None:
    """getattr, operator.attrgetter and operator.methodcaller give a string's safe
    format and format_map, which format as str's do; other objects' own format stays."""
    code = (
        "import operator\n"
        "class P:\n    def format(self, x):\n        return 'own ' + x\n"
        "return [getattr('{} {}', 'format')(1, 2),\n"
        "    operator.attrgetter('format', 'upper')('a{}')[0]('b'),\n"
        "    operator.methodcaller('format_map', {'k': 3})('{k:>3}'),\n"
        "    getattr(P(), 'format')('x'), operator.methodcaller('format', 'y')(P())]"
    )
    assert value(code) == ["1 2", "ab", "  3", "own x", "own y"]


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ("import requests", ": a script has no network, and reaches the host through `tools`"),
        ("import urllib.request", ": a script has no network"),
        ("from http import client", ": a script has no network"),
        ("import os", ": a script has no file system, environment or processes"),
        ("from pathlib import Path", ": a script has no file system"),
        ("import subprocess", ": a script has no file system, environment or processes"),
        ("import numpy", ""),
        ("import secrets", ": a script is replayed, so its randomness is drawn from its seed"),
        ("from zoneinfo import ZoneInfo", ": a script has no time zone database; its clock is"),
        # The declarations' TypedDict and NotRequired: 3.11's typing has them.
        ("from typing_extensions import TypedDict", ": scripts are Python 3.11, whose typing "
         "has what it adds up to 3.11 (TypedDict, NotRequired, Required, Self, Literal...): "
         "import them from typing"),
        # Threads and pools: asyncio, not "it reads the files it was given".
        ("import threading", ": a script has no threads or processes; it runs calls at once "
         "with asyncio"),
        ("from concurrent.futures import ThreadPoolExecutor", ": a script has no threads"),
        ("import queue", ": a script has no threads or processes"),
    ],
)  # fmt: skip
def test_an_import_of_the_network_or_the_system_says_what_a_script_has(
    code: str, said: str
) -> None:
    """A module a model reaches for the network or the system with is refused saying what a
    script has instead, then the modules it may import; any other says only the latter."""
    error = failed(code)
    assert error.name == "ImportError"
    module = code.split()[1]
    assert error.message.startswith(f"module {module} is not available in scripts{said or ';'}")
    assert "; these are: abc, array, asyncio, base64" in error.message


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ("from tools import get_user", "`tools` is a name every script has, with no import: "
         "call a tool as `await tools.name(key=value)`"),
        ("import tools", "`tools` is a name every script has, with no import"),
        ("import files", "`files` is a name every script has, with no import: `files.list()`"),
    ],
)  # fmt: skip
def test_an_import_of_tools_or_files_says_they_are_there_already(code: str, said: str) -> None:
    """``from tools import get_user``: the ImportError says ``tools`` is there in every script,
    and how a tool is called, not which modules a script may import."""
    error = failed(code + "\nreturn 1")
    assert error.name == "ImportError"
    module = code.split()[1]
    assert error.message.startswith(f"module {module} is not available in scripts: {said}")
    assert "these are" not in error.message


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ('import json\nreturn json.load(open("data.json"))', "a script has no file system"),
        ("name = input()", "a script takes no input"),
        ("exit(0)", "or as a program does, with `sys.exit(status)`"),
        ("quit()", "a script ends with `return value`"),
        ('return eval("1 + 1")', "a script cannot run code it makes"),
        ('exec("x = 1")', "a script cannot run code it makes"),
    ],
)
def test_a_builtin_a_script_lacks_says_what_it_has_instead(code: str, said: str) -> None:
    """open, input, exit, eval and their kind are not builtins of a script: the NameError
    says what the script has instead (it said only "name 'open' is not defined"); a name the
    script itself left undefined keeps Python's message, and a caught one is the script's."""
    error = failed(code)
    assert error.name == "NameError"
    assert error.message.startswith("name '") and said in error.message, error
    assert value("try:\n    open('x')\nexcept NameError as e:\n    return str(e)") == (
        "name 'open' is not defined"
    )


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ('console.log("hi")', "name 'console' is not defined; console.log is JavaScript's: a "
         "Python script prints with print(...)"),
        ("return true", "name 'true' is not defined; Python writes True, False and None "
         "(JavaScript's true, false, null)"),
        ("x = 1\nif x == null:\n    return 1", "name 'null' is not defined; Python writes True"),
    ],
)  # fmt: skip
def test_javascript_s_names_in_a_python_script_say_what_python_has(code: str, said: str) -> None:
    """A model that writes JavaScript in a Python script (console.log, true, null) is told
    what Python has; it was told only that the name is not defined. A caught one is the
    script's, with Python's message."""
    error = failed(code)
    assert error.name == "NameError"
    assert error.message.startswith(said), error
    assert value("try:\n    return true\nexcept NameError as e:\n    return str(e)") == (
        "name 'true' is not defined"
    )


@pytest.mark.parametrize(
    ("code", "undefined", "tool"),
    [
        ('return get_user(login="a")', "get_user", "get_user"),
        ('return await getUser(login="a")', "getUser", "get_user"),
        ("return await ListPrs()", "ListPrs", "list_prs"),
    ],
)
def test_a_tool_called_by_its_bare_name_says_to_call_it_through_tools(
    code: str, undefined: str, tool: str
) -> None:
    """``get_user(...)`` for ``tools.get_user(...)``: the NameError says how the tool is
    called (a name that is one but for case and underscores too); a name near a tool's but
    not one, or a caught one, keeps Python's message."""
    error = failed(code)
    assert error.name == "NameError"
    assert error.message == (
        f"name {undefined!r} is not defined; the host's tool {tool} is called through "
        f"`tools`: `await tools.{tool}(...)`"
    ), error
    assert failed("return get_usr()").message == "name 'get_usr' is not defined"
    assert value("try:\n    get_user()\nexcept NameError as e:\n    return str(e)") == (
        "name 'get_user' is not defined"
    )


@pytest.mark.parametrize("module", ["asyncio", "json", "math"])
def test_a_module_used_without_its_import_says_to_import_it(module: str) -> None:
    """`await asyncio.gather(...)` with no `import asyncio`: the NameError ends as CPython
    3.12's does (Python 3.11's said only "name 'asyncio' is not defined"); a name that is no
    module a script may import keeps Python's message."""
    error = failed(f"return {module}.x")
    assert error.name == "NameError"
    assert error.message == f"name '{module}' is not defined. Did you forget to import '{module}'?"
    assert failed("return requests.get").message == "name 'requests' is not defined"


BARE = (
    "RuntimeWarning: the script ends with `{0}`, whose value goes nowhere: a script's result "
    "is what it returns, so write `return {0}`"
)
ASSIGNED = (
    "RuntimeWarning: the script ends giving `{0}` a value, which goes nowhere: a script's "
    "result is what it returns, so end it with `return {0}`"
)


@pytest.mark.parametrize(
    ("code", "printed"),
    [
        ("x = 1\nx", "line 2: " + BARE.format("x") + "\n"),
        ("d = {'a': [1]}\nd['a'][0]\n# the answer\n", "line 2: " + BARE.format("d['a'][0]") + "\n"),
        ("import math\nmath.pi", "line 2: " + BARE.format("math.pi") + "\n"),
        ("x = None\nreturn x", ""),
        ("x = 1\nprint(x)", "1\n"),
        ("x = 1\nx + 1", ""),
        ("x = 1\nif x:\n    x", ""),
        # A program's habit: its main function called, what it gives dropped.
        ("def f():\n    return 1\nf()", "line 3: " + BARE.format("f()") + "\n"),
        (
            "async def main():\n    return 1\n\nawait main()",
            "line 4: " + BARE.format("await main()") + "\n",
        ),
        ("def f():\n    print(1)\nf()", "1\n"),  # it gives nothing
        ("def f():\n    return 1\nprint(f())", "1\n"),
        # An answer built and not returned (`summary = {...}` last).
        ("r = 1\nresult = r * 2", "line 2: " + ASSIGNED.format("result") + "\n"),
        ("summary = {\n    'a': 1,\n}\n# done\n", "line 1: " + ASSIGNED.format("summary") + "\n"),
        ("total: int = 5", "line 1: " + ASSIGNED.format("total") + "\n"),
        ("main = lambda: 1", ""),
        ("x, y = 1, 2", ""),
        ("for i in range(2):\n    y = i", ""),
    ],
)
def test_a_script_that_ends_on_a_bare_name_gets_a_line(code: str, printed: str) -> None:
    """A notebook's habit: the last expression as the answer. A script that returned nothing
    and whose last statement is a name, attribute or subscript alone gets a line saying to
    return it; any other ending gets none."""
    ran = run(code)
    assert ran.outcome == "finished" and ran.value is None, ran.error
    assert ran.printed == printed


def test_a_coroutine_function_called_last_unawaited_is_said_to_be_returned_awaited() -> None:
    ran = run("async def main():\n    return 1\n\nmain()")
    assert ran.outcome == "finished" and ran.value is None, ran.error
    assert ran.printed.splitlines()[-1] == (
        "line 4: RuntimeWarning: the script ends with `main()`, whose value goes nowhere: a "
        "script's result is what it returns, so write `return await main()`"
    )


def test_asyncio_run_says_to_await_instead() -> None:
    """A model writes a program: `asyncio.run(main())`. It failed with "module 'asyncio' has
    no attribute 'run' in scripts"; now with CPython's words inside a loop and what to
    write in its place, and without a "never awaited" line for the coroutine it was given."""
    code = (
        "import asyncio\nasync def fetch_all():\n    return await tools.echo(x=1)\n"
        "asyncio.run(fetch_all())"
    )
    ran = run(code)
    assert ran.outcome == "failed" and ran.error is not None
    assert ran.error.name == "RuntimeError"
    assert ran.error.message == (
        "asyncio.run() cannot be called from a running event loop: a script is the body of an "
        "async function already: in its place, write `return await fetch_all(...)`"
    )
    assert [x.line for x in ran.error.lines] == [4]
    assert ran.printed == "" and ran.calls == []
    for given in ("5", "main=None"):  # not a coroutine: the same words, for any main
        error = failed(f"import asyncio\nasyncio.run({given})")
        assert error.name == "RuntimeError"
        assert error.message.endswith("write `return await main(...)`"), error
    fixed = code.replace("asyncio.run(fetch_all())", "return await fetch_all()")
    assert value(fixed, [Record(name="echo", arguments={"x": 1}, result=2)]) == 2


def test_asyncio_run_without_its_import_says_both_at_once() -> None:
    """`asyncio.run(fetch_all())` with no `import asyncio` said to import it, and the model's
    next script then failed on asyncio.run: both are said at once now."""
    error = failed("async def fetch_all():\n    return 1\n\nasyncio.run(fetch_all())")
    assert error.name == "NameError"
    assert error.message == (
        "name 'asyncio' is not defined; nor is asyncio.run() needed: a script is the body of "
        "an async function already: in its place, write `return await fetch_all(...)`"
    )
    assert [x.line for x in error.lines] == [4]
    # Elsewhere, the import is what is missing.
    gather = failed("await asyncio.gather()")
    assert gather.message == "name 'asyncio' is not defined. Did you forget to import 'asyncio'?"


@pytest.mark.parametrize("imported", ["import asyncio\n", ""])
def test_asyncio_run_of_a_tool_call_says_to_await_the_call(imported: str) -> None:
    """`asyncio.run(tools.echo(x=1))` was told to write `return await main(...)`, a function
    the script does not have."""
    error = failed(f"{imported}asyncio.run(tools.echo(x=1))", [rec("echo", {"x": 1}, result=1)])
    collect_runs_garbage()  # the call never awaited, freed here, not in a later test
    assert error.message.endswith("in its place, write `return await tools.echo(...)`"), error


def test_a_main_guard_says_its_block_never_runs() -> None:
    """A model writes a program: `if __name__ == "__main__": asyncio.run(main())`. The
    block never runs in a script, which finished with nothing printed and nothing returned;
    now a printed line at its end says so and what to write (either way round of the `==`,
    at the top level only)."""
    code = (
        "async def main():\n    print('hi')\n"
        "if __name__ == '__main__':\n    await main()\n"
        "if '__main__' == __name__:\n    pass\n"
        "def f():\n    if __name__ == '__main__':\n        pass\n"
        "return __name__"
    )
    ran = run(code)
    assert ran.outcome == "finished" and ran.value == "script", ran.error
    said = (
        'RuntimeWarning: the block of `if __name__ == "__main__":` never runs: a script is the '
        "body of an async function, not a program, so call what it calls directly (as "
        "`return await main()`)"
    )
    assert ran.printed == f"line 3: {said}\nline 5: {said}\n"
    assert run("await tools.echo(x=1)\nif __name__ == '__main__':\n    pass").printed == ""


@pytest.mark.parametrize(
    ("code", "line", "message"),
    [
        (
            "async def main():\n    return await tools.echo(x=1)",
            1,
            NEVER_CALLED.format("main", "return await main()"),
        ),
        ("def main(x):\n    return x\n", 1, NEVER_CALLED.format("main", "return main(...)")),
        (
            '"""Stale PRs."""\nimport json\nLIMIT = 5\nclass A:\n    pass\n'
            "async def helper():\n    return 1\n@staticmethod\nasync def main(*, n=LIMIT):\n"
            "    return await helper()",
            9,
            NEVER_CALLED.format("main", "return await main()"),
        ),
        (
            "async def main():\n    print(await tools.echo(x=1))\n\nif __name__ == '__main__':\n"
            "    import asyncio\n    asyncio.run(main())",
            4,
            'the block of `if __name__ == "__main__":` never runs: a script is the body of an '
            "async function, not a program, so call what it calls directly (as `return await "
            "main()`)",
        ),
    ],
)
def test_a_script_that_only_defines_functions_fails_saying_to_run_their_body(
    code: str, line: int, message: str
) -> None:
    """A model wraps its work in `async def main():` and never calls it (or calls it in an
    `if __name__ == "__main__":` block, which never runs): none of it ran, and the script
    finished with nothing (with the block, a warning after nothing), as if it had worked. It
    fails at the function's (the block's) line, saying what to write."""
    error = failed(code)
    assert (error.name, error.message) == ("RuntimeError", message)
    assert [x.line for x in error.lines] == [line]


@pytest.mark.parametrize(
    "code",
    [
        "def f():\n    return 1\nreturn f()",
        "async def main():\n    print(1)\nawait main()",
        "def f():\n    pass\nprint(1)",  # printed: something ran
        "def go():\n    return 1\nx = go()",  # called at the top
        "def f():\n    pass\ng = f",  # handed on
        "x = 1",
        "",
    ],
)
def test_a_script_that_calls_its_functions_or_runs_code_is_not_said_to_define_only(
    code: str,
) -> None:
    assert run(code).outcome == "finished"


def test_global_of_a_top_level_name_says_to_use_nonlocal() -> None:
    """A script's top-level names are its function's locals: `global` in a function inside
    it names another variable, so it is refused before the script runs, saying what to
    write instead (and `nonlocal` works). Refused only at a read, a script that only wrote
    it returned the old value without a word."""
    said = (
        "`global counter` names none of the script's: the script is the body of an async "
        "function, so its top-level names are that function's; in a function inside it, "
        "write `nonlocal counter`"
    )
    code = "counter = 0\ndef inc():\n    global counter\n    counter += 1\ninc()\nreturn counter"
    error = failed(code)
    assert (error.name, error.message, [x.line for x in error.lines]) == ("SyntaxError", said, [3])
    written = (
        "counter = 'old'\ndef f():\n    global counter\n    counter = 'new'\nf()\nreturn counter"
    )
    assert failed(written).message == said
    assert value(code.replace("global", "nonlocal")) == 1
    # A name of no top-level binding: global as in any module.
    assert (
        value("def f():\n    global seen\n    seen = 2\ndef g():\n    return seen\nf()\nreturn g()")
        == 2
    )
    assert failed("return missing").message == "name 'missing' is not defined"


def test_changing_a_top_level_name_in_a_function_says_to_use_nonlocal() -> None:
    """`counter += 1` in a function, with no declaration, is an UnboundLocalError (as it is
    at a module's top level, where `global` would fix it): it says to write `nonlocal`. A
    local of the function's own, with no top-level name of the same, gets Python's text."""
    code = "counter: int = 0\ndef inc():\n    counter += 1\ninc()\nreturn counter"
    error = failed(code)
    assert error.name == "UnboundLocalError"
    assert error.message == (
        "cannot access local variable 'counter' where it is not associated with a value; "
        "counter is also a top-level name of the script, which is the body of an async "
        "function: to change it in a function inside it, write `nonlocal counter` there (not "
        "`global`)"
    )
    assert [x.line for x in error.lines] == [3, 4]
    assert value(code.replace("def inc():\n", "def inc():\n    nonlocal counter\n")) == 1
    alone = failed("def f():\n    x += 1\nf()")
    assert (
        alone.message == "cannot access local variable 'x' where it is not associated with a value"
    )


def test_a_small_module_lists_what_it_has() -> None:
    """A name asyncio does not give a script: the error lists what it does give (io, a
    small module, likewise); one a model reaches for a loop or a thread with says what to
    do instead."""
    error = failed("import asyncio\nasyncio.Barrier(2)")
    assert error.message.startswith(
        "module 'asyncio' has no attribute 'Barrier' in scripts; it has ALL_COMPLETED, "
        "BoundedSemaphore, CancelledError, Event,"
    )
    for name in ("TaskGroup", "Semaphore", "Queue", "as_completed", "wait", "wait_for"):
        assert f" {name}," in error.message or error.message.endswith(f" {name}")
    assert failed("import asyncio\nasyncio.get_event_loop()").message == (
        "module 'asyncio' has no attribute 'get_event_loop' in scripts: no event loop is "
        "exposed, and none is needed: a script is the body of an async function already, so "
        "await what you would run on a loop"
    )
    assert failed("import asyncio\nawait asyncio.to_thread(print)").message == (
        "module 'asyncio' has no attribute 'to_thread' in scripts: a script has no threads, "
        "processes or network; it reaches the world through tools"
    )


def test_urllib_parse_is_there_and_the_rest_of_urllib_is_not() -> None:
    """Pure text functions a script builds and reads URLs with; urllib's other modules reach
    the network."""
    code = (
        "import urllib.parse\n"
        "from urllib.parse import urlencode, urlsplit, parse_qs\n"
        "u = urlsplit('https://ex.com:8443/a/b?x=1&y=%20z#top')\n"
        "return [u.hostname, u.port, u.path, parse_qs(u.query), urlencode({'q': 'a b&c'}),\n"
        "        urllib.parse.quote('é/x y'), urllib.parse.urljoin('https://a.b/c/d', '../e')]"
    )
    assert value(code) == [
        "ex.com",
        8443,
        "/a/b",
        {"x": ["1"], "y": [" z"]},
        "q=a+b%26c",
        "%C3%A9/x%20y",
        "https://a.b/e",
    ]
    assert failed("import urllib.request").message.startswith(
        "module urllib.request is not available in scripts: a script has no network"
    )
    assert failed("import urllib\nurllib.request").message == (
        "module 'urllib' has no attribute 'request' in scripts; it has parse"
    )


# ---- what stands in for an object's address ----


IDENTITIES = """
class Note:
    def __init__(self, name):
        self.name = name
notes = {Note(n) for n in "abcdefgh"}
first = await tools.t(text=str(Note("x")), ids=sorted(id(n) for n in notes))
for note in notes:
    await tools.t(name=note.name)
print(Note("y"), [n.name for n in notes])
return [first["echo"]["text"], id(notes) == id(notes), hash(Note("z")) == hash(Note("z"))]
"""


def test_an_objects_identity_is_the_same_on_every_run() -> None:
    """``id()``, and the hash and repr of the script's own objects, are numbers given in the
    order the script asks for them: a call that carries one, and calls made in a set's order,
    are the same calls on a replay (with addresses, the replay diverged from the log)."""
    from tests.sandbox.test_live import live_steps, outcome, replay_steps

    s = pyscript(IDENTITIES, tools=["t"], version=protocol.LIVE_VERSION)
    replayed = replay_steps(s)
    assert [outcome(r) for r in live_steps(s)] == [outcome(r) for r in replayed]
    first, *rest, end = replayed
    assert first.calls[0].arguments == {
        "text": "<script.Note object at 0x9>",
        "ids": [1, 2, 3, 4, 5, 6, 7, 8],
    }
    assert [r.calls[0].arguments["name"] for r in rest] == list("abcdefgh")
    assert end.outcome == "finished", end.error
    assert end.value == ["<script.Note object at 0x9>", True, False]
    assert end.printed.startswith("<script.Note object at 0xa> ['a', 'b',")


def test_a_scripts_classes_keep_what_python_gives_them() -> None:
    """The base that gives the numbers changes nothing else: a dataclass has its own repr
    and hash (or none), a class that defines __eq__ alone is unhashable, and a class of the
    script may still mix in a built-in one."""
    code = """
from dataclasses import dataclass
@dataclass
class D:
    a: int
@dataclass(frozen=True)
class F:
    a: int
class E:
    def __eq__(self, other):
        return True
class Base:
    pass
class Failed(Base, ValueError):
    pass
out = [repr(D(1)), hash(F(2)) == hash(F(2)), str(Failed("no")), isinstance(Failed(), Base)]
for make in (D, E):
    try:
        hash(make(1) if make is D else make())
    except TypeError as e:
        out.append(str(e))
return out
"""
    assert value(code) == [
        "D(a=1)", True, "no", True, "unhashable type: 'D'", "unhashable type: 'E'",
    ]  # fmt: skip


def test_a_named_tuples_own_api_is_there() -> None:
    """A named tuple's methods have one underscore (so as not to clash with its fields):
    they are there, as is urlsplit's result's _replace, the usual way to change a URL; any
    other name with an underscore is still refused."""
    code = """
from collections import namedtuple
from typing import NamedTuple
from urllib.parse import urlsplit, urlunsplit
P = namedtuple("P", "x y")
class Q(NamedTuple):
    a: int
    b: str = "b"
url = urlsplit("https://example.com/a?q=1")
return [P(1, 2)._asdict(), P._make([3, 4])._replace(y=5), P._fields, Q._field_defaults,
        getattr(Q(1), "_asdict")(), urlunsplit(url._replace(query="q=2"))]
"""
    assert value(code) == [
        {"x": 1, "y": 2}, [3, 5], ["x", "y"], {"b": "b"}, {"a": 1, "b": "b"},
        "https://example.com/a?q=2",
    ]  # fmt: skip
    error = failed("from collections import namedtuple\nreturn namedtuple('P', 'x')._source")
    assert error.name == "AttributeError" and "'_source'" in error.message


@pytest.mark.parametrize(
    ("use", "said"),
    [
        ("return [r['echo'] for r in rs]", "'coroutine' object is not subscriptable"),
        ("return rs[0].get('echo')", "'coroutine' object has no attribute 'get'"),
    ],
)
def test_a_coroutine_used_as_a_result_says_to_await_it(use: str, said: str) -> None:
    code = (
        "async def fetch(i):\n    return await tools.t(n=i)\n"
        f"rs = [fetch(i) for i in range(2)]\n{use}"
    )
    error = failed(code, tools=["t"])
    # Its coroutines, never awaited, are collected here: later, their warning would be
    # written into whichever run of this process is going on then.
    collect_runs_garbage()
    assert error.message == (
        f"{said}; calling an async function (the script's, or files.text and files.sheets) "
        "gives a coroutine, not its result: await it (`await fetch(x)`, `await "
        "files.text(id)`), or several at once with `await asyncio.gather(*coroutines)`"
    )
    assert [x.line for x in error.lines][-1] == 4


def test_files_text_not_awaited_says_to_await_it_not_that_the_script_made_it() -> None:
    """It said "calling an async function of the script", which files.text is not."""
    error = failed("t = files.text('d.csv')\nreturn t.upper()", files=FILES, fetch=_fetch)
    # The coroutine never awaited, freed here: freed in a later test of this process (one
    # in another file, which does not collect first), its warning showed in the run's summary.
    collect_runs_garbage()
    assert error.message.startswith(
        "'coroutine' object has no attribute 'upper'; calling an async function (the "
        "script's, or files.text and files.sheets) gives a coroutine"
    ), error
    assert "`await files.text(id)`" in error.message


def test_the_scripts_own_objects_have_attributes_with_one_underscore() -> None:
    """`self._cache` is how Python writes an attribute for a class's own use: on objects of
    the script's classes (and the classes themselves, and super()), reading, setting,
    deleting, augmented assignment, unpacking targets, getattr, setattr and hasattr work.
    Elsewhere it is refused when it runs; two underscores are refused before."""
    code = """
class Acc:
    _made = 0
    def __init__(self, start):
        self._v = start
        self._log = []
        Acc._made += 1
    def _note(self, x):
        self._log.append(x)
    def add(self, n):
        self._v += n
        self._note(n)
        return self
class Sub(Acc):
    def add(self, n):
        super()._note("sub")
        return super().add(n)
class Failed(Acc, ValueError):
    pass
a = Sub(1).add(2)
b = Acc(0)
setattr(b, "_x", 5)
b._p, b._q = 1, 2
del b._p
for b._i in range(3):
    pass
f = Failed(7)
f._code = 3
return [a._v, a._log, Acc._made, type(a)._made, getattr(b, "_x"), hasattr(b, "_p"),
        getattr(b, "_p", "none"), b._q, b._i, f._code, f._v]
"""
    assert value(code) == [3, ["sub", 2], 3, 3, 5, False, "none", 2, 2, 3, 7]
    refused = "attributes whose names start with an underscore are available in scripts only on"
    for other in ("tools._run", "'text'._x", "import json\nreturn json._default_decoder"):
        error = failed(f"print('ran')\n{other}")
        assert error.name == "AttributeError" and refused in error.message, error
    assert "not available in scripts" in failed("class A:\n    pass\nreturn A().__dict__").message


def test_a_class_on_a_plain_base_is_the_scripts_own() -> None:
    """`class Repo(ABC)`, `class ApiError(Exception)`, `class Cache(Generic[T])`, a dict
    subclass: how models write a repository, an error, a cache. Their `self._x` was refused
    ("only on objects of the script's own classes": only a class with no base was), and
    their objects hashed by address, so a loop over a set of them made its calls in another
    order on a replay (a DivergenceError). Each base keeps its own repr and hash."""
    code = """
from abc import ABC, abstractmethod
from typing import Generic, TypeVar
T = TypeVar("T")
class Repo(ABC):
    def __init__(self, name):
        self._name = name
    @abstractmethod
    def get(self): ...
class Orders(Repo):
    def get(self):
        return self._name
class ApiError(Exception):
    def __init__(self, code):
        super().__init__(f"code {code}")
        self._code = code
class Cache(Generic[T]):
    def __init__(self):
        self._d = {}
class Bag(dict):
    def __init__(self):
        super().__init__(a=1)
        self._n = 2
try:
    raise ApiError(5)
except ApiError as e:
    error = [e._code, repr(e)]
bag = Bag()
try:
    hash(bag)
except TypeError as e:
    unhashable = str(e)
jobs = {Orders(f"o{i}") for i in range(6)}
return [Orders("x").get(), error, Cache[int]()._d, bag._n, unhashable, repr(Orders("y")),
        [j.get() for j in jobs]]
"""
    first = value(code)
    assert first[:6] == [
        "x",
        [5, "ApiError('code 5')"],
        {},
        2,
        "unhashable type: 'Bag'",
        "<script.Orders object at 0x7>",
    ]
    assert value(code) == first  # the set's order too: the same on every run
    # A module's class stays no base of the script's own: its underscores are its own.
    error = failed("import random\nclass R(random.Random):\n    pass\nreturn R(1)._inner")
    assert "only on objects of the script's own classes" in error.message


# ---- traceback: the error being handled, as CPython writes it, the script's frames only ----

_TRACEBACK_CASES = """\
import traceback; out = []
def parse(row):
    return int(row["n"])

def total(rows):
    return sum(parse(r) for r in rows)

try:
    total([{"n": "1"}, {"n": "x"}])
except ValueError:
    out.append(traceback.format_exc())
try:
    try:
        {}["missing"]
    except KeyError as e:
        raise LookupError("no row") from e
except LookupError as e:
    out.append("".join(traceback.format_exception(e)))
    out.append("".join(traceback.format_exception(type(e), e, None, limit=1, chain=False)))
    out.append("".join(traceback.format_exception_only(e)))
try:
    try:
        1 / 0
    except ZeroDivisionError:
        None.x
except AttributeError:
    out.append(traceback.format_exc())
    out.append(traceback.format_exc(chain=False))
out.append(traceback.format_exc())
"""


def _without_carets(text: str) -> str:
    """CPython's text less the lines of carets it marks part of a line with (3.11 on)."""
    return "".join(
        line
        for line in text.splitlines(keepends=True)
        if not (line.strip() and set(line.strip()) <= set("^~"))
    )


def test_traceback_writes_the_handled_error_as_cpython_does() -> None:
    """`traceback.format_exc()` and its kin (in an `except` that logs and goes on, a habit of
    code models write) give what CPython's give for the same code: frames, their lines,
    chained errors, `limit` and `chain`, less the lines of carets under part of a line."""
    native: dict[str, Any] = {}
    # CPython reads a frame's line through linecache: given the text, as a file would be.
    lines = _TRACEBACK_CASES.splitlines(keepends=True)
    linecache.cache["<script>"] = (len(_TRACEBACK_CASES), None, lines, "<script>")
    try:
        exec(compile(_TRACEBACK_CASES, "<script>", "exec"), native)
    finally:
        linecache.cache.pop("<script>", None)
    expected = [_without_carets(text) for text in native["out"]]
    assert value(_TRACEBACK_CASES + "return out") == expected
    assert expected[0].count("File") == 4 and expected[-1] == "NoneType: None\n"


def test_traceback_shows_the_scripts_frames_only() -> None:
    """A tool call's error printed with `traceback.print_exc()` shows the script's lines, not
    the sandbox's frames it passed through; recursion is counted, as CPython counts it; what
    traceback has that reads frames says what to use instead; a file takes the text."""
    code = (
        "import traceback, io\n"
        "async def fetch(n):\n"
        "    return await tools.echo(a=n)\n"
        "try:\n"
        "    await fetch(1)\n"
        "except ToolError:\n"
        "    traceback.print_exc()\n"
        "def down(n):\n"
        "    return down(n + 1)\n"
        "try:\n"
        "    down(0)\n"
        "except RecursionError as e:\n"
        "    buffer = io.StringIO()\n"
        "    traceback.print_exception(e, file=buffer)\n"
        "    lines = buffer.getvalue().splitlines()\n"
        "    print(lines[:6], lines[-3:])\n"
        "try:\n"
        "    traceback.extract_tb(None)\n"
        "except AttributeError as e:\n"
        "    print(e)\n"
        "traceback.print_exception(5)\n"
    )
    ran = run(code, [rec("echo", {"a": 1}, error="no such sku")])
    assert ran.printed.startswith(
        "Traceback (most recent call last):\n"
        '  File "<script>", line 5, in <module>\n'
        "    await fetch(1)\n"
        '  File "<script>", line 3, in fetch\n'
        "    return await tools.echo(a=n)\n"
        "ToolError: no such sku\n"
        "['Traceback (most recent call last):', '  File \"<script>\", line 11, in <module>', "
        "'    down(0)', '  File \"<script>\", line 9, in down', '    return down(n + 1)', "
        "'  File \"<script>\", line 9, in down'] ['    return down(n + 1)', "
    )
    assert "more times]', 'RecursionError: maximum recursion depth exceeded']\n" in ran.printed
    assert ran.printed.endswith(
        "module 'traceback' has no attribute 'extract_tb' in scripts: a script's frames are "
        "not its to read; traceback.format_exc() gives the error being handled as text, with "
        "the script's lines\n"
    )
    assert ran.error is not None and ran.error.message == "traceback takes an exception, not int"
    assert [x.line for x in ran.error.lines] == [21]
