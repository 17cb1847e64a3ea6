"""The fork server: a clean zygote, children with only their own pipes, and no process or fd
left behind when the zygote, a child or the runner's host is killed in the middle of a step.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import re
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from runner import ProcessRunner, RunError
from runner._forkserver import ForkServer
from sandbox import protocol
from sandbox.__main__ import LINE_ROOM_FACTOR
from sandbox.protocol import Script
from tests.runner.conftest import open_fds
from tests.runner.support import (
    EVENT_TIMEOUT,
    children_of,
    limits_of,
    script,
    until,
    wait_gone,
    zombies,
)

MiB = 1024 * 1024
# A version 2 process keeps the hard CPU limit it was forked with (live segments re-arm the
# soft one); a version 1 process lowers it to its allowance + 2 s.
LIVE_HARD_CPU = str(protocol.PROCESS_CPU_SECONDS + 1)
SPIN = "for (;;) {}"


async def running_child(runner: ProcessRunner, task: asyncio.Task[object]) -> psutil.Process:
    """The zygote's child that is running ``task``'s script (tightened to compute_ms 5000)."""
    assert runner.server is not None
    found: list[psutil.Process] = []

    def look() -> bool:
        for child in children_of(runner.server.zygote_pid if runner.server else None):
            if limits_of(child.pid).get("Max cpu time") == ("6", LIVE_HARD_CPU):
                found.append(child)
                return True
        assert not task.done(), task
        return False

    await until(look, "the step's child to run its script")
    return found[0]


@pytest.mark.parametrize("mode", ["fork", "pool"])
async def test_the_zygote_is_clean_single_threaded_and_holds_only_its_socket(mode: str) -> None:
    async with ProcessRunner(mode=mode) as runner:  # type: ignore[arg-type]
        assert (await runner.run(script("return 1"))).value == 1
        assert runner.server is not None and runner.server.zygote_pid is not None
        zygote = runner.server.zygote_pid
        assert Path(f"/proc/{zygote}/environ").read_bytes() == b"PYTHONHASHSEED=0\0"
        assert len(os.listdir(f"/proc/{zygote}/task")) == 1
        assert psutil.Process(zygote).cmdline()[1:6] == ["-s", "-P", "-m", "sandbox", "--zygote"]
        # While the pool refills, the zygote briefly holds the pipes of the child it forks:
        # look again (a bounded while) until it is between forks.
        for _ in range(100):
            fds = {}
            for fd in os.listdir(f"/proc/{zygote}/fd"):
                with contextlib.suppress(FileNotFoundError):  # closed while listed
                    fds[int(fd)] = os.readlink(f"/proc/{zygote}/fd/{fd}")
            if len(fds) == 6:
                break
            await asyncio.sleep(0.05)
        # stdio, the control socket, and the pipe its SIGCHLD handler wakes it with.
        assert sorted(fds)[:3] == [0, 1, 2]
        assert sum(target.startswith("socket:") for target in fds.values()) == 1
        assert len(fds) == 6, fds


async def test_the_zygote_learns_the_pages_a_step_writes_in_each_language() -> None:
    # Needs Linux with /proc/self/pagemap (CI has it): what each child then copies before its
    # step (sandbox.pages). The probe's run writes hundreds of pages in either language.
    async with ProcessRunner(mode="pool") as runner:
        assert runner.server is not None
        told: list[dict[str, object]] = []
        handle = runner.server._handle

        def watch(message: dict[str, object], fds: list[int]) -> None:
            told.append(message)
            handle(message, fds)

        runner.server._handle = watch  # type: ignore[method-assign]
        assert (await runner.run(script("return 1"))).value == 1
        copied = runner.server.copied_pages
        assert set(copied) == set(protocol.LANGUAGES), copied
        assert all(n >= 100 for n in copied.values()), copied

        def learned_again() -> list[dict[str, int]]:
            return [m["pages"] for m in told if "pages" in m]  # type: ignore[misc]

        # Once its first children forked ahead, it learns again the pages of the language
        # its pool children are made ready for (their loop changed its heap), and says so.
        def kinds() -> list[str]:  # what the zygote said, in order (the whole is long)
            return [next(iter(m)) for m in told]

        # Steps until it learned: the pool forks a child ahead after a step takes one (at
        # once when it is empty, else once the runner is quiet), and the zygote learns at the
        # third child forked ahead. On a loaded machine its children become ready slowly, the
        # steps fork their own meanwhile, and a pool full again forks none: ten steps and a
        # wait ended with two forked ahead (one CI run of four), so it steps on until then.
        await step_until(runner, lambda: learned_again(), f"the zygote to learn again: {kinds()}")
        assert len(learned_again()) == 1, kinds()
        assert runner.server.copied_pages == learned_again()[0]
        assert all(n >= 100 for n in runner.server.copied_pages.values())
        # Python's, once a Python step made its pool children Python's; each only once.
        python = script("return 1").model_copy(update={"language": "python"})
        await step_until(
            runner, lambda: len(learned_again()) == 2, f"Python's pages learned: {kinds()}", python
        )
        for _ in range(3):
            assert (await runner.run(python)).value == 1
            assert (await runner.run(script("return 1"))).value == 1
        assert len(learned_again()) == 2, kinds()
        assert runner.server.copied_pages == learned_again()[1]


async def step_until(
    runner: ProcessRunner, condition: Callable[[], object], what: str, step: Script | None = None
) -> None:
    """Run ``step`` (a trivial JavaScript one) again and again, a little apart (the runner
    quiet between them), until ``condition()`` holds: as :func:`until`, within its time."""
    end = time.monotonic() + EVENT_TIMEOUT
    step = step or script("return 1")
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        assert (await runner.run(step)).value == 1
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("mode", ["fork", "pool"])
async def test_a_child_reports_an_unhandled_rejection_through_the_zygotes_context(
    mode: str,
) -> None:
    """The zygote's prepared context has the rejection tracker: a forked child (confined)
    reports an async function that failed unawaited, one child after another."""
    code = "(async () => { throw new TypeError('t' + 1); })();\nreturn 2"
    line = (
        "line 1: Warning: an async function or promise failed and nothing awaited it: "
        "TypeError: t1\n"
    )
    async with ProcessRunner(mode=mode) as runner:  # type: ignore[arg-type]
        for _ in range(3):
            step = await runner.run(script(code))
            assert step.outcome == "finished" and step.value == 2, step.error
            assert step.printed == line


async def test_a_child_has_only_its_own_pipes_runs_as_nobody_and_is_limited() -> None:
    async with ProcessRunner(mode="fork") as runner:
        task = asyncio.create_task(runner.run(script(SPIN, compute_ms=5000, memory=64 * MiB)))
        child = await running_child(runner, task)
        fds = os.listdir(f"/proc/{child.pid}/fd")
        assert sorted(int(fd) for fd in fds) == [0, 1, 2]
        for fd in fds:
            assert os.readlink(f"/proc/{child.pid}/fd/{fd}").startswith("pipe:")
        assert child.uids().real == pwd.getpwnam("nobody").pw_uid
        assert Path(f"/proc/{child.pid}/environ").read_bytes() == b"PYTHONHASHSEED=0\0"
        # The heap is twice memory and at least 512 MiB; the hard limit leaves room for the
        # results lines a live run may still read (as a replay's script line has), no more.
        soft, hard = limits_of(child.pid)["Max data size"]
        assert soft == str(512 * MiB)
        most = protocol.run_results_bound(protocol.Limits(memory=64 * MiB))
        assert 512 * MiB < int(hard) <= 512 * MiB + LINE_ROOM_FACTOR * most
        child.kill()
        step = await task
        assert step.outcome == "failed"


async def test_a_runner_with_data_limit_gives_children_that_heap() -> None:
    async with ProcessRunner(mode="fork").with_data_limit(900 * MiB) as runner:
        assert isinstance(runner, ProcessRunner)
        task = asyncio.create_task(runner.run(script(SPIN, compute_ms=5000)))
        child = await running_child(runner, task)
        assert limits_of(child.pid)["Max data size"] == (str(900 * MiB),) * 2
        child.kill()
        await task


@pytest.mark.parametrize("mode", ["fork", "pool"])
async def test_killing_the_zygote_mid_step_gives_a_run_error_then_a_new_zygote(
    mode: str,
) -> None:
    before = open_fds()
    async with ProcessRunner(mode=mode) as runner:  # type: ignore[arg-type]
        assert runner.server is not None
        await runner.run(script("return 1"))
        first_zygote = runner.server.zygote_pid
        assert first_zygote is not None
        # That step returned at `ran`; its process (limits like the next one's) is ended
        # and reaped meanwhile: wait, so that the next step's child is the one found.
        await until(lambda: not runner._reaping, "the first step's process to be reaped")
        task = asyncio.create_task(runner.run(script(SPIN, compute_ms=5000)))
        child = await running_child(runner, task)
        os.kill(first_zygote, signal.SIGKILL)
        with pytest.raises(RunError, match="fork server ended while this step ran"):
            await task
        assert wait_gone([child.pid]) == []  # the orphan was killed through its pidfd
        step = await runner.run(script("return 'again'"))
        assert step.value == "again"
        assert runner.server.starts == 2 and runner.server.zygote_pid != first_zygote
    assert zombies() == []
    assert open_fds() == before


@pytest.mark.parametrize("mode", ["fork", "pool"])
async def test_a_zygote_that_died_between_steps_is_replaced_quietly(mode: str) -> None:
    async with ProcessRunner(mode=mode) as runner:  # type: ignore[arg-type]
        assert runner.server is not None
        await runner.run(script("return 1"))
        if runner.pool is not None:
            await until(lambda: len(runner.pool.idle) == runner.pool.size, "the pool to fill")
        zygote = runner.server.zygote_pid
        assert zygote is not None
        os.kill(zygote, signal.SIGKILL)
        await until(lambda: not wait_gone([zygote], timeout=0), "the zygote to die")
        step = await runner.run(script("return 'fine'"))
        assert step.value == "fine"
        assert runner.server.starts == 2


async def test_a_step_right_after_the_zygote_died_takes_no_orphan() -> None:
    """A step taken the moment the zygote died, before the event loop read its socket's
    end, gets a new child, not one of the dead zygote's orphans (which ran the script and
    failed it: "the fork server ended while this step ran"; 1 in 30 CI runs of the test
    above)."""
    async with ProcessRunner(mode="pool") as runner:
        assert runner.server is not None and runner.pool is not None
        await runner.run(script("return 1"))
        await until(lambda: len(runner.pool.idle) == runner.pool.size, "the pool to fill")
        zygote = runner.server.zygote_pid
        assert zygote is not None
        os.kill(zygote, signal.SIGKILL)
        # Waited for without the event loop: it has not seen the socket close.
        os.waitid(os.P_PID, zygote, os.WEXITED | os.WNOWAIT)
        step = await runner.run(script("return 'fine'"))
        assert step.value == "fine", step
        assert runner.server.starts == 2


async def test_killing_a_child_mid_step_fails_that_step_only() -> None:
    before = open_fds()
    async with ProcessRunner(mode="pool") as runner:
        task = asyncio.create_task(runner.run(script(SPIN, compute_ms=5000)))
        child = await running_child(runner, task)
        child.send_signal(signal.SIGKILL)
        step = await task
        assert step.outcome == "failed" and step.error is not None
        assert step.process is not None and step.process.exit_status == signal.SIGKILL
        assert (await runner.run(script("return 2"))).value == 2
    assert zombies() == []
    assert open_fds() == before


async def test_the_zygote_survives_a_malformed_control_message() -> None:
    async with ProcessRunner(mode="fork") as runner:
        assert runner.server is not None
        await runner.run(script("return 1"))
        zygote = runner.server.zygote_pid
        sock = runner.server._sock
        assert sock is not None
        sock.send(b"{not json")
        sock.send(b'{"spawn": {"id": 999}}')  # no fds
        assert (await runner.run(script("return 3"))).value == 3
        assert runner.server.zygote_pid == zygote and runner.server.starts == 1


async def test_closing_the_runner_ends_the_zygote_and_every_child() -> None:
    runner = ProcessRunner(mode="pool", pool_size=3)
    await runner.run(script("return 1"))
    assert runner.pool is not None and runner.server is not None
    await until(lambda: len(runner.pool.idle) == 3, "the pool to fill")
    zygote = runner.server.zygote_pid
    assert zygote is not None
    pids = [zygote, *(c.pid for c in children_of(zygote))]
    await runner.aclose()
    assert wait_gone(pids) == []
    assert zombies() == []
    with pytest.raises(RunError, match="closed"):
        await runner.run(script("return 1"))


HOST = textwrap.dedent(
    """
    import asyncio, sys
    import psutil
    from runner import ProcessRunner
    from sandbox.protocol import Clock, Limits, Script

    async def main():
        runner = ProcessRunner(mode=sys.argv[1], pool_size=2)
        spin = Script(id="spin", code="for (;;) {}", clock=Clock(now_ms=0, seed=1),
                      limits=Limits(compute_ms=20000))
        task = asyncio.create_task(runner.run(spin))
        while True:
            await asyncio.sleep(0.01)
            zygote = runner.server.zygote_pid if runner.server.alive else None
            kids = psutil.Process(zygote).children() if zygote else []
            if kids and any(k.cpu_times().user > 0.05 for k in kids):
                print(zygote, *(k.pid for k in kids), flush=True)
                break
        await task

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("mode", ["fork", "pool"])
def test_killing_the_runners_host_mid_step_leaves_no_process(mode: str, tmp_path: Path) -> None:
    """The zygote sees its control socket close, kills its children and exits."""
    host_file = tmp_path / "host.py"
    host_file.write_text(HOST)
    host = subprocess.Popen(
        [sys.executable, str(host_file), mode],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parents[2],
        start_new_session=True,
    )
    try:
        assert host.stdout is not None
        line = host.stdout.readline()  # the host prints once a child spins
        pids = [int(p) for p in line.split()]
        assert len(pids) >= 2, line
        host.kill()
        host.wait(EVENT_TIMEOUT)
        assert wait_gone(pids) == [], "the zygote or a child outlived the runner's host"
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
        if host.stdout is not None:
            host.stdout.close()
    assert zombies() == []


