"""Ctrl-C that is never lost, for every command (loaded first, before any heavy import)."""

from __future__ import annotations

import os
import signal
import sys


def redeliver_interrupts() -> None:
    """Make sure a Ctrl-C is never lost: a ``sys.unraisablehook`` (installed once) that
    sends SIGINT again when a KeyboardInterrupt was swallowed.

    Python raises KeyboardInterrupt wherever the main thread is. If that is a callback
    whose exceptions Python reports and swallows (a weak-reference callback: importlib's
    module locks while modules load, SQLAlchemy's under an Optuna storage; a
    garbage-collector callback: JAX registers one; a ``__del__``), the interrupt would
    be lost and the command would run on. The hook sends the signal again a moment
    later, from another thread, so that it lands outside the callback. Every other
    unraisable exception goes to the hook that was there before.
    """
    previous = sys.unraisablehook
    if getattr(previous, "redelivers_interrupts", False):
        return

    def hook(unraisable) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            import threading

            threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGINT)).start()
            return
        previous(unraisable)

    hook.redelivers_interrupts = True
    sys.unraisablehook = hook
