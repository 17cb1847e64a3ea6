"""Live steps: a script's run goes on over its calls, and replay is how it recovers.

The engine side (``engine._live``, the step loop) through the in-process runner's live runs;
tests/engine/test_live_process.py does the same with real confined processes."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import secrets
from pathlib import Path
from typing import Any

import orjson
import pytest

from engine import CodeMode, CodeModeError, ConfigError, Limits, MemoryStore, TypeChecker, tool
from engine._config import Config
from engine._live import LiveRuns, default_live_count, default_live_memory
from runner import FileReader, ProcessRunner, ScriptRunner, Step
from sandbox.protocol import Clock, Record, Script
from sandbox.runtime import run_in_process
from tests.engine.conftest import InProcessRunner
from tests.engine.scripts import (
    CASES,
    FILES,
    PYTHON_SCRIPTS,
    SCRIPTS,
    conformance_scripts,
    golden_scripts,
    tools_for,
)

CORPUS = {**SCRIPTS, **golden_scripts(), **conformance_scripts()}
# The engine's cases again in Python: the same table, the other language; and the runner
# conformance suite's Python scripts.
PYTHON_CORPUS = {
    **{f"python/{name}": code for name, code in PYTHON_SCRIPTS.items()},
    **conformance_scripts("python"),
}
TOOLS = tools_for([*CORPUS.values(), *PYTHON_CORPUS.values()])
# Small enough that the corpus meets them: too_many_calls the calls, results_budget the results.
LIMITS = Limits(calls=25, results=400 * 1024)
NOW = 1_768_435_200.0  # 2026-01-15T00:00:00Z
SEED = 20261201
MODES = ("live", "replay", "evict-1", "evict-2", "evict-3")


class _Evicting(LiveRuns):
    """Live runs evicted at random (seeded) between segments."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__(wait=60.0, max_count=1000, max_memory=1 << 40)
        self.rng = rng

    def keep(self, key: Any, run: Any, first: int, calls: Any) -> None:
        super().keep(key, run, first, calls)
        if self.rng.random() < 0.5:
            self.evicted += 1
            self.drop(key)


async def _outcome(
    name: str,
    code: str,
    mode: str,
    runner: ScriptRunner | None = None,
    language: str = "javascript",
    limits: Limits = LIMITS,
) -> tuple[bytes, Any, LiveRuns]:
    """The outcome of ``code`` run to its end in ``mode`` (approving every call that asks),
    through ``runner`` (a new in-process runner by default)."""
    runner = runner or InProcessRunner()
    engine = CodeMode(
        TOOLS,
        runner=runner,
        store=MemoryStore(),
        limits=limits,
        live=mode != "replay",
        type_check="off",
        clock=lambda: NOW,
        language=language,  # type: ignore[arg-type]
    )
    if mode.startswith("evict"):
        engine._live = _Evicting(random.Random(f"{SEED}:{name}:{mode}"))
    live = engine._live
    try:
        result = await engine.run_code(code, files=FILES)
        for _ in range(10):
            if result.status != "paused":
                break
            for waiting in result.waiting:
                await engine.approve(result.script_id, waiting["call_id"])
            result = await engine.resume(result.script_id)
        calls = await engine.store.calls(result.script_id)
    finally:
        await engine.aclose()
    data = result.to_dict()
    data.pop("script_id")
    data["calls"] = [[c.name, c.arguments, c.state, c.result, c.error] for c in calls]
    return orjson.dumps(data, option=orjson.OPT_SORT_KEYS), runner, live


