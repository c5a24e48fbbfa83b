"""The process executor runs units on real worker processes: results as in this process,
errors with the worker's traceback, and workers that stop when told."""

from __future__ import annotations

import os

import pytest

from tests.search.sweep.arithmetic import difference, jax_loaded, product, quotient, whose_session
from tests.support.processes import alive
from xsweep.search.evaluation import Session
from xsweep.search.sweep.distributed import LocalExecutor
from xsweep.search.sweep.processes import ProcessExecutor
from xsweep.workers import WorkerError

pytestmark = pytest.mark.usefixtures("importable_units")


def test_units_give_what_they_give_in_this_process():
    items = [(k, (k,)) for k in range(1, 9)]
    executor = ProcessExecutor(2)
    try:
        found = dict(executor.run(product, 3, items))
        assert found == dict(LocalExecutor(Session()).run(product, 3, items))
        assert found == {k: 3 * k for k in range(1, 9)}
        workers = executor.pids()
        assert len(workers) == 2 and all(alive(pid) for pid in workers)  # kept warm
        assert dict(executor.run(difference, 10, items[:2])) == {1: 9, 2: 8}  # another job
        assert executor.pids() == workers  # the same workers took the new job
    finally:
        executor.close()
    assert not any(alive(pid) for pid in workers)  # they ended when their input closed


def test_a_failing_unit_raises_with_the_workers_traceback():
    executor = ProcessExecutor(2)
    try:
        with pytest.raises(WorkerError, match="ZeroDivisionError"):
            dict(executor.run(quotient, 1, [("a", (1,)), ("b", (0,)), ("c", (2,))]))
        assert executor.pids() == []  # stopped: their other answers are lost
    finally:
        executor.close()


def test_a_short_run_stays_in_this_process_and_a_long_one_starts_the_workers():
    items = [(k, (k,)) for k in range(1, 9)]
    here = Session()
    short = ProcessExecutor(2, here)  # the units take far less than starting workers
    try:
        found = dict(short.run(whose_session, None, items))
        assert {pid for pid, _, _ in found.values()} == {os.getpid()}
        assert {session for _, session, _ in found.values()} == {id(here)}
        assert short.pids() == []  # no worker was started
    finally:
        short.close()
    long = ProcessExecutor(2, here, start_after_s=0.0)  # any units left are worth workers
    try:
        found = dict(long.run(product, 3, items))
        assert found == {k: 3 * k for k in range(1, 9)}
        assert len(long.pids()) == 2  # started after this process's first two units
    finally:
        long.close()


def test_workers_start_at_once_while_this_process_prepares():
    """With ``prepare``, the workers start on the first call and this process runs
    ``prepare`` once, before its first unit, then takes units beside them."""
    items = [(k, (k,)) for k in range(1, 41)]
    here, prepared = Session(), []

    def prepare():
        assert executor.pids(), "the workers start before this process prepares"
        prepared.append(os.getpid())

    executor = ProcessExecutor(1, here, prepare=prepare)
    try:
        assert dict(executor.run(product, 3, items)) == {k: 3 * k for k in range(1, 41)}
        assert prepared == [os.getpid()] and len(executor.pids()) == 1
        assert dict(executor.run(product, 2, items[:4])) == {1: 2, 2: 4, 3: 6, 4: 8}
        assert prepared == [os.getpid()]  # once, on the first call only
    finally:
        executor.close()


def test_a_worker_that_only_plans_loads_no_jax(spaces_dir, catalog):
    """Workers make their evaluator (and so load JAX) on their first unit that evaluates:
    chunks planned to the closed form load none."""
    from xsweep.search.evaluation import Job
    from xsweep.search.levels import Level
    from xsweep.search.sweep.units import bound_chunk
    from xsweep.spec import load_sweep

    job = Job(load_sweep(spaces_dir / "gpt3-175b-64.yaml", catalog), catalog)
    executor = ProcessExecutor(1)
    try:
        found = dict(executor.run(bound_chunk, job, [(0, (0, 1020, Level.CLOSED_FORM))]))
        assert (found[0][0]["level"] == Level.CLOSED_FORM).any()  # it planned some points
        assert dict(executor.run(jax_loaded, None, [(0, (0,))]))[0][1] is False
        assert dict(executor.run(bound_chunk, job, [(0, (0, 1020, Level.BOUND))]))
        assert dict(executor.run(jax_loaded, None, [(0, (0,))]))[0][1] is True  # evaluated
    finally:
        executor.close()