def _sh(tmp_path: Path, body: str) -> str:
    """An executable shell script standing in for the runner's python."""
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\n{body}\n")
    python.chmod(0o755)
    return str(python)


WHAT_STARTS = {"fork": "fork server", "pool": "fork server", "exec": "sandbox process"}


@pytest.mark.parametrize("mode", sorted(WHAT_STARTS))
async def test_an_interpreter_that_exits_before_it_is_ready_fails_each_step_for_good(
    tmp_path: Path, mode: str
) -> None:
    """One that cannot import the sandbox exits 1 at every start: a permanent RunError that
    quotes it and says what to give instead (the engine retried it until queue_timeout,
    five minutes, then said "resume it later")."""
    python = _sh(tmp_path, "echo 'boom: no sandbox here' >&2\nexit 1")
    async with ProcessRunner(mode=mode, python=python) as runner:  # type: ignore[arg-type]
        for _ in range(2):
            with pytest.raises(RunError) as raised:
                await runner.run(script("return 1"))
            said = str(raised.value)
            assert f"{WHAT_STARTS[mode]} did not start" in said and "boom: no sandbox here" in said
            assert raised.value.permanent and "exited with code 1" in said, said
            assert "an interpreter that has this project installed" in said
    assert zombies() == []


@pytest.mark.parametrize("mode", ["fork", "exec"])
async def test_an_interpreter_killed_as_it_starts_may_be_tried_again(
    tmp_path: Path, mode: str
) -> None:
    """Killed by a signal (the OOM killer, say) says nothing of the next start."""
    async with ProcessRunner(mode=mode, python=_sh(tmp_path, "kill -9 $$")) as runner:  # type: ignore[arg-type]
        with pytest.raises(RunError, match="did not start") as raised:
            await runner.run(script("return 1"))
        assert not raised.value.permanent
    assert zombies() == []


