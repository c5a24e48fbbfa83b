"""Property-based fuzzing of the command line, against the library's verdict on each file.

``xsweep check`` on a batch of mutated plans, sweeps and catalogs prints exactly one
line per file, on stdout exactly for the files the library accepts, exits 2 when any
is refused, and stays within 1 GB and the time budget. ``xsweep simulate --json`` on
a mutated plan prints a strict JSON document of finite numbers, or exits 2 with one
line naming the file.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.mutations import any_sample, plan_samples, write
from tests.fuzz.verdict import FUZZ_PROGRAM_SIZE, finite_numbers, library_accepts
from tests.support.budget import one_line_per_file, run_cli

ENV = {"XSWEEP_MAX_PROGRAM_SIZE": FUZZ_PROGRAM_SIZE}


def fuzz(examples: int):
    return settings(max_examples=examples, derandomize=True, database=None, deadline=None,
                    suppress_health_check=list(HealthCheck))


@fuzz(6)
@given(samples=st.lists(any_sample, min_size=16, max_size=16))
def test_check_agrees_with_the_library_on_every_file(tmp_path_factory, catalog, monkeypatch,
                                                     samples):
    folder = tmp_path_factory.mktemp("check")
    monkeypatch.setenv("XSWEEP_MAX_PROGRAM_SIZE", FUZZ_PROGRAM_SIZE)
    files = [write(sample, folder, index) for index, sample in enumerate(samples)]
    accepted = {path: library_accepts(sample.kind, path, catalog)
                for path, sample in zip(files, samples, strict=True)}
    # the verdict compared is validity; memory is checked by tests/cli/test_memory_fit.py
    result = run_cli("check", *files, "--allow-oom", env=ENV)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert result.returncode == (0 if all(accepted.values()) else 2), result.stderr
    for path, (stream, line) in one_line_per_file(result, files).items():
        assert stream == ("stdout" if accepted[path] else "stderr"), line


@fuzz(4)
@given(sample=plan_samples())
def test_simulate_prints_finite_json_or_one_line(tmp_path_factory, catalog, monkeypatch, sample):
    check_simulate(tmp_path_factory, catalog, monkeypatch, sample)


@pytest.mark.slow
@fuzz(25)
@given(sample=plan_samples())
def test_simulate_on_more_mutated_plans(tmp_path_factory, catalog, monkeypatch, sample):
    check_simulate(tmp_path_factory, catalog, monkeypatch, sample)


def check_simulate(tmp_path_factory, catalog, monkeypatch, sample):
    path = write(sample, tmp_path_factory.mktemp("simulate"))
    monkeypatch.setenv("XSWEEP_MAX_PROGRAM_SIZE", FUZZ_PROGRAM_SIZE)
    accepted = library_accepts(sample.kind, path, catalog)
    result = run_cli("simulate", path, "--json", "--allow-oom", env=ENV)
    assert "Traceback" not in result.stderr
    if accepted:
        assert result.returncode == 0, result.stderr
        doc = json.loads(result.stdout, parse_constant=_not_json)
        finite_numbers(doc)
        assert math.isfinite(doc["iteration_time_s"])
    else:
        assert result.returncode == 2 and result.stdout == ""
        assert result.stderr.splitlines() == [result.stderr.strip()]
        assert result.stderr.startswith(f"{path}: ")


def _not_json(name: str):
    raise AssertionError(f"{name} in JSON output")
