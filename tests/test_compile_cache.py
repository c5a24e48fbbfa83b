"""A second process with the persistent compilation cache compiles nothing: every kernel
it needs loads from the disk cache the first process filled.

Slow: the first process compiles the kernels of both levels.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[1]
PLANS = [str(REPO_ROOT / "spaces" / name)
         for name in ("appendix-b.pbtxt", "h100x8-baseline.pbtxt")]
SCRIPT = """
import json, sys
import xsweep
evaluator = xsweep.Evaluator(processes=1)
out = {}
for level in ("bound", "exact"):
    ds = evaluator.evaluate(sys.argv[1:], level)
    out[level] = {k: ds.attrs[k] for k in ("compiles", "compile_cache_hits")}
    out[level]["iteration_time_s"] = ds["iteration_time_s"].values.tolist()
print(json.dumps(out))
"""


def run(cache: Path) -> dict:
    env = {**os.environ, "XSWEEP_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, *PLANS], env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True, check=False, timeout=900)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_second_process_loads_every_kernel_from_the_disk_cache(tmp_path):
    first, second = run(tmp_path), run(tmp_path)
    for level in ("bound", "exact"):
        assert first[level]["compiles"] > 0, level
        assert first[level]["compile_cache_hits"] == 0, level  # an empty cache at first
        # every kernel the second process needed came from disk: nothing compiled
        assert second[level]["compile_cache_hits"] == second[level]["compiles"] > 0, level
        assert second[level]["iteration_time_s"] == first[level]["iteration_time_s"], level
