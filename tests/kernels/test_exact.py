"""The exact level against the event-driven simulator, closed forms and its own contracts."""

from __future__ import annotations

import jax
import jax.extend.core
import numpy as np
import pytest
from xsweep.kernels import MAX_ROUNDS, Status, exact

from tests.support.programs import GB, bottleneck_program, parking_lot_program
from xsweep.evaluator import default_evaluator
from xsweep.evaluator.encode import encode
from xsweep.evaluator.shapes import batch_shape, predicted_size, program_sizes
from xsweep.plan.program import Category, ProgramBuilder

SLOTS = 32
_exact = jax.jit(exact, static_argnames=("slots", "max_rounds", "batched"))
_exact_batch = jax.jit(jax.vmap(exact, in_axes=(0, None, None)), static_argnums=(1, 2))


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
    assert len(random_programs) >= 50
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


@pytest.mark.parametrize(("dtype", "rel"), [("float32", 2e-6), ("float64", 1e-12)])
def test_closed_forms(dtype, rel, closed_forms, random_programs, exact_float32, exact_float64):
    out = exact_float32 if dtype == "float32" else exact_float64
    first = len(random_programs) - len(closed_forms)
    for row, (name, _, expected_s) in enumerate(closed_forms, start=first):
        assert out["status"][row] == Status.OK, name
        assert out["iteration_time_s"][row] == pytest.approx(expected_s, rel=rel), name


@pytest.fixture(scope="module")
def six(random_programs):
    """Six programs encoded at one shape, and their batched exact schedules."""
    arrays = encode(random_programs[:6])
    return arrays, _exact_batch(arrays, SLOTS, 64)


def test_batched_equals_single_calls(six):
    arrays, batched = six
    for i in range(len(arrays.task_valid)):
        single = _exact(jax.tree.map(lambda x, i=i: x[i], arrays), slots=SLOTS)
        for b, s in zip(batched, single, strict=True):
            np.testing.assert_array_equal(np.asarray(b)[i], np.asarray(s))


def test_unbatched_single_calls_match_the_batch(six):
    """One variant per call, branching and water-filling only the slots in use: the same
    schedules, bit for bit (the packed fill sums each link's flows in the same order)."""
    arrays, batched = six
    for i in range(len(arrays.task_valid)):
        single = _exact(jax.tree.map(lambda x, i=i: x[i], arrays), slots=SLOTS, batched=False)
        for b, s in zip(batched, single, strict=True):
            np.testing.assert_array_equal(np.asarray(b)[i], np.asarray(s))


@pytest.mark.parametrize("how", ["every branch", "xla scatters"])
def test_branches_and_scatters_only_change_how(six, how):
    """The unbatched kernel with every branch running its working side, or with XLA's
    scatters, as the batched form has them, gives the same schedules bit for bit: a pass
    with no task finished or no flow to place changes nothing, and updates one after
    another are a scatter's."""
    from xsweep.kernels.exact import _ALONE, _config, _schedule, _then_alone

    form = (_ALONE._replace(maybe=_then_alone) if how == "every branch"
            else _ALONE._replace(sequential=False))
    run = jax.jit(lambda a: _schedule(_config(a, SLOTS, MAX_ROUNDS, form), a))
    arrays, _ = six
    for i in range(len(arrays.task_valid)):
        one = jax.tree.map(lambda x, i=i: x[i], arrays)
        for got, want in zip(run(one), _exact(one, slots=SLOTS, batched=False), strict=True):
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_one_variant_per_device_agrees_with_simulator(random_programs, random_sims):
    """The driver's unbatched path (chunks of one), on neighbours in size (one shape)."""
    middle = np.argsort(predicted_size(program_sizes(random_programs)))[30:34]
    out = default_evaluator().run([random_programs[i] for i in middle], "exact", dtype="float64",
                            chunk_size=1, with_metrics=False)
    assert np.all(out["status"] == Status.OK)
    expected = [random_sims[i].iteration_time_s for i in middle]
    np.testing.assert_allclose(out["iteration_time_s"], expected, rtol=1e-9)


