"""The bound level: a lower bound on the exact times, equal to them without contention."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from xsweep.kernels import Status, bound, max_plus_schedule

from xsweep.batch import evaluate_programs
from xsweep.encode import encode
from xsweep.sim import simulate

_bound = jax.jit(bound)
_bound_batch = jax.jit(jax.vmap(bound))


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
    out = evaluate_programs(contention_free_programs, "bound", with_metrics=False)
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
