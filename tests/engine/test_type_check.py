"""The type check: every new script is checked against the tools' declarations with the
TypeScript compiler before its first call.

A counting tool proves that a refused script made no call at all (not even the valid calls
before the wrong one), and the runner's step count that it never ran.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from engine import CodeMode, ConfigError, Tool, tool
from engine._source import MAX_CODE_BYTES
from engine.languages._check import OUTPUT_BYTES, cores, run_bounded
from engine.languages.javascript import (
    SHOWN_PROBLEMS,
    Checked,
    CompilerMissing,
    TypeChecker,
    _check,
    check_declarations,
    find_compiler,
)
from engine.languages.python import PythonTypeChecker
from runner._conversation import STALLED_S
from sandbox import typescript
from tests._needs import require
from tests.engine.conftest import EnteredRunner, InProcessRunner


@pytest.fixture(scope="module")
def compiler() -> str:
    try:
        return str(find_compiler())
    except CompilerMissing as e:
        require(f"{e}")
        raise


class Label(BaseModel):
    name: str
    color: str = "grey"


def counting_tools(calls: list[tuple[str, Any]]) -> list[Tool]:
    @tool
    def list_prs(repo: str, state: Literal["open", "closed"] = "open") -> list[dict]:
        """List the pull requests of a repository."""
        calls.append(("list_prs", repo))
        return [{"number": 12, "title": "a"}, {"number": 15, "title": "b"}]

    @tool
    def get_reviews(number: int) -> list[dict]:
        """The reviews of a pull request."""
        calls.append(("get_reviews", number))
        return [{"user": "ann"}] if number == 15 else []

    @tool
    def label_pr(number: int, labels: list[Label]) -> str:
        """Put labels on a pull request."""
        calls.append(("label_pr", number))
        return "ok"

    return [list_prs, get_reviews, label_pr]


def engine_for(calls: list[tuple[str, Any]], runner: InProcessRunner, **kwargs: Any) -> CodeMode:
    return CodeMode(counting_tools(calls), runner=runner, **kwargs)


FIRST = 'const prs = await tools.list_prs({ repo: "acme/api" });\n'

WRONG = [
    (
        # Said as the run says it (tsc said "Property 'get_review' does not exist on type
        # 'Tools'. Did you mean 'get_reviews'?", and of a name near none of them no more).
        "a tool that does not exist",
        FIRST + "const r = await tools.get_review({ number: 1 });\nreturn r;",
        2,
        "tools.get_review does not exist; the closest tools are tools.get_reviews. Find tools "
        'with await tools.tool_search({ query: "..." }).',
    ),
    (
        "a tool near none of them",
        FIRST + "await tools.send_email({ to: 'a' });",
        2,
        'tools.send_email does not exist. Find tools with await tools.tool_search({ query: "..." }).',
    ),
    (
        "a missing required argument",
        FIRST + "\nconst r = await tools.get_reviews({});\nreturn r;",
        3,
        "Property 'number' is missing",
    ),
    (
        "an argument of the wrong type",
        FIRST + 'const r = await tools.get_reviews({ number: "15" });\nreturn r;',
        2,
        "Type 'string' is not assignable to type 'number'.",
    ),
    (
        "a wrong nested field",
        FIRST
        + "await tools.label_pr({\n  number: 15,\n"
        + '  labels: [{ name: "bug" }, { nmae: "ui" }],\n});',
        4,
        "'nmae' does not exist in type",
    ),
    (
        "a wrong enum value",
        'const prs = await tools.list_prs({ repo: "acme/api", state: "merged" });',
        1,
        "Type '\"merged\"' is not assignable",
    ),
    (
        "a call used without await",
        'const prs = tools.list_prs({ repo: "acme/api" });\nreturn prs.filter((p: any) => p);',
        2,
        "Property 'filter' does not exist on type 'Promise<any>'. Did you forget to use 'await'?",
    ),
    (
        "a call iterated without await",
        'for (const pr of tools.list_prs({ repo: "acme/api" })) {\n  console.log(pr);\n}',
        1,
        "Did you forget to use 'await'?",
    ),
    (
        # TS1064, an error of the script's own that tsc numbers as it numbers syntax errors: the
        # check took the script for one that does not parse, and checked none of its calls.
        "a wrong call beside an async function typed without its Promise",
        "async function count(): number {\n  return 1;\n}\n"
        + FIRST
        + 'return await tools.get_reviews({ number: "15" });',
        5,
        "Type 'string' is not assignable to type 'number'.",
    ),
    (
        "a typed script with a wrong call",
        "interface PR { number: number }\n"
        + 'const prs: PR[] = await tools.list_prs({ repo: "acme/api" });\n'
        + "const n: string = String(prs[0].number);\n"
        + "return await tools.get_reviews({ number: n });",
        4,
        "Type 'string' is not assignable to type 'number'.",
    ),
]


@pytest.mark.parametrize(("name", "code", "line", "message"), WRONG, ids=[w[0] for w in WRONG])
async def test_wrong_call_fails_before_any_call(
    compiler: str, inproc: InProcessRunner, name: str, code: str, line: int, message: str
) -> None:
    """The script fails with the compiler's message at the model's line; no call ran (not
    even the valid one before it), and no step did."""
    calls: list[tuple[str, Any]] = []
    engine = engine_for(calls, inproc)
    result = await engine.run_code(code)
    assert result.status == "failed", result.text
    assert result.error is not None and result.error.get("name") == "TypeCheckError"
    assert f"line {line}: " in result.text and message in result.text, result.text
    assert [x["line"] for x in result.error["lines"]] == [line]
    assert "no call was made" in result.text
    assert calls == [] and inproc.steps == []
    # The refusal is the script's outcome in the log, as any ending is.
    assert (await engine.resume(result.script_id)).text == result.text


@pytest.mark.parametrize(
    ("head", "checked"),
    [
        ("// @ts-nocheck\n", False),
        ("\n  // looks up reviews\n/* twice */ //@ts-nocheck\n", False),
        ("const a = 1;\n// @ts-nocheck\n", True),  # not at the top: TypeScript reads it not
    ],
)
async def test_a_script_that_begins_with_ts_nocheck_is_left_to_the_run(
    compiler: str, inproc: InProcessRunner, head: str, checked: bool
) -> None:
    """`// @ts-nocheck` among the comments a script begins with: TypeScript checks nothing
    of such a file, and the check does not either; the call's arguments are the tool's own
    check's then. The check's line before the script put the comment past the file's top,
    and the script was refused."""
    calls: list[tuple[str, Any]] = []
    engine = engine_for(calls, inproc)
    result = await engine.run_code(head + "return await tools.get_reviews({ number: '15' })")
    assert result.status == "failed" and result.error is not None, result.text
    assert (result.error["name"] == "TypeCheckError") == checked, result.text
    assert bool(inproc.steps) != checked  # the run met the tool's check of its arguments


async def test_refused_script_runs_once_fixed(compiler: str, inproc: InProcessRunner) -> None:
    """The same engine runs the corrected script: the check passes it, its calls run."""
    calls: list[tuple[str, Any]] = []
    engine = engine_for(calls, inproc)
    assert (await engine.run_code("return await tools.get_reviews({ number: '15' })")).status == (
        "failed"
    )
    result = await engine.run_code("return await tools.get_reviews({ number: 15 })")
    assert result.value == [{"user": "ann"}] and calls == [("get_reviews", 15)]


FREE = [
    (
        "results used freely, as any",
        FIRST
        + "const first = prs[0];\nconsole.log(first.title.toUpperCase(), first.whatever);\n"
        + "const reviews = await tools.get_reviews({ number: prs[1].number });\n"
        + "return [reviews.length, reviews[0].user, prs.map((p) => p.number)];",
        [1, "ann", [12, 15]],
    ),
    (
        "expando objects, reassigned types, implicit any",
        "const totals = {};\ntotals.count = 1;\nlet x = 1;\nx = 'one';\n"
        + "function add(a, b) { return a + b; }\nconst list = [];\nlist.push(add(1, 2));\n"
        + "return [totals, x, list];",
        [{"count": 1}, "one", [3]],
    ),
    (
        "tools.tool_search and tools looked up by a computed name",
        "const text = await tools.tool_search({ query: 'reviews' });\n"
        + "const name = 'get_' + 'reviews';\nconst r = await tools[name]({ number: 15 });\n"
        + "return [text.includes('get_reviews'), r.length, text.results];",
        [True, 1, None],
    ),
    (
        "a value that may be undefined passed where a number is declared",
        FIRST
        + "return await tools.get_reviews({ number: prs.find((p) => p.number > 12)?.number });",
        [{"user": "ann"}],
    ),
    (
        "files and console as a script uses them",
        "console.log(files.list().length);\nconsole.info('x', { a: 1 });\nreturn 1;",
        1,
    ),
    (
        "typed code with a result cast to the model's own types",
        "interface PR { number: number; title: string }\n"
        + "const prs = (await tools.list_prs({ repo: 'acme/api' })) as PR[];\n"
        + "const byNumber = new Map<number, PR>(prs.map((p) => [p.number, p]));\n"
        + "return byNumber.get(15)!.title;",
        "b",
    ),
    (
        "a built-in newer than the check's library, passed to a tool",
        "const g = Object.groupBy([1, 2, 3], (x) => (x % 2 ? 'odd' : 'even'));\n"
        + "return await tools.get_reviews({ number: g.odd.length * 7 + 1 });",
        [{"user": "ann"}],
    ),
    (
        # The compiler types the object by its kinds ({ state: string }), which it cannot
        # tell from a wrong value where the tool takes one of some literals: left to the
        # tool's own check when the call is made (an inline "merged" is refused: WRONG).
        "arguments built in a variable first, a literal among them",
        'const opts = { repo: "acme/api", state: "open" };\nlet state = "closed";\n'
        + "const a = await tools.list_prs(opts);\n"
        + 'const b = await tools.list_prs({ repo: "acme/api", state });\nreturn a.length + b.length;',
        4,
    ),
    (
        # A generic given results (`any`) infers `unknown`: the compiler knows nothing of the
        # value, which may well be what the tool takes (it said "Type 'unknown' is not
        # assignable to type 'number'", to a model that had passed numbers).
        "values made from results through Set, Array.from and Object.values",
        FIRST
        + "const numbers = [...new Set(prs.map((p) => p.number))];\n"
        + "const again = Array.from(new Set(prs.map((p) => p.number)));\n"
        + "const byTitle = prs.reduce((acc, p) => ({ ...acc, [p.title]: p.number }), {});\n"
        + "const a = await Promise.all(numbers.map((n) => tools.get_reviews({ number: n })));\n"
        + "const b = await tools.get_reviews({ number: again[1] });\n"
        + "const c = await tools.get_reviews({ number: Object.values(byTitle)[1] });\n"
        + "return [a.length, b, c];",
        [2, [{"user": "ann"}], [{"user": "ann"}]],
    ),
    (
        # A dictionary's keys are not in its type: the compiler said a key the tool requires
        # was missing from it ("Property 'repo' is missing in type 'Record<string, any>'").
        "arguments built in a dictionary",
        "const params: Record<string, any> = {};\nparams.repo = 'acme/api';\n"
        + "const a = await tools.list_prs(params);\n"
        + "const b = await tools.list_prs(Object.fromEntries([['repo', 'acme/api']]));\n"
        + "const one: { [key: string]: unknown } = { number: 15 };\n"
        + "const all: Record<string, any> = { number: 15, labels: [] };\n"
        + "await tools.label_pr(all);\n"
        + "return [a.length + b.length, await tools.get_reviews(one)];",
        [4, [{"user": "ann"}]],
    ),
    (
        # A tool only reads an array it is given: a mutable array type refused these ("The
        # type 'readonly [...]' is 'readonly' and cannot be assigned to the mutable type").
        "readonly arrays passed as arguments",
        "const labels = [{ name: 'bug' }, { name: 'ui' }] as const;\n"
        + "const frozen: readonly { name: string }[] = Object.freeze([{ name: 'bug' }]);\n"
        + "await tools.label_pr({ number: 15, labels });\n"
        + "await tools.label_pr({ number: 15, labels: [...labels, ...frozen] });\n"
        + "return await tools.label_pr({ number: 15, labels: frozen } as const);",
        "ok",
    ),
    (
        # Type arguments are stripped before the run: the check said "Expected 0 type
        # arguments, but got 1".
        "a call that names its result's type",
        "interface Review { user: string }\n"
        + "const r = await tools.get_reviews<Review[]>({ number: 15 });\n"
        + "return r[0].user;",
        "ann",
    ),
    (
        "an error of the script's own that does not involve a tool is left to the run",
        "const o: { a: number } = { a: 1 };\n// @ts-expect-error nothing wrong here\n"
        + "const n: number = 'x' as any;\nreturn o.a;",
        1,
    ),
]


@pytest.mark.parametrize(("name", "code", "value"), FREE, ids=[f[0] for f in FREE])
async def test_valid_script_is_not_refused(
    compiler: str, inproc: InProcessRunner, name: str, code: str, value: Any
) -> None:
    """Scripts that would run are not refused, however loosely they are typed."""
    if typescript.BUNDLE is None:
        require("sandbox/typescript.bundle.js is missing: run `make install` to build it")
    calls: list[tuple[str, Any]] = []
    result = await engine_for(calls, inproc).run_code(code)
    assert result.status == "finished", result.text
    assert result.value == value


@tool
def standings(season: int, constructor: str | None = None, toString: str | None = None) -> int:
    """Standings for a season, of one constructor (team) if given."""
    return season


async def test_a_property_named_as_an_inherited_member_is_checked_as_itself(
    compiler: str, inproc: InProcessRunner
) -> None:
    """A tool's optional `constructor` or `toString`: a call that leaves it out is not
    refused (TypeScript read the literal's inherited method there, and refused every such
    call); one that passes a wrong type still is."""
    engine = CodeMode([standings], runner=inproc, type_check="on")
    left_out = await engine.run_code("return await tools.standings({ season: 2024 })")
    assert left_out.status == "finished" and left_out.value == 2024, left_out.text
    wrong = await engine.run_code("return await tools.standings({ season: 1, constructor: 5 })")
    assert wrong.status == "failed" and "TypeCheckError" in wrong.text, wrong.text


ZONES = Tool(
    "schedule",
    description="Schedule a meeting.",
    input_schema={
        "type": "object",
        "properties": {"zone": {"enum": [f"zone_{i}" for i in range(30)]}},
        "required": ["zone"],
    },
    handler=lambda zone: zone,
)


async def test_a_value_kept_in_a_variable_is_left_to_the_tool_however_long_the_enum(
    compiler: str, inproc: InProcessRunner
) -> None:
    """A string kept in a variable where a tool takes one of 30 literals: the compiler writes
    the union cut short ('"zone_21" | ... 14 more ... | "zone_9"'), and the script was
    refused as if the union held something else than literals; a wrong literal written in
    the call still is."""
    if typescript.BUNDLE is None:
        require("sandbox/typescript.bundle.js is missing: run `make install` to build it")
    engine = CodeMode([ZONES], runner=inproc, type_check="on")
    kept = "const prefs = { zone: 'zone_3' };\nreturn await tools.schedule({ zone: prefs.zone });"
    result = await engine.run_code(kept)
    assert result.status == "finished" and result.value == "zone_3", result.text
    wrong = await engine.run_code("return await tools.schedule({ zone: 'zone_99' });")
    assert wrong.status == "failed" and "TypeCheckError" in wrong.text, wrong.text
    assert "... 14 more ..." in wrong.text


@tool
def nearby(point: tuple[float, float]) -> list[float]:
    """Places near a point."""
    return list(point)


async def test_an_array_kept_in_a_variable_is_left_to_the_tool_where_it_takes_a_tuple(
    compiler: str, inproc: InProcessRunner
) -> None:
    """The compiler types an array in a variable by its kind (`number[]`) and said it "may
    have fewer" elements than the tool's tuple, refusing a script that would run; a tuple of
    the wrong length or types written in the call is still refused."""
    if typescript.BUNDLE is None:
        require("sandbox/typescript.bundle.js is missing: run `make install` to build it")
    engine = CodeMode([nearby], runner=inproc, type_check="on")
    kept = "const point = [48.85, 2.35];\nreturn await tools.nearby({ point });"
    result = await engine.run_code(kept)
    assert result.status == "finished" and result.value == [48.85, 2.35], result.text
    for wrong in ("[1]", "[1, 'x']"):
        refused = await engine.run_code(f"return await tools.nearby({{ point: {wrong} }});")
        assert refused.status == "failed" and "TypeCheckError" in refused.text, refused.text


@pytest.mark.parametrize("wrong_first", [False, True])
async def test_errors_past_the_compilers_cut_output_are_left_to_the_run(
    compiler: str, inproc: InProcessRunner, wrong_first: bool
) -> None:
    """Thousands of errors that are not about calls, found in both compilations, make more
    output than is read (OUTPUT_BYTES): the untyped file's later errors were cut off, so
    the typed file's were taken for errors about calls, and the script was refused for
    them. Those past what was read are left to the run; a wrong call before them is still
    refused at its line. (The compiler has a minute, not a host's 5 s: 8,000 errors take it
    about a second on two busy cores, and the Python checker's like test once took over 5.)"""
    calls: list[tuple[str, Any]] = []
    many = "let v: number = 1;\n" + 'v = "s";\n' * 8000
    assert len(many.encode()) * 2 * 8 > OUTPUT_BYTES  # each line's error takes 8+ bytes
    if wrong_first:
        code = 'await tools.get_reviews({ number: "15" });\n' + many + "return 1;"
    else:
        code = many + "return await tools.get_reviews({ number: 15 });"
    patient = TypeChecker(compiler, timeout=60)
    result = await engine_for(calls, inproc, type_check=patient).run_code(code)
    if wrong_first:
        assert result.status == "failed" and result.error is not None
        assert result.error.get("name") == "TypeCheckError", result.text
        assert [x["line"] for x in result.error["lines"]] == [1]
        assert calls == []
    else:
        assert result.status == "finished", result.text
        assert calls == [("get_reviews", 15)]


async def test_syntax_error_is_left_to_the_run(compiler: str, inproc: InProcessRunner) -> None:
    """A script the compiler cannot parse is not refused by the check: the run reports it
    with its line, as for any script."""
    calls: list[tuple[str, Any]] = []
    result = await engine_for(calls, inproc).run_code("const a = 1;\nconst b = ;\nreturn a;")
    assert result.status == "failed" and "SyntaxError" in result.text
    assert "at line 2: const b = ;" in result.text
    assert len(inproc.steps) == 1


async def test_check_cost_goes_in_the_script_step_line(
    compiler: str, inproc: InProcessRunner, caplog: pytest.LogCaptureFixture
) -> None:
    """The first step's line carries what the check cost; later steps carry 0."""
    caplog.set_level(logging.INFO, logger="codemode")
    calls: list[tuple[str, Any]] = []
    await engine_for(calls, inproc).run_code(FIRST + "return prs.length;")
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("script step ")]
    assert len(lines) == 2
    first = float(lines[0].split("check_ms=")[1].split()[0])
    assert first > 0 and "check_ms=0.0" in lines[1]


