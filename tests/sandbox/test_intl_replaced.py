"""Intl (sandbox/intl.js) and the built-ins that format, compare or change case for a locale
give a script the same answer whatever it replaced on the built-in prototypes and globals, as
a native Intl does, in a context of its own (an exec'd process's) and on a prepared one (a
pool's child's). The companion of test_web_replaced.py."""

from __future__ import annotations

import pytest

from sandbox.protocol import Clock, Script
from sandbox.runtime import Prepared, run_in_process

# Each use's inputs are made before the script replaces anything; the loop that prints them
# reads by index.
USES = r"""
const date = new Date(Date.UTC(2026, 11, 3, 15, 4, 5, 67));
const uses = [
  () => (1234.5).toLocaleString(),
  () => [(1234.5678).toLocaleString("en-US", { maximumFractionDigits: 2 }), (0.256).toLocaleString(undefined, { style: "percent" }),
    (-1234.5).toLocaleString("en", { style: "currency", currency: "eur", currencySign: "accounting" }),
    (12345n).toLocaleString(), (1e21).toLocaleString(), (1.005).toLocaleString(undefined, { maximumFractionDigits: 2 })],
  () => new Intl.NumberFormat("en-US").format(9876543.21),
  () => new Intl.NumberFormat(["de", "en-US"], { notation: "compact", compactDisplay: "long" }).format(999999),
  () => [new Intl.NumberFormat("en-US", { notation: "scientific" }).format(0.000123),
    new Intl.NumberFormat("en-US", { notation: "engineering", minimumSignificantDigits: 3 }).format(12345),
    new Intl.NumberFormat("en-US", { style: "currency", currency: "USD", currencyDisplay: "name" }).format(1),
    new Intl.NumberFormat("en-US", { style: "currency", currency: "CHF" }).format(-0.5),
    new Intl.NumberFormat("en-US", { signDisplay: "exceptZero", roundingMode: "halfEven", maximumFractionDigits: 0 }).format(2.5),
    new Intl.NumberFormat("en-US", { minimumIntegerDigits: 3, trailingZeroDisplay: "stripIfInteger", minimumFractionDigits: 2 }).format(7),
    new Intl.NumberFormat().format("12345678901234567890.5"), new Intl.NumberFormat().format(NaN)],
  () => new Intl.NumberFormat("en-US", { style: "currency", currency: "JPY" }).formatToParts(-1234567.891),
  () => new Intl.NumberFormat("en-US", { style: "percent", maximumSignificantDigits: 2 }).resolvedOptions(),
  () => [date.toLocaleString(), date.toLocaleDateString(), date.toLocaleTimeString(),
    date.toLocaleDateString("en-US", { weekday: "long", year: "numeric", month: "long", day: "numeric" })],
  () => new Intl.DateTimeFormat("en-US", { dateStyle: "full", timeStyle: "long" }).format(date),
  () => [new Intl.DateTimeFormat("en-US", { hour: "2-digit", minute: "2-digit", hour12: false, timeZone: "UTC" }).format(date),
    new Intl.DateTimeFormat("en", { month: "short", day: "numeric", era: "short", fractionalSecondDigits: 2, second: "numeric" }).format(date),
    new Intl.DateTimeFormat("en", { weekday: "short", hour: "numeric", dayPeriod: "long" }).format(date),
    new Intl.DateTimeFormat("en", { year: "2-digit", month: "2-digit", day: "2-digit", timeZoneName: "short" }).format(0)],
  () => new Intl.DateTimeFormat("en-US", { dateStyle: "medium", timeStyle: "short" }).formatToParts(date),
  () => new Intl.DateTimeFormat("en-US", { month: "long" }).resolvedOptions(),
  () => [["b", "a", "Ä", "ä", "z", "10", "9", "æ", "Ab", "-x"].sort(new Intl.Collator("en-US", { numeric: true }).compare),
    "a".localeCompare("B"), "résumé".localeCompare("resume", "en", { sensitivity: "base" }),
    new Intl.Collator("en", { ignorePunctuation: true, caseFirst: "upper" }).compare("a-b", "Ab"),
    new Intl.Collator("en", { sensitivity: "case" }).compare("\uff41", "A"), "ﬁ²".localeCompare("fi2")],
  () => new Intl.Collator().resolvedOptions(),
  () => [new Intl.PluralRules("en-US").select(1), new Intl.PluralRules("en-US", { type: "ordinal" }).select(22),
    new Intl.PluralRules("en-US", { type: "ordinal" }).select(113), new Intl.PluralRules("en", { minimumFractionDigits: 1 }).select(1),
    new Intl.PluralRules().selectRange(1, 2)],
  () => new Intl.PluralRules("en-US", { type: "ordinal", maximumFractionDigits: 1 }).resolvedOptions(),
  () => [new Intl.ListFormat("en-US").format(["a", "b", "c"]), new Intl.ListFormat("en", { type: "disjunction" }).format(["a", "b"]),
    new Intl.ListFormat("en", { style: "narrow", type: "unit" }).format(["1", "2", "3"])],
  () => new Intl.ListFormat("en-US").formatToParts(["x", "y"]),
  () => [new Intl.RelativeTimeFormat("en-US").format(-3, "days"), new Intl.RelativeTimeFormat("en", { numeric: "auto" }).format(1, "day"),
    new Intl.RelativeTimeFormat("en", { style: "short" }).format(1234.5, "quarters"),
    new Intl.RelativeTimeFormat("en", { style: "narrow", numeric: "auto" }).format(-1, "year")],
  () => new Intl.RelativeTimeFormat("en-US").formatToParts(12345, "hour"),
  () => new Intl.RelativeTimeFormat("en-US").resolvedOptions(),
  () => [Intl.getCanonicalLocales(["EN-us", "en", "fr-CA"]), Intl.NumberFormat.supportedLocalesOf(["fr", "en-US-u-nu-latn"]),
    Intl.DateTimeFormat.supportedLocalesOf("en")],
  () => [[1234.5, new Date(0), null, "x"].toLocaleString(), "title".toLocaleUpperCase("en-US"), "ÀB".toLocaleLowerCase()],
  () => new Intl.NumberFormat("fr-FR"),
  () => new Intl.DateTimeFormat("en-US", { timeZone: "Europe/Paris" }),
  () => new Intl.NumberFormat("en-US", { style: "currency", currency: "XYZ", currencyDisplay: "name" }),
  () => new Intl.NumberFormat("en_US"),
  () => Intl.Segmenter(),
  () => [Object.prototype.toString.call(new Intl.NumberFormat()), String(Intl), typeof new Intl.Collator().compare],
  () => String.prototype.toLocaleUpperCase.call(null),
  () => [new Intl.RelativeTimeFormat("en", { numeric: "auto" }).format(5, "day"), new Intl.RelativeTimeFormat("en", { numeric: "auto" }).format(1, "second"),
    new Intl.RelativeTimeFormat("en", { numeric: "auto" }).format(-1, "second"), new Intl.RelativeTimeFormat("en", { numeric: "auto" }).format(2, "hours"),
    new Intl.Collator("en").compare("1", "\uff11"), new Intl.Collator("en").compare("\uff11", "1"), "\u00e6".localeCompare("af"), "ae".localeCompare("\u00e6")],
];
"""
LOOP = r"""
for (let i = 0; i < uses.length; i++) {
  try { console.log(i, uses[i]()); } catch (e) { console.log(i, "threw", e.name, e.message); }
}
"""
REPLACED = {
    "array iterator": "Array.prototype[Symbol.iterator] = function* () {};",
    "array iterator yields": "Array.prototype[Symbol.iterator] = function* () { yield 'evil'; };",
    "array methods": "for (const k of ['push', 'pop', 'shift', 'unshift', 'map', 'filter', 'slice', "
    "'join', 'sort', 'indexOf', 'includes', 'concat', 'splice', 'forEach', 'at', 'reduce', 'some', "
    "'every', 'find', 'fill', 'reverse']) Array.prototype[k] = () => 'evil';",
    "array index": "Object.defineProperty(Array.prototype, '0', { set(v) {}, get() { return 9; }, "
    "configurable: true }); Object.prototype[-1] = { type: 'literal', value: 'evil' };",
    # Setters only for the options' names (a getter there would be read by the options object's
    # Get, as in Node.js); getters too for names only intl.js's own objects have.
    "object setters": "for (const k of ['locale', 'style', 'type', 'minimumFractionDigits', "
    "'maximumFractionDigits', 'useGrouping', 'compactDisplay', 'currency', 'hourCycle', 'hour12', "
    "'timeZoneName', 'dateStyle', 'year', 'month', 'numeric', 'sensitivity', 'unit', 'pluralCategories']) "
    "Object.defineProperty(Object.prototype, k, { set(v) {}, configurable: true }); "
    "for (const k of ['digits', 'point', 'd', 'minFraction', 'integer', 'fraction', 'rounding', "
    "'ms', 'cycle', 'glue']) "
    "Object.defineProperty(Object.prototype, k, { set(v) {}, get() { return 'evil'; }, configurable: true });",
    "string methods": "for (const k of ['split', 'slice', 'substring', 'indexOf', 'trim', 'toLowerCase', "
    "'toUpperCase', 'charCodeAt', 'codePointAt', 'repeat', 'endsWith', 'startsWith', 'padStart', "
    "'replace', 'search', 'match', 'normalize', 'includes', 'concat', 'at']) "
    "String.prototype[k] = () => 'evil'; String.prototype[Symbol.iterator] = function* () { yield 'evil'; }; "
    "String.prototype[Symbol.replace] = () => 'evil';",
    "object statics": "Object.keys = Object.entries = Object.values = () => ['evil']; "
    "Object.assign = () => ({}); Object.defineProperty = () => {}; Object.freeze = (o) => o; "
    "Object.prototype.hasOwnProperty = () => true; globalThis.Object = function () { return {}; };",
    "math and json": "for (const k of ['floor', 'min', 'max', 'abs', 'trunc', 'round', 'ceil', 'pow']) "
    "Math[k] = () => 7; JSON.stringify = () => 'evil'; JSON.parse = () => 'evil';",
    "regexp": "RegExp.prototype.exec = () => null; RegExp.prototype.test = () => false; "
    "RegExp.prototype[Symbol.replace] = () => 'evil'; RegExp.prototype[Symbol.search] = () => 0; "
    "RegExp.prototype[Symbol.split] = () => ['evil']; RegExp.prototype[Symbol.match] = () => null;",
    "number methods": "Number.prototype.toString = Number.prototype.toFixed = Number.prototype.toPrecision = "
    "() => 'evil'; Number.isFinite = Number.isInteger = () => false; Number.parseInt = globalThis.parseInt = () => 3; "
    "BigInt.prototype.toString = () => 'evil'; String.fromCharCode = () => 'evil'; globalThis.String = () => 'evil'; "
    "globalThis.Number = () => 5;",
    "map and set": "Map.prototype.get = Map.prototype.set = Map.prototype.has = () => undefined; "
    "Set.prototype.has = () => true; WeakMap.prototype.get = WeakMap.prototype.set = () => undefined; "
    "Map.prototype[Symbol.iterator] = Set.prototype[Symbol.iterator] = function* () {};",
    "function methods": "Function.prototype.call = Function.prototype.apply = Function.prototype.bind = "
    "() => 'evil'; Reflect.apply = () => 'evil';",
    "iterator protocols": "const AI = Object.getPrototypeOf([][Symbol.iterator]()); AI.next = () => ({ done: true }); "
    "Object.getPrototypeOf(''[Symbol.iterator]()).next = () => ({ done: true }); "
    "Object.getPrototypeOf(function* () {}).prototype.next = () => ({ done: true });",
    "date methods": "for (const k of Object.getOwnPropertyNames(Date.prototype)) if (k !== 'constructor') "
    "Date.prototype[k] = () => 1;",
    # What a lookup in one of intl.js's tables finds when the table lacks the key (a word
    # table's "none", 1 or -1; an entry's third item).
    "inherited indexes": "Object.prototype.none = ['evil', 'evil', 'evil']; "
    "Object.prototype[1] = Object.prototype[-1] = Object.prototype[0] = ['evil1', 'evil', 'evil']; "
    "Array.prototype[2] = 500;",
    "errors": "globalThis.RangeError = globalThis.TypeError = function () { return { name: 'evil', message: 'evil' }; };",
}

