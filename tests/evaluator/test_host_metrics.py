"""Metrics on the host (a CPU's way) against metrics in the kernels' call (an
accelerator's way), and the timeline's functions over several variants at once."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from tests.support.programs import random_program
from xsweep import metrics, timeline
from xsweep.evaluator import Evaluator, tuning
from xsweep.evaluator.executables import output_names
from xsweep.evaluator.host_metrics import host_index, host_metrics, metric_names
from xsweep.sim import simulate


def test_metric_names_are_the_kernels():
    assert metric_names() == output_names(True)[1][1:]


def test_variants_at_once_equal_one_at_a_time():
    program = random_program(5)
    index = timeline.metric_index(program)
    rng = np.random.default_rng(0)
    start = rng.random((4, program.num_tasks))
    end = start + rng.random((4, program.num_tasks))
    both = timeline.stream_metrics(np, index, start, end)
    summary = timeline.summarize(np, index, both, start, end, np.arange(1.0, 5.0), 2.0,
                                 np.array([1.0, 2.0, 0.0, 3.0]))
    for row in range(4):
        one = timeline.stream_metrics(np, index, start[row], end[row])
        alone = timeline.summarize(np, index, one, start[row], end[row], row + 1.0, 2.0,
                                   [1.0, 2.0, 0.0, 3.0][row])
        for name in metrics.STREAM_METRICS:
            np.testing.assert_array_equal(both[name][row], one[name], name)
        for name, value in alone.items():
            assert summary[name][row] == value, name


def test_host_metrics_group_rows_by_their_index():
    """Rows that share an index (numeric variants of one structure) and rows of their own
    give what each row alone gives; streams past a program's are 0."""
    programs = [random_program(seed) for seed in (1, 2)]
    variant = dataclasses.replace(programs[0], peak_flops_per_s=7.0)
    chosen = [programs[0], programs[1], variant]
    indices = [host_index(timeline.metric_index(p)) for p in programs]
    rows = [indices[0], indices[1], indices[0]]
    width = max(p.num_tasks for p in chosen) + 3
    rng = np.random.default_rng(1)
    start = rng.random((3, width))
    end = start + rng.random((3, width))
    out = host_metrics(chosen, rows, start, end, np.float64)
    for row, (p, index) in enumerate(zip(chosen, rows, strict=True)):
        alone = host_metrics([p], [index], start[row:row + 1], end[row:row + 1], np.float64)
        for name, value in alone.items():
            np.testing.assert_array_equal(out[name][row, :value.shape[1]] if value.ndim == 2
                                          else out[name][row], value[0], name)
        for name in metrics.STREAM_METRICS:
            assert np.all(out[name][row, p.num_streams:] == 0)
    assert out["mfu"][0] != out["mfu"][2]  # the variant's own peak


@pytest.mark.parametrize("ties", [False, True])
def test_host_metrics_are_the_timelines(ties):
    """The host's segment sums give the timeline's metrics on programs of every
    category mix, on the simulator's schedules, as they are or rounded down onto a
    coarse grid (which keeps a schedule's order and makes many predecessors end
    together: the last one is then the lowest task index)."""
    programs = [random_program(seed, max_tasks=60, max_streams=6) for seed in range(30)]
    width = max(p.num_tasks for p in programs)
    start, end = np.zeros((2, len(programs), width))
    for row, p in enumerate(programs):
        result = simulate(p)
        start[row, :p.num_tasks], end[row, :p.num_tasks] = (result.task_start_s,
                                                            result.task_end_s)
        if ties:
            grid = max(result.iteration_time_s, 1e-9) / 8
            start[row], end[row] = np.floor(start[row] / grid), np.floor(end[row] / grid)
    out = host_metrics(programs, [host_index(timeline.metric_index(p)) for p in programs],
                       start, end, np.float64)
    for row, p in enumerate(programs):
        index = timeline.metric_index(p)
        s, e = start[row, :p.num_tasks], end[row, :p.num_tasks]
        per_stream = timeline.stream_metrics(np, index, s, e)
        summary = timeline.summarize(np, index, per_stream, s, e, p.tokens_per_iteration,
                                     p.model_flops_per_iteration, p.peak_flops_per_s)
        for name in metrics.STREAM_METRICS:
            np.testing.assert_allclose(out[name][row, :p.num_streams],
                                       per_stream[name][:p.num_streams], rtol=1e-12,
                                       atol=1e-12, err_msg=name)
        for name in metric_names():
            np.testing.assert_allclose(out[name][row], summary[name], rtol=1e-12, atol=1e-12,
                                       err_msg=name)


@pytest.mark.parametrize("level", ["bound", "exact"])
def test_host_and_device_metrics_agree(level, monkeypatch):
    """The two placements of the metrics give the same values (float64 through and
    through), at each level, and the same schedules."""
    programs = [random_program(seed) for seed in range(12)]
    evaluator = Evaluator(devices=jax.devices()[:1], compile_cache=False, processes=1)
    with jax.enable_x64(True):
        host = evaluator.run(programs, level, dtype="float64")
        monkeypatch.setitem(tuning.TUNINGS, ("cpu", level), dataclasses.replace(
            tuning.TUNINGS["cpu", level], metrics_on_device=True))
        device = evaluator.run(programs, level, dtype="float64")
    assert set(host) == set(device)
    for name, value in device.items():
        if name == "padding_overhead":  # the index no longer shapes the host's batches
            continue
        np.testing.assert_allclose(host[name], value, rtol=1e-12, atol=1e-12, err_msg=name)