async def test_a_script_cancelled_in_its_first_step_leaves_no_check_cost(compiler: str) -> None:
    """What a check cost is kept only until the script's first step is logged, or its drive
    ends: a host whose run_codes were cancelled in their first step (a caller's timeout)
    kept one entry for each, for as long as it ran."""
    runner = EnteredRunner()
    engine = engine_for([], runner)
    for _ in range(3):
        runner.entered.clear()
        run = asyncio.create_task(engine.run_code(FIRST + "return prs.length;"))
        await runner.entered.wait()
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
    assert engine._check_ms == {}
    await engine.aclose()


async def test_type_check_off_runs_unchecked(inproc: InProcessRunner) -> None:
    """With type_check="off" a wrong call reaches the run, which refuses it at the call."""
    calls: list[tuple[str, Any]] = []
    engine = engine_for(calls, inproc, type_check="off")
    assert engine.type_checker is None
    result = await engine.run_code(FIRST + "return await tools.get_reviews({ number: 'x' });")
    assert result.status == "failed" and "TypeCheckError" not in result.text
    assert calls == [("list_prs", "acme/api")]


def test_run_code_says_scripts_are_checked_only_when_they_are(
    compiler: str, inproc: InProcessRunner
) -> None:
    """The model is told about the check when it is on, and not when it is off."""
    on = engine_for([], inproc).definition()["description"]
    off = engine_for([], inproc, type_check="off").definition()["description"]
    assert "type-checked against the declarations" in on
    assert "type-checked" not in off and "TypeScript's types" in off


