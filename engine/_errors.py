"""The engine's exceptions: one family, every one a :class:`CodeModeError`.

A script that fails is not an exception: it is a result with status ``failed``. These are
for the host's mistakes and for states the host must handle. Errors from the layers below
(a runner's ``ValueError`` for a bad option, an ``OSError`` for a data directory that is a
file) are translated into this family once, where the engine meets them (config loading,
:func:`engine.build_runner`, :class:`engine.CodeMode`), so a host catches one base class.
"""

from __future__ import annotations

from runner import bounded


class CodeModeError(Exception):
    """Base of every error the engine raises to its host."""


class ConfigError(CodeModeError):
    """A config file, a limit or an option is wrong; the message names it and the fix."""


class ScriptNotFound(CodeModeError):
    """No script with that id is in the session log."""

    @classmethod
    def of(cls, script_id: object) -> ScriptNotFound:
        """The error for ``script_id``, which came from outside: named within a bound."""
        return cls(f"no script {_quoted(script_id)} in the session log")


class CallNotWaiting(CodeModeError):
    """An approval or a client result names a call that is not waiting for one."""

    @classmethod
    def no_call(cls, script_id: str, call_id: object) -> CallNotWaiting:
        """The error for a ``call_id`` from outside that names no call of the script."""
        return cls(f"script {script_id} has no call {_quoted(call_id)}")


class StepUnavailable(CodeModeError):
    """No runner took the step before its queue timeout; the script can be resumed later.
    ``permanent``: no runner ever can as things are (a runner refused the step for good: its
    message says what to fix first)."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


class ToolDefinitionError(CodeModeError):
    """A tool the host declared wrongly: a bad schema, name, handler or flag.

    Raised when the tool is built, so the mistake shows when the host starts, never to the
    model. The message names the tool, the problem and the fix.
    """


class ToolCallError(CodeModeError):
    """A call that failed: bad arguments, a handler that raised or timed out, a bad result.

    The script sees an ``Error`` with this message, and can catch it. ``tool`` is the name the
    script called.
    """

    def __init__(self, message: str, *, tool: str | None = None) -> None:
        # A handler's own raise may give any value (ToolCallError(404), a dict): its text is
        # the message. Kept as given, an int failed the call in len() with a TypeError of
        # the engine's, and a dict ended run_code with one.
        text = "" if message is None else str(message)
        super().__init__(text)
        self.message = text
        self.tool = tool


class CallAbandoned(CodeModeError):
    """The engine closed (``aclose``) while one of a script's calls ran: the drive ends, and
    the call is left in the log as running, for the next host that resumes the script to
    settle (as after a crash)."""


class ToolsMissing(CodeModeError):
    """A script calls tools this host does not have; it is left as it was, to be resumed on a
    host that has them."""


class FilesMissing(CodeModeError):
    """The file store no longer has the bytes of files a script was started with; it is
    left as it was (no call run), to be resumed once they are back."""


class StoreUnavailable(CodeModeError):
    """The session log did not answer (a database down or overloaded). Nothing is lost: what
    was written stays written, and the script resumes from the log once the store is back.
    ``permanent``: it will not answer as things are (its file is damaged: the message says
    what to do first)."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


def _quoted(value: object) -> str:
    """An id a host passed on from a client or a model, which may be anything: named within
    the bound for names (the middle cut out), not a megabyte of it."""
    return bounded(repr(value), "name")
