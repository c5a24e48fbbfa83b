"""The closed-form tier: a lower bound on a plan's iteration time, before it is lowered.

The bound level (``kernels/bound.py``) runs every task of the program at its uncontended
duration, each starting when its last predecessor ends, and the program spells the
order of the tasks on a device group's compute stream out as dependencies. So on the
bound level, and hence on the exact level and in the simulator, an iteration lasts at
least, for every device group:

- the compute of all its passes: ``m x (forward + backward)`` of one micro-batch on its
  stage (:func:`xsweep.plan.workload.stage_cost`, the numbers the lowering's compute
  tasks sum to), plus the TP all-reduces of those passes, which block the stream too
  (with ``tp_comm_overlap`` a piece takes the longer of its compute and its ring, so the
  group takes at least the longer of the two sums). A
  TP ring inside one node runs over the scale-up links only (out of one GPU, into the
  next: :meth:`xsweep.plan.topology.Topology.paths`), so each of its tasks lasts at least
  its flows' hop latencies and NCCL launches plus their bytes over the bus efficiency and
  the capacity of those links (:mod:`xsweep.plan.transport`); the hops, launches and bytes
  of a pass's pieces add up to those of one ring of all the pass's all-reduces
  (:func:`xsweep.plan.collectives.pipelined_ring_flow` is linear in the count). Under
  expert parallelism the TP tasks of MoE layers also carry the all-to-alls, whose flows
  inside a node are bounded the same way; a task lasts at least its longest flow, so the
  passes at least the longer of the rings' and the all-to-alls' sums. With EP above TP
  (EP groups over ``EP / TP`` replicas of a stage, or under CP over CP ranks) a rank sends
  one all-to-all flow to each other rank of its EP group: one to a rank on another node
  leaves through its PCIe path and NIC, so a pass's all-to-alls last at least such a
  flow's launches plus its bytes over that path's rate (over the highest bus efficiency
  its path can have, the NIC's or PCIe's); one on its node, its hop latencies and
  launches plus its bytes over the scale-up link (:func:`expert_fanout` gives the largest
  flow of each kind: under DeepEP's dispatch, the heavier flows on its node and the one
  to each other node). The flows of one rank share its links in the exact model, so
  their bytes would add up there; the bound level runs each flow alone, and this tier
  stays under it. Under
  context parallelism the compute is a CP rank's (``1/cp`` of the tokens), each CP rank's
  TP ring sits in one node, and the CP ring runs beside the compute (with the TP rings
  if they overlap, else the TP rings run after both): left out, it only lengthens a
  piece. The optimizer's step and other communication only add to it;
- the pipeline's fill and drain: every forward pass of a model chunk on a stage waits
  for that chunk's forward on every earlier stage of its replica, and every backward pass
  is followed by that chunk's backward on every earlier stage; the first of a stage's
  passes is a forward and its last a backward (each forward has its backward after it),
  so the compute of one chunk's forward and backward on each earlier stage adds to the
  stage's own. A chunk holds ``1/v`` of a stage's layers (``v`` virtual stages; the whole
  stage without interleaving), so it lasts at least the sum of the stage's ``n/v``
  fastest layers;
- without interleaving, the gradients' collective after the last backward: a stage's
  last backward ends no sooner than its own passes after its first forward's inputs have
  come through the earlier stages, nor than the next stage's last backward and then its
  own backward. Without DP overlap (ZeRO 0 or 1, no experts or context parallelism), the
  lowering reduces each sweep-line DP segment's gradients in one collective that waits
  for the last backward piece of every member holding it, the piece of the group whose
  stage begins the segment being that group's last; its optimizer step, and so the
  iteration, waits for the collective. It runs a pipelined ring per LCM chunk over one
  rank of each member, every flow carrying ``passes x (k - 1) / k`` of the chunk's
  gradient bytes (an all-reduce two passes, ZeRO-1's reduce-scatter one, over ``k``
  members). A ring whose ranks sit on two nodes or more has, for each of those nodes, a
  flow from it to another node (a cycle leaves every node it visits), through the node's
  PCIe path and NIC: so the collective lasts at least that payload over the highest bus
  efficiency a path between nodes can have and the lowest rate, PCIe's or the NIC's, of
  those nodes (:class:`Bound`).

The largest of these, shrunk by :data:`MARGIN` for the float32 rounding of the batched
kernels, is the point's ``iteration_time_s`` at the ``closed_form`` level. Its
``tokens_per_s`` is the matching upper bound (tokens of an iteration over that time), its
training time and costs per run and per million tokens the matching lower bounds (the
cluster's capex and hourly rate, as the evaluator prices them, times the bound); every
other metric has no closed form and stays NaN, which the funnel never prunes on.
The bound is computed in parts (:class:`Bound`): what the layout sets, once per layout;
the rates of its nodes' NICs, a sweep's per-point fields (:class:`Links`), once per
cluster; and whether DP overlaps the backward, a per-point field too, which says whether
the gradients' collectives count (:meth:`Bound.seconds`). Without expert parallelism the
layout's part reads no other per-point field (fabric, resharding, gradient buckets,
whether pipeline sends overlap the compute), so points of one layout share it. With it,
the all-to-alls of EP groups that span nodes leave through the NICs, by the
dispatcher's pattern: such points share the layout's part only where their cluster and
training options are equal too (:func:`shared_by`). Pipeline transfers are left out, so
it holds whether a stage's sends run beside its compute or block it (``pp_p2p_overlap``:
blocking only adds waits), and whether parameters are gathered in FP8
(``fp8_param_gather``: the parameter gathers are left out).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

from xsweep.cost import DEFAULT_COST, CostModel, node_rates, run_costs
from xsweep.plan.collectives import ALLREDUCE, REDUCE_SCATTER, all_to_all_flow, pipelined_ring_flow
from xsweep.plan.stack import Stack, interned
from xsweep.plan.workload import cached_stage_cost, deepep_factors, segment_grad_bytes
from xsweep.spec import xsweep_pb2 as pb
from xsweep.spec.catalog import Catalog, GpuSpec, ModelSpec
from xsweep.spec.resolve import (
    resolve_model,
    resolve_nodes,
    resolve_software,
    resolve_training,
)

#: The bound shrunk by this share: below the batched kernels' float32 rounding, so that
#: it stays under the bound level's time whatever the dtype.
MARGIN = 1e-4
#: The metrics the tier gives (the others have no closed form: NaN). The times and costs
#: grow with the iteration time and ``tokens_per_s`` falls with it, so at the closed form
#: each is as good as it can be: never worse than at the bound or exact level.
METRICS = ("iteration_time_s", "tokens_per_s", "training_time_s", "cost_per_run_usd",
           "cost_per_million_tokens_usd")


def stack_of(plan: pb.DeploymentPlan, catalog: Catalog) -> Stack:
    """The training-stack options of ``plan`` (those that set its stages' compute, its
    precision and software profile among them, and whether its TP communication overlaps
    the compute), as the plan's validation reads them, unset options at their defaults."""
    return interned(resolve_training(plan.training,
                                     resolve_software(plan.training, catalog)).stack)


