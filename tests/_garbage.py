"""Between in-process runs of Python scripts: what an earlier run left, freed."""

from __future__ import annotations

import gc
import warnings


def collect_runs_garbage() -> None:
    """Free what earlier runs in this process left for the collector (a script's coroutine
    it never awaited) now, not in the middle of the next run, whose printed text would take
    the warning it gives when freed. That warning is the script's doing and expected: it is
    not shown (it filled the test run's summary)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        gc.collect()
