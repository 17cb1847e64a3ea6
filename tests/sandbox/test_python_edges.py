"""Python scripts at the subset's edges, in this process: the routes by which library code
would read or set an attribute for a script (functools, UserString, copy, match class
patterns, super()), and what a script's own values and errors become.

Each route here reached the sandbox's own globals (and through them the real builtins) or the
host's clock before it was closed; the OS lockdown is the boundary, these are defence in
depth (README, "What is refused").
"""

from __future__ import annotations

import pytest

from sandbox import python
from sandbox.python import _syntax_hint
from tests.sandbox.conftest import TOOLS, rec
from tests.sandbox.test_python import caught, failed, run, value

REFUSED = "attributes whose names start with an underscore are not available in scripts"


# ---- library code that reads or sets attributes by name ----


def test_update_wrapper_and_wraps_take_only_names_a_script_may_use() -> None:
    code = (
        "import functools, json\n"
        "class Catch:\n"
        "    def __setattr__(self, name, value):\n"
        "        raise ValueError('reached')\n"
        "functools.update_wrapper(Catch(), json.dumps, assigned=('__globals__',), updated=())\n"
    )
    assert caught(code) == [
        "AttributeError",
        f"the attribute '__globals__': {REFUSED} (name your own without it)",
    ]
    # as CPython's, with the defaults and with plain names
    assert value(
        "import functools\n"
        "def f(x):\n    'f doc'\n    return x\n"
        "@functools.wraps(f)\ndef g(*a):\n    return f(*a) * 2\n"
        "def h(): pass\n"
        "h.label = 'ok'\n"
        "functools.update_wrapper(g, h, assigned=('label',), updated=())\n"
        "return [g.__name__, g.__doc__, g(4), g.label]"
    ) == ["f", "f doc", 8, "ok"]


@pytest.mark.parametrize(
    "code",
    [
        "import collections, json\nreturn collections.UserString('{0.__globals__}').format(json.dumps)",
        "import collections, json\n"
        "return collections.UserString('{f.__globals__}').format_map({'f': json.dumps})",
        "import json\n"
        "class Text(str):\n"
        "    def show(self, *args):\n"
        "        return super().format(*args)\n"
        "return Text('{0.__globals__}').show(json.dumps)",
        "import json\n"
        "class Text(str):\n"
        "    pass\n"
        "return super(Text, Text).format('{0.__globals__}', json.dumps)",
    ],
)
def test_every_format_of_a_string_is_the_safe_one(code: str) -> None:
    error = failed(code)
    assert error.name == "AttributeError" and REFUSED in error.message


def test_userstring_and_a_str_subclass_still_format() -> None:
    assert value(
        "import collections\n"
        "class Text(str):\n"
        "    def show(self, *args):\n"
        "        return super().format(*args)\n"
        "u = collections.UserString('{0}-{x}')\n"
        "m = collections.UserString('{x}')\n"
        "return [u.format(1, x=2), m.format_map({'x': 3}), Text('{0}+{0}').show('a'),\n"
        "        str(collections.UserString('x').upper()), type(u).__name__]"
    ) == ["1-2", "3", "a+a", "X", "UserString"]


def test_enum_cannot_write_into_a_module() -> None:
    error = failed("import enum\nreturn enum.global_enum")
    assert error.name == "AttributeError" and "global_enum" in error.message
    assert value("import enum\nclass C(enum.Enum):\n    A = 1\nreturn C.A.name") == "A"


@pytest.mark.parametrize(
    "code",
    [
        "F = type(files)\nF.list = lambda self: ['forged']",
        "T = type(tools)\nT.tool_search = lambda self, **k: 'forged'",
        "import json\ntype(json).anything = 5",
        "import asyncio\ndel type(asyncio.Event()).set",
        # copy sets a reduced object's state by name, dunders included
        "import copy, asyncio\n"
        "TG = type(asyncio.TaskGroup())\n"
        "class R:\n"
        "    def __reduce_ex__(self, proto):\n"
        "        return (lambda: TG, (), (None, {'__init__': print}))\n"
        "copy.copy(R())",
    ],
)
def test_the_sandboxs_classes_are_read_only(code: str) -> None:
    error = failed(code)
    assert error.name == "AttributeError" and "is read-only in scripts" in error.message
    assert value("return files.list()") == []


def test_super_of_a_subclass_of_the_real_datetime_reads_the_scripts_clock() -> None:
    code = (
        "import datetime\n"
        "Real = type(datetime.datetime.min)\n"
        "class D(Real):\n"
        "    pass\n"
        "class E(type(datetime.date.min)):\n"
        "    pass\n"
        "return [str(super(D, D).now()), str(datetime.datetime.now()),\n"
        "        str(super(E, E).today()), str(datetime.date.today())]"
    )
    got = value(code)
    assert got[0] == got[1] and got[2] == got[3]
    assert value(code, now_ms=0) == [
        "1970-01-01 00:00:00",
        "1970-01-01 00:00:00",
        "1970-01-01",
        "1970-01-01",
    ]


# ---- match class patterns ----


MATCHES = """\
from dataclasses import dataclass
@dataclass
class Point:
    x: int
    y: int
class Meta(type):
    pass
Pair = Meta("Pair", (), {"__match_args__": ("a", "b"), "__init__": lambda s, a, b: None})
def where(p):
    match p:
        case Point(0, 0):
            return "origin"
        case Point(x, 0) | Point(0, x):
            return f"axis {x}"
        case Point(x=x, y=y) if x == y:
            return "diagonal"
        case [Point(a, b), *rest]:
            return f"list {a},{b} +{len(rest)}"
        case int(n) | str(n):
            return f"plain {n!r}"
        case {"k": Point(a, _)}:
            return f"mapped {a}"
        case bool():
            return "never"
        case _:
            return "other"
out = [where(v) for v in (Point(0, 0), Point(3, 0), Point(0, 4), Point(2, 2),
                          [Point(1, 2), 3], 7, "s", {"k": Point(9, 1)}, 1.5)]
for pattern in ("Point(a, b, c)", "Pair(a)"):
    try:
        match Point(1, 2):
            case Point(a, b, c):
                pass
    except TypeError as e:
        out.append(str(e))
Shape = Point
def later():
    match Point(5, 6):
        case Shape(a, b):
            return [a, b]
Shape = Meta("Shape", (), {"__match_args__": ("x",), "x": 1})
out.append(later())
"""


def test_class_patterns_match_as_cpython_does() -> None:
    expected: dict[str, object] = {}
    exec(
        "async def main():\n"
        + "".join(f"    {line}\n" for line in MATCHES.splitlines())
        + "    return out\n",
        expected,
    )
    coroutine = expected["main"]()  # type: ignore[operator]
    try:
        coroutine.send(None)
    except StopIteration as stop:
        want = stop.value
    assert value(MATCHES + "return out") == want
    assert want[-1] is None  # Shape is read when the case is tried, as Python reads it


@pytest.mark.parametrize(
    ("namespace", "message"),
    [
        (
            '{"__match_args__": ("__globals__",)}',
            "A.__match_args__ names the attribute '__globals__'",
        ),
        ('{"__match_args__": ("_x",)}', "A.__match_args__ names the attribute '_x'"),
        ('{"__match_args__": ("f_globals",)}', "A.__match_args__ names the attribute 'f_globals'"),
        ('{"__match_args__": ["x"]}', "A.__match_args__ must be a tuple (got list)"),
        ('{"__match_args__": (1,)}', "__match_args__ elements must be strings (got int)"),
    ],
)
def test_a_class_pattern_reads_no_attribute_a_script_may_not(namespace: str, message: str) -> None:
    code = (
        "import json\n"
        "class Any(type):\n"
        "    def __instancecheck__(cls, obj):\n"
        "        return True\n"
        f"A = Any('A', (), {namespace})\n"
        "match json.dumps:\n"
        "    case A(g):\n"
        "        return 'reached'\n"
    )
    error = failed(code)
    assert message in error.message, error


def test_a_match_args_property_is_read_once_and_checked() -> None:
    """A metaclass property may answer each read otherwise: what Python reads is what was
    checked."""
    code = (
        "import json\n"
        "reads = []\n"
        "class Any(type):\n"
        "    def __instancecheck__(cls, obj):\n"
        "        return True\n"
        "    @property\n"
        "    def __match_args__(cls):\n"
        "        reads.append(1)\n"
        "        return ('__doc__',) if len(reads) == 1 else ('__globals__',)\n"
        "A = Any('A', (), {})\n"
        "match json.dumps:\n"
        "    case A(g):\n"
        "        return [len(reads), g == json.dumps.__doc__]\n"
    )
    assert value(code) == [1, True]


# ---- values and errors of the script's own ----


def test_a_memory_error_the_script_raises_with_a_message_is_its_own() -> None:
    error = failed('raise MemoryError("cache full")')
    assert (error.name, error.message) == ("MemoryError", "cache full")
    assert run('raise MemoryError("cache full")').limit is None
    # Without a message it reads as the interpreter's own: the heap's limit.
    assert run("raise MemoryError").limit is not None


