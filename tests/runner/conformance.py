"""The conformance suite: what every ScriptRunner must do, as check functions on a Harness.

tests/runner/test_conformance.py runs each check against every kind registered in
conftest.py (``RUNNER_FACTORIES``, ``STANDIN_FACTORIES``). A check never depends on how a
runner gets its process, only on the interface: ``run(script, files, tenant=...) -> Step``,
``RunError`` only when a step cannot be taken now.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Any

import psutil

from runner import TEXT_BOUNDS, FileMissing, ScriptRunner, Step
from runner._conversation import wall_seconds
from sandbox.protocol import (
    PRINTED_HEAD,
    PRINTED_TAIL,
    REMEDIES,
    Clock,
    FileInfo,
    Limits,
    Record,
    Script,
)
from tests.runner.conftest import LIVE_RUNNERS, Harness, open_fds

Check = Callable[[Harness], None]

# 2026-01-15T00:00:00Z: the stale-PRs example's "now".
NOW_MS = 1_768_435_200_000
CLOCK = Clock(now_ms=NOW_MS, seed=7)

# The languages every check that runs a script runs in, from one table of cases: each case
# has its code in each language (CODE) and expects the same outcome of both, unless it says.
LANGUAGES = ("javascript", "python")

STALE_PRS_CODE = """\
const prs = await tools.github__list_prs({ repo: "acme/api", state: "open" });
const stale = prs.filter((pr) => Date.parse(pr.updated_at) < Date.now() - 14 * 864e5);
const reviews = await Promise.all(
  stale.map((pr) => tools.github__get_reviews({ number: pr.number })));
return stale.map((pr, i) => ({ number: pr.number, reviews: reviews[i].length }));
"""
STALE_PRS_PY = """\
import asyncio, datetime
prs = await tools.github__list_prs(repo="acme/api", state="open")
now = datetime.datetime.now(datetime.timezone.utc)
def updated(pr):
    return datetime.datetime.fromisoformat(pr["updated_at"].replace("Z", "+00:00"))
stale = [pr for pr in prs if updated(pr) < now - datetime.timedelta(days=14)]
reviews = await asyncio.gather(*[tools.github__get_reviews(number=pr["number"]) for pr in stale])
return [{"number": pr["number"], "reviews": len(r)} for pr, r in zip(stale, reviews)]
"""
LIST_PRS = {"repo": "acme/api", "state": "open"}
PRS = [
    {"number": 12, "updated_at": "2025-12-01T09:00:00Z"},  # 45 days old: stale
    {"number": 14, "updated_at": "2026-01-12T09:00:00Z"},  # 3 days old
    {"number": 15, "updated_at": "2025-12-24T09:00:00Z"},  # 22 days old: stale
]
REVIEWS = {12: [], 15: [{"state": "COMMENTED"}, {"state": "APPROVED"}]}


def script(
    code: str,
    *,
    records: list[Record] | None = None,
    tools: tuple[str, ...] = ("t",),
    limits: dict[str, int] | None = None,
    id: str = "s",
    language: str = "javascript",
) -> Script:
    return Script(
        id=id,
        language=language,  # type: ignore[arg-type]
        code=code,
        records=records or [],
        tools=list(tools),
        clock=CLOCK,
        limits=Limits(**(limits or {})),
    )


def assert_healthy(h: Harness, language: str = "javascript") -> None:
    """The runner still takes and finishes a step after whatever came before."""
    step = h.step(script("return 'still here'", id="healthy", language=language))
    assert step.outcome == "finished", step.error
    assert step.value == "still here"


def assert_limit(step: Step, name: str) -> None:
    """A failed step whose limit is ``name``, with a message that names it and the remedy."""
    assert step.outcome == "failed", step
    assert step.limit is not None, step.error
    assert step.limit.name == name, step.limit
    assert name in step.limit.message, step.limit.message
    assert step.limit.message.endswith(REMEDIES[name]), step.limit.message
    assert "[codemode.limits]" not in step.limit.message, step.limit.message
    assert step.error is not None and name in step.error.message


# ---- the protocol example ------------------------------------------------------------------


# case -> {language: code}: the same tools, records and limits, the same outcome.
CODE: dict[str, dict[str, str]] = {
    "stale_prs": {"javascript": STALE_PRS_CODE, "python": STALE_PRS_PY},
    "script_error": {
        "javascript": "const x = 1;\nnull.boom;\nreturn x",
        "python": "x = 1\nNone.boom\nreturn x",
    },
    "printed": {
        "javascript": "console.log('hello', 41 + 1); return [null]",
        "python": "print('hello', 41 + 1)\nreturn [None]",
    },
    "file_reads": {
        "javascript": """\
const a = await files.text("a.txt");
const big = await files.text("big.txt");
let gone;
try { await files.text("gone.txt") } catch (e) { gone = e.message }
return { a, big: big.length, tail: big.slice(-4), gone };""",
        "python": """\
a = await files.text("a.txt")
big = await files.text("big.txt")
gone = None
try:
    await files.text("gone.txt")
except Exception as e:
    gone = str(e)
