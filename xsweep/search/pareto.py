"""Pareto fronts and top points over objective values, all in minimisation form.

Callers turn metrics into a matrix ``float[point, objective]`` where smaller is better
(:func:`objective_matrix` negates the maximised ones); a row with NaN is never on a
front and never dominates. A row dominates another when it is no worse in every
objective and better in one; equal rows do not dominate each other, so duplicates of a
front point are all on the front.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from xsweep.spec.sweep import OBJECTIVE_DIRECTIONS

#: Rows compared at once (bounds the temporary [block, rows, objectives] arrays).
_BLOCK = 512


def objective_matrix(columns: Mapping[str, np.ndarray], objectives: Sequence[str]) -> np.ndarray:
    """``float[n, len(objectives)]``: each objective's column, negated where it is maximised."""
    signs = [1.0 if OBJECTIVE_DIRECTIONS[name] == "minimize" else -1.0 for name in objectives]
    return np.stack([s * np.asarray(columns[name], float) for s, name in
                     zip(signs, objectives, strict=True)], axis=1)


def dominated_by(front: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``bool[n]``: whether some row of ``front`` dominates each row of ``values``."""
    out = np.zeros(len(values), bool)
    if not len(front) or not len(values):
        return out
    front = front[~np.isnan(front).any(axis=1)]
    if values.shape[1] <= 2:
        return _dominated_by_sorted(front, values)
    for begin in range(0, len(values), _BLOCK):
        v = values[begin: begin + _BLOCK, None, :]
        out[begin: begin + _BLOCK] = ((front <= v).all(axis=2) & (front < v).any(axis=2)).any(axis=1)
    return out


def _dominated_by_sorted(front: np.ndarray, values: np.ndarray) -> np.ndarray:
    """:func:`dominated_by` for one or two objectives (``front`` without NaN), in
    O((n + m) log m) instead of O(n m): a row is dominated exactly when some front row of a
    first objective no greater has a smaller second, or one of a smaller first has a second
    no greater; with the front sorted by its first objective, each is a lookup of the least
    second value over a prefix. A row with NaN is never dominated."""
    if not len(front):
        return np.zeros(len(values), bool)
    order = np.argsort(front[:, 0], kind="stable")
    first = front[order, 0]
    least = np.minimum.accumulate(front[order, -1] if front.shape[1] == 2
                                  else np.zeros(len(front)))
    x = values[:, 0]
    y = values[:, -1] if values.shape[1] == 2 else np.zeros(len(values))
    out = np.zeros(len(values), bool)
    for side, beats in (("right", np.less), ("left", np.less_equal)):
        count = np.searchsorted(first, x, side=side)  # front rows of first <= x (< x)
        some = count > 0
        out[some] |= beats(least[count[some] - 1], y[some])
    return out & ~np.isnan(x)  # a NaN sorts last, as if above every front row


def non_dominated(values: np.ndarray) -> np.ndarray:
    """``bool[n]``: the rows no other row dominates (rows with NaN: False)."""
    n = len(values)
    keep = np.zeros(n, bool)
    valid = np.flatnonzero(~np.isnan(values).any(axis=1))
    if not len(valid):
        return keep
    # In lexicographic order a row can only be dominated by rows before it.
    order = valid[np.lexsort(values[valid].T[::-1])]
    if values.shape[1] <= 2:
        keep[order[~_dominated_sorted(values[order])]] = True
        return keep
    front = np.empty((0, values.shape[1]))
    for begin in range(0, len(order), _BLOCK):
        block = order[begin: begin + _BLOCK]
        v = values[block]
        beaten = dominated_by(front, v)
        inside = (v[None, :, :] <= v[:, None, :]).all(axis=2) & (v[None, :, :] < v[:, None, :]).any(axis=2)
        beaten |= np.tril(inside, k=-1).any(axis=1)
        keep[block[~beaten]] = True
        front = np.concatenate([front, v[~beaten]])  # later rows never dominate earlier ones
    return keep


def _dominated_sorted(v: np.ndarray) -> np.ndarray:
    """``bool[n]``: which rows of ``v`` (one or two objectives, no NaN, in lexicographic
    order) another row dominates, in O(n): only an earlier row can, and one does exactly
    when some row of a smaller first objective is no worse in the second, or a row of an
    equal first objective is better in it (the first of its run of equal first values,
    the best of the run)."""
    first = v[:, 0]
    second = v[:, -1] if v.shape[1] == 2 else np.zeros(len(v))
    n = len(v)
    starts = np.r_[True, first[1:] != first[:-1]]
    start = np.maximum.accumulate(np.where(starts, np.arange(n), 0))  # its run's first row
    # the least second value of the rows before each run (none before the first run)
    before = np.r_[np.inf, np.minimum.accumulate(second)][start]
    return ((start > 0) & (before <= second)) | (second[start] < second)


def top_points(values: np.ndarray, k: int, plans: np.ndarray | None = None) -> np.ndarray:
    """Indices of the ``k`` smallest non-NaN ``values``, ties broken by index; with
    ``plans`` (an id per row, equal for rows of one plan) each plan counts once, as its
    first (lowest-index) non-NaN row: the ``k`` best distinct plans."""
    valid = np.flatnonzero(~np.isnan(values))
    if plans is not None:
        _, first = np.unique(np.asarray(plans)[valid], return_index=True)
        valid = valid[np.sort(first)]
    return valid[np.lexsort((valid, values[valid]))][:k]


def kth_best(values: np.ndarray, k: int, plans: np.ndarray | None = None) -> float:
    """The ``k``-th smallest non-NaN value (1-based): ``inf`` when there are fewer, and
    ``-inf`` for ``k = 0`` (every value lies beyond the best none); with ``plans`` (an id
    per value), that of the ``k``-th best distinct plan (:func:`top_points`)."""
    if k == 0:
        return -np.inf
    if plans is not None:
        best = top_points(values, k, plans)
        return float(values[best[-1]]) if len(best) == k else np.inf
    valid = np.sort(values[~np.isnan(values)])
    return float(valid[k - 1]) if k <= len(valid) else np.inf
