"""``Planner.identify``: a point's verdict and its plan's identity without the plan built,
held to ``Planner.plan`` and to the plans' bytes on every point of the small spaces and on
points drawn from the large ones."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xsweep.search.closed_form import cluster_rates_of, shared_by
from xsweep.search.evaluation import plan_key
from xsweep.search.space.grid import Grid
from xsweep.search.space.planner import Built, Identified, Infeasible, Planner
from xsweep.spec import load_sweep

SMALL = ("quickstart", "mixtral-8x7b-dispatch", "mixtral-8x7b-ep", "mixtral-8x7b-cp")
LARGE = ("llama3-70b-512gpu", "search-bench", "gpt3-175b-64")


class Keys:
    """Identities met and the plans they stand for, checked one to one as they come."""

    def __init__(self, catalog):
        self.catalog = catalog
        self.plan_of: dict[bytes, bytes] = {}  # identity -> the plan's bytes
        self.key_of: dict[bytes, bytes] = {}  # the plan's bytes -> identity
        self.shared: dict[tuple, tuple] = {}  # (layout, shared) -> shared_by
        self.cluster: dict[tuple, bytes] = {}  # cluster key -> the cluster's bytes

    def check(self, planner: Planner, point) -> bool:
        """Whether ``point`` had a plan; asserts that identify agrees with plan."""
        built, known = planner.plan(point, "p"), planner.identify(point)
        assert type(known) is (Identified if isinstance(built, Built) else Infeasible)
        assert known.memory_per_gpu_gib == built.memory_per_gpu_gib or (
            np.isnan(known.memory_per_gpu_gib) and np.isnan(built.memory_per_gpu_gib))
        if isinstance(built, Infeasible):
            assert known.reason == built.reason
            return False
        assert (known.cost, known.layout) == (built.cost, built.layout)
        plan = plan_key(built.plan)
        assert self.plan_of.setdefault(known.key, plan) == plan  # equal keys, equal plans
        assert self.key_of.setdefault(plan, known.key) == known.key  # and the other way
        expert = built.plan.training.expert_parallel > 1
        assert (known.shared != b"") == expert
        assert known.dp_overlap == built.plan.training.dp_overlap
        # what the closed form's memo keys by reads what the bound reads
        shared = shared_by(built.plan)
        assert self.shared.setdefault((known.layout, known.shared), shared) == shared
        cluster = built.plan.cluster.SerializeToString(deterministic=True)
        assert self.cluster.setdefault(known.cluster, cluster) == cluster
        return True


@pytest.mark.parametrize("name", SMALL)
def test_identify_agrees_with_plan_on_every_point(spaces_dir, catalog, name):
    sweep = load_sweep(spaces_dir / f"{name}.yaml", catalog)
    grid, planner, keys = Grid(sweep), Planner(sweep, catalog), Keys(catalog)
    built = sum(keys.check(planner, grid.point(i)) for i in range(grid.size))
    assert built > 0
    assert len(keys.plan_of) <= built  # some spaces repeat plans; none is keyed twice


def test_points_of_equal_plans_get_one_key_where_axes_do_not_matter(spaces_dir, catalog):
    # the large space's pools without nodes leave their NIC and TP axes out of the plan:
    # those points' plans are equal, and so are their keys, though their layouts differ
    sweep = load_sweep(spaces_dir / "llama3-70b-512gpu.yaml", catalog)
    grid, planner, keys = Grid(sweep), Planner(sweep, catalog), Keys(catalog)
    layouts: dict[bytes, set] = {}
    for index in range(93_456, 93_456 + 2_000):  # B200 alone at first, then with others
        point = grid.point(index)
        if keys.check(planner, point):
            known = planner.identify(point)
            layouts.setdefault(known.key, set()).add(known.layout)
    assert any(len(shared) > 1 for shared in layouts.values())


def test_equal_cluster_keys_have_equal_prices(spaces_dir, catalog):
    sweep = load_sweep(spaces_dir / "llama3-70b-512gpu.yaml", catalog)
    grid, planner = Grid(sweep), Planner(sweep, catalog)
    prices: dict[tuple, tuple] = {}
    for index in range(120_000, 120_000 + 3_000, 7):
        point = grid.point(index)
        built = planner.plan(point, "p")
        if isinstance(built, Built):
            rates = cluster_rates_of(built.plan, catalog, built.cost)
            key = (planner.identify(point).cluster, built.cost)
            assert prices.setdefault(key, rates) == rates
    assert len(prices) > 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.data_too_large])
@given(data=st.data())
def test_identify_agrees_with_plan_on_random_points(spaces_dir, catalog, data):
    name = data.draw(st.sampled_from(LARGE))
    sweep = load_sweep(spaces_dir / f"{name}.yaml", catalog)
    grid, planner, keys = Grid(sweep), Planner(sweep, catalog), Keys(catalog)
    # a run of neighbours (they differ in the fastest axes: NICs, per-point fields), so
    # that equal plans meet
    start = data.draw(st.integers(0, grid.size - 64))
    for index in range(start, start + 64):
        keys.check(planner, grid.point(index))