def iteration_lower_bound(plan: pb.DeploymentPlan, catalog: Catalog) -> float:
    """A lower bound on ``plan``'s iteration time in seconds (see the module docstring)."""
    return bound_parts(plan, catalog).seconds(links_of(resolve_nodes(plan.cluster, catalog)),
                                              plan.training.dp_overlap)


class Links(NamedTuple):
    """What the DP term of :class:`Bound` reads of a cluster's nodes (their NICs are a
    sweep's per-point fields): the highest bus efficiency a path between nodes can have,
    and per node the highest rate (bytes/s) a flow from one of its GPUs to another node
    can have, its PCIe path's and its NIC's (:func:`links_of`)."""

    efficiency: float
    rate: np.ndarray  # float[nodes]


def links_of(nodes) -> Links:
    """:class:`Links` of resolved nodes (:func:`xsweep.spec.resolve.resolve_nodes`)."""
    return Links(_efficiency_between(nodes),
                 np.array([min(n.nic.bandwidth_gbps, n.gpu.pcie_gbps) * 1e9 / 8
                           for n in nodes]))


def _efficiency_between(nodes) -> float:
    """The highest bus efficiency a path leaving one of ``nodes`` for another can have (the
    network's links carry the lowest of the NICs below them)."""
    kinds = {id(n): n for n in nodes}.values()  # nodes alike are one object
    return max(e for n in kinds for e in (n.nic.bus_efficiency, n.pcie_link.bus_efficiency))


