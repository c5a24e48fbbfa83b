"""Named scenario programs with known answers, shared by the simulator and kernel tests.

Every function returns a :class:`~xsweep.plan.program.Program` built with
:class:`~xsweep.plan.program.ProgramBuilder`. Sizes are in bytes, bandwidths in
bytes/s, times in seconds.
"""

from __future__ import annotations

import numpy as np

from xsweep.plan.program import Category, Program, ProgramBuilder
from xsweep.plan.schedule import stage_order

GB = 1e9


def ring_allreduce_program(k: int, size_bytes: float, bandwidth_bytes_per_s: float,
                           alpha_s: float) -> Program:
    """A ring all-reduce of ``size_bytes`` over ``k`` ranks, each sending on its own link.

    ``2(k-1)`` chained steps; in each, rank ``i`` sends ``size_bytes / k`` to rank
    ``i+1`` after ``alpha_s``. Closed form: ``2(k-1)(alpha + S/(kB))``.
    """
    b = ProgramBuilder([bandwidth_bytes_per_s] * k, [alpha_s] * k,
                       [f"ring {i}->{(i + 1) % k}" for i in range(k)], rank_node=range(k))
    for r in range(k):
        b.add_stream(r, [r])
    chunk = size_bytes / k
    t = None
    for step in range(2 * (k - 1)):
        flows = [(i, (i + 1) % k, chunk, alpha_s, [i]) for i in range(k)]
        t = b.add_comm(Category.DP, flows, [] if t is None else [t], phase=step,
                       name=f"allreduce step {step}")
    return b.build()


def _emit_in_dependency_order(items, deps_of, emit):
    """Call ``emit(item, dep_ids)`` for every item once all the items it depends on have ids.

    ``items`` is a list of per-stream sequences; ``deps_of(item)`` names other items.
    Streams are visited round-robin so that the task ids stay in a readable order.
    """
    ids: dict = {}
    pos = [0] * len(items)
    while any(p < len(seq) for p, seq in zip(pos, items, strict=True)):
        progressed = False
        for s, seq in enumerate(items):
            while pos[s] < len(seq) and all(d in ids for d in deps_of(seq[pos[s]])):
                item = seq[pos[s]]
                ids[item] = emit(item, [ids[d] for d in deps_of(item)])
                pos[s] += 1
                progressed = True
        assert progressed, "dependency cycle"
    return ids


def gpipe_program(p: int, m: int, t_f: float, t_b: float, schedule: str = "gpipe",
                  virtual_stages: int = 1) -> Program:
    """``p`` equal pipeline stages, ``m`` micro-batches, no communication.

    One stream (one rank) per stage; each stage runs its passes in the order of
    ``schedule`` (``"gpipe"`` or ``"1f1b"``, interleaved over ``virtual_stages`` model
    chunks of ``t_f / v`` and ``t_b / v`` each), chained on its stream. The model runs
    chunk 0 of stages 0..p-1, then chunk 1, ...: a forward pass needs the forward of the
    virtual stage before it, a backward pass the backward of the virtual stage after it.
    Closed form: ``m (t_f + t_b) + (p - 1)(t_f + t_b) / v``.
    """
    v = virtual_stages
    b = ProgramBuilder([], [], [], rank_node=[0] * p)
    streams = [b.add_stream(s, [s]) for s in range(p)]
    orders = [[(s, *unit) for unit in stage_order(schedule, s, p, m, v)] for s in range(p)]
    position = {item: i for seq in orders for i, item in enumerate(seq)}

    def deps_of(item):
        s, kind, j, c = item
        i = position[item]
        deps = [orders[s][i - 1]] if i > 0 else []
        if kind == "F" and (s, c) != (0, 0):
            deps.append((s - 1, "F", j, c) if s > 0 else (p - 1, "F", j, c - 1))
        if kind == "B" and (s, c) != (p - 1, v - 1):
            deps.append((s + 1, "B", j, c) if s + 1 < p else (0, "B", j, c + 1))
        return deps

    def emit(item, dep_ids):
        s, kind, j, c = item
        category = Category.FORWARD if kind == "F" else Category.BACKWARD
        return b.add_compute(category, streams[s], (t_f if kind == "F" else t_b) / v, dep_ids,
                             stage=s, micro_batch=j, device_group=s, replica=0,
                             name=f"{kind} s{s} mb{j} c{c}")

    _emit_in_dependency_order(orders, deps_of, emit)
    return b.build()


