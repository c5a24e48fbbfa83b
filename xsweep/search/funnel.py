"""The exact funnel: rounds of exact evaluation over bounded points, pruning as results come.

Every candidate (a point bounded with status ok) has an *optimistic* objective vector:
its bound level's values, which are never worse than its exact ones (the bound's
iteration time is a proven lower bound, and every objective is monotone in it or does
not depend on it). A candidate is pruned once it cannot change the answer:

- some exactly evaluated, feasible point dominates its optimistic vector, so its exact
  vector is dominated too and it is not on the Pareto front; and
- for every objective, its optimistic value is worse than the ``top``-th best exact
  value, so it is not among the ``top`` points of any objective either.

Each round evaluates the candidates that are neither evaluated nor pruned and lie on
the Pareto front of their optimistic vectors, plus the ``top`` best of them by each
objective. The loop ends when every candidate is evaluated or pruned, so the front and
the top points equal those of evaluating every candidate exactly; the rounds are a
pure function of the bounds and the exact results, so a run replays identically.

Two refinements keep the answer the user reads:

- *Groups* (a sweep's work groups: one per model, say) are funnels of their own: a
  point is pruned only by exact results of its group, and a round picks its front and
  top points in each group, so every group's answer is the one evaluating it exactly
  would give.
- *Plans*: points that build the same plan (an id per point) count once among the
  ``top`` (the best ``top`` distinct plans), and a plan picked for a round brings every
  remaining point of it along (evaluated once: they share their result).
"""

from __future__ import annotations

import numpy as np

from xsweep.search.pareto import dominated_by, kth_best, non_dominated, top_points

#: Float32 results of two kernels may differ in the last bits; shifting the bounds by
#: this relative amount towards "better" keeps rounding from pruning a point wrongly.
BOUND_SLACK = 1e-5


class Funnel:
    """Which candidates to evaluate exactly next, and which are pruned.

    Args:
      bounds: ``float[n, objectives]`` bound-level values in minimisation form
        (:func:`xsweep.search.pareto.objective_matrix`); rows of non-candidates ignored.
      candidates: ``bool[n]``, the points that may be evaluated exactly.
      top: how many best plans of each objective the answer includes (per group).
      max_round: most points per round (a little more with several groups: each keeps
        at least one).
      exhaustive: evaluate every candidate (in rounds of ``max_round``), prune nothing.
      groups: ``int[n]``, each point's group (default: one group).
      plans: ``int[n]``, an id per point, equal for points of one plan (default: every
        point a plan of its own).
      pick_top: how many best plans of each objective a round picks (default ``top``):
        more, where a round's cost is mostly fixed (the closed-form tier's rounds lower
        and bound their points, then evaluate them exactly), so that fewer rounds run.
      grow: each round picks twice as many best plans as the one before (``pick_top``
        the first): a first round about as small as the answer, where the bounds are
        tight, and few rounds, where they are loose.
    """

    def __init__(self, bounds: np.ndarray, candidates: np.ndarray, top: int, max_round: int,
                 exhaustive: bool = False, groups: np.ndarray | None = None,
                 plans: np.ndarray | None = None, pick_top: int | None = None,
                 grow: bool = False):
        self.pick_top = top if pick_top is None else max(pick_top, top)
        self.grow = grow
        self.optimistic = bounds - BOUND_SLACK * np.abs(bounds)
        self.top = top
        self.max_round = max_round
        self.exhaustive = exhaustive
        n = len(candidates)
        self.groups = np.zeros(n, np.int64) if groups is None else np.asarray(groups, np.int64)
        self.plans = np.arange(n) if plans is None else np.asarray(plans, np.int64)
        self.remaining = np.asarray(candidates, bool).copy()
        self.evaluated = np.zeros(n, bool)
        self.pruned = np.zeros(n, bool)
        self.exact = np.full(bounds.shape, np.nan)  # feasible exact results only
        self.rounds = 0  # rounds handed out so far

    def next_round(self) -> np.ndarray:
        """The points to evaluate exactly next, ascending; empty when the funnel is done."""
        self.prune()
        left = np.flatnonzero(self.remaining)
        if len(left):
            self.rounds += 1
        if not len(left) or self.exhaustive:
            return left[: self.max_round]
        chosen = [self._pick(part) for part in self._by_group(left)]
        total = sum(len(c) for c in chosen)
        if total > self.max_round:  # each group keeps its share, at least one point
            chosen = [self._spread(c, max(1, self.max_round * len(c) // total))
                      for c in chosen]
        return np.sort(np.concatenate(chosen))

    def _by_group(self, rows: np.ndarray) -> list[np.ndarray]:
        """``rows`` split by group, groups in ascending order."""
        groups = self.groups[rows]
        return [rows[groups == g] for g in np.unique(groups)]

    def _pick(self, left: np.ndarray) -> np.ndarray:
        """Of one group's remaining points, those on the front of their optimistic values
        and the best ``top`` plans of each objective, with their plans' other points."""
        values = self.optimistic[left]
        pick = non_dominated(values) | np.isnan(values).any(axis=1)  # no bound: no reasoning
        plans = self.plans[left]
        k = self.pick_top << min(self.rounds - 1, 40) if self.grow else self.pick_top
        for j in range(values.shape[1]):
            pick[top_points(values[:, j], k, plans)] = True
        pick |= np.isin(plans, plans[pick])  # a plan's points together: evaluated once
        return left[pick]

    def _spread(self, chosen: np.ndarray, keep: int) -> np.ndarray:
        """``keep`` of ``chosen``, spread along the first objective."""
        if len(chosen) <= keep:
            return chosen
        by_first = chosen[np.lexsort((chosen, self.optimistic[chosen, 0]))]
        at = np.unique(np.linspace(0, len(by_first) - 1, keep).round().astype(int))
        return np.sort(by_first[at])

    def record(self, indices: np.ndarray, exact: np.ndarray, feasible: np.ndarray) -> None:
        """Take the exact results of ``indices``: values in minimisation form and whether
        each point is feasible (an infeasible one joins no front)."""
        self.evaluated[indices] = True
        self.remaining[indices] = False
        self.exact[indices] = np.where(np.asarray(feasible, bool)[:, None], exact, np.nan)

    def prune(self) -> None:
        """Prune every remaining candidate the exact results of its group so far rule out
        (none when exhaustive)."""
        left = np.flatnonzero(self.remaining)
        if not len(left) or self.exhaustive:
            return
        for part in self._by_group(left):
            group = self.evaluated & (self.groups == self.groups[part[0]])
            done, plans = self.exact[group], self.plans[group]
            front = done[non_dominated(done)]
            values = self.optimistic[part]
            out = dominated_by(front, values)
            for j in range(values.shape[1]):
                out &= values[:, j] > kth_best(done[:, j], self.top, plans)
            self.pruned[part[out]] = True
            self.remaining[part[out]] = False