@pytest.mark.parametrize("how", ["one after another", "xla scatters", "batched"])
def test_slots_past_the_dense_forms_agree_with_simulator(random_programs, random_sims, how):
    """At 64 task slots (4,096 slot pairs) the slot matching and range lookups run as
    scatters rather than comparisons (``slotops.DENSE_OWNERS_MAX``): the same schedules
    as the simulator, in float64, whether they update one after another, by XLA's
    scatters or batched."""
    from xsweep.kernels import slotops
    from xsweep.kernels.exact import _ALONE, _config, _schedule

    slots = (64, 128)
    assert slots[0] * slots[0] > slotops.DENSE_OWNERS_MAX
    if how == "batched":
        def run(a):
            return exact(a, slots, MAX_ROUNDS, True)
    else:
        form = _ALONE._replace(sequential=how == "one after another")

        def run(a):
            return _schedule(_config(a, slots, MAX_ROUNDS, form), a)
    run = jax.jit(run)
    with jax.enable_x64(True):
        arrays = encode(random_programs[:6], dtype=np.float64)
        for i, sim in enumerate(random_sims[:6]):
            out = run(jax.tree.map(lambda x, i=i: x[i], arrays))
            assert int(out.status) == Status.OK, i
            n = random_programs[i].num_tasks
            np.testing.assert_allclose(np.asarray(out.end_s)[:n], sim.task_end_s, rtol=1e-9,
                                       atol=1e-12)


def _scatters_in_loops(jaxpr, inside: bool = False) -> int:
    """Scatter operations inside while loops, in ``jaxpr`` and every jaxpr it calls."""
    count = 0
    for eqn in jaxpr.eqns:
        if inside and eqn.primitive.name.startswith("scatter"):
            count += 1
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            count += _scatters_in_loops(sub, inside or eqn.primitive.name == "while")
    return count


def test_unbatched_loops_hold_no_scatter(six):
    """Unbatched, the event loop updates at computed indices one after another, so that
    XLA's CPU compiler emits each loop as one function (a scatter in a loop body keeps it
    an operation at a time); batched, it keeps XLA's scatters."""
    arrays, _ = six
    one = jax.tree.map(lambda x: x[0], arrays)
    found = [_scatters_in_loops(jax.make_jaxpr(
        lambda a, b=batched: exact(a, SLOTS, MAX_ROUNDS, b))(one).jaxpr)
        for batched in (False, True)]
    assert found[0] == 0 and found[1] > 0


def test_wider_padding_does_not_change_results(random_programs, six):
    """The smallest of the six, at its own shape and padded to the batch's: same times."""
    arrays, batched = six
    i = int(np.argmin(program_sizes(random_programs[:6]).sum(axis=1)))
    program = random_programs[i]
    assert batch_shape(program_sizes([program])) != batch_shape(program_sizes(random_programs[:6]))
    alone = _exact(jax.tree.map(lambda x: x[0], encode([program])), slots=SLOTS)
    n = program.num_tasks
    for key in ("start_s", "end_s"):
        np.testing.assert_array_equal(np.asarray(getattr(batched, key))[i, :n],
                                      np.asarray(getattr(alone, key))[:n])
    assert float(batched.iteration_time_s[i]) == float(alone.iteration_time_s)


def test_padded_variants_finish_at_once(random_programs):
    arrays = encode(random_programs[:6], num_variants=8)
    schedules = _exact_batch(arrays, SLOTS, 64)
    assert np.all(np.asarray(schedules.iteration_time_s)[6:] == 0)
    assert np.all(np.asarray(schedules.steps)[6:] == 0)
    # unbatched, a padded row (zeros everywhere) skips the loop by a real branch
    alone = _exact(jax.tree.map(lambda x: x[7], arrays), slots=SLOTS, batched=False)
    assert int(alone.steps) == 0 and int(alone.status) == Status.OK
    assert float(alone.iteration_time_s) == 0 and not np.asarray(alone.end_s).any()


def test_overflow_reruns_with_more_slots(random_programs, exact_float64):
    crowded = np.flatnonzero((exact_float64["max_active_flows"] > 2)
                             & (exact_float64["max_active_flows"] <= 4))[:4]
    out = default_evaluator().run([random_programs[i] for i in crowded], "exact", dtype="float64",
                            slots=2, with_metrics=False, chunk_size=8)
    assert np.all(out["status"] == Status.OK)
    np.testing.assert_array_equal(out["iteration_time_s"],
                                  exact_float64["iteration_time_s"][crowded])


