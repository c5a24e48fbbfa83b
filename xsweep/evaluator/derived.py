"""What the host derives from a program for the kernels, kept per program object.

Programs are immutable, so a layout or index derived from one stays valid; an
:class:`~xsweep.evaluator.evaluator.Evaluator` keeps one :class:`Derived` so that a
program seen again (an optimizer's repeated plans, a benchmark's rounds) costs only
its copy into a chunk. Entries go when their program does.
"""

from __future__ import annotations

import weakref

from xsweep import timeline
from xsweep.evaluator import blocks
from xsweep.kernels.types import BlockedProgram
from xsweep.plan.program import Program


class Derived:
    """Per-program memo of the bound's layouts and the metrics' index."""

    def __init__(self) -> None:
        self._memo: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def _get(self, program: Program, key: tuple, make):
        entries = self._memo.setdefault(program, {})
        if key not in entries:
            entries[key] = make()
        return entries[key]

    def nodes(self, program: Program) -> blocks.DagNodes:
        return self._get(program, ("nodes",), lambda: blocks.dag_nodes(program))

    def form(self, program: Program, step_cost: int) -> tuple[int, int, int]:
        """Slots per block, predecessors per slot and blocks (:func:`blocks.block_form`)."""
        return self._get(program, ("form", step_cost),
                         lambda: blocks.block_form(program, step_cost, self.nodes(program)))

    def layout(self, program: Program, width: int) -> BlockedProgram:
        return self._get(program, ("layout", width),
                         lambda: blocks.block_layout(program, width, self.nodes(program)))

    def metric_index(self, program: Program) -> timeline.MetricIndex:
        return self._get(program, ("metric_index",), lambda: timeline.metric_index(program))
