"""Context parallelism (``DeviceGroup.context_parallel``): closed forms.

Each CP rank runs ``1/cp`` of every sequence's tokens and of its causal attention, holds
``1/cp`` of the activations and passes its K/V block to the next CP rank ``cp - 1`` times
per block and forward pass (Transformer Engine's ring attention), beside the compute;
the weights are replicated over the CP ranks, so gradients are reduced over DP x CP.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.lowering import assert_identical
from xsweep.errors import InputError
from xsweep.plan.analysis import analyze
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan
from xsweep.plan.lower import lower
from xsweep.plan.memory import memory_breakdown
from xsweep.plan.program import Category, TaskKind
from xsweep.plan.stack import DEFAULT_STACK, Stack
from xsweep.plan.workload import stage_cost
from xsweep.sim import simulate, summary
from xsweep.spec import xsweep_pb2 as pb
from xsweep.spec.profile import Profile
from xsweep.spec.validate import validate_plan

BF16 = 2


def one_stage(cp: int, tp: int = 1, *, layers: int = 4, seq: int = 8192, micro_batches: int = 2,
              stack: Stack = DEFAULT_STACK, replicas: int = 1, gpu: str = "H100-SXM"):
    """``replicas`` replicas of one stage of ``tp x cp`` GPUs of one node each."""
    replica = ReplicaReq((StageReq(gpu, tp, layers),), 1, micro_batches)
    return build_plan("cp", "llama2-7b", [NodeReq(gpu, 8, "cx7")] * replicas, [replica] * replicas,
                      stack=stack, num_layers=layers, seq_length=seq, context_parallel=cp)


def block_forward_flops(model, b: int, cp: int, tp: int = 1) -> float:
    """Megatron's FLOPs of one block's forward pass on one rank: the GEMMs on the rank's
    ``b s / cp`` tokens, the attention core on its queries against every key (the
    causal half counted whole, as Megatron counts it)."""
    h, s, f = model.hidden_size, model.seq_length, model.ffn_hidden_size
    d = h // model.num_attention_heads
    q, kv = model.num_attention_heads * d // tp, model.num_kv_heads * d // tp
    tokens = b * s / cp
    gemms = 2 * tokens * (h * (q + 2 * kv) + q * h + 2 * h * f // tp + f // tp * h)
    return gemms + 4 * b * (s / cp) * s * q


@pytest.mark.parametrize(("cp", "tp", "b"), [(2, 1, 1), (4, 2, 1), (2, 4, 2), (8, 1, 1)])
def test_flops_per_rank_split_by_cp(catalog, cp, tp, b):
    model = analyze(one_stage(1), catalog).model
    gpu = catalog.gpu("H100-SXM")
    inner = dict(first_layer=2, last_layer=3)  # blocks only, no embedding or head
    plain = stage_cost(model, gpu, tp, b, **inner)
    split = stage_cost(model, gpu, tp, b, **inner, cp=cp)
    assert split.forward_flops == pytest.approx(2 * block_forward_flops(model, b, cp, tp),
                                                 rel=1e-12)
    assert split.forward_flops == pytest.approx(plain.forward_flops / cp, rel=1e-12)
    assert split.backward_flops == pytest.approx(2 * split.forward_flops, rel=1e-12)
    # the pipeline's activations are split over the ranks, the TP all-reduce too
    assert split.activation_bytes == plain.activation_bytes
    assert split.tp_allreduce_bytes == pytest.approx(plain.tp_allreduce_bytes / cp, rel=1e-15)
    assert split.forward_time_s < plain.forward_time_s


@pytest.mark.parametrize(("cp", "tp"), [(2, 1), (4, 2), (2, 8)])
def test_kv_bytes_of_the_ring_per_step(catalog, cp, tp):
    model = analyze(one_stage(1), catalog).model
    cost = stage_cost(model, catalog.gpu("H100-SXM"), tp, 2, 1, 4, cp=cp)
    d = model.hidden_size // model.num_attention_heads
    kv_heads = model.num_kv_heads // tp
    assert cost.cp_steps == cp - 1
    assert cost.cp_step_bytes == 2 * (model.seq_length // cp) * kv_heads * d * BF16 * 2
    assert stage_cost(model, catalog.gpu("H100-SXM"), tp, 2, 1, 4).cp_step_bytes == 0.0


def _cp_flows(program):
    """Per CP ring task (beside the compute): its category, and its flows' ends."""
    beside = np.flatnonzero(program.task_category == Category.TP_BESIDE)
    return beside, [np.array(program.flows(int(t))) for t in beside]


