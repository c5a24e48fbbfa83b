"""Between Optuna trials and sweep points: a trial's suggestions as a point, and a point's
results as what the trial is told.

Each swept axis is one parameter named by its dotted path: a range is an integer
(``suggest_int`` with its step), a list a categorical choice; single-value axes are
not parameters. A finished trial carries (the contract other commands read):

- COMPLETE: values = the objectives in order; user attributes ``level`` (``exact`` or
  ``bound``), ``metrics`` (every plan metric, ``None`` where not a number), ``point``
  (axis path -> value) and ``plan_pbtxt`` (the plan in protobuf text);
- FAIL: user attributes ``reason`` (one line) and ``point``.
"""

from __future__ import annotations

import math

from xsweep.search.evaluation import METRICS
from xsweep.search.space.grid import Point
from xsweep.spec.sweep import IntRange, Sweep

LEVEL, METRICS_ATTR, POINT, PLAN, REASON = "level", "metrics", "point", "plan_pbtxt", "reason"


def suggest_point(trial, domains: dict[str, list | IntRange]) -> Point:
    """The point ``trial`` suggests over ``domains`` (:meth:`Sweep.domains`)."""
    point: Point = {}
    for path, domain in domains.items():
        if len(domain) == 1:
            point[path] = domain.low if isinstance(domain, IntRange) else domain[0]
        elif isinstance(domain, IntRange):
            point[path] = trial.suggest_int(path, domain.low, domain.high, step=domain.step)
        else:
            point[path] = trial.suggest_categorical(path, list(domain))
    return point


def metrics_of(row: dict[str, object]) -> dict[str, float | None]:
    """Every plan metric of one evaluated row as JSON-ready floats (``None`` for NaN)."""
    out = {}
    for name in METRICS:
        value = float(row[name])
        out[name] = value if math.isfinite(value) else None
    return out


#: The name of the deadline's constraint on a trial (days past it; <= 0 when met).
DEADLINE_CONSTRAINT = "days_past_deadline"


def complete(study, trial, sweep: Sweep, row: dict, point: Point, plan_text: str,
             days_past_deadline: float | None = None) -> None:
    """Tell ``trial`` its objective values from ``row`` (evaluated at ``row['level']``) and,
    with a deadline, how many days past it the plan trains (Optuna's constraint, which
    every sampler that handles constraints reads)."""
    if days_past_deadline is not None:
        trial.set_constraint(DEADLINE_CONSTRAINT, days_past_deadline)
    trial.set_user_attr(LEVEL, str(row["level"]))
    trial.set_user_attr(METRICS_ATTR, metrics_of(row))
    trial.set_user_attr(POINT, point)
    trial.set_user_attr(PLAN, plan_text)
    study.tell(trial, [float(row[name]) for name in sweep.objectives])


def fail(study, trial, reason: str, point: Point | None) -> None:
    """Tell ``trial`` it failed, with the one-line ``reason``."""
    import optuna

    trial.set_user_attr(REASON, " ".join(reason.split()))
    if point is not None:
        trial.set_user_attr(POINT, point)
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
