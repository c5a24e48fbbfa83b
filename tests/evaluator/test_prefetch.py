"""A call's kept kernels load in the background, from the chunks' shapes alone, while
the chunks before them are encoded and run: every executable a later process's call
runs is the one its prefetch started (the shapes it predicted are the arrays'), on the
CPU's code path and on an accelerator host's (metrics in the kernels' call).

Slow: the first call compiles the kernels of both levels.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from tests.support.programs import gpipe_program, random_program, ring_allreduce_program
from xsweep.evaluator import driver
from xsweep.evaluator.derived import Derived
from xsweep.evaluator.executables import Executables, _Kernel
from xsweep.evaluator.kernel_store import KernelStore

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("platform", ["cpu", "gpu"])
def test_a_later_process_runs_only_prefetched_executables(tmp_path, monkeypatch, platform):
    programs = [random_program(seed) for seed in range(5)] + [
        ring_allreduce_program(4, 1e9, 25e9, 1e-6), gpipe_program(3, 4, 0.01, 0.02)]
    devices = tuple(jax.devices())

    def run():  # a new process's evaluator: nothing held, the same kernel store
        executables = Executables(devices, store=tmp_path)
        return driver.run_programs(programs, "exact", executables=executables,
                                   derived=Derived(), platform=platform)

    first = run()
    started, read = [], []
    prefetch, compiled = _Kernel.prefetch, KernelStore.compiled
    monkeypatch.setattr(_Kernel, "prefetch",
                        lambda self, *args: started.append(prefetch(self, *args)) or started[-1])
    monkeypatch.setattr(KernelStore, "compiled",
                        lambda self, *args: read.append(args[1]) or compiled(self, *args))
    second = run()
    assert sum(started) >= 2  # the bound's kernels (slots) and the exact level's
    assert read == []  # every executable came from its prefetch, none from the store
    for name in ("iteration_time_s", "status", "steps"):
        np.testing.assert_array_equal(second[name], first[name], err_msg=name)


def test_bounding_with_the_exact_level_next_loads_its_kernels_meanwhile(tmp_path, monkeypatch):
    """A funnel bounds programs, then evaluates some exactly: told so, the bound call starts
    loading the exact kernels those programs ran at before (shapes the store assigned to
    keys like theirs but for the slots, which their bound schedules will size), and the
    exact call runs what was loaded. Where the exact level runs vmapped (an accelerator's
    tuning), a chunk's rows are not known ahead: nothing is anticipated."""
    programs = [random_program(seed) for seed in range(5)] + [
        ring_allreduce_program(4, 1e9, 25e9, 1e-6), gpipe_program(3, 4, 0.01, 0.02)]
    devices = tuple(jax.devices())
    first = driver.run_programs(programs, "exact", executables=Executables(devices, store=tmp_path),
                                derived=Derived())

    executables, derived = Executables(devices, store=tmp_path), Derived()  # a new process
    started = []
    anticipate = driver.anticipate
    monkeypatch.setattr(driver, "anticipate",
                        lambda *a, **k: started.append(anticipate(*a, **k)) or started[-1])
    driver.run_programs(programs, "bound", executables=executables, derived=derived,
                        next_level="exact")
    assert started and 1 <= started[0] <= driver.MAX_ANTICIPATED
    read = []
    compiled = KernelStore.compiled
    monkeypatch.setattr(KernelStore, "compiled",
                        lambda self, *args: read.append(args[1]) or compiled(self, *args))
    second = driver.run_programs(programs, "exact", executables=executables, derived=derived)
    assert [config for config in read if config[0] == "exact"] == []  # all anticipated
    np.testing.assert_array_equal(second["iteration_time_s"], first["iteration_time_s"])
    assert driver.anticipate(programs, "exact", executables=Executables(devices, store=tmp_path),
                             derived=Derived(), platform="gpu") == 0
