"""Time and memory budgets for tests that feed xsweep hostile input.

A budget is a guard against hangs and memory blow-ups, far above what the code
needs (speed is measured in ``benchmarks/``): going over it fails the test cleanly
instead of stalling CI or exhausting the machine.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from tests.support.paths import REPO_ROOT

MEMORY_BYTES = 1 << 30  # the bar for a command: 1 GB
TIME_S = 60.0


def _limit_memory() -> None:  # runs in the child, before exec
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


def run_cli(*args: object, env: dict[str, str] | None = None,
            timeout_s: float = TIME_S) -> subprocess.CompletedProcess:
    """``python -m xsweep.cli.main ARGS`` in at most 1 GB of address space and ``timeout_s``."""
    return subprocess.run(
        [sys.executable, "-m", "xsweep.cli.main", *map(str, args)], cwd=REPO_ROOT,
        capture_output=True, text=True, timeout=timeout_s, check=False,
        preexec_fn=_limit_memory, env={**os.environ, **(env or {})})


class OverBudget(Exception):
    """A call ran past its time budget or allocated past its memory budget."""


@contextlib.contextmanager
def in_process_budget(seconds: float = 20.0, extra_bytes: int = MEMORY_BYTES) -> Iterator[None]:
    """Bound a block of this process: ``seconds`` of wall time (SIGALRM) and ``extra_bytes``
    of address space beyond what it uses now (RLIMIT_AS; MemoryError past it)."""
    def expire(_signum, _frame):
        raise OverBudget(f"still running after {seconds} s")

    used = _address_space_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = used + extra_bytes
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    previous = signal.signal(signal.SIGALRM, expire)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _address_space_bytes() -> int:
    with open("/proc/self/statm") as stats:
        return int(stats.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def one_line_per_file(result: subprocess.CompletedProcess, files: Sequence[Path]) -> dict:
    """Map each file to (stream, line) from ``xsweep check``; every file exactly once."""
    found = {}
    for stream, text in (("stdout", result.stdout), ("stderr", result.stderr)):
        for line in text.splitlines():
            owner = [f for f in files if line.startswith(f"{f}: ")]
            assert len(owner) == 1, f"a line of no single file: {line!r}"
            assert owner[0] not in found, f"two lines for {owner[0]}"
            found[owner[0]] = (stream, line)
    assert set(found) == set(files), "a file got no line"
    return found
