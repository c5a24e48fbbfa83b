"""Through the real CLI: the software profile a plan or sweep runs under is named in every
output (simulate's record and text, the sweep's printed front, summary.json, dataset and
report page), and an unknown profile is refused in one line with exit code 2."""

from __future__ import annotations

import json

import xarray as xr

SLOW = "software:\n  slow-stack-1.0: {gemm_factor: 0.8, attention_factor: 0.9}\n"

SWEEP = """\
name: software
model: llama2-7b
training: {global_batch_size: 8, software: [reference, slow-stack-1.0]}
cluster:
  pools: [{gpu: H100-SXM, nodes: 1}]
parallelism:
  tp: {H100-SXM: 8}
objectives: [iteration_time_s, cost_per_million_tokens_usd]
"""


def one_line(result) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def naming(spaces_dir, tmp_path, software: str):
    text = (spaces_dir / "h100x8-baseline.pbtxt").read_text()
    assert "training {\n" in text
    plan = tmp_path / "plan.pbtxt"
    plan.write_text(text.replace("training {\n", f'training {{\n  software: "{software}"\n'))
    return plan


def test_simulate_and_plan_name_the_profile_in_their_records_and_text(run_xsweep, spaces_dir, tmp_path):
    plan = naming(spaces_dir, tmp_path, "nemo-2407")
    record = json.loads(run_xsweep("simulate", plan, "--json").stdout)
    assert record["software"] == {"name": "nemo-24.07", "gemm_factor": 1.0,
                                  "attention_factor": 1.0}
    text = run_xsweep("simulate", plan).stdout
    assert "software profile: nemo-24.07 (factors 1)" in text.splitlines()[:3]
    plain = run_xsweep("simulate", spaces_dir / "h100x8-baseline.pbtxt").stdout
    assert "software profile: reference (factors 1)" in plain
    analysed = run_xsweep("plan", plan, "--json")
    assert json.loads(analysed.stdout)["stack"]["software"]["name"] == "nemo-24.07"
    assert "software profile: nemo-24.07 (factors 1)" in run_xsweep("plan", plan).stdout


def test_an_unknown_profile_is_refused_in_one_line(run_xsweep, spaces_dir, tmp_path):
    plan = naming(spaces_dir, tmp_path, "colossal-ai-0.3")
    for command in ("simulate", "check", "plan"):
        line = one_line(run_xsweep(command, plan))
        assert line.startswith(f"{plan}: training.software: unknown software profile"), line
        assert line.endswith("(got 'colossal-ai-0.3')")


def test_a_sweep_over_profiles_names_them_in_every_output(run_xsweep, tmp_path):
    catalog, space = tmp_path / "slow.yaml", tmp_path / "space.yaml"
    catalog.write_text(SLOW)
    space.write_text(SWEEP)
    out = tmp_path / "out"
    result = run_xsweep("sweep", space, "-o", out, "--catalog", catalog)
    assert result.returncode == 0, result.stderr
    assert ("software profile: reference (factors 1); slow-stack-1.0 (GEMM x0.8, "
            "attention x0.9)") in result.stdout
    header = next(line for line in result.stdout.splitlines() if line.startswith("point"))
    assert "software" in header.split()
    summary = json.loads((out / "summary.json").read_text())
    assert [s["name"] for s in summary["software"]] == ["reference", "slow-stack-1.0"]
    ds = xr.open_zarr(out / "sweep.zarr")
    assert ds.attrs["software"] == "reference, slow-stack-1.0"
    assert ds["software"].values.tolist() == ["reference", "slow-stack-1.0"]
    times = ds["iteration_time_s"].sel(software=["reference", "slow-stack-1.0"]).values
    assert times[1] > 1.1 * times[0]  # the slower stack's plan, same layout
    assert run_xsweep("report", out, "--catalog", catalog).returncode == 0
    page = (out / "report.html").read_text()
    assert "Software profile: reference (factors 1); slow-stack-1.0 (GEMM x0.8" in page
