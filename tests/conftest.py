"""Shared fixtures: the default catalog, the shipped examples, the real CLI, and the
corpus of programs that the kernel and evaluator tests share (:mod:`tests.support.corpus`).

Helpers that tests of several folders import live in ``tests/support`` and are imported
as ``from tests.support.<module> import ...``; a test module imports nothing from
another test module."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support.paths import REPO_ROOT, SPACES
from xsweep.runtime import use_compiled_loops
from xsweep.spec.catalog import Catalog, load_catalog

# Session-scoped fixtures of the kernel and evaluator tests, registered once for the
# whole run so that each batch of the corpus is evaluated (and compiled) once.
pytest_plugins = ("tests.support.corpus",)

# The kernels compile as the evaluator compiles them (before any test starts JAX).
use_compiled_loops()

# No per-example deadline: the machines are shared, and a wall-clock limit would make
# property tests fail on load rather than on a wrong answer.
settings.register_profile("xsweep", deadline=None)
settings.load_profile("xsweep")


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
