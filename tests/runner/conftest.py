"""Fixtures for the runner tests, and the registry the conformance suite runs against.

Every ``ScriptRunner`` must pass tests/runner/conformance.py. To plug one in, add a factory
(a no-argument callable returning a runner, which the harness enters with ``async with`` on
its own event loop) to :data:`RUNNER_FACTORIES`; to run the crash tests against it too, add
a factory to :data:`STANDIN_FACTORIES` that takes the path of a ``python`` stand-in (an
executable that runs a misbehaving sandbox, see standin.py) and returns a runner whose
sandbox processes are started with it. Kinds in :data:`FAST_RUNNERS` also take the
1,000-step cleanup test; the others take a shorter one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from runner import FileReader, ProcessRunner, ScriptRunner, Step
from sandbox.protocol import Script

T = TypeVar("T")


def _process(mode: str) -> Callable[[], ScriptRunner]:
    return lambda: ProcessRunner(mode=mode)  # type: ignore[arg-type]


def _process_standin(mode: str) -> Callable[[str], ScriptRunner]:
    return lambda python: ProcessRunner(mode=mode, python=python)  # type: ignore[arg-type]


def _remote(python: str | None = None) -> ScriptRunner:
    # A RemoteRunner in front of a runner service on loopback over a pool-mode runner.
    from tests.runner.remote_support import LoopbackRemote

    if python is None:
        return LoopbackRemote(lambda: ProcessRunner(mode="pool"))
    return LoopbackRemote(lambda: ProcessRunner(mode="pool", python=python))


# kind -> a runner as a host would configure it.
RUNNER_FACTORIES: dict[str, Callable[[], ScriptRunner]] = {
    "exec": _process("exec"),
    "fork": _process("fork"),
    "pool": _process("pool"),
    "remote": _remote,
}

# kind -> a runner whose sandbox is the stand-in at the given path.
STANDIN_FACTORIES: dict[str, Callable[[str], ScriptRunner]] = {
    "exec": _process_standin("exec"),
    "fork": _process_standin("fork"),
    "pool": _process_standin("pool"),
    "remote": _remote,
}

# Kinds that keep a live step's process (exec mode replays every step).
LIVE_RUNNERS = {"fork", "pool", "remote"}

# Kinds whose steps are cheap enough for the 1,000-step cleanup test (exec mode costs about
# 300 ms a step here, so it takes a shorter run of the same test).
FAST_RUNNERS = {"fork", "pool", "remote"}


@dataclass
class Harness:
    """One runner on its own event loop, kept for a whole test module (to keep time down)."""

    kind: str
    runner: ScriptRunner
    loop: asyncio.Runner
    factory: Callable[[], ScriptRunner]

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run(coro)

    def step(
        self, script: Script, files: FileReader | None = None, *, tenant: str = "default"
    ) -> Step:
        return self.run(self.runner.run(script, files, tenant=tenant))

    @contextlib.asynccontextmanager
    async def fresh(self) -> AsyncIterator[ScriptRunner]:
        """A new runner of the same kind, closed at the end of the block."""
        runner = self.factory()
        async with runner:
            yield runner


async def _enter(factory: Callable[[], ScriptRunner]) -> ScriptRunner:
    runner = factory()
    await runner.__aenter__()
    return runner


@contextlib.contextmanager
def _harness(kind: str, factory: Callable[[], ScriptRunner]) -> Iterator[Harness]:
    with asyncio.Runner() as loop:
        runner = loop.run(_enter(factory))
        try:
            yield Harness(kind, runner, loop, factory)
        finally:
            loop.run(runner.__aexit__(None, None, None))


@pytest.fixture(scope="module", params=sorted(RUNNER_FACTORIES))
def runner(request: pytest.FixtureRequest) -> Iterator[Harness]:
    """Each registered runner kind in turn, one instance per module."""
    with _harness(request.param, RUNNER_FACTORIES[request.param]) as harness:
        yield harness


def make_standin_python(directory: Path) -> str:
    """Write an executable to pass as ``python`` into ``directory``: it runs the stand-in
    (standin.py) instead of the sandbox."""
    path = directory / "python"
    script = Path(__file__).with_name("standin.py")
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I "{script}" "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


@pytest.fixture(scope="session")
def standin_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An executable to pass as ``python``: it runs the stand-in instead of the sandbox."""
    return make_standin_python(tmp_path_factory.mktemp("standin"))


@pytest.fixture(scope="module", params=sorted(STANDIN_FACTORIES))
def standin(request: pytest.FixtureRequest, standin_python: str) -> Iterator[Harness]:
    """Each registered runner kind, running the misbehaving stand-in sandbox."""
    factory = STANDIN_FACTORIES[request.param]
    with _harness(request.param, lambda: factory(standin_python)) as harness:
        yield harness


def open_fds() -> dict[int, str]:
    """The fds this process has open, each with what it points to (so a failed comparison
    shows what leaked)."""
    fds = {}
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the fd listdir itself used, closed by now
            fds[int(name)] = os.readlink(f"/proc/self/fd/{name}")
    return fds
