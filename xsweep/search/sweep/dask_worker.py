"""What a Dask worker process keeps for sweeps: its session.

Imported only where Dask is (the :class:`~xsweep.search.sweep.distributed.DaskExecutor`
and the workers of its cluster), since a plugin of Dask's is a subclass of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from distributed import WorkerPlugin, get_worker


class WorkerSessions(WorkerPlugin):
    """The session of a Dask worker process (:class:`~xsweep.search.evaluation.Session`),
    kept by Dask on the worker. Registered once per cluster: a later sweep's executor
    finds it there and leaves it, so a worker keeps its session from sweep to sweep as it
    keeps its process."""

    name = "xsweep-sessions"
    idempotent = True

    def setup(self, worker) -> None:
        self._lock = threading.Lock()  # made on the worker: a lock does not travel
        self._session = None

    def session(self):
        """The worker's session, made on its first unit (its threads share it)."""
        with self._lock:
            if self._session is None:
                from xsweep.search.evaluation import Session

                self._session = Session()
            return self._session


def in_worker_session(fn: Callable, job, *args):
    """``fn(session, job, *args)`` in the session of the Dask worker this runs on."""
    return fn(get_worker().plugins[WorkerSessions.name].session(), job, *args)
