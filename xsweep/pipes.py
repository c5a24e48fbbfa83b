"""Pickled messages between a process and the worker processes it started, over their
standard input and output (length-prefixed; nothing else may write on those streams)."""

from __future__ import annotations

import pickle
import struct
import subprocess
from collections.abc import Sequence

_LENGTH = struct.Struct("<Q")


def send(stream, message: object) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def receive(stream) -> object:
    header = stream.read(_LENGTH.size)
    if len(header) < _LENGTH.size:
        raise EOFError("the worker process ended")
    (length,) = _LENGTH.unpack(header)
    return pickle.loads(stream.read(length))


class WorkerError(RuntimeError):
    """A worker process failed; the message holds its traceback."""


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
