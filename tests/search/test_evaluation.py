"""A session keeps what its process evaluated: a plan met again is not evaluated again in
the same session, another session evaluates it afresh, and a session that never evaluates
never makes an evaluator."""

from __future__ import annotations

import numpy as np
import pytest

from xsweep.evaluator import default_evaluator
from xsweep.search.evaluation import Job, Session, evaluate_points
from xsweep.search.levels import Level
from xsweep.search.space.grid import Grid
from xsweep.search.space.planner import plan_name
from xsweep.spec import load_sweep


class Counting:
    """An evaluator that counts the plans it is asked for."""

    def __init__(self, inner):
        self.inner, self.plans = inner, 0
        self.platform = inner.platform

    def evaluate_columns(self, plans, *args, **kwargs):
        self.plans += len(plans)
        return self.inner.evaluate_columns(plans, *args, **kwargs)


@pytest.fixture(scope="module")
def job(spaces_dir, catalog) -> Job:
    return Job(load_sweep(spaces_dir / "quickstart.yaml", catalog), catalog)


def bounded(session: Session, job: Job, indices: np.ndarray):
    names = [plan_name(job.sweep, i) for i in indices.tolist()]
    return evaluate_points(session, job, indices, Grid(job.sweep).points(indices), names,
                           "bound")[0]


def test_a_session_evaluates_a_plan_once(job):
    points = np.arange(250, 262)  # buildable points, some of them of one plan
    counting = Counting(default_evaluator())
    session = Session(counting)
    first = bounded(session, job, points)
    assert 0 < counting.plans < int(np.sum(first["level"] == Level.BOUND))
    asked = counting.plans
    again = bounded(session, job, points)
    assert counting.plans == asked  # every plan's result was kept
    for name, values in first.items():
        np.testing.assert_array_equal(again[name], values, err_msg=name)
    other = Counting(default_evaluator())
    bounded(Session(other), job, points)
    assert other.plans == asked  # nothing is shared between sessions


def test_a_session_that_never_evaluates_makes_no_evaluator(job):
    session = Session()
    rows = bounded(session, job, np.arange(24))  # pools of no nodes: nothing to evaluate
    assert set(rows["level"]) == {Level.NONE}
    assert session._evaluator is None
    assert session.evaluator is default_evaluator()  # made when first asked for


def test_a_full_session_keeps_the_results_a_call_still_reads(job):
    """A session that lets its kept results go when it would keep too many still answers
    a call whose plans were partly kept: the kept ones it reads are kept through the
    emptying (it once lost them and failed with a KeyError on a large space's exhaustive
    run), and every row equals a fresh session's."""
    first, more = np.arange(250, 262), np.arange(240, 270)
    counting = Counting(default_evaluator())
    session = Session(counting, kept_results=4)  # room for the first call's plans alone
    bounded(session, job, first)
    kept = counting.plans
    assert 0 < kept <= 4
    rows = bounded(session, job, more)  # those plans again and new ones: over the limit
    assert counting.plans - kept >= 4  # only the new ones were evaluated
    fresh = bounded(Session(), job, more)
    for name, values in fresh.items():
        np.testing.assert_array_equal(rows[name], values, err_msg=name)
