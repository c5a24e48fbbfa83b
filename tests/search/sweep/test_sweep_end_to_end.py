"""``xsweep sweep`` on the quickstart space through the real CLI: the funnel's answer equals
evaluating everything exactly; Ctrl-C, SIGKILL and a Dask cluster of two worker processes
all end in the dataset of one uninterrupted run.

Slow: each run evaluates the quickstart's buildable points with the kernels. The runs
share one persistent compilation cache, so only the first compiles.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from tests.support.paths import REPO_ROOT, SPACES
from xsweep.search.evaluation import METRICS
from xsweep.search.sweep.units import bound_walk
from xsweep.spec import load_sweep

pytestmark = pytest.mark.slow

QUICKSTART = SPACES / "quickstart.yaml"
CHUNK = "48"  # several chunks, so that an interruption finds some finished and some not
TEXT = ("status", "level", "reason", "feasible", "point", "plan_digest")


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    cache = tmp_path_factory.mktemp("jax-cache")
    return {**os.environ, "XSWEEP_CACHE_DIR": str(cache)}


def start(env: dict, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "xsweep.cli.main", "sweep", str(QUICKSTART), "-o", str(out),
         "--chunk-size", CHUNK, *extra],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen, timeout_s: float = 900) -> tuple[int, str, str]:
    stdout, stderr = process.communicate(timeout=timeout_s)
    return process.returncode, stdout, stderr


def sweep(env: dict, out: Path, *extra: str) -> dict:
    code, stdout, stderr = finish(start(env, out, "--json", *extra))
    assert code == 0, stderr
    return json.loads(stdout)


def wait_for(condition, process: subprocess.Popen, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert process.poll() is None, "the sweep ended before the moment to stop it"
        assert time.monotonic() < deadline, "timed out waiting for the sweep"
        time.sleep(0.05)


def finished_chunks(out: Path) -> list[Path]:
    """The files of finished chunks (several chunks each)."""
    return sorted((out / "work" / "bound").glob("*.npz"))


def chunks_in(path: Path) -> list[tuple[int, int]]:
    """``(start, stop)`` of each chunk a file keeps, in its rows' order."""
    from xsweep.search import table as tables

    return [tuple(pair) for pair in tables.load(path)[".chunks"].tolist()]


def load(out: Path) -> xr.Dataset:
    return xr.open_zarr(out / "sweep.zarr").load()


def assert_same(a: xr.Dataset, b: xr.Dataset) -> None:
    assert set(a.data_vars) == set(b.data_vars)
    for name in a.data_vars:
        if name in TEXT:
            np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)
        else:
            # float32 rounding: a difference of two times (idle, say) keeps the rounding
            # of its terms, so the tolerance is relative to the variable's scale
            scale = np.nanmax(np.abs(b[name].values), initial=0.0)
            np.testing.assert_allclose(a[name].values, b[name].values, rtol=1e-6,
                                       atol=1e-6 * scale, err_msg=name)


@pytest.fixture(scope="module")
def reference(env, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("reference")
    return out, sweep(env, out)


def test_the_dataset_opens_with_the_swept_axes(reference):
    out, summary = reference
    ds = xr.open_zarr(out / "sweep.zarr")
    assert ds["iteration_time_s"].dims == (
        "schedule", "recompute", "h100_sxm_nodes", "a100_40gb_nodes", "h100_sxm_tp",
        "a100_40gb_tp", "pp", "pipeline_mix")
    exact = ((ds["level"] == "exact") & ds["feasible"]).values
    assert exact.sum() == summary["evaluated_exactly"] > 0
    for name in METRICS:
        assert not np.isnan(ds[name].values[exact]).any(), name
    assert set(np.unique(ds["status"].values)) <= {"ok", "pruned", "infeasible"}
    assert summary["status"]["pruned"] > 0  # the funnel saved work
    (group,) = summary["groups"]
    assert len(list((out / "plans").glob("point-*.pbtxt"))) >= len(group["front"])


def test_the_funnel_answer_equals_evaluating_everything_exactly(env, reference, tmp_path):
    _, funnel = reference
    everything = sweep(env, tmp_path, "--exhaustive")
    assert everything["status"].get("pruned", 0) == 0
    assert everything["evaluated_exactly"] > funnel["evaluated_exactly"]
    (funnel,), (everything,) = funnel["groups"], everything["groups"]
    assert [row["point"] for row in funnel["front"]] == [row["point"] for row in everything["front"]]
    for name, rows in funnel["top"].items():
        assert [r["point"] for r in rows] == [r["point"] for r in everything["top"][name]], name
    for ours, theirs in zip(funnel["front"], everything["front"], strict=True):
        assert ours.pop("axes") == theirs.pop("axes")
        assert ours.pop("same_plan") == theirs.pop("same_plan")  # the same points, each plan
        assert ours.pop("plan_digest") == theirs.pop("plan_digest")
        assert ours == pytest.approx(theirs, rel=1e-6)


def test_ctrl_c_then_rerun_resumes_to_the_same_dataset(env, reference, tmp_path):
    process = start(env, tmp_path)
    wait_for(lambda: finished_chunks(tmp_path), process)
    process.send_signal(signal.SIGINT)
    code, stdout, stderr = finish(process)
    assert code == 130, stderr
    assert "Traceback" not in stderr and "rerun the same command to resume" in stderr
    assert not (tmp_path / "sweep.zarr").exists()
    kept = {p: p.stat().st_mtime_ns for p in finished_chunks(tmp_path)}
    assert kept
    count = sum(len(chunks_in(p)) for p in kept)
    code, stdout, stderr = finish(start(env, tmp_path))
    assert code == 0, stderr
    assert f"resuming: {count} of" in stderr
    assert all(p.stat().st_mtime_ns == mtime for p, mtime in kept.items())  # not recomputed
    assert_same(load(tmp_path), load(reference[0]))


def test_sigkill_never_leaves_unfinished_points_as_finished(env, reference, tmp_path, catalog):
    process = start(env, tmp_path)
    wait_for(lambda: finished_chunks(tmp_path), process)
    process.kill()
    finish(process)
    # No dataset is published before the sweep is whole; what is kept is whole chunks.
    assert not (tmp_path / "sweep.zarr").exists()
    from xsweep.search import table as tables
    from xsweep.search.levels import Level

    walk = bound_walk(load_sweep(QUICKSTART, catalog))
    for path in finished_chunks(tmp_path):
        kept, rows = tables.load(path), 0
        assert int(path.stem) == min(begin for begin, _ in chunks_in(path))
        for begin, end in chunks_in(path):  # positions in the bound walk
            chunk = kept["point"][rows: rows + end - begin]
            rows += end - begin
            assert chunk.tolist() == walk.points(begin, end).tolist()
        assert rows == len(kept["point"])
        assert set(kept["level"]) <= {Level.CLOSED_FORM, Level.BOUND, Level.NONE}
    code, _, stderr = finish(start(env, tmp_path))
    assert code == 0, stderr
    assert_same(load(tmp_path), load(reference[0]))


def test_a_dask_cluster_of_two_workers_gives_the_same_dataset(env, reference, tmp_path):
    distributed = pytest.importorskip("distributed")
    worker_env = {"XSWEEP_CACHE_DIR": env["XSWEEP_CACHE_DIR"], "XSWEEP_CPU_DEVICES": "1"}
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  memory_limit=0, dashboard_address=None,
                                  env=worker_env) as cluster:
        summary = sweep(env, tmp_path, "--scheduler", cluster.scheduler_address)
    assert summary["evaluated_exactly"] == reference[1]["evaluated_exactly"]
    assert_same(load(tmp_path), load(reference[0]))
