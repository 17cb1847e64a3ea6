"""Hostile scripts: a model's script that tries to get out of its function or at the machine's
clock, run the three ways of the ``run`` fixture (in this process, fresh and on a prepared
context, and through a real confined process).

Each attack, had it worked, would print ``escaped`` through the raw host functions or return
a time that is not the script's fixed clock; each test asserts it did not.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.hostile.conftest import NOW_MS

# ---- 1. No text of a script is parsed outside its own function ----

# Each would run its middle line at the top level of the old wrapper's source
# ("const __cm_main = async function () {\n" + body + "\n};\n" + the prelude's call).
ESCAPES = {
    "close and reopen": (
        "return 1; };\n__cm_print('escaped ' + Date.now()); globalThis.x = [Date.now(), "
        "typeof __cm_call];\nasync function f() {"
    ),
    "an expression statement": "return 1 };\n(__cm_print('escaped'));\nvoid async function () {",
    "a comma expression": "return 1 }; __cm_print('escaped'), async function () {",
    "a declaration hoisted": (
        "};\nfunction Date() { __cm_print('escaped') }\n__cm_print('escaped');\nasync function f() {"
    ),
    "poison a built-in": (
        "};\nObject.defineProperty = function () { __cm_print('escaped') };\n"
        "Reflect.construct = Object.defineProperty;\nasync function f() {"
    ),
    "unbalanced backtick": "return `${__cm_print('escaped')}",
    "open comment": "return 1 };\n__cm_print('escaped'); /*",
    "line comment at the end": "};\n__cm_print('escaped');\nasync function f() { //",
    "html close comment": "return 1 }\n--> x\n__cm_print('escaped'); async function f() {",
    "html open comment": "return 1 } <!-- x\n__cm_print('escaped'); async function f() {",
    "a comment closed": "/* */ };\n__cm_print('escaped');\nasync function f() {",
    "string continuation": "return '\\\n}'; };\n__cm_print('escaped');\nasync function f() {",
    "redeclare main": (
        "};\n__cm_print('escaped');\nasync function __cm_main() { }\nasync function f() {"
    ),
    "a lexical binding": "};\nlet tools = 1; __cm_print('escaped');\nasync function f() {",
}


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_script_cannot_run_code_outside_its_function(run: Any, name: str) -> None:
    """A body that closes its function is a SyntaxError, and none of its text ran."""
    ran = run(ESCAPES[name])
    assert ran.outcome == "failed", (ran.value, ran.printed)
    assert ran.error.name == "SyntaxError", ran.error
    assert "escaped" not in ran.printed
    assert ran.printed == ""
    assert ran.calls == []


def test_braces_in_strings_comments_and_templates_are_the_scripts_own(run: Any) -> None:
    """Braces, comment marks and backticks inside the body's own tokens are fine."""
    code = (
        "const s = '}'; // } ) */\n"
        "/* } */ const t = `}${'}'}` + \"})\";\n"
        "<!-- an html comment, as in any script\n"
        "const r = /}/.source;\n"
        "return s + t + r + typeof __cm_main + typeof __cm_call; // no newline at the end"
    )
    ran = run(code)
    assert ran.outcome == "finished", ran.error
    assert ran.value == "}}}})}undefinedundefined"


def test_error_lines_stay_the_models_lines(run: Any) -> None:
    """A runtime error and a syntax error name the script's own line numbers."""
    ran = run("const a = 1;\n\nnull.x;")
    assert [(x.line, x.text) for x in ran.error.lines] == [(3, "null.x;")]
    ran = run("const a = 1;\nconst b = ;")
    assert ran.error.name == "SyntaxError"
    assert [x.line for x in ran.error.lines] == [2]


def test_nul_and_lone_surrogates_in_the_source(run: Any) -> None:
    """A NUL in the source is data or a SyntaxError, a lone surrogate is replaced: no crash."""
    ran = run("return 'a\x00b'")
    assert ran.outcome == "finished", ran.error
    assert ran.value == "a\x00b"
    ran = run("return 1 +\x00 2")
    assert ran.outcome == "failed" and ran.error.name == "SyntaxError"
    ran = run("console.log('x\x00y'); return '\ud800' // \udfff")
    assert ran.outcome == "finished", ran.error
    assert ran.value == "?"  # as the source's other lone surrogates: replaced before it runs
    assert ran.printed == "x\ufffdy\n"  # the host cannot take a NUL: printed as U+FFFD


# ---- 2. The real clock does not leak through stack introspection ----

