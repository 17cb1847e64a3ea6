"""Every limit of the spec's table: its default, its parsing, and a script that meets it.

Each script that meets a limit fails with ``limit`` set to the limit's name, and its text
names the limit and what the script can do; the host's log says how to raise it
(``[codemode.limits] <name>``). Limits the sandbox
enforces inside a run (memory, compute) run in the real confined process.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine import CodeMode, Config, ConfigError, Limits, MemoryStore, RunResult, parse_size, tool
from engine._files import Attachment
from runner import ProcessRunner
from sandbox import protocol
from sandbox.protocol import REMEDIES, GiB, KiB, MiB
from tests.engine.conftest import InProcessRunner

README = Path(__file__).parents[2] / "README.md"
_ROW = re.compile(r"^\| `(\w+)` \| ([\d,.]+)(?: (\w+))? \|")
_SCALES = {"bytes": 1, "KiB": KiB, "MiB": MiB, "GiB": GiB}


def readme_limits() -> dict[str, tuple[int, str | None]]:
    """The README's limits table: each limit's default as written, and its unit word."""
    text = README.read_text()
    table = text[text.index("| Limit | Default |") :].split("\n\n", 1)[0]
    rows: dict[str, tuple[int, str | None]] = {}
    for line in table.splitlines()[2:]:
        match = _ROW.match(line)
        assert match, f"README limits row not in the form | `name` | 1,000 [unit] | ...: {line!r}"
        name, number, unit = match.groups()
        assert name not in rows, f"README lists {name} twice"
        value = float(number.replace(",", "")) * _SCALES.get(unit or "", 1)
        rows[name] = (int(value), unit)
    return rows


def test_readme_limits_table_is_the_code() -> None:
    """Every row of the README's limits table (name, default, unit) is what the code holds,
    and every limit has a row: the table a user reads cannot drift from the code."""
    rows = readme_limits()
    limits = Limits()
    assert set(rows) == set(vars(limits)) == set(protocol.DEFAULT_LIMITS)
    for name, (value, unit) in rows.items():
        assert value == getattr(limits, name), f"README says {name} defaults to {value}"
        if name.endswith("_ms"):
            assert unit == "ms", f"README gives {name} in {unit!r}, not ms"
        elif name in protocol.COUNT_LIMITS:
            assert unit is None, f"README gives the count {name} a unit, {unit!r}"
        else:
            assert unit in _SCALES, f"README gives the size {name} in {unit!r}"


def test_defaults_are_one_table() -> None:
    """Limits() and the limits one run takes hold the same defaults, from one table (beside
    what is left of total_compute_ms, which each step sets)."""
    limits = Limits()
    assert vars(limits) == protocol.DEFAULT_LIMITS
    inside = protocol.Limits().model_dump(exclude={"compute_left_ms"})
    assert inside == {k: v for k, v in protocol.DEFAULT_LIMITS.items() if k in inside}
    assert set(protocol.DEFAULT_LIMITS) - set(inside) == {"total_compute_ms", "total_file_bytes"}
    assert limits.for_run() == protocol.Limits()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (4194304, 4194304),
        ("4mb", 4 * MiB),
        ("4MB", 4 * MiB),
        ("512 KiB", 512 * KiB),
        ("1.5g", int(1.5 * GiB)),
        ("100", 100),
        ("64kb", 64 * KiB),
        ("1tb", 1024 * GiB),  # it was "not a size", where "1024gb" was one
        ("2 TiB", 2048 * GiB),
    ],
)
def test_sizes_take_bytes_or_words(raw: object, expected: int) -> None:
    """Sizes take bytes or a word such as "4mb"."""
    assert parse_size(raw) == expected


def test_toml_limits_left_out_keep_defaults(tmp_path: Path) -> None:
    """The spec's own [codemode.limits] example loads; limits left out keep their defaults."""
    path = tmp_path / "codemode.toml"
    path.write_text(
        '[codemode.limits]\ncall_arguments = "4mb"\nmemory = "512mb"\ncompute_ms = 5000\n'
    )
    config = Config.load(path)
    assert config.limits.memory == 512 * MiB
    assert config.limits.call_arguments == 4 * MiB
    assert config.limits.calls == 1000


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[codemode.limits]\nmemroy = '1gb'\n", "memroy"),
        ("[codemode.limits]\nmemory = 'lots'\n", "memory"),
        ("[codemode.limits]\ncalls = -1\n", "calls"),
        ("[codemode.limits]\ncalls = 'ten'\n", "calls"),
        ("[codemode.limits]\ncompute_ms = true\n", "compute_ms"),
        ("[codemode.limits]\nmemory = 10\n", "memory"),
        ("[codemode]\nlimits = 3\n", "limits"),
        ("[codemode]\nspeed = 3\n", "speed"),
        ("[other]\nx = 1\n", "other"),
        ("[codemode.limits\nmemory = 1\n", "TOML"),
        ("[codemode.runner]\nkind = 'cloud'\n", "kind"),
        ("[codemode.runner]\nkind = 'remote'\n", "addresses"),
        ("[codemode.runner]\nmode = 'turbo'\n", "mode"),
        ("[codemode.runner]\nslots = 0\n", "slots"),
        ("[codemode]\ntype_check = 'yes'\n", "type_check"),
        ("[codemode]\ntype_check = true\n", "type_check"),
    ],
)
def test_bad_config_is_refused_naming_the_problem(tmp_path: Path, text: str, named: str) -> None:
    """A malformed codemode.toml is refused with a message naming the bad key or value."""
    path = tmp_path / "codemode.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        Config.load(path)
    assert named in str(info.value)
    assert str(path) in str(info.value)


