"""The handler of worker processes that prepare plans for a device this process's caller
owns (:class:`xsweep.evaluator.workers.PreparingPool`): validate, analyse and lower, and
the few numbers a result needs besides the kernels' output.

It imports nothing of JAX (nor of the evaluator, whose package does): such a worker
holds plans and programs only, and could not open an accelerator if it tried.
"""

from __future__ import annotations

import collections
import itertools
import os
import time
import weakref
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
    device's side derives their layouts once. Its ``key`` names the template it stands
    for, among every structure any process ships: the receiving side keeps one object
    per key (:class:`Received`), so the pieces a worker prepares from one template, one
    after another, share what is derived from it there too."""

    __slots__ = ("__weakref__", "flow_classes", "key")  # the device side memoizes by it, weakly

    def __init__(self, flow_classes, key: tuple = ()):
        self.flow_classes = flow_classes
        self.key = key

    def __getstate__(self):
        return self.flow_classes, self.key

    def __setstate__(self, state):
        self.flow_classes, self.key = state


#: The key each template shipped from this process was given (until it is dropped).
_SHIPPED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_serials = itertools.count()
_process: tuple[int, str] = (0, "")


def _this_process() -> tuple[int, str]:
    """This process among all that ship structures: its pid and a random token (drawn
    again in a forked child, whose pid differs; a pid alone may be reused)."""
    global _process
    if _process[0] != os.getpid():
        _process = (os.getpid(), os.urandom(8).hex())
    return _process


def shippable(programs: list) -> list:
    """``programs`` ready to travel to another process (see :class:`ShippedStructure`)."""
    import dataclasses

    shipped: dict[int, ShippedStructure] = {}
    out = []
    for program in programs:
        structure = program.structure
        if structure is not None:
            if id(structure) not in shipped:
                key = _SHIPPED.get(structure)
                if key is None:
                    key = _SHIPPED[structure] = (*_this_process(), next(_serials))
                shipped[id(structure)] = ShippedStructure(structure.flow_classes, key)
            program = dataclasses.replace(program, structure=shipped[id(structure)])
        out.append(program)
    return out


class Received:
    """The receiving side's one :class:`ShippedStructure` per key: programs that came in
    other pieces from one template then share their structure object, and so what is
    derived from it (kept by the structure, weakly). The structures met last are held
    here, as a worker's templates are held by its cache, up to ``kept_bytes`` of their
    programs' arrays (what is derived from a structure is of that order): the next piece
    of a structure finds what was derived from it even when no program of it is left."""

    def __init__(self, kept_bytes: int = 256 * 2**20) -> None:
        self._kept_bytes = kept_bytes
        self._bytes = 0
        # key -> (the stand-in, the bytes of the first program that brought it)
        self._known: collections.OrderedDict[tuple, tuple[ShippedStructure, int]] = \
            collections.OrderedDict()

    def programs(self, programs: list) -> list:
        """``programs`` with each structure replaced by the one kept for its key."""
        import dataclasses

        out = []
        for program in programs:
            structure = program.structure
            if isinstance(structure, ShippedStructure) and structure.key:
                found = self._known.get(structure.key)
                if found is None:
                    size = sum(getattr(program, f.name).nbytes
                               for f in dataclasses.fields(program)
                               if hasattr(getattr(program, f.name), "nbytes"))
                    found = self._known[structure.key] = (structure, size)
                    self._bytes += size
                self._known.move_to_end(structure.key)
                if found[0] is not structure:
                    program = dataclasses.replace(program, structure=found[0])
            out.append(program)
        while self._bytes > self._kept_bytes and len(self._known) > 1:
            self._bytes -= self._known.popitem(last=False)[1][1]
        return out
