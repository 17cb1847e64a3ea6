"""Removing a script's TypeScript types, inside the confined process, before it runs.

Models read their tools as TypeScript declarations and often answer in TypeScript. The types
are removed here by Sucrase (see typescript.js for the subset), which keeps every line where
the model wrote it, so error lines stay the model's own. It runs in the script's own
QuickJS context before the script does: under the run's memory, stack and CPU bounds, with
nothing of the script run yet, so a hostile script can only fail its own run.

What it costs (2-core VM): compiling the bundle, 35-45 ms and about 1.5 MiB of heap, paid once
by the fork server (every child inherits it) or, in exec mode, only by a script that needs it;
the transform, about 0.4 ms for a short plain script and 1 ms for a short typed one. A script
with no ``<`` is compiled as JavaScript first and stripped only if that fails, so plain
JavaScript pays nothing. A script with a ``<`` is always stripped: ``f<Array>(x)`` is also
valid JavaScript, with another meaning.

The bundle is built by ``make install`` (it is not in the repository); without it scripts run
as JavaScript only, and a typed script fails with its syntax error and a note saying so.
"""

from __future__ import annotations

import json
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


def wanted(code: str) -> bool:
    """True when the script must be stripped before it is compiled at all (see above)."""
    return "<" in code


def install(ctx: Any) -> None:
    """Compile the bundle into ``ctx`` (a fork server does it once, before it forks)."""
    if BUNDLE is not None:
        ctx.eval(BUNDLE)


class Stripper:
    """The strip function of one context, taken off its globals before the script runs."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self._fn: Any = None
        self._take()

    @property
    def available(self) -> bool:
        return BUNDLE is not None

    def _take(self) -> None:
        fn = self._ctx.get(_GLOBAL)
        if fn is not None:
            # The script must not see it: it lives on here, out of the script's reach.
            self._ctx.eval(f"delete globalThis.{_GLOBAL}")
            self._fn = fn

    def strip(self, code: str) -> str:
        """``code`` without its types, line for line; raises :class:`StripError`."""
        if BUNDLE is None:
            raise StripError(MISSING_NOTE)
        try:
            if self._fn is None:
                install(self._ctx)  # exec mode: only a script that needs it pays for it
                self._take()
            answer = json.loads(self._fn(code))
        except _quickjs.JSException as e:
            text = str(e).partition("\n")[0]
            if "out of memory" in text or text.startswith("null"):
                raise MemoryError from None
            raise StripError(
                f"the script's types are nested too deeply to remove ({text}); write simpler "
                "types, or none"
            ) from None
        if "error" in answer:
            raise StripError(str(answer["error"]), int(answer.get("line") or 0))
        return str(answer["code"])
