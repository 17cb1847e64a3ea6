"""What a test needs from the machine, said once.

Outside CI a missing requirement skips the test with what it needs. In CI (``CI`` set, as
``.ci/run`` is run) the repository installs everything these tests need, so a missing one
is a broken install step: the test fails and names it instead of passing by skipping.
"""

from __future__ import annotations

import os

import pytest


def require(reason: str) -> None:
    """Skip (or, in CI, fail) a test whose requirement is missing; ``reason`` names it."""
    if os.environ.get("CI"):
        pytest.fail(f"CI must provide what this test needs, and did not: {reason}")
    pytest.skip(reason)
