"""The engine's corpus of scripts: what scripts do between and around their calls, each with
the tools (deterministic: a result depends only on the call) and files it needs.

The differential test (tests/engine/test_live.py) runs every script here, every golden log's
script (tests/engine/golden) and every script of the runner conformance suite live, by
replay, and live with evictions, and requires the same outcome.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import orjson

from engine import Attachment, Tool, ToolCallError

TESTS = Path(__file__).resolve().parents[1]

PRS = [
    {"number": 12, "updated_at": "2025-12-01T09:00:00Z"},
    {"number": 14, "updated_at": "2026-01-12T09:00:00Z"},
    {"number": 15, "updated_at": "2025-12-24T09:00:00Z"},
]
REVIEWS = {12: [], 14: [{"state": "APPROVED"}], 15: [{"state": "COMMENTED"}]}

CSV = b"region,amount\nnorth,10\nsouth,32\neast,7\nwest,51\n"
FILES = [
    Attachment("sales.csv", data=CSV, mime="text/csv"),
    Attachment("notes.txt", data=b"first line\nsecond line\n" * 50, mime="text/plain"),
]

# name -> code. Each exercises something a live run keeps across its segments (state, the
# job queue, printed text, time and randomness, errors, files, limits) or a way a run ends.
SCRIPTS: dict[str, str] = {
    "no_calls": "return 1 + 1",
    "sequential_loop": """
let total = 0;
for (let i = 0; i < 12; i++) {
  total += await tools.add({ a: total, b: i });
  console.log(`step ${i}: ${total}`);
}
return total;
""",
    "parallel": """
const got = await Promise.all([1, 2, 3, 4, 5].map((n) => tools.echo({ n })));
return got.map((g) => g.n * 2);
""",
    # Returned images past shown_files (4): which are attached is the outcome's, as the rest.
    "returned_images_past_the_budget": """
const { n } = await tools.echo({ n: 6 });
const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
return Array.from({ length: n }, () => ({ type: "image", data: png, mimeType: "image/png" }));
""",
    "parallel_then_sequential": """
const first = await Promise.all([tools.echo({ a: 1 }), tools.add({ a: 2, b: 3 })]);
const second = await tools.add({ a: first[1], b: 10 });
const third = await Promise.all([tools.echo({ x: second }), tools.echo({ y: second })]);
console.log(JSON.stringify(third));
return { first, second, third };
""",
    "race_and_order": """
const order = [];
const p1 = tools.echo({ k: 1 }).then((r) => { order.push('a'); return r; });
const p2 = tools.echo({ k: 2 }).then((r) => { order.push('b'); return r; });
await p2;
order.push('after p2');
await p1;
const r3 = await tools.echo({ k: 3, order: order.join(',') });
return { order, r3 };
""",
    "microtasks_between_calls": """
const log = [];
Promise.resolve().then(() => log.push('micro 1'));
const a = await tools.echo({ n: 1 });
Promise.resolve().then(() => log.push('micro 2')).then(() => log.push('micro 3'));
log.push('after a');
const b = await tools.echo({ n: 2 });
log.push('after b');
return log;
""",
    "caught_error": """
let note = 'none';
try { await tools.fail({ message: 'card declined' }) } catch (e) { note = e.message }
const after = await tools.echo({ note });
return { note, after };
""",
    "uncaught_error": """
await tools.echo({ n: 1 });
await tools.fail({ message: 'out of stock' });
return 'never';
""",
    "throw_after_calls": """
const a = await tools.add({ a: 1, b: 2 });
console.log('got', a);
if (a === 3) throw new TypeError(`bad total ${a}`);
return a;
""",
    "clock_and_random": """
const values = [];
for (let i = 0; i < 4; i++) {
  values.push([Math.random(), Date.now(), new Date().toISOString()]);
  await tools.echo({ i, r: values[i][0] });
}
return values;
""",
    "not_awaited_call": """
