"""Importing xsweep splits a CPU host into XLA devices, unless a count is already chosen."""

import os
import subprocess
import sys

import pytest

_COUNT = "import xsweep, jax; print(jax.device_count())"


def _devices(**env: str) -> int:
    clean = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "XSWEEP_CPU_DEVICES")}
    run = subprocess.run([sys.executable, "-c", _COUNT], env=clean | {"JAX_PLATFORMS": "cpu"} | env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    return int(run.stdout.strip().splitlines()[-1])


def test_one_device_per_core_by_default():
    assert _devices() == len(os.sched_getaffinity(0))


@pytest.mark.parametrize(("env", "expected"), [
    ({"XSWEEP_CPU_DEVICES": "3"}, 3),
    ({"XSWEEP_CPU_DEVICES": "0"}, 1),
    ({"XLA_FLAGS": "--xla_force_host_platform_device_count=5", "XSWEEP_CPU_DEVICES": "3"}, 5),
])
def test_a_chosen_count_wins(env, expected):
    assert _devices(**env) == expected