def test_a_large_exception_group_counts_every_error() -> None:
    error = failed('raise ExceptionGroup("many", [ValueError(str(i)) for i in range(1000)])')
    assert error.message.endswith("ValueError: 0; ValueError: 1; ValueError: 2; and 997 more")
    nested = (
        "g = ExceptionGroup('inner', [KeyError(1), KeyError(2)])\n"
        "for i in range(400):\n"
        "    g = ExceptionGroup(f'level {i}', [g, ValueError(i)])\n"
        "raise g"
    )
    assert failed(nested).message.endswith("; and 399 more")


ORDER = rec("echo", {"n": 1}, result={"id": 7, "name": "Ada", "lines": [{"sku": "a", "qty": 2}]})


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (
            "return r['nmae']",
            "'nmae'; the dict has 3 keys: 'id', 'name', 'lines'; did you mean 'name'?",
        ),
        ("i = 0\nreturn r['lines'][i]['price']", "'price'; the dict has 2 keys: 'sku', 'qty'"),
        ("def total(o):\n    return o['total']\nreturn total(r)", "'total'; the dict has 3 keys"),
        ("return [x['n'] for x in r['lines']]", "'n'; the dict has 2 keys: 'sku', 'qty'"),
        ("d = {}\nreturn d['x']", "'x'; the dict is empty"),
        ("d = {str(i): i for i in range(40)}\nreturn d['x']", "'8', '9' and 30 more"),
        # An item past a list's end: how many it has.
        ("return r['lines'][1]", "list index out of range; the list has 1 item"),
        ("r['lines'].clear()\nreturn r['lines'][0]['sku']", "out of range; the list is empty"),
    ],
)
def test_a_key_a_dict_has_not_is_said_with_the_keys_it_has(code: str, said: str) -> None:
    """A KeyError of a tool's result (any dict the script subscripts) that ends the run says
    which keys the dict has, so the model need not guess them; an IndexError, how many items
    the list has."""
    error = failed("r = await tools.echo(n=1)\n" + code, [ORDER])
    assert error.name == ("IndexError" if "list" in said else "KeyError")
    assert said in error.message


def test_a_key_read_as_an_attribute_says_to_read_it_by_key() -> None:
    """`r.name` of a tool's result, as JavaScript reads it: CPython's text said only that
    the dict has no such attribute."""
    error = failed("r = await tools.echo(n=1)\nreturn r.name", [ORDER])
    assert (error.name, error.message) == (
        "AttributeError",
        "'dict' object has no attribute 'name'; 'name' is a key of the dict: read it as "
        "d['name'], not d.name",
    )
    assert failed("return {'a': 1}.b").message == "'dict' object has no attribute 'b'"


def test_a_key_error_the_script_catches_is_pythons() -> None:
    """Only the run's own failure says more: e, e.args and str(e) are CPython's, and a
    KeyError not raised by a subscript of a plain dict (a library's, a class's) is as it was."""
    assert value(
        "r = await tools.echo(n=1)\ntry:\n    r['nope']\nexcept KeyError as e:\n"
        "    return [repr(e), e.args, str(e)]",
        [ORDER],
    ) == ["KeyError('nope')", ["nope"], "'nope'"]
    library = "r = await tools.echo(n=1)\nimport operator\nreturn operator.itemgetter('x')(r)"
    assert failed(library, [ORDER]).message == "'x'"
    own = "class M(dict):\n    def __repr__(self):\n        raise ValueError\nreturn M(a=1)['b']"
    assert failed(own).message == "'b'"


def test_two_keys_that_are_one_in_json_are_refused() -> None:
    """Both keys are named as the script wrote them, the earlier first."""
    assert caught("await tools.echo(value={1: 'int key', '1': 'str key'})") == [
        "TypeError",
        "value in the argument has the keys 1 and '1', both '1' as JSON data's keys, which are "
        "strings (a number key becomes its text); keep one",
    ]
    error = failed("return {'x': [{'a': 0, 2.5: 1, '2.5': 2}]}")
    assert "x[0] in the returned value has the keys 2.5 and '2.5', both '2.5'" in error.message
    # A str subclass's own repr is not what names it.
    error = failed(
        "class K(str):\n    def __repr__(self):\n        return 'spoof'\nreturn {K('7'): 1, 7: 2}"
    )
    assert "has the keys '7' and 7, both '7'" in error.message


def test_gather_of_one_awaitable_twice_runs_it_once() -> None:
    code = (
        "import asyncio\n"
        "async def one():\n"
        "    return await tools.echo(n=1)\n"
        "c = one()\n"
        "t = tools.echo(n=2)\n"
        "return await asyncio.gather(c, t, c, t)"
    )
    ran = run(code)
    # t's call is made where the script makes it; c's when the gather runs c
    assert ran.outcome == "calls" and [c.arguments for c in ran.calls] == [{"n": 2}, {"n": 1}]
    answered = [rec("echo", {"n": 2}, result="b"), rec("echo", {"n": 1}, result="a")]
    assert value(code, answered) == ["a", "b", "a", "b"]


def test_awaiting_a_tool_without_calling_it_says_so() -> None:
    error = failed("return await tools.echo")
    assert (error.name, error.message) == (
        "TypeError",
        "tools.echo is the tool, not a call of it: write `await tools.echo(...)` with its "
        "arguments",
    )


def test_a_tool_is_named_as_a_function_is_and_has_no_other_attribute() -> None:
    """A script that logs which tool it calls reads its __name__ (functools.wraps too); any
    other attribute says a tool is called (both said "'_ToolFunction' object has no
    attribute", naming the sandbox's class)."""
    code = (
        "import functools\n@functools.wraps(tools.echo)\nasync def logged(**kw):\n"
        "    return await tools.echo(**kw)\n"
        "return [tools.echo.__name__, tools.echo.__qualname__, logged.__name__]"
    )
    assert value(code) == ["echo", "echo", "echo"]
    error = failed("return tools.echo.description")
    assert (error.name, error.message) == (
        "AttributeError",
        "tools.echo has no attribute 'description': a tool is called, as `await tools.echo(...)`",
    )


def test_newer_syntax_names_the_python_that_reads_the_script() -> None:
    error = failed('d = {"key": 1}\nreturn f"{d["key"]}"')
    assert error.name == "SyntaxError" and "scripts are Python 3.11" in error.message
    assert "f'{d[\"key\"]}'" in error.message
    assert "Python 3." not in failed("return (1").message


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (
            "def first[T](items: list[T]) -> T:\n    return items[0]",
            "expected '(' (column 10) (scripts are Python 3.11, which has no def f[T]: write "
            'T = TypeVar("T") (from typing) before the function, and def f(x: T))',
        ),
        (
            "x = 1\nasync def first[T](items): pass",
            "expected '(' (column 16) (scripts are Python 3.11, which has no def f[T]:",
        ),
        (
            "class Box[T]:\n    pass",
            "invalid syntax (column 10) (scripts are Python 3.11, which has no class C[T]: "
            'write T = TypeVar("T") (from typing) before the class, and class C(Generic[T]))',
        ),
        (
            "type Point = tuple[int, int]",
            "invalid syntax (column 6) (scripts are Python 3.11, which has no type statement: "
            "write the alias as an assignment, X = list[int])",
        ),
    ],
)
def test_type_parameters_say_how_the_python_that_reads_the_script_writes_them(
    code: str, said: str
) -> None:
    """3.12's generics and type statement are a SyntaxError in 3.11: `def f[T]` said only
    "expected '('", as if a parenthesis were missing, and none said what to write."""
    error = failed(code)
    assert error.name == "SyntaxError", error
    assert error.message.startswith(said), error.message


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ("x = = 1", "invalid syntax (column 5)"),
        ("def f(:\n    pass", "invalid syntax (column 7)"),
        ("return tools.class", "invalid syntax (column 14)"),
        ("total = 0\nfor x in [1, 2]\n    total += x", "expected ':' (column 16)"),
        # `as` with two types unparenthesized is an error in 3.14 too.
        (
            "try:\n    pass\nexcept ValueError, KeyError as e:\n    pass",
            "multiple exception types must be parenthesized (column 8)",
        ),
        (
            "try:\n    pass\nexcept ValueError, KeyError:\n    pass",
            "multiple exception types must be parenthesized (column 8); scripts are Python "
            "3.11, which does not allow it (3.14 does): write except (ValueError, KeyError):",
        ),
        (
            "x = 1\nreturn t'hi {x}'",
            "invalid syntax (column 9) (scripts are Python 3.11, which has no template "
            'strings, t"..." (3.14 has): write an f-string, f"...")',
        ),
        (
            'return Rt"a"',
            "invalid syntax (column 10) (scripts are Python 3.11, which has no template "
            'strings, t"..." (3.14 has): write an f-string, f"...")',
        ),
    ],
)
def test_only_syntax_a_newer_python_takes_names_the_python(code: str, said: str) -> None:
    """Every "invalid syntax" ended "(scripts are Python 3.11)", also where no Python takes
    the code (`x = = 1`), sending the reader after a newer feature the code did not use; 3.14's
    `except A, B:` and t-strings, which a newer Python takes, said nothing of it."""
    error = failed(code)
    assert (error.name, error.message) == ("SyntaxError", said)


