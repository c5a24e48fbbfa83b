"""The planner's expert-parallel axis: plans of models with experts carry the point's EP
and the sweep's imbalance, and points EP cannot split are infeasible with a reason of
their own kind, which the grid's arrays leave to the planner."""

from __future__ import annotations

import numpy as np

from tests.support.documents import changed
from xsweep.plan.analysis import analyze
from xsweep.search.space.grid import Grid
from xsweep.search.space.planner import Built, Infeasible, Planner, reason_kind
from xsweep.search.space.screen import columns_of_grid, screen
from xsweep.spec import sweep_from_dict, validate_plan

MIXTRAL = {
    "name": "moe-planner",
    "model": "mixtral-8x7b",
    "training": {"global_batch_size": 32, "schedule": "1f1b", "recompute": "full",
                 "moe_imbalance": 1.25},
    "cluster": {"pools": [{"gpu": "H200", "nodes": 4}]},
    "parallelism": {"tp": {"H200": [4, 8]}, "pp": [2, 4], "micro_batch_size": 1,
                    "ep": [1, 2, 3, 4, 8]},
}


def _outcomes(document, catalog):
    sweep = sweep_from_dict(document)
    grid = Grid(sweep)
    planner = Planner(sweep, catalog)
    points = list(grid.points(np.arange(grid.size)))
    return sweep, grid, points, [planner.plan(point, f"p{i}") for i, point in enumerate(points)]


def test_ep_reaches_the_plan_and_infeasible_points_say_why(catalog):
    _, _, points, outs = _outcomes(MIXTRAL, catalog)
    built = 0
    for point, out in zip(points, outs, strict=True):
        ep, tp = point["parallelism.ep"], point["parallelism.tp.H200"]
        if ep == 3:
            assert isinstance(out, Infeasible)
            assert out.reason == "expert parallelism: ep 3 does not divide the model's 8 experts"
        elif ep > tp:  # EP 8 = TP 4 x 2 replicas: the EP group spans two replicas
            assert isinstance(out, Built), out
            a = analyze(validate_plan(out.plan, catalog), catalog)
            assert a.stack.expert_parallel == 8
            assert all(len(peers) == 2 for peers in a.ep_peers)
            built += 1
        else:
            assert isinstance(out, Built), out
            validate_plan(out.plan, catalog)
            stack = analyze(out.plan, catalog).stack
            assert (stack.expert_parallel, stack.moe_imbalance) == (ep, 1.25)
            built += 1
    assert built >= 8


def _across(**parallelism):
    return changed(MIXTRAL, parallelism={**MIXTRAL["parallelism"], **parallelism})


def test_ep_across_replicas_that_cannot_form_ep_groups_says_why(catalog):
    """EP 8 at TP 2 needs 4 replicas per EP group: on 4 nodes of 8 GPUs at PP 4 the 4
    replicas form one, at PP 8 the 2 cannot (its reason); two pools at TP 2 and 4 share
    no TP degree; under FSDP EP across replicas builds."""
    _, _, points, outs = _outcomes(_across(tp={"H200": [2]}, pp=[4, 8], ep=[8]), catalog)
    for point, out in zip(points, outs, strict=True):
        if point["parallelism.pp"] == 8:
            assert out.reason == ("expert parallelism: ep 8 is TP 2 x 4 replicas, and 4 does "
                                  "not divide the 2 replicas")
            assert reason_kind(out.reason).name == "experts"
        else:
            assert isinstance(out, Built), out
            validate_plan(out.plan, catalog)
    document = changed(MIXTRAL, cluster={"pools": [{"gpu": "H200", "nodes": 2},
                                                   {"gpu": "H100-SXM", "nodes": 2}]},
                       parallelism={"tp": {"H200": [2], "H100-SXM": [4]}, "pp": [1],
                                    "micro_batch_size": 1, "ep": [4]})
    _, _, _, outs = _outcomes(document, catalog)
    assert outs[0].reason == ("expert parallelism: ep 4 above TP (across replicas) needs one "
                              "TP degree for every pool, not TP [2, 4]")
    # under FSDP too: four replicas of TP 4 x PP 2, EP groups of two, each expert held by
    # two replicas, which gather and reduce it
    _, _, _, outs = _outcomes(changed(_across(tp={"H200": [4]}, pp=[2], ep=[8]),
                                      training={**MIXTRAL["training"], "zero_stage": 3}),
                              catalog)
    assert isinstance(outs[0], Built), outs[0]
    a = analyze(validate_plan(outs[0].plan, catalog), catalog)
    assert a.fsdp and len(a.replicas) == 4 and a.expert_fold(0) == 2
    assert len(a.expert_rings(0)) == 8  # per TP rank, per place: two replicas


