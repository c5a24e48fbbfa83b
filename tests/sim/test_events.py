"""The event core: deterministic order at one instant, and a clock that never runs backwards."""

from __future__ import annotations

import pytest

from xsweep.sim.events import EventQueue


def _drain(queue: EventQueue) -> list[tuple[float, int, int]]:
    popped = []
    while len(queue):
        queue.advance(queue.next_time_s())
        while (event := queue.pop_due()) is not None:
            popped.append((queue.now_s, *event))
    return popped


def test_same_time_events_pop_by_priority_then_schedule_order():
    q = EventQueue()
    q.schedule(2.0, 1, 1, 10)
    q.schedule(1.0, 1, 1, 11)
    q.schedule(2.0, 0, 0, 12)
    q.schedule(2.0, 1, 1, 13)
    q.schedule(2.0, 0, 0, 14)
    assert _drain(q) == [(1.0, 1, 11), (2.0, 0, 12), (2.0, 0, 14), (2.0, 1, 10), (2.0, 1, 13)]


def test_events_scheduled_at_the_current_instant_run_in_it():
    q = EventQueue()
    q.schedule(1.0, 0, 0, 1)
    q.advance(1.0)
    assert q.pop_due() == (0, 1)
    q.schedule(1.0, 0, 0, 2)  # a zero-duration successor
    q.schedule(3.0, 0, 0, 3)
    assert q.pop_due() == (0, 2)
    assert q.pop_due() is None
    assert q.next_time_s() == 3.0


def test_time_never_goes_backwards():
    q = EventQueue()
    q.advance(5.0)
    with pytest.raises(AssertionError):
        q.advance(4.0)
    with pytest.raises(AssertionError):
        q.schedule(4.999, 0, 0, 0)


def test_two_queues_are_independent():
    a, b = EventQueue(), EventQueue()
    a.schedule(1.0, 0, 0, 0)
    a.advance(1.0)
    assert b.now_s == 0.0 and len(b) == 0 and b.next_time_s() == float("inf")
