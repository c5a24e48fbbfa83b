"""``xsweep validate`` refuses bad input with one line and exit 2, and writes nothing: a
RESULT that is neither a sweep's folder nor a storage URL, a missing or foreign study, a
storage it cannot read, a sweep made with another catalog, an output folder not its own."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import numpy as np
import optuna
import pytest
import xarray as xr

from tests.support.budget import REPO_ROOT, run_cli
from xsweep.search.evaluation import catalog_version
from xsweep.search.validate.compare import COMPARED
from xsweep.spec.catalog import load_catalog

QUICKSTART = REPO_ROOT / "spaces" / "quickstart.yaml"
QUICKSTART_POINTS = 384


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with a digest of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(tmp_path: Path, *args: object) -> str:
    """Run ``xsweep validate ARGS``; check exit 2, one line, nothing written; the line."""
    before = snapshot(tmp_path)
    results_before = snapshot(REPO_ROOT / "results")
    result = run_cli("validate", *args)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert snapshot(tmp_path) == before
    assert snapshot(REPO_ROOT / "results") == results_before
    return result.stderr.strip()


def sweep_folder(tmp_path: Path, version: str) -> Path:
    """A sweep folder whose dataset has what a quickstart sweep writes, no point feasible."""
    folder = tmp_path / "sweep"
    n = QUICKSTART_POINTS
    ds = xr.Dataset(
        {"point": ("point_index", np.arange(n)),
         "level": ("point_index", np.full(n, "none", object)),
         "status": ("point_index", np.full(n, "infeasible", object)),
         "feasible": ("point_index", np.zeros(n, bool)),
         **{name: ("point_index", np.full(n, np.nan)) for name in COMPARED}},
        attrs={"sweep_yaml": QUICKSTART.read_text(), "catalog_version": version})
    ds.to_zarr(folder / "sweep.zarr", consolidated=False)
    return folder


@pytest.fixture
def storage(tmp_path) -> str:
    """An SQLite Optuna storage holding study ``bare``, made by plain Optuna (no xsweep
    attributes)."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.create_study(study_name="bare", storage=url)
    return url


def test_a_folder_that_is_not_a_sweep(tmp_path):
    (tmp_path / "notes.txt").write_text("not a sweep")
    line = refused(tmp_path, tmp_path)
    assert line == (f"{tmp_path}: is neither a sweep's output folder (no sweep.zarr inside) nor "
                    "a storage URL (such as sqlite:///study.db)")
    assert refused(tmp_path, tmp_path / "missing").startswith(f"{tmp_path / 'missing'}: is neither")


def test_an_sqlite_file_that_does_not_exist_is_not_created(tmp_path):
    url = f"sqlite:///{tmp_path / 'none.db'}"
    assert refused(tmp_path, url, "--study", "s") == f"{url}: no such SQLite database file"


def test_a_missing_study_names_the_studies_there(tmp_path, storage):
    assert refused(tmp_path, storage, "--study", "other") == (
        f"{storage}: study: no such study in this storage (it holds: bare) (got 'other')")
    assert refused(tmp_path, storage) == (
        f"{storage}: a storage URL needs the study's name (--study NAME)")


def test_a_study_without_the_contract_attributes(tmp_path, storage):
    line = refused(tmp_path, storage, "--study", "bare")
    assert line.startswith(f"{storage} study 'bare': lacks the user attribute(s) "
                           "xsweep_space_sha256, xsweep_space_name")
    assert line.endswith("not a study written by xsweep optimize")


def test_a_database_that_is_not_optunas(tmp_path):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as db:
        db.execute("create table t (x)")
    db.close()
    line = refused(tmp_path, f"sqlite:///{path}", "--study", "s")
    assert line.startswith(f"sqlite:///{path}: cannot read the storage: ")


def test_an_unreachable_server_never_shows_the_password(tmp_path):
    url = "postgresql://someone:hunter2secret@127.0.0.1:9/nothing"
    line = refused(tmp_path, url, "--study", "s")
    assert "hunter2secret" not in line
    assert line.startswith("postgresql://someone:***@127.0.0.1:9/nothing: cannot read the "
                           "storage: ")


def test_a_sweep_made_with_another_catalog(tmp_path):
    folder = sweep_folder(tmp_path, "sha256:0123456789abcdef")
    line = refused(tmp_path, folder)
    assert line.startswith(f"{folder / 'sweep.zarr'}: catalog_version: the sweep ran with "
                           "another catalog than this one")
    assert line.endswith("(got 'sha256:0123456789abcdef')")


def test_an_output_folder_with_other_files_is_refused_before_work(tmp_path):
    folder = sweep_folder(tmp_path, catalog_version(load_catalog()))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("mine")
    assert refused(tmp_path, folder, "-o", mine) == (
        f"{mine}: holds files that are not a validation's (no validate.json); choose an "
        "empty or new folder with -o")


def test_a_sweep_without_feasible_points_validates_none(tmp_path):
    folder = sweep_folder(tmp_path, catalog_version(load_catalog()))
    result = run_cli("validate", folder, "--json")
    assert result.returncode == 0, result.stderr
    assert '"validated": 0' in result.stdout
    assert sorted(p.name for p in (folder / "validate").iterdir()) == ["validate.json"]
