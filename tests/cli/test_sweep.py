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


#: The exit code of a sweep whose front is empty (no feasible point), outputs written.
NOTHING_FEASIBLE = 1


def run_no_fit(run_xsweep, tmp_path, *extra):
    space = tmp_path / "space.yaml"
    if not space.exists():
        space.write_text(NO_FIT)
    return run_xsweep("sweep", space, "-o", tmp_path / "out", *extra)


def test_infeasible_points_are_kept_with_reasons(run_xsweep, tmp_path):
    result = run_no_fit(run_xsweep, tmp_path, "--json")
    assert result.returncode == NOTHING_FEASIBLE, result.stderr
    summary = json.loads(result.stdout)  # stdout holds the one document and nothing else
    assert summary["points"] == 4
    assert summary["status"] == {"infeasible": 4} and summary["level"] == {"none": 4}
    (group,) = summary["groups"]
    assert group["front"] == [] and summary["evaluated_exactly"] == 0
    assert "Traceback" not in result.stderr
    ds = xr.open_zarr(summary["outputs"]["sweep.zarr"])
    assert ds["iteration_time_s"].dims == ("a100_40gb_tp", "pp")
    assert ds["a100_40gb_tp"].values.tolist() == [4, 8]
    assert ds["a100_40gb_tp"].attrs["path"] == "parallelism.tp.A100-40GB"
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
    assert run_no_fit(run_xsweep, tmp_path).returncode == NOTHING_FEASIBLE
    again = run_no_fit(run_xsweep, tmp_path)
    assert again.returncode == NOTHING_FEASIBLE and "resuming: 1 of 1 chunks" in again.stderr
    (tmp_path / "space.yaml").write_text(NO_FIT.replace("pp: [1, 2]", "pp: [1, 2, 4]"))
    refused = run_no_fit(run_xsweep, tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.strip().count("\n") == 0 and "--overwrite" in refused.stderr
    assert "sweep file changed" in refused.stderr
    assert xr.open_zarr(tmp_path / "out" / "sweep.zarr").sizes["pp"] == 2  # untouched
    replaced = run_no_fit(run_xsweep, tmp_path, "--overwrite")
    assert replaced.returncode == NOTHING_FEASIBLE, replaced.stderr
    assert xr.open_zarr(tmp_path / "out" / "sweep.zarr").sizes["pp"] == 3


def test_a_folder_of_an_older_format_is_refused_unless_overwrite(run_xsweep, tmp_path):
    """Work files of another format (tables without a newer metric, say) are never resumed."""
    assert run_no_fit(run_xsweep, tmp_path).returncode == NOTHING_FEASIBLE
    manifest = tmp_path / "out" / "work" / "manifest.json"
    document = json.loads(manifest.read_text())
    manifest.write_text(json.dumps(document | {"format": document["format"] - 1}))
    refused = run_no_fit(run_xsweep, tmp_path)
    assert refused.returncode == 2 and "folder format changed" in refused.stderr
    assert run_no_fit(run_xsweep, tmp_path, "--overwrite").returncode == NOTHING_FEASIBLE


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


def test_no_feasible_point_says_why_and_exits_1(run_xsweep, tmp_path):
    result = run_no_fit(run_xsweep, tmp_path)
    assert result.returncode == NOTHING_FEASIBLE, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Pareto front of a100-cannot-hold-70b") and "no feasible" in lines[0]
    # 3 layouts are built and need more than the GPU's 40 GiB; pp 2 at TP 8 has 1 TP group
    assert lines[1] == ("no feasible point among 4 points: 3 do not fit in GPU memory (nearest: "
                        "139.0 of 40 GiB per A100-40GB), 1 has a pipeline depth its TP groups or "
                        "layers cannot form")
    misses = [line for line in lines if line.startswith("nearest miss: point ")]
    assert len(misses) == 3 and "139.0 GiB per GPU on A100-40GB (40 GiB)" in misses[0]
    shares = [float(line.split(" GiB per GPU")[0].rsplit(" ", 1)[1]) for line in misses]
    assert shares == sorted(shares)  # nearest first
    assert result.stderr.splitlines()[-1] == lines[1]  # one line for scripts
    for name in ("sweep.zarr", "pareto.csv", "pareto.png", "summary.json"):
        assert (tmp_path / "out" / name).exists(), name  # the outputs are written all the same
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["empty_fronts"] == 1
    found = summary["groups"][0]["infeasible"]
    assert found["points"] == 4
    assert [(k["kind"], k["points"]) for k in found["kinds"]] == [("memory", 3), ("pipeline", 1)]
    assert found["kinds"][0]["closest"] == {"point": 2, "memory_per_gpu_gib": 139.0,
                                            "gpu": "A100-40GB", "gpu_memory_gib": 40.0}
    assert [m["point"] for m in found["nearest_misses"]] == [2, 1, 0]


def test_the_dataset_reads_as_xarray_users_expect(run_xsweep, tmp_path):
    run_no_fit(run_xsweep, tmp_path)
    ds = xr.open_zarr(tmp_path / "out" / "sweep.zarr")
    for name, variable in ds.variables.items():  # data variables and coordinates
        assert {"units", "description"} <= set(variable.attrs), name
    assert ds["iteration_time_s"].attrs == {"units": "s",
                                            "description": "time of one training iteration"}
    assert ds["pp"].attrs["path"] == "parallelism.pp"  # the sweep file's dotted path
    assert ds.attrs["axis_paths"]["a100_40gb_tp"] == "parallelism.tp.A100-40GB"
    assert all(dim.isidentifier() for dim in ds.dims)
    assert ds.sel(a100_40gb_tp=8, pp=1)["reason"].values.item().startswith("does not fit")
    # text works with where, astype(str) and to_dataframe after open_zarr
    assert ds["reason"].dtype.kind == "U" and ds["status"].dtype.kind == "U"
    masked = ds.where(ds["memory_per_gpu_gib"] > 140)
    assert masked["reason"].values.ravel().tolist().count("") == 0
    assert ds["reason"].values.astype(str).shape == (2, 2)
    frame = ds.to_dataframe()
    assert frame["status"].tolist() == ["infeasible"] * 4
    assert frame.loc[(4, 1), "reason"].startswith("does not fit in GPU memory")


TWO_MODELS = NO_FIT.replace("name: a100-cannot-hold-70b", "name: two-models") \
    .replace("model: llama2-70b", "model: [llama2-70b, gpt3-175b]")


def test_a_model_axis_gives_each_model_its_front_and_reasons(run_xsweep, tmp_path):
    space = tmp_path / "two.yaml"
    space.write_text(TWO_MODELS)
    result = run_xsweep("sweep", space, "-o", tmp_path / "out")
    assert result.returncode == NOTHING_FEASIBLE, result.stderr
    text = result.stdout
    assert "Pareto fronts of two-models (iteration_time_s, cost_per_run_usd), one per model" in text
    assert "\nmodel llama2-70b: no feasible plan" in text
    assert "\nmodel gpt3-175b: no feasible plan" in text
    assert text.count("no feasible point among 4 points") == 2
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["fronts"] == "per_work" and summary["work_axes"] == ["model"]
    assert [g["work"] for g in summary["groups"]] == [{"model": "llama2-70b"},
                                                      {"model": "gpt3-175b"}]
    assert [g["points"] for g in summary["groups"]] == [4, 4]
    assert summary["axes"]["model"] == {
        "path": "model", "values": ["llama2-70b", "gpt3-175b"], "work": True, "units": "",
        "description": "model preset of the catalog"}
    assert xr.open_zarr(tmp_path / "out" / "sweep.zarr").attrs["work_axes"] == ["model"]
    space.write_text(TWO_MODELS + "fronts: across\n")
    across = run_xsweep("sweep", space, "-o", tmp_path / "across", "--json")
    (group,) = json.loads(across.stdout)["groups"]
    assert group["work"] == {} and group["points"] == 8
