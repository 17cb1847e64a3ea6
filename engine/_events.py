"""Events: what a script does as it runs, told to the host as it happens.

``CodeMode(on_event=fn)`` calls ``fn(event)`` (or each of a list of functions) on the event
loop, in order, for every script this engine drives or answers:

==================  ===========================================================
``started``         a new script was recorded (``run_code``)
``resumed``         this host took up a script from its log (``resume``, ``work``)
``step``            a run of the script ended; ``stats``: ``outcome``, ``calls`` (the new
                    calls it asked for), ``wait_ms``, ``run_ms``, ``cpu_ms``,
                    ``heap_bytes``, ``results_bytes``, ``check_ms``, ``live`` (1 when a live
                    run went on instead of a replay); ``limit`` if one was met
``call.proposed``   the script asked for a call (``call_id``, ``tool``, ``stats``:
                    ``argument_bytes``)
``call.waiting``    the call waits for a person or the client (``reason``)
``call.approved``   the worker, or a person, let the call run
``call.running``    the call's receipt is written and it runs now
``call.done``       it returned (``stats``: ``result_bytes``)
``call.failed``     it failed, was refused or was interrupted (``error``)
``paused``          the script waits (``waiting``: each ``{call_id, tool, reason}``)
``ended``           the script finished or failed (``status``, ``steps``, ``limit``,
                    ``error``: the error's name)
``left``            this host stopped driving the script before it ended or paused:
                    another host took it over (``status``: ``elsewhere``), or the drive
                    raised or was cancelled (``error``, as the host's exception says,
                    ``CancelledError``; the script waits in the log for a ``resume``)
==================  ===========================================================

A listener must be quick (it runs on the event loop, between the engine's own steps) and
must not raise: one that does is logged (each failure once, by the line that raised it) and
the script goes on; listeners that take over ``SLOW_LISTENERS`` seconds on an event are
logged once. ``Event.to_dict()`` is the event as JSON data (what ``codemode run
--events FILE`` writes, one line each).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

logger = logging.getLogger("codemode")

EventKind = Literal[
    "started",
    "resumed",
    "step",
    "call.proposed",
    "call.waiting",
    "call.approved",
    "call.running",
    "call.done",
    "call.failed",
    "paused",
    "ended",
    "left",
]


@dataclass(frozen=True)
class Event:
    """One thing a script did (see the module docstring for each ``kind``'s fields)."""

    kind: EventKind
    script_id: str
    time: float  # seconds since the epoch
    tenant: str | None = None
    step: int | None = None
    call_id: str | None = None
    tool: str | None = None
    reason: str | None = None
    status: str | None = None
    steps: int | None = None
    limit: str | None = None
    error: str | None = None
    stats: dict[str, Any] | None = None
    waiting: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The event as JSON data, without the fields its kind leaves empty."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: v for k, v in data.items() if v is not None}


Listener = Callable[[Event], None]

# Seconds the listeners may take on one event before the log says they hold the loop.
SLOW_LISTENERS = 0.2


def listeners_option(on_event: Listener | Sequence[Listener] | None) -> tuple[Listener, ...]:
    """``CodeMode(on_event=...)`` as a tuple of listeners, checked when the host gives it."""
    from engine._errors import ConfigError

    if on_event is None:
        return ()
    if not callable(on_event) and (
        # Text and a mapping are iterable, but no list of functions: 'print' was refused
        # as "not 'p'", {"log": fn} as "not 'log'".
        not isinstance(on_event, Iterable) or isinstance(on_event, str | bytes | Mapping)
    ):
        raise ConfigError(
            f"on_event takes a function of one Event, or a list, not {on_event!r:.80}"
        )
    found = (on_event,) if callable(on_event) else tuple(on_event)
    for fn in found:
        if not callable(fn):
            raise ConfigError(f"on_event takes functions of one Event, not {fn!r:.80}")
        if isinstance(fn, type):
            # Taken, each event made one (Tracing(event)) and failed, each a logged traceback.
            raise ConfigError(
                f"on_event listener {fn.__name__} is a class; give an instance of it, "
                f"{fn.__name__}(...), or a function of one Event"
            )
        # A function, or an object whose __call__ is one.
        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):
            # Called and never awaited, it would do nothing, with only a RuntimeWarning.
            raise ConfigError(
                f"on_event listener {fn!r:.80} is an async function; a listener is called on "
                "the event loop and must be quick: give a plain function (which may start a "
                "task of its own, or put the event on a queue)"
            )
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):  # a builtin without one: it is called and seen then
            continue
        try:
            signature.bind(None)
        except TypeError:
            # Taken, it failed on every event of every script, each a logged traceback.
            raise ConfigError(
                f"on_event listener {fn!r:.80} does not take one argument (the Event), as "
                f"its signature {signature} says; give a function of one Event"
            ) from None
    return found


