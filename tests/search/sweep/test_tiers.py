"""The tiers of a sweep's funnel (closed form, bound, exact) give the answer of evaluating
every buildable point exactly, while the closed form spares most points their lowering."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from xsweep.search.sweep.run import Options, run_sweep

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


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiers")
    path = folder / "tiers.yaml"
    path.write_text(SPACE)
    funnel = run_sweep(path, Options(out_dir=folder / "funnel", processes=1, lowered_top=2))
    everything = run_sweep(path, Options(out_dir=folder / "all", processes=1, exhaustive=True))
    return funnel, everything


def test_the_answer_is_that_of_evaluating_everything_exactly(runs):
    funnel, everything = runs
    (ours,), (theirs,) = funnel.summary["groups"], everything.summary["groups"]
    assert [r["point"] for r in ours["front"]] == [r["point"] for r in theirs["front"]]
    for name, rows in ours["top"].items():
        assert [r["point"] for r in rows] == [r["point"] for r in theirs["top"][name]], name
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
