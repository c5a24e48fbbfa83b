"""Expert parallelism across data-parallel replicas (EP a multiple of TP): the layout,
work and memory per rank, the all-to-alls over the NICs, written from the model's
definition (what a rank holds and sends), not from the workload module's functions."""

from __future__ import annotations

import numpy as np
import pytest

from tests.plan.reference_lowering import reference_lower
from tests.support.lowering import assert_identical, assert_lowers_within_bounds, payload_bytes
from xsweep.plan.analysis import analyze
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan, random_plan
from xsweep.plan.lower import lower, structure_key
from xsweep.plan.program import Category
from xsweep.plan.stack import Stack
from xsweep.plan.summary import plan_summary
from xsweep.plan.workload import BF16_BYTES, rank_params
from xsweep.search.closed_form import expert_fanout, iteration_lower_bound
from xsweep.sim import simulate
from xsweep.spec import validate_plan
from xsweep.spec.program_size import estimate_program_size

SEQ = 1024


def across_plan(ep: int, *, tp: int = 4, gpus_per_node: int = 4, nodes: int = 2,
                layers: int = 4, stages: int = 1, zero_stage: int = 0,
                recompute: str = "none", imbalance: float = 1.0,
                micro_batches: int = 4, **stack) -> object:
    """Mixtral-8x7B cut to ``layers`` layers on ``nodes`` nodes of ``gpus_per_node``
    H100s, as many replicas of ``stages`` TP-``tp`` stages as the GPUs hold (``stack``:
    further training-stack options)."""
    replicas = nodes * gpus_per_node // (tp * stages)
    stage = tuple(StageReq("H100-SXM", tp, layers // stages) for _ in range(stages))
    return build_plan(f"mixtral-ep{ep}-tp{tp}", "mixtral-8x7b",
                      [NodeReq("H100-SXM", gpus_per_node, "cx7")] * nodes,
                      [ReplicaReq(stage, 1, micro_batches)] * replicas,
                      seq_length=SEQ, num_layers=layers,
                      stack=Stack(expert_parallel=ep, zero_stage=zero_stage,
                                  recompute=recompute, moe_imbalance=imbalance, **stack))


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


def _expert_bytes(model, ep: int, layers: int) -> float:
    """bf16 gradient bytes of the ``experts / EP`` whole experts a rank holds in each of
    ``layers`` MoE layers (SwiGLU: three matrices of ``h x f``)."""
    return 2.0 * layers * model.num_experts // ep * 3 * model.hidden_size \
        * model.expert_ffn_hidden_size


def test_dense_and_expert_gradients_split_a_ranks_own(catalog):
    """The dense part of a DP group's gradients plus the expert part are each rank's own
    gradients (its ``experts / EP`` experts included): the unsharded bytes over TP, up to
    the router and norms that every TP rank holds whole (a part in ten thousand here);
    the expert part is the rank's experts over TP."""
    a = analyze(across_plan(8, nodes=4), catalog)
    d = 0
    assert a.expert_fold(d) == 2
    dense, expert = a.dp_bytes(d, 1, 4)
    assert expert / 4 == _expert_bytes(a.model, 8, 4)
    assert (dense + expert) / 4 == pytest.approx(a.groups[0].cost.grad_bytes, rel=2e-4)
    # inside TP (EP 4) nothing is apart: every expert's quarter-width slice rides the ring
    within = analyze(across_plan(4, nodes=4), catalog)
    assert within.dp_bytes(d, 1, 4) == (within.grad_bytes(1, 4), 0.0)
    assert within.expert_rings(d) == ()


def test_expert_rings_join_the_replicas_holding_the_same_experts(catalog):
    """TP 2 x 8 replicas at EP 4 (EP groups of two replicas): per TP rank (chunk) two
    expert rings, the even replicas' and the odd ones', each of four ranks in replica
    order; with four replicas at EP 8 (an EP group of all four) each expert is held once
    and there is none."""
    a = analyze(across_plan(4, tp=2, gpus_per_node=4, nodes=4), catalog)
    ranks = {g.replica: g.ranks for g in a.groups}
    assert a.expert_rings(0) == tuple(tuple(ranks[p][c] for p in range(q, 8, 2))
                                      for c in range(2) for q in range(2))
    whole = analyze(across_plan(8, tp=2, gpus_per_node=4, nodes=2), catalog)
    assert whole.expert_fold(0) == 4 and whole.expert_rings(0) == ()
    # its all-reduce is the dense ring's alone, on the dense bytes
    p = lower(whole)
    (t,) = [t for t, n in enumerate(p.task_names) if n == "dp L1-4"]
    dense = whole.grad_bytes(1, 4, 4) / 2 - _expert_bytes(whole.model, 8, 4)
    assert payload_bytes(whole, p, _task_flows(p, t)) == pytest.approx(
        8 * 2 * 3 / 4 * dense, rel=1e-12)


def test_the_plan_summary_shows_the_expert_rings(catalog):
    """``xsweep plan`` lists each DP group's expert rings and bytes where EP groups span
    replicas (dense bytes per chunk beside them), and nothing of them elsewhere."""
    a = analyze(across_plan(4, tp=2, gpus_per_node=4, nodes=4), catalog)
    (g,) = plan_summary(a, lower(a))["dp_groups"]
    assert g["expert_rings"] == [list(r) for r in a.expert_rings(0)]
    assert g["expert_bytes_per_rank_per_chunk"] == _expert_bytes(a.model, 4, 4)
    assert g["bytes_per_rank_per_chunk"] + g["expert_bytes_per_rank_per_chunk"] == \
        a.grad_bytes(1, 4, 2) / 2
    within = analyze(across_plan(2, tp=2, gpus_per_node=4, nodes=4), catalog)
    assert "expert_rings" not in plan_summary(within, lower(within))["dp_groups"][0]


def _dp_flows(a, p, name):
    """The flows of the DP task ``name``: (dense ones, expert ones), told by the distance
    of their ends in replicas (an expert ring joins every ``r``-th replica)."""
    replica = {r: g.replica for g in a.groups for r in g.ranks}
    (t,) = [t for t, n in enumerate(p.task_names) if n == name]
    flows = list(_task_flows(p, t))
    d = len(a.replicas)
    gap = {f: (replica[int(p.flow_dst[f])] - replica[int(p.flow_src[f])]) % d for f in flows}
    return [f for f in flows if gap[f] == 1], [f for f in flows if gap[f] != 1], gap


@pytest.mark.parametrize("zero_stage", (0, 1))
def test_expert_ring_flows_carry_the_expert_dp_groups_share(catalog, zero_stage):
    """TP 2 x 8 replicas at EP 4 (r = 2, d / r = 4): the all-reduce of a bucket holds the
    dense ring (8 ranks per TP rank) on the dense bytes, ``2 (8 - 1) / 8`` of them per
    flow, and the expert rings (4 ranks, every other replica) on the rank's own 2 experts
    per layer, ``2 (4 - 1) / 4`` of them per flow (ZeRO-1: half as much in the
    reduce-scatter and again in the parameter all-gather), each flow after its ring's
    hop latencies (``2 (k - 1)``, or ``k - 1``)."""
    a = analyze(across_plan(4, tp=2, gpus_per_node=4, nodes=4, zero_stage=zero_stage), catalog)
    p = lower(a)
    expert = _expert_bytes(a.model, 4, 4)
    dense = a.grad_bytes(1, 4, 2) / 2 - expert
    names = ("rs L1-4", "ag L1-4") if zero_stage else ("dp L1-4",)
    passes = 1 if zero_stage else 2
    for name in names:
        dense_flows, expert_flows, gap = _dp_flows(a, p, name)
        assert len(dense_flows) == 16 and len(expert_flows) == 16
        assert {gap[f] for f in expert_flows} == {2}
        assert payload_bytes(a, p, dense_flows) == pytest.approx(
            16 * passes * 7 / 8 * dense, rel=1e-12)
        assert payload_bytes(a, p, expert_flows) == pytest.approx(
            16 * passes * 3 / 4 * expert, rel=1e-12)
    # the old single ring over all 8 replicas would have moved 2 x 7/8 of the experts


def test_an_expert_ring_bound_all_reduce_takes_the_closed_form(catalog):
    """Four replicas of TP 4, one per node, EP 8 (r = 2): each rank's NIC carries its
    dense ring flow (``2 x 3/4`` of the dense bytes) and its expert ring flow (to the
    replica two on, ``2 x 1/2`` of its experts' bytes, nearly nine tenths of the whole).
    Starting together behind the barrier and sharing every NIC alike, the all-reduce
    lasts the expert flow's latencies plus both flows' bytes over the NIC's rate, where
    one ring over all four replicas would have moved ``2 x 3/4`` of the experts too."""
    a = analyze(across_plan(8, nodes=4, micro_batches=1), catalog)
    p = lower(a)
    result = simulate(p)
    dense_flows, expert_flows, _ = _dp_flows(a, p, "dp L1-4")
    assert len(dense_flows) == 16 and len(expert_flows) == 16
    expert = _expert_bytes(a.model, 8, 4)
    dense = a.grad_bytes(1, 4, 2) / 4 - expert
    assert expert / (expert + dense) > 0.85
    f = expert_flows[0]
    path = p.path(f)
    narrowest = path[np.argmin(a.topology.capacity[path])]
    assert "nic" in p.link_names[narrowest]
    rate = a.topology.capacity[narrowest] * a.topology.bus_efficiency[narrowest]
    (t,) = [t for t, n in enumerate(p.task_names) if n == "dp L1-4"]
    took = result.task_end_s[t] - result.task_start_s[t]
    want = p.flow_latency_s[f] + (2 * 3 / 4 * dense + 2 * 1 / 2 * expert) / rate
    assert took == pytest.approx(want, rel=1e-9)
    assert took < p.flow_latency_s[f] + 2 * 3 / 4 * (dense + expert) / rate


def test_dense_and_expert_buckets_close_at_their_own_layers(catalog):
    """TP 2 x 8 replicas at EP 4 (EP groups of 2 replicas, each expert held by 4), the
    gradient reduction overlapped: as Megatron-Core keeps the experts' gradients in
    buffers of their own, the dense buckets count a rank's parameters but its routed
    experts, and the expert buckets its 2 whole experts per layer. A bucket of three
    middle layers' dense parameters closes every three layers from the top, at the LM
    head's layer (8) and the embedding's (1) alone; an expert bucket of that size closes
    at every layer (a layer's experts are 17 times its dense parameters)."""
    m = catalog.model("mixtral-8x7b")
    h, f = m.hidden_size, m.expert_ffn_hidden_size
    d = h // m.num_attention_heads
    experts = 2 * 3 * h * f  # a rank's 2 whole experts of one layer
    dense = h * d * (2 * 32 // 2 + 2 * 8 // 2) + h * m.num_experts + 2 * h  # attention/TP,
    # router and norms
    assert rank_params(m, 2, 4, 4, 4) == dense + experts
    size = 3 * dense
    assert m.vocab_size * h // 2 > size  # the embedding's or the head's shard alone
    a = analyze(across_plan(4, tp=2, gpus_per_node=4, nodes=4, layers=8, dp_overlap=True,
                            dp_bucket_params=size), catalog)
    assert a.expert_fold(0) == 2 and a.expert_rings(0)
    assert a.dp_buckets[0] == (1, 2, 5, 8)
    assert a.expert_buckets[0] == tuple(range(1, 9))
    # each kind of task carries its own rings: 8 dense flows per chunk ring, or 4 x 2
    # expert flows per chunk
    p = lower(a)
    names = [n for n in p.task_names if n.startswith("dp ") and "barrier" not in n]
    assert names == ["dp L1-1", "dp L2-4", "dp L5-7", "dp L8-8"] + [
        f"dp experts L{x}-{x}" for x in range(1, 9)]
    for name in names:
        dense_flows, expert_flows, _ = _dp_flows(a, p, name)
        if "experts" in name:
            assert not dense_flows and len(expert_flows) == 16
        else:
            assert len(dense_flows) == 16 and not expert_flows
    (g,) = plan_summary(a, p)["dp_groups"]  # `xsweep plan` shows both
    assert g["buckets"] == [[1, 1], [2, 4], [5, 7], [8, 8]]
    assert g["expert_buckets"] == [[x, x] for x in range(1, 9)]
    # without overlap one bucket carries both kinds, as before
    plain = analyze(across_plan(4, tp=2, gpus_per_node=4, nodes=4, layers=8), catalog)
    assert plain.dp_buckets[0] == (1,) and plain.expert_buckets[0] == ()


def test_experts_held_once_are_not_bucketed(catalog):
    """TP 2, EP 8 over all 4 replicas: each expert is held by one replica, so nothing of
    the experts is reduced; the dense buckets count the dense parameters alone and there
    are no expert buckets."""
    m = catalog.model("mixtral-8x7b")
    dense = rank_params(m, 2, 2, 2, 8) - 3 * m.hidden_size * m.expert_ffn_hidden_size
    a = analyze(across_plan(8, tp=2, gpus_per_node=4, nodes=2, layers=8, dp_overlap=True,
                            dp_bucket_params=2 * dense), catalog)
    assert a.expert_fold(0) == 4 and not a.expert_rings(0)
    assert a.dp_buckets[0] == (1, 2, 4, 6, 8) and a.expert_buckets[0] == ()


def test_ep_groups_are_consecutive_replicas_of_a_stage(catalog):
    """Four replicas of two stages at TP 2 and EP 4: replicas (0, 1) and (2, 3) form the
    EP groups of each stage; a group's peers start with itself and wrap within its EP
    group."""
    a = analyze(across_plan(4, tp=2, nodes=4, stages=2), catalog)
    by_place = {(g.replica, g.stage): i for i, g in enumerate(a.groups)}
    for stage in range(2):
        for replica, partner in ((0, 1), (1, 0), (2, 3), (3, 2)):
            gi = by_place[replica, stage]
            assert a.ep_peers[gi] == (gi, by_place[partner, stage])


def _task_flows(p, t):
    return range(p.flow_ptr[t], p.flow_ptr[t + 1])


def _a2a_flows(p, t, tp: int) -> list[int]:
    """The all-to-all flows of TP task ``t``: all of them at TP 1, else those under 5 MB
    (not the TP ring's, in these small plans)."""
    return [f for f in _task_flows(p, t) if tp == 1 or p.flow_bytes[f] < 5e6]


@pytest.mark.parametrize("tp", (4, 1))
def test_all_to_all_flows_reach_the_other_replicas_ranks(catalog, tp):
    """EP 8 = TP 4 x 2 replicas, one per node (or TP 1 x 8 replicas, four per node): each
    forward TP task of a MoE piece holds its TP ring (none at TP 1) and, per rank, one
    flow to each of the other 7 ranks of its EP group, 4 of them across the NIC to the
    other node, each ``count x 2 h (b s / TP) k / EP`` bytes over the bus efficiency of
    its path."""
    a = analyze(across_plan(8, tp=tp, micro_batches=1, layers=2), catalog)
    p = lower(a)
    m = a.model
    pair = 2 * m.hidden_size * (SEQ / tp) * m.moe_top_k / 8
    count = 2 * 2  # dispatch and combine, two MoE layers
    nodes = p.rank_node
    tasks = np.flatnonzero(p.task_category == int(Category.TP)).tolist()
    assert len(tasks) == 2 * 8 // tp  # a forward and a backward piece per replica
    for t in tasks:
        own = set(a.groups[int(p.task_device_group[t])].ranks)
        flows = _a2a_flows(p, t, tp)
        assert len(flows) == (len(_task_flows(p, t)) if tp == 1 else 7 * tp)
        pairs = {(int(p.flow_src[f]), int(p.flow_dst[f])) for f in flows}
        assert pairs == {(i, j) for i in own for j in range(8) if i != j}
        for f in flows:
            crosses = nodes[p.flow_src[f]] != nodes[p.flow_dst[f]]
            path = p.path(f)
            narrowest = path[np.argmin(a.topology.capacity[path])]
            wire = count * pair / a.topology.bus_efficiency[narrowest]
            assert p.flow_bytes[f] == pytest.approx(wire, rel=1e-12)
            assert crosses == any("nic" in p.link_names[link] for link in path)


@pytest.mark.parametrize("tp", (4, 1))
def test_a_nic_bound_all_to_all_takes_its_nic_bytes_over_the_nic_rate(catalog, tp):
    """With four GPUs per node (one replica of TP 4, or four of TP 1), the all-to-all sends
    4 of each rank's 7 flows through its NIC: the simulator's TP task of a MoE pass takes
    at least its NIC's bytes over the NIC's rate, and at most that plus the flows'
    latencies, and the NIC is its most loaded link."""
    a = analyze(across_plan(8, tp=tp, micro_batches=1, layers=2), catalog)
    p = lower(a)
    result = simulate(p)
    topo = a.topology
    m = a.model
    pair = 2 * m.hidden_size * (SEQ / tp) * m.moe_top_k / 8
    for t in np.flatnonzero(p.task_category == int(Category.TP)).tolist():
        load = np.zeros(len(p.link_capacity))
        for f in _task_flows(p, t):
            load[p.path(f)] += p.flow_bytes[f]
        busiest = int(np.argmax(load / p.link_capacity))
        assert "nic" in p.link_names[busiest]
        nic = topo.capacity[busiest]
        count = 2 * 2  # two MoE layers, two all-to-alls each (forward and backward alike)
        nic_bytes = (8 - 4) * count * pair / topo.bus_efficiency[busiest]
        assert load[busiest] == pytest.approx(nic_bytes, rel=1e-12)
        took = result.task_end_s[t] - result.task_start_s[t]
        latency = p.flow_latency_s[list(_task_flows(p, t))].max()
        assert nic_bytes / nic <= took <= nic_bytes / nic + latency
        assert took > 1.5 * max(load[i] / p.link_capacity[i] for i in range(len(load))
                                if "su" in p.link_names[i])


@pytest.mark.parametrize("seed", range(8))
def test_random_plans_with_ep_across_replicas_lower_as_the_reference(catalog, seed):
    """The block lowering (a replica's block copied, all-to-all peers mapped into its EP
    group) equals the task-by-task reference, bit for bit."""
    model = ("mixtral-8x7b", "deepseek-v3")[seed % 2]
    plan = random_plan(seed, max_gpus=64, model=model, ep_across=True)
    validate_plan(plan, catalog)
    a = analyze(plan, catalog)
    assert_identical(lower(a), reference_lower(a))


#: (seed, max_gpus) of random plans with EP across replicas whose experts are held by two
#: or more replicas (expert rings), under ZeRO 0 and 1, with and without ``dp_overlap``
EXPERT_RING_SEEDS = ((27, 64), (28, 64), (37, 32), (49, 32), (57, 32), (72, 32))


def expert_ring_plan(seed: int, max_gpus: int):
    return random_plan(seed, max_gpus=max_gpus, model=("mixtral-8x7b", "deepseek-v3")[seed % 2],
                       ep_across=True)


@pytest.mark.parametrize(("seed", "max_gpus"), EXPERT_RING_SEEDS)
def test_random_plans_with_expert_rings_lower_as_the_reference(catalog, seed, max_gpus):
    """Plans whose DP collectives hold expert rings equal the task-by-task reference (its
    expert rings written from the replicas' order and each rank's own experts), bit for
    bit."""
    a = analyze(expert_ring_plan(seed, max_gpus), catalog)
    assert any(a.expert_rings(d) for d in range(len(a.dp_groups)))
    assert_identical(lower(a), reference_lower(a))


def test_program_size_bounds_the_expert_rings(catalog):
    """The validation's estimate counts the expert rings' flows (``R`` more per chunk of a
    DP collective; without them it falls under seed 57's program), within a small factor
    of the program's tasks plus flows (it takes a bucket per layer under ``dp_overlap``,
    which one small plan here reduces in a single bucket)."""
    for seed in EXPERT_RING_SEEDS:
        plan = expert_ring_plan(*seed)
        program = lower(analyze(plan, catalog))
        actual = program.num_tasks + program.flow_src.size
        assert actual <= estimate_program_size(plan) <= 6 * actual, seed


@pytest.mark.parametrize(("seed", "max_gpus"), EXPERT_RING_SEEDS[2:])
def test_the_closed_form_stays_under_the_simulator_with_expert_rings(catalog, seed, max_gpus):
    plan = expert_ring_plan(seed, max_gpus)
    exact = simulate(lower(analyze(plan, catalog))).iteration_time_s
    assert iteration_lower_bound(plan, catalog) <= exact


def test_expert_ring_seeds_cover_the_dp_options(catalog):
    options = {(p.training.zero_stage, p.training.dp_overlap)
               for p in (expert_ring_plan(*seed) for seed in EXPERT_RING_SEEDS)}
    assert options == {(0, True), (1, True), (1, False)}


def test_some_random_plans_span_replicas(catalog):
    spans = set()
    for seed in range(8):
        plan = random_plan(seed, max_gpus=64, model="mixtral-8x7b", ep_across=True)
        a = analyze(plan, catalog)
        spans.add(max(len(peers) for peers in a.ep_peers))
    assert max(spans) >= 2


def test_ep_across_replicas_has_its_own_structure(catalog):
    """EP 4 (within TP 4) and EP 8 (two replicas) on the same groups lower to different
    structures, and EP 8's program has more flows (the peers' ranks)."""
    a4, a8 = (analyze(across_plan(ep), catalog) for ep in (4, 8))
    assert structure_key(a4) != structure_key(a8)
    assert lower(a8).flow_src.size > lower(a4).flow_src.size


@pytest.mark.parametrize("tp", (4, 1))
def test_closed_form_all_to_all_bytes_per_rank_and_per_nic(catalog, tp):
    """EP 8 = 2 x TP 4, one replica per node of 4 GPUs (or 8 x TP 1, four replicas per
    node): a rank sends 7 flows per all-to-all, 3 on its node and 4 through its NIC, each
    ``2 h (b s / TP) k / EP`` bytes; the closed form takes one of each kind (the bound
    level runs every flow alone, and the closed form stays under it), so its bound (a
    flow's bytes over the NIC's rate, after the launches, in each pass) lies under the
    simulator's iteration and above the NIC time of one flow of a pass's all-to-alls."""
    plan = across_plan(8, tp=tp, micro_batches=1, layers=2)
    nodes = [r // 4 for r in range(8)]
    assert expert_fanout(plan, 8, nodes) == {g: (1, 1) for g in range(8 // tp)}
    a = analyze(plan, catalog)
    m = a.model
    pair = 2 * m.hidden_size * (SEQ / tp) * m.moe_top_k / 8
    count = 2 * 2  # per pass: dispatch and combine of two MoE layers
    p = lower(a)
    per_rank = per_nic = 0.0
    for f in range(p.flow_src.size):
        if p.flow_src[f] == 0 and (tp == 1 or p.flow_bytes[f] < 5e6) and p.task_names[
                int(np.searchsorted(p.flow_ptr, f, side="right") - 1)].startswith("tp F"):
            path = p.path(f)
            payload = p.flow_bytes[f] * a.topology.bus_efficiency[
                path[np.argmin(a.topology.capacity[path])]]
            per_rank += payload
            per_nic += payload if nodes[p.flow_dst[f]] != 0 else 0.0
    assert per_rank == pytest.approx(7 * count * pair, rel=1e-12)
    assert per_nic == pytest.approx(4 * count * pair, rel=1e-12)
    nic = catalog.nics["cx7"]
    nic_s = count * pair / (nic.bandwidth_gbps * 1e9 / 8)  # one flow
    bound = iteration_lower_bound(plan, catalog)
    assert bound >= 2 * nic_s  # forward and backward each send it
    assert bound <= simulate(p).iteration_time_s


@pytest.mark.parametrize("seed", range(6))
def test_the_closed_form_stays_under_the_simulator_with_ep_across(catalog, seed):
    plan = random_plan(seed, max_gpus=32, model=("mixtral-8x7b", "deepseek-v3")[seed % 2],
                       ep_across=True)
    exact = simulate(lower(analyze(plan, catalog))).iteration_time_s
    assert iteration_lower_bound(plan, catalog) <= exact


def test_a_nic_bound_plans_closed_form_counts_its_all_to_alls(catalog):
    """Where the all-to-alls cross the NICs, the closed form grows with them: EP 8 across
    two nodes bounds above EP 4 inside each replica (same groups)."""
    assert (iteration_lower_bound(across_plan(8, layers=4), catalog)
            > iteration_lower_bound(across_plan(4, layers=4), catalog))


@pytest.mark.parametrize("model", ("mixtral-8x7b", "deepseek-v3"))
def test_program_size_bounds_the_all_to_alls_across_replicas(catalog, model):
    """The validation's estimate holds the all-to-alls' flows to the other replicas' ranks
    (``tp x (EP - 1)`` per TP task of a MoE piece), within a small factor of the
    program's tasks plus flows."""
    for seed in range(6):
        plan = random_plan(seed, max_gpus=64, model=model, ep_across=True)
        program = lower(analyze(plan, catalog))
        actual = program.num_tasks + program.flow_src.size
        assert actual <= estimate_program_size(plan) <= 4 * actual, seed


def test_the_program_size_follows_expert_parallelism_on_the_same_groups(catalog):
    """The validation keeps what it checked of a plan's groups; the size estimate differs
    with EP on the same groups, so it is part of what is kept by."""
    sizes = [validate_plan(across_plan(ep), catalog).program_size for ep in (1, 4, 8)]
    assert sizes[0] < sizes[1] < sizes[2]


#: seeds of random plans at TP 1 whose EP spans 2 or 4 replicas (up to 32 GPUs)
TP_ONE_SEEDS = (3, 8, 10, 14)


def tp_one_plan(seed: int):
    return random_plan(seed, max_gpus=32, model=("mixtral-8x7b", "deepseek-v3")[seed % 2],
                       ep_across=True, tp_one=True)


@pytest.mark.parametrize("seed", TP_ONE_SEEDS)
def test_random_plans_at_tp_one_lower_as_the_reference_under_both_bounds(catalog, seed):
    """EP over replicas of TP 1 (every expert group a set of whole GPUs, as Mixtral and
    DeepSeek-V3 are usually run): the block lowering equals the task-by-task reference bit
    for bit, the program-size estimate bounds the program within a small factor, and the
    closed form stays under the simulator."""
    plan = tp_one_plan(seed)
    validate_plan(plan, catalog)
    a = analyze(plan, catalog)
    assert a.stack.expert_parallel > 1 and {len(g.ranks) for g in a.groups} == {1}
    assert_lowers_within_bounds(plan, a, catalog)


def test_tp_one_seeds_cover_both_models_and_zero_stages(catalog):
    plans = [tp_one_plan(seed) for seed in TP_ONE_SEEDS]
    assert {p.model.preset for p in plans} == {"mixtral-8x7b", "deepseek-v3"}
    assert {p.training.zero_stage for p in plans} == {0, 1}
    assert {p.training.expert_parallel for p in plans} >= {2, 4}


def test_at_tp_one_only_pieces_with_moe_layers_get_a_tp_task(catalog):
    """DeepSeek-V3 cut to 6 layers (three dense first), two stages of TP 1 layers 1-3 and
    4-6 on 8 replicas, EP 8: the first stage's pieces (dense FFNs) have no TP task, the
    second stage's each carry one all-to-all of 7 flows per rank, at the pair bytes of
    TP 1 (a rank's ``b s`` tokens)."""
    plan = build_plan("dsv3-tp1", "deepseek-v3", [NodeReq("H100-SXM", 8, "cx7")] * 2,
                      [ReplicaReq((StageReq("H100-SXM", 1, 3), StageReq("H100-SXM", 1, 3)),
                                  1, 2)] * 8,
                      seq_length=SEQ, num_layers=6, stack=Stack(expert_parallel=8))
    a = analyze(validate_plan(plan, catalog), catalog)
    p = lower(a)
    stage_of = {g.id: g.stage for g in a.groups}
    tp_tasks = np.flatnonzero(p.task_category == int(Category.TP)).tolist()
    assert {stage_of[int(p.task_device_group[t])] for t in tp_tasks} == {1}
    assert len(tp_tasks) == 8 * 2 * 2  # 8 replicas, 2 micro-batches, forward and backward
    m = a.model
    second = next(g for g in a.groups if g.stage == 1)
    assert second.cost.a2a_pair_bytes == pytest.approx(
        2 * m.hidden_size * SEQ * m.moe_top_k / 8, rel=1e-12)
    for t in tp_tasks:
        assert len(_task_flows(p, t)) == 7
