"""The JavaScript prelude (sandbox/prelude.js) against a script that changes the built-ins it
could use, and how it names what it made: its tools, console.table, values of no prototype,
and the text of its functions. Run in this process (see test_runtime.py for the rest)."""

from __future__ import annotations

import pytest

from sandbox import runtime
from tests.sandbox.conftest import TOOLS, rec, run, script, value

NAMES = sorted(TOOLS)

# Setters a script puts where a list's items go, on Array.prototype and Object.prototype.
TRAPPED_INDEXES = """\
for (const proto of [Array.prototype, Object.prototype]) {
  for (const i of [0, 1, 2]) {
    Object.defineProperty(proto, i, { set(v) {}, get() { return "trap"; }, configurable: true });
  }
}
"""


def test_the_tool_names_are_the_records_whatever_setters_the_script_put_on_indexes() -> None:
    """The list of tool names is the prelude's own: a setter a script put on
    Array.prototype[0] took the first name, and Object.keys(tools) failed with "proxy:
    duplicate property"."""
    got = value(
        TRAPPED_INDEXES
        + "return [Object.keys(tools), Reflect.ownKeys(tools), JSON.parse(JSON.stringify(tools)),"
        + " `${tools}`, tools.toJSON().length];"
    )
    assert got == [NAMES, NAMES, NAMES, f"[tools: {', '.join(NAMES)}]", len(NAMES)]


# The data is made before the script replaces anything (the Map constructor iterates with the
# script's iterator), then laid out.
TABLE_DATA = """\
const rows = [{ a: 1, b: "x" }, { a: 22, c: true }, 5], map = new Map([["k", 1]]);
const some = [{ a: 1, b: 2 }, 3], columns = ["a"];
"""
TABLE_CODE = """\
console.table(rows);
console.table(map);
console.table(some, columns);
"""

# What the script replaces that laying out a table could use.
REPLACED_FOR_TABLE = """\
Array.prototype.push = function () { return 0; };
Array.prototype.map = function () { return []; };
Array.prototype.filter = function () { return []; };
Array.prototype.reduce = function () { return 0; };
Array.prototype.join = function () { return "joined"; };
Array.prototype.includes = function () { return false; };
Array.prototype[Symbol.iterator] = function* () {};
String.prototype.repeat = function () { return "repeated"; };
String.prototype[Symbol.iterator] = function* () {};
Set.prototype.has = function () { return true; };
Map.prototype.get = function () { return "got"; };
Map[Symbol.hasInstance] = () => true;
Math.max = () => 0;
Object.prototype.value = "inherited";
Object.prototype.key = "inherited";
"""


def test_console_table_lays_out_the_same_table_whatever_the_script_replaced() -> None:
    """console.table takes no method a script can replace: with the script's push, a script
    that replaced Array.prototype.push printed a table of no rows."""
    plain = run(TABLE_DATA + TABLE_CODE)
    assert plain.outcome == "finished", plain.error
    assert "│ 1       │ 22 │     │ true │        │" in plain.printed
    for hostile in (REPLACED_FOR_TABLE, TRAPPED_INDEXES):
        ran = run(TABLE_DATA + hostile + TABLE_CODE)
        assert ran.outcome == "finished", ran.error
        assert ran.printed == plain.printed


def test_built_ins_of_no_prototype_print_as_node_names_them() -> None:
    """A Map, a Set, a RegExp (its flags too) or a typed array whose prototype the script set
    to null prints as Node.js prints it, with the built-in named: each printed {}."""
    ran = run(
        """
        const bare = (v) => Object.setPrototypeOf(v, null);
        console.log(bare(new Map([["a", 1]])));
        console.log(bare(new Set([1, 2])));
        console.log(bare(/x+/gi));
        console.log(bare(new Uint8Array(2)));
        console.log([bare(new Map())], new Map([[1, 2]]), /y/m);
        console.table(bare(new Map([["k", 1]])));
        """
    )
    assert ran.outcome == "finished", ran.error
    lines = ran.printed.splitlines()
    assert lines[:5] == [
        '[Map(1): null prototype] {"a" => 1}',
        "[Set(2): null prototype] {1, 2}",
        "[RegExp: null prototype] /x+/gi",
        "[Uint8Array(2): null prototype] [0,0]",
        "[[Map(0): null prototype] {}] Map(1) {1 => 2} /y/m",
    ]
    assert '│ 0                 │ "k" │ 1      │' in lines


def test_a_date_of_no_prototype_prints_as_node_names_it() -> None:
    """A Date whose prototype the script set to null prints as Node.js prints it, named: it
    printed its bare ISO string, as if it were text."""
    ran = run(
        """
        const bare = (v) => Object.setPrototypeOf(v, null);
        console.log(bare(new Date(0)));
        console.log({ d: bare(new Date(NaN)) }, new Date(0));
        """
    )
    assert ran.outcome == "finished", ran.error
    assert ran.printed.splitlines() == [
        "[Date: null prototype] 1970-01-01T00:00:00.000Z",
        '{"d":[Date: null prototype] Invalid Date} "1970-01-01T00:00:00.000Z"',
    ]


