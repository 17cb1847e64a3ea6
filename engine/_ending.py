"""Ending: how the engine decided that a script ended.

The runner reports what the process did (a :class:`runner.Step`); the engine decides what
that means for the script. A script ends on its last step's report, checked again here, or
on a limit only the engine can see (budgets over all of a script's runs, the calls in its
log). Either way it is one ``Ending``, which becomes the host's :class:`RunResult`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from runner import Step
from sandbox.protocol import ScriptError, limit_message


@dataclass(frozen=True)
class Ending:
    """A script's end: finished with a value, or failed with an error (and maybe a limit).

    ``value`` is set only when ``returned``; ``value_text`` replaces it when the value was
    too large to send whole. ``printed`` is what the last run printed; ``shown`` the ids of
    the files it showed (checked against the script's files before they are read).
    """

    status: Literal["finished", "failed"]
    value: Any = None
    value_text: str | None = None
    returned: bool = False
    error: ScriptError | None = None
    limit: str | None = None
    printed: str = ""
    shown: list[str] = field(default_factory=list)

    @classmethod
    def failure(cls, name: str, message: str, *, limit: str | None = None) -> Ending:
        return cls("failed", error=ScriptError(name=name, message=message), limit=limit)

    @classmethod
    def limit_met(cls, name: str, detail: str, remedy: str | None = None) -> Ending:
        """A limit the engine enforces was met: ``detail`` says how, ``remedy`` (else the
        limit's own) what the script can do."""
        return cls.failure("LimitError", limit_message(name, detail, remedy), limit=name)

    @classmethod
    def of_step(cls, step: Step) -> Ending:
        """The ending a finished or failed step reports, its strings within their bounds.

        A value that is not JSON data (nested past what an encoder takes) fails the script
        with a protocol error instead of reaching the log.
        """
        step = step.bounded()
        if step.outcome == "finished":
            if step.returned and step.value_text is None:
                try:
                    orjson.dumps(step.value)
                except (TypeError, orjson.JSONEncodeError) as e:
                    return cls.failure(
                        "ProtocolError",
                        f"the runner reported a returned value that is not JSON data ({e})",
                    )
            return cls(
                "finished",
                value=step.value,
                value_text=step.value_text,
                returned=step.returned,
                printed=step.printed,
                shown=list(step.shown),
            )
        error = step.error or ScriptError(name="Error", message="the run failed")
        if not error.name:  # a name is what the model reads first: never show none
            error = error.model_copy(update={"name": "Error"})
        return cls(
            "failed",
            error=error,
            limit=step.limit.name if step.limit else None,
            printed=step.printed,
            shown=list(step.shown),
        )