def test_ep_over_replicas_of_tp_one_builds_plans_whose_ep_groups_are_replicas(catalog):
    """At TP 1 (whole GPUs per expert group, as Mixtral and DeepSeek-V3 are commonly run)
    EP spans EP replicas. At PP 2 (16 replicas), EP 4 and 8 build plans whose EP groups
    are EP replicas, while EP 2 leaves each GPU 4 experts of 16 layers, more than an
    H200 holds; at PP 8, the 4 replicas cannot form an EP group of 8."""
    _, _, points, outs = _outcomes(_across(tp={"H200": [1]}, pp=[2, 8], ep=[2, 4, 8]),
                                   catalog)
    built = set()
    for point, out in zip(points, outs, strict=True):
        ep, pp = point["parallelism.ep"], point["parallelism.pp"]
        if (pp, ep) == (2, 2):
            assert out.reason.startswith("does not fit in GPU memory")
        elif (pp, ep) == (8, 8):
            assert out.reason == ("expert parallelism: ep 8 is TP 1 x 8 replicas, and 8 "
                                  "does not divide the 4 replicas")
        else:
            assert isinstance(out, Built), out
            a = analyze(validate_plan(out.plan, catalog), catalog)
            assert a.stack.expert_parallel == ep and {g.tp for g in a.groups} == {1}
            assert all(len(peers) == ep for peers in a.ep_peers)
            built.add((pp, ep))
    assert built == {(2, 4), (2, 8), (8, 2), (8, 4)}


def test_fp8_with_experts_builds_and_fp8_parameter_gathers_say_why(catalog):
    """FP8 compute with experts is planned (its plans validate, in FP8); FP8 parameter
    gathers with experts are not modelled, a reason of the experts' kind."""
    document = changed(_across(tp={"H200": [4]}, pp=[2], ep=[4, 8]),
                       training={**MIXTRAL["training"], "precision": "fp8", "zero_stage": 1,
                                 "fp8_param_gather": [False, True]})
    _, _, points, outs = _outcomes(document, catalog)
    assert len(outs) == 4
    for point, out in zip(points, outs, strict=True):
        if point["training.fp8_param_gather"]:
            assert out.reason == ("expert parallelism: FP8 parameter gathers are not "
                                  "modelled for a model with experts")
            assert reason_kind(out.reason).name == "experts"
        else:
            assert isinstance(out, Built), out
            a = analyze(validate_plan(out.plan, catalog), catalog)
            assert (a.stack.precision, a.stack.expert_parallel) == (
                "fp8", point["parallelism.ep"])


def test_ep_across_replicas_of_unlike_shapes_is_infeasible(catalog):
    """Two pools of unlike GPUs at one TP degree cut their replicas' layers apart (the
    planner balances their stage times), so EP across them is refused."""
    document = changed(MIXTRAL, cluster={"pools": [{"gpu": "H200", "nodes": 1},
                                                   {"gpu": "A100-80GB", "nodes": 1}]},
                       parallelism={"tp": {"H200": [4], "A100-80GB": [4]}, "pp": [2],
                                    "micro_batch_size": 1, "ep": [8],
                                    "layer_split": "proportional"})
    _, _, _, outs = _outcomes(document, catalog)
    assert isinstance(outs[0], Infeasible)
    assert outs[0].reason.startswith("expert parallelism: across replicas needs replicas of "
                                     "one shape")


