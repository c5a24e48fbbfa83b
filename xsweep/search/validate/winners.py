"""Which results of a sweep or study to re-run in the exact simulator, and what each carries.

Among the points evaluated exactly (feasible ones), the Pareto front of the objectives
and the ``top`` best of each objective: the answer a user would act on. Among the
points only bounded, the same picked by their bounds: the bounded points nearest the
answer, where a bound above the true time would have hidden a winner.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xsweep.cost import CostModel
from xsweep.search.pareto import non_dominated, top_points
from xsweep.spec.plan_io import DeploymentPlan


@dataclass(frozen=True)
class Candidate:
    """One result to re-run: its name in files and messages, the level it was evaluated
    at, why it was picked, its plan and pricing, and its batched metrics."""

    name: str  # "point-267", "trial-12": file names
    label: str  # "point 267", "trial 12": messages
    level: str  # "exact" or "bound"
    picked: tuple[str, ...]  # "front", "top iteration_time_s", ...
    plan: DeploymentPlan
    cost: CostModel
    batched: dict[str, float | None]


def pick(values: np.ndarray, objectives: list[str], eligible: np.ndarray,
         top: int) -> dict[int, list[str]]:
    """Rows of ``values`` (``float[n, objectives]``, minimisation form) on the front of the
    ``eligible`` rows or among their ``top`` best of an objective, each with why, in row
    order."""
    values = np.where(np.asarray(eligible, bool)[:, None], values, np.nan)
    why: dict[int, list[str]] = {}
    for row in np.flatnonzero(non_dominated(values)).tolist():
        why.setdefault(row, []).append("front")
    for j, name in enumerate(objectives):
        for row in top_points(values[:, j], top).tolist():
            why.setdefault(row, []).append(f"top {name}")
    return dict(sorted(why.items()))
