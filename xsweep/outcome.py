"""One plan's exact outcome: the simulator's timeline with memory and cost, as one record.

The record's keys are the metric names of ``xsweep.metrics`` (the same as the
batched Dataset's variables), then ``per_rank``: one entry per rank with the
per-stream metrics of its device group.
"""

from __future__ import annotations

from collections import defaultdict

from xsweep import metrics
from xsweep.cost import DEFAULT_COST, CostModel
from xsweep.figures import plan_figures
from xsweep.pipeline import Prepared
from xsweep.sim import SimResult, rank_metrics, simulate, summary
from xsweep.spec.catalog import describe_software


def outcome(prepared: Prepared, result: SimResult, cost: CostModel = DEFAULT_COST) -> dict:
    """The record of one simulated plan (what ``xsweep simulate --json`` prints, where
    NaN becomes null)."""
    a, program = prepared.analysis, prepared.program
    figures = {**summary(program, result),
               **{name: value[0].item() for name, value
                  in plan_figures([a], [result.iteration_time_s], cost).items()}}
    doc = {"name": a.name, "software": a.stack.software.record(),
           **{name: figures[name] for name in metrics.plan_names()}}
    gpu_of = {g.id: g.gpu.name for g in a.groups}
    doc["per_rank"] = [{"rank": r["rank"], "device_group": r["device_group"],
                        "gpu": gpu_of[r["device_group"]],
                        **{name: r[name] for name in metrics.STREAM_METRICS}}
                       for r in rank_metrics(program, result)]
    doc["events"] = result.num_events
    if a.model.is_moe:  # what the figures of a model with experts assume, stated with them
        doc["moe"] = {"experts": a.model.num_experts, "top_k": a.model.moe_top_k,
                      "expert_parallel": a.stack.expert_parallel,
                      "experts_per_gpu": a.model.num_experts // a.stack.expert_parallel,
                      **_ep_groups(a),
                      "assumed_imbalance": a.stack.moe_imbalance,
                      "capacity_factor": a.model.moe_capacity_factor,
                      # how tokens cross nodes: "deepep" only where an EP group spans nodes
                      "dispatcher": ("deepep" if a.stack.moe_dispatcher == "deepep"
                                     and a.ep_places else "alltoall"),
                      "fp8_dispatch": a.stack.moe_fp8_dispatch,
                      "max_nodes": a.model.moe_max_nodes}
    return doc


def _ep_groups(a) -> dict:
    """Where a plan's EP groups lie: ``ep_groups_over`` ``"tp"`` (inside each device
    group's TP ranks, or EP 1), ``"replicas"`` (over the TP ranks of several replicas of a
    stage) or ``"cp_ranks"`` (over those of several CP ranks of a group), and
    ``ep_groups_span``, how many replicas or CP ranks one spans (1 inside TP)."""
    ep = a.stack.expert_parallel
    replicas = max(len(peers) for peers in a.ep_peers)
    if replicas > 1:
        return {"ep_groups_over": "replicas", "ep_groups_span": replicas}
    folded = max((ep // g.tp for g in a.groups if g.cp > 1 and ep > g.tp), default=1)
    if folded > 1:
        return {"ep_groups_over": "cp_ranks", "ep_groups_span": folded}
    return {"ep_groups_over": "tp", "ep_groups_span": 1}


def _ep_groups_text(moe: dict) -> str:
    """``; EP groups over ...`` where they span replicas or CP ranks, else nothing."""
    over = {"replicas": "replicas", "cp_ranks": "CP ranks"}.get(moe["ep_groups_over"])
    return f"; EP groups over {moe['ep_groups_span']} {over}" if over else ""


def simulate_plan(prepared: Prepared, cost: CostModel = DEFAULT_COST) -> tuple[SimResult, dict]:
    """Simulate one prepared plan exactly: its timeline and its :func:`outcome` record."""
    result = simulate(prepared.program)
    return result, outcome(prepared, result, cost)


def format_outcome(doc: dict) -> str:
    """The readable breakdown of an :func:`outcome` record."""
    t = doc["iteration_time_s"]
    lines = [
        f"plan {doc['name']!r}: iteration {t:.4f} s, {doc['tokens_per_s']:,.0f} tokens/s, "
        f"MFU {doc['mfu']:.1%}",
        f"software profile: {describe_software(doc['software'])}",
        f"memory: largest {doc['memory_per_gpu_gib']:.1f} GiB per GPU"
        + ("" if doc["memory_fits"] else "  (DOES NOT FIT)"),
        f"cost: capex {doc['capex_usd']:,.0f} USD, {doc['cost_rate_usd_per_hour']:,.2f} USD/h, "
        f"{doc['cost_per_million_tokens_usd']:,.4g} USD per million tokens"
        + (f", {doc['cost_per_run_usd']:,.0f} USD per run ({doc['training_time_s'] / 86400:.1f}"
           " days)" if doc["cost_per_run_usd"] == doc["cost_per_run_usd"] else ""),  # not NaN
        "",
        "time per rank (mean / max over ranks, seconds):",
    ]
    if "moe" in doc:
        moe = doc["moe"]
        capacity = moe["capacity_factor"]
        lines[3:3] = [
            f"experts: {moe['experts']} routed, top {moe['top_k']}, EP {moe['expert_parallel']} "
            f"({moe['experts_per_gpu']} experts per GPU{_ep_groups_text(moe)}), "
            + (f"capacity factor {capacity:g}" if capacity else "dropless")
            + (", DeepEP dispatch across nodes" + (f" (each token to at most {moe['max_nodes']} "
                                                   "nodes)" if moe["max_nodes"] else "")
               if moe.get("dispatcher") == "deepep" else "")
            + (", tokens dispatched in FP8" if moe.get("fp8_dispatch") else ""),
            f"assumed: the busiest expert takes {moe['assumed_imbalance']:g}x the mean tokens "
            "(moe_imbalance)"]
    labels = {"busy_s": "compute", "idle_s": "idle", "bubble_s": "pipeline bubble",
              "straggler_wait_s": "straggler wait"}
    if doc.get("moe", {}).get("expert_parallel", 1) > 1:  # the all-to-alls ride the TP tasks
        labels["exposed_tp_s"] = "exposed tp + a2a comm"
    for name in metrics.STREAM_METRICS:
        label = labels.get(name) or f"exposed {name.split('_')[1]} comm"
        lines.append(f"  {label:<22} {doc[name + '_mean']:10.4f} {doc[name + '_max']:10.4f}")
    by_group = defaultdict(list)
    for r in doc["per_rank"]:
        by_group[r["device_group"]].append(r)
    lines += ["", "per device group (each rank of a group shares its timeline):"]
    for dg, ranks in sorted(by_group.items()):
        r = ranks[0]
        lines.append(
            f"  DG{dg} {r['gpu']} x{len(ranks)}: busy {r['busy_s']:.4f} s, "
            f"bubble {r['bubble_s']:.4f} s, straggler wait {r['straggler_wait_s']:.4f} s, "
            f"exposed dp {r['exposed_dp_s']:.4f} s"
        )
    return "\n".join(lines)
