"""The type check of Python scripts (ty): what it refuses, with the script's own lines, what
it leaves to the run, its bounds, and the engine refusing a script before its first call.
Needs ty (installed by `make install`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from engine import CodeMode, ConfigError, PythonTypeChecker, Tool, tool
from engine._config import Config
from engine.languages import check_language
from engine.languages._check import CompilerMissing
from engine.languages.python import _check as python_check
from engine.languages.python import check_stubs, find_checker
from engine.languages.python._check import CHECKER_ENV
from tests._needs import require
from tests.engine.conftest import InProcessRunner
from tests.engine.corpus import load_corpus
from tests.engine.test_type_check import assert_only_the_shown_explained, looked_up

CORPUS = load_corpus()


@pytest.fixture(scope="module")
def checker() -> PythonTypeChecker:
    try:
        return PythonTypeChecker(find_checker())
    except CompilerMissing as e:
        require(f"ty, the checker of Python scripts: {e}")
        raise


async def _problems(checker: PythonTypeChecker, code: str) -> list[tuple[int, str]]:
    checked = await checker.check(code, check_stubs(CORPUS))
    assert checked.failure is None, checked.failure
    return [(p.line, str(p.code)) for p in checked.problems]


async def test_wrong_calls_are_refused_with_the_scripts_lines(checker: PythonTypeChecker) -> None:
    """A wrong argument type, an unknown argument name, a missing required argument, a
    missing key of a nested TypedDict, a value outside a Literal, a tool that does not
    exist: each is found, at the script's own line."""
    code = "\n".join(
        [
            "import asyncio",  # 1
            'a = await tools.calendar__list_events(time_min="x", time_max=3)',  # 2
            'b = await tools.calendar__list_events(time_min="x", tmie_max="y")',  # 3
            'await tools.calendar__create_event(summary="s", start={"dateTime": "x"},',  # 4
            '    end={"date": "x"}, attendees=[{"optional": True}])',  # 5
            'await tools.github__list_prs(repo="o/r", state="opened")',  # 6
            "await tools.no_such_tool(x=1)",  # 7
            "return [a, b]",  # 8
        ]
    )
    found = await _problems(checker, code)
    lines = {line for line, _ in found}
    assert lines == {2, 3, 5, 6, 7}, found
    codes = {code for _, code in found}
    assert {"invalid-argument-type", "missing-typed-dict-key"} <= codes


async def test_a_tool_that_does_not_exist_is_said_as_the_run_says_it(
    checker: PythonTypeChecker,
) -> None:
    """With the closest tools and how to find one (ty's text, "Object of type `Tools` has no
    attribute `github__list_pr`", named no tool there is)."""
    code = "await tools.github__list_pr(repo='o/r')\nawait tools.zzz()"
    checked = await checker.check(code, check_stubs(CORPUS))
    said = [str(p.message) for p in checked.problems]
    assert said[0].startswith(
        "tools.github__list_pr does not exist; the closest tools are tools.github__list_prs"
    ), said
    assert said[1:] == [
        'tools.zzz does not exist. Find tools with await tools.tool_search(query="...").'
    ]
    assert said[0].endswith('. Find tools with await tools.tool_search(query="...").')


@pytest.mark.parametrize("lf", ["\r", "\r\n"])
async def test_lines_ended_by_a_carriage_return_are_checked(
    checker: PythonTypeChecker, lf: str
) -> None:
    """Python ends a line at a lone CR too: the check indented only the lines after a LF, so
    ty read a script of such lines as a syntax error and passed every wrong call in it."""
    code = lf.join(
        ["a = 1", 'b = await tools.github__list_prs(repo="o/r")', "await tools.nope(x=1)"]
    )
    assert [line for line, _ in await _problems(checker, code)] == [3]


async def test_a_call_with_one_mapping_is_checked_too(checker: PythonTypeChecker) -> None:
    """``tools.x({"key": value})`` is checked against the same input type."""
    good = 'return await tools.github__list_prs({"repo": "o/r", "state": "open"})'
    assert await _problems(checker, good) == []
    bad = 'return await tools.github__list_prs({"repo": 3})'
    assert {line for line, _ in await _problems(checker, bad)} == {1}


