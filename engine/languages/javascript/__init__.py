"""JavaScript scripts, and TypeScript in them: the type check against the tools' declarations
before a script's first call. (Types are removed inside the sandbox: sandbox/typescript.py.)"""

from engine.languages.javascript._check import (
    SHOWN_PROBLEMS,
    Checked,
    CompilerMissing,
    TypeChecker,
    TypeProblem,
    check_declarations,
    find_compiler,
)

__all__ = [
    "SHOWN_PROBLEMS",
    "Checked",
    "CompilerMissing",
    "TypeChecker",
    "TypeProblem",
    "check_declarations",
    "find_compiler",
]
