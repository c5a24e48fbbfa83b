"""Deployment plans the benchmarks share: Llama-2-7B on clusters of a given size."""

from __future__ import annotations

import itertools

from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan

GPUS_PER_NODE = 8


def llama7b_plan(num_gpus: int, mix: str = "h100", *, tp: int = 4, pp: int = 4,
                 micro_batches: int = 16, schedule: str = "1f1b", resharding: str = "lcm"):
    """Llama-2-7B, TP x PP per replica, as many replicas as the GPUs hold.

    ``mix="h100"``: all H100. ``mix="half-a100"``: half the nodes are A100-40GB; each
    pipeline runs its first half of stages on H100 and the rest on A100, with the
    layers split 5:3 in favour of the faster GPUs.
    """
    per_replica = tp * pp
    replicas = num_gpus // per_replica
    nodes_total = num_gpus // GPUS_PER_NODE
    if mix == "h100":
        nodes = [NodeReq("H100-SXM", GPUS_PER_NODE)] * nodes_total
        kinds = ["H100-SXM"] * pp
        layers = [32 // pp] * pp
    elif mix == "half-a100":
        nodes = ([NodeReq("H100-SXM", GPUS_PER_NODE)] * (nodes_total // 2)
                 + [NodeReq("A100-40GB", GPUS_PER_NODE)] * (nodes_total // 2))
        kinds = ["H100-SXM"] * (pp // 2) + ["A100-40GB"] * (pp - pp // 2)
        fast, slow = 20 // (pp // 2), 12 // (pp - pp // 2)
        layers = [fast] * (pp // 2) + [slow] * (pp - pp // 2)
        layers[0] += 32 - sum(layers)
    else:
        raise ValueError(f"unknown mix {mix!r}")
    stages = tuple(StageReq(k, tp, n) for k, n in zip(kinds, layers, strict=True))
    return build_plan(
        f"llama2-7b-{num_gpus}-{mix}-tp{tp}-pp{pp}-m{micro_batches}-{schedule}", "llama2-7b",
        nodes, [ReplicaReq(stages, 1, micro_batches)] * replicas,
        schedule=schedule, resharding=resharding,
    )


def llama7b_grid(gpu_counts, *, tps=(2, 4, 8), pps=(2, 4), micro_batches=(8, 16),
                 schedules=("1f1b", "gpipe"), mixes=("h100", "half-a100")) -> list:
    """Every Llama-2-7B plan of the grid that fits its cluster (see :func:`llama7b_plan`)."""
    plans = []
    for gpus, tp, pp, m, schedule, mix in itertools.product(gpu_counts, tps, pps, micro_batches,
                                                            schedules, mixes):
        if tp * pp > gpus or gpus % (tp * pp):
            continue
        try:
            plans.append(llama7b_plan(gpus, mix, tp=tp, pp=pp, micro_batches=m,
                                      schedule=schedule))
        except ValueError:  # the mix leaves no node of a stage's GPU with room for it
            continue
    return plans


def simulated_time(program) -> float:
    """The simulator's iteration time of ``program``: a worker for process pools."""
    from xsweep.sim import simulate

    return simulate(program).iteration_time_s