return {"a": a, "big": len(big), "tail": big[-4:], "gone": gone}""",
    },
    "compute": {
        "javascript": "console.log('spun'); for (;;) {}",
        "python": "print('spun')\nwhile True:\n    pass",
    },
    "memory": {
        "javascript": "const a = []; for (;;) a.push(new Array(100000).fill(7));",
        "python": "a = []\nwhile True:\n    a.append([7] * 100000)",
    },
    "calls": {
        "javascript": "await Promise.all([1, 2, 3, 4, 5].map((i) => tools.t({ i })));",
        "python": "import asyncio\nawait asyncio.gather(*[tools.t(i=i) for i in [1, 2, 3, 4, 5]])",
    },
    "results": {"javascript": "return await tools.t({})", "python": "return await tools.t()"},
    "arguments": {
        "javascript": "await tools.t({ s: '%s' }); await tools.t({ s: '%s' });",
        "python": "await tools.t(s='%s')\nawait tools.t(s='%s')",
    },
    "call_arguments_caught": {
        "javascript": "try { await tools.t({ s: 'z'.repeat(100) }); } catch (e) { return e.message }",
        "python": "try:\n    await tools.t(s='z' * 100)\nexcept Exception as e:\n    return str(e)",
    },
    "call_arguments": {
        "javascript": "await tools.t({ s: 'z'.repeat(100) });",
        "python": "await tools.t(s='z' * 100)",
    },
    "step_arguments": {
        "javascript": "await Promise.all([1, 2, 3].map((i) => tools.t({ s: 'w'.repeat(40) + i })));",
        "python": (
            "import asyncio\n"
            "await asyncio.gather(*[tools.t(s='w' * 40 + str(i)) for i in [1, 2, 3]])"
        ),
    },
    "healthy": {"javascript": "return 'still here'", "python": "return 'still here'"},
    # Calls made in an order no sort of their names or arguments gives.
    "call_order": {
        "javascript": """\
await Promise.all([
  tools.u({ k: "b", n: 3 }), tools.t({ k: "c", n: 1 }), tools.u({ k: "a", n: 2 }),
  tools.t({ k: "a", n: 9 }),
]);""",
        "python": """\
import asyncio
await asyncio.gather(
    tools.u(k="b", n=3), tools.t(k="c", n=1), tools.u(k="a", n=2), tools.t(k="a", n=9)
)""",
    },
    # Lines of 40 characters: 3,000 of them (120,000) within what the sandbox keeps of
    # printed text, 5,000 (200,000) past it.
    "printed_lines": {
        "javascript": "for (let i = 0; i < %d; i++) console.log(String(i).padStart(39, '.'));",
        "python": "for i in range(%d):\n    print(str(i).rjust(39, '.'))",
    },
}
CALL_ORDER = [
    ("u", {"k": "b", "n": 3}),
    ("t", {"k": "c", "n": 1}),
    ("u", {"k": "a", "n": 2}),
    ("t", {"k": "a", "n": 9}),
]
# What differs between the languages: the name of a language's own error.
SCRIPT_ERROR_NAME = {"javascript": "TypeError", "python": "AttributeError"}


def case(name: str, language: str, **kw: Any) -> Script:
    """The script of case ``name`` in ``language``."""
    return script(CODE[name][language], language=language, **kw)


def check_stale_prs_example(h: Harness, language: str = "javascript") -> None:
    """The spec's example in three steps: one call, then two at once, then the value."""
    tools = ("github__list_prs", "github__get_reviews")
    first = h.step(case("stale_prs", language, tools=tools, id="stale-prs"))
    assert first.outcome == "calls", first.error
    asked = [(c.name, c.arguments) for c in first.calls]
    assert asked == [("github__list_prs", LIST_PRS)], f"the first step asked {asked}"

    records = [Record(name="github__list_prs", arguments=LIST_PRS, result=PRS)]
    second = h.step(case("stale_prs", language, tools=tools, records=records, id="stale-prs"))
    assert second.outcome == "calls", second.error
    asked = [(c.name, c.arguments) for c in second.calls]
    assert asked == [
        ("github__get_reviews", {"number": 12}),
        ("github__get_reviews", {"number": 15}),
    ], f"the second step asked {asked}: the calls the script made, in the order it made them"

    records += [
        Record(name="github__get_reviews", arguments={"number": n}, result=REVIEWS[n])
        for n in (12, 15)
    ]
    third = h.step(case("stale_prs", language, tools=tools, records=records, id="stale-prs"))
    assert third.outcome == "finished", third.error
    want = [{"number": 12, "reviews": 0}, {"number": 15, "reviews": 2}]
    assert third.value == want, f"the script returned {third.value!r}, not {want!r}"
    assert third.process is None or third.process.wall_ms > 0


def check_script_error(h: Harness, language: str = "javascript") -> None:
    """A script that throws is a failed step naming the error and the script's own line."""
    step = h.step(case("script_error", language))
    assert step.outcome == "failed"
    assert step.error is not None and step.error.name == SCRIPT_ERROR_NAME[language]
    assert [line.line for line in step.error.lines] == [2]
    assert step.limit is None


def check_printed_and_stats(h: Harness, language: str = "javascript") -> None:
    """What a script prints comes back, and so do its stats."""
    step = h.step(case("printed", language))
    assert step.outcome == "finished", step.error
    assert step.printed == "hello 42\n", f"printed {step.printed!r}, not 'hello 42\\n'"
    assert step.returned and step.value == [None], f"returned {step.value!r}, not [None]"


def check_printed_text_whole(h: Harness, language: str = "javascript") -> None:
    """Printed text within what the sandbox keeps (PRINTED_HEAD and PRINTED_TAIL) comes back
    whole; past it, its head and its tail come back, and ``printed_bytes`` counts it all."""
    for lines in (3000, 5000):
        code = CODE["printed_lines"][language] % lines
        step = h.step(script(code, language=language, id=f"printed-{lines}"))
        assert step.outcome == "finished", step.error
        text = "".join(str(i).rjust(39, ".") + "\n" for i in range(lines))
        assert step.printed_bytes == len(text), (
            f"printed_bytes is {step.printed_bytes}, but the script printed {len(text)} bytes"
        )
        if len(text) <= PRINTED_HEAD + PRINTED_TAIL:
            assert step.printed == text, (
                f"{len(text)} characters printed came back as {len(step.printed)}: printed "
                f"text within {PRINTED_HEAD + PRINTED_TAIL} bytes comes back whole"
            )
            continue
        head, tail = text[: PRINTED_HEAD - 100], text[-(PRINTED_TAIL - 100) :]
        assert step.printed.startswith(head) and step.printed.endswith(tail), (
            f"{len(text)} characters printed came back as {len(step.printed)} that are not "
            f"their first {PRINTED_HEAD} and last {PRINTED_TAIL} bytes (less a line)"
        )
        assert len(step.printed) < len(text), "printed text past the bound came back whole"


