"""Static analysis of one deployment plan: per-group workload and memory, DP groups,
resharding and the network topology; everything the lowering to the program IR needs."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from xsweep.memo import Memo, cached
from xsweep.plan import groups as groups_mod
from xsweep.plan import reshard as reshard_mod
from xsweep.plan.buckets import bucket_params, bucket_starts
from xsweep.plan.memory import MemoryBreakdown, fits, memory_breakdown
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
    cluster_entries,
    fabric_name,
    groups_bytes,
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
    #: the groups as the program's structure sees them (``xsweep.plan.lower.structure_key``):
    #: (id, ranks, stage, replica, first layer, last layer, micro-batches) of each
    structure_groups: tuple

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
_stage_cost = cached(16384)(stage_cost)
_memory_breakdown = cached(16384)(memory_breakdown)  # the same for every GPU model
_optimizer_time_s = cached(16384)(optimizer_time_s)
_build_topology = cached(1024)(build_topology)
_iteration_model_flops = cached(1024)(iteration_model_flops)
_segment_grad_bytes = cached(16384)(segment_grad_bytes)
_reshard = cached(16384)(lambda scheme, src, dst, nbytes: tuple(
    reshard_mod.reshard(scheme, src, dst, nbytes)))
_bucket_starts = cached(16384)(bucket_starts)


# Memos of the parts of an analysis (``xsweep.memo``), by the bytes of the plan's parts,
# and by the ids of the values made from them (kept alive by the entries that use them):
# the variants of a sweep repeat the model, the training options, the cluster or its
# GPUs, and the device groups.
#: (model bytes, preset entry id, plan name without a preset) -> (preset entry, model)
_MODELS: Memo = Memo(256)
#: training bytes -> Stack, one object per value (training options that differ elsewhere,
#: such as the batch size, share it and what is kept by its id)
_STACKS: Memo = Memo(1024)
_interned = cached(256)(lambda stack: stack)
#: (cluster bytes, catalog id) -> (catalog, entries the nodes name, Topology, GPU of each
#: rank, GPU of each node)
_TOPOLOGIES: Memo = Memo(1024, 256 * 2**20, lambda key, value: 1024 * len(value[3]))
#: device-group bytes -> _Layout
_LAYOUTS: Memo = Memo(4096, 256 * 2**20, lambda key, value: 64 * len(key))
#: (layout, node GPUs, model, stack, schedule, scheme, profile) -> (what the key's ids name,
#: GroupInfos, Reshards, peak FLOP/s)
_GROUPS: Memo = Memo(4096, 256 * 2**20, lambda key, value: 1024 * len(value[5]) + 256 * sum(
    len(r.transfers) + len(r.transfers_back) for r in value[6]))
#: (layout, model, DP options) -> (layout, model, gradient bytes and buckets per DP group)
_DP: Memo = Memo(4096)


@cached(4096)
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


@dataclass(frozen=True, eq=False)
class _Layout:
    """What a plan's device groups alone determine, kept by their bytes."""

    facts: tuple[tuple, ...]  # (id, ranks, stage, replica, first, last, micro-batch size,
    # micro-batches) of each group, ordered by (replica, stage)
    stages: tuple[int, ...]  # of each group: the pipeline stages of its replica
    dp_size: tuple[int, ...]  # of each group: the replicas its ZeRO sharding spreads over
    dp_groups: tuple  # groups.DpGroup
    replicas: dict[int, tuple[int, ...]]  # replica -> group indices by stage
    #: (source, destination) group indices of each resharding: consecutive stages, and
    #: under interleaving (second entry) the last stage back to the first
    pairs: tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]
    structure: tuple  # the groups as the program structure sees them (lower.structure_key)


def _layout(plan) -> _Layout:
    dgs = sorted(plan.device_groups, key=lambda d: (d.dp_replica, d.pp_stage))
    facts = tuple((d.id, tuple(d.ranks), d.pp_stage, d.dp_replica, d.first_layer, d.last_layer,
                   d.micro_batch_size, d.num_micro_batches) for d in dgs)
    replicas: dict[int, list[int]] = {}
    for i, f in enumerate(facts):
        replicas.setdefault(f[3], []).append(i)
    dp = _dp_groups(tuple(groups_mod.GroupSpan(f[0], f[4], f[5], f[1]) for f in facts))
    replicas_over = {f[0]: 1 for f in facts}
    for g in dp:
        for gid in g.device_groups:
            replicas_over[gid] = max(replicas_over[gid], len(g.device_groups))
    plain, interleaved = [], []
    for members in replicas.values():
        pairs = list(zip(members, members[1:], strict=False))
        plain += pairs
        interleaved += pairs + ([(members[-1], members[0])] if len(members) > 2 else [])
    return _Layout(
        facts, tuple(len(replicas[f[3]]) for f in facts),
        tuple(replicas_over[f[0]] for f in facts), dp,
        {r: tuple(v) for r, v in replicas.items()}, (tuple(plain), tuple(interleaved)),
        tuple((f[0], f[1], f[2], f[3], f[4], f[5], f[7]) for f in facts))


def _topology(plan, catalog) -> tuple[Topology, list[GpuSpec], tuple[GpuSpec, ...]]:
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
    return (_build_topology(tuple(nodes), FabricHw(kind=fabric_name(plan), **kwargs)), rank_gpu,
            tuple(node.gpu for node in nodes))


