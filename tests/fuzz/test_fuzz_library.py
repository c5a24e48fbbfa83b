"""Property-based fuzzing of the library: mutated plans, sweeps, catalogs and profiles.

Each example either passes (and the exact simulator gives finite numbers for it) or
raises InputError naming the file in one line, within a time and memory budget
(``tests/support/budget.py``). Fixed seed (``derandomize``), bounded examples; ``-m slow``
runs more examples and the batched evaluator on the accepted plans.
"""

from __future__ import annotations

import functools
import numbers
import os

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import xsweep
from tests.fuzz.mutations import (
    catalog_samples,
    extreme_catalogs,
    extreme_plans,
    library_arguments,
    plan_samples,
    profile_samples,
    sweep_samples,
    write,
)
from tests.fuzz.verdict import FUZZ_PROGRAM_SIZE, library_accepts, simulated
from tests.support.budget import in_process_budget
from tests.support.hostile_inputs import PLAN
from tests.support.paths import SPACES
from xsweep.errors import InputError
from xsweep.spec.plan_io import load_plan, plan_from_text
from xsweep.spec.sweep import load_sweep


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


# -- the library's arguments ---------------------------------------------------------------
APPENDIX = SPACES / "appendix-b.pbtxt"
#: Constructor arguments every drawn Evaluator starts from: one device, no worker processes,
#: no disk cache (a drawn argument replaces one of them).
EVALUATOR = {"processes": 1, "compile_cache": False}
EVALUATOR_ARGUMENTS = ("devices", "dtype", "chunk_size", "max_rounds", "catalog", "profile",
                       "cost", "cpu_devices", "compile_cache", "processes", "parallel_min",
                       "template_bytes")
EVALUATE_ARGUMENTS = ("plans", "level", "catalog", "profile", "cost", "dtype", "chunk_size",
                      "progress", "coords")


def _count_in(value, low: int, high: int) -> bool:
    return (isinstance(value, numbers.Integral) and not isinstance(value, bool)
            and low <= value <= high)


def _construct(name, value, devices, catalog):
    evaluator = xsweep.Evaluator(**{**EVALUATOR, "devices": devices[:1], name: value})
    evaluator.close()


def _evaluate(name, value, devices, catalog):
    arguments = {"plans": [plan_from_text(PLAN)], "level": "bound", "catalog": catalog,
                 name: value}
    ds = xsweep.evaluate(**arguments)
    assert list(ds["status"].values) == ["ok"]


LIBRARY_CALLS = {
    **{f"Evaluator({name}=...)": functools.partial(_construct, name)
       for name in EVALUATOR_ARGUMENTS},
    **{f"evaluate({name}=...)": functools.partial(_evaluate, name)
       for name in EVALUATE_ARGUMENTS},
    "load_catalog": lambda value, *_: xsweep.load_catalog(value),
    "load_plan": lambda value, *_: xsweep.load_plan(value),
    "load_plan(catalog=...)": lambda value, *_: xsweep.load_plan(APPENDIX, value),
    "prepare": lambda value, *_: xsweep.prepare(value, names=False),
    "prepare(catalog=...)": lambda value, *_: xsweep.prepare(APPENDIX, value, names=False),
    "prepare(profile=...)": lambda value, *_: xsweep.prepare(APPENDIX, profile=value),
    "prepare(templates=...)": lambda value, *_: xsweep.prepare(APPENDIX, templates=value),
    "prepare(names=...)": lambda value, *_: xsweep.prepare(APPENDIX, names=value),
    "use_cpu_devices": lambda value, *_: xsweep.use_cpu_devices(value),
    "load_sweep": lambda value, *_: load_sweep(value),
}


@pytest.fixture(scope="module")
def jax_started():
    """The devices, once JAX has started: a ``cpu_devices`` or ``use_cpu_devices`` drawn
    below then changes nothing for the tests after this one."""
    import jax

    return jax.devices()


@fuzz(200)
@given(call=st.sampled_from(sorted(LIBRARY_CALLS)), value=library_arguments())
def test_the_public_api_takes_an_argument_or_refuses_it_in_one_line(jax_started, catalog,
                                                                     call, value):
    # Arguments that are right and would make the default run slow are left out: worker
    # processes, and other row counts of the kernels (each a compilation).
    assume(not (call == "Evaluator(processes=...)" and _count_in(value, 2, 2**20)))
    assume(not (call == "evaluate(chunk_size=...)" and _count_in(value, 1, 2**20)))
    try:
        LIBRARY_CALLS[call](value, jax_started, catalog)
    except InputError as error:
        assert "\n" not in str(error), str(error)