def test_bad_setting_is_refused(inproc: InProcessRunner) -> None:
    with pytest.raises(Exception, match='use "on", "off"'):
        CodeMode([], runner=inproc, type_check="yes")  # type: ignore[arg-type]


async def test_missing_compiler_turns_the_check_off_and_says_so_once(
    inproc: InProcessRunner, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Without the compiler scripts run unchecked, and the log says why, once, when a script
    first runs unchecked: an engine that only describes its tools says nothing."""
    monkeypatch.setenv(_check.COMPILER_ENV, "/nonexistent/tsc")
    monkeypatch.setattr("engine._codemode._CHECK_OFF_SAID", set())
    caplog.set_level(logging.WARNING, logger="codemode")
    first = CodeMode([], runner=inproc)
    second = CodeMode([], runner=inproc)
    assert first.type_checker is None and second.type_checker is None
    first.definition()
    first.search("anything")
    assert not [r for r in caplog.records if "type check off" in r.getMessage()]
    for engine in (first, second, first):
        assert (await engine.run_code("return 1")).status == "finished"
    said = [r.getMessage() for r in caplog.records if "type check off" in r.getMessage()]
    assert len(said) == 1
    assert "/nonexistent/tsc" in said[0] and "is not an executable file" in said[0]


def test_declarations_for_the_check_are_the_models_inputs_with_any_results() -> None:
    """Inputs as the model reads them, results `any` unless a call names them, every tool
    plus the builtins."""
    text = check_declarations(counting_tools([]))
    assert text.startswith("export interface Tools {\n")
    assert "get_reviews<Result = any>(input: { number: number }): Promise<Result>;" in text
    assert "tool_search(input: { query: string; limit?: number }): Promise<any>;" in text
    assert "skill(input: { name: string }): Promise<any>;" in text


# ---- hostile input: each ends within the check's bounds, with a clear error ----

# Under 1 KB of types that take the compiler about 40 s and 4.4 GB unbounded.
TYPE_BOMB = "\n".join(
    [
        "type D = " + "|".join(f"'{c}'" for c in "abcdefghijklmnopqrstuvwxyz0123456789") + ";",
        "type U = `${D}${D}${D}`;",
        *(
            f"type V{i} = {{ [K in U]: {{ [J in D]: [K, J, {i}] }} }}[U];\n"
            f"const v{i}: V{i} = null as any; const w{i}: number = v{i};"
            for i in range(8)
        ),
        "return 1;",
    ]
)


async def test_type_bomb_meets_the_memory_bound(compiler: str) -> None:
    """Types that would take gigabytes end on the memory bound, and the message says so."""
    checker = TypeChecker(compiler, memory=256 * 1024 * 1024, timeout=120)
    checked = await checker.check(TYPE_BOMB, check_declarations([]))
    assert checked.failure is not None and not checked.ok
    assert "more than 256 MiB of memory" in checked.failure
    assert 'type_check = "off"' in checked.failure


async def test_type_bomb_meets_the_time_bound(compiler: str) -> None:
    """With memory to spare, the same types end on the time bound."""
    checker = TypeChecker(compiler, memory=8 * 1024 * 1024 * 1024, timeout=1)
    checked = await checker.check(TYPE_BOMB, check_declarations([]))
    assert checked.failure is not None
    assert "1 s" in checked.failure and "simplify the script's types" in checked.failure


async def test_refused_by_a_bound_the_script_never_runs(
    compiler: str, inproc: InProcessRunner
) -> None:
    """A check that cannot finish fails the script before its first call, with the reason."""
    calls: list[tuple[str, Any]] = []
    checker = TypeChecker(compiler, memory=256 * 1024 * 1024, timeout=120)
    engine = engine_for(calls, inproc, type_check=checker)
    result = await engine.run_code(FIRST + TYPE_BOMB)
    assert result.status == "failed" and "TypeCheckError" in result.text
    assert "256 MiB" in result.text and calls == [] and inproc.steps == []


async def test_ten_megabyte_script_is_refused_before_any_check(inproc: InProcessRunner) -> None:
    """A 10 MB typed script is refused by its size, clearly; neither the checker nor the
    stripper sees it."""
    seen: list[str] = []

    class Counting(TypeChecker):
        async def check(self, code: str, declarations: str) -> Checked:
            seen.append(code)
            return Checked()

    engine = CodeMode([], runner=inproc, type_check=Counting("/bin/true"))
    line = "const x: Array<{ a: number }> = [];\n"
    result = await engine.run_code(line * (10 * 1024 * 1024 // len(line)))
    assert result.status == "failed"
    assert f"over the {MAX_CODE_BYTES:,} bytes a script may be" in result.text
    assert seen == [] and inproc.steps == []


async def test_a_script_cannot_make_the_compiler_show_a_host_file(
    compiler: str, tmp_path: Path
) -> None:
    """Imports and references in a script do not add files to the program, so an error on
    a tool's argument can never show the model a host file's types or constants."""
    (tmp_path / "secret.json").write_text('{"password_key": "hunter2"}')
    (tmp_path / "secret.ts").write_text('export const password = "hunter2";\n')
    base = tmp_path.as_posix()
    wrong = "\nreturn await tools.get_reviews({ number: x });"
    scripts = [
        f'type T = typeof import("{base}/secret");\nconst x: T["password"] = null as any;',
        f'const x = await import("{base}/secret.json");',
        f'type T = typeof import("{base}/secret.json");\nconst x: T = null as any;',
        f'/// <reference path="{base}/secret.ts" />\nconst x = password;',
    ]
    checker = TypeChecker(compiler)
    declarations = check_declarations(counting_tools([]))
    for code in scripts:
        checked = await checker.check(code + wrong, declarations)
        text = checked.message()
        assert "hunter2" not in text and "password" not in text.replace(code, ""), text


@pytest.mark.parametrize(
    "report",
    [
        "fatal error: runtime: out of memory\n\nruntime stack:",
        "runtime: out of memory: cannot allocate 4194304-byte block (268435456 in use)\n"
        "fatal error: out of memory",
        "fatal error: out of memory allocating heap arena map",
        "runtime: failed to create new OS thread (have 5 already; errno=11)\n"
        "runtime: may need to increase max user processes (ulimit -u)\nfatal error: newosproc",
    ],
)
async def test_every_way_the_compiler_reports_running_out_of_memory(
    report: str, tmp_path: Path
) -> None:
    """The Go runtime says it ran out of memory in several ways, depending on where; each is
    the memory bound, named with its size."""
    fake = tmp_path / "tsc"
    fake.write_text(f"#!/bin/sh\ncat <<'EOF'\n{report}\nEOF\nexit 2\n")
    fake.chmod(0o755)
    checked = await TypeChecker(fake, memory=300 * 1024 * 1024).check("return 1", "")
    assert checked.failure is not None and "more than 300 MiB of memory" in checked.failure
    # The model reads it, and cannot turn the check off itself.
    assert checked.failure.endswith(', or the host may turn the check off with type_check = "off"')


@pytest.mark.parametrize(
    "ending",
    [
        "kill -SEGV $$",  # the kernel's fault, the runtime had no say
        "kill -BUS $$",
        "cat <<'EOF'\nfatal error: unexpected signal during runtime execution\n"
        "[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x46a7c1]\nEOF\nexit 2",
        # A fault where the runtime cannot panic: the signal's name, then the registers.
        "cat <<'EOF'\nSIGSEGV: segmentation violation\nPC=0x46a7c1 m=3 sigcode=1 addr=0x0\n"
        "\ngoroutine 0 gp=0xc000002380 m=3 mp=0xc000100008 [idle]:\nEOF\nexit 2",
        "cat <<'EOF'\nSIGBUS: bus error\nPC=0x46a7c1 m=0 sigcode=2 addr=0x7f0000000000\nEOF\nexit 2",
    ],
)
async def test_a_compiler_that_faults_at_its_bound_met_the_memory_bound(
    ending: str, tmp_path: Path
) -> None:
    """Under load the Go runtime sometimes faults at its data rlimit instead of saying it ran
    out of memory (the type bomb did, 2 runs in 4 on a busy machine): that is the memory
    bound too, not a broken checker."""
    fake = tmp_path / "tsc"
    fake.write_text(f"#!/bin/sh\n{ending}\n")
    fake.chmod(0o755)
    checked = await TypeChecker(fake, memory=300 * 1024 * 1024).check("return 1", "")
    assert checked.failure is not None and "more than 300 MiB of memory" in checked.failure


@pytest.mark.parametrize("path", ["/nonexistent/tsc", "/tmp", "/etc/passwd"])
def test_a_checker_that_is_not_an_executable_file_is_refused_at_once(path: str) -> None:
    """The host's mistake is the host's error when it makes the checker: found at the first
    check, it failed every script, telling the model to write it more simply."""
    with pytest.raises(CompilerMissing, match=r"is not an executable file; give the checker"):
        TypeChecker(path)


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), "5", True, 1e300])
@pytest.mark.parametrize("checker", [TypeChecker, PythonTypeChecker])
def test_a_checker_with_a_timeout_that_is_no_time_is_refused_at_once(
    checker: type[TypeChecker | PythonTypeChecker], timeout: Any
) -> None:
    """The host's mistake is the host's error when it makes the checker: found at the first
    check, it failed every script, with a traceback (nan, "5", inf) or telling the model to
    simplify its script (0)."""
    with pytest.raises(ConfigError, match=r"\(timeout=\.\.\.\) = .* must be seconds, over 0"):
        checker("/bin/true", timeout=timeout)


async def test_a_broken_compiler_never_passes_a_script() -> None:
    """A compiler that fails without reporting errors the way tsc does fails the check: a
    broken install must not read as a clean script."""
    checked = await TypeChecker("/bin/false").check("return 1", check_declarations([]))
    assert checked.failure is not None and checked.problems == []


@pytest.mark.parametrize(
    "body",
    [
        "exit 1",  # /bin/false: ends at once, no report
        "echo 'panic: runtime error: invalid memory address' >&2; exit 2",  # crashes at once
    ],
)
async def test_a_checker_that_fails_every_script_is_the_hosts_to_fix(
    body: str, tmp_path: Path, inproc: InProcessRunner, caplog: pytest.LogCaptureFixture
) -> None:
    """A checker that fails on any script (an empty one too) is broken: the model is told
    the script is not at fault (it was told to write it more simply), and the host's log
    names the checker and what to do: give TypeChecker another path when the host gave this
    one (it was told to set CODEMODE_TSC, which only a checker found reads), or point
    CODEMODE_TSC elsewhere when that is where it was found. The script still does not run
    unchecked."""
    fake = tmp_path / "tsc"
    fake.write_text(f"#!/bin/sh\n{body}\n")
    fake.chmod(0o755)
    missing = tmp_path / "nostart"  # a checker whose interpreter is not there: never starts
    missing.write_text("#!/nonexistent/interpreter\n")
    missing.chmod(0o755)
    for checker in (fake, missing):
        checked = await TypeChecker(checker).check("return 1", check_declarations([]))
        assert checked.failure is not None and "more simply" not in checked.failure
        assert "no fault of the script" in checked.failure, checked.failure
        assert checked.broken is not None and str(checker) in checked.broken
        assert "give TypeChecker the path of TypeScript 7's native tsc" in checked.broken
        assert _check.COMPILER_ENV not in checked.broken, checked.broken
        assert 'type_check = "off"' in checked.broken
    with pytest.MonkeyPatch.context() as env:
        env.setenv(_check.COMPILER_ENV, str(fake))
        found = await TypeChecker().check("return 1", check_declarations([]))
    assert found.broken is not None and str(fake) in found.broken
    assert f"point {_check.COMPILER_ENV} at TypeScript 7's native tsc" in found.broken
    assert "give TypeChecker" not in found.broken, found.broken
    caplog.set_level(logging.WARNING, logger="codemode")
    calls: list[tuple[str, Any]] = []
    engine = engine_for(calls, inproc, type_check=TypeChecker(fake))
    try:
        result = await engine.run_code(FIRST + "return prs.length;")
    finally:
        await engine.aclose()
    assert result.status == "failed" and "no fault of the script" in result.text, result.text
    assert calls == []  # not run
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(fake) in m and "does not work" in m for m in said), said


async def test_a_checker_that_fails_on_one_script_blames_that_script(tmp_path: Path) -> None:
    """A checker that fails on one script only (one it cannot handle) is no broken checker:
    the model is told to write that script more simply, as before, and the host is not."""
    fake = tmp_path / "tsc"
    fake.write_text("#!/bin/sh\ngrep -q very_deep typed.ts && exit 3\nexit 0\n")
    fake.chmod(0o755)
    checker = TypeChecker(fake)
    failed = await checker.check("return very_deep", check_declarations([]))
    assert failed.failure is not None and "write it more simply" in failed.failure
    assert failed.broken is None
    assert (await checker.check("return 1", check_declarations([]))).ok


async def test_flood_of_errors_is_read_up_to_its_bound(compiler: str) -> None:
    """A script with thousands of wrong calls: the output is read up to its bound, and the
    model is shown a few problems and a count of the rest."""
    calls = "".join(f"tools.nope{i}({{}});\n" for i in range(6000))
    # What is tested is the output's bound, not the time bound (its own tests are below):
    # 6,000 errors can take tsc past 5 s on a loaded machine.
    checked = await TypeChecker(compiler, timeout=60).check(calls, check_declarations([]))
    assert checked.failure is None and len(checked.problems) > 100
    message = checked.message()
    assert message.count("\n  line ") == SHOWN_PROBLEMS
    assert "more" in message


def looked_up(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[str]:
    """The names ``module``'s ``no_such_tool`` is asked about from now on (it answers as
    ever)."""
    names: list[str] = []
    real = module.no_such_tool

    def counted(name: str, *args: Any, **kwargs: Any) -> str:
        names.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(module, "no_such_tool", counted)
    return names


def assert_only_the_shown_explained(checked: Checked, names: list[str]) -> None:
    """40 calls of tools ``nope_0``... that do not exist: each is a problem, and only those
    shown were looked up among the tools."""
    assert len(checked.problems) == 40
    assert checked.problems[0].message.startswith("tools.nope_0 does not exist")
    assert names == [f"nope_{i}" for i in range(SHOWN_PROBLEMS)]


async def test_only_the_problems_shown_are_explained(
    compiler: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A script of many calls of tools that do not exist: each shown is said as the run says
    it, and only those are looked up among the tools (each looked every tool over, on the
    host's event loop: 1,000 such calls among 300 tools held it for 52 s)."""
    names = looked_up(monkeypatch, _check)
    code = "".join(f"tools.nope_{i}({{}});\n" for i in range(40))
    checked = await TypeChecker(compiler).check(code, check_declarations(counting_tools([])))
    assert_only_the_shown_explained(checked, names)


