"""The planner's expert-parallel axis: plans of models with experts carry the point's EP
and the sweep's imbalance, and points EP cannot split are infeasible with a reason of
their own kind, which the grid's arrays leave to the planner."""

from __future__ import annotations

import numpy as np

from tests.support.documents import changed
from xsweep.plan.analysis import analyze
from xsweep.search.space.grid import Grid
from xsweep.search.space.planner import Built, Infeasible, Planner, reason_kind
from xsweep.search.space.screen import columns_of_grid, screen
from xsweep.spec import sweep_from_dict, validate_plan

MIXTRAL = {
    "name": "moe-planner",
    "model": "mixtral-8x7b",
    "training": {"global_batch_size": 32, "schedule": "1f1b", "recompute": "full",
                 "moe_imbalance": 1.25},
    "cluster": {"pools": [{"gpu": "H200", "nodes": 4}]},
    "parallelism": {"tp": {"H200": [4, 8]}, "pp": [2, 4], "micro_batch_size": 1,
                    "ep": [1, 2, 3, 4, 8]},
}


def _outcomes(document, catalog):
    sweep = sweep_from_dict(document)
    grid = Grid(sweep)
    planner = Planner(sweep, catalog)
    points = list(grid.points(np.arange(grid.size)))
    return sweep, grid, points, [planner.plan(point, f"p{i}") for i, point in enumerate(points)]


def test_ep_reaches_the_plan_and_infeasible_points_say_why(catalog):
    _, _, points, outs = _outcomes(MIXTRAL, catalog)
    built = 0
    for point, out in zip(points, outs, strict=True):
        ep, tp = point["parallelism.ep"], point["parallelism.tp.H200"]
        if ep == 3:
            assert isinstance(out, Infeasible)
            assert out.reason == "expert parallelism: ep 3 does not divide the model's 8 experts"
        elif tp % ep:
            assert out.reason == f"expert parallelism: ep {ep} does not divide TP {tp} of pool H200"
            assert reason_kind(out.reason).name == "experts"
        else:
            assert isinstance(out, Built), out
            validate_plan(out.plan, catalog)
            stack = analyze(out.plan, catalog).stack
            assert (stack.expert_parallel, stack.moe_imbalance) == (ep, 1.25)
            built += 1
    assert built >= 8


def test_a_dense_model_refuses_expert_parallelism(catalog):
    document = changed(MIXTRAL, model="llama2-7b")
    _, _, points, outs = _outcomes(document, catalog)
    for point, out in zip(points, outs, strict=True):
        if point["parallelism.ep"] > 1:
            assert out.reason == ("expert parallelism: ep "
                                  f"{point['parallelism.ep']} needs a model with experts "
                                  "(llama2-7b has none)")


def test_the_arrays_leave_expert_points_to_the_planner(catalog):
    for document in (MIXTRAL, changed(MIXTRAL, model="llama2-7b")):
        sweep, grid, points, outs = _outcomes(document, catalog)
        screened = screen(sweep, catalog, columns_of_grid(grid, np.arange(grid.size)))
        for row, (point, out) in enumerate(zip(points, outs, strict=True)):
            if document["model"] == "mixtral-8x7b" or point["parallelism.ep"] > 1:
                assert not screened.infeasible[row]
            elif screened.infeasible[row]:
                assert screened.reason[row] == out.reason


def test_context_parallelism_with_experts_is_infeasible_not_an_error(catalog):
    """Plan validation refuses CP with experts; the planner says so first, so a sweep over
    both axes finishes with a reason instead of stopping at the plan it built."""
    document = changed(MIXTRAL, parallelism={**MIXTRAL["parallelism"], "cp": [1, 2],
                                             "tp": {"H200": [4]}, "ep": [1, 2]})
    _, _, points, outs = _outcomes(document, catalog)
    for point, out in zip(points, outs, strict=True):
        if point["parallelism.cp"] > 1:
            assert isinstance(out, Infeasible)
            assert out.reason == "CP 2 is not modelled for a model with experts (mixtral-8x7b)"
            assert reason_kind(out.reason).name == "cp"
        elif isinstance(out, Built):
            validate_plan(out.plan, catalog)
    assert any(isinstance(out, Built) for out in outs)
