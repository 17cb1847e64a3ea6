"""A SQLite log on a full disk: opening it says the disk is full and what to do, as a store
that waits for room (:class:`StoreUnavailable`, not permanent: the CLI's exit code 75).

SQLite tells a full disk at an open in several ways, by how far the open got: "database or
disk is full", "disk I/O error" (the write-ahead log's shared memory cannot grow) at the
first transaction, where it was read as another process holding the lock, or at the new
log's COMMIT, which escaped as a bare ``sqlite3.OperationalError`` (a traceback from the
CLI). Each test fills a small tmpfs of a mount namespace of its own (``unshare``, as root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests._needs import require

# Run in the namespace: mount a tmpfs at the directory given (its mount flags and options
# given), then the test's body, which prints what each try raised with said().
_MOUNTED = r"""
import ctypes, os, sys
from engine import CodeModeError, StoreUnavailable

where, flags, options = sys.argv[1], int(sys.argv[2]), sys.argv[3]
libc = ctypes.CDLL(None, use_errno=True)
if libc.mount(b"none", where.encode(), b"tmpfs", flags, options.encode()) != 0:
    print("NO MOUNT", os.strerror(ctypes.get_errno()))
    sys.exit(0)

def said(opening):
    try:
        opening()
    except StoreUnavailable as e:
        print("StoreUnavailable", "permanent" if e.permanent else "transient", e)
    except CodeModeError as e:
        print(type(e).__name__, e)
    except Exception as e:
        print("ESCAPED", type(e).__name__, e)
    else:
        print("OPENED")
"""

# Optionally make a log there with room first and then fill the disk; open the log.
_OPEN = r"""
import asyncio, errno
from engine import SqliteStore

first = sys.argv[4]
log = os.path.join(where, "log")
if first == "made":
    async def make():
        await SqliteStore(log).aclose()
    asyncio.run(make())
    fill = os.open(os.path.join(where, "fill"), os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fill, b"x" * 4096)
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
    os.close(fill)
for read_only in (False, True) if first == "made" else (False,):
    said(lambda: SqliteStore(log, read_only=read_only))
"""


def _on_tmpfs(tmp_path: Path, body: str, options: str, *args: str, flags: int = 0) -> list[str]:
    """The lines ``body`` printed, run in a mount namespace of its own on a tmpfs mounted
    with ``options`` (and ``flags``)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        require("root and unshare (util-linux): to mount a small tmpfs in a namespace")
    where = tmp_path / "disk"
    where.mkdir()
    argv = [str(where), str(flags), options, *args]
    done = subprocess.run(
        ["unshare", "--mount", sys.executable, "-c", _MOUNTED + body, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[3],
    )
    assert done.returncode == 0, done.stderr
    if done.stdout.startswith("NO MOUNT"):
        require(f"a tmpfs mount in a mount namespace ({done.stdout.strip()})")
    return done.stdout.splitlines()


def _open_on_full_disk(tmp_path: Path, size: str, first: str) -> list[str]:
    return _on_tmpfs(tmp_path, _OPEN, f"size={size}", first)


@pytest.mark.parametrize(
    "size",
    [
        "4k",  # no room for the file's first page: "database or disk is full"
        "16k",  # the WAL's shared memory: "disk I/O error" at BEGIN, read as a lock held
        "64k",  # the new log's COMMIT: a bare sqlite3.OperationalError
    ],
)
def test_a_new_log_on_a_full_disk_says_so(tmp_path: Path, size: str) -> None:
    said = _open_on_full_disk(tmp_path, size, "new")
    assert len(said) == 1, said
    assert said[0].startswith("StoreUnavailable transient cannot open the session log "), said
    assert "the disk it is on is full" in said[0], said
    assert "free space on it, then run the command again" in said[0], said


def test_a_log_whose_disk_filled_says_so_to_a_writer_and_a_reader(tmp_path: Path) -> None:
    """A log made with room, its disk filled since: ``run`` and ``scripts`` both said "disk
    I/O error" (a ConfigError, exit code 2) and no more."""
    said = _open_on_full_disk(tmp_path, "1m", "made")
    assert len(said) == 2, said
    for line in said:
        assert line.startswith("StoreUnavailable transient "), said
        assert "the disk it is on is full" in line, said


def test_a_new_data_dir_on_a_full_disk_says_so(tmp_path: Path) -> None:
    """A data_dir to be made on a full disk was a ConfigError (exit code 2) telling to give
    a directory this process can create; it is a full disk, as under an existing log (75)."""
    body = (
        "from engine._config import data_directory\n"
        "os.mkdir(os.path.join(where, 'taken'))  # the last inode\n"
        "said(lambda: data_directory(os.path.join(where, 'new', 'log')))\n"
    )
    (line,) = _on_tmpfs(tmp_path, body, "size=64k,nr_inodes=2")
    assert line.startswith("StoreUnavailable transient data_dir "), line
    assert "the disk it is on is full" in line, line


def test_a_log_on_a_read_only_disk_is_not_said_full(tmp_path: Path) -> None:
    """A read-only mount reports no room free: a log there was said to be on a full disk,
    to be run again once there is room (exit code 75, which a supervisor retries for ever);
    it is the error SQLite gives, a ConfigError (exit code 2)."""
    body = "from engine import SqliteStore\nsaid(lambda: SqliteStore(where))\n"
    (line,) = _on_tmpfs(tmp_path, body, "size=512k", flags=1)  # 1: MS_RDONLY
    assert line.startswith("ConfigError cannot open the session log "), line
    assert "full" not in line, line
