"""Wall time of the exact simulator on large synthetic programs.

Run: ``python benchmarks/bench_sim.py [--gpus 1024 --tp 4 --pp 4 --micro-batches 16]``.
Prints, per program, its size, the wall time of one simulated iteration, the number
of events and events per second.

The synthetic program mimics a TP x PP x DP deployment on a rail-optimized
cluster of 8-GPU nodes: per GPU a scale-up link pair and a NIC link pair, per
rail a ToR uplink pair to the spine; TP rings inside a node, 1F1B pipelines,
pipeline transfers between stage groups, and two concurrent DP rings per
(stage, TP rank) that share every NIC, stepped as ring all-reduces.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from xsweep.plan.program import Category, Program, ProgramBuilder
from xsweep.plan.schedule import stage_order
from xsweep.sim import simulate

GPUS_PER_NODE = 8
GBPS = 1e9 / 8  # bytes/s per Gb/s


class _Fabric:
    """Link ids and routing of the synthetic rail-optimized cluster."""

    def __init__(self, num_gpus: int):
        caps, lats, names = [], [], []

        def link(name, gbps, latency_s):
            caps.append(gbps * GBPS)
            lats.append(latency_s)
            names.append(name)
            return len(caps) - 1

        self.nvl = [(link(f"nvl up {g}", 3600, 1e-6), link(f"nvl down {g}", 3600, 1e-6))
                    for g in range(num_gpus)]
        self.nic = [(link(f"nic up {g}", 400, 2e-6), link(f"nic down {g}", 400, 2e-6))
                    for g in range(num_gpus)]
        self.tor = [(link(f"tor up {r}", 1600, 1e-6), link(f"tor down {r}", 1600, 1e-6))
                    for r in range(GPUS_PER_NODE)]
        self.capacity, self.latency_s, self.names = caps, lats, names

    def flow(self, src: int, dst: int, nbytes: float, hops: int = 1):
        if src // GPUS_PER_NODE == dst // GPUS_PER_NODE:
            path = [self.nvl[src][0], self.nvl[dst][1]]
        elif src % GPUS_PER_NODE == dst % GPUS_PER_NODE:
            path = [self.nic[src][0], self.nic[dst][1]]
        else:
            path = [self.nic[src][0], self.tor[src % GPUS_PER_NODE][0],
                    self.tor[dst % GPUS_PER_NODE][1], self.nic[dst][1]]
        latency = hops * sum(self.latency_s[x] for x in path)
        return (src, dst, nbytes, latency, path)


def synthetic_program(num_gpus: int, tp: int, pp: int, micro_batches: int,
                      dp_rings: int = 2, jitter: float = 0.0) -> Program:
    """A TP x PP x DP training iteration on ``num_gpus`` GPUs (see the module docstring).

    ``jitter`` slows each stage group's compute by a random fraction in [0, jitter),
    as in a heterogeneous cluster, so that replicas no longer move in lockstep.
    """
    rng = np.random.default_rng(0)
    fabric = _Fabric(num_gpus)
    b = ProgramBuilder(fabric.capacity, fabric.latency_s, fabric.names,
                       rank_node=[g // GPUS_PER_NODE for g in range(num_gpus)])
    replicas = num_gpus // (tp * pp)
    ranks = [[list(range((r * pp + s) * tp, (r * pp + s + 1) * tp)) for s in range(pp)]
             for r in range(replicas)]
    streams = [[b.add_stream(r * pp + s, ranks[r][s]) for s in range(pp)] for r in range(replicas)]
    slowdown = 1.0 + jitter * rng.random((replicas, pp))
    t_f, t_b, act_bytes, tp_bytes = 4e-3 * 4 / pp, 8e-3 * 4 / pp, 16e6, 32e6
    last_backward = {}
    for r in range(replicas):
        last = [None] * pp
        arrive = {}
        orders = [stage_order("1f1b", s, pp, micro_batches) for s in range(pp)]
        pos = [0] * pp
        while any(pos[s] < len(orders[s]) for s in range(pp)):
            for s in range(pp):
                while pos[s] < len(orders[s]):
                    kind, mb = orders[s][pos[s]]
                    nxt = s + 1 if kind == "F" else s - 1
                    need = (s, kind, mb) if (kind == "F" and s > 0) or (
                        kind == "B" and s + 1 < pp) else None
                    if need is not None and need not in arrive:
                        break
                    deps = [x for x in (last[s], arrive.get(need)) if x is not None]
                    cat = Category.FORWARD if kind == "F" else Category.BACKWARD
                    labels = dict(stage=s, micro_batch=mb, device_group=r * pp + s, replica=r)
                    duration = (t_f if kind == "F" else t_b) * slowdown[r, s]
                    t = b.add_compute(cat, streams[r][s], duration, deps, **labels)
                    g = ranks[r][s]
                    ring = [fabric.flow(g[i], g[(i + 1) % tp], 2 * (tp - 1) / tp * tp_bytes,
                                        hops=2 * (tp - 1)) for i in range(tp)]
                    t = b.add_comm(Category.TP, ring, [t], stream=streams[r][s], **labels)
                    last[s] = t
                    if 0 <= nxt < pp:
                        h = ranks[r][nxt]
                        arrive[(nxt, kind, mb)] = b.add_comm(
                            Category.PP, [fabric.flow(g[i], h[i], act_bytes / tp)
                                          for i in range(tp)], [t], **labels)
                    pos[s] += 1
        for s in range(pp):
            last_backward[(r, s)] = last[s]
    for s in range(pp):
        barrier = b.add_compute(Category.BARRIER, -1, 0.0,
                                [last_backward[(r, s)] for r in range(replicas)], stage=s)
        ends = []
        grad_bytes = 7e9 * 2 / (tp * pp)
        for i in range(tp):
            for _ in range(dp_rings):
                members = [ranks[r][s][i] for r in range(replicas)]
                chunk = grad_bytes / dp_rings / replicas
                t = barrier
                for step in range(2 * (replicas - 1)):
                    flows = [fabric.flow(members[j], members[(j + 1) % replicas], chunk)
                             for j in range(replicas)]
                    t = b.add_comm(Category.DP, flows, [t], stage=s, phase=step)
                ends.append(t)
        for r in range(replicas):
            b.add_compute(Category.OPTIMIZER, streams[r][s], 2e-3,
                          [last_backward[(r, s)], *ends], stage=s, device_group=r * pp + s,
                          replica=r)
    return b.build(tokens_per_iteration=replicas * micro_batches * 4096.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[128, 512, 1024])
    parser.add_argument("--tp", type=int, default=4)
    parser.add_argument("--pp", type=int, default=4)
    parser.add_argument("--micro-batches", type=int, default=16)
    parser.add_argument("--jitter", type=float, nargs="+", default=[0.0, 0.05])
    args = parser.parse_args()
    print(f"{'gpus':>6} {'jitter':>6} {'tasks':>8} {'flows':>8} {'events':>9} {'rate upd':>9} "
          f"{'iter s':>9} {'wall s':>8} {'events/s':>10}")
    for gpus in args.gpus:
        for jitter in args.jitter:
            program = synthetic_program(gpus, args.tp, args.pp, args.micro_batches, jitter=jitter)
            t0 = time.perf_counter()
            result = simulate(program)
            wall = time.perf_counter() - t0
            print(f"{gpus:>6} {jitter:>6.2f} {program.num_tasks:>8} {program.num_flows:>8} {result.num_events:>9} "
                  f"{result.num_rate_updates:>9} {result.iteration_time_s:>9.4f} {wall:>8.2f} "
                  f"{result.num_events / wall:>10.0f}", flush=True)


if __name__ == "__main__":
    main()
