"""The parts of an iteration add up to its time, on the figures of a real sweep."""

from __future__ import annotations

import numpy as np
import pytest

from xsweep.report import breakdown
from xsweep.report.result import open_result
from xsweep.spec.catalog import load_catalog


def test_the_parts_of_a_hand_made_row_follow_the_definitions():
    row = {"iteration_time_s": 1.7, "busy_s_mean": 1.0, "exposed_tp_s_mean": 0.2,
           "idle_s_mean": 0.5, "bubble_s_mean": 0.3, "exposed_pp_s_mean": 0.1,
           "exposed_reshard_s_mean": 0.05, "straggler_wait_s_mean": 0.1}
    parts = dict(breakdown.parts(row))
    assert list(parts) == [name for name, _, _ in breakdown.PARTS]
    assert parts == pytest.approx({"compute": 1.0, "exposed TP": 0.2, "exposed PP": 0.1,
                                   "exposed resharding": 0.05, "other bubble": 0.15,
                                   "straggler wait": 0.1, "after forward/backward": 0.1})
    assert breakdown.gap(row) < 1e-12


@pytest.fixture(scope="module")
def result(two_models):
    return open_result(two_models, load_catalog())


def test_on_every_exact_point_of_a_sweep_the_parts_add_up_to_the_iteration_time(result):
    table = result.table
    exact = np.flatnonzero(table["feasible"] & (table["level"] == "exact"))
    assert len(exact) >= 4
    for point in exact:
        row = result.row(int(point))
        parts = breakdown.parts(row)
        assert all(v >= 0 for _, v in parts)
        assert breakdown.gap(row) < 1e-5, (point, parts, row["iteration_time_s"])


def test_the_maxima_over_gpus_do_not_add_up_which_is_why_the_bars_use_means(result):
    """The largest busy, TP, bubble and straggler times of a pipelined plan come from
    different GPUs: their sum passes the iteration time."""
    table = result.table
    exact = np.flatnonzero(table["feasible"] & (table["level"] == "exact"))
    over = [p for p in exact
            if sum(table[n][p] for n in ("busy_s_max", "exposed_tp_s_max", "bubble_s_max",
                                         "straggler_wait_s_max"))
            > table["iteration_time_s"][p] * 1.01]
    assert over