# ---- a union with a branch that takes anything takes anything ----

# Each schema accepts the number 1 (one branch of each union takes any value), so a call
# passing 1 must never be refused by the check.
TAKES_ANYTHING = {
    "optional_any": {"anyOf": [{}, {"type": "null"}]},  # pydantic's `Any | None`
    "true_branch": {"anyOf": [{"type": "string"}, True]},
    "constraint_only_branch": {"oneOf": [{"type": "string"}, {"minLength": 3}]},
}


@pytest.mark.parametrize("schema", list(TAKES_ANYTHING.values()), ids=list(TAKES_ANYTHING))
def test_a_union_with_a_branch_that_takes_anything_declares_unknown(schema: Any) -> None:
    t = Tool("f", input_schema={"type": "object", "properties": {"x": schema}, "required": ["x"]})
    assert "f<Result = any>(input: { x: unknown }): Promise<Result>;" in check_declarations([t])


async def test_an_optional_any_parameter_takes_any_value(
    compiler: str, inproc: InProcessRunner
) -> None:
    """`x: Any | None` (pydantic's `anyOf: [{}, {type: null}]`) takes a number: the check
    does not refuse the call (it declared `x` as `null` only)."""
    if typescript.BUNDLE is None:
        require("sandbox/typescript.bundle.js is missing: run `make install` to build it")

    @tool
    def echo(x: Any | None = None) -> Any:
        """Echo x."""
        return x

    result = await CodeMode([echo], runner=inproc).run_code("return await tools.echo({ x: 1 });")
    assert result.status == "finished", result.text
    assert result.value == 1


