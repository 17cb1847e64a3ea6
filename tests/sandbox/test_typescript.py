"""TypeScript in scripts: the types are removed inside the sandbox, lines kept.

Each script of the corpus is written twice, with types and as the plain JavaScript it means;
both must end the same way (same calls, value, printed text, error and error lines). They
run in a fresh context (exec mode: the stripper is compiled on demand) and in a prepared one
(the fork server's: compiled before the script exists).
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sandbox import typescript
from sandbox.protocol import Ran
from sandbox.runtime import Prepared, run_in_process
from tests._needs import require
from tests.sandbox.conftest import rec, script


@pytest.fixture(autouse=True)
def _bundle() -> None:
    if typescript.BUNDLE is None:
        require("sandbox/typescript.bundle.js is missing: run `make install` to build it")


ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_bundle_is_the_build_of_its_source(tmp_path: Path) -> None:
    """The bundle is committed, so that every install strips types; it must be what `make`
    builds from sandbox/typescript.js and package-lock.json's Sucrase, and its licenses file
    must be the one that build writes."""
    if not (ROOT / "node_modules" / ".bin" / "esbuild").exists():
        require("esbuild (from `npm install`, which `make install` runs) to rebuild the bundle")
    built = tmp_path / "typescript.bundle.js"
    subprocess.run(
        ["make", "-s", "-C", str(ROOT), f"TS_BUNDLE={built}", str(built)],
        check=True,
        capture_output=True,
    )
    committed = ROOT / "sandbox" / "typescript.bundle.js"
    stale = "is not the build of its source: run `make install` and commit what it rebuilt"
    assert built.read_bytes() == committed.read_bytes(), f"{committed} {stale}"
    licenses = Path(f"{built}.LICENSE.txt").read_text("utf-8")
    assert licenses == Path(f"{committed}.LICENSE.txt").read_text("utf-8"), f"its licenses {stale}"
    assert "sucrase 3.35.1 (MIT)" in licenses


def test_make_clean_keeps_the_committed_bundle() -> None:
    """`make clean` removes what `make` builds and installs, never a file git tracks: the
    bundle is committed, and a lean install (`make demo`'s, with no npm) cannot build it
    again (clean deleted it, and every typed script then failed)."""
    if not (ROOT / ".git").exists():
        require("a git checkout, to tell which files are committed")
    dry = subprocess.run(
        ["make", "-n", "-s", "--no-print-directory", "-C", str(ROOT), "clean"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    removed = [
        word
        for line in dry.splitlines()
        if line.startswith("rm ")
        for word in line.split()[1:]
        if not word.startswith("-")
    ]
    assert removed, f"make clean removes nothing: {dry!r}"
    tracked = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--", *removed],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert tracked == [], f"make clean deletes committed files: {tracked}"


def run(code: str, records: Any = (), prepared: bool = False, **limits: int) -> Ran:
    return run_in_process(
        script(code, records, **limits), prepared=Prepared() if prepared else None
    )


def outcome(ran: Ran) -> Any:
    """Everything about how a run ended that a model or the engine could see."""
    error = ran.error
    return (
        ran.outcome,
        ran.value,
        [(c.name, c.arguments) for c in ran.calls],
        ran.printed,
        error and (error.name, error.message, [(x.line, x.text) for x in error.lines]),
        ran.limit,
    )


PRS = [{"number": 12, "title": "a"}, {"number": 15, "title": "b"}]
LIST = rec("list_prs", {"repo": "acme/api"}, result=PRS)

# (name, TypeScript, the same script in JavaScript, records). The JavaScript keeps each line
# where the TypeScript has it, so error lines compare too.
CORPUS: list[tuple[str, str, str, list[Any]]] = [
    (
        "the issue's example: annotation and as",
        'const prs: Array<{number: number}> = await tools.list_prs({ repo: "acme/api" });\n'
        "return prs.map((p) => p.number as number);",
        'const prs = await tools.list_prs({ repo: "acme/api" });\nreturn prs.map((p) => p.number);',
        [LIST],
    ),
    (
        "parameters, return types, optional parameters, arrow generics",
        "function total(xs: number[], start?: number): number {\n"
        "  return xs.reduce((a: number, b: number): number => a + b, start ?? 0);\n"
        "}\n"
        "const id = <T,>(x: T): T => x;\n"
        "return [total([1, 2, 3]), id<string>('s')];",
        "function total(xs, start) {\n"
        "  return xs.reduce((a, b) => a + b, start ?? 0);\n"
        "}\n"
        "const id = (x) => x;\n"
        "return [total([1, 2, 3]), id('s')];",
        [],
    ),
    (
        "interfaces and type aliases, over several lines",
        "interface PR {\n  number: number;\n  title?: string;\n}\n"
        "type Id = string | number;\ntype Pair<A, B> = [A, B];\n"
        'const prs = (await tools.list_prs({ repo: "acme/api" })) as PR[];\n'
        "const pairs: Pair<Id, string>[] = prs.map((p: PR) => [p.number, p.title ?? '']);\n"
        "return pairs;",
        "\n\n\n\n"
        "\n\n"
        'const prs = (await tools.list_prs({ repo: "acme/api" }));\n'
        "const pairs = prs.map((p) => [p.number, p.title ?? '']);\n"
        "return pairs;",
        [LIST],
    ),
    (
        "satisfies and the non-null assertion",
        "const config = { limit: 2 } satisfies { limit: number };\n"
        'const prs = await tools.list_prs({ repo: "acme/api" });\n'
        "const first = prs.find((p: any) => p.number > 12)!;\n"
        "return first!.number + config.limit;",
        "const config = { limit: 2 };\n"
        'const prs = await tools.list_prs({ repo: "acme/api" });\n'
        "const first = prs.find((p) => p.number > 12);\n"
        "return first.number + config.limit;",
        [LIST],
    ),
    (
        "generics in calls and in new",
        "const m = new Map<string, number>();\nconst s = new Set<number>([1, 2, 2]);\n"
        "m.set('a', s.size);\n"
        "const r = [3, 1, 2].reduce<Record<string, number>>((acc, x) => "
        "({ ...acc, [x]: x * 2 }), {});\n"
        "return [Object.fromEntries(m), r, Array.from<number>(s)];",
        "const m = new Map();\nconst s = new Set([1, 2, 2]);\n"
        "m.set('a', s.size);\n"
        "const r = [3, 1, 2].reduce((acc, x) => ({ ...acc, [x]: x * 2 }), {});\n"
        "return [Object.fromEntries(m), r, Array.from(s)];",
        [],
    ),
    (
        "enums: numeric, string, const, over several lines",
        "enum Level {\n  Low,\n  High = 10,\n  Higher,\n}\n"
        'const enum Color { Red = "red", Blue = "blue" }\n'
        "return [Level.Low, Level.High, Level.Higher, Level[10], Color.Blue];",
        "const Level = { Low: 0, High: 10, Higher: 11, 0: 'Low', 10: 'High', 11: 'Higher' };\n"
        "\n\n\n\n"
        'const Color = { Red: "red", Blue: "blue" };\n'
        "return [Level.Low, Level.High, Level.Higher, Level[10], Color.Blue];",
        [],
    ),
    (
        "classes: modifiers, parameter properties, abstract, implements, declare",
        "declare const nothing: number;\n"
        "interface Named { name: string }\n"
        "abstract class Base implements Named {\n"
        "  abstract name: string;\n"
        "  protected count: number = 1;\n"
        "  constructor(public readonly tag: string, private secret?: string) {}\n"
        "  label(): string { return this.tag + ':' + this.name + this.count; }\n"
        "}\n"
        "class Thing extends Base { name = 'thing'; }\n"
        "return new Thing('t').label();",
        "\n"
        "\n"
        "class Base {\n"
        "\n"
        "  count = 1;\n"
        "  constructor(tag, secret) { this.tag = tag; this.secret = secret; }\n"
        "  label() { return this.tag + ':' + this.name + this.count; }\n"
        "}\n"
        "class Thing extends Base { name = 'thing'; }\n"
        "return new Thing('t').label();",
        [],
    ),
    (
        "angle-bracket casts, type-only imports, typeof types, unions in catch",
        "import type { Foo } from './foo';\n"
        "const n = <number>(<unknown>'5');\n"
        "let copy: typeof n = n;\n"
        "try { JSON.parse('{'); } catch (e: unknown) { return [copy, (e as Error).name]; }",
        "\n"
        "const n = ('5');\n"
        "let copy = n;\n"
        "try { JSON.parse('{'); } catch (e) { return [copy, (e).name]; }",
        [],
    ),
    (
        "comparisons that look like generics stay comparisons",
        "const a = 1, b = 2, c = 3;\nlet n = 0;\nfor (let i = 0; i < 3; i++) n += i;\n"
        "return [a < b, b > c, a < b && b > a, n];",
        "const a = 1, b = 2, c = 3;\nlet n = 0;\nfor (let i = 0; i < 3; i++) n += i;\n"
        "return [a < b, b > c, a < b && b > a, n];",
        [],
    ),
    (
        "a typed script stops on its new calls and keeps them in order",
        "const ids: number[] = [1, 2];\n"
        "const users = await Promise.all(ids.map((id: number) => tools.get_user({ id })));\n"
        "return users;",
        "const ids = [1, 2];\n"
        "const users = await Promise.all(ids.map((id) => tools.get_user({ id })));\n"
        "return users;",
        [],
    ),
    (
        "an error in a typed script names the model's line",
        "interface PR {\n  number: number;\n}\n"
        "const prs: PR[] = [];\n"
        "const first: PR = prs[0]!;\n"
        "console.log('before');\n"
        "return (first as any).number.toFixed(2);",
        "\n\n\n"
        "const prs = [];\n"
        "const first = prs[0];\n"
        "console.log('before');\n"
        "return (first).number.toFixed(2);",
        [],
    ),
]


@pytest.mark.parametrize("prepared", [False, True], ids=["fresh", "prepared"])
@pytest.mark.parametrize(("name", "ts", "js", "records"), CORPUS, ids=[c[0] for c in CORPUS])
def test_typed_script_ends_as_its_javascript(
    name: str, ts: str, js: str, records: list[Any], prepared: bool
) -> None:
    """The typed script and its JavaScript give the same calls, value, output and error."""
    typed = run(ts, records, prepared=prepared)
    plain = run(js, records, prepared=prepared)
    assert typed.outcome != "failed" or "error in a typed script" in name, typed.error
    # The error lines quote the model's own text, which differs; the numbers must not.
    got, want = outcome(typed), outcome(plain)
    if typed.error is not None and plain.error is not None:
        assert [x.line for x in typed.error.lines] == [x.line for x in plain.error.lines]
        assert typed.error.lines, typed.error
        got, want = got[:4], want[:4]
    assert got == want


def test_error_line_of_a_typed_script_quotes_the_models_text() -> None:
    """The failing line is numbered and quoted as the model wrote it, types and all."""
    ran = run("type A = { x: number };\nconst a = null as unknown as A;\nreturn a.x;")
    assert ran.error is not None and ran.error.name == "TypeError"
    assert [(x.line, x.text) for x in ran.error.lines] == [(3, "return a.x;")]


def test_syntax_error_in_a_typed_script_names_its_line() -> None:
    """A script that is neither JavaScript nor TypeScript fails with the parser's line."""
    ran = run("const a: number = 1;\nconst b: string = 'x';\nconst c: = ;\nreturn a;")
    assert ran.outcome == "failed" and ran.error is not None
    assert ran.error.name == "SyntaxError"
    assert [(x.line, x.text) for x in ran.error.lines] == [(3, "const c: = ;")]


@pytest.mark.parametrize("lf", ["\r", "\u2028"])
def test_a_stripping_error_names_the_line_the_script_counts(lf: str) -> None:
    """Lines that end with a lone CR (or U+2028): the parser's error and a refused namespace
    name the line they are on, as every other error does (Sucrase counts line feeds only, so
    each was on line 1)."""
    ran = run(f"const a: number = 1;{lf}const b: string = 'x';{lf}const c: = ;{lf}return a;")
    assert ran.error is not None and ran.error.name == "SyntaxError"
    assert ran.error.message.endswith("(3:10)"), ran.error.message
    assert [(x.line, x.text) for x in ran.error.lines] == [(3, "const c: = ;")]
    ran = run(f"const a: number = 1;{lf}namespace N {{ export const x = 1; }}{lf}return N.x;")
    assert ran.error is not None and "namespace declarations" in ran.error.message
    assert [x.line for x in ran.error.lines] == [2]


@pytest.mark.parametrize(
    ("code", "line"),
    [
        ("const x = <div>hi</div>;\nreturn x;", 1),
        ('const n: number = 1;\nreturn <p className="a">{n}</p>;', 2),
        ("const el = <Chart\n  data={[1]}\n/>;\nreturn el;", 1),
        (
            "const items = [1];\nreturn (\n  <ul>\n    {items.map((i) => <li>{i}</li>)}\n  </ul>\n);",
            3,
        ),
        ("return <>fragment</>;", 1),
    ],
)
def test_jsx_is_refused_saying_what_to_write(code: str, line: int) -> None:
    """JSX fails at its first element's line saying it is not supported and what to write
    (Sucrase's error said "Unterminated regular expression (1:20)" or 'expected ">"')."""
    ran = run(code)
    assert ran.error is not None and ran.error.name == "SyntaxError", ran.error
    assert ran.error.message.startswith("JSX is not supported in a script: build markup as text")
    assert [x.line for x in ran.error.lines] == [line]


def test_a_syntax_error_beside_what_looks_like_jsx_is_the_parsers() -> None:
    """A script with no JSX (a generic arrow function, a comparison with a closing tag's
    shape) that does not parse fails with the parser's own error."""
    ran = run("const f = <T,>(x: T) => x;\nconst c: = f(1) </ 2;\nreturn c;")
    assert ran.error is not None and ran.error.name == "SyntaxError"
    assert "JSX" not in ran.error.message and [x.line for x in ran.error.lines] == [2]


def test_value_namespace_is_refused_with_what_to_do() -> None:
    """A namespace would be dropped silently by the stripper: it is refused instead."""
    ran = run("const x = 1;\nnamespace N {\n  export const a = 1;\n}\nreturn N.a;")
    assert ran.error is not None and ran.error.name == "SyntaxError"
    assert "namespace declarations are not supported" in ran.error.message
    assert "const N = {" in ran.error.message
    assert [x.line for x in ran.error.lines] == [2]


@pytest.mark.parametrize(
    ("code", "line"),
    [
        ("const z = 1; namespace N { export const a = 1; }\nreturn N.a;", 1),
        ("/* c */ namespace N { export const a = 1; }\nreturn N.a;", 1),
        ("let n: number = 1;\nif (n) {\n  namespace M { export const b = 2; }\n}\nreturn 1;", 3),
        ("const x: number = 1;\nif (x) { module Legacy { export const z = 1; } }\nreturn 1;", 2),
        ("declare global { namespace G {} }\nnamespace Z { export const v = 1 }\nreturn 1;", 2),
        ("namespace T { export type X = 1 }\nnamespace N { export enum E { A } }\nreturn 1;", 2),
        ("namespace A {\n  export type X = 1;\n  export namespace B { export let y = 2 }\n}", 3),
    ],
)
def test_a_value_namespace_anywhere_is_refused(code: str, line: int) -> None:
    """Sucrase drops a value namespace wherever it is, not only at the start of a line (its
    code never ran, and using it was a ReferenceError): each is refused at its line."""
    ran = run(code)
    assert ran.error is not None and ran.error.name == "SyntaxError", ran.error
    assert "declarations are not supported in a script" in ran.error.message
    assert [x.line for x in ran.error.lines] == [line]


def test_namespace_shapes_that_declare_no_value_run() -> None:
    """Ambient namespaces, nested ones included, and the shape in a string or a comment are
    not value namespaces."""
    code = (
        'const s: string = "; namespace X { a";\n'
        "// namespace Y { in a comment\n"
        "declare namespace D { namespace Inner { const x: number } }\n"
        'declare module "m" { namespace H { const q: "}" } }\n'
        "declare global { namespace G {} }\n"
        "return s;"
    )
    ran = run(code)
    assert ran.outcome == "finished", ran.error
    assert ran.value == "; namespace X { a"


@pytest.mark.parametrize("prepared", [False, True])
def test_a_namespace_of_types_alone_is_removed(prepared: bool) -> None:
    """A namespace that declares only types (interfaces, aliases, `declare`, namespaces of
    types) has no value, and TypeScript emits nothing for it: it runs, its types read as
    `Api.Pr`. It was refused as a value namespace, telling the model to write an object."""
    code = (
        "namespace Api {\n"
        "  export interface Pr { n: number }\n"
        "  export type Id = string; // the pull request's id\n"
        "  /* later: labels */\n"
        "  export namespace Inner { export type Flag = boolean }\n"
        "  export declare const version: string;\n"
        "}\n"
        "module Old { export interface Shape { s: '}' } }\n"
        "namespace Empty {}\n"
        "const p: Api.Pr = { n: 2 };\n"
        "const f: Api.Inner.Flag = true;\n"
        "return f ? p.n : 0;"
    )
    ran = run(code, prepared=prepared)
    assert ran.outcome == "finished", ran.error
    assert ran.value == 2


def test_the_stripper_is_out_of_the_scripts_reach() -> None:
    """The script cannot see or replace the function that stripped it."""
    code = "const t: string = typeof globalThis.__cm_typescript;\nreturn t;"
    assert run(code).value == "undefined"
    assert run(code, prepared=True).value == "undefined"
    assert run("return typeof globalThis.__cm_typescript", prepared=True).value == "undefined"


def test_plain_javascript_is_not_stripped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A script with no `<` that compiles as JavaScript never reaches the stripper."""

    def refuse(self: Any, code: str, **bounds: int) -> str:
        raise AssertionError("stripped a plain script")

    monkeypatch.setattr(typescript.Stripper, "strip", refuse)
    ran = run('const prs = await tools.list_prs({ repo: "acme/api" });\nreturn prs.length;', [LIST])
    assert ran.value == 2
    comparisons = (
        "let n = 0;\nfor (let i = 0; i < 3; i++) n += i;\n"
        "const html = '<b>' + n + '</b>';\n"
        "if (n < 5 && n > (1)) return [html, [1, 2].map((x) => (x < 2 ? x : -x))];"
    )
    assert run(comparisons).value == ["<b>3</b>", [1, -2]]


@pytest.mark.parametrize(
    "code",
    [
        "const id = (x) => x;\nreturn id<Number>(5);",
        "const id = (x) => x;\nreturn id<Array<Number>>(5);",
        "const tag = (s) => s[0];\nreturn tag<String>`5`;",
        # An object type is an object literal in JavaScript: these ran as comparisons, and
        # failed with "ReferenceError: number is not defined".
        "return [2, 3].reduce<{ total: number, n: number }>((a, x) => a + x, 0);",
        "const id = (x) => x;\nreturn id<Array<{ n: number }>>(5);",
        "const id = (x) => x;\nreturn id<{ n: number } & { m: string }>(5);",
    ],
)
def test_call_with_type_arguments_means_what_typescript_says(code: str) -> None:
    """`id<Number>(5)` is also JavaScript (two comparisons, false): it is stripped first, so
    it is the call TypeScript reads."""
    assert run(code).value in (5, "5")


def test_a_body_that_parses_is_never_stripped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A body that parses as JavaScript goes to the compile, never to the stripper, even one
    that closes its function early (`}; function JSON() {}`): the compile refuses that, and
    what it declared stays in the script's own context."""

    def refuse(self: Any, code: str, **bounds: int) -> str:
        raise AssertionError("stripped a body that parses")

    monkeypatch.setattr(typescript.Stripper, "strip", refuse)
    hostile = "return 1;\n}\nfunction JSON() {}\nfunction __cm_typescript() {}\nfunction y() {"
    for prepared in (False, True):
        ran = run(hostile, prepared=prepared)
        assert ran.outcome == "failed" and ran.error is not None
        assert "closes the function" in ran.error.message


def test_a_typed_script_is_compiled_once_stripped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A typed script that does not parse as JavaScript is stripped once, then compiled."""
    calls: list[str] = []
    strip = typescript.Stripper.strip

    def counted(self: Any, code: str, **bounds: int) -> str:
        calls.append(code)
        return strip(self, code, **bounds)

    monkeypatch.setattr(typescript.Stripper, "strip", counted)
    code = "const a: number = 2;\nreturn a * 3;"
    assert run(code, prepared=True).value == 6
    assert calls == [code]


# ---- hostile input: each ends within the run's bounds, with a clear error ----


def test_deeply_nested_types_end_on_a_clear_error() -> None:
    """Types nested past the JS stack bound fail the run with what to do, not a crash."""
    depth = 20_000
    code = "let x: " + "Array<" * depth + "number" + ">" * depth + " = [];\nreturn 1;"
    ran = run(code)
    assert ran.outcome == "failed" and ran.error is not None
    assert ran.error.name == "SyntaxError"
    assert "nests too deeply" in ran.error.message and "simpler types" in ran.error.message
    assert "a bracket that is never closed" in ran.error.message


def test_nesting_models_write_is_stripped_and_a_syntax_error_is_named() -> None:
    """A typed literal nested 60 deep is stripped and runs; plain JavaScript with 60
    unclosed parentheses (parsed by the stripper, since QuickJS cannot) gets the parser's
    syntax error and its line, not a word about types (at a 1 MiB stack, both overflowed
    the stripper's parser)."""
    nested = "const cfg: any = " + "{a: " * 60 + "1" + "}" * 60 + ";\nreturn 1;"
    assert run(nested).value == 1
    ran = run("const x = 1;\nconst y = " + "(" * 60 + "1;\nreturn y;")
    assert ran.outcome == "failed" and ran.error is not None
    assert ran.error.name == "SyntaxError" and "types" not in ran.error.message
    assert [line.line for line in ran.error.lines] == [2]


@pytest.mark.parametrize("prepared", [False, True], ids=["fresh", "prepared"])
def test_huge_type_meets_the_memory_limit(prepared: bool) -> None:
    """A type the stripper cannot hold in the run's heap ends on the memory limit (in a
    fresh context the stripper itself may be what does not fit)."""
    members = "".join(f"  m{i}: {{ a: string; b: number[] }};\n" for i in range(6_000))
    code = "interface Huge {\n" + members + "}\nreturn 1;"
    assert len(code) < 256 * 1024  # within what the engine accepts
    ran = run(code, prepared=prepared, memory=4 * 1024 * 1024)
    assert ran.outcome == "failed" and ran.limit is not None, ran
    assert ran.limit.name == "memory"
    assert run(code, prepared=prepared).value == 1  # and it fits in the default heap


def test_pathological_generics_are_stripped_not_solved() -> None:
    """The stripper never evaluates types, so a type that would make a checker spin costs
    only its length."""
    code = (
        "type Loop<T> = T extends [infer H, ...infer R] ? Loop<[...R, H, H]> : never;\n"
        "type Big = Loop<[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]>;\n"
        "const x: Big = null as any;\nreturn 'ok';"
    )
    assert run(code).value == "ok"


# ---- through a real, confined process ----


@pytest.mark.parametrize("mode", ["pool", "exec"])
def test_typed_script_in_a_confined_process(mode: str) -> None:
    """In a fork server's child (stripper compiled before the fork) and in an exec'd process
    (compiled on demand, after lockdown) a typed script runs and its error keeps its line."""
    from runner import ProcessRunner

    async def go() -> list[Ran]:
        async with ProcessRunner(mode=mode, slots=1) as runner:  # type: ignore[arg-type]
            ok = await runner.run(script(CORPUS[0][1], [LIST]))
            bad = await runner.run(script("const x: number | null = null;\nx!.toFixed();"))
            return [ok, bad]

    ok, bad = asyncio.run(go())
    assert ok.outcome == "finished" and ok.value == [12, 15], ok.error
    assert bad.error is not None and bad.error.name == "TypeError"
    assert [(x.line, x.text) for x in bad.error.lines] == [(2, "x!.toFixed();")]