def test_type_check_setting(tmp_path: Path) -> None:
    """[codemode] type_check is "on" unless the file says "off"."""
    path = tmp_path / "codemode.toml"
    path.write_text("[codemode]\n")
    assert Config.load(path).type_check == "on"
    path.write_text('[codemode]\ntype_check = "off"\n')
    assert Config.load(path).type_check == "off"


def test_missing_and_binary_config(tmp_path: Path) -> None:
    """A config that cannot be read says so and names the file."""
    with pytest.raises(ConfigError, match="cannot read"):
        Config.load(tmp_path / "nope.toml")
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match="UTF-8"):
        Config.load(binary)


def _assert_limit(result: object, name: str) -> None:
    assert result.status == "failed", result.text  # type: ignore[attr-defined]
    assert result.limit == name, result.text  # type: ignore[attr-defined]
    # What the script can do about it; the host's setting is for the host's log.
    assert f"{name} limit met" in result.text  # type: ignore[attr-defined]
    assert REMEDIES[name] in result.text  # type: ignore[attr-defined]
    assert "[codemode.limits]" not in result.text  # type: ignore[attr-defined]


@tool
def echo(data: str = "") -> str:
    """Echo."""
    return data


@tool
def big(size: int) -> str:
    """A result of the given size."""
    return "r" * size


async def test_calls_limit(inproc: InProcessRunner) -> None:
    """calls: the 6th call of a script limited to 5 ends it."""
    engine = CodeMode([echo], runner=inproc, limits=Limits(calls=5))
    result = await engine.run_code("for (let i = 0; i < 10; i++) await tools.echo(); return 1")
    _assert_limit(result, "calls")
    # The 6th call was asked for and refused, not made: the message says so.
    assert "the script's 6th call is over the 5 calls one script may make" in result.text
    assert len(await engine.store.calls(result.script_id)) == 5


@pytest.mark.parametrize(
    ("limit", "said"),
    [
        (0, "1st call is over the 0 calls"),
        (1, "2nd call is over the 1 call one"),
        (2, "3rd call"),
        (10, "11th call"),
        (11, "12th call"),
        (12, "13th call"),
        (20, "21st call"),
        (111, "112th call"),
        (1000, "1,001st call is over the 1,000 calls one script may make"),
    ],
)
def test_calls_limit_names_the_call_it_refused(limit: int, said: str) -> None:
    assert said in protocol.calls_over(limit)


async def test_results_limit(inproc: InProcessRunner) -> None:
    """results: results read over all calls pass the limit."""
    engine = CodeMode([big], runner=inproc, limits=Limits(results=10_000))
    result = await engine.run_code(
        "for (let i = 0; i < 5; i++) await tools.big({ size: 3000 }); return 1"
    )
    _assert_limit(result, "results")


async def test_arguments_limit(inproc: InProcessRunner) -> None:
    """arguments: arguments over the whole script pass the limit."""
    engine = CodeMode([echo], runner=inproc, limits=Limits(arguments=10_000))
    code = "const s = 'a'.repeat(3000); for (let i = 0; i < 5; i++) await tools.echo({ data: s })"
    _assert_limit(await engine.run_code(code), "arguments")


