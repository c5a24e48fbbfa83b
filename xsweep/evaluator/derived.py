"""What the host derives from a program for the kernels, kept per structure or program.

Programs are immutable, so a layout or index derived from one stays valid. What
depends on the structure alone (the bound's block layout, the metrics' index) is
kept per structure (``Program.structure``, shared by the numeric variants of one
plan shape), the rest (durations) per program object. An
:class:`~xsweep.evaluator.evaluator.Evaluator` keeps one :class:`Derived`. Entries
go when their structure or program does.
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

    def _get(self, owner, key: tuple, make):
        entries = self._memo.setdefault(owner, {})
        if key not in entries:
            entries[key] = make()
        return entries[key]

    def _structural(self, program: Program, key: tuple, make):
        owner = program.structure if program.structure is not None else program
        return self._get(owner, key, make)

    def nodes(self, program: Program) -> blocks.DagNodes:
        return self._structural(program, ("nodes",), lambda: blocks.dag_nodes(program))

    def form(self, program: Program, step_cost: int) -> tuple[int, int, int]:
        """Slots per block, predecessors per slot and blocks (:func:`blocks.block_form`)."""
        return self._structural(program, ("form", step_cost),
                                lambda: blocks.block_form(program, step_cost,
                                                          self.nodes(program)))

    def layout(self, program: Program, width: int) -> BlockedProgram:
        """The bound's layout: its structure shared, its durations the program's own."""
        slot_pred, task_slot = self._structural(
            program, ("slots", width),
            lambda: blocks.block_slots(program, width, self.nodes(program)))
        return self._get(program, ("layout", width), lambda: BlockedProgram(
            slot_pred, blocks.block_durations(program, slot_pred, task_slot), task_slot))

    def metric_index(self, program: Program) -> timeline.MetricIndex:
        return self._structural(program, ("metric_index",),
                                lambda: timeline.metric_index(program))
