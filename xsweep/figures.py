"""Per-plan figures that do not come from the timeline: memory and cost.

One function, :func:`plan_figures`, used by the exact simulator's report and by the
batched Dataset alike, so the two evaluators give the same figures under the same
names (``xsweep.metrics``) with the same missing-value convention (NaN).
"""

from __future__ import annotations

import numpy as np

from xsweep.cost import DEFAULT_COST, CostModel, node_rates, run_costs
from xsweep.plan.analysis import PlanAnalysis


def plan_figures(a: PlanAnalysis, iteration_time_s, cost: CostModel = DEFAULT_COST) -> dict:
    """Memory verdict and TCO of a plan at ``iteration_time_s`` (a number or an array).

    Without ``total_tokens`` the run's length is unknown, so ``training_time_s``,
    ``cost_per_run_usd`` and ``paper_tco`` are NaN.
    """
    rates = node_rates(a.topology.nodes, cost)
    runs = run_costs(iteration_time_s, a.tokens_per_iteration, a.total_tokens,
                     rates["capex_usd"], rates["cost_rate_usd_per_hour"])
    if not a.total_tokens:
        runs = {name: np.full_like(value, np.nan) for name, value in runs.items()}
    scalar = np.ndim(iteration_time_s) == 0
    return {
        "memory_per_gpu_gib": max(g.memory.total_gib for g in a.groups),
        "memory_fits": all(g.fits for g in a.groups),
        **rates,
        **{name: float(value) if scalar else value for name, value in runs.items()},
    }
