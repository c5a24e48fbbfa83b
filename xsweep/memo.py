"""Bounded memos of what the host computes again and again for the variants of a sweep.

The plans of a sweep repeat their parts: the same device groups under other GPU
models, the same cluster under other recompute settings. What a pure function makes
of one part is kept here, keyed by that part (its serialized bytes, which hash once
and compare as fast as memory does), so the next plan with an equal part pays a
lookup. A memo keeps only results, never errors: an invalid input runs its check
again and raises what it raised the first time.

Keys may hold ``id()`` of immutable objects (catalog entries, a model, a stack) that
the stored value keeps alive, so no other object can take the same id while the
entry lives. Every memo is bounded by count and by an estimate of its bytes;
:func:`clear_memos` empties them all (a fresh process's state, for comparisons).
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
F = TypeVar("F", bound=Callable)

_MISSING = object()
_MEMOS: weakref.WeakSet[Memo] = weakref.WeakSet()
_CACHED: list = []  # the functions of cached()


def _one(key: object, value: object) -> int:
    return 1


class Memo(Generic[K, V]):
    """Values by key, at most ``size`` of them and ``max_bytes`` as ``weigh(key, value)``
    counts them (least recently used go first)."""

    def __init__(self, size: int, max_bytes: int | None = None,
                 weigh: Callable[[K, V], int] = _one) -> None:
        self.size, self.max_bytes, self.weigh = size, max_bytes, weigh
        self._values: dict[K, tuple[V, int]] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        _MEMOS.add(self)

    def __len__(self) -> int:
        return len(self._values)

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The value of ``key``, made by ``make()`` the first time (and kept).

        Safe to call from several threads: the table changes under a lock, ``make`` runs
        outside it (two threads may both make a missing value; both are the same).
        """
        with self._lock:
            entry = self._values.pop(key, _MISSING)
            if entry is not _MISSING:
                self._values[key] = entry  # most recently used last
                return entry[0]
        value = make()
        weight = self.weigh(key, value) if self.max_bytes is not None else 0
        with self._lock:
            made = self._values.pop(key, None)  # by another thread meanwhile: keep one
            self._bytes += weight - (made[1] if made is not None else 0)
            while self._values and (len(self._values) >= self.size or (
                    self.max_bytes is not None and self._bytes > self.max_bytes)):
                self._bytes -= self._values.pop(next(iter(self._values)))[1]
            self._values[key] = (value, weight)
        return value

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._bytes = 0


def cached(size: int, max_bytes: int | None = None,
           weigh: Callable[[object], int] | None = None) -> Callable[[F], F]:
    """``functools.lru_cache(maxsize=size)`` for a pure function of hashable (positional)
    arguments, emptied by :func:`clear_memos` too. With ``max_bytes``, its results are
    also kept to that many bytes as ``weigh(result)`` counts them (a :class:`Memo`)."""
    def wrap(function: F) -> F:
        if max_bytes is None:
            memoized = functools.lru_cache(maxsize=size)(function)
            _CACHED.append(memoized)
            return memoized  # type: ignore[return-value]
        memo: Memo = Memo(size, max_bytes, lambda key, value: weigh(value))

        @functools.wraps(function)
        def weighed(*args):
            return memo.get(args, lambda: function(*args))

        weighed.cache_clear = memo.clear  # type: ignore[attr-defined]
        return weighed  # type: ignore[return-value]
    return wrap


def clear_memos() -> None:
    """Empty every memo of the process (those of :func:`cached` too)."""
    for memo in list(_MEMOS):
        memo.clear()
    for function in _CACHED:
        function.cache_clear()
