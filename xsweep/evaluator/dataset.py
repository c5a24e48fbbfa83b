"""The batched evaluator's results as an xarray Dataset, named by the metrics table.

Variables are the plan-level figures of ``xsweep.metrics`` over ``variant``, the
per-stream metrics over ``(variant, stream)``, then ``status``, ``feasible``,
``reason`` and ``level`` of each variant and the solver's diagnostics. Each
variable carries its unit and meaning as attributes. Missing figures are NaN.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from xsweep import metrics
from xsweep.cost import CostModel
from xsweep.errors import InputError
from xsweep.figures import plan_figures
from xsweep.kernels import Status
from xsweep.pipeline import Prepared

#: Status names by code: the kernels' own, then ``pruned`` (bounded only, dominated).
STATUS_NAMES = (*Status.NAMES, "pruned")
PRUNED = len(Status.NAMES)
#: Solver diagnostics copied from the kernels' output, per variant.
DIAGNOSTICS = ("steps", "max_active_flows", "waterfill_rounds", "padding_overhead")


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


def assemble(prepared: Sequence[Prepared], out: Mapping[str, np.ndarray], level: str,
             dtype: str, cost: CostModel,
             coords: Mapping[str, Sequence] | None = None) -> xr.Dataset:
    """The Dataset of ``prepared`` plans from the driver's arrays ``out`` (with metrics).

    Args:
      coords: per-variant values that identify each variant (a sweep's axes, say),
        added as coordinates along ``variant``.
    """
    n = len(prepared)
    figures = [plan_figures(p.analysis, t, cost)
               for p, t in zip(prepared, out["iteration_time_s"], strict=True)]
    data: dict[str, tuple] = {}
    for name in metrics.plan_names():
        values = (out[name] if name in out
                  else np.array([f[name] for f in figures], dtype=float if n == 0 else None))
        data[name] = (("variant",), np.asarray(values), _attrs(name))
    for name in metrics.STREAM_METRICS:
        values = out.get(name, np.zeros((n, 0)))
        data[name] = (("variant", "stream"), values, _attrs(name))
    status = np.asarray(out["status"], int)
    fits = np.asarray(data["memory_fits"][1], bool)
    converged = status == Status.OK
    reason = np.where(~fits, "does not fit in GPU memory",
                      np.where(converged, "", np.array([STATUS_NAMES[s] for s in status], str)))
    data["status"] = (("variant",), np.array([STATUS_NAMES[s] for s in status], str))
    data["feasible"] = (("variant",), fits & converged)
    data["reason"] = (("variant",), reason.astype(str))
    data["level"] = (("variant",), np.full(n, level))
    for name in DIAGNOSTICS:
        data[name] = (("variant",), np.asarray(out[name]))
    return xr.Dataset(
        data,
        coords={"variant": np.arange(n), "name": (("variant",), [p.name for p in prepared]),
                **_checked_coords(coords, n)},
        attrs={"level": level, "dtype": dtype, "pricing": cost.pricing},
    )
