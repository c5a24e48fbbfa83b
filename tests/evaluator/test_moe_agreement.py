"""Plans with experts (and expert parallelism's all-to-alls) at both batched levels
against the exact simulator: random Mixtral-8x7B and DeepSeek-V3-shaped plans of every
training-stack option the generator draws, with expert parallelism inside a group and
across replicas, a node of 8 GPUs at EP 8, where the all-to-alls contend with the TP rings
on NVLink, two nodes at EP 8 = TP 4 x 2 replicas, where they cross the NICs, and plans
whose experts are held by several replicas, whose DP collectives hold expert rings beside
the dense ones (with and without ZeRO-1 and gradient buckets), and replicas of TP 1 whose
EP groups span 2 or 4 of them (all-to-alls with no TP ring beside them); in BF16 and in
FP8; DeepEP's dispatch across two nodes; dispatches in FP8 (random plans and two nodes'
worth); random plans whose EP groups fold context-parallel ranks; and random FSDP plans
whose EP groups span replicas."""

from __future__ import annotations

import numpy as np
from xsweep.kernels import Status

from xsweep import metrics, timeline
from xsweep.evaluator import default_evaluator
from xsweep.plan.analysis import analyze
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan, random_plan
from xsweep.plan.lower import lower
from xsweep.plan.stack import Stack
from xsweep.sim import simulate
from xsweep.spec import load_catalog
from xsweep.spec import xsweep_pb2 as pb


def one_node() -> pb.DeploymentPlan:
    """Mixtral cut to 4 layers on a node of 8 H100s, TP 8 and EP 8 (an expert a GPU), with
    a stated imbalance: each GPU's NVLink carries its ring and its all-to-all flows at
    once."""
    return build_plan("moe-node", "mixtral-8x7b", [NodeReq("H100-SXM", 8, "cx7")],
                      [ReplicaReq((StageReq("H100-SXM", 8, 4),), 1, 3)], seq_length=1024,
                      num_layers=4, stack=Stack(expert_parallel=8, moe_imbalance=1.3))