def bottleneck_program(n: int, capacity: float, size_bytes: float = 1 * GB,
                       latency_s: float = 0.0) -> Program:
    """``n`` flows of ``size_bytes`` from ``n`` senders to one receiver through one link.

    Each flow also crosses its sender's own access link of the same capacity, so
    the shared link is the only bottleneck. Each flow gets ``capacity / n`` and all
    finish at ``latency_s + n * size_bytes / capacity``.
    """
    names = [f"access {i}" for i in range(n)] + ["bottleneck"]
    b = ProgramBuilder([capacity] * (n + 1), [0.0] * (n + 1), names, rank_node=range(n + 1))
    for r in range(n + 1):
        b.add_stream(r, [r])
    b.add_comm(Category.PP, [(i, n, size_bytes, latency_s, [i, n]) for i in range(n)],
               name="incast")
    return b.build()


def parking_lot_program(capacities=(1 * GB, 1 * GB), short_flows=(2, 1),
                        size_bytes: float = 1 * GB) -> Program:
    """The two-bottleneck parking lot: one long flow over two links, short flows on each.

    Flow 0 crosses link 0 then link 1; then come ``short_flows[0]`` flows on link 0
    alone and ``short_flows[1]`` flows on link 1 alone. The initial max-min rates
    are :func:`parking_lot_rates`.
    """
    a, c = short_flows
    b = ProgramBuilder(list(capacities), [0.0, 0.0], ["link 0", "link 1"],
                       rank_node=range(2 + a + c))
    flows = [(0, 1, size_bytes, 0.0, [0, 1])]
    flows += [(2 + i, 1, size_bytes, 0.0, [0]) for i in range(a)]
    flows += [(2 + a + i, 1, size_bytes, 0.0, [1]) for i in range(c)]
    b.add_comm(Category.PP, flows, name="parking lot")
    return b.build()


def parking_lot_rates(capacities=(1 * GB, 1 * GB), short_flows=(2, 1)):
    """Max-min rates of :func:`parking_lot_program` as (long, short on link 0, short on link 1).

    The link with the smaller equal share is the first bottleneck: it fixes the long
    flow and its own short flows; the other link's short flows share what is left.
    """
    (c0, c1), (a, c) = capacities, short_flows
    share0, share1 = c0 / (a + 1), c1 / (c + 1)
    if share0 <= share1:
        return share0, share0, (c1 - share0) / c if c else 0.0
    return share1, (c0 - share1) / a if a else 0.0, share1


def two_replica_dp_program(delta_s: float, *, t_f: float = 0.010, t_b: float = 0.020,
                           t_opt: float = 0.002, tp: int = 2, dp_bytes: float = 0.5 * GB,
                           bandwidth_bytes_per_s: float = 25 * GB,
                           alpha_s: float = 5e-6) -> Program:
    """Two DP replicas of one stage whose backward passes differ by ``delta_s``.

    Replica 0 is the fast one. Each replica is one stream of ``tp`` ranks running
    forward, backward; a BARRIER waits for both; rank ``i`` of replica 0 and rank
    ``i`` of replica 1 then all-reduce ``dp_bytes`` in a two-rank ring (2 steps of
    ``dp_bytes / 2``, alpha each) over dedicated links; then each stream runs its
    OPTIMIZER. Expected: straggler wait ``delta_s`` on replica 0 and 0 on replica 1;
    exposed DP time ``2 (alpha + dp_bytes / (2B))`` on both.
    """
    ranks = [list(range(tp)), list(range(tp, 2 * tp))]
    links = [f"dp {i}->{tp + i}" for i in range(tp)] + [f"dp {tp + i}->{i}" for i in range(tp)]
    b = ProgramBuilder([bandwidth_bytes_per_s] * 2 * tp, [alpha_s] * 2 * tp, links,
                       rank_node=[0] * tp + [1] * tp)
    streams = [b.add_stream(r, ranks[r]) for r in range(2)]
    last = []
    for r in range(2):
        labels = dict(stage=0, device_group=r, replica=r)
        f = b.add_compute(Category.FORWARD, streams[r], t_f, micro_batch=0, name=f"F r{r}",
                          **labels)
        last.append(b.add_compute(Category.BACKWARD, streams[r], t_b + r * delta_s, [f],
                                  micro_batch=0, name=f"B r{r}", **labels))
    barrier = b.add_compute(Category.BARRIER, -1, 0.0, last, name="dp barrier")
    ends = []
    for i in range(tp):
        fwd, bwd = i, tp + i  # link ids of the two directions of pair i
        t = barrier
        for step in range(2):
            flows = [(i, tp + i, dp_bytes / 2, alpha_s, [fwd]),
                     (tp + i, i, dp_bytes / 2, alpha_s, [bwd])]
            t = b.add_comm(Category.DP, flows, [t], phase=step, name=f"dp pair {i} step {step}")
        ends.append(t)
    for r in range(2):
        b.add_compute(Category.OPTIMIZER, streams[r], t_opt, [last[r], *ends], stage=0,
                      device_group=r, replica=r, name=f"optimizer r{r}")
    return b.build()


