"""The reference lowering: one task at a time, as readable as the semantics it spells out.

``xsweep.plan.lower`` builds the same programs from cached structures and arrays;
``test_lower_identity.py`` checks that the two agree bit for bit.

Semantics (what one task stands for):

* a pass (forward or backward, one micro-batch, one model chunk under interleaving)
  of one device group is one COMPUTE task on its stream and one blocking TP task,
  (with ``tp_comm_overlap``: a TP task beside the compute, waiting for what the compute
  waits for, and a zero-length TP task on the stream after both; under context
  parallelism the CP ring is such a task beside the compute, with the TP rings if they
  overlap, and the task after both runs the TP rings if they do not),
  or several such pieces: the last backward of each chunk is cut at the DP segment
  and gradient-bucket boundaries; with ZeRO-1 and overlap the first forward of each
  chunk is cut the same way and each piece waits for its bucket's parameter
  all-gather; under FSDP every pass is cut into layers;
* the TP all-reduces of a piece (its layers' where layers differ: at EP = TP without
  shared experts a MoE layer keeps only the attention's) are one pipelined ring: each
  rank sends
  ``2(k-1)/k x n x S`` bytes to its successor after ``2(k-1) n`` hop latencies and
  ``n`` NCCL launches per operation (two per all-reduce under sequence parallelism);
* with expert parallelism (EP above 1), the TP task of a piece with MoE layers also
  carries their all-to-alls (dispatch and combine, twice more under full recompute):
  every rank of the group sends every other rank ``n x P`` bytes after ``n`` hop
  latencies and ``n`` NCCL launches, ``n`` the piece's all-to-alls and ``P`` the
  stage cost's ``a2a_pair_bytes``;
  under context parallelism one such ring per CP rank (a group's ranks are TP fastest);
* context parallelism's ring attention: every rank sends its K/V block to the same TP
  rank of the next CP rank, ``cp - 1`` steps per block of a forward pass (the backward
  moves K/V and their gradients: twice the steps, three times with recompute), one hop
  latency and one NCCL launch per step;
* activations and gradients move between consecutive virtual stages (chunk ``c`` of
  the last stage feeds chunk ``c + 1`` of the first), one COMM task per phase; with
  ``pp_p2p_overlap`` off the sending stream's next task (or its optimizer step) waits for
  the last phase;
* per DP group and bucket: a barrier on the member pieces that complete the bucket,
  then one COMM task of pipelined rings, one per LCM chunk ring: an all-reduce of the
  bucket's gradients, or a reduce-scatter under ZeRO-1; where EP groups span ``r``
  replicas, those rings carry the dense gradients and, for a bucket with MoE layers,
  the task also holds per chunk ``r`` rings over the replicas at one place in their EP
  groups (every ``r``-th, from the place on) on each rank's own ``experts / EP``
  experts' gradients (none of one replica);
* ZeRO-1 all-gathers the updated parameters per bucket after the members' optimizer
  steps, or with overlap at the start of the iteration, one bucket after another;
* FSDP: before each layer piece an all-gather of that layer's parameters over its DP
  group, issued when the previous gather is done and every member has finished the
  compute two pieces back; after each backward layer piece, once every member has
  it, a reduce-scatter of the layer's gradients, one after another; the last waits on
  a barrier over the members' last pieces;
* the optimizer step is one COMPUTE task per group after its DP collectives.

Streams are visited round-robin and each runs its pieces as far as their inputs
exist; under FSDP all replicas together, else one replica at a time.
"""

from __future__ import annotations

from xsweep.plan import reshard as reshard_mod
from xsweep.plan.analysis import GroupInfo, PlanAnalysis
from xsweep.plan.collectives import (
    ALLGATHER,
    ALLREDUCE,
    REDUCE_SCATTER,
    all_to_all,
    pipelined_ring,
)
from xsweep.plan.groups import chunk_bytes_per_rank
from xsweep.plan.program import Category, Program, ProgramBuilder
from xsweep.plan.schedule import stage_order
from xsweep.plan.transport import flow_numbers
from xsweep.plan.workload import BF16_BYTES, deepep_factors, moe_layers_in, rank_expert_params