async def test_call_arguments_limit_throws_at_the_call(inproc: InProcessRunner) -> None:
    """call_arguments: one call's arguments over the limit throw at the call site."""
    engine = CodeMode([echo], runner=inproc, limits=Limits(call_arguments=1000))
    code = "try { await tools.echo({ data: 'a'.repeat(2000) }) } catch (e) { return e.message }"
    result = await engine.run_code(code)
    assert result.status == "finished"
    assert "call_arguments limit met" in result.value
    assert result.value.endswith(REMEDIES["call_arguments"])
    uncaught = await engine.run_code("await tools.echo({ data: 'a'.repeat(2000) })")
    assert uncaught.status == "failed" and "call_arguments" in uncaught.text


async def test_step_arguments_limit(inproc: InProcessRunner) -> None:
    """step_arguments: the calls one step asks for together pass the limit."""
    engine = CodeMode([echo], runner=inproc, limits=Limits(step_arguments=5000))
    code = (
        "const s = 'a'.repeat(2000);await Promise.all([1, 2, 3].map(() => tools.echo({ data: s })))"
    )
    _assert_limit(await engine.run_code(code), "step_arguments")


async def test_total_compute_ms_limit(inproc: InProcessRunner) -> None:
    """total_compute_ms: CPU over all of a script's runs passes the limit. The engine ends
    it, after a step that stopped on calls, and the model sees what the script printed, as
    for a script that throws (it saw the error alone)."""
    engine = CodeMode([echo], runner=inproc, limits=Limits(total_compute_ms=30))
    code = """
    let x = 0;
    for (let i = 0; i < 2e6; i++) x += i % 7;
    for (let i = 0; i < 50; i++) { console.log(`call ${i}`); await tools.echo(); }
    return x
    """
    result = await engine.run_code(code)
    _assert_limit(result, "total_compute_ms")
    error, printed = result.text.split("\nPrinted:\n")
    assert "total_compute_ms limit met" in error
    lines = printed.splitlines()
    assert lines == [f"call {i}" for i in range(len(lines))] and 0 < len(lines) < 50


@pytest.fixture
async def process_runner() -> AsyncIterator[ProcessRunner]:
    runner = ProcessRunner()
    yield runner
    await runner.aclose()


async def test_compute_ms_limit(process_runner: ProcessRunner) -> None:
    """compute_ms: `for(;;){}` is stopped at its CPU allowance in the confined process."""
    engine = CodeMode([], runner=process_runner, limits=Limits(compute_ms=300))
    _assert_limit(await engine.run_code("for (;;) {}"), "compute_ms")
    assert (await engine.run_code("return 'healthy'")).value == "healthy"


# The compute_ms of the tests whose run must be stopped softly (with what it printed): its
# hard stop 40 ms behind, which a loaded machine's late timers do not reach (24 ms behind,
# at 300 ms, they did once in hundreds of runs beside four busy loops on 2 vCPUs).
SOFT_MS = 500

_PRINTS_AND_SPINS = {
    "javascript": 'console.log("before"); await tools.echo(); console.log("after"); for (;;) {}',
    "python": 'print("before")\nawait tools.echo()\nprint("after")\nwhile True:\n    pass',
}


@pytest.mark.parametrize("language", sorted(_PRINTS_AND_SPINS))
@pytest.mark.parametrize("live", [True, False], ids=["live", "replay"])
async def test_compute_ms_keeps_what_the_run_printed(
    process_runner: ProcessRunner, live: bool, language: str
) -> None:
    """A run compute_ms stops fails with what it printed up to there, the lines since its
    last call too (they were lost with the process the timer ended)."""
    engine = CodeMode([echo], runner=process_runner, limits=Limits(compute_ms=SOFT_MS), live=live)
    result = await engine.run_code(_PRINTS_AND_SPINS[language], language=language)  # type: ignore[arg-type]
    _assert_limit(result, "compute_ms")
    assert result.text.endswith("\nPrinted:\nbefore\nafter"), result.text


# JavaScript runs that hold a large heap when compute_ms stops them: the stop's ending
# counted the heap (a walk of every object: 5 million, about 80 ms) and, at its first
# allocation, collected the heap the run had grown without a collection (an array pushed to
# over ten million numbers: 50 ms and more), past the hard stop 40 ms behind, which ended the
# process and lost what the run printed.
_SPINS_HOLDING = {
    "objects": "const ys = Array.from({ length: 5e6 }, () => ({}));\n"
    'console.log("after");\nfor (;;) {}',
    "pushing": 'const xs = [];\nconsole.log("after");\nfor (;;) xs.push(0);',
}


