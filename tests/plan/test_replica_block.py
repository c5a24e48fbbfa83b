"""Blocks without FSDP laid out by arrays: the round-robin order, and names only on request.

That these blocks lower to the same programs as the task-by-task reference, names
included, is checked by ``test_lower_identity``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from xsweep.plan.passes import build_block
from xsweep.plan.replica_block import emission_order


def test_streams_emit_what_they_can_in_turn():
    # stream 0: pieces 0, 1, 2; stream 1: pieces 3, 4, 5, each waiting for one of 0's
    order = emission_order([-1, -1, -1, 10, 11, 12], [10, 11, 12, -1, -1, -1], [(0, 3), (3, 6)])
    assert order.tolist() == [0, 1, 2, 3, 4, 5]


def test_a_waiting_stream_resumes_in_the_next_round():
    # stream 0 sends 10, then waits for 20, which stream 1 sends after receiving 10
    order = emission_order([-1, 20, 10, -1], [10, -1, 20, -1], [(0, 2), (2, 4)])
    assert order.tolist() == [0, 2, 3, 1]


def test_an_input_nobody_sends_is_a_deadlock():
    with pytest.raises(AssertionError, match="deadlocked"):
        emission_order([-1, 99], [-1, -1], [(0, 2)])


@pytest.mark.parametrize("schedule, v", [("1f1b", 1), ("gpipe", 1), ("1f1b", 2)])
def test_names_change_nothing_else(schedule, v):
    # two stages of 8 layers, the second at another TP degree (a resharding), 4 micro-batches
    replicas = (((2, 0, 7, 4), (4, 8, 15, 4)),)
    named = build_block(schedule, "hetauto", v, replicas, (4, 12), False, (), True)
    plain = build_block(schedule, "hetauto", v, replicas, (4, 12), False, (), False)
    assert plain.names is None and len(named.names) == named.tasks.num_tasks
    assert named.names[0].startswith("F dg{dg0} mb0")
    for field in dataclasses.fields(named):
        if field.name != "names":
            assert_same(getattr(named, field.name), getattr(plain, field.name), field.name)


def assert_same(a, b, name: str) -> None:
    """Equal values, arrays (alone or as the fields of a record) of equal dtypes."""
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    elif hasattr(a, "_fields"):  # a record of columns
        assert a._fields == b._fields, name
        for column, x, y in zip(a._fields, a, b, strict=True):
            assert_same(x, y, f"{name}.{column}")
    else:
        assert a == b, name
