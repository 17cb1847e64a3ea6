"""Python scripts through the engine: the language is the script's (kept in the log, sent to
the runner, kept across a resume whatever the engine's default), tools.tool_search and
tools.skill answer in it, the CLI takes and shows it, and real confined processes run it
live and by replay."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from engine import CodeMode, Limits, MemoryStore, Skill, tool
from runner import ProcessRunner
from sandbox.protocol import MiB
from tests._needs import require
from tests.engine.conftest import InProcessRunner
from tests.engine.test_live import add, pay

ROOT = Path(__file__).resolve().parents[2]


PAYING = """
a = await tools.add(a=1, b=2)
paid = await tools.pay(cents=a * 100)
print("paid", paid)
return {"a": a, "paid": paid}
"""


async def test_a_python_script_keeps_its_language_across_a_resume(
    inproc: InProcessRunner,
) -> None:
    """A Python script started on a JavaScript engine pauses; another engine whose default
    is JavaScript resumes it from the log, and it goes on in Python."""
    store = MemoryStore()
    first = CodeMode([add, pay], runner=inproc, store=store, type_check="off")
    paused = await first.run_code(PAYING, language="python")
    assert paused.status == "paused", paused.text
    assert inproc.steps and {s.language for s in inproc.steps} == {"python"}
    record = await store.get_script(paused.script_id)
    assert record.language == "python"
    await first.approve(paused.script_id, paused.waiting[0]["call_id"])
    second = CodeMode([add, pay], runner=inproc, store=store, type_check="off")
    assert second.language == "javascript"
    done = await second.resume(paused.script_id)
    assert done.status == "finished", done.text
    assert done.value == {"a": 3, "paid": "paid 300"}
    assert "paid paid 300" in done.text
    assert {s.language for s in inproc.steps} == {"python"}
    await second.aclose()


async def test_tool_search_and_skill_answer_in_the_scripts_language(
    inproc: InProcessRunner,
) -> None:
    """A Python script's tools.tool_search and tools.skill print Python stubs; a JavaScript
    script's on the same engine print TypeScript."""
    skill = Skill("sums", "Adding", "Add things up.", tools=("add",))
    engine = CodeMode([add], runner=inproc, skills=[skill], type_check="off", language="python")
    code = 'print(await tools.tool_search(query="add"))\nprint(await tools.skill(name="sums"))'
    python = await engine.run_code(code)
    assert python.status == "finished", python.text
    assert (
        python.text.count("```python\nclass Tools:\n    async def add(self, *, a: int, b: int)")
        == 2
    )
    js = await engine.run_code(
        'console.log(await tools.tool_search({ query: "add" }))', language="javascript"
    )
    assert "```ts\ndeclare const tools: {" in js.text and "class Tools" not in js.text
    await engine.aclose()


async def test_a_skill_asked_for_by_no_name_is_told_in_the_scripts_language(
    inproc: InProcessRunner,
) -> None:
    """tools.skill given a name that is no text says how to write one in the script's own
    language (a Python script was told { name: "skill name" }, JavaScript's)."""
    skill = Skill("sums", "Adding", "Add things up.", tools=("add",))
    engine = CodeMode([add], runner=inproc, skills=[skill], language="python")
    # A name the type check cannot see the type of (json.loads gives Any).
    code = (
        "import json\ntry:\n    await tools.skill(name=json.loads('5'))\n"
        "except ToolError as e:\n    return str(e)"
    )
    result = await engine.run_code(code)
    assert result.value == (
        'tools.skill takes a skill\'s name as text, as await tools.skill(name="skill name")'
    ), result.text
    js = await engine.run_code(
        "try { await tools.skill({ name: JSON.parse('5') }) } catch (e) { return e.message }",
        language="javascript",
    )
    assert js.value.endswith('as await tools.skill({ name: "skill name" })'), js.text
    await engine.aclose()


async def test_a_script_catches_a_failed_call_as_tool_error(inproc: InProcessRunner) -> None:
    """The README's and the model's promise: a failed call raises ToolError, which the
    script names in ``except``: a refused argument (type check off) and a tool that raised
    (type check on, which the script passes)."""

    def get(n: int) -> int:
        """Get item n."""
        if n < 0:
            raise ValueError("n is negative")
        return n

    code = (
        "try:\n    await tools.get(n={n})\n"
        "except ToolError as e:\n    return [type(e).__name__, e.tool, str(e)]"
    )
    unchecked = CodeMode([get], runner=inproc, type_check="off", language="python")
    refused = await unchecked.run_code(code.format(n='"x"'))
    assert refused.status == "finished", refused.text
    assert refused.value == [
        "ToolError",
        "get",
        "tools.get: invalid arguments: at n: expected integer, got string",
    ]
    await unchecked.aclose()
    checked = CodeMode([get], runner=inproc, language="python")
    raised = await checked.run_code(code.format(n=-1))
    assert raised.status == "finished", raised.text
    assert raised.value[:2] == ["ToolError", "get"] and "n is negative" in raised.value[2]
    await checked.aclose()


