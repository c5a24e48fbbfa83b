"""The reference lowering: one task at a time, as readable as the semantics it spells out.

``xsweep.plan.lower`` builds the same programs from cached structures and arrays;
``test_lower_identity.py`` checks that the two agree bit for bit.

Lowering: a plan's analysis -> the program IR of one training iteration.

Granularity (what one task stands for):

* one forward or backward pass of one device group on one micro-batch is one
  COMPUTE task on that group's stream, followed by one blocking TP task;
* the TP all-reduces of that pass (Megatron: two per block and direction) are
  lowered as one pipelined ring, as NCCL streams a ring: each rank sends one flow
  of ``2(k-1)/k * n * S`` bytes to its ring successor, after ``2(k-1) * n`` hop
  latencies. With nothing else on the scale-up links this takes exactly the time
  of ``n`` back-to-back ring all-reduces, ``n * 2(k-1)(alpha + S/(kB))``;
  NCCL's bus efficiency and launch latency (per operation: two per all-reduce under
  sequence parallelism) come on top, as numbers (:mod:`xsweep.plan.transport`);
* activations (forward) and their gradients (backward) between consecutive
  stages move as explicit transfers, one COMM task per resharding phase;
* the last backward pass of every group is cut at the sweep-line segment
  boundaries, so that each DP group starts synchronising (behind a BARRIER task)
  as soon as every member has produced the gradients of its segment;
* DP synchronisation is one ring all-reduce per LCM chunk ring, lowered step by
  step (``2(k-1)`` COMM tasks of concurrent flows), all rings of a group at once;
  its first step waits the launch latency;
* the optimizer step is one COMPUTE task per group after all its DP groups.
"""

from __future__ import annotations

from xsweep.plan import reshard as reshard_mod
from xsweep.plan.analysis import GroupInfo, PlanAnalysis
from xsweep.plan.collectives import ring_allreduce
from xsweep.plan.groups import chunk_bytes_per_rank
from xsweep.plan.program import Category, Program, ProgramBuilder
from xsweep.plan.schedule import stage_order
from xsweep.plan.transport import flow_numbers


