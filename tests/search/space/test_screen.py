"""The grid's arrays decide what the per-point planner would: the same reasons, word for
word, the same memory, and never a point infeasible that the planner builds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.support.sweeps import random_sweeps
from xsweep.errors import InputError
from xsweep.search.space.grid import Grid
from xsweep.search.space.planner import REASON_KINDS, Built, Planner, reason_kind
from xsweep.search.space.screen import columns_of_grid, columns_of_points, screen
from xsweep.spec import load_sweep, sweep_from_dict

#: Points compared per sweep at most (spread over its grid).
MOST = 400


def sweep_of(document):
    """The sweep of a drawn document; a document the schema refuses is no example."""
    try:
        return sweep_from_dict(document)
    except InputError:
        assume(False)


def agree(sweep, catalog, indices=None) -> tuple[int, int]:
    """Compare the arrays' verdicts with the planner's on ``indices`` (default: every point,
    or MOST spread over the grid); return how many points the arrays decided and how many
    the planner built."""
    grid = Grid(sweep)
    if indices is None:
        indices = np.unique(np.linspace(0, grid.size - 1, min(grid.size, MOST)).astype(int))
    screened = screen(sweep, catalog, columns_of_grid(grid, indices))
    planner = Planner(sweep, catalog)
    built = 0
    for row, point in enumerate(grid.points(indices)):
        out = planner.plan(point, "p")
        built += isinstance(out, Built)
        if not screened.infeasible[row]:
            continue
        assert not isinstance(out, Built), (point, screened.reason[row])
        assert screened.reason[row] == out.reason, point
        assert REASON_KINDS[screened.kind[row]] == reason_kind(out.reason)
        if math.isnan(out.memory_per_gpu_gib):
            assert math.isnan(screened.memory_gib[row])
        else:
            assert screened.memory_gib[row] == pytest.approx(out.memory_per_gpu_gib, rel=1e-12)
    return int(screened.infeasible.sum()), built


@pytest.mark.parametrize("name", ["quickstart.yaml", "search-bench.yaml", "gpt3-175b-64.yaml",
                                  "llama3-70b-512gpu.yaml"])
def test_the_shipped_spaces(spaces_dir, catalog, name):
    sweep = load_sweep(spaces_dir / name, catalog)
    decided, _ = agree(sweep, catalog)
    assert decided > 0  # the arrays take part


def test_the_arrays_decide_every_infeasible_point_of_one_pool(spaces_dir, catalog):
    """Where one pool has nodes, only the buildable points reach the planner."""
    sweep = load_sweep(spaces_dir / "gpt3-175b-64.yaml", catalog)
    grid = Grid(sweep)
    indices = np.arange(0, grid.size, 7)
    decided, built = agree(sweep, catalog, indices)
    assert decided + built == len(indices)


@settings(max_examples=60)
@given(document=random_sweeps())
def test_random_sweeps(catalog, document):
    agree(sweep_of(document), catalog)


@given(document=random_sweeps(), data=st.data())
@settings(max_examples=10)
def test_columns_of_points_are_those_of_the_grid(catalog, document, data):
    sweep = sweep_of(document)
    grid = Grid(sweep)
    indices = np.array(data.draw(st.lists(st.integers(0, grid.size - 1), min_size=1,
                                          max_size=20)))
    a = screen(sweep, catalog, columns_of_grid(grid, indices))
    b = screen(sweep, catalog, columns_of_points(grid.points(indices)))
    assert list(a.reason) == list(b.reason)
    assert np.array_equal(a.infeasible, b.infeasible)
