"""The settings every property test of the suite runs under."""

from __future__ import annotations

from hypothesis import HealthCheck, settings


def derandomized(max_examples: int = 200, *also_suppressed: HealthCheck) -> settings:
    """``max_examples`` examples, the same every run (the suite stays deterministic;
    hypothesis still shrinks a failure to its smallest input), no deadline (a shared machine's
    pauses are not failures), no example database written in the checkout."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, *also_suppressed],
    )
