"""EP groups that fold context-parallel ranks (Megatron-Core's parallel folding of CP into
EP): under CP, EP above the TP degree, ``EP = TP x c``, is the TP ranks of ``c``
consecutive CP ranks of a group. Checked against closed forms written from the model (a
rank's routed rows, all-to-all bytes, experts and optimizer states; the all-to-all's
flows; the expert rings over like CP ranks of every replica), and random plans of it
through the reference lowering, the program-size estimate, the closed form and the
simulator."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.plan.test_cp_moe import SEQ, cp_plan
from tests.support.lowering import assert_lowers_within_bounds, payload_bytes
from xsweep.plan.analysis import analyze
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan, random_plan
from xsweep.plan.lower import lower
from xsweep.plan.memory import ADAM_BYTES_PER_PARAM
from xsweep.plan.program import Category
from xsweep.plan.stack import Stack
from xsweep.plan.workload import a2a_pair_bytes, rank_expert_params, rank_params, routed_rows
from xsweep.search.closed_form import expert_fanout
from xsweep.spec import validate_plan


def _mixtral(catalog, layers: int = 2):
    return dataclasses.replace(catalog.model("mixtral-8x7b"), seq_length=SEQ,
                               num_layers=layers)


@pytest.mark.parametrize(("cp", "tp", "ep"), [(2, 2, 4), (4, 2, 8), (4, 1, 2), (4, 2, 4)])
def test_a_folded_ranks_rows_and_pair_bytes_are_its_tokens_share(catalog, cp, tp, ep):
    """EP = TP x c over c CP ranks: the EP group's tokens are c CP ranks' ``b s / cp``,
    ``top_k`` copies each over the EP ranks, ``b s k load / (cp tp)`` rows per rank (the
    same as at EP inside TP); each pair of the all-to-all carries ``2 h (b s / (tp cp)) k
    load / EP`` bytes; a rank holds ``experts / EP`` whole experts."""
    model = _mixtral(catalog)
    stack = Stack(expert_parallel=ep, moe_imbalance=1.25)
    h, k, b = model.hidden_size, model.moe_top_k, 2
    assert routed_rows(model, b, tp, stack, cp) == pytest.approx(
        b * SEQ * k * 1.25 / (cp * tp), rel=1e-12)
    assert a2a_pair_bytes(model, b, tp, stack, cp) == pytest.approx(
        2 * h * (b * SEQ / (tp * cp)) * k * 1.25 / ep, rel=1e-12)
    per_expert = 3 * h * model.expert_ffn_hidden_size  # SwiGLU: gate, up and down
    assert rank_expert_params(model, tp, 2, 2, ep) == model.num_experts // ep * per_expert


def _flows(p, t):
    return range(p.flow_ptr[t], p.flow_ptr[t + 1])


@pytest.mark.parametrize(("cp", "ep"), [(2, 4), (4, 4), (4, 8)])
def test_each_folded_ep_group_runs_one_all_to_all_over_its_cp_ranks(catalog, cp, ep):
    """TP 2 x CP ``cp`` on one node at EP ``ep``: each MoE piece's join task holds the CP
    ranks' TP rings (2 flows each) and, per EP group of ``ep`` ranks (``ep / 2``
    consecutive CP ranks), a flow from each of its ranks to every other one, none to
    another EP group; their payload is ``count x`` the pair bytes over the NVLink path's
    bus efficiency."""
    a = analyze(validate_plan(cp_plan(cp, ep, micro_batches=1), catalog), catalog)
    p = lower(a)
    ranks = a.groups[0].ranks
    team = {r: i // ep for i, r in enumerate(ranks)}  # the EP group of each rank
    m = a.model
    pair = 2 * m.hidden_size * (SEQ / (2 * cp)) * m.moe_top_k / ep
    tasks = np.flatnonzero(p.task_category == int(Category.TP)).tolist()
    assert len(tasks) == 2  # the forward and backward piece's joins
    rings = {(ranks[q * 2 + i], ranks[q * 2 + 1 - i]) for q in range(cp) for i in range(2)}
    for t in tasks:
        pairs = [(int(p.flow_src[f]), int(p.flow_dst[f])) for f in _flows(p, t)]
        a2a = list(_flows(p, t))[2 * cp:]  # the TP rings' flows first
        assert len(a2a) == cp * 2 * (ep - 1)
        assert set(pairs[:2 * cp]) == rings
        got = {(int(p.flow_src[f]), int(p.flow_dst[f])) for f in a2a}
        assert got == {(x, y) for x in ranks for y in ranks if x != y and team[x] == team[y]}
        count = 2 * 2  # dispatch and combine of two MoE layers, forward or backward
        assert payload_bytes(a, p, a2a) == pytest.approx(len(a2a) * count * pair, rel=1e-12)


def test_expert_rings_join_like_cp_ranks_of_every_replica(catalog):
    """Two replicas of TP 2 x CP 2 at EP 4 (an EP group: a group's two CP ranks): each
    expert is held by two ranks, those at the same TP rank and CP rank of the two
    replicas, so per TP rank (chunk) and per CP place a ring of two; each carries the
    rank's 2 whole experts per layer, the dense ring (all four ranks of a chunk) the
    rest."""
    a = analyze(validate_plan(cp_plan(2, 4, replicas=2, zero_stage=1), catalog), catalog)
    r0, r1 = (g.ranks for g in sorted(a.groups, key=lambda g: g.replica))
    assert a.expert_fold(0) == 2
    assert a.expert_rings(0) == tuple((r0[q * 2 + c], r1[q * 2 + c])
                                      for c in range(2) for q in range(2))
    m = a.model
    expert = 2.0 * 2 * (m.num_experts // 4) * 3 * m.hidden_size * m.expert_ffn_hidden_size
    dense, experts = a.dp_bytes(0, 1, 2)
    assert experts / 2 == expert  # the rank's own experts: one chunk of its expert rings
    assert (dense + experts) / 2 == pytest.approx(a.groups[0].cost.grad_bytes, rel=2e-4)
    # ZeRO-1 over DP x CP = 4 ranks, the experts' states over the 2 that hold them
    params = rank_params(m, 2, 1, 2, 4)
    held = rank_expert_params(m, 2, 1, 2, 4)
    want = ADAM_BYTES_PER_PARAM * ((params - held) / 4 + held / 2) / 2**30
    assert a.groups[0].memory.optimizer_gib == pytest.approx(want, rel=1e-12)
    # each expert ring's reduce-scatter moves (2 - 1) / 2 of the rank's experts
    p = lower(a)
    (t,) = [t for t, n in enumerate(p.task_names) if n == "rs L1-2"]
    expert_pairs = set(a.expert_rings(0))
    flows = [f for f in _flows(p, t)
             if tuple(sorted((int(p.flow_src[f]), int(p.flow_dst[f])))) in expert_pairs]
    assert len(flows) == 8
    assert payload_bytes(a, p, flows) == pytest.approx(8 * expert / 2, rel=1e-12)


def test_the_closed_form_counts_a_folded_group_on_its_node(catalog):
    """A folded EP group inside one node: each rank's all-to-all flows go to its mates
    over NVLink (one pair's bytes each), none through its NIC; on two nodes (4 GPUs
    each), to both."""
    plan = cp_plan(4, 8)
    assert expert_fanout(plan, 8, [0] * 8) == {0: (1, 0)}
    assert expert_fanout(plan, 8, [r // 4 for r in range(8)]) == {0: (1, 1)}


#: seeds of random plans whose EP folds CP ranks (``cp_fold``): CP 2 and 4, EP groups of
#: 2 and 4 CP ranks, one replica and several (expert rings beside the dense ones, with
#: and without overlap), both models, BF16 and FP8, ZeRO 0 and 1
CP_FOLD_SEEDS = (0, 3, 13, 36, 72, 80)


def _fold_plan(seed: int):
    return random_plan(seed, max_gpus=32, model=("mixtral-8x7b", "deepseek-v3")[seed % 2],
                       cp_fold=True)


@pytest.mark.parametrize("seed", CP_FOLD_SEEDS)
def test_random_plans_folding_cp_lower_as_the_reference_under_both_bounds(catalog, seed):
    plan = _fold_plan(seed)
    a = analyze(validate_plan(plan, catalog), catalog)
    g = a.groups[0]
    assert g.cp > 1 and a.stack.expert_parallel > g.tp
    assert_lowers_within_bounds(plan, a, catalog)


def test_cp_fold_seeds_cover_what_they_say(catalog):
    plans = [_fold_plan(s) for s in CP_FOLD_SEEDS]
    analyses = [analyze(validate_plan(p, catalog), catalog) for p in plans]
    assert {p.model.preset for p in plans} == {"mixtral-8x7b", "deepseek-v3"}
    assert {p.training.zero_stage for p in plans} == {0, 1}
    assert len({p.training.precision for p in plans}) == 2
    assert {a.groups[0].cp for a in analyses} == {2, 4}
    assert {a.expert_fold(0) for a in analyses} == {2, 4}
    with_rings = [a for a in analyses if a.expert_rings(0)]
    assert {a.stack.dp_overlap for a in with_rings} == {False, True}
    assert any(not a.expert_rings(0) for a in analyses)  # each expert held once


def test_deepep_over_a_folded_group_on_one_node_is_the_flat_all_to_all(catalog):
    """A folded EP group inside one node under DeepEP: accepted, and lowered as the flat
    all-to-all (DeepEP differs only across nodes)."""
    from xsweep.plan.lower import structure_key

    deepep, flat = (analyze(validate_plan(cp_plan(2, 4, moe_dispatcher=d), catalog), catalog)
                    for d in ("deepep", "alltoall"))
    assert not deepep.ep_places
    assert structure_key(deepep) == structure_key(flat)
    assert lower(deepep).flow_bytes.tolist() == lower(flat).flow_bytes.tolist()


def test_ep_over_whole_groups_of_replicas_under_cp(catalog):
    """Four replicas of TP 2 x CP 2 at EP 8 (``TP x CP x 2``): an EP group is the whole
    groups of two replicas, so each rank sends 7 all-to-all flows, 3 to its own group
    and 4 to its peer's; each expert is held by the two replicas at its place (0 and 2,
    or 1 and 3) at the same TP and CP rank, whose expert rings reduce it."""
    a = analyze(validate_plan(cp_plan(2, 8, replicas=4, micro_batches=1), catalog), catalog)
    assert all(len(peers) == 2 for peers in a.ep_peers)
    ranks = [g.ranks for g in sorted(a.groups, key=lambda g: g.replica)]
    assert a.expert_fold(0) == 4
    assert a.expert_rings(0) == tuple((ranks[q][j * 2 + c], ranks[q + 2][j * 2 + c])
                                      for c in range(2) for q in range(2) for j in range(2))
    p = lower(a)
    group = {r: i for i, rs in enumerate(ranks) for r in rs}
    team = {0: {0, 1}, 1: {0, 1}, 2: {2, 3}, 3: {2, 3}}  # replicas of each EP group
    tasks = np.flatnonzero(p.task_category == int(Category.TP)).tolist()
    for t in tasks:  # a replica's TP task: its CP ranks' TP rings, then its all-to-alls
        a2a = list(_flows(p, t))[2 * 2:]
        (mine,) = {group[int(p.flow_src[f])] for f in a2a}
        assert len(a2a) == 4 * 7
        for src in ranks[mine]:
            dst = [int(p.flow_dst[f]) for f in a2a if int(p.flow_src[f]) == src]
            assert sorted(dst) == sorted(r for i in team[mine] for r in ranks[i] if r != src)


#: seeds of random plans whose EP spans the whole groups of several replicas under CP
#: (``ep_across`` and ``cp_fold``): CP 2 and 4, EP groups of 2 and 4 replicas, experts
#: held once and by several replicas, both models, ZeRO 0 and 1
CP_ACROSS_SEEDS = (57, 93, 161, 166, 173, 371)


def _across_plan(seed: int):
    return random_plan(seed, max_gpus=32, model=("mixtral-8x7b", "deepseek-v3")[seed % 2],
                       ep_across=True, cp_fold=True)


@pytest.mark.parametrize("seed", CP_ACROSS_SEEDS)
def test_random_plans_with_ep_over_whole_cp_groups_lower_as_the_reference(catalog, seed):
    plan = _across_plan(seed)
    a = analyze(validate_plan(plan, catalog), catalog)
    assert a.groups[0].cp > 1 and a.stack.expert_parallel > len(a.groups[0].ranks)
    assert_lowers_within_bounds(plan, a, catalog)


def test_cp_across_seeds_cover_what_they_say(catalog):
    analyses = [analyze(validate_plan(_across_plan(s), catalog), catalog)
                for s in CP_ACROSS_SEEDS]
    assert {a.groups[0].cp for a in analyses} == {2, 4}
    assert {max(len(p) for p in a.ep_peers) for a in analyses} == {2, 4}
    assert {bool(a.expert_rings(0)) for a in analyses} == {False, True}
    assert {a.model.name for a in analyses} == {"mixtral-8x7b", "deepseek-v3"}
    assert {a.stack.zero_stage for a in analyses} == {0, 1}


def test_deepep_over_whole_cp_groups_across_nodes(catalog):
    """Two replicas of TP 2 x CP 2, each on a node of 4 GPUs, at EP 8 under DeepEP: the EP
    group spans both nodes evenly, and lowers as the reference does."""
    replica = ReplicaReq((StageReq("H100-SXM", 2, 2),), 1, 2)
    plan = build_plan("cp2-ep8-deepep", "mixtral-8x7b", [NodeReq("H100-SXM", 4, "cx7")] * 2,
                      [replica] * 2, seq_length=SEQ, num_layers=2, context_parallel=2,
                      stack=Stack(expert_parallel=8, moe_dispatcher="deepep"))
    a = analyze(validate_plan(plan, catalog), catalog)
    assert a.ep_places and a.ep_dispatch(0)[0] == 2.0
    assert_lowers_within_bounds(plan, a, catalog)