@pytest.mark.parametrize(
    ("made", "returned", "passed"),
    [
        ('new Map([["a", 1]])', "value.x is a Map, which JSON turns into {}", "is a Map (pass"),
        ("new Set([1])", "value.x is a Set, which JSON turns into {}", "is a Set (pass"),
        ("/x/", "value.x is a RegExp, which JSON turns into {}", "is a RegExp;"),
        ("new Date(0)", "value.x is a Date, which JSON turns into {}", "is a Date (pass"),
        ("new ArrayBuffer(2)", "value.x is binary data", "is an ArrayBuffer;"),
    ],
)
def test_built_ins_of_no_prototype_are_named_when_refused(
    made: str, returned: str, passed: str
) -> None:
    """A built-in of no prototype, returned or passed to a tool, is refused naming what it
    is: it was "an object of no class" returned, "a non-plain object" passed."""
    code = f"const x = Object.setPrototypeOf({made}, null);\n"
    assert value(
        code + "try { await tools.echo({ x }); } catch (e) { return e.message; }"
    ).startswith(f"the argument.x {passed}")
    ran = run(code + "return { x };")
    assert ran.outcome == "failed" and ran.error is not None
    assert ran.error.message.startswith(f"the returned value is not JSON data: {returned}")


@pytest.mark.parametrize(
    ("made", "kind"),
    [("new Number(5)", "Number"), ('new String("ab")', "String"), ("new Boolean(true)", "Boolean")],
)
def test_a_box_of_no_prototype_passed_to_a_tool_is_refused(made: str, kind: str) -> None:
    """A boxed primitive of no prototype passed to a tool is refused naming it, as a box with
    its prototype is: it was sent as its keys alone ({}, or a string's indexes)."""
    code = f"const x = Object.setPrototypeOf({made}, null);\n"
    said = value(code + "try { await tools.echo({ x }); } catch (e) { return e.message; }")
    assert said == f"the argument.x is a {kind} (null prototype); arguments must be plain data"


def test_an_object_of_another_objects_prototype_is_refused_saying_why() -> None:
    """An object whose prototype is another plain object ({ __proto__: x } in a literal,
    Object.create(x)), passed, or returned with no fields of its own or with the prototype
    holding data, is refused saying what made it and how to write a "__proto__" key: it was
    "an Object", which said nothing, and returned with fields, the prototype's were lost."""
    said = value(
        "try { await tools.echo({ q: { __proto__: { a: 1 } } }); } catch (e) { return e.message; }"
    )
    assert said.startswith("the argument.q is an object whose prototype is another object"), said
    assert '{ ["__proto__"]: x } for a key of that name, or pass { ...value })' in said
    ran = run("return { x: Object.create({ a: 1 }) };")
    assert ran.error is not None
    assert ran.error.message.startswith(
        "the returned value is not JSON data: value.x is an object whose prototype is another"
    )
    assert ran.error.message.endswith("for a key of that name), which JSON turns into {}")
    assert value('return { ["__proto__"]: { a: 1 } };') == {"__proto__": {"a": 1}}
    # With fields of its own too, JSON wrote them alone: the prototype's data was lost.
    ran = run("return { x: { __proto__: { unit: 'kg' }, n: 3 } };")
    assert ran.error is not None and ran.error.message.startswith(
        "the returned value is not JSON data: value.x is an object whose prototype is another"
    )
    assert ran.error.message.endswith(
        "JSON writes its own fields alone, leaving its prototype's out; return "
        "{ ...Object.getPrototypeOf(value), ...value }"
    )
    # A prototype of methods alone (one written as an object, not a class) loses no data.
    code = "const o = Object.create({ greet() { return 1; } });\no.name = 'x';\nreturn o;"
    assert value(code) == {"name": "x"}


def test_a_box_of_no_prototype_returned_gives_the_value_it_boxes() -> None:
    """Returned, a box of no prototype is the value it boxes, as a box with its prototype is
    (JSON's way): JSON.stringify failed converting a Number's or a String's ("cannot convert
    object to primitive value", naming nothing)."""
    got = value(
        "const box = (made) => Object.setPrototypeOf(made, null);\n"
        'return [box(new Number(5)), { s: box(new String("ab")) }, box(new Boolean(false)), '
        "new Number(6)];"
    )
    assert got == [5, {"s": "ab"}, False, 6]
    assert value('return Object.setPrototypeOf(new String("x"), null);') == "x"


NATIVE = "() {\n    [native code]\n}"