tools.echo({ lost: 'unless made' });
const a = await tools.add({ a: 1, b: 1 });
tools.echo({ also: a });
return a;
""",
    "closure_state": """
const seen = new Map();
async function visit(k) {
  if (seen.has(k)) return seen.get(k);
  const v = await tools.add({ a: k, b: k });
  seen.set(k, v);
  return v;
}
const out = [];
for (const k of [1, 2, 1, 3, 2]) out.push(await visit(k));
return { out, size: seen.size };
""",
    "async_generator": """
async function* pages() {
  for (let p = 1; p <= 3; p++) yield await tools.page({ p });
}
const rows = [];
for await (const page of pages()) rows.push(...page.rows);
return rows;
""",
    "big_printed": """
console.log('x'.repeat(50000));
await tools.echo({ n: 1 });
console.log('y'.repeat(50000));
await tools.echo({ n: 2 });
console.log('z'.repeat(50000));
return 'printed';
""",
    "compute_before_calls": """
let h = 0;
for (let i = 0; i < 200000; i++) h = (h * 31 + i) % 1000003;
const a = await tools.add({ a: h, b: 1 });
for (let i = 0; i < 200000; i++) h = (h * 17 + i) % 1000003;
const b = await tools.add({ a: h, b: a });
return b;
""",
    "stuck_after_call": """
await tools.echo({ n: 1 });
await new Promise(() => {});
return 'never';
""",
    "returns_while_calls_pending": """
const slow = tools.echo({ late: true });
const a = await tools.echo({ early: true });
return { a };
""",
    "approval_in_the_middle": """
const a = await tools.add({ a: 1, b: 2 });
const paid = await tools.pay({ cents: a * 100 });
const b = await tools.add({ a, b: 4 });
return { a, paid, b };
""",
    "files_between_calls": """
const rows = [];
for await (const row of files.csv('sales.csv', { header: true })) {
  const checked = await tools.echo({ region: row.region });
  rows.push([checked.region, Number(row.amount)]);
}
const text = await files.text('notes.txt');
files.show('sales.csv');
await tools.echo({ lines: text.split('\\n').length });
return rows;
""",
    "tool_search": """
const found = await tools.tool_search({ query: 'add numbers' });
const a = await tools.add({ a: 2, b: 2 });
return { found: found.length > 0, a };
""",
    "too_many_calls": """
for (let i = 0; i < 30; i++) await tools.echo({ i });
return 'done';
""",
    "results_budget": """
const parts = [];
for (let i = 0; i < 6; i++) parts.push((await tools.big({ kib: 100 })).length);
return parts;
""",
    "error_objects": """
const errors = [];
for (const m of ['a', 'b']) {
  try { await tools.fail({ message: m }) } catch (e) { errors.push([e.name, e.message]) }
}
return errors;
""",
    "undefined_and_nested": """
const r = await tools.echo({ deep: { list: [1, { x: null }], s: 'é ✓' } });
await tools.echo({});
return undefined;
""",
    "syntax_error": "return (1 +;",
    "many_sequential": """
let s = 0;
for (let i = 0; i < 60; i++) s += (await tools.add({ a: i, b: 0 }));
return s;
""",
}


# The same cases in Python, by the same names: the same tools called with the same arguments
# in the same order, the same value returned and the same text printed, so one table of cases
# runs in both languages (tests/engine/test_live.py). A JavaScript case with no Python entry
# tests what only JavaScript has (a `.then` chain, the microtask queue).
PYTHON_SCRIPTS: dict[str, str] = {
    "no_calls": "return 1 + 1",
    "sequential_loop": """
total = 0
for i in range(12):
    total += await tools.add(a=total, b=i)
    print(f"step {i}: {total}")
return total
""",
    "parallel": """
import asyncio
got = await asyncio.gather(*[tools.echo(n=n) for n in [1, 2, 3, 4, 5]])
return [g["n"] * 2 for g in got]
""",
    "parallel_then_sequential": """
