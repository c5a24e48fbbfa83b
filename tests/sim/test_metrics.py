"""Metric definitions: hand-worked timelines, rank weighting, numpy == jax.numpy, jit, vmap."""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.support.programs import random_program
from xsweep import timeline
from xsweep.evaluator.encode import metric_index_dims, pad_metric_index
from xsweep.plan.analysis import analyze
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan
from xsweep.plan.lower import lower
from xsweep.plan.program import Category, ProgramBuilder
from xsweep.plan.stack import Stack
from xsweep.sim import rank_metrics, simulate, summary


@pytest.mark.parametrize(("category", "key"), [(Category.PP, "pp"), (Category.RESHARD, "reshard")])
def test_waiting_for_a_transfer_is_exposed_and_part_of_the_bubble(category, key):
    """Two stages, one forward and one backward each, transfers of 0.5 s after 0.1 s latency."""
    b = ProgramBuilder([1e9], [0.0], ["link"], rank_node=[0, 1])
    s0, s1 = b.add_stream(0, [0]), b.add_stream(1, [1])
    f0 = b.add_compute(Category.FORWARD, s0, 1.0)  # [0, 1]
    act = b.add_comm(category, [(0, 1, 0.5e9, 0.1, [0])], [f0])  # [1, 1.6]
    f1 = b.add_compute(Category.FORWARD, s1, 1.0, [act])  # [1.6, 2.6]
    b1 = b.add_compute(Category.BACKWARD, s1, 2.0, [f1])  # [2.6, 4.6]
    grad = b.add_comm(category, [(1, 0, 0.5e9, 0.1, [0])], [b1])  # [4.6, 5.2]
    b.add_compute(Category.BACKWARD, s0, 2.0, [f0, grad])  # [5.2, 7.2]
    program = b.build()
    result = simulate(program)
    assert result.iteration_time_s == pytest.approx(7.2)
    stage0, stage1 = rank_metrics(program, result)
    assert stage0["bubble_s"] == pytest.approx(4.2) and stage1["bubble_s"] == pytest.approx(1.6)
    for row in (stage0, stage1):
        exposed = {k: row[f"exposed_{k}_s"] for k in ("tp", "pp", "reshard", "dp")}
        assert exposed[key] == pytest.approx(0.6)
        assert sum(exposed.values()) == pytest.approx(0.6)
        assert row["busy_s"] == pytest.approx(3.0) and row["idle_s"] == pytest.approx(4.2)
        assert row["straggler_wait_s"] == 0.0


def test_every_phase_of_a_transfer_is_exposed():
    """A gather, a leader send and a scatter (HetAuto's phases), 0.3 s each: the stage
    behind them waits for all three, 0.9 s."""
    b = ProgramBuilder([1e9], [0.0], ["link"], rank_node=[0, 1])
    s0, s1 = b.add_stream(0, [0]), b.add_stream(1, [1])
    t = b.add_compute(Category.FORWARD, s0, 1.0)  # [0, 1]
    for phase in range(3):  # [1, 1.3], [1.3, 1.6], [1.6, 1.9]
        t = b.add_comm(Category.RESHARD, [(0, 1, 0.3e9, 0.0, [0])], [t], phase=phase)
    b.add_compute(Category.FORWARD, s1, 1.0, [t])  # [1.9, 2.9]
    program = b.build()
    row = rank_metrics(program, simulate(program))[1]
    assert row["bubble_s"] == pytest.approx(1.9)
    assert row["exposed_reshard_s"] == pytest.approx(0.9)  # the last phase alone: 0.3


def test_data_parallel_waits_are_exposed_dp():
    """A forward waiting for a parameter all-gather (1 s), then, after the optimizer, the
    all-gather of its update (0.5 s): both are exposed DP time."""
    b = ProgramBuilder([1e9], [0.0], ["link"], rank_node=[0, 1])
    s0 = b.add_stream(0, [0])
    gather = b.add_comm(Category.DP, [(1, 0, 1e9, 0.0, [0])])  # [0, 1]
    f = b.add_compute(Category.FORWARD, s0, 2.0, [gather])  # [1, 3]
    opt = b.add_compute(Category.OPTIMIZER, s0, 1.0, [f])  # [3, 4]
    b.add_comm(Category.DP, [(1, 0, 0.5e9, 0.0, [0])], [opt])  # [4, 4.5]
    program = b.build()
    row = rank_metrics(program, simulate(program))[0]
    assert row["bubble_s"] == pytest.approx(1.0)
    assert row["exposed_dp_s"] == pytest.approx(1.5)
    assert row["idle_s"] == pytest.approx(1.5)


@pytest.mark.parametrize("transfer_first", [True, False])
def test_predecessor_ties_go_to_the_lowest_index(transfer_first):
    """A task released at once by a transfer and by another stream's compute."""
    b = ProgramBuilder([1e9], [0.0], ["link"], rank_node=[0, 1])
    s0, s1 = b.add_stream(0, [0]), b.add_stream(1, [1])

    def transfer():
        return b.add_comm(Category.PP, [(1, 0, 0.0, 1.0, [0])])  # [0, 1]: latency only

    def compute():
        return b.add_compute(Category.FORWARD, s1, 1.0)  # [0, 1]

    deps = [transfer(), compute()] if transfer_first else [compute(), transfer()]
    b.add_compute(Category.FORWARD, s0, 1.0, deps)
    program = b.build()
    row = rank_metrics(program, simulate(program))[0]
    assert row["bubble_s"] == 1.0
    assert row["exposed_pp_s"] == (1.0 if transfer_first else 0.0)