class Bound(NamedTuple):
    """A plan's iteration bound in the part its layout sets (``compute``: the busiest
    stage's passes, the pipeline's fill and drain) and, per DP group whose gradients the
    bound counts where DP does not overlap the backward, the least time the last backward
    of one of its members can end (``after``), the payload of each flow of its collective
    (``flow_bytes``) and its members' nodes (``nodes``, bool[groups, nodes]), every one the
    source of a flow to another node: the collective lasts at least a flow's payload over
    the slowest of those nodes' rates, and the iteration, at least until it ends
    (:meth:`seconds`)."""

    compute: float
    after: np.ndarray  # float[groups]
    flow_bytes: np.ndarray  # float[groups]
    nodes: np.ndarray  # bool[groups, nodes]

    def seconds(self, links: Links, dp_overlap: bool = False) -> float:
        """The bound on a cluster whose nodes have ``links``, shrunk by :data:`MARGIN`;
        with ``dp_overlap`` (the collectives then overlap the backward), the compute part."""
        return float(bound_seconds([self], [links], [dp_overlap])[0])


def bound_seconds(bounds: list[Bound], links: list[Links],
                  dp_overlap: list[bool]) -> np.ndarray:
    """:meth:`Bound.seconds` of each bound on its links and DP overlap, those of one bound
    object in one pass (the points of a layout that differ in their NICs, say)."""
    out = np.empty(len(bounds))
    rows: dict[tuple[int, bool], list[int]] = {}
    for i, (bound, overlapped) in enumerate(zip(bounds, dp_overlap, strict=True)):
        rows.setdefault((id(bound), bool(overlapped)), []).append(i)
    for (_, overlapped), mine in rows.items():
        bound = bounds[mine[0]]
        best: float | np.ndarray = bound.compute
        if len(bound.after) and not overlapped:
            rate = np.stack([links[i].rate for i in mine])  # [points, nodes]
            efficiency = np.array([links[i].efficiency for i in mine])
            slowest = np.where(bound.nodes, rate[:, None, :], np.inf).min(axis=2)
            best = np.maximum(best, np.max(
                bound.after + bound.flow_bytes / (efficiency[:, None] * slowest), axis=1))
        out[mine] = best * (1.0 - MARGIN)
    return out


