"""``xsweep validate`` through the real CLI on the quickstart sweep and on a real SQLite
Optuna study written to the contract of ``xsweep optimize``: the winners agree with the
exact simulator within the default tolerance, a tiny tolerance and a corrupted stored
metric are caught (exit 1, one line per failing point), and the simulator's records and
traces land in the output folder.

Slow: one quickstart sweep (shared by every test of this module) and the kernels for the
study's trials. Every process shares one persistent compilation cache.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import optuna
import pytest
import xarray as xr

import xsweep
from tests.support.paths import REPO_ROOT, SPACES
from xsweep.search.evaluation import catalog_version
from xsweep.search.space.grid import Grid
from xsweep.search.space.planner import Planner, plan_name
from xsweep.search.validate.compare import COMPARED
from xsweep.spec import load_catalog, load_sweep, plan_to_text

pytestmark = pytest.mark.slow

QUICKSTART = SPACES / "quickstart.yaml"
FAILURE = re.compile(r"^(point|trial) (\d+): (\w+) batched (\S+), simulated (\S+): relative "
                     r"error (\S+) exceeds the tolerance ([^\s;]+)")


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    cache = tmp_path_factory.mktemp("jax-cache")
    return {**os.environ, "XSWEEP_CACHE_DIR": str(cache)}


def xsweep_cli(env: dict, *args: object, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xsweep.cli.main", *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=900, check=False)


@pytest.fixture(scope="module")
def swept(env, tmp_path_factory) -> tuple[Path, dict]:
    """The quickstart sweep's folder and its summary (run once for the module)."""
    out = tmp_path_factory.mktemp("quickstart")
    result = xsweep_cli(env, "sweep", QUICKSTART, "-o", out, "--json")
    assert result.returncode == 0, result.stderr
    return out, json.loads(result.stdout)


def test_the_quickstart_top_5_passes_with_the_default_tolerance(env, swept):
    folder, summary = swept
    result = xsweep_cli(env, "validate", folder, "--top", "5", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)  # one document and nothing else
    assert doc["passed"] and doc["failures"] == [] and doc["tolerance"] == 0.05  # the sweep's
    assert doc["top"] == 5
    names = [p["name"] for p in doc["points"]]
    assert len(names) == len(set(names)) == doc["validated"]
    exact = {p["name"] for p in doc["points"] if p["level"] == "exact"}
    (group,) = summary["groups"]
    assert {f"point-{row['point']}" for row in group["front"]} <= exact
    for rows in group["top"].values():
        assert {f"point-{row['point']}" for row in rows} <= exact
    assert any(p["level"] == "bound" for p in doc["points"])  # pruned points are checked too
    out = folder / "validate"
    assert json.loads((out / "validate.json").read_text()) == doc
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["validate.json", *(f"{n}.json" for n in names), *(f"{n}.trace.json" for n in names)])
    for p in doc["points"]:
        record = json.loads(Path(p["result"]).read_text())
        assert record["iteration_time_s"] == p["metrics"]["iteration_time_s"]["simulated"]
        assert record["per_rank"]  # the record of `xsweep simulate --json`
        assert json.loads(Path(p["trace"]).read_text())["traceEvents"]
        for name, m in p["metrics"].items():
            if p["level"] == "exact":
                assert m["error"] is not None and m["error"] <= 0.05, (p["name"], name)
        bound = p["metrics"]["iteration_time_s"]
        assert bound["batched"] <= bound["simulated"] * (1 + 1e-4) or p["level"] == "exact"
    assert "validating" in result.stderr and "Traceback" not in result.stderr


def test_a_tiny_tolerance_fails_with_one_line_per_point(env, swept, tmp_path):
    folder, _ = swept
    result = xsweep_cli(env, "validate", folder, "--tolerance", "1e-9", "-o", tmp_path / "v")
    assert result.returncode == 1, result.stderr
    doc = json.loads((tmp_path / "v" / "validate.json").read_text())
    lines = [line for line in result.stderr.splitlines() if FAILURE.match(line)]
    assert lines == doc["failures"] and len(lines) == doc["failed"] > 0
    failed = {p["name"] for p in doc["points"] if not p["passed"]}
    assert {"point-" + FAILURE.match(line).group(2) for line in lines} == failed
    for line in lines:
        assert FAILURE.match(line).group(7) == "1e-09"
    assert f"{doc['failed']} FAILED" in result.stdout


@pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")  # as the sweep writes it
def test_a_corrupted_stored_metric_is_caught(env, swept, tmp_path):
    folder, summary = swept
    copy = tmp_path / "sweep"
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("validate"))
    victim = summary["groups"][0]["top"]["cost_per_run_usd"][0]["point"]  # stays the cheapest
    store = copy / "sweep.zarr"
    ds = xr.open_zarr(store).load()
    at = {dim: int(i) for dim, i in
          zip(ds["point"].dims, np.argwhere(ds["point"].values == victim)[0], strict=True)}
    true_time = float(ds["iteration_time_s"][at])
    ds["iteration_time_s"][at] = true_time * 1.5
    for variable in ds.variables.values():
        variable.encoding = {}
    shutil.rmtree(store)
    ds.to_zarr(store, consolidated=True, zarr_format=2)  # as the sweep writes it
    result = xsweep_cli(env, "validate", copy, "--json")
    assert result.returncode == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["failures"] == [line for line in result.stderr.splitlines()
                               if line.startswith("point ")]
    (line,) = doc["failures"]
    found = FAILURE.match(line)
    assert found.group(2, 3) == (str(victim), "iteration_time_s")
    assert float(found.group(4)) == pytest.approx(true_time * 1.5, rel=1e-5)
    assert float(found.group(6)) == pytest.approx(0.5, rel=1e-3)
    assert found.group(7) == "0.05"


