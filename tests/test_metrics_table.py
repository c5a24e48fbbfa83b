"""One metrics table: the simulator's record and the batched Dataset carry its names."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import xsweep
from xsweep import metrics
from xsweep.outcome import simulate_plan
from xsweep.pipeline import prepare


@pytest.fixture(scope="module")
def plan(spaces_dir):
    return xsweep.load_plan(spaces_dir / "figure1-llama2-7b.pbtxt")  # it has total_tokens


def test_every_name_is_listed_once_with_a_unit_and_a_scope():
    names = [m.name for m in metrics.TABLE]
    assert len(names) == len(set(names))
    assert all(m.unit and m.per in (metrics.PLAN, metrics.STREAM) for m in metrics.TABLE)
    assert all(name.endswith(("_s", "_usd", "_gib", "_per_hour", "_per_s")) or
               metrics.BY_NAME[name].unit in ("1", "bool", "USD/h")
               for name in names)
    for name in metrics.plan_names():
        assert metrics.metric_of(name).name in names


def test_simulator_record_and_dataset_expose_the_same_names(plan, catalog):
    _, record = simulate_plan(prepare(plan, catalog))
    ds = xsweep.evaluate([plan], level="exact")
    plan_level = set(metrics.plan_names())
    assert plan_level <= set(record) and plan_level <= set(ds.data_vars)
    assert set(metrics.STREAM_METRICS) <= set(record["per_rank"][0])
    for name in metrics.STREAM_METRICS:
        assert ds[name].dims == ("variant", "stream")
    for name in plan_level:
        assert ds[name].attrs["units"] == metrics.metric_of(name).unit
        assert ds[name].values[0] == pytest.approx(record[name], rel=1e-4, abs=1e-9), name


def test_missing_figures_are_nan_in_both_and_null_in_json(plan, catalog):
    no_run = type(plan)()
    no_run.CopyFrom(plan)
    no_run.training.total_tokens = 0
    _, record = simulate_plan(prepare(no_run, catalog))
    ds = xsweep.evaluate([no_run], level="bound")
    for name in ("training_time_s", "cost_per_run_usd", "paper_tco"):
        assert math.isnan(record[name]) and np.isnan(ds[name].values[0]), name
    text = json.dumps(metrics.jsonable(record), allow_nan=False)
    assert json.loads(text)["cost_per_run_usd"] is None


def test_objective_directions_come_from_the_table():
    directions = metrics.directions()
    assert directions["iteration_time_s"] == "minimize" and directions["mfu"] == "maximize"
    assert directions["straggler_wait_s_max"] == "minimize"
    assert "paper_tco" not in directions and "memory_fits" not in directions