async def test_a_tool_named_new_is_a_method_not_a_construct_signature(
    compiler: str, inproc: InProcessRunner
) -> None:
    """`new(input: ...)` in a type is a construct signature, so a tool named `new` was not a
    member of `Tools` and every call to it was refused; JavaScript calls `tools.new(...)`."""
    if typescript.BUNDLE is None:
        require("sandbox/typescript.bundle.js is missing: run `make install` to build it")

    def echo(**arguments: Any) -> Any:
        return arguments

    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    engine = CodeMode([Tool("new", input_schema=schema, handler=echo)], runner=inproc)
    result = await engine.run_code('return await tools.new({ a: "x" });')
    assert result.status == "finished", result.text
    assert result.value == {"a": "x"}
    wrong = await engine.run_code("return await tools.new({ a: 1 });")
    assert "TypeCheckError" in wrong.text, wrong.text


@pytest.mark.parametrize(
    ("before", "line"), [("const a = 1;\r", 3), ("const a = 'x\u2028y';\n", 4)]
)
async def test_a_wrong_call_after_a_line_ended_other_than_by_lf_is_refused(
    compiler: str, inproc: InProcessRunner, before: str, line: int
) -> None:
    """The compiler ends a line at a lone CR and at U+2028 (here in a string) too: a wrong
    call on a line it numbers past the script's count of LFs was dropped, so the call before
    it ran and the wrong one failed at run time."""
    calls: list[tuple[str, Any]] = []
    code = before + FIRST + 'return await tools.get_reviews({ number: "15" });'
    result = await engine_for(calls, inproc).run_code(code)
    assert result.status == "failed" and "TypeCheckError" in result.text, result.text
    assert f"at line {line}: return await tools.get_reviews" in result.text, result.text
    assert calls == [] and inproc.steps == []