@pytest.mark.parametrize("case", sorted(_SPINS_HOLDING))
async def test_compute_ms_keeps_what_a_run_holding_a_large_heap_printed(
    process_runner: ProcessRunner, case: str
) -> None:
    """A run compute_ms stops while it holds millions of values fails with what it printed,
    as a small one does."""
    # Making the objects takes 1.4 s of CPU here, and over 3 s under a loaded CI run: 6 s.
    compute_ms = {"objects": 6000, "pushing": SOFT_MS}[case]
    limits = Limits(compute_ms=compute_ms, memory=GiB)
    engine = CodeMode([], runner=process_runner, limits=limits)
    result = await engine.run_code('console.log("before");\n' + _SPINS_HOLDING[case])
    _assert_limit(result, "compute_ms")
    assert result.text.endswith("\nPrinted:\nbefore\nafter"), result.text


# Scripts a CPU stop ends in a loop on line 3, in a function called from line 5, with the
# lines its error names, innermost first: a Python script's own loop (a line of its own, so
# the line is the same wherever in the loop the timer goes off), one busy in its printing
# (ended at its next line, traced) and one in library code it called; a JavaScript script's
# caller only (QuickJS keeps a frame's place at its calls alone), but for code it evaluated
# or a native function it called (a regular expression that backtracks); and a JavaScript
# loop at the top level after a call names none (it named the call's line, where the frame
# last was).
_SPINS_AT = {
    "python_own": ("python", "print(0)\ndef spin():\n    while True: pass\n\nspin()", [3, 5]),
    "python_printing": (
        "python",
        "print(0)\ndef spin():\n    while True: print(1, end='')\n\nspin()",
        [3, 5],
    ),
    "python_library": (
        "python",
        "import difflib; print(0)\ndef spin():\n    while True: list(difflib.ndiff(['a'] * 3000, ['b'] * 3000))"
        "\n\nspin()",
        [3, 5],
    ),
    "javascript_called": (
        "javascript",
        "console.log(0);\nfunction spin() {\n  for (;;) {}\n}\nspin();",
        [5],
    ),
    "javascript_eval": (
        "javascript",
        'console.log(0);\nfunction spin() {\n  eval("for (;;) {}");\n}\nspin();',
        [3, 5],
    ),
    "javascript_native": (
        "javascript",
        "console.log(0);\nfunction spin(s) {\n  return /(a|aa)+b/.test(s);\n}\nspin('a'.repeat(60));",
        [3, 5],
    ),
    "javascript_top_level": (
        "javascript",
        "console.log(0);\nawait tools.echo();\nlet x = 0;\nfor (;;) {\n  x++;\n}",
        [],
    ),
}


def _lines_named(result: RunResult) -> list[int]:
    assert result.error is not None, result.text
    return [line["line"] for line in result.error["lines"]]


@pytest.mark.parametrize("case", sorted(_SPINS_AT))
async def test_compute_ms_names_the_lines_it_stopped_the_run_in(
    process_runner: ProcessRunner, case: str
) -> None:
    """A run compute_ms stops names the script's lines it was stopped in, innermost first,
    as other errors do (it named none: a model could not tell which loop spun)."""
    language, code, lines = _SPINS_AT[case]
    engine = CodeMode([echo], runner=process_runner, limits=Limits(compute_ms=SOFT_MS))
    result = await engine.run_code(code, language=language)  # type: ignore[arg-type]
    _assert_limit(result, "compute_ms")
    assert _lines_named(result) == lines, result.text
    assert "\nPrinted:\n0" in result.text, result.text[-300:]


# What a JavaScript script sets that the stop's naming of its lines must not heed: an Error
# of its own (whose code would run at the stop), no frames in a stack, a stack bound whose
# conversion runs its code.
_STACK_SET = {
    "replaced_error": "globalThis.Error = function () { console.log('ran'); return {}; };",
    "no_frames": "Error.stackTraceLimit = 0;",
    "converted_bound": "Error.stackTraceLimit = { valueOf() { console.log('ran'); return 3; } };",
}


