"""Intl for en-US in UTC (sandbox/intl.js): what Node.js gives, case for case.

``intl_cases.json`` holds random cases with Node.js's answers (full ICU; the file names the
versions), made by ``node tests/sandbox/intl_cases.js``: number formats, collations and date
formats. The rest runs scripts end to end: the built-ins a model uses, the clock they read,
and what a script gets for a locale, a time zone or a part of Intl it does not have.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sandbox import runtime
from sandbox.protocol import Clock, Script
from tests.sandbox.conftest import booted, run, value

CASES = json.loads(Path(__file__).with_name("intl_cases.json").read_text("utf-8"))

# Each case's answer in a bare context with the boot's stand-ins (the path a run takes on its
# first use of Intl), or "!Name: message" for what it threw.
_HARNESS = """(cases) => JSON.stringify(JSON.parse(cases).map((c) => {
  const decode = (v) => typeof v !== 'string' ? v : v.endsWith('n') ? BigInt(v.slice(0, -1))
    : v.startsWith('s:') ? v.slice(2) : v === '-0' ? -0 : Number(v);
  try {
    switch (KIND) {
      case 'number': return new Intl.NumberFormat('en-US', c[1]).format(decode(c[0]));
      case 'collator': return Math.sign(c[0].localeCompare(c[1], 'en-US', c[2]));
      case 'plural': return new Intl.PluralRules('en-US', c[1]).select(c[0]);
      case 'list': return new Intl.ListFormat('en-US', c[1]).format(c[0]);
      case 'relative': return new Intl.RelativeTimeFormat('en-US', c[2]).format(c[0], c[1]);
      default: {
        const [t, method, o] = c;
        return method === 'format'
          ? new Intl.DateTimeFormat('en-US', o).format(new Date(t)) : new Date(t)[method]('en-US', o);
      }
    }
  } catch (e) { return '!' + e.name + ': ' + e.message; }
}))"""


def _answers(kind: str) -> list[Any]:
    ctx = booted()
    cases = [c for c in CASES[kind]]
    answers = ctx.eval(_HARNESS.replace("KIND", repr(kind)))(json.dumps(cases))
    return list(zip(cases, json.loads(answers), strict=True))


def _expected(case: list[Any], answer: Any) -> bool:
    want = case[-1]
    if isinstance(want, str) and want.startswith("!"):  # Node's error: the same kind of error
        return isinstance(answer, str) and answer.startswith(want + ":")
    return bool(answer == want)


@pytest.mark.parametrize("kind", ["number", "collator", "date", "plural", "list", "relative"])
def test_every_case_is_what_node_gives(kind: str) -> None:
    """1,200 random cases each of NumberFormat (styles, currencies, notations, digits, rounding
    modes, signs, grouping), collation (accents, case, punctuation, numeric, ignorePunctuation,
    caseFirst, each sensitivity) and date formats (components, styles, hour cycles, zone names,
    toLocaleDateString and toLocaleTimeString's defaults); 300 of plural rules, 300 of lists
    and 600 of relative times."""
    wrong = [(case, answer) for case, answer in _answers(kind) if not _expected(case, answer)]
    assert not wrong, f"{len(wrong)} of {len(CASES[kind])} differ from Node.js, first: {wrong[:5]}"


def test_the_cases_test_something() -> None:
    """The cases cover what they say: errors, each style, long and short months, both signs."""
    numbers = [c[2] for c in CASES["number"]]
    assert sum(n.startswith("!") for n in numbers) == 0  # no case Node.js refused
    assert any("$" in n for n in numbers) and any("%" in n for n in numbers)
    assert any(n.endswith("K") or n.endswith("M") for n in numbers)
    assert {c[3] for c in CASES["collator"]} == {-1, 0, 1}
    dates = [c[3] for c in CASES["date"]]
    assert any(" at " in d for d in dates) and any("PM" in d for d in dates)


def test_what_a_model_writes() -> None:
    got = value(
        """
        const d = new Date(Date.UTC(2026, 11, 3, 15, 4, 5));
        return [
          (1234567.891).toLocaleString(),
          (1234.5).toLocaleString("en-US", { style: "currency", currency: "USD" }),
          (0.256).toLocaleString(undefined, { style: "percent" }),
          new Intl.NumberFormat("en-US", { notation: "compact" }).format(1234567),
          (1234.5678).toLocaleString("en-US", { maximumFractionDigits: 2 }),
          12345678901234567890n.toLocaleString(),
          [1234.5, 2].toLocaleString(),
          d.toLocaleDateString(), d.toLocaleTimeString(), d.toLocaleString(),
          d.toLocaleDateString("en-US", { month: "short", day: "numeric", year: "numeric" }),
          d.toLocaleDateString("en-US", { dateStyle: "full" }),
          ["b", "a", "C", "é"].sort((x, y) => x.localeCompare(y)),
          ["item10", "item9"].sort(new Intl.Collator(undefined, { numeric: true }).compare),
          new Intl.ListFormat("en", { type: "conjunction" }).format(["red", "green", "blue"]),
          new Intl.RelativeTimeFormat("en", { numeric: "auto" }).format(-1, "day"),
          new Intl.RelativeTimeFormat("en").format(3, "hours"),
          [1, 2, 3, 11, 22].map((n) => new Intl.PluralRules("en", { type: "ordinal" }).select(n)),
          ["\\u0131 i \\u0130 \\u00df".toLocaleUpperCase("en-US"), "ΣΑΣ".toLocaleLowerCase(), "Ab".toLocaleLowerCase("en")],
        ];
        """
    )
    assert got == [
        "1,234,567.891",
        "$1,234.50",
        "26%",
        "1.2M",
        "1,234.57",
        "12,345,678,901,234,567,890",
        "1,234.5,2",
        "12/3/2026",
        "3:04:05 PM",
        "12/3/2026, 3:04:05 PM",
        "Dec 3, 2026",
        "Thursday, December 3, 2026",
        ["a", "b", "C", "é"],
        ["item9", "item10"],
        "red, green, and blue",
        "yesterday",
        "in 3 hours",
        ["one", "two", "few", "other", "two"],
        ["I I İ SS", "σας", "ab"],
    ]


def test_the_time_is_the_scripts_fixed_clock() -> None:
    """`new Date()` and `format()` with no date read the run's clock (NOW_MS: 2026-01-01
    00:00 UTC), so every run of the script prints the same."""
    got = value("return [new Date().toLocaleString(), new Intl.DateTimeFormat().format()];")
    assert got == ["1/1/2026, 12:00:00 AM", "1/1/2026"]


@pytest.mark.parametrize(
    ("code", "name", "said"),
    [
        ('(5).toLocaleString("de-DE");', "RangeError", 'no locale data for "de-DE"'),
        ('new Intl.DateTimeFormat("ja-JP");', "RangeError", "the en-US locale only"),
        ('"a".localeCompare("b", "sv");', "RangeError", 'no locale data for "sv"'),
        (
            'new Date().toLocaleString("en-US", { timeZone: "America/New_York" });',
            "RangeError",
            "a script runs in UTC and has no time zone data",
        ),
        ("new Intl.DisplayNames();", "TypeError", "it has Intl.NumberFormat, DateTimeFormat"),
        (
            'Intl.supportedValuesOf("currency");',
            "TypeError",
            "Intl.supportedValuesOf is not available in a script (it has",
        ),
        (
            '(5).toLocaleString("en-US", { style: "unit", unit: "meter" });',
            "RangeError",
            "add the unit's name yourself",
        ),
        ('(5).toLocaleString("en_US");', "RangeError", "Incorrect locale information provided"),
        (
            '(5).toLocaleString("en-US", { style: "currency" });',
            "TypeError",
            "Currency code is required",
        ),
        ("new Intl.DateTimeFormat().format(NaN);", "RangeError", "Invalid time value"),
        ('"i".toLocaleUpperCase("tr");', "RangeError", 'no locale data for "tr"'),
    ],
)
def test_what_it_does_not_have_says_what_to_do(code: str, name: str, said: str) -> None:
    """Another locale or time zone is an error that says what to do, never text in a locale the
    script did not ask for; the line is the script's (intl.js's frames are past its lines)."""
    ran = run("const x = 1;\n" + code)
    assert ran.outcome == "failed" and ran.error is not None
    assert ran.error.name == name and said in ran.error.message, ran.error
    assert [x.line for x in ran.error.lines] == [2]


def test_a_script_may_replace_what_intl_gives() -> None:
    """The stand-ins are ordinary properties: a script that assigns its own keeps it, and
    loading Intl later does not put the stand-in back."""
    got = value(
        """
        Number.prototype.toLocaleString = function () { return "mine"; };
        const n = new Intl.NumberFormat().format(1000);
        globalThis.Intl = 5;
        return [(1).toLocaleString(), n, Intl, "b".localeCompare("a"), new Date(0).toLocaleString() !== ""];
        """
    )
    assert got == ["mine", "1,000", 5, 1, True]


def test_invalid_dates_and_odd_receivers() -> None:
    got = value(
        """
        const out = [new Date(NaN).toLocaleString(), new Date(NaN).toLocaleDateString()];
        try { Date.prototype.toLocaleString.call({}); } catch (e) { out.push(e.name); }
        try { Number.prototype.toLocaleString.call("1"); } catch (e) { out.push(e.name); }
        try { Intl.NumberFormat.prototype.format; } catch (e) { out.push(e.name); }
        out.push(Object.prototype.toString.call(Intl), Intl.NumberFormat.supportedLocalesOf(["de", "en-US"]));
        out.push(new Intl.NumberFormat("en", { style: "currency", currency: "eur" }).resolvedOptions().currency);
        return out;
        """
    )
    assert got == [
        "Invalid Date",
        "Invalid Date",
        "TypeError",
        "TypeError",
        "TypeError",
        "[object Intl]",
        ["en-US"],
        "EUR",
    ]


def test_every_context_has_it_compiled_before_the_script(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """intl.js and url.js are compiled with the boot, before any script: in a fork server's
    context (before it forks, so no child pays for them) and in a run's own context alike,
    so what they take of the built-ins is never what a script put there."""
    asked: list[str] = []

    def source(name: str) -> str:
        asked.append(name)
        return runtime.LAZY_SOURCES[name]

    monkeypatch.setattr(runtime, "_lazy_source", source)
    prepared = runtime.Prepared()
    assert asked == ["intl", "url"]
    assert prepared.ctx.eval("new Intl.NumberFormat().format(1e6)") == "1,000,000"
    assert prepared.ctx.eval("new URL('HTTP://A.b/c').href") == "http://a.b/c"
    assert asked == ["intl", "url"]

    del asked[:]
    ctx = booted(source)
    assert asked == ["intl", "url"]
    assert ctx.eval("[(1e6).toLocaleString(), 'b'.localeCompare('a')].join()") == "1,000,000,1"
    assert ctx.eval("typeof URL") == "function"
    assert asked == ["intl", "url"]


def test_sizes_a_script_controls() -> None:
    """A decimal string past a double's range formats as the number it reads as (not a
    gigabyte of zeros); the largest BigInts and doubles and the most digits format whole."""
    got = value(
        """
        const f = new Intl.NumberFormat();
        return [f.format("1e999999999"), f.format("-1e999999999"), f.format("1e-999999"),
          f.format("12345678901234567890.5"), f.format(" 42 "), f.format("abc"),
          f.format(10n ** 400n).length, (1e308).toLocaleString().length,
          (5e-324).toLocaleString("en-US", { maximumFractionDigits: 100 }),
          (1 / 3).toLocaleString("en-US", { minimumFractionDigits: 100 }).length,
          "a".repeat(100000).localeCompare("a".repeat(99999) + "b")];
        """
    )
    assert got == [
        "∞",
        "-∞",
        "0",
        "12,345,678,901,234,567,890.5",
        "42",
        "NaN",
        534,
        411,
        "0",
        102,
        -1,
    ]


@pytest.mark.parametrize("prepared", [False, True], ids=["own context", "prepared"])
def test_console_log_shows_an_intl_object_as_node_does(prepared: bool) -> None:
    """console.log of an Intl object names it as Node.js does (it printed {}); one a script
    put keys on shows them, and a context booted without Intl (a sandbox process's warm-up)
    still prints objects."""
    code = (
        "const n = new Intl.NumberFormat();"
        "console.log(n, [new Intl.Collator()], { a: new Intl.PluralRules() }, new Intl.DateTimeFormat(),"
        " new Intl.ListFormat(), new Intl.RelativeTimeFormat());"
        "n.x = 1; console.log(n, {});"
    )
    script = Script(id="l", code=code, clock=Clock(now_ms=0, seed=9))
    ran = runtime.run_in_process(script, prepared=runtime.Prepared() if prepared else None)
    assert ran.printed == (
        "NumberFormat [Intl.NumberFormat] {} [Collator [Intl.Collator] {}] "
        '{"a":PluralRules [Intl.PluralRules] {}} DateTimeFormat [Intl.DateTimeFormat] {} '
        "ListFormat [Intl.ListFormat] {} RelativeTimeFormat [Intl.RelativeTimeFormat] {}\n"
        '{"x":1} {}\n'
    )
    with runtime.warming_up():
        bare = runtime.run_in_process(
            Script(
                id="w", code="console.log({ a: [1] }, typeof Intl)", clock=Clock(now_ms=0, seed=9)
            ),
            prepared=None,
        )
    assert bare.printed == '{"a":[1]} undefined\n'


def test_resolved_options_in_nodes_order() -> None:
    """A DateTimeFormat's resolvedOptions lists hourCycle and hour12 before dateStyle and
    timeStyle, as Node.js does (they came after)."""
    got = value(
        'return Object.keys(new Intl.DateTimeFormat("en-US", { dateStyle: "short", timeStyle: "short" })'
        ".resolvedOptions())"
    )
    assert got == [
        "locale",
        "calendar",
        "numberingSystem",
        "timeZone",
        "hourCycle",
        "hour12",
        "dateStyle",
        "timeStyle",
    ]


def test_the_case_level_is_upper_or_not() -> None:
    """sensitivity "case" compares only whether a letter is upper case, as ICU does: a
    fullwidth or circled letter is the case of the letter it stands for, and a no-break space
    has none (a fullwidth "a" came after "A", and "a\\u00a0b" after "a b"). Node.js's answers."""
    got = value(
        r"""
        const pairs = [["\uff41", "A"], ["\uff21", "a"], ["\uff41", "a"], ["\uff21", "A"], ["\uff41", "\uff21"], ["a b", "a\u00a0b"],
          ["ﬁ", "fi"], ["ª", "a"], ["ª", "A"], ["²", "2"], ["Ⓐ", "a"], ["ⓐ", "A"], ["a\uff22", "Ab"]];
        const out = [];
        for (const caseFirst of ["false", "upper"]) {
          const c = new Intl.Collator("en", { sensitivity: "case", caseFirst });
          for (const [a, b] of pairs) out.push(c.compare(a, b));
        }
        return out;
        """
    )
    assert got[:13] == [-1, 1, 0, 0, -1, 0, 0, 0, -1, 0, 1, -1, -1]
    assert got[13:] == [1, -1, 0, 0, 1, 0, 0, 0, 1, 0, -1, 1, 1]


def test_format_converts_an_object_once_as_node_does() -> None:
    """NumberFormat's format takes an object's primitive once, hint "number", and a BigInt or
    a string it gives as is, as Node.js does: valueOf ran twice, a Symbol.toPrimitive's
    BigInt lost its last digits, and an object of no prototype threw "not a function"."""
    got = value(
        r"""
        const nf = new Intl.NumberFormat();
        let n = 0;
        const out = [nf.format({ valueOf() { n++; return 5; } }), n];
        const hints = [];
        out.push(nf.format({ [Symbol.toPrimitive](hint) { hints.push(hint); return 12345678901234567891n; } }), hints);
        out.push(nf.format({ valueOf() { return "12345678901234567891.5"; }, toString() { return "9"; } }));
        out.push(nf.formatToParts({ valueOf() { return 7n; } }).map((p) => p.value).join(""));
        try { nf.format(Object.create(null)); } catch (e) { out.push(e.name + ": " + e.message.toLowerCase()); }
        return out;
        """
    )
    assert got == [
        "5",
        1,
        "12,345,678,901,234,567,891",
        ["number"],
        "12,345,678,901,234,567,891.5",
        "7",
        "TypeError: cannot convert object to primitive value",
    ]


def test_plural_rules_resolved_options_in_order() -> None:
    """PluralRules' resolvedOptions: locale, type, the digit options, then pluralCategories, as
    Node.js 20 lists them (it has no rounding options there; they come before the categories
    here), an object of Object.prototype whose properties are its own."""
    got = value(
        """
        const o = new Intl.PluralRules("en-US", { type: "ordinal", minimumSignificantDigits: 2 }).resolvedOptions();
        return [Object.getPrototypeOf(o) === Object.prototype, Object.keys(o), o.pluralCategories,
          Object.keys(new Intl.PluralRules().resolvedOptions())];
        """
    )
    last = ["roundingPriority", "roundingIncrement", "roundingMode", "trailingZeroDisplay"]
    last += ["pluralCategories"]
    first = ["locale", "type", "minimumIntegerDigits"]
    assert got == [
        True,
        [*first, "minimumSignificantDigits", "maximumSignificantDigits", *last],
        ["few", "one", "two", "other"],
        [*first, "minimumFractionDigits", "maximumFractionDigits", *last],
    ]
