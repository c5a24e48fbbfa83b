"""Static analysis of one deployment plan: per-group workload and memory, DP groups,
resharding and the network topology; everything the lowering to the program IR needs.

It reads a :class:`~xsweep.spec.valid_plan.ValidPlan`: the model, the training options,
each node's hardware and the device groups as validation resolved them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from xsweep.memo import Memo, cached
from xsweep.plan import groups as groups_mod
from xsweep.plan import reshard as reshard_mod
from xsweep.plan.buckets import bucket_params, bucket_starts
from xsweep.plan.memory import MemoryBreakdown, fits, memory_breakdown
from xsweep.plan.stack import Stack
from xsweep.plan.topology import Topology, build_topology
from xsweep.plan.workload import (
    BF16_BYTES,
    StageCost,
    cached_stage_cost,
    deepep_factors,
    expert_replicas,
    iteration_model_flops,
    optimizer_time_s,
    rank_expert_params,
    segment_fp8_gather_bytes,
    segment_grad_bytes,
)
from xsweep.spec.catalog import GpuSpec, ModelSpec
from xsweep.spec.plan_io import DeploymentPlan
from xsweep.spec.valid_plan import ClusterHw, Group, ValidPlan
from xsweep.spec.validate import typed_plan


@dataclass(frozen=True)
class GroupInfo:
    """One device group (a TP group, times its CP ranks, running one stage of one replica),
    resolved. ``ranks`` are TP fastest: rank ``q * tp + i`` is TP rank ``i`` of CP rank
    ``q``."""

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
    cp: int = 1  # context-parallel ranks

    @property
    def tp(self) -> int:
        return len(self.ranks) // self.cp


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
    #: per DP group, the first layers of the buckets of its expert gradients where they
    #: are reduced apart (EP groups spanning replicas, :meth:`expert_rings`, with the
    #: reduction overlapped), ascending; else empty: the experts ride in ``dp_buckets``
    expert_buckets: tuple[tuple[int, ...], ...] = ()

    def memory_verdict(self) -> str:
        """``""`` when every GPU holds what its device group needs; else one line naming the
        device group that needs the most against its GPU's memory, and how many do not fit."""
        over = [g for g in self.groups if not g.fits]
        if not over:
            return ""
        worst = max(over, key=lambda g: g.memory.total_gib / g.gpu.hbm_gib)
        others = f"; {len(over)} of {len(self.groups)} device groups do not fit" \
            if len(over) > 1 else ""
        return (f"does not fit in memory: device group {worst.id} ({worst.gpu.name}, TP "
                f"{worst.tp}) needs {worst.memory.total_gib:.2f} GiB per GPU, more than the "
                f"{worst.gpu.hbm_gib:.2f} GiB of its GPUs{others}")

    @property
    def fsdp(self) -> bool:
        """Parameters are gathered layer by layer (ZeRO-3 with data parallelism to shard over)."""
        return self.stack.zero_stage == 3 and bool(self.dp_groups)

    def buckets(self, d: int, experts: bool = False) -> list[tuple[int, int]]:
        """(first, last) layers of each gradient bucket of DP group ``d``, ascending; with
        ``experts``, of its expert buckets (none unless :attr:`expert_buckets` has them)."""
        starts = (self.expert_buckets[d] if self.expert_buckets else ()) if experts \
            else self.dp_buckets[d]
        ends = [x - 1 for x in starts[1:]] + [self.dp_groups[d].last_layer]
        return list(zip(starts, ends, strict=True)) if starts else []

    def grad_bytes(self, first: int, last: int, fold: int = 1) -> float:
        """Unsharded bf16 gradient bytes (equally, parameter bytes) of layers first..last;
        with EP over ``fold`` replicas, the routed experts' are ``1 / fold`` of them
        (:func:`xsweep.plan.workload.segment_grad_bytes`)."""
        return float(_segment_grad_bytes(self.model, first, last, self.model.num_layers, fold))

    def expert_fold(self, d: int) -> int:
        """Replicas (under context parallelism, CP ranks) an EP group spans in DP group ``d``
        (1 unless EP is above its TP: the validation gives every member of such a group
        the same TP degree)."""
        return expert_replicas(min(self.dp_groups[d].tps), self.stack.expert_parallel)

    def expert_grad_bytes(self, first: int, last: int, fold: int) -> float:
        """The routed experts' part of :meth:`grad_bytes` with EP over ``fold`` replicas
        (``fold`` above 1): ``experts / fold`` whole experts per MoE layer, so that a rank
        of TP ``t`` holds ``1 / t`` of them, its ``experts / EP``."""
        return float(BF16_BYTES * _rank_expert_params(self.model, 1, first, last, fold))

    def dp_bytes(self, d: int, first: int, last: int) -> tuple[float, float]:
        """(dense, expert) unsharded gradient bytes of layers first..last in DP group
        ``d``: where its EP groups span replicas, the routed experts' part (reduced over the
        replicas that hold the same experts, :meth:`expert_rings`) apart from the rest
        (reduced over all ``d`` replicas); else all of them dense and no expert part."""
        fold = self.expert_fold(d)
        total = self.grad_bytes(first, last, fold)
        if fold == 1:
            return total, 0.0
        experts = self.expert_grad_bytes(first, last, fold)
        return total - experts, experts

    def expert_rings(self, d: int) -> tuple[tuple[int, ...], ...]:
        """The rings of DP group ``d``'s expert gradients (Megatron-Core's expert
        data-parallel groups) where its EP groups span ``r`` = :meth:`expert_fold`
        replicas and the ``n`` replicas of its stage hold each expert ``n / r`` times: per
        LCM chunk, then per place ``q`` inside an EP group, the chunk's ranks of the
        replicas at that place (the stage's ``q``-th, ``(q + r)``-th, ... in replica
        order). Under context parallelism EP groups span ``r`` CP ranks of a group instead
        where ``r`` divides the CP size: per chunk ring, per place ``q``, that ring's ranks
        of the CP ranks ``q, q + r, ...`` of every member; where ``r`` is ``cp`` times the
        replicas an EP group spans, per chunk ring, per place among those replicas and per
        CP rank, the ring's ranks of that CP rank of the replicas at that place. Empty
        where ``r`` is 1 or each expert is held once."""
        fold = self.expert_fold(d)
        dpg = self.dp_groups[d]
        if fold == 1 or len(dpg.rings[0].ranks) // fold < 2:
            return ()
        cp = self.groups[self.index_of(dpg.device_groups[0])].cp
        if cp > 1 and cp % fold == 0:  # EP over CP ranks: a ring's ranks go member by
            # member, CP rank by CP rank
            return tuple(ring.ranks[q::fold] for ring in dpg.rings for q in range(fold))
        place = {}  # group id -> its place among its stage's groups, in replica order
        for dg in dpg.device_groups:
            g = self.groups[self.index_of(dg)]
            stage = [rep[g.stage] for rep in self.replicas.values() if len(rep) > g.stage]
            place[dg] = stage.index(self.index_of(dg))
        order = sorted(range(len(dpg.device_groups)), key=lambda i: place[dpg.device_groups[i]])
        r = fold // cp  # replicas an EP group spans (EP = TP x CP x r under CP)
        return tuple(tuple(ring.ranks[i * cp + c] for i in order
                           if place[dpg.device_groups[i]] % r == q)
                     for ring in dpg.rings for q in range(r) for c in range(cp))

    @functools.cached_property
    def ep_peers(self) -> tuple[tuple[int, ...], ...]:
        """Per group (index into ``groups``), its EP group's groups: itself, then the
        groups of the other replicas of its EP group in the order of their shift from it
        (wrapping within the EP group). With EP above a stage's TP degree, ``EP = TP x r``,
        the stage's groups (one per replica, in replica order) form EP groups of ``r``
        consecutive replicas (under context parallelism, with EP above a group's ``TP x
        CP`` ranks, ``EP = TP x CP x r``); else (and under context parallelism where EP
        groups above TP fold the group's CP ranks) a group is its own EP group."""
        out = []
        for gi, g in enumerate(self.groups):
            # replicas an EP group spans: under context parallelism only where it spans more
            # than a group's TP x CP ranks (up to them it folds the group's own CP ranks)
            fold = max(self.stack.expert_parallel // len(g.ranks), 1)
            stage = [rep[g.stage] for rep in self.replicas.values() if len(rep) > g.stage]
            p = stage.index(gi)
            base = p - p % fold
            out.append(tuple(stage[base + (p + k) % fold] for k in range(fold)))
        return tuple(out)

    def ep_ranks(self, gi: int) -> tuple[int, ...]:
        """The ranks of group ``gi``'s EP group: its own, then its peers' (:attr:`ep_peers`)."""
        return tuple(r for p in self.ep_peers[gi] for r in self.groups[p].ranks)

    @functools.cached_property
    def ep_places(self) -> dict[int, int]:
        """Where EP groups span replicas on several nodes, each of their ranks' place among
        its EP group's ranks on its node, by rank: under DeepEP's dispatch a rank's
        all-to-all flows to other nodes go only to the ranks of its place there (the
        validation spreads such groups evenly over their nodes). An EP group inside a
        group's TP ranks stays on one node."""
        node = self.topology.rank_nodes()
        places: dict[int, int] = {}
        for gi in range(len(self.groups)):
            if len(self.ep_peers[gi]) == 1:
                continue
            ranks = sorted(self.ep_ranks(gi))
            if len({int(node[r]) for r in ranks}) > 1:
                seen: dict[int, int] = {}
                for r in ranks:
                    places[r] = seen.get(int(node[r]), 0)
                    seen[int(node[r])] = places[r] + 1
        return places

    def ep_dispatch(self, gi: int) -> tuple[float, float]:
        """Group ``gi``'s all-to-all bytes to a rank on its node and to one on another
        node, as multiples of the flat all-to-all's pair bytes: DeepEP's
        (:func:`~xsweep.plan.workload.deepep_factors`) under ``moe_dispatcher`` deepep, else
        (1, 1)."""
        if self.stack.moe_dispatcher != "deepep" or len(self.ep_peers[gi]) == 1:
            return 1.0, 1.0
        ranks = self.ep_ranks(gi)
        node = self.topology.rank_nodes()
        return deepep_factors(self.model, len(ranks), len({int(node[r]) for r in ranks}))

    def fp8_gather_bytes(self, first: int, last: int) -> float:
        """Unsharded bytes of layers first..last as an FP8 parameter all-gather moves them
        (``fp8_param_gather``): GEMM weights at 1 byte, the other parameters at 2."""
        return float(_segment_fp8_gather_bytes(self.model, first, last, self.model.num_layers))

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
_memory_breakdown = cached(16384)(memory_breakdown)  # the same for every GPU model
_optimizer_time_s = cached(16384)(optimizer_time_s)
_build_topology = cached(1024)(build_topology)
_iteration_model_flops = cached(1024)(iteration_model_flops)
_segment_grad_bytes = cached(16384)(segment_grad_bytes)
_segment_fp8_gather_bytes = cached(16384)(segment_fp8_gather_bytes)
_rank_expert_params = cached(16384)(rank_expert_params)
_reshard = cached(16384)(lambda scheme, src, dst, nbytes: tuple(
    reshard_mod.reshard(scheme, src, dst, nbytes)))
_bucket_starts = cached(16384)(bucket_starts)


# Memos of the parts of an analysis (``xsweep.memo``), by the ids of the parts of valid
# plans they are made from (which validation shares between plans with equal parts) and
# of the values made from them, each kept alive by the entries that use it: the variants
# of a sweep repeat the model, the training options, the cluster or its GPUs, and the
# device groups.
#: ClusterHw id -> (ClusterHw, Topology, GPU of each node, what names the GPU of each rank)
_TOPOLOGIES: Memo = Memo(1024, 256 * 2**20, lambda key, value: 1024 * len(value[0].rank_gpus))
#: device groups id -> (device groups, _Layout)
_LAYOUTS: Memo = Memo(4096, 256 * 2**20, lambda key, value: 2048 * len(value[0]))
#: (layout, GPU of each rank, model, stack, schedule, scheme, profile) -> (what the key's
#: ids name, GroupInfos, Reshards, peak FLOP/s)
_GROUPS: Memo = Memo(4096, 256 * 2**20, lambda key, value: 1024 * len(value[5]) + 256 * sum(
    len(r.transfers) + len(r.transfers_back) for r in value[6]))
#: (layout, model, DP options) -> (layout, model, gradient bytes and buckets per DP group)
_DP: Memo = Memo(4096)


@cached(4096)
def _dp_groups(spans: tuple[groups_mod.GroupSpan, ...]) -> tuple:
    return tuple(groups_mod.dp_groups(spans))


def _dp_buckets(model: ModelSpec, stack: Stack, g: groups_mod.DpGroup,
                experts: bool = False) -> tuple[int, ...]:
    """The first layers of a DP group's gradient buckets (:mod:`xsweep.plan.buckets`); FSDP
    reduces layer by layer instead, and without overlap the segment is one bucket. Where
    EP groups span replicas the dense buckets count a rank's parameters but its routed
    experts, and with ``experts``, the buckets of those (empty where none are reduced
    apart: no overlap, or each expert held by one replica)."""
    fold = expert_replicas(min(g.tps), stack.expert_parallel)
    overlap = stack.dp_overlap and stack.zero_stage != 3
    if experts and not (overlap and fold > 1 and len(g.rings[0].ranks) // fold >= 2):
        return ()
    if not overlap:
        return (g.first_layer,)
    size = bucket_params(stack.dp_bucket_params, len(g.rings[0].ranks))  # DP x CP ranks
    part = ("experts" if experts else "dense") if fold > 1 else "all"
    return _bucket_starts(model, g.first_layer, g.last_layer, min(g.tps), size,
                          stack.expert_parallel, part)


@dataclass(frozen=True, eq=False)
class _Layout:
    """What a plan's device groups alone determine, kept by the groups' id."""

    facts: tuple[tuple, ...]  # (id, ranks, stage, replica, first, last, micro-batch size,
    # micro-batches, cp) of each group, ordered by (replica, stage)
    stages: tuple[int, ...]  # of each group: the pipeline stages of its replica
    dp_size: tuple[int, ...]  # of each group: the replicas (times its CP ranks) its ZeRO
    # sharding spreads over
    dp_groups: tuple  # groups.DpGroup
    replicas: dict[int, tuple[int, ...]]  # replica -> group indices by stage
    #: (source, destination) group indices of each resharding: consecutive stages, and
    #: under interleaving (second entry) the last stage back to the first
    pairs: tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]
    structure: tuple  # the groups as the program structure sees them (lower.structure_key)


def _layout(groups: tuple[Group, ...]) -> _Layout:
    facts = tuple(groups)
    replicas: dict[int, list[int]] = {}
    for i, f in enumerate(facts):
        replicas.setdefault(f[3], []).append(i)
    dp = _dp_groups(tuple(groups_mod.GroupSpan(f[0], f[4], f[5], f[1], f[8]) for f in facts))
    replicas_over = {f[0]: f[8] for f in facts}  # weights are replicated over CP ranks
    for g in dp:
        for gid in g.device_groups:
            replicas_over[gid] = max(replicas_over[gid], len(g.rings[0].ranks))
    plain, interleaved = [], []
    for members in replicas.values():
        pairs = list(zip(members, members[1:], strict=False))
        plain += pairs
        interleaved += pairs + ([(members[-1], members[0])] if len(members) > 2 else [])
    return _Layout(
        facts, tuple(len(replicas[f[3]]) for f in facts),
        tuple(replicas_over[f[0]] for f in facts), dp,
        {r: tuple(v) for r, v in replicas.items()}, (tuple(plain), tuple(interleaved)),
        tuple((f[0], f[1], f[2], f[3], f[4], f[5], f[7]) + ((f[8],) if f[8] > 1 else ())
              for f in facts))


def analyze(plan: ValidPlan | DeploymentPlan, catalog, *, profile=None) -> PlanAnalysis:
    """Analyse a valid plan (and an optional measured profile).

    ``plan`` is what :func:`xsweep.spec.validate.validate_plan` returned against
    ``catalog``; a message (or a plan validated against another catalog) is typed against
    ``catalog`` first (:func:`xsweep.spec.validate.typed_plan`: one lookup for a plan
    validated before, else its validation).
    """
    if not isinstance(plan, ValidPlan) or plan.catalog is not catalog:
        plan = typed_plan(plan.message if isinstance(plan, ValidPlan) else plan, catalog)
    model, training = plan.model, plan.training
    stack, schedule, scheme = training.stack, training.schedule, training.resharding
    topology, node_gpus, rank_gpus = _TOPOLOGIES.get(id(plan.cluster),
                                                     lambda: _hardware(plan.cluster))[1:]
    layout = _LAYOUTS.get(id(plan.groups), lambda: (plan.groups, _layout(plan.groups)))[1]
    key = (id(layout), rank_gpus, id(model), id(stack), schedule, scheme, id(profile))
    groups, reshards, peak = _GROUPS.get(key, lambda: (
        layout, node_gpus, model, stack, profile,
        *_groups(layout, plan.cluster, model, stack, schedule, scheme, profile)))[5:]
    key = (id(layout), id(model), stack.dp_overlap, stack.zero_stage, stack.dp_bucket_params,
           stack.expert_parallel)
    segment_bytes, buckets, expert_buckets = _DP.get(key, lambda: (
        layout, model, *_dp(layout, model, stack)))[2:]
    batch = training.global_batch_size
    return PlanAnalysis(
        name=plan.name, model=model, schedule=schedule, resharding=scheme, stack=stack,
        global_batch_size=batch, groups=groups,
        replicas=dict(layout.replicas), dp_groups=layout.dp_groups, dp_segment_bytes=segment_bytes,
        dp_buckets=buckets, reshards=reshards, topology=topology,
        tokens_per_iteration=float(batch * model.seq_length),
        model_flops_per_iteration=float(_iteration_model_flops(model, batch, recompute=False)),
        peak_flops_per_s=peak, total_tokens=training.total_tokens,
        structure_groups=layout.structure, expert_buckets=expert_buckets)


def _hardware(cluster: ClusterHw) -> tuple:
    """The cluster, its topology, the GPU of each node, and the key of the GPU of each
    rank: the ids of the nodes' GPUs and the GPUs of each node (the groups' figures depend
    on the GPU their ranks sit on, not on the NICs or the fabric)."""
    node_gpus = tuple(node.gpu for node in cluster.nodes)
    return (cluster, _build_topology(cluster.nodes, cluster.fabric), node_gpus,
            (tuple(map(id, node_gpus)), cluster.gpus_per_node))


def _groups(layout: _Layout, cluster: ClusterHw, model: ModelSpec, stack: Stack,
            schedule: str, scheme: str, profile) -> tuple[tuple, tuple, float]:
    """Every group resolved, the reshardings between stages, and the peak FLOP/s."""
    infos = []
    # replicas repeat their stages: figures by (GPU, TP, layers, ...) once per plan, so the
    # memos above (whose keys hash the model and GPU) are asked once per distinct stage
    figures: dict[tuple, tuple] = {}
    rank_gpu = cluster.rank_gpus
    for (gid, ranks, stage, replica, first, last, size, m, cp), p, dp_size in zip(
            layout.facts, layout.stages, layout.dp_size, strict=True):
        gpu = rank_gpu[ranks[0]]
        tp = len(ranks) // cp
        key = (id(gpu), tp, size, first, last, stage, p, m, dp_size, cp)
        if key not in figures:
            mem = _memory_breakdown(model, tp, size, first, last, stage, p, schedule, m,
                                    stack, dp_size, cp)
            figures[key] = (
                cached_stage_cost(model, gpu, tp, size, first, last, stack, profile, cp),
                mem, fits(mem, gpu),
                _optimizer_time_s(model, gpu, tp, first, last, dp_size, stack.zero_stage,
                                  stack.precision, stack.expert_parallel))
        cost, mem, fit, optimizer_s = figures[key]
        infos.append(GroupInfo(
            id=gid, ranks=ranks, stage=stage, replica=replica, first_layer=first,
            last_layer=last, micro_batch_size=size, num_micro_batches=m, gpu=gpu, cost=cost,
            memory=mem, fits=fit, optimizer_time_s=optimizer_s, cp=cp))
    reshards = []
    for a, b in layout.pairs[stack.virtual_pipeline_stages > 1]:
        src, dst = infos[a], infos[b]
        nbytes = src.cost.activation_bytes
        forward = _reshard(scheme, src.ranks, dst.ranks, nbytes)
        back = _reshard(scheme, dst.ranks, src.ranks, dst.cost.activation_bytes)
        reshards.append(Reshard(src.id, dst.id, scheme, nbytes, forward, back,
                                tp_equal=src.tp == dst.tp))
    return (tuple(infos), tuple(reshards),
            float(sum(g.gpu.peak_flops * len(g.ranks) for g in infos)))


def _dp(layout: _Layout, model: ModelSpec, stack: Stack) -> tuple[tuple, tuple, tuple]:
    """The gradient bytes, the buckets and the expert buckets of every DP group."""
    return (tuple(float(_segment_grad_bytes(
        model, g.first_layer, g.last_layer, model.num_layers,
        expert_replicas(min(g.tps), stack.expert_parallel))) for g in layout.dp_groups),
            tuple(_dp_buckets(model, stack, g) for g in layout.dp_groups),
            tuple(_dp_buckets(model, stack, g, True) for g in layout.dp_groups))
