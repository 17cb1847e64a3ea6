"""Runners: what takes one step of a script and returns where it ended."""

from runner._base import FileMissing, FileReader, ProcessStats, RunError, ScriptRunner, Step

__all__ = [
    "FileMissing",
    "FileReader",
    "ProcessStats",
    "RunError",
    "ScriptRunner",
    "Step",
]
