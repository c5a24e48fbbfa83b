"""Slots for the exact level, sized from a schedule: tasks and flows under way at once.

The exact kernel holds the tasks and the flows under way in fixed numbers of slots
and stops with status overflow when they run out; a rerun with more costs a second
evaluation, and spare slots cost time at every event. The contention-free bound
schedule is cheap and close in shape to the exact one (contention only stretches
transfers), so its peaks, with a margin, predict the slots a variant needs.
"""

from __future__ import annotations

import math

import numpy as np

from xsweep.evaluator.shapes import ladder
from xsweep.plan.program import Program

#: Fewest slots handed to the exact level.
MIN_SLOTS = 16
#: Headroom over the bound schedule's peaks: contention lengthens transfers, and
#: longer transfers overlap more.
MARGIN = 1.25


def peak_in_flight(program: Program, start_s: np.ndarray, end_s: np.ndarray) -> tuple[int, int]:
    """Most tasks and most flows under way at once in a schedule of ``program``.

    A task is under way from its start to its end, and so are its flows; at equal
    times ends come first (a successor starting as its predecessor ends does not
    overlap it).
    """
    n = program.num_tasks
    if n == 0:
        return 0, 0
    times = np.concatenate([end_s[:n], start_s[:n]])
    is_start = np.repeat([0, 1], n)
    order = np.lexsort((is_start, times))
    sign = np.where(is_start[order] == 1, 1, -1)
    flows = np.tile(np.diff(program.flow_ptr), 2)[order]
    return int(np.cumsum(sign).max()), int(np.cumsum(sign * flows).max())


def _rounded(need: float) -> int:
    """The smallest of 2^k and 1.5 * 2^k at least ``need`` and ``MIN_SLOTS``."""
    return max(MIN_SLOTS, ladder(math.ceil(need)))


def exact_slots(program: Program, start_s: np.ndarray, end_s: np.ndarray,
                margin: float = MARGIN) -> tuple[int, int]:
    """``(task slots, flow slots)`` for the exact level, from a schedule's peaks.

    Each is its peak times ``margin``, rounded up to the ladder of 2^k and 1.5 * 2^k
    (a few compiled sizes, at most a third spare). One task slot more than the peak
    holds the virtual task that starts the schedule.
    """
    tasks, flows = peak_in_flight(program, start_s, end_s)
    return _rounded(margin * (tasks + 1)), _rounded(margin * flows)


def used_slots(slots: tuple[int, int], shape) -> tuple[int, int]:
    """The slots a variant runs with at ``shape`` (a :class:`~xsweep.evaluator.shapes.Shape`):
    no more task slots than its tasks and the starting task, no more flow slots than its
    flows, which is all that can ever be under way."""
    return min(slots[0], shape.tasks + 1), min(slots[1], shape.flows)


def grown(slots: np.ndarray) -> np.ndarray:
    """The (task, flow) slots of variants that overflowed, for their rerun: twice as many
    of both. A variant whose task slots exceed its tasks and whose flow slots reach its
    flows cannot overflow, so doubling ends; doubling one kind only was tried and cost
    more passes (``docs/performance.md``)."""
    return np.asarray(slots) * 2
