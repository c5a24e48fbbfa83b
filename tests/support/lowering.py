"""Looking at lowered programs from tests: two programs compared field by field, and the
bytes a set of flows carries."""

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
