"""FP8 dispatch (``moe_fp8_dispatch``, DeepSeek-V3's recipe): each pass's all-to-alls in
the dispatch direction move FP8 elements with a float32 scale per 128, those in the
combine direction BF16. Held to the closed form of the bytes, to the flows of lowered
plans (with the flat all-to-all and with DeepEP), to the task-by-task reference lowering
and both bounds, and to the simulator."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.plan.test_deepep import _a2a_flows, _deepep, _payload
from tests.support.lowering import assert_lowers_within_bounds
from xsweep.plan.analysis import analyze
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan, random_plan
from xsweep.plan.lower import lower, structure_key
from xsweep.plan.program import Category
from xsweep.plan.stack import Stack
from xsweep.plan.workload import a2a_pair_bytes
from xsweep.sim import simulate

SEQ = 1024
#: the mean bytes of an all-to-all over BF16's: half of them at 1 + 4/128 bytes an element
MEAN = (1 + (1 + 4 / 128) / 2) / 2


def plan(*, tp: int, fp8_dispatch: bool, dispatcher: str = "alltoall", recompute="none"):
    """Mixtral cut to 2 layers in FP8 on two nodes of 4 H100s, replicas of TP ``tp``, EP 8
    over both nodes."""
    return build_plan(f"fp8-dispatch-tp{tp}-{fp8_dispatch}-{dispatcher}", "mixtral-8x7b",
                      [NodeReq("H100-SXM", 4, "cx7")] * 2,
                      [ReplicaReq((StageReq("H100-SXM", tp, 2),), 1, 2)] * (8 // tp),
                      seq_length=SEQ, num_layers=2,
                      stack=Stack(precision="fp8", expert_parallel=8, recompute=recompute,
                                  moe_dispatcher=dispatcher, moe_fp8_dispatch=fp8_dispatch))


def test_the_pair_bytes_are_the_mean_of_an_fp8_dispatch_and_a_bf16_combine(catalog):
    """``2 h (b s / tp) k / EP`` bytes a pair in BF16; a dispatch in FP8 moves ``1 + 4/128``
    bytes an element instead of 2, and the combine after it stays BF16."""
    m = catalog.model("mixtral-8x7b")
    bf16 = Stack(precision="fp8", expert_parallel=8)
    fp8 = dataclasses.replace(bf16, moe_fp8_dispatch=True)
    tokens = 2 * m.seq_length / 4
    assert a2a_pair_bytes(m, 2, 4, bf16) == pytest.approx(
        2 * m.hidden_size * tokens * m.moe_top_k / 8, rel=1e-12)
    dispatch = (1 + 4 / 128) * m.hidden_size * tokens * m.moe_top_k / 8
    combine = 2 * m.hidden_size * tokens * m.moe_top_k / 8
    assert a2a_pair_bytes(m, 2, 4, fp8) == pytest.approx((dispatch + combine) / 2, rel=1e-12)


@pytest.mark.parametrize("recompute", ("none", "full"))
@pytest.mark.parametrize(("tp", "dispatcher"), [(4, "alltoall"), (1, "alltoall"), (1, "deepep")])
def test_every_all_to_all_flow_carries_the_mean_and_nothing_else_changes(catalog, tp, dispatcher,
                                                                       recompute):
    """Same structure; each all-to-all flow of a TP task carries ``MEAN`` times its bytes
    without FP8 dispatch (the flat pattern's, or DeepEP's flows on the node and through the
    NIC), each TP ring flow and every other task and flow the same."""
    on, off = (analyze(plan(tp=tp, fp8_dispatch=f, dispatcher=dispatcher, recompute=recompute),
                       catalog) for f in (True, False))
    assert structure_key(on) == structure_key(off)
    a, b = lower(on), lower(off)
    np.testing.assert_array_equal(a.flow_src, b.flow_src)
    np.testing.assert_array_equal(a.task_duration_s, b.task_duration_s)
    a2a: set[int] = set()
    for t in np.flatnonzero(a.task_category == int(Category.TP)).tolist():
        a2a.update(_a2a_flows(a, t, tp))
    assert a2a
    for f in range(a.flow_src.size):
        want = b.flow_bytes[f] * (MEAN if f in a2a else 1.0)
        assert a.flow_bytes[f] == pytest.approx(want, rel=1e-12)
        if f in a2a:
            assert _payload(on, a, f) == pytest.approx(MEAN * _payload(off, b, f), rel=1e-12)
    assert simulate(a).iteration_time_s < simulate(b).iteration_time_s


#: random plans the generator gave FP8 dispatch: EP inside TP (Mixtral TP 8 and TP 2,
#: DeepSeek-V3 TP 8), across TP-2 replicas over nodes, across TP-1 replicas over nodes
FP8_DISPATCH_SEEDS = ((36, {}), (46, {"ep_across": True}), (5, {}),
                      (31, {"ep_across": True}), (3, {"ep_across": True, "tp_one": True}))


def fp8_dispatch_plan(seed: int, options: dict):
    return random_plan(seed, max_gpus=32, model=("mixtral-8x7b", "deepseek-v3")[seed % 2],
                       **options)


@pytest.mark.parametrize(("seed", "options"), FP8_DISPATCH_SEEDS)
def test_random_plans_with_fp8_dispatch_lower_as_the_reference_under_both_bounds(
        catalog, seed, options):
    p = fp8_dispatch_plan(seed, options)
    assert p.training.moe_fp8_dispatch
    assert_lowers_within_bounds(p, analyze(p, catalog), catalog)


def test_with_deepep_across_nodes_too(catalog):
    p = _deepep(fp8_dispatch_plan(31, {"ep_across": True}))
    a = analyze(p, catalog)
    assert a.ep_places and a.stack.moe_fp8_dispatch
    assert_lowers_within_bounds(p, a, catalog)


def test_the_seeds_cover_both_models_and_ep_inside_and_across(catalog):
    plans = [fp8_dispatch_plan(seed, options) for seed, options in FP8_DISPATCH_SEEDS]
    assert {p.model.preset for p in plans} == {"mixtral-8x7b", "deepseek-v3"}
    across = [bool(analyze(p, catalog).ep_places) for p in plans]
    assert any(across) and not all(across)
