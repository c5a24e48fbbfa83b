"""The exact level against the event-driven simulator, closed forms and its own contracts."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from programs import (GB, bottleneck_program, gpipe_program, parking_lot_program,
                      ring_allreduce_program)

from xsweep.batch import evaluate_programs
from xsweep.encode import Shape, batch_shape, encode, program_sizes
from xsweep.kernels import Status, exact
from xsweep.plan.program import Category, ProgramBuilder

SLOTS = 8
_exact = jax.jit(exact, static_argnames=("slots", "max_rounds"))
_exact_batch = jax.jit(jax.vmap(exact, in_axes=(0, None)), static_argnums=1)


def _errors(programs, sims, result):
    """Relative errors of iteration times, and of task times relative to the iteration time."""
    ref = np.array([s.iteration_time_s for s in sims])
    iteration = np.abs(result["iteration_time_s"] - ref) / ref
    task = np.array([
        max(np.max(np.abs(result[key][i, : p.num_tasks] - getattr(s, f"task_{key}")), initial=0)
            for key in ("start_s", "end_s")) / s.iteration_time_s
        for i, (p, s) in enumerate(zip(programs, sims, strict=True))])
    return iteration, task


def test_random_programs_agree_with_simulator_float32(random_programs, random_sims,
                                                      exact_float32):
    assert np.all(exact_float32["status"] == Status.OK)
    iteration, task = _errors(random_programs, random_sims, exact_float32)
    assert np.median(iteration) <= 1e-5 and iteration.max() <= 1e-4
    assert np.median(task) <= 1e-5 and task.max() <= 1e-4


def test_random_programs_agree_with_simulator_float64(random_programs, random_sims,
                                                      exact_float64):
    assert exact_float64["iteration_time_s"].dtype == np.float64
    assert np.all(exact_float64["status"] == Status.OK)
    iteration, task = _errors(random_programs, random_sims, exact_float64)
    assert iteration.max() <= 1e-9 and task.max() <= 1e-9


def test_random_programs_exercise_contention(exact_float64):
    """The corpus is not trivial: several flows move at once and water-filling iterates."""
    assert exact_float64["max_active_flows"].max() >= 8
    assert exact_float64["waterfill_rounds"].max() >= 2


@pytest.mark.parametrize(("program", "expected_s"), [
    (bottleneck_program(4, 2 * GB, 1 * GB, latency_s=3e-6), 3e-6 + 4 * 1 * GB / (2 * GB)),
    (ring_allreduce_program(4, 8 * GB, 25 * GB, 5e-6), 2 * 3 * (5e-6 + 8 * GB / (4 * 25 * GB))),
    (gpipe_program(4, 8, 0.010, 0.020), (8 + 4 - 1) * (0.010 + 0.020)),
    (gpipe_program(3, 6, 0.010, 0.020, schedule="1f1b"), (6 + 3 - 1) * (0.010 + 0.020)),
], ids=["incast", "ring", "gpipe", "1f1b"])
def test_closed_forms(program, expected_s):
    out = evaluate_programs([program], "exact", dtype="float64")
    assert out["status"][0] == Status.OK
    assert out["iteration_time_s"][0] == pytest.approx(expected_s, rel=1e-12)


def test_batched_equals_single_calls(random_programs):
    programs = random_programs[:6]
    arrays = encode(programs)
    batched = _exact_batch(arrays, SLOTS * 4)
    for i in range(len(programs)):
        single = _exact(jax.tree.map(lambda x, i=i: x[i], arrays), slots=SLOTS * 4)
        for b, s in zip(batched, single, strict=True):
            np.testing.assert_array_equal(np.asarray(b)[i], np.asarray(s))


def test_padding_does_not_change_results(random_programs):
    """A program alone at its own shape = the same program in a wider, padded batch."""
    program = random_programs[3]
    alone = _exact(jax.tree.map(lambda x: x[0], encode([program])), slots=SLOTS * 4)
    own = batch_shape(program_sizes([program]))
    wide = Shape(*(2 * n for n in own))
    padded = _exact_batch(encode([program], wide, num_variants=3), SLOTS * 4)
    n = program.num_tasks
    for key in ("start_s", "end_s"):
        np.testing.assert_array_equal(np.asarray(getattr(padded, key))[0, :n],
                                      np.asarray(getattr(alone, key))[:n])
    assert float(padded.iteration_time_s[0]) == float(alone.iteration_time_s)
    # the empty padded variants finish at once, with nothing to report
    assert np.all(np.asarray(padded.iteration_time_s)[1:] == 0)
    assert np.all(np.asarray(padded.status) == Status.OK)


def test_overflow_reruns_with_more_slots(random_programs, exact_float64):
    out = evaluate_programs(random_programs[:20], "exact", dtype="float64", slots=1)
    assert np.all(out["status"] == Status.OK)
    assert out["max_active_flows"].max() > 1  # so the first pass did overflow
    np.testing.assert_array_equal(out["iteration_time_s"], exact_float64["iteration_time_s"][:20])


def test_overflow_status_from_the_kernel(random_programs, exact_float32):
    crowded = int(np.argmax(exact_float32["max_active_flows"]))
    arrays = jax.tree.map(lambda x: x[crowded], encode([random_programs[crowded]]))
    out = _exact(arrays, slots=1)
    assert int(out.status) == Status.OVERFLOW
    assert np.all(np.isfinite(np.asarray(out.end_s)))


def test_round_cap_gives_not_converged_with_finite_times():
    # the parking lot with two bottleneck levels needs two water-filling rounds
    program = parking_lot_program((1 * GB, 3 * GB), (1, 2))
    out = evaluate_programs([program], "exact", max_rounds=1)
    assert out["status"][0] == Status.NOT_CONVERGED
    assert np.isfinite(out["iteration_time_s"][0]) and out["iteration_time_s"][0] > 0
    assert evaluate_programs([program], "exact")["status"][0] == Status.OK


def test_deadlock_is_infeasible_not_nan():
    """Arrays with a dependency cycle (no valid program has one) end as infeasible."""
    b = ProgramBuilder([1 * GB], [0.0], ["l"], rank_node=[0])
    b.add_stream(0, [0])
    first = b.add_compute(Category.FORWARD, 0, 1.0)
    b.add_compute(Category.FORWARD, 0, 1.0, [first])
    arrays = encode([b.build()])
    arrays.task_preds[0, 0, 0] = 1  # task 0 now also waits for task 1
    out = _exact(jax.tree.map(lambda x: x[0], arrays), slots=SLOTS)
    assert int(out.status) == Status.INFEASIBLE
    assert np.all(np.isfinite(np.asarray(out.start_s))) and np.all(np.isfinite(np.asarray(out.end_s)))