def make_study(url: str, name: str, folder: Path, corrupt: bool = False) -> dict[str, int]:
    """A study following the contract of ``xsweep optimize``: the sweep's front and top
    points as exact trials, a few pruned points as bound trials (each evaluated here with
    ``xsweep.evaluate``), and one failed trial. Returns trial numbers by role."""
    catalog = load_catalog()
    sweep = load_sweep(QUICKSTART, catalog)
    grid, planner = Grid(sweep), Planner(sweep, catalog)
    ds = xr.open_zarr(folder / "sweep.zarr")
    flat = {n: ds[n].values.ravel() for n in ("point", "status", "level", "iteration_time_s")}
    exact = sorted(flat["point"][flat["level"] == "exact"].tolist())
    pruned = flat["point"][flat["status"] == "pruned"]
    bound = sorted(pruned[np.argsort(flat["iteration_time_s"][flat["status"] == "pruned"])][:3])
    text = QUICKSTART.read_text()
    study = optuna.create_study(study_name=name, storage=url,
                                directions=["minimize"] * len(sweep.objectives))
    for key, value in {"xsweep_space_sha256": hashlib.sha256(text.encode()).hexdigest(),
                       "xsweep_space_name": sweep.name,
                       "xsweep_objectives": list(sweep.objectives),
                       "xsweep_catalog_version": catalog_version(catalog),
                       "xsweep_version": xsweep.__version__, "xsweep_space_text": text}.items():
        study.set_user_attr(key, value)
    roles: dict[str, list[int]] = {"exact": [], "bound": []}
    for level, points in (("exact", exact), ("bound", bound)):
        built = [planner.plan(grid.point(i), plan_name(sweep, i)) for i in points]
        results = xsweep.evaluate([b.plan for b in built], level, catalog=catalog,
                                  cost=built[0].cost)
        for v, (index, b) in enumerate(zip(points, built, strict=True)):
            values = {n: float(results[n].values[v]) for n in (*COMPARED, *sweep.objectives)}
            metrics = {n: (x if math.isfinite(x) else None) for n, x in values.items()}
            if corrupt and level == "exact" and not roles["exact"]:
                metrics["iteration_time_s"] *= 1.5
            study.add_trial(optuna.trial.create_trial(
                state=optuna.trial.TrialState.COMPLETE,
                values=[values[o] for o in sweep.objectives],
                user_attrs={"plan_pbtxt": plan_to_text(b.plan), "level": level,
                            "metrics": metrics, "point": grid.point(index)}))
            roles[level].append(len(study.trials) - 1)
    study.add_trial(optuna.trial.create_trial(
        state=optuna.trial.TrialState.FAIL, user_attrs={"reason": "does not fit in memory"}))
    return {"failed": len(study.trials) - 1, **{k: v for k, v in roles.items()}}


def test_a_study_validates_its_trials(env, swept, tmp_path):
    folder, _ = swept
    url = f"sqlite:///{tmp_path / 'study.db'}"
    roles = make_study(url, "qs", folder)
    result = xsweep_cli(env, "validate", url, "--study", "qs", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["source"] == "study" and doc["study"] == "qs" and doc["passed"]
    by_level = {level: {p["name"] for p in doc["points"] if p["level"] == level}
                for level in ("exact", "bound")}
    assert by_level["bound"] and by_level["exact"]
    assert by_level["exact"] <= {f"trial-{n}" for n in roles["exact"]}
    assert by_level["bound"] <= {f"trial-{n}" for n in roles["bound"]}
    assert f"trial-{roles['failed']}" not in by_level["exact"] | by_level["bound"]
    out = tmp_path / "validate"  # the default for a study in an SQLite file: beside it
    assert (out / "validate.json").is_file()
    assert all((out / f"{p['name']}.trace.json").is_file() for p in doc["points"])


def test_a_study_with_a_corrupted_metric_fails_naming_the_trial(env, swept, tmp_path):
    folder, _ = swept
    url = f"sqlite:///{tmp_path / 'study.db'}"
    roles = make_study(url, "bad", folder, corrupt=True)
    result = xsweep_cli(env, "validate", url, "--study", "bad", "-o", tmp_path / "v")
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if FAILURE.match(line)]
    assert [FAILURE.match(line).group(1, 2, 3) for line in lines] == [
        ("trial", str(roles["exact"][0]), "iteration_time_s")]
    assert float(FAILURE.match(lines[0]).group(6)) == pytest.approx(0.5, rel=1e-3)
