"""The tiers of a sweep's funnel (closed form, bound, exact) give the answer of evaluating
every buildable point exactly, while the closed form spares most points their lowering."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from xsweep.search.closed_form import iteration_lower_bound
from xsweep.search.sweep.run import Options, plan_of, run_sweep
from xsweep.spec import load_catalog

SPACE = """\
name: tiers
model: llama2-7b
training:
  global_batch_size: 32
  schedule: 1f1b
  recompute: [none, selective, full]
  virtual_pipeline_stages: [1, 2]
  total_tokens: 1.0e+9
cluster:
  pools: [{gpu: H100-SXM, nodes: 2}]
parallelism:
  tp: {H100-SXM: [1, 2, 4, 8]}
  pp: [1, 2, 4]
  micro_batch_size: [1, 2, 4]
objectives: [iteration_time_s]
validate: {top: 2}
"""


def funnel_and_exhaustive(tmp_path_factory, name: str, text: str):
    """The space ``text`` (written as ``name``.yaml), swept with the funnel and with
    ``--exhaustive``: its path and both outcomes."""
    folder = tmp_path_factory.mktemp(name)
    path = folder / f"{name}.yaml"
    path.write_text(text)
    funnel = run_sweep(path, Options(out_dir=folder / "funnel", processes=1, lowered_top=2))
    everything = run_sweep(path, Options(out_dir=folder / "all", processes=1, exhaustive=True))
    return path, funnel, everything


def assert_same_answer(funnel, everything) -> tuple[dict, dict]:
    """The two runs' fronts and each objective's top points are the same points; returns
    their groups."""
    (ours,), (theirs,) = funnel.summary["groups"], everything.summary["groups"]
    assert [r["point"] for r in ours["front"]] == [r["point"] for r in theirs["front"]]
    for name, rows in ours["top"].items():
        assert [r["point"] for r in rows] == [r["point"] for r in theirs["top"][name]], name
    return ours, theirs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return funnel_and_exhaustive(tmp_path_factory, "tiers", SPACE)[1:]


def test_the_answer_is_that_of_evaluating_everything_exactly(runs):
    ours, theirs = assert_same_answer(*runs)
    for a, b in zip(ours["front"], theirs["front"], strict=True):
        assert a["iteration_time_s"] == pytest.approx(b["iteration_time_s"], rel=1e-6)


def test_the_closed_form_spares_lowering(runs):
    funnel, everything = runs
    tiers, all_tiers = funnel.summary["tiers"], everything.summary["tiers"]
    assert tiers["closed_form"] == all_tiers["closed_form"] == all_tiers["bound"]
    assert all_tiers["exact"] == all_tiers["bound"]
    assert tiers["exact"] <= tiers["bound"] < tiers["closed_form"]
    ds = xr.open_zarr(funnel.folder / "sweep.zarr")
    level = ds["level"].values.reshape(-1)
    stopped = level == "closed_form"
    assert stopped.sum() == tiers["closed_form"] - tiers["bound"]
    assert set(ds["status"].values.reshape(-1)[stopped]) == {"pruned"}
    assert ds.attrs["tier_bound"] == tiers["bound"]
    # a point stopped at the closed form keeps lower bounds on its time and costs, and no
    # metric without a closed form
    for name in ("iteration_time_s", "cost_per_run_usd"):
        assert np.isfinite(ds[name].values.reshape(-1)[stopped]).all(), name
    assert np.isnan(ds["mfu"].values.reshape(-1)[stopped]).all()


# Mixtral with EP groups over 2 to 8 nodes of 2 or 4 GPUs, under a slow and a fast NIC:
# points of one layout differ in what their all-to-alls cost across nodes.
MOE_SPACE = """\
name: tiers-moe
model: mixtral-8x7b
training:
  global_batch_size: 64
  schedule: 1f1b
  recompute: full
  zero_stage: 1
cluster:
  pools:
    - {gpu: H100-SXM, nodes: [4, 8], gpus_per_node: [2, 4], nic: [eth10g, cx7]}
parallelism:
  tp: {H100-SXM: [1, 2]}
  pp: [1, 2]
  ep: [4, 8]
  micro_batch_size: 1
objectives: [iteration_time_s]
validate: {top: 3}
"""


@pytest.fixture(scope="module")
def moe_runs(tmp_path_factory):
    return funnel_and_exhaustive(tmp_path_factory, "tiers-moe", MOE_SPACE)


def test_points_of_one_layout_keep_their_own_bound_under_expert_parallelism(moe_runs):
    """The closed form of a point whose all-to-alls cross nodes depends on its NIC, a
    per-point field: a layout's first point's bound is not the others' (a cx7 point given
    its 10 GbE twin's bound was pruned, though it was the fastest plan)."""
    path, funnel, everything = moe_runs
    assert_same_answer(funnel, everything)
    ds = xr.open_zarr(funnel.folder / "sweep.zarr")
    level = ds["level"].values.reshape(-1)
    seconds = ds["iteration_time_s"].values.reshape(-1)
    exact = xr.open_zarr(everything.folder / "sweep.zarr")["iteration_time_s"].values.reshape(-1)
    stopped = np.flatnonzero(level == "closed_form")
    assert len(stopped) > 10
    catalog = load_catalog()
    for point in stopped.tolist():
        plan = plan_of(path, point).plan
        assert seconds[point] == pytest.approx(iteration_lower_bound(plan, catalog), rel=1e-12)
        assert seconds[point] <= exact[point], point
    nics = {plan_of(path, int(p)).plan.cluster.nodes[0].nic for p in stopped}
    assert nics == {"eth10g", "cx7"}
