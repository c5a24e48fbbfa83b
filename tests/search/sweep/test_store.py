"""Result tables on disk and the output folder's resume and refusal rules."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from xsweep.errors import InputError
from xsweep.search import table as tables
from xsweep.search.levels import Level
from xsweep.search.sweep.store import SweepFolder
from xsweep.search.sweep.zarr_v2 import Arrays, Variable


def sample(points) -> tables.Table:
    points = np.asarray(points)
    return tables.from_rows({
        "point": points,
        "iteration_time_s": points * 0.5,
        "steps": points.astype(np.int32),
        "feasible": points % 2 == 0,
        "reason": np.array(["" if p % 2 == 0 else "does not fit" for p in points]),
    })


def test_table_round_trip_without_pickle(tmp_path):
    original = sample(range(10))
    assert original["steps"].dtype == np.float64 and original["reason"].dtype == object
    tables.save(original, tmp_path / "t.npz")
    assert [p.name for p in tmp_path.iterdir()] == ["t.npz"]  # no temporary left
    loaded = tables.load(tmp_path / "t.npz")
    assert loaded.keys() == original.keys()
    for name in original:
        np.testing.assert_array_equal(loaded[name], original[name])
    with np.load(tmp_path / "t.npz", allow_pickle=False) as data:  # text stored as codes
        assert data["reason.text_values"].tolist() == ["", "does not fit"]


def test_concat_and_update_fill_missing_columns():
    a = sample([0, 1])
    b = {"point": np.array([2]), "feasible": np.array([True])}
    both = tables.concat([a, b])
    assert both["point"].tolist() == [0, 1, 2]
    assert np.isnan(both["iteration_time_s"][2]) and both["reason"][2] == ""
    tables.update(both, {"point": np.array([1]), "iteration_time_s": np.array([9.0]),
                         "level": np.array([Level.EXACT], np.int8)})
    assert both["iteration_time_s"].tolist()[:2] == [0.0, 9.0]
    assert both["level"].tolist() == [-1, Level.EXACT, -1]  # -1: no code where missing


MANIFEST = {"format": 1, "sweep_sha256": "a", "catalog_version": "c", "xsweep_version": "v",
            "chunk_size": 4}
#: Chunks of a bound walk over points 0..5 in order, and their points.
CHUNKS = {(0, 2): np.array([0, 1]), (2, 4): np.array([2, 3]), (4, 6): np.array([4, 5])}


def test_chunks_saved_together_load_back_each_where_it_holds_its_points(tmp_path):
    folder = SweepFolder(tmp_path)
    folder.claim(MANIFEST, overwrite=False)
    folder.save_bound([(4, 6, sample([4, 5])), (0, 2, sample([0, 1]))])  # as they finished
    folder.save_bound([])  # nothing finished: no file
    assert [p.name for p in (folder.work / "bound").iterdir()] == ["000000000000.npz"]
    found = folder.load_bound(CHUNKS)
    assert sorted(found) == [(0, 2), (4, 6)]
    assert found[(4, 6)]["point"].tolist() == [4, 5]
    assert found[(0, 2)]["iteration_time_s"].tolist() == sample([0, 1])["iteration_time_s"].tolist()
    assert folder.load_bound({(0, 2): np.array([0, 1]), (4, 6): np.array([4, 7])}).keys() == {
        (0, 2)}  # a chunk of other points is computed again
    (folder.work / "bound" / "000000000002.npz").write_bytes(b"PK\x03\x04 damaged")
    (folder.work / "bound" / "000000000003.npz").write_bytes(b"")
    assert sorted(folder.load_bound(CHUNKS)) == [(0, 2), (4, 6)]  # unreadable files: skipped


def test_claim_resumes_the_same_run_and_refuses_another(tmp_path):
    folder = SweepFolder(tmp_path / "out")
    assert folder.claim(MANIFEST, overwrite=False) is False
    folder.save_bound([(0, 2, sample([0, 1]))])
    (folder.work / "bound" / "000000000002.npz.77.partial").write_bytes(b"half")
    assert folder.claim(dict(MANIFEST), overwrite=False) is True
    assert sorted(p.name for p in (folder.work / "bound").iterdir()) == [
        "000000000000.npz"]  # a killed writer's temporary is gone
    assert folder.load_bound(CHUNKS)[(0, 2)]["point"].tolist() == [0, 1]
    assert (2, 4) not in folder.load_bound(CHUNKS)
    assert folder.load_exact(1, 0, np.array([0])) is None
    changed = MANIFEST | {"sweep_sha256": "b"}
    with pytest.raises(InputError, match=r"sweep file changed.*--overwrite"):
        folder.claim(changed, overwrite=False)
    assert folder.load_bound(CHUNKS)  # refused: nothing touched
    (folder.root / "validate").mkdir()
    (folder.root / "validate" / "validation.json").write_text("{}")  # of the old results
    (folder.root / "report.html").write_text("<!DOCTYPE html>")  # the old results' page
    assert folder.claim(changed, overwrite=True) is False
    assert folder.load_bound(CHUNKS) == {}  # overwritten: started afresh
    assert not (folder.root / "validate").exists()  # its validation went with it
    assert not (folder.root / "report.html").exists()  # and its report


def test_a_study_folder_is_refused_even_with_overwrite(tmp_path):
    """``--overwrite`` removes what a sweep owns; a folder that holds a study is not one."""
    (tmp_path / "plans").mkdir()
    (tmp_path / "plans" / "trial-3.pbtxt").write_text("name: 'x'")
    (tmp_path / "study.db").write_bytes(b"sqlite")
    for overwrite in (False, True):
        with pytest.raises(InputError, match=r"holds an Optuna study \(study.db, written by "
                           r"xsweep optimize\); a sweep needs a folder of its own"):
            SweepFolder(tmp_path).claim(MANIFEST, overwrite=overwrite)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["plans", "study.db", "trial-3.pbtxt"]


def test_a_chunk_file_of_other_points_is_not_reused(tmp_path):
    folder = SweepFolder(tmp_path)
    folder.claim(MANIFEST, overwrite=False)
    folder.save_exact(1, 0, sample([3, 5]))
    assert folder.load_exact(1, 0, np.array([3, 5])) is not None
    assert folder.load_exact(1, 0, np.array([3, 6])) is None


def test_a_folder_with_foreign_results_is_refused(tmp_path):
    (tmp_path / "sweep.zarr").mkdir()
    with pytest.raises(InputError, match="did not write"):
        SweepFolder(tmp_path).claim(MANIFEST, overwrite=False)


def test_a_run_killed_before_it_wrote_anything_leaves_a_folder_the_next_takes(tmp_path):
    # killed between making its empty work folders and writing its manifest
    for name in ("bound", "exact", "lowered"):
        (tmp_path / "work" / name).mkdir(parents=True)
    (tmp_path / "work" / "manifest.json.partial-123").write_text("{")
    assert SweepFolder(tmp_path).claim(MANIFEST, overwrite=False) is False
    assert SweepFolder(tmp_path).claim(MANIFEST, overwrite=False) is True  # now it is ours
    (tmp_path / "work" / "manifest.json").unlink()  # a finished chunk without its manifest
    (tmp_path / "work" / "bound" / "chunk-0.npz").write_bytes(b"x")
    with pytest.raises(InputError, match="holds results this run did not write"):
        SweepFolder(tmp_path).claim(MANIFEST, overwrite=False)


def test_publish_replaces_outputs_whole(tmp_path):
    folder = SweepFolder(tmp_path)
    folder.claim(MANIFEST, overwrite=False)
    for value in (1.0, 2.0):
        ds = Arrays({"x": Variable(("a",), np.full(3, value), {})},
                    {"a": Variable(("a",), np.array([1, 2, 3]), {})}, {})
        folder.publish(ds, {"summary.json": b"{}"}, {"point-1.pbtxt": f"name: '{value}'"})
        assert xr.open_zarr(tmp_path / "sweep.zarr")["x"].values.tolist() == [value] * 3
    assert (tmp_path / "plans" / "point-1.pbtxt").read_text() == "name: '2.0'"
    assert not list(tmp_path.glob("*partial*"))


@pytest.mark.parametrize("section", ["gpus", "nics", "links", "models"])
def test_the_catalog_version_covers_every_section(tmp_path, section):
    from xsweep.search.evaluation import catalog_version
    from xsweep.spec import load_catalog

    base = load_catalog()
    name, entry = next(iter(getattr(base, section).items()))
    field, value = next((f, v) for f, v in vars(entry).items()
                        if isinstance(v, int | float) and not isinstance(v, bool))
    changed = value * 0.5 if isinstance(value, float) else value + 1  # e.g. one more layer
    override = tmp_path / "catalog.yaml"
    override.write_text(f"{section}:\n  {name}:\n    {field}: {changed!r}\n")
    assert catalog_version(load_catalog([str(override)])) != catalog_version(base)
    assert catalog_version(load_catalog()) == catalog_version(base)
