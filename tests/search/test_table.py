"""The one table of a search's results: status and level as integer codes that become names
only where results are written, columns in their canonical dtypes, files of earlier
versions (names instead of codes) read back as codes."""

from __future__ import annotations

import numpy as np
import pytest
from xsweep.kernels import Status as KernelStatus

from xsweep.search import table as tables
from xsweep.search.levels import LEVELS, Level, Status, codes, names
from xsweep.search.table import Table, from_rows


def test_codes_round_trip_to_names():
    for kind in (Level, Status):
        every = np.array([member.value for member in kind], np.int8)
        labels = names(every, kind)
        assert labels.tolist() == [member.name.lower() for member in kind]
        np.testing.assert_array_equal(codes(labels, kind), every)
    assert LEVELS == ("none", "closed_form", "bound", "exact")  # the order a point goes
    assert list(Level) == sorted(Level)
    grid = np.array([[3, 0], [1, 2]], np.int8)
    assert names(grid, Level).tolist() == [["exact", "none"], ["closed_form", "bound"]]
    with pytest.raises(ValueError, match="'finished'"):
        codes(["ok", "finished"], Status)


def test_status_codes_are_the_kernels_then_pruned():
    for name in KernelStatus.NAMES:
        assert Status[name.upper()] == getattr(KernelStatus, name.upper())
    assert len(KernelStatus.NAMES) == Status.PRUNED


def test_names_are_as_wide_as_the_longest_present():
    """A Dataset's text is as wide as the names it holds, as before codes existed."""
    assert names(np.array([0, 0], np.int8), Status).astype(str).dtype == np.dtype("<U2")
    assert names(np.array([0, 1], np.int8), Status).astype(str).dtype == np.dtype("<U13")


def test_columns_take_their_canonical_dtypes():
    table = from_rows({"point": [4, 5, 6], "status": ["ok", "pruned", "infeasible"],
                       "level": np.array([Level.EXACT, Level.BOUND, Level.NONE]),
                       "steps": np.array([3, 0, 0], np.int32), "feasible": [True, True, False],
                       "reason": ["", "", "does not fit"]})
    assert isinstance(table, Table) and table.rows == 3
    dtypes = {name: values.dtype for name, values in table.items()}
    assert dtypes == {"point": np.int64, "status": np.int8, "level": np.int8,
                      "steps": np.float64, "feasible": bool, "reason": object}
    assert table["status"].tolist() == [Status.OK, Status.PRUNED, Status.INFEASIBLE]
    picked = table.take(table["level"] >= Level.BOUND)
    assert isinstance(picked, Table) and picked["point"].tolist() == [4, 5]


def test_codes_are_saved_as_codes_and_names_of_older_files_read_back_as_codes(tmp_path):
    table = from_rows({"point": [0, 1], "status": [Status.OK, Status.NOT_CONVERGED],
                       "level": [Level.EXACT, Level.CLOSED_FORM]})
    tables.save(table, tmp_path / "now.npz")
    with np.load(tmp_path / "now.npz", allow_pickle=False) as data:
        assert data["int8.names"].tolist() == ["status", "level"]
        assert data["int8.stack"].dtype == np.int8
    older = {"point": table["point"], "status": np.array(["ok", "not_converged"], object),
             "level": np.array(["exact", "closed_form"], object)}
    tables.save(older, tmp_path / "older.npz")
    for name in ("now.npz", "older.npz"):
        loaded = tables.load(tmp_path / name)
        for column in table:
            assert loaded[column].dtype == table[column].dtype, (name, column)
            np.testing.assert_array_equal(loaded[column], table[column])


def test_text_of_any_numpy_dtype_takes_the_canonical_dtypes():
    """A dataset read back may hold text as fixed-width or variable-width strings."""
    for dtype in (str, object, np.dtypes.StringDType()):
        table = from_rows({"status": np.array(["ok", "pruned"], dtype=dtype),
                           "level": np.array(["exact", "none"], dtype=dtype),
                           "reason": np.array(["", "does not fit"], dtype=dtype)})
        assert table["status"].tolist() == [Status.OK, Status.PRUNED], dtype
        assert table["level"].tolist() == [Level.EXACT, Level.NONE], dtype
        assert table["reason"].dtype == object and table["reason"].tolist() == ["", "does not fit"]


def _older_file(table: Table, path) -> None:
    """``table`` as the previous versions wrote it: an array per column, each text column
    as its sorted distinct values and a code per row."""
    arrays = {}
    for name, values in table.items():
        if values.dtype == object:
            text, inverse = np.unique(values.astype(str), return_inverse=True)
            arrays[name + ".text_values"], arrays[name + ".text_codes"] = text, inverse
        else:
            arrays[name] = values
    np.savez_compressed(path, **arrays)


@pytest.mark.parametrize("rows", [0, 1, 7])
def test_a_saved_table_reads_back_whole_in_order_and_files_of_the_earlier_layout_too(
        tmp_path, rows):
    """Columns stacked by dtype come back with their names, dtypes, values (NaN included)
    and order; text repeats; a 2-D column travels alone; a file of the layout before
    stacking reads back the same."""
    rng = np.random.default_rng(rows)
    table = from_rows({"point": np.arange(rows) + 40, "reason": rng.choice(
        ["", "does not fit", "TP 8 exceeds"], rows), "iteration_time_s": np.where(
            rng.random(rows) < 0.5, np.nan, rng.random(rows)), "status": np.full(rows, 2),
        "feasible": rng.random(rows) < 0.5, "mfu": rng.random(rows),
        "level": np.ones(rows, np.int8),
        "plan_digest": np.array([f"d{i % 3}" for i in range(rows)], object)})
    table["per_stream"] = rng.random((rows, 3))
    tables.save(table, tmp_path / "now.npz")
    _older_file(table, tmp_path / "older.npz")
    for name in ("now.npz", "older.npz"):
        loaded = tables.load(tmp_path / name)
        if name == "now.npz":
            assert list(loaded) == list(table)
        assert set(loaded) == set(table)
        for column, values in table.items():
            assert loaded[column].dtype == values.dtype, (name, column)
            np.testing.assert_array_equal(loaded[column], values, err_msg=column)
    assert not list(tmp_path.glob("*.partial"))
