"""The engine against the fastest peer: whole scripts, interleaved in one run.

Four ways to run the same script, each answering one tool ``t(i) -> {"v": i}``:

- ``live``: ``CodeMode(live=True).run_code`` (type check off) on its SQLite log with a
  warm-pool :class:`runner.ProcessRunner`: a step's process stays alive while its calls run
  and goes on with their results (each result logged first). ``t`` is declared as nothing
  more than a tool, so it may have effects: each call's receipt is synced to disk before it
  runs;
- ``live_ro``: the same, with ``t`` declared ``read_only`` (which it is): a call that may
  simply run again waits for no disk, so the difference from ``live`` is what the synced
  receipt costs;
- ``replay``: ``CodeMode.run_code`` (type check off) on its SQLite log with a warm-pool
  :class:`runner.ProcessRunner`, re-running the script from its log at every step (the spec's
  behaviour);
- ``monty``: pydantic-monty's warm worker pool (``AsyncMonty``; each script checks a worker
  out and ``feed_run``s a Python version of the script whose ``t`` is an external function).
  Monty runs scripts in worker subprocesses of its own ``monty`` binary, with no OS
  confinement and no durable log of calls.

Each repetition runs every peer once in turn, so all see the same load: only ratios taken
inside one run mean anything on a shared machine.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._modes import ProcessMode
from bench._workloads import PROMISE_ALL, SEQUENTIAL, TRIVIAL

PEERS = ("live", "live_ro", "replay", "monty")

# Monty's Python for each of the JS scripts: the same calls, the same value.
MONTY_TRIVIAL = "1"
MONTY_SEQUENTIAL = """\
s = 0
for i in range(%d):
    r = await t(i)
    s += r['v']
s"""
# Monty expresses parallel external calls with asyncio.gather, as CPython does.
MONTY_GATHER = """\
import asyncio
rs = await asyncio.gather(*[t(i) for i in range(100)])
sum(r['v'] for r in rs)"""

# Cloudflare codemode 0.5.6 on a local workerd: one RPC per call (issue 14's measurement).
# A fixed reference figure, not measured here.
CLOUDFLARE_PER_CALL_MS = 0.05

# A process that answers each line with the line: see PipeFloor.
_ECHO = """\
import os, sys
while line := sys.stdin.buffer.readline():
    os.write(1, line)
