"""The session log survives the host: a script resumes in a new process, and no recorded
call runs again. Each test runs the host in subprocesses it kills."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from engine import CodeMode, ScriptRecord, SqliteStore, tool
from engine._drive import dead_local_owner, new_owner, pid_place
from engine.log import Lease
from tests._needs import require
from tests.engine.conftest import InProcessRunner
from tests.engine.host_processes import NOTE_SOURCE, ledger

ROOT = Path(__file__).resolve().parents[2]

TOOLS = (
    NOTE_SOURCE
    + '''
from engine import tool

@tool
def fetch(n: int) -> int:
    """Fetch a number."""
    _note(f"fetch {n}")
    return n * 10

@tool(needs_approval=True)
def pay(cents: int) -> str:
    """Pay, after a person approves."""
    _note(f"pay {cents}")
    return "paid"

@tool
def crash(n: int) -> int:
    """Take the host down in the middle of the call."""
    _note(f"crash {n}")
    os._exit(9)
'''
)

SCRIPT = """
const a = await tools.fetch({ n: 1 });
const b = await tools.fetch({ n: 2 });
const receipt = await tools.pay({ cents: a + b });
return { a, b, receipt };
"""

HOST = """
import asyncio, os, sys, json
sys.path.insert(0, {root!r})
from engine import CodeMode, RunResult
from engine._loading import load_tools
from tests.engine.conftest import InProcessRunner

async def main():
    tools, _ = load_tools({tools!r})
    lease_ms = int(os.environ.get("LEASE_MS", "30000"))
    engine = CodeMode(
        tools,
        runner=InProcessRunner(),
        data_dir={data!r},
        lease_ms=lease_ms,
        poll_interval=0.1,
        tool_threads=int(os.environ.get("TOOL_THREADS", "16")),
    )
    action = sys.argv[1]
    if action == "start":
        result = await engine.run_code(sys.stdin.read())
    elif action == "work":  # a worker, until the script ends
        stop = asyncio.Event()

        async def until_ended():
            while (record := await engine.store.get_script(sys.argv[2])).outcome is None:
                await asyncio.sleep(0.1)
            stop.set()
            return RunResult.from_dict(record.outcome)

        ended = asyncio.create_task(until_ended())
        await engine.work(stop=stop)
        result = await ended
    elif action == "key":  # a start by the model's tool-use id, as a chat loop makes it
        result = await engine.run_code(sys.stdin.read(), key=sys.argv[2])
    else:
        script_id, call_id = sys.argv[2], sys.argv[3]
        if call_id != "-":
            await engine.approve(script_id, call_id)
        result = await engine.resume(script_id)
    print(json.dumps(result.to_dict()), flush=True)
    # End the host the hard way: no cleanup, no close.
    os._exit(0)

