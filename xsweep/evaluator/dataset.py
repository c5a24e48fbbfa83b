"""The batched evaluator's results as an xarray Dataset, named by the metrics table.

Variables are the plan-level figures of ``xsweep.metrics`` over ``variant``, the
per-stream metrics over ``(variant, stream)``, then ``status``, ``feasible``,
``reason`` and ``level`` of each variant and the solver's diagnostics. Each
variable carries its unit and meaning as attributes. Missing figures are NaN.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from typing import TYPE_CHECKING

import numpy as np

from xsweep import metrics
from xsweep.cost import CostModel
from xsweep.errors import InputError
from xsweep.figures import static_table, timed_figures
from xsweep.kernels import Status
from xsweep.pipeline import Prepared

if TYPE_CHECKING:  # xarray loads in half a second: worker processes never need it
    import xarray as xr

#: Status names by code: the kernels' own, then ``pruned`` (bounded only, dominated).
STATUS_NAMES = (*Status.NAMES, "pruned")
PRUNED = len(Status.NAMES)
#: Solver diagnostics copied from the kernels' output, per variant.
DIAGNOSTICS = ("steps", "max_active_flows", "waterfill_rounds", "padding_overhead")
#: What each diagnostic counts (the variables' ``description`` attribute).
_DIAGNOSTIC_ABOUT = {
    "steps": "events the exact level stepped through (0 for the bound)",
    "max_active_flows": "most flows transferring at once (exact level)",
    "waterfill_rounds": "most water-filling rounds one step needed (exact level)",
    "padding_overhead": "padded array cells per real cell in the variant's kernel call "
                        "(rows run one after another count only the rows holding a "
                        "variant: the others are neither read nor run)",
}


def status_names(codes: np.ndarray) -> np.ndarray:
    """The names of status ``codes`` (:data:`STATUS_NAMES`), an object array of ``str``."""
    return np.array(STATUS_NAMES, dtype=object)[np.asarray(codes, np.int64)]


def _attrs(name: str) -> dict:
    m = metrics.metric_of(name)
    return {"units": m.unit, "description": m.description}


#: Where an error about the arguments of an evaluation comes from.
CALLER = "xsweep.evaluate"


def result_names() -> tuple[str, ...]:
    """Every name of the Dataset's dimensions, variables and coordinates: a coordinate
    the caller adds must not take one of them."""
    return ("variant", "stream", "name", *metrics.plan_names(), *metrics.STREAM_METRICS,
            "status", "feasible", "reason", "level", *DIAGNOSTICS)


def check_coords(coords: object, n: int | None = None) -> dict[str, np.ndarray]:
    """``coords`` of an evaluation checked: a mapping from a name to one value per plan (a
    list, a tuple, a 1-D array: anything NumPy makes a 1-D array of); ``n``, when known,
    is the number of plans. Return the values as arrays.

    Raises:
        InputError: naming ``coords`` or ``coords.NAME``.
    """
    if coords is None:
        return {}
    if not isinstance(coords, Mapping):
        raise InputError(CALLER, "coords", type(coords).__name__,
                         "expected a mapping from a name to one value per plan, or None")
    taken, out, length = set(result_names()), {}, n
    for name, values in coords.items():
        if not isinstance(name, str) or not name:
            raise InputError(CALLER, "coords", name, "a coordinate's name must be a "
                             "non-empty string")
        field = f"coords.{name}"
        if name in taken:
            raise InputError(CALLER, field, name, "is already a name of the results")
        if isinstance(values, str | bytes | Mapping | Set):
            raise InputError(CALLER, field, type(values).__name__,
                             "expected one value per plan (a list, a tuple or a 1-D array)")
        try:
            array = np.asarray(values)
        except (ValueError, TypeError, OverflowError):  # lists of different lengths, say
            raise InputError(CALLER, field, None,
                             "expected one value per plan (a 1-D sequence)") from None
        if array.ndim != 1:
            raise InputError(CALLER, field, array.shape,
                             "expected one value per plan (a 1-D sequence)")
        if length is not None and len(array) != length:
            what = f"one value per plan ({length})" if n is not None else \
                f"as many values as coords.{next(iter(out))} ({length})"
            raise InputError(CALLER, field, len(array), f"needs {what}")
        length = len(array)
        out[name] = array
    return out


def table(prepared: Sequence[Prepared], out: Mapping[str, np.ndarray],
          cost: CostModel) -> dict[str, np.ndarray]:
    """Every variable of the Dataset for ``prepared`` plans, from the driver's arrays
    ``out`` (with metrics), as arrays over those plans. Programs are not kept."""
    return table_of(static_table(prepared, cost), out)


def table_of(static: Mapping[str, np.ndarray], out: Mapping[str, np.ndarray]
             ) -> dict[str, np.ndarray]:
    """:func:`table` from the plans' :func:`xsweep.figures.static_table` and the driver's
    arrays."""
    figures = timed_figures(static, out["iteration_time_s"])
    n = len(static["name"])
    data: dict[str, np.ndarray] = {}
    for name in metrics.plan_names():
        data[name] = np.asarray(out[name] if name in out else figures[name])
    for name in metrics.STREAM_METRICS:
        data[name] = np.asarray(out.get(name, np.zeros((n, 0))))
    status = np.asarray(out["status"], int)
    fits = data["memory_fits"].astype(bool)
    converged = status == Status.OK
    data["status"] = status.astype(np.int8)  # codes: named only in the Dataset
    data["feasible"] = fits & converged
    data["reason"] = np.where(~fits, "does not fit in GPU memory",
                              np.where(converged, "", status_names(status))).astype(object)
    for name in DIAGNOSTICS:
        data[name] = np.asarray(out[name])
    data["name"] = np.asarray(static["name"], dtype=object)
    return data


def _joined(tables: Sequence[dict[str, np.ndarray]], name: str) -> np.ndarray:
    parts = [t[name] for t in tables]
    if parts[0].ndim == 2:  # per stream: as wide as the widest part, zeros past a plan's own
        width = max(p.shape[1] for p in parts)
        parts = [np.pad(p, ((0, 0), (0, width - p.shape[1]))) for p in parts]
    return np.concatenate(parts)


def joined(tables: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray] | None:
    """The tables of :func:`table` as one, rows in order (None for no tables)."""
    return {name: _joined(tables, name) for name in tables[0]} if tables else None


def assemble(columns: dict[str, np.ndarray] | None, level: str, dtype: str,
             cost: CostModel, coords: Mapping[str, Sequence] | None = None,
             attrs: Mapping[str, object] | None = None) -> xr.Dataset:
    """The Dataset of the plans of ``columns`` (:func:`joined` tables), in their order;
    the one place the evaluator's results become a Dataset, and status codes names.

    Args:
      coords: per-variant values that identify each variant (a sweep's axes, say),
        added as coordinates along ``variant``.
      attrs: more attributes (timings, say).
    """
    n = len(columns["name"]) if columns else 0
    data: dict[str, tuple] = {}
    for name in metrics.plan_names():
        data[name] = (("variant",), columns[name] if columns else np.zeros(0), _attrs(name))
    for name in metrics.STREAM_METRICS:
        data[name] = (("variant", "stream"), columns[name] if columns else np.zeros((0, 0)),
                      _attrs(name))
    for name in ("status", "feasible", "reason", *DIAGNOSTICS):
        empty = np.zeros(0, bool if name == "feasible" else float)
        values = columns[name] if columns else empty
        if name == "status" and columns:
            values = status_names(values)
        data[name] = (("variant",), values.astype(str) if values.dtype == object else values,
                      {"description": _DIAGNOSTIC_ABOUT[name]} if name in DIAGNOSTICS else {})
    data["level"] = (("variant",), np.full(n, level))
    names = columns["name"].astype(str) if columns else np.zeros(0, str)
    import xarray as xr

    return xr.Dataset(
        data,
        coords={"variant": np.arange(n), "name": (("variant",), names),
                **{name: ("variant", values)
                   for name, values in check_coords(coords, n).items()}},
        attrs={"level": level, "dtype": dtype, "pricing": cost.pricing, **(attrs or {})},
    )
