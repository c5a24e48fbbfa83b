"""Lowering a plan to the program IR: structure, volumes and schedules."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.lowering import payload_bytes
from xsweep.plan.analysis import analyze
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan, random_plan
from xsweep.plan.lower import lower
from xsweep.plan.program import Category, TaskKind
from xsweep.plan.schedule import in_flight, stage_order
from xsweep.spec.catalog import load_catalog
from xsweep.spec.validate import validate_plan


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def appendix_b(schedule="gpipe", resharding="lcm", m=2):
    """The paper's appendix-B deployment: DG0 1-20 on 3 H100, DG1 21-32 on 2 A100,
    DG2 1-15 on 2 H100, DG3 16-32 on 3 A100 (ranks 0-2, 5-6, 3-4, 7-9)."""
    nodes = [NodeReq("H100-SXM", 5), NodeReq("A100-40GB", 5)]
    replicas = [
        ReplicaReq((StageReq("H100-SXM", 3, 20), StageReq("A100-40GB", 2, 12)), 1, m),
        ReplicaReq((StageReq("H100-SXM", 2, 15), StageReq("A100-40GB", 3, 17)), 1, m),
    ]
    return build_plan("appendix-b", "llama2-7b", nodes, replicas, schedule=schedule,
                      resharding=resharding)


@pytest.mark.parametrize(("schedule", "v"), [("gpipe", 1), ("1f1b", 1), ("1f1b", 2), ("1f1b", 3)])
@pytest.mark.parametrize("p,m", [(1, 1), (2, 4), (4, 4), (4, 8), (3, 6)])
def test_schedule_runs_every_pass_once_and_bounds_memory(schedule, v, p, m):
    if v > 1 and p == 1:
        return  # interleaving needs two stages or more
    for stage in range(p):
        order = stage_order(schedule, stage, p, m, v)
        assert sorted(order) == sorted((kind, j, c) for kind in "FB" for j in range(m)
                                       for c in range(v))
        # a backward never precedes its own forward
        assert all(order.index(("F", j, c)) < order.index(("B", j, c))
                   for j in range(m) for c in range(v))
        # micro-batches' worth of activations held: each chunk pass holds 1/v of the stage
        live = [sum(1 if kind == "F" else -1 for kind, _, _ in order[: i + 1])
                for i in range(len(order))]
        expected = m if schedule == "gpipe" else min(m, p - stage) if v == 1 else None
        assert in_flight(schedule, stage, p, m, v) == max(live) / v
        if expected is not None:
            assert max(live) == expected


@pytest.mark.parametrize("args", [("interleaved", 0, 4, 8), ("1f1b", 4, 4, 8), ("1f1b", 0, 4, 0)])
def test_in_flight_refuses_what_no_schedule_runs(args):
    with pytest.raises(ValueError):
        in_flight(*args)


@pytest.mark.parametrize("args", [("gpipe", 0, 2, 4, 2), ("1f1b", 0, 4, 6, 2), ("pipedream", 0, 2, 2, 1)])
def test_stage_order_refuses_what_no_schedule_runs(args):
    with pytest.raises(ValueError):
        stage_order(*args)


def test_appendix_b_ranks_groups_and_dp_tasks(catalog):
    plan = appendix_b()
    validate_plan(plan, catalog, "appendix-b")
    a = analyze(plan, catalog)
    assert [g.ranks for g in a.groups] == [(0, 1, 2), (5, 6), (3, 4), (7, 8, 9)]
    segs = [(g.first_layer, g.last_layer, g.ranks) for g in a.dp_groups]
    assert segs == [(1, 15, (0, 1, 2, 3, 4)), (16, 20, (0, 1, 2, 7, 8, 9)),
                    (21, 32, (5, 6, 7, 8, 9))]
    prog = lower(a)
    prog.check()
    cat = prog.task_category
    assert int(np.sum(cat == Category.BARRIER)) == 3
    # one all-reduce per DP group: a pipelined ring per LCM chunk, lcm(3,2)=6, lcm(3,3)=3,
    # lcm(2,3)=6, one flow per member of each
    dp = np.flatnonzero(cat == Category.DP)
    assert [len(prog.flows(int(t))) for t in dp] == [6 * 2, 3 * 2, 6 * 2]
    # both replicas reshard (TP 3 -> 2 and 2 -> 3), forward and backward, every micro-batch
    assert int(np.sum(cat == Category.PP)) == 0
    assert int(np.sum(cat == Category.RESHARD)) == 2 * 2 * 2


def test_dp_volume_per_group_matches_lcm_chunking(catalog):
    a = analyze(appendix_b(), catalog)
    prog = lower(a)
    dp_tasks = np.flatnonzero(prog.task_category == Category.DP)
    sent = sum(payload_bytes(a, prog, prog.flows(int(t))) for t in dp_tasks)
    expected = 0.0
    for g, nbytes in zip(a.dp_groups, a.dp_segment_bytes, strict=True):
        k = len(g.device_groups)
        expected += len(g.rings) * 2 * (k - 1) * nbytes / g.lcm  # each ring: 2(k-1)/k x chunk x k
    assert sent == pytest.approx(expected, rel=1e-12)


def test_streams_run_every_micro_batch_then_the_optimizer(catalog):
    prog = lower(analyze(appendix_b(schedule="1f1b", m=3), catalog))
    for s in range(prog.num_streams):
        mine = np.flatnonzero(prog.task_stream == s)
        kinds = prog.task_category[mine]
        assert int(np.sum(kinds == Category.FORWARD)) == 3
        assert prog.task_category[mine[-1]] == Category.OPTIMIZER
        # the stream is a chain: each task depends on the one before it
        for a, b in zip(mine, mine[1:], strict=False):
            assert a in prog.deps(int(b))


def test_tp_flows_carry_the_merged_ring_volume(catalog):
    a = analyze(appendix_b(), catalog)
    prog = lower(a)
    g = a.groups[0]  # TP 3
    first_tp = next(t for t in range(prog.num_tasks)
                    if prog.task_category[t] == Category.TP and prog.task_device_group[t] == g.id)
    flows = list(prog.flows(first_tp))
    k, n, size = g.tp, g.cost.tp_allreduces_forward, g.cost.tp_allreduce_bytes
    assert len(flows) == k
    assert payload_bytes(a, prog, flows) == pytest.approx(k * 2 * (k - 1) / k * n * size)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000))
def test_random_plans_lower_to_valid_programs(seed):
    catalog = load_catalog()
    plan = random_plan(seed)
    validate_plan(plan, catalog, "random")
    prog = lower(analyze(plan, catalog))
    prog.check()
    comm = prog.task_kind == TaskKind.COMM
    assert np.all(prog.task_duration_s[~comm] >= 0)
    # every flow's path leaves its source GPU and enters its destination GPU
    for f in range(0, prog.num_flows, max(1, prog.num_flows // 50)):
        path = prog.path(f)
        first, last = prog.link_names[path[0]], prog.link_names[path[-1]]
        assert first.startswith(f"gpu{prog.flow_src[f]}->")
        assert last.endswith(f"->gpu{prog.flow_dst[f]}")
