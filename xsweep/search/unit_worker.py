"""One worker process of a :class:`~xsweep.search.processes.ProcessExecutor`.

Run as ``python -m xsweep.search.unit_worker``: it reads ``("job", id, job)`` and
``("unit", id, function, args)`` requests on standard input and answers each unit on
standard output with ``("ok", function(job, *args))`` or the traceback of a failure.
Its units share one single-process evaluator (:func:`xsweep.search.tasks.session`).
"""

from __future__ import annotations

import gc
import signal
import sys
import traceback

from xsweep.pipes import receive, send

#: Bytes of program structures a worker keeps between units.
UNIT_TEMPLATE_BYTES = 64 * 2**20


def serve() -> None:
    """Answer requests until the input closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's to handle
    from xsweep.evaluator import Evaluator
    from xsweep.search import tasks

    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write on the answer stream
    # the bound phase's walk puts every variant of a structure in one unit, so few
    # structures are met again in a later unit: a smaller store of them keeps each
    # worker's memory down
    tasks.start_session(Evaluator(processes=1, template_bytes=UNIT_TEMPLATE_BYTES))
    gc.freeze()  # what is loaded by now lives as long as the worker (see the evaluator's)
    jobs: dict[int, object] = {}
    while True:
        try:
            message = receive(requests)
        except EOFError:
            return
        if message[0] == "job":
            jobs[message[1]] = message[2]
            continue
        _, job, fn, args = message
        try:
            answer = ("ok", fn(jobs[job], *args))
        except Exception:  # reported to the caller, which raises it
            answer = ("error", traceback.format_exc())
        try:
            send(answers, answer)
        except OSError:  # the caller is gone (killed, say): nobody to answer
            return


if __name__ == "__main__":
    serve()
