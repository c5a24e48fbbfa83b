"""Building deployment plans from a compact description, and random valid plans.

``build_plan`` places each stage's TP group on the first node of the requested GPU
type with enough free GPUs (ranks are numbered node by node), so callers describe
*what* runs where and never count ranks by hand. ``random_plan`` draws seeded,
valid heterogeneous plans for agreement tests and benchmarks.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

from xsweep.plan.stack import DEFAULT_STACK, Stack
from xsweep.spec import xsweep_pb2 as pb
from xsweep.spec.catalog import REFERENCE_SOFTWARE, SoftwareSpec, load_catalog
from xsweep.spec.enums import FABRIC, PRECISION, RECOMPUTE, RESHARDING, SCHEDULE


@dataclass(frozen=True)
class NodeReq:
    gpu: str
    num_gpus: int
    nic: str = ""


@dataclass(frozen=True)
class StageReq:
    gpu: str
    tp: int
    num_layers: int


@dataclass(frozen=True)
class ReplicaReq:
    stages: tuple[StageReq, ...]
    micro_batch_size: int
    num_micro_batches: int


def build_plan(name: str, model: str, nodes, replicas, *, schedule="1f1b", resharding="lcm",
               fabric="rail_optimized", oversubscription=1.0, stack: Stack = DEFAULT_STACK,
               seq_length=0, num_layers=0, total_tokens=1e9) -> pb.DeploymentPlan:
    """A DeploymentPlan with TP groups placed first-fit on nodes of the requested GPU;
    every training-stack option is written out."""
    plan = pb.DeploymentPlan(name=name)
    plan.model.preset = model
    if seq_length:
        plan.model.seq_length = seq_length
    if num_layers:
        plan.model.num_layers = num_layers
    t = plan.training
    t.schedule, t.resharding = SCHEDULE.value(schedule), RESHARDING.value(resharding)
    t.recompute, t.zero_stage, t.total_tokens = (RECOMPUTE.value(stack.recompute),
                                                 stack.zero_stage, total_tokens)
    t.sequence_parallel, t.flash_attention = stack.sequence_parallel, stack.flash_attention
    t.virtual_pipeline_stages, t.dp_overlap = stack.virtual_pipeline_stages, stack.dp_overlap
    t.dp_bucket_params = stack.dp_bucket_params
    t.precision = PRECISION.value(stack.precision)
    t.tp_comm_overlap = stack.tp_comm_overlap
    if stack.software.name != REFERENCE_SOFTWARE.name:  # unset means the reference profile
        t.software = stack.software.name
    t.global_batch_size = sum(r.micro_batch_size * r.num_micro_batches for r in replicas)
    plan.cluster.fabric.kind = FABRIC.value(fabric)
    plan.cluster.fabric.oversubscription = oversubscription
    free, first_rank = [], 0
    for n in nodes:
        plan.cluster.nodes.add(gpu=n.gpu, num_gpus=n.num_gpus, nic=n.nic)
        free.append(list(range(first_rank, first_rank + n.num_gpus)))
        first_rank += n.num_gpus
    gid = 0
    for replica, r in enumerate(replicas):
        first = 1
        for stage, s in enumerate(r.stages):
            node = next((i for i, n in enumerate(nodes)
                         if n.gpu == s.gpu and len(free[i]) >= s.tp), None)
            if node is None:
                raise ValueError(f"no {s.gpu} node has {s.tp} free GPUs for stage {stage} "
                                 f"of replica {replica}")
            ranks, free[node] = free[node][: s.tp], free[node][s.tp:]
            plan.device_groups.add(
                id=gid, ranks=ranks, pp_stage=stage, dp_replica=replica,
                first_layer=first, last_layer=first + s.num_layers - 1,
                micro_batch_size=r.micro_batch_size, num_micro_batches=r.num_micro_batches,
            )
            gid += 1
            first += s.num_layers
    return plan


def split_layers(num_layers: int, weights) -> list[int]:
    """Split ``num_layers`` into len(weights) positive parts roughly proportional to weights."""
    k = len(weights)
    total = float(sum(weights))
    parts = [max(1, round(num_layers * w / total)) for w in weights]
    while sum(parts) > num_layers:
        parts[parts.index(max(parts))] -= 1
    while sum(parts) < num_layers:
        parts[parts.index(min(parts))] += 1
    assert len(parts) == k and min(parts) >= 1
    return parts


GPU_TYPES = ("A100-40GB", "A100-80GB", "H100-SXM", "H200", "B200")
#: The GPU types of the built-in catalog with FP8 tensor cores.
FP8_GPU_TYPES = ("H100-SXM", "H200", "B200")
NICS = ("cx5", "cx6", "cx7", "cx8")


def random_plan(seed: int, *, min_gpus: int = 8, max_gpus: int = 64, num_layers: int = 8,
                model: str = "llama2-7b", seq_length: int = 1024) -> pb.DeploymentPlan:
    """A seeded, valid, heterogeneous plan (GPU and NIC mixes, TP/PP/DP mixes, schedules,
    resharding schemes, fabrics and every training-stack option drawn at random).

    The model keeps the preset's width but only ``num_layers`` layers and a shorter
    sequence, so that programs stay small enough for agreement corpora. Options that
    constrain the shape come first: interleaving (1F1B, two or more stages per replica,
    layers and micro-batches in multiples) and FSDP (every replica with the first one's
    stages and micro-batches; TP degrees, GPUs and micro-batch sizes still differ).
    """
    rng = random.Random(seed)
    # the shape-constraining options, from a stream of their own
    shape_rng = random.Random(f"shape-{seed}")
    v = shape_rng.choice((1, 1, 1, 2)) if num_layers >= 4 else 1
    zero_stage = shape_rng.choice((0, 0, 1, 1, 3))
    gpus_per_node = rng.choice((4, 8))
    total_nodes = rng.randint(max(1, min_gpus // gpus_per_node), max(1, max_gpus // gpus_per_node))
    kinds = rng.sample(GPU_TYPES, rng.choice((1, 2, 2, 3)))
    nodes = [NodeReq(kinds[i % len(kinds)], gpus_per_node, rng.choice(NICS))
             for i in range(total_nodes)]
    free = {}

    def place():
        """A random (GPU kind, TP degree) with room left, taken; None if none has room."""
        options = [(k, tp) for k in kinds for tp in (1, 2, 3, 4, 8)
                   if tp <= gpus_per_node and any(f >= tp for f in free[k])]
        if not options:
            return None
        k, tp = rng.choice(options)
        i = next(i for i, f in enumerate(free[k]) if f >= tp)
        free[k][i] -= tp
        return k, tp

    def draw_replicas(v: int) -> list[ReplicaReq]:
        free.update({k: [n.num_gpus for n in nodes if n.gpu == k] for k in kinds})
        replicas = []
        for _ in range(rng.randint(1, 4)):
            if zero_stage == 3 and replicas:  # FSDP: the first replica's stages, micro-batches
                first = replicas[0]
                stages = [place() for _ in first.stages]
                if None in stages:
                    break
                replicas.append(ReplicaReq(
                    tuple(StageReq(k, tp, s.num_layers)
                          for (k, tp), s in zip(stages, first.stages, strict=True)),
                    micro_batch_size=rng.choice((1, 2, 4)),
                    num_micro_batches=first.num_micro_batches))
                continue
            pp = rng.randint(2 if v > 1 else 1, min(4, num_layers // v))
            stages = []
            for _ in range(pp):
                where = place()
                if where is None:
                    break
                stages.append(where)
            if len(stages) < (2 if v > 1 else 1):
                break
            parts = split_layers(num_layers // v, [rng.uniform(0.5, 2.0) for _ in stages])
            m = rng.randint(1, 6)
            if v > 1:  # interleaving: micro-batches in multiples of the stages
                m = len(stages) * -(-m // len(stages))
            replicas.append(ReplicaReq(
                tuple(StageReq(k, tp, n * v) for (k, tp), n in zip(stages, parts, strict=True)),
                micro_batch_size=rng.choice((1, 2, 4)), num_micro_batches=m,
            ))
        return replicas

    replicas = draw_replicas(v)
    if not replicas:  # no room for two interleaved stages: a plain pipeline instead
        v = 1
        replicas = draw_replicas(v)
    # FP8 where every GPU kind has FP8 tensor cores, from a stream of its own (the other
    # draws stay as they were)
    fp8 = (all(k in FP8_GPU_TYPES for k in kinds)
           and random.Random(f"precision-{seed}").random() < 0.5)
    sequence_parallel = rng.random() < 0.7
    # TP overlap from a stream of its own too (it needs sequence parallelism)
    overlap = sequence_parallel and random.Random(f"tp-overlap-{seed}").random() < 0.5
    stack = Stack(sequence_parallel=sequence_parallel, flash_attention=rng.random() < 0.7,
                  recompute=rng.choice(("none", "none", "selective", "full")),
                  zero_stage=zero_stage, virtual_pipeline_stages=v,
                  dp_overlap=rng.random() < 0.5,
                  dp_bucket_params=rng.choice((0, 30_000_000, 100_000_000, 10**12)),
                  precision="fp8" if fp8 else "bf16", tp_comm_overlap=overlap,
                  software=_random_software(seed))
    schedule = "1f1b" if v > 1 else rng.choice(SCHEDULE.known())
    return build_plan(
        f"random-{seed}", model, nodes, replicas,
        schedule=schedule, resharding=rng.choice(RESHARDING.known()),
        fabric=rng.choice(FABRIC.known()), oversubscription=rng.choice((1.0, 1.0, 2.0, 4.0)),
        stack=stack, seq_length=seq_length, num_layers=num_layers,
    )


def _random_software(seed: int) -> SoftwareSpec:
    """A software profile of the built-in catalog, from a stream of its own (the other
    draws stay as they were)."""
    profiles = sorted(_builtin_software().items())
    return random.Random(f"software-{seed}").choice(profiles)[1]


@functools.cache
def _builtin_software() -> dict[str, SoftwareSpec]:
    return load_catalog().software