# The uses that call what the script replaced itself, as a script's own call of it does (a
# native Intl gives the same: sort with the script's Array.prototype.sort, the script's
# Date.prototype.toLocaleString, the list's items read with the script's iterator).
CALLS_REPLACED = {
    "array iterator": {16, 17},
    "array iterator yields": {16, 17},
    "array methods": {12},
    "iterator protocols": {16, 17},
    "date methods": {7, 22},
    "number methods": {28, 29},
    "function methods": {28, 29},
}


def printed(code: str, prepared: bool) -> str:
    script = Script(id="i", code=code, clock=Clock(now_ms=0, seed=9))
    ran = run_in_process(script, prepared=Prepared() if prepared else None)
    assert ran.outcome == "finished", ran.error
    return ran.printed


def test_the_uses_answer_as_node_does() -> None:
    """What the corpus compares against is right in itself (a few lines, as Node.js 20 with
    full ICU prints them)."""
    lines = printed(USES + LOOP, False).splitlines()
    assert lines[0] == "0 1,234.5"
    assert lines[2] == "2 9,876,543.21"
    assert (
        lines[1]
        == '1 ["1,234.57","26%","(€1,234.50)","12,345","1,000,000,000,000,000,000,000","1.01"]'
    )
    assert lines[8] == "8 Thursday, December 3, 2026 at 3:04:05 PM UTC"
    assert lines[16] == '16 ["a, b, and c","a or b","1 2 3"]'
    assert lines[18] == '18 ["3 days ago","tomorrow","in 1,234.5 qtrs.","last yr."]'
    assert lines[22] == '22 ["1,234.5,1/1/1970, 12:00:00 AM,,x","TITLE","àb"]'
    assert lines[30] == '30 ["in 5 days","in 1 second","1 second ago","in 2 hours",-1,1,-1,-1]'


@pytest.mark.parametrize("prepared", [False, True], ids=["own context", "prepared"])
@pytest.mark.parametrize("name", sorted(REPLACED))
def test_a_replaced_builtin_does_not_change_intl(name: str, prepared: bool) -> None:
    """Each answer is the one given with nothing replaced: intl.js took the script's methods
    (Array.prototype[Symbol.iterator] replaced: (1234.5).toLocaleString() gave "", and
    new Intl.NumberFormat("en-US") threw "Incorrect locale information provided")."""
    got = printed(USES + REPLACED[name] + LOOP, prepared).splitlines()
    want = printed(USES + LOOP, prepared).splitlines()
    own = CALLS_REPLACED.get(name, set())
    assert [x for i, x in enumerate(got) if i not in own] == [
        x for i, x in enumerate(want) if i not in own
    ]
