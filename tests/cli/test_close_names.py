"""Through the real CLI: unknown names with the closest known ones (one line, exit 2),
names of fixed sets in any case, and the cost per million tokens as a sweep objective."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr

SPACE = """\
name: cost-per-token
model: llama2-7b
training: {global_batch_size: 16, schedule: 1F1B, recompute: None}
cluster:
  pools: [{gpu: H100, nodes: 1}]
  fabric: Rail_Optimized
parallelism:
  tp: {H100: [2, 4]}
  pp: [1, 2]
  pipeline_mix: Separate
objectives: [iteration_time_s, Cost_Per_Million_Tokens]
"""


def one_line(result) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize(("changes", "expected"), [
    ({"training: {global_batch_size: 16,": "training: {global_batch_sise: 16,"},
     "training.global_batch_sise: unknown key; did you mean 'global_batch_size'?"),
    ({"gpu: H100,": "gpu: H10,", "{H100: [2, 4]}": "{H10: [2, 4]}"},
     "cluster.pools[0].gpu: unknown gpu; did you mean 'H100-SXM'? (known: A100-40GB,"),
    ({"model: llama2-7b": "model: lama2-7b"},
     "model[0]: unknown model; did you mean 'llama2-7b'?"),
    ({"nodes: 1}": "nodes: 1, nic: cx77}"},
     "cluster.pools[0].nic[0]: unknown nic; did you mean 'cx7'?"),
    ({"Cost_Per_Million_Tokens]": "cost_per_tokens_usd]"},
     "objectives[1]: unknown objective; did you mean "),
    ({"schedule: 1F1B": "schedule: 1f1"},
     "training.schedule[0]: Input should be 'gpipe' or '1f1b'; did you mean '1f1b'?"),
])
def test_check_names_the_close_names(run_xsweep, tmp_path, changes, expected):
    text = SPACE
    for old, new in changes.items():
        assert old in text, old
        text = text.replace(old, new, 1)
    space = tmp_path / "space.yaml"
    space.write_text(text)
    line = one_line(run_xsweep("check", space))
    assert line.startswith(f"{space}: {expected}"), line


def test_an_unknown_objective_lists_them_all(run_xsweep, tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(SPACE.replace("Cost_Per_Million_Tokens]", "latency]"))
    line = one_line(run_xsweep("check", space))
    assert "unknown objective (objectives: iteration_time_s, tokens_per_s, mfu," in line
    assert "cost_per_million_tokens_usd" in line and line.endswith("(got 'latency')")


def test_plan_names_in_any_case_and_close_names(run_xsweep, spaces_dir, tmp_path):
    text = (spaces_dir / "h100x8-baseline.pbtxt").read_text()
    plan = tmp_path / "plan.pbtxt"
    plan.write_text(text.replace("schedule: ONE_F_ONE_B", "schedule: one_f_one_b")
                    .replace("kind: RAIL_OPTIMIZED", "kind: Rail_Optimized"))
    result = run_xsweep("check", plan)
    assert result.returncode == 0, result.stderr
    plan.write_text(text.replace('gpu: "H100-SXM"', 'gpu: "H100-SMX"'))
    assert "cluster.nodes[0].gpu: unknown gpu; did you mean 'H100-SXM'?" in one_line(
        run_xsweep("check", plan))
    plan.write_text(text.replace("global_batch_size:", "global_batch:"))
    assert "did you mean 'global_batch_size'?" in one_line(run_xsweep("check", plan))


def test_a_sweep_minimises_the_cost_per_million_tokens(run_xsweep, tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    result = run_xsweep("sweep", space, "-o", tmp_path / "out", "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["objectives"] == ["iteration_time_s", "cost_per_million_tokens_usd"]
    (group,) = summary["groups"]
    assert group["front"] and all(row["cost_per_million_tokens_usd"] > 0
                                  for row in group["front"])
    ds = xr.open_zarr(summary["outputs"]["sweep.zarr"])
    expected = ds["cost_rate_usd_per_hour"] / (ds["tokens_per_s"] * 3600) * 1e6
    np.testing.assert_allclose(ds["cost_per_million_tokens_usd"].values, expected.values,
                               rtol=1e-5)
    best = group["top"]["cost_per_million_tokens_usd"][0]
    assert best["cost_per_million_tokens_usd"] == pytest.approx(
        float(ds["cost_per_million_tokens_usd"].min()), rel=1e-6)
