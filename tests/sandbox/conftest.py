"""Helpers for the sandbox tests: build a Script in one line and run it in this process.

Import them as ``from tests.sandbox.conftest import run, script, rec``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import _quickjs

from sandbox import protocol, runtime
from sandbox.protocol import Clock, Limits, Ran, Record, Script
from sandbox.runtime import run_in_process

# 2026-01-01T00:00:00Z, the fixed clock of every test script unless a test says otherwise.
NOW_MS = 1_767_225_600_000
DAY_MS = 86_400_000
SEED = 20260101

TOOLS = ("list_prs", "get_reviews", "get_user", "search", "echo")

KiB = protocol.KiB
MiB = protocol.MiB


# What a script that only defines functions and calls none is told (of `main`, and how to
# call it), in either language.
NEVER_CALLED = (
    "the script defines `{0}` and never calls it, so none of its code ran: write its body as "
    "the script itself (a script is already the body of an async function: await works at its "
    "top level), or end the script with `{1}`"
)


def rec(name: str, arguments: dict[str, Any] | None = None, **answer: Any) -> Record:
    """One answered call: ``rec("echo", {"a": 1}, result=...)`` or ``..., error="msg"``."""
    return Record(name=name, arguments=arguments or {}, **answer)


def script(
    code: str,
    records: Iterable[Record] = (),
    tools: Sequence[str] = TOOLS,
    *,
    now_ms: int = NOW_MS,
    seed: int = SEED,
    id: str = "test",
    **limits: int,
) -> Script:
    """A Script with a fixed clock; keyword arguments other than these are limits."""
    return Script(
        id=id,
        code=code,
        records=list(records),
        tools=list(tools),
        clock=Clock(now_ms=now_ms, seed=seed),
        limits=Limits(**limits),
    )


def run(
    code: str,
    records: Iterable[Record] = (),
    tools: Sequence[str] = TOOLS,
    **kwargs: Any,
) -> Ran:
    """Run ``code`` in this process (no confinement) and return how the run ended."""
    return run_in_process(script(code, records, tools, **kwargs))


def value(code: str, records: Iterable[Record] = (), **kwargs: Any) -> Any:
    """The value a script that must finish returned."""
    ran = run(code, records, **kwargs)
    assert ran.outcome == "finished", ran.error
    return ran.value


def caught(code: str, records: Iterable[Record] = (), **kwargs: Any) -> tuple[str, str]:
    """Run ``code`` inside a try and return the ``(name, message)`` of what it threw."""
    wrapped = (
        "try {\n" + code + "\n} catch (e) { return [e.name, e.message]; }\nreturn ['none', '']"
    )
    name, message = value(wrapped, records, **kwargs)
    return name, message


def booted(source: Any = None) -> Any:
    """A QuickJS context after the boot and before any script: what lazy.js installs (Intl,
    URL, toLocaleString, localeCompare) compiled from the files ``source`` gives (by default
    the runtime's)."""
    ctx = _quickjs.Context()
    for name in runtime._HOST_FUNCTIONS:
        ctx.add_callable("__cm_" + name, lambda *args: None)
    ctx.add_callable("__cm_source", source or runtime._lazy_source)
    ctx.eval(runtime._BOOT)(0)
    return ctx
