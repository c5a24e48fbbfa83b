"""Reading a finished sweep's dataset back (``sweep.zarr``) for the commands that use it
after the sweep (``xsweep validate``, ``xsweep report``): opened, checked to hold what a
sweep writes, and checked to have been made with the catalog in use."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from pathlib import Path

from xsweep.errors import InputError
from xsweep.search.evaluation import catalog_version
from xsweep.spec.catalog import Catalog


def open_sweep_dataset(store: Path, catalog: Catalog, variables: Iterable[str],
                       attrs: Iterable[str] = ()):
    """The xarray Dataset at ``store`` (lazy, as ``xarray.open_zarr`` gives it).

    Raises:
      InputError: naming ``store``: it cannot be read as a dataset, lacks one of
        ``variables`` or ``attrs``, or was made with another catalog than ``catalog``.
    """
    import xarray as xr

    try:
        with warnings.catch_warnings():  # zarr's notes on (missing) consolidated metadata
            warnings.simplefilter("ignore")
            ds = xr.open_zarr(store)
    except (OSError, ValueError, KeyError) as error:
        raise InputError(str(store), None, None, f"cannot be read as a dataset: {error}") from None
    missing = [name for name in dict.fromkeys(("catalog_version", *attrs))
               if name not in ds.attrs]
    missing += [name for name in dict.fromkeys(variables) if name not in ds.data_vars]
    if missing:
        raise InputError(str(store), None, None, f"lacks {', '.join(missing)}: not the dataset "
                         "of a sweep written by xsweep sweep")
    version = catalog_version(catalog)
    if ds.attrs["catalog_version"] != version:
        raise InputError(str(store), "catalog_version", ds.attrs["catalog_version"],
                         f"the sweep ran with another catalog than this one ({version}); "
                         "pass the --catalog files it used, or run the sweep again")
    return ds