class Emitting:
    """What the engine's parts call to tell the listeners: ``self._emit(kind, ...)``."""

    _listeners: tuple[Listener, ...] = ()
    # The listeners' failures logged so far (made at the first): see _first_time.
    _listener_failures: set[tuple[Any, ...]] | None = None

    def _emit(self, kind: EventKind, script_id: str, **fields: Any) -> None:
        if not self._listeners:
            return
        event = Event(kind, script_id, time.time(), **fields)
        # Emitted while the engine handles an exception (a tool's that failed its call): a
        # listener's own error is not "during handling of" that one in the host's log.
        handling = sys.exc_info()[1]
        for listener in self._listeners:
            try:
                returned = listener(event)
            # The host's listener must not stop the script. A CancelledError raised in it (it
            # read a cancelled task's result) is its own: a cancellation of the drive comes at
            # an await, never inside a plain call; it ended the run_code.
            except (Exception, asyncio.CancelledError) as e:
                if handling is not None and e.__context__ is handling:
                    e.__context__ = None
                if self._first_time(id(listener), type(e), *_raised_at(e)):
                    logger.exception(
                        "an on_event listener failed on %s of script %s (logged once: the same "
                        "failure again is not)",
                        kind,
                        script_id,
                    )
                continue
            # An async listener the option check missed (a lambda that calls an async
            # function, asyncio.Queue.put).
            if inspect.isawaitable(returned):
                if inspect.iscoroutine(returned):
                    returned.close()
                if self._first_time(id(listener), "awaitable"):
                    logger.error(
                        "an on_event listener returned an awaitable on %s of script %s, which "
                        "nothing awaits: give a plain function (logged once)",
                        kind,
                        script_id,
                    )
        # One clock read an event: a listener that holds the loop stalls every script of the
        # engine, its calls and its leases, with nothing in the log to say why.
        took = time.time() - event.time
        if took > SLOW_LISTENERS and self._first_time("slow"):
            logger.warning(
                "the on_event listeners took %.1f s on %s of script %s, holding the event loop "
                "(every script of this engine waits meanwhile): a listener must be quick; put "
                "the event on a queue or hand it to a thread (logged once)",
                took,
                kind,
                script_id,
            )

    def _first_time(self, *key: Any) -> bool:
        """Whether the listeners went wrong so (``key``: a listener's and how) for the first
        time: one that fails at each event (a bug on one line) logged a traceback an event,
        ten a step."""
        if self._listener_failures is None:
            self._listener_failures = set()
        if key in self._listener_failures:
            return False
        self._listener_failures.add(key)
        return True

    def _emit_call(self, kind: EventKind, tenant: str | None, entry: Any, **fields: Any) -> None:
        """A call's event; ``entry``: its ``engine.log.CallEntry``."""
        if self._listeners:
            self._emit(
                kind,
                entry.script_id,
                tenant=tenant,
                call_id=entry.call_id,
                tool=entry.name,
                **fields,
            )


def _raised_at(error: BaseException) -> tuple[str, int]:
    """The file and line that raised ``error`` (its traceback's innermost frame)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return (tb.tb_frame.f_code.co_filename, tb.tb_lineno) if tb is not None else ("", 0)