def analyze(plan, catalog, *, profile=None) -> PlanAnalysis:
    """Resolve a validated plan against the catalog (and an optional measured profile)."""
    training = plan.training
    model = _model(plan, catalog)
    schedule, scheme = schedule_name(plan), resharding_name(plan)
    stack = _STACKS.get(training.SerializeToString(), lambda: _interned(training_stack(plan)))
    topology, rank_gpu, node_gpus = _hardware(plan, catalog)
    layout = _LAYOUTS.get(groups_bytes(plan), lambda: _layout(plan))
    key = (id(layout), tuple(map(id, node_gpus)), id(model), id(stack), schedule, scheme,
           id(profile))
    groups, reshards, peak = _GROUPS.get(key, lambda: (
        layout, node_gpus, model, stack, profile,
        *_groups(layout, rank_gpu, model, stack, schedule, scheme, profile)))[5:]
    key = (id(layout), id(model), stack.dp_overlap, stack.zero_stage, stack.dp_bucket_params)
    segment_bytes, buckets = _DP.get(key, lambda: (layout, model, *_dp(layout, model, stack)))[2:]
    return PlanAnalysis(
        name=plan.name, model=model, schedule=schedule, resharding=scheme, stack=stack,
        global_batch_size=int(training.global_batch_size), groups=groups,
        replicas=dict(layout.replicas), dp_groups=layout.dp_groups, dp_segment_bytes=segment_bytes,
        dp_buckets=buckets, reshards=reshards, topology=topology,
        tokens_per_iteration=float(training.global_batch_size * model.seq_length),
        model_flops_per_iteration=float(
            _iteration_model_flops(model, int(training.global_batch_size), recompute=False)),
        peak_flops_per_s=peak, total_tokens=float(training.total_tokens),
        structure_groups=layout.structure)


def _model(plan, catalog) -> ModelSpec:
    """The plan's model (:func:`xsweep.spec.plan_io.resolve_model`), kept by the model's
    bytes, its preset's entry and (without a preset, which names it) the plan's name."""
    preset = plan.model.preset
    entry = catalog.lookup("models", preset) if preset else None
    key = (plan.model.SerializeToString(), id(entry), plan.name if entry is None else None)
    return _MODELS.get(key, lambda: (entry, resolve_model(plan, catalog)))[1]


def _hardware(plan, catalog) -> tuple[Topology, list[GpuSpec], tuple[GpuSpec, ...]]:
    """The plan's topology, the GPU of every rank and of every node, kept by the cluster's
    bytes while the catalog entries its nodes name stay the same."""
    key = (plan.cluster.SerializeToString(), id(catalog))

    def make() -> tuple:
        return catalog, cluster_entries(plan.cluster, catalog), *_topology(plan, catalog)

    _, entries, *hardware = _TOPOLOGIES.get(key, make)
    if all(catalog.lookup(section, name) is entry for section, name, entry in entries):
        return tuple(hardware)
    return tuple(make()[2:])  # the catalog changed since


def _groups(layout: _Layout, rank_gpu: list[GpuSpec], model: ModelSpec, stack: Stack,
            schedule: str, scheme: str, profile) -> tuple[tuple, tuple, float]:
    """Every group resolved, the reshardings between stages, and the peak FLOP/s."""
    infos = []
    # replicas repeat their stages: figures by (GPU, TP, layers, ...) once per plan, so the
    # memos above (whose keys hash the model and GPU) are asked once per distinct stage
    figures: dict[tuple, tuple] = {}
    for (gid, ranks, stage, replica, first, last, size, m), p, dp_size in zip(
            layout.facts, layout.stages, layout.dp_size, strict=True):
        gpu = rank_gpu[ranks[0]]
        tp = len(ranks)
        key = (id(gpu), tp, size, first, last, stage, p, m, dp_size)
        if key not in figures:
            mem = _memory_breakdown(model, tp, size, first, last, stage, p, schedule, m,
                                    stack, dp_size)
            figures[key] = (
                _stage_cost(model, gpu, tp, size, first, last, stack=stack, profile=profile),
                mem, fits(mem, gpu),
                _optimizer_time_s(model, gpu, tp, first, last, dp_size, stack.zero_stage))
        cost, mem, fit, optimizer_s = figures[key]
        infos.append(GroupInfo(
            id=gid, ranks=ranks, stage=stage, replica=replica, first_layer=first,
            last_layer=last, micro_batch_size=size, num_micro_batches=m, gpu=gpu, cost=cost,
            memory=mem, fits=fit, optimizer_time_s=optimizer_s))
    reshards = []
    for a, b in layout.pairs[stack.virtual_pipeline_stages > 1]:
        src, dst = infos[a], infos[b]
        nbytes = src.cost.activation_bytes
        forward = _reshard(scheme, src.ranks, dst.ranks, nbytes)
        back = _reshard(scheme, dst.ranks, src.ranks, dst.cost.activation_bytes)
        reshards.append(Reshard(src.id, dst.id, scheme, nbytes, forward, back,
                                tp_equal=src.tp == dst.tp))
    return (tuple(infos), tuple(reshards),
            float(sum(g.gpu.peak_flops * g.tp for g in infos)))


def _dp(layout: _Layout, model: ModelSpec, stack: Stack) -> tuple[tuple, tuple]:
    """The gradient bytes and the buckets of every DP group."""
    return (tuple(float(_segment_grad_bytes(model, g.first_layer, g.last_layer,
                                            model.num_layers)) for g in layout.dp_groups),
            tuple(_dp_buckets(model, stack, g) for g in layout.dp_groups))