"""


class PipeFloor:
    """A process that only echoes lines. One round trip to it over pipes, from this event
    loop, is the least a call to another process costs on this machine: monty's worker and
    our live process each pay it once a call, on top of their own work. Measured interleaved
    with the peers (:meth:`measure` after each repetition), so it sees their load."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self._process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _ECHO,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        await self.measure(20)  # its first lines wake it up, not measured
        self.times.clear()

    async def measure(self, count: int) -> None:
        process = self._process
        assert process is not None and process.stdin is not None and process.stdout is not None
        for _ in range(count):
            start = time.perf_counter()
            process.stdin.write(b"x\n")
            if await process.stdout.readline() != b"x\n":
                raise AssertionError("the echo process did not echo")
            self.times.append(time.perf_counter() - start)

    def p50_ms(self) -> float | None:
        return statistics.median(self.times) * 1000 if self.times else None

    async def aclose(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()
        try:
            async with asyncio.timeout(5):
                await process.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()


@dataclass(frozen=True)
class PeerScript:
    key: str
    title: str
    js: str
    python: str
    calls: int
    value: int
    reps: int  # repetitions per count unit (the long scripts run fewer times)


def _sequential(n: int, reps: int) -> PeerScript:
    return PeerScript(
        f"seq_{n}",
        f"{n} sequential calls",
        SEQUENTIAL % n,
        MONTY_SEQUENTIAL % n,
        n,
        n * (n - 1) // 2,
        reps,
    )


SCRIPTS = (
    PeerScript("trivial", "trivial script", TRIVIAL, MONTY_TRIVIAL, 0, 1, 10),
    _sequential(1, 10),
    _sequential(10, 4),
    _sequential(50, 2),
    _sequential(200, 1),
    PeerScript(
        "promise_all",
        "Promise.all of 100 calls",
        PROMISE_ALL,
        MONTY_GATHER,
        100,
        sum(range(100)),
        4,
    ),
)


class Peer(abc.ABC):
    name: str

    @abc.abstractmethod
    async def run(self, script: PeerScript) -> Any:
        """Run ``script`` to its end and return its value."""

    async def settle(self) -> None:  # noqa: B027 - optional
        """Wait until the peer is as ready for a script as it gets (see ``compare``)."""

    @abc.abstractmethod
    async def aclose(self) -> None: ...


class EnginePeer(Peer):
    """``CodeMode.run_code`` on a SQLite log in ``directory``, with its own warm pool."""

    def __init__(
        self, name: str, directory: Path, slots: int, *, live: bool, read_only: bool = False
    ) -> None:
        from engine import CodeMode, SqliteStore, tool

        @tool(read_only=read_only)
        async def t(i: int) -> dict[str, int]:
            """Answer {"v": i}."""
            return {"v": i}

        self.name = name
        self.mode = ProcessMode("pool", slots)
        self.engine = CodeMode(
            [t],
            runner=self.mode.runner,
            store=SqliteStore(directory / name),
            type_check="off",
            live=live,
        )

    async def settle(self) -> None:
        await self.mode.settle()

    async def run(self, script: PeerScript) -> Any:
        result = await self.engine.run_code(script.js)
        if result.status != "finished":
            raise AssertionError(f"{self.name}: {script.key} did not finish: {result.text}")
        return result.value

    def notes(self) -> dict[str, int]:
        """What happened to the engine's live runs (a live peer that replays a lot is not
        measuring live steps)."""
        live = self.engine._live
        return {
            "kept": live.kept,
            "resumed": live.resumed,
            "evicted": live.evicted,
            "expired": live.expired,
            "mismatched": live.mismatched,
        }

    async def aclose(self) -> None:
        await self.engine.aclose()


class MontyPeer(Peer):
    """pydantic-monty's warm pool: a worker checked out per script, ``t`` an external
    (async) function, as the engine's tool is."""

    name = "monty"

    def __init__(self, slots: int) -> None:
        from pydantic_monty import AsyncMonty

        self.pool = AsyncMonty(min_processes=slots, max_processes=slots)
        self._entered = False

    @staticmethod
    async def t(i: int) -> dict[str, int]:
        return {"v": i}

    async def start(self) -> None:
        await self.pool.__aenter__()
        self._entered = True

    async def run(self, script: PeerScript) -> Any:
        async with self.pool.checkout() as session:
            return await session.feed_run(script.python, external_lookup={"t": self.t})

    async def aclose(self) -> None:
        if self._entered:
            self._entered = False
            await self.pool.__aexit__(None, None, None)


async def make_peers(names: tuple[str, ...], directory: Path, slots: int) -> dict[str, Peer]:
    peers: dict[str, Peer] = {}
    try:
        for name in names:
            if name == "monty":
                monty = MontyPeer(slots)
                await monty.start()
                peers[name] = monty
            elif name in ("live", "live_ro", "replay"):
                peers[name] = EnginePeer(
                    name, directory, slots, live=name != "replay", read_only=name == "live_ro"
                )
            else:
                raise ValueError(f"no peer {name!r}; the peers are {', '.join(PEERS)}")
    except BaseException:
        for peer in peers.values():
            await peer.aclose()
        raise
    return peers


@dataclass
class Comparison:
    """Each script's whole-run times (seconds) on each peer, taken interleaved."""

    times: dict[str, dict[str, list[float]]]  # script key -> peer -> times
    peers: tuple[str, ...]
    live_runs: dict[str, int] | None = None  # the live engines' counts, when they ran
    round_trip_ms: float | None = None  # PipeFloor's p50, measured beside them

    def p50_ms(self, script: str, peer: str) -> float | None:
        values = self.times.get(script, {}).get(peer)
        return statistics.median(values) * 1000 if values else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "peers": list(self.peers),
            "p50_ms": {
                s.key: {p: self.p50_ms(s.key, p) for p in self.peers}
                for s in SCRIPTS
                if s.key in self.times
            },
            "live_runs": self.live_runs,
            "round_trip_p50_ms": self.round_trip_ms,
            "runs": {
                s.key: {p: len(self.times[s.key].get(p, [])) for p in self.peers}
                for s in SCRIPTS
                if s.key in self.times
            },
        }


async def compare(
    count: int, *, peers: tuple[str, ...] = PEERS, slots: int = 2, only: set[str] | None = None
) -> Comparison:
    """Run every script ``count * script.reps`` times (at least once) on every peer, one
    peer after the other in each repetition; check every value."""
    times: dict[str, dict[str, list[float]]] = {}
    floor = PipeFloor()
    with tempfile.TemporaryDirectory(prefix="codemode-bench-peers-") as directory:
        running = await make_peers(peers, Path(directory), slots)
        try:
            await floor.start()
            for peer in running.values():  # a first run of each, not measured
                await peer.run(SCRIPTS[0])
                await peer.run(SCRIPTS[1])
            for script in SCRIPTS:
                if only and script.key not in only:
                    continue
                into = times.setdefault(script.key, {})
                for _ in range(max(1, count * script.reps)):
                    for name, peer in running.items():
                        # Every engine's warm pool full again first: a pool refills in the
                        # background after each run (a fork, and the child touching its
                        # pages), and on two CPUs that work landed in the next peer's time,
                        # at random, whichever peer that was.
                        for other in running.values():
                            await other.settle()
                        t0 = time.perf_counter()
                        value = await peer.run(script)
                        elapsed = time.perf_counter() - t0
                        if value != script.value:
                            raise AssertionError(
                                f"{name}: {script.key} returned {value!r}, not {script.value!r}"
                            )
                        into.setdefault(name, []).append(elapsed)
                    await floor.measure(20)
            notes: dict[str, int] | None = None  # summed over the live engines
            for name in ("live", "live_ro"):
                engine = running.get(name)
                if isinstance(engine, EnginePeer):
                    counts = engine.notes()
                    notes = {k: v + (notes or {}).get(k, 0) for k, v in counts.items()}
        finally:
            await floor.aclose()
            for peer in running.values():
                await peer.aclose()
    return Comparison(times, peers, notes, floor.p50_ms())
