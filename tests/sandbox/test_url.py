"""URL (sandbox/url.js): what Node.js gives, case for case, and URL in scripts.

``url_cases.json`` holds random URLs with Node.js's answers (the file names its version),
made by ``node tests/sandbox/url_cases.js``: absolute URLs of every kind of scheme, host
(domains, IPv4 in its odd forms, IPv6, names that are not ASCII), port, path, query and
fragment; references resolved against bases; and each setter.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.sandbox.conftest import booted, run, value

CASES = json.loads(Path(__file__).with_name("url_cases.json").read_text("utf-8"))

# Where Node.js 20's parser (Ada) departs from the URL Standard, which url.js follows: the
# pathname setter given "" on a URL with no host and an empty path, and the host setter on a
# URL that is not special and has an empty host, which Ada gives no port.
STANDARD = {
    ("mailto:/1.2.3/../..", "pathname", ""): "mailto:/",
    (
        "blob:///us er:p@ss@[1:2:3:4:5:6:7:8]/C:/x",
        "host",
        "example.org:81",
    ): "blob://example.org:81/us%20er:p@ss@[1:2:3:4:5:6:7:8]/C:/x",
    ("blob:///1.2.3/../..#x y", "host", "[::2]:3"): "blob://[::2]:3#x%20y",
}

_HARNESS = """(cases) => {
  const PARTS = ["href", "origin", "protocol", "username", "password", "host", "hostname",
    "port", "pathname", "search", "hash"];
  const d = (u) => Object.fromEntries(PARTS.map((k) => [k, u[k]]));
  const tried = (f) => { try { return f(); } catch (e) { return e.name === "TypeError" ? null : "!" + e; } };
  const c = JSON.parse(cases);
  return JSON.stringify({
    absolute: c.absolute.map(([i]) => tried(() => d(new URL(i)))),
    relative: c.relative.map(([i, b]) => tried(() => d(new URL(i, b)))),
    setters: c.setters.map(([s, k, v]) => tried(() => { const u = new URL(s); u[k] = v; return u.href; })),
  });
}"""


def _answers() -> dict[str, list[Any]]:
    answers: dict[str, list[Any]] = json.loads(booted().eval(_HARNESS)(json.dumps(CASES)))
    return answers


@pytest.mark.parametrize("kind", ["absolute", "relative", "setters"])
def test_every_case_is_what_node_gives(kind: str) -> None:
    wrong = []
    for case, got in zip(CASES[kind], _answers()[kind], strict=True):
        want = STANDARD.get(tuple(case[:3]), case[-1]) if kind == "setters" else case[-1]
        if got != want:
            wrong.append((case[:-1], want, got))
    assert not wrong, f"{len(wrong)} of {len(CASES[kind])} differ, first: {wrong[:3]}"


def test_the_cases_test_something() -> None:
    absolute = [c[1] for c in CASES["absolute"]]
    assert 200 < sum(a is None for a in absolute) < len(absolute) - 500  # failures and not
    hosts = {a["hostname"] for a in absolute if a}
    assert {"127.0.0.1", "[::1]", "xn--mnchen-3ya.de", "example.com"} <= hosts
    assert len({c[1] for c in CASES["setters"]}) == 9  # every setter
    assert all(key in [tuple(c[:3]) for c in CASES["setters"]] for key in STANDARD)


def test_what_a_model_writes() -> None:
    got = value(
        """
        const page = { next: "https://api.example.com/v1/items?cursor=abc%3D&limit=50" };
        const next = new URL(page.next);
        const built = new URL("/v1/search", "https://api.example.com");
        built.searchParams.set("q", "red shoes & socks");
        built.searchParams.append("page", 2);
        return [next.hostname, next.searchParams.get("cursor"), next.pathname.split("/").pop(),
          built.href, String(built), JSON.stringify({ built }), URL.canParse("not a url"),
          new URL("../b?x#y", "https://h/a/c/d").href];
        """
    )
    assert got == [
        "api.example.com",
        "abc=",
        "items",
        "https://api.example.com/v1/search?q=red+shoes+%26+socks&page=2",
        "https://api.example.com/v1/search?q=red+shoes+%26+socks&page=2",
        '{"built":"https://api.example.com/v1/search?q=red+shoes+%26+socks&page=2"}',
        False,
        "https://h/a/b?x#y",
    ]


def test_search_params_and_the_url_keep_in_step() -> None:
    got = value(
        """
        const u = new URL("https://h/p?a=1&b=2#f");
        const params = u.searchParams;
        params.delete("a");
        const one = u.href;
        u.search = "?c=3";
        const two = [params.get("c"), params.get("b"), params === u.searchParams];
        params.delete("c");
        const three = u.href;
        u.href = "https://other/?d=4";
        return [one, two, three, params.get("d"), u.host];
        """
    )
    assert got == ["https://h/p?b=2#f", ["3", None, True], "https://h/p#f", "4", "other"]


def test_an_invalid_url_says_what_a_url_needs() -> None:
    ran = run('const x = 1;\nconst u = new URL("/items?page=2");')
    assert ran.outcome == "failed" and ran.error is not None
    assert ran.error.name == "TypeError"
    assert ran.error.message.startswith('Invalid URL: "/items?page=2"')
    assert "new URL(path, base)" in ran.error.message
    assert [x.line for x in ran.error.lines] == [2]


@pytest.mark.parametrize(
    ("code", "said"),
    [
        # It has a scheme: "a URL needs a scheme (https://...)" misled.
        ('new URL("https://exa mple.com/x")', "; its host or port is not one a URL can hold"),
        ('new URL("http://[::1/")', "; its host or port is not one a URL can hold"),
        ('new URL("/x", "example.com")', "; the base needs a scheme (https://...)"),
        ('new URL("x", "mailto:a@b.example")', "; the base is no URL to resolve against"),
        ('new URL("/x")', "; a URL needs a scheme (https://...) unless a base URL is given"),
    ],
)
def test_an_invalid_url_says_what_it_lacks(code: str, said: str) -> None:
    ran = run(code)
    assert ran.error is not None and ran.error.message.startswith("Invalid URL: "), ran
    assert said in ran.error.message, ran.error.message
    assert ran.error.message.count("; ") == 1


def test_a_url_as_an_argument_says_to_pass_its_href() -> None:
    ran = run('await tools.echo({ u: new URL("https://h/") });', tools=["echo"])
    assert ran.outcome == "failed" and ran.error is not None
    assert "is a URL (pass url.href)" in ran.error.message


def test_odd_receivers_and_what_a_script_assigns() -> None:
    got = value(
        """
        const out = [];
        try { Object.getOwnPropertyDescriptor(URL.prototype, "href").get.call({}); } catch (e) { out.push(e.name); }
        try { new URL(); } catch (e) { out.push(e.name); }
        try { URL.createObjectURL(1); } catch (e) { out.push(e.message); }
        out.push(URL.parse("x") === null, Object.keys(new URL("https://h/")).length);
        globalThis.URL = 5;
        out.push(URL);
        return out;
        """
    )
    assert got == [
        "TypeError",
        "TypeError",
        "URL.createObjectURL is not available in a script: it has no Blob",
        True,
        0,
        5,
    ]


@pytest.mark.parametrize("how", ["freeze", "seal", "preventExtensions"])
def test_a_script_that_froze_global_this_still_has_url_and_intl(how: str) -> None:
    """URL and Intl, made when a run first names them, are there for a script that froze
    globalThis first (their first use failed: "TypeError: property is not configurable")."""
    got = value(
        f"Object.{how}(globalThis);\n"
        'const u = new URL("https://h.example/p?q=1");\n'
        'return [u.searchParams.get("q"), URL === URL, new Intl.NumberFormat("en-US").format(1234.5)];'
    )
    assert got == ["1", True, "1,234.5"]


def test_text_a_script_controls_takes_time_in_its_length() -> None:
    """Runs of spaces, zeros and digits that a regular expression would take in the square of
    their length (seconds for 20,000 characters) parse in linear time; a host label that is
    not ASCII and longer than 1,000 characters (Punycode is quadratic: 1.2 s for 3,000) is
    not a URL."""
    ran = run(
        """
        const n = 200000;
        const a = new URL("https://h/" + " ".repeat(n) + "x" + " ".repeat(n));
        const b = new URL("sc:x" + " ".repeat(n) + "#f");
        const label = Array.from({ length: 5000 }, (_, i) => String.fromCodePoint(0x4e00 + i)).join("");
        b.hash = "";
        const f = new Intl.NumberFormat("en-US", { maximumFractionDigits: 100 });
        return [a.pathname.length, b.href.length, URL.canParse("http://" + label + ".com/"),
          new URL("http://" + label.slice(0, 900) + ".com/").hostname.length > 900,
          f.format("1".repeat(n) + "x"),
          f.format("1." + "0".repeat(n) + "1"), f.format("1" + "0".repeat(300) + "1e-400")];
        """,
        compute_ms=5000,
    )
    assert ran.outcome == "finished", ran.error
    assert ran.value == [3 * 200000 + 2, 4, False, True, "NaN", "1", "0." + "0" * 98 + "1"]
