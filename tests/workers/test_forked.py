"""Workers forked from the caller: they answer as started ones do, have none of the
caller's other files open, end when the pool closes, and are started anew wherever a fork
would not be safe (a second thread, JAX loaded). Each case runs in a new interpreter,
whose state (threads, modules) it controls."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="workers are forked on Linux only")


def _run(script: str, tmp_path) -> dict:
    """Run ``script`` (which prints one JSON object last) in a new interpreter."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (REPO_ROOT, os.environ.get("PYTHONPATH", "")) if p))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


POOL = """
    import json, os, threading, fcntl
    from tests.support.processes import alive
    from tests.workers import handlers
    from xsweep.workers import Pool, WorkerError

    held = open("held.lock", "w")
    fcntl.flock(held, fcntl.LOCK_EX)  # a lock of the caller's: never the worker's
    if SECOND_THREAD:
        stop = threading.Event()
        threading.Thread(target=stop.wait, daemon=True).start()
    pool = Pool(1, handlers.arithmetic, {}, fork=True)
    found = dict(pool.run([("add", k, 1) for k in range(5)], context="c"))
    pid = pool.pids()[0]
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        command = f.read().split(b"\\0")
    files = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    try:
        dict(pool.run([("divide", 1, 0)]))
        failed = ""
    except WorkerError as error:
        failed = str(error)
    again = dict(pool.run([("add", 2, 3)], context="d"))
    last = pool.pids()[0]
    pool.close()
    print(json.dumps({"found": {str(k): v for k, v in found.items()}, "again": again[0],
                      "started_anew": b"xsweep.workers.serve" in command,
                      "holds_lock": any(f.endswith("held.lock") for f in files),
                      "failed": failed, "alive_after_close": alive(last)}))
"""


def test_a_forked_worker_answers_holds_none_of_the_callers_files_and_ends(tmp_path):
    found = _run("SECOND_THREAD = False\n" + textwrap.dedent(POOL), tmp_path)
    assert found["found"] == {str(k): [k + 1, "c"] for k in range(5)}
    assert not found["started_anew"]  # forked: no new interpreter
    assert not found["holds_lock"]  # the caller's descriptors closed in the worker
    assert "ZeroDivisionError" in found["failed"]
    assert found["again"] == [5, "d"]  # a new worker after the failure stopped the pool
    assert not found["alive_after_close"]


def test_a_pool_asked_to_fork_starts_its_workers_anew_beside_another_thread(tmp_path):
    found = _run("SECOND_THREAD = True\n" + textwrap.dedent(POOL), tmp_path)
    assert found["started_anew"]
    assert found["found"] == {str(k): [k + 1, "c"] for k in range(5)}
    assert not found["holds_lock"] and not found["alive_after_close"]


def test_a_process_with_jax_loaded_does_not_fork(tmp_path):
    found = _run("""
        import json
        from xsweep.workers.forked import fork_safe
        before = fork_safe()
        import jax
        print(json.dumps({"before": before, "after": fork_safe()}))
    """, tmp_path)
    assert found == {"before": True, "after": False}
