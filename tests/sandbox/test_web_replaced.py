"""The web built-ins of sandbox/web.js (structuredClone, TextEncoder, TextDecoder,
URLSearchParams, crypto) and URL (sandbox/url.js) give a script the same answer whatever it
replaced on the built-in prototypes, as a native built-in does, in a context of its own (an
exec'd process's) and on a prepared one (a pool's child's)."""

from __future__ import annotations

import pytest

from sandbox.protocol import Clock, Script
from sandbox.runtime import Prepared, run_in_process

# Each use's inputs are made before the script replaces anything (new Map([...]) itself
# iterates its argument with the script's iterator); the loop that prints them reads by index.
USES = r"""
const value = { a: [1, { b: 2 }, , 4], m: new Map([[1, [2]]]), s: new Set(["x"]), d: new Date(0),
  r: /x/g, e: new TypeError("t"), u: new Uint8Array([1, 2]) };
const bytes = new Uint8Array([104, 195, 169, 0xff, 226, 130, 172]);
const target = new Uint8Array(4);
const proto = JSON.parse('{"__proto__": {"x": 1}, "a": 1}');
const uses = [
  () => structuredClone(value),
  () => Object.getPrototypeOf(structuredClone(proto)) === Object.prototype,
  () => new TextEncoder().encode("hé€😀"),
  () => new TextEncoder().encodeInto("hé€", target),
  () => new TextDecoder().decode(bytes),
  () => new TextDecoder(" UTF-8 ").encoding,
  () => new URLSearchParams("a=1&b=2+3&c=%41%zz&d=é").toString(),
  () => new URLSearchParams({ x: 1, y: "a b" }).toString(),
  () => { const p = new URLSearchParams("b=2&a=1&b=3"); p.sort(); p.delete("a"); p.set("b", "9");
    p.append("c", "&"); return [p.toString(), p.getAll("b"), p.has("c"), p.size, p.get("c")]; },
  () => crypto.randomUUID(),
  () => new URL("http://a/é?q=é#é").href,
  () => [new URL("http://%41b.com/").host, new URL("HTTP://A.com/x/../y/./z").href],
  () => [new URL("http://0x7f.1/").host, new URL("http://[::1:0:0:2]:8080/").host,
    new URL("https://bücher.example/").hostname, new URL("http://u:p@a.com/").origin, new URL("http://a:81/").port],
  () => { const u = new URL("file:///C:/a/b"); u.pathname = "/x y"; u.search = "?q=1"; u.hash = "h";
    return [u.href, new URL("../c", "http://a/b/d").href, u.searchParams.get("q"), URL.canParse("nope")]; },
  () => new URL("nope"),
  () => [new URL("sc://").href, new URL("//", "foo://h/a/b").href],
  () => { const p = new URLSearchParams("a=1&b=2"), it = p.entries(); it.next();
    return [new URLSearchParams(p).toString(), new URL("http://h/?" + p).searchParams.toString(),
      it.next().value, p.keys().next().value, p.values().next().value, it.next().done]; },
];
"""
LOOP = r"""
for (let i = 0; i < uses.length; i++) {
  try { console.log(i, uses[i]()); } catch (e) { console.log(i, "threw", e.name, e.message); }
}
"""
REPLACED = {
    "array iterator": "Array.prototype[Symbol.iterator] = function* () { yield 'evil'; };",
    "array push": "Array.prototype.push = function () { return 0; };",
    "array methods": "for (const k of ['map', 'filter', 'slice', 'join', 'sort', 'indexOf', "
    "'includes', 'concat', 'splice', 'forEach', 'at']) Array.prototype[k] = () => 'evil';",
    "index setters": "Object.defineProperty(Array.prototype, '0', { set(v) {}, get() { return 9; }, "
    "configurable: true }); Object.defineProperty(Object.prototype, 'a', { set(v) {}, "
    "configurable: true });",
    "string methods": "for (const k of ['split', 'slice', 'indexOf', 'trim', 'toLowerCase', "
    "'toUpperCase']) String.prototype[k] = () => 'evil';",
    "map and set": "Map.prototype.set = Set.prototype.add = function () { return this; };",
    "number toString": "Number.prototype.toString = () => 'evil';",
    "typed arrays": "const TA = Object.getPrototypeOf(Uint8Array.prototype); TA.set = () => {}; "
    "TA.subarray = () => new Uint8Array(0); Object.defineProperty(TA, 'length', "
    "{ get() { return 0; }, configurable: true });",
    "globals and other methods": "globalThis.parseInt = () => 0x7a; Math.floor = () => 0; "
    "RegExp.prototype.test = () => false; Set.prototype.has = () => true; "
    "WeakMap.prototype.get = WeakMap.prototype.set = () => undefined; "
    "String.prototype.codePointAt = String.prototype.charCodeAt = () => 0; "
    "String.prototype[Symbol.iterator] = function* () { yield 'evil'; }; "
    "globalThis.String = () => 'evil';",
    "regexp exec": "RegExp.prototype.exec = () => null;",
    "string concat": "String.prototype.concat = () => 'evil';",
    "function methods": "Function.prototype.call = Function.prototype.apply = Function.prototype.bind = "
    "() => 'evil'; Reflect.apply = () => 'evil'; Object.keys = () => ['evil']; "
    "Object.defineProperty = () => {}; JSON.stringify = () => 'evil'; Math.max = Math.min = () => 7;",
    "iterator protocols": "Object.getPrototypeOf(function* () {}).prototype.next = () => ({ done: true }); "
    "Object.getPrototypeOf([][Symbol.iterator]()).next = () => ({ done: true }); "
    "URLSearchParams.prototype[Symbol.iterator] = function* () { yield ['evil', 'x']; };",
    "object index": "Object.prototype[0] = '[';",
    "instanceof": "Object.defineProperty(Error, Symbol.hasInstance, { value: () => false });",
    "encoder methods": "TextEncoder.prototype.encode = () => new Uint8Array(0); "
    "TextDecoder.prototype.decode = () => 'evil';",
}

