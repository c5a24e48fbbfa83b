"""``xsweep sweep`` on worker processes, through the real CLI: range axes across several
chunks, a worker that dies mid-sweep, and every shipped space with two workers and small
chunks (``-m slow``)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest
import xarray as xr

from tests.support.paths import REPO_ROOT, SPACES
from xsweep.spec import load_sweep

# Range axes (which once could not travel to a worker process) and no point that fits, so
# no kernel runs: eight points, two per chunk, planned on two workers.
RANGES = """\
name: ranges-on-workers
model: llama2-70b
training: {global_batch_size: 16, total_tokens: 1.0e+9}
cluster:
  pools: [{gpu: A100-40GB, nodes: {low: 1, high: 2}}]
parallelism:
  tp: {A100-40GB: [4, 8]}
  pp: {low: 1, high: 2}
objectives: [iteration_time_s, cost_per_run_usd]
"""


def test_range_axes_sweep_across_chunks_on_worker_processes(run_xsweep, tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(RANGES)
    runs = {}
    for processes in (2, 1):
        out = tmp_path / f"out-{processes}"
        result = run_xsweep("sweep", space, "-o", out, "--json", "--chunk-size", "2",
                            "--processes", str(processes))
        assert result.returncode == 1, result.stderr  # no point fits
        assert "no feasible point among 8 points" in result.stderr
        assert "Traceback" not in result.stderr
        assert json.loads(result.stdout)["points"] == 8
        runs[processes] = xr.open_zarr(out / "sweep.zarr").load()
    assert runs[2]["reason"].values.tolist() == runs[1]["reason"].values.tolist()
    np.testing.assert_array_equal(runs[2]["memory_per_gpu_gib"].values,
                                  runs[1]["memory_per_gpu_gib"].values)


def _workers_of(process: psutil.Process) -> list[psutil.Process]:
    """The worker processes of ``process``: started anew (``xsweep.workers.serve``) or
    forked from it (its own command line)."""
    found = []
    for child in process.children(recursive=True):
        try:
            command = child.cmdline()
            if "xsweep.workers.serve" in " ".join(command) or command == process.cmdline():
                found.append(child)
        except psutil.Error:  # ended meanwhile
            pass
    return found


def test_a_worker_that_dies_ends_the_sweep_at_once_with_one_line(tmp_path):
    command = [sys.executable, "-m", "xsweep.cli.main", "sweep", SPACES / "search-bench.yaml",
               "-o", tmp_path / "out", "--processes", "2", "--chunk-size", "128"]
    sweep = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while len(workers := _workers_of(psutil.Process(sweep.pid))) < 2:
            assert sweep.poll() is None and time.monotonic() < deadline, "no workers started"
            time.sleep(0.05)
        time.sleep(0.2)  # at work on their first chunks (forked: at once), far from the end
        assert sweep.poll() is None
        workers[0].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        _, stderr = sweep.communicate(timeout=60)
        waited = time.monotonic() - killed
    finally:
        sweep.kill()
    assert sweep.returncode == 1, stderr
    assert waited < 30  # seconds, not a silent wait (it takes well under one here)
    last = stderr.strip().splitlines()[-1]
    # killed at work, or between two of its chunks (a forked worker takes them fast)
    assert re.fullmatch(r"a worker process ended (unexpectedly \(killed by signal 9\)|"
                        r"\(killed by signal 9\) before it took request \d+)", last), stderr
    assert "Traceback" not in stderr
    gone, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive  # the other worker was stopped too
    assert not (tmp_path / "out" / "summary.json").exists()  # nothing published


@pytest.mark.slow
@pytest.mark.parametrize("space", sorted(p.name for p in SPACES.glob("*.yaml")))
def test_every_shipped_space_sweeps_on_two_workers_in_small_chunks(space, tmp_path):
    points = load_sweep(SPACES / space).grid_size()
    chunk = min(512, points // 4)  # at least four chunks, at most 512 points each
    result = subprocess.run(
        [sys.executable, "-m", "xsweep.cli.main", "sweep", SPACES / space, "-o",
         tmp_path / "out", "--json", "--processes", "2", "--chunk-size", str(chunk)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    summary = json.loads(result.stdout)
    assert summary["points"] == points >= 4 * chunk  # several chunks
    assert summary["groups"][0]["front"] and summary["evaluated_exactly"] > 0
