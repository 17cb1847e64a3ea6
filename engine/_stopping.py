"""How a command stops at a signal, when its cleanup does not end: the one rule the CLI's
commands (``engine.cli``) and ``codemode mcp serve`` (``engine.mcp._cli``) share."""

from __future__ import annotations

import contextlib
import os
import signal
import sys

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
