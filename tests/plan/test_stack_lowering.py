"""The lowered training-stack options: closed forms and invariants per option.

(Interleaving's bubble closed form is in ``tests/sim/test_closed_forms.py``; sequence
parallelism's TP time, the all-reduce's plus one launch per operation, in
``test_transport.py``: its reduce-scatter and all-gather move the all-reduce's bytes
over the same ring, so they are lowered as that ring.)
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.lowering import payload_bytes
from xsweep.plan.analysis import analyze
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan
from xsweep.plan.lower import lower
from xsweep.plan.program import Category
from xsweep.plan.schedule import stage_order
from xsweep.plan.stack import Stack
from xsweep.plan.workload import rank_params
from xsweep.sim import simulate


def data_parallel(kinds, nic, stack, micro_batches=2, tp=8, layers=8):
    """One replica per node (TP within the node, gradients only over the network)."""
    nodes = [NodeReq(k, 8, nic) for k in kinds]
    replicas = [ReplicaReq((StageReq(k, tp, layers),), 1, micro_batches) for k in kinds]
    return build_plan("dp", "llama2-7b", nodes, replicas, stack=stack, num_layers=layers,
                      seq_length=2048)


def hetero_pipelines(stack, micro_batches=4):
    """Two replicas of different pipeline cuts and TP degrees on an H100 and an A100 node."""
    nodes = [NodeReq("H100-SXM", 8, "cx7"), NodeReq("A100-80GB", 8, "cx6")]
    replicas = [
        ReplicaReq((StageReq("H100-SXM", 4, 4), StageReq("A100-80GB", 4, 4)), 1, micro_batches),
        ReplicaReq((StageReq("H100-SXM", 2, 2), StageReq("A100-80GB", 2, 6)), 1, micro_batches),
    ]
    return build_plan("het", "llama2-7b", nodes, replicas, stack=stack, num_layers=8,
                      seq_length=2048)


def iteration_s(plan, catalog) -> float:
    return simulate(lower(analyze(plan, catalog))).iteration_time_s


def dp_payload(a, program, category=Category.DP) -> float:
    tasks = np.flatnonzero(program.task_category == category)
    return sum(payload_bytes(a, program, program.flows(int(t))) for t in tasks)


@pytest.mark.parametrize(("kinds", "nic", "recompute"), [
    (("A100-80GB", "A100-80GB"), "cx5", "none"),
    (("H100-SXM", "A100-80GB", "H100-SXM"), "cx7", "full"),
    (("B200", "H100-SXM", "A100-80GB", "A100-80GB"), "cx6", "selective"),
])
@pytest.mark.parametrize("zero_stage", [0, 1])
def test_bucketed_overlap_is_never_slower(catalog, kinds, nic, recompute, zero_stage):
    """Overlapping gradient reduction in buckets never delays an iteration where the
    collectives share no link with other traffic (here: one replica per node, TP on
    NVLink, gradients on the network), and a bucket holding every layer changes nothing:
    the same program without ZeRO; under ZeRO-1 its parameter gather moves from after
    the step to before the forward (steady state), the same time."""
    def plan(**options):
        return data_parallel(kinds, nic, Stack(zero_stage=zero_stage, recompute=recompute,
                                                **options))

    unbucketed = iteration_s(plan(), catalog)
    one_bucket = iteration_s(plan(dp_overlap=True, dp_bucket_params=10**12), catalog)
    assert one_bucket == pytest.approx(unbucketed, rel=1e-12)
    if zero_stage == 0:
        assert one_bucket == unbucketed
    times = [iteration_s(plan(dp_overlap=True, dp_bucket_params=size), catalog)
             for size in (0, 150_000_000, 20_000_000, 1)]
    assert max(times) <= unbucketed * (1 + 1e-12)
    assert times[0] < 0.97 * unbucketed  # Megatron's default buckets hide some of it


def test_bucket_starts_follow_megatrons_rule(catalog):
    """Buckets close at the layer that fills them, counted from the last layer down; the
    remainder is the first bucket. Llama-2-7B blocks hold 202.4M parameters (TP 1) and
    the head 131M more: 250M-parameter buckets take two blocks, the head's block alone."""
    plan = data_parallel(("A100-80GB", "A100-80GB"), "cx6",
                         Stack(dp_overlap=True, dp_bucket_params=250_000_000), tp=1)
    a = analyze(plan, catalog)
    block = rank_params(a.model, 1, 2, 2)
    assert 200e6 < block < 250e6 < 2 * block
    assert a.dp_buckets == ((1, 2, 4, 6, 8),)  # [8], [6-7], [4-5], [2-3], [1]
    default = analyze(data_parallel(("A100-80GB",) * 2, "cx6", Stack(dp_overlap=True), tp=1),
                      catalog)
    assert default.dp_buckets == ((1, 2, 3, 4, 5, 6, 7, 8),)  # 40M: one block each


@pytest.mark.parametrize("make", [hetero_pipelines, lambda stack: data_parallel(
    ("H100-SXM", "A100-80GB"), "cx7", stack)])
