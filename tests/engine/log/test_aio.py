"""Linux AIO for the SQLite log's syncs (engine.log._aio): caio, imported at the first sync."""

from __future__ import annotations

import importlib.abc
import sys
import threading
import time
from typing import Any

import pytest

from engine.log import _aio
from tests._needs import require


def test_stores_on_two_threads_both_find_linux_aio(monkeypatch: pytest.MonkeyPatch) -> None:
    """caio is imported at the first AIO sync of the process: a store on another thread
    that asks meanwhile waits for the import, then has AIO too. It was marked imported
    before the import was done, and such a store found none and synced on its thread for
    good. (The import is held back by a finder until the second thread waits for it.)"""
    if _aio._linux_aio() is None:
        require("Linux AIO (kernel 4.18 or later, io_setup allowed, caio installed)")
    entered, release = threading.Event(), threading.Event()

    class Hold(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path: Any, target: Any = None) -> None:
            if name == "caio.linux_aio":
                entered.set()
                release.wait(10)
            return None  # the usual finders find it

    monkeypatch.setattr(_aio, "_imported", False)
    monkeypatch.setattr(_aio, "linux_aio", None)
    monkeypatch.delitem(sys.modules, "caio.linux_aio")
    monkeypatch.delattr(sys.modules["caio"], "linux_aio")  # `from caio import` reads it first
    monkeypatch.setattr(sys, "meta_path", [Hold(), *sys.meta_path])
    found: dict[str, Any] = {}

    def first(who: str) -> None:
        found[who] = _aio._linux_aio()

    a = threading.Thread(target=first, args=("a",))
    a.start()
    assert entered.wait(10)
    b = threading.Thread(target=first, args=("b",))
    b.start()
    # Released once b waits for the import's lock (or has its answer): the race is run.
    bound = time.monotonic() + 10
    while b.is_alive() and not _waits_for_an_import(b) and time.monotonic() < bound:
        time.sleep(0.005)
    release.set()
    a.join(10)
    b.join(10)
    assert found["a"] is not None and found["b"] is found["a"], found


def _waits_for_an_import(thread: threading.Thread) -> bool:
    """Whether ``thread`` is in the import machinery now (where it waits for the import
    the other thread holds)."""
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None:
        if frame.f_code.co_filename == "<frozen importlib._bootstrap>":
            return True
        frame = frame.f_back
    return False