@pytest.mark.parametrize("mode", sorted(WHAT_STARTS))
async def test_an_interpreter_gone_since_the_runner_was_made_fails_for_good(
    tmp_path: Path, mode: str
) -> None:
    """exec() refusing the program (gone, or no longer executable) is permanent too."""
    python = _sh(tmp_path, f'exec "{sys.executable}" "$@"')
    async with ProcessRunner(mode=mode, python=python) as runner:  # type: ignore[arg-type]
        os.chmod(python, 0o644)
        with pytest.raises(RunError) as raised:
            await runner.run(script("return 1"))
        assert raised.value.permanent and "Permission denied" in str(raised.value)
        os.unlink(python)
        with pytest.raises(RunError) as raised:
            await runner.run(script("return 1"))
        assert raised.value.permanent and "No such file" in str(raised.value)
        assert f"could not start the {WHAT_STARTS[mode]} ({python})" in str(raised.value)
    assert zombies() == []


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        # Each step timed out before its process could start (then retried until
        # queue_timeout).
        ("spawn_timeout", 0, "spawn_timeout must be a positive number of seconds, not 0"),
        ("spawn_timeout", -1.5, "not -1.5"),
        ("spawn_timeout", float("nan"), "not nan"),
        ("spawn_timeout", "30", "not '30'"),
        # The pool's idle watch woke without a pause: a core's worth of CPU for ever.
        ("idle_after", 0, "idle_after must be a positive number of seconds, not 0"),
        ("idle_after", float("nan"), "not nan"),
        ("script_wait", float("nan"), "script_wait must be zero or more seconds, not nan"),
        # A million children were forked, one after another, until the memory ran out.
        ("pool_size", 9, "pool_size must be at most 4 per slot (8 for 2), not 9"),
        ("pool_size", 10**6, "not 1000000"),
        ("pool_size", 1.5, "pool_size must be a whole number, at least 1, not 1.5"),
        ("pool_size", True, "pool_size must be a whole number, at least 1, not True"),
        ("pool_size", 0, "pool_size must be a whole number, at least 1, not 0"),
    ],
)
def test_options_that_would_break_every_step_or_the_host_are_refused(
    option: str, value: object, said: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(said)):
        ProcessRunner(slots=2, **{option: value})  # type: ignore[arg-type]
    runner = ProcessRunner(slots=2, pool_size=8, idle_after=float("inf"), spawn_timeout=0.5)
    assert (runner.pool_size, runner.idle_after) == (8, float("inf"))


