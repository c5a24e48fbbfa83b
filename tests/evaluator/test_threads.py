"""The evaluator called from several threads: calls take turns, results never cross.

Each thread evaluates plans of its own; what it gets back must be what the same plans
give evaluated alone, row for row (the ``name`` column says whose plan a row is). The
worker processes are real, as are Optuna's threads (``n_jobs=2``).
"""

from __future__ import annotations

import threading

import numpy as np
import optuna
import pytest

import xsweep
from xsweep.plan.builder import random_plan

THREADS = 3


def _named(seeds) -> list:
    plans = []
    for seed in seeds:
        plan = random_plan(seed)
        plan.name = f"plan-{seed}"
        plans.append(plan)
    return plans


def _in_threads(call, jobs: list) -> list:
    """``call(job)`` for each job on threads of its own, started together; every result,
    or the first error raised."""
    results: list = [None] * len(jobs)
    errors: list = []
    start = threading.Barrier(len(jobs))

    def run(i: int) -> None:
        try:
            start.wait()
            results[i] = call(jobs[i])
        except BaseException as error:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    if errors:
        raise errors[0]
    return results


@pytest.fixture(scope="module")
def jobs():
    """Each thread's plans: different counts of different plans."""
    return [_named(range(10 * t, 10 * t + 4 + t)) for t in range(THREADS)]


@pytest.fixture(scope="module")
def alone(jobs):
    evaluator = xsweep.Evaluator(processes=1)
    return [evaluator.evaluate(plans, level="bound") for plans in jobs]


def _same(found, expected) -> None:
    assert list(found["name"].values) == list(expected["name"].values)
    np.testing.assert_array_equal(found["status"].values, expected["status"].values)
    np.testing.assert_allclose(found["iteration_time_s"].values,
                               expected["iteration_time_s"].values, rtol=1e-6)


@pytest.mark.parametrize("trial", range(3))
def test_one_evaluator_with_workers_from_several_threads(jobs, alone, trial):
    evaluator = xsweep.Evaluator(processes=2, parallel_min=1)
    try:
        found = _in_threads(lambda plans: evaluator.evaluate(plans, level="bound"), jobs)
    finally:
        evaluator.close()
    for got, expected in zip(found, alone, strict=True):
        _same(got, expected)


def test_the_default_evaluator_from_several_threads(jobs, alone):
    """``xsweep.evaluate`` with calls large enough for its worker processes."""
    many = [plans * 25 for plans in jobs]  # 100-150 plans a thread
    evaluator = xsweep.evaluator.default_evaluator()
    before = evaluator.parallel_min
    evaluator.parallel_min = 64
    try:
        found = _in_threads(lambda plans: xsweep.evaluate(plans, level="bound"), many)
    finally:
        evaluator.parallel_min = before
    for got, expected in zip(found, alone, strict=True):
        n = expected.sizes["variant"]
        assert got.sizes["variant"] == 25 * n
        for copy in range(25):
            _same(got.isel(variant=slice(copy * n, (copy + 1) * n)), expected)


def test_an_optuna_study_with_two_jobs(jobs, alone):
    """Each trial evaluates the plan it picked; its value is that plan's, whichever thread
    ran it and whatever ran beside it."""
    plans = jobs[2]
    expected = {p.name: float(t) for p, t in
                zip(plans, alone[2]["iteration_time_s"].values, strict=True)}
    evaluator = xsweep.Evaluator(processes=1)

    def objective(trial: optuna.Trial) -> float:
        index = trial.suggest_int("plan", 0, len(plans) - 1)
        ds = evaluator.evaluate([plans[index]], level="bound")
        trial.set_user_attr("name", str(ds["name"].values[0]))
        return float(ds["iteration_time_s"].values[0])

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(objective, n_trials=12, n_jobs=2)
    assert len(study.trials) == 12
    for trial in study.trials:
        name = plans[trial.params["plan"]].name
        assert trial.user_attrs["name"] == name
        assert trial.value == pytest.approx(expected[name], rel=1e-6)
