"""JavaScript scripts, and TypeScript in them: the tools' TypeScript declarations, the
``run_code`` description, and the type check against the declarations before a script's
first call. (Types are removed inside the sandbox: sandbox/typescript.py.)"""

from engine.languages._check import SHOWN_PROBLEMS, Checked, CompilerMissing, TypeProblem
from engine.languages.javascript._check import TypeChecker, check_declarations, find_compiler
from engine.languages.javascript._declarations import JAVASCRIPT, JavaScriptDialect

__all__ = [
    "JAVASCRIPT",
    "SHOWN_PROBLEMS",
    "Checked",
    "CompilerMissing",
    "JavaScriptDialect",
    "TypeChecker",
    "TypeProblem",
    "check_declarations",
    "find_compiler",
]