def test_summary_weights_streams_by_their_ranks():
    program = random_program(7)
    result = simulate(program)
    rows = rank_metrics(program, result)
    out = summary(program, result)
    assert len(rows) == len(program.stream_ranks)
    for name in ("busy_s", "idle_s", "bubble_s", "straggler_wait_s"):
        values = [row[name] for row in rows]
        assert out[f"{name}_mean"] == pytest.approx(np.mean(values), rel=1e-12, abs=1e-15)
        assert out[f"{name}_max"] == pytest.approx(max(values), rel=1e-12)
    assert out["tokens_per_s"] == pytest.approx(4096.0 / result.iteration_time_s)
    assert out["mfu"] == pytest.approx(1.0 / result.iteration_time_s)


def _numpy_metrics(program):
    result = simulate(program)
    index = timeline.metric_index(program)
    per_stream = timeline.stream_metrics(np, index, result.task_start_s, result.task_end_s)
    return index, result, per_stream


def _stacked(indices):
    """The indices padded to one shape and stacked, as the batched evaluator does."""
    num_tasks = max(ix.task_valid.shape[0] for ix in indices)
    return pad_metric_index(indices, num_tasks, metric_index_dims(indices), dtype=np.float64)


def _pad_times(times, num_tasks):
    """Task times padded to ``num_tasks`` with a large time that the masks must ignore."""
    return np.concatenate([times, np.full(num_tasks - times.shape[0], 1e9)])


def test_jax_numpy_eager_and_jitted_agree_with_numpy():
    programs = [random_program(seed) for seed in range(8)]
    singles = [_numpy_metrics(p) for p in programs]
    # one common padded shape, so that the jitted function compiles once
    stacked = _stacked([ix for ix, _, _ in singles])
    T = stacked.task_valid.shape[1]

    def evaluate(ix, start, end, scalars):
        per_stream = timeline.stream_metrics(jnp, ix, start, end)
        return per_stream, timeline.summarize(jnp, ix, per_stream, start, end, *scalars)

    jitted = jax.jit(evaluate)
    with jax.enable_x64(True):
        for i, (program, (index, result, expected)) in enumerate(zip(programs, singles,
                                                                      strict=True)):
            scalars = (program.tokens_per_iteration, program.model_flops_per_iteration,
                       program.peak_flops_per_s)
            expected_summary = timeline.summarize(np, index, expected, result.task_start_s,
                                                 result.task_end_s, *scalars)
            padded = timeline.MetricIndex(*(a[i] for a in stacked))
            runs = [jitted(padded, _pad_times(result.task_start_s, T),
                           _pad_times(result.task_end_s, T), scalars)]
            if i == 0:  # eager jax.numpy on the unpadded index
                runs.append(evaluate(index, jnp.asarray(result.task_start_s),
                                     jnp.asarray(result.task_end_s), scalars))
            S = expected["busy_s"].shape[0]
            for per_stream, summ in runs:
                for name, value in expected.items():
                    assert per_stream[name].dtype == jnp.float64
                    np.testing.assert_allclose(np.asarray(per_stream[name])[:S], value,
                                               rtol=1e-12, atol=1e-15)
                for name, value in expected_summary.items():
                    np.testing.assert_allclose(float(summ[name]), value, rtol=1e-12,
                                               atol=1e-15)


def test_vmap_over_padded_programs_matches_one_at_a_time():
    programs = [random_program(seed) for seed in (3, 11, 29)]
    singles = [_numpy_metrics(p) for p in programs]
    stacked = _stacked([ix for ix, _, _ in singles])
    T = stacked.task_valid.shape[1]
    start = np.stack([_pad_times(r.task_start_s, T) for _, r, _ in singles])
    end = np.stack([_pad_times(r.task_end_s, T) for _, r, _ in singles])
    with jax.enable_x64(True):
        batched = jax.jit(jax.vmap(functools.partial(timeline.stream_metrics, jnp)))(
            stacked, start, end)
    for i, (_, _, expected) in enumerate(singles):
        S = expected["busy_s"].shape[0]
        for name, value in expected.items():
            np.testing.assert_allclose(np.asarray(batched[name][i, :S]), value,
                                       rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize(("src_tp", "dst_tp"), [(6, 4), (8, 1), (4, 4)])
def test_exposed_reshard_ranks_the_schemes_as_their_iteration_times(catalog, src_tp, dst_tp):
    """The paper's stage pairs (``benchmarks/reshard_compare.py``): an H100 stage of TP
    ``src_tp`` feeding an A100 stage of TP ``dst_tp``, Llama-2-7B split 20/12. Counting
    every phase of a transfer, the scheme that exposes less resharding is the faster one
    (HetAuto's gather and scatter phases included: counting only its last phase ranked
    the slowest scheme first)."""
    figures = {}
    for scheme in ("lcm", "hetauto", "alpacomm"):
        nodes = [NodeReq("H100-SXM", 8), NodeReq("A100-40GB", 8)]
        stages = (StageReq("H100-SXM", src_tp, 20), StageReq("A100-40GB", dst_tp, 12))
        plan = build_plan(scheme, "llama2-7b", nodes, [ReplicaReq(stages, 1, 8)],
                          resharding=scheme, seq_length=2048, stack=Stack(recompute="full"))
        program = lower(analyze(plan, catalog))
        m = summary(program, simulate(program))
        figures[scheme] = (m["iteration_time_s"], m["exposed_reshard_s_mean"])
    for a, b in itertools.combinations(figures, 2):
        (time_a, exposed_a), (time_b, exposed_b) = figures[a], figures[b]
        if time_a == pytest.approx(time_b, rel=1e-9):
            assert exposed_a == pytest.approx(exposed_b, rel=1e-9, abs=1e-12), (a, b)
        else:
            assert (time_a < time_b) == (exposed_a < exposed_b), (a, b, figures)
