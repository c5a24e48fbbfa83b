"""The batched kernels against the exact simulator on a seeded catalogue of plans.

The catalogue is generated heterogeneous plans (``random_plan``: GPU mixes of
A100/H100/H200/B200, NIC generations, TP/PP/DP mixes, GPipe, 1F1B and interleaved
1F1B, all three resharding schemes, rail-optimized and oversubscribed fat-tree
fabrics, ZeRO-1 with and without overlapped buckets, FSDP, 8 to 256 GPUs). A slice
runs by default, checked to hold every training-stack option; the full 200 plans are
marked slow (CI runs them).

Per-rank metrics can be zero (no DP on a single replica), so their error is taken
relative to the larger of the metric and the plan's iteration time.
"""

from __future__ import annotations

import numpy as np
import pytest
from xsweep.kernels import Status

from xsweep import metrics, timeline
from xsweep.evaluator import default_evaluator
from xsweep.plan.analysis import analyze
from xsweep.plan.builder import random_plan
from xsweep.plan.lower import lower
from xsweep.sim import Observer, simulate
from xsweep.spec import load_catalog


class _SharingObserver(Observer):
    """Notes whether two transferring flows ever share a link (contention)."""

    def __init__(self, program):
        self.program = program
        self.shared = False

    def on_rates(self, time_s, flows, rates_bytes_per_s):
        if self.shared or len(flows) < 2:
            return
        links = np.concatenate([self.program.path(int(f)) for f in flows])
        self.shared = len(np.unique(links)) < len(links)


#: Every training-stack option the lowering turns into tasks of their own.
OPTIONS = {"interleaved", "buckets", "zero1", "zero1-overlap", "fsdp", "sequence-parallel"}


def options(a) -> set[str]:
    """The options of OPTIONS an analysed plan exercises."""
    s = a.stack
    out = {name for name, on in (
        ("interleaved", s.virtual_pipeline_stages > 1), ("fsdp", a.fsdp),
        ("buckets", any(len(b) > 1 for b in a.dp_buckets)),
        ("sequence-parallel", s.sequence_parallel and any(g.tp > 1 for g in a.groups))) if on}
    if s.zero_stage == 1 and a.dp_groups:
        out.add("zero1-overlap" if s.dp_overlap else "zero1")
    return out


def _catalogue(seeds, max_gpus):
    catalog = load_catalog()
    programs, reference, covered = [], [], set()
    for seed in seeds:
        a = analyze(random_plan(seed, max_gpus=max_gpus), catalog)
        covered |= options(a)
        program = lower(a)
        observer = _SharingObserver(program)
        result = simulate(program, (observer,))
        per_stream = timeline.stream_metrics(np, timeline.metric_index(program),
                                            result.task_start_s, result.task_end_s)
        reference.append((result.iteration_time_s, per_stream, observer.shared))
        programs.append(program)
    assert covered == OPTIONS, OPTIONS - covered
    return programs, reference


def _errors(programs, reference, out):
    """Relative errors of the iteration time, and of every per-rank metric."""
    time_err, metric_err = [], []
    for i, (program, (t_ref, per_stream, _)) in enumerate(zip(programs, reference, strict=True)):
        time_err.append(abs(out["iteration_time_s"][i] - t_ref) / t_ref)
        s = program.num_streams
        for name in metrics.STREAM_METRICS:
            ref = per_stream[name]
            got = out[name][i, :s]
            metric_err.extend(np.abs(got - ref) / np.maximum(np.abs(ref), t_ref))
    return np.array(time_err), np.array(metric_err)


def _check(programs, reference):
    for dtype, median_tol, worst_tol in (("float32", 1e-5, 1e-4), ("float64", 1e-9, 1e-9)):
        out = default_evaluator().run(programs, "exact", dtype=dtype)
        assert np.all(out["status"] == Status.OK)
        time_err, metric_err = _errors(programs, reference, out)
        assert np.median(time_err) <= median_tol and time_err.max() <= worst_tol, dtype
        assert np.median(metric_err) <= median_tol and metric_err.max() <= worst_tol, dtype

    bound = default_evaluator().run(programs, "bound", dtype="float32", with_metrics=False)
    t_ref = np.array([r[0] for r in reference])
    contended = np.array([r[2] for r in reference])
    # float32 rounding aside, the bound is never above the exact time ...
    assert np.all(bound["iteration_time_s"] <= t_ref * (1 + 1e-6))
    # ... and equal to it when no two flows ever share a link
    free = ~contended
    assert np.allclose(bound["iteration_time_s"][free], t_ref[free], rtol=1e-4, atol=0)
    return int(free.sum())


def test_catalogue_slice_agrees_with_the_simulator():
    programs, reference = _catalogue(range(20), max_gpus=64)
    _check(programs, reference)


@pytest.mark.slow
def test_full_catalogue_agrees_with_the_simulator():
    programs, reference = _catalogue(range(200), max_gpus=256)
    gpus = [p.num_ranks for p in programs]
    assert min(gpus) >= 8 and max(gpus) > 128
    contention_free = _check(programs, reference)
    assert contention_free >= 1  # the equality check had cases to look at
