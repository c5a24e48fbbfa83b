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

import contextlib
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence

from xsweep.pipes import WorkerError, receive, send, stop


class WorkerPool:
    """Worker processes that evaluate shares of a call's plans (started on first use)."""

    def __init__(self, processes: int, settings: dict):
        self.processes = processes
        self._settings = settings
        self._workers: list[subprocess.Popen] = []
        self._pinned = False

    def _start(self) -> None:
        env = dict(os.environ, XSWEEP_CPU_DEVICES="1")
        self._pinned = False
        for _ in range(self.processes):
            worker = subprocess.Popen([sys.executable, "-m", "xsweep.evaluator.worker"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
            send(worker.stdin, self._settings)
            self._workers.append(worker)

    def _pin(self) -> None:
        """One core each, once all workers run: a worker that moves between cores, or whose
        compiled code spreads threads over its neighbour's core, runs 5-10% slower
        (measured). Not before: a worker alone (compiling a first piece) uses every core."""
        if self._pinned or not hasattr(os, "sched_setaffinity"):
            return
        self._pinned = True
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) >= len(self._workers):
            for core, worker in zip(cores, self._workers, strict=False):
                with contextlib.suppress(OSError):  # it ended meanwhile: nothing to pin
                    os.sched_setaffinity(worker.pid, {core})

    def map(self, pieces: Iterable[Sequence], level: str, options: dict,
            done: Callable[[int], None] | None = None) -> Iterator[tuple[list[dict], dict]]:
        """Each piece's ``(tables, seconds)``, in order; ``done(n)`` as ``n`` more plans are
        evaluated (workers report their kernel chunks as they finish, not only whole
        pieces, so a first result shows after a worker's first chunk).

        ``pieces`` is read here one piece at a time while the workers already evaluate
        the pieces before it (a generator that validates plans, say); an error it raises
        stops the workers and is raised.
        """
        first_call = not self._workers
        if first_call:
            self._start()
        # Pieces go to whichever worker is free, in order, so the workers stay busy however
        # uneven the pieces are (which shape a plan runs at is kept per shape key, on disk,
        # so it does not depend on which worker evaluates it). On the pool's first call the
        # others start once the first piece is back: what it compiled, they then load, and
        # the shapes it chose, they reuse, instead of compiling shapes of their own at the
        # same time; unless the first worker finds the kernel store warm (shapes of this
        # level kept by an earlier process), when all start at once. Workers that need one
        # new kernel at once take turns compiling it (``KernelStore``): the second loads it.
        todo: queue.Queue = queue.Queue()
        results: dict[int, object] = {}
        finished: queue.Queue = queue.Queue()  # (piece, plans done so far; None: all)
        first_back = threading.Event()
        if not first_call:
            self._pin()
            first_back.set()

        def serve(worker: subprocess.Popen, first: bool) -> None:
            if not first:
                first_back.wait()
            while (item := todo.get()) is not None:
                index, plans = item
                try:
                    send(worker.stdin, (plans, level, options))
                    while (answer := receive(worker.stdout))[0] in ("progress", "warm"):
                        if answer[0] == "progress":
                            finished.put((index, answer[1]))
                        elif answer[1] and not first_back.is_set():  # nothing to compile first
                            self._pin()
                            first_back.set()
                    results[index] = answer
                except (OSError, EOFError, ValueError) as error:  # ValueError: stopped by us
                    results[index] = ("error", f"worker process failed: {error}")
                if not first_back.is_set():
                    self._pin()
                    first_back.set()
                finished.put((index, None))

        threads = [threading.Thread(target=serve, args=(w, n == 0), daemon=True)
                   for n, w in enumerate(self._workers)]
        for thread in threads:
            thread.start()
        sizes: list[int] = []
        reported: list[int] = []  # per piece: plans reported done so far
        collected = 0

        def collect(block: bool) -> bool:
            nonlocal collected
            try:
                index, count = finished.get(block=block)
            except queue.Empty:
                return False
            if count is None:
                outcome = results[index]
                if outcome[0] == "error":
                    raise WorkerError(outcome[1])
                collected += 1
                count = sizes[index]
            if done is not None and count > reported[index]:
                done(count - reported[index])
            reported[index] = max(reported[index], count)
            return True

        try:
            for piece in pieces:
                sizes.append(len(piece))
                reported.append(0)
                todo.put((len(sizes) - 1, [plan.SerializeToString() for plan in piece]))
                while collect(block=False):
                    pass
            for _ in threads:
                todo.put(None)
            while collected < len(sizes):
                collect(block=True)
        except BaseException:  # an error, or Ctrl-C: the workers' answers are lost
            with contextlib.suppress(queue.Empty):
                while True:  # no piece left for the threads: they take their stop next
                    todo.get_nowait()
            for _ in threads:
                todo.put(None)
            first_back.set()
            self.close(kill=True)
            for thread in threads:
                thread.join()
            raise
        for thread in threads:
            thread.join()
        for index in range(len(sizes)):
            yield results[index][1]

    def close(self, kill: bool = False) -> None:
        """Stop the workers: at once with ``kill``, else once they finish their request."""
        stop(self._workers, kill)
        self._workers = []
