"""The PostgreSQL store's one watching thread (``_Watcher``) in a forked child: the child
fires none of the deadlines its parent armed (the parent's statements': fired in the child,
one cut the parent's connection through the inherited descriptor), and arms its own even
when the parent's thread held the watcher's lock at the fork."""

from __future__ import annotations

import os
import select
import signal
import threading
from collections.abc import Callable

from engine.log._postgres import _WATCHER

HANG_S = 30.0  # what the child has to answer in: it answers in milliseconds, or hangs


def in_child(run: Callable[[], str]) -> str:
    """What ``run()`` returns in a forked child, or "no answer" if it hangs."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: it answers through the pipe and leaves, whatever happens
        try:
            os.write(write, run().encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        ready, _, _ = select.select([read], [], [], HANG_S)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            return "no answer"
        return os.read(read, 1000).decode()
    finally:
        os.close(read)
        os.waitpid(pid, 0)


def test_a_forked_child_fires_only_its_own_deadlines() -> None:
    fired: list[str] = []
    parents = _WATCHER.arm(0.2, lambda: fired.append("parent's"))  # a statement in flight

    def child() -> str:
        done = threading.Event()

        def fire() -> None:
            fired.append("child's")
            done.set()

        # Due after the parent's: had the child kept the parent's, that one fired first.
        _WATCHER.arm(0.4, fire)
        return ",".join(fired) if done.wait(HANG_S) else "none fired"

    try:
        assert in_child(child) == "child's"
    finally:
        _WATCHER.cancel(parents)


def test_a_forked_child_arms_though_the_lock_was_held_at_the_fork() -> None:
    held, fork_done = threading.Event(), threading.Event()

    def hold() -> None:  # as the watching thread does, between its waits
        with _WATCHER._cond:
            held.set()
            fork_done.wait(HANG_S)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        held.wait(HANG_S)

        def child() -> str:
            done = threading.Event()
            _WATCHER.arm(0.0, done.set)
            return "fired" if done.wait(HANG_S) else "none fired"

        answer = in_child(child)
    finally:
        fork_done.set()
        holder.join()
    assert answer == "fired"
