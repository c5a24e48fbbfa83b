"""``xsweep sweep`` through the real CLI on spaces that need no kernel (every point is
infeasible), so they run in seconds: reasons, the dataset's layout, JSON, refusal, plans."""

from __future__ import annotations

import json

import numpy as np
import xarray as xr

from xsweep.spec import load_plan

# Llama-2-70B cannot fit on one node of A100-40GB at any of these layouts.
NO_FIT = """\
name: a100-cannot-hold-70b
model: llama2-70b
training: {global_batch_size: 16, total_tokens: 1.0e+9}
cluster:
  pools: [{gpu: A100-40GB, nodes: 1}]
parallelism:
  tp: {A100-40GB: [4, 8]}
  pp: [1, 2]
objectives: [iteration_time_s, cost_per_run_usd]
"""


def run_no_fit(run_xsweep, tmp_path, *extra):
    space = tmp_path / "space.yaml"
    if not space.exists():
        space.write_text(NO_FIT)
    return run_xsweep("sweep", space, "-o", tmp_path / "out", *extra)


def test_infeasible_points_are_kept_with_reasons(run_xsweep, tmp_path):
    result = run_no_fit(run_xsweep, tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)  # stdout holds the one document and nothing else
    assert summary["points"] == 4
    assert summary["status"] == {"infeasible": 4} and summary["level"] == {"none": 4}
    assert summary["front"] == [] and summary["evaluated_exactly"] == 0
    assert "Traceback" not in result.stderr
    ds = xr.open_zarr(summary["outputs"]["sweep.zarr"])
    assert ds["iteration_time_s"].dims == ("parallelism.tp.A100-40GB", "parallelism.pp")
    assert ds["parallelism.tp.A100-40GB"].values.tolist() == [4, 8]
    assert str(ds["model"].values) == "llama2-70b"  # a single-value axis: a scalar coordinate
    assert not ds["feasible"].values.any()
    reasons = ds["reason"].values
    assert reasons[0, 0].startswith("does not fit in GPU memory") and "A100-40GB (40 GiB)" in reasons[0, 0]
    assert reasons[1, 1] == "pool A100-40GB has 1 TP groups (TP 8 on 1 x 8 GPUs), fewer than pp 2"
    memory = ds["memory_per_gpu_gib"].values
    assert memory[0, 0] > 40 and np.isnan(memory[1, 1])
    assert ds["point"].values.tolist() == [[0, 1], [2, 3]]
    assert ds.attrs["sweep_yaml"] == NO_FIT and ds.attrs["catalog_version"].startswith("sha256:")
    assert (tmp_path / "out" / "pareto.png").read_bytes()[:4] == b"\x89PNG"


def test_a_changed_sweep_is_refused_unless_overwrite(run_xsweep, tmp_path):
    assert run_no_fit(run_xsweep, tmp_path).returncode == 0
    again = run_no_fit(run_xsweep, tmp_path)
    assert again.returncode == 0 and "resuming: 1 of 1 chunks" in again.stderr
    (tmp_path / "space.yaml").write_text(NO_FIT.replace("pp: [1, 2]", "pp: [1, 2, 4]"))
    refused = run_no_fit(run_xsweep, tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.strip().count("\n") == 0 and "--overwrite" in refused.stderr
    assert "sweep file changed" in refused.stderr
    assert xr.open_zarr(tmp_path / "out" / "sweep.zarr").sizes["parallelism.pp"] == 2  # untouched
    replaced = run_no_fit(run_xsweep, tmp_path, "--overwrite")
    assert replaced.returncode == 0, replaced.stderr
    assert xr.open_zarr(tmp_path / "out" / "sweep.zarr").sizes["parallelism.pp"] == 3


def test_emit_plan_prints_a_valid_plan(run_xsweep, spaces_dir, tmp_path):
    quickstart = spaces_dir / "quickstart.yaml"
    result = run_xsweep("sweep", quickstart, "--emit-plan", "285")
    assert result.returncode == 0, result.stderr
    (tmp_path / "p.pbtxt").write_text(result.stdout)
    plan = load_plan(tmp_path / "p.pbtxt")  # validates it, as `xsweep check` does
    assert plan.name == "quickstart-llama2-7b-p285" and len(plan.cluster.nodes) == 2
    empty = run_xsweep("sweep", quickstart, "--emit-plan", "0")  # no nodes at all
    assert empty.returncode == 1 and "empty cluster" in empty.stderr
    outside = run_xsweep("sweep", quickstart, "--emit-plan", "100000")
    assert outside.returncode == 2 and "point" in outside.stderr


def test_bad_sweep_is_one_line(run_xsweep, tmp_path):
    space = tmp_path / "bad.yaml"
    space.write_text(NO_FIT.replace("pp: [1, 2]", "pp: [0]"))
    result = run_xsweep("sweep", space, "-o", tmp_path / "out")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "parallelism.pp" in result.stderr
    assert not (tmp_path / "out").exists()
