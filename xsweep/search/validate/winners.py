"""Which results of a sweep or study to re-run in the exact simulator, and what each carries.

Among the points evaluated exactly (feasible ones), the Pareto front of the objectives
and the ``top`` best of each objective: the answer a user would act on. Among the
points only bounded, the same picked by their bounds: the bounded points nearest the
answer, where a bound above the true time would have hidden a winner. As in the sweep's
answer, each work group (a model, say) has its own front and top points, and points that
build the same plan count once: one candidate stands for them all, simulated once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from xsweep.cost import CostModel
from xsweep.search.evaluation import plan_key
from xsweep.search.levels import Level
from xsweep.search.pareto import non_dominated, top_points
from xsweep.spec.plan_io import DeploymentPlan


@dataclass(frozen=True)
class Candidate:
    """One result to re-run: its name in files and messages, the level it was evaluated
    at, why it was picked, its plan and pricing, its batched metrics, and the other points
    (or trials) that build the same plan, which it stands for."""

    name: str  # "point-267", "trial-12": file names
    label: str  # "point 267", "trial 12": messages
    level: Level  # exact or bound
    picked: tuple[str, ...]  # "front", "top iteration_time_s", ...
    plan: DeploymentPlan
    cost: CostModel
    batched: dict[str, float | None]
    same: tuple[int, ...] = ()  # the grid points or trial numbers of the same plan


def pick(values: np.ndarray, objectives: list[str], eligible: np.ndarray, top: int,
         groups: np.ndarray | None = None, plans: np.ndarray | None = None
         ) -> dict[int, list[str]]:
    """Rows of ``values`` (``float[n, objectives]``, minimisation form) on the front of the
    ``eligible`` rows or among their ``top`` best of an objective, each with why, in row
    order. With ``groups`` (an id per row: a sweep's work groups) each group has its own
    front and top rows; with ``plans`` (an id per row, equal for rows of one plan) a plan
    counts once, as its first eligible row."""
    eligible = np.asarray(eligible, bool).copy()
    if plans is not None:  # a plan's first eligible row stands for it
        rows = np.flatnonzero(eligible)
        _, first = np.unique(np.asarray(plans)[rows], return_index=True)
        eligible[:] = False
        eligible[rows[first]] = True
    groups = np.zeros(len(values), np.int64) if groups is None else np.asarray(groups)
    why: dict[int, list[str]] = {}
    for group in np.unique(groups):
        mine = np.where((eligible & (groups == group))[:, None], values, np.nan)
        for row in np.flatnonzero(non_dominated(mine)).tolist():
            why.setdefault(row, []).append("front")
        for j, name in enumerate(objectives):
            for row in top_points(mine[:, j], top).tolist():
                why.setdefault(row, []).append(f"top {name}")
    return dict(sorted(why.items()))


def merged(candidates: list[Candidate]) -> list[Candidate]:
    """``candidates`` with those of one level that build the same plan under the same
    pricing made one (the first, in order, picked for every reason of them, standing for
    the others' points too): each distinct plan is re-run once per level."""
    first: dict[tuple, int] = {}
    out: list[Candidate] = []
    for c in candidates:
        key = (c.level, plan_key(c.plan), c.cost)
        if key not in first:
            first[key] = len(out)
            out.append(c)
            continue
        kept = out[first[key]]
        out[first[key]] = replace(
            kept, picked=tuple(dict.fromkeys((*kept.picked, *c.picked))),
            same=tuple(sorted({*kept.same, *c.same, _number(c)} - {_number(kept)})))
    return out


def _number(c: Candidate) -> int:
    """The point's index (or trial's number) a candidate's name ends with."""
    return int(c.name.rsplit("-", 1)[1])
