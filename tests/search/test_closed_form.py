"""The closed-form tier is a lower bound: closed form <= bound <= exact, on the seeded
catalogue of heterogeneous plans (the agreement catalogue's generator, every training-stack
option) and on random plans drawn by hypothesis, models with experts among them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xsweep.evaluator import default_evaluator
from xsweep.plan.builder import MOE_PRESETS, NodeReq, ReplicaReq, StageReq, build_plan, random_plan
from xsweep.plan.stack import Stack
from xsweep.plan.workload import segment_grad_bytes
from xsweep.search.closed_form import (
    MARGIN,
    METRICS,
    bound_parts,
    closed_form_metrics,
    iteration_lower_bound,
)
from xsweep.spec.resolve import resolve_model, resolve_nodes


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


def _reduced_after_the_backward(seed: int):
    """A random plan (up to 64 GPUs) with its gradients reduced after the backward pass
    (no DP overlap): where it also has no interleaving, experts or context parallelism
    and ZeRO 0 or 1, the closed form counts the DP collectives after the last backward."""
    plan = random_plan(seed, max_gpus=64)
    plan.training.dp_overlap = False
    return plan


@settings(max_examples=6, deadline=None)
@given(seeds=st.lists(st.integers(0, 10**6), min_size=6, max_size=6, unique=True))
def test_random_plans_whose_gradients_are_reduced_after_the_backward(catalog, seeds):
    check([_reduced_after_the_backward(seed) for seed in seeds], catalog)


def test_the_gradient_collectives_raise_the_bound_where_they_follow_the_last_backward(
        catalog):
    """Plans whose DP collectives the bound counts: each closed form is above the
    compute part alone (the collectives add to it) and stays under the bound level."""
    plans = [plan for plan in map(_reduced_after_the_backward, range(120))
             if len(bound_parts(plan, catalog).after)][:8]
    assert len(plans) == 8
    compute = np.array([bound_parts(plan, catalog).compute for plan in plans])
    share = check(plans, catalog)
    closed = np.array([iteration_lower_bound(plan, catalog) for plan in plans])
    assert np.all(closed > compute * (1 - MARGIN))
    assert share.min() > 0.5


def test_a_gradient_all_reduce_over_two_nodes_adds_its_ring_to_the_passes(catalog):
    """Two replicas of one TP-8 stage on two nodes: the iteration lasts at least one
    micro-batch's passes and then the all-reduce of the stage's gradients, a ring of two
    whose every flow carries the gradients of a TP shard over the NIC (and PCIe) of its
    node, at the best bus efficiency of the path; under ZeRO-1 a reduce-scatter, half the
    bytes. With DP overlap, the passes alone."""
    replica = ReplicaReq((StageReq("H100-SXM", 8, 8),), 1, 1)
    for zero, passes in ((0, 2), (1, 1)):
        plan = build_plan("two", "llama2-7b", [NodeReq("H100-SXM", 8, "cx7")] * 2,
                          [replica] * 2, stack=Stack(zero_stage=zero), num_layers=8,
                          seq_length=1024)
        parts = bound_parts(plan, catalog)
        node = resolve_nodes(plan.cluster, catalog)[0]
        shard = segment_grad_bytes(resolve_model(plan, catalog), 1, 8) / 8
        assert parts.flow_bytes.tolist() == [passes * (2 - 1) / 2 * shard]
        rate = min(node.nic.bandwidth_gbps, node.gpu.pcie_gbps) * 1e9 / 8
        efficiency = max(node.nic.bus_efficiency, node.pcie_link.bus_efficiency)
        assert parts.after.tolist() == [parts.compute]  # one stage: its passes
        assert iteration_lower_bound(plan, catalog) == pytest.approx(
            (parts.compute + passes / 2 * shard / (efficiency * rate)) * (1 - MARGIN),
            rel=1e-12)
        check([plan], catalog)
        plan.training.dp_overlap = True  # the collectives overlap the backward: not counted
        assert iteration_lower_bound(plan, catalog) == parts.compute * (1 - MARGIN)
