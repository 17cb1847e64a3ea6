"""Every registered ScriptRunner against the conformance suite (see conftest.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.runner import conformance as c
from tests.runner.conftest import FAST_RUNNERS, Harness


@pytest.mark.parametrize("language", c.LANGUAGES)
@pytest.mark.parametrize(
    "check",
    [
        c.check_stale_prs_example,
        c.check_script_error,
        c.check_printed_and_stats,
        c.check_printed_text_whole,
        c.check_calls_in_call_order,
        c.check_file_reads,
    ],
    ids=lambda check: check.__name__.removeprefix("check_"),
)
def test_in_each_language(runner: Harness, check: Any, language: str) -> None:
    check(runner, language)


@pytest.mark.parametrize(
    "check",
    [
        c.check_compute_limit,
        c.check_total_compute_limit,
        c.check_memory_limit,
        c.check_calls_limit,
        c.check_results_limit,
        c.check_arguments_limit,
        c.check_call_arguments_limit,
        c.check_step_arguments_limit,
    ],
    ids=lambda f: f.__name__.removeprefix("check_"),
)
@pytest.mark.parametrize("language", c.LANGUAGES)
def test_limits(runner: Harness, check: Any, language: str) -> None:
    check(runner, language)


@pytest.mark.parametrize(
    "check",
    [
        c.check_garbage,
        c.check_wrong_message,
        c.check_endless_line,
        c.check_dies_mid_line,
        c.check_exits_without_ran,
        c.check_stderr_named,
        c.check_segfault,
        c.check_hang,
    ],
    ids=lambda f: f.__name__.removeprefix("check_"),
)
def test_crashes(standin: Harness, check: c.Check) -> None:
    check(standin)


def test_null_thrown(runner: Harness) -> None:
    c.check_null_thrown(runner)


def test_replaced_builtins(runner: Harness) -> None:
    c.check_replaced_builtins(runner)


def test_native_text(runner: Harness) -> None:
    c.check_native_text(runner)


def test_concurrency(runner: Harness) -> None:
    c.check_concurrency(runner)


def test_live_agrees_with_replay(runner: Harness) -> None:
    c.check_live_agrees_with_replay(runner)


def test_live_cleanup(runner: Harness) -> None:
    c.check_live_cleanup(runner)


def test_cancelled_cleanup(runner: Harness) -> None:
    c.check_cancelled_cleanup(runner)


def test_cleanup(runner: Harness) -> None:
    # Exec mode costs about 300 ms a step here: 20 steps show the same thing in 6 s.
    c.check_cleanup(runner, 1000 if runner.kind in FAST_RUNNERS else 20)


@pytest.mark.parametrize("lie", sorted(c.LIES))
def test_lies(standin: Harness, lie: str) -> None:
    c.check_lie(standin, lie)


@pytest.mark.parametrize(
    "check",
    [
        c.check_forged_strings,
        c.check_deep_data,
        c.check_reads_stop_at_file_bytes,
        c.check_reads_do_not_extend_the_deadline,
        c.check_a_hanging_store_meets_the_deadline,
        c.check_empty_reads_end_the_step,
        c.check_a_deaf_reader_meets_the_deadline,
    ],
    ids=lambda f: f.__name__.removeprefix("check_"),
)
def test_lying_process(standin: Harness, check: c.Check) -> None:
    check(standin)