@pytest.mark.parametrize("extra", [True, {}])
async def test_a_tool_that_allows_other_keys_in_so_many_words_takes_them(
    compiler: str, inproc: InProcessRunner, extra: Any
) -> None:
    """`additionalProperties: true` (pydantic's extra="allow", zod's passthrough) beside
    declared properties: a call passing another key is not refused (it was declared as the
    properties alone, and the compiler refused the key as unknown), a wrong property still is."""
    if typescript.BUNDLE is None:
        require("sandbox/typescript.bundle.js is missing: run `make install` to build it")

    def echo(**arguments: Any) -> Any:
        return arguments

    schema = {
        "type": "object",
        "properties": {"title": {"type": "string"}},
        "required": ["title"],
        "additionalProperties": extra,
    }
    engine = CodeMode([Tool("create", input_schema=schema, handler=echo)], runner=inproc)
    assert "[key: string]: unknown" in engine.definition()["description"]
    result = await engine.run_code('return await tools.create({ title: "t", priority: 2 });')
    assert result.status == "finished", result.text
    assert result.value == {"title": "t", "priority": 2}
    wrong = await engine.run_code("return await tools.create({ title: 1 });")
    assert "TypeCheckError" in wrong.text, wrong.text


def _running(marker: str) -> list[int]:
    """The processes of this user whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "cmdline").read_bytes().decode():
                found.append(int(entry.name))
        except OSError:
            pass  # ended meanwhile
    return found


def test_a_cancelled_check_reaps_its_checker_on_its_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A cancelled check waits for its killed checker to end: left, the process's transport
    outlived a loop that closed next, and said "Event loop is closed" when collected."""
    fake = tmp_path / "tsc"
    fake.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(3600)\n")
    fake.chmod(0o755)
    gc.collect()  # what earlier tests in this worker left is theirs, not this check's
    unraisable: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: unraisable.append(u.exc_value))

    async def cancel_one() -> None:
        check = asyncio.create_task(
            run_bounded([str(fake)], tmp_path, timeout=3600, memory=1 << 30)
        )
        while not _running(str(fake)):
            await asyncio.sleep(0.05)
        check.cancel()
        with pytest.raises(asyncio.CancelledError):
            await check

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        asyncio.run(cancel_one())
        for _ in range(600):  # until the child watcher has seen it end
            if not _running(str(fake)):
                break
            time.sleep(0.05)
        gc.collect()
    assert not _running(str(fake))
    assert unraisable == [] and "is closed" not in caplog.text, (unraisable, caplog.text)


