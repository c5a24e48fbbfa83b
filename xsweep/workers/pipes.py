"""Pickled messages between a process and the worker processes it started, over their
standard input and output (length-prefixed; nothing else may write on those streams).

A message is pickled whole before a byte of it is written, so one that cannot be
pickled raises in the sender and leaves the stream as it was.
"""

from __future__ import annotations

import pickle
import struct
import subprocess
from collections.abc import Sequence

from xsweep.errors import XsweepError

_LENGTH = struct.Struct("<Q")
#: Bytes an answer pipe holds (Linux; where the system allows as much): a sweep's
#: planned chunk answers about 330 KB, which the default 64 KB pipe took in five parts,
#: each waiting for the caller's reading thread to get the interpreter's lock.
ANSWER_PIPE_BYTES = 2**20


def widen(stream) -> None:
    """Let the pipe of ``stream`` hold :data:`ANSWER_PIPE_BYTES` (or the most the system
    allows an unprivileged process): a worker then writes an answer whole and goes on,
    whenever the caller reads it. Nothing happens where pipes cannot be resized."""
    try:
        import fcntl

        with open("/proc/sys/fs/pipe-max-size") as limit:
            size = min(ANSWER_PIPE_BYTES, int(limit.read()))
        fcntl.fcntl(stream.fileno(), fcntl.F_SETPIPE_SZ, size)
    except (ImportError, AttributeError, OSError, ValueError):
        pass


def send(stream, message: object) -> None:
    write(stream, encode(message))


def encode(message: object) -> bytes:
    """``message`` as :func:`send` writes it (pickled whole: one that cannot be pickled
    raises here, with nothing written)."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(data)) + data


def write(stream, encoded: bytes) -> None:
    """Write a message :func:`encode` made."""
    stream.write(encoded)
    stream.flush()


def receive(stream) -> object:
    header = stream.read(_LENGTH.size)
    if len(header) < _LENGTH.size:
        raise EOFError("the worker process ended")
    (length,) = _LENGTH.unpack(header)
    data = stream.read(length)
    if len(data) < length:
        raise EOFError("the worker process ended in the middle of an answer")
    return pickle.loads(data)


class WorkerError(XsweepError, RuntimeError):
    """Work on a worker process failed: ``str()`` is one line (what failed and the last
    line of the worker's traceback), ``details`` the whole traceback where there is one."""

    def __init__(self, summary: str, details: str = ""):
        super().__init__(" ".join(summary.split()))
        self.details = details

    @classmethod
    def from_traceback(cls, text: str) -> WorkerError:
        """The error a worker reported with its traceback ``text``."""
        lines = [line for line in text.strip().splitlines() if line.strip()]
        return cls(f"a worker process failed: {lines[-1] if lines else 'no reason given'}",
                   text)


def stop(workers: Sequence[subprocess.Popen], kill: bool = False) -> None:
    """Stop worker processes: at once with ``kill``, else once they finish their request
    (their input closes, so they end)."""
    for worker in workers:
        try:
            if kill:
                worker.kill()
            worker.stdin.close()
            worker.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            worker.kill()
