"""Expert parallelism across replicas under FSDP (ZeRO-3): each layer's parameters are
gathered, and its gradients reduce-scattered, over the stage's replicas, except the routed
experts, which only the ``d / r`` replicas at one place in their EP groups hold (the expert
data-parallel group, as Megatron-Core shards them); those gather and reduce them in expert
rings beside the dense rings of the same collective. Checked against closed forms of the
memory per rank and the bytes of a MoE layer's collectives, and random plans of it
through the reference lowering, the program-size estimate, the closed form and the
simulator."""

from __future__ import annotations

import pytest

from tests.plan.test_moe_across import _dp_flows, _expert_bytes, across_plan
from tests.support.lowering import assert_lowers_within_bounds, payload_bytes
from xsweep.plan.analysis import analyze
from xsweep.plan.builder import random_plan
from xsweep.plan.lower import lower
from xsweep.plan.memory import ADAM_BYTES_PER_PARAM, FSDP_GATHERED_BLOCKS
from xsweep.plan.program import Category
from xsweep.plan.workload import BF16_BYTES, block_params, rank_expert_params, rank_params
from xsweep.spec import validate_plan

GIB = 2**30


def test_a_rank_holds_its_experts_share_over_the_replicas_holding_them(catalog):
    """TP 2 x 8 replicas at EP 4 (EP groups of two replicas) under FSDP: a rank's weights,
    gradients and optimizer states are its dense parameters over the 8 replicas and its 2
    whole experts per layer over the 4 replicas that hold them, plus two gathered blocks
    (with its EP group's experts only: 2 experts, not a TP slice of all 8)."""
    a = analyze(validate_plan(across_plan(4, tp=2, gpus_per_node=4, nodes=4, zero_stage=3),
                              catalog), catalog)
    m = a.model
    params = rank_params(m, 2, 1, 4, 4)
    experts = rank_expert_params(m, 2, 1, 4, 4)
    assert experts == 4 * 2 * 3 * m.hidden_size * m.expert_ffn_hidden_size
    held = (params - experts) / 8 + experts / 4
    block = block_params(m, 2, 4)
    assert block < block_params(m, 2, 1)  # the MoE block's experts split by EP, not TP
    memory = a.groups[0].memory
    assert memory.weights_gib == pytest.approx(
        (BF16_BYTES * held + FSDP_GATHERED_BLOCKS * BF16_BYTES * block) / GIB, rel=1e-12)
    assert memory.grads_gib == pytest.approx((2 * held + 2 * block) / GIB, rel=1e-12)
    assert memory.optimizer_gib == pytest.approx(ADAM_BYTES_PER_PARAM * held / GIB, rel=1e-12)


@pytest.mark.parametrize(("name", "passes"), [("ag L1 F mb0", 1), ("rs L1 mb0", 1)])
def test_a_moe_layers_collectives_hold_dense_and_expert_rings(catalog, name, passes):
    """The same plan: a MoE layer's all-gather (and reduce-scatter) holds the dense rings
    (per TP rank, all 8 replicas: 16 flows) on the layer's dense bytes, ``(8 - 1) / 8``
    of a rank's chunk per flow, and the expert rings (per TP rank and place, the 4
    replicas two apart: 16 flows) on the rank's 2 experts of the layer, ``(4 - 1) / 4``
    of them per flow."""
    a = analyze(validate_plan(across_plan(4, tp=2, gpus_per_node=4, nodes=4, zero_stage=3),
                              catalog), catalog)
    p = lower(a)
    dense_flows, expert_flows, gap = _dp_flows(a, p, name)
    assert len(dense_flows) == 16 and len(expert_flows) == 16
    assert {gap[f] for f in expert_flows} == {2}
    expert = _expert_bytes(a.model, 4, 1)
    dense = a.grad_bytes(1, 1, 2) / 2 - expert
    assert payload_bytes(a, p, dense_flows) == pytest.approx(16 * passes * 7 / 8 * dense,
                                                             rel=1e-12)
    assert payload_bytes(a, p, expert_flows) == pytest.approx(16 * passes * 3 / 4 * expert,
                                                              rel=1e-12)


def test_at_tp_one_a_moe_piece_runs_its_all_to_alls_alone(catalog):
    """Eight replicas of TP 1 at EP 4 under FSDP: each MoE piece is followed by a TP task
    of its all-to-all flows alone, to the 3 other replicas of its EP group."""
    a = analyze(validate_plan(across_plan(4, tp=1, gpus_per_node=4, nodes=2, zero_stage=3),
                              catalog), catalog)
    p = lower(a)
    replica = {r: g.replica for g in a.groups for r in g.ranks}
    tp_tasks = [t for t in range(p.num_tasks) if p.task_category[t] == int(Category.TP)]
    assert tp_tasks
    for t in tp_tasks:
        flows = range(p.flow_ptr[t], p.flow_ptr[t + 1])
        assert len(flows) == 3
        src = {replica[int(p.flow_src[f])] for f in flows}
        dst = {replica[int(p.flow_dst[f])] for f in flows}
        (r,) = src
        assert dst == {r - r % 4 + k for k in range(4)} - {r}


#: seeds of random plans under FSDP whose EP groups span replicas (``ep_across``, ``fsdp``;
#: ``tp_one`` for the second of each pair): TP 1, 2 and 4, experts held once and by
#: several replicas, both models, BF16 and FP8
FSDP_SEEDS = ((37, False), (37, True), (49, False), (72, False), (2, False), (28, True))


def _fsdp_plan(seed: int, tp_one: bool):
    return random_plan(seed, max_gpus=32, model=("mixtral-8x7b", "deepseek-v3")[seed % 2],
                       ep_across=True, tp_one=tp_one, fsdp=True)


@pytest.mark.parametrize(("seed", "tp_one"), FSDP_SEEDS)
def test_random_fsdp_plans_with_ep_across_lower_as_the_reference(catalog, seed, tp_one):
    plan = _fsdp_plan(seed, tp_one)
    a = analyze(validate_plan(plan, catalog), catalog)
    assert a.fsdp and a.stack.expert_parallel > a.groups[0].tp
    assert_lowers_within_bounds(plan, a, catalog)


def test_fsdp_seeds_cover_what_they_say(catalog):
    analyses = [analyze(validate_plan(_fsdp_plan(*s), catalog), catalog) for s in FSDP_SEEDS]
    assert {a.groups[0].tp for a in analyses} == {1, 2, 4}
    assert {a.model.name for a in analyses} == {"mixtral-8x7b", "deepseek-v3"}
    assert {a.stack.precision for a in analyses} == {"bf16", "fp8"}
    assert {bool(a.expert_rings(0)) for a in analyses} == {False, True}


@pytest.mark.parametrize("tp", (1, 2, 4))
def test_fsdp_with_deepep_across_nodes_lowers_as_the_reference(catalog, tp):
    """Four nodes of 4 GPUs under FSDP at EP 8 over replicas of TP ``tp``, with DeepEP's
    dispatch across the nodes the EP groups span: the expert rings and the DeepEP flows
    together, against the reference lowering, the size estimate, the closed form and the
    simulator."""
    plan = across_plan(8, tp=tp, gpus_per_node=4, nodes=4, zero_stage=3,
                       moe_dispatcher="deepep")
    a = analyze(validate_plan(plan, catalog), catalog)
    assert a.fsdp and a.ep_places and a.expert_rings(0)
    assert_lowers_within_bounds(plan, a, catalog)
