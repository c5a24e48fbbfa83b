"""Each process runs the units it takes in one session of its own, kept from unit to unit
and from job to job; in this process, units run in the session the executor was given."""

from __future__ import annotations

import os

import pytest

from tests.search.sweep.arithmetic import whose_session
from xsweep.search.evaluation import Session
from xsweep.search.sweep.distributed import LocalExecutor
from xsweep.search.sweep.processes import ProcessExecutor

pytestmark = pytest.mark.usefixtures("importable_units")


def test_each_worker_runs_its_units_in_one_session_of_its_own():
    items = [(k, (k,)) for k in range(12)]
    executor = ProcessExecutor(2)
    try:
        found = list(executor.run(whose_session, None, items))
        found += list(executor.run(whose_session, None, items))  # a later job: the same
        workers = executor.pids()
    finally:
        executor.close()
    sessions = {pid: {(session, kind) for _, (p, session, kind) in found if p == pid}
                for pid in workers}
    assert all(len(kinds) <= 1 for kinds in sessions.values()), sessions
    assert {kind for kinds in sessions.values() for _, kind in kinds} == {"Session"}


def test_units_in_this_process_run_in_the_session_given():
    session = Session()
    found = {value for _, value in LocalExecutor(session).run(whose_session, None,
                                                              [(k, (k,)) for k in range(3)])}
    assert found == {(os.getpid(), id(session), "Session")}
