"""The grid planner: one point of a sweep to a DeploymentPlan, or the reason it cannot be one.

Layout rules (pure and deterministic; the same point always gives the same plan):

- Each pool with nodes contributes ``nodes x gpus_per_node`` GPUs; ranks are numbered
  pool by pool in the sweep file's order, node by node. TP groups are runs of ``tp``
  consecutive ranks, so they never straddle a node (``tp`` must divide the node). Under
  context parallelism (``parallelism.cp``, one for every pool) a device group is a run of
  ``tp x cp`` ranks, TP fastest, which must divide the node too; ``cp > 1`` needs flash
  attention, a sequence in ``2 x cp`` chunks, one TP degree along each pipeline (mixed
  pipelines of pools at other TP degrees are infeasible) and no FSDP, as plan validation
  asks.
- ``pipeline_mix: separate``: each pool forms its own replicas of ``pp`` stages, all at
  the pool's TP degree. ``mixed``: every pipeline takes the same number of stages from
  each pool, the pools' stages in file order (the first pool holds the embedding).
- Within a pool, TP groups are handed out stage-major (tp, then dp, then pp, as
  Megatron-LM orders ranks): the replicas' copies of one stage sit side by side, so
  data-parallel traffic stays inside nodes where it can and pipeline traffic crosses.
- ``layer_split: proportional`` gives each stage layers in proportion to its speed (the
  inverse of one layer's forward plus backward time on its GPU at its TP degree and
  micro-batch size, from :func:`xsweep.plan.workload.stage_cost`, the simulator's own
  model); ``even`` splits them equally, the first stages taking the remainder.
- The ``global_batch_size / micro_batch_size`` micro-batches are split over the
  replicas in proportion to replica throughput (the inverse of its slowest stage's time
  per micro-batch), so every sequence of the global batch is used.
- Every training-stack option of the point is written into the plan. Interleaving
  (``virtual_pipeline_stages`` v > 1) follows Megatron-LM's rules: the 1F1B schedule, at
  least two stages, each stage's layers a multiple of v (layers are apportioned in
  units of v) and each replica's micro-batches a multiple of the stages (apportioned in
  units of pp). FSDP (``zero_stage`` 3) needs every replica to run the same stages with
  the same micro-batch count; the rules above are applied unchanged and a point whose
  replicas come out different is infeasible.

A point that cannot be built (divisibility, too few TP groups, more stages than layers,
fewer micro-batches than replicas, FP8 on a pool without FP8 tensor cores, the
interleaving and FSDP rules), whose largest
per-GPU memory exceeds its GPU (:mod:`xsweep.plan.memory`, as the evaluator computes it)
or whose plan would exceed a size limit of :mod:`xsweep.spec.limits` (GPUs, device
groups, micro-batches of a replica, program size) is :class:`Infeasible` with a
one-line reason. The rules that need no layout are arithmetic on the point, and so is
the GPU limit: they are decided before anything per GPU, per TP group or per replica is
built (so no more than the GPU limit's worth), and a pool of billions of GPUs costs no
more than one of eight. The other limits are checked once the memory is known, before
the plan is built (device groups, micro-batches) or evaluated (program size), so that a
point that does not fit keeps that reason.
"""

from __future__ import annotations

import functools
import hashlib
import math
import operator
import re
import threading
from dataclasses import dataclass
from typing import NamedTuple

from xsweep.cost import CostModel
from xsweep.plan.memory import fits, memory_per_gpu
from xsweep.plan.stack import Stack, interned
from xsweep.plan.workload import cached_stage_cost
from xsweep.search.space.apportion import apportion
from xsweep.search.space.grid import Point
from xsweep.spec import xsweep_pb2 as pb
from xsweep.spec.catalog import REFERENCE_SOFTWARE, Catalog, GpuSpec, ModelSpec
from xsweep.spec.enums import (
    FABRIC,
    MOE_DISPATCHER,
    PRECISION,
    RECOMPUTE,
    RESHARDING,
    SCHEDULE,
)
from xsweep.spec.limits import active_limits, over_limit
from xsweep.spec.program_size import describe_program, program_size, size_key
from xsweep.spec.resolve import groups_bytes
from xsweep.spec.sweep import NUMERIC, PER_POINT, Sweep, axis_class
from xsweep.spec.validate import ep_groups_on_nodes, uneven_ep_group


@dataclass(frozen=True)
class Infeasible:
    """A point that yields no plan to evaluate."""

    reason: str
    memory_per_gpu_gib: float = math.nan  # known when the plan was built but does not fit


@dataclass(frozen=True)
class Built:
    """A point's plan and what evaluating it needs besides the plan."""

    plan: pb.DeploymentPlan
    cost: CostModel
    memory_per_gpu_gib: float
    layout: tuple  # the values of the axes that shape the plan (all but the per-point ones)


@dataclass(frozen=True)
class Identified:
    """A buildable point known by what its plan is made of, the plan not built
    (:meth:`Planner.identify`): what the closed form and the prices need of it."""

    key: bytes  # equal keys, equal plans, and the other way round
    cost: CostModel
    memory_per_gpu_gib: float
    layout: tuple  # as :attr:`Built.layout`
    shared: bytes  # what the closed form's parts read besides the layout (b"" without EP)
    cluster: tuple  # the cluster's nodes, NICs and fabric: equal clusters, equal prices
    dp_overlap: bool  # whether DP overlaps the backward (closed_form.Bound.seconds reads it)


@dataclass(frozen=True)
class _Pool:
    gpu: GpuSpec
    name: str  # as the sweep names it (the key of parallelism.tp)
    index: int  # in the sweep's list of pools
    nodes: int
    gpus_per_node: int
    tp: int
    cp: int = 1  # context-parallel ranks of each device group

    @property
    def tp_groups(self) -> int:
        """The pool's device groups (TP groups times their CP ranks)."""
        return self.nodes * self.gpus_per_node // (self.tp * self.cp)