def check_calls_in_call_order(h: Harness, language: str = "javascript") -> None:
    """A step's calls are the script's, in the order it made them (the log's order, by which
    a replay matches records to calls), not sorted by name or arguments."""
    step = h.step(case("call_order", language, tools=("t", "u"), id="call-order"))
    assert step.outcome == "calls", step.error
    asked = [(c.name, c.arguments) for c in step.calls]
    assert asked == CALL_ORDER, f"the step's calls are {asked}, not in call order {CALL_ORDER}"


class _Files:
    """A FileReader over a dict; a name in ``gone`` is missing when read."""

    def __init__(self, blobs: dict[str, bytes], gone: set[str]) -> None:
        self.blobs = blobs
        self.gone = gone
        self.reads = 0

    async def read(self, file_id: str, offset: int, length: int) -> bytes:
        self.reads += 1
        if file_id in self.gone:
            raise FileMissing("deleted")
        return self.blobs[file_id][offset : offset + length]


def check_file_reads(h: Harness, language: str = "javascript") -> None:
    """File bytes come through the runner's read exchange, in pieces; a gone file throws."""
    big = b"0123456789abcdef" * 40_000  # 640,000 bytes: several reads
    reader = _Files({"a.txt": b"hello files", "big.txt": big}, gone={"gone.txt"})
    infos = [
        FileInfo(id="a.txt", mime="text/plain", size=11),
        FileInfo(id="big.txt", mime="text/plain", size=len(big)),
        FileInfo(id="gone.txt", mime="text/plain", size=3),
    ]
    step = h.step(case("file_reads", language).model_copy(update={"files": infos}), reader)
    assert step.outcome == "finished", step.error
    assert step.value == {
        "a": "hello files",
        "big": len(big),
        "tail": "cdef",
        "gone": "gone.txt is gone: deleted",
    }
    assert reader.reads >= 3
    assert step.stats.file_bytes == 11 + len(big)
    assert step.process is None or step.process.file_bytes == 11 + len(big)


# ---- limits ----------------------------------------------------------------------------------


def check_compute_limit(h: Harness, language: str = "javascript") -> None:
    """compute_ms stops a run that spins, which fails with what it printed before."""
    # 500 ms: a hard stop 40 ms behind the soft one that keeps the printed text.
    step = h.step(case("compute", language, limits={"compute_ms": 500}))
    assert_limit(step, "compute_ms")
    message = step.limit.message if step.limit is not None else ""
    # The whole number: "1,500 ms" (a runner that adds a margin) holds "500 ms".
    assert re.search(r"(?<![\d,.])500 ms", message), (
        f"a step under compute_ms 500 met another compute_ms: {message}"
    )
    assert step.printed == "spun\n", repr(step.printed)
    assert_healthy(h, language)


def check_total_compute_limit(h: Harness, language: str = "javascript") -> None:
    """What is left of the script's total_compute_ms (version 3's compute_left_ms) ends a
    run that compute_ms would let go on, and the step names that limit (and says what the
    run printed)."""
    limits = {"compute_ms": 2000, "compute_left_ms": 500}
    step = h.step(case("compute", language, limits=limits))
    assert_limit(step, "total_compute_ms")
    assert step.printed == "spun\n", repr(step.printed)
    assert step.process is None or step.process.cpu_ms < 1000, step.process
    assert_healthy(h, language)


def check_memory_limit(h: Harness, language: str = "javascript") -> None:
    step = h.step(case("memory", language, limits={"memory": 32 * 1024 * 1024}))
    assert_limit(step, "memory")
    message = step.limit.message if step.limit is not None else ""
    assert re.search(r"(?<![\d,.])32 MiB", message), (
        f"a step under a memory limit of 32 MiB met another: {message}"
    )
    assert_healthy(h, language)


# Heaps that fill in other ways than the memory case's arrays: QuickJS may then throw null,
# as a script may itself.
FILLS = [
    "const m = new Map(); for (let i = 0; ; i++) m.set(i, { i });",
    "let s = 'x'; const keep = []; for (;;) { s += s.length; keep.push(s.slice(1)); }",
    "const o = {}; for (let i = 0; ; i++) o['k' + i] = [i];",
]


def check_null_thrown(h: Harness) -> None:
    """A JavaScript script's own `throw null` fails as thrown, not as the memory limit;
    heaps that fill still end on the memory limit, though QuickJS then throws null (it
    cannot allocate even its out-of-memory error)."""
    for code in ("throw null;", "await null;\nthrow null;", "await Promise.reject(null);"):
        step = h.step(script(code))
        assert step.outcome == "failed" and step.limit is None, (code, step.limit)
        assert step.error is not None and step.error.name == "Uncaught", (code, step.error)
        assert step.error.message == "null"
    for code in FILLS:
        assert_limit(h.step(script(code, limits={"memory": 16 * 1024 * 1024})), "memory")
    assert_healthy(h, "javascript")


