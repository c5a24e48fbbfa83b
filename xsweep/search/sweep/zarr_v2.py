"""A sweep's dataset as numpy arrays, and its store in Zarr format 2.

A sweep writes its dataset once, whole, and every reader opens it with xarray
(``xarray.open_zarr``). Building an ``xarray.Dataset`` and handing it to zarr costs a
sweep of seconds about a second (importing both, then a round of zarr's asynchronous
machinery per array), so the store is written here from the arrays, as the format's
specification lays it out:

- a group (``.zgroup``, ``.zattrs`` with the dataset's attributes) holding one array
  folder per variable and coordinate: ``.zarray`` (shape, chunks, dtype, fill value,
  compressor), ``.zattrs`` (the variable's attributes, with xarray's
  ``_ARRAY_DIMENSIONS`` naming its dimensions, and on data variables the
  ``coordinates`` that are not dimensions) and its chunks;
- chunks cut along the first dimension only (each at most :data:`CHUNK_BYTES`
  uncompressed; the last padded to a whole chunk, as the format keeps them), compressed
  with Blosc LZ4 (numcodecs, the codecs zarr itself uses);
- consolidated metadata (``.zmetadata``), so that a reader opens it in one read.

Text is fixed-width Unicode (``<U``), which the format holds natively and xarray reads
back as numpy ``str``; floats have ``NaN`` as their fill value, as xarray gives them.
"""

from __future__ import annotations

import json
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: Most uncompressed bytes of one chunk.
CHUNK_BYTES = 8 << 20
#: Threads that write the arrays' folders at once.
WRITERS = 8


@dataclass(frozen=True)
class Variable:
    """One named array of a dataset: its dimensions, values and attributes."""

    dims: tuple[str, ...]
    values: np.ndarray
    attrs: dict


@dataclass(frozen=True)
class Arrays:
    """A dataset as plain arrays: data variables, coordinates (those named as a
    dimension are its values; the others, scalars here, describe every point) and the
    dataset's attributes."""

    data: dict[str, Variable]
    coords: dict[str, Variable]
    attrs: dict

    def to_xarray(self):
        """The same dataset as an ``xarray.Dataset``."""
        import xarray as xr

        def pack(v: Variable):
            return (v.dims, v.values, v.attrs)

        return xr.Dataset({k: pack(v) for k, v in self.data.items()},
                          coords={k: pack(v) for k, v in self.coords.items()},
                          attrs=self.attrs)


def write(arrays: Arrays, root: Path) -> None:
    """Write ``arrays`` as a Zarr format 2 group at ``root`` (a folder not there yet)."""
    from numcodecs import Blosc

    codec = Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE)
    root.mkdir()
    metadata = {".zgroup": {"zarr_format": 2}, ".zattrs": _jsonable(arrays.attrs)}
    items = _arrays_of(arrays)
    # the arrays' folders written side by side: most of a small array's time is the file
    # system's (a folder and three files made), and compressing lets go of the GIL too
    with ThreadPoolExecutor(min(WRITERS, max(len(items), 1))) as pool:
        written = list(pool.map(lambda item: _write_array(root / item[0], item[1], item[2],
                                                          codec), items))
    for (name, _, _), meta in zip(items, written, strict=True):
        for key, content in meta.items():
            metadata[f"{name}/{key}"] = content
    for key in (".zgroup", ".zattrs"):
        (root / key).write_text(json.dumps(metadata[key], indent=2))
    (root / ".zmetadata").write_text(json.dumps(
        {"metadata": metadata, "zarr_consolidated_format": 1}, indent=2))


def _arrays_of(arrays: Arrays) -> list[tuple[str, Variable, dict]]:
    """Each array of the group, with the attributes xarray adds: the coordinates first,
    then the data variables, each naming the coordinates that are not dimensions."""
    dims = {d for v in arrays.coords.values() for d in v.dims}
    others = " ".join(sorted(name for name in arrays.coords if name not in dims))
    extra = {"coordinates": others} if others else {}
    return ([(name, v, {}) for name, v in arrays.coords.items()]
            + [(name, v, extra) for name, v in arrays.data.items()])


def _write_array(folder: Path, variable: Variable, extra: dict, codec) -> dict:
    """Write one array's folder (metadata, then its chunks); return its metadata by file
    name (``.zarray``, ``.zattrs``)."""
    values = np.asarray(variable.values, order="C")
    if values.ndim != len(variable.dims):
        raise ValueError(f"{folder.name}: {values.ndim} dimensions, named {variable.dims}")
    folder.mkdir()
    rows = _chunk_rows(values)
    meta = {".zarray": {"shape": list(values.shape),
                        "chunks": [rows, *values.shape[1:]] if values.ndim else [],
                        "dtype": values.dtype.str,
                        "fill_value": "NaN" if values.dtype.kind == "f" else None,
                        "order": "C", "filters": None, "dimension_separator": ".",
                        "compressor": codec.get_config(), "zarr_format": 2},
            ".zattrs": _jsonable({**variable.attrs, **extra,
                                  "_ARRAY_DIMENSIONS": list(variable.dims)})}
    for key, content in meta.items():
        (folder / key).write_text(json.dumps(content, indent=2))
    for key, chunk in _chunks(values, rows):
        (folder / key).write_bytes(codec.encode(chunk))
    return meta


def _chunk_rows(values: np.ndarray) -> int:
    """Rows (along the first dimension) of each chunk: as many as fit in
    :data:`CHUNK_BYTES`, at least one."""
    if values.ndim == 0:
        return 0
    row = values.dtype.itemsize * math.prod(values.shape[1:])
    return max(1, min(values.shape[0], CHUNK_BYTES // max(row, 1)))


def _chunks(values: np.ndarray, rows: int):
    """(key, contiguous chunk) of each chunk, the last padded to ``rows`` rows."""
    if values.ndim == 0:
        yield "0", values
        return
    rest = ".0" * (values.ndim - 1)
    for index, start in enumerate(range(0, max(values.shape[0], 1), rows)):
        chunk = values[start:start + rows]
        if len(chunk) < rows:  # the format stores edge chunks whole
            pad = np.zeros((rows - len(chunk), *values.shape[1:]), values.dtype)
            chunk = np.concatenate([chunk, pad])
        yield f"{index}{rest}", np.ascontiguousarray(chunk)


def _jsonable(value):
    """Attributes as JSON holds them: numpy scalars and arrays as Python numbers and lists."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    return value
