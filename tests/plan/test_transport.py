"""NCCL's bus efficiency and launch latency on the lowered flows: closed forms on idle links."""

from __future__ import annotations

import numpy as np
import pytest

from xsweep.plan.analysis import analyze
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan
from xsweep.plan.lower import lower
from xsweep.plan.program import Category
from xsweep.plan.stack import DEFAULT_STACK, Stack
from xsweep.plan.transport import flow_numbers
from xsweep.sim import simulate
from xsweep.spec.catalog import load_catalog


def one_node_plan(stages, replicas=1, stack=DEFAULT_STACK, layers=2, gpu="A100-80GB"):
    """Llama-2-7B cut to ``layers`` layers on one 8-GPU node; ``stages`` is a list of TP."""
    per_stage = layers // len(stages)
    replica = ReplicaReq(tuple(StageReq(gpu, tp, per_stage) for tp in stages), 1, 2)
    return build_plan("t", "llama2-7b", [NodeReq(gpu, 8)], [replica] * replicas, stack=stack,
                      num_layers=layers)


def first_task(program, category):
    return int(np.flatnonzero(program.task_category == category)[0])


@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_tp_all_reduce_costs_launch_plus_ring_time_at_nccl_bandwidth(catalog, sequence_parallel):
    stack = Stack(sequence_parallel=sequence_parallel)
    a = analyze(one_node_plan([8], stack=stack), catalog)
    program = lower(a)
    result = simulate(program)
    t = first_task(program, Category.TP)  # the first forward pass's all-reduces
    g = a.groups[0]
    k, n, size = g.tp, g.cost.tp_allreduces_forward, g.cost.tp_allreduce_bytes
    nvlink = catalog.link("nvlink3")
    bandwidth = catalog.gpu("A100-80GB").scale_up_gbps * 1e9 / 8
    hop_s = 2 * catalog.gpu("A100-80GB").scale_up_latency_ns * 1e-9  # up to the switch, down
    ops = 2 if sequence_parallel else 1  # reduce-scatter + all-gather, or one all-reduce
    expected = (n * ops * nvlink.launch_latency_us * 1e-6 + 2 * (k - 1) * n * hop_s
                + 2 * (k - 1) / k * n * size / (bandwidth * nvlink.bus_efficiency))
    assert result.task_end_s[t] - result.task_start_s[t] == pytest.approx(expected, rel=1e-12)
    # about 10 us + 2(k-1)/k S / (300 GB/s x 0.8) per all-reduce of S bytes
    assert nvlink.launch_latency_us == 10 and nvlink.bus_efficiency == 0.8


def test_point_to_point_send_pays_its_launch_as_link_time(catalog):
    a = analyze(one_node_plan([1, 1]), catalog)
    program = lower(a)
    result = simulate(program)
    t = first_task(program, Category.PP)
    nvlink = catalog.link("nvlink3")
    bandwidth = catalog.gpu("A100-80GB").scale_up_gbps * 1e9 / 8
    hop_s = 2 * catalog.gpu("A100-80GB").scale_up_latency_ns * 1e-9
    expected = (hop_s + nvlink.launch_latency_us * 1e-6
                + a.groups[0].cost.activation_bytes / (bandwidth * nvlink.bus_efficiency))
    assert result.task_end_s[t] - result.task_start_s[t] == pytest.approx(expected, rel=1e-12)


def test_p2p_overheads_add_up_on_a_shared_link(catalog):
    # n sends over one link pay n overheads, as n NCCL sends do; a collective's launch
    # is latency, paid once however many flows wait for it.
    a = analyze(one_node_plan([8]), catalog)
    path = a.topology.path(0, 1)
    capacity = float(a.topology.capacity[list(path)].min())
    one, _ = flow_numbers(a.topology, path, 1e6, p2p=True)
    two, _ = flow_numbers(a.topology, path, 5e5, p2p=True)
    launch_s = catalog.link("nvlink3").launch_latency_us * 1e-6
    assert 2 * two - one == pytest.approx(launch_s * capacity, rel=1e-12)
    wire, latency = flow_numbers(a.topology, path, 1e6, launches=3)
    assert (wire, latency) == pytest.approx((1e6 / 0.8, 3 * launch_s), rel=1e-12)


def test_nic_paths_take_the_network_efficiency_and_launch(catalog):
    plan = build_plan("t", "llama2-7b", [NodeReq("H100-SXM", 8, "cx7")] * 2,
                      [ReplicaReq((StageReq("H100-SXM", 8, 2),), 1, 1)] * 2, num_layers=2)
    a = analyze(plan, catalog)
    path = a.topology.path(0, 8)  # same rail, other node: PCIe 512 Gb/s, NIC 400 Gb/s
    wire, latency = flow_numbers(a.topology, path, 1e9, launches=1)
    cx7 = catalog.nic("cx7")
    assert (wire, latency) == pytest.approx((1e9 / cx7.bus_efficiency,
                                             cx7.launch_latency_us * 1e-6), rel=1e-12)
    program = lower(a)
    (dp,) = np.flatnonzero(program.task_category == Category.DP)
    # one pipelined ring per LCM chunk: 2(k-1) = 2 hop latencies and one launch per flow
    flows = list(program.flows(int(dp)))
    assert len(flows) == 8 * 2
    path_s = a.topology.path_latency_s(path)
    assert program.flow_latency_s[flows] == pytest.approx(
        2 * path_s + cx7.launch_latency_us * 1e-6, rel=1e-12)


def test_more_bus_efficiency_is_never_slower(tmp_path):
    plan = one_node_plan([2, 2], replicas=2)
    times = []
    for efficiency in (0.5, 0.8, 1.0):
        mine = tmp_path / f"links-{efficiency}.yaml"
        mine.write_text(f"links:\n  nvlink3: {{bus_efficiency: {efficiency}}}\n")
        times.append(simulate(lower(analyze(plan, load_catalog([mine])))).iteration_time_s)
    assert times[0] > times[1] > times[2]