import asyncio, json
first = await asyncio.gather(tools.echo(a=1), tools.add(a=2, b=3))
second = await tools.add(a=first[1], b=10)
third = await asyncio.gather(tools.echo(x=second), tools.echo(y=second))
print(json.dumps(third, separators=(",", ":")))
return {"first": first, "second": second, "third": third}
""",
    "caught_error": """
note = "none"
try:
    await tools.fail(message="card declined")
except Exception as e:
    note = str(e)
after = await tools.echo(note=note)
return {"note": note, "after": after}
""",
    "uncaught_error": """
await tools.echo(n=1)
await tools.fail(message="out of stock")
return "never"
""",
    "throw_after_calls": """
a = await tools.add(a=1, b=2)
print("got", a)
if a == 3:
    raise TypeError(f"bad total {a}")
return a
""",
    "clock_and_random": """
import random, time
from datetime import datetime, timezone
values = []
for i in range(4):
    values.append([random.random(), int(time.time() * 1000), datetime.now(timezone.utc).isoformat()])
    await tools.echo(i=i, r=values[i][0])
return values
""",
    "not_awaited_call": """
tools.echo(lost="unless made")
a = await tools.add(a=1, b=1)
tools.echo(also=a)
return a
""",
    "closure_state": """
seen = {}
async def visit(k):
    if k in seen:
        return seen[k]
    v = await tools.add(a=k, b=k)
    seen[k] = v
    return v
out = []
for k in [1, 2, 1, 3, 2]:
    out.append(await visit(k))
return {"out": out, "size": len(seen)}
""",
    "async_generator": """
async def pages():
    for p in range(1, 4):
        yield await tools.page(p=p)
rows = []
async for page in pages():
    rows.extend(page["rows"])
return rows
""",
    "big_printed": """
print("x" * 50000)
await tools.echo(n=1)
print("y" * 50000)
await tools.echo(n=2)
print("z" * 50000)
return "printed"
""",
    "compute_before_calls": """
h = 0
for i in range(200000):
    h = (h * 31 + i) % 1000003
a = await tools.add(a=h, b=1)
for i in range(200000):
    h = (h * 17 + i) % 1000003
b = await tools.add(a=h, b=a)
return b
""",
    "returns_while_calls_pending": """
slow = tools.echo(late=True)
a = await tools.echo(early=True)
return {"a": a}
""",
    "approval_in_the_middle": """
a = await tools.add(a=1, b=2)
paid = await tools.pay(cents=a * 100)
b = await tools.add(a=a, b=4)
return {"a": a, "paid": paid, "b": b}
""",
    "files_between_calls": """
rows = []
async for row in files.csv("sales.csv", header=True):
    checked = await tools.echo(region=row["region"])
    rows.append([checked["region"], int(row["amount"])])
text = await files.text("notes.txt")
files.show("sales.csv")
await tools.echo(lines=len(text.split("\\n")))
return rows
""",
    "tool_search": """
found = await tools.tool_search(query="add numbers")
a = await tools.add(a=2, b=2)
return {"found": len(found) > 0, "a": a}
""",
    "too_many_calls": """
for i in range(30):
    await tools.echo(i=i)
return "done"
""",
    "results_budget": """
parts = []
for i in range(6):
    parts.append(len(await tools.big(kib=100)))
return parts
""",
    "error_objects": """
errors = []
for m in ["a", "b"]:
    try:
        await tools.fail(message=m)
    except Exception as e:
        errors.append([type(e).__name__, str(e)])
return errors
""",
    "undefined_and_nested": """
r = await tools.echo(deep={"list": [1, {"x": None}], "s": "é ✓"})
await tools.echo()
return None
""",
    "syntax_error": "return (1 +",
    "many_sequential": """
s = 0
for i in range(60):
    s += await tools.add(a=i, b=0)