@dataclass(frozen=True)
class _Template:
    """A layout's plan, complete but for the fields of the per-point axes."""

    plan: pb.DeploymentPlan
    node_pool: tuple[int, ...]  # the sweep's pool of each node
    memory_per_gpu_gib: float
    groups: bytes  # the plan's device groups serialized (its variants share them)
    # whether an EP group spans nodes (so the MoE dispatcher matters), and why DeepEP's
    # dispatch cannot run on the layout ("" where it can): an EP group spread unevenly
    ep_spans_nodes: bool = False
    deepep: str = ""
    # the plan's identity without the per-point fields (a digest of its bytes), its
    # cluster's bytes (nodes and GPUs) and its active pools' node counts, in node order
    key: bytes = b""
    cluster: bytes = b""
    pool_nodes: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class _Stage:
    pool: int  # index into the active pools
    first_layer: int
    last_layer: int


def plan_name(sweep: Sweep, index: int) -> str:
    """The name of the plan of the sweep's point ``index``."""
    return f"{sweep.name}-p{index}"


def per_point(path: str) -> bool:
    """Whether axis ``path`` is declared per point (``AxisClass.PER_POINT`` in the sweep
    schema: it changes neither the layout nor any stage's speed or memory): points that
    differ in these alone share a layout, and so their programs' structure. Every other
    axis, including ones added later, is part of the layout's cache key."""
    return axis_class(path) is PER_POINT


def varies_fast(path: str) -> bool:
    """Whether the bound phase's walk varies axis ``path`` fastest: a per-point axis or a
    numeric one (``AxisClass.NUMERIC``: a layout axis that changes only the numbers of a
    program in the sweeps measured), so that the variants of a structure meet in one unit
    of work, which builds the structure once."""
    return axis_class(path) in (PER_POINT, NUMERIC)


class PointFields(NamedTuple):
    """A point's values of the per-point axes, as :meth:`Planner.plan` writes them into
    its layout's plan."""

    resharding: str
    dp_overlap: bool
    dp_bucket_params: int
    pp_p2p_overlap: bool  # pipeline sends beside the compute
    moe_dispatcher: str
    moe_fp8_dispatch: bool  # with expert parallelism only
    fabric: str
    oversubscription: float
    nics: tuple[str, ...]  # of each pool that has nodes, in pool order ("": the default)


#: Layouts kept at most (a sweep's fastest axes revisit a few hundred at a time).
MAX_CACHED_LAYOUTS = 4096


_planners = threading.local()


def planner_for(sweep: Sweep, catalog: Catalog) -> Planner:
    """A :class:`Planner` of ``sweep`` and ``catalog``: the one this thread made last, if it
    was for these objects under the limits in force now, else a new one. A process's units
    of one sweep (a worker's chunks, the funnel's rounds, which plan points the bound phase
    planned) then build each layout once rather than once per unit."""
    last = getattr(_planners, "last", None)
    if (last is None or last.sweep is not sweep or last.catalog is not catalog
            or last._limits is not active_limits()):
        last = _planners.last = Planner(sweep, catalog)
    return last


