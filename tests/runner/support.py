"""Helpers for the process-runner tests: waiting on conditions, finding sandbox processes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import psutil

from sandbox.protocol import Clock, Limits, Script

# Generous: these wait for an event (a process appearing or going), and only fail a test
# that would otherwise hang; a fast machine never waits this long.
EVENT_TIMEOUT = 30.0


async def until(condition: Callable[[], object], what: str) -> None:
    """Wait (yielding to the event loop) until ``condition()`` holds."""
    end = time.monotonic() + EVENT_TIMEOUT
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


def wait_gone(pids: list[int], timeout: float = EVENT_TIMEOUT) -> list[int]:
    """Wait until none of ``pids`` runs (gone or a zombie not ours); return those left."""
    end = time.monotonic() + timeout
    while True:
        left = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    left.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.02)


def script(code: str, **limits: int) -> Script:
    return Script(
        id="t", code=code, tools=["t"], clock=Clock(now_ms=0, seed=1), limits=Limits(**limits)
    )


def children_of(pid: int | None) -> list[psutil.Process]:
    if pid is None:
        return []
    try:
        return psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []


def zombies() -> list[psutil.Process]:
    return [
        p for p in psutil.Process().children(recursive=True) if p.status() == psutil.STATUS_ZOMBIE
    ]


def limits_of(pid: int) -> dict[str, tuple[str, str]]:
    """``/proc/<pid>/limits`` as {name: (soft, hard)}; empty once the process is gone."""
    rows: dict[str, tuple[str, str]] = {}
    try:
        with open(f"/proc/{pid}/limits") as f:
            lines = f.readlines()[1:]
    except (FileNotFoundError, ProcessLookupError):
        return rows
    for line in lines:
        soft, hard = line[26:].split()[:2]
        rows[line[:26].strip()] = (soft, hard)
    return rows