async def test_arguments_built_before_the_call_are_left_to_the_tool(
    checker: PythonTypeChecker,
) -> None:
    """ty types a dict built in a variable by its kinds (``dict[str, str]``) and a text made
    at run time as ``str``: it cannot tell them from wrong ones where a tool takes a
    TypedDict or a Literal, so they are left to the tool's own check of its arguments; so are
    text made from a literal (a ``LiteralString``) and a dict passed as ``**keywords``. What
    is written in the call is still checked key by key (and a plain wrong type is refused
    wherever it comes from)."""
    built = "\n".join(
        [
            'opts = {"repo": "o/r", "state": "open"}',  # 1
            "await tools.github__list_prs(opts)",  # 2
            'start = {"dateTime": "x"}',  # 3
            'start["timeZone"] = "UTC"',  # 4
            'await tools.calendar__create_event(summary="s", start=start, end=start)',  # 5
            'state = "op" + "en"',  # 6
            'await tools.github__list_prs(repo="o/r", state=state)',  # 7
            'await tools.github__list_prs(repo="o/r", per_page=state)',  # 8
            'await tools.github__list_prs(repo="o/r", state="opened")',  # 9
            'await tools.calendar__create_event(summary="s", start={"dateTme": "x"}, end=start)',
            'lowered = "OPEN".lower()',  # 11: a LiteralString
            'await tools.github__list_prs(repo="o/r", state=lowered)',  # 12
            'keywords = {"repo": "o/r", "state": "open"}',  # 13
            "await tools.github__list_prs(**keywords)",  # 14: each value against each keyword
        ]
    )
    assert {line for line, _ in await _problems(checker, built)} == {8, 9, 10}


async def test_a_value_made_before_the_call_under_a_key_written_in_it_is_left_to_the_tool(
    checker: PythonTypeChecker,
) -> None:
    """The same values under a key of a dict written in the call (one dict of arguments, or a
    nested one): ty says "Invalid argument to key ... value of type `str`" there, and the
    script was refused where the same value as a keyword was not. What is written in the dict
    is still checked, and a plain wrong type refused."""
    code = "\n".join(
        [
            'state = "OPEN".lower()',  # 1
            'await tools.github__list_prs({"repo": "o/r", "state": state})',  # 2
            'start = {"dateTime": "x"}',  # 3
            'await tools.calendar__create_event({"summary": "s", "start": start, "end": start})',
            'await tools.github__list_prs({"repo": "o/r", "state": "opened"})',  # 5
            'await tools.github__list_prs({"repo": "o/r", "per_page": state})',  # 6
            'await tools.calendar__create_event({"summary": "s", "start": {"dateTme": "x"}, '
            '"end": start})',  # 7
        ]
    )
    assert {line for line, _ in await _problems(checker, code)} == {5, 6, 7}


async def test_a_dict_built_before_the_call_in_a_list_or_a_union_is_left_to_the_tool(
    checker: PythonTypeChecker,
) -> None:
    """`edits=[edit]`, `edit` a dict built before the call: ty typed the list
    `list[Filesystem__edit_file_Edits | dict[str, str]]` and the check refused it, as the
    README says it does not; so were `edits + [...]` and a variable given a dict in an `if`
    (`None | dict[str, str]`). A wrong dict written in such a list is still refused, by the
    key ty names."""
    code = "\n".join(
        [
            'edit = {"oldText": "a", "newText": "b"}',  # 1
            'await tools.filesystem__edit_file(path="p", edits=[edit])',  # 2
            'await tools.filesystem__edit_file(path="p", edits=[edit, {"oldTxt": "a"}])',  # 3
            'await tools.filesystem__edit_file(path="p", edits=[{"oldText": "a", "newText": 1}])',
            'await tools.filesystem__edit_file(path="p", edits=["a"])',  # 5
            'await tools.filesystem__edit_file(path="p", edits=[edit] + [{"oldText": "c", '
            '"newText": "d"}])',  # 6: list[X | dict[str, str]]
            "start = None",  # 7
            'if edit:\n    start = {"dateTime": "x"}',  # 8, 9: start is None | dict[str, str]
            'await tools.calendar__create_event(summary="s", start=start, end=start)',  # 10
        ]
    )
    # Where ty says which key is wrong, the list's own mismatch is not said too.
    assert await _problems(checker, code) == [
        (3, "missing-typed-dict-key"),
        (3, "missing-typed-dict-key"),
        (3, "unknown-typed-dict-constructor-key"),
        (4, "invalid-argument-type"),  # "Invalid argument to key "newText" ..."
        (5, "invalid-argument-type"),
    ]


