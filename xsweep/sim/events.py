"""The event core: a clock and a heap of future events, plus the observer interface.

Events are ordered by ``(time, priority, sequence)``: events at one instant pop
in priority order and, within a priority, in the order they were scheduled, so a
run is deterministic. The clock never runs backwards. The core knows nothing of
tasks or flows; the engine gives meaning to the ``(kind, item)`` it stores, and
everything that records or exports a run listens through :class:`Observer`.
"""

from __future__ import annotations

import heapq
import math

import numpy as np


class EventQueue:
    """The simulation clock and its pending events (one instance per simulation)."""

    __slots__ = ("_heap", "_sequence", "now_s")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._sequence = 0
        self.now_s = 0.0

    def __len__(self) -> int:
        return len(self._heap)

    def schedule(self, time_s: float, priority: int, kind: int, item: int) -> None:
        """Add an event at ``time_s`` (not before the current time)."""
        assert time_s >= self.now_s, f"event at {time_s} scheduled in the past ({self.now_s})"
        heapq.heappush(self._heap, (time_s, priority, self._sequence, kind, item))
        self._sequence += 1

    def next_time_s(self) -> float:
        """Time of the earliest pending event (infinity when there is none)."""
        return self._heap[0][0] if self._heap else math.inf

    def advance(self, time_s: float) -> None:
        """Move the clock to ``time_s``; time never goes backwards."""
        assert time_s >= self.now_s, f"time ran backwards: {time_s} < {self.now_s}"
        self.now_s = time_s

    def pop_due(self) -> tuple[int, int] | None:
        """Remove and return ``(kind, item)`` of the next event due now, or None."""
        heap = self._heap
        if heap and heap[0][0] <= self.now_s:
            _, _, _, kind, item = heapq.heappop(heap)
            return kind, item
        return None


class Observer:
    """Receives what happens in a simulation; override the hooks you need.

    Hooks are called after the engine has applied the change. Arrays passed to a
    hook are views of engine state: copy them to keep them.
    """

    def on_task_start(self, time_s: float, task: int) -> None:
        """Task ``task`` started."""

    def on_task_end(self, time_s: float, task: int) -> None:
        """Task ``task`` finished."""

    def on_flow_active(self, time_s: float, flow: int) -> None:
        """Flow ``flow`` finished its latency and is ready to transfer."""

    def on_flow_end(self, time_s: float, flow: int) -> None:
        """Flow ``flow`` delivered its last byte."""

    def on_rates(self, time_s: float, flows: np.ndarray, rates_bytes_per_s: np.ndarray) -> None:
        """Max-min rates of every transferring flow, from ``time_s`` until the next update."""
