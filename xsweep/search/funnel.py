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
      top: how many best points of each objective the answer includes.
      max_round: most points per round.
      exhaustive: evaluate every candidate (in rounds of ``max_round``), prune nothing.
    """

    def __init__(self, bounds: np.ndarray, candidates: np.ndarray, top: int, max_round: int,
                 exhaustive: bool = False):
        self.optimistic = bounds - BOUND_SLACK * np.abs(bounds)
        self.top = top
        self.max_round = max_round
        self.exhaustive = exhaustive
        n = len(candidates)
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
        values = self.optimistic[left]
        pick = non_dominated(values) | np.isnan(values).any(axis=1)  # no bound: no reasoning
        for j in range(values.shape[1]):
            pick[top_points(values[:, j], self.top)] = True
        chosen = left[pick]
        if len(chosen) > self.max_round:  # spread the cut along the first objective
            by_first = chosen[np.lexsort((chosen, self.optimistic[chosen, 0]))]
            keep = np.unique(np.linspace(0, len(by_first) - 1, self.max_round).round().astype(int))
            chosen = np.sort(by_first[keep])
        return chosen

    def record(self, indices: np.ndarray, exact: np.ndarray, feasible: np.ndarray) -> None:
        """Take the exact results of ``indices``: values in minimisation form and whether
        each point is feasible (an infeasible one joins no front)."""
        self.evaluated[indices] = True
        self.remaining[indices] = False
        self.exact[indices] = np.where(np.asarray(feasible, bool)[:, None], exact, np.nan)

    def prune(self) -> None:
        """Prune every remaining candidate the exact results so far rule out (none when
        exhaustive)."""
        left = np.flatnonzero(self.remaining)
        if not len(left) or self.exhaustive:
            return
        done = self.exact[self.evaluated]
        front = done[non_dominated(done)]
        values = self.optimistic[left]
        out = dominated_by(front, values)
        for j in range(values.shape[1]):
            out &= values[:, j] > kth_best(done[:, j], self.top)
        self.pruned[left[out]] = True
        self.remaining[left[out]] = False
