"""A live process whose runner and fork server both die at once (a host's machine killing
its processes, an OOM kill of the group) ends with them: it is stopped while it waits for
results, so it read no end of its input and stayed, stopped, for good. Needs Linux,
libseccomp and root or user namespaces, as every ProcessRunner test does."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil

HOST = textwrap.dedent(
    """
    import asyncio, sys
    from runner import ProcessRunner
    from sandbox.protocol import LIVE_VERSION, Clock, Script

    async def main():
        runner = ProcessRunner(slots=1)
        script = Script(id="orphan", code="await tools.t({}); return 1", tools=["t"],
                        clock=Clock(now_ms=0, seed=1), version=LIVE_VERSION)
        step = await runner.run(script, live=True)
        assert step.live is not None, step
        [live] = list(runner._live)
        print(live.child.pid, runner.server.popen.pid, flush=True)
        await asyncio.sleep(120)

    asyncio.run(main())
    """
)


def test_a_live_process_ends_with_its_runner_and_fork_server() -> None:
    child = 0
    host = subprocess.Popen(
        [sys.executable, "-c", HOST],
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    try:
        assert host.stdout is not None
        child, zygote = (int(n) for n in host.stdout.readline().split())
        stopped = time.monotonic() + 10  # the runner stops it a moment after its report
        while psutil.Process(child).status() != psutil.STATUS_STOPPED:
            assert time.monotonic() < stopped, "the live process was never stopped"
            time.sleep(0.01)
        os.kill(host.pid, signal.SIGKILL)
        os.kill(zygote, signal.SIGKILL)
        host.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if psutil.Process(child).status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"the live process {child} outlived its runner and fork server")
    finally:
        host.kill()
        host.wait(10)
        if child:  # failed: not left behind, stopped
            with contextlib.suppress(psutil.Error):
                psutil.Process(child).kill()
