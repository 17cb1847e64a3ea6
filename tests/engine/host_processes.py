"""What the tests that run hosts as processes share: reading a host's result, the ledger its
tools write their effects to, and waiting for a condition another process makes true."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from engine import RunResult


def host_result(proc: subprocess.Popen[str]) -> RunResult:
    """The result a host process printed last (as JSON); the process killed, not left
    running, if it does not end within two minutes."""
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode == 0, err
    return RunResult.from_dict(orjson.loads(out.strip().splitlines()[-1]))


# The tools' side of the ledger, for the tools files these tests write: ``_note(text)``
# appends one short line per effect and syncs it, so a host killed after it returned ran the
# effect and one killed before it did not. Each host finds the file in ``$LEDGER``.
NOTE_SOURCE = """
import os

LEDGER = os.environ["LEDGER"]

def _note(text):
    fd = os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (text + "\\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
"""


def ledger(tmp_path: Path) -> list[str]:
    """The lines the tools wrote to ``tmp_path/ledger``, one per effect."""
    path = tmp_path / "ledger"
    return path.read_text().splitlines() if path.exists() else []


def wait_for(predicate: Callable[[], bool], what: str) -> None:
    """Wait until ``predicate()`` holds, failing after a minute, naming ``what``."""
    deadline = time.monotonic() + 60
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)