return s
""",
}

# One table: each case's code in each language it is written in.
CASES: dict[str, dict[str, str]] = {
    name: {
        "javascript": code,
        **({"python": PYTHON_SCRIPTS[name]} if name in PYTHON_SCRIPTS else {}),
    }
    for name, code in SCRIPTS.items()
}


def _echo(**arguments: Any) -> Any:
    return arguments


def _add(a: float, b: float) -> float:
    return a + b


def _fail(message: str) -> Any:
    raise ToolCallError(message)


def _page(p: int) -> Any:
    return {"rows": [f"p{p}r{i}" for i in range(3)]}


def _big(kib: int) -> str:
    return "b" * (kib * 1024)


def _pay(cents: int) -> str:
    return f"paid {cents}"


def _list_prs(**arguments: Any) -> Any:
    return PRS


def _get_reviews(number: int) -> Any:
    return REVIEWS.get(number, [])


ANY = {"type": "object"}


def _tool(name: str, handler: Any, **flags: Any) -> Tool:
    return Tool(
        name, description=f"{name} (corpus tool)", input_schema=ANY, handler=handler, **flags
    )


BASE_TOOLS = {
    "echo": _tool("echo", _echo),
    "add": _tool("add", _add),
    "fail": _tool("fail", _fail),
    "page": _tool("page", _page),
    "big": _tool("big", _big),
    "pay": _tool("pay", _pay, needs_approval=True),
    "github__list_prs": _tool("github__list_prs", _list_prs),
    "github__get_reviews": _tool("github__get_reviews", _get_reviews),
}


def _refusing_echo(name: str) -> Any:
    """An echo that fails a call passing ``fail`` (as the conformance suite answers it)."""

    def handler(**arguments: Any) -> Any:
        if arguments.get("fail"):
            raise ToolCallError(f"{name} refused")
        return {"echo": arguments}

    return handler


def tools_for(codes: list[str]) -> list[Tool]:
    """The corpus tools, and an echo tool for every other name the scripts call."""
    names = {n for code in codes for n in re.findall(r"tools\.(\w+)", code)}
    extra = sorted(names - set(BASE_TOOLS) - {"tool_search", "skill"})
    return list(BASE_TOOLS.values()) + [_tool(n, _refusing_echo(n)) for n in extra]


def golden_scripts() -> dict[str, str]:
    """The script of every golden log."""
    return {
        f"golden/{p.stem}": orjson.loads(p.read_bytes())["code"]
        for p in sorted((TESTS / "engine" / "golden").glob("*.json"))
    }


# Conformance scripts an in-process run cannot end (nothing bounds its CPU there).
ENDLESS = ("for (;;)", "while (true)", "while(true)")


def conformance_scripts(language: str = "javascript") -> dict[str, str]:
    """Every script in ``language`` that the runner conformance suite runs (JavaScript: the
    code given to its ``script()``, a literal or a module constant, read from its source
    so that new checks count too; either: its live corpus, whose Python scripts' names end
    in ``_python``)."""
    from tests.runner.conformance import LIVE_CORPUS

    found: dict[str, str] = {}
    if language == "python":
        for name, (code, _) in LIVE_CORPUS.items():
            if name.endswith("_python"):
                found[f"conformance/live_{name}"] = code
        return found
    path = TESTS / "runner" / "conformance.py"
    tree = ast.parse(path.read_text())
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "script"):
            continue
        if not node.args:
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            code = arg.value
        elif isinstance(arg, ast.Name) and arg.id in constants:
            code = constants[arg.id]
        else:
            continue
        if any(e in code for e in ENDLESS) or code in found.values():
            continue
        found[f"conformance/{len(found)}"] = code
    for name, (code, _) in LIVE_CORPUS.items():
        if code not in found.values() and not name.endswith("_python"):
            found[f"conformance/live_{name}"] = code
    return found
