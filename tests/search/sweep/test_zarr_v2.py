"""The sweep's store, written from arrays in Zarr format 2, reads back with xarray and zarr
as the dataset it holds."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
import zarr

from xsweep.search.sweep import zarr_v2
from xsweep.search.sweep.zarr_v2 import Arrays, Variable


def sample() -> Arrays:
    rng = np.random.default_rng(3)
    shape = (5, 3, 4)
    dims = ("pp", "tp", "micro_batch_size")
    times = rng.random(shape)
    times[rng.random(shape) < 0.3] = np.nan
    reasons = np.where(rng.random(shape) < 0.5, "", "does not fit: 93.1 GiB on A100-80GB")
    return Arrays(
        data={"iteration_time_s": Variable(dims, times, {"units": "s"}),
              "steps": Variable(dims, rng.integers(0, 99, shape), {"units": "1"}),
              "feasible": Variable(dims, rng.random(shape) < 0.5, {"units": "bool"}),
              "reason": Variable(dims, reasons.astype(str), {"units": ""}),
              "status": Variable(dims, np.full(shape, "pruned"), {"units": ""})},
        coords={"pp": Variable(("pp",), np.array([1, 2, 4, 8, 16]), {"path": "parallelism.pp"}),
                "tp": Variable(("tp",), np.array([1, 2, 8]), {}),
                "micro_batch_size": Variable(("micro_batch_size",), np.arange(1, 5), {}),
                "model": Variable((), np.array("llama2-7b"), {"units": ""}),
                "sequence_parallel": Variable((), np.array(True), {"units": "bool"}),
                "oversubscription": Variable((), np.array(1.5), {"units": "1"})},
        attrs={"sweep_name": "tiny", "top": np.int64(3), "objectives": ["iteration_time_s"],
               "tier_exact": np.int32(7), "axis_paths": {"pp": "parallelism.pp"}})


@pytest.mark.parametrize("chunk_bytes", [zarr_v2.CHUNK_BYTES, 100])
def test_store_reads_back_as_the_dataset(tmp_path, monkeypatch, chunk_bytes):
    monkeypatch.setattr(zarr_v2, "CHUNK_BYTES", chunk_bytes)  # 100: a chunk per row or two
    arrays = sample()
    zarr_v2.write(arrays, tmp_path / "s.zarr")
    expected = arrays.to_xarray()
    for consolidated in (True, False):
        with xr.open_zarr(tmp_path / "s.zarr", consolidated=consolidated) as found:
            xr.testing.assert_identical(found.load(), expected)
    assert expected.attrs["top"] == 3  # numpy scalars became JSON numbers
    group = zarr.open_group(str(tmp_path / "s.zarr"), mode="r")  # zarr itself reads it
    chunks = group["iteration_time_s"].chunks
    assert chunks == ((5, 3, 4) if chunk_bytes > 1000 else (1, 3, 4))
    np.testing.assert_array_equal(group["steps"][...], arrays.data["steps"].values)
    assert group["reason"][...].dtype.kind == "U"


def test_store_equals_what_xarray_writes(tmp_path):
    """The same arrays written here and by xarray's own ``to_zarr`` read back the same:
    every variable, coordinate and attribute."""
    arrays = sample()
    zarr_v2.write(arrays, tmp_path / "a.zarr")
    arrays.to_xarray().to_zarr(tmp_path / "b.zarr", consolidated=True, zarr_format=2)
    with xr.open_zarr(tmp_path / "a.zarr") as mine, xr.open_zarr(tmp_path / "b.zarr") as theirs:
        xr.testing.assert_identical(mine.load(), theirs.load())


def test_dimensions_must_match_the_values(tmp_path):
    bad = Arrays({"x": Variable(("a",), np.zeros((2, 2)), {})}, {}, {})
    with pytest.raises(ValueError, match="x: 2 dimensions"):
        zarr_v2.write(bad, tmp_path / "bad.zarr")
