"""The bound level: a lower bound on the exact times, equal to them without contention."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xsweep.kernels import (
    BlockedProgram,
    Status,
    blocked_bound,
    bound,
    contention_free_durations,
    max_plus_schedule,
)

from xsweep.evaluator import blocks as host
from xsweep.evaluator import default_evaluator
from xsweep.evaluator.blocks import block_form, block_layout, encode_blocks
from xsweep.evaluator.encode import encode
from xsweep.evaluator.shapes import BlockShape, Shape
from xsweep.plan.program import Category, ProgramBuilder
from xsweep.sim import simulate

_bound = jax.jit(bound)
_bound_batch = jax.jit(jax.vmap(bound))
_blocked = jax.jit(blocked_bound)
_blocked_batch = jax.jit(jax.vmap(blocked_bound))


def test_bound_never_exceeds_exact(random_programs, random_sims, bound_float32, exact_float32):
    assert np.all(bound_float32["status"] == Status.OK)
    exact_s = np.array([s.iteration_time_s for s in random_sims])
    assert np.all(bound_float32["iteration_time_s"] <= exact_s * (1 + 1e-6))
    # against the float32 exact level, up to its documented rounding
    assert np.all(bound_float32["iteration_time_s"] <= exact_float32["iteration_time_s"] * (1 + 1e-5))
    assert np.any(bound_float32["iteration_time_s"] < 0.9 * exact_s)  # contention shows
    # the proof holds task by task, not only for the makespan
    for i, (p, s) in enumerate(zip(random_programs, random_sims, strict=True)):
        slack = 1e-6 * s.iteration_time_s
        assert np.all(bound_float32["start_s"][i, : p.num_tasks] <= s.task_start_s + slack)
        assert np.all(bound_float32["end_s"][i, : p.num_tasks] <= s.task_end_s + slack)


def test_bound_equals_exact_without_contention(contention_free_programs):
    out = default_evaluator().run(contention_free_programs, "bound", with_metrics=False)
    exact_s = np.array([simulate(p).iteration_time_s for p in contention_free_programs])
    np.testing.assert_allclose(out["iteration_time_s"], exact_s, rtol=1e-4)


def test_closed_forms_without_contention(closed_forms, random_programs, bound_float32):
    first = len(random_programs) - len(closed_forms)
    for row, (name, _, expected_s) in enumerate(closed_forms, start=first):
        if name != "incast":  # the only one with shared links
            assert bound_float32["iteration_time_s"][row] == pytest.approx(expected_s, rel=2e-6)
    incast = first + [name for name, _, _ in closed_forms].index("incast")
    assert bound_float32["iteration_time_s"][incast] == pytest.approx(3e-6 + 0.5, rel=2e-6)


def test_more_bandwidth_is_never_slower(random_programs):
    arrays = encode(random_programs[:16])
    base = np.asarray(_bound_batch(arrays).iteration_time_s)
    rng = np.random.default_rng(3)
    faster = arrays._replace(
        link_capacity=arrays.link_capacity * rng.uniform(1, 4, arrays.link_capacity.shape))
    assert np.all(np.asarray(_bound_batch(faster).iteration_time_s) <= base)


def test_batched_equals_single_calls(random_programs):
    arrays = encode(random_programs[:4])
    batched = _bound_batch(arrays)
    for i in range(4):
        single = _bound(jax.tree.map(lambda x, i=i: x[i], arrays))
        for b, s in zip(batched, single, strict=True):
            np.testing.assert_array_equal(np.asarray(b)[i], np.asarray(s))


def test_max_plus_schedule_by_hand():
    # 0 -> 2, 1 -> 2, 2 -> 3; durations 1, 3, 2, 0.5; two padding edges
    dep_task = np.array([2, 2, 3, -1, -1], np.int32)
    dep_pred = np.array([0, 1, 2, -1, -1], np.int32)
    start, end = max_plus_schedule(dep_task, dep_pred,
                                   np.array([1.0, 3.0, 2.0, 0.5], np.float32))
    np.testing.assert_array_equal(np.asarray(start), [0, 0, 3, 5])
    np.testing.assert_array_equal(np.asarray(end), [1, 3, 5, 5.5])


def test_blocked_schedule_by_hand():
    # the DAG above, two slots per block: tasks 0 and 1 in block 0 (slots 1, 2), task 2
    # in block 1 (slot 3), task 3 in block 2 (slot 5); a fifth, padded task has slot 0
    blocks = BlockedProgram(
        slot_pred=np.array([[[0, 0], [0, 0]], [[1, 2], [0, 0]], [[3, 0], [0, 0]]], np.int32),
        slot_duration_s=np.array([[1.0, 3.0], [2.0, 0.0], [0.5, 0.0]], np.float32),
        task_slot=np.array([1, 2, 3, 5, 0], np.int32))
    schedule = _blocked(blocks)
    np.testing.assert_array_equal(np.asarray(schedule.start_s), [0, 0, 3, 5, 0])
    np.testing.assert_array_equal(np.asarray(schedule.end_s), [1, 3, 5, 5.5, 0])
    assert float(schedule.iteration_time_s) == 5.5


@st.composite
def dags(draw):
    """Programs of compute and COMM tasks, some waiting on many (up to 14) predecessors."""
    num_tasks = draw(st.integers(1, 24))
    capacity = draw(st.lists(st.sampled_from([1e9, 2e9, 4e9]), min_size=3, max_size=3))
    b = ProgramBuilder(capacity, [0.0] * 3, ["a", "b", "c"], rank_node=[0, 1])
    for t in range(num_tasks):
        deps = draw(st.lists(st.integers(0, t - 1), max_size=14, unique=True)) if t else []
        if draw(st.booleans()):
            b.add_compute(Category.FORWARD, -1, draw(st.sampled_from([0.0, 0.1, 0.25])), deps)
        else:
            flows = [(0, 1, draw(st.sampled_from([0.0, 1e8, 5e8])),
                      draw(st.sampled_from([0.0, 1e-6])),
                      draw(st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True)))
                     for _ in range(draw(st.integers(0, 3)))]
            b.add_comm(Category.PP, flows, deps)
    return b.build()


def _reference(program) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of every task by the definition, one task after another."""
    duration_s = host.contention_free_durations(program)
    start, end = np.zeros(program.num_tasks), np.zeros(program.num_tasks)
    for t in range(program.num_tasks):
        start[t] = max(end[program.deps(t)], default=0.0)
        end[t] = start[t] + duration_s[t]
    return start, end