async def test_a_forgotten_await_is_named_in_what_the_model_reads(
    inproc: InProcessRunner,
) -> None:
    """A Python script that does not await a call (the type check passes it): using the
    call as its result fails naming the fix, printing it says the same, and a call that
    failed with nothing awaiting it gets a line after the printed text (before: a silent
    False, `<_Future pending>`, and nothing at all)."""

    @tool
    async def price(sku: str) -> float:
        """The price of a product."""
        if sku == "bad":
            raise ValueError("no such sku")
        return 9.5

    engine = CodeMode([price], runner=inproc, store=MemoryStore(), language="python")
    fix = 'tools.price(...) gives an awaitable, not its result: write "await tools.price(...)"'
    try:
        compared = await engine.run_code("r = tools.price(sku='a')\nif r == 9.5:\n    print('ok')")
        printed = await engine.run_code("r = tools.price(sku='a')\nprint(r)")
        lost = await engine.run_code("tools.price(sku='bad')\nprint('done')")
    finally:
        await engine.aclose()
    assert compared.status == "failed"
    assert compared.text == f"Script failed.\nTypeError: {fix}\n  at line 2: if r == 9.5:"
    assert printed.status == "finished"
    assert printed.text == f"Script finished.\nPrinted:\n<{fix}>"
    assert lost.status == "finished"
    assert lost.text == (
        "Script finished.\nPrinted:\ndone\n"
        "line 1: RuntimeWarning: tools.price(...) failed and nothing awaited it: no such sku"
    )


async def test_a_misuse_reads_the_same_live_and_replayed_and_names_no_sandbox_class() -> None:
    """What the model reads of a script that printed asyncio's objects and misused a lock,
    after a call: the same live and replayed, in the script's words (it printed
    <sandbox.python._Timeout object at 0x...>, an address that differs from run to run, and
    <class 'sandbox.python._ToolFunction'>; the misuse said "'Lock' object does not support
    the context manager protocol", nothing of `async with`)."""
    code = (
        "import asyncio\n"
        "n = await tools.add(a=1, b=2)\n"
        "print(n, asyncio.timeout(1), type(tools.add), asyncio.sleep(0))\n"
        "with asyncio.Lock():\n"
        "    pass\n"
    )
    texts = []
    for live in (True, False):
        engine = CodeMode(
            [add], runner=InProcessRunner(), type_check="off", language="python", live=live
        )
        try:
            texts.append((await engine.run_code(code)).text)
        finally:
            await engine.aclose()
    assert (
        texts
        == [
            "Script failed.\n"
            "TypeError: asyncio.Lock() is entered with `async with`, not `with`: write `async with "
            "lock:`\n"
            "  at line 4: with asyncio.Lock():\n"
            "Printed:\n"
            "3 <Timeout [active]> <class 'tool'> <coroutine object sleep>\n"
            # As CPython warns of it: the sleep is printed, never awaited.
            "line 3: RuntimeWarning: coroutine 'sleep' was never awaited"
        ]
        * 2
    )


@pytest.mark.parametrize("live", [True, False])
async def test_confined_processes_run_python_live_and_by_replay(live: bool) -> None:
    """The process runner's warm pool runs a Python script of parallel and sequential calls
    to the same result live and by replay."""
    runner = ProcessRunner(mode="pool", slots=2)
    engine = CodeMode([add], runner=runner, type_check="off", language="python", live=live)
    code = """
import asyncio
pair = await asyncio.gather(tools.add(a=1, b=2), tools.add(a=3, b=4))
total = 0
for i in range(5):
    total = await tools.add(a=total, b=i)
print("total", total)
return {"pair": pair, "total": total}
"""
    try:
        result = await engine.run_code(code)
    finally:
        await engine.aclose()
    assert result.status == "finished", result.text
    assert result.value == {"pair": [3, 7], "total": 10}
    assert result.steps == 7
    assert "total 10" in result.text