def test_a_dense_model_refuses_expert_parallelism(catalog):
    document = changed(MIXTRAL, model="llama2-7b")
    _, _, points, outs = _outcomes(document, catalog)
    for point, out in zip(points, outs, strict=True):
        if point["parallelism.ep"] > 1:
            assert out.reason == ("expert parallelism: ep "
                                  f"{point['parallelism.ep']} needs a model with experts "
                                  "(llama2-7b has none)")


def test_the_arrays_leave_expert_points_to_the_planner(catalog):
    for document in (MIXTRAL, changed(MIXTRAL, model="llama2-7b")):
        sweep, grid, points, outs = _outcomes(document, catalog)
        screened = screen(sweep, catalog, columns_of_grid(grid, np.arange(grid.size)))
        for row, (point, out) in enumerate(zip(points, outs, strict=True)):
            if document["model"] == "mixtral-8x7b" or point["parallelism.ep"] > 1:
                assert not screened.infeasible[row]
            elif screened.infeasible[row]:
                assert screened.reason[row] == out.reason


def test_context_parallelism_with_experts_inside_tp_or_over_cp_ranks_builds(catalog):
    """CP with EP inside TP (each CP rank's TP ranks run their all-to-alls) or over the TP
    ranks of ``ep / tp`` CP ranks (Megatron-Core's folding of CP into EP), or over the
    whole groups of several replicas, is planned, and its plans validate. Folded EP groups
    sit inside a group, on one node: the dispatcher axis is unused there."""
    from xsweep.search.space.planner import unused_axes

    document = changed(MIXTRAL, training={**MIXTRAL["training"],
                                          "moe_dispatcher": ["alltoall", "deepep"]},
                       parallelism={**MIXTRAL["parallelism"], "cp": [1, 2],
                                    "tp": {"H200": [2, 4]}, "ep": [1, 2, 4, 8]})
    sweep, _, points, outs = _outcomes(document, catalog)
    built = set()
    for point, out in zip(points, outs, strict=True):
        cp, ep, tp = point["parallelism.cp"], point["parallelism.ep"], point["parallelism.tp.H200"]
        if isinstance(out, Built):
            a = analyze(validate_plan(out.plan, catalog), catalog)
            assert {(g.cp, g.tp) for g in a.groups} == {(cp, tp)}
            assert a.stack.expert_parallel == ep
            if cp > 1 and ep <= tp * cp:  # inside TP, or folding the group's CP ranks
                assert all(peers == (i,) for i, peers in enumerate(a.ep_peers))
                assert "training.moe_dispatcher" in unused_axes(sweep, point)
                assert a.stack.moe_dispatcher == "alltoall"
            elif cp > 1:  # EP 8 over TP 2 x CP 2: the whole groups of two replicas
                assert all(len(peers) == 2 for peers in a.ep_peers)
            built.add((cp, tp, ep))
    assert {(2, 4, 1), (2, 4, 2), (2, 4, 4), (2, 2, 4), (2, 4, 8), (2, 2, 8),
            (1, 4, 8)} <= built


def _dispatchers(gpus_per_node: int, nodes: int, tp: list[int], ep: list[int]) -> dict:
    return changed(MIXTRAL, training={**MIXTRAL["training"],
                                      "moe_dispatcher": ["alltoall", "deepep"]},
                   cluster={"pools": [{"gpu": "H200", "nodes": nodes,
                                       "gpus_per_node": gpus_per_node}]},
                   parallelism={**MIXTRAL["parallelism"], "tp": {"H200": tp}, "pp": [4],
                                "ep": ep})