FRAMES = """
const found = [];
try { Error.prepareStackTrace = (e, cs) => cs.map((c) => c.getFunction && c.getFunction()); } catch (e) {}
try { Object.defineProperty(Error, "prepareStackTrace", { get() { return (e, cs) => cs; } }); } catch (e) {}
const grab = () => {
  const stack = new Error().stack;
  if (Array.isArray(stack)) for (const f of stack) if (typeof f === "function") found.push(f);
  let caller = null;
  try { caller = grab.caller; } catch (e) {}
  if (typeof caller === "function") found.push(caller);
};
const probe = { valueOf() { grab(); return 0; }, toString() { grab(); return "2020-01-01"; } };
const dates = [new Date(probe), new Date(probe, probe), new Date({ [Symbol.toPrimitive]() { grab(); return 5; } })];
Date.UTC(probe, probe); Date.parse(probe);
class Sub extends Date {}
new Sub(probe);
Reflect.construct(Date, [probe], new Proxy(Sub, { get(t, k) { grab(); return t[k]; } }));
try { Error.captureStackTrace({}); found.push("captureStackTrace"); } catch (e) {}
const times = found.filter((f) => typeof f === "function").map((f) => {
  try { return new f().getTime(); } catch (e) { return null; }
}).filter((t) => typeof t === "number" && t !== Date.now());
return {
  found: found.length,
  times,
  hook: typeof Error.prepareStackTrace,
  capture: typeof Error.captureStackTrace,
  dates: dates.map((d) => d.getTime()),
  now: Date.now(),
  stack: typeof new Error().stack,
};
"""


def test_stack_introspection_is_closed(run: Any) -> None:
    """No call site API: a script cannot reach the real Date (or anything) through frames."""
    ran = run(FRAMES)
    assert ran.outcome == "finished", ran.error
    assert ran.value["found"] == 0
    assert ran.value["times"] == []
    assert ran.value["hook"] == "undefined"
    assert ran.value["capture"] == "undefined"
    assert ran.value["stack"] == "string"
    assert ran.value["now"] == NOW_MS
    assert ran.value["dates"][0] == 0
    assert ran.value["dates"][2] == 5


def test_date_coerces_like_the_real_one(run: Any) -> None:
    """The replacement converts its arguments itself, with the real Date's results."""
    code = """
const d = new Date(Date.UTC(2020, 1, 3));
return [
  new Date({ valueOf: () => 86400000 }).getTime(),
  new Date({ toString: () => "2020-01-01T00:00:00Z", valueOf: () => ({}) }).getTime(),
  new Date(d).getTime() === d.getTime(),
  new Date("2020-01-01T00:00:00Z").getTime(),
  new Date(2020, 0).getFullYear(),
  Date.UTC(2020), Date.UTC(2020, 0, 1, 0, 0, 0, 5),
  Date.parse({ toString: () => "2020-01-01T00:00:00Z" }),
  isNaN(new Date(NaN)), new Date() instanceof Date, typeof Date(),
  (() => { try { new Date(Symbol()); return "no"; } catch (e) { return e.name; } })(),
  (() => { try { new Date({ valueOf: () => ({}), toString: () => ({}) }); return "no"; } catch (e) { return e.name; } })(),
];
"""
    ran = run(code)
    assert ran.outcome == "finished", ran.error
    assert ran.value == [
        86400000,
        1577836800000,
        True,
        1577836800000,
        2020,
        1577836800000,
        1577836800005,
        1577836800000,
        True,
        True,
        "string",
        "TypeError",
        "TypeError",
    ]


def test_no_error_constructor_takes_a_stack_hook(run: Any) -> None:
    """Hooks put on a subclass, on TypeError or on Error's prototype chain are never called."""
    code = """
const hook = (e, cs) => cs.map((c) => c.getFunction());
try { Object.defineProperty(TypeError, "prepareStackTrace", { value: hook }); } catch (e) {}
class E extends Error {}
try { Object.defineProperty(E, "prepareStackTrace", { value: hook }); } catch (e) {}
try { Object.setPrototypeOf(Error, { get prepareStackTrace() { return hook; } }); } catch (e) {}
const kinds = [typeof new TypeError().stack, typeof new E().stack, typeof new Error().stack];
try { null.x; } catch (e) { kinds.push(typeof e.stack); }
return kinds;
"""
    ran = run(code)
    assert ran.outcome == "finished", ran.error
    assert ran.value == ["string"] * 4


def test_built_ins_replaced_before_first_intl_or_url_do_not_reach_their_compile(run: Any) -> None:
    """What compiles Intl and URL on first use (a run on a context no fork server prepared)
    takes String.prototype.repeat and split as they were before the script: a script that
    replaced them gets no text of its own compiled with the files, and nothing they are
    given."""
    code = """
// Text of its own in front of each file's, where the files' lines are pushed down past it.
const repeat = String.prototype.repeat;
String.prototype.repeat = function (...args) {
  return this == "\\n" && args[0] > 10
    ? "(function (f) { return function (w) { globalThis.got ??= w; return f(w); }; })\\n"
    : repeat.apply(this, args);
};
// The script's own text, split to count its lines, would be a billion lines long.
const split = String.prototype.split;
String.prototype.split = function (...args) {
  return this.includes("a billion lines") ? { length: 2 ** 30 } : split.apply(this, args);
};
const href = new URL("https://a.example/x?q=1").href;
const n = (1234.5).toLocaleString();
return [typeof globalThis.got, href, n];
"""
    ran = run(code)
    assert ran.outcome == "finished", ran.error
    assert ran.value == ["undefined", "https://a.example/x?q=1", "1,234.5"]


