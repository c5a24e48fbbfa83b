"""``xsweep optimize`` through the real CLI with real SQLite studies in a temporary folder:
batched trials and what each carries, resuming, reasons of infeasible trials, refused
inputs, and storage passwords kept out of every output."""

from __future__ import annotations

import hashlib
import json
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import optuna
import pytest

from tests.support.paths import REPO_ROOT
from tests.support.sweeps import TINY
from xsweep.metrics import plan_names
from xsweep.search.pareto import non_dominated, objective_matrix
from xsweep.search.space.planner import Planner
from xsweep.spec import load_catalog, plan_from_text, sweep_from_dict
from xsweep.spec.reader import parse_yaml

# Llama-2-70B fits on no layout of one A100-40GB node: every trial fails with its reason.
# No plan of this space fits (exit 1: a check failed), so no kernel runs: fast.
NO_FIT = """\
name: a100-cannot-hold-70b
model: llama2-70b
training: {global_batch_size: 16, total_tokens: 1.0e+9}
cluster:
  pools: [{gpu: A100-40GB, nodes: 1}]
parallelism:
  tp: {A100-40GB: [4, 8]}
  pp: {low: 1, high: 2}
objectives: [iteration_time_s, cost_per_run_usd]
"""


def optimize(run_xsweep, tmp_path, text: str, *extra):
    """Run ``xsweep optimize`` on ``text`` into ``tmp_path/out``: a first run on a cold
    compilation cache compiles the kernels for a while, hence the long timeout."""
    space = tmp_path / "space.yaml"
    space.write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "xsweep.cli.main", "optimize", str(space), "-o",
         str(tmp_path / "out"), "--json", *map(str, extra)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False)


def load(tmp_path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path / 'out' / 'study.db'}")