class _Lowering:
    def __init__(self, a: PlanAnalysis):
        self.a = a
        topo = a.topology
        self.topo = topo
        self.b = ProgramBuilder(
            topo.capacity, topo.latency_s, topo.names,
            rank_node=[topo.node_of(r) for r in range(topo.num_ranks)],
        )
        self.streams = [self.b.add_stream(g.id, g.ranks) for g in a.groups]
        self.last = [None] * len(a.groups)  # last task on each stream
        self.boundaries = sorted({g.first_layer for g in a.dp_groups}
                                 | {g.last_layer + 1 for g in a.dp_groups})
        self.piece_end: dict[tuple[int, int], int] = {}  # (group id, first layer) -> task

    # -- flows ---------------------------------------------------------------------------
    def _flow(self, src, dst, nbytes, hops=1, launches=0, p2p=False):
        path = self.topo.path(src, dst)
        wire, extra_s = flow_numbers(self.topo, path, nbytes, launches=launches, p2p=p2p)
        return (src, dst, wire, hops * self.topo.path_latency_s(path) + extra_s, path)

    def _tp_flows(self, g: GroupInfo, count: float):
        k = g.tp
        if k == 1 or count <= 0:
            return []
        size = count * g.cost.tp_allreduce_bytes
        return [self._flow(g.ranks[i], g.ranks[(i + 1) % k], 2 * (k - 1) / k * size,
                           hops=2 * (k - 1) * count,
                           launches=count * g.cost.tp_ops_per_allreduce) for i in range(k)]

    # -- passes --------------------------------------------------------------------------
    def _on_stream(self, gi: int, category, duration, deps, tp_count, mb, name):
        g = self.a.groups[gi]
        labels = dict(stage=g.stage, micro_batch=mb, device_group=g.id, replica=g.replica)
        deps = [d for d in [self.last[gi], *deps] if d is not None]
        t = self.b.add_compute(category, self.streams[gi], duration, deps, name=name, **labels)
        flows = self._tp_flows(g, tp_count)
        if flows:
            t = self.b.add_comm(Category.TP, flows, [t], stream=self.streams[gi],
                                name=f"tp {name}", **labels)
        self.last[gi] = t
        return t

    def _transfer(self, src: GroupInfo, dst: GroupInfo, nbytes, mb, after, backward):
        """Move one micro-batch's activations (or their gradients) between stages."""
        transfers = reshard_mod.reshard(self.a.resharding, src.ranks, dst.ranks, nbytes)
        category = Category.PP if src.tp == dst.tp else Category.RESHARD
        phases: dict[int, list] = {}
        for tr in transfers:
            phases.setdefault(tr.phase, []).append(self._flow(tr.src, tr.dst, tr.bytes,
                                                              p2p=True))
        t = after
        direction = "grad" if backward else "act"
        for phase in sorted(phases):
            t = self.b.add_comm(category, phases[phase], [t], stage=src.stage, micro_batch=mb,
                                device_group=src.id, replica=src.replica, phase=phase,
                                name=f"{direction} {src.id}->{dst.id} mb{mb} p{phase}")
        return t

    def _backward(self, gi: int, mb: int, deps, last_of_stage: bool):
        g = self.a.groups[gi]
        cost = g.cost
        n_layers = g.last_layer - g.first_layer + 1
        if not last_of_stage:
            return self._on_stream(gi, Category.BACKWARD, cost.backward_time_s, deps,
                                   cost.tp_allreduces_backward, mb, f"B dg{g.id} mb{mb}")
        # cut at segment boundaries, last layers first (backward runs top down)
        cuts = [x for x in self.boundaries if g.first_layer < x <= g.last_layer]
        edges = [g.first_layer, *cuts, g.last_layer + 1]
        t = None
        for lo, hi in reversed(list(zip(edges, edges[1:], strict=False))):
            i0, i1 = lo - g.first_layer, hi - g.first_layer
            duration = sum(cost.layer_backward_time_s[i0:i1])
            count = cost.tp_allreduces_backward * (hi - lo) / n_layers
            t = self._on_stream(gi, Category.BACKWARD, duration, deps, count, mb,
                                f"B dg{g.id} mb{mb} L{lo}-{hi - 1}")
            deps = []
            self.piece_end[(g.id, lo)] = t
        return t

    def _replica(self, members: tuple[int, ...]):
        """Add every pass of one replica in an order that respects all dependencies."""
        groups = self.a.groups
        p = len(members)
        orders = [stage_order(self.a.schedule, s, p, groups[gi].num_micro_batches)
                  for s, gi in enumerate(members)]
        last_b = [max((i for i, (k, _) in enumerate(o) if k == "B"), default=-1) for o in orders]
        pos = [0] * p
        fwd_in: dict[tuple[int, int], int] = {}  # (stage, mb) -> arrival of activations
        bwd_in: dict[tuple[int, int], int] = {}  # (stage, mb) -> arrival of gradients
        while any(pos[s] < len(orders[s]) for s in range(p)):
            progressed = False
            for s, gi in enumerate(members):
                while pos[s] < len(orders[s]):
                    kind, mb = orders[s][pos[s]]
                    g = groups[gi]
                    if kind == "F":
                        if s > 0 and (s, mb) not in fwd_in:
                            break
                        deps = [fwd_in[(s, mb)]] if s > 0 else []
                        t = self._on_stream(gi, Category.FORWARD, g.cost.forward_time_s, deps,
                                            g.cost.tp_allreduces_forward, mb, f"F dg{g.id} mb{mb}")
                        if s + 1 < p:
                            fwd_in[(s + 1, mb)] = self._transfer(
                                g, groups[members[s + 1]], g.cost.activation_bytes, mb, t, False)
                    else:
                        if s + 1 < p and (s, mb) not in bwd_in:
                            break
                        deps = [bwd_in[(s, mb)]] if s + 1 < p else []
                        t = self._backward(gi, mb, deps, pos[s] == last_b[s])
                        if s > 0:
                            bwd_in[(s - 1, mb)] = self._transfer(
                                g, groups[members[s - 1]], g.cost.activation_bytes, mb, t, True)
                    pos[s] += 1
                    progressed = True
            assert progressed, "pipeline schedule deadlocked"

    def _dp_sync(self) -> dict[int, list[int]]:
        """Barrier + ring all-reduces per DP group; returns group id -> final tasks."""
        finals: dict[int, list[int]] = {}
        for gi, (dpg, nbytes) in enumerate(zip(self.a.dp_groups, self.a.dp_segment_bytes,
                                               strict=True)):
            members = [self.piece_end[(dg, dpg.first_layer)] for dg in dpg.device_groups]
            barrier = self.b.add_compute(Category.BARRIER, -1, 0.0, members,
                                         name=f"dp barrier L{dpg.first_layer}-{dpg.last_layer}",
                                         phase=gi)
            tps = [self.a.groups[self.a.index_of(dg)].tp for dg in dpg.device_groups]
            chunk = chunk_bytes_per_rank(nbytes, tps)
            ends = [barrier]
            for ring in dpg.rings:
                t = barrier
                for step, pairs in enumerate(ring_allreduce(list(ring.ranks), chunk)):
                    flows = [self._flow(*x, launches=step == 0) for x in pairs]
                    t = self.b.add_comm(Category.DP, flows, [t],
                                        phase=step,
                                        name=f"dp L{dpg.first_layer}-{dpg.last_layer} "
                                             f"ring{ring.chunk} step{step}")
                ends.append(t)
            for dg in dpg.device_groups:
                finals.setdefault(dg, []).extend(ends)
        return finals

    def run(self) -> Program:
        for members in self.a.replicas.values():
            self._replica(members)
        finals = self._dp_sync()
        for gi, g in enumerate(self.a.groups):
            self._on_stream(gi, Category.OPTIMIZER, g.optimizer_time_s, finals.get(g.id, []),
                            0, -1, f"optimizer dg{g.id}")
        return self.b.build(
            tokens_per_iteration=self.a.tokens_per_iteration,
            model_flops_per_iteration=self.a.model_flops_per_iteration,
            peak_flops_per_s=self.a.peak_flops_per_s,
        )


def reference_lower(analysis: PlanAnalysis) -> Program:
    """Build the program IR of one iteration of an analysed plan, one task at a time."""
    return _Lowering(analysis).run()
