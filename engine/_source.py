"""The script as the model wrote it, made into the body of an async function.

Models write a bare body, a body inside a Markdown code fence, or a whole
``async () => { ... }`` function (with a TypeScript return type or not); all are accepted.
Whatever is taken away is replaced by line breaks, so an error's line numbers are the lines
as the model wrote them.
"""

from __future__ import annotations

import re

from engine._errors import CodeModeError

MAX_CODE_BYTES = 256 * 1024

_FENCE = re.compile(
    r"\A(?P<lead>\s*)```[ \t]*(?:javascript|js|typescript|ts|jsx|mjs)?[ \t]*\n"
    r"(?P<body>.*?)\n?[ \t]*```\s*\Z",
    re.DOTALL | re.IGNORECASE,
)
# A TypeScript return type (`async (): Promise<number[]> => {`) may follow the empty
# parameters, as long as it has no braces.
_RETURNS = r"(?:\s*:\s*[^{}=;]+?)?"
_FUNCTION = re.compile(
    r"\A(?P<lead>\s*\(?\s*(?:async\s+function\s*[\w$]*\s*\(\s*\)" + _RETURNS + r"|"
    r"async\s*\(\s*\)" + _RETURNS + r"\s*=>)\s*\{)"
    r"(?P<body>.*)\}\s*\)?\s*(?:\(\s*\)\s*)?;?\s*\Z",
    re.DOTALL,
)


class ScriptTooLarge(CodeModeError):
    """The script is over the bound on its size."""


def normalize(code: str) -> str:
    """The body of an async function, with the model's line numbers kept."""
    if not isinstance(code, str):
        raise TypeError(f"code must be a string, not {type(code).__name__}")
    size = len(code.encode("utf-8", "replace"))
    if size > MAX_CODE_BYTES:
        raise ScriptTooLarge(
            f"the script is {size:,} bytes, over the {MAX_CODE_BYTES:,} bytes a script may "
            "be; write a shorter script that reads its data with tool calls or files"
        )
    fence = _FENCE.match(code)
    if fence:
        code = "\n" * (fence.group("lead").count("\n") + 1) + fence.group("body")
    function = _FUNCTION.match(code)
    if function and _balanced(function.group("body")):
        code = "\n" * function.group("lead").count("\n") + function.group("body")
    return code


def _balanced(body: str) -> bool:
    """True when the body's braces pair up (so the outer braces were the function's)."""
    depth = 0
    for ch in _strip_strings(body):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


_STRINGS = re.compile(
    r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'|`(?:\\.|[^`\\])*`",
    re.DOTALL,
)


def _strip_strings(text: str) -> str:
    return _STRINGS.sub("", text)
