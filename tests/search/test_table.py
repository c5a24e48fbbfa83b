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
        assert data["status"].dtype == np.int8 and data["level"].dtype == np.int8
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
