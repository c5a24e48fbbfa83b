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

import time
from collections.abc import Callable, Iterator, Sequence

from xsweep.workers import Pool

#: Bytes of program structures a worker keeps between units.
UNIT_TEMPLATE_BYTES = 64 * 2**20
#: Seconds of units left, as this process runs them, above which worker processes are
#: started to share them: about what starting them costs (each imports the planner, and
#: JAX on its first unit that evaluates: 0.6-0.8 s on 2 shared cores), with room for the
#: cores they take meanwhile.
WORKER_START_S = 3.0


class ProcessExecutor:
    """Runs units on ``processes`` worker processes (started on first use), yielding
    each result as it finishes.

    Args:
      session: this process works too, in this session: it runs units itself, one after
        another, for as long as the rest would take it less than ``start_after_s`` (a
        small space is answered before a worker process could have started); then it
        starts the workers and, while units wait for a free worker, goes on taking them.
        Without it, every unit goes to the workers.
      prepare: with a session, what this process needs after these units (its evaluator,
        whose import of JAX a unit that only plans never makes): the workers start with
        the first call, and this process does ``prepare()`` while they start, then takes
        units beside them.
    """

    def __init__(self, processes: int, session=None, start_after_s: float = WORKER_START_S,
                 prepare: Callable[[], object] | None = None):
        self.processes = processes
        self.session = session
        self.start_after_s = start_after_s
        self.prepare = prepare
        # forked where safe: a worker that plans needs the planner's modules, which this
        # process has imported already
        self._pool = Pool(processes, unit_handler, UNIT_TEMPLATE_BYTES, fork=True)

    def run(self, fn: Callable, job, items: Sequence[tuple]) -> Iterator[tuple]:
        """Yield ``(key, fn(session, job, *args))`` for each ``(key, args)`` of ``items``, in the
        order they finish, in the session of the process that ran it (``fn`` must be
        importable: it travels by name)."""
        items, session, done = list(items), self.session, 0
        prepare, self.prepare = self.prepare if session is not None else None, None
        if session is not None and not self._pool.started and prepare is None:
            began = None
            while done < len(items):
                key, args = items[done]
                yield key, fn(session, job, *args)
                done += 1
                if began is None:  # the rate from the second unit on: the first warms up
                    began = time.perf_counter()
                elif ((time.perf_counter() - began) / (done - 1) * (len(items) - done)
                      > self.start_after_s):
                    break  # worth the workers' start
        rest = items[done:]
        if not rest:
            return

        def local(request: tuple) -> object:
            nonlocal prepare
            if prepare is not None:  # while the workers start
                prepare, first = None, prepare
                first()
            return request[0](session, job, *request[1])

        keys = [key for key, _ in rest]
        # a worker's next unit waits in its input while it works on one: it never waits
        # for this process between units (the bound phase's worker idled 0.65 s of 4.4 s
        # on the large space for want of its next chunk while this process planned)
        for index, value in self._pool.run([(fn, args) for _, args in rest], context=job,
                                           local=local if session is not None else None,
                                           ahead=2):
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
    from xsweep.search.evaluation import Session

    def evaluator():  # made on the first unit that evaluates: planning alone needs no JAX
        from xsweep.evaluator import Evaluator

        return Evaluator(processes=1, template_bytes=template_bytes)

    session = Session(make_evaluator=evaluator)

    def handle(request: tuple, job: object, note: Callable) -> object:
        fn, args = request
        return fn(session, job, *args)

    return handle