@pytest.mark.parametrize(
    ("version", "message", "text", "hint"),
    [
        # What holds in every Python, which a host on 3.12 or 3.13 lost (the hint returned
        # early there).
        (
            (3, 12),
            "import * only allowed at module level",
            "from math import *",
            ": a script is the body of an async function, where Python refuses it",
        ),
        (
            (3, 13),
            "'await' outside async function",
            "    await tools.echo(a=1)",
            "; the function it is in is not async",
        ),
        ((3, 12), "invalid syntax", "if a && b:", "; Python writes `and` for `&&`"),
        # 3.14's syntax, which 3.12 and 3.13 refuse as 3.11 does, in their own names.
        (
            (3, 13),
            "multiple exception types must be parenthesized",
            "except ValueError, KeyError:",
            "; scripts are Python 3.13, which does not allow it (3.14 does): write "
            "except (ValueError, KeyError):",
        ),
        (
            (3, 12),
            "invalid syntax",
            "return t'hi {x}'",
            ' (scripts are Python 3.12, which has no template strings, t"..." (3.14 has): '
            'write an f-string, f"...")',
        ),
        # 3.12's own syntax is no error there, so nothing names it; 3.14's neither in 3.14.
        ((3, 12), "invalid syntax", "class Box[T]:", ""),
        ((3, 13), "f-string: unmatched '['", 'return f"{d["key"]}"', ""),
        ((3, 14), "invalid syntax", "return t'hi {x}'", ""),
        ((3, 11), "invalid syntax", "class Box[T]:", " (scripts are Python 3.11, which has no"),
    ],
)
def test_the_hints_that_hold_in_every_python_hold_on_a_newer_host(
    version: tuple[int, int], message: str, text: str, hint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """_syntax_hint returned "" for any error on Python 3.12 and later, so a host on 3.12 or
    3.13 lost what holds in every version (`import *`, `await` in a plain def, JavaScript's
    operators) and 3.14's syntax, which they refuse too. Only the hints of what the host's
    own Python takes depend on its version. (CI runs 3.11: the version is set.)"""
    monkeypatch.setattr(python, "_VERSION", version)
    said = _syntax_hint(message, text)
    assert said.startswith(hint) and bool(said) == bool(hint), said


@pytest.mark.parametrize("lf", ["\r", "\r\n"])
def test_a_line_is_the_line_python_counts(lf: str) -> None:
    error = failed(f"t = 2{lf}u = 3\nraise ValueError('x')\nv = 'not this one'")
    assert [(x.line, x.text) for x in error.lines] == [(3, "raise ValueError('x')")]


@pytest.mark.parametrize(
    ("code", "hint"),
    [
        ('return f"{x!z}"', ""),
        ('return f"{}"', ""),
        ('return f"{=x}"', ""),
        ("return f\"{'\\\\n'.join(['a'])}\"", "which does not allow it (3.12 does)"),
        ('return f"{1 # one}"', "which does not allow it (3.12 does)"),
    ],
)
def test_only_an_f_string_error_newer_python_allows_names_the_python(code: str, hint: str) -> None:
    """A bad conversion or an empty expression is an error in any Python: it was told that
    3.11 cannot use the f-string's quote in its braces, which it had not done."""
    error = failed(code)
    assert error.name == "SyntaxError", error
    assert "own quote" not in error.message, error.message
    assert ("scripts are Python 3.11" in error.message) == bool(hint), error.message
    assert hint in error.message


@pytest.mark.parametrize("code", ["return str(10 ** 5000)", 'return int("9" * 5000)'])
def test_an_int_too_long_for_text_says_a_script_cannot_raise_the_bound(code: str) -> None:
    """CPython's advice, sys.set_int_max_str_digits(), named what a script's sys has not."""
    error = failed(code)
    assert error.name == "ValueError", error
    assert "use sys.set_int_max_str_digits()" not in error.message, error.message
    assert error.message.startswith("Exceeds the limit (4300 digits)"), error.message
    assert error.message.endswith(
        "; a script cannot raise the limit (its sys has no set_int_max_str_digits): keep such "
        "a number as text, or write it with hex(value)"
    ), error.message


_NO_TEXT = (
    "its message could not be made: it holds an integer of more than 4,300 digits, which "
    "Python does not write as text; give the error a shorter message (the number's digit "
    "count, or hex(value))"
)


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ("raise ValueError(10**5000)", ("ValueError", _NO_TEXT)),
        ("raise KeyError(10**5000)", ("KeyError", _NO_TEXT)),
        (
            "class Bad:\n    def __str__(self):\n        raise RuntimeError('nope')\n"
            "raise ValueError(Bad())",
            (
                "ValueError",
                "its message could not be made: str() of it raised RuntimeError: nope",
            ),
        ),
        (
            "try:\n    raise ValueError(10**5000)\nexcept ValueError:\n    raise TypeError('x')",
            ("TypeError", f"x (raised while handling ValueError: {_NO_TEXT})"),
        ),
    ],
)
def test_an_error_whose_text_cannot_be_made_says_what_it_is_and_why(
    code: str, said: tuple[str, str]
) -> None:
    """`raise ValueError(10**5000)` said "ValueError: an error that cannot be read:
    ValueError", the second name being that of str()'s own failure, and nothing of why."""
    error = failed(code)
    assert (error.name, error.message) == said


def test_a_log_record_with_no_text_is_said_not_lost() -> None:
    """`logging.warning(10**5000)` printed nothing at all (the fallback's repr of the int
    failed too, and that was swallowed); CPython says a logging error and goes on."""
    printed = run("import logging\nlogging.warning(10**5000)\nprint('after')").printed
    assert printed == (
        "--- Logging error ---\n"
        "ValueError: Exceeds the limit (4300 digits) for integer string conversion; a script "
        "cannot raise the limit (its sys has no set_int_max_str_digits): keep such a number "
        "as text, or write it with hex(value)\n"
        'Call stack:\n  File "<script>", line 2, in <module>\n    logging.warning(10**5000)\n'
        "Unable to print the message and arguments - possible type mismatch?\n"
        "after\n"
    )


@pytest.mark.parametrize("read", ["sum", "list", "max"])
def test_a_generator_expression_that_awaits_read_as_an_iterable_says_what_to_write(
    read: str,
) -> None:
    """In the script's async function such an expression is an async generator: CPython
    said only "'async_generator' object is not iterable"."""
    error = failed(f"return {read}(await tools.echo(x=i) for i in range(3))")
    assert error.name == "TypeError", error
    assert error.message.startswith("'async_generator' object is not iterable; "), error
    assert "`sum([await f(x) for x in xs])`" in error.message
    assert "`await asyncio.gather(*(f(x) for x in xs))`" in error.message


@pytest.mark.parametrize(
    ("code", "lines"),
    [
        ('orders = [{"id": 1}]\nfirst = next(o for o in orders if o["id"] == 9)', [2]),
        ("def first():\n    return next(iter([]))\nx = 1\nfirst()", [2, 4]),
        ("def gen():\n    yield next(iter([]))\nfor x in gen():\n    pass", [2, 3]),
    ],
)
def test_next_of_an_empty_iterator_names_its_line_and_the_default(
    code: str, lines: list[int]
) -> None:
    """PEP 479 makes it a RuntimeError where the script's body ends: the run's error named
    no line of the script, and nothing of next()."""
    error = failed(code)
    assert error.name == "RuntimeError", error
    assert "raised StopIteration: an iterator had nothing left" in error.message, error
    assert "`next(it, None)`" in error.message
    assert [x.line for x in error.lines] == lines


def test_a_functions_annotations_may_name_types_only_the_declarations_have() -> None:
    """A model annotates its helpers with the stubs' TypedDicts, which the type check knows:
    `def` evaluated them, a NameError at the line of the def."""
    code = (
        "async def one(i: int, *more: Get_user_User, k: Nope = 1, **kw: X) -> Get_user_User:\n"
        "    return {'id': i}\n"
        "class Names:\n"
        "    def of(self, u: Get_user_User) -> list[Get_user_User]:\n"
        "        return [u]\n"
        "return Names().of(await one(2))"
    )
    assert value(code) == [{"id": 2}]
    # A class body's are evaluated, as dataclasses reads them.
    error = failed("class Row:\n    user: Get_user_User")
    assert (error.name, [x.line for x in error.lines]) == ("NameError", [2, 1])


_CLASS_ANNOTATION = (
    "; a class body's annotations are evaluated when the class is made (dataclasses reads "
    "them): write `from __future__ import annotations` as the script's first line, which keeps "
    "them as text, or annotate with a type the script has (dict, Any)"
)


@pytest.mark.parametrize(
    ("code", "hint"),
    [
        (
            "from dataclasses import dataclass\n@dataclass\nclass Row:\n    user: Get_user_User\n"
            "    n: int = 0",
            _CLASS_ANNOTATION,
        ),
        (
            "from typing import TypedDict\nclass Row(TypedDict):\n    users: list[Get_user_User]",
            _CLASS_ANNOTATION,
        ),
        # Not an annotation: a class attribute's value, a dict's key in a function.
        ("class Row:\n    user = Get_user_User()", ""),
        ("def f(a):\n    return {\n        a: Get_user_User\n    }\nf(1)", ""),
    ],
)
def test_a_class_annotation_the_script_has_not_says_how_to_keep_it_as_text(
    code: str, hint: str
) -> None:
    """A dataclass's field annotated with a declarations' type (`user: Get_user_User`), which
    the type check knows and the run has not, said only "name 'Get_user_User' is not
    defined" (a function's annotations are kept as text; a class body's are evaluated)."""
    error = failed(code)
    assert (error.name, error.message) == (
        "NameError",
        f"name 'Get_user_User' is not defined{hint}",
    )


