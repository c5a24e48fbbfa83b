"""Pickled messages between a process and the worker processes it started, over their
standard input and output (length-prefixed; nothing else may write on those streams)."""

from __future__ import annotations

import pickle
import struct

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