# A script that replaces built-ins that intl.js and url.js take, then asks Intl and URL.
REPLACES_BUILTINS = """\
Object.keys = () => [];
Reflect.apply = () => "replaced";
globalThis.WeakMap = class { get() { return 1; } set() { return this; } };
Set.prototype.add = function () { return this; };
globalThis.Symbol = {};
return [
  new Intl.NumberFormat("en-US", { style: "currency", currency: "EUR" }).format(1234.5),
  new Date(0).toLocaleDateString("en-US", { weekday: "long", month: "long" }),
  Object.prototype.toString.call(Intl),
  new URL("http://a.b/c?q=1 2").href,
];
"""


def check_replaced_builtins(h: Harness) -> None:
    """Intl and URL answer as the engine's own for a JavaScript script that replaced the
    built-ins they take before its first use of them, in a process of its own as in one a
    fork server prepared (an exec'd process compiled them at that first use, with the
    script's: `new Intl.NumberFormat()` threw 'not a function')."""
    step = h.step(script(REPLACES_BUILTINS))
    assert step.outcome == "finished", step.error
    assert step.value == ["€1,234.50", "January Thursday", "[object Intl]", "http://a.b/c?q=1%202"]


# What the boot made reads as native, and lists the prelude fills take no setter of the
# script's: both made with the world, in a fork server before it forks or in a process's own.
NATIVE_TEXT = """\
Object.defineProperty(Array.prototype, 0, { set(v) {}, get() { return "trap"; } });
Array.prototype.push = function () { return 0; };
console.table([{ a: 1 }]);
return [String(console.log), String(tools.t), String(URL), Object.keys(tools), String(() => 1)];
"""


def check_native_text(h: Harness) -> None:
    """The engine's functions read as QuickJS's own built-ins (`String(console.log)` gave the
    prelude's source), the script's as written; Object.keys(tools) and console.table take no
    setter or method the script put on Array.prototype, in every mode."""
    step = h.step(script(NATIVE_TEXT))
    assert step.outcome == "finished", step.error
    native = "() {\n    [native code]\n}"
    assert step.value == [f"function {n}{native}" for n in ("log", "t", "URL")] + [["t"], "() => 1"]
    assert "│ 0       │ 1 │" in step.printed


def check_calls_limit(h: Harness, language: str = "javascript") -> None:
    step = h.step(case("calls", language, limits={"calls": 3}))
    assert_limit(step, "calls")
    assert_healthy(h, language)


def check_results_limit(h: Harness, language: str = "javascript") -> None:
    records = [Record(name="t", arguments={}, result="x" * 200)]
    step = h.step(case("results", language, records=records, limits={"results": 100}))
    assert_limit(step, "results")
    assert_healthy(h, language)


def check_arguments_limit(h: Harness, language: str = "javascript") -> None:
    big = "y" * 60
    records = [Record(name="t", arguments={"s": big}, result=1)]
    code = CODE["arguments"][language] % (big, big)
    step = h.step(script(code, records=records, limits={"arguments": 100}, language=language))
    assert_limit(step, "arguments")
    assert_healthy(h, language)


def check_call_arguments_limit(h: Harness, language: str = "javascript") -> None:
    """Too-large arguments throw at the call site, where the script can catch them."""
    step = h.step(case("call_arguments_caught", language, limits={"call_arguments": 50}))
    assert step.outcome == "finished", step.error
    said = step.value
    assert isinstance(said, str) and "call_arguments" in said, (
        f"a call past call_arguments 50 did not throw it at the call site: returned {said!r}"
    )
    assert said.endswith(REMEDIES["call_arguments"]), said
    uncaught = h.step(case("call_arguments", language, limits={"call_arguments": 50}))
    assert uncaught.outcome == "failed", f"a call past call_arguments 50: {uncaught}"
    error = uncaught.error
    assert error is not None and "call_arguments" in error.message, f"it failed with {error}"
    assert_healthy(h, language)


def check_step_arguments_limit(h: Harness, language: str = "javascript") -> None:
    step = h.step(case("step_arguments", language, limits={"step_arguments": 100}))
    assert_limit(step, "step_arguments")
    assert_healthy(h, language)


# ---- crashes and malformed output (the stand-in sandbox) -----------------------------------


def _standin(h: Harness, behaviour: str, **limits: int) -> Step:
    return h.step(script(f"// standin: {behaviour}\nreturn 1", limits=limits or None))


def check_garbage(h: Harness) -> None:
    step = _standin(h, "garbage")
    assert step.outcome == "failed" and step.error is not None
    assert step.error.name == "ProtocolError"
    assert "not JSON" in step.error.message
    assert_healthy(h)


def check_wrong_message(h: Harness) -> None:
    step = _standin(h, "wrong_kind")
    assert step.outcome == "failed" and step.error is not None
    assert step.error.name == "ProtocolError"
    assert "'ready' message where ran or read was expected" in step.error.message
    assert_healthy(h)


def check_endless_line(h: Harness) -> None:
    # step_arguments bounds the `ran` line: 2 * 1 KiB + 4 MiB here.
    step = _standin(h, "endless", step_arguments=1024)
    assert step.outcome == "failed" and step.error is not None
    assert step.error.name == "ProtocolError"
    assert "over the bound" in step.error.message
    assert_healthy(h)


def check_dies_mid_line(h: Harness) -> None:
    step = _standin(h, "midline")
    assert step.outcome == "failed" and step.error is not None
    assert "in the middle of a line" in step.error.message
    assert_healthy(h)


def check_exits_without_ran(h: Harness) -> None:
    step = _standin(h, "no_ran")
    assert step.outcome == "failed" and step.error is not None
    assert step.error.name == "SandboxCrash"
    assert "without reporting how the run ended" in step.error.message
    assert_healthy(h)