def two_nodes(tp: int = 4, dispatcher: str = "alltoall",
              fp8_dispatch: bool = False) -> pb.DeploymentPlan:
    """Mixtral cut to 4 layers on two nodes of 4 H100s, replicas of TP ``tp``, EP 8 over
    both nodes: half of every rank's all-to-all flows (4 of 7) go through its NIC; under
    DeepEP's dispatch one of them, to the rank at its place on the other node, and its 3
    node-mates take the tokens it passes on; with ``fp8_dispatch``, in FP8, its
    dispatches in FP8."""
    return build_plan(f"moe-two-nodes-tp{tp}-{dispatcher}-{fp8_dispatch}", "mixtral-8x7b",
                      [NodeReq("H100-SXM", 4, "cx7")] * 2,
                      [ReplicaReq((StageReq("H100-SXM", tp, 4),), 1, 3)] * (8 // tp),
                      seq_length=1024, num_layers=4,
                      stack=Stack(expert_parallel=8, moe_imbalance=1.25,
                                  moe_dispatcher=dispatcher,
                                  precision="fp8" if fp8_dispatch else "bf16",
                                  moe_fp8_dispatch=fp8_dispatch))


def expert_rings(zero_stage: int, dp_overlap: bool) -> pb.DeploymentPlan:
    """Mixtral cut to 4 layers on four nodes of 4 H100s, eight replicas of TP 2 at EP 4:
    each expert is held by four replicas, whose expert rings (every other replica) cross
    the NICs beside the dense rings; with overlap, buckets of a layer or two."""
    return build_plan(f"moe-expert-rings-z{zero_stage}-{dp_overlap}", "mixtral-8x7b",
                      [NodeReq("H100-SXM", 4, "cx7")] * 4,
                      [ReplicaReq((StageReq("H100-SXM", 2, 4),), 1, 2)] * 8, seq_length=1024,
                      num_layers=4, stack=Stack(expert_parallel=4, zero_stage=zero_stage,
                                                dp_overlap=dp_overlap,
                                                dp_bucket_params=300_000_000))


def _random(seeds, **layout) -> list[pb.DeploymentPlan]:
    """Random plans of ``seeds`` (Mixtral for even seeds, DeepSeek-V3 for odd ones) with
    their EP groups laid out as ``layout`` asks (:func:`random_plan`'s options)."""
    return [random_plan(seed, max_gpus=32, num_layers=8,
                        model=("mixtral-8x7b", "deepseek-v3")[seed % 2], **layout)
            for seed in seeds]


def _plans() -> list[pb.DeploymentPlan]:
    return ([random_plan(seed, max_gpus=32, num_layers=8, model=model)
             for seed in range(6) for model in ("mixtral-8x7b", "deepseek-v3")]
            + [random_plan(seed, max_gpus=32, num_layers=8, model=model, ep_across=True)
               for seed in range(3) for model in ("mixtral-8x7b", "deepseek-v3")]
            # random plans with expert rings (ZeRO-1 with and without overlap, overlap alone)
            + _random((49, 57, 72), ep_across=True)
            + _random((3, 8, 10), ep_across=True, tp_one=True)
            # random plans whose EP groups fold CP ranks: CP 2 with expert rings, CP 4 with
            # EP over two and over four CP ranks
            + _random((3, 13, 36), cp_fold=True)
            # ... and whose EP groups span the whole (TP x CP) groups of several replicas
            + _random((57, 166), ep_across=True, cp_fold=True)
            # random plans under FSDP whose EP groups span replicas: TP 2 with expert
            # rings beside the per-layer gathers and reduce-scatters, and TP 1
            + _random((37,), ep_across=True, fsdp=True)
            + _random((28,), ep_across=True, tp_one=True, fsdp=True)
            + [expert_rings(zero, overlap) for zero in (0, 1) for overlap in (False, True)]
            + [one_node(), two_nodes(), two_nodes(4, "deepep"), two_nodes(1, "deepep"),
               two_nodes(4, "alltoall", True), two_nodes(1, "deepep", True)])


def test_moe_plans_agree_with_the_simulator():
    catalog = load_catalog()
    programs, times, per_stream = [], [], []
    eps, spans, rings, tp_one, precisions, deepep = set(), set(), set(), set(), set(), set()
    folds = set()
    for plan in _plans():
        a = analyze(plan, catalog)
        eps.add(a.stack.expert_parallel)
        precisions.add(a.stack.precision)
        if a.groups[0].cp > 1 and a.stack.expert_parallel > a.groups[0].tp:
            folds.add((a.groups[0].cp, a.expert_fold(0), bool(a.expert_rings(0)),
                       max(len(peers) for peers in a.ep_peers)))
        if a.stack.moe_dispatcher == "deepep" and a.ep_places:
            deepep.add(a.groups[0].tp)
        spans.add(max(len(peers) for peers in a.ep_peers))
        if {g.tp for g in a.groups} == {1}:
            tp_one.add(a.stack.expert_parallel)
        if any(a.expert_rings(d) for d in range(len(a.dp_groups))):
            buckets = len(a.buckets(0)) + len(a.buckets(0, experts=True))
            rings.add((a.stack.zero_stage, a.stack.dp_overlap, buckets > 1))
        program = lower(a)
        result = simulate(program)
        programs.append(program)
        times.append(result.iteration_time_s)
        per_stream.append(timeline.stream_metrics(np, timeline.metric_index(program),
                                                  result.task_start_s, result.task_end_s))
    assert {1, 2, 8} <= eps  # without and with all-to-alls, partial and whole experts
    assert {1, 2} <= spans  # EP groups inside a group and across replicas
    assert {2, 4} <= tp_one  # EP over replicas of TP 1
    assert precisions == {"bf16", "fp8"}
    assert deepep == {1, 4}  # DeepEP's dispatch across two nodes, with and without TP
    # EP over 2 of 2 CP ranks (expert rings across replicas), 2 and 4 of 4, and over the
    # whole groups of two replicas (expert rings too)
    assert {(2, 2, True, 1), (4, 2, True, 1), (4, 4, False, 1), (2, 4, True, 2)} <= folds
    # expert rings beside the dense ones, with one bucket and several (overlapped, the
    # experts in buckets of their own), under ZeRO 0 and 1, and under FSDP per layer
    assert {(0, False, False), (1, False, False), (0, True, True), (1, True, True)} <= rings
    assert any(z == 3 for z, _, _ in rings)
    t_ref = np.array(times)
    for dtype, tol in (("float32", 1e-4), ("float64", 1e-9)):
        out = default_evaluator().run(programs, "exact", dtype=dtype)
        assert np.all(out["status"] == Status.OK)
        np.testing.assert_allclose(out["iteration_time_s"], t_ref, rtol=tol, atol=0)
        for i, program in enumerate(programs):
            for name in metrics.STREAM_METRICS:
                got = out[name][i, :program.num_streams]
                np.testing.assert_allclose(got, per_stream[i][name], rtol=0,
                                           atol=tol * t_ref[i], err_msg=name)
    bound = default_evaluator().run(programs, "bound", dtype="float32", with_metrics=False)
    assert np.all(bound["iteration_time_s"] <= t_ref * (1 + 1e-6))