asyncio.run(main())
"""


def _run_host(
    tmp_path: Path, *args: str, stdin: str = "", lease_ms: int = 30_000, threads: int = 16
) -> subprocess.CompletedProcess[str]:
    """One host process over the data directory in ``tmp_path``."""
    tools = tmp_path / "tools.py"
    tools.write_text(TOOLS)
    program = HOST.format(root=str(ROOT), tools=str(tools), data=str(tmp_path / "data"))
    return subprocess.run(
        [sys.executable, "-c", program, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "LEDGER": str(tmp_path / "ledger"),
            "LEASE_MS": str(lease_ms),
            "TOOL_THREADS": str(threads),
        },
        cwd=ROOT,
    )


def _host(tmp_path: Path, *args: str, stdin: str = "") -> dict:
    proc = _run_host(tmp_path, *args, stdin=stdin)
    assert proc.returncode == 0, proc.stderr
    return orjson.loads(proc.stdout.strip().splitlines()[-1])


def test_approval_from_a_new_process_finishes_without_rerunning(tmp_path: Path) -> None:
    """Start a script whose third call needs approval, end the host, approve from a new
    process: the script finishes, and calls 1 and 2 did not run again."""
    paused = _host(tmp_path, "start", stdin=SCRIPT)
    assert paused["status"] == "paused"
    assert ledger(tmp_path) == ["fetch 1", "fetch 2"]
    (waiting,) = paused["waiting"]
    assert waiting["name"] == "pay" and waiting["reason"] == "approval"

    done = _host(tmp_path, "resume", paused["script_id"], waiting["call_id"])
    assert done["status"] == "finished", done["text"]
    assert done["value"] == {"a": 10, "b": 20, "receipt": "paid"}
    assert ledger(tmp_path) == ["fetch 1", "fetch 2", "pay 30"]


def test_host_killed_mid_call_never_runs_that_call_twice(tmp_path: Path) -> None:
    """A host that dies while a call runs leaves a receipt; on resume that call is settled
    as interrupted (the script can handle it), and earlier calls are not run again."""
    script = """
    const a = await tools.fetch({ n: 1 });
    let note;
    try { await tools.crash({ n: 2 }) } catch (e) { note = e.message }
    return { a, note };
    """
    proc = _run_host(tmp_path, "start", stdin=script)
    assert proc.returncode == 9  # the tool took the host down
    assert ledger(tmp_path) == ["fetch 1", "crash 2"]
    (record,) = asyncio.run(_scripts(tmp_path / "data"))

    done = _host(tmp_path, "resume", record.id, "-")
    assert done["status"] == "finished", done["text"]
    assert done["value"]["a"] == 10
    assert "interrupted" in done["value"]["note"]
    assert ledger(tmp_path) == ["fetch 1", "crash 2"]


def test_calls_still_waiting_for_a_thread_when_the_host_died_run_on_resume(
    tmp_path: Path,
) -> None:
    """A host with one tool thread dies in the first of three parallel calls: the two that
    waited for the thread never began, so on resume they run (once), and only the call that
    was running is interrupted."""
    script = """
    const all = await Promise.allSettled(
      [tools.crash({ n: 1 }), tools.fetch({ n: 2 }), tools.fetch({ n: 3 })]
    );
    return all.map((r) => (r.status === "fulfilled" ? r.value : r.reason.message));
    """
    proc = _run_host(tmp_path, "start", stdin=script, threads=1)
    assert proc.returncode == 9, proc.stderr  # the tool took the host down
    assert ledger(tmp_path) == ["crash 1"]
    (record,) = asyncio.run(_scripts(tmp_path / "data"))

    done = _host(tmp_path, "resume", record.id, "-")
    assert done["status"] == "finished", done["text"]
    interrupted, second, third = done["value"]
    assert "interrupted" in interrupted and (second, third) == (20, 30)
    # The resuming host runs the two at once, in threads of its own: in either order.
    assert sorted(ledger(tmp_path)) == ["crash 1", "fetch 2", "fetch 3"]


def test_a_restarted_host_replaying_a_keyed_start_takes_its_script_over(tmp_path: Path) -> None:
    """A host that dies while it drives a keyed script; its successor on this machine gets
    the model's call again (same key) and goes on with the script at once, without waiting
    out the dead host's lease: the call that was running is settled as interrupted, the ones
    before it are not run again."""
    script = """
    const a = await tools.fetch({ n: 1 });
    let note;
    try { await tools.crash({ n: 2 }) } catch (e) { note = e.message }
    return { a, note };
    """
    proc = _run_host(tmp_path, "key", "toolu_7", stdin=script)
    assert proc.returncode == 9  # the tool took the host down, its lease still held
    done = _host(tmp_path, "key", "toolu_7", stdin=script)
    assert done["status"] == "finished", done["text"]
    assert done["value"]["a"] == 10 and "interrupted" in done["value"]["note"]
    assert ledger(tmp_path) == ["fetch 1", "crash 2"]


def test_a_worker_takes_over_at_once_from_a_host_that_died(tmp_path: Path) -> None:
    """A host dies while it drives a script, holding a lease longer than the test may wait:
    a worker on this machine takes the script over at once (as ``resume`` and a keyed start
    do) and finishes it, the call that was running settled as interrupted, none run twice."""
    script = """
    const a = await tools.fetch({ n: 1 });
    let note;
    try { await tools.crash({ n: 2 }) } catch (e) { note = e.message }
    return { a, note };
    """
    proc = _run_host(tmp_path, "start", stdin=script, lease_ms=3_600_000)
    assert proc.returncode == 9  # the tool took the host down, its hour-long lease held
    (record,) = asyncio.run(_scripts(tmp_path / "data"))
    assert record.status == "active" and record.lease is not None
    done = _host(tmp_path, "work", record.id)
    assert done["status"] == "finished", done["text"]
    assert done["value"]["a"] == 10 and "interrupted" in done["value"]["note"]
    assert ledger(tmp_path) == ["fetch 1", "crash 2"]


def test_a_host_that_exited_unreaped_is_dead() -> None:
    """A host process that exited but that its parent has not reaped yet (a zombie) still
    takes signals; its lease is a dead host's all the same."""
    store = SqliteStore.__new__(SqliteStore)  # only its `local` is read
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        while _state(child.pid) != "Z":
            time.sleep(0.01)
        owner = f"{socket.gethostname()}:{child.pid}:abcd1234@{pid_place(os.getpid())}"
        assert dead_local_owner(store, Lease("s", owner, 1, 0)) == owner
    finally:
        child.wait()
    alive = f"{socket.gethostname()}:{os.getppid()}:abcd1234@{pid_place(os.getpid())}"
    assert dead_local_owner(store, Lease("s", alive, 1, 0)) is None