def check_stderr_named(h: Harness) -> None:
    """A process that dies saying why on stderr: the step's error quotes it."""
    step = _standin(h, "stderr_exit")
    assert step.outcome == "failed" and step.error is not None
    assert step.error.name == "SandboxCrash"
    assert "deliberate failure" in step.error.message
    assert_healthy(h)


def check_segfault(h: Harness) -> None:
    step = _standin(h, "segv")
    assert step.outcome == "failed" and step.error is not None
    assert step.error.name == "SandboxCrash"
    assert "SIGSEGV" in step.error.message
    assert "most likely its C stack overflowed" in step.error.message
    assert_healthy(h)


def check_hang(h: Harness) -> None:
    """A process that neither computes nor answers is stopped at its wall-clock deadline."""
    step = _standin(h, "hang", compute_ms=100)
    assert_limit(step, "compute_ms")
    assert f"deadline of wall time ({wall_seconds(100):,.1f} s" in step.error.message  # type: ignore[union-attr]
    assert_healthy(h)


# ---- concurrency and cleanup -----------------------------------------------------------------


def _numbered(i: int) -> Script:
    """Even i: a recorded call, finished with 2i. Odd i: a new call asking for {i}."""
    code = f"const r = await tools.t({{ i: {i} }}); return r.v * 2"
    records = [Record(name="t", arguments={"i": i}, result={"v": i})] if i % 2 == 0 else []
    return script(code, records=records, id=f"n{i}")


def _assert_numbered(i: int, step: Step) -> None:
    if i % 2 == 0:
        assert step.outcome == "finished", step.error
        assert step.value == 2 * i
    else:
        assert step.outcome == "calls", step.error
        assert [(c.name, c.arguments) for c in step.calls] == [("t", {"i": i})]


def check_concurrency(h: Harness, n: int = 12) -> None:
    """N steps at once, from several tenants, all come back right and unmixed."""

    async def all_at_once() -> list[Step]:
        return await asyncio.gather(
            *(h.runner.run(_numbered(i), tenant=f"tenant{i % 3}") for i in range(n))
        )

    for i, step in enumerate(h.run(all_at_once())):
        _assert_numbered(i, step)


async def _many(runner: ScriptRunner, steps: int, concurrency: int) -> None:
    async def worker(start: int) -> None:
        for i in range(start, steps, concurrency):
            _assert_numbered(i, await runner.run(_numbered(i)))

    await asyncio.gather(*(worker(k) for k in range(concurrency)))


def zombies() -> list[Any]:
    return [
        p for p in psutil.Process().children(recursive=True) if p.status() == psutil.STATUS_ZOMBIE
    ]


def check_cleanup(h: Harness, steps: int) -> None:
    """After ``steps`` steps on a fresh runner and its close: no leaked fd, no zombie.

    It runs on an event loop of its own, so the module's runner (whose loop is not running
    meanwhile) cannot open or close fds while this counts them.
    """
    before = open_fds()
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}

    async def go() -> None:
        runner = h.factory()
        async with runner:
            await _many(runner, steps, concurrency=4)

    with asyncio.Runner() as loop:
        loop.run(go())
    _assert_nothing_left(before, children_before)


def _assert_nothing_left(fds_before: dict[int, str], children_before: set[int]) -> None:
    """No fd, zombie or child process more than before a runner ran and closed. Processes
    killed at the end are reaped, and their pipes closed, a moment later: wait (a bounded
    while) for that, then hold the runner to nothing left."""
    import gc
    import time

    settle = time.monotonic() + 10
    while (open_fds() != fds_before or zombies()) and time.monotonic() < settle:
        gc.collect()
        time.sleep(0.05)
    now = open_fds()
    opened = {fd: what for fd, what in now.items() if fds_before.get(fd) != what}
    closed = {fd: what for fd, what in fds_before.items() if now.get(fd) != what}
    assert not opened and not closed, (
        f"fds left open after close: {opened}; fds the runner closed that it did not open: {closed}"
    )
    assert zombies() == [], f"child processes left unreaped after close: {zombies()}"
    left = [
        p
        for p in psutil.Process().children(recursive=True)
        if p.pid not in children_before and p.ppid() not in children_before
    ]
    assert left == [], f"processes left after close: {left}"


def check_cancelled_cleanup(h: Harness) -> None:
    """Steps cancelled while they run (the engine gave them up; for a remote runner, its
    connection to the service dropped), then the runner's close: nothing is left (no fd,
    zombie or child). A runner service cancelled such a step's run a second time as it
    reaped its process, and its pipes stayed open."""
    before = open_fds()
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    infos = [FileInfo(id="f.txt", mime="text/plain", size=3)]
    code = script('return await files.text("f.txt")').model_copy(update={"files": infos})

    async def go() -> None:
        runner = h.factory()
        async with runner:
            for k in range(3):
                reader = _Served(3, delay=3600)  # a read never answered: the step runs
                step = code.model_copy(update={"id": f"cc{k}"})
                running = asyncio.create_task(runner.run(step, reader))
                while not reader.reads:
                    assert not running.done(), running.result()
                    await asyncio.sleep(0.01)
                running.cancel()
                await asyncio.wait({running})
            _assert_numbered(0, await runner.run(_numbered(0)))

    with asyncio.Runner() as loop:
        loop.run(go())
    _assert_nothing_left(before, children_before)


# ---- live steps --------------------------------------------------------------------------

