"""Evaluating plans on worker processes, one per core of a CPU host.

Preparing plans (validation, analysis, lowering) is Python and runs on one core, while
a CPU host has several. A :class:`WorkerPool` starts one process per core, each with
its own single-device :class:`~xsweep.evaluator.Evaluator` (its own program structures,
compiled kernels and derived layouts, which it keeps from call to call), and hands
each a share of the plans: every core then prepares and evaluates its share, and only
the results (arrays over the variants) come back. Compiled kernels reach every worker
through the disk cache. Results are the same as in one process, bit for bit.

Processes are started with ``spawn`` (JAX runs threads, which ``fork`` does not
copy), on first use, and stop with the pool.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
from collections.abc import Callable, Iterator, Sequence

_evaluator = None  # in a worker process: its own evaluator


def _start(settings: dict) -> None:
    """Worker initialiser: one CPU device, then an evaluator with ``settings``."""
    global _evaluator
    from xsweep.runtime import use_cpu_devices

    use_cpu_devices(1)
    from xsweep.evaluator.evaluator import Evaluator

    _evaluator = Evaluator(processes=1, **settings)


def _evaluate(plans: Sequence, level: str, options: dict) -> tuple[list[dict], dict]:
    """In a worker: the result tables of ``plans`` and where the time went."""
    return _evaluator.tables(plans, level, **options)


class WorkerPool:
    """Worker processes that evaluate shares of a call's plans (started on first use)."""

    def __init__(self, processes: int, settings: dict):
        self.processes = processes
        self._settings = settings
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    def map(self, pieces: Sequence[Sequence], level: str, options: dict,
            done: Callable[[int], None] | None = None) -> Iterator[tuple[list[dict], dict]]:
        """Each piece's ``(tables, seconds)``, in order; ``done(n)`` as pieces of ``n``
        plans finish."""
        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(
                self.processes, mp_context=multiprocessing.get_context("spawn"),
                initializer=_start, initargs=(self._settings,))
        futures = [self._pool.submit(_evaluate, piece, level, options) for piece in pieces]
        try:
            if done is not None:
                sizes = {f: len(p) for f, p in zip(futures, pieces, strict=True)}
                for future in concurrent.futures.as_completed(futures):
                    future.result()
                    done(sizes[future])
            for future in futures:
                yield future.result()
        finally:
            for future in futures:
                future.cancel()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