_STREAM_CATEGORIES = (Category.FORWARD, Category.BACKWARD, Category.OPTIMIZER)
_OFF_STREAM_COMM = (Category.PP, Category.RESHARD, Category.DP)


def random_program(seed: int, *, max_tasks: int = 30, max_streams: int = 4,
                   max_links: int = 6, private_links: bool = False) -> Program:
    """A small random valid program exercising every feature of the IR.

    Several streams (1-2 ranks each) with chained compute (some zero-duration),
    blocking TP tasks, off-stream PP/RESHARD/DP tasks of 1-6 flows over paths of
    1-4 distinct links (some zero-byte, some zero-latency), BARRIER tasks and
    random dependencies on earlier tasks. Link capacities come from a short list so
    that exact ties happen. With ``private_links`` every flow crosses links of its
    own, so no two flows ever share a link (a contention-free program).
    """
    rng = np.random.default_rng(seed)
    num_streams = int(rng.integers(1, max_streams + 1))
    stream_ranks, r = [], 0
    for _ in range(num_streams):
        width = int(rng.integers(1, 3))
        stream_ranks.append(list(range(r, r + width)))
        r += width
    num_ranks = r
    num_links = int(rng.integers(1, max_links + 1))
    tasks, links = [], []  # links: (capacity, latency) when private
    last_on = [None] * num_streams

    def new_path():
        if private_links:
            hops = int(rng.integers(1, 5))
            for _ in range(hops):
                links.append((float(rng.choice([1.0, 2.0, 4.0]) * GB),
                              float(rng.choice([0.0, 1e-6]))))
            return list(range(len(links) - hops, len(links)))
        hops = int(rng.integers(1, min(4, num_links) + 1))
        return [int(x) for x in rng.choice(num_links, size=hops, replace=False)]

    def new_flows():
        out = []
        for _ in range(int(rng.integers(1, 7))):
            src, dst = (int(x) for x in rng.integers(0, num_ranks, size=2))
            nbytes = 0.0 if rng.random() < 0.1 else float(rng.choice([0.25, 0.5, 1.0]) * GB)
            latency = 0.0 if rng.random() < 0.3 else float(rng.choice([1e-6, 5e-6]))
            out.append((src, dst, nbytes, latency, new_path()))
        return out

    num_tasks = int(rng.integers(1, max_tasks + 1))
    for t in range(num_tasks):
        extra = sorted({int(x) for x in rng.integers(0, t, size=int(rng.integers(0, 3)))}) if t else []
        roll = rng.random()
        if roll < 0.1 and t > 0:
            tasks.append(("barrier", -1, None, extra or [t - 1], None))
            continue
        s = int(rng.integers(0, num_streams))
        deps = sorted({*extra, *([last_on[s]] if last_on[s] is not None else [])})
        if roll < 0.55:
            duration = 0.0 if rng.random() < 0.1 else float(rng.choice([0.1, 0.25, 0.5]))
            category = _STREAM_CATEGORIES[int(rng.integers(0, 3))]
            tasks.append(("compute", s, category, deps, duration))
            last_on[s] = t
        elif roll < 0.7:
            tasks.append(("comm", s, Category.TP, deps, new_flows()))
            last_on[s] = t
        else:
            category = _OFF_STREAM_COMM[int(rng.integers(0, 3))]
            tasks.append(("comm", -1, category, extra, new_flows()))

    if not private_links:
        links = [(float(rng.choice([1.0, 2.0, 4.0]) * GB), 0.0) for _ in range(num_links)]
    b = ProgramBuilder([c for c, _ in links], [lat for _, lat in links],
                       [f"link {i}" for i in range(len(links))],
                       rank_node=[rank // 2 for rank in range(num_ranks)])
    for s, ranks in enumerate(stream_ranks):
        b.add_stream(s, ranks)
    for kind, s, category, deps, payload in tasks:
        labels = dict(stage=max(s, -1), device_group=s, replica=0)
        if kind == "barrier":
            b.add_compute(Category.BARRIER, -1, 0.0, deps)
        elif kind == "compute":
            b.add_compute(category, s, payload, deps, micro_batch=len(deps), **labels)
        else:
            b.add_comm(category, payload, deps, stream=s, **labels)
    return b.build(tokens_per_iteration=4096.0, model_flops_per_iteration=1e15,
                   peak_flops_per_s=1e15)
