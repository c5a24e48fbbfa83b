"""Per-plan figures that do not come from the timeline: memory and cost.

One function, :func:`plan_figures` (over many plans at once), used by the exact
simulator's report and by the batched Dataset alike, so the two evaluators give the same figures under the same
names (``xsweep.metrics``) with the same missing-value convention (NaN).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import numpy as np

from xsweep.cost import DEFAULT_COST, CostModel, node_rates, run_costs
from xsweep.plan.analysis import PlanAnalysis
from xsweep.plan.topology import Topology

#: Capex and hourly rate per topology object and cost model: the variants of a sweep on
#: the same hardware share a (cached) topology.
_rates: weakref.WeakKeyDictionary[Topology, dict] = weakref.WeakKeyDictionary()


def _cluster_rates(topology: Topology, cost: CostModel) -> tuple[float, float]:
    by_cost = _rates.setdefault(topology, {})
    if cost not in by_cost:
        rates = node_rates(topology.nodes, cost)
        by_cost[cost] = (rates["capex_usd"], rates["cost_rate_usd_per_hour"])
    return by_cost[cost]


#: What :func:`static_figures` gives per plan: known before any kernel runs.
STATIC = ("memory_per_gpu_gib", "memory_fits", "capex_usd", "cost_rate_usd_per_hour",
          "tokens_per_iteration", "total_tokens")


def static_figures(analyses: Sequence[PlanAnalysis],
                   cost: CostModel = DEFAULT_COST) -> dict[str, np.ndarray]:
    """The figures of :func:`plan_figures` that do not depend on the iteration time (and
    what the others are computed from), as arrays over the plans: where plans are
    prepared apart from where their kernels run (a worker process of an accelerator
    host), only these few numbers travel, not the analyses."""
    rates = np.array([_cluster_rates(a.topology, cost) for a in analyses],
                     float).reshape(-1, 2)
    return {
        "memory_per_gpu_gib": np.array([max(g.memory.total_gib for g in a.groups)
                                        for a in analyses], float),
        "memory_fits": np.array([all(g.fits for g in a.groups) for a in analyses], bool),
        "capex_usd": rates[:, 0], "cost_rate_usd_per_hour": rates[:, 1],
        "tokens_per_iteration": np.array([a.tokens_per_iteration for a in analyses], float),
        "total_tokens": np.array([a.total_tokens for a in analyses], float),
    }


def static_table(prepared: Sequence, cost: CostModel = DEFAULT_COST) -> dict[str, np.ndarray]:
    """What a results table needs of prepared plans (:class:`xsweep.pipeline.Prepared`)
    besides the kernels' output: their names and :func:`static_figures`."""
    return static_figures([p.analysis for p in prepared], cost) | {
        "name": np.array([p.name for p in prepared], dtype=object)}


def timed_figures(static: dict[str, np.ndarray], iteration_time_s) -> dict[str, np.ndarray]:
    """:func:`plan_figures` from :func:`static_figures` and the iteration times."""
    runs = run_costs(iteration_time_s, static["tokens_per_iteration"], static["total_tokens"],
                     static["capex_usd"], static["cost_rate_usd_per_hour"])
    return {name: static[name] for name in ("memory_per_gpu_gib", "memory_fits", "capex_usd",
                                            "cost_rate_usd_per_hour")} | runs


def plan_figures(analyses: Sequence[PlanAnalysis], iteration_time_s,
                 cost: CostModel = DEFAULT_COST) -> dict[str, np.ndarray]:
    """Memory verdict and TCO of plans at their iteration times, as arrays over the plans.

    Without ``total_tokens`` a plan's run length is unknown, so its ``training_time_s``,
    ``cost_per_run_usd`` and ``paper_tco`` are NaN; its ``cost_per_million_tokens_usd``
    (cost rate over tokens per hour) is known all the same.
    """
    return timed_figures(static_figures(analyses, cost), iteration_time_s)
