"""The library entry point: evaluate many deployment plans at once into an xarray Dataset."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import xarray as xr

from xsweep import metrics
from xsweep.batch import evaluate_programs
from xsweep.cost import DEFAULT_COST, CostModel, node_rates, run_costs
from xsweep.kernels import Status
from xsweep.plan.analysis import PlanAnalysis, analyze
from xsweep.plan.lower import lower
from xsweep.spec import load_catalog
from xsweep.spec.arguments import evaluation_plans

STATUS_NAMES = (*Status.NAMES, "pruned")
PRUNED = len(Status.NAMES)


def evaluate(plans: Sequence, level: str = "exact", *, catalog=None, profile=None,
             cost: CostModel = DEFAULT_COST, dtype: str = "float32",
             chunk_size: int | None = None,
             progress: Callable[[int, int], None] | None = None) -> xr.Dataset:
    """Evaluate every plan with the batched kernels; one ``variant`` per plan.

    Args:
      plans: ``DeploymentPlan`` messages (e.g. from :func:`xsweep.load_plan`) or paths.
      level: ``"exact"`` (lockstep event stepping: the simulator's semantics) or
        ``"bound"`` (contention-free: never above the exact iteration time).
      catalog: a :class:`xsweep.spec.Catalog` (default: the built-in one).
      profile: measured per-layer times overriding the estimates.
      cost: how hardware turns into money.
      dtype: ``"float32"`` (default) or ``"float64"``.
      chunk_size, progress: see :func:`xsweep.batch.evaluate_programs`.

    Returns:
      A Dataset over ``variant`` (and ``stream`` for the per-stream metrics) with the
      metric names of the design (iteration_time_s, tokens_per_s, mfu, ``*_mean`` and
      ``*_max`` over ranks, memory, cost), ``status`` (ok, not_converged, overflow,
      infeasible), ``feasible`` and ``reason`` (why a plan is infeasible), and the
      solver diagnostics (steps, padding overhead).
    """
    catalog = catalog if catalog is not None else load_catalog()
    plans = evaluation_plans(plans, catalog, profile=profile, cost=cost, chunk_size=chunk_size,
                             progress=progress)
    analyses = [analyze(plan, catalog, profile=profile) for plan in plans]
    programs = [lower(a) for a in analyses]
    out = evaluate_programs(programs, level, dtype=dtype, chunk_size=chunk_size,
                            progress=progress)
    n = len(programs)
    data: dict[str, tuple] = {}
    for name, value in out.items():
        if name in metrics.RANK_METRICS:
            data[name] = (("variant", "stream"), value)
        else:
            data[name] = (("variant",), value)
    fits = np.array([all(g.fits for g in a.groups) for a in analyses])
    data["memory_per_gpu_gb"] = (("variant",), np.array(
        [max(g.memory.total_gb for g in a.groups) for a in analyses]))
    data["memory_fits"] = (("variant",), fits)
    per_plan_cost = [_costs(a, t, cost) for a, t in zip(analyses, out["iteration_time_s"],
                                                        strict=True)]
    for key in per_plan_cost[0] if per_plan_cost else ():
        data[key] = (("variant",), np.array([c[key] for c in per_plan_cost]))
    status = out["status"].astype(int)
    converged = status == Status.OK
    reason = np.where(~fits, "does not fit in GPU memory",
                      np.where(converged, "", [STATUS_NAMES[s] for s in status]))
    data["status"] = (("variant",), np.array([STATUS_NAMES[s] for s in status]))
    data["feasible"] = (("variant",), fits & converged)
    data["reason"] = (("variant",), reason.astype(str))
    return xr.Dataset(
        data,
        coords={"variant": np.arange(n), "name": (("variant",), [a.name for a in analyses])},
        attrs={"level": level, "dtype": dtype, "pricing": cost.pricing},
    )


def _costs(a: PlanAnalysis, iteration_time_s: float, cost: CostModel) -> dict:
    rates = node_rates(a.topology.nodes, cost)
    runs = run_costs(iteration_time_s, a.tokens_per_iteration, a.total_tokens,
                     rates["capex_usd"], rates["cost_rate_usd_per_hour"])
    if not a.total_tokens:
        runs = {k: np.nan for k in runs}
    return {**rates, **{k: float(v) for k, v in runs.items()}}
