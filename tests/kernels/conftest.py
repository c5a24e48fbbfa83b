"""Shared corpora for the kernel tests: programs, their simulations, their batched results.

Everything is session-scoped and evaluated in one batch per level and dtype, so
each kernel shape compiles once for the whole test run.
"""

from __future__ import annotations

import pytest
from programs import random_program

from xsweep.batch import evaluate_programs
from xsweep.sim import simulate

NUM_RANDOM = 60


@pytest.fixture(scope="session")
def random_programs():
    return [random_program(seed) for seed in range(NUM_RANDOM)]


@pytest.fixture(scope="session")
def random_sims(random_programs):
    return [simulate(p) for p in random_programs]


@pytest.fixture(scope="session")
def contention_free_programs():
    return [random_program(1000 + seed, private_links=True) for seed in range(30)]


@pytest.fixture(scope="session")
def exact_float32(random_programs):
    return evaluate_programs(random_programs, "exact", task_times=True)


@pytest.fixture(scope="session")
def exact_float64(random_programs):
    return evaluate_programs(random_programs, "exact", dtype="float64", task_times=True)


@pytest.fixture(scope="session")
def bound_float32(random_programs):
    return evaluate_programs(random_programs, "bound", task_times=True)
