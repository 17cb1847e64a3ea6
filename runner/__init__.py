"""Runners: what takes one step of a script and returns where it ended."""

from runner._base import FileMissing, FileReader, ProcessStats, RunError, ScriptRunner, Step
from runner._process import ProcessRunner

__all__ = [
    "FileMissing",
    "FileReader",
    "ProcessRunner",
    "ProcessStats",
    "RunError",
    "ScriptRunner",
    "Step",
]
