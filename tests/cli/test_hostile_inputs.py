"""Every class of hostile input through the real CLI, within a time and memory budget.

Each input of ``tests/support/hostile_inputs.py`` is either accepted (exit 0) or refused with
exit code 2 and one line naming the file, never a traceback, never over 1 GB of
address space (``tests/support/budget.py``). ``benchmarks/bench_hostile.py`` runs the same
inputs at 1 MB and reports the time and memory they take.
"""

from __future__ import annotations

import json

import pytest

from tests.support.budget import one_line_per_file, run_cli
from tests.support.hostile_inputs import HOSTILE, PLAN

SIZE = 64 * 1024
PLAN_INPUTS = [h for h in HOSTILE if h.is_plan]
# The classes the issue reported against ``plan`` and ``simulate``; the rest run with -m slow.
REPORTED = {"huge num_gpus", "huge micro-batch count", "program over the limit", "nan latency",
            "unknown schedule value", "json bare number", "utf-16 plan", "json deep nesting"}


@pytest.fixture(scope="module")
def hostile_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    files = {}
    for hostile in HOSTILE:
        files[hostile.name] = folder / (hostile.name.replace(" ", "_") + hostile.suffix)
        files[hostile.name].write_bytes(hostile.make(SIZE))
    return files


def test_check_reports_every_hostile_file(hostile_files):
    files = list(hostile_files.values())
    result = run_cli("check", *files)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    verdicts = one_line_per_file(result, files)
    for hostile in HOSTILE:
        stream, line = verdicts[hostile_files[hostile.name]]
        assert stream == ("stdout" if hostile.valid else "stderr"), line


def command_result(command, hostile, hostile_files):
    path = hostile_files[hostile.name]
    result = run_cli(command, path, "--json")
    assert "Traceback" not in result.stderr
    if hostile.valid:
        assert result.returncode == 0, result.stderr
        json.loads(result.stdout, parse_constant=pytest.fail)  # strict JSON: no NaN
    else:
        assert result.returncode == 2
        assert result.stdout == ""
        assert result.stderr.splitlines() == [result.stderr.strip()]
        assert result.stderr.startswith(f"{path}: ")


@pytest.mark.parametrize("command", ["plan", "simulate"])
@pytest.mark.parametrize("hostile", [h for h in PLAN_INPUTS if h.name in REPORTED],
                         ids=lambda h: h.name)
def test_plan_and_simulate_refuse_the_reported_inputs(command, hostile, hostile_files):
    command_result(command, hostile, hostile_files)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["plan", "simulate"])
@pytest.mark.parametrize("hostile", [h for h in PLAN_INPUTS if h.name not in REPORTED],
                         ids=lambda h: h.name)
def test_plan_and_simulate_on_every_other_plan_input(command, hostile, hostile_files):
    command_result(command, hostile, hostile_files)


def test_a_crash_on_one_file_hides_no_other(tmp_path):
    good, bad = tmp_path / "good.pbtxt", tmp_path / "bad.pbtxt"
    good.write_text(PLAN)
    bad.write_bytes(b"\xff\xfe\x00binary")
    result = run_cli("check", bad, good, tmp_path / "absent.json", good)
    assert result.returncode == 2
    assert result.stdout.splitlines() == [f"{good}: valid deployment plan 'hostile-base' "
                                          "(8 ranks, 4 device groups)"] * 2
    assert [line.split(": ")[0] for line in result.stderr.splitlines()] == [
        str(bad), str(tmp_path / "absent.json")]
