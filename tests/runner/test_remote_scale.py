"""Acceptance: one engine, three runner services on loopback, 300 scripts, one service killed.

Every script must end exactly as it does on the local runner, though the service that was
running some of its steps went away mid-run: those steps ran again elsewhere.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from engine import CodeMode, RunResult, tool
from runner import ProcessRunner, RemoteRunner

from .remote_support import TOKEN, service_process

SCRIPTS = 300
IN_FLIGHT = 12


@tool
def add(a: int, b: int) -> int:
    """The sum of a and b."""
    return a + b


@tool
def word(n: int) -> str:
    """The n-th word of a short list."""
    return ["alpha", "beta", "gamma", "delta", "epsilon"][n % 5]


def code(i: int) -> str:
    """Script ``i``: one, two or three steps, with printed output and parallel calls."""
    if i % 3 == 0:
        return f"console.log('only', {i}); return {{i: {i}, square: {i} * {i}}}"
    if i % 3 == 1:
        return f"const a = await tools.add({{a: {i}, b: 1}});\nconsole.log('a', a);\nreturn a * 2"
    return (
        f"const a = await tools.add({{a: {i}, b: 2}});\n"
        f"const [b, w] = await Promise.all([tools.add({{a, b: a}}), tools.word({{n: {i}}})]);\n"
        "console.log(w, b);\n"
        "return {a, b, w}"
    )


def outcome(result: RunResult) -> tuple[object, ...]:
    text = result.text.replace(result.script_id, "<id>")
    return result.status, result.returned, result.value, result.steps, text


async def run_all(engine: CodeMode, on_progress: object = None) -> list[RunResult]:
    gate = asyncio.Semaphore(IN_FLIGHT)
    done = 0

    async def one(i: int) -> RunResult:
        nonlocal done
        async with gate:
            result = await engine.run_code(code(i))
        done += 1
        if callable(on_progress):
            on_progress(done)
        return result

    return list(await asyncio.gather(*(one(i) for i in range(SCRIPTS))))


@pytest.mark.timeout(300)
async def test_300_scripts_across_three_services_one_killed_midway(tmp_path: Path) -> None:
    token_file = tmp_path / "runner.token"
    token_file.write_text(TOKEN)
    started = time.monotonic()
    async with ProcessRunner() as local:
        expected = await run_all(CodeMode(tools=[add, word], runner=local, retry_delay=0.1))
    local_seconds = time.monotonic() - started

    async with (
        service_process(token_file) as (_first, a),
        service_process(token_file) as (second, b),
        service_process(token_file) as (_third, c),
    ):
        remote = RemoteRunner([a, b, c], TOKEN, cooldown=2.0)
        engine = CodeMode(tools=[add, word], runner=remote, retry_delay=0.1)
        killed: list[float] = []
        at_kill: dict[str, int] = {}

        def progress(done: int) -> None:
            if done >= SCRIPTS // 3 and not killed and remote.status()[b]["inflight"]:
                # The machine goes away, the service and its sandboxes, mid-step.
                at_kill.update(remote.status()[b])
                os.killpg(second.pid, signal.SIGKILL)
                killed.append(time.monotonic())

        started = time.monotonic()
        results = await run_all(engine, progress)
        remote_seconds = time.monotonic() - started
        status = remote.status()

    assert killed, "the service was never stopped"
    assert [outcome(r) for r in results] == [outcome(r) for r in expected]
    assert all(r.status == "finished" for r in results)
    # A step of ours was on its way to it, or in it, when it was killed. Its answer may
    # already have been on its way back (then the step ended there); otherwise the step ran
    # elsewhere and the service went out of rotation. Either way the dead service finished no
    # step it had not begun.
    assert status[b]["steps"] <= at_kill["steps"] + at_kill["inflight"], (at_kill, status)
    assert status[b]["failures"] >= 1 or status[b]["steps"] > at_kill["steps"], (at_kill, status)
    if status[b]["abandoned"]:
        assert status[b]["failures"] >= 1, status  # it went out of rotation
    assert status[b]["steps"] > 0 and status[a]["steps"] > 0 and status[c]["steps"] > 0
    steps = sum(s["steps"] for s in status.values())
    assert steps == sum(r.steps for r in results)
    print(
        f"\nlocal {local_seconds:.1f} s, remote {remote_seconds:.1f} s for {SCRIPTS} scripts "
        f"({steps} steps): {status}"
    )
