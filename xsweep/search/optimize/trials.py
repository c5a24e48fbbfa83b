"""Between Optuna trials and sweep points: a trial's suggestions as a point, and a point's
results as what the trial is told.

Each swept axis is one parameter named by its dotted path: a range is an integer
(``suggest_int`` with its step), a list a categorical choice; single-value axes are
not parameters. A finished trial carries (the contract other commands read):

- COMPLETE: values = the objectives in order; user attributes ``level`` (``exact`` or
  ``bound``), ``metrics`` (every plan metric, ``None`` where not a number), ``point``
  (axis path -> value) and ``plan_pbtxt`` (the plan in protobuf text);
- FAIL: user attributes ``reason`` (one line) and ``point``;
- FAIL with ``unfinished: true``: a trial asked but never told a result, because its run
  was interrupted (Ctrl-C) or killed; ``reason`` says which.

Which trials count toward a study's ``--trials`` (:func:`counts`): those with a result,
COMPLETE ones (exact or bound values) and FAIL or PRUNED ones told why they have none
(a plan that cannot be built, does not fit, did not converge), and the RUNNING ones,
being evaluated by some worker. Unfinished trials do not count: a rerun asks new
trials in their place. So do FAIL trials without a reason, which xsweep never tells.
"""

from __future__ import annotations

import math

from xsweep.search.evaluation import METRICS
from xsweep.search.levels import Level
from xsweep.search.space.grid import Point
from xsweep.search.table import Table
from xsweep.spec.sweep import IntRange, Sweep

LEVEL, METRICS_ATTR, POINT, PLAN, REASON = "level", "metrics", "point", "plan_pbtxt", "reason"
UNFINISHED = "unfinished"
#: The reason of a trial interrupted by Ctrl-C, and of one whose run was killed.
INTERRUPTED = "interrupted before its result was told"
ABANDONED = "its run ended before its result was told (killed)"


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


def metrics_of(table: Table, i: int) -> dict[str, float | None]:
    """Every plan metric of row ``i`` of an evaluated table as JSON-ready floats (``None``
    for NaN)."""
    out = {}
    for name in METRICS:
        value = float(table[name][i])
        out[name] = value if math.isfinite(value) else None
    return out


#: The name of the deadline's constraint on a trial (days past it; <= 0 when met).
DEADLINE_CONSTRAINT = "days_past_deadline"


def complete(study, trial, sweep: Sweep, table: Table, i: int, point: Point, plan_text: str,
             days_past_deadline: float | None = None) -> None:
    """Tell ``trial`` its objective values from row ``i`` of ``table`` (evaluated at its
    ``level``, which the trial's attribute names) and, with a deadline, how many days past
    it the plan trains (Optuna's constraint, which every sampler that handles constraints
    reads)."""
    if days_past_deadline is not None:
        trial.set_constraint(DEADLINE_CONSTRAINT, days_past_deadline)
    trial.set_user_attr(LEVEL, Level(table["level"][i]).label)
    trial.set_user_attr(METRICS_ATTR, metrics_of(table, i))
    trial.set_user_attr(POINT, point)
    trial.set_user_attr(PLAN, plan_text)
    study.tell(trial, [float(table[name][i]) for name in sweep.objectives])


def fail(study, trial, reason: str, point: Point | None) -> None:
    """Tell ``trial`` it failed, with the one-line ``reason``."""
    import optuna

    trial.set_user_attr(REASON, " ".join(reason.split()))
    if point is not None:
        trial.set_user_attr(POINT, point)
    study.tell(trial, state=optuna.trial.TrialState.FAIL)


def fail_unfinished(study, trial, reason: str) -> None:
    """Tell ``trial`` it failed without a result (:data:`INTERRUPTED`, :data:`ABANDONED`):
    it does not count toward the study's trials."""
    import optuna

    trial.set_user_attr(REASON, reason)
    trial.set_user_attr(UNFINISHED, True)
    study.tell(trial, state=optuna.trial.TrialState.FAIL)


def unfinished(trial) -> bool:
    """Whether a (frozen) trial failed without a result: marked :data:`UNFINISHED`, or
    told FAIL without a reason (as no xsweep run tells a trial), or interrupted by an
    earlier version of xsweep (which gave only the reason)."""
    import optuna

    if trial.state != optuna.trial.TrialState.FAIL:
        return False
    attrs = trial.user_attrs
    return bool(attrs.get(UNFINISHED)) or not attrs.get(REASON) or attrs[REASON] == INTERRUPTED


def counts(trial) -> bool:
    """Whether a (frozen) trial counts toward the study's ``--trials`` (see the module
    docstring): COMPLETE, PRUNED, RUNNING, and FAIL with a result's reason."""
    import optuna

    states = optuna.trial.TrialState
    if trial.state in (states.COMPLETE, states.PRUNED, states.RUNNING):
        return True
    return trial.state == states.FAIL and not unfinished(trial)
