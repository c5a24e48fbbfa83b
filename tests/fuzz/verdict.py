"""What the library makes of one input file: accepted with finite numbers, or one InputError.

Accepted plans, catalogs and profiles go on to the exact simulator (a catalog and a
profile are used to simulate a small base plan), and every number of the outcome
must be finite: the ranges of ``xsweep.spec.ranges`` exist to guarantee it.
"""

from __future__ import annotations

import math
from pathlib import Path

from tests.support.hostile_inputs import PLAN
from xsweep.errors import InputError
from xsweep.metrics import jsonable
from xsweep.outcome import simulate_plan
from xsweep.pipeline import prepare_valid
from xsweep.spec.catalog import load_catalog
from xsweep.spec.plan_io import load_plan, plan_from_text
from xsweep.spec.profile import load_profile
from xsweep.spec.sweep import check_sweep_limits, load_sweep
from xsweep.spec.validate import validate_plan

# Small programs keep each example quick; the limit is a real one, so a mutation that
# grows the program past it must be refused like any other.
FUZZ_PROGRAM_SIZE = "20000"


def finite_numbers(value, where: str = "") -> None:
    """Assert every number inside ``value`` (dicts, lists) is finite."""
    if isinstance(value, dict):
        for key, item in value.items():
            finite_numbers(item, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            finite_numbers(item, f"{where}[{index}]")
    elif isinstance(value, float):
        assert math.isfinite(value), f"{where} = {value}"


def simulated(plan, catalog, profile=None) -> dict:
    _, doc = simulate_plan(prepare_valid(plan, catalog, profile))
    doc = jsonable(doc)  # what reaches the user: missing figures as null
    finite_numbers(doc)
    assert doc["iteration_time_s"] > 0
    return doc


def library_accepts(kind: str, path: Path, catalog) -> bool:
    """True if the library accepts the file (and its numbers are finite); False if it
    raises InputError naming the file in one line. Anything else fails the test."""
    try:
        if kind == "plan":
            simulated(load_plan(path, catalog), catalog)
        elif kind == "sweep":
            sweep = load_sweep(path, catalog)
            check_sweep_limits(sweep, str(path))  # as xsweep check: the GPU limit
            sweep.grid_size()
        elif kind == "catalog":
            merged = load_catalog([path])
            plan = plan_from_text(PLAN)
            validate_plan(plan, merged)
            simulated(plan, merged)
        elif kind == "profile":
            profile = load_profile(path, catalog)
            plan = plan_from_text(PLAN)
            if profile.model not in (None, "llama2-7b"):
                return True
            simulated(plan, catalog, profile)
        else:
            raise AssertionError(kind)
    except InputError as error:
        text = str(error)
        assert "\n" not in text and text.startswith(f"{path}: "), text
        return False
    return True