async def test_no_matching_form_names_the_keywords(checker: PythonTypeChecker) -> None:
    """A call that matches neither form (an unknown keyword) says which keywords the tool
    takes, in the types the model read."""
    checked = await checker.check(
        'await tools.calendar__list_events(time_min="x", tmie_max="y")', check_stubs(CORPUS)
    )
    (problem,) = checked.problems
    assert problem.message.startswith("tools.calendar__list_events takes (")
    assert "time_max: str" in problem.message and "_str" not in problem.message
    # Which keyword is unknown, and which are missing (it said "the call does not match").
    assert problem.message.endswith(
        "; it takes no tmie_max (did you mean time_max?); time_max is missing"
    )
    checked = await checker.check(
        'await tools.calendar__create_event(summary="s")', check_stubs(CORPUS)
    )
    (problem,) = checked.problems
    assert problem.message.endswith("; start and end are missing"), problem.message


async def test_a_call_in_the_checks_own_terms_reads_in_the_scripts(
    checker: PythonTypeChecker,
) -> None:
    """A positional value says to give keywords, and a wrong dict names its keys as the
    tool's arguments: both named the check's own mapping type (`Github__list_prs_Input`),
    which no declaration the model read has (a wrong dict's first line said only that)."""
    stubs = check_stubs(CORPUS)
    checked = await checker.check('await tools.github__list_prs("o/r")', stubs)
    (problem,) = checked.problems
    assert problem.message.startswith("tools.github__list_prs takes keyword arguments (repo: ")
    assert problem.message.endswith("as tools.github__list_prs(repo=...), or one dict of them"), (
        problem.message
    )
    checked = await checker.check('await tools.github__list_prs({"rep": "o/r"})', stubs)
    messages = [p.message for p in checked.problems]
    assert messages and all("_Input" not in m for m in messages), messages
    assert any("tools.github__list_prs's arguments" in m for m in messages), messages


async def test_a_call_used_without_await_says_to_await_it(checker: PythonTypeChecker) -> None:
    """A tool call's coroutine used as its result (iterated, subscripted: a forgotten
    await) is found at its line, and the message says to await the call (ty's says only
    that a `CoroutineType` cannot be iterated or subscripted)."""
    code = 'prs = tools.github__list_prs(repo="o/r")\nfor pr in prs:\n    print(pr)\nreturn prs[0]'
    checked = await checker.check(code, check_stubs(CORPUS))
    assert [p.line for p in checked.problems] == [2, 4], checked.problems
    for problem in checked.problems:
        assert "CoroutineType" in problem.message
        assert problem.message.endswith("; did you forget to `await` the call?"), problem


async def test_the_scripts_own_typing_is_left_to_the_run(checker: PythonTypeChecker) -> None:
    """What would be a type error with any tools (a dict grown key by key, arithmetic on a
    str, a name that does not exist, an import the sandbox refuses) is not the check's to
    refuse: the run reports what really fails. Results are Any, so they are used freely."""
    code = "\n".join(
        [
            "import os",
            "d = {}",
            'd["x"] = 1',
            'n = "a" + 1',
            "print(undefined_name)",
            'prs = await tools.github__list_prs(repo="o/r")',
            'return prs[0]["anything"].upper() + d',
        ]
    )
    assert await _problems(checker, code) == []


