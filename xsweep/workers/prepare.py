"""The handler of worker processes that prepare plans for a device this process's caller
owns (:class:`xsweep.evaluator.workers.PreparingPool`): validate, analyse and lower, and
the few numbers a result needs besides the kernels' output.

It imports nothing of JAX (nor of the evaluator, whose package does): such a worker
holds plans and programs only, and could not open an accelerator if it tried.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple


class PreparedPiece(NamedTuple):
    """A piece of plans prepared for a device by a worker: the programs, what the
    results need of the plans besides the kernels' output
    (:func:`xsweep.figures.static_table`), and the seconds it took."""

    programs: list
    static: dict
    prepare_s: float


def preparer(template_bytes: int) -> Callable:
    """A worker's handler: prepare a request's plans (serialized messages, already
    validated by the caller) for the device with the request's catalog, profile and
    cost, keeping up to ``template_bytes`` of the program structures it lowered between
    requests (numeric variants of a structure are refilled, not lowered again)."""
    from xsweep.figures import static_table
    from xsweep.pipeline import prepare_valid
    from xsweep.plan.lower import TemplateCache
    from xsweep.spec.plan_io import DeploymentPlan

    templates = TemplateCache(max_bytes=template_bytes)

    def handle(request: tuple, context: object, note: Callable) -> PreparedPiece:
        plans, (catalog, profile, cost) = request
        start = time.perf_counter()
        prepared = [prepare_valid(DeploymentPlan.FromString(data), catalog, profile,
                                  templates=templates, names=False) for data in plans]
        static = static_table(prepared, cost)
        return PreparedPiece(shippable([p.program for p in prepared]), static,
                             time.perf_counter() - start)

    return handle


class ShippedStructure:
    """What the device's side reads of a program's structure (its flow classes), in
    place of the lowering's template, which holds memos of this process: programs of one
    structure keep sharing one such object (pickle keeps shared objects shared), so the
    device's side derives their layouts once."""

    __slots__ = ("__weakref__", "flow_classes")  # the device side memoizes by it, weakly

    def __init__(self, flow_classes):
        self.flow_classes = flow_classes

    def __getstate__(self):
        return self.flow_classes

    def __setstate__(self, state):
        self.flow_classes = state


def shippable(programs: list) -> list:
    """``programs`` ready to travel to another process (see :class:`ShippedStructure`)."""
    import dataclasses

    shipped: dict[int, ShippedStructure] = {}
    out = []
    for program in programs:
        structure = program.structure
        if structure is not None:
            if id(structure) not in shipped:
                shipped[id(structure)] = ShippedStructure(structure.flow_classes)
            program = dataclasses.replace(program, structure=shipped[id(structure)])
        out.append(program)
    return out
