"""Evaluating plans on worker processes, one per core of a CPU host.

Preparing plans (validation, analysis, lowering) is Python and runs on one core, while
a CPU host has several. A :class:`WorkerPool` runs one worker process per core
(:mod:`xsweep.workers`), each with its own single-device
:class:`~xsweep.evaluator.Evaluator` (its own program structures, compiled kernels and
derived layouts, which it keeps from call to call), and hands each a share of the
plans: every core then prepares and evaluates its share, and only the results (arrays
over the variants) come back. Compiled kernels reach every worker through the disk
cache. Schedules are the same as in one process; float32 sums over streams may round
differently in the last bit where a share is padded to other shapes.

Plans travel as serialized protobuf messages. The worker processes run nothing of the
caller's main module (unlike ``multiprocessing``), so a script without a ``__main__``
guard or a notebook can use them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from xsweep.workers import Pool
from xsweep.workers.prepare import PreparedPiece, preparer


class WorkerPool:
    """Worker processes that evaluate shares of a call's plans (started on first use)."""

    def __init__(self, processes: int, factory: Callable, settings: dict):
        """``factory(settings)`` makes each worker's handler: an evaluator of its own that
        takes a request ``(serialized plans, level, options)`` (importable: it travels
        by name; see :func:`xsweep.evaluator.evaluator.evaluating_worker`)."""
        self.processes = processes
        self._pool = Pool(processes, factory, settings, pin=True)

    def pids(self) -> list[int]:
        """The process ids of the running workers (none before the first call)."""
        return self._pool.pids()

    def map(self, pieces: Iterable[Sequence], level: str, options: dict,
            done: Callable[[int], None] | None = None) -> Iterator[tuple[list[dict], dict]]:
        """Each piece's ``(tables, seconds)``, in order; ``done(n)`` as ``n`` more plans are
        evaluated (workers report their kernel chunks as they finish, not only whole
        pieces, so a first result shows after a worker's first chunk).

        ``pieces`` is read here one piece at a time while the workers already evaluate
        the pieces before it (a generator that validates plans, say); an error it raises
        stops the workers and is raised.
        """
        # Pieces go to whichever worker is free, in order, so the workers stay busy however
        # uneven the pieces are (which shape a plan runs at is kept per shape key, on disk,
        # so it does not depend on which worker evaluates it). On the pool's first call the
        # others start once the first piece is back: what it compiled, they then load, and
        # the shapes it chose, they reuse, instead of compiling shapes of their own at the
        # same time; unless the first worker finds the kernel store warm (shapes of this
        # level kept by an earlier process), when all start at once. Workers that need one
        # new kernel at once take turns compiling it (``KernelStore``): the second loads it.
        sizes: list[int] = []
        reported: list[int] = []  # per piece: plans reported done so far

        def requests() -> Iterator[tuple]:
            for piece in pieces:
                sizes.append(len(piece))
                reported.append(0)
                yield [plan.SerializeToString() for plan in piece], level, options

        def report(index: int, count: int) -> None:
            if done is not None and count > reported[index]:
                done(count - reported[index])
            reported[index] = max(reported[index], count)

        results = {}
        for index, answer in self._pool.run(
                requests(), on_note=lambda index, kind, count: report(index, count),
                first_alone=True):
            report(index, sizes[index])
            results[index] = answer
        for index in range(len(sizes)):
            yield results[index]

    def close(self, kill: bool = False) -> None:
        """Stop the workers: at once with ``kill``, else once they finish their request."""
        self._pool.close(kill)


class PreparingPool:
    """Worker processes that prepare shares of a call's plans (validate, analyse, lower)
    for an accelerator that this process owns: the host's cores do the Python work, the
    device runs every kernel, in calls as large as the prepared programs allow. Workers
    never import JAX (:mod:`xsweep.workers`: they could not open the device anyway)."""

    def __init__(self, processes: int, template_bytes: int):
        self.processes = processes
        self._pool = Pool(processes, preparer, template_bytes)

    def pids(self) -> list[int]:
        """The process ids of the running workers (none before the first call)."""
        return self._pool.pids()

    def prepared(self, pieces: Iterable[Sequence], inputs: tuple
                 ) -> Iterator[tuple[int, PreparedPiece]]:
        """``(index, PreparedPiece)`` of each piece of validated plans, in the order they
        are ready; ``inputs`` is ``(catalog, profile, cost)``.

        ``pieces`` is read here one piece at a time while the workers prepare the ones
        before it; an error it raises stops the workers and is raised.
        """
        requests = ([plan.SerializeToString() for plan in piece] for piece in pieces)
        yield from self._pool.run((plans, inputs) for plans in requests)

    def close(self, kill: bool = False) -> None:
        """Stop the workers: at once with ``kill``, else once they finish their request."""
        self._pool.close(kill)