# Scripts whose printed text, calls or value depend on when calls settle (see
# tests/sandbox/test_live.py), and the spec's example.
LIVE_CORPUS = {
    "stale_prs": (STALE_PRS_CODE, ("github__list_prs", "github__get_reviews")),
    "stale_prs_python": (STALE_PRS_PY, ("github__list_prs", "github__get_reviews")),
    "interleaved_python": (
        """\
import asyncio
a = tools.t(n=1)
async def slow():
    for i in range(3):
        await asyncio.sleep(0)
    print("slow")
r, _, _ = await asyncio.gather(tools.t(q="x"), slow(), a)
try:
    await tools.t(fail=True)
except Exception as e:
    print(str(e), e.tool)
return [r, await tools.t(n=2)]""",
        ("t",),
    ),
    "uncaught_python": ("print('x')\nawait tools.t(a=1)\nawait tools.t(fail=1)", ("t",)),
    # Failures nothing awaited: each is reported when the run ends, in the order they
    # failed, which a live run and a replay must agree on.
    "unawaited_python": (
        """\
import asyncio
async def work(n):
    return await tools.t(n=n, fail=n == 2)
t = asyncio.create_task(work(2))
tools.t(fire=1, fail=True)
g = asyncio.gather(tools.t(q=1, fail=True), work(1))
a = await tools.t(n=0)
print("got", a, t)
tools.t(late=True, fail=True)
return 'done'""",
        ("t",),
    ),
    # What a script sets for its whole run (a redirected sys.stdout, warnings' filters and a
    # catch_warnings that records) holds across its calls, live as in one replayed pass.
    "run_state_python": (
        """\
import contextlib, io, warnings
buf = io.StringIO()
warnings.simplefilter("ignore")
with contextlib.redirect_stdout(buf):
    print("before")
    a = await tools.t(n=1)
    print("after", a["echo"]["n"])
warnings.warn("hidden")
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    await tools.t(n=2)
    warnings.warn("kept")
warnings.resetwarnings()
warnings.filterwarnings("module")
for i in range(2):
    warnings.warn(f"once {i % 1}")
    await tools.t(i=i)
print("captured", repr(buf.getvalue()))
return [str(w.message) for w in seen]""",
        ("t",),
    ),
    # A script's loggers, configured once and logging across its calls.
    "logging_python": (
        """\
import logging
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s:%(lineno)d %(message)s")
log = logging.getLogger("sync")
for i in range(3):
    r = await tools.t(i=i)
    log.info("got %s", r["echo"])
try:
    await tools.t(fail=True)
except Exception:
    log.exception("failed")
return ["logged"]""",
        ("t",),
    ),
    # asyncio's tasks, groups, locks and queues: their order, and that of the sets
    # asyncio.wait returns, must be the same live and replayed.
    "concurrency_python": (
        """\
import asyncio
sem = asyncio.Semaphore(2)
async def limited(i):
    async with sem:
        return (await tools.t(i=i))["echo"]["i"]
async with asyncio.TaskGroup() as tg:
    group = [tg.create_task(limited(i)) for i in range(4)]
done, _ = await asyncio.wait([asyncio.create_task(tools.t(k=k)) for k in range(6)])
again = [await tools.t(then=d.result()["echo"]["k"]) for d in done]
q = asyncio.Queue()
for i in range(3):
    q.put_nowait(i)
async def worker():
    while True:
        i = await q.get()
        print("got", i, (await tools.t(q=i))["echo"])
        q.task_done()
workers = [asyncio.create_task(worker()) for _ in range(2)]
await q.join()
for w in workers:
    w.cancel()
first = [await c for c in asyncio.as_completed([tools.t(c=1), tools.t(c=2)])]
try:
    async with asyncio.TaskGroup() as tg:
        tg.create_task(tools.t(fail=True))
        await tools.t(body=1)
except* ToolError as e:
    print("group", len(e.exceptions))
return [[t.result() for t in group], [a["echo"] for a in again], first]""",
        ("t",),
    ),
    "interleaved": (
        """
        const a = tools.t({ n: 1 });
        a.then(() => console.log("a settled"));
        Promise.resolve().then(() => console.log("microtask"));
        async function slow() { for (let i = 0; i < 3; i++) await null; console.log("slow"); }
        const [r] = await Promise.all([tools.t({ q: "x" }), slow(), a]);
        try { await tools.t({ fail: true }); } catch (e) { console.log(e.message, e.tool); }
        return [r, await tools.t({ n: 2 })];""",
        ("t",),
    ),
    "uncaught": (
        "console.log('x');\nawait tools.t({ a: 1 });\nawait tools.t({ fail: 1 });",
        ("t",),
    ),
    # Promises rejected with nothing to handle them, across segments (one handled only in a
    # later one): the lines a run's end gives must be the same live and replayed.
    "unhandled": (
        """
        async function main(n) { await tools.t({ n }); throw new Error("main " + n); }
        main(1);
        const late = main(2);
        tools.t({ fire: 1, fail: true }).then(() => 0);
        await tools.t({ n: 3 });
        late.catch((e) => console.log("caught", e.message));
        Promise.reject("text");
        await tools.t({ n: 4 });
        return "done";""",
        ("t",),
    ),
    # The seeded generator goes on across a live run's segments as a replay draws it again:
    # the calls' arguments carry its values, so a live run and a replay must ask the same.
    "seeded": (
        """
        const id = crypto.randomUUID();
        const first = await tools.t({ id, r: Math.random() });
        const bytes = Array.from(crypto.getRandomValues(new Uint8Array(4)));
        console.log(id, bytes.join(","), new Date().toISOString());
        const q = new URLSearchParams({ a: "b c", n: Math.random() }).toString();
        const second = await tools.t({ id: crypto.randomUUID(), q });
        return [structuredClone(first), second, crypto.randomUUID()];""",
        ("t",),
    ),
}


def _answer(call: Any) -> Record:
    if call.arguments.get("fail"):
        return Record(name=call.name, arguments=call.arguments, error=f"{call.name} refused")
    if call.name == "github__list_prs":
        return Record(name=call.name, arguments=call.arguments, result=PRS)
    if call.name == "github__get_reviews":
        return Record(
            name=call.name, arguments=call.arguments, result=REVIEWS[call.arguments["number"]]
        )
    return Record(name=call.name, arguments=call.arguments, result={"echo": call.arguments})


