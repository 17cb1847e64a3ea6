"""Removing a script's TypeScript types, inside the confined process, before it runs.

Models read their tools as TypeScript declarations and often answer in TypeScript. The types
are removed here by Sucrase (see typescript.js for the subset), which keeps every line where
the model wrote it, so error lines stay the model's own. It runs in the confined process,
before the script does, in a QuickJS context of its own (its own runtime and heap, held to
the run's memory and stack bounds, under the process's CPU timer): the script can never
reach it, and the script's garbage collector never walks it.

What it costs (2-core VM): compiling the bundle, 35-45 ms and about 1.5 MiB of heap, paid once
by the fork server (every child inherits it) or, in exec mode, only by a script that needs it;
the transform, about 0.5 ms for a 140-byte script and 10-20 ms for 1.4 KB (10-15 us a byte
in QuickJS's interpreter, under load). So a script is first compiled as JavaScript, in its
own context (``begin`` in prelude.js, which begins nothing when the body does not parse),
and stripped only if that fails: plain JavaScript pays nothing, unless it has something
shaped like a call with type arguments: ``f<Array>(x)`` is also valid JavaScript, with
another meaning, so such a script is always stripped (and means what TypeScript says).

The bundle is committed (``make install`` builds it again from package-lock.json's versions,
byte for byte); an install without it runs scripts as JavaScript only, and a typed script
fails with its syntax error and a note saying so.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

import _quickjs

_GLOBAL = "__cm_typescript"


def _read_bundle() -> str | None:
    # Read when the module is imported, before lockdown: afterwards no file can be opened.
    try:
        return resources.files("sandbox").joinpath("typescript.bundle.js").read_text("utf-8")
    except (FileNotFoundError, OSError):
        return None


BUNDLE = _read_bundle()

MISSING_NOTE = (
    "TypeScript cannot run here: this runner has no sandbox/typescript.bundle.js (build it "
    "with `make install`), so scripts must be plain JavaScript"
)


class StripError(Exception):
    """The script's types could not be removed: ``message``, at ``line`` (0 when unknown)."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


# `f<T>(x)` and f<T>`x`: a call with type arguments, which is also valid JavaScript (two
# comparisons) with another meaning, object types and intersections too (`reduce<{ total:
# number, n: number }>(...)` ran as comparisons with an object literal: "number is not
# defined"); not `&&`, which plain comparisons have. Bounded, so a hostile script cannot make
# it backtrack.
_GENERIC_CALL = re.compile(r"[\w$\])]\s*<[\w$\s,.|\[\]<>'\"?:{};&]{1,160}?>\s*[(`]")


def wanted(code: str) -> bool:
    """True when the script must be stripped before it is compiled as JavaScript: it has
    something shaped like a call with type arguments (see above)."""
    start = 0
    while (match := _GENERIC_CALL.search(code, start)) is not None:
        if "&&" not in match[0]:
            return True
        start = match.start() + 1  # a call may begin inside what was not one
    return False


class Stripper:
    """A QuickJS context of its own holding the strip function, compiled when first needed
    (or at once, with :meth:`compiled`, as a fork server does before it forks)."""

    def __init__(self) -> None:
        self._ctx: Any = None
        self._fn: Any = None

    def touch(self) -> None:
        """Compile a small function in the stripper's context, running nothing: a forked
        child does it while it waits, so that QuickJS's parser is mapped in before the
        script's compile needs it (a no-op without the bundle)."""
        if self._ctx is not None:
            self._ctx.eval("(async function () {\n  return [1, 'x'];\n})")

    @classmethod
    def compiled(cls) -> Stripper:
        stripper = cls()
        if BUNDLE is not None:
            stripper._compile()
        return stripper

    def _compile(self) -> None:
        ctx = _quickjs.Context()
        ctx.eval(BUNDLE)
        self._fn = ctx.get(_GLOBAL)
        self._ctx = ctx

    def strip(self, code: str, *, memory: int, stack: int) -> str:
        """``code`` without its types, line for line, within ``memory`` bytes of heap and
        ``stack`` bytes of JS stack; raises :class:`StripError` (or ``MemoryError``)."""
        if BUNDLE is None:
            raise StripError(MISSING_NOTE)
        try:
            if self._fn is None:
                self._compile()  # exec mode: only a script that needs it pays for it
            self._ctx.set_memory_limit(memory)
            self._ctx.set_max_stack_size(stack)
            answer = json.loads(self._fn(code))
        except _quickjs.JSException as e:
            text = str(e).partition("\n")[0]
            if "out of memory" in text or text.startswith("null"):
                raise MemoryError from None
            # Only a script QuickJS could not parse as JavaScript is stripped: one with
            # types, or one with a syntax error (an unclosed bracket nests to the end).
            raise StripError(
                f"the script is not JavaScript as it stands, and it nests too deeply for its "
                f"TypeScript types to be removed ({text}): look for a bracket that is never "
                "closed, and write simpler types, or none"
            ) from None
        if "error" in answer:
            raise StripError(str(answer["error"]), int(answer.get("line") or 0))
        return str(answer["code"])
