"""What ``codemode run`` and ``resume`` show while a script runs: a live line on a terminal,
and the events as JSON lines for a file (``--events``)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import IO

import orjson

from engine._events import Event
from runner import cancel_and_wait


class ProgressLine:
    """One line on ``stream`` (a terminal), rewritten as the script goes: its steps, the
    calls it made and how many run now, and the time since it started. ``run()`` redraws it
    every ``interval`` seconds so the time moves while a step or a call takes long."""

    # How many times any live line was drawn or cleared in this process: a writer of other
    # lines on the same terminal tells by it whether its own part line was drawn over.
    drawn = 0

    def __init__(self, stream: IO[str], *, interval: float = 0.25) -> None:
        self.stream = stream
        self.interval = interval
        self.started = time.monotonic()
        self.steps = 0
        self.calls = 0
        # By call id: a call refused, or failed before its thread began, was never running,
        # and one approved after it waited waits no more.
        self.running: set[str | None] = set()
        self.waiting: set[str | None] = set()
        self.shown = False

    def __call__(self, event: Event) -> None:
        if event.kind == "step":
            self.steps = event.step or self.steps
        elif event.kind == "call.proposed":
            self.calls += 1
        elif event.kind == "call.waiting":
            self.waiting.add(event.call_id)
        elif event.kind.startswith("call."):
            self.waiting.discard(event.call_id)
            if event.kind == "call.running":
                self.running.add(event.call_id)
            else:
                self.running.discard(event.call_id)
        self.draw()

    def text(self) -> str:
        elapsed = time.monotonic() - self.started
        calls = f"{self.calls} call{'s' if self.calls != 1 else ''}"
        if self.running:
            calls += f" ({len(self.running)} running)"
        if self.waiting:
            calls += f", {len(self.waiting)} waiting"
        steps = f"{self.steps} step{'s' if self.steps != 1 else ''}"
        return f"codemode: {steps}, {calls}, {elapsed:.1f} s"

    @staticmethod
    def clearing() -> str:
        """The escape that clears the live line, for a writer of another line onto the same
        terminal (a warning, the script's id): counted in :attr:`drawn`, since it clears a
        tool's part line there too."""
        ProgressLine.drawn += 1
        return "\r\x1b[K"

    def draw(self) -> None:
        self.stream.write(self.clearing() + self.text())
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write(self.clearing())
            self.stream.flush()

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[ProgressLine]:
        """Redraw the line until the block ends, then clear it."""

        async def tick() -> None:
            while True:
                self.draw()
                await asyncio.sleep(self.interval)

        task = asyncio.create_task(tick())
        try:
            yield self
        finally:
            await cancel_and_wait(task)
            self.clear()


class EventLines:
    """Each event as one JSON line on ``stream``, flushed, so a reader sees it at once. A
    write that fails (a full disk) stops the lines, keeping the error in ``failed`` for the
    command to report once, rather than one traceback an event; a reader that left (a pipe
    closed: ``head -1``, as it meant to) stops them, and the command goes on."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.failed: OSError | None = None
        self.left = False

    def __call__(self, event: Event) -> None:
        if self.failed is not None or self.left:
            return
        try:
            self.stream.write(orjson.dumps(event.to_dict()) + b"\n")
            self.stream.flush()
        except BrokenPipeError:
            # Raised, it never reached the command: each event logged its traceback.
            self.left = True
        except OSError as e:
            self.failed = e
