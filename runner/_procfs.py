"""What the runner reads of its processes in ``/proc``, which no process can say for itself
untruthfully: the kernel's count of its CPU time and its memory.

A forked sandbox shares most of its pages with the fork server it came from (about 28 of its
31 MiB resident, measured on a trivial script's live process), so its resident size says little
of what it costs. What ending it gives back is its private memory (USS), the private lines of
``/proc/<pid>/smaps_rollup``. That file costs far more than ``status`` (the kernel walks every
page of the process to write it: 0.35 ms against 0.008 ms, on a trivial script's process, 2
vCPUs), so it is read only when a live budget needs the figure (:meth:`ProcFiles.private`).
psutil's ``memory_full_info`` reads the same file, parsing every line, and cost 0.38 to
0.48 ms; reading it here also keeps it bound to the process (below).
"""

from __future__ import annotations

import contextlib
import os


class ProcFiles:
    """A process's ``/proc/<pid>/schedstat``, ``status`` and ``smaps_rollup``, opened once and
    read again with ``pread`` when needed (opening them each time cost more than the reads). A
    file of ``/proc/<pid>`` stays bound to the process it was opened for: once that process is
    reaped, a read fails (``ESRCH``) even if its pid was given to another.

    Made by :meth:`open` while the process surely is the one meant (an unreaped child);
    closed with it. ``smaps_rollup`` of a sandbox (not dumpable) opens only for a runner
    with ``CAP_SYS_PTRACE`` (root); without it, :meth:`private` is ``None``.
    """

    def __init__(self, schedstat: int, status: int, smaps: int | None = None) -> None:
        self._schedstat: int | None = schedstat
        self._status: int | None = status
        self._smaps: int | None = smaps

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
        try:
            smaps: int | None = os.open(f"/proc/{pid}/smaps_rollup", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # not permitted (see above), or a kernel before 4.14
            smaps = None
        return cls(schedstat, status, smaps)

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

    def private(self) -> int | None:
        """The process's private memory in bytes (USS: its pages no other process maps,
        resident), what ending it gives back; ``None`` when it cannot be read."""
        if self._smaps is None:
            return None
        try:
            return _private_of(os.pread(self._smaps, 8192, 0))
        except OSError:
            return None

    def close(self) -> None:
        for fd in (self._schedstat, self._status, self._smaps):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._schedstat = self._status = self._smaps = None


def cpu_ms_of(pid: int) -> float | None:
    """The CPU process ``pid`` has used so far, read once (``None`` when it cannot be)."""
    files = ProcFiles.open(pid)
    if files is None:
        return None
    try:
        return files.cpu_ms()
    finally:
        files.close()


def _memory_of(text: bytes) -> tuple[int, int] | None:
    """``(VmRSS, VmHWM)`` in bytes from the text of a ``/proc/<pid>/status``."""
    # Found by their line's start, not by splitting every line: the file has about fifty,
    # read at each `ran`. (Its one line a process names, `Name:`, has its newlines escaped.)
    rss, peak = _kib(text, b"\nVmRSS:"), _kib(text, b"\nVmHWM:")
    if rss is None or peak is None:
        return None
    return rss * 1024, peak * 1024


def _private_of(text: bytes) -> int | None:
    """``Private_Clean + Private_Dirty + Private_Hugetlb`` in bytes from the text of a
    ``/proc/<pid>/smaps_rollup`` (``None`` when the first two are not there)."""
    clean, dirty = _kib(text, b"\nPrivate_Clean:"), _kib(text, b"\nPrivate_Dirty:")
    if clean is None or dirty is None:
        return None
    return (clean + dirty + (_kib(text, b"\nPrivate_Hugetlb:") or 0)) * 1024


def _kib(text: bytes, key: bytes) -> int | None:
    """The number after ``key`` (``"   1234 kB"``), or ``None`` when it is not there."""
    start = text.find(key)
    if start < 0:
        return None
    start += len(key)
    end = text.find(b"\n", start)
    try:
        return int(text[start : end if end >= 0 else len(text)].split()[0])
    except (ValueError, IndexError):
        return None