@pytest.mark.parametrize("case", sorted(_STACK_SET))
async def test_compute_ms_names_a_javascript_run_s_lines_whatever_it_set_error_to(
    process_runner: ProcessRunner, case: str
) -> None:
    """A JavaScript script that replaced Error, or set Error.stackTraceLimit, is stopped
    with what it printed and its lines named, and none of its code runs at the stop."""
    code = f"console.log(0);\n{_STACK_SET[case]}\nfunction spin() {{\n  for (;;) {{}}\n}}\nspin();"
    engine = CodeMode([], runner=process_runner, limits=Limits(compute_ms=SOFT_MS))
    result = await engine.run_code(code)
    _assert_limit(result, "compute_ms")
    assert _lines_named(result) == [6], result.text
    assert result.text.endswith("\nPrinted:\n0"), result.text[-300:]


@pytest.mark.parametrize("live", [True, False], ids=["live", "replay"])
async def test_total_compute_ms_ends_the_run_that_reaches_it(
    process_runner: ProcessRunner, live: bool
) -> None:
    """total_compute_ms holds within a run, not a run past it: a script that calls, then
    loops for ever (each segment may use compute_ms of 2 s), is stopped when its runs have
    used the 300 ms it may use in all, live or replayed, and the engine charged it about
    that (before, the segment ran its 2 s: 2,000 ms charged)."""
    engine = CodeMode(
        [echo],
        runner=process_runner,
        store=MemoryStore(),
        limits=Limits(compute_ms=2000, total_compute_ms=300),
        live=live,
    )
    result = await engine.run_code("await tools.echo(); for (;;) {}")
    _assert_limit(result, "total_compute_ms")
    record = await engine.store.get_script(result.script_id)
    await engine.aclose()
    # Stopped within its run, not at the end of its 2 s segment. How close to the 300 ms
    # it is charged is the benchmark's to say (`python -m bench --limits`: within a tick and
    # the process's exit on a quiet machine): a loaded machine's CPU reads stray both ways
    # (280 ms read for a 300 ms timer seen in CI, 368 ms seen with other tests running).
    assert 100 <= record.total_compute_ms < 1000, record.total_compute_ms
    # Charged a little over or under the timer: not said (an ending the same either way).
    assert "have used all the 300 ms of CPU one script may use" in result.text, result.text


_PRINTS_ON = {
    "javascript": "let i = 0; for (;;) console.log(i++)",
    "python": "i = 0\nwhile True:\n    print(i)\n    i += 1",
}


@pytest.mark.parametrize("language", sorted(_PRINTS_ON))
async def test_compute_ms_stops_a_run_that_prints_on_with_what_it_printed(
    process_runner: ProcessRunner, language: str
) -> None:
    """A run that prints until compute_ms stops it, its CPU timer going off in the middle of
    the sandbox's own printing as often as not: the run is stopped at the next point it can
    end at, and fails with what it printed, from the first line to a whole last one."""
    engine = CodeMode([], runner=process_runner, limits=Limits(compute_ms=SOFT_MS))
    result = await engine.run_code(_PRINTS_ON[language], language=language)  # type: ignore[arg-type]
    _assert_limit(result, "compute_ms")
    lines = result.text.split("\nPrinted:\n", 1)[1].splitlines()
    assert lines[:3] == ["0", "1", "2"] and lines[-1].isdigit(), result.text[-300:]


# Python scripts that spend their time where a CPU stop does not land on a line of their own:
# in a library's Python code (difflib's), and in the sandbox's printing (print's, pprint's);
# one whose garbage loops when it is collected, as the stop's ending allocates; and one that
# loops at its recursion bound, where Python cannot call a signal handler.
_BUSY_ELSEWHERE = {
    "recursion_bound": "print(0)\ndef f(n):\n    try:\n        f(n + 1)\n"
    "    except BaseException:\n        while True:\n            pass\nf(0)",
    "garbage": "print(0)\nclass C:\n    def __del__(self):\n        while True:\n            pass\n"
    "for i in range(10):\n    c = C()\n    c.me = c\ndel c\nwhile True:\n    pass",
    "library": "import difflib\nprint(0)\nwhile True:\n"
    "    list(difflib.ndiff([str(i) for i in range(3000)], [str(-i) for i in range(3000)]))",
    "printing": _PRINTS_ON["python"],
    "library_printing": "import pprint\nprint(0)\nwhile True:\n    pprint.pprint(list(range(50)))",
}


