"""A study's answer: its Pareto front (several objectives) or its best trials (one), over
the trials evaluated exactly that meet the deadline; as a table, a summary and plans.

Trials told only their bound are never in the answer: the funnel told them their bound
because an exact trial already dominated it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xsweep.search import report
from xsweep.search.evaluation import plan_key
from xsweep.search.optimize import trials as trial_io
from xsweep.search.pareto import non_dominated, objective_matrix, top_points
from xsweep.spec import plan_from_text
from xsweep.spec.sweep import Sweep


def exact_trials(study, met: Callable[[np.ndarray], np.ndarray]) -> list:
    """The study's COMPLETE trials evaluated exactly whose training time ``met`` accepts."""
    import optuna

    done = [t for t in study.get_trials(deepcopy=False,
                                        states=(optuna.trial.TrialState.COMPLETE,))
            if t.user_attrs.get(trial_io.LEVEL) == "exact"]
    times = np.array([_number(t.user_attrs[trial_io.METRICS_ATTR]["training_time_s"])
                      for t in done], float)
    return [t for t, ok in zip(done, met(times), strict=True) if ok]


@dataclass
class Best:
    """The answer's trials, best first by the first objective, and the study's counts."""

    sweep: Sweep
    trials: list
    counts: dict

    def rows(self) -> list[dict]:
        """Each answer trial as a front-table row: its number, metrics and swept axes."""
        swept = _swept(self.sweep)
        out = []
        for t in self.trials:
            metrics = t.user_attrs[trial_io.METRICS_ATTR]
            point = t.user_attrs[trial_io.POINT]
            out.append({"point": t.number, **metrics,
                        "axes": {path: point[path] for path in swept}})
        return out

    def table_text(self) -> str:
        keys = {t.number: _plan_key(t.user_attrs[trial_io.PLAN]) for t in self.trials}
        lines = report.front_table(self.rows(), _swept(self.sweep),
                                   [p.gpu for p in self.sweep.cluster.pools], keys, "trial")
        return report.format_table(lines)

    def summary(self) -> dict:
        return {"trials": self.counts, "answer": "front" if len(self.sweep.objectives) > 1
                else "best", "best": self.rows()}

    def write_plans(self, folder: Path) -> list[Path]:
        """Each answer trial's plan as ``trial-<number>.pbtxt`` in ``folder``."""
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for t in self.trials:
            path = folder / f"trial-{t.number}.pbtxt"
            partial = path.with_name(path.name + ".partial")
            partial.write_text(t.user_attrs[trial_io.PLAN], encoding="utf-8")
            partial.replace(path)
            written.append(path)
        return written


def best_of_study(study, sweep: Sweep, met: Callable[[np.ndarray], np.ndarray]) -> Best:
    """The front (several objectives) or the ``validate.top`` best trials (one objective)."""
    trials = study.get_trials(deepcopy=False)
    counts = {"total": len(trials),
              "state": dict(sorted(Counter(t.state.name for t in trials).items())),
              "level": dict(sorted(Counter(t.user_attrs.get(trial_io.LEVEL, "none")
                                           for t in trials).items()))}
    done = exact_trials(study, met)
    values = objective_matrix({name: np.array([t.values[j] for t in done], float)
                               for j, name in enumerate(sweep.objectives)}, sweep.objectives)
    if len(sweep.objectives) > 1:
        chosen = np.flatnonzero(non_dominated(values))
        chosen = chosen[np.lexsort((np.array([done[i].number for i in chosen]),
                                    *values[chosen].T[::-1]))]
    else:
        chosen = top_points(values[:, 0], sweep.validation.top)
    return Best(sweep, [done[i] for i in chosen], counts)


def _swept(sweep: Sweep) -> tuple[str, ...]:
    return tuple(path for path, domain in sweep.domains().items() if len(domain) > 1)


def _number(value) -> float:
    return np.nan if value is None else float(value)


def _plan_key(text: str) -> bytes:
    """The plan's bytes without its name (trials of one plan share a table row)."""
    return plan_key(plan_from_text(text))
