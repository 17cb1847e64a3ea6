"""OpenTelemetry spans for code mode (the ``otel`` extra: ``pip install codemode[otel]``).

``CodeMode(on_event=Tracing())`` makes, from the engine's events:

- a ``codemode.script`` span for each drive of a script (from ``run_code`` or ``resume`` until
  it ends or pauses; a script resumed later in another process gets a span there), a child of
  the span current when the drive began; its ``codemode.status`` is finished, failed or
  paused (or ``elsewhere``/``left`` when the drive stopped before that: another host took
  the script over, or the drive raised), and a script that met a limit, or a drive that
  raised, has an error status naming it;
- a ``codemode.step`` span per step, with the step's stats as attributes (``codemode.cpu_ms``,
  ``codemode.heap_bytes``, ...) and the limit met as an error status;
- a ``codemode.call`` span per call that ran, from its receipt to its result
  (``codemode.tool``, ``codemode.call_id``, ``codemode.result_bytes``), an error status when
  it failed. What happened to a call before it ran (proposed, waiting, approved, refused) is
  an event on the script's span.

Spans use the global tracer provider unless one is given.
"""

from __future__ import annotations

from typing import Any

try:
    from opentelemetry import trace
    from opentelemetry.trace import Span, Status, StatusCode
except ImportError as e:  # the extra is not installed: say which one installs it
    raise ImportError(
        f"engine.adapters.otel needs OpenTelemetry ({e}): pip install 'codemode[otel]'"
    ) from None

from engine._errors import ConfigError
from engine._events import Event


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


class Tracing:
    """An ``on_event`` listener that turns the engine's events into spans."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        """Spans from ``tracer_provider`` (an OpenTelemetry ``TracerProvider``), or from the
        global one when it is None."""
        if tracer_provider is not None and not callable(
            getattr(tracer_provider, "get_tracer", None)
        ):
            raise ConfigError(
                f"tracer_provider is {tracer_provider!r:.80}; give an OpenTelemetry "
                "TracerProvider (opentelemetry.sdk.trace.TracerProvider), or leave it out "
                "for the global one"
            )
        self._tracer = trace.get_tracer("codemode", tracer_provider=tracer_provider)
        self._scripts: dict[str, Span] = {}
        self._calls: dict[tuple[str, str], Span] = {}

    def __call__(self, event: Event) -> None:
        kind, script_id = event.kind, event.script_id
        if kind in ("started", "resumed"):
            old = self._scripts.pop(script_id, None)
            if old is not None:  # a drive that left without an end (its host lost the lease)
                old.end(_ns(event.time))
            span = self._tracer.start_span(
                "codemode.script",
                start_time=_ns(event.time),
                attributes=_attributes(event, "script_id", "tenant"),
            )
            span.set_attribute("codemode.resumed", kind == "resumed")
            self._scripts[script_id] = span
            return
        script = self._scripts.get(script_id)
        if kind == "step":
            self._step(event, script)
        elif kind == "call.running":
            self._calls[(script_id, event.call_id or "")] = self._tracer.start_span(
                "codemode.call",
                context=trace.set_span_in_context(script) if script else None,
                start_time=_ns(event.time),
                attributes=_attributes(event, "script_id", "call_id", "tool"),
            )
        elif kind in ("call.done", "call.failed") and (script_id, event.call_id) in self._calls:
            span = self._calls.pop((script_id, event.call_id or ""))
            if event.stats:
                span.set_attributes(_attributes(event, *event.stats))
            if kind == "call.failed":
                span.set_status(Status(StatusCode.ERROR, event.error))
            span.end(_ns(event.time))
        elif kind.startswith("call.") and script is not None:
            span_event = _attributes(event, "call_id", "tool", "reason", "error")
            script.add_event(kind, span_event, timestamp=_ns(event.time))
        elif kind == "left" and script is not None:
            del self._scripts[script_id]
            self._end_calls(script_id, event.time)
            script.set_attribute("codemode.status", event.status or "left")
            if event.error:
                script.set_status(Status(StatusCode.ERROR, event.error))
            script.end(_ns(event.time))
        elif kind in ("paused", "ended") and script is not None:
            del self._scripts[script_id]
            self._end_calls(script_id, event.time)
            status = event.status or "paused"
            script.set_attribute("codemode.status", status)
            script.set_attributes(_attributes(event, "steps", "limit", "error"))
            if kind == "paused":
                script.set_attribute("codemode.waiting", len(event.waiting or []))
            elif event.limit:
                script.set_status(Status(StatusCode.ERROR, f"limit met: {event.limit}"))
            elif status == "failed":
                script.set_status(Status(StatusCode.ERROR, event.error or "failed"))
            else:
                script.set_status(Status(StatusCode.OK))
            script.end(_ns(event.time))

    def _end_calls(self, script_id: str, time: float) -> None:
        """End the spans of the script's calls that never reported an end (the engine closed,
        or its store failed, while they ran): with their drive, as errors, rather than open
        for the life of the process."""
        for key in [k for k in self._calls if k[0] == script_id]:
            span = self._calls.pop(key)
            span.set_status(Status(StatusCode.ERROR, "the drive left while the call ran"))
            span.end(_ns(time))

    def _step(self, event: Event, script: Span | None) -> None:
        stats = event.stats or {}
        took = (stats.get("wait_ms", 0) + stats.get("run_ms", 0)) / 1000
        span = self._tracer.start_span(
            "codemode.step",
            context=trace.set_span_in_context(script) if script else None,
            start_time=_ns(event.time - took),
            attributes=_attributes(event, "script_id", "step", "limit", *stats),
        )
        if event.limit:
            span.set_status(Status(StatusCode.ERROR, f"limit met: {event.limit}"))
        span.end(_ns(event.time))


def _attributes(event: Event, *names: str) -> dict[str, Any]:
    """``codemode.<name>`` for each of ``names`` the event has, from its fields or its stats."""
    stats = event.stats or {}
    found: dict[str, Any] = {}
    for name in names:
        value = stats[name] if name in stats else getattr(event, name, None)
        if value is not None:
            found[f"codemode.{name}"] = value
    return found


__all__ = ["Tracing"]
