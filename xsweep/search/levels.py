"""The levels and statuses of a search's results, as integer codes.

A point's ``level`` (a column of every table, a variable of the sweep's dataset) says how
far it went, cheapest first: :attr:`Level.NONE` (no plan: infeasible before any
evaluation), :attr:`Level.CLOSED_FORM` (planned, and bounded by arithmetic on its plan,
:mod:`xsweep.search.closed_form`), :attr:`Level.BOUND` (lowered and evaluated by the
batched bound level) or :attr:`Level.EXACT` (evaluated by the batched exact level). Each
level's iteration time is a lower bound on the next's.

A point's ``status`` is one of :class:`Status`: the kernels' outcome codes (``ok``,
``not_converged``, ``overflow``, ``infeasible``: the same numbers as
``kernels.Status``), ``infeasible`` too for a point without a plan, and ``pruned`` for a
point the funnel left at a cheaper level.

Tables hold the codes (``int8``); the names (``"closed_form"``, ``"pruned"``) appear only
where results are written for people and other programs: the dataset, CSV and JSON
files, printed tables and Optuna's trial attributes (:func:`names`, :func:`codes`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

import numpy as np


class _Code(enum.IntEnum):
    """An integer code with a name in files (:attr:`label`)."""

    @property
    def label(self) -> str:
        """The member's name in files: ``closed_form``, ``not_converged``, ``pruned``, ..."""
        return self.name.lower()


class Level(_Code):
    """How far a point went; each level's iteration time bounds the next's from below."""

    NONE = 0
    CLOSED_FORM = 1
    BOUND = 2
    EXACT = 3


class Status(_Code):
    """How a point's evaluation ended (the kernels' codes, then the funnel's ``pruned``)."""

    OK = 0
    NOT_CONVERGED = 1
    OVERFLOW = 2
    INFEASIBLE = 3
    PRUNED = 4


#: The dtype of a column of codes.
CODE_DTYPE = np.int8

#: The level names, in the order a point goes through them (as the codes).
NONE, CLOSED_FORM, BOUND, EXACT = (level.label for level in Level)
LEVELS = (NONE, CLOSED_FORM, BOUND, EXACT)


def names(codes: np.ndarray, kind: type[Level] | type[Status]) -> np.ndarray:
    """The names of ``codes`` of ``kind``, same shape: an object array of ``str`` (as
    ``.astype(str)`` makes it, text as wide as its longest name present)."""
    labels = np.array([member.label for member in kind], dtype=object)
    return labels[np.asarray(codes, np.int64)]


def codes(labels: Iterable[str] | np.ndarray, kind: type[Level] | type[Status]) -> np.ndarray:
    """The codes of ``labels`` (names of ``kind``'s members) as :data:`CODE_DTYPE`.

    Raises:
      ValueError: a label names no member of ``kind``.
    """
    by_name = {member.label: member.value for member in kind}
    text = np.asarray(labels)
    if text.dtype.kind != "U":  # objects, numpy's variable-width strings (as Zarr 3 reads)
        text = text.astype(object).astype(str)
    unique, inverse = np.unique(text, return_inverse=True)
    unknown = [str(u) for u in unique if u not in by_name]
    if unknown:
        raise ValueError(f"not a {kind.__name__.lower()} name: {unknown[0]!r}")
    values = np.array([by_name[u] for u in unique], CODE_DTYPE)
    return values[inverse].reshape(text.shape).astype(CODE_DTYPE)
