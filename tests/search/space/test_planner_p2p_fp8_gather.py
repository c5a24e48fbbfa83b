"""The sweep axes of two stack options, ``training.pp_p2p_overlap`` (per point) and
``training.fp8_param_gather`` (a layout axis): what they write into a point's plan, the
points they make infeasible (the arrays and the planner alike), and the memory."""

from __future__ import annotations

import numpy as np
import pytest

from tests.search.space.test_planner import BASE, plan_one
from tests.search.space.test_screen import agree
from tests.support.documents import changed
from xsweep.plan.analysis import analyze
from xsweep.search.space.grid import Grid
from xsweep.search.space.planner import Built, Infeasible, Planner, reason_kind
from xsweep.spec import sweep_from_dict, validate_plan
from xsweep.spec.sweep import AxisClass, axis_class

HOPPER = {"cluster__pools": [{"gpu": "H100-SXM", "nodes": 1}, {"gpu": "H200", "nodes": 1}],
          "parallelism__tp": {"H100-SXM": 4, "H200": 4}}


def test_classes():
    assert axis_class("training.pp_p2p_overlap") is AxisClass.PER_POINT
    assert axis_class("training.fp8_param_gather") is AxisClass.LAYOUT


def test_blocking_sends_reach_the_plan_and_overlap_leaves_it_as_it_was(catalog):
    plain = plan_one(catalog)
    over = plan_one(catalog, training__pp_p2p_overlap=True)
    block = plan_one(catalog, training__pp_p2p_overlap=False)
    assert all(isinstance(b, Built) for b in (plain, over, block))
    assert over.plan.SerializeToString() == plain.plan.SerializeToString()
    assert not over.plan.training.HasField("pp_p2p_overlap")
    assert block.plan.training.HasField("pp_p2p_overlap")
    assert not block.plan.training.pp_p2p_overlap
    validate_plan(block.plan, catalog)
    assert not analyze(block.plan, catalog).stack.pp_p2p_overlap
    # the same layout: only the per-point field differs
    assert block.layout == over.layout
    assert block.memory_per_gpu_gib == over.memory_per_gpu_gib


def test_points_of_both_values_are_two_variants(catalog):
    sweep = sweep_from_dict(changed(BASE, training__pp_p2p_overlap=[True, False]))
    grid, planner = Grid(sweep), Planner(sweep, catalog)
    points = list(grid.points(np.arange(grid.size)))
    variants = {planner.variant(p) for p in points}
    assert len(points) == 2 and len(variants) == 2


@pytest.mark.parametrize(("precision", "zero"), [("bf16", 1), ("fp8", 0), ("bf16", 3)])
def test_fp8_gathers_need_fp8_and_sharded_parameters(catalog, precision, zero):
    out = plan_one(catalog, training__fp8_param_gather=True, training__precision=precision,
                   training__zero_stage=zero, **HOPPER)
    assert isinstance(out, Infeasible)
    assert out.reason == "FP8 parameter gathers need precision fp8 and zero_stage 1 or 3"
    assert reason_kind(out.reason).name == "fp8_gather"


@pytest.mark.parametrize("zero", [1, 3])
def test_fp8_gathers_reach_the_plan_and_lower_the_memory(catalog, zero):
    kwargs = dict(training__precision="fp8", training__zero_stage=zero, **HOPPER)
    if zero == 3:  # FSDP over replicas of one shape: one pool
        kwargs.update(cluster__pools=[{"gpu": "H100-SXM", "nodes": 2}],
                      parallelism__tp={"H100-SXM": 4})
    bf16 = plan_one(catalog, **kwargs)
    fp8 = plan_one(catalog, training__fp8_param_gather=True, **kwargs)
    assert isinstance(bf16, Built) and isinstance(fp8, Built), (bf16, fp8)
    assert fp8.plan.training.fp8_param_gather and not bf16.plan.training.fp8_param_gather
    validate_plan(fp8.plan, catalog)
    analysis = analyze(fp8.plan, catalog)
    assert analysis.stack.fp8_param_gather
    assert fp8.memory_per_gpu_gib < bf16.memory_per_gpu_gib
    assert fp8.memory_per_gpu_gib == pytest.approx(
        max(g.memory.total_gib for g in analysis.groups), rel=1e-12)


def test_the_arrays_give_the_planners_reason(catalog):
    sweep = sweep_from_dict(changed(
        BASE, training__fp8_param_gather=[False, True], training__precision=["bf16", "fp8"],
        training__zero_stage=[0, 1, 3], training__pp_p2p_overlap=[True, False], **HOPPER))
    decided, built = agree(sweep, catalog)
    assert decided > 0 and built > 0
