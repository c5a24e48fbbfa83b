"""The closed-form tier computes a bound once per layout and shares it with the layout's
other points where the bound reads none of their per-point fields: every point of random
sweeps (dense and mixture-of-experts models, NICs, dispatchers, FP8 dispatch, fabrics,
resharding and DP overlap as axes) gets the bound of its own plan."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.support.sweeps import _some
from xsweep.errors import InputError
from xsweep.search.closed_form import iteration_lower_bound
from xsweep.search.evaluation import Job, Session, evaluate_points
from xsweep.search.levels import Level
from xsweep.search.space.grid import Grid
from xsweep.search.space.planner import Built, Planner, plan_name
from xsweep.spec import sweep_from_dict

#: Points evaluated per sweep at most (spread over its grid, in one call as a chunk's).
MOST = 160


@st.composite
def documents(draw):
    moe = draw(st.booleans())
    training = {"global_batch_size": _some(draw, st, [32, 64], 1),
                "recompute": _some(draw, st, ["none", "full"]),
                "zero_stage": _some(draw, st, [0, 1]),
                "precision": _some(draw, st, ["bf16", "fp8"]),
                "resharding": _some(draw, st, ["lcm", "hetauto"]),
                "dp_overlap": _some(draw, st, [False, True]),
                "total_tokens": 1e9}
    parallelism = {"tp": {"H100-SXM": _some(draw, st, [1, 2, 4, 8])},
                   "pp": _some(draw, st, [1, 2, 4]), "micro_batch_size": 1}
    if moe:
        training |= {"moe_dispatcher": _some(draw, st, ["alltoall", "deepep"]),
                     "moe_fp8_dispatch": _some(draw, st, [False, True])}
        parallelism["ep"] = _some(draw, st, [1, 2, 4, 8])
    return {"name": "shared", "model": "mixtral-8x7b" if moe else "llama2-13b",
            "training": training,
            "cluster": {"fabric": _some(draw, st, ["rail_optimized", "fat_tree"]),
                        "pools": [{"gpu": "H100-SXM", "nodes": _some(draw, st, [2, 4, 8]),
                                   "gpus_per_node": _some(draw, st, [2, 4, 8]),
                                   "nic": _some(draw, st, ["eth10g", "cx6", "cx7"])}]},
            "parallelism": parallelism, "objectives": ["iteration_time_s"]}


@given(document=documents())
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_point_gets_its_own_plans_bound(catalog, document):
    try:
        sweep = sweep_from_dict(document)
    except InputError:
        assume(False)
    grid = Grid(sweep)
    indices = np.unique(np.linspace(0, grid.size - 1, min(grid.size, MOST)).astype(int))
    names = [plan_name(sweep, i) for i in indices.tolist()]
    table, _ = evaluate_points(Session(), Job(sweep, catalog), indices,
                               grid.points(indices), names, Level.CLOSED_FORM)
    planner = Planner(sweep, catalog)
    bounded = np.flatnonzero(np.isfinite(table["iteration_time_s"]))
    assume(len(bounded) > 0)
    for row in bounded.tolist():
        built = planner.plan(grid.point(int(indices[row])), "own")
        assert isinstance(built, Built)
        own = iteration_lower_bound(built.plan, catalog)
        assert table["iteration_time_s"][row] == pytest.approx(own, rel=1e-12), \
            grid.point(int(indices[row]))
