"""Runners: what takes one step of a script and returns where it ended."""

from runner._base import FileMissing, FileReader, ProcessStats, RunError, ScriptRunner, Step
from runner._process import ProcessRunner
from runner._remote import RemoteRunner
from runner._service import RunnerService
from runner._slots import Slots, default_slot_count
from runner.service_main import serve

__all__ = [
    "FileMissing",
    "FileReader",
    "ProcessRunner",
    "ProcessStats",
    "RemoteRunner",
    "RunError",
    "RunnerService",
    "ScriptRunner",
    "Slots",
    "Step",
    "default_slot_count",
    "serve",
]
