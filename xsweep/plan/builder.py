"""Building deployment plans from a compact description, and random valid plans.

``build_plan`` places each stage's TP group on the first node of the requested GPU
type with enough free GPUs (ranks are numbered node by node), so callers describe
*what* runs where and never count ranks by hand. ``random_plan`` draws seeded,
valid heterogeneous plans for agreement tests and benchmarks.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import random
from dataclasses import dataclass

from xsweep.plan.stack import DEFAULT_STACK, Stack
from xsweep.spec import xsweep_pb2 as pb
from xsweep.spec.catalog import REFERENCE_SOFTWARE, SoftwareSpec, load_catalog
from xsweep.spec.enums import (
    FABRIC,
    MOE_DISPATCHER,
    PRECISION,
    RECOMPUTE,
    RESHARDING,
    SCHEDULE,
)


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
               seq_length=0, num_layers=0, total_tokens=1e9,
               context_parallel=1) -> pb.DeploymentPlan:
    """A DeploymentPlan with TP groups placed first-fit on nodes of the requested GPU;
    every training-stack option is written out. With ``context_parallel`` each stage
    takes ``tp x cp`` GPUs of one node (TP fastest)."""
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
    if stack.expert_parallel > 1:  # dense plans keep their bytes
        t.expert_parallel = stack.expert_parallel
    if stack.moe_imbalance != 1.0:
        t.moe_imbalance = stack.moe_imbalance
    if not stack.pp_p2p_overlap:  # unset means overlapped: other plans keep their bytes
        t.pp_p2p_overlap = False
    if stack.fp8_param_gather:
        t.fp8_param_gather = True
    if stack.moe_dispatcher != MOE_DISPATCHER.default:  # other plans keep their bytes
        t.moe_dispatcher = MOE_DISPATCHER.value(stack.moe_dispatcher)
    if stack.moe_fp8_dispatch:
        t.moe_fp8_dispatch = True
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
            size = s.tp * context_parallel
            node = next((i for i, n in enumerate(nodes)
                         if n.gpu == s.gpu and len(free[i]) >= size), None)
            if node is None:
                raise ValueError(f"no {s.gpu} node has {size} free GPUs for stage {stage} "
                                 f"of replica {replica}")
            ranks, free[node] = free[node][:size], free[node][size:]
            plan.device_groups.add(
                id=gid, ranks=ranks, pp_stage=stage, dp_replica=replica,
                first_layer=first, last_layer=first + s.num_layers - 1,
                micro_batch_size=r.micro_batch_size, num_micro_batches=r.num_micro_batches,
                context_parallel=context_parallel if context_parallel > 1 else 0,
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
#: The mixture-of-experts presets of the built-in catalog and their routed experts.
MOE_PRESETS = {"mixtral-8x7b": 8, "deepseek-v3": 256}


def random_plan(seed: int, *, min_gpus: int = 8, max_gpus: int = 64, num_layers: int = 8,
                model: str = "llama2-7b", seq_length: int = 1024,
                ep_across: bool = False, tp_one: bool = False,
                cp_fold: bool = False, fsdp: bool = False) -> pb.DeploymentPlan:
    """A seeded, valid, heterogeneous plan (GPU and NIC mixes, TP/PP/DP mixes, schedules,
    resharding schemes, fabrics and every training-stack option drawn at random).

    The model keeps the preset's width but only ``num_layers`` layers and a shorter
    sequence, so that programs stay small enough for agreement corpora. Options that
    constrain the shape come first: interleaving (1F1B, two or more stages per replica,
    layers and micro-batches in multiples) and FSDP (every replica with the first one's
    stages and micro-batches; TP degrees, GPUs and micro-batch sizes still differ).
    A mixture-of-experts ``model`` (:data:`MOE_PRESETS`) also draws its expert parallelism
    (a divisor of every TP degree and of the experts) and token imbalance, and never
    gathers its parameters in FP8.
    Context parallelism, from a stream of its own, where the model allows it (not under
    FSDP, not with EP across replicas): one CP size for the plan, each replica's stages at one TP
    degree, each group's ``tp x cp`` GPUs in one node, flash attention on; with experts
    and one TP degree for every stage, EP sometimes folds CP ranks (:func:`_fold_cp`).
    With ``ep_across`` (a mixture-of-experts model), expert parallelism spans replicas
    where it can: every replica takes the first one's stages (at one TP degree) and
    micro-batches, and EP is that TP degree times a divisor of the replicas above 1 that
    keeps it a divisor of the experts (the draws of other plans are as without it); with
    ``tp_one`` too, every stage at TP 1, so that EP spans replicas alone; with ``fsdp`` too,
    under FSDP (ZeRO-3; else EP across replicas takes ZeRO-1 for a drawn 3). With ``cp_fold``
    (a mixture-of-experts model), where the plan draws context parallelism every stage
    takes the first one's TP degree and EP folds CP ranks where it can
    (:func:`_fold_cp`); with ``ep_across`` too, CP is drawn as without EP across replicas,
    and EP spans the whole groups of several replicas where it can.
    """
    rng = random.Random(seed)
    # the shape-constraining options, from a stream of their own
    shape_rng = random.Random(f"shape-{seed}")
    v = shape_rng.choice((1, 1, 1, 2)) if num_layers >= 4 else 1
    zero_stage = shape_rng.choice((0, 0, 1, 1, 3))
    ep_across, zero_stage = _across(ep_across, model, zero_stage)
    if fsdp and ep_across:
        zero_stage = 3
    cp = random.Random(f"cp-{seed}").choice((1, 1, 2, 2, 4))
    if zero_stage == 3 or seq_length % (2 * cp) or (ep_across and not cp_fold):
        cp = 1
    gpus_per_node = rng.choice((4, 8))
    total_nodes = rng.randint(max(1, min_gpus // gpus_per_node), max(1, max_gpus // gpus_per_node))
    kinds = rng.sample(GPU_TYPES, rng.choice((1, 2, 2, 3)))
    nodes = [NodeReq(kinds[i % len(kinds)], gpus_per_node, rng.choice(NICS))
             for i in range(total_nodes)]
    free = {}
    # with experts, TP degrees that expert parallelism can divide
    tps = (2, 4, 8) if model in MOE_PRESETS else (1, 2, 3, 4, 8)
    if ep_across and tp_one:
        tps = (1,)

    def place(tps=tps):
        """A random (GPU kind, TP degree) with room left for ``tp x cp`` GPUs in a node,
        taken; None if none has room."""
        options = [(k, tp) for k in kinds for tp in tps
                   if tp * cp <= gpus_per_node and any(f >= tp * cp for f in free[k])]
        if not options:
            return None
        k, tp = rng.choice(options)
        i = next(i for i, f in enumerate(free[k]) if f >= tp * cp)
        free[k][i] -= tp * cp
        return k, tp

    def draw_replicas(v: int) -> list[ReplicaReq]:
        free.update({k: [n.num_gpus for n in nodes if n.gpu == k] for k in kinds})
        replicas = []
        for _ in range(rng.randint(1, 4)):
            if ep_across and replicas:  # EP across replicas: the first replica's shape
                copy = _same_shape(replicas[0], place)
                if copy is None:
                    break
                replicas.append(copy)
                continue
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
            for _ in range(pp):  # under CP, the replica's first TP degree throughout
                allowed = tps
                if (cp > 1 or ep_across) and stages:
                    allowed = (stages[0][1],)
                elif cp_fold and cp > 1 and replicas:  # EP folding CP: one for every replica
                    allowed = (replicas[0].stages[0].tp,)
                where = place(tps=allowed)
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

    state = rng.getstate()
    replicas = draw_replicas(v)
    if not replicas and cp > 1:  # no room for a group of CP ranks: the plan without CP
        cp = 1
        rng.setstate(state)
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
    ep, imbalance = _draw_experts(seed, model, replicas, ep_across)
    if cp_fold:
        ep = _fold_cp(seed, model, replicas, cp, ep, ep_across)
    overlap = overlap and ep == 1  # TP overlap is not modelled with expert parallelism
    flash = rng.random() < 0.7 or cp > 1  # ring attention is fused attention
    stack = Stack(sequence_parallel=sequence_parallel, flash_attention=flash,
                  recompute=rng.choice(("none", "none", "selective", "full")),
                  zero_stage=zero_stage, virtual_pipeline_stages=v,
                  dp_overlap=rng.random() < 0.5,
                  dp_bucket_params=rng.choice((0, 30_000_000, 100_000_000, 10**12)),
                  precision="fp8" if fp8 else "bf16", tp_comm_overlap=overlap,
                  expert_parallel=ep, moe_imbalance=imbalance,
                  # blocking pipeline sends and FP8 parameter gathers, each from a stream
                  # of its own (the other draws stay as they were)
                  pp_p2p_overlap=random.Random(f"pp-p2p-{seed}").random() >= 0.3,
                  fp8_param_gather=(fp8 and zero_stage in (1, 3) and model not in MOE_PRESETS
                                    and random.Random(f"fp8-gather-{seed}").random() < 0.5),
                  # FP8 dispatch of FP8 plans with all-to-alls, from a stream of its own
                  moe_fp8_dispatch=(fp8 and ep > 1
                                    and random.Random(f"fp8-dispatch-{seed}").random() < 0.5),
                  software=_random_software(seed))
    schedule = "1f1b" if v > 1 else rng.choice(SCHEDULE.known())
    return build_plan(
        f"random-{seed}", model, nodes, replicas,
        schedule=schedule, resharding=rng.choice(RESHARDING.known()),
        fabric=rng.choice(FABRIC.known()), oversubscription=rng.choice((1.0, 1.0, 2.0, 4.0)),
        stack=stack, seq_length=seq_length, num_layers=num_layers, context_parallel=cp,
    )


def _across(ep_across: bool, model: str, zero_stage: int) -> tuple[bool, int]:
    """Whether a plan asked for EP across replicas gets it (a model with experts), and its
    ZeRO stage (1 for 3: FSDP is not modelled with EP across replicas)."""
    across = ep_across and model in MOE_PRESETS
    return across, (1 if across and zero_stage == 3 else zero_stage)


def _same_shape(first: ReplicaReq, place) -> ReplicaReq | None:
    """A replica of ``first``'s stages (layers, TP degrees) and micro-batches, each stage
    on the GPU kind ``place`` finds room for at its TP degree (None where it finds none)."""
    stages = [place(tps=(s.tp,)) for s in first.stages]
    if None in stages:
        return None
    return dataclasses.replace(first, stages=tuple(
        StageReq(k, s.tp, s.num_layers) for (k, _), s in zip(stages, first.stages, strict=True)))


def _draw_experts(seed: int, model: str, replicas,
                  across: bool = False) -> tuple[int, float]:
    """(EP, token imbalance) of a random plan, from a stream of their own: (1, 1.0) for a
    dense model; with ``across`` (replicas of one shape at one TP degree), TP times a
    divisor of the replicas above 1 where one keeps EP a divisor of the experts."""
    experts = MOE_PRESETS.get(model)
    if experts is None:
        return 1, 1.0
    rng = random.Random(f"experts-{seed}")
    tp = math.gcd(*(s.tp for r in replicas for s in r.stages))
    wide = [tp * r for r in range(2, len(replicas) + 1)
            if len(replicas) % r == 0 and experts % (tp * r) == 0]
    if across and wide:
        return rng.choice(wide), rng.choice((1.0, 1.0, 1.25, 2.0))
    ep = rng.choice([d for d in range(1, tp + 1) if tp % d == 0 and experts % d == 0])
    return ep, rng.choice((1.0, 1.0, 1.25, 2.0))


def _fold_cp(seed: int, model: str, replicas, cp: int, ep: int, across: bool = False) -> int:
    """Under context parallelism, at one TP degree for every stage, EP over the TP ranks of
    several CP ranks (a divisor of the CP size above 1 that keeps EP a divisor of the
    experts, from a stream of its own); with ``across`` (replicas of one shape), over the
    whole groups of several replicas where EP can (``TP x CP x r``); else ``ep``."""
    experts = MOE_PRESETS.get(model)
    tps = {s.tp for r in replicas for s in r.stages}
    if experts is None or cp == 1 or len(tps) > 1:
        return ep
    rng = random.Random(f"cp-fold-{seed}")
    tp = tps.pop()
    wide = [tp * c for c in range(2, cp + 1) if cp % c == 0 and experts % (tp * c) == 0]
    whole = [tp * cp * r for r in range(2, len(replicas) + 1)
             if len(replicas) % r == 0 and experts % (tp * cp * r) == 0]
    if across and whole:
        return rng.choice(whole)
    return rng.choice(wide) if wide else ep


def _random_software(seed: int) -> SoftwareSpec:
    """A software profile of the built-in catalog, from a stream of its own (the other
    draws stay as they were)."""
    profiles = sorted(_builtin_software().items())
    return random.Random(f"software-{seed}").choice(profiles)[1]


@functools.cache
def _builtin_software() -> dict[str, SoftwareSpec]:
    return load_catalog().software