def test_the_engines_functions_read_as_native_and_the_scripts_as_written() -> None:
    """What the engine made (console, tools, files, the fixed Date and Math.random, JSON.parse,
    structuredClone, URL, Intl, a getter of Error.prototype's) reads as QuickJS writes its
    own built-ins, named as Node.js names them: `String(console.log)` gave the prelude's
    source. The script's own functions read as it wrote them, and Function.prototype.toString
    itself reads as native."""
    got = value(
        """
        function mine(a) { return a; }
        const text = Function.prototype.toString;
        const stack = Object.getOwnPropertyDescriptor(Error.prototype, "stack").get;
        return [
          String(console.log), console.error.toString(), String(console.table), String(tools.echo),
          text.call(tools.no_such_tool), String(files.list), String(files.csv),
          String(files.csv("x.csv").next), String(Date), String(Date.now), String(Math.random),
          String(performance.now), String(JSON.parse), String(structuredClone), String(URL),
          String(Intl.NumberFormat), String(Intl.Segmenter), String(stack), String(text),
          String(Math.max), String(tools.toString), String(tools.toJSON),
          String(tools[Symbol.toPrimitive]), String(mine), String((x) => x * 2),
          String(class A { m() {} }),
          text.name, text.length,
        ];
        """
    )
    names = [
        "log",
        "error",
        "table",
        "echo",
        "no_such_tool",
        "list",
        "csv",
        "next",
        "Date",
        "now",
        "random",
        "now",
        "parse",
        "structuredClone",
        "URL",
        "NumberFormat",
        "Segmenter",
        "get",
        "toString",
        "max",
        "toString",
        "toJSON",
        "toString",
    ]
    assert got[: len(names)] == [f"function {name}{NATIVE}" for name in names]
    assert got[len(names) :] == [
        "function mine(a) { return a; }",
        "(x) => x * 2",
        "class A { m() {} }",
        "toString",
        0,
    ]


def test_every_function_the_boot_made_reads_as_native() -> None:
    """Every function reachable from the global object, from what tools shows as and from a
    call's promise before the script made any (through values, getters, setters and
    prototypes; the prelude's, web.js's, lazy.js's and QuickJS's) reads as native: the boot's
    walk of them is one pass over the three, and it marks them all."""
    got = value(
        """
        const p = tools.echo({});
        const roots = [globalThis, Object.getPrototypeOf(p), tools.toString, tools.toJSON,
          tools[Symbol.toPrimitive], URL, Intl, structuredClone, TextEncoder, crypto];
        const seen = new Set(), todo = [...roots], written = [];
        let functions = 0;
        while (todo.length) {
          const v = todo.pop();
          if (v === null || (typeof v !== "object" && typeof v !== "function") || seen.has(v)) continue;
          seen.add(v);
          if (typeof v === "function") {
            functions++;
            if (!String(v).endsWith("[native code]\\n}")) written.push(String(v).slice(0, 40));
          }
          todo.push(Object.getPrototypeOf(v));
          for (const d of Object.values(Object.getOwnPropertyDescriptors(v))) todo.push(d.value, d.get, d.set);
        }
        return [functions > 500, written];
        """,
        [rec("echo", {}, result=1)],
    )
    assert got == [True, []]


def test_the_text_of_a_call_promises_members_is_native_too() -> None:
    """A call's promise has members of the engine's (the getter that marks it awaited, the
    one that says the await is missing): they read as native, not as the prelude's source."""
    got = value(
        """
        const p = tools.echo({});
        const proto = Object.getPrototypeOf(p);
        const spread = Object.getOwnPropertySymbols(p).map((k) => Object.getOwnPropertyDescriptor(p, k).get);
        return [Object.getOwnPropertyDescriptor(proto, "constructor").get, ...spread]
          .map((f) => String(f).endsWith("[native code]\\n}"));
        """,
        [rec("echo", {}, result=1)],
    )
    assert got == [True, True]


def test_a_function_toString_that_is_not_given_a_function_throws_as_the_native() -> None:
    """Function.prototype.toString of what is no function throws a TypeError, as before."""
    got = value(
        "try { Function.prototype.toString.call({}); } catch (e) { return [e.name, e.message]; }"
    )
    assert got == ["TypeError", "not a function"]


HAS_NO_INSTANCES = """\
for (const Kind of [Map, Set, Error, TypeError, Promise, WeakMap, Number]) {
  Object.defineProperty(Kind, Symbol.hasInstance, { value: () => false });
}
"""


