"""Outputs stay inside the folder a command states: default folders from checked names,
plain file names inside, a study database URL no path can move, and output folders
named ``.``, ``..`` or ``x/..``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import xarray as xr
from sqlalchemy.engine import make_url

from xsweep.errors import InputError
from xsweep.search.folders import plain_file_name, results_folder
from xsweep.search.optimize.run import sqlite_url
from xsweep.search.sweep.store import SweepFolder
from xsweep.search.validate.run import check_output, output_folder, validate
from xsweep.search.validate.study_result import open_study_result


@pytest.mark.parametrize("name", ["../x", "/tmp/x", ".", "..", "a\0b", "x" * 101, "café", ""])
def test_no_name_leads_out_of_results(name):
    with pytest.raises(InputError) as caught:
        results_folder(name, "space.yaml")
    assert caught.value.file == "space.yaml" and caught.value.field == "name"


def test_a_nul_in_an_output_folder_is_one_line_not_a_traceback():
    with pytest.raises(InputError, match=r"^--output: a path cannot hold a NUL character"):
        SweepFolder(Path("out\0put"))
    with pytest.raises(InputError, match="NUL"):
        output_folder("out\0put")


@pytest.mark.parametrize("name", ["", ".", "..", "../x", "a/b", "/x", "a\0b"])
def test_published_files_have_plain_names(tmp_path, name):
    with pytest.raises(ValueError, match="not a plain file name"):
        plain_file_name(name)
    folder = SweepFolder(tmp_path / "out")
    with pytest.raises(ValueError):
        folder.publish(xr.Dataset(), {}, {name: "plan"})
    with pytest.raises(ValueError):
        folder.publish(xr.Dataset(), {name: b"x"}, {})
    assert sorted(p.name for p in tmp_path.rglob("*")) in ([], ["out"])
    assert not any(tmp_path.rglob("*.pbtxt")) and not (tmp_path / "x").exists()


@pytest.mark.parametrize("folder", ["plain", "with space", "q?uery", "frag#ment", "per%20cent",
                                    "br{SCHEMA_VERSION}aces", "colon:x", "é", "a/b/c"])
def test_the_study_database_url_names_the_file_in_the_folder(tmp_path, folder):
    path = tmp_path / folder / "study.db"
    url = sqlite_url(path)
    assert url.format(SCHEMA_VERSION=12) == url  # Optuna formats the URL as a template
    parsed = make_url(url)
    assert parsed.drivername == "sqlite" and parsed.database == str(path)
    assert not parsed.query
    relative = sqlite_url(Path(folder) / "study.db")
    assert make_url(relative).database == os.path.join(folder, "study.db")


def test_a_validation_folder_is_the_folder_it_names_never_the_working_one(tmp_path,
                                                                         monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert output_folder("out") == Path("out")
    assert output_folder("./out/") == Path("out")
    assert output_folder("a/../out") == Path("out")
    assert output_folder("../beside") == Path("../beside")
    for path in (".", "./", "missing/..", "..", "../..", "/", str(work)):
        with pytest.raises(InputError, match="is the working folder or holds it"):
            check_output(Path(path))  # an empty working folder too: it would be replaced
        with pytest.raises(InputError, match="is the working folder or holds it"):
            validate([], None, 0.05, Path(path), {"source": "test"})
    assert list(work.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["work"]
    summary = validate([], None, 0.05, Path("x/../out"), {"source": "test"})
    assert summary["validated"] == 0 and (work / "out" / "validate.json").is_file()
    assert [p.name for p in work.iterdir()] == ["out"]


@pytest.mark.parametrize("name", ["../x", "/tmp/x", ".", "x" * 101, "café"])
def test_a_study_name_is_checked_before_the_storage_is_opened(tmp_path, name):
    url = f"sqlite:///{tmp_path / 'none.db'}"
    with pytest.raises(InputError, match=r"^--study: "):
        open_study_result(url, name, None)
    assert list(tmp_path.iterdir()) == []


def test_a_percent_encoded_sqlite_path_is_found_as_sqlalchemy_reads_it(tmp_path):
    import optuna

    folder = tmp_path / "a b?c"
    folder.mkdir()
    url = sqlite_url(folder / "study.db")
    optuna.create_study(study_name="s", storage=url)
    assert (folder / "study.db").is_file()
    with pytest.raises(InputError, match="lacks the user attribute"):  # found and read
        open_study_result(url, "s", None)