def test_a_dataclass_under_future_annotations_reads_class_var_kw_only_and_init_var() -> None:
    """With `from __future__ import annotations`, dataclasses finds ClassVar in an
    annotation's text only in the module's globals, and a script's imports are its
    function's names: `count: ClassVar[int] = 0` became a field, and `_: KW_ONLY` then
    failed ("non-default argument '_' follows default argument")."""
    code = (
        "from __future__ import annotations\n"
        "import dataclasses, typing\n"
        "from dataclasses import dataclass, field, KW_ONLY, InitVar\n"
        "from typing import ClassVar, Optional\n"
        "@dataclass\n"
        "class Node:\n"
        "    name: str\n"
        "    parent: Optional[Node] = None\n"
        "    count: ClassVar[int] = 0\n"
        "    kind: typing.ClassVar[str] = 'node'\n"
        "    _: KW_ONLY\n"
        "    depth: int = 2\n"
        "    seed: InitVar[int] = 3\n"
        "    def __post_init__(self, seed: int) -> None:\n"
        "        self.seeded = seed\n"
        "n = Node('a', depth=5, seed=9)\n"
        "return [[f.name for f in dataclasses.fields(Node)], n.seeded, Node.count]"
    )
    assert value(code) == [["name", "parent", "depth"], 9, 0]


@pytest.mark.parametrize(
    ("code", "name"),
    [
        ('import re\nre.compile("[")', "re.error"),
        ('import struct\nstruct.unpack("I", b"x")', "struct.error"),
        ("import csv, io\nlist(csv.reader(io.StringIO('a,\"b'), strict=True))", "csv.Error"),
        ("class error(Exception): pass\nraise error('own')", "error"),
    ],
)
def test_a_modules_error_class_is_named_with_its_module(code: str, name: str) -> None:
    """The run's error read "error: unterminated character set at position 0"."""
    assert failed(code).name == name


def test_the_printed_text_takes_what_a_program_does_to_sys_stdout() -> None:
    """`sys.stdout.reconfigure(encoding="utf-8")`, a habit before printing other than ASCII,
    failed: "'_Sink' object has no attribute 'reconfigure'", a class the script never saw."""
    ran = run(
        "import sys\n"
        'sys.stdout.reconfigure(encoding="utf-8", errors="replace")\n'
        'sys.stderr.writelines(["é\\n", "b\\n"])\n'
        "return [sys.stdout.encoding, sys.stdout.writable()]"
    )
    assert (ran.outcome, ran.value, ran.printed) == ("finished", ["utf-8", True], "é\nb\n"), ran
    error = failed("import sys\nsys.stdout.buffer.write(b'x')")
    assert error.name == "AttributeError" and "_Sink" not in error.message, error
    assert error.message.startswith(
        "the printed text (sys.stdout, sys.stderr) has no attribute 'buffer' in scripts: it "
        "takes text, and has write, writelines"
    ), error


def test_a_name_files_has_not_says_what_it_has() -> None:
    """`files.read(id)`, a guess, read "'Files' object has no attribute 'read'"."""
    error = failed('files.read("f1")')
    assert (error.name, error.message) == (
        "AttributeError",
        "files has no attribute 'read' in scripts; it has list, stat, text, show, sheets, "
        "lines, jsonl, csv, chunks, xlsx (`await files.text(id)` reads a whole file)",
    )
    assert value("return hasattr(files, 'read'), hasattr(files, 'text')") == [False, True]


def test_an_error_with_no_text_in_a_group_is_its_name_alone() -> None:
    """`assert ok` in a TaskGroup's task read "AssertionError: " in the run's error."""
    error = failed(
        "import asyncio\nasync def check():\n    assert False\n"
        "async with asyncio.TaskGroup() as tg:\n    tg.create_task(check())"
    )
    assert error.message == ("unhandled errors in a TaskGroup (1 sub-exception): AssertionError"), (
        error
    )


def test_decimal_of_text_that_is_no_number_says_so() -> None:
    """`Decimal("N/A")`, a price a tool gave as text: the run's error read
    "InvalidOperation: [<class 'decimal.ConversionSyntax'>]"."""
    error = failed('from decimal import Decimal\nprice = "N/A"\ntotal = Decimal(price) * 2')
    assert (error.name, error.message, [x.line for x in error.lines]) == (
        "InvalidOperation",
        "Decimal(...) was given text that is not a number (ConversionSyntax)",
        [3],
    )


def test_the_hosts_own_copies_keep_their_private_attributes() -> None:
    """What the sandbox gives copy's code in place of setattr (a script's check of the names
    a state sets) checks only a script's copies: a host that ran a Python script in its own
    process (an in-process runner, a test) copies its objects as before. (Its Tool.renamed,
    a copy of an object with underscore slots, failed 'attributes whose names start with an
    underscore ... ' after such a run.)"""
    import copy

    assert value("import copy\nreturn copy.copy([1])") == [1]  # sandbox.python is loaded

    class Slotted:
        __slots__ = ("__mangled", "_private")

        def __init__(self) -> None:
            self._private = 1
            self.__mangled = 2

    clone = copy.copy(Slotted())
    assert clone._private == 1 and clone._Slotted__mangled == 2  # type: ignore[attr-defined]


_NOT_AWAITED = 'tools.echo(...) gives an awaitable, not its result: write "await tools.echo(...)"'
_A_FUTURE = (
    "; a tool call, tools.name(...), gives a Future to await, not its result: write "
    "`await tools.name(...)` and use what it gives"
)


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (
            "return tools.echo(a=1)()",
            ("TypeError", f"'Future' object is not callable{_A_FUTURE}"),
        ),
        (
            "return ', '.join([tools.echo(a=1)])",
            ("TypeError", f"sequence item 0: expected str instance, Future found{_A_FUTURE}"),
        ),
        ("r = tools.echo(a=1)\nr.status = 'done'", ("TypeError", _NOT_AWAITED)),
        ("import copy\nreturn copy.deepcopy(tools.echo(a=1))", ("TypeError", _NOT_AWAITED)),
        (
            "return tools['echo']",
            (
                "TypeError",
                "tools is not a dict: a tool is an attribute, `await tools.name(...)`; for a "
                "name held in a variable, write `await getattr(tools, name)(...)`",
            ),
        ),
        (
            "return tools.echo",
            (
                "TypeError",
                "the returned value is a tool (call and await it for the data it gives: `await "
                "tools.echo(...)`); data must be plain (dict, list, tuple, str, int, float, "
                "bool, None); return plainer data",
            ),
        ),
        (
            "import asyncio\nwith asyncio.Lock():\n    pass",
            (
                "TypeError",
                "asyncio.Lock() is entered with `async with`, not `with`: write `async with lock:`",
            ),
        ),
        (
            "import asyncio\nwith asyncio.Semaphore(2):\n    pass",
            (
                "TypeError",
                "asyncio.Semaphore() is entered with `async with`, not `with`: write `async "
                "with semaphore:`",
            ),
        ),
        (
            "import asyncio\nwith asyncio.timeout(5):\n    pass",
            (
                "TypeError",
                "asyncio.timeout(...) is entered with `async with`, not `with`: write `async "
                "with asyncio.timeout(...):`",
            ),
        ),
        (
            "import asyncio\nwith asyncio.TaskGroup() as tg:\n    tg.create_task(tools.echo(a=1))",
            (
                "TypeError",
                "asyncio.TaskGroup() is entered with `async with`, not `with`: write `async "
                "with asyncio.TaskGroup() as tg:`",
            ),
        ),
        (
            "import asyncio, contextlib\nwith contextlib.ExitStack() as stack:\n"
            "    stack.enter_context(asyncio.Lock())",
            (
                "TypeError",
                "asyncio.Lock() is entered with `async with`, not `with`: write `async with lock:`",
            ),
        ),
        (
            "import asyncio\nasync def f():\n    return 1\nreturn asyncio.run(f)",
            (
                "RuntimeError",
                "asyncio.run() cannot be called from a running event loop: a script is the "
                "body of an async function already: in its place, write `return await f(...)`",
            ),
        ),
    ],
)
def test_a_misuse_is_said_in_the_scripts_words(code: str, said: tuple[str, str]) -> None:
    """Misuses a model makes were said with the sandbox's classes ("'_Call' object is not
    callable", "'_Timeout' object does not support the context manager protocol", "the
    returned value is a _ToolFunction", "'Tools' object is not subscriptable", "_Call
    objects cannot be copied") or with no word of the fix (`with asyncio.Lock()`), and
    `asyncio.run(f)` told the script to write `return await main(...)`."""
    # A record for the call it makes (one that makes none and returns is a divergence).
    error = failed(code, [rec("echo", {"a": 1}, result=1)] if "tools.echo(" in code else [])
    assert (error.name, error.message) == said


