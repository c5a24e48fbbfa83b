"""One worker process of a :class:`~xsweep.evaluator.workers.WorkerPool`.

Run as ``python -m xsweep.evaluator.worker``: it reads its evaluator's settings, then
requests (serialized plans, level, options) on standard input, and answers each on
standard output: ``("progress", done)`` as its kernel chunks finish (at most every
``PROGRESS_EVERY`` seconds, the first at once), then the result tables and timings of
:meth:`~xsweep.evaluator.Evaluator.tables`, or the traceback of a failure.
"""

from __future__ import annotations

import gc
import signal
import sys
import time
import traceback

from xsweep.pipes import receive, send

#: Seconds between two progress messages of one request at least.
PROGRESS_EVERY = 0.2


def serve() -> None:
    """Answer requests until the input closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's to handle
    from xsweep.evaluator.evaluator import Evaluator
    from xsweep.spec.plan_io import DeploymentPlan

    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write on the answer stream
    evaluator = Evaluator(processes=1, **receive(requests))
    # the interpreter's collector scans every object it tracks, a few hundred thousand
    # after JAX loads, in each full collection (about 0.2 s, every few thousand
    # plans); what is loaded by now lives as long as the worker, so it is left out
    gc.freeze()
    while True:
        try:
            plans, level, options = receive(requests)
        except EOFError:
            return
        last = [-PROGRESS_EVERY]

        def report(done: int, total: int, last=last) -> None:
            now = time.monotonic()
            if now - last[0] >= PROGRESS_EVERY:
                last[0] = now
                send(answers, ("progress", done))

        try:
            # a warm kernel store: the other workers need not wait for this one's first
            # answer to load what it compiled (xsweep.evaluator.workers)
            send(answers, ("warm", evaluator.shapes_known(level, options.get("dtype"))))
            messages = [DeploymentPlan.FromString(data) for data in plans]
            send(answers, ("ok", evaluator.tables(messages, level, progress=report, **options)))
        except Exception:  # reported to the caller, which raises it
            send(answers, ("error", traceback.format_exc()))


if __name__ == "__main__":
    serve()