def test_a_built_ins_own_has_instance_does_not_change_what_the_engine_sees() -> None:
    """The prelude tells a Map, an Error or a promise by its prototype, not by `instanceof`,
    which asks the constructor's Symbol.hasInstance, the script's to define (the prelude's
    Map is the script's): a Map and an Error printed {}. The script's own `instanceof` reads
    what it defined."""
    code = """\
console.log(new Map([[1, 2]]), new Set([3]), new Error("boom"), new WeakMap(), Promise.resolve(1));
let refused;
try { await tools.echo({ m: new Map() }); } catch (e) { refused = e.message; }
console.log(refused, new Map() instanceof Map);
throw new TypeError("bad");
"""
    plain = run("\n" * HAS_NO_INSTANCES.count("\n") + code)  # on the same lines
    assert plain.printed.startswith("Map(1) {1 => 2} Set(1) {3} Error: boom\n    at line 4 WeakMap")
    ran = run(HAS_NO_INSTANCES + code)
    assert ran.outcome == "failed" and ran.error is not None
    assert (ran.error.name, ran.error.message) == ("TypeError", "bad")
    assert ran.printed == plain.printed.replace(" true\n", " false\n")
    assert "the argument.m is a Map (pass Object.fromEntries(map))" in ran.printed


TOOL_SETTER = """\
Object.defineProperty(Object.prototype, "tool", {
  set(v) { throw new Error("the script's setter"); }, get() { return "the script's"; },
});
let said;
try { await tools.echo({}); } catch (e) { said = [e.message, e.tool, Object.keys(e)]; }
return said;
"""


def test_a_failed_calls_tool_is_its_errors_own_whatever_setter_the_script_put() -> None:
    """A failed call's error names its tool as its own property, in a replay and in a live
    run: assigned, it went through the setter a script put on Object.prototype, which threw
    there (the run failed with the setter's error, at no line of the call's)."""
    expected = ["it broke", "echo", ["tool"]]
    assert value(TOOL_SETTER, [rec("echo", {}, error="it broke")]) == expected
    live = runtime.LiveInProcess(script(TOOL_SETTER))
    try:
        assert live.start().outcome == "calls"
        ran = live.resume([rec("echo", {}, error="it broke")])
    finally:
        live.close()
    assert ran.outcome == "finished", ran.error
    assert ran.value == expected


def test_intls_bound_functions_read_as_native() -> None:
    """Intl's format and compare, made for each object, are bound functions of no name, as
    a built-in's are: `String(new Intl.NumberFormat().format)` gave intl.js's source."""
    got = value(
        """
        const nf = new Intl.NumberFormat(), compare = new Intl.Collator().compare;
        const format = new Intl.DateTimeFormat().format;
        return [String(nf.format), String(compare), String(format), nf.format.name,
          nf.format.length, compare.length, [1234, 5].map(nf.format), ["b", "a"].sort(compare),
          nf.format === nf.format];
        """
    )
    assert got == [f"function {NATIVE}"] * 3 + ["", 1, 2, ["1,234", "5"], ["a", "b"], True]


CONSOLE_CODE = """\
console.group("G", 1);
console.log("in");
console.groupCollapsed();
console.log("deeper");
console.groupEnd();
console.groupEnd();
console.assert(false, "nope", 3);
console.assert(false, { a: 1 }, 2);
console.assert(false);
console.assert(false, "%s!", "x");
console.timeLog("t", "x");
"""


def test_console_prints_its_arguments_whatever_iterator_the_script_put_on_arrays() -> None:
    """console.group, assert and timeLog print their arguments from a list of the prelude's
    own: they spread them, with the script's Array.prototype[Symbol.iterator], and printed
    what that gave."""
    plain = run(CONSOLE_CODE)
    assert plain.outcome == "finished", plain.error
    assert plain.printed == (
        'G 1\n  in\n    deeper\nAssertion failed: nope 3\nAssertion failed: {"a":1} 2\n'
        "Assertion failed\nAssertion failed: x!\nt: 0ms x\n"
    )
    hostile = 'Array.prototype[Symbol.iterator] = function* () { yield "the script\'s"; };\n'
    ran = run(hostile + CONSOLE_CODE)
    assert ran.outcome == "finished", ran.error
    assert ran.printed == plain.printed


def test_what_reads_a_list_by_index_takes_no_iterator_of_the_scripts() -> None:
    """A value converted for the fixed Date, and the returned value's refusal, read the
    prelude's lists by index: a for...of and a destructuring took the script's
    Array.prototype[Symbol.iterator] (new Date(value) said "cannot convert object to
    primitive value" of a value with a valueOf)."""
    hijack = 'Array.prototype[Symbol.iterator] = function* () { yield "the script\'s"; };\n'
    when = "const when = { valueOf() { return 86400000; }, toString() { return 'x'; } };\n"
    assert value(when + hijack + "return new Date(when).toISOString();") == (
        "1970-01-02T00:00:00.000Z"
    )
    ran = run("const m = new Map();\n" + hijack + "return { m };")
    assert ran.outcome == "failed" and ran.error is not None
    assert ran.error.message.startswith(
        "the returned value is not JSON data: value.m is a Map, which JSON turns into {}"
    )
