"""The pages a fork server's child copies ahead of its step (sandbox.pages), and how the fork
server learns them from a probe child (sandbox.zygote._learn_pages). Linux with /proc; no
root needed."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from typing import NoReturn

import orjson
import psutil
import pytest

from sandbox import pages, zygote

PAGE = pages.PAGE


def in_child(body: Callable[[], bytes]) -> bytes:
    """``body()``'s answer, computed in a forked child (which only makes syscalls)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write, body())
        finally:
            os._exit(0)
    os.close(write)
    answer = b""
    while chunk := os.read(read, 65536):
        answer += chunk
    os.close(read)
    os.waitpid(pid, 0)
    return answer


def buffer_pages(count: int) -> tuple[mmap.mmap, int]:
    """An anonymous private mapping of ``count`` pages, each written (present), and its
    address."""
    area = mmap.mmap(-1, count * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for i in range(count):
        area[i * PAGE] = i + 1
    address = ctypes.addressof(ctypes.c_char.from_buffer(area))
    return area, address


def test_a_page_written_after_the_fork_is_the_childs_own_and_one_only_read_is_not() -> None:
    area, address = buffer_pages(4)

    def body() -> bytes:
        area[0] = 99
        _ = area[PAGE]
        own = pages.own(pages.writable())
        return bytes([address in own, address + PAGE in own])

    assert in_child(body) == b"\x01\x00"
    assert area[0] == 1, "the parent's page is its own still"


def test_populate_makes_pages_the_childs_own_without_changing_a_byte() -> None:
    area, address = buffer_pages(6)
    spans = pages.spans_of([address + i * PAGE for i in (1, 2, 4)], pages.writable())
    assert spans == [(address + PAGE, 2 * PAGE), (address + 4 * PAGE, PAGE)]

    def body() -> bytes:
        done = pages.populate(spans)
        own = pages.own(pages.writable())
        flags = [address + i * PAGE in own for i in range(6)]
        unchanged = all(area[i * PAGE] == i + 1 for i in range(6))
        return bytes([done == 3 * PAGE, *flags, unchanged])

    assert in_child(body) == bytes([1, 0, 1, 1, 0, 1, 0, 1])


def test_populate_skips_a_span_no_longer_mapped_and_goes_on() -> None:
    gone, gone_address = buffer_pages(2)
    gone.close()  # unmapped: madvise says ENOMEM
    area, address = buffer_pages(1)
    assert pages.populate([(gone_address, 2 * PAGE), (address, PAGE)]) == PAGE
    assert area[0] == 1


def test_a_kernel_without_populate_stops_it_at_the_first_span(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[int] = []

    class _NoPopulate:  # Linux before 5.14: madvise knows no MADV_POPULATE_WRITE
        @staticmethod
        def madvise(start: int, size: int, advice: int) -> int:
            asked.append(start)
            ctypes.set_errno(errno.EINVAL)
            return -1

    monkeypatch.setattr(pages, "_libc", _NoPopulate)
    assert pages.populate([(PAGE, PAGE), (4 * PAGE, PAGE)]) == 0
    assert asked == [PAGE], "one refusal says the kernel cannot: no more asking"


def test_spans_of_joins_neighbours_and_drops_what_lies_outside() -> None:
    within = [(10 * PAGE, 4 * PAGE), (20 * PAGE, PAGE)]
    found = [13 * PAGE, 11 * PAGE, 12 * PAGE, 14 * PAGE, 20 * PAGE, 9 * PAGE, 30 * PAGE]
    assert pages.spans_of(found, within) == [(11 * PAGE, 3 * PAGE), (20 * PAGE, PAGE)]
    assert pages.spans_of([], within) == []


def test_pack_and_unpack_round_trip_and_a_cut_off_address_is_dropped() -> None:
    addresses = [3 * PAGE, PAGE, 2**47]
    data = pages.pack(addresses)
    assert pages.unpack(data) == sorted(addresses)
    assert pages.unpack(data + b"\x01\x02") == sorted(addresses)
    assert pages.unpack(b"") == []


# ---- the fork server's probe ----


def reporting(data: bytes, code: int = 0) -> Callable[[int, str], NoReturn]:
    def probe(report: int, language: str) -> NoReturn:
        os.write(report, data)
        os._exit(code)

    return probe


def test_the_probes_report_is_kept_to_the_servers_own_mappings() -> None:
    _mapped, address = buffer_pages(3)  # kept: the address stays mapped
    outside = 2**46 + 5 * PAGE  # no mapping there
    probe = reporting(pages.pack([address, address + PAGE, outside]) + b"\x07")
    assert zygote._learn_pages(probe, "javascript") == [(address, 2 * PAGE)]


@pytest.mark.parametrize("code", [1, zygote.EXIT_CHILD_BUG])
def test_a_probe_that_fails_teaches_nothing(code: int) -> None:
    _mapped, address = buffer_pages(1)
    assert zygote._learn_pages(reporting(pages.pack([address]), code), "javascript") == []


def test_a_probe_killed_by_a_signal_teaches_nothing() -> None:
    def probe(report: int, language: str) -> NoReturn:
        os.kill(os.getpid(), 9)
        os._exit(0)

    assert zygote._learn_pages(probe, "javascript") == []


def test_a_probe_that_hangs_is_killed_at_its_deadline_and_teaches_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(zygote, "PROBE_SECONDS", 0.3)
    _mapped, address = buffer_pages(1)

    def probe(report: int, language: str) -> NoReturn:
        os.write(report, pages.pack([address]))
        time.sleep(60)
        os._exit(0)

    before = {child.pid for child in psutil.Process().children()}
    started = time.monotonic()
    assert zygote._learn_pages(probe, "javascript") == []
    assert time.monotonic() - started < 30
    assert {child.pid for child in psutil.Process().children()} <= before, "the probe is reaped"


def test_a_probe_that_writes_more_than_a_report_can_hold_is_killed_and_teaches_nothing() -> None:
    def probe(report: int, language: str) -> NoReturn:
        chunk = bytes(65536)
        while True:
            os.write(report, chunk)

    before = {child.pid for child in psutil.Process().children()}
    assert zygote._learn_pages(probe, "javascript") == []
    assert {child.pid for child in psutil.Process().children()} <= before, "the probe is reaped"


def relearning_zygote(
    probe: Callable[[int, str], NoReturn], hot: dict[str, list[pages.Span]]
) -> tuple[zygote._Zygote, socket.socket]:
    """A fork server with ``probe`` and the pages it learned at its start, and the runner's
    end of its control socket."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server = zygote._Zygote(theirs, lambda **_: os._exit(0), None, None, hot, probe)
    return server, ours


def told(runner_end: socket.socket) -> list[object]:
    """The messages the fork server sent so far."""
    runner_end.setblocking(False)
    messages = []
    with contextlib.suppress(BlockingIOError):
        while data := runner_end.recv(65536):
            messages.append(orjson.loads(data))
    return messages


def close_zygote(server: zygote._Zygote, runner_end: socket.socket) -> None:
    for fd in (server.wake_r, server.wake_w):
        os.close(fd)
    server.control.close()
    runner_end.close()


def test_the_fork_server_learns_a_languages_pages_again_once_after_its_first_children() -> None:
    _mapped, address = buffer_pages(3)
    start = [(address, PAGE)]
    server, runner_end = relearning_zygote(
        reporting(pages.pack([address + PAGE, address + 2 * PAGE])), {"javascript": start}
    )
    try:
        # Not before the first RELEARN_AFTER children forked ahead: the loop still changes
        # the heap then.
        server.forked_ahead = zygote.RELEARN_AFTER - 1
        server.relearn("javascript")
        assert server.hot["javascript"] == start and told(runner_end) == []
        server.forked_ahead = zygote.RELEARN_AFTER
        server.relearn("javascript")
        assert server.hot["javascript"] == [(address + PAGE, 2 * PAGE)]
        assert told(runner_end) == [{"pages": {"javascript": 2}}]
        # Once a language: a later probe would teach this one page, and is not run.
        server.probe = reporting(pages.pack([address]))
        server.relearn("javascript")
        assert server.hot["javascript"] == [(address + PAGE, 2 * PAGE)]
        assert told(runner_end) == []
        # Another language is learned again on its own first child forked ahead after them.
        server.relearn("python")
        assert server.hot["python"] == [(address, PAGE)]
        assert told(runner_end) == [{"pages": {"javascript": 2, "python": 1}}]
    finally:
        close_zygote(server, runner_end)


def test_a_probe_that_fails_when_learning_again_keeps_what_the_start_learned() -> None:
    _mapped, address = buffer_pages(1)
    start = [(address, PAGE)]
    server, runner_end = relearning_zygote(reporting(b"", 1), {"javascript": start})
    try:
        server.forked_ahead = zygote.RELEARN_AFTER
        server.relearn("javascript")
        assert server.hot["javascript"] == start
        assert told(runner_end) == [{"pages": {"javascript": 1}}]  # the counts stand
        server.probe = reporting(pages.pack([address]))
        server.relearn("javascript")  # tried once: not again
        assert told(runner_end) == []
    finally:
        close_zygote(server, runner_end)


def test_a_probe_learning_again_is_given_far_less_time_than_one_at_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The spawns wait for it: one that hangs is killed at RELEARN_SECONDS, not PROBE_SECONDS.
    monkeypatch.setattr(zygote, "RELEARN_SECONDS", 0.3)
    _mapped, address = buffer_pages(2)
    start = [(address, PAGE)]

    def probe(report: int, language: str) -> NoReturn:
        os.write(report, pages.pack([address + PAGE]))
        time.sleep(60)
        os._exit(0)

    server, runner_end = relearning_zygote(probe, {"javascript": start})
    try:
        server.forked_ahead = zygote.RELEARN_AFTER
        started = time.monotonic()
        server.relearn("javascript")
        assert time.monotonic() - started < zygote.PROBE_SECONDS
        assert server.hot["javascript"] == start
        assert told(runner_end) == [{"pages": {"javascript": 1}}]
    finally:
        close_zygote(server, runner_end)


@pytest.mark.parametrize("language", ["javascript", "python"])
def test_the_fork_servers_probe_learns_the_pages_a_step_writes_and_a_child_copies_them(
    language: str,
) -> None:
    # What the fork server does at its start, in a process of its own: warm up, freeze, learn
    # by the real probe; then a forked child copies what was learnt, before any step.
    program = textwrap.dedent(
        """
        import gc, os, sys
        import sandbox.__main__ as main
        from sandbox import pages, zygote
        main._warm_up_zygote()
        gc.collect()
        gc.freeze()
        hot = zygote._learn_pages(main.probe_pages, sys.argv[1])
        assert hot, "the probe taught nothing"
        within = pages.writable()
        assert all(any(a <= s and s + n <= a + m for a, m in within) for s, n in hot)
        learnt = {s + i for s, n in hot for i in range(0, n, pages.PAGE)}
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            copied = pages.populate(hot)
            own = pages.own(pages.writable())
            os.write(write, b"%d %d" % (copied, len(learnt - own)))
            os._exit(0)
        os.close(write)
        answer = os.read(read, 100).split()
        os.waitpid(pid, 0)
        print(len(learnt), int(answer[0]) // pages.PAGE, int(answer[1]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program, language],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    learnt, copied, missing = (int(x) for x in done.stdout.split())
    # The probe's run (a hundred calls at once, then one) writes some 500 pages that waiting
    # in the pool had not, in either language; each of them the child now holds before its
    # step.
    assert learnt >= 200, done.stdout
    assert copied == learnt and missing == 0, done.stdout
