"""Runners: what takes one step of a script and returns where it ended."""

from collections.abc import Sequence

from runner._base import (
    MAX_TENANT,
    TEXT_BOUNDS,
    FileMissing,
    FileReader,
    LiveRun,
    ProcessStats,
    RunError,
    ScriptRunner,
    Step,
    bounded,
)
from runner._conversation import Deadline, within
from runner._cpu import HOST_BUSY
from runner._live import (
    count_private,
    default_live_count,
    default_live_memory,
    keeps_live,
    takes_live,
)
from runner._process import ProcessRunner
from runner._remote import OPTIONS as REMOTE_OPTIONS
from runner._remote import RemoteRunner
from runner._service import RunnerService
from runner._slots import Slots, default_slot_count
from runner._tasks import cancel_and_wait, wait_ended
from runner._wire import parse_address, peer_text


def serve(argv: Sequence[str] | None = None) -> int:
    """``codemode runner serve [options]``: run a runner service until SIGTERM; the exit code.

    See ``runner.service_main`` (imported here only when called, so that
    ``python -m runner.service_main`` does not find itself already imported).
    """
    from runner.service_main import main

    return main(argv)


__all__ = [
    "HOST_BUSY",
    "MAX_TENANT",
    "REMOTE_OPTIONS",
    "TEXT_BOUNDS",
    "Deadline",
    "FileMissing",
    "FileReader",
    "LiveRun",
    "ProcessRunner",
    "ProcessStats",
    "RemoteRunner",
    "RunError",
    "RunnerService",
    "ScriptRunner",
    "Slots",
    "Step",
    "bounded",
    "cancel_and_wait",
    "count_private",
    "default_live_count",
    "default_live_memory",
    "default_slot_count",
    "keeps_live",
    "parse_address",
    "peer_text",
    "serve",
    "takes_live",
    "wait_ended",
    "within",
]
