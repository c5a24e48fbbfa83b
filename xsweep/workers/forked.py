"""A worker process forked from the caller instead of started anew (see :class:`Pool`'s
``fork``): it has every module the caller imported, so it answers at once rather than
after importing them again (0.3-0.4 s of the planner's imports on 2 cores).

Forking is done only where it is safe (:func:`fork_safe`): on Linux, from a process with
one thread and without JAX, whose threads a fork would not copy. The child keeps
standard error and the two pipes to the caller, closes every other descriptor it
inherited (the caller's files and locks stay the caller's), and ends with ``os._exit``,
running none of the caller's exit handlers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import traceback


def fork_safe() -> bool:
    """Whether this process may fork a worker: Linux, one thread, JAX not loaded."""
    return (sys.platform.startswith("linux") and hasattr(os, "fork")
            and threading.active_count() == 1 and "jax" not in sys.modules)


class Forked:
    """A worker forked from this process, serving on two pipes, with the part of
    :class:`subprocess.Popen`'s interface the pool uses (``pid``, ``stdin``, ``stdout``,
    ``poll``, ``wait``, ``kill``, ``returncode``); ``env``: variables set in the child."""

    def __init__(self, env: dict[str, str]):
        to_child, from_parent = os.pipe()
        from_child, to_parent = os.pipe()
        for stream in (sys.stdout, sys.stderr):  # nothing buffered here is written twice
            if stream is not None:
                stream.flush()
        pid = os.fork()
        if pid == 0:
            _child(to_child, to_parent, env)  # never returns
        os.close(to_child)
        os.close(to_parent)
        self.pid = pid
        self.stdin = os.fdopen(from_parent, "wb")
        self.stdout = os.fdopen(from_child, "rb")
        self.returncode: int | None = None
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        with self._lock:
            if self.returncode is None:
                try:
                    done, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:  # reaped elsewhere: its status is lost
                    done, status = self.pid, 0
                if done:
                    self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
            time.sleep(0.005)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


def _child(requests: int, answers: int, env: dict[str, str]) -> None:
    code = 1
    try:
        os.dup2(requests, 0)
        os.dup2(answers, 1)
        for fd in os.listdir("/proc/self/fd"):  # those open, not every possible number
            if int(fd) > 2:
                with contextlib.suppress(OSError):  # the listing's own, closed by now
                    os.close(int(fd))
        os.environ.update(env)
        from xsweep.workers.serve import serve

        serve(os.fdopen(0, "rb"), os.fdopen(1, "wb"))
        code = 0
    except BaseException:  # noqa: BLE001 - reported on standard error, then the exit code
        traceback.print_exc()
    finally:
        os._exit(code)