def test_a_host_of_another_pid_namespace_is_never_taken_for_dead() -> None:
    """Two containers that share a log and a host name but not a PID namespace: a pid of the
    other's is not looked up in this one (where it may be no process, or another), so its
    lease is waited out; as is an owner named without its place. Run for real: a host in a
    PID namespace of its own (``unshare``, as root) names a place that is not this one."""
    store = SqliteStore.__new__(SqliteStore)  # only its `local` is read
    here = pid_place(os.getpid())
    assert here is not None and new_owner().endswith(f"@{here}")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid names no process here
    host = socket.gethostname()
    assert dead_local_owner(store, Lease("s", f"{host}:{gone.pid}:ab@{here}", 1, 0)) is not None
    for owner in (
        f"{host}:{gone.pid}:ab@{here.split('.')[0]}.1",  # another namespace, same boot
        f"{host}:{gone.pid}:ab@000000000000.{here.split('.')[1]}",  # another boot
        f"{host}:{gone.pid}:ab",  # no place
        # Edited by hand in the log: the process group, past any pid, digits of no ASCII.
        f"{host}:0:ab@{here}",
        f"{host}:{10**30}:ab@{here}",
        f"{host}:\u0663:ab@{here}",
    ):
        assert dead_local_owner(store, Lease("s", owner, 1, 0)) is None, owner
    # This host, alive and driving, seen from a host in a PID namespace of its own (where
    # this pid is no process): it is not taken for dead there.
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        require("root and unshare (util-linux): to make a PID namespace")
    mine = new_owner()
    code = (
        "import sys; from engine import SqliteStore; from engine.log import Lease\n"
        "from engine._drive import dead_local_owner, new_owner\n"
        "store = SqliteStore.__new__(SqliteStore)\n"
        "print(new_owner()); print(dead_local_owner(store, Lease('s', sys.argv[1], 1, 0)))"
    )
    proc = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", code, mine],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    theirs, verdict = proc.stdout.split()
    assert theirs.startswith(f"{host}:1:") and not theirs.endswith(f"@{here}"), theirs
    assert verdict == "None", f"a live host of another PID namespace was taken for dead: {mine}"


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 2]


async def _scripts(data: Path) -> list[ScriptRecord]:
    store = SqliteStore(data)
    try:
        return await store.scripts()
    finally:
        await store.aclose()


async def test_sqlite_log_is_the_whole_state(tmp_path: Path) -> None:
    """A second engine on the same data directory resumes a script the first one paused."""
    seen: list[int] = []

    @tool(needs_approval=True)
    def act(n: int) -> int:
        """Act."""
        seen.append(n)
        return n

    first = CodeMode([act], runner=InProcessRunner(), data_dir=tmp_path)
    paused = await first.run_code("return await tools.act({ n: 5 })")
    await first.aclose()
    second = CodeMode([act], runner=InProcessRunner(), data_dir=tmp_path)
    await second.approve(paused.script_id, paused.waiting[0]["call_id"])
    done = await second.resume(paused.script_id)
    await second.aclose()
    assert done.value == 5 and seen == [5]


async def test_an_unencodable_result_is_recorded_not_left_running(tmp_path: Path) -> None:
    """A handler that returns an integer past 64 bits: the call is settled failed in the
    log, so a new engine resuming the script sees that error, not an "interrupted" call."""
    ran: list[int] = []

    @tool
    def count() -> int:
        """Count."""
        ran.append(1)
        return 2**70

    code = "try { return await tools.count({}) } catch (e) { return e.message }"
    first = CodeMode([count], runner=InProcessRunner(), data_dir=tmp_path)
    result = await first.run_code(code)
    await first.aclose()
    assert result.status == "finished", result.text
    assert "returned a result JSON cannot carry" in result.value
    store = SqliteStore(tmp_path)
    [call] = await store.calls(result.script_id)
    await store.aclose()
    assert call.state == "failed" and call.error == result.value
    second = CodeMode([count], runner=InProcessRunner(), data_dir=tmp_path)
    again = await second.resume(result.script_id)
    await second.aclose()
    assert again.value == result.value and "interrupted" not in again.value
    assert ran == [1]


async def test_calls_that_end_together_are_written_together(tmp_path: Path) -> None:
    """A hundred calls that end at once cost a few writes of their endings, not a hundred
    (the drive's group commit): each ending waits the turns the others take to arrive."""
    writes: list[int] = []

    class Counting(SqliteStore):
        async def settle(self, lease: Lease, settlements: Any) -> bool:
            writes.append(len(settlements))
            return await super().settle(lease, settlements)

    @tool
    async def echo(i: int) -> int:
        """Echo."""
        return i

    store = Counting(tmp_path)
    engine = CodeMode([echo], runner=InProcessRunner(), store=store, type_check="off")
    result = await engine.run_code(
        "const rs = await Promise.all(Array.from({ length: 100 }, (_, i) => tools.echo({ i })));"
        "return rs.length"
    )
    await engine.aclose()
    await store.aclose()
    assert result.value == 100, result.text
    assert sum(writes) == 100 and len(writes) <= 3, writes
