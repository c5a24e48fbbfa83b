"""Running a sweep's units on worker processes of this machine, one per core.

A unit (:mod:`xsweep.search.sweep.units`) plans its points and evaluates them; done in one
process, its Python work (planning, analysis, lowering) runs on one core. A
:class:`ProcessExecutor` runs whole units on worker processes instead
(:mod:`xsweep.workers`), as the Dask executor does on a cluster: each worker plans and
evaluates its unit alone, keeps its session (program structures, compiled kernels, results)
from unit to unit, and takes the next unit as soon as it is done, so the cores stay busy however
uneven the units are, and a unit's structures are built in one process only (the bound
phase's walk keeps the numeric variants of a structure in one unit). The sweep's job
is sent to each worker once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from xsweep.workers import Pool

#: Bytes of program structures a worker keeps between units.
UNIT_TEMPLATE_BYTES = 64 * 2**20


class ProcessExecutor:
    """Runs units on ``processes`` worker processes (started on first use), yielding
    each result as it finishes."""

    def __init__(self, processes: int):
        self.processes = processes
        self._pool = Pool(processes, unit_handler, UNIT_TEMPLATE_BYTES)

    def run(self, fn: Callable, job, items: Sequence[tuple]) -> Iterator[tuple]:
        """Yield ``(key, fn(session, job, *args))`` for each ``(key, args)`` of ``items``, in the
        order they finish, in the session of the worker that ran it (``fn`` must be importable:
        it travels by name)."""
        if not items:
            return
        keys = [key for key, _ in items]
        for index, value in self._pool.run([(fn, args) for _, args in items], context=job):
            yield keys[index], value

    def pids(self) -> list[int]:
        """The process ids of the running workers (none before the first unit)."""
        return self._pool.pids()

    def close(self, kill: bool = False) -> None:
        """Stop the workers: at once with ``kill``, else once they finish their unit."""
        self._pool.close(kill)


def unit_handler(template_bytes: int) -> Callable:
    """A worker's handler: run ``fn(session, job, *args)`` for a request ``(fn, args)`` with the
    call's job as context, in a session of its own, made here (a single-process evaluator whose
    store of program structures holds ``template_bytes``: the bound phase's walk puts
    every variant of a structure in one unit, so few structures are met again in a later
    unit, and a smaller store keeps each worker's memory down)."""
    from xsweep.evaluator import Evaluator
    from xsweep.search.evaluation import Session

    session = Session(Evaluator(processes=1, template_bytes=template_bytes))

    def handle(request: tuple, job: object, note: Callable) -> object:
        fn, args = request
        return fn(session, job, *args)

    return handle
