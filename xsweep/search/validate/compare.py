"""Batched results against the exact simulator's: which metrics, how their error is measured,
and when a point passes.

A point evaluated at the ``exact`` level must agree with the simulator: the relative
error of each compared metric is at most the tolerance. The error of a part of the
iteration (bubble, straggler wait, exposed communication) is taken relative to its
simulated value, or to :data:`SMALL_PART` of the simulated iteration time when the part
is smaller than that: a part of a few microseconds in a second-long iteration has no
meaningful relative error, while its share of the iteration does.

A point only bounded (``bound`` level) must have a bound iteration time at or below the
simulated one, up to :data:`FLOAT32_SLACK`: the batched kernels compute in float32 and
agree with the float64 simulator within 1e-4 at worst, so a bound equal to the exact
time may land that far above it by rounding alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xsweep import metrics
from xsweep.search.levels import Level

#: The metrics compared, in report order: iteration time, the worst rank's pipeline
#: bubble, straggler wait and exposed communication of each kind, the run's cost and the
#: cost of a million tokens (known without ``total_tokens``).
COMPARED = ("iteration_time_s", "bubble_s_max", "straggler_wait_s_max", "exposed_tp_s_max",
            "exposed_pp_s_max", "exposed_reshard_s_max", "exposed_dp_s_max",
            "cost_per_run_usd", "cost_per_million_tokens_usd")
#: The metric a bound must not exceed.
BOUNDED = "iteration_time_s"
#: Parts of the iteration smaller than this share of it are compared to it instead.
SMALL_PART = 0.01
#: Relative amount a float32 bound may exceed the float64 simulated time by rounding.
FLOAT32_SLACK = 1e-4



@dataclass(frozen=True)
class Comparison:
    """One metric of one point: batched and simulated values, the error, the verdict."""

    metric: str
    batched: float | None
    simulated: float | None
    error: float | None  # None where neither side has a value (cost without total_tokens)
    passed: bool


def relative_error(metric: str, batched: float | None, simulated: float | None,
                   iteration_time_s: float) -> float | None:
    """How far ``batched`` is from ``simulated`` (see the module docstring); None when
    neither is known, infinity when only one is."""
    b, s = _number(batched), _number(simulated)
    if b is None and s is None:
        return None
    if b is None or s is None:
        return math.inf
    scale = abs(s)
    if metric != BOUNDED and metrics.metric_of(metric).unit == "s":
        scale = max(scale, SMALL_PART * abs(iteration_time_s))
    if scale == 0.0:
        return 0.0 if b == s else math.inf
    return abs(b - s) / scale


def compare(level: Level, batched: dict, simulated: dict, tolerance: float) -> list[Comparison]:
    """Every metric of :data:`COMPARED` for one point evaluated at ``level`` (exact or
    bound)."""
    t = simulated["iteration_time_s"]
    out = []
    for name in COMPARED:
        b, s = _number(batched.get(name)), _number(simulated.get(name))
        error = relative_error(name, b, s, t)
        if level == Level.EXACT:
            passed = error is None or error <= tolerance
        else:  # a bound is judged by its iteration time alone
            passed = name != BOUNDED or (b is not None and s is not None
                                         and b <= s * (1.0 + FLOAT32_SLACK))
        out.append(Comparison(name, b, s, error, passed))
    return out


def failure_line(label: str, level: Level, failed: list[Comparison], tolerance: float) -> str:
    """The one-line message for a point whose comparisons ``failed`` (in report order): the
    first in full, the others by name and error."""
    c = failed[0]
    others = "".join(f"; also {k.metric} (error {_show(k.error)})" for k in failed[1:])
    if level == Level.EXACT:
        return (f"{label}: {c.metric} batched {_show(c.batched)}, simulated "
                f"{_show(c.simulated)}: relative error {_show(c.error)} exceeds the "
                f"tolerance {tolerance:g}{others}")
    return (f"{label} (bound only): {c.metric} bound {_show(c.batched)} is above the "
            f"simulated {_show(c.simulated)} (relative error {_show(c.error)}) by more than "
            f"the float32 slack {FLOAT32_SLACK:g}")


def _number(value) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _show(value: float | None) -> str:
    return "none" if value is None else f"{value:.6g}"
