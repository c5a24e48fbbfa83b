"""Evaluating plans on worker processes, one per core of a CPU host.

Preparing plans (validation, analysis, lowering) is Python and runs on one core, while
a CPU host has several. A :class:`WorkerPool` starts one process per core, each with
its own single-device :class:`~xsweep.evaluator.Evaluator` (its own program structures,
compiled kernels and derived layouts, which it keeps from call to call), and hands
each a share of the plans: every core then prepares and evaluates its share, and only
the results (arrays over the variants) come back. Compiled kernels reach every worker
through the disk cache. Schedules are the same as in one process; float32 sums over
streams may round differently in the last bit where a share is padded to other shapes.

Workers are ``python -m xsweep.evaluator.worker`` processes that read requests on
their standard input and answer on their standard output (pickled, between this
process and its own children only): unlike ``multiprocessing``, nothing of the
caller's main module is run again in them, so a script without a ``__main__`` guard
or a notebook can use them. Plans travel as serialized protobuf messages.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence

from xsweep.pipes import WorkerError, receive, send, stop


class WorkerPool:
    """Worker processes that evaluate shares of a call's plans (started on first use)."""

    def __init__(self, processes: int, settings: dict):
        self.processes = processes
        self._settings = settings
        self._workers: list[subprocess.Popen] = []

    def _start(self) -> None:
        env = dict(os.environ, XSWEEP_CPU_DEVICES="1")
        for _ in range(self.processes):
            worker = subprocess.Popen([sys.executable, "-m", "xsweep.evaluator.worker"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
            send(worker.stdin, self._settings)
            self._workers.append(worker)

    def map(self, pieces: Sequence[Sequence], level: str, options: dict,
            done: Callable[[int], None] | None = None) -> Iterator[tuple[list[dict], dict]]:
        """Each piece's ``(tables, seconds)``, in order; ``done(n)`` as pieces of ``n``
        plans finish."""
        first_call = not self._workers
        if first_call:
            self._start()
        # Pieces go to whichever worker is free, in order, so the workers stay busy however
        # uneven the pieces are (which shape a plan runs at is kept per shape key, on disk,
        # so it does not depend on which worker evaluates it).
        todo: queue.Queue = queue.Queue()
        for index, piece in enumerate(pieces):
            todo.put((index, [plan.SerializeToString() for plan in piece]))
        results: dict[int, object] = {}
        finished: queue.Queue = queue.Queue()
        # On the pool's first call the others start once the first piece is back: what it
        # compiled, they then load from the disk cache instead of compiling the same
        # kernels at the same time. Later calls find most of their shapes compiled.
        first_back = threading.Event()
        if not first_call:
            first_back.set()

        def serve(worker: subprocess.Popen, first: bool) -> None:
            if not first:
                first_back.wait()
            while True:
                try:
                    index, plans = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    send(worker.stdin, (plans, level, options))
                    results[index] = receive(worker.stdout)
                except (OSError, EOFError) as error:
                    results[index] = ("error", f"worker process failed: {error}")
                first_back.set()
                finished.put(index)

        threads = [threading.Thread(target=serve, args=(w, n == 0), daemon=True)
                   for n, w in enumerate(self._workers)]
        for thread in threads:
            thread.start()
        try:
            for _ in pieces:
                index = finished.get()
                outcome = results[index]
                if outcome[0] == "error":
                    raise WorkerError(outcome[1])
                if done is not None:
                    done(len(pieces[index]))
        except BaseException:  # an error, or Ctrl-C: the workers' answers are lost
            self.close(kill=True)
            raise
        for thread in threads:
            thread.join()
        for index in range(len(pieces)):
            yield results[index][1]

    def close(self, kill: bool = False) -> None:
        """Stop the workers: at once with ``kill``, else once they finish their request."""
        stop(self._workers, kill)
        self._workers = []