class _Lowering:
    def __init__(self, a: PlanAnalysis):
        self.a = a
        topo = a.topology
        self.topo = topo
        self.v = a.stack.virtual_pipeline_stages
        self.b = ProgramBuilder(
            topo.capacity, topo.latency_s, topo.names,
            rank_node=[topo.node_of(r) for r in range(topo.num_ranks)],
        )
        self.streams = [self.b.add_stream(g.id, g.ranks) for g in a.groups]
        self.last = [None] * len(a.groups)  # last task on each stream
        self.cuts = sorted({g.first_layer for g in a.dp_groups}
                           | {g.last_layer + 1 for g in a.dp_groups}
                           | {x for starts in a.dp_buckets + a.expert_buckets for x in starts})
        self.piece_end: dict[tuple[int, int], int] = {}  # (group id, first layer) -> task
        self.gather: dict[tuple[int, int], int] = {}  # (group id, layer) -> ZeRO-1 gather
        self.zero1 = a.stack.zero_stage == 1 and bool(a.dp_groups)

    # -- flows ---------------------------------------------------------------------------
    def _flow(self, src, dst, nbytes, hops=1, launches=0, p2p=False):
        path = self.topo.path(src, dst)
        wire, extra_s = flow_numbers(self.topo, path, nbytes, launches=launches, p2p=p2p)
        return (src, dst, wire, hops * self.topo.path_latency_s(path) + extra_s, path)

    def _ring_flows(self, dpg, first, last, passes, gather=False, part="both"):
        """A collective of a DP group on layers first..last: a pipelined ring per chunk;
        where EP groups span ``r`` replicas, those rings on the dense gradients and, if
        the layers hold experts, per chunk ``r`` rings on the experts' (below): both, or
        with ``part`` only the dense ones or only the experts' (the experts in buckets of
        their own). A parameter ``gather`` moves the FP8 copies' bytes with
        ``fp8_param_gather`` (not with experts: no expert ring meets it)."""
        a = self.a
        if gather and a.stack.fp8_param_gather:
            chunk = chunk_bytes_per_rank(a.fp8_gather_bytes(first, last), dpg.tps)
            return [self._flow(src, dst, nbytes, hops=hops, launches=1)
                    for ring in dpg.rings
                    for src, dst, nbytes, hops in pipelined_ring(ring.ranks, chunk, 1.0, passes)]
        tp, ep = min(dpg.tps), a.stack.expert_parallel
        fold = ep // tp if ep > tp else 1
        total = a.grad_bytes(first, last, fold)
        # what each rank holds of its experts/EP experts: one chunk of the expert rings
        expert = BF16_BYTES * rank_expert_params(a.model, tp, first, last, ep) if fold > 1 else 0
        chunk = chunk_bytes_per_rank(total - tp * expert, dpg.tps)
        flows = [] if part == "experts" else [
            self._flow(src, dst, nbytes, hops=hops, launches=1) for ring in dpg.rings
            for src, dst, nbytes, hops in pipelined_ring(ring.ranks, chunk, 1.0, passes)]
        if expert and part != "dense":
            flows += [self._flow(src, dst, nbytes, hops=hops, launches=1)
                      for ranks in self._expert_rings(dpg, fold)
                      for src, dst, nbytes, hops in pipelined_ring(ranks, expert, 1.0, passes)]
        return flows

    def _expert_rings(self, dpg, fold):
        """Per chunk, per place ``q`` in an EP group (``fold`` consecutive replicas of the
        stage), the chunk's ranks of the members at that place, in replica order: those
        that hold the same experts. Under context parallelism an EP group is ``fold``
        consecutive CP ranks of a group: per chunk, per place ``q``, the chunk's rank of
        CP ranks ``q, q + fold, ...`` of each member, members in id order; or, with
        ``fold`` a multiple of CP, the whole groups of ``fold / cp`` replicas: per chunk,
        per place, per CP rank, that rank's of the members at that place."""
        members = sorted((self.a.groups[self.a.index_of(dg)] for dg in dpg.device_groups),
                         key=lambda g: g.replica)
        cp = members[0].cp
        if cp > 1 and cp % fold == 0:
            members.sort(key=lambda g: g.id)
            return [[g.ranks[j * g.tp + c % g.tp] for g in members
                     for j in range(q, g.cp, fold)] for c in range(dpg.lcm) for q in range(fold)]
        if cp > 1:  # EP over the whole groups of fold / cp replicas: per place, per CP rank
            r = fold // cp
            return [[g.ranks[j * g.tp + c % g.tp] for i, g in enumerate(members) if i % r == q]
                    for c in range(dpg.lcm) for q in range(r) for j in range(cp)]
        return [[g.ranks[c % g.tp] for i, g in enumerate(members) if i % fold == q]
                for c in range(dpg.lcm) for q in range(fold)]

    # -- pieces --------------------------------------------------------------------------
    def _pieces(self, g: GroupInfo, p: int):
        """(kind, mb, chunk, lo, hi exclusive, index in pass, pieces in pass, role) in order."""
        order = stage_order(self.a.schedule, g.stage, p, g.num_micro_batches, self.v)
        size = (g.last_layer - g.first_layer + 1) // self.v
        out = []
        for i, (kind, mb, c) in enumerate(order):
            lo, hi = g.first_layer + c * size, g.first_layer + (c + 1) * size
            later = [k for k, _, cc in order[i + 1:] if cc == c]
            earlier = [k for k, _, cc in order[:i] if cc == c]
            if self.a.fsdp:
                role, edges = "layer", list(range(lo, hi + 1))
            elif kind == "B" and "B" not in later:
                role = "last_b"
            elif kind == "F" and self.zero1 and self.a.stack.dp_overlap and "F" not in earlier:
                role = "first_f"
            else:
                role = ""
            if role in ("last_b", "first_f"):
                edges = [lo] + [x for x in self.cuts if lo < x < hi] + [hi]
            elif not role:
                edges = [lo, hi]
            spans = list(zip(edges, edges[1:], strict=False))
            if kind == "B":
                spans = spans[::-1]
            out += [(kind, mb, c, x, y, j, len(spans), role) for j, (x, y) in enumerate(spans)]
        return out

    def _cp_flows(self, g: GroupInfo, kind: str, blocks: int):
        """A piece's CP ring: rank ``q * tp + i`` to rank ``(q + 1) mod cp * tp + i``."""
        if g.cp == 1:
            return []
        cost = g.cost
        factor = 1.0 if kind == "F" else 2.0 + (self.a.stack.recompute != "none")
        steps = cost.cp_steps * blocks * factor
        n = len(g.ranks)
        return [self._flow(g.ranks[j], g.ranks[(j + g.tp) % n], cost.cp_step_bytes * steps,
                           hops=steps, launches=steps) for j in range(n)]

    def _on_stream(self, gi: int, category, duration, deps, tp_count, mb, name, a2a_count=0,
                   cp_flows=()):
        g = self.a.groups[gi]
        labels = dict(stage=g.stage, micro_batch=mb, device_group=g.id, replica=g.replica)
        deps = [d for d in [self.last[gi], *deps] if d is not None]
        compute = self.b.add_compute(category, self.streams[gi], duration, deps, name=name,
                                     **labels)
        t = compute
        flows = [self._flow(src, dst, nbytes, hops=hops,
                            launches=tp_count * g.cost.tp_ops_per_allreduce)
                 for q in range(g.cp)
                 for src, dst, nbytes, hops in pipelined_ring(
                     g.ranks[q * g.tp:(q + 1) * g.tp], g.cost.tp_allreduce_bytes, tp_count)]
        flows += [self._flow(src, dst, nbytes, hops=hops, launches=a2a_count)
                  for src, dst, nbytes, hops in self._all_to_all(gi, a2a_count)]
        overlap = self.a.stack.tp_comm_overlap
        if cp_flows:  # the CP ring beside the compute, then a join (running the TP rings)
            beside = self.b.add_comm(Category.TP_BESIDE, (flows if overlap else []) + cp_flows,
                                     deps, stream=-1, name=f"cp {name}", **labels)
            t = self.b.add_comm(Category.TP, [] if overlap else flows, [compute, beside],
                                stream=self.streams[gi], name=f"cp join {name}", **labels)
        elif flows and overlap:  # beside the compute, then a join
            beside = self.b.add_comm(Category.TP_BESIDE, flows, deps, stream=-1,
                                     name=f"tp {name}", **labels)
            t = self.b.add_comm(Category.TP, [], [compute, beside], stream=self.streams[gi],
                                name=f"tp join {name}", **labels)
        elif flows:
            t = self.b.add_comm(Category.TP, flows, [t], stream=self.streams[gi],
                                name=f"tp {name}", **labels)
        self.last[gi] = t
        return compute, t

    def _all_to_all(self, gi: int, count: float) -> list:
        """The all-to-all flows the group's ranks send: from each of them to every other
        rank of its EP group (its own ranks, then its peers' in the order of their shift,
        as ``PlanAnalysis.ep_peers`` gives them)."""
        g = self.a.groups[gi]
        ranks = [r for p in self.a.ep_peers[gi] for r in self.a.groups[p].ranks]
        if len(ranks) == len(g.ranks):  # each CP rank's TP ranks among themselves, or with
            # EP above TP under CP those of EP / TP consecutive CP ranks
            w = max(g.tp, self.a.stack.expert_parallel)
            return [flow for q in range(len(g.ranks) // w) for flow in all_to_all(
                g.ranks[q * w:(q + 1) * w], g.cost.a2a_pair_bytes, count)]
        if count <= 0:
            return []
        pair = count * g.cost.a2a_pair_bytes
        node = self.a.topology.rank_nodes()
        nodes = {int(node[r]) for r in ranks}
        if self.a.stack.moe_dispatcher == "deepep" and len(nodes) > 1:
            # DeepEP: on its node to every rank, to another node only to the rank at its
            # own place there (places by rank among the EP group's ranks on a node)
            def place(r):
                return sorted(x for x in ranks if node[x] == node[r]).index(r)

            mate, rail = deepep_factors(self.a.model, len(ranks), len(nodes))
            return [(g.ranks[i], ranks[j], pair * (mate if node[ranks[j]] == node[g.ranks[i]]
                                                   else rail), count)
                    for i in range(len(g.ranks)) for j in range(len(ranks))
                    if i != j and (node[ranks[j]] == node[g.ranks[i]]
                                   or place(ranks[j]) == place(g.ranks[i]))]
        return [(g.ranks[i], ranks[j], pair, count)
                for i in range(len(g.ranks)) for j in range(len(ranks)) if i != j]

    def _piece(self, gi, kind, mb, c, lo, hi, role, deps):
        g = self.a.groups[gi]
        cost = g.cost
        n = g.last_layer - g.first_layer + 1
        i0, i1 = lo - g.first_layer, hi - g.first_layer
        times = cost.layer_forward_time_s if kind == "F" else cost.layer_backward_time_s
        total = cost.tp_allreduces_forward if kind == "F" else cost.tp_allreduces_backward
        name = f"{kind} dg{g.id} mb{mb}" + (f" c{c}" if self.v > 1 else "")
        if role:
            name += f" L{lo}-{hi - 1}"
        category = Category.FORWARD if kind == "F" else Category.BACKWARD
        a2a = cost.a2a_forward if kind == "F" else cost.a2a_backward
        per_layer = cost.tp_layer_forward if kind == "F" else cost.tp_layer_backward
        tp_count = sum(per_layer[i0:i1]) if per_layer else total * (i1 - i0) / n
        return self._on_stream(gi, category, sum(times[i0:i1]), deps, tp_count, mb, name,
                               sum(a2a[i0:i1]), self._cp_flows(g, kind, i1 - i0))

    def _transfer(self, src: GroupInfo, dst: GroupInfo, mb, c, after, backward):
        """Move one micro-batch's activations (or their gradients) between virtual stages."""
        transfers = reshard_mod.reshard(self.a.resharding, src.ranks, dst.ranks,
                                        src.cost.activation_bytes)
        category = Category.PP if src.tp == dst.tp else Category.RESHARD
        phases: dict[int, list] = {}
        for tr in transfers:
            phases.setdefault(tr.phase, []).append(self._flow(tr.src, tr.dst, tr.bytes,
                                                              p2p=True))
        t = after
        direction = "grad" if backward else "act"
        suffix = f" c{c}" if self.v > 1 else ""
        for phase in sorted(phases):
            t = self.b.add_comm(category, phases[phase], [t], stage=src.stage, micro_batch=mb,
                                device_group=src.id, replica=src.replica, phase=phase,
                                name=f"{direction} {src.id}->{dst.id} mb{mb}{suffix} p{phase}")
        return t

    def _replicas(self, replicas: list[tuple[int, ...]]):
        """Add every pass of ``replicas`` in an order that respects all dependencies."""
        groups = self.a.groups
        streams = [(gi, members) for members in replicas for gi in members]
        plans = {gi: self._pieces(groups[gi], len(members)) for gi, members in streams}
        pos = dict.fromkeys(plans, 0)
        arrived: dict[tuple, int] = {}  # (kind, group index, mb, chunk) -> input transfer
        fsdp = _Fsdp(self, replicas, plans) if self.a.fsdp else None
        while any(pos[gi] < len(plans[gi]) for gi in plans):
            progressed = False
            for gi, members in streams:
                s = groups[gi].stage
                while pos[gi] < len(plans[gi]):
                    kind, mb, c, lo, hi, j, n, role = plans[gi][pos[gi]]
                    deps = self._inputs(gi, len(members), plans[gi][pos[gi]], pos[gi], arrived,
                                        fsdp)
                    if deps is None:
                        break
                    compute, t = self._piece(gi, kind, mb, c, lo, hi, role, deps)
                    if role == "last_b":
                        self.piece_end[(groups[gi].id, lo)] = t
                    if fsdp is not None:
                        fsdp.done(gi, pos[gi], compute, t)
                    if j == n - 1:
                        self._send(members, s, kind, mb, c, t, arrived)
                    pos[gi] += 1
                    progressed = True
            assert progressed, "pipeline schedule deadlocked"
        return fsdp.finals if fsdp is not None else {}

    def _inputs(self, gi, p, piece, i, arrived, fsdp):
        """What piece ``i`` (``piece``) of group ``gi``, in a replica of ``p`` stages,
        waits for: its input transfer, its FSDP gather (issued now if it can be) and its
        ZeRO-1 parameter gather; None while one of them is not added yet."""
        kind, mb, c, lo, _, j, _, role = piece
        deps = []
        is_start = (self.a.groups[gi].stage, c) == ((0, 0) if kind == "F" else (p - 1, self.v - 1))
        if j == 0 and not is_start:
            if (kind, gi, mb, c) not in arrived:
                return None
            deps.append(arrived[(kind, gi, mb, c)])
        if fsdp is not None:
            gather = fsdp.gather(gi, i)
            if gather is None:
                return None
            deps.append(gather)
        gid = self.a.groups[gi].id
        if role == "first_f" and (gid, lo) in self.gather:
            deps.append(self.gather[(gid, lo)])
        return deps

    def _send(self, members, s, kind, mb, c, t, arrived):
        """The transfer of a pass's output to the next (forward) or previous virtual stage."""
        p, v, groups = len(members), self.v, self.a.groups
        if kind == "F":
            to = (s + 1, c) if s + 1 < p else (0, c + 1) if c + 1 < v else None
        else:
            to = (s - 1, c) if s > 0 else (p - 1, c - 1) if c > 0 else None
        if to is not None:
            dst = members[to[0]]
            sent = self._transfer(groups[members[s]], groups[dst], mb, c, t, kind == "B")
            arrived[(kind, dst, mb, to[1])] = sent
            if not self.a.stack.pp_p2p_overlap:  # blocking: the stream waits for its send
                self.last[members[s]] = sent

    def _dp_sync(self) -> dict[int, list[int]]:
        """Barrier + all-reduce (ZeRO-1: reduce-scatter) per DP group and bucket; returns
        group id -> the collectives its optimizer waits for."""
        finals: dict[int, list[int]] = {}
        passes, verb = (REDUCE_SCATTER, "rs") if self.zero1 else (ALLREDUCE, "dp")
        for d, dpg in enumerate(self.a.dp_groups):
            for lo, hi, part in self._buckets(d):
                kind = " experts" if part == "experts" else ""
                members = [self.piece_end[(dg, lo)] for dg in dpg.device_groups]
                barrier = self.b.add_compute(Category.BARRIER, -1, 0.0, members,
                                             name=f"dp barrier{kind} L{lo}-{hi}", phase=d)
                t = self.b.add_comm(Category.DP, self._ring_flows(dpg, lo, hi, passes,
                                                                  part=part),
                                    [barrier], name=f"{verb}{kind} L{lo}-{hi}")
                for dg in dpg.device_groups:
                    finals.setdefault(dg, []).append(t)
        return finals

    def _buckets(self, d: int) -> list[tuple[int, int, str]]:
        """(first, last, part) of DP group ``d``'s buckets: all of them carrying both kinds
        of gradients, unless the experts have buckets of their own (EP groups over
        replicas, overlapped reduction): then the dense buckets, then the expert buckets
        that hold MoE layers."""
        a = self.a
        experts = [(lo, hi, "experts") for lo, hi in a.buckets(d, experts=True)
                   if moe_layers_in(a.model, lo, hi)]
        part = "dense" if a.buckets(d, experts=True) else "both"
        return [(lo, hi, part) for lo, hi in a.buckets(d)] + experts

    def _param_gathers(self, after: dict[int, int] | None):
        """ZeRO-1's parameter all-gather per DP group and bucket, after the optimizers or
        (``after`` None) at the start, bucket after bucket (the two kinds by first layer,
        dense first, where the experts have buckets of their own)."""
        for d, dpg in enumerate(self.a.dp_groups):
            previous = []
            order = sorted(self._buckets(d), key=lambda b: (b[0], b[2] == "experts"))
            for lo, hi, part in order:
                kind = " experts" if part == "experts" else ""
                deps = previous if after is None else [after[dg] for dg in dpg.device_groups]
                t = self.b.add_comm(Category.DP, self._ring_flows(dpg, lo, hi, ALLGATHER, True,
                                                                  part),
                                    deps, name=f"ag{kind} L{lo}-{hi}")
                previous = [t]
                for dg in dpg.device_groups:
                    for layer in range(lo, hi + 1):
                        self.gather[(dg, layer)] = t

    def run(self) -> Program:
        overlapped = self.a.stack.dp_overlap
        if self.zero1 and overlapped:
            self._param_gathers(None)
        replicas = list(self.a.replicas.values())
        if self.a.fsdp:
            finals = self._replicas(replicas)
        else:
            for members in replicas:
                self._replicas([members])
            finals = self._dp_sync()
        optimizers = {}
        for gi, g in enumerate(self.a.groups):
            deps = [d for d in [self.last[gi], *finals.get(g.id, [])] if d is not None]
            optimizers[g.id] = self.b.add_compute(
                Category.OPTIMIZER, self.streams[gi], g.optimizer_time_s, deps, stage=g.stage,
                device_group=g.id, replica=g.replica, name=f"optimizer dg{g.id}")
        if self.zero1 and not overlapped:
            self._param_gathers(optimizers)
        return self.b.build(
            tokens_per_iteration=self.a.tokens_per_iteration,
            model_flops_per_iteration=self.a.model_flops_per_iteration,
            peak_flops_per_s=self.a.peak_flops_per_s,
        )


