"""Running a sweep's units on worker processes of this machine, one per core.

A unit (:mod:`xsweep.search.tasks`) plans its points and evaluates them; done in one
process, its Python work (planning, analysis, lowering) runs on one core. A
:class:`ProcessExecutor` runs whole units on worker processes instead, as the Dask
executor does on a cluster: each worker plans and evaluates its unit alone, keeps its
program structures and compiled kernels from unit to unit, and takes the next unit as
soon as it is done, so the cores stay busy however uneven the units are, and a unit's
structures are built in one process only (the bound phase's walk keeps the numeric
variants of a structure in one unit).

Workers are ``python -m xsweep.search.unit_worker`` processes with one CPU device and
a single-process evaluator, talking pickles over their standard input and output (as
the evaluator's own workers, :mod:`xsweep.evaluator.workers`). The sweep's job is sent
to each once. Ctrl-C reaches the caller, which stops the workers; they ignore it.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence

from xsweep.pipes import WorkerError, receive, send, stop


class ProcessExecutor:
    """Runs units on ``processes`` worker processes (started on first use), yielding
    each result as it finishes."""

    def __init__(self, processes: int):
        self.processes = processes
        self._workers: list[subprocess.Popen] = []
        self._jobs: list[set[int]] = []  # per worker: the jobs it holds (by id)
        self._alive: dict[int, object] = {}  # those jobs, so that no other takes their id

    def _start(self) -> None:
        env = dict(os.environ, XSWEEP_CPU_DEVICES="1")
        for _ in range(self.processes):
            self._workers.append(subprocess.Popen(
                [sys.executable, "-m", "xsweep.search.unit_worker"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, env=env))
            self._jobs.append(set())

    def run(self, fn: Callable, job, items: Sequence[tuple]) -> Iterator[tuple]:
        """Yield ``(key, fn(job, *args))`` for each ``(key, args)`` of ``items``, in the
        order they finish (``fn`` must be importable: it travels by name)."""
        if not items:
            return
        if not self._workers:
            self._start()
        self._alive[id(job)] = job
        todo: queue.Queue = queue.Queue()
        for item in items:
            todo.put(item)
        finished: queue.Queue = queue.Queue()

        def serve(worker: subprocess.Popen, held: set[int]) -> None:
            while True:
                try:
                    key, args = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    if id(job) not in held:
                        send(worker.stdin, ("job", id(job), job))
                        held.add(id(job))
                    send(worker.stdin, ("unit", id(job), fn, args))
                    answer = receive(worker.stdout)
                except (OSError, EOFError) as error:
                    answer = ("error", f"worker process failed: {error}")
                finished.put((key, answer))
                if answer[0] == "error":
                    return

        threads = [threading.Thread(target=serve, args=(w, held), daemon=True)
                   for w, held in zip(self._workers, self._jobs, strict=True)]
        for thread in threads:
            thread.start()
        try:
            for _ in items:
                key, (status, value) = finished.get()
                if status == "error":
                    raise WorkerError(value)
                yield key, value
        except BaseException:  # an error, Ctrl-C, or the caller stopped early
            self.close(kill=True)
            raise
        for thread in threads:
            thread.join()

    def close(self, kill: bool = False) -> None:
        """Stop the workers: at once with ``kill``, else once they finish their unit."""
        stop(self._workers, kill)
        self._workers, self._jobs, self._alive = [], [], {}
