"""``xsweep plan`` and ``xsweep simulate`` through the real CLI."""

from __future__ import annotations

import json

import pytest

from tests.support.bad_inputs import CASES

PLAN_CASES = {k: v for k, v in CASES.items() if v[0].endswith(".pbtxt")}
METRICS = ("iteration_time_s", "tokens_per_s", "mfu", "busy_s_mean", "bubble_s_max",
           "straggler_wait_s_max", "memory_per_gpu_gib", "memory_fits", "capex_usd",
           "cost_rate_usd_per_hour", "cost_per_run_usd", "paper_tco")


@pytest.mark.parametrize("example", ["appendix-b", "figure1-llama2-7b", "h100x8-baseline"])
def test_plan_json_on_every_example(run_xsweep, spaces_dir, example):
    result = run_xsweep("plan", spaces_dir / f"{example}.pbtxt", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    for key in ("dp_groups", "resharding", "memory", "workload", "program"):
        assert key in doc
    assert doc["program"]["tasks"] > 0 and doc["program"]["flows"] > 0
    assert all(m["fits"] for m in doc["memory"])
    readable = run_xsweep("plan", spaces_dir / f"{example}.pbtxt")
    assert readable.returncode == 0 and "data-parallel groups" in readable.stdout


def test_plan_json_reports_appendix_b_groups(run_xsweep, spaces_dir):
    doc = json.loads(run_xsweep("plan", spaces_dir / "appendix-b.pbtxt", "--json").stdout)
    assert [(g["first_layer"], g["last_layer"], g["ranks"], g["lcm"]) for g in doc["dp_groups"]] \
        == [(1, 15, [0, 1, 2, 3, 4], 6), (16, 20, [0, 1, 2, 7, 8, 9], 3),
            (21, 32, [5, 6, 7, 8, 9], 6)]
    ring0 = doc["dp_groups"][0]["rings"]
    assert [r["ranks"] for r in ring0] == [[0, 3], [1, 4], [2, 3], [0, 4], [1, 3], [2, 4]]


def test_simulate_json_and_trace(run_xsweep, spaces_dir, tmp_path):
    trace = tmp_path / "trace.json"
    result = run_xsweep("simulate", spaces_dir / "figure1-llama2-7b.pbtxt", "--json",
                        "--trace", trace)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    for key in METRICS:
        assert key in doc, key
    assert doc["iteration_time_s"] > 0 and 0 < doc["mfu"] < 1
    assert sorted(r["rank"] for r in doc["per_rank"]) == list(range(10))
    for r in doc["per_rank"]:
        assert {"exposed_tp_s", "exposed_pp_s", "exposed_reshard_s", "exposed_dp_s"} <= set(r)
        # a rank's time splits into compute, blocking TP and idle
        total = r["busy_s"] + r["exposed_tp_s"] + r["idle_s"]
        assert total == pytest.approx(doc["iteration_time_s"], rel=1e-9)
    events = json.loads(trace.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    assert any(e.get("ph") == "X" for e in events)


def test_simulate_is_deterministic(run_xsweep, spaces_dir):
    a = run_xsweep("simulate", spaces_dir / "appendix-b.pbtxt", "--json")
    b = run_xsweep("simulate", spaces_dir / "appendix-b.pbtxt", "--json")
    assert a.returncode == 0 and a.stdout == b.stdout


@pytest.mark.parametrize("command", ["plan", "simulate"])
@pytest.mark.parametrize(("name", "content", "field"), list(PLAN_CASES.values())[:6],
                         ids=list(PLAN_CASES)[:6])
def test_bad_plans_fail_with_one_line(tmp_path, run_xsweep, command, name, content, field):
    path = tmp_path / name
    path.write_text(content)
    result = run_xsweep(command, path)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}: ") and field in lines[0]


def test_simulate_trace_is_readable_by_others(run_xsweep, spaces_dir, tmp_path):
    """The trace gets the mode every output gets (0644 under umask 022), not 0600."""
    import os
    import stat

    trace = tmp_path / "trace.json"
    previous = os.umask(0o022)  # the subprocess inherits it
    try:
        result = run_xsweep("simulate", spaces_dir / "h100x8-baseline.pbtxt", "--trace", trace)
    finally:
        os.umask(previous)
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(trace.stat().st_mode) == 0o644


def test_simulate_reports_the_cost_per_million_tokens(run_xsweep, spaces_dir):
    """Known without total_tokens (the baseline has none), in JSON and in the text."""
    plan = spaces_dir / "h100x8-baseline.pbtxt"
    doc = json.loads(run_xsweep("simulate", plan, "--json").stdout)
    assert doc["cost_per_run_usd"] is None
    expected = doc["cost_rate_usd_per_hour"] / (doc["tokens_per_s"] * 3600) * 1e6
    assert doc["cost_per_million_tokens_usd"] == pytest.approx(expected, rel=1e-12)
    text = run_xsweep("simulate", plan).stdout
    assert f"{expected:,.4g} USD per million tokens" in text
