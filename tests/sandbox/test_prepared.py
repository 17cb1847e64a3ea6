"""A prepared context (the prelude compiled before the script exists, as the fork server
does) runs every script exactly as a fresh one does."""

from __future__ import annotations

import pytest

from sandbox.protocol import Clock, FileInfo, Record, Script
from sandbox.runtime import Prepared, run_in_process

CASES = {
    "value": ("return { a: [1, 'x'], d: new Date().toISOString(), r: Math.random() }", []),
    "calls": (
        "const r = await tools.a({ x: 1 }); await Promise.all([tools.a({ x: r }), tools.b()])",
        [("a", {"x": 1}, 5)],
    ),
    "error lines": ("console.log('before');\nfunction f() {\n  null.y;\n}\nf();", []),
    "call-site TypeError": ("\n\nawait tools.a([1])", []),
    "syntax error": ("let x = ;\nreturn 1", []),
    "divergence": ("await tools.b({ z: 2 })", [("a", {"x": 1}, 5)]),
    "unknown tool": ("await tools.nope()", []),
    "files": ("return [files.list().length, await files.text('f.txt')]", []),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_prepared_matches_fresh(name: str) -> None:
    """The same script gives the same ran, fresh or on a prepared context."""
    code, records = CASES[name]

    def script() -> Script:
        return Script(
            id="p",
            code=code,
            tools=["a", "b"],
            records=[Record(name=n, arguments=a, result=r) for n, a, r in records],
            files=[FileInfo(id="f.txt", mime="text/plain", size=2)],
            clock=Clock(now_ms=1767225600000, seed=9),
        )

    def fetch(_id: str, offset: int, length: int) -> bytes:
        return b"hi"[offset : offset + length]

    fresh = run_in_process(script(), fetch)
    prepared = run_in_process(script(), fetch, Prepared())
    assert prepared.model_dump(exclude={"stats"}) == fresh.model_dump(exclude={"stats"})


def test_a_prepared_context_serves_one_run() -> None:
    """A second run given the same prepared context compiles its own, and still works."""
    prepared = Prepared()
    script = Script(id="p", code="return 2", clock=Clock(now_ms=0, seed=0))
    assert run_in_process(script, prepared=prepared).value == 2
    assert run_in_process(script, prepared=prepared).value == 2


def test_the_script_cannot_reach_the_prelude_or_host_functions() -> None:
    """The prepared prelude and the host functions are gone from the script's globals."""
    code = "return [typeof __cm_prelude, typeof __cm_call, typeof __cm_print]"
    ran = run_in_process(
        Script(id="p", code=code, clock=Clock(now_ms=0, seed=0)), prepared=Prepared()
    )
    assert ran.value == ["undefined", "undefined", "undefined"]
