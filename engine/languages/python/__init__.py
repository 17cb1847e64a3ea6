"""Python scripts: the stubs that declare the tools to the model, the ``run_code``
description, and the type check against the stubs before a script's first call (with
``ty``). The script runs in the sandbox's Python runtime."""

from engine.languages.python._check import PythonTypeChecker, find_checker
from engine.languages.python._stubs import PYTHON, PythonDialect, check_stubs

__all__ = ["PYTHON", "PythonDialect", "PythonTypeChecker", "check_stubs", "find_checker"]
