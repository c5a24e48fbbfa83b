"""Two ``xsweep optimize`` workers on one study in a real PostgreSQL server: no trial lost or
duplicated, every one finished with values or a reason, the reported front the one the
trials give, and the URL's password nowhere."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import optuna
import pytest

from tests.support.paths import REPO_ROOT
from tests.support.postgres_server import postgres_server, why_not
from tests.support.sweeps import TINY
from xsweep.search.pareto import non_dominated, objective_matrix

pytestmark = [pytest.mark.slow, pytest.mark.skipif(why_not() is not None, reason=str(why_not()))]

PASSWORD = "Pg-s3cret-4-test"
TRIALS = 48


@pytest.fixture
def postgres_url():
    with postgres_server(PASSWORD) as url:
        yield url


def worker(space, url: str, out, seed: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "xsweep.cli.main", "optimize", str(space), "--storage", url,
         "--study", "shared", "--trials", str(TRIALS), "--batch", "8", "--seed", str(seed),
         "-o", str(out), "--json"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen) -> tuple[dict, str, str]:
    stdout, stderr = process.communicate(timeout=900)
    assert process.returncode == 0, stderr
    return json.loads(stdout), stdout, stderr


def test_two_workers_share_one_study(postgres_url, tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(TINY)
    first, second = (worker(space, postgres_url, tmp_path / f"out{i}", seed=i) for i in (1, 2))
    outputs = [finish(first), finish(second)]
    # A third run finds the study complete: it asks nothing and reports the front.
    final = finish(worker(space, postgres_url, tmp_path / "out3", seed=3))
    outputs.append(final)
    assert final[0]["trials_this_run"] == 0

    study = optuna.load_study(study_name="shared", storage=postgres_url)
    trials = study.get_trials()
    numbers = [t.number for t in trials]
    assert sorted(numbers) == list(range(len(trials)))  # unique, none missing
    assert len(trials) == sum(out[0]["trials_this_run"] for out in outputs) >= TRIALS
    states = optuna.trial.TrialState
    for t in trials:
        assert t.state in (states.COMPLETE, states.PRUNED, states.FAIL)
        if t.state == states.COMPLETE:
            assert t.user_attrs["level"] in ("exact", "bound") and len(t.values) == 2
        else:
            assert t.user_attrs["reason"]
    exact = [t for t in trials if t.state == states.COMPLETE and t.user_attrs["level"] == "exact"]
    values = objective_matrix({"iteration_time_s": np.array([t.values[0] for t in exact]),
                               "cost_per_run_usd": np.array([t.values[1] for t in exact])},
                              ["iteration_time_s", "cost_per_run_usd"])
    front = sorted(exact[i].number for i in np.flatnonzero(non_dominated(values)))
    # each plan once: a front trial is an answer's row or one of the same plan
    shown = {row["point"] for row in final[0]["best"]}
    same = {n for row in final[0]["best"] for n in row["same_plan"]}
    assert front and shown <= set(front) <= shown | same

    for summary, stdout, stderr in outputs:
        assert PASSWORD not in stdout and PASSWORD not in stderr
        assert summary["storage"].startswith("postgresql+psycopg2://xsweep:***@/studies")
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert PASSWORD.encode() not in path.read_bytes(), path
    stored = json.dumps([study.user_attrs, [t.user_attrs for t in trials]])
    assert PASSWORD not in stored
