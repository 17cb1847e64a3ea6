"""The modes the benchmark compares, behind one small interface.

- ``pool``, ``fork``, ``exec``: :class:`runner.ProcessRunner` in that mode (confined).
- ``node``: a ``node`` process per step running the script with ``node:vm`` (what many
  hosts do; unconfined), started like an exec-mode sandbox (empty environment, own pipes).
- ``floor``: ``sandbox.runtime.run_in_process``, a QuickJS context in this process with no
  isolation at all: the least a step can cost with this JS engine.

Every mode answers ``step(script, tenant) -> Step`` and holds a :class:`runner.Slots` of the
same size, so concurrent workloads are capped and their fairness measured the same way
(the floor runs one step at a time: it blocks the event loop while it runs).
"""

from __future__ import annotations

import abc
import asyncio
import shutil
import time
from pathlib import Path

import orjson

from runner import ProcessRunner, ProcessStats, Slots, Step
from runner import _conversation as conv
from runner._process import spawn
from sandbox.protocol import Ran, Script
from sandbox.runtime import run_in_process

NODE_HARNESS = Path(__file__).with_name("node_vm_runner.js")
MODES = ("pool", "fork", "exec", "node", "floor")
# How long a reference step may take before the bench gives up on it.
STEP_TIMEOUT = 120.0
# How long a comparison waits for a warm pool to be full again before its next timed run.
SETTLE_TIMEOUT = 2.0


class Mode(abc.ABC):
    name: str
    slots: Slots

    @abc.abstractmethod
    async def step(self, script: Script, tenant: str = "default") -> Step: ...

    async def settle(self, timeout: float = SETTLE_TIMEOUT) -> None:  # noqa: B027 - optional
        """Wait until the mode is as ready for a step as it gets (a warm pool full), at
        most ``timeout`` seconds."""

    async def aclose(self) -> None:  # noqa: B027 - optional
        pass


class ProcessMode(Mode):
    def __init__(self, name: str, slots: int) -> None:
        self.name = name
        self.runner = ProcessRunner(mode=name, slots=slots)  # type: ignore[arg-type]
        self.slots = self.runner.slots

    async def step(self, script: Script, tenant: str = "default") -> Step:
        return await self.runner.run(script, tenant=tenant)

    async def settle(self, timeout: float = SETTLE_TIMEOUT) -> None:
        pool = self.runner.pool
        deadline = time.monotonic() + timeout
        # The last steps' processes are ended once the runner is quiet (runner/_quiet.py):
        # their teardown belongs to no later timed run.
        while self.runner.ending and time.monotonic() < deadline:
            await asyncio.sleep(0.002)
        if pool is None:
            return
        pool.start()
        # The pool refills in the background after each step; a step that came before it
        # was full forked its child on demand (several ms), at random.
        while len(pool.idle) < pool.target and time.monotonic() < deadline:
            await asyncio.sleep(0.002)

    async def aclose(self) -> None:
        await self.runner.aclose()


class NodeMode(Mode):
    """One ``node`` process per step, reaped with ``wait4`` for its CPU and peak memory."""

    name = "node"

    def __init__(self, slots: int, node: str) -> None:
        self.node = node
        self.slots = Slots(slots)

    async def step(self, script: Script, tenant: str = "default") -> Step:
        async with self.slots.hold(tenant):
            child = await spawn([self.node, str(NODE_HARNESS)], conv.ran_bound(script))
            try:
                body = {
                    "code": script.code,
                    "records": [r.model_dump(exclude_unset=True) for r in script.records],
                    "clock": script.clock.model_dump(),
                }
                await child.write(orjson.dumps(body))
                child.writer.close()  # the harness runs the script at the end of stdin
                line = await child.reader.line(
                    conv.ran_bound(script), conv.Deadline.seconds(STEP_TIMEOUT)
                )
                await child.reap(grace=5.0)
            finally:
                child.kill()
                await child.reap(grace=0)
            if line is None:
                raise RuntimeError(f"node wrote nothing: {bytes(child.stderr[-500:])!r}")
            return Step.from_ran(Ran.model_validate(orjson.loads(line)), child.stats())


class FloorMode(Mode):
    """In-process QuickJS: no process, no isolation. Its "peak memory" is the JS heap."""

    name = "floor"

    def __init__(self) -> None:
        self.slots = Slots(1)

    async def step(self, script: Script, tenant: str = "default") -> Step:
        async with self.slots.hold(tenant):
            ran = run_in_process(script)
        return Step.from_ran(ran, ProcessStats(max_rss_bytes=ran.stats.heap_bytes))


def find_node() -> str | None:
    for candidate in (shutil.which("node"), "/usr/bin/node"):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def make_mode(name: str, slots: int) -> Mode:
    if name in ("pool", "fork", "exec"):
        return ProcessMode(name, slots)
    if name == "node":
        node = find_node()
        if node is None:
            raise RuntimeError("node is not installed: skip the node reference with --modes")
        return NodeMode(slots, node)
    if name == "floor":
        return FloorMode()
    raise ValueError(f"no benchmark mode {name!r}; the modes are {', '.join(MODES)}")