def test_what_a_script_prints_of_the_sandboxs_objects_names_no_sandbox_class() -> None:
    """type() of a call, of tools, of a tool, of asyncio's objects and of sys.stdout was
    <class 'sandbox.python._Call'> and the like, and asyncio.timeout() and asyncio.sleep()
    printed an address (which differs from run to run, so live and replayed text differed)."""
    code = (
        "import asyncio, sys\n"
        "async def f():\n    return 1\n"
        "call = tools.echo(a=1)\n"
        "try:\n    await tools.echo(a=2)\nexcept ToolError as e:\n    error = e\n"
        "shown = [call, tools, tools.echo, asyncio.timeout(1), asyncio.TaskGroup(), files,\n"
        "         asyncio.Lock(), asyncio, sys.stdout, error, asyncio.create_task(f())]\n"
        "out = [str(type(x)) for x in shown] + [str(type(type(tools)))]\n"
        "out += [repr(asyncio.timeout(1)), repr(asyncio.sleep(0)), repr(asyncio.as_completed([call]))]\n"
        "await call\n"
        "return out"
    )
    records = [rec("echo", {"a": 1}, result=1), rec("echo", {"a": 2}, error="no")]
    assert value(code, records) == [
        "<class 'asyncio.Future'>",
        "<class 'Tools'>",
        "<class 'tool'>",
        "<class 'asyncio.Timeout'>",
        "<class 'asyncio.TaskGroup'>",
        "<class 'Files'>",
        "<class 'asyncio.Lock'>",
        "<class 'module'>",
        "<class 'io.TextIOWrapper'>",
        "<class 'ToolError'>",
        "<class 'asyncio.Task'>",
        "<class 'type'>",
        "<Timeout [active]>",
        "<coroutine object sleep>",
        "<generator object as_completed>",
    ]


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (
            "result = await tools.echo(a=1)\nreturn reslt",
            ("NameError", "name 'reslt' is not defined. Did you mean: 'result'?"),
        ),
        (
            "return tool.echo(a=1)",
            ("NameError", "name 'tool' is not defined. Did you mean: 'tools'?"),
        ),
        (
            "items = [1]\ndef first():\n    return itmes[0]\nreturn first()",
            ("NameError", "name 'itmes' is not defined. Did you mean: 'items'?"),
        ),
        (
            "def count():\n    total_count = 1\n    return total_cont\nreturn count()",
            ("NameError", "name 'total_cont' is not defined. Did you mean: 'total_count'?"),
        ),
        ("prnt('x')", ("NameError", "name 'prnt' is not defined. Did you mean: 'print'?")),
        (
            "return 'abc'.uper()",
            ("AttributeError", "'str' object has no attribute 'uper'. Did you mean: 'upper'?"),
        ),
        # None where CPython's rule finds none too.
        ("return missing", ("NameError", "name 'missing' is not defined")),
        # A caller's local is not in scope where the name failed: CPython offers none.
        (
            "def f():\n    abcd = 1\n    return g()\ndef g():\n    return abce\nreturn f()",
            ("NameError", "name 'abce' is not defined"),
        ),
        ("return lenght([1])", ("NameError", "name 'lenght' is not defined")),
        ("rows = []\nrows.add(1)", ("AttributeError", "'list' object has no attribute 'add'")),
    ],
)
def test_a_misspelt_name_gets_cpythons_did_you_mean(code: str, said: tuple[str, str]) -> None:
    """CPython's traceback says "Did you mean: 'result'?" of a misspelt name or attribute;
    the error's text alone, which is what a script's failure said, does not."""
    error = failed(code, [rec("echo", {"a": 1}, result=1)])
    assert (error.name, error.message) == said


def test_an_errors_notes_follow_its_message_as_cpythons_traceback_writes_them() -> None:
    """The notes e.add_note() gave an error were left out of the failure and of the
    script's own traceback.print_exc()."""
    raising = (
        "e = ValueError('bad')\ne.add_note('while reading row 3')\ne.add_note('of rows.csv')\n"
    )
    error = failed(raising + "raise e")
    assert (error.name, error.message) == ("ValueError", "bad\nwhile reading row 3\nof rows.csv")
    body = "\n".join("    " + line for line in (raising + "raise e").splitlines())
    printed = run(f"import traceback\ntry:\n{body}\nexcept ValueError:\n    traceback.print_exc()")
    assert printed.printed.endswith("ValueError: bad\nwhile reading row 3\nof rows.csv\n")


_NOT_ASYNC = (
    "; the function it is in is not async (a plain `def`, or a lambda): make it an `async "
    "def`, and `await` its calls (`await f(...)`)"
)


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (
            "def total():\n    return await tools.echo(a=1)\nreturn total()",
            f"'await' outside async function (column 12){_NOT_ASYNC}",
        ),
        (
            "def all_of():\n    return [await tools.echo(a=i) for i in range(2)]\nreturn all_of()",
            f"asynchronous comprehension outside of an asynchronous function (column 12){_NOT_ASYNC}",
        ),
        (
            "from math import *\nreturn sqrt(4)",
            "import * only allowed at module level (column 18): a script is the body of an "
            "async function, where Python refuses it: import the names the script uses, `from "
            "math import sqrt, pi`, or the module, `import math`",
        ),
    ],
)
def test_syntax_python_refuses_in_a_function_says_what_the_script_writes(
    code: str, said: str
) -> None:
    """`from math import *` at a script's top level said "only allowed at module level",
    of what its author wrote at the top level; `await` in a plain `def` said nothing of
    `async def`."""
    error = failed(code)
    assert (error.name, error.message) == ("SyntaxError", said)


@pytest.mark.parametrize(
    "code",
    [
        "async def f():\n    return 1\nx = f()\nreturn x + 1",
        "async def f():\n    return 1\nreturn sum([f(), f()])",
    ],
)
def test_a_coroutine_used_in_arithmetic_says_to_await_it(code: str) -> None:
    """ "unsupported operand type(s) for +: 'coroutine' and 'int'" said nothing of await, as
    "'coroutine' object ..." errors do."""
    error = failed(code)
    assert error.name == "TypeError", error
    assert error.message.startswith("unsupported operand type(s) for +: "), error.message
    assert error.message.endswith("or several at once with `await asyncio.gather(*coroutines)`")


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (
            "x = await tools.echo(a=1)\nreturn await x",
            "object int can't be used in 'await' expression; await takes a tool call, a task "
            "or a coroutine, once: what an await gave is the result itself (`x = await "
            "tools.name(...)`, then use x)",
        ),
        (
            "import asyncio\nawait asyncio.sleep",
            "object function can't be used in 'await' expression; a function is called, and "
            "what it gives awaited: `await f(...)`",
        ),
        (
            "await tools",
            "object Tools can't be used in 'await' expression; tools holds the tools: await a "
            "call of one, `await tools.name(...)`",
        ),
        (
            "import asyncio\nawait asyncio.Lock()",
            "object Lock can't be used in 'await' expression; asyncio.Lock() is not awaited "
            "but entered: `async with lock:`",
        ),
    ],
)
def test_await_of_what_is_not_awaited_says_what_to_write(code: str, said: str) -> None:
    """`await x` of a result, of a function uncalled, of tools or of a lock said only
    CPython's "object int can't be used in 'await' expression"."""
    error = failed(code, [rec("echo", {"a": 1}, result=1)])
    assert (error.name, error.message) == ("TypeError", said)


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("rs = await [tools.echo(a=1), tools.echo(a=2)]\nreturn rs", "list"),
        ("rs = await (tools.echo(a=1), tools.echo(a=2))\nreturn rs", "tuple"),
        ("rs = await (tools.echo(a=i) for i in [1, 2])\nreturn rs", "generator"),
        ("rs = await map(lambda i: tools.echo(a=i), [1, 2])\nreturn rs", "map"),
        (
            "import asyncio\nrs = await asyncio.gather(tools.echo(a=1), tools.echo(a=2))\n"
            "return await rs",
            "list",
        ),
    ],
)
def test_await_of_several_calls_says_to_gather_them(code: str, kind: str) -> None:
    """`await [tools.a(...), tools.b(...)]`, JavaScript's Promise.all written bare, was told
    "await takes a tool call, a task or a coroutine, once: what an await gave is the result
    itself", which says nothing of how to await several."""
    records = [rec("echo", {"a": 1}, result=1), rec("echo", {"a": 2}, result=2)]
    error = failed(code, records)
    assert (error.name, error.message) == (
        "TypeError",
        f"object {kind} can't be used in 'await' expression; await takes one tool call, task or "
        f"coroutine, not a {kind}: await several at once with `await asyncio.gather(*calls)` "
        "(`import asyncio`), whose result, the list of theirs, is not awaited again",
    )


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (
            "x = 1\nbreakpoint()",
            "name 'breakpoint' is not defined; a script runs unattended, with no debugger: print "
            "the values to look at (`print(x)`), which the run's output shows",
        ),
        (
            "help(tools.echo)",
            "name 'help' is not defined; a script has no help(): find tools and what they take "
            'with `await tools.tool_search(query="...")`, and print what a value has with '
            "print(dir(x))",
        ),
        (
            "with open('out.txt', 'w') as f:\n    f.write('done')",
            "name 'open' is not defined; a script has no file system: read the files it was "
            "given with `await files.text(id)` or the streams (`files.list()` lists them), and "
            "hand text back by returning it or printing it",
        ),
    ],
)
def test_a_program_habit_with_no_place_in_a_script_says_what_to_do(code: str, said: str) -> None:
    """breakpoint() and help() said only "name ... is not defined"; open() of a file to
    write said how to read the given files, not how a script hands text back."""
    error = failed(code)
    assert (error.name, error.message) == ("NameError", said)


