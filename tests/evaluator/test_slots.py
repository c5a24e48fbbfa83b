"""Slot sizing for the exact level, from a schedule's peaks of tasks and flows under way."""

from __future__ import annotations

import math

import jax
import numpy as np
from xsweep.kernels import Status, exact

from tests.support.programs import GB, bottleneck_program, ring_allreduce_program
from xsweep.evaluator.encode import encode
from xsweep.evaluator.shapes import ladder
from xsweep.evaluator.slots import MARGIN, MIN_SLOTS, exact_slots, peak_in_flight
from xsweep.sim import simulate

_exact = jax.jit(exact, static_argnames=("slots", "batched"))


def test_peaks_of_a_ring_and_an_incast():
    """A ring's steps run one after another: one task, k flows; an incast: one task."""
    ring = ring_allreduce_program(6, 6 * GB, 25 * GB, 1e-6)
    sim = simulate(ring)
    assert peak_in_flight(ring, sim.task_start_s, sim.task_end_s) == (1, 6)
    incast = bottleneck_program(5, 2 * GB, 1 * GB)
    sim = simulate(incast)
    assert peak_in_flight(incast, sim.task_start_s, sim.task_end_s) == (1, 5)


def test_back_to_back_tasks_do_not_overlap():
    ring = ring_allreduce_program(3, 3 * GB, 25 * GB, 0.0)
    n = ring.num_tasks
    ends = np.arange(1.0, n + 1)
    assert peak_in_flight(ring, ends - 1, ends) == (1, 3)  # each starts as the last ends


def test_slots_are_on_the_ladder_with_headroom(random_programs, random_sims):
    for program, sim in zip(random_programs, random_sims, strict=True):
        slots = exact_slots(program, sim.task_start_s, sim.task_end_s)
        peaks = peak_in_flight(program, sim.task_start_s, sim.task_end_s)
        for have, need in zip(slots, (peaks[0] + 1, peaks[1]), strict=True):
            assert have >= MIN_SLOTS and have == ladder(have)
            assert have >= need and (have == MIN_SLOTS or have < 1.5 * math.ceil(MARGIN * need))


def test_slots_from_the_exact_schedule_never_overflow(random_programs, random_sims):
    """Sized from the simulator's own schedule, the kernel always has room."""
    arrays = encode(random_programs)
    for i, (program, sim) in enumerate(zip(random_programs, random_sims, strict=True)):
        slots = exact_slots(program, sim.task_start_s, sim.task_end_s)
        out = _exact(jax.tree.map(lambda x, i=i: x[i], arrays), slots=slots, batched=False)
        assert int(out.status) == Status.OK