class _Fsdp:
    """FSDP's per-layer collectives: for each pipeline stage, the DP group of that stage's
    groups in every replica (the replicas have the same stages, so the same pieces)."""

    def __init__(self, lowering: _Lowering, replicas, plans):
        self.low, self.plans = lowering, plans
        a = lowering.a
        index = {g.id: gi for gi, g in enumerate(a.groups)}
        self.dp_of = {}  # group index -> (DP group, member group indices in ring order)
        for dpg in a.dp_groups:
            members = [index[dg] for dg in dpg.device_groups]
            for gi in members:
                self.dp_of[gi] = (dpg, members)
        self.gathers: dict[int, list[int]] = {}  # by DP group's first layer
        self.scatter: dict[int, int] = {}
        self.computes = {gi: [] for gi in plans}
        self.ends = {gi: [] for gi in plans}
        self.finals: dict[int, list[int]] = {}

    def gather(self, gi: int, i: int):
        """The all-gather piece ``i`` of group ``gi`` waits for; issued now if it can be."""
        dpg, members = self.dp_of[gi]
        issued = self.gathers.setdefault(dpg.first_layer, [])
        if i < len(issued):
            return issued[i]
        if any(len(self.computes[m]) < i - 1 for m in members):
            return None
        kind, mb, _, layer, *_ = self.plans[gi][i]
        deps = issued[-1:] + ([self.computes[m][i - 2] for m in members] if i >= 2 else [])
        stage = self.low.a.groups[gi].stage
        flows = self.low._ring_flows(dpg, layer, layer, ALLGATHER, True)
        t = self.low.b.add_comm(Category.DP, flows, deps, stage=stage, micro_batch=mb,
                                name=f"ag L{layer} {kind} mb{mb}")
        issued.append(t)
        return t

    def done(self, gi: int, i: int, compute: int, end: int):
        """Piece ``i`` of ``gi`` was added; reduce-scatter a backward layer's gradients once
        every member has them."""
        self.computes[gi].append(compute)
        self.ends[gi].append(end)
        kind, mb, _, layer, *_ = self.plans[gi][i]
        dpg, members = self.dp_of[gi]
        if kind != "B" or any(len(self.ends[m]) <= i for m in members):
            return
        deps = [self.ends[m][i] for m in members]
        final = i == len(self.plans[gi]) - 1
        b = self.low.b
        if final:
            g = self.low.a.groups[gi]
            deps = [b.add_compute(Category.BARRIER, -1, 0.0, deps,
                                  name=f"dp barrier L{g.first_layer}-{g.last_layer}")]
        if dpg.first_layer in self.scatter:
            deps.append(self.scatter[dpg.first_layer])
        t = b.add_comm(Category.DP, self.low._ring_flows(dpg, layer, layer, REDUCE_SCATTER), deps,
                       stage=self.low.a.groups[gi].stage, micro_batch=mb,
                       name=f"rs L{layer} mb{mb}")
        self.scatter[dpg.first_layer] = t
        if final:
            for m in members:
                self.finals.setdefault(self.low.a.groups[m].id, []).append(t)


def reference_lower(analysis: PlanAnalysis) -> Program:
    """Build the program IR of one iteration of an analysed plan, one task at a time."""
    return _Lowering(analysis).run()
