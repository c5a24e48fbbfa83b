"""TP communication overlapped with the compute (``tp_comm_overlap``): closed forms.

Each piece's TP traffic runs beside its compute: the piece takes the longer of the two,
the stream's wait for the traffic is its exposed TP time, and nothing else changes (the
same compute, the same flows, the same bytes)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from xsweep.errors import InputError
from xsweep.plan.analysis import analyze
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan
from xsweep.plan.lower import lower
from xsweep.plan.program import Category, TaskKind
from xsweep.plan.stack import Stack
from xsweep.sim import simulate, summary
from xsweep.spec.validate import validate_plan

SP = Stack(sequence_parallel=True)


def one_stage(stack: Stack, gpu="H100-SXM", tp=8, micro_batches=3, seq=4096):
    """One replica, one stage, TP over a node: the pieces run one after another."""
    replica = ReplicaReq((StageReq(gpu, tp, 8),), 1, micro_batches)
    return build_plan("tp", "llama2-7b", [NodeReq(gpu, 8, "cx7")], [replica], stack=stack,
                      num_layers=8, seq_length=seq)


def run(plan, catalog):
    program = lower(analyze(plan, catalog))
    result = simulate(program)
    return program, result, summary(program, result)


@pytest.mark.parametrize(("gpu", "tp", "seq"), [("H100-SXM", 8, 4096), ("A100-80GB", 4, 2048),
                                                ("B200", 2, 8192)])
def test_a_piece_takes_the_longer_of_its_compute_and_its_tp_traffic(catalog, gpu, tp, seq):
    plain, plain_run, plain_m = run(one_stage(SP, gpu, tp, seq=seq), catalog)
    over, over_run, over_m = run(one_stage(dataclasses.replace(SP, tp_comm_overlap=True),
                                           gpu, tp, seq=seq), catalog)
    # blocking: each piece's compute, then its ring; the stream runs them back to back
    computes = np.flatnonzero(plain.task_kind == TaskKind.COMPUTE)
    rings = np.flatnonzero((plain.task_category == Category.TP) & (plain.task_stream >= 0))
    compute_s = plain_run.task_end_s[computes] - plain_run.task_start_s[computes]
    ring_s = plain_run.task_end_s[rings] - plain_run.task_start_s[rings]
    per_piece = [(c, r) for c, r in zip(compute_s[:len(ring_s)], ring_s, strict=True)]
    # overlapped: the same computes and rings, beside each other
    beside = np.flatnonzero(over.task_category == Category.TP_BESIDE)
    assert (over.task_stream[beside] < 0).all()
    joins = np.flatnonzero((over.task_category == Category.TP) & (over.task_stream >= 0))
    assert len(beside) == len(joins) == len(rings) > 0
    np.testing.assert_array_equal(np.sort(over.flow_bytes), np.sort(plain.flow_bytes))
    assert over_m["busy_s_max"] == pytest.approx(plain_m["busy_s_max"], rel=1e-12)
    assert plain_m["exposed_tp_s_max"] == pytest.approx(sum(r for _, r in per_piece), rel=1e-9)
    hidden = sum(min(c, r) for c, r in per_piece)
    assert over_m["exposed_tp_s_max"] == pytest.approx(
        sum(max(0.0, r - c) for c, r in per_piece), rel=1e-9, abs=1e-12)
    assert over_m["iteration_time_s"] == pytest.approx(
        plain_m["iteration_time_s"] - hidden, rel=1e-9)
    for m in (plain_m, over_m):  # the accounting identity and no bubble on one stage
        assert m["idle_s_max"] == pytest.approx(
            m["iteration_time_s"] - m["busy_s_max"] - m["exposed_tp_s_max"], abs=1e-9)
        assert m["bubble_s_max"] == pytest.approx(0.0, abs=1e-9)


def test_overlap_never_slows_a_pipeline_and_changes_nothing_at_tp_1(catalog):
    def pipeline(stack, tp):
        nodes = [NodeReq("H100-SXM", 8, "cx7"), NodeReq("A100-80GB", 8, "cx6")]
        replica = ReplicaReq((StageReq("H100-SXM", tp, 4), StageReq("A100-80GB", tp, 4)), 1, 6)
        return build_plan("pp", "llama2-7b", nodes, [replica, replica], stack=stack,
                          num_layers=8, seq_length=4096)
    on = dataclasses.replace(SP, tp_comm_overlap=True)
    for tp in (2, 4):
        _, _, plain = run(pipeline(SP, tp), catalog)
        _, _, over = run(pipeline(on, tp), catalog)
        assert over["iteration_time_s"] <= plain["iteration_time_s"] * (1 + 1e-12)
        assert over["exposed_tp_s_max"] < plain["exposed_tp_s_max"]
    a, b = (lower(analyze(pipeline(s, 1), catalog)) for s in (SP, on))
    np.testing.assert_array_equal(a.task_category, b.task_category)  # no TP tasks at TP 1
    np.testing.assert_array_equal(a.dep_idx, b.dep_idx)


def test_overlap_needs_sequence_parallelism(catalog):
    plan = one_stage(SP)
    plan.training.tp_comm_overlap, plan.training.sequence_parallel = True, False
    with pytest.raises(InputError, match="training.tp_comm_overlap: needs sequence_parallel"):
        validate_plan(plan, catalog, "p.pbtxt")
    with pytest.raises(ValueError, match="needs sequence_parallel"):
        Stack(sequence_parallel=False, tp_comm_overlap=True)
