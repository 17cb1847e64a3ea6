"""Where the host's code writes while a command runs it: the one mechanism the CLI's
commands (``engine.cli``) and ``codemode mcp serve`` (``engine.mcp._cli``) share."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TextIO


@contextlib.contextmanager
def output_aside() -> Iterator[TextIO]:
    """While it lasts, descriptor 1 is stderr's, so what the host's code writes to stdout
    goes to stderr: a print(), and a subprocess a tool runs (``os.system("echo x")``) or a C
    extension writing to descriptor 1, which a swap of Python's sys.stdout alone left among
    the command's output (``run --json``'s JSON lines, an MCP client's messages). Yields a
    stream on the stdout the process was given, for the command's own output; flushed, and
    descriptor 1 given back, as it ends."""
    sys.stdout.flush()
    kept = os.dup(1)
    os.dup2(2, 1)
    out = open(  # noqa: SIM115 - closed as the aside ends
        kept,
        "w",
        encoding=sys.stdout.encoding,
        errors=sys.stdout.errors,
        closefd=False,
    )
    try:
        yield out
        out.flush()  # before descriptor 1 is given back: the command's output in its order
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()  # what the host printed and Python holds, to stderr too
        with contextlib.suppress(OSError, ValueError):
            out.close()  # on a way out by an error: what the reader did not take is dropped
        os.dup2(kept, 1)
        os.close(kept)
