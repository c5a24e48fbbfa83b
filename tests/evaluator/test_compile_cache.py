"""A second process with the persistent compilation cache compiles nothing: every kernel
it needs loads from the disk cache the first process filled, also when worker processes
share the plans out.

Slow: the first process compiles the kernels of both levels.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.slow

PLANS = [str(REPO_ROOT / "spaces" / name)
         for name in ("appendix-b.pbtxt", "h100x8-baseline.pbtxt")]
SCRIPT = """
import json, sys
import xsweep
evaluator = xsweep.Evaluator(processes=int(sys.argv[1]), parallel_min=2)
out = {}
for level in ("bound", "exact"):
    ds = evaluator.evaluate(sys.argv[2:], level)
    out[level] = {k: ds.attrs[k] for k in ("compiles", "compile_cache_hits")}
    out[level]["iteration_time_s"] = ds["iteration_time_s"].values.tolist()
print(json.dumps(out))
"""


def run(cache: Path, processes: int) -> dict:
    env = {**os.environ, "XSWEEP_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(processes), *PLANS], env=env,
                          cwd=REPO_ROOT, capture_output=True, text=True, check=False, timeout=900)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("processes", [1, 2])  # 2: each worker process takes one plan
def test_a_second_process_loads_every_kernel_from_the_disk_cache(tmp_path, processes):
    first, second = run(tmp_path, processes), run(tmp_path, processes)
    for level in ("bound", "exact"):
        # an empty cache at first: something compiled (a worker may load what another did)
        assert first[level]["compiles"] > first[level]["compile_cache_hits"], level
        # every kernel the second process needed came from disk: nothing compiled
        assert second[level]["compile_cache_hits"] == second[level]["compiles"] > 0, level
        assert second[level]["iteration_time_s"] == first[level]["iteration_time_s"], level