async def test_errors_past_the_checkers_cut_output_are_left_to_the_run(
    checker: PythonTypeChecker,
) -> None:
    """Thousands of errors that are not about calls, found in both files, make more output
    than is read (OUTPUT_BYTES): the untyped file's errors were cut off, so the typed file's
    were taken for errors about calls, and the script was refused for them. What was not
    read is left to the run; with a few such errors, a wrong call is still refused. (The
    checker of 12,000 errors has a minute, not the 5 s a host's has: it takes half a second
    alone, and took over 5 s once on two cores that the rest of the suite kept busy.)"""
    many = "v: int = 1\n" + 'v = "s"\n' * 12000
    patient = PythonTypeChecker(find_checker(), timeout=60)
    assert await _problems(patient, many + "return 1") == []
    few = 'v: int = 1\nv = "s"\nawait tools.github__list_prs(repo=1)\nreturn 1'
    assert [line for line, _ in await _problems(checker, few)] == [3]


async def test_the_error_classes_a_script_catches_are_declared(
    checker: PythonTypeChecker,
) -> None:
    """ToolError, LimitError and FileError are known to the check as the sandbox gives them:
    catching them passes, and ``e.tool`` is a ``str`` (refused where an int is wanted)."""
    code = "\n".join(
        [
            "try:",  # 1
            '    await tools.github__list_prs(repo="o/r")',  # 2
            "except ToolError as e:",  # 3
            "    await tools.github__list_prs(repo=e.tool)",  # 4
            "    await tools.github__list_prs(repo=e.tool, per_page=e.tool)",  # 5
            "except (LimitError, FileError) as e:",  # 6
            "    return str(e)",  # 7
        ]
    )
    assert await _problems(checker, code) == [(5, "invalid-argument-type")]


async def test_a_syntax_error_is_left_to_the_run(checker: PythonTypeChecker) -> None:
    assert await _problems(checker, "return (1 +") == []
    assert await _problems(checker, "x = await tools.github__list_prs(owner=)") == []


async def test_host_modules_are_not_read(checker: PythonTypeChecker, tmp_path: Path) -> None:
    """An import names only the check's files and typeshed: ty never reads the host's
    installed packages (whose contents would show in an error), so a script learns nothing
    of them; here `engine` and `orjson` do not resolve at all."""
    from engine.languages.python._check import checker_argv, isolate

    isolate(tmp_path)
    (tmp_path / "s.py").write_text("import engine\nimport orjson\nimport json\n")
    import subprocess

    out = subprocess.run(
        checker_argv(checker.path, "s.py"), cwd=tmp_path, env={}, capture_output=True, text=True
    )
    assert "Cannot resolve imported module `engine`" in out.stdout
    assert "Cannot resolve imported module `orjson`" in out.stdout
    assert "`json`" not in out.stdout


