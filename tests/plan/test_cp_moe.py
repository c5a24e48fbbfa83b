"""Context parallelism with experts (EP inside each CP rank's TP group), against closed
forms written from the model: a rank's FLOPs, routed rows and all-to-all bytes are those
of its ``b s / cp`` tokens, each CP rank's TP ranks run their own all-to-alls beside the
K/V ring, and plans of it go through the reference lowering, both bounds and the
simulator; EP over CP ranks it neither divides nor spans whole is refused in one line (EP
over a group's CP ranks, or over whole groups of replicas: ``tests/plan/test_cp_fold.py``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.support.lowering import assert_lowers_within_bounds
from xsweep.errors import InputError
from xsweep.plan.analysis import analyze
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan, random_plan
from xsweep.plan.lower import lower
from xsweep.plan.memory import memory_per_gpu
from xsweep.plan.program import Category
from xsweep.plan.stack import Stack
from xsweep.plan.workload import a2a_pair_bytes, routed_rows, stage_cost
from xsweep.spec import validate_plan

SEQ = 4096


def cp_plan(cp: int, ep: int, *, tp: int = 2, replicas: int = 1, model: str = "mixtral-8x7b",
            layers: int = 2, micro_batches: int = 2, **stack):
    """``replicas`` replicas of one stage of ``tp x cp`` H100s (a node of 8 each), the model
    cut to ``layers`` layers at a ``SEQ``-token sequence, EP ``ep`` inside TP."""
    replica = ReplicaReq((StageReq("H100-SXM", tp, layers),), 1, micro_batches)
    return build_plan(f"cp{cp}-ep{ep}", model, [NodeReq("H100-SXM", 8, "cx7")] * replicas,
                      [replica] * replicas, seq_length=SEQ, num_layers=layers,
                      context_parallel=cp, stack=Stack(expert_parallel=ep, **stack))


@pytest.mark.parametrize(("cp", "tp", "ep"), [(2, 2, 2), (4, 2, 1), (2, 4, 4), (4, 1, 1)])
def test_a_moe_ranks_work_and_all_to_all_are_its_share_of_the_tokens(catalog, cp, tp, ep):
    """A rank's routed token copies and its all-to-all pair bytes are ``1 / cp`` of those
    without CP (its ``b s / cp`` tokens), and the MoE block's FLOPs apart from the
    attention core too; the attention core is its queries against every key."""
    model = dataclasses.replace(catalog.model("mixtral-8x7b"), seq_length=SEQ,
                                num_layers=2)
    gpu = catalog.gpu("H100-SXM")
    stack = Stack(expert_parallel=ep, moe_imbalance=1.25)
    assert routed_rows(model, 2, tp, stack, cp) == routed_rows(model, 2, tp, stack) / cp
    h, k = model.hidden_size, model.moe_top_k
    load = 1.25 if ep > 1 else 1.0
    assert a2a_pair_bytes(model, 2, tp, stack, cp) == pytest.approx(
        2 * h * (2 * SEQ / (tp * cp)) * k * load / ep, rel=1e-12)
    plain = stage_cost(model, gpu, tp, 2, 1, 1, stack=stack)
    split = stage_cost(model, gpu, tp, 2, 1, 1, stack=stack, cp=cp)
    d = h // model.num_attention_heads
    q = model.num_attention_heads // tp * d
    core = 4 * 2 * SEQ * SEQ * q  # one rank's attention scores and values at cp 1
    assert split.forward_flops - core / cp == pytest.approx(
        (plain.forward_flops - core) / cp, rel=1e-9)
    assert split.a2a_pair_bytes == pytest.approx(plain.a2a_pair_bytes / cp, rel=1e-12)
    assert split.forward_time_s < plain.forward_time_s


def test_each_cp_ranks_tp_ranks_run_their_own_all_to_alls(catalog):
    """CP 2 x TP 4 at EP 4 on one node: each MoE piece's join task holds the two CP ranks'
    TP rings (4 flows each) and each CP rank's all-to-all among its own 4 TP ranks (12
    flows each), none between CP ranks; their payload is ``count x 2 h (b s / (TP CP)) k
    / EP`` over the bus efficiency of the NVLink path."""
    a = analyze(validate_plan(cp_plan(2, 4, tp=4, micro_batches=1), catalog), catalog)
    p = lower(a)
    ranks = a.groups[0].ranks
    cp_rank = {r: i // 4 for i, r in enumerate(ranks)}
    m = a.model
    pair = 2 * m.hidden_size * (SEQ / 8) * m.moe_top_k / 4
    tasks = np.flatnonzero(p.task_category == int(Category.TP)).tolist()
    assert len(tasks) == 2  # the forward and backward piece's joins
    for t in tasks:
        flows = range(p.flow_ptr[t], p.flow_ptr[t + 1])
        a2a = [f for f in flows if p.flow_bytes[f] < 2e7]
        assert len(flows) == 2 * 4 + 2 * 12 and len(a2a) == 24
        assert all(cp_rank[int(p.flow_src[f])] == cp_rank[int(p.flow_dst[f])] for f in a2a)
        pairs = {(int(p.flow_src[f]), int(p.flow_dst[f])) for f in a2a}
        assert len(pairs) == 24
        count = 2 * 2  # dispatch and combine of two MoE layers, forward or backward
        for f in a2a:
            path = p.path(f)
            efficiency = a.topology.bus_efficiency[path[np.argmin(a.topology.capacity[path])]]
            assert p.flow_bytes[f] == pytest.approx(count * pair / efficiency, rel=1e-12)


def test_cp_divides_the_routed_activations(catalog):
    """A rank holds ``1 / cp`` of the activations of a MoE stage (its tokens' share)."""
    model = dataclasses.replace(catalog.model("mixtral-8x7b"), seq_length=SEQ,
                                num_layers=2)
    stack = Stack(expert_parallel=2)

    def held(cp):
        return memory_per_gpu(model, catalog.gpu("H100-SXM"), 2, 1, 1, 2, stage_index=0,
                              num_stages=1, schedule="1f1b", num_micro_batches=2, stack=stack,
                              cp=cp).activations_gib

    assert held(4) == pytest.approx(held(1) / 4, rel=1e-12)


#: seeds of random plans with experts, CP 2 or 4 and EP 2 or 4 (inside TP), both models, in
#: BF16 and FP8, under ZeRO 0 and 1
CP_SEEDS = (3, 4, 5, 23, 33, 36)


@pytest.mark.parametrize("seed", CP_SEEDS)
def test_random_moe_plans_with_cp_lower_as_the_reference_under_both_bounds(catalog, seed):
    plan = random_plan(seed, max_gpus=32, model=("mixtral-8x7b", "deepseek-v3")[seed % 2])
    a = analyze(validate_plan(plan, catalog), catalog)
    assert a.groups[0].cp > 1 and a.stack.expert_parallel > 1
    assert_lowers_within_bounds(plan, a, catalog)


def test_cp_seeds_cover_both_models_precisions_and_zero_stages(catalog):
    plans = [random_plan(s, max_gpus=32, model=("mixtral-8x7b", "deepseek-v3")[s % 2])
             for s in CP_SEEDS]
    assert {p.model.preset for p in plans} == {"mixtral-8x7b", "deepseek-v3"}
    assert {p.training.zero_stage for p in plans} == {0, 1}
    assert len({p.training.precision for p in plans}) == 2
    assert {p.device_groups[0].context_parallel for p in plans} == {2, 4}


def test_ep_over_cp_ranks_it_neither_divides_nor_spans_whole_is_refused_in_one_line(catalog):
    """EP 4 over TP 2 x CP 3: two CP ranks, which neither divide the three nor span whole
    groups (EP over CP ranks and over whole groups of replicas:
    ``tests/plan/test_cp_fold.py``)."""
    replica = ReplicaReq((StageReq("H100-SXM", 2, 2),), 1, 2)
    plan = build_plan("cp3-ep4", "mixtral-8x7b", [NodeReq("H100-SXM", 8, "cx7")], [replica],
                      seq_length=6 * 1024, num_layers=2, context_parallel=3,
                      stack=Stack(expert_parallel=4))
    with pytest.raises(InputError) as info:
        validate_plan(plan, catalog, "p.pbtxt")
    assert info.value.field == "training.expert_parallel"
    assert "2 must divide context_parallel (3) or be a multiple of it" in info.value.reason
    assert "\n" not in str(info.value)
