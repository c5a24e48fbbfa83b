"""Sweeps: a sweep's grid planned point by point, bounded, evaluated through the exact funnel
and published as a dataset.

Public here: ``run_sweep`` and its ``Options`` (what ``xsweep sweep`` runs), ``plan_of``
(one point's plan), ``Grid`` (the points of a sweep) and ``Planner`` (a point to a plan).
The modules hold one concept each: ``grid``, ``planner`` (with ``apportion``), ``tasks``
(the units of work), ``funnel`` and ``pareto``, ``table`` and ``store`` (files),
``results`` (the dataset and the answer), ``report`` and ``plot``, ``distributed``
(where units run) and ``progress``.
"""

from xsweep.search.grid import Grid
from xsweep.search.planner import Built, Infeasible, Planner
from xsweep.search.run import Options, Outcome, plan_of, run_sweep

__all__ = ["Built", "Grid", "Infeasible", "Options", "Outcome", "Planner", "plan_of", "run_sweep"]
