"""The pages a forked child's step writes, copied before the step (Linux 5.14 and later).

A child of the fork server shares the server's memory copy-on-write: the first write to each
page copies it, one page fault each, and on a virtual machine a fault costs around 10 us (the
guest's fault and, for a page the host has not backed yet, the host's). ``_touch_pages`` goes
through what a run does first while the child waits in the pool, yet a trivial step still
wrote about 52 pages it had not: the Python objects a run allocates land on other pages, and
the run's QuickJS context is not the one the touch ran on. Copying every page of the heap
instead took a trivial step 12% sooner but gave each child 20 MiB of its own.

So the fork server learns those pages: a probe child runs a script of ours as a pool child
would (``sandbox.__main__.probe_pages``) and reports which of its pages became its own during
the run (``/proc/self/pagemap``: present and mapped by this process alone), at the server's
start and once more after its first children (``sandbox.zygote._Zygote.relearn``). Each
child then copies just those with ``MADV_POPULATE_WRITE`` while it waits: one call per span,
no fault per page, not a byte changed. Every child has the fork server's layout, so the same
addresses hold the same objects. Where the kernel or ``/proc`` cannot, nothing is copied ahead
and a step faults as before.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from collections.abc import Iterable

PAGE = os.sysconf("SC_PAGE_SIZE")
_MADV_POPULATE_WRITE = 23  # Linux 5.14
_PRESENT = 1 << 63
_EXCLUSIVE = 1 << 56  # Linux 4.2: the page is mapped by this process alone
# Failures that say the kernel cannot (an older kernel, a filter), not that a span is gone.
_CANNOT = frozenset({errno.EINVAL, errno.ENOSYS, errno.EPERM})

_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.madvise.restype = ctypes.c_int

Span = tuple[int, int]  # (first byte, bytes), page-aligned


def writable() -> list[Span]:
    """This process's private writable mappings but its stack; ``[]`` if ``/proc`` cannot
    say."""
    spans: list[Span] = []
    try:
        with open("/proc/self/maps", "rb") as maps:
            for line in maps:
                fields = line.split()
                if len(fields) < 5 or fields[1][:2] != b"rw" or fields[1][3:4] != b"p":
                    continue
                if len(fields) > 5 and fields[5].startswith(b"[stack"):
                    continue
                start, end = (int(x, 16) for x in fields[0].split(b"-"))
                spans.append((start, end - start))
    except (OSError, ValueError):
        return []
    return spans


def own(spans: Iterable[Span]) -> set[int]:
    """The pages (their addresses) of ``spans`` that are present and mapped by this process
    alone: written since the fork, or new; empty if ``/proc/self/pagemap`` cannot say."""
    found: set[int] = set()
    try:
        with open("/proc/self/pagemap", "rb", buffering=0) as pagemap:
            for start, size in spans:
                pagemap.seek(start // PAGE * 8)
                data = pagemap.read(size // PAGE * 8)
                for i, (entry,) in enumerate(struct.iter_unpack("<Q", data)):
                    if entry & _PRESENT and entry & _EXCLUSIVE:
                        found.add(start + i * PAGE)
    except (OSError, ValueError):
        return set()
    return found


def spans_of(pages: Iterable[int], within: Iterable[Span]) -> list[Span]:
    """``pages`` (addresses) as runs of neighbours, only those inside ``within``."""
    bounds = sorted(within)
    inside: list[int] = []
    for page in sorted(pages):
        if any(start <= page < start + size for start, size in bounds):
            inside.append(page)
    runs: list[Span] = []
    for page in inside:
        if runs and runs[-1][0] + runs[-1][1] == page:
            runs[-1] = (runs[-1][0], runs[-1][1] + PAGE)
        else:
            runs.append((page, PAGE))
    return runs


def populate(spans: Iterable[Span]) -> int:
    """Copy the pages of ``spans`` into this process now (``MADV_POPULATE_WRITE``), as a
    write would but without changing them; returns the bytes copied. A span no longer mapped
    is skipped; a kernel that cannot stops it."""
    done = 0
    for start, size in spans:
        if _libc.madvise(start, size, _MADV_POPULATE_WRITE) == 0:
            done += size
        elif ctypes.get_errno() in _CANNOT:
            break
    return done


def pack(pages: Iterable[int]) -> bytes:
    """Page addresses as the probe reports them: 8 bytes each, little-endian."""
    return b"".join(struct.pack("<Q", page) for page in sorted(pages))


def unpack(data: bytes) -> list[int]:
    """The addresses :func:`pack` wrote (a cut-off last one dropped)."""
    return [page for (page,) in struct.iter_unpack("<Q", data[: len(data) // 8 * 8])]
