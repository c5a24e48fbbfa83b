"""Fixtures of the report's tests: a real two-model sweep, run once, and validated."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT
from tests.support.sweeps import TINY

#: Two models, so two work groups and two fronts; 128 points, a few seconds on one core.
TWO_MODELS = """\
name: report-two-models
model: [llama2-7b, llama2-13b]
training:
  global_batch_size: 32
  schedule: 1f1b
  recompute: [none, full]
  total_tokens: 2.0e+12
cluster:
  fabric: rail_optimized
  pools:
    - {gpu: H100-SXM, nodes: 1, gpus_per_node: 8, nic: cx7}
    - {gpu: A100-40GB, nodes: [0, 1], gpus_per_node: 8}
parallelism:
  tp: {H100-SXM: [2, 4], A100-40GB: [2, 4]}
  pp: [1, 2]
  micro_batch_size: 1
  pipeline_mix: [separate, mixed]
  layer_split: proportional
cost: {pricing: capex, amortization_years: 4, electricity_usd_per_kwh: 0.10, pue: 1.3}
objectives: [iteration_time_s, cost_per_run_usd]
validate: {top: 1, tolerance: 0.05}
"""


def xsweep(*args: object, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    """``python -m xsweep.cli.main ARGS`` in a subprocess."""
    return subprocess.run([sys.executable, "-m", "xsweep.cli.main", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="session")
def two_models(tmp_path_factory) -> Path:
    """The folder of the two-model sweep, validated (``validate/`` inside), no report yet."""
    root = tmp_path_factory.mktemp("report")
    (root / "two.yaml").write_text(TWO_MODELS)
    folder = root / "sweep"
    for args in (("sweep", root / "two.yaml", "-o", folder, "--processes", "1"),
                 ("validate", folder)):
        done = xsweep(*args)
        assert done.returncode == 0, done.stderr
    return folder


@pytest.fixture(scope="session")
def study(tmp_path_factory) -> Path:
    """The folder of a small Optuna study (``xsweep optimize``), no report yet."""
    root = tmp_path_factory.mktemp("study")
    (root / "tiny.yaml").write_text(TINY)
    folder = root / "study"
    done = xsweep("optimize", root / "tiny.yaml", "--trials", 16, "--batch", 8, "-o", folder)
    assert done.returncode == 0, done.stderr
    return folder
