"""A prepared context (the prelude compiled before the script exists, as the fork server
does) runs every script exactly as a fresh one does."""

from __future__ import annotations

import pytest

from sandbox import __main__ as sandbox_main
from sandbox.protocol import Clock, FileInfo, Record, Script
from sandbox.runtime import Prepared, run_in_process, warming_up

CASES = {
    "value": ("return { a: [1, 'x'], d: new Date().toISOString(), r: Math.random() }", []),
    "calls": (
        "const r = await tools.a({ x: 1 }); await Promise.all([tools.a({ x: r }), tools.b()])",
        [("a", {"x": 1}, 5)],
    ),
    "error lines": ("console.log('before');\nfunction f() {\n  null.y;\n}\nf();", []),
    "call-site TypeError": ("\n\nawait tools.a([1])", []),
    "syntax error": ("let x = ;\nreturn 1", []),
    "typed": ("const a: number[] = [1, 2];\nreturn a.map((x: number): string => `${x}`)", []),
    "typed syntax error": ("const a: number = ;\nreturn a", []),
    "closes its function": ("return 1;\n}\nfunction JSON() {}\nfunction y() {", []),
    "divergence": ("await tools.b({ z: 2 })", [("a", {"x": 1}, 5)]),
    "unknown tool": ("await tools.nope()", []),
    "files": ("return [files.list().length, await files.text('f.txt')]", []),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_prepared_matches_fresh(name: str) -> None:
    """The same script gives the same ran, fresh or on a prepared context."""
    code, records = CASES[name]

    def script() -> Script:
        return Script(
            id="p",
            code=code,
            tools=["a", "b"],
            records=[Record(name=n, arguments=a, result=r) for n, a, r in records],
            files=[FileInfo(id="f.txt", mime="text/plain", size=2)],
            clock=Clock(now_ms=1767225600000, seed=9),
        )

    def fetch(_id: str, offset: int, length: int) -> bytes:
        return b"hi"[offset : offset + length]

    fresh = run_in_process(script(), fetch)
    prepared = run_in_process(script(), fetch, Prepared())
    assert prepared.model_dump(exclude={"stats"}) == fresh.model_dump(exclude={"stats"})


def test_a_prepared_context_serves_one_run() -> None:
    """A second run given the same prepared context compiles its own, and still works."""
    prepared = Prepared()
    script = Script(id="p", code="return 2", clock=Clock(now_ms=0, seed=0))
    assert run_in_process(script, prepared=prepared).value == 2
    assert run_in_process(script, prepared=prepared).value == 2


def test_the_script_cannot_reach_the_prelude_or_host_functions() -> None:
    """The prepared prelude and the host functions are gone from the script's globals."""
    code = "return [typeof __cm_prelude, typeof __cm_call, typeof __cm_print]"
    ran = run_in_process(
        Script(id="p", code=code, clock=Clock(now_ms=0, seed=0)), prepared=Prepared()
    )
    assert ran.value == ["undefined", "undefined", "undefined"]


def test_a_prepared_context_has_the_world_made_before_any_script() -> None:
    """The prelude's world (the fixed clock, the seeded Math.random) is made when the
    context is prepared, before any script exists: a fork server's children do not make it
    again. What the script's record sets (its clock, seed, tools) comes with the script."""
    prepared = Prepared()
    # The engine's Date is replaced already: its `now` is the prelude's, not the machine's
    # (the record's clock, 0 before any record: its text reads as a built-in's).
    assert prepared.ctx.eval("Date.now()") == 0
    script = Script(
        id="p",
        code="return [Date.now(), performance.timeOrigin, Math.random(), Object.keys(tools)]",
        tools=["a"],
        clock=Clock(now_ms=1767225600000, seed=9),
    )
    on_prepared = run_in_process(script, prepared=prepared)
    fresh = run_in_process(script)
    assert on_prepared.value == fresh.value
    assert on_prepared.value[:2] == [1767225600000, 1767225600000]
    assert on_prepared.value[3] == ["a"]


def test_a_prepared_context_begins_one_script_only() -> None:
    """The prelude's ``begin`` runs once per context: a second start on the same context
    (which Prepared.take never gives out) is refused, not a second script in one world."""
    prepared = Prepared()
    config = (
        '{"tools": [], "now_ms": 0, "seed_lo": 0, "seed_hi": 0, "value_bound": 1000,'
        ' "max_depth": 10, "printed_bound": 1000}'
    )
    prepared.start(config, "return 1")
    with pytest.raises(Exception, match="a context runs one script"):
        prepared.start(config, "return 2")


def test_a_body_that_does_not_parse_begins_nothing() -> None:
    """With ``mayStrip``, a body that does not parse gives "unparsed" and begins nothing, so
    the host can begin again with its types removed; once a script has begun (or failed to
    compile without ``mayStrip``), the context is spent."""
    prepared = Prepared()
    config = (
        '{"tools": [], "now_ms": 0, "seed_lo": 0, "seed_hi": 0, "value_bound": 1000,'
        ' "max_depth": 10, "printed_bound": 1000}'
    )
    assert prepared.start(config, "const a: number = 1;\nreturn a", True) == "unparsed"
    assert prepared.start(config, "return (", True) == "unparsed"
    prepared.start(config, "const a = 1;\nreturn a", True)
    with pytest.raises(Exception, match="a context runs one script"):
        prepared.start(config, "return 2", True)
    spent = Prepared()
    spent.start(config, "return (", False)  # fails as the script's SyntaxError
    with pytest.raises(Exception, match="a context runs one script"):
        spent.start(config, "return 1", True)


# Built-ins a script replaces before its first Intl or URL (each line runs first, on its own).
REPLACED = {
    "Object.keys": "Object.keys = () => [];",
    "Object.defineProperty": "Object.defineProperty = (o) => o;",
    "Reflect.apply": "Reflect.apply = () => 'replaced';",
    "String.prototype.normalize": "String.prototype.normalize = function () { return 'x'; };",
    "String.prototype.toLowerCase": "String.prototype.toLowerCase = () => 'x';",
    "String.prototype.split": "String.prototype.split = () => [];",
    "String.prototype.repeat": "String.prototype.repeat = () => 'x';",
    "WeakMap": "globalThis.WeakMap = class { get() { return 1; } set() { return this; } };",
    "Set.prototype.add": "Set.prototype.add = function () { return this; };",
    "Map.prototype.set": "Map.prototype.set = function () { return this; };",
    "array iterator": "Array.prototype[Symbol.iterator] = function* () {};",
    "TextEncoder": "globalThis.TextEncoder = class { encode() { return new Uint8Array(0); } };",
    "Symbol": "globalThis.Symbol = {};",
    "Number": "globalThis.Number = () => 7;",
    "String": "globalThis.String = () => 'x';",
}
# What the script then asks of Intl and URL, each answer or what it threw.
USES = """
const answers = [];
for (const use of [
  () => new Intl.NumberFormat("en-US", { style: "currency", currency: "EUR" }).format(1234.5),
  () => (1234.5).toLocaleString(),
  () => new Date(0).toLocaleDateString("en-US", { weekday: "long", month: "long" }),
  () => ["b", "a", "B"].sort(new Intl.Collator().compare).join(),
  () => "a".localeCompare("b"),
  () => Object.prototype.toString.call(Intl),
  () => new Intl.PluralRules().select(1),
  () => new Intl.ListFormat().format(["a", "b", "c"]),
  () => new Intl.RelativeTimeFormat().format(-1, "day"),
  () => new URL("HTTP://Ex.com/a b/../c?q=1 2#f").href,
  () => new URL("http://a/b?x=1").searchParams.get("x"),
  () => URL.canParse("nope"),
]) {
  try { answers.push(use()); } catch (e) { answers.push("threw " + e.name + ": " + e.message); }
}
return answers;
"""


@pytest.mark.parametrize("name", sorted(REPLACED))
def test_a_replaced_builtin_is_not_taken_by_intl_or_url(name: str) -> None:
    """A script that replaces a built-in before its first Intl or URL gets the same answers in
    a context of its own (an exec'd process's) as on a prepared one (a pool's child's): the
    two compile intl.js and url.js before the script, with the engine's own built-ins.
    Compiled at first use, the context of its own had them take the script's (Object.keys
    replaced: `new Intl.NumberFormat()` threw 'not a function'; Set.prototype.add replaced:
    a URL's query kept its space)."""
    script = Script(id="p", code=REPLACED[name] + USES, clock=Clock(now_ms=0, seed=9))
    fresh = run_in_process(script)
    prepared = run_in_process(script, prepared=Prepared())
    assert prepared.model_dump(exclude={"stats"}) == fresh.model_dump(exclude={"stats"})


def test_a_warm_up_run_is_booted_without_intl_and_url_and_no_run_after_it() -> None:
    """A sandbox process's warm-up runs (scripts of ours, which use neither) boot without
    Intl and URL, so an exec'd process compiles them once, for its script's run; every run
    after the warm-up, or after one that failed, has them."""
    script = Script(id="w", code="return [typeof Intl, typeof URL]", clock=Clock(now_ms=0, seed=1))
    with warming_up():
        assert run_in_process(script).value == ["undefined", "undefined"]
    assert run_in_process(script).value == ["object", "function"]
    with pytest.raises(RuntimeError), warming_up():
        raise RuntimeError
    assert run_in_process(script).value == ["object", "function"]
    sandbox_main._warm_up()
    assert run_in_process(script).value == ["object", "function"]
