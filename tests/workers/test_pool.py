"""The one worker layer: answers as asked, and every failure on the way to or from a
worker raises WorkerError within seconds (never a silent wait), with the pool stopped."""

from __future__ import annotations

import os
import threading
import time

import pytest

from tests.support.processes import alive
from tests.workers import handlers
from xsweep.workers import Pool, PoolBusy, WorkerError, pipes

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: Seconds a failure may take to reach the caller, generous for a loaded machine (a
#: worker process starts in about a tenth of a second).
PROMPT_S = 20


@pytest.fixture(autouse=True)
def importable_handlers(monkeypatch):
    """Workers import the handlers from this repository's tests."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (REPO_ROOT, os.environ.get("PYTHONPATH", "")) if p))


@pytest.fixture
def pool():
    made = Pool(2, handlers.arithmetic, {"any": "settings"})
    yield made
    made.close(kill=True)


def test_answers_come_back_with_their_index_and_the_context(pool):
    found = dict(pool.run([("add", k, 1) for k in range(10)], context="ctx"))
    assert found == {k: (k + 1, "ctx") for k in range(10)}
    pids = pool.pids()
    assert len(pids) == 2 and all(alive(p) for p in pids)
    assert dict(pool.run([("add", 1, 1)], context="other")) == {0: (2, "other")}
    assert pool.pids() == pids  # the same workers, kept between calls


def test_notes_reach_the_caller_in_its_thread(pool):
    notes = []
    caller = threading.get_ident()
    found = dict(pool.run([("sleep", 0.3)],
                          on_note=lambda i, kind, payload: notes.append(
                              (i, kind, payload, threading.get_ident() == caller))))
    assert found == {0: "slept"}
    assert notes == [(0, "progress", step, True) for step in (1, 2, 3)]


def _failing(pool, requests, **options):
    started = time.monotonic()
    with pytest.raises(WorkerError) as raised:
        dict(pool.run(requests, **options))
    assert time.monotonic() - started < PROMPT_S
    assert "\n" not in str(raised.value)
    assert pool.pids() == []  # stopped
    return raised.value


def test_a_request_that_cannot_be_pickled_fails_the_call_at_once(pool):
    error = _failing(pool, [("add", 1, 2), ("add", threading.Lock(), 1), ("add", 3, 4)])
    assert "request 1 could not be sent" in str(error) and "lock" in str(error)
    assert dict(pool.run([("add", 1, 2)])) == {0: (3, None)}  # new workers serve the next


def test_a_context_that_cannot_be_pickled_fails_the_call_at_once(pool):
    error = _failing(pool, [("add", 1, 2)] * 4, context=handlers.unpicklable_context())
    assert "context could not be sent" in str(error)


def test_a_worker_that_dies_fails_the_call_with_its_exit_code(pool):
    error = _failing(pool, [("add", 1, 2), ("die", 3), ("add", 3, 4)])
    assert "ended unexpectedly (exit code 3)" in str(error)


def test_a_failing_request_raises_the_workers_last_traceback_line(pool):
    error = _failing(pool, [("div", 1, 0)])
    assert str(error) == "a worker process failed: ZeroDivisionError: division by zero"
    assert "Traceback" in error.details and "handlers.py" in error.details


def test_an_answer_that_cannot_travel_back_is_reported(pool):
    error = _failing(pool, [("lambda",)])
    assert "answer could not be sent back" in str(error)


def test_a_handler_that_cannot_be_made_is_reported_at_the_first_request():
    broken = Pool(1, handlers.broken, 42)
    try:
        error = _failing(broken, [("add", 1, 2)])
    finally:
        broken.close(kill=True)
    assert "RuntimeError: cannot make a handler of 42" in str(error)


def test_an_unpicklable_setup_fails_the_first_call():
    unpicklable = Pool(1, handlers.arithmetic, threading.Lock())
    with pytest.raises(WorkerError, match="could not start the worker processes"):
        dict(unpicklable.run([("add", 1, 2)]))
    assert unpicklable.pids() == []


def test_an_error_in_the_callers_requests_stops_the_workers(pool):
    def requests():
        yield ("sleep", 0.2)
        raise ValueError("bad input found while reading requests")

    with pytest.raises(ValueError, match="bad input"):
        dict(pool.run(requests()))
    assert pool.pids() == []


def test_a_second_thread_is_refused_while_a_call_is_served(pool):
    first = pool.run([("sleep", 1.0), ("sleep", 1.0)])
    got = next(first)  # the call is under way
    with pytest.raises(PoolBusy):
        dict(pool.run([("add", 1, 1)]))
    rest = dict(first)
    assert {got[0], *rest} == {0, 1}
    assert dict(pool.run([("add", 1, 1)])) == {0: (2, None)}  # free again


def test_workers_run_jax_on_the_cpu_whatever_the_caller_asks(monkeypatch):
    """An accelerator belongs to the one process that owns it: workers never open one,
    even where the caller's environment names an accelerator platform first."""
    monkeypatch.setenv("JAX_PLATFORMS", "cuda,cpu")
    cpu_only = Pool(2, handlers.arithmetic)
    try:
        found = dict(cpu_only.run([("platforms",), ("platforms",)]))
    finally:
        cpu_only.close()
    assert found == {0: (["cpu"], "cpu"), 1: (["cpu"], "cpu")}


def test_the_caller_answers_requests_itself_while_the_workers_start(pool):
    def local(request):
        time.sleep(request[1])
        return "slept here"

    # 20 requests of 0.15 s: about 3 s for the caller alone, while a worker starts in
    # about a tenth of a second, so both take some
    found = dict(pool.run([("sleep", 0.15)] * 20, local=local))
    assert sorted(found) == list(range(20))  # every request answered, once
    assert set(found.values()) == {"slept here", "slept"}
    assert len(pool.pids()) == 2


def test_a_failing_local_answer_stops_the_workers(pool):
    def local(request):
        raise ZeroDivisionError("in the caller")

    with pytest.raises(ZeroDivisionError, match="in the caller"):
        dict(pool.run([("sleep", 0.3)] * 6, local=local))
    assert pool.pids() == []


@pytest.mark.parametrize("ahead", [2, 3])
def test_requests_sent_ahead_are_answered_once_each_with_their_notes(pool, ahead):
    notes = []
    requests = [("sleep", 0.03), ("add", 1, 2), ("sleep", 0.03), ("add", 5, 6)] * 3
    found = dict(pool.run(requests, context="c", ahead=ahead,
                          on_note=lambda i, kind, payload: notes.append((i, payload))))
    assert found == {i: "slept" if r[0] == "sleep" else (r[1] + r[2], "c")
                     for i, r in enumerate(requests)}
    # each note belongs to the request that sent it, though others waited in its input
    assert sorted(notes) == [(i, step) for i, r in enumerate(requests) if r[0] == "sleep"
                             for step in (1, 2, 3)]


def test_a_failure_among_requests_sent_ahead_fails_the_call(pool):
    error = _failing(pool, [("add", 1, 2), ("div", 1, 0), ("add", 3, 4), ("add", 5, 6)],
                     ahead=2)
    assert "ZeroDivisionError" in str(error)
    error = _failing(pool, [("add", 1, 2), ("die", 4), ("add", 3, 4), ("add", 5, 6)],
                     ahead=2)
    assert "exit code 4" in str(error)


def test_the_caller_still_takes_requests_while_workers_hold_some_ahead(pool):
    found = dict(pool.run([("sleep", 0.15)] * 20, ahead=2,
                          local=lambda request: (time.sleep(request[1]), "here")[1]))
    assert sorted(found) == list(range(20))
    assert set(found.values()) == {"here", "slept"}


def test_answer_pipes_hold_a_planned_chunk_whole(pool):
    fcntl = pytest.importorskip("fcntl")
    if not hasattr(fcntl, "F_GETPIPE_SZ"):
        pytest.skip("pipes cannot be resized here")
    with open("/proc/sys/fs/pipe-max-size") as limit:
        most = int(limit.read())
    dict(pool.run([("add", 1, 2)]))
    for worker in pool._workers:
        assert fcntl.fcntl(worker.stdout.fileno(), fcntl.F_GETPIPE_SZ) \
            == min(most, pipes.ANSWER_PIPE_BYTES)


def test_large_requests_and_answers_sent_ahead_do_not_wait_on_each_other(pool):
    # each request larger than a pipe and each answer larger than the widened one: a
    # request written ahead while the worker writes its answer would wait for ever
    big = b"x" * (3 * 2**16)
    requests = [("big", big, 3 * 2**20)] * 6
    started = time.monotonic()
    found = dict(pool.run(requests, ahead=2))
    assert time.monotonic() - started < PROMPT_S
    assert found == {i: (len(big), b"y" * 3 * 2**20) for i in range(6)}
