"""What ``xsweep plan`` reports: groups, rings, chunks, resharding, memory, workload."""

from __future__ import annotations

import dataclasses

from xsweep.plan.analysis import PlanAnalysis
from xsweep.plan.groups import chunk_bytes_per_rank
from xsweep.plan.program import Program
from xsweep.spec.catalog import describe_software


def plan_summary(a: PlanAnalysis, program: Program) -> dict:
    """A JSON-ready description of an analysed plan and the size of its program."""
    dp_groups = []
    for d, (g, nbytes) in enumerate(zip(a.dp_groups, a.dp_segment_bytes, strict=True)):
        tps = [a.groups[a.index_of(dg)].tp for dg in g.device_groups]
        dense, expert = a.dp_bytes(d, g.first_layer, g.last_layer)
        dp_groups.append({
            "first_layer": g.first_layer, "last_layer": g.last_layer,
            "ranks": list(g.ranks), "device_groups": list(g.device_groups), "lcm": g.lcm,
            "rings": [{"chunk": r.chunk, "ranks": list(r.ranks)} for r in g.rings],
            "gradient_bytes": nbytes,
            "bytes_per_rank_per_chunk": chunk_bytes_per_rank(dense, tps),
            "buckets": [list(b) for b in a.buckets(d)],
            # EP groups over replicas: the routed experts' part rides rings of its own
            **({"expert_gradient_bytes": expert,
                "expert_bytes_per_rank_per_chunk": chunk_bytes_per_rank(expert, tps),
                "expert_rings": [list(r) for r in a.expert_rings(d)]}
               if a.expert_fold(d) > 1 else {}),
            # overlapped, the experts' gradients in buckets of their own
            **({"expert_buckets": [list(b) for b in a.buckets(d, experts=True)]}
               if a.buckets(d, experts=True) else {}),
        })
    resharding = [{
        "from_group": r.from_group, "to_group": r.to_group,
        "scheme": r.scheme if not r.tp_equal else "p2p", "bytes": r.bytes,
        "transfers": [{"src": t.src, "dst": t.dst, "bytes": t.bytes, "phase": t.phase}
                      for t in r.transfers],
    } for r in a.reshards]
    memory = memory_rows(a)
    workload = [{
        "device_group": g.id, "gpu": g.gpu.name, "tp": g.tp, "cp": g.cp, "stage": g.stage,
        "replica": g.replica, "layers": [g.first_layer, g.last_layer],
        "micro_batch_size": g.micro_batch_size, "num_micro_batches": g.num_micro_batches,
        "forward_flops": g.cost.forward_flops, "backward_flops": g.cost.backward_flops,
        "forward_time_s": g.cost.forward_time_s, "backward_time_s": g.cost.backward_time_s,
        "optimizer_time_s": g.optimizer_time_s,
    } for g in a.groups]
    return {
        "name": a.name,
        "model": a.model.name,
        "schedule": a.schedule,
        "stack": {**dataclasses.asdict(a.stack), "software": a.stack.software.record()},
        "resharding_scheme": a.resharding,
        "dp_groups": dp_groups,
        "resharding": resharding,
        "memory": memory,
        "workload": workload,
        "program": {"tasks": program.num_tasks, "flows": program.num_flows,
                    "links": program.num_links, "streams": program.num_streams},
    }


def memory_rows(a: PlanAnalysis) -> list[dict]:
    """Per device group (in the analysis's order): the memory one of its GPUs needs, by part,
    against that GPU's capacity, and whether it fits; what ``xsweep plan`` reports."""
    return [{
        "device_group": g.id, "gpu": g.gpu.name, "per_gpu_gib": g.memory.total_gib,
        "weights_gib": g.memory.weights_gib, "grads_gib": g.memory.grads_gib,
        "optimizer_gib": g.memory.optimizer_gib, "activations_gib": g.memory.activations_gib,
        "capacity_gib": g.gpu.hbm_gib, "fits": g.fits,
    } for g in a.groups]


def _gib(x: float) -> str:
    return f"{x:.2f} GiB"


def format_plan(s: dict) -> str:
    """The readable form of :func:`plan_summary`."""
    st = {k: v for k, v in s["stack"].items() if k != "software"}
    out = [f"plan {s['name']!r}: model {s['model']}, schedule {s['schedule']}, "
           f"resharding {s['resharding_scheme']}",
           "stack: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in st.items()),
           f"software profile: {describe_software(s['stack']['software'])}"]
    out.append("\ndevice groups:")
    mem = {m["device_group"]: m for m in s["memory"]}
    for w in s["workload"]:
        m = mem[w["device_group"]]
        out.append(
            f"  DG{w['device_group']}: {w['gpu']} x{w['tp']} replica {w['replica']} "
            f"stage {w['stage']} layers {w['layers'][0]}-{w['layers'][1]}, "
            f"{w['num_micro_batches']} x mb {w['micro_batch_size']}: "
            f"fwd {w['forward_time_s'] * 1e3:.2f} ms, bwd {w['backward_time_s'] * 1e3:.2f} ms; "
            f"memory {_gib(m['per_gpu_gib'])} of {_gib(m['capacity_gib'])}"
            + ("" if m["fits"] else "  DOES NOT FIT")
        )
    out.append("\ndata-parallel groups (sweep line):")
    if not s["dp_groups"]:
        out.append("  none (a single replica)")
    for g in s["dp_groups"]:
        out.append(
            f"  layers {g['first_layer']}-{g['last_layer']}: groups {g['device_groups']} "
            f"ranks {g['ranks']}; lcm {g['lcm']} rings, "
            f"{g['bytes_per_rank_per_chunk'] / 1e6:.2f} MB per rank per chunk"
        )
        for r in g["rings"]:
            out.append(f"    ring {r['chunk']}: ranks {r['ranks']}")
        if "expert_rings" in g:
            out.append(f"    experts apart: {g['expert_bytes_per_rank_per_chunk'] / 1e6:.2f} MB "
                       f"per rank per chunk, {len(g['expert_rings'])} expert rings"
                       + ("" if g["expert_rings"] else " (each expert held once)"))
            for ranks in g["expert_rings"]:
                out.append(f"    expert ring: ranks {ranks}")
    out.append("\nstage-to-stage transfers (per micro-batch, forward):")
    if not s["resharding"]:
        out.append("  none (single-stage replicas)")
    for r in s["resharding"]:
        phases = 1 + max((t["phase"] for t in r["transfers"]), default=0)
        out.append(
            f"  DG{r['from_group']} -> DG{r['to_group']} ({r['scheme']}): "
            f"{len(r['transfers'])} transfers in {phases} phase(s), "
            f"{r['bytes'] / 1e6:.2f} MB"
        )
    p = s["program"]
    out.append(f"\nprogram: {p['tasks']} tasks, {p['flows']} flows, {p['links']} links, "
               f"{p['streams']} streams")
    return "\n".join(out)

