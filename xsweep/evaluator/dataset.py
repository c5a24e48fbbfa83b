"""The batched evaluator's results as an xarray Dataset, named by the metrics table.

Variables are the plan-level figures of ``xsweep.metrics`` over ``variant``, the
per-stream metrics over ``(variant, stream)``, then ``status``, ``feasible``,
``reason`` and ``level`` of each variant and the solver's diagnostics. Each
variable carries its unit and meaning as attributes. Missing figures are NaN.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from xsweep import metrics
from xsweep.cost import CostModel
from xsweep.errors import InputError
from xsweep.figures import plan_figures
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


def _attrs(name: str) -> dict:
    m = metrics.metric_of(name)
    return {"units": m.unit, "description": m.description}


def _checked_coords(coords: Mapping[str, Sequence] | None, n: int) -> dict:
    out = {}
    for name, values in (coords or {}).items():
        values = np.asarray(values)
        if values.ndim != 1 or len(values) != n:
            raise InputError(None, f"coords.{name}", values.shape,
                             f"needs one value per variant ({n})")
        if name in ("variant", "stream") or name in metrics.plan_names():
            raise InputError(None, f"coords.{name}", name, "is already a name of the results")
        out[name] = ("variant", values)
    return out


def table(prepared: Sequence[Prepared], out: Mapping[str, np.ndarray],
          cost: CostModel) -> dict[str, np.ndarray]:
    """Every variable of the Dataset for ``prepared`` plans, from the driver's arrays
    ``out`` (with metrics), as arrays over those plans. Programs are not kept."""
    figures = plan_figures([p.analysis for p in prepared], out["iteration_time_s"], cost)
    data: dict[str, np.ndarray] = {}
    for name in metrics.plan_names():
        data[name] = np.asarray(out[name] if name in out else figures[name])
    for name in metrics.STREAM_METRICS:
        data[name] = np.asarray(out.get(name, np.zeros((len(prepared), 0))))
    status = np.asarray(out["status"], int)
    fits = data["memory_fits"].astype(bool)
    converged = status == Status.OK
    names = np.array([STATUS_NAMES[s] for s in status], dtype=object)
    data["status"] = names
    data["feasible"] = fits & converged
    data["reason"] = np.where(~fits, "does not fit in GPU memory",
                              np.where(converged, "", names)).astype(object)
    for name in DIAGNOSTICS:
        data[name] = np.asarray(out[name])
    data["name"] = np.array([p.name for p in prepared], dtype=object)
    return data


def _joined(tables: Sequence[dict[str, np.ndarray]], name: str) -> np.ndarray:
    parts = [t[name] for t in tables]
    if parts[0].ndim == 2:  # per stream: as wide as the widest part, zeros past a plan's own
        width = max(p.shape[1] for p in parts)
        parts = [np.pad(p, ((0, 0), (0, width - p.shape[1]))) for p in parts]
    return np.concatenate(parts)


def assemble(tables: Sequence[dict[str, np.ndarray]], level: str, dtype: str,
             cost: CostModel, coords: Mapping[str, Sequence] | None = None,
             attrs: Mapping[str, object] | None = None) -> xr.Dataset:
    """The Dataset of the plans of ``tables`` (from :func:`table`), in their order.

    Args:
      coords: per-variant values that identify each variant (a sweep's axes, say),
        added as coordinates along ``variant``.
      attrs: more attributes (timings, say).
    """
    columns = {name: _joined(tables, name) for name in tables[0]} if tables else None
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
        data[name] = (("variant",), values.astype(str) if values.dtype == object else values,
                      {"description": _DIAGNOSTIC_ABOUT[name]} if name in DIAGNOSTICS else {})
    data["level"] = (("variant",), np.full(n, level))
    names = columns["name"].astype(str) if columns else np.zeros(0, str)
    import xarray as xr

    return xr.Dataset(
        data,
        coords={"variant": np.arange(n), "name": (("variant",), names),
                **_checked_coords(coords, n)},
        attrs={"level": level, "dtype": dtype, "pricing": cost.pricing, **(attrs or {})},
    )
