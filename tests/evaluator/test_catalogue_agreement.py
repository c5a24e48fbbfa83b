"""The batched kernels against the exact simulator on a seeded catalogue of plans.

The catalogue is generated heterogeneous plans (``random_plan``: GPU mixes of
A100/H100/H200/B200, NIC generations, TP/PP/DP mixes, GPipe, 1F1B and interleaved
1F1B, all three resharding schemes, rail-optimized and oversubscribed fat-tree
fabrics, ZeRO-1 with and without overlapped buckets, FSDP, FP8 where every GPU has it,
context parallelism, 8 to 256 GPUs). A slice
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
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan, random_plan
from xsweep.plan.lower import lower
from xsweep.plan.stack import Stack
from xsweep.sim import Observer, simulate
from xsweep.spec import load_catalog
from xsweep.spec import xsweep_pb2 as pb


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
OPTIONS = {"interleaved", "buckets", "zero1", "zero1-overlap", "fsdp", "sequence-parallel",
           "fp8", "context-parallel", "blocking-p2p"}


def options(a) -> set[str]:
    """The options of OPTIONS an analysed plan exercises."""
    s = a.stack
    out = {name for name, on in (
        ("interleaved", s.virtual_pipeline_stages > 1), ("fsdp", a.fsdp),
        ("buckets", any(len(b) > 1 for b in a.dp_buckets)), ("fp8", s.precision == "fp8"),
        ("context-parallel", any(g.cp > 1 for g in a.groups)),
        ("blocking-p2p", not s.pp_p2p_overlap and len({g.stage for g in a.groups}) > 1),
        ("fp8-gather", s.fp8_param_gather and bool(a.dp_groups)),
        ("sequence-parallel", s.sequence_parallel and any(g.tp > 1 for g in a.groups))) if on}
    if s.zero_stage == 1 and a.dp_groups:
        out.add("zero1-overlap" if s.dp_overlap else "zero1")
    return out


def _catalogue(seeds, max_gpus, plans=(), options_needed=OPTIONS):
    catalog = load_catalog()
    programs, reference, covered = [], [], set()
    for plan in [random_plan(seed, max_gpus=max_gpus) for seed in seeds] + list(plans):
        a = analyze(plan, catalog)
        covered |= options(a)
        program = lower(a)
        observer = _SharingObserver(program)
        result = simulate(program, (observer,))
        per_stream = timeline.stream_metrics(np, timeline.metric_index(program),
                                            result.task_start_s, result.task_end_s)
        reference.append((result.iteration_time_s, per_stream, observer.shared))
        programs.append(program)
    assert covered >= options_needed, options_needed - covered
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


def fp8_plans() -> list:
    """Plans in FP8: an H100 + B200 pipeline (B200 stages at TP 2 beside H100 stages at TP 4,
    so resharding between them) of two replicas, interleaved, with ZeRO-1's overlapped
    buckets; and a B200 pair of FSDP replicas over two H100 + B200 stages."""
    nodes = [NodeReq("H100-SXM", 8, "cx7"), NodeReq("B200", 8, "cx8")]
    mixed = [ReplicaReq((StageReq("H100-SXM", 4, 4), StageReq("B200", 2, 4)), 1, 4)] * 2
    het = build_plan("fp8-h100-b200", "llama2-7b", nodes, mixed, seq_length=1024, num_layers=8,
                     stack=Stack(precision="fp8", zero_stage=1, dp_overlap=True,
                                 dp_bucket_params=30_000_000, virtual_pipeline_stages=2))
    fsdp = build_plan("fp8-fsdp", "llama2-7b", nodes,
                      [ReplicaReq((StageReq("H100-SXM", 2, 3), StageReq("B200", 2, 5)), 2, 3)] * 2,
                      seq_length=1024, num_layers=8, fabric="fat_tree",
                      stack=Stack(precision="fp8", zero_stage=3, recompute="selective"))
    return [het, fsdp]


def test_fp8_plans_agree_with_the_simulator():
    # the FP8 plans of the catalogue's slice, and the hand-built heterogeneous ones
    seeds = [seed for seed in range(40) if random_plan(seed).training.precision == pb.FP8][:4]
    programs, reference = _catalogue(seeds, max_gpus=64, plans=fp8_plans(),
                                     options_needed={"fp8", "interleaved", "fsdp", "buckets"})
    assert len(programs) >= 5
    _check(programs, reference)


@pytest.mark.slow
def test_full_catalogue_agrees_with_the_simulator():
    programs, reference = _catalogue(range(200), max_gpus=256)
    gpus = [p.num_ranks for p in programs]
    assert min(gpus) >= 8 and max(gpus) > 128
    contention_free = _check(programs, reference)
    assert contention_free >= 1  # the equality check had cases to look at
