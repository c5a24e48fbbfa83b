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


def plan_figures(analyses: Sequence[PlanAnalysis], iteration_time_s,
                 cost: CostModel = DEFAULT_COST) -> dict[str, np.ndarray]:
    """Memory verdict and TCO of plans at their iteration times, as arrays over the plans.

    Without ``total_tokens`` a plan's run length is unknown, so its ``training_time_s``,
    ``cost_per_run_usd`` and ``paper_tco`` are NaN.
    """
    rates = np.array([_cluster_rates(a.topology, cost) for a in analyses],
                     float).reshape(-1, 2)
    runs = run_costs(iteration_time_s, [a.tokens_per_iteration for a in analyses],
                     [a.total_tokens for a in analyses], rates[:, 0], rates[:, 1])
    return {
        "memory_per_gpu_gib": np.array([max(g.memory.total_gib for g in a.groups)
                                        for a in analyses], float),
        "memory_fits": np.array([all(g.fits for g in a.groups) for a in analyses], bool),
        "capex_usd": rates[:, 0], "cost_rate_usd_per_hour": rates[:, 1], **runs,
    }
