"""How a command stops at a signal, when its cleanup does not end: the one rule the CLI's
commands (``engine.cli``) and ``codemode mcp serve`` (``engine.mcp._cli``) share."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

import psutil

# Exit codes after SIGINT (Ctrl-C) and SIGTERM, as a shell reports a process they ended.
INTERRUPTED, TERMINATED = 128 + signal.SIGINT, 128 + signal.SIGTERM
# After Ctrl-C or SIGTERM a command ends what it started (MCP servers, live processes, its
# leases): if that has not ended this many seconds later, or at a second signal, it stops at
# once.
INTERRUPT_GRACE = 10.0


def give_up(code: int) -> None:
    """End every process this one started (its MCP servers, its sandboxes) and exit with
    ``code``, without the cleanup that did not finish: the session log loses nothing written."""
    why = "terminated" if code == TERMINATED else "interrupted"
    print(f"codemode: {why}; stopping without finishing the cleanup", file=sys.stderr)
    end_children()
    os._exit(code)


def end_children() -> None:
    """Kill every process this one started, and theirs (an MCP server in a session of its
    own included)."""
    with contextlib.suppress(Exception):
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()


class Stopped(BaseException):
    """SIGTERM or Ctrl-C came while the command blocked on what it was given (see
    :func:`stoppable_inputs`); ``code`` is the exit code it means. A BaseException: the host's
    code it interrupts (a tools file being imported) must not take it for its own error."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@contextlib.contextmanager
def stoppable_inputs() -> Iterator[None]:
    """While the command reads what it was given (a script on a pipe that stays open, a
    FIFO, a tools file whose import waits), SIGTERM and Ctrl-C raise :class:`Stopped` at
    once. The event loop's own handlers run between its callbacks, so they waited for the
    read, which could be for ever. Only around code that awaits nothing: no work of the
    loop's is in flight for the exception to cut."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread
        return

    def stop(signum: int, frame: Any) -> None:
        raise Stopped(INTERRUPTED if signum == signal.SIGINT else TERMINATED)

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in saved:
        signal.signal(s, stop)
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)