@pytest.mark.parametrize("name", sorted(CORPUS) + sorted(PYTHON_CORPUS))
async def test_live_replay_and_evicted_runs_give_the_same_outcome(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every corpus script (the engine's in both languages, the golden logs', the runner
    conformance suite's) run live, by replay, and live with seeded random evictions between
    segments: the same value, printed text, error, calls made (with their results) and shown
    files, byte for byte; live runs were used where a script has calls, and none is left
    open."""
    monkeypatch.setattr(secrets, "randbits", lambda bits: SEED % (1 << bits))
    language = "python" if name in PYTHON_CORPUS else "javascript"
    code = PYTHON_CORPUS[name] if language == "python" else CORPUS[name]
    outcomes: dict[str, bytes] = {}
    for mode in MODES:
        outcome, runner, live = await _outcome(name, code, mode, language=language)
        outcomes[mode] = outcome
        assert all(run.closed for run in runner.lives), f"{mode}: a live run left open"
        assert len(live) == 0
        if mode == "replay":
            assert runner.lives == [] and runner.segments == 0
        elif mode == "live" and len(orjson.loads(outcome)["calls"]) > 0:
            calls = orjson.loads(outcome)["calls"]
            if not any(c[0] == "pay" for c in calls) and len(runner.steps) > 0:
                # Only the first step replays when no pause or limit interrupts the run.
                assert runner.segments > 0, f"{name} never went on live"
    for mode in MODES[1:]:
        assert outcomes[mode] == outcomes["live"], (
            f"{name}: {mode} differs from live:\n{outcomes[mode][:2000]!r}\n"
            f"{outcomes['live'][:2000]!r}"
        )


# The corpus's case that no in-process run can end (nothing bounds its CPU there): a script
# that prints, calls, prints again and spins until a CPU limit stops it. The spin is on a
# line of its own: the stop names the line it lands on, which in a loop over two lines
# would be either.
STOPPED = {
    "javascript": (
        'console.log("before"); await tools.echo({ n: 1 }); console.log("after"); for (;;) {}'
    ),
    "python": 'print("before")\nawait tools.echo(n=1)\nprint("after")\nwhile True: pass',
}


@pytest.mark.parametrize("limit", ["compute_ms", "total_compute_ms"])
@pytest.mark.parametrize("language", sorted(STOPPED))
async def test_a_run_its_cpu_limit_stops_gives_the_same_outcome_live_replayed_and_evicted(
    language: str, limit: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """:data:`STOPPED` in real confined processes, stopped by a segment's ``compute_ms`` or
    by ``total_compute_ms``: live, by replay and live with evictions, the same outcome byte
    for byte, which says what the script printed up to where it was stopped (what it
    printed since its call was lost with the process the CPU timer ended)."""
    monkeypatch.setattr(secrets, "randbits", lambda bits: SEED % (1 << bits))
    if limit == "compute_ms":
        limits = Limits(compute_ms=500)  # a hard stop 40 ms behind its soft one
    else:
        limits = Limits(compute_ms=5000, total_compute_ms=500)
    outcomes: dict[str, bytes] = {}
    evicted = 0
    for mode in MODES:
        runner = ProcessRunner(mode="pool")  # the engine's aclose closes it
        name = f"stopped/{language}/{limit}"
        outcome, _, live = await _outcome(name, STOPPED[language], mode, runner, language, limits)
        outcomes[mode] = outcome
        evicted += live.evicted if mode.startswith("evict") else 0
        if mode == "live":
            assert live.resumed == 1
    data = orjson.loads(outcomes["live"])
    assert data["limit"] == limit and data["text"].endswith("\nPrinted:\nbefore\nafter"), data
    assert evicted > 0  # the seeds evict the live run in one mode at least
    for mode in MODES[1:]:
        assert outcomes[mode] == outcomes["live"], f"{mode}: {outcomes[mode]!r}"


# What differs between the two languages' runs of one case, by design: each language's own
# random generator and date format, its exception names (a tool's error is `Error` in
# JavaScript, `ToolError` in Python) and lines, its syntax errors, and a search answer's
# declarations (each language's own). `text` and `content` render the value or the error.
_RENDERED = ("text", "content")
_LANGUAGE_OWN: dict[str, tuple[str, ...]] = {
    "clock_and_random": ("value", "calls", *_RENDERED),
    "syntax_error": ("error", *_RENDERED),
    "uncaught_error": ("error", *_RENDERED),
    "throw_after_calls": ("error", *_RENDERED),
    "error_objects": ("value", *_RENDERED),
}


def _without_lines(data: dict[str, Any]) -> None:
    """An outcome less the script's lines an error names (each language's own text)."""
    error = data.get("error")
    if isinstance(error, dict):
        error.pop("lines", None)
    said = re.compile(r"\n  at line \d+: [^\n]*")
    if isinstance(data.get("text"), str):
        data["text"] = said.sub("", data["text"])
    for block in data.get("content") or []:
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            block["text"] = said.sub("", block["text"])


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if "python" in c))
async def test_each_case_gives_the_same_outcome_in_both_languages(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One table, two languages: each case written in JavaScript and in Python makes the
    same calls with the same arguments, in the same order and steps, gets the same results,
    prints the same text and returns the same value (but for what :data:`_LANGUAGE_OWN`
    says differs by design), live and by replay."""
    monkeypatch.setattr(secrets, "randbits", lambda bits: SEED % (1 << bits))
    for mode in ("live", "replay"):
        outcomes = {}
        for language, code in CASES[name].items():
            outcome, _, _ = await _outcome(name, code, mode, language=language)
            data = orjson.loads(outcome)
            for key in _LANGUAGE_OWN.get(name, ()):
                data.pop(key, None)
            _without_lines(data)
            for call in data.get("calls", []):
                if call[0] == "tool_search":
                    call[3] = "(declarations in the script's language)"
            outcomes[language] = data
        assert outcomes["python"] == outcomes["javascript"], f"{name} ({mode})"


class _Borrowed(ScriptRunner):
    """A runner the engine uses but does not close (one service serves a test's engines)."""

    def __init__(self, runner: ScriptRunner) -> None:
        self.runner = runner

    async def run(
        self,
        script: Script,
        files: FileReader | None = None,
        *,
        tenant: str = "default",
        live: bool = False,
    ) -> Step:
        return await self.runner.run(script, files, tenant=tenant, live=live)


@pytest.mark.parametrize("name", sorted(CORPUS))
async def test_through_a_runner_service_live_and_replay_agree(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The corpus again, with real confined processes behind a runner service on loopback
    (the remote runner keeps each live process on the service, on the step's connection):
    live, by replay and live with random evictions give the outcome the in-process runner
    gives, byte for byte; live runs went on where a script has calls (no pause or limit in
    the way), and no live process is left on either side."""
    from runner import ProcessRunner
    from tests.runner.remote_support import LoopbackRemote

    monkeypatch.setattr(secrets, "randbits", lambda bits: SEED % (1 << bits))
    code = CORPUS[name]
    expected, _, _ = await _outcome(name, code, "live")
    async with LoopbackRemote(lambda: ProcessRunner(mode="pool")) as remote:
        for mode in ("live", "replay", "evict-1"):
            outcome, _, live = await _outcome(name, code, mode, _Borrowed(remote))
            assert outcome == expected, (
                f"{name}: {mode} through the service differs from in-process:\n"
                f"{outcome[:2000]!r}\n{expected[:2000]!r}"
            )
            assert len(live) == 0
            for _ in range(500):  # the service ends a closed run's process as `end` lands
                if remote.live_runs == 0:
                    break
                await asyncio.sleep(0.01)
            assert remote.live_runs == 0, f"{name}: {mode} left a live process"
            data = orjson.loads(outcome)
            calls = data["calls"]
            paused = any(c[0] == "pay" for c in calls)  # a pause ends the live run
            if mode == "live" and len(calls) > 1 and data["status"] == "finished" and not paused:
                assert live.resumed > 0, f"{name} never went on live through the service"


def test_the_corpus_covers_what_it_says() -> None:
    """The differential corpus holds the golden logs' and the conformance suite's scripts,
    each in its own language (the suite's Python scripts ran as JavaScript before)."""
    assert len(golden_scripts()) >= 7
    assert len(conformance_scripts()) >= 4
    assert len(conformance_scripts("python")) >= 4
    assert not any(name.endswith("_python") for name in conformance_scripts())
    assert len(SCRIPTS) >= 25
    assert len(PYTHON_SCRIPTS) >= 22 and set(PYTHON_SCRIPTS) <= set(SCRIPTS)


# ---- the step loop with live runs ----

SEQUENTIAL = """
let total = 0;
for (let i = 1; i <= 10; i++) {
  total += await tools.add({ a: i, b: 0 });
  console.log('at', i);
}
return total;
"""


@tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


@tool(needs_approval=True)
def pay(cents: int) -> str:
    """Pay."""
    return f"paid {cents}"


async def test_a_live_run_goes_on_instead_of_replaying(caplog: pytest.LogCaptureFixture) -> None:
    """Ten sequential calls: one run from the start and ten live segments, against eleven
    runs by replay; the same result, each segment's line says live=1, and the script's
    total CPU is the sum of its steps'."""
    results = {}
    for live in (True, False):
        runner = InProcessRunner()
        engine = CodeMode([add], runner=runner, live=live, type_check="off")
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="codemode"):
            result = await engine.run_code(SEQUENTIAL)
        record = await engine.store.get_script(result.script_id)
        await engine.aclose()
        lines = [r for r in caplog.records if r.getMessage().startswith("script step ")]
        assert len(lines) == 11 == result.steps
        if live:
            assert len(runner.steps) == 1 and runner.segments == 10
            assert [r.__dict__["live"] for r in lines] == [0] + [1] * 10
            assert all(run.closed for run in runner.lives)
        else:
            assert len(runner.steps) == 11 and runner.segments == 0
            assert {r.__dict__["live"] for r in lines} == {0}
        charged = sum(r.__dict__["cpu_ms"] for r in lines)
        assert abs(record.total_compute_ms - charged) < 0.1 * len(lines)
        results[live] = (result.value, result.text)
    assert results[True] == results[False] == (55, results[False][1])


async def test_a_pause_ends_the_live_run_and_the_next_step_replays() -> None:
    """A call that waits for a person: the live run is closed when the script pauses; after
    the approval the script replays from the log and finishes."""
    runner = InProcessRunner()
    engine = CodeMode([add, pay], runner=runner, type_check="off")
    code = """
    const a = await tools.add({ a: 1, b: 2 });
    const p = await tools.pay({ cents: a });
    return [a, p, await tools.add({ a, b: 1 })];
    """
    paused = await engine.run_code(code)
    assert paused.status == "paused"
    await engine._live.drain()
    assert runner.lives and all(run.closed for run in runner.lives)
    assert len(engine._live) == 0
    await engine.approve(paused.script_id, paused.waiting[0]["call_id"])
    done = await engine.resume(paused.script_id)
    await engine.aclose()
    assert done.value == [3, "paid 3", 4]
    # The start, then one segment (add's result); after the pause a replay and a segment.
    assert len(runner.steps) == 2 and runner.segments == 2
    assert all(run.closed for run in runner.lives)


async def test_results_later_than_live_wait_replay() -> None:
    """A call that takes longer than ``live_wait``: the live run is closed while it runs,
    and the next step replays from the log."""
    engine: CodeMode

    @tool
    async def slow(n: int) -> int:
        """Wait until the live run waiting for this call was closed."""
        while engine._live.expired == 0:
            await asyncio.sleep(0.005)
        return n

    runner = InProcessRunner()
    engine = CodeMode([slow, add], runner=runner, type_check="off", live_wait=0.05)
    result = await engine.run_code(
        "const a = await tools.slow({ n: 5 }); return await tools.add({ a, b: 1 })"
    )
    await engine.aclose()
    assert result.value == 6
    assert engine._live.expired == 1
    # The start, the replay after the expiry, then one live segment (add's result).
    assert len(runner.steps) == 2 and runner.segments == 1
    assert all(run.closed for run in runner.lives)


async def test_a_live_run_past_the_budget_is_not_kept_and_its_script_replays() -> None:
    """``live_max=1`` and two scripts whose first calls wait for each other: the first
    keeps its run, the second's does not fit and is closed (the first's stays), and that
    script replays; both finish with the right value."""
    barrier = asyncio.Barrier(2)

    @tool
    async def meet(n: int) -> int:
        """Return once the other script's first call runs too."""
        await barrier.wait()
        return n

    runner = InProcessRunner()
    engine = CodeMode([meet, add], runner=runner, type_check="off", live_max=1)
    code = "return 1 + await tools.meet({ n: N })"
    one, two = await asyncio.gather(
        engine.run_code(code.replace("N", "1")), engine.run_code(code.replace("N", "2"))
    )
    await engine.aclose()
    assert (one.value, two.value) == (2, 3)
    # Two starts, one live segment, one replay of the run not kept.
    assert engine._live.kept == 1 and engine._live.evicted == 1 and engine._live.resumed == 1
    assert len(runner.steps) == 3 and runner.segments == 1
    assert all(run.closed for run in runner.lives)


async def test_scripts_stepping_in_turn_past_the_budget_keep_its_runs_live() -> None:
    """Six scripts take their steps in turn (each call returns once the script before it
    was kept again) with room for four live runs: four scripts go on live to their end
    and two replay every step, and no run kept is closed before its results come. Evicting
    the least recently kept would close, at each step, the run whose turn is next: none
    would go on live but the last four."""
    room, count, calls = 4, 6, 5
    turn = 0
    changed = asyncio.Condition()

    @tool
    async def next_turn(s: int, i: int) -> int:
        """Return once the script before this one in the turn has called again."""
        nonlocal turn
        async with changed:
            turn += 1
            changed.notify_all()
            await changed.wait_for(lambda: turn >= min((i + 1) * count + s, count * calls))
        return i

    runner = InProcessRunner()
    engine = CodeMode([next_turn], runner=runner, type_check="off", live_max=room)
    code = "let n = 0; for (let i = 0; i < CALLS; i++) n += await tools.next_turn({ s: S, i }); return n"
    results = await asyncio.gather(
        *(
            engine.run_code(code.replace("CALLS", str(calls)).replace("S", str(s)))
            for s in range(count)
        )
    )
    await engine.aclose()
    assert [r.value for r in results] == [sum(range(calls))] * count
    live = engine._live
    assert live.kept == live.resumed == room * calls
    assert live.evicted == (count - room) * calls and live.expired == live.mismatched == 0
    assert runner.segments == room * calls and len(runner.steps) == count + (count - room) * calls
    assert all(run.closed for run in runner.lives)


@pytest.mark.parametrize("budget", [{"live_max": 0}, {"live_memory": 0}])
async def test_a_live_budget_of_nothing_keeps_none(budget: dict[str, int]) -> None:
    """No count, or no memory, keeps no live run, and no step asks for one: each was run
    live, then ended for room as soon as it was answered (a process made for nothing, and
    "the live budget is full" logged, each step)."""
    runner = InProcessRunner()
    engine = CodeMode([add], runner=runner, type_check="off", **budget)  # type: ignore[arg-type]
    result = await engine.run_code(SEQUENTIAL)
    await engine.aclose()
    assert result.value == 55 and len(runner.steps) == 11 and runner.segments == 0
    assert runner.lives == [] and engine._live.evicted == 0


async def test_a_live_run_that_is_gone_replays(caplog: pytest.LogCaptureFixture) -> None:
    """The process ended while its call ran (a crash, an OOM kill): the engine replays."""
    runner = InProcessRunner()

    @tool
    async def vanish(n: int) -> int:
        """Close the live run that waits for this call, as if its process died."""
        await runner.lives[-1].close()
        return n

    engine = CodeMode([vanish, add], runner=runner, type_check="off")
    with caplog.at_level(logging.INFO, logger="codemode"):
        result = await engine.run_code(
            "const a = await tools.vanish({ n: 5 }); return await tools.add({ a, b: 1 })"
        )
    await engine.aclose()
    assert result.value == 6
    assert any("live run gone" in r.getMessage() for r in caplog.records)
    assert len(runner.steps) == 2 and runner.segments == 1  # the failed resume, not counted
    assert all(run.closed for run in runner.lives)


async def test_aclose_ends_a_live_run_while_its_call_runs() -> None:
    """``aclose`` closes the runs kept for scripts whose calls are still running, and ends
    those calls."""
    release = asyncio.Event()
    running = asyncio.Event()

    @tool
    async def block(n: int) -> int:
        """Run until released."""
        running.set()
        await release.wait()
        return n

    runner = InProcessRunner()
    engine = CodeMode([block], runner=runner, type_check="off", live_wait=600)
    task = asyncio.create_task(engine.run_code("return await tools.block({ n: 1 })"))
    await running.wait()
    assert len(engine._live) == 1
    await engine.aclose()
    assert len(engine._live) == 0 and all(run.closed for run in runner.lives)
    with pytest.raises(CodeModeError, match=r"closed while tools\.block ran"):
        await task  # its call was cancelled, and stays running in the log


async def test_a_run_that_does_not_match_the_log_is_closed() -> None:
    """A kept run is resumed only with exactly the records it waits for."""
    runner = InProcessRunner()
    script = Script(
        id="s",
        code="return await tools.add({ a: 1, b: 2 })",
        tools=["add"],
        clock=Clock(now_ms=0, seed=1),
    )
    step = await runner.run(script, live=True)
    assert step.outcome == "calls" and step.live is not None
    live = LiveRuns(wait=60, max_count=4, max_memory=1 << 30)
    key = ("s", "owner")
    live.keep(key, step.live, 0, step.calls)
    wrong = [Record(name="add", arguments={"a": 1, "b": 3}, result=4)]
    assert live.take(key, wrong) is None
    await live.drain()
    assert live.mismatched == 1 and runner.lives[0].closed
    step = await runner.run(script, live=True)
    assert step.live is not None
    live.keep(key, step.live, 0, step.calls)
    right = [Record(name="add", arguments={"a": 1, "b": 2}, result=3)]
    assert live.take(key, right) is step.live
    await step.live.close()


class _NoLiveRunner(ScriptRunner):
    """A runner written before live steps: ``run`` takes no ``live``."""

    def __init__(self) -> None:
        self.runs = 0

    async def run(
        self, script: Script, files: FileReader | None = None, *, tenant: str = "default"
    ) -> Step:
        self.runs += 1
        return Step.from_ran(await asyncio.to_thread(run_in_process, script))


async def test_a_runner_without_live_steps_gets_replay_steps() -> None:
    runner = _NoLiveRunner()
    engine = CodeMode([add], runner=runner, type_check="off")
    assert engine.live is False
    result = await engine.run_code(SEQUENTIAL)
    await engine.aclose()
    assert result.value == 55 and runner.runs == 11


# ---- settings ----


def test_live_settings_in_codemode_toml(tmp_path: Path) -> None:
    path = tmp_path / "codemode.toml"
    path.write_text(
        '[codemode]\nlive = false\nlive_wait = 2.5\nlive_max = 16\nlive_memory = "1gb"\n'
    )
    config = Config.load(path)
    assert config.live.options() == {
        "live": False,
        "live_wait": 2.5,
        "live_max": 16,
        "live_memory": 1024**3,
    }
    assert Config().live.options()["live"] is True


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('live = "yes"', "live = 'yes' must be true or false"),
        ("live_wait = 0", "live_wait = 0 must be seconds, over 0"),
        ("live_wait = -1.5", "live_wait = -1.5 must be seconds, over 0"),
        ("live_max = -1", "live_max = -1 must be a whole number, 0 to 65,536"),
        ("live_max = 2.5", "live_max = 2.5 must be a whole number"),
        ('live_memory = "lots"', "live_memory = 'lots' is not a size"),
        ("live_memory = -5", "live_memory = -5 is negative"),
        ("live_waits = 3", "unknown key(s) 'live_waits'"),
    ],
)
def test_bad_live_settings_are_refused(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "codemode.toml"
    path.write_text(f"[codemode]\n{line}\n")
    with pytest.raises(ConfigError, match=re.escape(message)):
        Config.load(path)


def test_bad_live_options_are_refused() -> None:
    runner = InProcessRunner()
    with pytest.raises(ConfigError, match="live = 1 must be true or false"):
        CodeMode([], runner=runner, live=1)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="live_wait = inf must be seconds"):
        CodeMode([], runner=runner, live_wait=float("inf"))
    with pytest.raises(ConfigError, match="live_max = True must be a whole number"):
        CodeMode([], runner=runner, live_max=True)
    with pytest.raises(ConfigError, match="live_memory = -1 is negative"):
        CodeMode([], runner=runner, live_memory=-1)
    with pytest.raises(ConfigError, match="live_memory = 'lots' is not a size"):
        CodeMode([], runner=runner, live_memory="lots")


def test_byte_size_options_take_the_words_the_config_takes() -> None:
    """Every byte size a host gives in Python takes what codemode.toml takes: bytes or a
    word such as "2gb", parsed by one parser (live_memory, the limits, the runner's
    data_limit, a type checker's memory)."""
    config = Config.from_mapping(
        {"codemode": {"live_memory": "2gb", "runner": {"data_limit": "1.5gb"}}}
    )
    engine = CodeMode([], runner=InProcessRunner(), live_memory="2gb")
    assert engine._live.max_memory == config.live.live_memory == 2 * 1024**3
    runner = ProcessRunner(mode="exec", data_limit="1.5gb")
    assert runner.data_limit == config.runner.options["data_limit"] == 3 * 1024**3 // 2
    with pytest.raises(ValueError, match="data_limit = 'huge' is not a size"):
        ProcessRunner(mode="exec", data_limit="huge")
    assert TypeChecker("/bin/true", memory="256mb").memory == 256 * 1024**2
    with pytest.raises(ConfigError, match=r"TypeChecker\(memory=...\) = 'lots' is not a size"):
        TypeChecker("/nonexistent/tsgo", memory="lots")


def test_the_default_budget_is_sized_for_the_machine() -> None:
    memory = default_live_memory()
    assert memory >= 64 * 1024 * 1024
    assert 4 <= default_live_count(memory) <= 1024


async def test_the_live_budget_counts_what_runs_cost_and_still_evicts() -> None:
    """With a memory budget of one run's resident size, several runs are kept (each costs
    its private memory, a fifth of its resident size here: the rest it shares with the fork
    server), and those past what they cost are still not kept. Counted by resident size,
    only one would be kept."""
    from tests._needs import require
    from tests.runner.support import script as runner_script

    if os.geteuid() != 0:
        require("root: only a runner with CAP_SYS_PTRACE may read a sandbox's smaps_rollup")
    code = "const s = 'x'.repeat(4 << 20); await tools.t({ i: s.length })"
    async with ProcessRunner(mode="pool", slots=2) as runner:
        steps = [await runner.run(runner_script(code), live=True) for _ in range(8)]
        runs = [s.live for s in steps]
        assert all(run is not None for run in runs)
        resident = max(run.memory_bytes for run in runs if run is not None)
        live = LiveRuns(wait=600.0, max_count=100, max_memory=resident)
        for k, (step, run) in enumerate(zip(steps, runs, strict=True)):
            assert run is not None
            live.keep((f"s{k}", "owner"), run, 0, step.calls)
        assert live.evicted >= 1  # the budget still binds
        assert 3 <= len(live) < 8
        assert live.memory <= live.max_memory
        await live.drain()  # those not kept are closed
        kept = [run for run in runs if run is not None and run.memory_bytes > 0]
        assert len(kept) == len(live)
        assert sum(run.private_bytes() for run in kept) <= live.max_memory
        await live.aclose()


async def test_a_tool_added_after_a_script_began_stays_out_of_its_world() -> None:
    """An MCP server (or a host's new release) adds a tool while a script runs: the script
    cannot call it, in its live run and in the replay after a pause alike. (The live run's
    process had no such tool; a replay that had it made a call the log did not have, and
    the script failed with DivergenceError.) A script begun after the change can call it."""
    engine: CodeMode

    @tool
    def late(n: int) -> int:
        """Came later."""
        return n * 10

    @tool
    def grow(n: int) -> int:
        """Adds tools.late to the engine's tools, as an MCP server's list_changed does."""
        engine._mcp_tools_changed([late])
        return n

    runner = InProcessRunner()
    engine = CodeMode([grow, pay], runner=runner, type_check="off")
    code = """
    const n = await tools.grow({ n: 1 });
    let seen;
    try { seen = await tools.late({ n }); } catch (e) { seen = e.constructor.name; }
    const p = await tools.pay({ cents: n });
    return [seen, p, Object.keys(tools).includes("late")];
    """
    try:
        paused = await engine.run_code(code)
        assert paused.status == "paused", paused.text
        assert "late" in engine._tool_names
        await engine.approve(paused.script_id, paused.waiting[0]["call_id"])
        done = await engine.resume(paused.script_id)
        assert done.status == "finished", done.text
        assert done.value[1:] == ["paid 1", False]
        assert done.value[0] != 10
        calls = await engine.store.calls(paused.script_id)
        assert [c.name for c in calls] == ["grow", "pay"]
        later = await engine.run_code("return await tools.late({ n: 2 })")
        assert later.value == 20, later.text
    finally:
        await engine.aclose()
