"""Static analysis of one deployment plan: per-group workload and memory, DP groups,
resharding and the network topology; everything the lowering to the program IR needs."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from xsweep.plan import groups as groups_mod
from xsweep.plan import reshard as reshard_mod
from xsweep.plan.buckets import bucket_params, bucket_starts
from xsweep.plan.memory import MemoryBreakdown, fits, memory_per_gpu
from xsweep.plan.stack import DEFAULT_STACK, Stack
from xsweep.plan.topology import FabricHw, NodeHw, Topology, build_topology
from xsweep.plan.workload import (
    StageCost,
    iteration_model_flops,
    optimizer_time_s,
    segment_grad_bytes,
    stage_cost,
)
from xsweep.spec.catalog import GpuSpec, ModelSpec
from xsweep.spec.plan_io import (
    fabric_name,
    recompute_name,
    resharding_name,
    resolve_model,
    schedule_name,
)


@dataclass(frozen=True)
class GroupInfo:
    """One device group (a TP group running one stage of one replica), resolved."""

    id: int
    ranks: tuple[int, ...]
    stage: int
    replica: int
    first_layer: int
    last_layer: int
    micro_batch_size: int
    num_micro_batches: int
    gpu: GpuSpec
    cost: StageCost
    memory: MemoryBreakdown
    fits: bool
    optimizer_time_s: float

    @property
    def tp(self) -> int:
        return len(self.ranks)


@dataclass(frozen=True)
class Reshard:
    """The transfers between two consecutive stages of one replica, computed once per plan:
    activations forward, their gradients back."""

    from_group: int
    to_group: int
    scheme: str  # "lcm" | "hetauto" | "alpacomm"; equal TP degrees make it plain P2P
    bytes: float
    transfers: tuple  # reshard.Transfer, forward direction (from_group -> to_group)
    transfers_back: tuple  # reshard.Transfer, gradients (to_group -> from_group)
    tp_equal: bool  # equal TP degrees: a plain per-rank pipeline transfer, not a resharding


@dataclass(frozen=True)
class PlanAnalysis:
    name: str
    model: ModelSpec
    schedule: str
    resharding: str
    stack: Stack
    global_batch_size: int
    groups: tuple[GroupInfo, ...]  # ordered by (replica, stage); index = stream id
    replicas: dict[int, tuple[int, ...]]  # replica -> group indices by stage
    dp_groups: tuple  # groups.DpGroup, one per sweep-line segment shared by >= 2 groups
    dp_segment_bytes: tuple[float, ...]  # unsharded bf16 gradient bytes per DP group
    #: per DP group, the first layers of its gradient buckets, ascending (one bucket, the
    #: segment, unless gradient reduction overlaps the backward pass)
    dp_buckets: tuple[tuple[int, ...], ...]
    reshards: tuple[Reshard, ...]
    topology: Topology
    tokens_per_iteration: float
    model_flops_per_iteration: float
    peak_flops_per_s: float
    total_tokens: float

    @property
    def fsdp(self) -> bool:
        """Parameters are gathered layer by layer (ZeRO-3 with data parallelism to shard over)."""
        return self.stack.zero_stage == 3 and bool(self.dp_groups)

    def buckets(self, d: int) -> list[tuple[int, int]]:
        """(first, last) layers of each gradient bucket of DP group ``d``, ascending."""
        starts = self.dp_buckets[d]
        ends = [x - 1 for x in starts[1:]] + [self.dp_groups[d].last_layer]
        return list(zip(starts, ends, strict=True))

    def grad_bytes(self, first: int, last: int) -> float:
        """Unsharded bf16 gradient bytes (equally, parameter bytes) of layers first..last."""
        return float(_segment_grad_bytes(self.model, first, last, self.model.num_layers))

    def index_of(self, group_id: int) -> int:
        return next(i for i, g in enumerate(self.groups) if g.id == group_id)

    @functools.cached_property
    def _transfer_map(self) -> dict[tuple[int, int], tuple]:
        index = {g.id: i for i, g in enumerate(self.groups)}
        out = {}
        for r in self.reshards:
            src, dst = index[r.from_group], index[r.to_group]
            out[src, dst], out[dst, src] = r.transfers, r.transfers_back
        return out

    def transfers(self, src: int, dst: int) -> tuple:
        """The transfers from group ``src`` to the adjacent stage's group ``dst`` (indices
        into ``groups``): activations forward, gradients backward."""
        return self._transfer_map[src, dst]


# Memos of the pure functions an analysis calls: variants of a sweep repeat their
# arguments (the same GPU, TP degree and layers; the same cluster), and each result is
# an immutable value. Bounded, so a long search does not grow them without end.
_stage_cost = functools.lru_cache(maxsize=16384)(stage_cost)
_memory_per_gpu = functools.lru_cache(maxsize=16384)(memory_per_gpu)
_optimizer_time_s = functools.lru_cache(maxsize=16384)(optimizer_time_s)
_build_topology = functools.lru_cache(maxsize=1024)(build_topology)
_iteration_model_flops = functools.lru_cache(maxsize=1024)(iteration_model_flops)
_segment_grad_bytes = functools.lru_cache(maxsize=16384)(segment_grad_bytes)
_reshard = functools.lru_cache(maxsize=16384)(reshard_mod.reshard)
_bucket_starts = functools.lru_cache(maxsize=16384)(bucket_starts)


@functools.lru_cache(maxsize=4096)
def _dp_groups(spans: tuple[groups_mod.GroupSpan, ...]) -> tuple:
    return tuple(groups_mod.dp_groups(spans))


def _dp_buckets(model: ModelSpec, stack: Stack, g: groups_mod.DpGroup) -> tuple[int, ...]:
    """The first layers of a DP group's gradient buckets (:mod:`xsweep.plan.buckets`); FSDP
    reduces layer by layer instead, and without overlap the segment is one bucket."""
    if not stack.dp_overlap or stack.zero_stage == 3:
        return (g.first_layer,)
    size = bucket_params(stack.dp_bucket_params, len(g.device_groups))
    return _bucket_starts(model, g.first_layer, g.last_layer, min(g.tps), size)


def training_stack(plan) -> Stack:
    """The plan's training-stack options, unset ones at Megatron-LM's recipe defaults.

    The plan must be validated (:func:`xsweep.spec.validate.validate_plan`).
    """
    t = plan.training
    return Stack(
        sequence_parallel=t.sequence_parallel if t.HasField("sequence_parallel")
        else DEFAULT_STACK.sequence_parallel,
        flash_attention=t.flash_attention if t.HasField("flash_attention")
        else DEFAULT_STACK.flash_attention,
        recompute=recompute_name(plan),
        zero_stage=int(t.zero_stage),
        virtual_pipeline_stages=max(1, int(t.virtual_pipeline_stages)),
        dp_overlap=bool(t.dp_overlap),
        dp_bucket_params=int(t.dp_bucket_params),
    )


def _topology(plan, catalog) -> tuple[Topology, list[GpuSpec]]:
    nodes, rank_gpu = [], []
    for node in plan.cluster.nodes:
        gpu = catalog.gpu(node.gpu)
        nic = catalog.nic(node.nic or gpu.default_nic)
        up = node.scale_up
        nodes.append(NodeHw(
            gpu=gpu, nic=nic, num_gpus=node.num_gpus,
            scale_up_gbps=up.bandwidth_gbps or gpu.scale_up_gbps,
            scale_up_latency_ns=up.latency_ns or gpu.scale_up_latency_ns,
            scale_up_link=catalog.link(up.link or gpu.scale_up_link),
            pcie_link=catalog.link(gpu.pcie_link),
            cluster=node.cluster,
        ))
        rank_gpu += [gpu] * node.num_gpus
    fab = plan.cluster.fabric
    kwargs = {}
    if fab.oversubscription:
        kwargs["oversubscription"] = fab.oversubscription
    if fab.nodes_per_rack:
        kwargs["nodes_per_rack"] = fab.nodes_per_rack
    if fab.switch_latency_ns:
        kwargs["switch_latency_ns"] = fab.switch_latency_ns
    if fab.HasField("inter_cluster"):
        kwargs["inter_cluster_gbps"] = fab.inter_cluster.bandwidth_gbps
        kwargs["inter_cluster_latency_ns"] = fab.inter_cluster.latency_ns
    return _build_topology(tuple(nodes), FabricHw(kind=fabric_name(plan), **kwargs)), rank_gpu


def analyze(plan, catalog, *, profile=None) -> PlanAnalysis:
    """Resolve a validated plan against the catalog (and an optional measured profile)."""
    model = resolve_model(plan, catalog)
    schedule, scheme = schedule_name(plan), resharding_name(plan)
    training = plan.training
    stack = training_stack(plan)
    topology, rank_gpu = _topology(plan, catalog)

    dgs = sorted(plan.device_groups, key=lambda d: (d.dp_replica, d.pp_stage))
    stages_of = {}
    for d in dgs:
        stages_of.setdefault(d.dp_replica, []).append(d)
    spans = tuple(groups_mod.GroupSpan(d.id, d.first_layer, d.last_layer, tuple(d.ranks))
                  for d in dgs)
    dp = _dp_groups(spans)
    replicas_over = {d.id: 1 for d in dgs}
    for g in dp:
        for gid in g.device_groups:
            replicas_over[gid] = max(replicas_over[gid], len(g.device_groups))

    infos = []
    # replicas repeat their stages: figures by (GPU, TP, layers, ...) once per plan, so the
    # memos above (whose keys hash the model and GPU) are asked once per distinct stage
    figures: dict[tuple, tuple] = {}
    for d in dgs:
        gpu = rank_gpu[d.ranks[0]]
        tp = len(d.ranks)
        p = len(stages_of[d.dp_replica])
        dp_size = replicas_over[d.id]
        key = (id(gpu), tp, d.micro_batch_size, d.first_layer, d.last_layer, d.pp_stage, p,
               d.num_micro_batches, dp_size)
        if key not in figures:
            mem = _memory_per_gpu(
                model, gpu, tp, d.micro_batch_size, d.first_layer, d.last_layer,
                stage_index=d.pp_stage, num_stages=p, schedule=schedule,
                num_micro_batches=d.num_micro_batches, stack=stack, dp=dp_size)
            figures[key] = (
                _stage_cost(model, gpu, tp, d.micro_batch_size, d.first_layer, d.last_layer,
                            stack=stack, profile=profile),
                mem, fits(mem, gpu),
                _optimizer_time_s(model, gpu, tp, d.first_layer, d.last_layer, dp_size,
                                  stack.zero_stage))
        cost, mem, fit, optimizer_s = figures[key]
        infos.append(GroupInfo(
            id=d.id, ranks=tuple(d.ranks), stage=d.pp_stage, replica=d.dp_replica,
            first_layer=d.first_layer, last_layer=d.last_layer,
            micro_batch_size=d.micro_batch_size, num_micro_batches=d.num_micro_batches,
            gpu=gpu, cost=cost, memory=mem, fits=fit, optimizer_time_s=optimizer_s))
    replicas = {}
    for i, g in enumerate(infos):
        replicas.setdefault(g.replica, []).append(i)

    reshards = []
    for members in replicas.values():
        pairs = list(zip(members, members[1:], strict=False))
        if stack.virtual_pipeline_stages > 1 and len(members) > 2:
            pairs.append((members[-1], members[0]))  # interleaving: chunk c to chunk c + 1
        for a, b in pairs:
            src, dst = infos[a], infos[b]
            nbytes = src.cost.activation_bytes
            forward = _reshard(scheme, src.ranks, dst.ranks, nbytes)
            back = _reshard(scheme, dst.ranks, src.ranks, dst.cost.activation_bytes)
            reshards.append(Reshard(src.id, dst.id, scheme, nbytes, tuple(forward), tuple(back),
                                    tp_equal=src.tp == dst.tp))

    seq = model.seq_length
    return PlanAnalysis(
        name=plan.name, model=model, schedule=schedule, resharding=scheme, stack=stack,
        global_batch_size=int(training.global_batch_size),
        groups=tuple(infos), replicas={r: tuple(v) for r, v in replicas.items()},
        dp_groups=tuple(dp),
        dp_segment_bytes=tuple(
            float(_segment_grad_bytes(model, g.first_layer, g.last_layer, model.num_layers))
            for g in dp
        ),
        dp_buckets=tuple(_dp_buckets(model, stack, g) for g in dp),
        reshards=tuple(reshards), topology=topology,
        tokens_per_iteration=float(training.global_batch_size * seq),
        model_flops_per_iteration=float(
            _iteration_model_flops(model, int(training.global_batch_size), recompute=False)
        ),
        peak_flops_per_s=float(sum(g.gpu.peak_flops * g.tp for g in infos)),
        total_tokens=float(training.total_tokens),
    )

