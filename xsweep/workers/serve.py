"""One worker process of a :class:`~xsweep.workers.Pool`.

Run as ``python -m xsweep.workers.serve``. It reads, on standard input:

- ``("setup", factory, settings)`` once, first: its handler is ``factory(settings)``
  (``factory`` travels by name, so it must be importable);
- ``("context", value)``: what the following requests share (a sweep's job, say),
  kept until the next context;
- ``("call", request)``: answered on standard output with any number of
  ``("note", kind, payload)`` that the handler sends while it works, then
  ``("ok", handler(request, context, note))`` or ``("error", traceback)``.

It ends when its input closes. A handler that could not be made answers every request
with the traceback of that failure, so the caller hears of it at its first request.
"""

from __future__ import annotations

import gc
import pickle
import signal
import sys
import traceback

from xsweep.workers.pipes import receive, send


def serve(requests=None, answers=None) -> None:
    """Answer requests until the input closes: read from ``requests``, answered on
    ``answers`` (binary streams; by default standard input and output)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's to handle
    requests = requests if requests is not None else sys.stdin.buffer
    answers = answers if answers is not None else sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write on the answer stream

    def note(kind: str, payload: object = None) -> None:
        send(answers, ("note", kind, payload))

    handler, broken, context = None, None, None
    while True:
        try:
            message = receive(requests)
        except EOFError:
            return
        kind = message[0]
        if kind == "setup":
            try:
                handler = message[1](message[2])
            except Exception:
                broken = traceback.format_exc()
            # what is loaded by now lives as long as the worker: the collector need not
            # scan it again in every full collection (a few hundred thousand objects
            # once JAX is loaded, about 0.2 s a collection)
            gc.freeze()
            continue
        if kind == "context":
            context = message[1]
            continue
        try:
            if broken is not None:
                answer = ("error", broken)
            else:
                answer = ("ok", handler(message[1], context, note))
        except Exception:  # reported to the caller, which raises it
            answer = ("error", traceback.format_exc())
        try:
            try:
                send(answers, answer)
            except (pickle.PicklingError, TypeError, AttributeError) as error:  # cannot travel
                send(answers, ("error", f"the answer could not be sent back: "
                                        f"{type(error).__name__}: {error}"))
        except OSError:  # the caller is gone (killed, say): nobody to answer
            return
        release_memory()


def _trim():
    """glibc's ``malloc_trim`` (None elsewhere)."""
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_TRIM = _trim()


def release_memory() -> None:
    """Give the memory a request freed back to the system. glibc keeps freed memory in its
    heaps for reuse, and a worker's requests free a lot (a unit's plans, programs and
    arrays): measured on the sweep of the large space, a unit worker held 820 MB after
    60 units, 680 MB when trimmed after each (a few milliseconds a unit)."""
    if _TRIM is not None:
        _TRIM(0)


if __name__ == "__main__":
    serve()
