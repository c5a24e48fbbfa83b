"""Splitting a CPU host into XLA devices is an explicit step; importing xsweep changes
nothing in the environment."""

import os
import subprocess
import sys

import pytest

_COUNT = "import xsweep, jax; xsweep.use_cpu_devices(); print(jax.device_count())"
_ENVIRON = ("import os, json; before = dict(os.environ); import xsweep, xsweep.cli.main; "
            "print(json.dumps(dict(os.environ) == before))")


def _run(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "XSWEEP_CPU_DEVICES")}
    run = subprocess.run([sys.executable, "-c", code], env=clean | {"JAX_PLATFORMS": "cpu"} | env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip().splitlines()[-1]


def test_importing_xsweep_leaves_the_environment_alone():
    assert _run(_ENVIRON) == "true"


def test_one_device_per_core_by_default():
    assert int(_run(_COUNT)) == len(os.sched_getaffinity(0))


def test_without_the_step_jax_keeps_one_cpu_device():
    assert int(_run("import xsweep, jax; print(jax.device_count())")) == 1


@pytest.mark.parametrize(("env", "expected"), [
    ({"XSWEEP_CPU_DEVICES": "3"}, 3),
    ({"XSWEEP_CPU_DEVICES": "0"}, 1),
    ({"XLA_FLAGS": "--xla_force_host_platform_device_count=5", "XSWEEP_CPU_DEVICES": "3"}, 5),
])
def test_a_chosen_count_wins(env, expected):
    assert int(_run(_COUNT, **env)) == expected


def test_too_late_is_refused_without_harm():
    code = ("import xsweep, jax; jax.devices(); "
            "print(xsweep.use_cpu_devices(3), jax.device_count())")
    assert _run(code) == "False 1"


def test_an_evaluator_splits_the_host_before_jax_starts():
    code = "import xsweep, jax; xsweep.Evaluator(cpu_devices=3); print(jax.device_count())"
    assert int(_run(code)) == 3
