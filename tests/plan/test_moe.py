"""Mixture of experts with expert parallelism: closed forms, the lowering, bad input.

The closed forms here are written from the model's definition (what a token does in a
MoE layer, what a rank holds), not from the workload module's functions, so that each
check is an independent count of the same thing.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from tests.plan.reference_lowering import reference_lower
from tests.support.lowering import assert_identical
from xsweep.errors import InputError
from xsweep.plan import workload
from xsweep.plan.analysis import analyze
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan, random_plan
from xsweep.plan.collectives import all_to_all, all_to_all_pairs
from xsweep.plan.lower import TemplateCache, lower, structure_key
from xsweep.plan.memory import memory_breakdown
from xsweep.plan.program import Category
from xsweep.plan.stack import Stack
from xsweep.search.closed_form import iteration_lower_bound
from xsweep.sim import simulate
from xsweep.spec import validate_plan
from xsweep.spec import xsweep_pb2 as pb
from xsweep.spec.catalog import GIB
from xsweep.spec.program_size import estimate_program_size

MOE_MODELS = ("mixtral-8x7b", "deepseek-v3")


def _active_forward_flops_per_token(m, seq: int) -> float:
    """Forward FLOPs of one token through the whole model, tokens spread evenly: 2 per
    multiply-add of every weight it meets (attention, router, ``top_k`` routed experts,
    shared experts, dense FFNs of the first layers, LM head) and the attention core's
    ``4 s h`` (scores and weighted values over the sequence)."""
    h, d = m.hidden_size, m.hidden_size // m.num_attention_heads
    attention = h * d * (2 * m.num_attention_heads + 2 * m.num_kv_heads)
    core = 2 * seq * h  # 4 s h FLOPs: 2 per multiply-add
    shared = m.num_shared_experts * (m.shared_expert_ffn_hidden_size
                                     or m.expert_ffn_hidden_size)
    moe = (attention + core + h * m.num_experts
           + 3 * h * (m.moe_top_k * m.expert_ffn_hidden_size + shared))
    dense = attention + core + 3 * h * m.ffn_hidden_size
    layers = m.moe_first_dense_layers * dense + (m.num_layers - m.moe_first_dense_layers) * moe
    return 2.0 * (layers + h * m.vocab_size)


@pytest.mark.parametrize("name", MOE_MODELS)
def test_model_flops_are_those_of_the_active_parameters(catalog, name):
    m = catalog.model(name)
    batch = 3
    got = workload.iteration_model_flops(m, batch)
    want = 3.0 * batch * m.seq_length * _active_forward_flops_per_token(m, m.seq_length)
    assert got == pytest.approx(want, rel=1e-12)


def test_total_parameters_match_the_published_counts(catalog):
    mixtral = catalog.model("mixtral-8x7b")
    h, f = mixtral.hidden_size, mixtral.expert_ffn_hidden_size
    attention = h * 128 * (2 * 32 + 2 * 8)
    layer = attention + h * 8 + 8 * 3 * h * f + 2 * h
    want = 32 * layer + 2 * 32000 * h + h
    assert workload.rank_params(mixtral, 1, 1, 32) == want
    assert want == pytest.approx(46.7e9, rel=2e-3)  # Mixtral of Experts: 47B total
    # DeepSeek-V3 with MHA in place of MLA (the preset's stated assumption): near 671B
    total = workload.rank_params(catalog.model("deepseek-v3"), 1, 1, 61)
    assert total == pytest.approx(671e9, rel=0.01)


@pytest.mark.parametrize("ep", [1, 2, 4, 8])
def test_expert_memory_per_rank(catalog, ep):
    """Weights per rank: attention and shared experts over TP, the routed experts
    ``experts / EP`` whole experts split over ``TP / EP`` ranks each: the same bytes at
    every EP; gradients and Adam's states follow, the states sharded over DP by ZeRO."""
    m = catalog.model("mixtral-8x7b")
    tp, first, last, dp = 8, 9, 16, 4
    h, f = m.hidden_size, m.expert_ffn_hidden_size
    experts_per_rank, width = m.num_experts // ep, f // (tp // ep)
    per_layer = (h * 128 * (2 * 32 // tp + 2 * 8 // tp) + h * m.num_experts
                 + experts_per_rank * 3 * h * width + 2 * h)
    params = (last - first + 1) * per_layer
    for zero, states in ((0, 12 * params), (1, 12 * params / dp)):
        stack = Stack(expert_parallel=ep, zero_stage=zero)
        mem = memory_breakdown(m, tp, 1, first, last, 1, 4, "1f1b", 8, stack, dp)
        assert mem.weights_gib == pytest.approx(2 * params / GIB, rel=1e-12)
        assert mem.grads_gib == pytest.approx(2 * params / GIB, rel=1e-12)
        assert mem.optimizer_gib == pytest.approx(states / GIB, rel=1e-12)


def test_routed_activations_grow_with_the_imbalance(catalog):
    m = catalog.model("mixtral-8x7b")
    held = [memory_breakdown(m, 8, 1, 1, 8, 0, 4, "1f1b", 8, Stack(expert_parallel=8,
                                                                   moe_imbalance=x), 1)
            for x in (1.0, 2.0)]
    assert held[1].activations_gib > held[0].activations_gib
    assert held[1].weights_gib == held[0].weights_gib
    # at EP 1 every rank holds a slice of every expert and takes every token
    gpu = catalog.gpu("H100-SXM")
    even, skewed = (workload.stage_cost(m, gpu, 8, 1, 1, 8, stack=Stack(moe_imbalance=x))
                    for x in (1.0, 2.0))
    assert dataclasses.astuple(even) == dataclasses.astuple(skewed)


def test_all_to_all_flows_are_pairwise():
    flows = all_to_all([10, 11, 12], 5.0, 2.0)
    assert [(s, d) for s, d, _, _ in flows] == [(10, 11), (10, 12), (11, 10), (11, 12),
                                                (12, 10), (12, 11)]
    assert {(b, h) for *_, b, h in flows} == {(10.0, 2.0)}
    assert all_to_all([3], 5.0) == [] and all_to_all([1, 2], 5.0, 0.0) == []
    assert len(all_to_all_pairs(8)) == 56


def _mixtral_plan(ep: int, *, recompute: str = "none", imbalance: float = 1.0,
                  layers: int = 4, nodes: int = 1, tp: int = 8) -> pb.DeploymentPlan:
    """Mixtral-8x7B cut to ``layers`` layers, one TP-``tp`` group per stage of H100s."""
    stages = tuple(StageReq("H100-SXM", tp, layers // nodes) for _ in range(nodes))
    return build_plan(f"mixtral-ep{ep}", "mixtral-8x7b",
                      [NodeReq("H100-SXM", 8, "cx7")] * nodes, [ReplicaReq(stages, 1, 4)],
                      seq_length=1024, num_layers=layers,
                      stack=Stack(expert_parallel=ep, recompute=recompute,
                                  moe_imbalance=imbalance))


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_all_to_all_bytes_per_layer_and_micro_batch(catalog, recompute):
    """Each rank sends each other rank of its group, per MoE layer and micro-batch, its
    ``b s / tp`` tokens' ``top_k`` copies routed to one EP rank's experts, at the
    imbalance: ``2 h (b s / tp) k x imbalance / EP`` bytes in each of the forward's
    dispatch and combine, and of the backward's (twice more under full recompute)."""
    ep, tp, imbalance, layers = 4, 8, 1.5, 4
    a = analyze(_mixtral_plan(ep, recompute=recompute, imbalance=imbalance, layers=layers),
                catalog)
    m, cost = a.model, a.groups[0].cost
    pair = 2 * m.hidden_size * (1024 / tp) * m.moe_top_k * imbalance / ep
    assert cost.a2a_pair_bytes == pytest.approx(pair, rel=1e-12)
    backward = 4 if recompute == "full" else 2
    assert cost.a2a_forward == (2,) * layers and cost.a2a_backward == (backward,) * layers
    # in the program: each TP task of a pass holds its ring and the pass's all-to-alls,
    # one flow per ordered pair of ranks of the group
    program = lower(a)
    tp_tasks = np.flatnonzero(program.task_category == int(Category.TP))
    assert len(tp_tasks) == 2 * 4  # a forward and a backward per micro-batch
    ring_flow = 2 * (tp - 1) / tp * cost.tp_allreduce_bytes  # per all-reduce
    for t in tp_tasks.tolist():
        flows = np.arange(program.flow_ptr[t], program.flow_ptr[t + 1])
        assert len(flows) == tp + tp * (tp - 1)
        ring, a2a = program.flow_bytes[flows[:tp]], program.flow_bytes[flows[tp:]]
        count = 2 if t == tp_tasks[0] else backward  # the first TP task is a forward's
        allreduces = 2 if t == tp_tasks[0] else (4 if recompute == "full" else 2)
        # same NVLink path, same bus efficiency: the ratio of payloads is exact
        np.testing.assert_allclose(a2a / ring[0], (layers * count * pair)
                                   / (layers * allreduces * ring_flow), rtol=1e-12)
        pairs = {(int(s), int(d)) for s, d in zip(program.flow_src[flows[tp:]],
                                                   program.flow_dst[flows[tp:]], strict=True)}
        assert pairs == {(i, j) for i in range(tp) for j in range(tp) if i != j}


def test_ep_one_adds_no_flows_and_dense_layers_none(catalog):
    one = lower(analyze(_mixtral_plan(1), catalog))
    eight = lower(analyze(_mixtral_plan(8), catalog))
    assert len(eight.flow_bytes) - len(one.flow_bytes) == 8 * 8 * 7  # 8 TP tasks
    # DeepSeek-V3's first three layers are dense: a stage of them has no all-to-all
    plan = build_plan("ds", "deepseek-v3", [NodeReq("H100-SXM", 8)],
                      [ReplicaReq((StageReq("H100-SXM", 4, 3), StageReq("H100-SXM", 4, 3)),
                                  1, 2)], seq_length=512, num_layers=6,
                      stack=Stack(expert_parallel=4))
    a = analyze(plan, catalog)
    assert a.groups[0].cost.a2a_forward == (0, 0, 0)
    assert a.groups[1].cost.a2a_forward == (2, 2, 2)
    program = lower(a)
    for t in np.flatnonzero(program.task_category == int(Category.TP)).tolist():
        flows = program.flow_ptr[t + 1] - program.flow_ptr[t]
        assert flows == (4 if program.task_stage[t] == 0 else 16)
    assert_identical(program, reference_lower(a))


def test_expert_parallelism_costs_time_on_the_wire(catalog):
    """The same plan with the all-to-alls on the wire takes longer in the simulator, and
    more so when the busiest expert takes twice the mean."""
    times = [simulate(lower(analyze(_mixtral_plan(ep, imbalance=x), catalog))).iteration_time_s
             for ep, x in ((1, 1.0), (8, 1.0), (8, 2.0))]
    assert times[0] < times[1] < times[2]


@pytest.mark.parametrize("model", MOE_MODELS)
def test_random_moe_plans_lower_as_the_reference(catalog, model):
    cache = TemplateCache()
    eps = set()
    for seed in range(10):
        plan = random_plan(seed, max_gpus=64, model=model)
        validate_plan(plan, catalog)
        a = analyze(plan, catalog)
        eps.add(a.stack.expert_parallel)
        assert_identical(lower(a, templates=cache), reference_lower(a))
    assert len(eps) >= 2  # both with and without all-to-alls


def test_the_imbalance_refills_one_structure(catalog):
    cache = TemplateCache()
    analyses = [analyze(_mixtral_plan(4, imbalance=x), catalog) for x in (1.0, 1.7)]
    assert len({structure_key(a) for a in analyses}) == 1
    for a in analyses:
        assert_identical(lower(a, templates=cache), reference_lower(a))
    assert len(cache) == 1


@pytest.mark.parametrize("seed", range(6))
def test_closed_form_tier_stays_below_the_simulator(catalog, seed):
    plan = random_plan(seed, max_gpus=32, model=MOE_MODELS[seed % 2])
    exact = simulate(lower(analyze(plan, catalog))).iteration_time_s
    assert iteration_lower_bound(plan, catalog) <= exact


def _with(plan: pb.DeploymentPlan, **fields) -> pb.DeploymentPlan:
    out = pb.DeploymentPlan()
    out.CopyFrom(plan)
    for path, value in fields.items():
        part, name = path.split("__")
        setattr(getattr(out, part), name, value)
    return out


@pytest.mark.parametrize(("fields", "field", "words"), [
    ({"training__expert_parallel": 3}, "training.expert_parallel", "divide the model's"),
    ({"training__expert_parallel": 8}, "training.expert_parallel", "must divide the 1 replicas"),
    ({"model__moe_top_k": 9}, "model.moe_top_k", "between 1 and num_experts"),
    ({"model__moe_capacity_factor": 0.5}, "model.moe_capacity_factor", "dropless"),
    ({"model__moe_first_dense_layers": 4}, "model.moe_first_dense_layers", "below num_layers"),
    ({"training__moe_imbalance": 0.5}, "training.moe_imbalance", "at least 1"),
    ({"training__precision": pb.FP8, "training__zero_stage": 1,
      "training__fp8_param_gather": True}, "training.fp8_param_gather", "not modelled"),
    ({"training__tp_comm_overlap": True}, "training.tp_comm_overlap", "not modelled"),
    ({"model__preset": "llama2-7b"}, "training.expert_parallel", "routed experts"),
])
def test_bad_moe_input_is_one_line(catalog, fields, field, words):
    plan = _with(_mixtral_plan(4, tp=4), **fields)
    with pytest.raises(InputError) as info:
        validate_plan(plan, catalog, "p.pbtxt")
    error = info.value
    assert error.field == field and words in error.reason
    assert "\n" not in str(error) and str(error).startswith("p.pbtxt: ")


def test_a_dense_model_keeps_its_numbers(catalog):
    """A dense model's plan reads the MoE fields as absent: its stage cost has no
    all-to-all and equals the cost with the default stack field by field."""
    m = catalog.model("llama2-7b")
    gpu = catalog.gpu("H100-SXM")
    cost = workload.stage_cost(m, gpu, 4, 1, 1, 8)
    assert cost.a2a_forward == () and cost.a2a_pair_bytes == 0.0
    again = workload.stage_cost(m, gpu, 4, 1, 1, 8, stack=Stack(moe_imbalance=3.0))
    assert dataclasses.astuple(again) == dataclasses.astuple(cost)
    assert workload.block_params(m, 4) == workload.rank_params(m, 4, 2, 2)
    assert math.isclose(workload.iteration_model_flops(m, 1),
                        3 * (32 * workload.block_forward_flops(m, 1)
                             + workload.head_forward_flops(m, 1)))


@pytest.mark.parametrize("model", MOE_MODELS)
def test_program_size_bounds_the_all_to_alls(catalog, model):
    """Validation's estimate of the program stays at or above the lowered program with
    the all-to-alls' flows, and within the factor the dense plans keep (4)."""
    for seed in range(8):
        plan = random_plan(seed, max_gpus=64, model=model)
        program = lower(analyze(plan, catalog))
        actual = program.num_tasks + program.num_flows
        assert actual <= estimate_program_size(plan) <= 4 * actual, seed


def test_moe_layers_at_ep_equal_tp_keep_only_the_attention_collective(catalog):
    """At EP = TP without shared experts (Mixtral), under sequence parallelism, a MoE
    layer's tokens move by all-to-all alone: one TP all-reduce per layer and pass (two
    backward under full recompute) against a dense layer's two; DeepSeek-V3's shared
    expert keeps its collective, and so does expert TP (EP below TP)."""
    gpu = catalog.gpu("H100-SXM")
    mixtral, deepseek = catalog.model("mixtral-8x7b"), catalog.model("deepseek-v3")
    for recompute, backward in (("none", 1), ("full", 2)):
        c = workload.stage_cost(mixtral, gpu, 8, 1, 1, 4,
                                stack=Stack(expert_parallel=8, recompute=recompute))
        assert c.tp_layer_forward == (1,) * 4 and c.tp_layer_backward == (backward,) * 4
        assert (c.tp_allreduces_forward, c.tp_allreduces_backward) == (4, 4 * backward)
    for model, ep, sp in ((deepseek, 8, True), (mixtral, 4, True), (mixtral, 8, False)):
        c = workload.stage_cost(model, gpu, 8, 1, 1, 4,
                                stack=Stack(expert_parallel=ep, sequence_parallel=sp))
        assert c.tp_layer_forward == () and c.tp_allreduces_forward == 8
    # in the program: each TP task's ring carries half the bytes it carries at EP 1
    rings = []
    for ep in (1, 8):
        a = analyze(_mixtral_plan(ep), catalog)
        program = lower(a)
        assert_identical(program, reference_lower(a))
        first_tp = int(np.flatnonzero(program.task_category == int(Category.TP))[0])
        rings.append(program.flow_bytes[program.flow_ptr[first_tp]:][:8])
    np.testing.assert_allclose(rings[1], rings[0] / 2, rtol=1e-12)