@pytest.mark.parametrize("recompute", ["none", "selective"])
def test_kv_bytes_of_the_ring_per_iteration(catalog, recompute):
    cp, layers, m = 4, 4, 2
    plan = one_stage(cp, layers=layers, micro_batches=m, stack=Stack(recompute=recompute))
    a = analyze(plan, catalog)
    program = lower(a)
    ranks = a.groups[0].ranks
    cost = a.groups[0].cost
    backward = 2 + (recompute != "none")  # K/V and their gradients; the recomputed forward
    beside, flows = _cp_flows(program)
    assert len(beside) == 2 * m  # one ring per pass beside its compute (a piece per pass)
    sent = 0.0
    for t, fl in zip(beside, flows, strict=True):
        src, dst = program.flow_src[fl], program.flow_dst[fl]
        # each rank sends to the next CP rank (TP 1: the next rank), around the ring
        assert sorted(zip(src, dst, strict=True)) == [
            (ranks[q], ranks[(q + 1) % cp]) for q in range(cp)]
        assert program.task_stream[t] == -1
        sent += float(program.flow_bytes[fl].sum())
    efficiency = a.topology.bus_efficiency[list(a.topology.path(ranks[0], ranks[1]))].min()
    per_rank = cost.cp_step_bytes * (cp - 1) * layers * m * (1 + backward)
    assert sent * efficiency == pytest.approx(cp * per_rank, rel=1e-12)


def test_activation_memory_divided_by_cp(catalog):
    model = analyze(one_stage(1), catalog).model
    stack = Stack(zero_stage=1)
    args = (model, 2, 1, 1, 4, 0, 2, "1f1b", 8, stack)
    plain = memory_breakdown(*args, 2)
    split = memory_breakdown(*args, 2, 4)
    assert split.activations_gib == pytest.approx(plain.activations_gib / 4, rel=1e-15)
    for name in ("weights_gib", "grads_gib", "optimizer_gib"):
        assert getattr(split, name) == getattr(plain, name)


def test_zero_shards_over_dp_times_cp_and_gradients_reduce_over_cp(catalog):
    stack = Stack(zero_stage=1)
    one = analyze(one_stage(1, stack=stack), catalog)
    lone = analyze(one_stage(2, stack=stack), catalog)  # one replica, two CP ranks
    pair = analyze(one_stage(2, stack=stack, replicas=2), catalog)
    assert not one.dp_groups
    assert lone.groups[0].memory.optimizer_gib == pytest.approx(
        one.groups[0].memory.optimizer_gib / 2, rel=1e-15)
    assert pair.groups[0].memory.optimizer_gib == pytest.approx(
        one.groups[0].memory.optimizer_gib / 4, rel=1e-15)
    # a lone replica still reduces its gradients over its CP ranks; two over all four
    (dpg,) = lone.dp_groups
    assert [ring.ranks for ring in dpg.rings] == [lone.groups[0].ranks]
    (dpg,) = pair.dp_groups
    assert sorted(dpg.rings[0].ranks) == sorted(pair.groups[0].ranks + pair.groups[1].ranks)
    program = lower(lone)
    collectives = np.flatnonzero((program.task_category == Category.DP)
                                 & (program.task_kind == TaskKind.COMM))
    assert len(collectives) == 2  # ZeRO-1: a reduce-scatter, then the parameter all-gather


def test_tp_ranks_sit_fastest(catalog):
    """Ranks q * tp + i: TP rings inside each CP rank, the CP ring across them."""
    a = analyze(one_stage(2, tp=4, stack=Stack(sequence_parallel=True)), catalog)
    program = lower(a)
    ranks = a.groups[0].ranks
    tp_tasks = np.flatnonzero((program.task_category == Category.TP)
                              & (program.task_stream >= 0))
    fl = np.array(program.flows(int(tp_tasks[0])))
    pairs = set(zip(program.flow_src[fl].tolist(), program.flow_dst[fl].tolist(), strict=True))
    assert pairs == {(ranks[q * 4 + i], ranks[q * 4 + (i + 1) % 4])
                     for q in range(2) for i in range(4)}
    _, flows = _cp_flows(program)
    pairs = set(zip(program.flow_src[flows[0]].tolist(), program.flow_dst[flows[0]].tolist(),
                    strict=True))
    assert pairs == {(ranks[j], ranks[(j + 4) % 8]) for j in range(8)}