def test_python_must_be_an_executable_file_and_is_kept_as_an_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused when the runner is made, not at each step; a relative path or a bare name
    is resolved here, since the sandbox starts from / with an environment of its own."""
    plain = tmp_path / "plain"
    plain.write_text("")
    for wrong in ("/nonexistent/python", str(tmp_path), str(plain), "no-such-python-here", ""):
        with pytest.raises(ValueError, match="is not an executable file") as raised:
            ProcessRunner(python=wrong)
        assert repr(wrong) in str(raised.value)
    python = _sh(tmp_path, "exit 0")
    monkeypatch.chdir(tmp_path)
    assert ProcessRunner(python="./python").python == python
    monkeypatch.setenv("PATH", str(tmp_path))
    assert ProcessRunner(python="python").python == python


UNCONFINED = """\
import sys
from sandbox import lockdown

def refuse(**_):
    raise lockdown.LockdownError("seccomp", "not on this host")

lockdown.apply = refuse
import sandbox.__main__ as main
args = sys.argv[1:]
sys.exit(main.main(args[args.index("sandbox") + 1 :]))
"""


@pytest.mark.parametrize("mode", ["exec", "fork", "pool"])
async def test_a_sandbox_that_cannot_lock_down_runs_no_script(mode: str, tmp_path: Path) -> None:
    (tmp_path / "unconfined.py").write_text(UNCONFINED)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I "{tmp_path}/unconfined.py" "$@"\n')
    python.chmod(0o755)
    async with ProcessRunner(mode=mode, python=str(python)) as runner:  # type: ignore[arg-type]
        for _ in range(2):
            step = await runner.run(script("return 1"))
            assert step.outcome == "failed" and step.error is not None
            assert step.error.name == "SandboxUnavailable"
            assert "could not lock itself down" in step.error.message
            assert "not on this host" in step.error.message
        if runner.pool is not None:
            await until(lambda: runner.pool is not None and runner.pool.problem, "the pool")
    assert zombies() == []


FAKE_ZYGOTE = """
import json, os, socket, sys
sock = socket.socket(fileno=int(sys.argv[sys.argv.index("--control") + 1]))
for message in json.load(open(%r)):
    sock.send(json.dumps(message).encode())