_DATA = (
    "; a tool's result is data already (the dict or list the tool gave), not an HTTP "
    "response: use it as it is, as r['key'] or r[0]"
)


@pytest.mark.parametrize(
    ("read", "result", "said"),
    [
        ("r.json()", {"x": 1}, f"'dict' object has no attribute 'json'{_DATA}"),
        ("r.status_code == 200", {"x": 1}, f"'dict' object has no attribute 'status_code'{_DATA}"),
        ("r.text", [1], f"'list' object has no attribute 'text'{_DATA}"),
        # A key of the dict is said to be one (a tool's result may hold "data").
        (
            "r.data",
            {"data": 1},
            "'dict' object has no attribute 'data'; 'data' is a key of the dict: read it as "
            "d['data'], not d.data",
        ),
    ],
)
def test_a_result_read_as_an_http_response_says_it_is_data(
    read: str, result: object, said: str
) -> None:
    """`r.json()` of a tool's result, an HTTP library's habit, said only "'dict' object has
    no attribute 'json'"."""
    error = failed(
        f"r = await tools.echo(a=1)\nreturn {read}", [rec("echo", {"a": 1}, result=result)]
    )
    assert (error.name, error.message) == ("AttributeError", said)


def test_a_list_read_as_an_http_response_runs_none_of_its_items_code() -> None:
    """The hint looked for the attribute's name in the list too (`key not in held`), which
    ran each item's __eq__: a printing one printed once an item."""
    ran = run(
        "class E:\n    def __eq__(self, other):\n        print('eq ran')\n        return False\n"
        "r = [E()] * 3\nreturn r.json()"
    )
    assert ran.error is not None and ran.error.message == (
        f"'list' object has no attribute 'json'{_DATA}"
    )
    assert not ran.printed, ran.printed


@pytest.mark.parametrize(
    ("code", "result", "said"),
    [
        ("from copy import replace", "", ": it is new in Python 3.13, and scripts are Python 3.12"),
        ("from typing_extensions import TypedDict", "module typing_extensions is not available",
         ": scripts are Python 3.12, whose typing has what it adds up to 3.12 ("),
    ],
)  # fmt: skip
def test_an_import_names_the_python_that_runs_the_script(
    code: str, result: str, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An import new in a later Python and one of typing_extensions said "scripts are Python
    3.11" whatever Python ran them (only the syntax's hints named the running one)."""
    monkeypatch.setattr(python, "_VERSION", (3, 12))
    error = failed(code)
    assert error.name == "ImportError" and result in error.message
    assert said in error.message and "3.11" not in error.message, error.message


@pytest.mark.parametrize(
    ("code", "where", "line"),
    [
        ("a, b = await tools.echo(a=1), tools.echo(a=2)\nreturn a, b", "[1] in ", 1),
        ("pending = tools.echo(a=1)\nx = 2\nreturn {'rows': [x, pending]}", "rows[1] in ", 1),
    ],
)
def test_a_call_not_awaited_in_the_returned_value_names_its_line(
    code: str, where: str, line: int
) -> None:
    """`a, b = await tools.x(...), tools.y(...)` (the await binds to the first call only),
    then `return a, b`: the error named no line and ended "...: write \"await
    tools.echo(...)\"; return plainer data", as if the data were too rich."""
    records = [rec("echo", {"a": 1}, result=1), rec("echo", {"a": 2}, result=2)]
    error = failed(code, records[: code.count("tools.echo(")])  # those of the calls it makes
    assert (error.name, error.message) == (
        "TypeError",
        f"{where}the returned value is not data: tools.echo(...) gives an awaitable, not its "
        'result: write "await tools.echo(...)"',
    )
    assert [x.line for x in error.lines] == [line]


@pytest.mark.parametrize(
    "code",
    [
        "names = tools.echo(a=1)\nreturn ', '.join(names)",
        "def show(names):\n    return ', '.join(names)\nreturn show(tools.echo(a=1))",
        # The line was searched for `.join(<name>)`: none of these were found.
        "return ', '.join(tools.echo(a=1))",
        "class C:\n    pass\nc = C()\nc.names = tools.echo(a=1)\nreturn ', '.join(c.names)",
        "xs = ['q']\nnames = tools.echo(a=1)\nreturn ', '.join(xs) + ', '.join(names)",
        # Every other way of iterating says the same.
        "names = tools.echo(a=1)\nfor n in names:\n    pass",
        "names = tools.echo(a=1)\na, b = names",
        "names = tools.echo(a=1)\nreturn [*names]",
        "names = tools.echo(a=1)\nreturn [n for n in names]",
        *(
            f"names = tools.echo(a=1)\nreturn {call}"
            for call in (
                "list(names)", "sorted(names)", "set(names)", "dict(names)",
                "list(zip(names, [1]))",
            )
        ),
    ],
)  # fmt: skip
def test_a_call_not_awaited_given_to_join_says_to_await_it(code: str) -> None:
    """`", ".join(names)` of a call not awaited said "can only join an iterable": str.join
    puts that in place of what the call's Future says when it is iterated (a TypeError of
    iter()'s; one of the iterator's next() it passes through). The line was searched for
    `.join(name)`, which missed a call joined as it is made, an attribute, a second join."""
    error = failed(code, [rec("echo", {"a": 1}, result=["a", "b"])])
    assert (error.name, error.message) == (
        "TypeError",
        'tools.echo(...) gives an awaitable, not its result: write "await tools.echo(...)"',
    )
    # What is no call is said as CPython says it.
    assert failed("names = 5\nreturn ', '.join(names)").message == "can only join an iterable"


def test_the_iterator_of_a_call_not_awaited_is_sealed_as_the_call_is() -> None:
    """What iterating a call not awaited gives is the sandbox's: its class read-only and not
    to be subclassed, its future out of reach, and made by no script."""
    made = "names = tools.echo(a=1)\nit = iter(names)\n"
    records = [rec("echo", {"a": 1}, result=["a"])]
    misuse = 'tools.echo(...) gives an awaitable, not its result: write "await tools.echo(...)"'
    assert value(made + "return repr(it)", records) == f"<{misuse}>"
    assert caught(made + "next(it)", records) == ["TypeError", misuse]
    for code, said in [
        ("type(it).x = 1", "FutureIter is read-only in scripts"),
        ("class D(type(it)):\n    pass", "FutureIter cannot be subclassed"),
        ("type(it)(5)", "FutureIter takes an awaitable"),
        ("it.__init__(names)", "FutureIter objects cannot be made again"),
        ("import copy\ncopy.copy(it)", "FutureIter objects cannot be copied"),
    ]:
        assert caught(made + code, records)[1] == said, code
    # Named as CPython names a Future's iterator, not the sandbox's class.
    assert value(made + "return repr(type(it))", records) == "<class '_asyncio.FutureIter'>"
    assert "a FutureIter" in failed(made + "return it", records).message
    assert REFUSED[:40] in failed(made + "return it._future", records).message
    assert REFUSED in failed(made + "return type(it).__next__.__globals__", records).message


@pytest.mark.parametrize(("result", "kind"), [({"x": 1}, "dict"), ([1, 2], "list")])
def test_async_for_of_a_result_says_to_loop_with_for(result: object, kind: str) -> None:
    """`async for pr in await tools.list_prs(...)`: CPython's "'async for' requires an object
    with __aiter__ method, got list" said nothing of the plain `for` that reads it."""
    error = failed(
        "async for x in await tools.echo(a=1):\n    print(x)",
        [rec("echo", {"a": 1}, result=result)],
    )
    assert (error.name, error.message) == (
        "TypeError",
        f"'async for' requires an object with __aiter__ method, got {kind}; a {kind} is data "
        "already, not an async iterator: loop over it with a plain `for x in ...`",
    )


@pytest.mark.parametrize(
    ("code", "tool", "said"),
    [
        (
            "return await tools.get-user(id=1)",
            "get_user",
            "tools.get-user reads as tools.get minus user (a name cannot have a '-'): the tool "
            "is called as await tools.get_user(...)",
        ),
        (
            "return await tools.list-open-issues()",
            "list_open_issues",
            "tools.list-open-issues reads as tools.list minus open minus issues (a name cannot "
            "have a '-'): the tool is called as await tools.list_open_issues(...)",
        ),
        (
            "return await tools.fetch-page(n=1)",
            "fetch-page",
            "tools.fetch-page reads as tools.fetch minus page (a name cannot have a '-'): the "
            'tool is called as await getattr(tools, "fetch-page")(...)',
        ),
        # No such tool either way: as any unknown tool.
        (
            "return await tools.get-thing(id=1)",
            "get_user",
            'tools.get does not exist. Find tools with await tools.tool_search(query="...").',
        ),
    ],
)
def test_a_tool_written_with_a_hyphen_says_how_python_calls_it(
    code: str, tool: str, said: str
) -> None:
    """`tools.get-user(...)` (the name an MCP server gives the tool) failed with "tools.get
    does not exist", of a tool the script may call as tools.get_user."""
    error = failed(code, tools=(*TOOLS, tool))
    assert (error.name, error.message) == ("AttributeError", said)


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (
            "rows = [1, 2]\nreturn rows.length",
            "'list' object has no attribute 'length'; that is JavaScript's: Python writes len(x)",
        ),
        (
            "rows = []\nrows.push(1)",
            "'list' object has no attribute 'push'; that is JavaScript's: Python writes "
            "x.append(item)",
        ),
        (
            "return 'abc'.toUpperCase()",
            "'str' object has no attribute 'toUpperCase'; that is JavaScript's: Python writes "
            "x.upper()",
        ),
        (
            "try:\n    await tools.echo(a=1)\nexcept ToolError as e:\n    return e.message",
            "'ToolError' object has no attribute 'message'; that is JavaScript's: Python "
            "writes str(e) for an error's message (raised while handling ToolError: nope)",
        ),
        # A class of the script's own keeps Python's words.
        ("class A:\n    pass\nreturn A().length", "'A' object has no attribute 'length'"),
    ],
)
def test_javascripts_names_of_what_python_writes_otherwise_say_how(code: str, said: str) -> None:
    """A model that writes both languages reaches for `rows.length` and `e.message`: Python
    said only that the list or the error has no such attribute."""
    error = failed(code, [rec("echo", {"a": 1}, error="nope")])
    assert (error.name, error.message) == ("AttributeError", said)


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (
            "n = 1\nn++",
            ("SyntaxError", "invalid syntax (column 4); Python writes `x += 1` for `x++`"),
        ),
        (
            "a = b = True\nif a && b:\n    pass",
            ("SyntaxError", "invalid syntax (column 7); Python writes `and` for `&&`"),
        ),
        (
            "done = False\nif !done:\n    pass",
            ("SyntaxError", "invalid syntax (column 4); Python writes `not x` for `!x`"),
        ),
        (
            "return JSON.stringify({})",
            (
                "NameError",
                "name 'JSON' is not defined; JSON is JavaScript's: a Python script writes "
                "`import json`, then json.dumps(value) and json.loads(text)",
            ),
        ),
        (
            "return await Promise.all([tools.echo(a=1)])",
            (
                "NameError",
                "name 'Promise' is not defined; Promise is JavaScript's: a Python script awaits "
                "calls at once with `import asyncio`, then `await asyncio.gather(*calls)`",
            ),
        ),
        # An error in any language keeps Python's words alone.
        ("x = = 1", ("SyntaxError", "invalid syntax (column 5)")),
    ],
)
def test_javascripts_operators_and_globals_in_python_say_what_python_writes(
    code: str, said: tuple[str, str]
) -> None:
    """`n++`, `a && b`, `!done`, JSON and Promise in a Python script said "invalid syntax"
    and "name 'JSON' is not defined", nothing of what Python writes."""
    error = failed(code)
    assert (error.name, error.message) == said


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (
            "xs = [1, 2]\nreturn list(map(x => x * 2, xs))",
            (
                "SyntaxError",
                "invalid syntax (column 20); Python writes `lambda x: ...` for `x => ...`",
            ),
        ),
        (
            'return await tools.search({query: "open", limit: 5})',
            (
                "NameError",
                "name 'query' is not defined; a dict's keys are quoted in Python, {'query': ...} "
                "(or a tool is given keywords, tools.name(query=...))",
            ),
        ),
        (
            "try:\n    await tools.echo(a=1)\nexcept* ValueError:\n    return 1",
            (
                "SyntaxError",
                "'break', 'continue' and 'return' cannot appear in an except* block (column 12); "
                "keep what the block found in a name (`failed = True`), and return or leave the "
                "loop after the try",
            ),
        ),
        # A name that is a value, not a key, keeps Python's words.
        ("return {'a': b}", ("NameError", "name 'b' is not defined")),
        # An object written over several lines: its keys start the lines.
        (
            'return await tools.search({\n    query: "open",\n    limit: 5,\n})',
            (
                "NameError",
                "name 'query' is not defined; a dict's keys are quoted in Python, {'query': ...} "
                "(or a tool is given keywords, tools.name(query=...))",
            ),
        ),
        # A name close to one the script has is a typo, as CPython's traceback says.
        (
            "user_id = 5\nreturn {user_ud: 1}",
            ("NameError", "name 'user_ud' is not defined. Did you mean: 'user_id'?"),
        ),
        # A key close to a builtin is still a key (`limit` is no `list`).
        (
            "return {limit: 5}",
            (
                "NameError",
                "name 'limit' is not defined; a dict's keys are quoted in Python, {'limit': ...} "
                "(or a tool is given keywords, tools.name(limit=...))",
            ),
        ),
        # So is one close to a name every script is given (`tool` is no `tools`).
        (
            "return await tools.echo({tool: 'x'})",
            (
                "NameError",
                "name 'tool' is not defined; a dict's keys are quoted in Python, {'tool': ...} "
                "(or a tool is given keywords, tools.name(tool=...))",
            ),
        ),
        (
            "return {file: 'a.txt'}",
            (
                "NameError",
                "name 'file' is not defined; a dict's keys are quoted in Python, {'file': ...} "
                "(or a tool is given keywords, tools.name(file=...))",
            ),
        ),
    ],
)
def test_an_arrow_an_unquoted_key_and_a_return_in_except_star_say_what_to_write(
    code: str, said: tuple[str, str]
) -> None:
    """`x => x * 2` said "invalid syntax"; `tools.search({query: "open"})`, JavaScript's
    object, said "name 'query' is not defined"; `return` in an `except*` block said only
    that it cannot be there."""
    error = failed(code)
    assert (error.name, error.message) == said