async def test_a_cancelled_check_ends_its_checker(tmp_path: Path) -> None:
    """A check cancelled while the checker runs (the host let the script go) ends the
    checker: left with nobody reading its output, one that wrote much blocked on the pipe
    for as long as the host lived."""
    fake = tmp_path / "tsc"
    fake.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(3600)\n")
    fake.chmod(0o755)
    check = asyncio.create_task(TypeChecker(fake, timeout=3600).check("return 1", ""))
    while not _running(str(fake)):  # until it runs
        assert not check.done(), check.result()
        await asyncio.sleep(0.05)
    check.cancel()
    with pytest.raises(asyncio.CancelledError):
        await check
    try:
        async with asyncio.timeout(30):  # killed, and reaped
            while _running(str(fake)):
                await asyncio.sleep(0.05)
    finally:
        for pid in _running(str(fake)):  # the test failed: leave nothing behind
            os.kill(pid, signal.SIGKILL)


async def test_a_host_stalled_while_its_checker_runs_reads_the_checkers_answer(
    tmp_path: Path,
) -> None:
    """The host stops (as under SIGSTOP: its event loop does not run) past the check's
    timeout while the checker finishes: once it runs again it reads the checker's answer
    (the check was 'did not finish within 5 s', and the script failed for good, told to
    simplify its types)."""
    started, go = tmp_path / "started", tmp_path / "go"
    fake = tmp_path / "tsc"
    # Its first 128 KiB, twice what a pipe holds, are written once the check reads them:
    # the check's time runs by then.
    fake.write_text(
        f"#!{sys.executable}\nimport os, sys\nsys.stdout.write('.' * 131072 + '\\n')\n"
        f"sys.stdout.flush()\nopen({str(started)!r}, 'w').close()\n"
        f"while not os.path.exists({str(go)!r}):\n    pass\nprint('checked')\n"
    )
    fake.chmod(0o755)
    timeout = 5.0
    check = asyncio.create_task(run_bounded([str(fake)], tmp_path, timeout=timeout, memory=1 << 30))
    while not started.exists():
        await asyncio.sleep(0.01)
    go.touch()
    time.sleep(timeout + 2 * STALLED_S)  # the host stalls; the checker answers meanwhile
    ran = await check
    assert ran is not None and ran.status == 0 and ran.output.endswith("\nchecked\n")