def test_the_dispatcher_reaches_plans_whose_ep_groups_span_nodes(catalog):
    """Eight nodes of 4 GPUs, four replicas of TP 2 x PP 4 (two nodes each), EP 8: each EP
    group spans four nodes, so DeepEP's points build plans of their own that say so; EP 2
    stays inside a group, on a node, where both dispatchers build one plan and the axis
    is unused."""
    from xsweep.search.space.planner import unused_axes

    sweep, _, points, outs = _outcomes(_dispatchers(4, 8, [2], [2, 8]), catalog)
    planner = Planner(sweep, catalog)
    seen = set()
    for point, out in zip(points, outs, strict=True):
        assert isinstance(out, Built), out
        a = analyze(validate_plan(out.plan, catalog), catalog)
        across = point["parallelism.ep"] == 8
        expected = point["training.moe_dispatcher"] if across else "alltoall"
        assert a.stack.moe_dispatcher == expected
        assert bool(a.ep_places) == across
        assert ("training.moe_dispatcher" in unused_axes(sweep, point)) == (not across)
        seen.add((point["parallelism.ep"], planner.variant(point)))
    # EP 2: one variant for both dispatchers; EP 8: two
    assert len({v for ep, v in seen if ep == 2}) == 1
    assert len({v for ep, v in seen if ep == 8}) == 2


def test_deepep_over_ep_groups_spread_unevenly_is_infeasible_with_a_reason(catalog):
    """Sixteen nodes of 6 GPUs, 24 replicas of TP 1 x PP 4, EP 8: the planner places a
    stage's 8 consecutive replicas' groups 6 on one node and 2 on the next, which DeepEP
    cannot pair; the flat all-to-all runs it."""
    document = _dispatchers(6, 16, [1], [8])
    document["training"]["global_batch_size"] = 48  # 2 micro-batches per replica
    _, _, points, outs = _outcomes(document, catalog)
    by_dispatcher = {point["training.moe_dispatcher"]: out
                     for point, out in zip(points, outs, strict=True)}
    assert isinstance(by_dispatcher["alltoall"], Built), by_dispatcher["alltoall"]
    refused = by_dispatcher["deepep"]
    assert isinstance(refused, Infeasible)
    assert refused.reason == ("expert parallelism: DeepEP needs each EP group spread evenly "
                              "over its nodes, and one holds [2, 6] ranks on its nodes")
    assert reason_kind(refused.reason).name == "experts"
    assert refused.memory_per_gpu_gib > 0


def test_fp8_dispatch_reaches_fp8_plans_with_all_to_alls_and_bf16_says_why(catalog):
    """FP8 dispatch at EP above 1 in FP8 builds a plan of its own that carries it; in BF16
    the point is infeasible with an expert-parallelism reason; at EP 1 (no all-to-all) the
    axis is unused and both values build one plan."""
    from xsweep.search.space.planner import unused_axes

    document = changed(MIXTRAL, training={**MIXTRAL["training"], "precision": ["bf16", "fp8"],
                                          "moe_fp8_dispatch": [False, True]},
                       parallelism={**MIXTRAL["parallelism"], "tp": {"H200": [4]}, "pp": [4],
                                    "ep": [1, 8]})
    sweep, _, points, outs = _outcomes(document, catalog)
    planner = Planner(sweep, catalog)
    variants: dict[tuple, set] = {}
    for point, out in zip(points, outs, strict=True):
        ep, fp8 = point["parallelism.ep"], point["training.precision"] == "fp8"
        asked = point["training.moe_fp8_dispatch"]
        assert ("training.moe_fp8_dispatch" in unused_axes(sweep, point)) == (ep == 1)
        if asked and ep > 1 and not fp8:
            assert isinstance(out, Infeasible)
            assert out.reason == "expert parallelism: FP8 dispatch needs precision fp8"
            assert reason_kind(out.reason).name == "experts"
            continue
        assert isinstance(out, Built), out
        stack = analyze(validate_plan(out.plan, catalog), catalog).stack
        assert stack.moe_fp8_dispatch == (asked and ep > 1)
        variants.setdefault((ep, fp8), set()).add(planner.variant(point))
    assert len(variants[(1, True)]) == len(variants[(1, False)]) == 1
    assert len(variants[(8, True)]) == 2 and len(variants[(8, False)]) == 1