def bound_parts(plan: pb.DeploymentPlan, catalog: Catalog) -> Bound:
    """The :class:`Bound` of ``plan``: everything but its nodes' NICs (which it reads only
    under expert parallelism, where :func:`shared_by` says so) and its DP overlap, which
    decides whether the bound's DP part counts (:meth:`Bound.seconds`)."""
    model = resolve_model(plan, catalog)
    stack = stack_of(plan, catalog)
    node_of_rank = []
    nodes = resolve_nodes(plan.cluster, catalog)
    for index, node in enumerate(nodes):
        node_of_rank += [index] * node.num_gpus
    stages: dict[int, dict[int, tuple]] = {}
    fanout = expert_fanout(plan, stack.expert_parallel, node_of_rank,
                           model if stack.moe_dispatcher == "deepep" else None)
    efficiency = _efficiency_between(nodes)
    for group in plan.device_groups:
        cp = max(group.context_parallel, 1)
        ranks = list(group.ranks)[:len(group.ranks) // cp]  # CP rank 0's TP group
        node = nodes[node_of_rank[ranks[0]]]
        forward, backward, ring, chunk_f, chunk_b = _pass_times(
            model, node.gpu, len(ranks), group.micro_batch_size, group.first_layer,
            group.last_layer, stack, cp)
        tp_s = 0.0
        if len({node_of_rank[r] for r in ranks}) == 1:  # a ring inside one node
            link = node.scale_up_link
            # the all-to-alls (EP) ride in the same TP tasks: a task lasts at least its
            # longest flow, so the passes at least the longer of the two sums
            tp_s = max(ring_bytes / link.bus_efficiency / (node.scale_up_gbps * 1e9 / 8)
                       + hops * 2 * node.scale_up_latency_ns * 1e-9
                       + launches * link.launch_latency_us * 1e-6
                       for ring_bytes, hops, launches in ring)
            if len(ring) > 1 and stack.expert_parallel > len(ranks):
                tp_s = max(tp_s, _a2a_across_s(node, ring[1], fanout[group.id], efficiency))
        # overlapped, each piece takes the longer of its compute and its TP ring: at
        # least the longer of their sums
        own = (max(forward + backward, tp_s) if stack.tp_comm_overlap
               else forward + backward + tp_s)
        stages.setdefault(group.dp_replica, {})[group.pp_stage] = (
            group.num_micro_batches * own, chunk_f, chunk_b, group)
    best = 0.0
    ends: dict[int, float] = {}  # group id -> the least time its last backward ends
    for replica in stages.values():
        order = sorted(replica)
        before = 0.0  # a chunk's forward and backward on every earlier stage
        fill, filled = 0.0, {}  # a chunk's forward on every earlier stage, per stage
        for index in order:
            passes, chunk_f, chunk_b, _ = replica[index]
            filled[index] = fill
            best = max(best, before + passes)
            before += chunk_f + chunk_b
            fill += chunk_f
        # a stage's last backward ends once its passes have run after the first forward's
        # way to it, and once the next stage's last backward has ended and it has run
        later = None  # the next stage's
        for index in reversed(order):
            passes, _, chunk_b, group = replica[index]
            end = filled[index] + passes
            if later is not None:
                end = max(end, later + chunk_b)
            ends[group.id] = later = end
    return Bound(best, *_gradient_syncs(plan, stack, model, ends, node_of_rank, len(nodes)))


def _gradient_syncs(plan: pb.DeploymentPlan, stack: Stack, model: ModelSpec,
                    ends: dict[int, float], node_of_rank: list[int],
                    num_nodes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:class:`Bound`'s ``after``, ``flow_bytes`` and ``nodes``: the DP groups whose
    gradient collective the bound counts (see the module docstring), where the lowering
    gives each one collective after its members' last backward pieces: ZeRO 0 or 1, no
    interleaving, experts or context parallelism, and no DP overlap (a per-point field,
    which :meth:`Bound.seconds` reads). The collective runs one ring per LCM chunk over
    one rank of each member, all its flows carrying one payload; a ring that spans nodes
    sends a flow out of each of its nodes to another node, so the collective lasts at
    least that payload over the slowest rate of those nodes."""
    none = (np.zeros(0), np.zeros(0), np.zeros((0, num_nodes), bool))
    if (stack.zero_stage not in (0, 1) or stack.expert_parallel > 1
            or stack.virtual_pipeline_stages > 1
            or any(g.context_parallel > 1 for g in plan.device_groups)):
        return none
    # each group's first and last layer, the node of each of its ranks, and its id
    groups = [(g.first_layer, g.last_layer, [node_of_rank[r] for r in g.ranks], g.id)
              for g in plan.device_groups]
    cuts = sorted({x for first, last, _, _ in groups for x in (first, last + 1)})
    passes = REDUCE_SCATTER if stack.zero_stage == 1 else ALLREDUCE
    found: dict[int, list] = {}
    for first, _, _, gid in groups:  # the DP group whose segment starts at the group's
        if first not in found:
            last = cuts[cuts.index(first) + 1] - 1
            members = [nodes for lo, hi, nodes, _ in groups if lo <= first and hi >= last]
            chunks = math.lcm(*map(len, members))
            # ring c: rank c (mod its TP) of each member; one that spans nodes has a flow
            # out of each of its nodes to another node (a cycle leaves every value it holds)
            spanning: set[int] = set()
            for c in range(chunks):
                ring = {nodes[c % len(nodes)] for nodes in members}
                if len(ring) > 1:
                    spanning |= ring
            if len(members) < 2 or not spanning:
                found[first] = []
                continue
            mask = np.zeros(num_nodes, bool)
            mask[list(spanning)] = True
            chunk = _grad_bytes(model, first, last) / chunks
            found[first] = [0.0, pipelined_ring_flow(len(members), chunk, 1.0, passes)[0], mask]
        entry = found[first]
        if entry:
            entry[0] = max(entry[0], ends[gid])
    kept = [e for e in found.values() if e]
    if not kept:
        return none
    return (np.array([e[0] for e in kept]), np.array([e[1] for e in kept]),
            np.array([e[2] for e in kept]))


def shared_by(plan: pb.DeploymentPlan) -> tuple[bytes, ...]:
    """What, besides its layout, :func:`bound_parts` reads of ``plan``: nothing without
    expert parallelism; with it, the cluster (the NICs that all-to-alls across nodes leave
    through) and the training options (the dispatcher). Plans of one layout with equal
    keys have equal parts (their NICs enter through :func:`links_of`, their DP overlap
    through :meth:`Bound.seconds`)."""
    if plan.training.expert_parallel <= 1:
        return ()
    return (plan.cluster.SerializeToString(deterministic=True),
            plan.training.SerializeToString(deterministic=True))


def expert_fanout(plan: pb.DeploymentPlan, ep: int, node_of_rank: list[int],
                  deepep: ModelSpec | None = None) -> dict[int, tuple[float, float]]:
    """Per device group id whose EP group spans replicas (EP above its TP degree): the
    largest all-to-all flow one of its ranks sends to a rank of its EP group on its own
    node, and the largest to a rank on another node, as multiples of the all-to-all's
    pair bytes (0: no such flow). An EP group is the groups of ``EP / TP`` consecutive
    replicas of one pipeline stage (in replica order), as the plan's validation and the
    lowering lay it out (under context parallelism, those of ``EP / (TP x CP)``
    replicas), or under context parallelism the TP ranks of ``EP / TP`` consecutive CP
    ranks of a group. Under DeepEP's dispatch (``deepep``: the model) a
    rank's flows on its node carry ``nodes`` pair bytes each and its flow to another node
    ``reach x width / top_k`` pair bytes (:func:`xsweep.plan.workload.deepep_factors`;
    the validation spreads its EP group evenly)."""
    stages: dict[int, list] = {}
    for group in sorted(plan.device_groups, key=lambda g: g.dp_replica):
        stages.setdefault(group.pp_stage, []).append(group)
    out = {}
    for members in stages.values():
        cp = max(members[0].context_parallel, 1)
        size = len(members[0].ranks)  # TP x CP
        if ep <= size // cp:
            continue
        if cp > 1 and ep <= size:  # EP over the TP ranks of ep / tp CP ranks of each group
            for g in members:
                teams = [[node_of_rank[r] for r in g.ranks[i:i + ep]]
                         for i in range(0, len(g.ranks), ep)]
                out[g.id] = tuple(max(part) for part in zip(
                    *(_fanout(nodes, nodes, deepep) for nodes in teams), strict=True))
            continue
        fold = ep // size
        for start in range(0, len(members) - fold + 1, fold):
            team = members[start:start + fold]
            nodes = [node_of_rank[r] for g in team for r in g.ranks]
            for g in team:
                out[g.id] = _fanout(nodes, [node_of_rank[r] for r in g.ranks], deepep)
    return out


def _fanout(nodes: list[int], own: list[int],
            deepep: ModelSpec | None) -> tuple[float, float]:
    """:func:`expert_fanout` of the ranks on nodes ``own`` in an EP group on ``nodes`` (a
    node per rank)."""
    spans = len(set(nodes))
    near = float(max(nodes.count(n) for n in own) > 1)
    far = float(any(nodes.count(n) < len(nodes) for n in own))
    if deepep is not None and spans > 1:
        mate, rail = deepep_factors(deepep, len(nodes), spans)
        return near * mate, far * rail
    return near, far


def _a2a_across_s(node, a2a: tuple[float, float, float], fanout: tuple[float, float],
                  efficiency: float) -> float:
    """At least the time of a pass's all-to-alls over an EP group that spans replicas:
    ``a2a`` (bytes, hops, launches of each flow), ``fanout`` the largest flow a rank sends
    on its node and to another node (:func:`expert_fanout`), ``efficiency`` the highest bus
    efficiency of a path between nodes. Each flow waits its hops and launches first (at
    the launch latency of a link of its path at least), then moves its bytes over its
    path: the scale-up link on its node, the PCIe path and the NIC to another node."""
    nbytes, hops, launches = a2a
    near, far = fanout
    link = node.scale_up_link
    near_s = (hops * 2 * node.scale_up_latency_ns * 1e-9
              + launches * link.launch_latency_us * 1e-6
              + near * nbytes / link.bus_efficiency / (node.scale_up_gbps * 1e9 / 8)
              if near else 0.0)
    if not far:
        return near_s
    nic = node.nic
    rate = min(nic.bandwidth_gbps, node.gpu.pcie_gbps) * 1e9 / 8
    far_s = (launches * max(nic.launch_latency_us, node.pcie_link.launch_latency_us) * 1e-6
             + far * nbytes / efficiency / rate)
    return max(near_s, far_s)


#: Unsharded gradient bytes of a model's layers first..last, kept per model and layers.
_grad_bytes = functools.lru_cache(maxsize=65536)(segment_grad_bytes)


@functools.lru_cache(maxsize=65536)
def _pass_times(model: ModelSpec, gpu: GpuSpec, tp: int, b: int, first: int, last: int,
                stack: Stack,
                cp: int = 1) -> tuple[float, float, tuple[tuple[float, float, float], ...], float,
                                      float]:
    """Forward and backward compute of one micro-batch, the bytes, hops and launches each
    flow of its TP rings waits for (forward and backward together; 0 without TP) and,
    under expert parallelism, each flow of its all-to-alls, and the least forward and the
    least backward compute of one model chunk (its stage's fastest layers)."""
    c = cached_stage_cost(model, gpu, tp, b, first, last, stack, None, cp)
    size = (last - first + 1) // max(stack.virtual_pipeline_stages, 1)
    chunk_f = sum(sorted(c.layer_forward_time_s)[:size])
    chunk_b = sum(sorted(c.layer_backward_time_s)[:size])
    ring = (0.0, 0.0, 0.0)
    if tp > 1:
        counts = (c.tp_allreduces_forward, c.tp_allreduces_backward)
        flows = [pipelined_ring_flow(tp, c.tp_allreduce_bytes, count) for count in counts]
        ring = (sum(f[0] for f in flows), sum(f[1] for f in flows),
                sum(counts) * c.tp_ops_per_allreduce)
    a2a = sum(c.a2a_forward) + sum(c.a2a_backward)  # MoE all-to-alls (EP above 1)
    if a2a:
        nbytes, hops = all_to_all_flow(c.a2a_pair_bytes, a2a)
        return c.forward_time_s, c.backward_time_s, (ring, (nbytes, hops, a2a)), chunk_f, chunk_b
    return c.forward_time_s, c.backward_time_s, (ring,), chunk_f, chunk_b


def cluster_rates_of(plan: pb.DeploymentPlan, catalog: Catalog,
                     cost: CostModel = DEFAULT_COST) -> tuple[float, float]:
    """The capex and hourly rate of ``plan``'s whole cluster priced by ``cost``, as the
    evaluator gives them (every GPU and NIC port of every node)."""
    rates = node_rates(resolve_nodes(plan.cluster, catalog), cost)
    return rates["capex_usd"], rates["cost_rate_usd_per_hour"]


def closed_form_metrics(plan: pb.DeploymentPlan, catalog: Catalog,
                        cost: CostModel = DEFAULT_COST, seconds: float | None = None,
                        rates: tuple[float, float] | None = None) -> dict[str, float]:
    """The tier's metrics of ``plan`` priced by ``cost`` (:data:`METRICS`, with the capex
    and hourly rate of the cluster, which need no time); ``seconds`` and ``rates``, where
    given, are the plan's :func:`iteration_lower_bound` and :func:`cluster_rates_of`."""
    seconds = iteration_lower_bound(plan, catalog) if seconds is None else seconds
    capex, rate = cluster_rates_of(plan, catalog, cost) if rates is None else rates
    model = resolve_model(plan, catalog)
    tokens = float(plan.training.global_batch_size * model.seq_length)
    return {name: float(value) for name, value in metric_arrays(
        seconds, tokens, plan.training.total_tokens, capex, rate).items()}


def metric_arrays(seconds, tokens, total_tokens, capex, rate) -> dict[str, np.ndarray]:
    """The tier's metrics (:data:`METRICS`, capex and hourly rate) element-wise over arrays
    (or numbers): the iteration bound ``seconds``, the tokens of an iteration, the run's
    tokens, the cluster's capex and hourly rate."""
    seconds = np.asarray(seconds, float)
    tokens = np.asarray(tokens, float)
    runs = run_costs(seconds, tokens, total_tokens, capex, rate)
    with np.errstate(divide="ignore"):
        per_s = np.where(seconds > 0, tokens / np.where(seconds > 0, seconds, 1.0), np.inf)
    return {"iteration_time_s": seconds, "tokens_per_s": per_s,
            **{name: runs[name] for name in METRICS[2:]},
            "capex_usd": np.asarray(capex, float), "cost_rate_usd_per_hour": np.asarray(rate, float)}
