"""The script as the model wrote it, made into the body of an async function.

Models write a bare body, a body inside a Markdown code fence, or (in JavaScript) a whole
``async () => { ... }`` function (with a TypeScript return type or not); all are accepted.
Whatever is taken away is replaced by line breaks, so an error's line numbers are the lines
as the model wrote them.

The text is the model's, so every scan here is linear in its length: no pattern may
backtrack (one that did took minutes on a few KiB of spaces).
"""

from __future__ import annotations

import ast
import re
import textwrap

from engine._errors import CodeModeError

MAX_CODE_BYTES = 256 * 1024

# Languages a fence may name ("```js"), for a script in each language; any case.
_FENCE_LANGUAGES = {
    "javascript": frozenset({"", "javascript", "js", "typescript", "ts", "jsx", "mjs"}),
    "python": frozenset({"", "python", "py", "python3"}),
}
_FENCE = "```"
# A whole function: `(? async function name? () {` or `(? async () => {` ... `} )? ( () )? ;?`.
# Every quantifier is possessive (`*+`): adjacent `\s*` that could give back what they took
# made the engine try every split of a run of spaces (minutes on a few KiB). The tail has
# one `}`, so it can only match at the text's last one.
# A TypeScript return type (`async (): Promise<{ n: number }[]> => {`) may follow the empty
# parameters: see _return_type.
_HEAD = re.compile(r"\s*+\(?+\s*+(?:(async\s++function\s*+[\w$]*+\s*+\(\s*+\))|async\s*+\(\s*+\))")
_ARROW_BODY = re.compile(r"\s*+=>\s*+\{")
_BODY = re.compile(r"\s*+\{")
_TAIL = re.compile(r"\}\s*+\)?+\s*+(?:\(\s*+\)\s*+)?+;?+\s*+\Z")
# The line breaks JavaScript counts (QuickJS too: a lone CR, LS and PS start a line).
_BREAK = re.compile("\r\n|[\r\n\u2028\u2029]")
# A hashbang line (`#!/usr/bin/env node`), which Node.js takes at the start of a file and a
# function body cannot hold: what follows the blanks before it, to the line's end.
_HASHBANG = re.compile("#![^\r\n\u2028\u2029]*+")


class ScriptTooLarge(CodeModeError):
    """The script is over the bound on its size."""


class OtherLanguage(CodeModeError):
    """The script is a Markdown code fence that names another language than the script's."""


_LANGUAGE_NAMES = {"javascript": "JavaScript", "python": "Python"}


def normalize(code: str, language: str = "javascript") -> str:
    """The body of an async function in ``language``, with the model's line numbers kept."""
    if not isinstance(code, str):
        raise TypeError(f"code must be a string, not {type(code).__name__}")
    # Each character is a byte or more: a longer text is refused without encoding it.
    long = len(code) > MAX_CODE_BYTES
    size = len(code) if long else len(code.encode("utf-8", "replace"))
    if size > MAX_CODE_BYTES:
        raise ScriptTooLarge(
            f"the script is {'at least ' if long else ''}{size:,} bytes, over the "
            f"{MAX_CODE_BYTES:,} bytes a script may be; write a shorter script that reads its "
            "data with tool calls or files"
        )
    if code.startswith("\ufeff"):  # a byte order mark, as some editors save a file
        code = code[1:]
    fenced = _FENCE_LANGUAGES[language]
    for other, names in _FENCE_LANGUAGES.items():
        if other != language and _fence(code, names - {""}) is not None:
            header = code.lstrip().split("\n", 1)[0].strip()
            raise OtherLanguage(
                f"the script is a {header} code fence, but scripts here are "
                f"{_LANGUAGE_NAMES[language]}: write it in {_LANGUAGE_NAMES[language]}"
            )
    unwraps = (_fence, _function) if language == "javascript" else (_fence,)
    for unwrap in unwraps:
        found = unwrap(code, fenced)
        if found is not None:
            start, end = found
            code = _breaks(code[:start], code[start : start + 1]) + code[start:end]
    if language == "javascript":
        # Its line stays, empty, so the lines after it keep their numbers.
        blanks = len(code) - len(code.lstrip())
        hashbang = _HASHBANG.match(code, blanks)
        if hashbang is not None:
            code = code[:blanks] + code[hashbang.end() :]
    return code