@pytest.mark.parametrize("overlap", [False, True])
def test_zero1_moves_what_the_all_reduce_moves(catalog, make, overlap):
    """Reduce-scatter plus all-gather carry the all-reduce's 2(k-1)/k of the gradients."""
    volumes = []
    for zero_stage in (0, 1):
        a = analyze(make(Stack(zero_stage=zero_stage, dp_overlap=overlap)), catalog)
        program = lower(a)
        volumes.append(dp_payload(a, program))
        names = [program.task_names[t] for t in np.flatnonzero(
            program.task_category == Category.DP)]
        verbs = {name.split()[0] for name in names}
        assert verbs == ({"dp"} if zero_stage == 0 else {"rs", "ag"})
    expected = sum(len(g.rings) * 2 * (len(g.device_groups) - 1) * a.grad_bytes(
        g.first_layer, g.last_layer) / g.lcm for g in a.dp_groups)
    assert volumes[0] == pytest.approx(expected, rel=1e-12)
    assert volumes[1] == pytest.approx(volumes[0], rel=1e-12)


@pytest.mark.parametrize("tps", [(1, 1), (1, 1, 1, 1), (2, 4, 2)])
def test_fsdp_gathers_each_layer_from_every_rank(catalog, tps):
    """FSDP over k replicas: per layer, micro-batch and pass, each rank sends (k-1)/k of the
    layer's bf16 parameters (TP 1: the whole layer; TP t: its 1/t), and after each
    backward it reduce-scatters as much."""
    k, m = len(tps), 2
    nodes = [NodeReq("A100-80GB", 8, "cx6") for _ in tps]
    replicas = [ReplicaReq((StageReq("A100-80GB", tp, 4),), 1, m) for tp in tps]
    a = analyze(build_plan("fsdp", "llama2-7b", nodes, replicas, num_layers=4,
                           stack=Stack(zero_stage=3)), catalog)
    program = lower(a)
    dp = np.flatnonzero(program.task_category == Category.DP)
    names = [program.task_names[t].split() for t in dp]
    for layer in range(1, 5):
        gathers = [t for t, n in zip(dp, names, strict=True) if n[:2] == ["ag", f"L{layer}"]]
        scatters = [t for t, n in zip(dp, names, strict=True) if n[:2] == ["rs", f"L{layer}"]]
        assert len(gathers) == 2 * m and len(scatters) == m  # forward and backward, per mb
        for t in gathers + scatters:
            flows = list(program.flows(int(t)))
            for g in a.groups:
                mine = [f for f in flows if program.flow_src[f] in g.ranks]
                sent = payload_bytes(a, program, mine) / g.tp
                if g.tp == 1:
                    expected = (k - 1) / k * 2 * rank_params(a.model, 1, layer, layer)
                else:  # the layer's bytes cut into lcm chunks: 1/t of them, norms included
                    expected = (k - 1) / k * a.grad_bytes(layer, layer) / g.tp
                assert sent == pytest.approx(expected, rel=1e-12)
    result = simulate(program)
    assert result.iteration_time_s > 0


def test_fsdp_prefetches_one_layer(catalog):
    """A layer's gather starts once the gather before it is done and every replica has
    finished the compute two layers back: at most two layers gathered while one runs."""
    nodes = [NodeReq("A100-80GB", 8, "cx6")] * 2
    replicas = [ReplicaReq((StageReq("A100-80GB", 1, 6),), 1, 1)] * 2
    program = lower(analyze(build_plan("fsdp", "llama2-7b", nodes, replicas, num_layers=6,
                                       stack=Stack(zero_stage=3)), catalog))
    result = simulate(program)
    gathers = [t for t in np.flatnonzero(program.task_category == Category.DP)
               if program.task_names[t].startswith("ag")]
    computes = np.flatnonzero(program.task_stream == 0)
    computes = computes[program.task_category[computes] == Category.FORWARD]
    for i, (t, compute) in enumerate(zip(gathers[:6], computes, strict=True)):
        assert result.task_start_s[compute] >= result.task_end_s[t]
        if i >= 2:
            assert result.task_start_s[t] >= result.task_end_s[computes[i - 2]]
            assert result.task_start_s[t] >= result.task_end_s[gathers[i - 1]]


@pytest.mark.parametrize("v", [1, 2, 4])
def test_interleaved_streams_run_megatrons_order(catalog, v):
    """Each stage runs v chunks of its layers per micro-batch, in stage_order's order, and
    the last stage's chunk c feeds the first stage's chunk c + 1."""
    p, m = 2, 4
    nodes = [NodeReq("H100-SXM", 8, "cx7")]
    replica = ReplicaReq(tuple(StageReq("H100-SXM", 2, 8) for _ in range(p)), 1, m)
    a = analyze(build_plan("v", "llama2-7b", nodes, [replica],
                           stack=Stack(virtual_pipeline_stages=v), num_layers=16), catalog)
    program = lower(a)
    for s in range(p):
        mine = np.flatnonzero(program.task_stream == s)
        passes = mine[np.isin(program.task_category[mine],
                              (Category.FORWARD, Category.BACKWARD))]
        # the pieces of the last backward of each chunk are one pass
        runs = []
        for t in passes:
            kind = "F" if program.task_category[t] == Category.FORWARD else "B"
            name = program.task_names[t].split()
            chunk = int(name[3][1:]) if v > 1 else 0
            item = (kind, int(program.task_micro_batch[t]), chunk)
            if not runs or runs[-1] != item:
                runs.append(item)
        assert runs == stage_order("1f1b", s, p, m, v)
    wraps = [n for n in program.task_names if n.startswith("act 1->0")]
    assert len(wraps) == m * (v - 1)
    assert simulate(program).iteration_time_s > 0