async def test_a_checker_cut_off_as_it_ends_keeps_its_own_status(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A checker whose output passes the bound, and which ends as it is cut off, is killed
    without being reaped behind asyncio's back: its status is its own (Process.kill reaped it
    through Popen.poll, and asyncio's child watcher, finding it gone, logged 'Unknown child
    process pid N, will report returncode 255' and reported 255: here about 1 check in 100)."""
    head = shutil.which("head")
    assert head is not None
    argv = [head, "-c", str(OUTPUT_BYTES + 1), "/dev/zero"]
    for _ in range(300):  # the checker must end in the moment before it is cut off
        ran = await run_bounded(argv, tmp_path, timeout=3600, memory=1 << 30)
        assert ran is not None and ran.cut
        assert ran.status in (0, -signal.SIGKILL), ran.status
    assert "Unknown child process" not in caplog.text


def test_a_checker_serves_one_event_loop_after_another(compiler: str) -> None:
    """A burst of checks on one ``asyncio.run``, then on the next: the second burst's checks
    that waited for a turn failed with "... is bound to a different event loop" (the turns
    were a semaphore of the first loop's)."""
    checker = TypeChecker(compiler)
    declarations = check_declarations(counting_tools([]))

    async def burst() -> list[Checked]:
        code = "return await tools.get_reviews({ number: 15 });"
        # More checks than turns, so some wait for one.
        checks = [checker.check(code, declarations) for _ in range(cores() + 2)]
        return await asyncio.gather(*checks)

    for _ in range(2):
        assert all(checked.ok for checked in asyncio.run(burst()))


async def test_a_checker_past_its_timeout_is_killed_without_pidfds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel without pidfds (ENOSYS), or a seccomp profile that refuses them (EPERM): the
    check past its timeout kills its checker by pid and says it gave no answer (None). It
    raised OSError from os.pidfd_open, the checker left running and unreaped."""
    import errno

    def refused(pid: int, flags: int = 0) -> int:
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", refused)
    fake = tmp_path / "tsc"
    fake.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(3600)\n")
    fake.chmod(0o755)
    assert await run_bounded([str(fake)], tmp_path, timeout=0.5, memory=1 << 30) is None
    assert not _running(str(fake))


async def test_a_tool_written_with_a_hyphen_is_said_as_the_run_says_it(compiler: str) -> None:
    """`tools.get-price({...})`, a tool's name as an MCP server spells it, which JavaScript
    reads as `tools.get - price(...)`: the check said "tools.get does not exist", of a tool
    that is there (the hyphen's words were reached by Python scripts alone)."""
    price = Tool(
        "get_price", input_schema={"type": "object", "properties": {"id": {"type": "number"}}}
    )
    checked = await TypeChecker(compiler).check(
        "const p = await tools.get-price({ id: 1 });\nreturn p;", check_declarations([price])
    )
    assert [(p.line, p.message) for p in checked.problems] == [
        (
            1,
            "tools.get-price reads as tools.get minus price (a name cannot have a '-'): the "
            "tool is called as await tools.get_price({ ... })",
        )
    ]
