"""One plan's exact outcome: timeline metrics, memory and cost in one JSON-ready document."""

from __future__ import annotations

from collections import defaultdict

from xsweep.cost import DEFAULT_COST, CostModel, node_rates, run_costs
from xsweep.plan.analysis import PlanAnalysis
from xsweep.plan.program import COMM_KINDS, Program
from xsweep.sim import SimResult, rank_metrics, summary


def memory_and_cost(a: PlanAnalysis, iteration_time_s, cost: CostModel = DEFAULT_COST) -> dict:
    """Memory verdict and TCO figures of a plan at a given iteration time."""
    rates = node_rates(a.topology.nodes, cost)
    runs = run_costs(iteration_time_s, a.tokens_per_iteration, a.total_tokens,
                     rates["capex_usd"], rates["cost_rate_usd_per_hour"])
    return {
        "memory_per_gpu_gib": max(g.memory.total_gib for g in a.groups),
        "memory_fits": all(g.fits for g in a.groups),
        **rates,
        **{k: float(v) for k, v in runs.items()},
    }


def outcome(a: PlanAnalysis, program: Program, result: SimResult,
            cost: CostModel = DEFAULT_COST) -> dict:
    """The document ``xsweep simulate --json`` prints: DESIGN's metric names at top level,
    then ``per_rank``."""
    doc = {"name": a.name, **summary(program, result), **memory_and_cost(
        a, result.iteration_time_s, cost)}
    if not a.total_tokens:  # no run length given: cost of a run is unknown
        doc["cost_per_run_usd"] = doc["training_time_s"] = doc["paper_tco"] = None
    gpu_of = {g.id: g.gpu.name for g in a.groups}
    doc["per_rank"] = [
        {"rank": r["rank"], "device_group": r["device_group"], "gpu": gpu_of[r["device_group"]],
         **{k: r[k] for k in ("busy_s", "idle_s", "bubble_s", "straggler_wait_s",
                              "exposed_comm_s")}}
        for r in rank_metrics(program, result)
    ]
    doc["events"] = result.num_events
    return doc


def format_outcome(doc: dict) -> str:
    """The readable breakdown of :func:`outcome`."""
    t = doc["iteration_time_s"]
    lines = [
        f"plan {doc['name']!r}: iteration {t:.4f} s, {doc['tokens_per_s']:,.0f} tokens/s, "
        f"MFU {doc['mfu']:.1%}",
        f"memory: largest {doc['memory_per_gpu_gib']:.1f} GiB per GPU"
        + ("" if doc["memory_fits"] else "  (DOES NOT FIT)"),
        f"cost: capex {doc['capex_usd']:,.0f} USD, {doc['cost_rate_usd_per_hour']:,.2f} USD/h"
        + (f", {doc['cost_per_run_usd']:,.0f} USD per run ({doc['training_time_s'] / 86400:.1f}"
           " days)" if doc.get("cost_per_run_usd") is not None else ""),
        "",
        "time per rank (mean / max over ranks, seconds):",
    ]
    rows = [("compute", "busy_s"), ("idle", "idle_s"), ("pipeline bubble", "bubble_s"),
            ("straggler wait", "straggler_wait_s")]
    rows += [(f"exposed {k} comm", f"exposed_{k}_s") for k in COMM_KINDS]
    for label, key in rows:
        lines.append(f"  {label:<22} {doc[key + '_mean']:10.4f} {doc[key + '_max']:10.4f}")
    by_group = defaultdict(list)
    for r in doc["per_rank"]:
        by_group[r["device_group"]].append(r)
    lines += ["", "per device group (each rank of a group shares its timeline):"]
    for dg, ranks in sorted(by_group.items()):
        r = ranks[0]
        lines.append(
            f"  DG{dg} {r['gpu']} x{len(ranks)}: busy {r['busy_s']:.4f} s, "
            f"bubble {r['bubble_s']:.4f} s, straggler wait {r['straggler_wait_s']:.4f} s, "
            f"exposed dp {r['exposed_comm_s']['dp']:.4f} s"
        )
    return "\n".join(lines)
