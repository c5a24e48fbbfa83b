"""Tables of per-point results: columns of equal length keyed by name, and their files.

Numbers are float64 (NaN where a point has no value), flags bool, text Python ``str``
in object arrays; column ``point`` holds the points' grid indices. A table is saved as
one ``.npz`` file without pickle: each text column as its distinct values and an
integer code per row, so long repeated reasons cost little. Files are written under a
temporary name and renamed, so a file that exists is whole.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

Table = dict[str, np.ndarray]

_TEXT_VALUES, _TEXT_CODES = ".text_values", ".text_codes"


def from_rows(columns: dict[str, np.ndarray]) -> Table:
    """A table with each column in its canonical dtype (float64, bool, object text, int64 point)."""
    out: Table = {}
    for name, values in columns.items():
        values = np.asarray(values)
        if name == "point":
            out[name] = values.astype(np.int64)
        elif values.dtype.kind == "b":
            out[name] = values.astype(bool)
        elif values.dtype.kind in "iuf":
            out[name] = values.astype(np.float64)
        else:
            out[name] = values.astype(str).astype(object)
    return out


def blank(like: np.ndarray, n: int) -> np.ndarray:
    """A column of ``n`` missing values of ``like``'s kind (NaN, False, "" or -1)."""
    if like.dtype.kind == "b":
        return np.zeros(n, bool)
    if like.dtype.kind == "f":
        return np.full(n, np.nan)
    if like.dtype.kind in "iu":
        return np.full(n, -1, like.dtype)
    return np.full(n, "", object)


def concat(tables: Sequence[Table]) -> Table:
    """Rows of all tables in order; a column some tables lack is blank there."""
    names: dict[str, np.ndarray] = {}
    for table in tables:
        for name, values in table.items():
            names.setdefault(name, values)
    return {name: np.concatenate([t[name] if name in t else blank(like, len(t["point"]))
                                  for t in tables])
            for name, like in names.items()}


def update(base: Table, rows: Table) -> None:
    """Overwrite ``base``'s rows at the points of ``rows`` (``base`` covers points 0..n-1 in
    order), adding the columns ``base`` lacks."""
    where = rows["point"]
    n = len(base["point"])
    for name, values in rows.items():
        if name not in base:
            base[name] = blank(values, n)
        base[name][where] = values


def save(table: Table, path: Path) -> None:
    """Write ``table`` to ``path`` (.npz) atomically."""
    arrays = {}
    for name, values in table.items():
        if values.dtype == object:
            text, codes = np.unique(values.astype(str), return_inverse=True)
            arrays[name + _TEXT_VALUES] = text
            arrays[name + _TEXT_CODES] = codes.astype(np.int32)
        else:
            arrays[name] = values
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    with open(partial, "wb") as file:
        np.savez_compressed(file, **arrays)  # mostly NaN where points are infeasible
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, path)


def load(path: Path) -> Table:
    """Read a table written by :func:`save` (no pickle)."""
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    table: Table = {}
    for name, values in arrays.items():
        if name.endswith(_TEXT_CODES):
            continue
        if name.endswith(_TEXT_VALUES):
            base = name[: -len(_TEXT_VALUES)]
            table[base] = values.astype(object)[arrays[base + _TEXT_CODES]]
        else:
            table[name] = values
    return table