async def test_only_the_problems_shown_are_explained(
    checker: PythonTypeChecker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A script of many calls of tools that do not exist: each shown is said as the run says
    it, and only those are looked up among the tools (each looked every tool over, on the
    host's event loop)."""
    names = looked_up(monkeypatch, python_check)
    code = "".join(f"await tools.nope_{i}()\n" for i in range(40))
    checked = await checker.check(code, check_stubs(CORPUS))
    assert_only_the_shown_explained(checked, names)


async def test_a_script_that_begins_with_future_imports_is_checked(
    checker: PythonTypeChecker,
) -> None:
    """Models begin files with `from __future__ import annotations`, which the run takes as a
    module does: in the check's function it was a syntax error, and such a script was not
    checked at all (its wrong call failed at the tool, after the calls before it ran)."""
    code = "\n".join(
        [
            '"""Open pull requests."""',  # 1
            "from __future__ import annotations",  # 2
            "from __future__ import (",  # 3
            "    division,",  # 4
            ")",  # 5
            "prs = await tools.github__list_prs(repo=12)",  # 6
            "return prs",
        ]
    )
    assert {line for line, _ in await _problems(checker, code)} == {6}


async def test_a_script_the_run_cannot_parse_is_left_to_it(checker: PythonTypeChecker) -> None:
    """A script indented as a whole is a syntax error to the run ("unexpected indent"),
    which the check's own indent hid from ty: it refused the wrong call, and the model,
    having fixed it, then met the syntax error."""
    code = "    prs = await tools.github__list_prs(repo=12)\n    return prs"
    assert await _problems(checker, code) == []


async def test_a_check_past_its_time_bound_fails_the_script(tmp_path: Path) -> None:
    """A checker that does not finish in time is killed; the script does not run, and the
    message says how to turn the check off."""
    slow = tmp_path / "slow-ty"
    slow.write_text("#!/bin/sh\nexec sleep 60\n")
    slow.chmod(0o755)
    checked = await PythonTypeChecker(slow, timeout=0.5).check("return 1", check_stubs([]))
    assert checked.failure is not None and 'type_check = "off"' in checked.failure
    assert not checked.ok


# A checker that crashes on the test's script alone: one that crashes on every script
# (an empty one too) is broken, the host's to fix (test_type_check.py).
ON_ITS_SCRIPT = "grep -q 'return 1' typed.py || exit 0\n"


async def test_a_checker_that_crashes_fails_the_script(tmp_path: Path) -> None:
    broken = tmp_path / "broken-ty"
    broken.write_text(f"#!/bin/sh\n{ON_ITS_SCRIPT}echo 'thread main panicked' >&2\nexit 101\n")
    broken.chmod(0o755)
    checked = await PythonTypeChecker(broken).check("return 1", check_stubs([]))
    assert checked.failure is not None and "panicked" in checked.failure


async def test_a_broken_checker_is_repaired_where_it_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checker that fails on every script: the host that gave its path is told to give
    another (it was told to set CODEMODE_TY, which only a checker found reads); one found
    through CODEMODE_TY is told to point it elsewhere."""
    broken = tmp_path / "broken-ty"
    broken.write_text("#!/bin/sh\necho 'thread main panicked' >&2\nexit 101\n")
    broken.chmod(0o755)
    given = await PythonTypeChecker(broken).check("return 1", check_stubs([]))
    assert given.broken is not None and str(broken) in given.broken
    assert "give PythonTypeChecker the path of ty (or none" in given.broken, given.broken
    assert CHECKER_ENV not in given.broken, given.broken
    monkeypatch.setenv(CHECKER_ENV, str(broken))
    found = await PythonTypeChecker().check("return 1", check_stubs([]))
    assert found.broken is not None and f"point {CHECKER_ENV} at ty" in found.broken
    assert "give PythonTypeChecker" not in found.broken, found.broken


async def test_a_missing_checker_is_said_once_and_the_scripts_run(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(CHECKER_ENV, "/nonexistent/ty")
    monkeypatch.setattr("engine._codemode._CHECK_OFF_SAID", set())
    with pytest.raises(CompilerMissing, match="CODEMODE_TY"):
        find_checker()
    with caplog.at_level(logging.WARNING, logger="codemode"):
        first = CodeMode([], language="python", runner=InProcessRunner())
        second = CodeMode([], language="python", runner=InProcessRunner())
        for engine in (first, second):
            assert (await engine.run_code("return 1")).status == "finished"
    assert first.type_checker is None and second.type_checker is None
    said = [r for r in caplog.records if "type check off: python" in r.getMessage()]
    assert len(said) == 1
    description = first.definition()["description"]
    assert "type-checked" not in description


def test_language_is_checked_everywhere() -> None:
    """A language no script is written in is the host's mistake: a ConfigError naming the
    languages, whether it came from CodeMode(...) or codemode.toml."""
    use = r"; use \"javascript\" or \"python\""
    with pytest.raises(ConfigError, match=r"language = 'ruby'" + use):
        CodeMode([], language="ruby", type_check="off")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"language = 'js'" + use):
        check_language("js")
    with pytest.raises(ConfigError, match=r"language = 'rust'; use \"javascript\" or \"python\""):
        Config.from_mapping({"codemode": {"language": "rust"}})
    assert Config.from_mapping({"codemode": {"language": "python"}}).language == "python"


async def test_a_wrong_call_is_refused_before_the_first_call_runs(
    checker: PythonTypeChecker, inproc: InProcessRunner
) -> None:
    """The script's first call would charge a card; its second is wrong. The check refuses
    the script, so the charge never happens, and the model reads the wrong line."""
    charged: list[Any] = []

    @tool
    def charge(cents: int) -> str:
        """Charge the card."""
        charged.append(cents)
        return "ok"

    @tool
    def ship(order_id: str, express: bool = False) -> str:
        """Ship an order."""
        return "shipped"

    engine = CodeMode([charge, ship], runner=inproc, language="python", type_check=checker)
    try:
        code = 'await tools.charge(cents=500)\nawait tools.ship(order=12)\nreturn "done"'
        result = await engine.run_code(code)
        assert result.status == "failed", result.text
        assert result.error is not None and result.error["name"] == "TypeCheckError"
        assert "line 2:" in result.text and "ship" in result.text
        assert charged == []
        assert inproc.steps == []
        record = await engine.store.get_script(result.script_id)
        assert record.language == "python"
    finally:
        await engine.aclose()


def test_a_checker_given_applies_to_its_language(checker: PythonTypeChecker) -> None:
    """A PythonTypeChecker given is the Python check; JavaScript's is found as "on" does."""
    engine = CodeMode([], language="python", type_check=checker)
    assert engine.type_checker is checker
    assert engine._checker("python") is checker
    js = engine._checker("javascript")
    assert js is None or type(js).__name__ == "TypeChecker"


async def test_none_for_an_optional_argument_is_taken(checker: PythonTypeChecker) -> None:
    """An optional argument given None is left out by the sandbox, so the check takes it;
    a required one given None is refused."""
    code = 'return await tools.github__list_prs(repo="o/r", state=None, page=None)'
    assert await _problems(checker, code) == []
    assert (
        await _problems(
            checker, 'return await tools.github__list_prs({"repo": "o/r", "page": None})'
        )
        == []
    )
    assert {
        line
        for line, _ in await _problems(checker, "return await tools.github__list_prs(repo=None)")
    } == {1}


async def test_a_check_past_its_memory_bound_fails_the_script(checker: PythonTypeChecker) -> None:
    """ty under a data rlimit it cannot start in: the script does not run, and the message
    names the memory bound."""
    small = PythonTypeChecker(checker.path, memory=20 * 1024 * 1024)
    checked = await small.check("return 1", check_stubs(CORPUS))
    assert checked.failure is not None and "20 MiB of memory" in checked.failure


@pytest.mark.parametrize("mib", [8, 32])
async def test_every_way_ty_meets_a_small_memory_bound_names_it(
    checker: PythonTypeChecker, mib: int
) -> None:
    """ty at a data rlimit too small to start in ends in more ways than one (a fault with no
    word at 8 MiB, a panic that its typeshed cannot be read, "not enough memory", at 32);
    each is the memory bound (they read "the type checker failed on this script (status
    -11)" and "(thread 'main' (9903) panicked at crates/ty_module_resolver/...)", telling the
    model to write the script more simply)."""
    small = PythonTypeChecker(checker.path, memory=mib * 1024 * 1024)
    checked = await small.check("return 1", check_stubs(CORPUS))
    assert checked.failure is not None and f"{mib} MiB of memory" in checked.failure


async def test_a_panic_is_said_by_its_message_not_where_in_ty_it_was(tmp_path: Path) -> None:
    """A ty that panics: the model reads what went wrong, not the place in ty's source."""
    broken = tmp_path / "broken-ty"
    broken.write_text(
        f"#!/bin/sh\n{ON_ITS_SCRIPT}"
        "cat >&2 <<'EOF'\n\nthread 'main' (9903) panicked at crates/ty/src/lib.rs:17:14:\n"
        "index out of bounds: the len is 3 but the index is 7\n"
        "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\nEOF\n"
        "exit 101\n"
    )
    broken.chmod(0o755)
    checked = await PythonTypeChecker(broken).check("return 1", check_stubs([]))
    assert checked.failure is not None and "crates/" not in checked.failure
    assert "(index out of bounds: the len is 3 but the index is 7)" in checked.failure


async def test_an_optional_any_parameter_takes_any_value(
    checker: PythonTypeChecker, inproc: InProcessRunner
) -> None:
    """`x: Any | None` (pydantic's `anyOf: [{}, {type: null}]`) takes a number: the check
    does not refuse the call (its stub declared `x` as `None` only)."""

    @tool
    def echo(x: Any | None = None) -> Any:
        """Echo x."""
        return x

    engine = CodeMode([echo], runner=inproc, language="python", type_check=checker)
    try:
        result = await engine.run_code("return await tools.echo(x=1)")
        assert result.status == "finished", result.text
        assert result.value == 1
    finally:
        await engine.aclose()


async def test_arguments_named_self_and_kwargs_are_taken(
    checker: PythonTypeChecker, inproc: InProcessRunner
) -> None:
    """A tool's argument may be called `self` or `kwargs`: the check takes the keyword call
    the stub shows, and the script's call reaches the tool (`self=` raised TypeError in the
    sandbox, and the check refused it)."""

    def echo(**arguments: Any) -> Any:
        return arguments

    schemas = {
        "with_self": {"type": "object", "properties": {"self": {"type": "string"}}},
        "with_kwargs": {
            "type": "object",
            "properties": {"kwargs": {"type": "string"}},
            "additionalProperties": {"type": "string"},
        },
    }
    tools = [Tool(name, input_schema=s, handler=echo) for name, s in schemas.items()]
    engine = CodeMode(tools, runner=inproc, language="python", type_check=checker)
    try:
        code = (
            'return [await tools.with_self(self="a"), await tools.with_kwargs(kwargs="b", c="d")]'
        )
        result = await engine.run_code(code)
        assert result.status == "finished", result.text
        assert result.value == [{"self": "a"}, {"kwargs": "b", "c": "d"}]
        wrong = await engine.run_code("return await tools.with_self(self=1)")
        assert "TypeCheckError" in wrong.text and "line 1" in wrong.text, wrong.text
    finally:
        await engine.aclose()


async def test_tools_whose_names_a_script_cannot_write_are_called_with_getattr(
    checker: PythonTypeChecker, inproc: InProcessRunner
) -> None:
    """A tool whose name starts with `_` (an MCP tool "2fa_verify" is `_2fa_verify`) could not
    be called from Python at all: `tools._x` and `getattr(tools, "_x")` were refused as
    private attributes, `tools.__init__` was the object's own method, yet the stub declared
    each as a method. The stub says to call it with getattr, and getattr reaches the tool."""

    def echo(**arguments: Any) -> Any:
        return arguments

    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    names = ["2fa_verify", "_private", "__init__", "__doc__"]
    engine = CodeMode(
        [Tool(n, input_schema=schema, handler=echo) for n in names],
        runner=inproc,
        language="python",
        type_check=checker,
    )
    try:
        assert [t.name for t in engine.tools] == ["_2fa_verify", "_private", "__init__", "__doc__"]
        description = engine.definition()["description"]
        for tool_name in ("_2fa_verify", "_private", "__init__", "__doc__"):
            assert f"async def {tool_name}(" not in description
            assert f'await getattr(tools, "{tool_name}")(...)' in description
        calls = ", ".join(
            f'await getattr(tools, "{n}")(a="{n}")' for t in engine.tools for n in [t.name]
        )
        result = await engine.run_code(f"return [{calls}]")
        assert result.status == "finished", result.text
        assert result.value == [{"a": t.name} for t in engine.tools]
    finally:
        await engine.aclose()


async def test_a_tool_reached_by_getattr_alone_is_said_so_when_written_as_an_attribute(
    checker: PythonTypeChecker,
) -> None:
    """`tools._2fa_verify(...)`, which the run refuses (an attribute that starts with an
    underscore): the check said "tools._2fa_verify does not exist", of a tool that does."""
    tools = [Tool("2fa_verify", input_schema={"type": "object", "properties": {}})]
    checked = await checker.check("return await tools._2fa_verify()", check_stubs(tools))
    assert [p.message for p in checked.problems] == [
        "tools._2fa_verify cannot be written as an attribute (a script reads none whose name "
        'starts with an underscore): call it as await getattr(tools, "_2fa_verify")(...)'
    ]


async def test_a_tool_written_with_a_hyphen_is_said_as_the_run_says_it(
    checker: PythonTypeChecker,
) -> None:
    """`tools.get-user(...)`, a tool's name as an MCP server spells it, which Python reads as
    `tools.get - user(...)`: the check said "tools.get does not exist", of a tool that is
    there as tools.get_user."""
    tools = [Tool("get_user", input_schema={"type": "object", "properties": {}})]
    checked = await checker.check("return await tools.get-user()", check_stubs(tools))
    assert [p.message for p in checked.problems] == [
        "tools.get-user reads as tools.get minus user (a name cannot have a '-'): the tool "
        "is called as await tools.get_user(...)"
    ]


async def test_none_for_a_required_argument_that_takes_null_is_null(
    checker: PythonTypeChecker, inproc: InProcessRunner
) -> None:
    """`x: int | None` without a default is required and takes null: its stub says so, the
    check takes `x=None`, but the sandbox leaves a None argument out, so the call failed
    with 'missing required property "x"' (JavaScript's `{ x: null }` ran). A required
    argument that does not take null is still missing when given None."""

    @tool
    def setting(x: int | None, y: int = 0) -> str:
        """Set x, or clear it with None."""
        return repr(x)

    @tool
    def strict(y: int) -> str:
        """Y."""
        return repr(y)

    engine = CodeMode([setting, strict], runner=inproc, language="python", type_check="off")
    try:
        for code in (
            "return await tools.setting(x=None)",
            'return await tools.setting({"x": None})',
        ):
            result = await engine.run_code(code)
            assert result.status == "finished", result.text
            assert result.value == "None"
        refused = await engine.run_code("return await tools.strict(y=None)")
        assert 'missing required property "y"' in refused.text, refused.text
    finally:
        await engine.aclose()
    js = CodeMode([setting], runner=inproc, type_check="off")
    try:
        left_out = await js.run_code("return await tools.setting({})")
        assert 'missing required property "x"' in left_out.text, left_out.text
    finally:
        await js.aclose()


async def test_approvers_see_the_null_a_required_nullable_argument_gets(
    inproc: InProcessRunner,
) -> None:
    """The worker's trigger and the paused script's waiting call show the arguments the tool
    gets: a Python script's `x=None` for a required `x: int | None` reaches the tool as null,
    so an approver sees `"x": null`, not a call without x (which the tool never gets)."""
    import orjson

    got: list[Any] = []
    triggers: list[dict[str, Any]] = []

    @tool(needs_approval=True)
    def setting(x: int | None, y: int = 0) -> str:
        """Set x, or clear it with None."""
        got.append(x)
        return repr(x)

    def worker(trigger: dict[str, Any]) -> str:
        triggers.append(trigger)
        return "proposed"

    engine = CodeMode([setting], runner=inproc, language="python", type_check="off", worker=worker)
    try:
        paused = await engine.run_code("return await tools.setting(x=None, y=2)")
        assert paused.status == "paused", paused.text
        (trigger_call,) = triggers[0]["tool_calls"]
        assert orjson.loads(trigger_call["function"]["arguments"]) == {"x": None, "y": 2}
        (waiting,) = paused.waiting
        assert waiting["arguments"] == {"x": None, "y": 2}, waiting
        await engine.approve(paused.script_id, waiting["call_id"])
        done = await engine.resume(paused.script_id)
        assert (done.status, done.value, got) == ("finished", "None", [None]), done.text
    finally:
        await engine.aclose()


async def test_join_of_a_call_not_awaited_says_what_join_takes(
    checker: PythonTypeChecker,
) -> None:
    """`", ".join(names)` of a call not awaited: ty's concise line, "No overload of bound
    method `str.join` matches arguments", names no type, so nothing said why (the run says
    the await is missing)."""
    tools = [Tool("get_user", input_schema={"type": "object", "properties": {}})]
    code = "names = tools.get_user()\nreturn ', '.join(names)"
    checked = await checker.check(code, check_stubs(tools))
    assert [(p.line, p.message) for p in checked.problems] == [
        (
            2,
            "No overload of bound method `str.join` matches arguments; join takes strings: "
            "await a call for its result first (`await tools.name(...)`), and make other "
            "values text (`', '.join(map(str, xs))`)",
        )
    ]
