"""Deployment plans the benchmarks share: Llama-2-7B on clusters of a given size.

Two families for end-to-end measurements:

* **sweep-like** (:func:`sweep_like`): each structure (TP, PP, micro-batches, schedule,
  pool kind) in several numeric variants, as a sweep over hardware options produces
  them: the GPU model within its kind (A100-40GB/A100-80GB, H100/H200), the NIC
  generation (CX6/CX7/CX8) and activation recompute (none or full);
* **all-distinct** (:func:`distinct`): every plan its own structure: TP, PP,
  micro-batch counts, schedules, resharding schemes and cluster mixes (one kind, or
  half the nodes of another) varied, plus seeded random heterogeneous plans.
"""

from __future__ import annotations

import itertools
import random

from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan, random_plan
from xsweep.plan.stack import Stack

GPUS_PER_NODE = 8
#: GPU models by kind: a numeric variant swaps the model, never the structure.
KINDS = {"ampere": ("A100-40GB", "A100-80GB"), "hopper": ("H100-SXM", "H200")}
NICS = ("cx6", "cx7", "cx8")


def llama7b_plan(num_gpus: int, mix: str = "h100", *, tp: int = 4, pp: int = 4,
                 micro_batches: int = 16, schedule: str = "1f1b", resharding: str = "lcm",
                 micro_batch_size: int = 1, fast: str = "H100-SXM", slow: str = "A100-40GB",
                 nic: str = "", recompute: str = "none"):
    """Llama-2-7B, TP x PP per replica, as many replicas as the GPUs hold.

    ``mix="h100"``: every node is ``fast``. ``mix="half-a100"``: half the nodes are
    ``slow``; each pipeline runs its first half of stages on the fast GPUs and the rest
    on the slow ones, with the layers split 5:3 in favour of the faster GPUs.
    """
    per_replica = tp * pp
    replicas = num_gpus // per_replica
    nodes_total = num_gpus // GPUS_PER_NODE
    if mix == "h100":
        nodes = [NodeReq(fast, GPUS_PER_NODE, nic)] * nodes_total
        kinds = [fast] * pp
        layers = [32 // pp] * pp
    elif mix == "half-a100":
        nodes = ([NodeReq(fast, GPUS_PER_NODE, nic)] * (nodes_total // 2)
                 + [NodeReq(slow, GPUS_PER_NODE, nic)] * (nodes_total // 2))
        kinds = [fast] * (pp // 2) + [slow] * (pp - pp // 2)
        fast_layers, slow_layers = 20 // (pp // 2), 12 // (pp - pp // 2)
        layers = [fast_layers] * (pp // 2) + [slow_layers] * (pp - pp // 2)
        layers[0] += 32 - sum(layers)
    else:
        raise ValueError(f"unknown mix {mix!r}")
    stages = tuple(StageReq(k, tp, n) for k, n in zip(kinds, layers, strict=True))
    return build_plan(
        f"llama2-7b-{num_gpus}-{mix}-{fast}-{slow}-tp{tp}-pp{pp}-m{micro_batches}"
        f"x{micro_batch_size}-{schedule}-{resharding}-{nic or 'default'}"
        f"-recompute-{recompute}", "llama2-7b",
        nodes, [ReplicaReq(stages, micro_batch_size, micro_batches)] * replicas,
        schedule=schedule, resharding=resharding, stack=Stack(recompute=recompute),
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


def _structures(gpu_counts, global_batch: int):
    """(gpus, tp, pp, micro-batch size, micro-batches per replica, schedule) that divide."""
    for gpus, tp, pp, size, schedule in itertools.product(
            gpu_counts, (1, 2, 4, 8), (1, 2, 4), (1, 2), ("1f1b", "gpipe")):
        if gpus % (tp * pp):
            continue
        replicas = gpus // (tp * pp)
        if global_batch % (replicas * size):
            continue
        yield gpus, tp, pp, size, global_batch // (replicas * size), schedule


def sweep_like(gpu_counts=(8, 16, 32, 64), global_batch: int = 128) -> list:
    """Every structure of the grid, each in 12 numeric variants: GPU model within its kind
    (2), NIC generation (3), activation recompute (2)."""
    plans = []
    for gpus, tp, pp, size, m, schedule in _structures(gpu_counts, global_batch):
        for models in KINDS.values():
            for gpu, nic, recompute in itertools.product(models, NICS, ("none", "full")):
                plans.append(llama7b_plan(gpus, "h100", tp=tp, pp=pp, micro_batches=m,
                                          schedule=schedule, micro_batch_size=size, fast=gpu,
                                          nic=nic, recompute=recompute))
    return plans


def distinct(gpu_counts=(8, 16, 32, 64), global_batch: int = 128, *, seed: int = 0,
             random_plans: int = 128) -> list:
    """One plan per structure: the grid of :func:`sweep_like` on one kind and on half-and-half
    mixes (with each resharding scheme), numbers drawn at random; then seeded random
    heterogeneous plans of up to 64 GPUs."""
    rng = random.Random(seed)
    plans = []
    for gpus, tp, pp, size, m, schedule in _structures(gpu_counts, global_batch):
        fast, slow = rng.choice(KINDS["hopper"]), rng.choice(KINDS["ampere"])
        variants = [("h100", "lcm")]
        if gpus >= 2 * GPUS_PER_NODE and pp >= 2:
            variants += [("half-a100", scheme) for scheme in ("lcm", "hetauto", "alpacomm")]
        for mix, scheme in variants:
            try:
                plans.append(llama7b_plan(gpus, mix, tp=tp, pp=pp, micro_batches=m,
                                          schedule=schedule, resharding=scheme,
                                          micro_batch_size=size, fast=fast, slow=slow,
                                          nic=rng.choice(NICS),
                                          recompute=rng.choice(("none", "selective", "full"))))
            except ValueError:  # the mix leaves no node of a stage's GPU with room for it
                continue
    plans += [random_plan(10_000 * seed + i, max_gpus=64, num_layers=32, seq_length=4096)
              for i in range(random_plans)]
    return plans


def simulated_time(program) -> float:
    """The simulator's iteration time of ``program``: a worker for process pools."""
    from xsweep.sim import simulate

    return simulate(program).iteration_time_s


def gpt3_space_plans(space) -> list[tuple[object, list]]:
    """The buildable plans of a sweep file (``spaces/gpt3-175b-64.yaml``: GPT-3 175B on 64
    A100-80GB) by program structure (:func:`xsweep.plan.lower.structure_key`), in the
    order the sweep's walk meets them: per structure, its first plan and the others,
    numeric variants of it (recompute, sequence parallelism)."""
    from xsweep.plan.analysis import analyze
    from xsweep.plan.lower import structure_key
    from xsweep.search.space.grid import Grid
    from xsweep.search.space.planner import Built, Planner
    from xsweep.search.space.screen import columns_of_grid, screen
    from xsweep.search.sweep.units import bound_walk
    from xsweep.spec import load_catalog, load_sweep

    catalog = load_catalog()
    sweep = load_sweep(space, catalog)
    grid, walk, planner = Grid(sweep), bound_walk(sweep), Planner(sweep, catalog)
    groups: dict[tuple, tuple[object, list]] = {}
    for start, stop in walk.chunks(4096):
        points = walk.points(start, stop)
        ruled_out = screen(sweep, catalog, columns_of_grid(grid, points)).infeasible
        for i in points[~ruled_out].tolist():
            built = planner.plan(grid.point(i), f"point-{i}")
            if isinstance(built, Built):
                key = structure_key(analyze(built.plan, catalog))
                groups.setdefault(key, (built.plan, []))[1].append(built.plan)
    return [(first, others[1:]) for first, others in groups.values()]