@pytest.mark.parametrize("case", sorted(_BUSY_ELSEWHERE))
async def test_compute_ms_stops_a_python_run_busy_outside_its_lines_with_what_it_printed(
    process_runner: ProcessRunner, case: str
) -> None:
    """A Python script busy in a library's code, or in the sandbox's printing, is stopped
    with what it printed, each time: the stop ends the run in library code the script
    called, or at the script's next line (it met the hard stop, its output lost, in one
    run of two to five); its ending collects no garbage (a __del__ that loops ran in it,
    until the hard stop, in two runs of three); and at its recursion bound the stop comes
    again once it has unwound a frame (it came once, and the hard stop ended the run)."""
    engine = CodeMode([], runner=process_runner, limits=Limits(compute_ms=SOFT_MS))
    for _ in range(3):
        result = await engine.run_code(_BUSY_ELSEWHERE[case], language="python")
        _assert_limit(result, "compute_ms")
        assert "\nPrinted:\n0" in result.text, result.text[-300:]


_READS_ON = {
    "javascript": "for (;;) await files.text('a.txt')",
    "python": "while True:\n    await files.text('a.txt')",
}


@pytest.mark.parametrize("language", sorted(_READS_ON))
async def test_compute_ms_holds_for_a_run_that_waits_often(
    process_runner: ProcessRunner, language: str
) -> None:
    """A run that reads a file over and over (waiting for each answer) is charged no more
    than 10% past compute_ms: its CPU timer counts the CPU it is charged (ITIMER_PROF's,
    sampled at the tick, lagged it: 330 to 380 ms charged under a 300 ms timer)."""
    limits = Limits(compute_ms=SOFT_MS)
    engine = CodeMode([], runner=process_runner, store=MemoryStore(), limits=limits)
    files = [Attachment("a.txt", data=b"x" * 1000)]
    result = await engine.run_code(_READS_ON[language], language=language, files=files)  # type: ignore[arg-type]
    _assert_limit(result, "compute_ms")
    record = await engine.store.get_script(result.script_id)
    assert record.total_compute_ms <= SOFT_MS * 1.1, record.total_compute_ms


async def test_python_results_past_the_heap_meet_memory_live_as_replayed(
    process_runner: ProcessRunner,
) -> None:
    """A live Python run whose results line does not fit its heap: the parser's allocator
    aborts (Rust's "memory allocation of N bytes failed"), which read as a forbidden system
    call (SandboxViolation); it is the memory limit, as the same script replayed says."""

    @tool
    def objects(n: int) -> list[dict[str, int]]:
        """n empty objects."""
        return [{}] * n

    for live in (True, False):
        engine = CodeMode(
            [objects], runner=process_runner, limits=Limits(memory=16 * MiB), live=live
        )
        code = "r = await tools.objects(n=500_000)\nprint(len(r))"
        _assert_limit(await engine.run_code(code, language="python"), "memory")


async def test_memory_limit(process_runner: ProcessRunner) -> None:
    """memory: a growing array meets the JS heap limit in the confined process."""
    engine = CodeMode([], runner=process_runner, limits=Limits(memory=16 * MiB))
    code = "const a = []; for (;;) a.push({ i: a.length, s: 'x' + a.length })"
    _assert_limit(await engine.run_code(code), "memory")
    assert (await engine.run_code("return 'healthy'")).value == "healthy"


@pytest.mark.parametrize("language", ["javascript", "python"])
async def test_the_description_says_how_many_files_a_script_may_show(language: str) -> None:
    """The description said a script may show "at most 4" files whatever the host's
    shown_files: told 4 where the host allows 2, a script that showed a third failed on the
    limit. It says the host's number, and none when a function gives each tenant its own."""
    code = (
        'files.show("a.txt"); files.show("b.txt"); files.show("c.txt")'
        if language == "javascript"
        else 'files.show("a.txt")\nfiles.show("b.txt")\nfiles.show("c.txt")'
    )
    for shown_files, said in [(4, "(at most 4)"), (2, "(at most 2)"), (10, "(at most 10)")]:
        engine = CodeMode(
            [],
            runner=InProcessRunner(),
            limits=Limits(shown_files=shown_files),
            language=language,  # type: ignore[arg-type]
            type_check="off",
        )
        try:
            description = engine.definition()["description"]
            assert said in description and description.count("(at most ") == 1, description
            files = [Attachment(f"{n}.txt", data=b"x") for n in "abc"]
            result = await engine.run_code(code, files=files)
            assert (result.limit == "shown_files") == (shown_files < 3), result.text
        finally:
            await engine.aclose()
    per_tenant = CodeMode([], limits=lambda tenant: Limits(), language=language)  # type: ignore[arg-type]
    try:
        description = per_tenant.definition()["description"]
        assert "(at most " not in description and "(as many as the limits allow)" in description
    finally:
        await per_tenant.aclose()