_FILES_NOT_A_LIST = (
    "files is not a list of the files: `files.list()` lists them (id, mime, size), and `await "
    "files.text(id)` reads one"
)


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ("return files['a.csv']", ("TypeError", _FILES_NOT_A_LIST)),
        ("for f in files:\n    pass", ("TypeError", _FILES_NOT_A_LIST)),
        ("return len(files)", ("TypeError", _FILES_NOT_A_LIST)),
        ("return 'a.csv' in files", ("TypeError", _FILES_NOT_A_LIST)),
        ("files.cache = {}", ("AttributeError", "files is read-only")),
    ],
)
def test_files_used_as_a_list_says_how_to_list_them(code: str, said: tuple[str, str]) -> None:
    """`files["a.csv"]`, `for f in files`, `len(files)` said "'Files' object is not
    subscriptable" (iterable, has no len()), a class no script sees; a write, that 'Files'
    has no such attribute."""
    error = failed(code)
    assert (error.name, error.message) == said
    assert value("return bool(files)") is True


@pytest.mark.parametrize(
    "code", ["for t in tools:\n    pass", "return len(tools)", "return 'echo' in tools"]
)
def test_tools_used_as_a_list_says_how_to_list_them(code: str) -> None:
    """`for t in tools`, `len(tools)`, `"echo" in tools` said "'Tools' object is not
    iterable" (has no len()), nothing of how a script lists its tools."""
    error = failed(code)
    assert (error.name, error.message) == (
        "TypeError",
        "tools is not a list: dir(tools) names the tools a script may call, and `await "
        'tools.tool_search(query="...")` finds them by what they do',
    )
    assert value("return [bool(tools), 'echo' in dir(tools)]") == [True, True]


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (
            'data = {"user": None}\nreturn data["user"]["name"]',
            "'NoneType' object is not subscriptable; data[\"user\"] is None",
        ),
        (
            "r = await tools.echo(a=1)\nreturn r['x']",
            "'int' object is not subscriptable; r is an int",
        ),
        (
            "r = await tools.get_user(id=1)\nreturn r['name']",
            "string indices must be integers, not 'str'; r is text, not a dict or a list: if "
            "it holds JSON, read it with json.loads(r)",
        ),
    ],
)
def test_a_subscript_of_what_takes_none_names_what_was_subscripted(code: str, said: str) -> None:
    """`data["user"]["name"]` said "'NoneType' object is not subscriptable", not which of the
    line's subscripts met None (CPython's traceback points at it); a tool's JSON text read
    as a dict said "string indices must be integers", nothing of json.loads."""
    echo, user = rec("echo", {"a": 1}, result=1), rec("get_user", {"id": 1}, result='{"a": 1}')
    error = failed(code, [echo if "echo" in code else user])
    assert (error.name, error.message) == ("TypeError", said)


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (
            'd = {}\nreturn d.get("user").get("name")',
            "'NoneType' object has no attribute 'get'; d.get(\"user\") is None",
        ),
        (
            'r = {"a": None}\nreturn r["a"].upper()',
            "'NoneType' object has no attribute 'upper'; r[\"a\"] is None",
        ),
    ],
)
def test_an_attribute_of_none_names_what_was_none(code: str, said: str) -> None:
    """`d.get("user").get("name")` said "'NoneType' object has no attribute 'get'", not which
    of the line's values was None (CPython's traceback points at it)."""
    error = failed(code)
    assert (error.name, error.message) == ("AttributeError", said)


