"""Property-based fuzzing of the library: mutated plans, sweeps, catalogs and profiles.

Each example either passes (and the exact simulator gives finite numbers for it) or
raises InputError naming the file in one line, within a time and memory budget
(``tests/budget.py``). Fixed seed (``derandomize``), bounded examples; ``-m slow``
runs more examples and the batched evaluator on the accepted plans.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xsweep
from tests.budget import in_process_budget
from tests.fuzz.mutations import (
    catalog_samples,
    extreme_catalogs,
    extreme_plans,
    plan_samples,
    profile_samples,
    sweep_samples,
    write,
)
from tests.fuzz.verdict import FUZZ_PROGRAM_SIZE, library_accepts, simulated
from xsweep.errors import InputError
from xsweep.spec.plan_io import load_plan


def fuzz(examples: int):
    return settings(max_examples=examples, derandomize=True, database=None, deadline=None,
                    suppress_health_check=list(HealthCheck))


@pytest.fixture(autouse=True)
def small_programs(monkeypatch):
    monkeypatch.setenv("XSWEEP_MAX_PROGRAM_SIZE", FUZZ_PROGRAM_SIZE)


def check_samples(samples, tmp_path, catalog) -> list:
    verdicts = []
    for index, sample in enumerate(samples):
        path = write(sample, tmp_path, index)
        with in_process_budget():
            verdicts.append((path, library_accepts(sample.kind, path, catalog)))
    return verdicts


@fuzz(300)
@given(sample=plan_samples())
def test_mutated_plans(tmp_path_factory, catalog, sample):
    check_samples([sample], tmp_path_factory.mktemp("plan"), catalog)


@fuzz(150)
@given(sample=sweep_samples())
def test_mutated_sweeps(tmp_path_factory, catalog, sample):
    check_samples([sample], tmp_path_factory.mktemp("sweep"), catalog)


@fuzz(150)
@given(sample=catalog_samples())
def test_mutated_catalogs(tmp_path_factory, catalog, sample):
    check_samples([sample], tmp_path_factory.mktemp("catalog"), catalog)


@fuzz(100)
@given(sample=profile_samples())
def test_mutated_profiles(tmp_path_factory, catalog, sample):
    check_samples([sample], tmp_path_factory.mktemp("profile"), catalog)


@fuzz(40)
@given(plan=extreme_plans())
def test_numbers_at_the_ends_of_their_ranges_give_finite_results(catalog, plan):
    with in_process_budget():
        xsweep.spec.validate_plan(plan, catalog)  # valid as drawn
        simulated(plan, catalog)


@fuzz(40)
@given(sample=extreme_catalogs())
def test_catalog_numbers_at_the_ends_of_their_ranges(tmp_path_factory, catalog, sample):
    path = write(sample, tmp_path_factory.mktemp("extreme"))
    assert check_samples([sample], path.parent, catalog)[0][1]


@pytest.mark.slow
@fuzz(6)
@given(plans=st.lists(extreme_plans(), min_size=4, max_size=4))
def test_evaluate_is_finite_at_the_ends_of_the_ranges(catalog, plans):
    run_length = [plan.training.total_tokens > 0 for plan in plans]
    for level in ("bound", "exact"):
        ds = xsweep.evaluate(plans, level=level, catalog=catalog)
        assert list(ds["status"].values) == ["ok"] * len(plans)
        for name in ("iteration_time_s", "tokens_per_s", "mfu", "capex_usd"):
            assert (abs(ds[name].values) < float("inf")).all(), (level, name)
        # without total_tokens the cost of a run is unknown: NaN, the Dataset's missing value
        cost = ds["cost_per_run_usd"].values
        assert list(abs(cost) < float("inf")) == run_length, (level, cost)


@pytest.mark.slow
@fuzz(300)
@given(sample=st.one_of(plan_samples(), sweep_samples(), catalog_samples(), profile_samples()))
def test_more_mutated_inputs(tmp_path_factory, catalog, sample):
    check_samples([sample], tmp_path_factory.mktemp("any"), catalog)


@pytest.mark.slow
@fuzz(8)
@given(samples=st.lists(plan_samples(), min_size=6, max_size=6))
def test_evaluate_scores_only_valid_plans_with_finite_numbers(tmp_path_factory, catalog,
                                                              samples):
    folder = tmp_path_factory.mktemp("evaluate")
    accepted = []
    for path, valid in check_samples(samples, folder, catalog):
        if valid:
            accepted.append(load_plan(path, catalog))
        else:
            with pytest.raises(InputError):
                xsweep.evaluate([path], level="bound", catalog=catalog)
    if not accepted:
        return
    for level in ("bound", "exact"):
        ds = xsweep.evaluate(accepted, level=level, catalog=catalog)
        ok = ds["status"].values == "ok"
        for name in ("iteration_time_s", "tokens_per_s", "mfu", "memory_per_gpu_gib",
                     "capex_usd", "cost_rate_usd_per_hour"):
            values = ds[name].values[ok]
            assert (abs(values) < float("inf")).all(), (level, name, values)
    assert os.environ["XSWEEP_MAX_PROGRAM_SIZE"] == FUZZ_PROGRAM_SIZE
