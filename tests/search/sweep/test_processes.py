"""The process executor runs units on real worker processes: results as in this process,
errors with the worker's traceback, and workers that stop when told."""

from __future__ import annotations

import pytest

from tests.search.sweep.arithmetic import difference, product, quotient
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
