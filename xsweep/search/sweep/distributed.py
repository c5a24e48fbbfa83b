"""Where a sweep's units of work run: in this process, or on a Dask distributed cluster.

Both executors take the same units (:mod:`xsweep.search.sweep.units`) and yield each
result as it finishes; the caller writes it to the output folder, so resume works the
same either way and workers need no shared file system.

Each unit runs in the session of the process that runs it
(:class:`~xsweep.search.evaluation.Session`: an evaluator and the results it keeps). Here
that is the session the sweep's run passes to the :class:`LocalExecutor`. On a cluster
it is the Dask worker's: the :class:`DaskExecutor` registers a plugin
(:class:`~xsweep.search.sweep.dask_worker.WorkerSessions`) that Dask keeps on every
worker, those that join later too, and that makes the worker's session on its first
unit and keeps it for every later one, so each worker process compiles (or loads from
its own persistent cache) the kernels once and evaluates a plan it has met once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from xsweep.errors import InputError


class LocalExecutor:
    """Runs every unit in this process, one after another, in ``session`` (JAX uses all
    local devices)."""

    def __init__(self, session):
        self.session = session

    def run(self, fn: Callable, job, items: Sequence[tuple]) -> Iterator[tuple]:
        """Yield ``(key, fn(session, job, *args))`` for each ``(key, args)`` of ``items``."""
        for key, args in items:
            yield key, fn(self.session, job, *args)

    def close(self) -> None:
        pass


class DaskExecutor:
    """Runs units as tasks on the Dask scheduler at ``address`` (``tcp://host:8786``)."""

    def __init__(self, address: str, timeout_s: float = 30.0):
        try:
            from distributed import Client
        except ImportError:
            raise InputError(None, "--scheduler", address,
                             "needs Dask distributed: pip install 'xsweep[distributed]'") from None
        try:
            self.client = Client(address, timeout=timeout_s)
        except (OSError, TimeoutError) as error:
            raise InputError(None, "--scheduler", address,
                             f"cannot reach the Dask scheduler ({error})") from None
        from xsweep.search.sweep.dask_worker import WorkerSessions

        self.client.register_plugin(WorkerSessions())
        self._jobs: dict[int, object] = {}

    def workers(self) -> int:
        return len(self.client.scheduler_info().get("workers", {}))

    def run(self, fn: Callable, job, items: Sequence[tuple]) -> Iterator[tuple]:
        """Submit every unit at once and yield ``(key, result)`` in completion order, each
        unit ``fn(session, job, *args)`` run in the session of the worker that takes it."""
        from distributed import as_completed

        from xsweep.search.sweep.dask_worker import in_worker_session

        if id(job) not in self._jobs:  # ship the sweep and catalog to each worker once
            self._jobs[id(job)] = self.client.scatter(job, broadcast=True)
        shared = self._jobs[id(job)]
        futures = {self.client.submit(in_worker_session, fn, shared, *args, pure=False): key
                   for key, args in items}
        try:
            for future in as_completed(futures):
                yield futures[future], future.result()
        finally:
            self.client.cancel([f for f in futures if not f.done()])

    def close(self) -> None:
        self.client.close()
