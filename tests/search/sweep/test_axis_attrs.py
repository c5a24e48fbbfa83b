"""Every axis a sweep file can declare has units and a description in its results: the
dataset's coordinates say what they are, not just their dotted path."""

from __future__ import annotations

import typing

from pydantic import BaseModel

from xsweep.search.sweep.results import AXES, axis_attrs
from xsweep.spec import sweep as sweep_schema


def _axis_names(model: type[BaseModel], seen: set) -> set[str]:
    """The last part of the path of every axis field reachable from ``model``."""
    if model in seen:
        return set()
    seen.add(model)
    names = set()
    for name, info in model.model_fields.items():
        if sweep_schema._AXIS in info.metadata:
            names.add(info.alias or name)
        stack = [info.annotation]
        while stack:
            kind = stack.pop()
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                names |= _axis_names(kind, seen)
            stack.extend(typing.get_args(kind))
    return names


def test_every_axis_of_the_schema_has_units_and_a_description():
    names = _axis_names(sweep_schema.Sweep, set())
    assert {"pp", "cp", "ep", "recompute", "nic", "software"} <= names
    assert names <= set(AXES), sorted(names - set(AXES))
    for name in names:
        attrs = axis_attrs(f"parallelism.{name}")
        assert attrs["description"] and attrs["description"] != f"parallelism.{name}"
    # a pool's TP degrees: a mapping of axes, one per pool
    assert axis_attrs("parallelism.tp.H100-SXM")["description"] == (
        "tensor-parallel degree of the pool (H100-SXM)")
