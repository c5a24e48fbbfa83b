"""An accelerator host's code path, run on CPU devices (``platform="gpu"``): worker
processes prepare plans on the CPU and never load JAX, this process owns the device and
runs every kernel, and the answers are those of a CPU host."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import xsweep
from tests.support.paths import SPACES
from xsweep.evaluator import default_evaluator
from xsweep.plan.builder import random_plan
from xsweep.search.evaluation import Session
from xsweep.search.sweep.run import Options, _host, run_sweep

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads /proc/PID/maps and /proc/PID/environ")


def jax_free(pid: int) -> bool:
    """Whether process ``pid`` runs with JAX on the CPU only and has not loaded JAX's
    compiled library (so no backend of any platform is open in it)."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    maps = Path(f"/proc/{pid}/maps").read_text()
    return b"JAX_PLATFORMS=cpu" in environ and "jaxlib" not in maps


def numeric(ds: xr.Dataset) -> dict[str, np.ndarray]:
    return {name: var.values for name, var in ds.data_vars.items() if var.dtype.kind in "fiub"}


@linux_only
def test_workers_prepare_and_this_process_runs_the_kernels():
    plans = [random_plan(seed) for seed in range(12)]
    alone = xsweep.Evaluator(platform="gpu", processes=1).evaluate(plans, level="bound")
    host = xsweep.Evaluator(platform="gpu", processes=2, parallel_min=1)
    try:
        shared = host.evaluate(plans, level="bound")
        pids = host._workers.pids()
        assert len(pids) == 2 and all(jax_free(pid) for pid in pids)
    finally:
        host.close()
    assert list(shared["name"].values) == list(alone["name"].values)
    for name, values in numeric(alone).items():
        np.testing.assert_array_equal(numeric(shared)[name], values, err_msg=name)
    assert shared.attrs["prepare_s"] > 0 and shared.attrs["kernels_s"] > 0


def sweep_both_ways(space: Path, tmp_path: Path) -> tuple[dict, list[int]]:
    """The sweep's dataset on an accelerator host's path and on a CPU host's, and the
    process ids of the accelerator host's preparing workers (while they still run: the
    session, and so its evaluator, is the test's)."""
    found, pids = {}, []
    for platform in ("gpu", "cpu"):
        session = Session(xsweep.Evaluator(platform=platform, processes=2))
        try:
            outcome = run_sweep(space, Options(out_dir=tmp_path / platform, platform=platform,
                                               processes=2), session=session)
            found[platform] = xr.open_zarr(outcome.folder / "sweep.zarr").load()
            if platform == "gpu":
                pids = [pid for pid in session.evaluator._workers.pids() if jax_free(pid)]
        finally:
            session.evaluator.close()
    gpu, cpu = found["gpu"], found["cpu"]
    np.testing.assert_array_equal(gpu["status"].values, cpu["status"].values)
    np.testing.assert_allclose(gpu["iteration_time_s"].values, cpu["iteration_time_s"].values,
                               rtol=1e-6)
    assert gpu.attrs["evaluated_exactly"] == cpu.attrs["evaluated_exactly"]
    for tier in ("planned", "closed_form", "bound", "exact"):  # the same points each tier
        assert gpu.attrs[f"tier_{tier}"] == cpu.attrs[f"tier_{tier}"], tier
    return found, pids


def test_a_sweep_on_an_accelerator_host_answers_as_on_a_cpu_host(tmp_path):
    """The closed-form tier works there as here: only the points it leaves are lowered
    (by the preparing workers) and sent to the device."""
    found, _ = sweep_both_ways(SPACES / "quickstart.yaml", tmp_path)
    attrs = found["gpu"].attrs
    assert 0 < attrs["tier_bound"] < attrs["tier_closed_form"]
    lowered = np.isin(found["gpu"]["level"].values, ("bound", "exact")).sum()
    assert lowered == attrs["tier_bound"]


@linux_only
@pytest.mark.slow
def test_a_large_sweep_on_an_accelerator_host_prepares_on_jax_free_workers(tmp_path):
    """Units large enough for the preparing workers (thousands of buildable points, all
    lowered: an objective without a closed form, MFU, takes the closed-form tier away)."""
    space = tmp_path / "search-bench-mfu.yaml"
    text = (SPACES / "search-bench.yaml").read_text()
    old = "objectives: [iteration_time_s, cost_per_run_usd]"
    assert old in text
    space.write_text(text.replace(old, "objectives: [iteration_time_s, mfu]"))
    _, pids = sweep_both_ways(space, tmp_path)
    assert len(pids) == 2


def test_a_run_closes_the_accelerator_evaluator_it_made_and_keeps_a_given_session():
    """Without a session, the options decide: an accelerator host's path (or its preparing
    processes) gets an evaluator of the run's own, which the run closes; a CPU host's runs
    in a session over the process's default evaluator. A session given is the run's."""
    platform, session, made = _host(Options(platform="gpu", processes=2), None)
    try:
        assert (platform, session.evaluator.platform, made) == ("gpu", "gpu", True)
    finally:
        session.evaluator.close()
    platform, session, made = _host(Options(platform="cpu", processes=2), None)
    assert (platform, made) == ("cpu", False) and session.evaluator is default_evaluator()
    given = Session(session.evaluator)
    assert _host(Options(processes=2), given) == ("cpu", given, False)
    with pytest.raises(ValueError, match="evaluates on 'cpu'"):
        _host(Options(platform="gpu"), given)


def test_a_cpu_host_is_known_without_starting_jax(tmp_path, monkeypatch):
    """No accelerator plugin, or JAX told to use the CPU: a CPU host, decided without
    JAX (a sweep of infeasible points never starts it). A plugin installed: only JAX's
    devices can tell."""
    import importlib

    from xsweep.runtime import accelerator_possible

    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    plugin = tmp_path / "jax_plugins" / "xla_fake_accelerator"
    plugin.mkdir(parents=True)
    (plugin / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    monkeypatch.delitem(sys.modules, "jax_plugins", raising=False)
    assert accelerator_possible()
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    assert not accelerator_possible()
    monkeypatch.setenv("JAX_PLATFORMS", "cuda,cpu")
    assert accelerator_possible()
