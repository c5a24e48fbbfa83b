"""Expert parallelism across data-parallel replicas (EP a multiple of TP): the layout,
work and memory per rank, the all-to-alls over the NICs, written from the model's
definition (what a rank holds and sends), not from the workload module's functions."""

from __future__ import annotations

import pytest

from xsweep.plan.analysis import analyze
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan
from xsweep.plan.stack import Stack
from xsweep.plan.workload import BF16_BYTES, rank_params

SEQ = 1024


def across_plan(ep: int, *, tp: int = 4, gpus_per_node: int = 4, nodes: int = 2,
                layers: int = 4, stages: int = 1, zero_stage: int = 0,
                recompute: str = "none", imbalance: float = 1.0,
                micro_batches: int = 4) -> object:
    """Mixtral-8x7B cut to ``layers`` layers on ``nodes`` nodes of ``gpus_per_node``
    H100s, as many replicas of ``stages`` TP-``tp`` stages as the GPUs hold."""
    replicas = nodes * gpus_per_node // (tp * stages)
    stage = tuple(StageReq("H100-SXM", tp, layers // stages) for _ in range(stages))
    return build_plan(f"mixtral-ep{ep}-tp{tp}", "mixtral-8x7b",
                      [NodeReq("H100-SXM", gpus_per_node, "cx7")] * nodes,
                      [ReplicaReq(stage, 1, micro_batches)] * replicas,
                      seq_length=SEQ, num_layers=layers,
                      stack=Stack(expert_parallel=ep, zero_stage=zero_stage,
                                  recompute=recompute, moe_imbalance=imbalance))


def test_a_rank_holds_experts_over_ep_whole_experts(catalog):
    """TP 4, EP 8 (two replicas): each rank holds one whole expert per MoE layer; its
    other weights are as at EP 4 (within TP), whose routed part is every expert's width
    over TP."""
    a = analyze(across_plan(8), catalog)
    m = a.model
    h, f = m.hidden_size, m.expert_ffn_hidden_size
    across = rank_params(m, 4, 1, 4, 8)
    within = rank_params(m, 4, 1, 4, 4)
    assert within - across == 4 * 3 * h * (8 * f // 4 - f)
    assert a.groups[0].cost.grad_bytes == BF16_BYTES * across


def test_routed_work_covers_the_ep_groups_tokens(catalog):
    """A rank's routed experts take its EP group's tokens (two replicas' ``b s``), ``top_k``
    copies each, over the EP ranks: ``2 b s k / 8 = b s k / TP`` rows; at full width, so
    the expert FLOPs per rank equal EP 4's (every expert over TP 4, all ``b s k / 4``
    rows at a quarter of the width)."""
    a8 = analyze(across_plan(8), catalog)
    a4 = analyze(across_plan(4), catalog)
    # same routed FLOPs per rank: only the all-to-all and its receivers change
    assert a8.groups[0].cost.forward_flops == pytest.approx(a4.groups[0].cost.forward_flops,
                                                            rel=1e-12)
    m = a8.model
    pair = 2 * m.hidden_size * (SEQ / 4) * m.moe_top_k / 8
    assert a8.groups[0].cost.a2a_pair_bytes == pytest.approx(pair, rel=1e-12)


def test_expert_optimizer_states_shard_over_the_replicas_holding_them(catalog):
    """Under ZeRO-1 with 4 replicas at EP 8 = TP 4 x 2, the non-expert states shard over
    4 replicas and the expert states over the 2 that hold the same experts."""
    a = analyze(across_plan(8, nodes=4, zero_stage=1), catalog)
    m = a.model
    params = rank_params(m, 4, 1, 4, 8)
    experts = 4 * 3 * m.hidden_size * m.expert_ffn_hidden_size
    want = 12 * ((params - experts) / 4 + experts / 2) / 2**30
    assert a.groups[0].memory.optimizer_gib == pytest.approx(want, rel=1e-12)


def test_the_dp_ring_carries_each_ranks_own_gradients(catalog):
    """The one DP ring over every replica moves, per rank, the gradients it holds (its
    ``experts / EP`` experts included): the unsharded bytes over TP, up to the router and
    norms that every TP rank holds whole (a part in ten thousand here)."""
    a = analyze(across_plan(8, nodes=4), catalog)
    d = 0
    assert a.expert_fold(d) == 2
    per_rank = a.grad_bytes(1, 4, a.expert_fold(d)) / 4
    assert per_rank == pytest.approx(a.groups[0].cost.grad_bytes, rel=2e-4)
    # the EP-4 (within TP) ring moves every expert's quarter-width slice: more bytes
    within = analyze(across_plan(4, nodes=4), catalog)
    experts = 4 * 3 * within.model.hidden_size * within.model.expert_ffn_hidden_size
    assert (within.grad_bytes(1, 4) - a.grad_bytes(1, 4, 2)) / 4 == 2 * (8 / 4 - 1) * experts
