"""The engine's exceptions, one family per cause.

A script that fails is not an exception: it is a result with status ``failed``. These are
for the host's mistakes and for states the host must handle.
"""

from __future__ import annotations


class CodeModeError(Exception):
    """Base of every error the engine raises to its host."""


class ConfigError(CodeModeError):
    """A config file, a limit or an option is wrong; the message names it and the fix."""


class ScriptNotFound(CodeModeError):
    """No script with that id is in the session log."""


class CallNotWaiting(CodeModeError):
    """An approval or a client result names a call that is not waiting for one."""


class StepUnavailable(CodeModeError):
    """No runner took the step before its queue timeout; the script can be resumed later."""


class ToolsMissing(CodeModeError):
    """A script calls tools this host does not have; it is left as it was, to be resumed on a
    host that has them."""


class StoreUnavailable(CodeModeError):
    """The session log did not answer (a database down or overloaded). Nothing is lost: what
    was written stays written, and the script resumes from the log once the store is back."""