def _breaks(text: str, then: str) -> str:
    """What stands for ``text``, which is taken away before ``then``: its line breaks, so
    the lines after it keep their numbers, whether a reader counts JavaScript's breaks or
    only LF, then, when code follows on its last line, a space for each of its characters,
    so that code keeps its columns (``async () => { return a +; }``: a parser's column is the
    model's). A lone CR kept right before an LF would make one CRLF of two breaks: a space
    keeps them apart."""
    tokens = [*_BREAK.findall(text), then]
    breaks = "".join(
        "\r " if token == "\r" and tokens[i + 1].startswith("\n") else token
        for i, token in enumerate(tokens[:-1])
    )
    if _BREAK.match(then):
        return breaks
    return breaks + " " * len(_BREAK.split(text)[-1])


def _fence(code: str, languages: frozenset[str]) -> tuple[int, int] | None:
    """Where the body of a Markdown code fence around the whole of ``code`` starts and ends;
    ``None`` when ``code`` is not one fence."""
    opening = len(code) - len(code.lstrip())
    if not code.startswith(_FENCE, opening):
        return None
    newline = code.find("\n", opening)
    header = code[opening + len(_FENCE) : newline]
    if newline < 0 or header.strip(" \t").lower() not in languages:
        return None
    start = newline + 1
    closing = len(code.rstrip()) - len(_FENCE)
    if closing < start or not code.startswith(_FENCE, closing):
        return None
    end = len(code[start:closing].rstrip(" \t")) + start
    return start, end - 1 if code.startswith("\n", end - 1) and end > start else end


def _function(code: str, _: frozenset[str]) -> tuple[int, int] | None:
    """Where the body of the ``async () => { ... }`` or ``async function () { ... }`` that is
    the whole of ``code`` (maybe in parentheses, maybe called) starts and ends; ``None`` when
    ``code`` is not one such function."""
    head = _HEAD.match(code)
    if head is None:
        return None
    arrow = head[1] is None
    returns = _return_type(code, head.end(), arrow)
    body = None if returns is None else (_ARROW_BODY if arrow else _BODY).match(code, returns)
    tail = _TAIL.search(code)
    if body is None or tail is None or tail.start() < body.end():
        return None
    if not _balanced(code[body.end() : tail.start()]):
        return None
    return body.end(), tail.start()


_COLON = re.compile(r"\s*+:")
_TYPE_MARKS = re.compile(r"=>|[\"'`<>()\[\]{}=;]")


def _return_type(code: str, i: int, arrow: bool) -> int | None:
    """Where the TypeScript return type that may follow a function's parameters at ``i``
    ends: at ``i`` when there is none; at the ``=>`` of an arrow function or the ``{`` of a
    function's body that no bracket of the type holds; None when the text is no type. Its
    brackets count (`Promise<{ n: number }>` has braces, which a pattern that excluded them
    missed: the function was run as an expression, never called, and the script finished
    with nothing), and quotes are skipped (a literal type `"{"`); one scan, linear."""
    colon = _COLON.match(code, i)
    if colon is None:
        return i
    depth = 0
    mark = _TYPE_MARKS.search(code, colon.end())
    while mark is not None:
        token, at = mark[0], mark.start()
        if depth == 0 and (token == "=>" if arrow else token == "{"):
            return at
        if token in "\"'`":
            end, _ = _close(code, at, token)
            if end is None:
                return None
            mark = _TYPE_MARKS.search(code, end)
            continue
        if token in "<([{":
            depth += 1
        elif token in ">)]}":
            depth -= 1
            if depth < 0:
                return None
        elif token in ("=", ";"):
            return None  # an arrow's `=>` is matched first: these end no type
        mark = _TYPE_MARKS.search(code, mark.end())
    return None


# What the brace count stops at; and the inside of each kind of quote, escapes included (a
# quote ends at a line break unless it is escaped, a template literal does not). Neither can
# backtrack: nothing follows the repetition.
_MARKS = re.compile(r"[{}/\"'`]")
_INSIDE = {
    q: re.compile(rf"[^{q}\\{nl}]*(?:\\.[^{q}\\{nl}]*)*", re.DOTALL)
    for q, nl in (('"', "\n"), ("'", "\n"), ("`", ""))
}


def _balanced(body: str) -> bool:
    """True when the body's braces pair up (so the outer braces were the function's)."""
    return _unclosed(body) == []


