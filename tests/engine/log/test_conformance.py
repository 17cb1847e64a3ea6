"""Every store passes the store conformance suite (engine.log.conformance)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engine.log import LogStore
from engine.log.conformance import CHECKS, Check


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
async def test_store(check: Check, make_store: Callable[[], LogStore]) -> None:
    await check(make_store)
