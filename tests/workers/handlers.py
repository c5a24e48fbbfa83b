"""Handler factories for the worker-pool tests: importable, so they travel by name."""

from __future__ import annotations

import os
import threading
import time


def arithmetic(settings):
    """Answers ``(op, a, b)`` with the sum or quotient, plus the context; ``("die", code)``
    ends the worker at once; ``("lambda",)`` answers something that cannot be pickled;
    ``("sleep", s)`` sleeps and notes its progress."""

    def handle(request, context, note):
        op = request[0]
        if op == "die":
            os._exit(request[1])
        if op == "lambda":
            return lambda: None
        if op == "big":  # ("big", payload, answer_bytes): a large request and answer
            return len(request[1]), b"y" * request[2]
        if op == "sleep":
            for step in range(3):
                time.sleep(request[1] / 3)
                note("progress", step + 1)
            return "slept"
        if op == "platforms":
            import jax

            return sorted({device.platform for device in jax.devices()}), \
                os.environ.get("JAX_PLATFORMS")
        a, b = request[1:]
        return (a + b if op == "add" else a / b), context

    return handle


def broken(settings):
    """A factory that fails: every request is answered with its traceback."""
    raise RuntimeError(f"cannot make a handler of {settings!r}")


def unpicklable_context():
    """A context that cannot be pickled (a lock)."""
    return threading.Lock()