def test_a_piece_takes_the_longer_of_its_compute_and_its_ring(catalog):
    """One stage at TP 1: the stream runs its pieces back to back, each the longer of
    its compute and its CP ring; a slow scale-up link makes the ring the longer one."""
    for bandwidth in (0.0, 8.0):  # the catalog's NVLink; a slow override (Gb/s)
        plan = one_stage(2)
        if bandwidth:
            plan.cluster.nodes[0].scale_up.bandwidth_gbps = bandwidth
        program = lower(analyze(plan, catalog))
        result = simulate(program)
        m = summary(program, result)
        computes = np.flatnonzero(np.isin(program.task_category,
                                          [Category.FORWARD, Category.BACKWARD]))
        beside, _ = _cp_flows(program)
        compute_s = result.task_end_s[computes] - result.task_start_s[computes]
        ring_s = result.task_end_s[beside] - result.task_start_s[beside]
        exposed = sum(max(0.0, r - c) for c, r in zip(compute_s, ring_s, strict=True))
        assert m["exposed_tp_s_max"] == pytest.approx(exposed, rel=1e-9, abs=1e-12)
        assert (exposed > 0) == bool(bandwidth)
        assert m["idle_s_max"] == pytest.approx(
            m["iteration_time_s"] - m["busy_s_max"] - m["exposed_tp_s_max"], abs=1e-9)


def test_cp_1_is_the_plan_without_cp(catalog):
    """``context_parallel: 1`` and unset are one plan: the same program, bit for bit."""
    plan = one_stage(1, tp=2, replicas=2, stack=Stack(zero_stage=1, tp_comm_overlap=True))
    ones = pb.DeploymentPlan()
    ones.CopyFrom(plan)
    for group in ones.device_groups:
        group.context_parallel = 1
    assert_identical(lower(analyze(ones, catalog)), lower(analyze(plan, catalog)))


def test_cp_speeds_up_long_sequences_and_never_changes_the_tokens(catalog):
    base = summary(*_run(one_stage(1, tp=2, seq=16384), catalog))
    split = summary(*_run(one_stage(4, tp=2, seq=16384), catalog))
    assert split["tokens_per_s"] > 2.5 * base["tokens_per_s"]  # 4x the GPUs, some ring cost
    assert split["mfu"] <= base["mfu"] * (1 + 1e-9)


def _run(plan, catalog):
    program = lower(analyze(plan, catalog))
    return program, simulate(program)


@pytest.mark.parametrize(("change", "field", "message"), [
    (dict(context_parallel=3), "device_groups[0].context_parallel", "divide the group's"),
    (dict(seq=8190), "device_groups[0].context_parallel", "multiple of 2 x context_parallel"),
    (dict(stack=Stack(flash_attention=False)), "device_groups[0].context_parallel",
     "needs flash_attention"),
])
def test_bad_cp_is_refused_in_one_line(catalog, change, field, message):
    cp = change.pop("context_parallel", 2)
    plan = one_stage(2, **change)
    for group in plan.device_groups:
        group.context_parallel = cp
    with pytest.raises(InputError, match=message) as error:
        validate_plan(plan, catalog, "p.pbtxt")
    assert f"{field}:" in str(error.value) and "\n" not in str(error.value)


def test_profiles_are_refused_under_cp(catalog):
    """A measured profile's block times are per TP degree: none says what CP makes of them."""
    model = analyze(one_stage(1), catalog).model
    profile = Profile(source="p.yaml", model=None, points={("h100-sxm", 1): ((1, 0.01, 0.02),)})
    gpu = catalog.gpu("H100-SXM")
    assert stage_cost(model, gpu, 1, 1, 1, 4, profile=profile).profiled
    with pytest.raises(InputError, match=r"p.yaml: context_parallel: .*\(got 2\)") as error:
        stage_cost(model, gpu, 1, 1, 1, 4, profile=profile, cp=2)
    assert "\n" not in str(error.value)
