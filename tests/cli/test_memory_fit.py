"""A plan that does not fit in GPU memory: ``check``, ``plan`` and ``simulate`` fail it with
exit 1 and one line naming the file, the device group and its memory against its GPU's;
``--allow-oom`` goes on with exit 0, the verdict still printed."""

from __future__ import annotations

import json
import re

import pytest

# One node of 8 H100 (80 GiB), Llama-2-7B in two stages of TP 2, micro-batches of 64
# sequences: far beyond what a GPU holds (the stage-0 groups need the most).
TOO_BIG = """\
name: "too-big"
model { preset: "llama2-7b" seq_length: 2048 }
training { global_batch_size: 2048 }
cluster { nodes { gpu: "H100-SXM" num_gpus: 8 } }
device_groups { id: 0 ranks: [0, 1] pp_stage: 0 dp_replica: 0
  first_layer: 1 last_layer: 16 micro_batch_size: 64 num_micro_batches: 16 }
device_groups { id: 1 ranks: [2, 3] pp_stage: 1 dp_replica: 0
  first_layer: 17 last_layer: 32 micro_batch_size: 64 num_micro_batches: 16 }
device_groups { id: 2 ranks: [4, 5] pp_stage: 0 dp_replica: 1
  first_layer: 1 last_layer: 16 micro_batch_size: 64 num_micro_batches: 16 }
device_groups { id: 3 ranks: [6, 7] pp_stage: 1 dp_replica: 1
  first_layer: 17 last_layer: 32 micro_batch_size: 64 num_micro_batches: 16 }
"""
VERDICT = re.compile(r"does not fit in memory: device group 0 \(H100-SXM, TP 2\) needs "
                     r"(\d+\.\d\d) GiB per GPU, more than the 80\.00 GiB of its GPUs; "
                     r"4 of 4 device groups do not fit")


@pytest.fixture
def too_big(tmp_path):
    path = tmp_path / "too-big.pbtxt"
    path.write_text(TOO_BIG)
    return path


@pytest.mark.parametrize("command", ["check", "plan", "simulate"])
def test_a_plan_that_does_not_fit_fails_with_exit_1(run_xsweep, too_big, command):
    result = run_xsweep(command, too_big)
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    lines = [line for line in result.stderr.splitlines() if not line.startswith("simulating")]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{too_big}: does not fit in memory: device group 0 ")
    match = VERDICT.search(lines[0])
    assert match is not None, lines[0]
    assert float(match.group(1)) > 80
    assert "--allow-oom" in lines[0]


def test_the_memory_named_is_the_plans(run_xsweep, too_big):
    doc = json.loads(run_xsweep("plan", too_big, "--json", "--allow-oom").stdout)
    worst = max(doc["memory"], key=lambda m: m["per_gpu_gib"] / m["capacity_gib"])
    line = run_xsweep("check", too_big).stderr
    assert f"device group {worst['device_group']} " in line
    assert f"needs {worst['per_gpu_gib']:.2f} GiB per GPU" in line


def test_check_with_allow_oom_passes_and_keeps_the_verdict(run_xsweep, too_big):
    result = run_xsweep("check", "--allow-oom", too_big)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    (line,) = result.stdout.splitlines()
    assert line.startswith(f"{too_big}: valid deployment plan 'too-big' (8 ranks, 4 device "
                           "groups); does not fit in memory: device group 0 ")
    assert VERDICT.search(line)


def test_plan_with_allow_oom_prints_the_plan(run_xsweep, too_big):
    result = run_xsweep("plan", too_big, "--allow-oom")
    assert result.returncode == 0, result.stderr
    assert "DOES NOT FIT" in result.stdout
    assert VERDICT.search(result.stderr) and "going on: --allow-oom" in result.stderr
    doc = json.loads(run_xsweep("plan", too_big, "--allow-oom", "--json").stdout)
    assert not any(m["fits"] for m in doc["memory"])


def test_simulate_with_allow_oom_simulates(run_xsweep, too_big, tmp_path):
    trace = tmp_path / "trace.json"
    result = run_xsweep("simulate", too_big, "--allow-oom", "--json", "--trace", trace)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["memory_fits"] is False and doc["memory_per_gpu_gib"] > 80
    assert trace.exists()
    assert VERDICT.search(result.stderr)
    assert "(DOES NOT FIT)" in run_xsweep("simulate", too_big, "--allow-oom").stdout


def test_simulate_fails_before_writing_anything(run_xsweep, too_big, tmp_path):
    trace = tmp_path / "trace.json"
    result = run_xsweep("simulate", too_big, "--trace", trace)
    assert result.returncode == 1
    assert not trace.exists() and "simulating" not in result.stderr


def test_check_reports_every_file_and_exits_with_the_worst(run_xsweep, too_big, spaces_dir,
                                                           tmp_path):
    good = spaces_dir / "h100x8-baseline.pbtxt"
    result = run_xsweep("check", too_big, good)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{good}: valid deployment plan 'h100x8-baseline' (8 ranks, 4 device groups)"]
    assert len(result.stderr.splitlines()) == 1
    bad = tmp_path / "bad.pbtxt"
    bad.write_text('name: "x"\n')
    result = run_xsweep("check", bad, too_big, good)
    assert result.returncode == 2  # bad input is worse than a failed check
    assert len(result.stdout.splitlines()) == 1 and len(result.stderr.splitlines()) == 2


def test_plans_that_fit_are_unchanged(run_xsweep, spaces_dir):
    for command in ("check", "plan"):
        result = run_xsweep(command, spaces_dir / "appendix-b.pbtxt")
        assert result.returncode == 0 and result.stderr == "", result.stderr