# The uses that call what the script replaced itself, as a script's own call of it does.
CALLS_REPLACED = {"encoder methods": {2, 4}}


def printed(code: str, prepared: bool) -> str:
    script = Script(id="w", code=code, clock=Clock(now_ms=0, seed=9))
    ran = run_in_process(script, prepared=Prepared() if prepared else None)
    assert ran.outcome == "finished", ran.error
    return ran.printed


def test_the_uses_answer_as_node_does() -> None:
    """What the corpus compares against is right in itself: a key "__proto__" is the copy's
    own (it set the copy's prototype), and the rest as Node.js gives it."""
    lines = printed(USES + LOOP, False).splitlines()
    assert lines[1] == "1 true"
    assert lines[4] == "4 hé\ufffd€"
    assert lines[8] == '8 ["b=9&c=%26",["9"],true,2,"&"]'
    assert lines[10] == "10 http://a/%C3%A9?q=%C3%A9#%C3%A9"
    assert lines[11] == '11 ["ab.com","http://a.com/y/z"]'
    assert (
        lines[12]
        == '12 ["127.0.0.1","[::1:0:0:2]:8080","xn--bcher-kva.example","http://a.com","81"]'
    )
    assert lines[13] == '13 ["file:///x%20y?q=1#h","http://a/c","1",false]'
    assert lines[15] == '15 ["sc://","foo://"]'
    assert lines[16] == '16 ["a=1&b=2","a=1&b=2",["b","2"],"a","1",true]'


@pytest.mark.parametrize("prepared", [False, True], ids=["own context", "prepared"])
@pytest.mark.parametrize("name", sorted(REPLACED))
def test_a_replaced_builtin_does_not_change_the_web_builtins(name: str, prepared: bool) -> None:
    """Each answer is the one given with nothing replaced: they took the script's methods
    (Array.prototype[Symbol.iterator] replaced: structuredClone({ a: [1] }) gave
    {"evil":undefined}; push replaced: TextEncoder encoded nothing; Number.prototype.toString
    replaced: new URL("http://a/é").href was http://a/%EVIL%EVIL)."""
    got = printed(USES + REPLACED[name] + LOOP, prepared).splitlines()
    want = printed(USES + LOOP, prepared).splitlines()
    own = CALLS_REPLACED.get(name, set())
    assert [x for i, x in enumerate(got) if i not in own] == [
        x for i, x in enumerate(want) if i not in own
    ]


@pytest.mark.parametrize("prepared", [False, True], ids=["own context", "prepared"])
def test_url_does_not_take_a_replaced_text_encoder(prepared: bool) -> None:
    """URL encodes and decodes with web.js's own UTF-8: it called TextEncoder's encode, which
    the script may replace, and a script that had done so had every URL with a character past
    ASCII refused as 'Invalid URL'."""
    uses = 'console.log(new URL("http://a/é?q=é#é").href, new URL("http://%41b.com/").host)'
    replaced = (
        "TextEncoder.prototype.encode = () => new Uint8Array(0);"
        "TextDecoder.prototype.decode = () => 'x';"
    )
    assert printed(replaced + uses, prepared) == "http://a/%C3%A9?q=%C3%A9#%C3%A9 ab.com\n"


@pytest.mark.parametrize("prepared", [False, True], ids=["own context", "prepared"])
def test_a_params_iterator_is_nodes(prepared: bool) -> None:
    """A URLSearchParams' entries, keys, values and iterator are "URLSearchParams Iterator"s, as
    in Node.js, shown with what they have yet to give, and read the list as it is when next is
    called; they were generators (shown as "Object [Generator] {}") whose next was
    %GeneratorPrototype%.next, which a script could replace, for new URLSearchParams(params)
    too. (Generators still, for speed, but of a prototype whose next is taken at boot.)"""
    code = r"""
    const p = new URLSearchParams("a=1&b=2"), it = p.entries(), keys = p.keys();
    it.next();
    p.append("c", "&");
    console.log(p.entries(), keys, p.values(), it, String(p[Symbol.iterator]()));
    const proto = Object.getPrototypeOf(it);
    console.log(Object.keys(proto), proto === Object.getPrototypeOf(p.values()),
      Object.getPrototypeOf(proto) === Object.getPrototypeOf(Object.getPrototypeOf([].values())));
    try { proto.next.call({}); } catch (e) { console.log(e.name); }
    Object.getPrototypeOf(function* () {}).prototype.next = () => ({ done: true });
    for (const [k, v] of p) console.log(k, v);
    keys.next(); keys.next(); keys.next(); keys.next();
    p.append("d", "4");
    console.log(keys, keys.next().done);
    """
    assert printed(code, prepared).splitlines() == [
        'URLSearchParams Iterator {["a","1"], ["b","2"], ["c","&"]} URLSearchParams Iterator '
        '{"a", "b", "c"} URLSearchParams Iterator {"1", "2", "&"} URLSearchParams Iterator '
        '{["b","2"], ["c","&"]} [object URLSearchParams Iterator]',
        '["next"] true true',
        "TypeError",
        "a 1",
        "b 2",
        "c &",
        "URLSearchParams Iterator {} true",
    ]