class Planner:
    """Turns points of one sweep's grid into plans; pure, and cheap after the first
    points: each layout (the plan without its per-point fields) is built once, and a
    point copies it and sets its NICs, resharding scheme, fabric and gradient buckets."""

    def __init__(self, sweep: Sweep, catalog: Catalog):
        self.sweep = sweep
        self.catalog = catalog
        self._gpus = [catalog.gpu(pool.gpu) for pool in sweep.cluster.pools]
        self._layouts: dict[tuple, _Template | Infeasible] = {}
        # program sizes by layout (its key), DP overlap and resharding scheme
        self._sizes: dict[tuple, int] = {}
        # the last point's layout: asked for its variant, then its plan, a point's layout
        # key is read from it once (the point is held, so it is never another's)
        self._last: tuple[Point, tuple, _Template | Infeasible] | None = None
        # the axes' paths only: expanding the ranges here would cost as much as they hold
        self._layout_axes = tuple(path for path, kind in sweep.axis_classes().items()
                                  if kind is not PER_POINT)
        # a point's values of those axes, as a tuple (itemgetter gives one of two or more)
        self._layout_key = (operator.itemgetter(*self._layout_axes)
                            if len(self._layout_axes) > 1
                            else lambda point: tuple(point[p] for p in self._layout_axes))
        # the path of each pool's NIC axis
        self._nic_paths = [f"cluster.pools[{pool}].nic" for pool in range(len(self._gpus))]
        self._limits = active_limits()
        self._costs: dict[str, CostModel] = {}

    def cost_model(self, point: Point) -> CostModel:
        """``point``'s pricing, one object per pricing (a sweep's points group by it: a
        dict finds the same object without comparing its fields)."""
        pricing = point["cost.pricing"]
        cost = self._costs.get(pricing)
        if cost is None:
            c = self.sweep.cost
            cost = self._costs[pricing] = CostModel(
                pricing=pricing, amortization_years=c.amortization_years,
                electricity_usd_per_kwh=c.electricity_usd_per_kwh, pue=c.pue)
        return cost

    def plan(self, point: Point, name: str) -> Built | Infeasible:
        """The plan of ``point`` (named ``name``), or why there is none."""
        found = self._verdict(point)
        if isinstance(found, Infeasible):
            return found
        key, layout, fields = found
        return Built(_fill(layout, fields, name), self.cost_model(point),
                     layout.memory_per_gpu_gib, key)

    def identify(self, point: Point) -> Identified | Infeasible:
        """What :meth:`plan` would build for ``point``, known without building it: the
        same verdict, and a key equal for points whose plans are equal: a digest of the
        layout's plan (the same for layouts of equal plans, a pool without nodes leaving
        its TP degree out, say), the NIC of each node and the per-point fields."""
        found = self._verdict(point)
        if isinstance(found, Infeasible):
            return found
        key, layout, fields = found
        nics: list[list] = []  # runs of nodes with one NIC, in node order
        for (_, nodes), nic in zip(layout.pool_nodes, fields.nics, strict=True):
            if nics and nics[-1][0] == nic:
                nics[-1][1] += nodes
            else:
                nics.append([nic, nodes])
        cluster = (tuple(map(tuple, nics)), str(fields.fabric), float(fields.oversubscription))
        rest = (str(fields.resharding), bool(fields.dp_overlap), int(fields.dp_bucket_params),
                bool(fields.pp_p2p_overlap), str(fields.moe_dispatcher),
                bool(fields.moe_fp8_dispatch))
        own = repr((cluster, rest)).encode()
        return Identified(layout.key + own, self.cost_model(point), layout.memory_per_gpu_gib,
                          key, own if layout.plan.training.expert_parallel > 1 else b"",
                          (layout.cluster, *cluster), bool(fields.dp_overlap))

    def _verdict(self, point: Point) -> tuple[tuple, _Template, PointFields] | Infeasible:
        """``point``'s layout key, layout and per-point fields, or why it has no plan."""
        key, layout = self._layout_of(point)
        if isinstance(layout, Infeasible):
            return layout
        fields = self._point_fields(point, layout)
        reason = self._point_reason(point, layout, fields)
        if reason:
            return Infeasible(reason, layout.memory_per_gpu_gib)
        return key, layout, fields

    def _point_reason(self, point: Point, layout: _Template, fields: PointFields) -> str:
        """Why ``point`` has no plan though its layout has one ("" if it has): its
        per-point fields (the MoE dispatcher, FP8 dispatch) or its program's size."""
        if fields.moe_dispatcher != MOE_DISPATCHER.default and layout.deepep:
            return layout.deepep
        if fields.moe_fp8_dispatch and point["training.precision"] != "fp8":
            return "expert parallelism: FP8 dispatch needs precision fp8"
        # per point: the resharding scheme and the DP overlap change the program's size
        own = (layout.key, bool(fields.dp_overlap), fields.resharding)
        size = self._sizes.get(own)
        if size is None:
            t = layout.plan.training
            size = self._sizes[own] = program_size(
                size_key(layout.groups, t.virtual_pipeline_stages, t.zero_stage,
                         fields.dp_overlap, RESHARDING.value(fields.resharding),
                         t.tp_comm_overlap, t.expert_parallel),
                lambda: _fill(layout, fields, ""))
        if size > self._limits.program_size:  # the message only where it is needed
            return over_limit(size, self._limits, "program_size", describe_program(size))
        return ""

    def variant(self, point: Point) -> tuple | None:
        """What ``point``'s plan is made of, but its name and cost: points with equal
        variants have equal plans (NICs of pools without nodes, say, make no difference).
        None where the point has no layout (a plan over the program-size limit, which
        only its per-point fields decide, has a variant but no plan either)."""
        key, layout = self._layout_of(point)
        if isinstance(layout, Infeasible):
            return None
        return key, self._point_fields(point, layout)

    def _layout_of(self, point: Point) -> tuple[tuple, _Template | Infeasible]:
        last = self._last
        if last is not None and last[0] is point:
            return last[1], last[2]
        key = self._layout_key(point)
        layout = self._layouts.get(key)
        if layout is None:
            if len(self._layouts) >= MAX_CACHED_LAYOUTS:
                self._layouts.clear()
                self._sizes.clear()
            layout = self._layouts[key] = self._layout(point)
        self._last = (point, key, layout)
        return key, layout

    def _point_fields(self, point: Point, layout: _Template) -> PointFields:
        """The per-point fields that :meth:`plan` writes into the layout's plan."""
        return PointFields(point["training.resharding"], point["training.dp_overlap"],
                           point["training.dp_bucket_params"],
                           point.get("training.pp_p2p_overlap", True),
                           point.get("training.moe_dispatcher", MOE_DISPATCHER.default)
                           if layout.ep_spans_nodes else MOE_DISPATCHER.default,
                           point.get("training.moe_fp8_dispatch", False)
                           and point.get("parallelism.ep", 1) > 1,
                           point["cluster.fabric"],
                           point["cluster.oversubscription"],
                           tuple(point.get(self._nic_paths[pool], "")
                                 for pool, _ in layout.pool_nodes))

    def _layout(self, point: Point) -> _Template | Infeasible:
        model = self.catalog.model(point["model"])
        pools = self._pools(point)
        b, batch = point["parallelism.micro_batch_size"], point["training.global_batch_size"]
        p, mix = point["parallelism.pp"], point["parallelism.pipeline_mix"]
        stack = layout_stack(point, self.catalog, self.sweep.training.moe_imbalance or 1.0)
        # Arithmetic first: nothing per GPU, TP group or replica exists until the point is
        # known to have a layout within the GPU limit.
        reason = self._arithmetic(point, pools, model, stack)
        if reason:
            return Infeasible(reason)
        unit = p if stack.virtual_pipeline_stages > 1 else 1  # interleaving: multiples of pp
        layout = _replicas_separate(pools, p) if mix == "separate" else _replicas_mixed(pools, p)
        shapes = [self._split(model, pools, stages, b, stack,
                              point["parallelism.layer_split"]) for stages in layout.kinds]
        times = [max(self._stage_time_s(model, pools[s.pool], b, s, stack) for s in shape)
                 for shape in shapes]
        counts = [unit * c for c in
                  apportion(batch // b // unit, [1.0 / times[k] for k in layout.kind_of])]
        if stack.zero_stage == 3:
            reason = _check_fsdp(pools, shapes, layout.kind_of, counts)
            if reason:
                return Infeasible(reason)
        if stack.expert_parallel > pools[0].tp * pools[0].cp:  # EP across replicas
            reason = _check_expert_shapes(shapes, layout.kind_of, counts)
            if reason:
                return Infeasible(reason)
        memory_gib, worst = self._memory(model, pools, shapes, layout.kind_of, counts, b, point,
                                         stack)
        if worst:
            return Infeasible(worst, memory_gib)
        reason = self._size_limits(pools, counts)
        if reason:
            return Infeasible(reason, memory_gib)
        plan = _build(point, pools, shapes, layout, counts, b, self.sweep, self.catalog)
        return _Template(plan, tuple(p.index for p in pools for _ in range(p.nodes)),
                         memory_gib, groups_bytes(plan), *_ep_across_nodes(plan, stack),
                         hashlib.blake2b(plan.SerializeToString(deterministic=True),
                                         digest_size=16).digest(),
                         plan.cluster.SerializeToString(deterministic=True),
                         tuple((p.index, p.nodes) for p in pools))

    def _arithmetic(self, point: Point, pools: list[_Pool], model: ModelSpec,
                    stack: Stack) -> str:
        """Why the point has no layout, by arithmetic on its axes alone ("" if it may have
        one): the pools, model and batch, the precision, TP overlap and interleaving, the
        replicas its TP groups form and the micro-batches they get, the GPU limit."""
        b, batch = point["parallelism.micro_batch_size"], point["training.global_batch_size"]
        p, v = point["parallelism.pp"], stack.virtual_pipeline_stages
        reason = (_check(pools, model, p, b, batch)
                  or _check_cp(pools, model, stack, point["parallelism.pipeline_mix"])
                  or _check_precision(pools, stack.precision)
                  or _check_tp_overlap(point)
                  or _check_fp8_gather(point)
                  or _check_interleaving(model, p, v, batch // b, point["training.schedule"])
                  or _check_experts(pools, model, stack))
        if reason:
            return reason
        replicas = _replica_count(pools, p, point["parallelism.pipeline_mix"])
        if isinstance(replicas, str):
            return replicas
        # EP across replicas: over their groups' TP (x CP) ranks
        reason = _check_expert_replicas(stack.expert_parallel, pools[0].tp * pools[0].cp,
                                        replicas, "TP x CP" if pools[0].cp > 1 else "TP")
        if reason:
            return reason
        micro_batches = batch // b
        unit = p if v > 1 else 1  # interleaving: each replica's count a multiple of pp
        if micro_batches // unit < replicas:
            per = f" in multiples of the {p} stages" if unit > 1 else ""
            return (f"{micro_batches} micro-batches (global batch {batch} / micro-batch {b}) "
                    f"cannot feed {replicas} replicas{per}")
        gpus = sum(pool.nodes * pool.gpus_per_node for pool in pools)
        return over_limit(gpus, self._limits, "gpus", f"the cluster's GPU count ({gpus:,})")

    def _size_limits(self, pools: list[_Pool], counts: list[int]) -> str:
        """Why the layout is too large to evaluate ("" if it is not): its device groups or
        one replica's micro-batches over their limits."""
        groups, most = sum(pool.tp_groups for pool in pools), max(counts)
        return (over_limit(groups, self._limits, "device_groups",
                           f"the number of device groups ({groups:,} TP groups)")
                or over_limit(most, self._limits, "micro_batches",
                              f"the micro-batches of one replica ({most:,})"))

    def _pools(self, point: Point) -> list[_Pool]:
        active = []
        for i, (pool, gpu) in enumerate(zip(self.sweep.cluster.pools, self._gpus, strict=True)):
            nodes = point[f"cluster.pools[{i}].nodes"]
            if nodes:
                active.append(_Pool(gpu, pool.gpu, i, nodes,
                                    point[f"cluster.pools[{i}].gpus_per_node"],
                                    point[f"parallelism.tp.{pool.gpu}"],
                                    point.get("parallelism.cp", 1)))
        return active

    def _split(self, model: ModelSpec, pools: list[_Pool], stage_pools: tuple[int, ...], b: int,
               stack: Stack, how: str) -> tuple[_Stage, ...]:
        """Layers of each stage of one kind of replica, in multiples of the virtual stages."""
        if how == "proportional":
            weights = [1.0 / _layer_time_s(model, pools[k].gpu, pools[k].tp, b, stack,
                                           pools[k].cp) for k in stage_pools]
        else:
            weights = [1.0] * len(stage_pools)
        v = stack.virtual_pipeline_stages
        stages, first = [], 1
        for k, n in zip(stage_pools, apportion(model.num_layers // v, weights), strict=True):
            stages.append(_Stage(k, first, first + v * n - 1))
            first += v * n
        return tuple(stages)

    @staticmethod
    def _stage_time_s(model: ModelSpec, pool: _Pool, b: int, stage: _Stage,
                      stack: Stack) -> float:
        return _stage_time_s(model, pool.gpu, pool.tp, b, stage.first_layer, stage.last_layer,
                             stack, pool.cp)

    @staticmethod
    def _memory(model, pools, shapes, kind_of, counts, b, point,
                stack: Stack) -> tuple[float, str]:
        """Largest per-GPU memory (GiB) over the groups, and a reason if some group does
        not fit: it names the group farthest over its GPU's memory (by the share of it
        the group needs; the first such group on a tie), so that the reason says how far
        the point is from fitting."""
        schedule = point["training.schedule"]
        replicas = len(kind_of)
        largest, worst, over = 0.0, "", 1.0
        for kind, shape in enumerate(shapes):
            for m in sorted({c for k, c in zip(kind_of, counts, strict=True) if k == kind}):
                for index, stage in enumerate(shape):
                    pool = pools[stage.pool]
                    total, fit = _memory_gib(model, pool.gpu, pool.tp, b, stage.first_layer,
                                             stage.last_layer, index, len(shape), schedule, m,
                                             stack, replicas * pool.cp, pool.cp)
                    if not fit and (not worst or total / pool.gpu.hbm_gib > over):
                        over = total / pool.gpu.hbm_gib
                        worst = (f"does not fit in GPU memory: {total:.1f} GiB per GPU on "
                                 f"{pool.gpu.name} ({pool.gpu.hbm_gib:g} GiB) at stage {index}, "
                                 f"TP {pool.tp}{f' CP {pool.cp}' if pool.cp > 1 else ''}, "
                                 f"layers {stage.first_layer}-{stage.last_layer}, "
                                 f"{m} micro-batches")
                    largest = max(largest, total)
        return largest, worst


def _fill(layout: _Template, fields: PointFields, name: str) -> pb.DeploymentPlan:
    """The layout's plan with a point's per-point fields, named ``name``."""
    plan = pb.DeploymentPlan()
    plan.CopyFrom(layout.plan)
    plan.name = name
    t = plan.training
    t.resharding = RESHARDING.value(fields.resharding)
    t.dp_overlap = fields.dp_overlap
    t.dp_bucket_params = fields.dp_bucket_params
    if not fields.pp_p2p_overlap:  # unset means overlapped: other plans keep their bytes
        t.pp_p2p_overlap = False
    if fields.moe_dispatcher != MOE_DISPATCHER.default:
        t.moe_dispatcher = MOE_DISPATCHER.value(fields.moe_dispatcher)
    if fields.moe_fp8_dispatch:
        t.moe_fp8_dispatch = True
    plan.cluster.fabric.kind = FABRIC.value(fields.fabric)
    plan.cluster.fabric.oversubscription = fields.oversubscription
    nic_of = dict(zip((pool for pool, _ in layout.pool_nodes), fields.nics, strict=True))
    for node, pool in zip(plan.cluster.nodes, layout.node_pool, strict=True):
        node.nic = nic_of[pool]
    return plan


def _ep_across_nodes(plan: pb.DeploymentPlan, stack: Stack) -> tuple[bool, str]:
    """Whether an EP group of the plan spans nodes, and why its EP groups cannot run
    DeepEP's dispatch ("" where they can)."""
    groups = [(g.pp_stage, g.dp_replica, g.ranks) for g in plan.device_groups]
    nodes = [node.num_gpus for node in plan.cluster.nodes]
    on_nodes = ep_groups_on_nodes(stack.expert_parallel, groups, nodes)
    spans = any(len(per_node) > 1 for _, per_node in on_nodes)
    uneven = uneven_ep_group(stack.expert_parallel, groups, nodes)
    if uneven is None:
        return spans, ""
    return spans, (f"expert parallelism: DeepEP needs each EP group spread evenly over its "
                   f"nodes, and one holds {uneven[1]} ranks on its nodes")


def layout_stack(point: Point, catalog: Catalog, imbalance: float = 1.0) -> Stack:
    """The point's training-stack options that shape its stages' speed and memory (the
    gradient-bucket options, per point, are left at their defaults), its software profile
    from ``catalog``, with the sweep's token ``imbalance`` of a model with experts."""
    stack = Stack(software=catalog.software_profile(point["training.software"]),
                  sequence_parallel=point["training.sequence_parallel"],
                  flash_attention=point["training.flash_attention"],
                  recompute=point["training.recompute"],
                  zero_stage=point["training.zero_stage"],
                  virtual_pipeline_stages=point["training.virtual_pipeline_stages"],
                  precision=point["training.precision"],
                  tp_comm_overlap=(point["training.tp_comm_overlap"]
                                   and point["training.sequence_parallel"]),
                  fp8_param_gather=not _check_fp8_gather(point) and point.get(
                      "training.fp8_param_gather", False),
                  expert_parallel=point.get("parallelism.ep", 1),
                  moe_imbalance=imbalance)
    return interned(stack)  # one object per value: memos find it by identity


def unused_axes(sweep: Sweep, point: Point) -> frozenset[str]:
    """The axes (dotted paths) whose value makes no difference to ``point``'s plan: every
    axis of a pool without nodes (its GPUs per node, NIC and TP degree) and, with fewer
    than two pools with nodes, the pipeline mix. Points that differ only in these build
    the same plan; a table shows them as ``-``."""
    unused = []
    for i, pool in enumerate(sweep.cluster.pools):
        if point[f"cluster.pools[{i}].nodes"] == 0:
            unused += [f"cluster.pools[{i}].gpus_per_node", f"cluster.pools[{i}].nic",
                       f"parallelism.tp.{pool.gpu}"]
    active = sum(point[f"cluster.pools[{i}].nodes"] > 0 for i in range(len(sweep.cluster.pools)))
    if active < 2:
        unused.append("parallelism.pipeline_mix")
    ep, cp = point.get("parallelism.ep", 1), point.get("parallelism.cp", 1)
    if all(ep <= point[f"parallelism.tp.{pool.gpu}"] * cp
           for i, pool in enumerate(sweep.cluster.pools)
           if point[f"cluster.pools[{i}].nodes"] > 0):  # EP inside the groups: on one node
        unused.append("training.moe_dispatcher")
    if ep == 1:  # no all-to-all to carry FP8
        unused.append("training.moe_fp8_dispatch")
    return frozenset(path for path in unused if path in point)  # a pool's NIC may be no axis


@dataclass(frozen=True)
class ReasonKind:
    """A kind of reason why a point has no feasible plan: its name, what the points of the
    kind do, as a count's verb phrase, plural and singular ("3 do not fit in GPU memory",
    "1 does not fit in GPU memory"), and the pattern its reasons match (the planner's
    and the evaluator's wording)."""

    name: str
    text: str
    one: str
    pattern: str

    def count(self, n: int) -> str:
        """``n`` points and what they do: ``3 do not fit in GPU memory``."""
        return f"{n:,} {self.one if n == 1 else self.text}"


#: The kinds of the reasons this module (and the evaluator) give, in the order a summary
#: lists them; a reason none matches is of kind ``other``.
REASON_KINDS = (
    ReasonKind("memory", "do not fit in GPU memory", "does not fit in GPU memory",
               r"^does not fit in GPU memory"),
    ReasonKind("tp_node", "have a TP degree that does not fit a node",
               "has a TP degree that does not fit a node",
               r"^TP \d+ (exceeds|does not divide) the \d+ GPUs of a"),
    ReasonKind("tp_heads", "have a TP degree above the model's attention heads",
               "has a TP degree above the model's attention heads",
               r"^TP \d+ exceeds the model's"),
    ReasonKind("cp", "break a rule of context parallelism", "breaks a rule of context "
               "parallelism", r"^CP \d+ "),
    ReasonKind("precision", "ask for FP8 on a GPU without FP8 tensor cores",
               "asks for FP8 on a GPU without FP8 tensor cores",
               r"^FP8 needs FP8 tensor cores"),
    ReasonKind("tp_overlap", "overlap TP communication without sequence parallelism",
               "overlaps TP communication without sequence parallelism",
               r"^TP communication overlap needs sequence parallelism"),
    ReasonKind("fp8_gather", "gather FP8 parameters without FP8 or sharded parameters",
               "gathers FP8 parameters without FP8 or sharded parameters",
               r"^FP8 parameter gathers need"),
    ReasonKind("experts", "break a rule of expert parallelism",
               "breaks a rule of expert parallelism", r"^expert parallelism: "),
    ReasonKind("pipeline", "have a pipeline depth their TP groups or layers cannot form",
               "has a pipeline depth its TP groups or layers cannot form",
               r"^(\d+ pipeline stages but|pool .* fewer than pp|pp \d+ does not divide|"
               r"mixed pipelines:)"),
    ReasonKind("batch", "have a global batch that does not split into their replicas' "
               "micro-batches", "has a global batch that does not split into its replicas' "
               "micro-batches", r"^(global batch \d+ is not a multiple|\d+ micro-batches \()"),
    ReasonKind("interleaving", "break a rule of interleaving (virtual pipeline stages)",
               "breaks a rule of interleaving (virtual pipeline stages)", r"^interleaving \("),
    ReasonKind("fsdp", "break a rule of FSDP (replicas of one shape)",
               "breaks a rule of FSDP (replicas of one shape)", r"^FSDP \(zero_stage 3\)"),
    ReasonKind("size_limit", "exceed a size limit (XSWEEP_MAX_*)",
               "exceeds a size limit (XSWEEP_MAX_*)",
               r"exceeds the limit of [\d,]+ \(set XSWEEP_MAX_"),
    ReasonKind("empty", "have no nodes at all", "has no nodes at all", r"^empty cluster"),
    ReasonKind("not_converged", "did not converge in the evaluator",
               "did not converge in the evaluator", r"^not_converged$"),
    ReasonKind("overflow", "overflowed the evaluator's arrays",
               "overflowed the evaluator's arrays", r"^overflow$"),
)
#: A reason of no known kind.
OTHER_KIND = ReasonKind("other", "are infeasible for another reason",
                        "is infeasible for another reason", "")
_KIND_PATTERNS = tuple((kind, re.compile(kind.pattern)) for kind in REASON_KINDS)
#: The numbers of a memory reason: GiB needed per GPU, the GPU, its memory.
MEMORY_NUMBERS = re.compile(r"([\d.]+) GiB per GPU on (.+?) \(([\d.]+) GiB\)")


@functools.lru_cache(maxsize=4096)  # a sweep's reasons repeat: tens of thousands, few texts
def reason_kind(reason: str) -> ReasonKind:
    """The kind of an infeasible point's ``reason`` (the evaluator's status name for a
    point that did not converge or overflowed)."""
    return next((kind for kind, pattern in _KIND_PATTERNS if pattern.search(reason)),
                OTHER_KIND)


def _check(pools: list[_Pool], model: ModelSpec, p: int, b: int, batch: int) -> str:
    """Why no layout exists, before choosing one ("" if none of these rules fails)."""
    if not pools:
        return "empty cluster: every pool has 0 nodes"
    for pool in pools:
        if pool.tp > pool.gpus_per_node:
            return f"TP {pool.tp} exceeds the {pool.gpus_per_node} GPUs of a {pool.name} node"
        if pool.gpus_per_node % pool.tp:
            return f"TP {pool.tp} does not divide the {pool.gpus_per_node} GPUs of a {pool.name} node"
        if pool.tp > model.num_attention_heads:
            return f"TP {pool.tp} exceeds the model's {model.num_attention_heads} attention heads"
    if p > model.num_layers:
        return f"{p} pipeline stages but the model has {model.num_layers} layers"
    if batch % b:
        return f"global batch {batch} is not a multiple of micro-batch size {b}"
    return ""


def _check_cp(pools: list[_Pool], model: ModelSpec, stack: Stack, mix: str) -> str:
    """Why the point cannot split its sequences over ``cp`` ranks ("" if it can), as plan
    validation and the model ask: each device group in one node, the sequence in
    ``2 x cp`` chunks, fused attention, no FSDP, one TP degree along a pipeline; with
    experts, EP inside the TP degree (each CP rank's TP ranks run their all-to-alls), over
    the TP ranks of ``ep / tp`` CP ranks (a divisor of CP) or over whole groups of several
    replicas (``ep / tp`` a multiple of CP); one TP degree for every pool then
    (:func:`_check_experts_across`)."""
    cp = pools[0].cp
    if cp == 1:
        return ""
    for pool in pools:
        size = pool.tp * cp
        if size > pool.gpus_per_node or pool.gpus_per_node % size:
            return (f"CP {cp} x TP {pool.tp} does not fit the {pool.gpus_per_node} GPUs of a "
                    f"{pool.name} node evenly")
    if model.seq_length % (2 * cp):
        return f"CP {cp} needs a sequence in 2 x cp chunks: {model.seq_length} tokens are not"
    if not stack.flash_attention:
        return f"CP {cp} needs flash attention (ring attention is fused attention)"
    if stack.zero_stage == 3:
        return f"CP {cp} with FSDP (zero_stage 3) is not modelled"
    ep = stack.expert_parallel
    for pool in pools:
        c = ep // pool.tp
        if (model.is_moe and ep > pool.tp and ep % pool.tp == 0 and cp % c
                and (c < cp or c % cp)):
            return (f"CP {cp} takes ep {ep} above TP {pool.tp} only over CP ranks (EP "
                    f"folding CP) or whole groups of replicas, and {c} neither divides CP "
                    f"{cp} nor is a multiple of it")
    if mix == "mixed" and len({pool.tp for pool in pools}) > 1:
        return (f"CP {cp} needs one TP degree along a pipeline; mixed pipelines have TP "
                f"{sorted({pool.tp for pool in pools})}")
    return ""


def _check_precision(pools: list[_Pool], precision: str) -> str:
    """Why the pools cannot run ``precision`` ("" if they can): FP8 needs FP8 tensor cores
    on every pool with nodes."""
    if precision == "fp8":
        for pool in pools:
            if not pool.gpu.has_fp8:
                return (f"FP8 needs FP8 tensor cores, and pool {pool.name} "
                        f"({pool.gpu.name}) has none")
    return ""


def _check_experts(pools: list[_Pool], model: ModelSpec, stack: Stack) -> str:
    """Why the point cannot split its experts ("" if it can): expert parallelism needs
    routed experts it divides, and must divide every TP degree or be a multiple of it (EP
    over the TP ranks of several replicas: then one TP degree for every pool); FP8
    parameter gathers, and TP overlap with EP above 1, are not modelled with experts."""
    ep = stack.expert_parallel
    if ep > 1 and not model.is_moe:
        return f"expert parallelism: ep {ep} needs a model with experts ({model.name} has none)"
    if not model.is_moe:
        return ""
    if model.num_experts % ep:
        return (f"expert parallelism: ep {ep} does not divide the model's "
                f"{model.num_experts} experts")
    for pool in pools:
        if pool.tp % ep and ep % pool.tp:
            return (f"expert parallelism: ep {ep} neither divides TP {pool.tp} of pool "
                    f"{pool.name} nor is a multiple of it")
    if any(ep > pool.tp for pool in pools):
        reason = _check_experts_across(pools, ep)
        if reason:
            return reason
    if stack.fp8_param_gather:
        return ("expert parallelism: FP8 parameter gathers are not modelled for a model "
                "with experts")
    if stack.tp_comm_overlap and ep > 1:
        return f"expert parallelism: TP communication overlap is not modelled at ep {ep}"
    return ""


def _check_experts_across(pools: list[_Pool], ep: int) -> str:
    """Why EP above TP (EP groups over several replicas, or under context parallelism over
    CP ranks) cannot run ("" if it can): one TP degree for every pool (at TP 1 an EP group
    is ``EP`` replicas)."""
    tps = sorted({pool.tp for pool in pools})
    where = (f"expert parallelism: ep {ep} above TP "
             f"({'over CP ranks' if pools[0].cp > 1 else 'across replicas'})")
    if len(tps) > 1:
        return f"{where} needs one TP degree for every pool, not TP {tps}"
    return ""


def _check_expert_replicas(ep: int, tp: int, replicas: int, label: str = "TP") -> str:
    """Why ``replicas`` cannot form EP groups of ``ep / tp`` replicas ("" if they can, or
    if EP does not span replicas); ``tp``: a group's ranks, its ``label`` (``TP``, or
    ``TP x CP`` under context parallelism)."""
    if ep <= tp or replicas % (ep // tp) == 0:
        return ""
    return (f"expert parallelism: ep {ep} is {label} {tp} x {ep // tp} replicas, and "
            f"{ep // tp} does not divide the {replicas} replicas")


def _check_expert_shapes(shapes: list[tuple[_Stage, ...]], kind_of: tuple[int, ...],
                         counts: list[int]) -> str:
    """Why the replicas cannot share EP groups ("" if they all run replica 0's stages with
    its micro-batch count, as an EP group across replicas needs)."""
    def layers(kind: int) -> list[tuple[int, int]]:
        return [(s.first_layer, s.last_layer) for s in shapes[kind]]

    for r, (kind, count) in enumerate(zip(kind_of, counts, strict=True)):
        where = "expert parallelism: across replicas needs replicas of one shape: replica"
        if layers(kind) != layers(kind_of[0]):
            return f"{where} {r} runs other stages than replica 0"
        if count != counts[0]:
            return f"{where} {r} gets {count} micro-batches, replica 0 {counts[0]}"
    return ""


def _check_tp_overlap(point: Point) -> str:
    """Why the point cannot overlap its TP communication ("" if it can): the overlap hides
    the sequence-parallel collectives, so it needs sequence parallelism."""
    if point["training.tp_comm_overlap"] and not point["training.sequence_parallel"]:
        return "TP communication overlap needs sequence parallelism"
    return ""


def _check_fp8_gather(point: Point) -> str:
    """Why the point cannot gather its parameters in FP8 ("" if it can): it needs FP8 and
    sharded parameters (ZeRO-1 or FSDP), as the plan's validation asks."""
    if not point.get("training.fp8_param_gather", False):
        return ""
    if point["training.precision"] != "fp8" or point["training.zero_stage"] not in (1, 3):
        return "FP8 parameter gathers need precision fp8 and zero_stage 1 or 3"
    return ""


def _check_interleaving(model: ModelSpec, p: int, v: int, micro_batches: int,
                        schedule: str) -> str:
    """Why ``v`` virtual stages per pipeline stage cannot run ("" if they can)."""
    if v == 1:
        return ""
    where = f"interleaving ({v} virtual stages)"
    if schedule != "1f1b":
        return f"{where} needs the 1f1b schedule, not {schedule}"
    if p < 2:
        return f"{where} needs at least two pipeline stages, not {p}"
    if model.num_layers % v:
        return f"{where}: the model's {model.num_layers} layers are no multiple of {v}"
    if p * v > model.num_layers:
        return (f"{where}: {p} stages of {v} virtual stages need {p * v} layers, "
                f"the model has {model.num_layers}")
    if micro_batches % p:
        return f"{where}: {micro_batches} micro-batches are no multiple of the {p} stages"
    return ""


def _check_fsdp(pools: list[_Pool], shapes: list[tuple[_Stage, ...]], kind_of: tuple[int, ...],
                counts: list[int]) -> str:
    """Why the replicas cannot run FSDP together ("" if they all run replica 0's stages
    with its micro-batch count)."""
    def layers(kind: int) -> str:
        return ", ".join(f"{s.first_layer}-{s.last_layer}" for s in shapes[kind])

    for r, (kind, count) in enumerate(zip(kind_of, counts, strict=True)):
        where = f"FSDP (zero_stage 3) needs replicas of one shape: replica {r}"
        if shapes[kind] != shapes[kind_of[0]]:
            gpu = pools[shapes[kind][0].pool].name
            return (f"{where} ({gpu}) runs layers {layers(kind)}, replica 0 "
                    f"{layers(kind_of[0])}")
        if count != counts[0]:
            return f"{where} gets {count} micro-batches, replica 0 {counts[0]}"
    return ""


@dataclass(frozen=True)
class _Layout:
    """Replicas by kind: ``kinds[k]`` lists the pool of each stage of a kind-k replica;
    ``kind_of[r]`` is replica r's kind; ``slots[i]`` maps pool i's TP groups, in rank
    order, to (replica, stage)."""

    kinds: tuple[tuple[int, ...], ...]
    kind_of: tuple[int, ...]
    slots: tuple[tuple[tuple[int, int], ...], ...]


def _replica_count(pools: list[_Pool], p: int, mix: str) -> int | str:
    """The number of replicas of ``p`` stages the pools' TP groups form (``separate``
    or ``mixed``), or why they form none; arithmetic, whatever the pools' sizes."""
    if mix == "separate":
        replicas = 0
        for pool in pools:
            groups = pool.tp_groups
            where = f"(TP {pool.tp} on {pool.nodes} x {pool.gpus_per_node} GPUs)"
            if groups < p:
                return f"pool {pool.name} has {groups} TP groups {where}, fewer than pp {p}"
            if groups % p:
                return f"pp {p} does not divide the {groups} TP groups of pool {pool.name} {where}"
            replicas += groups // p
        return replicas
    total = sum(pool.tp_groups for pool in pools)
    if total % p:
        return f"mixed pipelines: {total} TP groups do not form pipelines of {p} stages"
    replicas = total // p
    for pool in pools:
        if pool.tp_groups % replicas:
            return (f"mixed pipelines: the {pool.tp_groups} TP groups of pool {pool.name} "
                    f"do not spread evenly over {replicas} pipelines")
    return replicas


def _replicas_separate(pools: list[_Pool], p: int) -> _Layout:
    """Each pool's own replicas (``p`` divides its TP groups: :func:`_replica_count`)."""
    kinds, kind_of, slots = [], [], []
    for i, pool in enumerate(pools):
        groups = pool.tp_groups
        replicas = groups // p
        base = len(kind_of)
        kinds.append((i,) * p)
        kind_of += [i] * replicas
        slots.append(tuple((base + g % replicas, g // replicas) for g in range(groups)))
    return _Layout(tuple(kinds), tuple(kind_of), tuple(slots))


def _replicas_mixed(pools: list[_Pool], p: int) -> _Layout:
    """Pipelines that take stages from every pool (the groups spread evenly:
    :func:`_replica_count`)."""
    replicas = sum(pool.tp_groups for pool in pools) // p
    stages, slots, offset = [], [], 0
    for i, pool in enumerate(pools):
        per_pipeline = pool.tp_groups // replicas
        stages += [i] * per_pipeline
        slots.append(tuple((g % replicas, offset + g // replicas) for g in range(pool.tp_groups)))
        offset += per_pipeline
    return _Layout((tuple(stages),), (0,) * replicas, tuple(slots))


def _build(point: Point, pools: list[_Pool], shapes: list[tuple[_Stage, ...]], layout: _Layout,
           counts: list[int], b: int, sweep: Sweep, catalog: Catalog) -> pb.DeploymentPlan:
    plan = pb.DeploymentPlan()
    plan.model.preset = point["model"]
    t = plan.training
    t.global_batch_size = point["training.global_batch_size"]
    t.schedule = SCHEDULE.value(point["training.schedule"])
    stack = layout_stack(point, catalog, sweep.training.moe_imbalance or 1.0)
    if stack.software.name != REFERENCE_SOFTWARE.name:  # unset means the reference profile
        t.software = stack.software.name
    t.recompute = RECOMPUTE.value(stack.recompute)
    t.precision = PRECISION.value(stack.precision)
    t.tp_comm_overlap = stack.tp_comm_overlap
    if stack.expert_parallel > 1:
        t.expert_parallel = stack.expert_parallel
    if stack.fp8_param_gather:
        t.fp8_param_gather = True
    if stack.moe_imbalance != 1.0:
        t.moe_imbalance = stack.moe_imbalance
    t.sequence_parallel, t.flash_attention = stack.sequence_parallel, stack.flash_attention
    t.zero_stage, t.virtual_pipeline_stages = stack.zero_stage, stack.virtual_pipeline_stages
    t.total_tokens = sweep.training.total_tokens or 0.0
    plan.cluster.fabric.nodes_per_rack = sweep.cluster.nodes_per_rack
    groups = []
    rank = 0
    for pool, slots in zip(pools, layout.slots, strict=True):
        for _ in range(pool.nodes):
            plan.cluster.nodes.add(gpu=pool.name, num_gpus=pool.gpus_per_node)
        for replica, stage in slots:
            groups.append((replica, stage, range(rank, rank + pool.tp * pool.cp)))
            rank += pool.tp * pool.cp
    groups.sort(key=lambda g: (g[0], g[1]))
    cp = pools[0].cp
    for gid, (replica, stage, ranks) in enumerate(groups):
        s = shapes[layout.kind_of[replica]][stage]
        plan.device_groups.add(id=gid, ranks=ranks, pp_stage=stage, dp_replica=replica,
                               first_layer=s.first_layer, last_layer=s.last_layer,
                               micro_batch_size=b, num_micro_batches=counts[replica],
                               context_parallel=cp if cp > 1 else 0)
    return plan


@functools.lru_cache(maxsize=65536)
def _stage_time_s(model: ModelSpec, gpu: GpuSpec, tp: int, b: int, first: int, last: int,
                  stack: Stack, cp: int = 1) -> float:
    """Forward plus backward time of one micro-batch on a stage."""
    c = cached_stage_cost(model, gpu, tp, b, first, last, stack, None, cp)
    return c.forward_time_s + c.backward_time_s


def _layer_time_s(model: ModelSpec, gpu: GpuSpec, tp: int, b: int, stack: Stack,
                  cp: int = 1) -> float:
    """Forward plus backward time of one transformer block (a middle layer: no embedding
    or head) for one micro-batch."""
    layer = min(2, model.num_layers)
    return _stage_time_s(model, gpu, tp, b, layer, layer, stack, cp)


@functools.lru_cache(maxsize=65536)
def _memory_gib(model: ModelSpec, gpu: GpuSpec, tp: int, b: int, first: int, last: int,
                stage_index: int, num_stages: int, schedule: str, num_micro_batches: int,
                stack: Stack, dp: int, cp: int = 1) -> tuple[float, bool]:
    """A group's memory per GPU (GiB) and whether it fits.

    Every layer is held by one group of each replica, so the sweep-line DP group over
    any of a group's layers spans every replica (and its CP ranks): ZeRO shards over the
    replica count times ``cp``.
    """
    breakdown = memory_per_gpu(model, gpu, tp, b, first, last, stage_index=stage_index,
                               num_stages=num_stages, schedule=schedule,
                               num_micro_batches=num_micro_batches, stack=stack, dp=dp,
                               cp=cp)
    return breakdown.total_gib, fits(breakdown, gpu)
