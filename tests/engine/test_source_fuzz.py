"""The script normalizer (engine._source.normalize) under any text a model could send.

It takes the model's text as it comes: a bare body, a fenced one, a whole function, or
garbage. Whatever the text, it returns a body or raises ScriptTooLarge (a CodeModeError),
keeps every line the model wrote at its line number, and takes time linear in the text.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine import CodeModeError, ScriptTooLarge, normalize
from engine._source import MAX_CODE_BYTES
from tests._fuzz import derandomized

# Derandomized: the same examples on every run, so a failure is never one run's bad luck.
FUZZ = derandomized(200)

# Pieces that mean something to the normalizer, mixed with arbitrary text (lone surrogates,
# NULs and every line break JavaScript counts included).
PIECES = [
    "```", "```js", "```TypeScript ", "\n", "\r\n", "\r", "\u2028", "\u2029", " ", "\t", "\x00",
    "\ud800", "\udfff", "(", ")", "()", "{", "}", ";", "async", "function", "f", "=>", '"', "'",
    "`", "${", "\\", "/*", "*/", "//", "/[{]/", "/}/g", "'{'", '"}"', "`${ {a: 1} }`", "x",
    "return 1", "\u00a0", "\x1c", "\U0001f600",
]  # fmt: skip
HEADS = [
    "", "async () => {", "(async () => {", "async function f() {", " async function () {",
    " \n```js\n", "```\n", "```\nasync () => {", "\r\n (\u2028async\n(\r)\n=>\n{",
]  # fmt: skip
TAILS = ["", "}", "})", "})()", "}();", "} ) ( ) ; \n", "\n```", "}\n```\n", "\n```  \n\n"]

scripts = st.builds(
    lambda head, middle, tail: head + "".join(middle) + tail,
    st.sampled_from(HEADS),
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=4)), max_size=40),
    st.sampled_from(TAILS),
)

# The line breaks of each convention a reader may count by: Python's split on "\n" (the
# sandbox's), and JavaScript's four.
CONVENTIONS = [
    lambda text: text.split("\n"),
    lambda text: re.split("\r\n|[\r\n\u2028\u2029]", text),
]


def _is_subsequence(part: str, whole: str) -> bool:
    chars = iter(whole)
    return all(ch in chars for ch in part)


def assert_lines_kept(code: str, body: str) -> None:
    """Each line of ``body`` is what is left of the same line of ``code`` (characters taken
    away, none moved to another line, no more than a space added), whichever line breaks are
    counted."""
    for lines in CONVENTIONS:
        before, after = lines(code), lines(body)
        assert len(after) <= len(before), (code, body)
        for number, (was, now) in enumerate(zip(before, after, strict=False), start=1):
            kept = now.replace(" ", "")
            assert _is_subsequence(kept, was), f"line {number}: {now!r} is not from {was!r}"


@FUZZ
@given(scripts)
def test_any_script_gives_a_body_with_its_lines_in_place(code: str) -> None:
    """A script built from the pieces that matter (fences, function heads and tails, braces
    in strings, comments, regular expressions and template literals) normalizes without
    error, and every line stays at its number."""
    body = normalize(code)
    assert isinstance(body, str)
    assert_lines_kept(code, body)


@FUZZ
@given(st.text())
def test_arbitrary_text_gives_a_body_with_its_lines_in_place(code: str) -> None:
    """Any text at all (any code point, lone surrogates and NULs included)."""
    assert_lines_kept(code, normalize(code))


WRAPPERS = [
    ("async () => {", "}"),
    ("(async () => {", "})()"),
    ("async function main() {", "};"),
    ("\n (\tasync\u2028function\n(\n)\r{", "}\n)\n(\n)\n;\n"),
    ("```js\nasync () => {", "}\n```"),
]


@FUZZ
@given(st.sampled_from(WRAPPERS), st.text(alphabet="ab 1;=+.()[]\n\t", max_size=200))
def test_a_whole_function_gives_its_body(wrapper: tuple[str, str], inner: str) -> None:
    """A body wrapped in a function (and a fence) comes back whole, after line breaks that
    stand for what was taken away."""
    head, tail = wrapper
    body = normalize(head + inner + tail)
    before = body[: len(body) - len(inner)]
    assert body[len(before) :] == inner
    assert not before.strip(), before
    assert_lines_kept(head + inner + tail, body)


@pytest.mark.parametrize(
    ("code", "body"),
    [
        ("```js\nreturn 1\n```", "\nreturn 1"),
        ("  \n```JavaScript \nreturn 1\n  ```\n\n", "\n\nreturn 1"),
        ("async () => {\n  return 2;\n}", "\n  return 2;\n"),
        ("(async function main() { return '}' })();", " " * 24 + " return '}' "),
        (
            "```\nasync () => {\r\n  return `${ {a: 1}.a }`\r\n}\n```",
            "\n\r\n  return `${ {a: 1}.a }`\r\n",
        ),
        ("\r\u2028async () => {x}", "\r\u2028" + " " * 13 + "x"),
        ("async () =>\r{\nreturn 1}", "\r \nreturn 1"),
        ("\r\t\n```\nreturn 1\n```", "\r \n\nreturn 1"),
        ("async () => { a }; async () => { b }", "async () => { a }; async () => { b }"),
        ("async () => { return /}/ }", " " * 13 + " return /}/ "),  # a regex's brace
        ("async () => { return a / b }", " " * 13 + " return a / b "),
        ("async () => { return a / b; } }", "async () => { return a / b; } }"),
        ("return 1", "return 1"),
        ("```js\nreturn 1", "```js\nreturn 1"),
        # TypeScript return types with brackets of their own (they were no shape: the
        # function was an expression the script never called, and it finished with nothing).
        ("async (): Promise<{ n: number }> => {\nreturn 1}", "\nreturn 1"),
        ("async (): Promise<{ a: { b: 1 }[] }[]>=>{x}", " " * 41 + "x"),
        ("async function f(): Promise<(x: number) => void> {x}", " " * 50 + "x"),
        ('async (): Promise<"}" | "=>"> => {x}', " " * 34 + "x"),
        ("async (): Promise<{ n: number }> {x}", "async (): Promise<{ n: number }> {x}"),
        ("async (): Promise<number>> => {x}", "async (): Promise<number>> => {x}"),
        ("async (): T = 1 => {x}", "async (): T = 1 => {x}"),
    ],
)
def test_known_shapes(code: str, body: str) -> None:
    """What each shape a model writes becomes; text that is not one whole shape is left as it
    is. A brace in a regular expression literal is no block's (a slash that follows an
    operator, punctuation or a keyword such as return opens one; one after a value divides)."""
    assert normalize(code) == body
    assert_lines_kept(code, body)


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    "build",
    [
        lambda n: "```\n" + " " * n + "x",
        lambda n: "async () => {}" + " " * n + "x",
        lambda n: " " * n + "x",
        lambda n: "(" + " " * n + "x",
        lambda n: "async () => {" + "/*" * (n // 2) + "}",
        lambda n: "async () => {`" + "\\`" * (n // 2) + "}",
        lambda n: "async () => {\"" + '\\"' * (n // 2) + "}",
        lambda n: "async () => {" + "\"'`/*" + "\\\"\\'\\`{" * (n // 8) + "}",
        lambda n: "async () => {" + '"\n' * (n // 2) + "}",
        lambda n: "async () => {" + "{" * n + "}",
        lambda n: "```\n" + "``` x" * (n // 5),
        lambda n: "async () => {" + ("}" + " " * 1000) * (n // 1001) + "x",
        lambda n: "async (): " + "<{[(" * (n // 4) + "=> {}",
        lambda n: "async (): " + '"' * n + "=> {}",
        lambda n: "async function f(): " + "'\\" * (n // 2),
    ],
    ids=[
        "fence-spaces", "tail-spaces", "lead-spaces", "paren-spaces", "open-comments",
        "escaped-backticks", "escaped-quotes", "mixed-quotes", "unclosed-lines", "open-braces",
        "fence-ticks", "brace-runs", "open-type-brackets", "type-quotes", "open-type-quote",
    ],
)  # fmt: skip
def test_adversarial_text_at_the_bound_is_linear(build: Callable[[int], str]) -> None:
    """Text built to make a backtracking pattern try every split, at the size bound. The
    timeout is a guard against minutes, not a measure: each takes well under a second (a
    pattern that backtracked took a minute on 4 KiB of one of these)."""
    code = build(MAX_CODE_BYTES - 64)
    assert len(code.encode()) <= MAX_CODE_BYTES
    assert_lines_kept(code, normalize(code))


@FUZZ
@given(st.integers(min_value=1, max_value=4), st.sampled_from(["x", "\u00e9", "\U0001f600"]))
def test_over_the_bound_is_refused_as_a_codemode_error(extra: int, ch: str) -> None:
    """A script over the bound, counted in UTF-8 bytes, raises ScriptTooLarge naming its size."""
    width = len(ch.encode())
    code = ch * (MAX_CODE_BYTES // width + extra)
    with pytest.raises(ScriptTooLarge, match=r"over the 262,144 bytes") as caught:
        normalize(code)
    assert isinstance(caught.value, CodeModeError)


def test_a_lone_surrogate_counts_as_a_byte_and_is_kept() -> None:
    """A lone surrogate is not valid UTF-8; the normalizer neither fails on it nor drops it."""
    assert normalize("return '\ud800'") == "return '\ud800'"
    normalize("x" * (MAX_CODE_BYTES - 1) + "\ud800")
    with pytest.raises(ScriptTooLarge):
        normalize("x" * MAX_CODE_BYTES + "\ud800")


def test_far_over_the_bound_is_refused_without_encoding() -> None:
    """A text of many megabytes is refused by its length, before it is encoded."""
    with pytest.raises(ScriptTooLarge, match="at least 33,554,432 bytes"):
        normalize("\U0001f600" * (32 << 20))


@pytest.mark.parametrize(
    "code",
    [
        "async () => { const a: number = 1; return a +; }",
        "(async function main() { return 1 +; })();",
        "```ts\nasync () => { return a +; }\n```",
    ],
)
def test_code_after_a_head_on_its_line_keeps_its_columns(code: str) -> None:
    """A parser's line and column in the body are the model's own: what stands for a head
    with code after it on its line is as wide as the head."""
    body = normalize(code)
    line = code.count("\n", 0, code.index("return"))
    assert body.split("\n")[line].index("return") == code.split("\n")[line].index("return")
