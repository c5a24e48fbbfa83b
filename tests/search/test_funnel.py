"""The exact funnel gives the answer of evaluating everything exactly, with less work."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from xsweep.search.funnel import Funnel
from xsweep.search.pareto import non_dominated, top_points


def run(bounds, exact, feasible, candidates, top, max_round, **options):
    """Drive a funnel with ``exact`` as the evaluator; return it and the rounds' picks."""
    funnel = Funnel(bounds, candidates, top, max_round, **options)
    picked = []
    while len(picks := funnel.next_round()):
        assert not funnel.evaluated[picks].any() and candidates[picks].all()
        assert len(picks) <= max_round
        picked.append(picks)
        funnel.record(picks, exact[picks], feasible[picks])
    return funnel, picked


def answer(values, top):
    return (set(np.flatnonzero(non_dominated(values)).tolist()),
            [top_points(values[:, j], top).tolist() for j in range(values.shape[1])])


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 400), st.integers(1, 3), st.integers(0, 4), st.integers(1, 64),
       st.integers(0, 2**31 - 1), st.sampled_from([{}, {"pick_top": 1, "grow": True},
                                                   {"pick_top": 8, "grow": True},
                                                   {"pick_top": 5}]))
def test_same_front_and_top_points_as_all_exact(n, d, top, max_round, seed, options):
    rng = np.random.default_rng(seed)
    exact = rng.integers(1, 30, size=(n, d)).astype(float)  # ties on purpose
    bounds = exact * rng.choice([1.0, 0.9, 0.6, 0.3], size=(n, d))  # never above exact
    if d > 1:
        bounds[:, 1] = exact[:, 1]  # an objective the bound knows exactly (cost rate, memory)
    feasible = rng.random(n) > 0.1  # exact evaluation can still fail (not converged)
    candidates = rng.random(n) > 0.2
    funnel, _ = run(bounds, exact, feasible, candidates, top, max_round, **options)
    assert not (funnel.remaining).any()
    assert (funnel.evaluated | funnel.pruned)[candidates].all()
    assert not (funnel.evaluated & funnel.pruned).any()
    reference = np.where((candidates & feasible)[:, None], exact, np.nan)
    found = np.where((funnel.evaluated & feasible)[:, None], exact, np.nan)
    assert answer(found, top) == answer(reference, top)


def test_growing_rounds_pick_twice_as_many_best_plans_each_round():
    n = 100
    bounds = np.arange(n, dtype=float)[:, None]  # loose: every exact value is above them all
    exact = np.full((n, 1), 1000.0)
    _, picked = run(bounds, exact, np.ones(n, bool), np.ones(n, bool), 1, n,
                    pick_top=2, grow=True)
    assert [len(p) for p in picked] == [2, 4, 8, 16, 32, 38]
    assert picked[0].tolist() == [0, 1] and picked[1].tolist() == [2, 3, 4, 5]


def test_pruning_saves_work_when_bounds_are_tight():
    rng = np.random.default_rng(0)
    exact = rng.random((2000, 2)) + 1.0
    bounds = exact * 0.97
    funnel, picked = run(bounds, exact, np.ones(2000, bool), np.ones(2000, bool), 3, 256)
    assert funnel.evaluated.sum() < 200  # most points are pruned
    assert funnel.rounds == len(picked) >= 1


def test_a_point_without_bounds_is_evaluated():
    bounds = np.array([[1.0], [np.nan], [5.0]])
    exact = np.array([[1.0], [9.0], [6.0]])
    funnel, _ = run(bounds, exact, np.ones(3, bool), np.ones(3, bool), 1, 8)
    assert funnel.evaluated.tolist() == [True, True, False]
    assert funnel.pruned.tolist() == [False, False, True]


def test_exhaustive_evaluates_every_candidate_in_rounds():
    bounds = np.arange(10.0)[:, None]
    funnel = Funnel(bounds, np.arange(10) % 2 == 0, 1, 2, exhaustive=True)
    rounds = []
    while len(picks := funnel.next_round()):
        rounds.append(picks.tolist())
        funnel.record(picks, bounds[picks], np.ones(len(picks), bool))
    assert rounds == [[0, 2], [4, 6], [8]]
    assert not funnel.pruned.any()


def plan_answer(values, plans, groups, top):
    """Per group: the plans on the front and the top plans of each objective, each plan
    standing as its first point (as a sweep's answer lists them)."""
    out = {}
    for group in np.unique(groups):
        mine = np.where((groups == group)[:, None], values, np.nan)
        rows = np.flatnonzero(~np.isnan(mine).any(axis=1))
        _, first = np.unique(plans[rows], return_index=True)
        standing = np.full(mine.shape, np.nan)
        standing[rows[first]] = mine[rows[first]]
        front, tops = answer(standing, top)
        out[int(group)] = ({int(plans[i]) for i in front},
                           [[int(plans[i]) for i in t] for t in tops])
    return out


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 300), st.integers(1, 3), st.integers(1, 4), st.integers(0, 4),
       st.integers(1, 64), st.integers(0, 2**31 - 1))
def test_each_group_gets_the_answer_of_all_exact_with_each_plan_once(n, d, g, top, max_round,
                                                                      seed):
    rng = np.random.default_rng(seed)
    plans = rng.integers(0, max(1, n // 3), size=n)  # points of one plan: equal results
    distinct = plans.max() + 1
    exact = rng.integers(1, 30, size=(distinct, d)).astype(float)[plans]
    bounds = exact * rng.choice([1.0, 0.9, 0.6, 0.3], size=(distinct, d))[plans]
    groups = rng.integers(0, g, size=distinct)[plans]  # a plan does one work
    feasible = (rng.random(distinct) > 0.1)[plans]
    candidates = rng.random(n) > 0.2
    funnel = Funnel(bounds, candidates, top, max_round, groups=groups, plans=plans)
    while len(picks := funnel.next_round()):
        funnel.record(picks, exact[picks], feasible[picks])
    assert (funnel.evaluated | funnel.pruned)[candidates].all()
    reference = np.where((candidates & feasible)[:, None], exact, np.nan)
    found = np.where((funnel.evaluated & feasible)[:, None], exact, np.nan)
    assert plan_answer(found, plans, groups, top) == plan_answer(reference, plans, groups, top)


def test_a_group_is_never_pruned_by_another_groups_results():
    # group 1's points are far worse than group 0's: one funnel over both would prune them
    bounds = np.array([[1.0, 1.0], [2.0, 2.0], [50.0, 50.0], [60.0, 60.0]])
    groups = np.array([0, 0, 1, 1])
    funnel = Funnel(bounds, np.ones(4, bool), 1, 1, groups=groups)
    while len(picks := funnel.next_round()):
        funnel.record(picks, bounds[picks], np.ones(len(picks), bool))
    assert funnel.evaluated.tolist() == [True, False, True, False]
    assert funnel.pruned.tolist() == [False, True, False, True]


def test_the_top_counts_each_plan_once():
    # points 0-2 build one plan: the best two plans are it and point 3's, not points 0 and 1
    bounds = np.array([[1.0], [1.0], [1.0], [2.0], [3.0]])
    plans = np.array([7, 7, 7, 8, 9])
    funnel = Funnel(bounds, np.ones(5, bool), 2, 64, plans=plans)
    first = funnel.next_round()
    assert first.tolist() == [0, 1, 2, 3]  # the plan's points together, and the next plan
    funnel.record(first, bounds[first], np.ones(4, bool))
    assert not len(funnel.next_round()) and funnel.pruned.tolist() == [False] * 4 + [True]
