"""The closed-form tier is a lower bound: closed form <= bound <= exact, on the seeded
catalogue of heterogeneous plans (the agreement catalogue's generator, every training-stack
option) and on random plans drawn by hypothesis, models with experts among them."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from xsweep.evaluator import default_evaluator
from xsweep.plan.builder import MOE_PRESETS, random_plan
from xsweep.search.closed_form import (
    MARGIN,
    METRICS,
    closed_form_metrics,
    iteration_lower_bound,
)


def check(plans, catalog) -> np.ndarray:
    """closed form <= bound <= exact for every plan, and no metric of the tier better than
    the bound level's; the closed form's share of the bound."""
    closed = np.array([iteration_lower_bound(plan, catalog) for plan in plans])
    bounded = default_evaluator().evaluate(plans, "bound", catalog=catalog)
    bound = bounded["iteration_time_s"].values
    exact = default_evaluator().evaluate(plans, "exact", catalog=catalog)["iteration_time_s"].values
    tier = [closed_form_metrics(plan, catalog) for plan in plans]
    for name in METRICS:
        ours = np.array([m[name] for m in tier])
        theirs = bounded[name].values
        known = np.isfinite(ours) & np.isfinite(theirs)
        if name == "tokens_per_s":  # larger is better: an upper bound
            assert np.all(ours[known] >= theirs[known] * (1 - 1e-6)), name
        else:
            assert np.all(ours[known] <= theirs[known]), name
    assert np.all(closed > 0)
    assert np.all(closed <= bound), (closed / bound).max()
    assert np.all(bound <= exact * (1 + 1e-5))
    return closed / bound


def test_the_catalogue(catalog):
    share = check([random_plan(seed, max_gpus=64) for seed in range(24)], catalog)
    assert share.max() > 0.5  # a bound that says something, not zero


@settings(max_examples=8)
@given(seeds=st.lists(st.integers(0, 10**6), min_size=4, max_size=4, unique=True))
def test_random_plans(catalog, seeds):
    check([random_plan(seed, max_gpus=32) for seed in seeds], catalog)


#: How a random plan with experts lays out its EP groups: as drawn (inside TP), across
#: replicas, across replicas under FSDP, folding the CP ranks where it has them, or over
#: the whole groups of several replicas there.
EP_LAYOUTS = ({}, {"ep_across": True}, {"ep_across": True, "fsdp": True}, {"cp_fold": True},
              {"ep_across": True, "cp_fold": True})


@settings(max_examples=4)
@given(seeds=st.lists(st.integers(0, 10**6), min_size=4, max_size=4, unique=True),
       model=st.sampled_from(sorted(MOE_PRESETS)), layout=st.sampled_from(EP_LAYOUTS))
def test_random_plans_with_experts(catalog, seeds, model, layout):
    """Models with experts, expert parallelism (whose all-to-alls the bound counts) drawn
    with them, its EP groups laid out one of the ways a plan can."""
    check([random_plan(seed, max_gpus=32, model=model, **layout) for seed in seeds], catalog)


def test_the_margin_is_what_keeps_the_fill_and_drain_of_a_pipeline_below_the_bound(catalog):
    """Without interleaving the fill and drain count: a plan of several stages has a bound
    above its busiest stage's compute alone."""
    plans = [p for p in (random_plan(seed, max_gpus=64) for seed in range(40))
             if p.training.virtual_pipeline_stages <= 1
             and len({g.pp_stage for g in p.device_groups}) > 2][:4]
    assert plans
    share = check(plans, catalog)
    assert share.min() > 0.0 and MARGIN < 1e-3