def test_cli_runs_a_python_script_and_show_names_its_language(tmp_path: Path) -> None:
    """`codemode run script.py` runs it as Python; `codemode show` says so."""
    tools_file = tmp_path / "tools.py"
    tools_file.write_text(
        "from engine import tool\n\n@tool\ndef add(a: int, b: int) -> int:\n"
        '    """Add."""\n    return a + b\n'
    )
    script = tmp_path / "script.py"
    script.write_text("return await tools.add(a=20, b=22)\n")
    data = tmp_path / "data"
    command = [sys.executable, "-m", "engine.cli", "run", str(script), "--tools", str(tools_file)]
    run = subprocess.run(
        [*command, "--data-dir", str(data), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr

    first, second = run.stdout.strip().splitlines()
    assert orjson.loads(second)["value"] == 42
    script_id = orjson.loads(first)["script_id"]
    show = subprocess.run(
        [sys.executable, "-m", "engine.cli", "show", script_id, "--data-dir", str(data)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert show.returncode == 0, show.stderr
    assert "  python, tenant default" in show.stdout
    wrong = subprocess.run(
        [*command, "--language", "javascript"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert wrong.returncode == 1  # `return await tools.add(a=20, b=22)` is not JavaScript


async def test_the_example_in_both_languages_gives_the_same_result(
    inproc: InProcessRunner,
) -> None:
    """examples/stale_prs.py is examples/stale_prs.js in Python: against the example
    tracker, the same calls, the same printed text and the same value; the Python one passes
    the type check against the tracker's stubs."""
    from engine._loading import load_tools
    from engine.languages._check import CompilerMissing
    from engine.languages.python import PythonTypeChecker, check_stubs

    tools, _ = load_tools(ROOT / "examples" / "tracker_tools.py")
    engine = CodeMode(tools, runner=inproc, type_check="off")
    results = {}
    for language, name in (("javascript", "stale_prs.js"), ("python", "stale_prs.py")):
        code = (ROOT / "examples" / name).read_text()
        result = await engine.run_code(code, language=language)  # type: ignore[arg-type]
        assert result.status == "finished", result.text
        calls = await engine.store.calls(result.script_id)
        results[language] = (result.value, result.text, [(c.name, c.arguments) for c in calls])
    await engine.aclose()
    assert results["python"] == results["javascript"]
    value, text, made = results["python"]
    assert [pr["number"] for pr in value] == [15, 12]  # the tracker's two stale PRs
    assert "2 stale PRs" in text and len(made) == 3
    try:
        checker = PythonTypeChecker()
    except CompilerMissing as e:
        require(f"ty, the checker of Python scripts: {e}")
    code = (ROOT / "examples" / "stale_prs.py").read_text()
    checked = await checker.check(code, check_stubs(tools))
    assert checked.ok, checked.message()


async def test_long_text_in_a_value_or_an_argument_crosses_whole() -> None:
    """Data whose strings hold over a million characters is written by the standard library,
    not orjson, which took a buffer of about eight bytes a character first: a Python script
    returning 20 million non-ASCII characters crashed its process (SandboxCrash, SIGSEGV)
    when the heap limit refused that buffer. A long argument reaches the tool exactly."""
    seen: list[str] = []

    def size(text: str) -> int:
        """How many characters."""
        seen.append(text)
        return len(text)

    runner = ProcessRunner(mode="pool", slots=1)
    engine = CodeMode([size], runner=runner, type_check="off", language="python")
    try:
        returned = await engine.run_code('return ["é" * 20_000_000, 1.5e300]')
        called = await engine.run_code('return await tools.size(text="é\\ud83d" * 700_000)')
    finally:
        await engine.aclose()
    assert returned.status == "finished", returned.text
    # Past the value's budget, so the model gets its JSON text cut in the middle.
    assert returned.value.startswith('["éé') and returned.value.endswith('é",1.5e+300]')
    assert called.status == "finished", called.text
    # A lone surrogate becomes U+FFFD, as with short text.
    assert called.value == 1_400_000 and seen == ["é\ufffd" * 700_000]


async def test_heavy_data_under_a_small_memory_limit_crosses_or_meets_the_limit() -> None:
    """Under memory = 16 MiB, a call, a result and a value of a few MiB cross whole: orjson,
    which the sandbox used for them, takes a buffer of about twelve bytes a character (some
    220 bytes an item) first, and failing to get it crashed the process (SandboxCrash,
    SIGSEGV): a call with 1.5 million non-ASCII characters, a returned list of 600,000
    floats. A call too heavy for the heap is the memory limit, never a crash. The long call
    is replayed from the log (a new process) after the approval, and matches its record."""
    seen: list[int] = []

    def size(text: str, items: list[int] | None = None) -> int:
        """How many characters."""
        seen.append(len(text))
        return len(text)

    runner = ProcessRunner(mode="pool", slots=1)
    engine = CodeMode(
        [size, pay],
        runner=runner,
        type_check="off",
        language="python",
        limits=Limits(memory=16 * MiB),
    )
    try:
        paused = await engine.run_code(
            'n = await tools.size(text="é" * 1_500_000)\n'
            "await tools.pay(cents=n)\n"
            "return [n, await tools.size(text='é' * 1_400_000)]"
        )
        assert paused.status == "paused", paused.text
        await engine.approve(paused.script_id, paused.waiting[0]["call_id"])
        called = await engine.resume(paused.script_id)
        returned = await engine.run_code("return [0.5] * 600_000")
        heavy = await engine.run_code("return await tools.size(text='x', items=[1] * 600_000)")
    finally:
        await engine.aclose()
    assert called.status == "finished", called.text
    assert called.value == [1_500_000, 1_400_000]
    assert seen == [1_500_000, 1_400_000]  # each call made once: the replay matched the log
    assert returned.status == "finished", returned.text
    assert returned.value.startswith("[0.5,0.5,") and returned.value.endswith(",0.5]")
    assert heavy.status == "failed" and "SandboxCrash" not in heavy.text, heavy.text
    assert "memory limit met" in heavy.text


@pytest.mark.parametrize("mode", ["pool", "exec"])
async def test_a_long_result_under_a_small_memory_limit_is_read_or_is_the_limit(mode: str) -> None:
    """Under memory = 16 MiB, a tool's result of 300,000 items (600 KB of JSON) settles in a
    live resume (pool) and in a replay (exec): orjson, writing it again for the script,
    crashed the process (SIGSEGV) in both. One of a million items, whose records do not fit
    in the heap beside the run, is the memory limit: the live process exited 'the results
    line does not fit in the process's heap' (SandboxCrash), the replay met the limit."""

    def ones(n: int) -> list[int]:
        """n ones."""
        return [1] * n

    def t(s: str) -> int:
        """How many characters."""
        return len(s)

    code = 'x = await tools.ones(n={n})\nawait tools.t(s="a")\nawait tools.t(s="b")\nreturn len(x)'
    runner = ProcessRunner(mode=mode, slots=1)  # type: ignore[arg-type]
    engine = CodeMode(
        [ones, t],
        runner=runner,
        type_check="off",
        language="python",
        limits=Limits(memory=16 * MiB),
    )
    try:
        read = await engine.run_code(code.format(n=300_000))
        over = await engine.run_code(code.format(n=1_000_000))
    finally:
        await engine.aclose()
    assert read.status == "finished", read.text
    assert read.value == 300_000
    assert over.status == "failed" and "SandboxCrash" not in over.text, over.text
    assert "memory limit met" in over.text


@pytest.mark.parametrize("live", [True, False])
async def test_a_call_given_an_objects_text_finishes_after_its_approval(live: bool) -> None:
    """A Python script that passes `str(obj)` to a tool that needs approval: CPython wrote
    the object's address into the call, the run after the approval (a new process) wrote
    another, and the script failed with a DivergenceError ("call 1 differs from the log").
    The address is left out of the call, so the approved call is the logged one, it runs
    once, and the script finishes the same live and by replay."""
    posted: list[str] = []

    @tool(needs_approval=True)
    def post(text: str) -> str:
        """Post a note."""
        posted.append(text)
        return f"posted {text}"

    code = (
        "def fetch():\n    pass\n"
        "note = await tools.post(text=f'{fetch} {map(str, [1])!r} {object()}')\n"
        "print(note)\n"
        "return [note, str(fetch)]"
    )
    runner = ProcessRunner(mode="pool", slots=1)
    engine = CodeMode([post], runner=runner, type_check="off", language="python", live=live)
    try:
        paused = await engine.run_code(code)
        assert paused.status == "paused", paused.text
        assert paused.waiting[0]["arguments"] == {
            "text": "<function fetch> <map object> <object object>"
        }
        await engine.approve(paused.script_id, paused.waiting[0]["call_id"])
        done = await engine.resume(paused.script_id)
    finally:
        await engine.aclose()
    assert done.status == "finished", done.text
    assert posted == ["<function fetch> <map object> <object object>"]
    assert done.value == [
        "posted <function fetch> <map object> <object object>",
        "<function fetch>",
    ]
    assert "Printed:\nposted <function fetch> <map object> <object object>" in done.text