while sock.recv(65536):  # until the runner lets go
    pass
"""


def fake_zygote(tmp_path: Path, messages: list[object]) -> str:
    """A ``python`` for ForkServer that says ``messages`` as a zygote would, then waits."""
    (tmp_path / "messages.json").write_text(json.dumps(messages))
    (tmp_path / "zygote.py").write_text(FAKE_ZYGOTE % str(tmp_path / "messages.json"))
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I "{tmp_path}/zygote.py" "$@"\n')
    python.chmod(0o755)
    return str(python)


@pytest.mark.parametrize("pages", [{"javascript": "many"}, ["javascript"], {"python": -1}])
async def test_a_zygote_whose_hello_miscounts_its_pages_does_not_start(
    tmp_path: Path, pages: object
) -> None:
    hello = {"hello": {"version": 1, "pid": 1, "pages": pages}}
    server = ForkServer(python=fake_zygote(tmp_path, [hello]))
    try:
        with pytest.raises(RunError, match=r"did not start: the fork server said .*not a message"):
            await server.start()
        assert not server.alive and server.copied_pages == {}
    finally:
        await server.aclose()
    assert zombies() == []


async def test_a_zygote_that_miscounts_its_pages_later_is_taken_for_dead(tmp_path: Path) -> None:
    hello = {"hello": {"version": 1, "pid": 1, "pages": {"javascript": 3}}}
    server = ForkServer(python=fake_zygote(tmp_path, [hello, {"pages": {"javascript": 2.5}}]))
    try:
        await server.start()
        await until(lambda: not server.alive, "the zygote to be taken for dead")
        assert server.copied_pages == {"javascript": 3}  # what it said last that made sense
    finally:
        await server.aclose()
    assert zombies() == []


async def test_a_spawn_given_up_as_its_child_arrives_leaks_no_pidfd() -> None:
    """A spawn cancelled just as the zygote reports its child (a pool closing in the middle
    of a refill) kills the child and closes its pidfd.

    Both land in one turn of the event loop: the cancelled spawn wakes first, and the report,
    handled while the spawn unwinds, hands over a pidfd nobody takes. That race made the
    remote cleanup test fail now and then; here the report is held back and handled right
    after the cancel, so it happens on every run.
    """
    before = open_fds()
    server = ForkServer()
    await server.start()
    loop = asyncio.get_running_loop()
    assert server._sock is not None
    sock = server._sock
    loop.remove_reader(sock.fileno())  # hold the zygote's reports back
    spawning = asyncio.create_task(server.spawn(memory=64 * MiB, data_limit=None))
    await until(lambda: select.select([sock], [], [], 0)[0], "the zygote to report the child")
    spawning.cancel()
    server._on_readable()  # the report, handled before the cancelled spawn unwinds
    with pytest.raises(asyncio.CancelledError):
        await spawning
    await server.aclose()
    assert zombies() == []
    assert open_fds() == before


async def test_a_spawn_names_the_language_its_child_is_warmed_for() -> None:
    """A spawn says which language its child is made ready for; one that names none the
    sandbox knows is refused, naming what it takes, and the zygote serves on."""
    server = ForkServer()
    try:
        with pytest.raises(RunError, match="warm must be one of javascript, python"):
            await server.spawn(memory=64 * MiB, data_limit=None, warm="cobol")
        for warm in protocol.LANGUAGES:
            child = await server.spawn(memory=64 * MiB, data_limit=None, warm=warm)
            child.kill()
            await child.reap(grace=1.0)
        assert server.starts == 1
    finally:
        await server.aclose()
    assert zombies() == []
