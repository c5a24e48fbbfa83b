"""The units of a sweep's work give the same rows however the points are cut into units
(run one after another in one session, as a worker process runs them)."""

from __future__ import annotations

import numpy as np
import pytest

from xsweep.search.evaluation import Job, Session
from xsweep.search.levels import Level
from xsweep.search.sweep.units import bound_chunk, exact_batch
from xsweep.search.table import concat, from_rows
from xsweep.spec import load_sweep

pytestmark = pytest.mark.slow


def test_a_chunk_is_the_same_in_one_unit_or_two(spaces_dir, catalog):
    session = Session()
    job = Job(load_sweep(spaces_dir / "quickstart.yaml", catalog), catalog)
    whole, spent = bound_chunk(session, job, 200, 384)
    assert spent["planning_s"] > 0 and spent["bound_s"] > 0
    assert (whole["level"] == Level.BOUND).sum() > 20
    pieces = concat([bound_chunk(session, job, 200, 290)[0],
                     bound_chunk(session, job, 290, 384)[0]])
    assert whole.keys() == pieces.keys()
    for name, values in whole.items():
        np.testing.assert_array_equal(values, pieces[name], err_msg=name)
    # duplicates of one plan (pools of 0 nodes make the other pool's TP irrelevant) agree
    exact, _ = exact_batch(session, job, np.array([252, 253, 258, 259]))
    assert len(set(exact["iteration_time_s"].tolist())) == 1
    assert set(exact["level"]) == {Level.EXACT} and exact["feasible"].all()


def test_exact_units_keep_the_plans_they_evaluated(spaces_dir, catalog):
    """The plan each exact point was evaluated with travels with its row (and so reaches
    plans/ without being planned again); the bound phase's rows carry none, and the
    dataset never holds them."""
    import base64

    from xsweep.search.evaluation import PLAN_TEXT, PLAN_WIRE
    from xsweep.search.space.grid import Grid
    from xsweep.search.space.planner import Planner, plan_name
    from xsweep.search.sweep.results import to_dataset
    from xsweep.spec import plan_to_text, xsweep_pb2

    session = Session()
    job = Job(load_sweep(spaces_dir / "quickstart.yaml", catalog), catalog)
    indices = np.array([0, 252, 253])  # no nodes at all, then two points of one plan
    exact, _ = exact_batch(session, job, indices)
    planner, grid = Planner(job.sweep, catalog), Grid(job.sweep)
    assert exact[PLAN_WIRE][0] == ""
    for row, index in enumerate(indices[1:].tolist(), start=1):
        planned = planner.plan(grid.point(index), plan_name(job.sweep, index)).plan
        kept = xsweep_pb2.DeploymentPlan.FromString(base64.b64decode(exact[PLAN_WIRE][row]))
        assert kept == planned and plan_to_text(kept) == plan_to_text(planned)
    assert PLAN_WIRE not in bound_chunk(session, job, 0, 8)[0]
    whole = from_rows({"point": np.arange(grid.size), "status": np.zeros(grid.size, np.int8),
                       "level": np.full(grid.size, Level.EXACT), PLAN_WIRE: [""] * grid.size,
                       PLAN_TEXT: [""] * grid.size})
    ds = to_dataset(grid, whole, {})
    assert PLAN_WIRE not in ds.data_vars and PLAN_TEXT not in ds.data_vars
    assert set(ds["level"].values.ravel()) == {"exact"}


def test_answer_plans_come_from_the_wire_column_an_older_text_column_or_the_planner(
        spaces_dir, catalog):
    """An answer's plan text is the same whether its exact unit kept the plan in the wire
    column, an earlier version's unit kept its text, or (older still) none was kept."""
    import base64

    from xsweep.search.evaluation import PLAN_TEXT, PLAN_WIRE
    from xsweep.search.space.grid import Grid
    from xsweep.search.space.planner import Planner, plan_name
    from xsweep.search.sweep.run import _answer_plans
    from xsweep.spec import plan_to_text

    sweep = load_sweep(spaces_dir / "quickstart.yaml", catalog)
    grid, planner = Grid(sweep), Planner(sweep, catalog)
    shown = [252, 314]
    plans = {i: planner.plan(grid.point(i), plan_name(sweep, i)).plan for i in shown}
    wire, text = np.full(grid.size, "", object), np.full(grid.size, "", object)
    wire[252] = base64.b64encode(plans[252].SerializeToString()).decode()
    text[314] = plan_to_text(plans[314])
    expected = {i: plan_to_text(plan) for i, plan in plans.items()}
    for table in ({PLAN_WIRE: wire, PLAN_TEXT: text}, {PLAN_WIRE: wire}, {}):
        assert _answer_plans(table, shown, sweep, catalog, grid) == expected
    wire[252] = base64.b64encode(plans[314].SerializeToString()).decode()  # read, not planned
    assert _answer_plans({PLAN_WIRE: wire}, [252], sweep, catalog, grid) == {252: expected[314]}
