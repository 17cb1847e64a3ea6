"""The engine's own time on one script: ``run_code``'s wall time less the time its steps
spent in the runner (the bench's ``floor``: QuickJS in this process), and the same in CPU
time. Written to run against other checkouts too (the engine before the shared store, say),
so it uses only what they share: run it from the checkout to measure, with that checkout's
Python, alternating checkouts for a comparison that means anything on a shared machine::

    cd /path/to/checkout && .venv/bin/python /path/to/this/bench/own_time.py sqlite seq_200 2

Arguments: the store (``memory`` or ``sqlite``), the script (``trivial``, ``promise_all``,
``seq_200``), and how many measured runs follow one warm-up run.
"""

from __future__ import annotations

import asyncio
import inspect
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, ".")  # the checkout being measured, not this file's

from bench._modes import make_mode
from bench._workloads import PROMISE_ALL, SEQUENTIAL, TRIVIAL
from engine import CodeMode, MemoryStore, SqliteStore, tool
from runner import ScriptRunner

SCRIPTS = {"trivial": TRIVIAL, "promise_all": PROMISE_ALL, "seq_200": SEQUENTIAL % 200}


class _Timed(ScriptRunner):
    """The floor runner, counting the wall and CPU time spent in it."""

    def __init__(self) -> None:
        self.mode = make_mode("floor", 1)
        self.wall = self.cpu = 0.0

    async def run(
        self, script: Any, files: Any = None, *, tenant: str = "default", live: bool = False
    ) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return await self.mode.step(script, tenant)
        finally:
            self.wall += time.perf_counter() - wall
            self.cpu += time.process_time() - cpu


@tool
def t(i: int) -> dict[str, int]:
    """Answer {"v": i}."""
    return {"v": i}


async def main(store_kind: str, name: str, runs: int) -> None:
    runner = _Timed()
    store = MemoryStore() if store_kind == "memory" else SqliteStore(tempfile.mkdtemp())
    options: dict[str, Any] = {}
    if "type_check" in inspect.signature(CodeMode.__init__).parameters:
        options["type_check"] = "off"
    engine = CodeMode([t], runner=runner, store=store, **options)
    own: list[float] = []
    own_cpu: list[float] = []
    for i in range(runs + 1):
        runner.wall = runner.cpu = 0.0
        wall, cpu = time.perf_counter(), time.process_time()
        result = await engine.run_code(SCRIPTS[name])
        if result.status != "finished":
            raise SystemExit(f"the script did not finish: {result.text}")
        if i:  # the first run warms up
            own.append((time.perf_counter() - wall - runner.wall) * 1000)
            own_cpu.append((time.process_time() - cpu - runner.cpu) * 1000)
    print(
        f"{store_kind} {name}: engine's own time {statistics.median(own):.1f} ms wall, "
        f"{statistics.median(own_cpu):.1f} ms CPU (median of {runs})"
    )
    if hasattr(engine, "aclose"):
        await engine.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
