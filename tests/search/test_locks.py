"""A folder's lock: one holder at a time, the others refused with a line naming it; the
kernel frees it when its holder dies, however it dies; the lock file goes with a clean
release, and a file removed under a waiting taker is never held twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.support.paths import REPO_ROOT
from xsweep.errors import InputError
from xsweep.search import locks
from xsweep.search.locks import LOCK_FILE, FolderLock

pytestmark = pytest.mark.skipif(locks.fcntl is None, reason="flock is POSIX's")

HOLDER = """
import sys, time
from xsweep.search.locks import FolderLock
lock = FolderLock(sys.argv[1], "xsweep sweep held.yaml").acquire()
print("held", flush=True)
time.sleep(float(sys.argv[2]))
lock.release()
"""


def hold_in_a_process(folder, seconds: float = 60.0) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), str(seconds)],
                               cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "held"
    return process


def test_a_second_taker_is_refused_naming_the_holder(tmp_path):
    folder = tmp_path / "out"
    first = FolderLock(folder, "xsweep sweep a.yaml").acquire()
    record = json.loads((folder / LOCK_FILE).read_text())
    assert record["pid"] == os.getpid() and record["command"] == "xsweep sweep a.yaml"
    with pytest.raises(InputError) as refused:
        FolderLock(folder, "xsweep sweep b.yaml").acquire()
    clock = record["since"][11:19]
    assert str(refused.value) == (f"{folder}: in use by xsweep sweep a.yaml (pid {os.getpid()}, "
                                  f"since {clock}); wait for it to end, or choose another "
                                  "folder with -o")
    first.release()
    assert not (folder / LOCK_FILE).exists()  # a clean release leaves nothing behind
    with FolderLock(folder, "xsweep sweep b.yaml") as second:
        assert second.held
        assert json.loads((folder / LOCK_FILE).read_text())["command"] == "xsweep sweep b.yaml"
    assert list(folder.iterdir()) == []


def test_a_killed_holder_leaves_no_stuck_lock(tmp_path):
    process = hold_in_a_process(tmp_path)
    with pytest.raises(InputError, match=rf"in use by xsweep sweep held.yaml \(pid {process.pid},"):
        FolderLock(tmp_path, "xsweep sweep mine.yaml").acquire()
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert (tmp_path / LOCK_FILE).exists()  # left behind, but no longer locked
    with FolderLock(tmp_path, "xsweep sweep mine.yaml"):
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()


def test_a_taker_may_wait_for_the_holder_to_end(tmp_path):
    process = hold_in_a_process(tmp_path, seconds=1.0)
    began = time.monotonic()
    with FolderLock(tmp_path, "xsweep optimize x.yaml", wait_s=30):
        assert time.monotonic() - began < 30
    assert process.wait(timeout=30) == 0


def test_a_file_removed_under_a_taker_is_not_held_twice(tmp_path, monkeypatch):
    """The holder removes the lock file as it releases; a taker that opened the old file
    and locks it then takes the folder's new file instead."""
    first = FolderLock(tmp_path, "xsweep validate a").acquire()
    real, calls = locks._try_lock, []

    def release_first_then_lock(fd: int) -> bool:
        if not calls:
            first.release()  # the file the taker opened is gone now
        calls.append(fd)
        return real(fd)

    monkeypatch.setattr(locks, "_try_lock", release_first_then_lock)
    with FolderLock(tmp_path, "xsweep validate b") as second:
        assert len(calls) == 2  # the orphaned file, then the folder's own
        assert os.fstat(second._fd).st_ino == os.stat(tmp_path / LOCK_FILE).st_ino
        monkeypatch.setattr(locks, "_try_lock", real)
        with pytest.raises(InputError, match="in use by xsweep validate b"):
            FolderLock(tmp_path, "xsweep validate c").acquire()