@pytest.mark.slow  # compiles the kernels: about a minute on a cold compilation cache
def test_batched_trials_carry_plans_metrics_and_levels(run_xsweep, tmp_path):
    result = optimize(run_xsweep, tmp_path, TINY, "--trials", "12", "--batch", "6", "--seed", "3")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert "12/12 trials" in result.stderr and "Traceback" not in result.stderr
    study = load(tmp_path, "tiny-search")
    attrs = study.user_attrs
    assert attrs["xsweep_space_sha256"] == hashlib.sha256(TINY.encode()).hexdigest()
    assert attrs["xsweep_space_text"] == TINY and attrs["xsweep_space_name"] == "tiny-search"
    assert attrs["xsweep_objectives"] == ["iteration_time_s", "cost_per_run_usd"]
    assert attrs["xsweep_catalog_version"].startswith("sha256:") and attrs["xsweep_version"]
    trials = study.get_trials()
    assert sorted(t.number for t in trials) == list(range(12))
    sweep = sweep_from_dict(parse_yaml(TINY, "space.yaml"))
    planner = Planner(sweep, load_catalog())
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert complete, "some of the 48 points are feasible"
    for t in trials:
        assert t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
        point = t.user_attrs["point"]
        assert set(point) == set(sweep.domains())
        if t.state == optuna.trial.TrialState.FAIL:
            assert t.user_attrs["reason"] and t.values is None
            continue
        metrics = t.user_attrs["metrics"]
        assert set(metrics) == set(plan_names())
        assert t.user_attrs["level"] in ("exact", "bound")
        assert t.values == [metrics["iteration_time_s"], metrics["cost_per_run_usd"]]
        plan = plan_from_text(t.user_attrs["plan_pbtxt"])
        assert plan == planner.plan(point, f"tiny-search-t{t.number}").plan
    exact = [t for t in complete if t.user_attrs["level"] == "exact"]
    values = objective_matrix({"iteration_time_s": np.array([t.values[0] for t in exact]),
                               "cost_per_run_usd": np.array([t.values[1] for t in exact])},
                              ["iteration_time_s", "cost_per_run_usd"])
    front = {exact[i].number for i in np.flatnonzero(non_dominated(values))}
    assert {row["point"] for row in summary["best"]} == front
    assert summary["trials"]["total"] == 12 and summary["trials_this_run"] == 12
    for number in front:
        assert (tmp_path / "out" / "plans" / f"trial-{number}.pbtxt").read_text() == \
            study.trials[number].user_attrs["plan_pbtxt"]
    # the study's winners re-run in the exact simulator agree with what the trials hold
    storage = f"sqlite:///{tmp_path / 'out' / 'study.db'}"
    checked = subprocess.run(
        [sys.executable, "-m", "xsweep.cli.main", "validate", storage, "--study", "tiny-search",
         "--top", "2", "-o", str(tmp_path / "validate"), "--json"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert checked.returncode == 0, checked.stderr
    report = json.loads(checked.stdout)
    validated = {int(p["name"].removeprefix("trial-")) for p in report["points"]}
    assert front <= validated


@pytest.mark.slow  # evaluates with the kernels
def test_a_deadline_is_each_trials_constraint_and_bounds_the_answer(run_xsweep, tmp_path):
    days = 12.0  # between the fastest and slowest plans of the space: it binds
    text = TINY.replace("name: tiny-search", "name: tiny-deadline").replace(
        "objectives: [iteration_time_s, cost_per_run_usd]",
        f"objectives: [cost_per_run_usd]\nconstraints: {{training_days_max: {days}}}")
    result = optimize(run_xsweep, tmp_path, text, "--trials", "16", "--batch", "8",
                      "--seed", "1")
    assert result.returncode == 0, result.stderr
    complete = [t for t in load(tmp_path, "tiny-deadline").get_trials()
                if t.state == optuna.trial.TrialState.COMPLETE]
    assert complete
    met = []
    for t in complete:
        training_days = t.user_attrs["metrics"]["training_time_s"] / 86_400
        assert t.constraints == {"days_past_deadline": pytest.approx(training_days - days)}
        met.append(training_days <= days)
    assert any(met) and not all(met), "the deadline should bind on this space"
    best = json.loads(result.stdout)["best"]
    assert best and all(row["training_time_s"] <= days * 86_400 for row in best)
    cheapest = min(t.values[0] for t, ok in zip(complete, met, strict=True) if ok
                   and t.user_attrs["level"] == "exact")
    assert best[0]["cost_per_run_usd"] == pytest.approx(cheapest)


def test_a_rerun_continues_the_study(run_xsweep, tmp_path):
    first = optimize(run_xsweep, tmp_path, NO_FIT, "--trials", "20", "--batch", "8")
    assert first.returncode == 1, first.stderr
    before = load(tmp_path, "a100-cannot-hold-70b").get_trials()
    again = optimize(run_xsweep, tmp_path, NO_FIT, "--trials", "40", "--batch", "8")
    assert again.returncode == 1, again.stderr
    assert "continuing study 'a100-cannot-hold-70b': 20 trials so far" in again.stderr
    assert json.loads(again.stdout)["trials_this_run"] == 20
    after = load(tmp_path, "a100-cannot-hold-70b").get_trials()
    assert [t.number for t in after] == list(range(40))
    for old, new in zip(before, after[:20], strict=True):
        assert (old.state, old.values, old.params, old.user_attrs) == \
            (new.state, new.values, new.params, new.user_attrs)


def test_infeasible_trials_fail_with_their_reason(run_xsweep, tmp_path):
    result = optimize(run_xsweep, tmp_path, NO_FIT, "--trials", "6", "--batch", "3")
    assert result.returncode == 1, result.stderr  # no feasible plan: a check failed
    summary = json.loads(result.stdout)
    assert summary["trials"]["state"] == {"FAIL": 6} and summary["best"] == []
    kinds = summary["infeasible"]["kinds"]
    assert summary["infeasible"]["trials"] == 6 == sum(k["trials"] for k in kinds)
    assert {k["kind"] for k in kinds} <= {"memory", "pipeline"}
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("no feasible plan among 6 trials: ") and "GPU memory" in line
    for t in load(tmp_path, "a100-cannot-hold-70b").get_trials():
        reason = t.user_attrs["reason"]
        assert t.state == optuna.trial.TrialState.FAIL and t.values is None
        assert reason.startswith("does not fit in GPU memory") or "fewer than pp" in reason


def files_under(folder) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_study_of_another_space_is_refused_and_left_alone(run_xsweep, tmp_path):
    assert optimize(run_xsweep, tmp_path, NO_FIT, "--trials", "2", "--study", "s").returncode == 1
    before = files_under(tmp_path)
    result = optimize(run_xsweep, tmp_path, NO_FIT.replace("16", "32"), "--study", "s")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "study 's'" in result.stderr and "belongs to another space" in result.stderr
    after = files_under(tmp_path)
    assert {k: v for k, v in after.items() if not k.endswith("space.yaml")} == \
        {k: v for k, v in before.items() if not k.endswith("space.yaml")}


@pytest.mark.parametrize("password", ["S3cret-pa55word", "p%40ss%3Aw0rd-xyz"])
def test_an_unreachable_storage_is_refused_without_its_password(run_xsweep, tmp_path, password):
    # Port 1 on the loopback interface: nothing listens, so the connection is refused at once.
    url = f"postgresql://xsweep:{password}@127.0.0.1:1/studies"
    result = optimize(run_xsweep, tmp_path, TINY, "--storage", url)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "--storage" in result.stderr and "postgresql://xsweep:***@127.0.0.1:1" in result.stderr
    for form in (password, "p@ss:w0rd-xyz", "pa55word", "w0rd-xyz"):
        assert form not in result.stderr
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["space.yaml"]


def test_a_storage_that_cannot_be_opened_is_refused(run_xsweep, tmp_path):
    result = optimize(run_xsweep, tmp_path, TINY, "--storage",
                      f"sqlite:///{tmp_path / 'missing' / 'study.db'}")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("--storage: cannot open sqlite:///")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["space.yaml"]


def test_a_grid_sweep_refuses_a_space_too_large_for_a_grid(run_xsweep, tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(TINY.replace("global_batch_size: 16",
                                  "global_batch_size: {low: 1, high: 1000000}"))
    result = run_xsweep("sweep", space, "-o", tmp_path / "out")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "the grid has 96,000,000 points" in result.stderr and "xsweep optimize" in result.stderr
    assert not (tmp_path / "out").exists()


def test_ctrl_c_stops_cleanly_and_leaves_no_trial_running(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(NO_FIT)
    process = subprocess.Popen(
        [sys.executable, "-m", "xsweep.cli.main", "optimize", str(space), "-o",
         str(tmp_path / "out"), "--trials", "1000000", "--batch", "4"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while load_or_none(tmp_path) is None or len(load_or_none(tmp_path).get_trials()) < 8:
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130 and stdout == "", (process.returncode, stdout, stderr)
    assert "Traceback" not in stderr and stderr.rstrip().endswith("interrupted"), stderr
    trials = load(tmp_path, "a100-cannot-hold-70b").get_trials()
    odd = [(t.number, t.state, t.user_attrs) for t in trials
           if not (t.state == optuna.trial.TrialState.FAIL and t.user_attrs.get("reason"))]
    assert not odd


def load_or_none(tmp_path) -> optuna.Study | None:
    try:
        return load(tmp_path, "a100-cannot-hold-70b")
    except Exception:  # noqa: BLE001 - not created yet, or its tables not yet made
        return None


def running_trials(tmp_path) -> int:
    try:
        with sqlite3.connect(f"file:{tmp_path / 'out' / 'study.db'}?mode=ro", uri=True,
                             timeout=1) as db:
            return db.execute("select count(*) from trials where state = 'RUNNING'").fetchone()[0]
    except sqlite3.Error:  # not made yet, or being written
        return 0


def test_trials_a_ctrl_c_left_unfinished_do_not_count(run_xsweep, tmp_path):
    """Ctrl-C during a batch fails its unfinished trials, which a rerun replaces: the
    study ends with ``--trials`` trials that have a result."""
    space = tmp_path / "space.yaml"
    space.write_text(NO_FIT)
    process = subprocess.Popen(
        [sys.executable, "-m", "xsweep.cli.main", "optimize", str(space), "-o",
         str(tmp_path / "out"), "--trials", "60", "--batch", "60"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while running_trials(tmp_path) < 5:  # in the middle of the batch's asking
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    states = optuna.trial.TrialState
    before = load(tmp_path, "a100-cannot-hold-70b").get_trials()
    cut = [t.number for t in before if t.user_attrs.get("unfinished")]
    assert cut and all(t.state == states.FAIL for t in before)
    assert {t.user_attrs["reason"] for t in before if t.number in cut} == {
        "interrupted before its result was told"}
    told = len(before) - len(cut)
    again = optimize(run_xsweep, tmp_path, NO_FIT, "--trials", "60", "--batch", "60")
    assert again.returncode == 1, again.stderr
    assert (f"continuing study 'a100-cannot-hold-70b': {len(before)} trials so far "
            f"({len(cut)} unfinished, not counted toward 60)") in again.stderr
    summary = json.loads(again.stdout)
    assert summary["trials_this_run"] == 60 - told
    assert summary["trials"]["counted"] == 60 and summary["trials"]["unfinished"] == len(cut)
    after = load(tmp_path, "a100-cannot-hold-70b").get_trials()
    assert len(after) == 60 + len(cut)
    assert sum(1 for t in after if t.user_attrs.get("reason") and
               not t.user_attrs.get("unfinished")) == 60  # each told why it has no values


def test_a_batch_shows_its_progress_before_it_ends(run_xsweep, tmp_path):
    result = optimize(run_xsweep, tmp_path, NO_FIT, "--trials", "30", "--batch", "30")
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    end = lines.index(next(line for line in lines if line.startswith("30/30 trials, ")))
    within = lines[:end]
    assert within and all(line.startswith("0/30 trials; batch of 30: ") for line in within)
    assert within[0] == "0/30 trials; batch of 30: asked 1/30"
