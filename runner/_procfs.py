"""What the runner reads of its processes in ``/proc``, which no process can say for itself
untruthfully: the kernel's count of its CPU time and its memory."""

from __future__ import annotations

import contextlib
import os


class ProcFiles:
    """A process's ``/proc/<pid>/schedstat`` and ``status``, opened once and read again with
    ``pread`` at each ``ran`` (opening them each time cost more than the reads). A file of
    ``/proc/<pid>`` stays bound to the process it was opened for: once that process is
    reaped, a read fails (``ESRCH``) even if its pid was given to another.

    Made by :meth:`open` while the process surely is the one meant (an unreaped child);
    closed with it.
    """

    def __init__(self, schedstat: int, status: int) -> None:
        self._schedstat: int | None = schedstat
        self._status: int | None = status

    @classmethod
    def open(cls, pid: int) -> ProcFiles | None:
        """The files of process ``pid``, or ``None`` when they cannot be opened."""
        try:
            schedstat = os.open(f"/proc/{pid}/schedstat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            status = os.open(f"/proc/{pid}/status", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            os.close(schedstat)
            return None
        return cls(schedstat, status)

    def cpu_ms(self) -> float | None:
        """The CPU time the process has used (its one thread's time on a CPU, in
        nanoseconds in the file); ``None`` when it cannot be read."""
        if self._schedstat is None:
            return None
        try:
            return int(os.pread(self._schedstat, 256, 0).split()[0]) / 1e6
        except (OSError, ValueError, IndexError):
            return None

    def memory(self) -> tuple[int, int] | None:
        """``(resident, peak resident)`` bytes (``VmRSS``, ``VmHWM``); ``None`` when they
        cannot be read."""
        if self._status is None:
            return None
        try:
            return _memory_of(os.pread(self._status, 8192, 0))
        except OSError:
            return None

    def close(self) -> None:
        for fd in (self._schedstat, self._status):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._schedstat = self._status = None


def _memory_of(text: bytes) -> tuple[int, int] | None:
    """``(VmRSS, VmHWM)`` in bytes from the text of a ``/proc/<pid>/status``."""
    found: dict[bytes, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(b":")
        if key in (b"VmRSS", b"VmHWM"):
            with contextlib.suppress(ValueError, IndexError):
                found[key] = int(value.split()[0]) * 1024
    if b"VmRSS" not in found or b"VmHWM" not in found:
        return None
    return found[b"VmRSS"], found[b"VmHWM"]