def _fan_out_program(width: int):
    """One task with ``width`` successors, each also waiting for a link of a chain."""
    b = ProgramBuilder([1 * GB], [0.0], ["l"], rank_node=[0])
    b.add_stream(0, [0])
    hub = b.add_compute(Category.FORWARD, 0, 0.5)
    link = None
    for i in range(width):
        link = b.add_compute(Category.BACKWARD, 0, 1.0, [] if link is None else [link])
        b.add_compute(Category.OPTIMIZER, 0, 0.25 + 0.01 * i, [hub, link])
    return b.build()


def test_successors_beyond_the_release_budget():
    """A hub with 40 successors and 8 slots tells them over several passes: same times."""
    from xsweep.sim import simulate

    program = _fan_out_program(40)
    schedule = _exact(jax.tree.map(lambda x: x[0], encode([program])), slots=8, batched=False)
    assert int(schedule.status) == Status.OK
    reference = simulate(program)
    n = program.num_tasks
    np.testing.assert_allclose(np.asarray(schedule.start_s)[:n], reference.task_start_s,
                               rtol=1e-6)
    np.testing.assert_allclose(np.asarray(schedule.end_s)[:n], reference.task_end_s, rtol=1e-6)
    assert float(schedule.iteration_time_s) == pytest.approx(40.0 + 0.25 + 0.39, rel=1e-6)


def test_too_few_task_slots_overflow_then_rerun():
    """Twelve tasks start at once: four slots overflow, the driver's rerun fits them."""
    b = ProgramBuilder([1 * GB], [0.0], ["l"], rank_node=[0])
    b.add_stream(0, [0])
    for i in range(12):
        b.add_compute(Category.FORWARD, 0, 1.0 + i)
    program = b.build()
    alone = _exact(jax.tree.map(lambda x: x[0], encode([program])), slots=4, batched=False)
    assert int(alone.status) == Status.OVERFLOW
    out = default_evaluator().run([program], "exact", slots=4, with_metrics=False)
    assert out["status"].tolist() == [Status.OK]
    assert out["iteration_time_s"][0] == pytest.approx(12.0)


def _cycle_program():
    b = ProgramBuilder([1 * GB], [0.0], ["l"], rank_node=[0])
    b.add_stream(0, [0])
    first = b.add_compute(Category.FORWARD, 0, 1.0)
    b.add_compute(Category.FORWARD, 0, 1.0, [first])
    return b.build()


def test_status_codes_with_finite_outputs():
    """Round cap -> not converged; too few slots -> overflow; a cycle -> infeasible."""
    programs = [
        parking_lot_program((1 * GB, 3 * GB), (1, 1)),  # two bottleneck levels: two rounds
        bottleneck_program(6, 1 * GB),  # six flows move at once
        _cycle_program(),
    ]
    arrays = encode(programs, batch_shape(program_sizes(programs))._replace(edges=2))
    # task 0 now also waits for task 1: no valid program does
    arrays.dep_task[2, :2], arrays.dep_pred[2, :2] = (0, 1), (1, 0)
    arrays.succ_task[2, :2] = (1, 0)  # the successors of task 0, then of task 1
    out = _exact_batch(arrays, 4, 1)
    assert np.asarray(out.status).tolist() == [Status.NOT_CONVERGED, Status.OVERFLOW,
                                               Status.INFEASIBLE]
    for x in out:
        assert np.all(np.isfinite(np.asarray(x)))
    assert float(out.iteration_time_s[0]) > 0


@pytest.mark.slow
@pytest.mark.parametrize(("dtype", "median", "worst"), [("float32", 1e-5, 1e-4),
                                                         ("float64", 1e-9, 1e-9)])
def test_lowered_plans_agree_with_simulator(dtype, median, worst):
    """Programs lowered from seeded random plans, not only hand-built ones."""
    from xsweep.plan.analysis import analyze
    from xsweep.plan.builder import random_plan
    from xsweep.plan.lower import lower
    from xsweep.sim import simulate
    from xsweep.spec.catalog import load_catalog

    catalog = load_catalog()
    programs = [lower(analyze(random_plan(seed, max_gpus=16, num_layers=4), catalog))
                for seed in range(64)]
    sims = [simulate(p) for p in programs]
    out = default_evaluator().run(programs, "exact", dtype=dtype, task_times=True, with_metrics=False,
                            chunk_size=16)
    assert np.all(out["status"] == Status.OK)
    iteration, task = _errors(programs, sims, out)
    assert np.median(iteration) <= median and iteration.max() <= worst
    assert np.median(task) <= median and task.max() <= worst
