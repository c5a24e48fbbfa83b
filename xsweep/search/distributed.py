"""Where a sweep's units of work run: in this process, or on a Dask distributed cluster.

Both executors take the same units (:mod:`xsweep.search.tasks`) and yield each result
as it finishes; the caller writes it to the output folder, so resume works the same
either way and workers need no shared file system. On a cluster each worker process
compiles (or loads from its own persistent cache) the kernels once and keeps them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from xsweep.errors import InputError


class LocalExecutor:
    """Runs every unit in this process, one after another (JAX uses all local devices)."""

    def run(self, fn: Callable, job, items: Sequence[tuple]) -> Iterator[tuple]:
        """Yield ``(key, fn(job, *args))`` for each ``(key, args)`` of ``items``."""
        for key, args in items:
            yield key, fn(job, *args)

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
        self._jobs: dict[int, object] = {}

    def workers(self) -> int:
        return len(self.client.scheduler_info().get("workers", {}))

    def run(self, fn: Callable, job, items: Sequence[tuple]) -> Iterator[tuple]:
        """Submit every unit at once and yield ``(key, result)`` in completion order."""
        from distributed import as_completed

        if id(job) not in self._jobs:  # ship the sweep and catalog to each worker once
            self._jobs[id(job)] = self.client.scatter(job, broadcast=True)
        shared = self._jobs[id(job)]
        futures = {self.client.submit(fn, shared, *args, pure=False): key for key, args in items}
        try:
            for future in as_completed(futures):
                yield futures[future], future.result()
        finally:
            self.client.cancel([f for f in futures if not f.done()])

    def close(self) -> None:
        self.client.close()