def _outcome(step: Step) -> bytes:
    body = step.model_dump(mode="json", exclude_unset=True, exclude={"stats", "process", "live"})
    return json.dumps(body, sort_keys=True).encode()


def _first_difference(name: str, lived: list[bytes], replayed: list[bytes]) -> str:
    """Where a script's live steps first differ from its replayed ones, shown."""
    for i, (a, b) in enumerate(zip(lived, replayed, strict=False)):
        if a != b:
            return f"{name}: step {i + 1} live was {a.decode()}, replayed {b.decode()}"
    return f"{name}: {len(lived)} steps live, {len(replayed)} replayed"


def check_live_agrees_with_replay(h: Harness) -> None:
    """Each script of the live corpus, run live (its process resumed with each step's
    results) and by replay: byte-identical steps (value, printed, error, calls, shown);
    afterwards the runner keeps no live process. A kind that keeps no process (exec) runs
    each script's first step live and by replay: it keeps none, and the two agree (its later
    steps are replays, live or not, which the rest of the suite runs)."""

    async def go() -> None:
        for name, (code, tools) in LIVE_CORPUS.items():
            language = "python" if name.endswith("_python") else "javascript"
            base = script(code, tools=tools, id=f"live-{name}", language=language)
            if h.kind not in LIVE_RUNNERS:
                # A kind that keeps no process replays each step, live or not (exec: 300 ms
                # a step here): a first step asked live says so and is the replayed one.
                step = await h.runner.run(base, live=True)
                assert step.live is None, (h.kind, name)
                first = [_outcome(step)]
                replayed_first = [_outcome(await h.runner.run(base))]
                assert first == replayed_first, _first_difference(name, first, replayed_first)
                continue
            replayed: list[bytes] = []
            records: list[Record] = []
            while True:
                step = await h.runner.run(base.model_copy(update={"records": list(records)}))
                replayed.append(_outcome(step))
                if step.outcome != "calls":
                    break
                records += [_answer(c) for c in step.calls]
            lived: list[bytes] = []
            step = await h.runner.run(base, live=True)
            while True:
                lived.append(_outcome(step))
                if step.outcome != "calls":
                    break
                # The kinds that keep processes keep every one here (nothing evicts them).
                assert step.live is not None, (h.kind, name)
                step = await step.live.resume([_answer(c) for c in step.calls])
            assert lived == replayed, _first_difference(name, lived, replayed)
        assert getattr(h.runner, "live_runs", 0) == 0

    h.run(go())


def check_live_cleanup(h: Harness) -> None:
    """Live processes closed, resumed to the end, dropped without close, or left to the
    runner's close: none is left afterwards (no fd, zombie or child)."""
    before = open_fds()
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    code = "await tools.t({ a: 1 }); await tools.t({ a: 2 }); return 1"

    async def go() -> None:
        runner = h.factory()
        async with runner:
            steps = [await runner.run(script(code, id=f"lc{k}"), live=True) for k in range(6)]
            for k, step in enumerate(steps):
                if step.live is None:
                    continue
                if k % 3 == 0:
                    await step.live.close()
                elif k % 3 == 1:
                    nxt = await step.live.resume([_answer(c) for c in step.calls])
                    if nxt.live is not None:
                        await nxt.live.resume([_answer(c) for c in nxt.calls])
            del steps[1::3]  # some dropped without close; the rest left to aclose
            import gc

            gc.collect()

    with asyncio.Runner() as loop:
        loop.run(go())
    _assert_nothing_left(before, children_before)


# ---- lying processes (the stand-in sandbox speaks the protocol but not the truth) -----------


def _lie(h: Harness, ran: dict[str, Any], **limits: int) -> Step:
    """A step whose process reports ``ran`` (tools ``t`` and ``u``; one file, ``f.txt``)."""
    code = f"// standin: ran {json.dumps(ran)}\nreturn 1"
    base = script(code, tools=("t", "u"), limits=limits or None)
    records = [Record(name="t", arguments={}, result=1)]
    files = [FileInfo(id="f.txt", mime="text/plain", size=10)]
    return h.step(base.model_copy(update={"records": records, "files": files}))


def assert_protocol_fault(step: Step, *words: str) -> None:
    """A failed step naming a protocol fault (and ``words``), with its strings bounded."""
    assert step.outcome == "failed", step
    assert step.error is not None and step.error.name == "ProtocolError", step.error
    assert "broke the protocol" in step.error.message, step.error.message
    for word in words:
        assert word in step.error.message, step.error.message
    assert len(step.error.message) < 2 * TEXT_BOUNDS["message"]