def _unclosed(body: str) -> list[int] | None:
    """Where each ``{`` of the body that no ``}`` closes is; ``None`` when a ``}`` closes
    none.

    Braces in strings, template literals and comments do not count; a quote or ``/*`` that
    is never closed is plain text. A scan that finds no close is remembered: every opener of
    the same kind up to where it stopped finds none either (each of them is escaped, or
    inside that comment), so no stretch of the text is scanned twice for the same close.
    """
    opened: list[int] = []
    n = len(body)
    open_until: dict[str, int] = {}  # opener -> an opener before here finds no close
    mark = _MARKS.search(body)
    while mark is not None:
        i = mark.start()
        ch = body[i]
        if body.startswith("//", i):
            newline = body.find("\n", i)
            i = n if newline < 0 else newline
            mark = _MARKS.search(body, i)
            continue
        if ch == "/" and not body.startswith("/*", i) and _starts_regex(body, i):
            literal = _REGEX.match(body, i)
            if literal is not None:  # a regex literal: its braces are no block's (/[{]/)
                mark = _MARKS.search(body, literal.end())
                continue
        opener = "/*" if body.startswith("/*", i) else ch if ch in "\"'`" else None
        if opener is not None and i >= open_until.get(opener, 0):
            end, stop = _close(body, i, opener)
            if end is not None:
                mark = _MARKS.search(body, end)
                continue
            open_until[opener] = stop
        if ch == "{":
            opened.append(i)
        elif ch == "}":
            if not opened:
                return None
            opened.pop()
        mark = _MARKS.search(body, i + 1)
    return opened


# A regex literal from its opening slash: a class ([...]) may hold a slash, an escape any
# character; it ends at its slash on the same line.
_REGEX = re.compile(r"/(?![*/])(?:[^/\\\[\n]|\\.|\[(?:[^\]\\\n]|\\.)*\])+/")
# What a slash that starts a regex literal follows (else it divides): an operator or
# punctuation, or the start; or a keyword after which an expression begins.
_BEFORE_REGEX = frozenset("(,=:[!&|?{};+-*%<>~^")
_REGEX_KEYWORDS = re.compile(
    r"(?:^|[^\w$])(?:return|typeof|case|do|else|in|of|void|yield|await|delete|throw|new)$"
)


def _starts_regex(body: str, i: int) -> bool:
    """Whether the slash at ``i`` opens a regex literal, judged by what comes before it.
    Looks back over the blanks before it only (a copy of the text before each slash made a
    script of 120,000 divisions cost half a second of the host's CPU)."""
    j = i - 1
    while j >= 0 and body[j].isspace():
        j -= 1
    if j < 0 or body[j] in _BEFORE_REGEX:
        return True
    return _REGEX_KEYWORDS.search(body[max(0, j - 11) : j + 1]) is not None


def _close(body: str, i: int, opener: str) -> tuple[int | None, int]:
    """Just past the close of the comment or quote that opens at ``i``, or ``None`` and where
    the scan gave up. Quotes end at a line break unless it is escaped; backticks do not."""
    if opener == "/*":
        end = body.find("*/", i + 2)
        return (None, len(body)) if end < 0 else (end + 2, end + 2)
    at = _INSIDE[opener].match(body, i + 1).end()  # type: ignore[union-attr]  # matches ""
    return (at + 1, at + 1) if body.startswith(opener, at) else (None, at)


# What only JavaScript writes, for a script that is no Python.
_JAVASCRIPT_MARKS = re.compile(
    r"\b(?:const|let|var)\s+[\w{\[]|=>|\bfunction\s+\w+\s*\(|console\.log\(|===|!=="
)


def _parses_as_python(code: str) -> bool:
    """Whether ``code`` parses as the body of an async function (as a Python script runs)."""
    try:
        ast.parse("async def _script():\n" + textwrap.indent(code, "    ") + "\n    pass")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def unclosed_hint(code: str, language: str) -> str:
    """For a JavaScript script that failed with a SyntaxError: when a ``{`` of it is never
    closed, which line opened it (the parser names the end of the text, or a line before it,
    and says only "Unexpected token"; a script cut short ends so), else ""."""
    if language != "javascript":
        return ""
    opened = _unclosed(code)
    if not opened:
        return ""
    line = len(_BREAK.findall(code, 0, opened[-1])) + 1
    return (
        f"; the `{{` on line {line} is never closed: close it with `}}`, or, if the script was "
        "cut short, write the rest of it"
    )


def other_language_hint(code: str, language: str) -> str:
    """For a script that failed with a SyntaxError in ``language``: what to say when it reads
    as the other language (a model that wrote Python for the JavaScript engine got only
    "Unexpected token"), else "". A Python script that parses (a SyntaxError of the
    sandbox's own checks) gets none."""
    if language == "javascript":
        if not _parses_as_python(code):
            return ""
        return (
            "; the script reads as Python, and run_code runs JavaScript here: write it in "
            "JavaScript (`const r = await tools.name({ key: value });`)"
        )
    if _JAVASCRIPT_MARKS.search(code) and not _parses_as_python(code):
        return (
            "; the script reads as JavaScript, and run_code runs Python here: write it in "
            "Python (`r = await tools.name(key=value)`)"
        )
    return ""
