"""The corpus the kernel and evaluator tests share: programs, their simulations, their
batched results, as fixtures (registered for the whole run by ``tests/conftest.py``).

Everything is session-scoped and evaluated in one batch per level and dtype, so
each kernel shape compiles once for the whole test run; nothing is simulated or
evaluated before a test asks.
"""

from __future__ import annotations

import pytest

from tests.support.programs import (
    GB,
    bottleneck_program,
    gpipe_program,
    random_program,
    ring_allreduce_program,
)

#: 58 random + 4 closed-form programs ride in a batch of 64 rows: two are padding.
NUM_RANDOM = 58
#: Programs with a closed-form iteration time (small, so they share the random corpus's
#: kernel shape): (name, program, expected seconds).
_CLOSED_FORMS = (
    ("incast", bottleneck_program(4, 2 * GB, 1 * GB, latency_s=3e-6), 3e-6 + 4 * 1 / 2),
    ("ring", ring_allreduce_program(4, 8 * GB, 25 * GB, 5e-6), 2 * 3 * (5e-6 + 8 / (4 * 25))),
    ("gpipe", gpipe_program(3, 4, 0.010, 0.020), (4 + 3 - 1) * (0.010 + 0.020)),
    ("1f1b", gpipe_program(3, 5, 0.010, 0.020, schedule="1f1b"), (5 + 3 - 1) * 0.030),
)


@pytest.fixture(scope="session")
def closed_forms():
    return _CLOSED_FORMS


@pytest.fixture(scope="session")
def random_programs():
    """Random programs, then the closed-form ones (one kernel shape for all)."""
    return [random_program(seed) for seed in range(NUM_RANDOM)] + [
        program for _, program, _ in _CLOSED_FORMS]


@pytest.fixture(scope="session")
def random_sims(random_programs):
    from xsweep.sim import simulate

    return [simulate(p) for p in random_programs]


@pytest.fixture(scope="session")
def contention_free_programs():
    return [random_program(1000 + seed, private_links=True) for seed in range(30)]


@pytest.fixture(scope="session")
def exact_float32(random_programs):
    from xsweep.evaluator import default_evaluator

    return default_evaluator().run(random_programs, "exact", task_times=True, chunk_size=128)


@pytest.fixture(scope="session")
def exact_float64(random_programs):
    from xsweep.evaluator import default_evaluator

    return default_evaluator().run(random_programs, "exact", dtype="float64", task_times=True,
                             chunk_size=128)


@pytest.fixture(scope="session")
def bound_float32(random_programs):
    from xsweep.evaluator import default_evaluator

    return default_evaluator().run(random_programs, "bound", task_times=True, chunk_size=128)
