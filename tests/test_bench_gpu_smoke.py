"""The GPU benchmark's prepared run works on a CPU-only machine (a smoke run): every
section prints, and it says which figures need a GPU."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.paths import REPO_ROOT


@pytest.mark.slow
def test_bench_gpu_runs_on_a_cpu_and_says_what_needs_a_gpu():
    run = subprocess.run([sys.executable, "benchmarks/bench_gpu.py", "--quick", "--budget-s",
                          "240"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
                         check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    out = run.stdout
    assert "need a GPU host" in out
    for section in ("1-2. kernels alone", "3. end to end", "4. the large space",
                    "5. HLO proxies"):
        assert section in out, section
    assert "ops per step lowered" in out and "variants/s warm" in out
