"""DeepEP's dispatch (``moe_dispatcher`` deepep): a token crosses the NICs once per node it
reaches, to the rank at the sender's place there, which passes its copies on over NVLink.
Held to closed forms written from that definition (the chance a node is reached, the flows
and bytes per rank on its node and through its NIC), to the task-by-task reference
lowering, and to both bounds."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from tests.support.lowering import assert_lowers_within_bounds
from xsweep.errors import InputError
from xsweep.plan.analysis import analyze
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan, random_plan
from xsweep.plan.lower import lower, structure_key
from xsweep.plan.program import Category
from xsweep.plan.stack import Stack
from xsweep.plan.workload import node_reach
from xsweep.search.closed_form import expert_fanout, iteration_lower_bound
from xsweep.sim import simulate
from xsweep.spec import validate_plan
from xsweep.spec import xsweep_pb2 as pb

SEQ = 1024


def ep_plan(model: str, *, tp: int, ep: int, gpus_per_node: int, nodes: int,
            layers: int = 4, dispatcher: str = "deepep") -> pb.DeploymentPlan:
    """``model`` cut to ``layers`` layers on ``nodes`` nodes of ``gpus_per_node`` H100s, a
    replica of TP ``tp`` per ``tp`` GPUs, EP ``ep`` over ``ep / tp`` consecutive replicas,
    one micro-batch."""
    replicas = nodes * gpus_per_node // tp
    return build_plan(f"{model}-ep{ep}-tp{tp}-{dispatcher}", model,
                      [NodeReq("H100-SXM", gpus_per_node, "cx7")] * nodes,
                      [ReplicaReq((StageReq("H100-SXM", tp, layers),), 1, 1)] * replicas,
                      seq_length=SEQ, num_layers=layers,
                      stack=Stack(expert_parallel=ep, moe_dispatcher=dispatcher))


def test_a_node_is_reached_as_drawing_top_k_experts_without_replacement(catalog):
    mixtral, deepseek = catalog.model("mixtral-8x7b"), catalog.model("deepseek-v3")
    # Mixtral: 8 experts, top 2; on 2 nodes 4 experts each: 1 - C(4, 2) / C(8, 2)
    assert node_reach(mixtral, 2) == pytest.approx(1 - 6 / 28, rel=1e-12)
    # one expert a node: a node is reached by k of the 8 experts' draws
    assert node_reach(mixtral, 8) == pytest.approx(2 / 8, rel=1e-12)
    assert node_reach(mixtral, 1) == 1.0
    # DeepSeek-V3: 256 experts, top 8, at most 4 nodes a token; on 4 nodes the limit is
    # no limit; on 8 a node is among a token's 4 with chance 1/2, then holds one of the 8
    # experts drawn from the 4 nodes' 128 unless all 8 miss its 32
    assert deepseek.moe_max_nodes == 4
    assert node_reach(deepseek, 4) == pytest.approx(
        1 - math.comb(192, 8) / math.comb(256, 8), rel=1e-12)
    assert node_reach(deepseek, 8) == pytest.approx(
        0.5 * (1 - math.comb(96, 8) / math.comb(128, 8)), rel=1e-12)
    unlimited = dataclasses.replace(deepseek, moe_max_nodes=0)
    assert node_reach(unlimited, 8) == pytest.approx(
        1 - math.comb(224, 8) / math.comb(256, 8), rel=1e-12)


def _a2a_flows(p, t, tp: int) -> list[int]:
    """The all-to-all flows of TP task ``t`` (all of them at TP 1; at TP 4, not the ring's,
    which run from each rank to the next on its node)."""
    flows = range(p.flow_ptr[t], p.flow_ptr[t + 1])
    if tp == 1:
        return list(flows)
    ring = {(i, i // tp * tp + (i % tp + 1) % tp) for i in range(p.num_ranks)}
    seen: set = set()
    out = []
    for f in flows:  # a ring pair also carries an all-to-all flow: the first is the ring's
        pair = (int(p.flow_src[f]), int(p.flow_dst[f]))
        if pair in ring and pair not in seen:
            seen.add(pair)
            continue
        out.append(f)
    return out


def _nic_payload(a, p, rank: int = 0) -> float:
    """What ``rank``'s TP tasks send to other nodes (their all-to-alls': rings stay on a
    node)."""
    task = np.repeat(np.arange(p.num_tasks), np.diff(p.flow_ptr))
    return sum(_payload(a, p, f) for f in range(p.flow_src.size)
               if p.flow_src[f] == rank and p.rank_node[p.flow_dst[f]] != p.rank_node[rank]
               and p.task_category[task[f]] == int(Category.TP))


def _payload(a, p, f) -> float:
    path = p.path(f)
    return p.flow_bytes[f] * a.topology.bus_efficiency[path[np.argmin(a.topology.capacity[path])]]


@pytest.mark.parametrize("tp", (4, 1))
def test_a_rank_sends_each_node_mate_its_share_and_one_flow_per_other_node(catalog, tp):
    """Mixtral, EP 8 over two nodes of 4 (TP 4 x 2 replicas, or TP 1 x 8): per all-to-all a
    rank sends each of its 3 node-mates ``nodes = 2`` pair bytes (its own copies for them
    and those of the rank at its place on the other node) and the rank at its place on the
    other node ``reach x 8 / top_k`` pair bytes, ``pair = 2 h (b s / TP) k / 8``; the flat
    all-to-all sends 4 flows of one pair's bytes through the NIC instead."""
    a = analyze(ep_plan("mixtral-8x7b", tp=tp, ep=8, gpus_per_node=4, nodes=2, layers=2),
                catalog)
    p = lower(a)
    m = a.model
    pair = 2 * m.hidden_size * (SEQ / tp) * m.moe_top_k / 8
    count = 2 * 2  # dispatch and combine of two MoE layers
    reach = 1 - 6 / 28
    nodes = p.rank_node
    tasks = [t for t in np.flatnonzero(p.task_category == int(Category.TP)).tolist()
             if p.task_names[t].startswith("tp F")]
    assert len(tasks) == 8 // tp
    for t in tasks:
        flows = _a2a_flows(p, t, tp)
        for i in a.groups[int(p.task_device_group[t])].ranks:
            mine = [f for f in flows if p.flow_src[f] == i]
            near = [f for f in mine if nodes[p.flow_dst[f]] == nodes[i]]
            far = [f for f in mine if nodes[p.flow_dst[f]] != nodes[i]]
            assert sorted(int(p.flow_dst[f]) for f in near) == [
                j for j in range(8) if j != i and j // 4 == i // 4]
            assert [int(p.flow_dst[f]) for f in far] == [(i + 4) % 8]  # its place there
            for f in near:
                assert _payload(a, p, f) == pytest.approx(2 * count * pair, rel=1e-12)
            assert _payload(a, p, far[0]) == pytest.approx(reach * 8 / 2 * count * pair,
                                                           rel=1e-12)
    # per token, NIC copies: (nodes - 1) x reach, against the flat top_k (nodes - 1) / nodes
    flat = lower(analyze(ep_plan("mixtral-8x7b", tp=tp, ep=8, gpus_per_node=4, nodes=2,
                                 layers=2, dispatcher="alltoall"), catalog))
    assert _nic_payload(a, p) / _nic_payload(a, flat) == pytest.approx(reach / (m.moe_top_k / 2), rel=1e-12)


def test_the_closed_form_counts_deepep_flows_and_stays_under_the_simulator(catalog):
    plan = ep_plan("mixtral-8x7b", tp=1, ep=8, gpus_per_node=4, nodes=2, layers=2)
    a = analyze(plan, catalog)
    reach = 1 - 6 / 28
    # the largest flow on the node (2 pair bytes: its own and its mate's on the other
    # node) and to the other node (one copy of each token with an expert there)
    assert expert_fanout(plan, 8, [r // 4 for r in range(8)], a.model) == {
        g: (2, reach * 8 / 2) for g in range(8)}
    assert iteration_lower_bound(plan, catalog) <= simulate(lower(a)).iteration_time_s


@pytest.mark.parametrize(("tp", "ep", "gpus_per_node"), [(1, 8, 8), (4, 4, 4)])
def test_on_one_node_deepep_is_the_flat_all_to_all(catalog, tp, ep, gpus_per_node):
    """An EP group on one node (8 replicas of TP 1 on a node of 8, or EP inside each TP-4
    group, its replicas on two nodes): the same structure, flows and numbers."""
    deepep, flat = (analyze(ep_plan("mixtral-8x7b", tp=tp, ep=ep, gpus_per_node=gpus_per_node,
                                    nodes=2, dispatcher=d), catalog)
                    for d in ("deepep", "alltoall"))
    assert not deepep.ep_places and deepep.ep_dispatch(0) == (1.0, 1.0)
    assert structure_key(deepep) == structure_key(flat)
    a, b = lower(deepep), lower(flat)
    np.testing.assert_array_equal(a.flow_bytes, b.flow_bytes)
    assert simulate(a).iteration_time_s == simulate(b).iteration_time_s


def test_across_nodes_deepep_sends_fewer_nic_bytes_and_is_faster(catalog):
    deepep, flat = (analyze(ep_plan("mixtral-8x7b", tp=1, ep=8, gpus_per_node=4, nodes=2,
                                    dispatcher=d), catalog) for d in ("deepep", "alltoall"))
    assert structure_key(deepep) != structure_key(flat)
    a, b = lower(deepep), lower(flat)
    assert a.flow_src.size < b.flow_src.size
    assert simulate(a).iteration_time_s < simulate(b).iteration_time_s


def _deepep(plan: pb.DeploymentPlan) -> pb.DeploymentPlan:
    out = pb.DeploymentPlan()
    out.CopyFrom(plan)
    out.training.moe_dispatcher = pb.DEEPEP
    return out


def _valid(plan: pb.DeploymentPlan, catalog) -> bool:
    try:
        validate_plan(plan, catalog)
    except InputError:
        return False
    return True


#: random MoE plans with EP across replicas (of TP above 1 and of TP 1) whose EP groups
#: span nodes evenly, switched to DeepEP
DEEPEP_SEEDS = ((2, False), (19, False), (31, False), (8, True), (17, True), (18, True))


def deepep_plan(seed: int, tp_one: bool) -> pb.DeploymentPlan:
    return _deepep(random_plan(seed, max_gpus=32, model=("mixtral-8x7b", "deepseek-v3")[seed % 2],
                               ep_across=True, tp_one=tp_one))


@pytest.mark.parametrize(("seed", "tp_one"), DEEPEP_SEEDS)
def test_random_plans_with_deepep_lower_as_the_reference_under_both_bounds(catalog, seed,
                                                                           tp_one):
    plan = deepep_plan(seed, tp_one)
    a = analyze(plan, catalog)
    assert a.ep_places, "the seed's EP groups span nodes"
    assert_lowers_within_bounds(plan, a, catalog)


def test_deepseek_v3_over_eight_nodes_takes_its_node_limit(catalog):
    """DeepSeek-V3 (4 layers) at TP 1 on 8 nodes of 8, EP 64: each rank's group spans all 8
    nodes, more than its routing's 4, so a rank sends 7 NIC flows of ``reach x 64 / 8`` pair
    bytes with the limit's reach; lowered as the reference, under both bounds."""
    plan = ep_plan("deepseek-v3", tp=1, ep=64, gpus_per_node=8, nodes=8, layers=4)
    a = analyze(plan, catalog)
    assert a.ep_dispatch(0) == pytest.approx(
        (8.0, 0.5 * (1 - math.comb(96, 8) / math.comb(128, 8)) * 64 / 8), rel=1e-12)
    p = assert_lowers_within_bounds(plan, a, catalog)
    nodes = p.rank_node
    across = [f for f in range(p.flow_src.size) if p.flow_src[f] == 0
              and nodes[p.flow_dst[f]] != 0]
    assert sorted({int(p.flow_dst[f]) for f in across}) == [8 * n for n in range(1, 8)]


def test_deepep_seeds_span_nodes_with_both_models_and_tp_degrees(catalog):
    plans = [deepep_plan(seed, tp_one) for seed, tp_one in DEEPEP_SEEDS]
    assert all(_valid(plan, catalog) for plan in plans)
    assert {plan.model.preset for plan in plans} == {"mixtral-8x7b", "deepseek-v3"}
    tps = {len(g.ranks) for plan in plans for g in plan.device_groups}
    assert 1 in tps and max(tps) > 1
    assert {plan.training.precision for plan in plans} == {pb.BF16, pb.FP8}


def test_an_ep_group_spread_unevenly_over_nodes_is_refused_in_one_line(catalog):
    """Nodes of 6 and 2 GPUs: the EP group of 8 TP-1 replicas holds 6 ranks on one node
    and 2 on the other, so no rank has a place on every node."""
    plan = build_plan("uneven", "mixtral-8x7b",
                      [NodeReq("H100-SXM", 6, "cx7"), NodeReq("H100-SXM", 2, "cx7")],
                      [ReplicaReq((StageReq("H100-SXM", 1, 2),), 1, 1)] * 8,
                      seq_length=SEQ, num_layers=2,
                      stack=Stack(expert_parallel=8, moe_dispatcher="deepep"))
    with pytest.raises(InputError) as err:
        validate_plan(plan, catalog)
    assert err.value.field == "training.moe_dispatcher"
    assert "spread evenly" in str(err.value) and "\n" not in str(err.value)
    plan.training.moe_dispatcher = pb.ALLTOALL
    validate_plan(plan, catalog)