@pytest.mark.parametrize(
    "change",
    [
        "String.prototype.slice = function () { return 7; };",
        "Array.prototype.toJSON = function () { return 5; };",
        'Object.prototype.toJSON = function () { return "s"; };',
    ],
)
def test_a_huge_string_returned_is_cut_by_the_sandboxs_own_slice(run: Any, change: str) -> None:
    """A string past the value's bound is cut by the prelude's own String.prototype.slice,
    its parts in an array of no prototype: a slice the script replaced, or a toJSON it put on
    Array.prototype or Object.prototype, gave the host what was no [head, tail, length] (the
    sandbox process failed reading it, a SandboxCrash)."""
    ran = run(change + '\nreturn "x".repeat(1 << 20);')
    assert ran.outcome == "finished", ran.error
    assert ran.value_text.startswith("xxx")


def test_the_tools_names_are_out_of_the_scripts_reach(run: Any) -> None:
    """The set of the script's tools is read through methods of its own: a script that
    replaces Set.prototype.has, or the set iterator that would hand it the set (to add a name
    of its own), calls no tool the host did not give it."""
    code = """
let held = "nothing";
const iterate = Set.prototype[Symbol.iterator];
Set.prototype[Symbol.iterator] = function () { held = this; return iterate.call(this); };
Set.prototype.has = function () { return true; };
const shown = [String(tools), JSON.stringify(tools), Object.keys(tools)];
let error;
try { await tools.nosuch({}); } catch (e) { error = e.message; }
return [held, shown, error];
"""
    ran = run(code)
    assert ran.outcome == "finished", ran.error
    assert ran.value[0] == "nothing"
    assert ran.value[2].startswith("tools.nosuch does not exist")
    assert ran.calls == []


def test_a_symbol_shows_as_itself_whatever_its_prototype_says(run: Any) -> None:
    """A symbol is shown by the engine's own Symbol.prototype.toString: one the script
    replaced, giving what is no text, left a thrown symbol with no error the host could read
    (the script failed as stuck, waiting on nothing), and console.log of one threw."""
    code = """
Symbol.prototype.toString = function () { return { toString() { throw 1; } }; };
try { console.log(Symbol("shown")); } catch (_) {}
throw Symbol("thrown");
"""
    ran = run(code)
    assert ran.outcome == "failed"
    assert (ran.error.name, ran.error.message) == ("Uncaught", "Symbol(thrown)")
    assert ran.printed == "Symbol(shown)\n"


def test_tools_cannot_be_frozen_or_given_a_prototype(run: Any) -> None:
    """Object.freeze, seal, preventExtensions and setPrototypeOf of tools say it is
    read-only, as assigning to it does, and it stays as it was: each went through to the
    object behind it, and every Object.keys(tools) after one failed with the engine's
    "proxy: property not present in target were returned by non extensible proxy"."""
    code = """
const said = [];
for (const change of [Object.freeze, Object.seal, Object.preventExtensions,
  (o) => Object.setPrototypeOf(o, { x: 1 })]) {
  try { change(tools); } catch (e) { said.push(e.message); }
}
return [said, Object.keys(tools), Object.isExtensible(tools), Object.getPrototypeOf(tools)];
"""
    ran = run(code)
    assert ran.outcome == "finished", ran.error
    assert ran.value == [["tools is read-only"] * 4, ["echo"], True, None]


def test_a_map_or_set_prints_as_it_holds_whatever_its_iterator_says(run: Any) -> None:
    """console.log and console.table show a Map's entries and a Set's items as they are held,
    as Node.js does, not what a script's iterator or size getter gives: an iterator that
    never ended filled the heap, and the line printed "[unprintable: Error]"."""
    code = """
const m = new Map([["a", 1]]), s = new Set([2]);
Map.prototype[Symbol.iterator] = function* () { for (;;) yield ["b", 2]; };
Set.prototype[Symbol.iterator] = function* () { yield "lie"; };
Object.defineProperty(Map.prototype, "size", { get() { return 99; } });
console.log(m, s);
console.table(s);
"""
    ran = run(code)
    assert ran.outcome == "finished", ran.error
    assert ran.printed.splitlines()[0] == 'Map(1) {"a" => 1} Set(1) {2}'
    assert "│ 0                 │ 2      │" in ran.printed
