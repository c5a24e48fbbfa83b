"""How validation measures the error of a batched result against the simulator's."""

from __future__ import annotations

import math

import pytest

from xsweep.search.levels import Level
from xsweep.search.validate.compare import (
    COMPARED,
    FLOAT32_SLACK,
    SMALL_PART,
    compare,
    failure_line,
    relative_error,
)

SIMULATED = {"iteration_time_s": 2.0, "bubble_s_max": 0.5, "straggler_wait_s_max": 0.0,
             "exposed_tp_s_max": 0.1, "exposed_pp_s_max": 0.0, "exposed_reshard_s_max": 0.0,
             "exposed_dp_s_max": 0.05, "cost_per_run_usd": 1000.0}


def test_errors_are_relative_to_the_simulated_value():
    assert relative_error("iteration_time_s", 2.2, 2.0, 2.0) == pytest.approx(0.1)
    assert relative_error("cost_per_run_usd", 900.0, 1000.0, 2.0) == pytest.approx(0.1)
    assert relative_error("bubble_s_max", 0.55, 0.5, 2.0) == pytest.approx(0.1)


def test_a_small_part_of_the_iteration_is_compared_to_its_share_of_the_iteration():
    # 2 us against 1 us in a 2 s iteration: 100% of itself, 1e-6 s of a 0.02 s floor
    assert relative_error("straggler_wait_s_max", 2e-6, 1e-6, 2.0) == pytest.approx(
        1e-6 / (SMALL_PART * 2.0))
    assert relative_error("exposed_pp_s_max", 0.0, 0.0, 2.0) == 0.0
    # the iteration time and the cost have no such floor
    assert relative_error("iteration_time_s", 2e-6, 1e-6, 1e-6) == pytest.approx(1.0)


def test_missing_values():
    assert relative_error("cost_per_run_usd", None, math.nan, 2.0) is None  # no total_tokens
    assert relative_error("cost_per_run_usd", 5.0, None, 2.0) == math.inf
    assert relative_error("cost_per_run_usd", 0.0, 0.0, 2.0) == 0.0
    assert relative_error("cost_per_run_usd", 1.0, 0.0, 2.0) == math.inf


def test_an_exact_point_passes_within_the_tolerance_and_fails_beyond_it():
    close = {**SIMULATED, "iteration_time_s": 2.0 * 1.01}
    checks = compare(Level.EXACT, close, SIMULATED, 0.05)
    assert [c.metric for c in checks] == list(COMPARED)
    assert all(c.passed for c in checks)
    failed = [c for c in compare(Level.EXACT, close, SIMULATED, 0.001) if not c.passed]
    assert [c.metric for c in failed] == ["iteration_time_s"]
    line = failure_line("point 7", Level.EXACT, failed, 0.001)
    assert line == ("point 7: iteration_time_s batched 2.02, simulated 2: relative error "
                    "0.01 exceeds the tolerance 0.001")


def test_a_bound_passes_at_or_below_the_simulated_time_only():
    low = {**SIMULATED, "iteration_time_s": 1.5, "bubble_s_max": 0.0}  # parts are not judged
    assert all(c.passed for c in compare(Level.BOUND, low, SIMULATED, 1e-9))
    rounding = {**SIMULATED, "iteration_time_s": 2.0 * (1 + FLOAT32_SLACK / 2)}
    assert all(c.passed for c in compare(Level.BOUND, rounding, SIMULATED, 1e-9))
    above = {**SIMULATED, "iteration_time_s": 2.0 * (1 + 10 * FLOAT32_SLACK)}
    failed = [c for c in compare(Level.BOUND, above, SIMULATED, 0.05) if not c.passed]
    assert [c.metric for c in failed] == ["iteration_time_s"]
    assert failure_line("trial 3", Level.BOUND, failed, 0.05).startswith(
        "trial 3 (bound only): iteration_time_s bound 2.002 is above the simulated 2 ")
