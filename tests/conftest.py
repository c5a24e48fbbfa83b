"""Shared fixtures: the default catalog, the repository's paths and the real CLI."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import settings

from xsweep.runtime import use_compiled_loops
from xsweep.spec.catalog import Catalog, load_catalog

# The kernels compile as the evaluator compiles them (before any test starts JAX).
use_compiled_loops()

# No per-example deadline: the machines are shared, and a wall-clock limit would make
# property tests fail on load rather than on a wrong answer.
settings.register_profile("xsweep", deadline=None)
settings.load_profile("xsweep")

REPO_ROOT = Path(__file__).resolve().parent.parent
SPACES = REPO_ROOT / "spaces"


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    """The built-in catalog (no user files merged)."""
    return load_catalog()


@pytest.fixture(scope="session")
def spaces_dir() -> Path:
    """The shipped examples folder."""
    return SPACES


@pytest.fixture(scope="session")
def run_xsweep() -> Callable[..., subprocess.CompletedProcess]:
    """Run ``python -m xsweep.cli.main ARGS...`` in a subprocess from the repository root."""

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "xsweep.cli.main", *map(str, args)],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False,
        )

    return run