def test_what_compiling_warns_of_is_printed_as_the_run_begins() -> None:
    """`if status is "done":` and `assert (x, "why")` compiled with SyntaxWarnings, which
    CPython prints before a program runs and which went nowhere: the first is a bug a
    model should see (it compares identity, not text)."""
    code = (
        'status = await tools.echo(a=1)\nif status is "failed":\n    print("failed")\n'
        'assert (status, "never fails")\nprint("end")'
    )
    ran = run(code, [rec("echo", {"a": 1}, result="done")])
    assert ran.outcome == "finished", ran.error
    assert ran.printed == (
        'line 2: SyntaxWarning: "is" with a literal. Did you mean "=="?\n'
        "line 4: SyntaxWarning: assertion is always true, perhaps remove parentheses?\n"
        "end\n"
    )


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (
            "import asyncio\nasync def fetch():\n    return 1\nasyncio.create_task(fetch)",
            "asyncio.create_task takes a coroutine or a tool call, as "
            "asyncio.create_task(tools.name(...)), not function: call it, and pass what it "
            "gives (fetch(...))",
        ),
        (
            "import asyncio\nasync def fetch():\n    return 1\nawait asyncio.gather(fetch, fetch)",
            "a script awaits coroutines and tool calls, not function: call it, and pass what "
            "it gives (fetch(...))",
        ),
    ],
)
def test_a_coroutine_function_given_uncalled_says_to_call_it(code: str, said: str) -> None:
    """`asyncio.create_task(fetch)` said only "... not function"."""
    error = failed(code)
    assert (error.name, error.message) == ("TypeError", said)


def test_printed_reprs_write_no_address() -> None:
    """`print(map(f, xs))`, `print(fetch)`: CPython's repr writes the object's address, which
    differs from run to run, so a live run and a replay printed other text. It is left out,
    also when the script asked for the object's id() (see the next test)."""
    code = (
        "def f():\n    pass\n"
        "print(f, object(), map(str, [1]), (x for x in []))\n"
        "n = await tools.echo(a=1)\n"
        "print(id(f), f, [f], f'{f!r}')\n"
        "print('a text of its own, at 0x7f3a12345678>')"
    )
    ran = run(code, [rec("echo", {"a": 1}, result=1)])
    assert ran.outcome == "finished", ran.error
    assert ran.printed == (
        "<function f> <object object> <map object> <generator object <genexpr>>\n"
        "1 <function f> [<function f>] <function f>\n"
        "a text of its own, at 0x7f3a12345678>\n"
    )


@pytest.mark.parametrize("numbered", ["n = id(a)\n", ""])
def test_a_repr_made_before_its_address_was_reused_names_no_other_object(numbered: str) -> None:
    """A text CPython's repr wrote of a function that then died, its address reused by
    another function the script asked the id() of, was written with that other's number:
    `s = str(a)`, `del a`, `b = mk()`, `id(b)` printed s as `<function mk.<locals>.f at
    0x1>`, b's number (or 0x2 beside a's own 0x1), and whether the address is reused
    differs from run to run. No number is written for an address CPython wrote."""
    code = (
        "def mk():\n    def f():\n        pass\n    return f\n"
        f"a = mk()\n{numbered}s = str(a)\ndel a\nb = mk()\nm = id(b)\nprint(s, b)"
    )
    ran = run(code)
    assert ran.outcome == "finished", ran.error
    assert ran.printed == "<function mk.<locals>.f> <function mk.<locals>.f>\n"


# What a script sends, by each way it writes an object's text with CPython's own reprs.
_ADDRESSED = """\
import hashlib, io, json, logging
def fetch():
    pass
m = map(str, [1])
log = io.StringIO()
logger = logging.getLogger("s")
logger.addHandler(logging.StreamHandler(log))
logger.warning("got %s", fetch)
texts = [str(m), repr(fetch), format(object()), f"{fetch!r}", "%s" % (x for x in []),
         "{}".format(lambda: 0), json.dumps({"o": object()}, default=str), log.getvalue(),
         str(hashlib.sha256()), str([fetch, m])]
sent = await tools.echo(texts=texts, keyed={repr(fetch): 1})
return [sent["echo"], str(m), {repr(m): fetch.__name__}]
"""
_UNADDRESSED = {
    "texts": [
        "<map object>",
        "<function fetch>",
        "<object object>",
        "<function fetch>",
        "<generator object <genexpr>>",
        "<function <lambda>>",
        '{"o": "<object object>"}',
        "got <function fetch>\n",
        "<sha256 _hashlib.HASH object>",
        "[<function fetch>, <map object>]",
    ],
    "keyed": {"<function fetch>": 1},
}


def test_a_call_and_the_value_hold_no_address_live_or_replayed() -> None:
    """`tools.echo(text=str(map(f, xs)))`: CPython writes the object's address, which differs
    from run to run, so the replay after a step made another call than the log's and failed
    with a DivergenceError; a returned `str(obj)` differed between a live run and a replay.
    The address is left out of what the script sends (as from what it prints), however the
    text was made, so the run replays its log and live and replayed steps agree."""
    from tests.sandbox.test_live import answer, live_steps, outcome, replay_steps
    from tests.sandbox.test_python import pyscript

    s = pyscript(_ADDRESSED, version=2)
    first = run(_ADDRESSED)  # the step that logs the call
    assert first.outcome == "calls", first.error
    assert [c.arguments for c in first.calls] == [_UNADDRESSED]
    ended = run(_ADDRESSED, [answer("echo", first.calls[0].arguments)])
    assert ended.outcome == "finished", ended.error
    assert ended.value == [_UNADDRESSED, "<map object>", {"<map object>": "fetch"}]
    replayed = replay_steps(s)
    assert [outcome(r) for r in live_steps(s)] == [outcome(r) for r in replayed]
    assert replayed[-1].value == ended.value


def test_an_error_holds_no_address() -> None:
    """`raise ValueError(f"no {fetch}")`, and a task's error nothing retrieved: the address
    differed between a live run and a replay."""
    code = (
        "import asyncio\n"
        "def fetch():\n    pass\n"
        "async def fail():\n    raise KeyError(str(fetch))\n"
        "asyncio.create_task(fail())\n"
        "await asyncio.sleep(0)\n"
        "raise ValueError(f'no {fetch}')"
    )
    ran = run(code)
    assert ran.error is not None
    assert (ran.error.name, ran.error.message) == ("ValueError", "no <function fetch>")
    assert ran.printed.endswith("KeyError: '<function fetch>'\n"), ran.printed


def test_keys_that_differ_only_in_an_address_are_refused() -> None:
    """Keys made of two objects' texts would be one key once their addresses are left out:
    the call is not made, and says why, rather than lose one of them."""
    name, message = caught(
        "ms = [map(str, [1]), map(str, [2])]\n"
        "await tools.echo(keyed={str(m): i for i, m in enumerate(ms)})"
    )
    assert name == "TypeError"
    assert message.startswith("the argument has keys that differ only in an object's address")


def test_an_address_the_run_was_given_is_passed_on_as_it_is() -> None:
    """A tool's result, a file and the script itself may hold text written as an address
    (a log of another program's): it is the same on every run, so it is the script's data,
    sent, printed and returned as it is."""
    from sandbox.protocol import FileInfo

    given = "<Conn object at 0x7f3a12345678>"
    data = b"<Lock object at 0x55d0c0ffee00>"
    code = (
        "crash = await tools.fetch_log(n=1)\n"
        "text = await files.text('log.txt')\n"
        "own = '<Foo at 0x7fabcdef0123>'\n"
        "print(crash, text, own, map(str, [1]))\n"
        "await tools.echo(crash=crash, text=text, own=own, m=str(map(str, [1])))\n"
        "return [crash, text, own]"
    )
    sent = {
        "crash": given,
        "text": data.decode(),
        "own": "<Foo at 0x7fabcdef0123>",
        "m": "<map object>",
    }
    ran = run(
        code,
        [rec("fetch_log", {"n": 1}, result=given), rec("echo", sent, result=1)],
        tools=[*TOOLS, "fetch_log"],
        files=[FileInfo(id="log.txt", mime="text/plain", size=len(data))],
        fetch=lambda _id, offset, length: data[offset : offset + length],
    )
    assert ran.outcome == "finished", ran.error
    assert ran.value == [given, data.decode(), "<Foo at 0x7fabcdef0123>"]
    assert ran.printed == f"{given} {data.decode()} <Foo at 0x7fabcdef0123> <map object>\n"


def test_an_address_in_a_result_or_a_tools_error_is_kept_live_and_replayed() -> None:
    """A result's address and a tool error's, passed on in a call made live (results read
    as they arrive) and by replay (all in the log from the start), alike."""
    from sandbox.protocol import Record
    from tests.sandbox.test_live import answer, live_steps, outcome, replay_steps
    from tests.sandbox.test_python import pyscript

    def tool(name: str, arguments: dict[str, object]) -> Record:
        if name == "fetch_log":
            return Record(name=name, arguments=arguments, result={"log": "<Conn at 0x7f3a1234>"})
        if name == "fail":
            return Record(name=name, arguments=arguments, error="<Pool @ 0x55d0c0ffee00> is full")
        return answer(name, arguments)

    code = (
        "log = (await tools.fetch_log(n=1))['log']\n"
        "try:\n    await tools.fail(n=2)\nexcept ToolError as e:\n    error = str(e)\n"
        "sent = await tools.echo(log=log, error=error, m=str(map(str, [1])))\n"
        "print(sent['echo'])\n"
        "return sent['echo']"
    )
    s = pyscript(code, version=2, tools=[*TOOLS, "fetch_log", "fail"])
    replayed = replay_steps(s, tool)
    assert [outcome(r) for r in live_steps(s, tool)] == [outcome(r) for r in replayed]
    assert replayed[-1].value == {
        "log": "<Conn at 0x7f3a1234>",
        "error": "<Pool @ 0x55d0c0ffee00> is full",
        "m": "<map object>",
    }
