"""``ProcFiles``: a process's /proc files, read again and again, and never another's."""

from __future__ import annotations

import subprocess
import sys

from runner._procfs import ProcFiles, _memory_of

BUSY = "import sys\nx = bytearray(32 << 20)\nn = 0\nwhile n < 3_000_000: n += 1\nsys.stdin.read()"


def test_reads_the_cpu_and_memory_of_its_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", BUSY], stdin=subprocess.PIPE)
    files = ProcFiles.open(child.pid)
    assert files is not None
    try:
        first = files.cpu_ms()
        assert first is not None and first >= 0
        memory = files.memory()
        assert memory is not None
        resident, peak = memory
        assert 0 < resident <= peak
        # Read again: the figures move with the process, from the same open files.
        later = files.cpu_ms()
        assert later is not None and later >= first
    finally:
        child.communicate(b"")
        files.close()


def test_a_reaped_process_reads_as_unknown() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    files = ProcFiles.open(child.pid)
    assert files is not None
    child.wait()  # reaped: its pid may go to another process, its files answer nothing
    assert files.cpu_ms() is None
    assert files.memory() is None
    files.close()
    files.close()  # twice is harmless
    assert files.cpu_ms() is None


def test_no_such_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert ProcFiles.open(child.pid) is None


def test_the_memory_lines_are_found_where_they_start() -> None:
    status = (
        b"Name:\tVmRSS: 1 kB\nUmask:\t0022\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\n"
        b"RssAnon:\t 512 kB\n"
    )
    assert _memory_of(status) == (1024 * 1024, 2048 * 1024)
    assert _memory_of(b"Name:\tx\nVmHWM:\t 8 kB\nVmRSS:\t 4 kB") == (4096, 8192)  # last line
    assert _memory_of(b"Name:\tx\nVmRSS:\t 4 kB\n") is None  # no peak
    assert _memory_of(b"Name:\tx\nVmHWM:\t kB\nVmRSS:\t 4 kB\n") is None  # no number
