"""Fixtures of the sweep's tests."""

from __future__ import annotations

import os

import pytest

from tests.support.paths import REPO_ROOT


@pytest.fixture
def importable_units(monkeypatch):
    """Worker processes import the units of ``tests/search/sweep/arithmetic.py``."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p))
