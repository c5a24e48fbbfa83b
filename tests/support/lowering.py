"""Looking at lowered programs from tests: two programs compared field by field, the
bytes a set of flows carries, and a plan's lowering held to the reference and both
bounds."""

from __future__ import annotations

import dataclasses

import numpy as np

from xsweep.plan.program import Program


def assert_identical(got: Program, want: Program) -> None:
    """``got`` equals ``want`` in every field but which cached structure it came from,
    arrays in dtype, shape and every bit."""
    for field in dataclasses.fields(Program):
        if field.name == "structure":  # which cached structure a program came from
            continue
        a, b = getattr(got, field.name), getattr(want, field.name)
        if isinstance(b, np.ndarray):
            assert a.dtype == b.dtype and a.shape == b.shape, field.name
            np.testing.assert_array_equal(a, b, err_msg=field.name)
        else:
            assert a == b, field.name


def payload_bytes(a, prog, flows) -> float:
    """Bytes the flows carry for the model: their wire bytes times the bus efficiency of
    each path's narrowest link."""
    topo = a.topology
    total = 0.0
    for f in flows:
        path = prog.path(int(f))
        narrowest = path[np.argmin(topo.capacity[path])]
        total += prog.flow_bytes[f] * topo.bus_efficiency[narrowest]
    return total


def assert_lowers_within_bounds(plan, a, catalog) -> Program:
    """The block lowering of ``a`` (``plan``'s analysis) equals the task-by-task reference
    bit for bit, the program-size estimate bounds its tasks and flows within a factor of
    6, and the closed form stays under the simulator's iteration; returns the program."""
    from tests.plan.reference_lowering import reference_lower
    from xsweep.plan.lower import lower
    from xsweep.search.closed_form import iteration_lower_bound
    from xsweep.sim import simulate
    from xsweep.spec.program_size import estimate_program_size

    program = lower(a)
    assert_identical(program, reference_lower(a))
    actual = program.num_tasks + program.flow_src.size
    assert actual <= estimate_program_size(plan) <= 6 * actual
    assert iteration_lower_bound(plan, catalog) <= simulate(program).iteration_time_s
    return program
