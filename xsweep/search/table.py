"""The one table of a search's results: numpy columns of equal length, by name.

Every step of a search passes results on as a :class:`Table`: the evaluation of points
(:func:`xsweep.search.evaluation.evaluate_points`, one row per point; a session's kept
results, one row per plan), the funnel's and the fronts' inputs, a sweep's work files
and answer, a study's batches and validation's input. The Dataset of a sweep is made from
it only when the sweep publishes (:mod:`xsweep.search.sweep.results`).

Numbers are float64 (NaN where a point has no value), flags bool, ``status`` and
``level`` integer codes (:mod:`xsweep.search.levels`, ``int8``: named only where results
are written), other text Python ``str`` in object arrays; column ``point`` holds the
points' grid indices (int64). A table is saved as one ``.npz`` file without pickle: each
text column as its distinct values and an integer code per row, so long repeated reasons
cost little, the other columns stacked by dtype. Files are written under a temporary name
and renamed, so a file that exists is whole.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from xsweep.search.levels import CODE_DTYPE, Level, Status, codes

#: The columns of integer codes and what they code.
CODED: dict[str, type[Level] | type[Status]] = {"status": Status, "level": Level}

_TEXT_VALUES, _TEXT_CODES = ".text_values", ".text_codes"
_STACK, _NAMES, _ORDER = ".stack", ".names", ".order"


class Table(dict):
    """Columns of equal length by name (a ``dict`` of numpy arrays in canonical dtypes:
    see the module docstring); make one with :func:`from_rows`."""

    @property
    def rows(self) -> int:
        """How many rows the table holds."""
        return len(next(iter(self.values()))) if self else 0

    def take(self, index: np.ndarray) -> Table:
        """The rows at ``index`` (integers or a boolean mask), every column."""
        return Table({name: values[index] for name, values in self.items()})


def _canonical(name: str, values) -> np.ndarray:
    values = np.asarray(values)
    if name == "point":
        return values.astype(np.int64)
    if name in CODED:
        return (values.astype(CODE_DTYPE) if values.dtype.kind in "biu"
                else codes(values, CODED[name]))  # names, in any text dtype
    if values.dtype.kind == "b":
        return values.astype(bool)
    if values.dtype.kind in "iuf":
        return values.astype(np.float64)
    if values.dtype.kind in "UT":  # fixed or variable width (as Zarr 3 reads text)
        return values.astype(object)
    return values.astype(str).astype(object)


def from_rows(columns: Mapping[str, np.ndarray]) -> Table:
    """A table with each column in its canonical dtype (float64, bool, int8 codes of
    ``status`` and ``level``, which may come as codes or names, object text, int64
    ``point``)."""
    return Table({name: _canonical(name, values) for name, values in columns.items()})


def blank(like: np.ndarray, n: int) -> np.ndarray:
    """A column of ``n`` missing values of ``like``'s kind (NaN, False, "" or -1)."""
    if like.dtype.kind == "b":
        return np.zeros(n, bool)
    if like.dtype.kind == "f":
        return np.full(n, np.nan)
    if like.dtype.kind in "iu":
        return np.full(n, -1, like.dtype)
    return np.full(n, "", object)


def concat(tables: Sequence[Mapping[str, np.ndarray]]) -> Table:
    """Rows of all tables in order; a column some tables lack is blank there."""
    names: dict[str, np.ndarray] = {}
    for table in tables:
        for name, values in table.items():
            names.setdefault(name, values)
    return Table({name: np.concatenate([t[name] if name in t else blank(like, len(t["point"]))
                                        for t in tables])
                  for name, like in names.items()})


def update(base: Table, rows: Mapping[str, np.ndarray]) -> None:
    """Overwrite ``base``'s rows at the points of ``rows`` (``base`` covers points 0..n-1 in
    order), adding the columns ``base`` lacks."""
    where = rows["point"]
    n = len(base["point"])
    for name, values in rows.items():
        if name not in base:
            base[name] = blank(values, n)
        base[name][where] = values


def save(table: Mapping[str, np.ndarray], path: Path) -> None:
    """Write ``table`` to ``path`` (.npz) atomically.

    The columns of one dtype travel as one 2-D array (``<dtype>.stack``, their names in
    ``<dtype>.names``), and every column's name in order in ``.order``: a file of a few
    arrays, not of one per column, since each array of a zip costs its own header and
    compressor (a sweep writes a table per chunk of points)."""
    arrays: dict[str, np.ndarray] = {_ORDER: np.array(list(table), dtype=str)}
    stacks: dict[str, list[str]] = {}
    for name, values in table.items():
        if values.dtype == object:
            found: dict[str, int] = {}  # each distinct text once, by first appearance
            arrays[name + _TEXT_CODES] = np.fromiter(
                (found.setdefault(v if isinstance(v, str) else str(v), len(found))
                 for v in values.tolist()), np.int32, len(values))
            arrays[name + _TEXT_VALUES] = np.array(list(found), dtype=str)
        elif values.ndim == 1:
            stacks.setdefault(values.dtype.name, []).append(name)
        else:
            arrays[name] = values
    for dtype, names in stacks.items():
        arrays[dtype + _STACK] = np.stack([table[name] for name in names])
        arrays[dtype + _NAMES] = np.array(names, dtype=str)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    with open(partial, "wb") as file:
        # compressed, as most values are NaN where points are infeasible; at level 1, which
        # costs a third of the default's time for a file a tenth larger
        with zipfile.ZipFile(file, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
            for name, values in arrays.items():
                with archive.open(name + ".npy", "w", force_zip64=True) as entry:
                    np.lib.format.write_array(entry, values, allow_pickle=False)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, path)


def load(path: Path) -> Table:
    """Read a table written by :func:`save` (no pickle); ``status`` and ``level`` saved as
    names (by earlier versions) come back as codes.

    Raises:
      ValueError: a ``status`` or ``level`` name is not one of its codes' (besides what
        ``numpy.load`` raises for a file that is not a table).
    """
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    table = Table()
    for name, values in arrays.items():
        if name.endswith((_TEXT_CODES, _NAMES)) or name == _ORDER:
            continue
        if name.endswith(_TEXT_VALUES):
            base = name[: -len(_TEXT_VALUES)]
            table[base] = values.astype(object)[arrays[base + _TEXT_CODES]]
        elif name.endswith(_STACK):  # this version's columns of one dtype
            names = arrays[name[: -len(_STACK)] + _NAMES].tolist()
            table.update(zip(names, values, strict=True))
        else:  # a column of its own (an earlier version's file, or a 2-D column)
            table[name] = values
    if _ORDER in arrays:
        table = Table({name: table[name] for name in arrays[_ORDER].tolist()})
    for name in CODED:
        if name in table and table[name].dtype != CODE_DTYPE:
            table[name] = _canonical(name, table[name])
    return table
