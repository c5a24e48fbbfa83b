"""Through the real CLI: a plan with context parallelism simulates, a bad one is refused in
one line (exit 2), and a sweep takes ``parallelism.cp`` as an axis, with the planner's
reason for the points it cannot build."""

from __future__ import annotations

import json

import numpy as np
import xarray as xr

SWEEP = """\
name: context-parallel
model: llama2-7b
training: {global_batch_size: 16}
cluster:
  pools: [{gpu: H100-SXM, nodes: 1}]
parallelism:
  tp: {H100-SXM: 2}
  cp: [1, 2, 8]
"""


def one_line(result) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_cp_plan_simulates_and_a_bad_one_is_refused(run_xsweep, spaces_dir, tmp_path):
    path = spaces_dir / "published" / "nemo-llama3-8b-h100x8.pbtxt"
    result = run_xsweep("simulate", path, "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    # 8 GPUs in groups of TP 1 x CP 2: 32 micro-batches of one 8192-token sequence per
    # replica, 128 sequences an iteration
    assert record["iteration_time_s"] > 0
    tokens = record["tokens_per_s"] * record["iteration_time_s"]
    assert abs(tokens / (128 * 8192) - 1) < 1e-12
    text = path.read_text()
    assert text.count("context_parallel: 2") == 4
    bad = tmp_path / "bad.pbtxt"
    bad.write_text(text.replace("context_parallel: 2", "context_parallel: 3", 1))
    for command in ("check", "simulate"):
        line = one_line(run_xsweep(command, bad))
        assert line.startswith(f"{bad}: device_groups[0].context_parallel: must be at least 1 "
                               "and divide the group's 2 ranks"), line


def test_a_sweep_over_cp(run_xsweep, tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(SWEEP)
    result = run_xsweep("sweep", space, "-o", tmp_path / "out", "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    points = xr.open_zarr(summary["outputs"]["sweep.zarr"]).load().to_dataframe().reset_index()
    by_cp = {int(row["cp"]): row for _, row in points.iterrows()}
    assert set(by_cp) == {1, 2, 8}
    assert by_cp[1]["feasible"] and by_cp[2]["feasible"] and not by_cp[8]["feasible"]
    assert by_cp[8]["reason"] == "CP 8 x TP 2 does not fit the 8 GPUs of a H100-SXM node evenly"
    # the same 8 GPUs: with CP 2 half the replicas, each sequence split over two ranks
    assert np.isfinite(by_cp[2]["iteration_time_s"])
    assert by_cp[2]["memory_per_gpu_gib"] < by_cp[1]["memory_per_gpu_gib"]
    kinds = {entry["kind"]: entry for entry in summary["groups"][0]["infeasible"]["kinds"]}
    assert kinds["cp"]["text"] == "1 breaks a rule of context parallelism"