CALL = {"name": "t", "arguments": {}}
# Each: what the process claims, the limits it runs under, words the step's error must name.
LIES: dict[str, tuple[dict[str, Any], dict[str, int], tuple[str, ...]]] = {
    "negative_cpu": (
        {"outcome": "finished", "value": 1, "stats": {"cpu_ms": -1e9}},
        {},
        ("stats.cpu_ms",),
    ),
    "negative_file_bytes": (
        {"outcome": "finished", "value": 1, "stats": {"file_bytes": -(10**12)}},
        {},
        ("stats.file_bytes",),
    ),
    "unknown_tool": (
        {"outcome": "calls", "calls": [{"name": "rm_rf", "arguments": {}}]},
        {},
        ("tools.rm_rf", "not a tool"),
    ),
    "too_many_calls": ({"outcome": "calls", "calls": [CALL, CALL]}, {"calls": 2}, ("calls = 2",)),
    "call_arguments": (
        {"outcome": "calls", "calls": [{"name": "t", "arguments": {"s": "x" * 200}}]},
        {"call_arguments": 100},
        ("call_arguments = 100",),
    ),
    "step_arguments": (
        {"outcome": "calls", "calls": [{"name": "t", "arguments": {"s": "x" * 60}}] * 3},
        {"step_arguments": 100},
        ("step_arguments = 100",),
    ),
    "shown_unknown_file": (
        {"outcome": "finished", "shown": ["/etc/passwd"]},
        {},
        ("'/etc/passwd'", "not a file"),
    ),
    "unknown_limit": (
        {
            "outcome": "failed",
            "error": {"name": "LimitError", "message": "m"},
            "limit": {"name": "patience", "message": "m"},
        },
        {},
        ("'patience'",),
    ),
    "shown_too_many": ({"outcome": "finished", "shown": ["f.txt"]}, {"shown_files": 0}, ()),
    "printed_over_bound": ({"outcome": "finished", "printed": "p" * 300_000}, {}, ("printed",)),
    "negative_printed_bytes": ({"outcome": "finished", "printed_bytes": -1}, {}, ("printed",)),
    "value_over_bound": ({"outcome": "finished", "value": "v" * 300_000}, {}, ("value",)),
    "value_text_over_bound": (
        {"outcome": "finished", "value_text": "v" * 300_000},
        {},
        ("value",),
    ),
}


def check_lie(h: Harness, lie: str) -> None:
    """A ``ran`` that breaks what the sandbox enforces is a protocol fault, not a result."""
    ran, limits, words = LIES[lie]
    assert_protocol_fault(_lie(h, ran, **limits), *words)
    assert_healthy(h)


def check_forged_strings(h: Harness) -> None:
    """A 12 MB tool name and a 16 MB error message come back cut to their bounds."""
    step = _standin(h, "big_name")
    assert_protocol_fault(step, "not a tool")
    step = _standin(h, "big_error")
    assert step.outcome == "failed" and step.error is not None
    assert len(step.error.name) <= TEXT_BOUNDS["name"] + 100
    assert len(step.error.message) <= TEXT_BOUNDS["message"] + 100
    assert step.error.message.startswith("mmm") and "characters cut" in step.error.message
    assert_healthy(h)


def check_deep_data(h: Harness) -> None:
    """Data nested past what JSON encoders take is a protocol fault, never an exception."""
    assert_protocol_fault(_standin(h, "deep_value"))
    assert_protocol_fault(_standin(h, "deep_arguments"))
    assert_healthy(h)


class _Served:
    """A FileReader over one file of ``size`` bytes that counts what it served.

    ``delay`` seconds pass before each answer, as with a slow store.
    """

    def __init__(self, size: int, delay: float = 0.0) -> None:
        self.size = size
        self.delay = delay
        self.reads = 0
        self.served = 0

    async def read(self, file_id: str, offset: int, length: int) -> bytes:
        self.reads += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        data = b"r" * max(0, min(length, self.size - offset))
        self.served += len(data)
        return data


def _reading(h: Harness, behaviour: str, reader: _Served, **limits: int) -> Step:
    base = script(f"// standin: {behaviour}\nreturn 1", limits=limits)
    files = [FileInfo(id="f.bin", mime="application/octet-stream", size=reader.size)]
    return h.step(base.model_copy(update={"files": files}), reader)


def check_reads_stop_at_file_bytes(h: Harness) -> None:
    """Reads stop at file_bytes; a process that keeps asking is ended on that limit."""
    budget = 1024 * 1024
    reader = _Served(64 * budget)
    step = _reading(h, "read_flood", reader, file_bytes=budget)
    assert_limit(step, "file_bytes")
    assert "kept asking" in step.error.message  # type: ignore[union-attr]
    assert reader.served <= budget, (
        f"the runner served {reader.served:,} bytes of reads under file_bytes {budget:,}"
    )
    assert step.process is not None and step.process.file_bytes == reader.served, (
        f"the runner served {reader.served:,} bytes and measured {step.process}"
    )
    assert_healthy(h)


def check_reads_do_not_extend_the_deadline(h: Harness) -> None:
    """Time spent on reads counts against the wall deadline (1.3 s here)."""
    reader = _Served(1000, delay=0.1)  # 40 reads would take 4 s
    step = _reading(h, "read_slow", reader, compute_ms=100)
    assert_limit(step, "compute_ms")
    assert reader.reads < 40, reader.reads
    assert_healthy(h)


def check_a_hanging_store_meets_the_deadline(h: Harness) -> None:
    """A file store that never answers a read cannot hold the step past its deadline: the
    wait for the store counts against it like any other wall time (1.3 s here)."""
    reader = _Served(1000, delay=3600)
    step = _reading(h, "read_slow", reader, compute_ms=100)
    assert_limit(step, "compute_ms")
    assert "deadline" in step.error.message  # type: ignore[union-attr]
    assert reader.reads == 1
    assert_healthy(h)


def check_empty_reads_end_the_step(h: Harness) -> None:
    """A read of no bytes (past the end of the file) is a protocol fault, not a free loop."""
    reader = _Served(1000)
    step = _reading(h, "read_empty", reader)
    assert_protocol_fault(step, "a read of no bytes")
    assert reader.reads == 0
    assert_healthy(h)


def check_a_deaf_reader_meets_the_deadline(h: Harness) -> None:
    """A process that asks for bytes and never reads them cannot stall the runner's write
    past the deadline."""
    reader = _Served(8 * 1024 * 1024)
    step = _reading(h, "read_deaf", reader, compute_ms=100)
    assert_limit(step, "compute_ms")
    assert_healthy(h)