@settings(max_examples=40, deadline=None)
@given(dags(), st.sampled_from([1, 2, 4, 8]))
def test_blocked_bound_is_the_max_plus_schedule(program, width):
    # fixed shapes, so that few compilations serve every example
    blocks = BlockShape(tasks=32, blocks=384, width=width, preds=host.MAX_PREDS)
    padded = Shape(tasks=32, edges=384, flows=128, hops=4, links=4)
    with jax.enable_x64(True):
        blocked = _blocked(jax.tree.map(lambda x: x[0],
                                        encode_blocks([block_layout(program, width)], blocks, dtype=np.float64)))
        scan = _bound(jax.tree.map(lambda x: x[0],
                                   encode([program], padded, dtype=np.float64)))
    start, end = _reference(program)
    n = program.num_tasks
    for got in (blocked, scan):  # max and + of the same numbers: equal, not just close
        np.testing.assert_array_equal(np.asarray(got.start_s)[:n], start)
        np.testing.assert_array_equal(np.asarray(got.end_s)[:n], end)
        assert float(got.iteration_time_s) == max(end)
    assert np.all(np.asarray(blocked.end_s)[n:] == 0)  # padded tasks


def _check_layout(program, width: int) -> None:
    """Every node waits only on slots of earlier blocks; every task has a slot of its own."""
    layout = block_layout(program, width)
    blocks, _, preds = layout.slot_pred.shape
    assert preds <= host.MAX_PREDS
    first_slot = 1 + width * np.arange(blocks)[:, None, None]
    assert np.all(layout.slot_pred < first_slot)  # 0 (none) or a slot of an earlier block
    slots = layout.task_slot
    assert len(np.unique(slots)) == program.num_tasks and np.all(slots >= 1)
    free = np.ones(blocks * width + 1, bool)  # slots of max nodes or padding: duration 0
    free[slots] = False
    assert np.all(layout.slot_duration_s.reshape(-1)[free[1:]] == 0)


@settings(max_examples=60, deadline=None)
@given(dags(), st.sampled_from([1, 2, 4, 8, 16]))
def test_layouts_wait_only_on_earlier_blocks(program, width):
    _check_layout(program, width)


def test_layouts_of_random_programs(random_programs):
    for program in random_programs:
        width, preds, blocks = block_form(program, 32)
        assert block_layout(program, width).slot_pred.shape == (blocks, width, preds)
        _check_layout(program, width)


def test_wider_blocks_take_fewer_steps(random_programs):
    for program in random_programs[:20]:
        forms = [block_form(program, cost) for cost in (0, 8, 32, 128, 10**6)]
        assert [w for w, _, _ in forms] == sorted(w for w, _, _ in forms)
        assert [b for _, _, b in forms] == sorted((b for _, _, b in forms), reverse=True)


def test_host_durations_equal_the_kernels(random_programs):
    arrays = encode(random_programs, dtype=np.float64)
    with jax.enable_x64(True):
        device = np.asarray(jax.vmap(contention_free_durations)(arrays))
    for row, program in enumerate(random_programs):
        np.testing.assert_array_equal(host.contention_free_durations(program),
                                      device[row, : program.num_tasks])


def test_blocked_batch_equals_single_calls(random_programs):
    programs = random_programs[:4]
    sizes = host.block_sizes(programs, [block_form(p, 32) for p in programs])
    shape = BlockShape(*(int(n) for n in host.block_shapes(sizes.max(axis=0))))
    arrays = encode_blocks([block_layout(p, shape.width) for p in programs], shape,
                           num_variants=5)
    batched = _blocked_batch(arrays)
    for i in range(5):
        single = _blocked(jax.tree.map(lambda x, i=i: x[i], arrays))
        for b, s in zip(batched, single, strict=True):
            np.testing.assert_array_equal(np.asarray(b)[i], np.asarray(s))
    assert float(batched.iteration_time_s[4]) == 0  # the padded variant
