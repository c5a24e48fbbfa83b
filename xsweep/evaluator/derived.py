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
from collections.abc import Sequence

import numpy as np

from xsweep import timeline
from xsweep.evaluator import blocks, encode
from xsweep.evaluator.host_metrics import HostIndex, host_index
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
        return self.layouts([program], width)[0]

    def layouts(self, programs: Sequence[Program], width: int) -> list[BlockedProgram]:
        """:meth:`layout` of each program; the durations of the numeric variants of one
        structure are computed together, in one pass over their stacked numbers."""
        out = [self._memo.get(p, {}).get(("layout", width)) for p in programs]
        todo: dict[int, list[int]] = {}
        for i, (p, known) in enumerate(zip(programs, out, strict=True)):
            if known is None:
                todo.setdefault(id(p.structure) if p.structure is not None else id(p),
                                []).append(i)
        for rows in todo.values():
            first = programs[rows[0]]
            slot_pred, task_slot, sources = self._structural(
                first, ("slots", width), lambda first=first: self._slots(first, width))
            durations = blocks.block_durations([programs[i] for i in rows], slot_pred, task_slot,
                                               sources)
            for i, duration_s in zip(rows, durations, strict=True):
                out[i] = BlockedProgram(slot_pred, duration_s, task_slot)
                self._memo.setdefault(programs[i], {})[("layout", width)] = out[i]
        return out

    def _slots(self, program: Program, width: int) -> tuple[np.ndarray, ...]:
        slot_pred, task_slot = blocks.block_slots(program, width, self.nodes(program))
        num_slots = 1 + slot_pred.shape[0] * slot_pred.shape[1]
        return slot_pred, task_slot, blocks.slot_sources(program, task_slot, num_slots)

    def metric_index(self, program: Program) -> timeline.MetricIndex:
        return self._structural(program, ("metric_index",),
                                lambda: timeline.metric_index(program))

    def host_index(self, program: Program) -> HostIndex:
        """The metrics' index without its padding, for metrics on the host."""
        return self._structural(program, ("host_index",),
                                lambda: host_index(self.metric_index(program)))

    def metric_dims(self, program: Program) -> tuple[int, ...]:
        """The sizes of the metrics' index (:func:`encode.metric_index_dims`)."""
        return self._structural(program, ("metric_dims",),
                                lambda: encode.metric_index_dims([self.metric_index(program)]))
