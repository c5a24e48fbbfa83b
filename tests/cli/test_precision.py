"""Through the real CLI: FP8 in a plan and in a sweep; FP8 where a GPU has no FP8 tensor
cores is refused (a plan: one line, exit 2) or infeasible with its reason (a sweep point);
an unknown precision is refused with the close name."""

from __future__ import annotations

import json

import numpy as np
import xarray as xr

SWEEP = """\
name: precision
model: llama2-7b
training: {global_batch_size: 16, precision: [bf16, fp8]}
cluster:
  pools: [{gpu: H100-SXM, nodes: [0, 1]}, {gpu: A100-40GB, nodes: [0, 1]}]
parallelism:
  tp: {H100-SXM: 4, A100-40GB: 4}
  pp: 2
"""


def one_line(result) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def with_precision(text: str, value: str) -> str:
    assert "training {\n" in text
    return text.replace("training {\n", f"training {{\n  precision: {value}\n")


def test_a_plan_in_fp8_simulates_faster_on_h100(run_xsweep, spaces_dir, tmp_path):
    text = (spaces_dir / "h100x8-baseline.pbtxt").read_text()
    records = {}
    for precision in ("BF16", "FP8"):
        plan = tmp_path / f"{precision}.pbtxt"
        plan.write_text(with_precision(text, precision))
        result = run_xsweep("simulate", plan, "--json")
        assert result.returncode == 0, result.stderr
        records[precision] = json.loads(result.stdout)
    # Hopper's FP8 GEMMs run 1.32x BF16's (calibrated, docs/validation.md); attention,
    # norms and the casts do not speed up
    assert records["FP8"]["iteration_time_s"] < 0.9 * records["BF16"]["iteration_time_s"]
    assert records["FP8"]["tokens_per_s"] > records["BF16"]["tokens_per_s"]


def test_a_plan_in_fp8_on_a100_is_refused_in_one_line(run_xsweep, spaces_dir, tmp_path):
    text = (spaces_dir / "h100x8-baseline.pbtxt").read_text().replace("H100-SXM", "A100-80GB")
    plan = tmp_path / "a100.pbtxt"
    plan.write_text(with_precision(text, "FP8"))
    for command in ("simulate", "check"):
        line = one_line(run_xsweep(command, plan))
        assert line.startswith(f"{plan}: training.precision: needs FP8 tensor cores"), line
        assert "A100-80GB of cluster.nodes[0]" in line and line.endswith("(got 'FP8')")


def test_an_unknown_precision_names_the_close_one(run_xsweep, spaces_dir, tmp_path):
    plan = tmp_path / "fp4.pbtxt"
    plan.write_text(with_precision((spaces_dir / "h100x8-baseline.pbtxt").read_text(), "FP4"))
    line = one_line(run_xsweep("check", plan))
    assert "has no value named FP4; did you mean 'FP8'? (expected one of BF16, FP8)" in line
    space = tmp_path / "space.yaml"
    space.write_text(SWEEP.replace("[bf16, fp8]", "[bf16, fp4]"))
    line = one_line(run_xsweep("check", space))
    assert line.startswith(f"{space}: training.precision[1]: Input should be 'bf16' or "
                           "'fp8'; did you mean 'fp8'?"), line


def test_a_sweep_over_precision(run_xsweep, tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(SWEEP)
    result = run_xsweep("sweep", space, "-o", tmp_path / "out", "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    ds = xr.open_zarr(summary["outputs"]["sweep.zarr"]).load()
    points = ds.to_dataframe().reset_index()
    h100 = points[(points["h100_sxm_nodes"] == 1) & (points["a100_40gb_nodes"] == 0)]
    time = {row["precision"]: row["iteration_time_s"] for _, row in h100.iterrows()}
    assert set(time) == {"bf16", "fp8"} and np.isfinite(list(time.values())).all()
    assert time["fp8"] < time["bf16"]
    # every FP8 point with an A100 node is infeasible, with the reason
    a100 = points[(points["a100_40gb_nodes"] == 1) & (points["precision"] == "fp8")]
    assert len(a100) == 2 and not a100["feasible"].any()
    assert all(reason.startswith("FP8 needs FP8 tensor cores, and pool A100-40GB")
               for reason in a100["reason"])
    # and the BF16 points with A100 nodes are built and evaluated
    assert points[(points["a100_40gb_nodes"] == 1) & (points["precision"] == "bf16")][
        "feasible"].all()
    kinds = {entry["kind"]: entry for entry in summary["groups"][0]["infeasible"]["kinds"]}
    assert kinds["precision"]["points"] == 2
    assert kinds["precision"]["text"] == "2 ask for FP8 on a GPU without FP8 tensor cores"
