"""A study's answer: its Pareto front (several objectives) or its best trials (one), over
the trials evaluated exactly that meet the deadline, one per work group (a value of the
sweep's swept work axes, the model say, unless its ``fronts`` is ``across``), each distinct
plan once; as a table, a summary and plans.

Trials told only their bound are never in the answer: the funnel told them their bound
because an exact trial already dominated it.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from xsweep.search import report
from xsweep.search.evaluation import plan_key
from xsweep.search.folders import replace_folder, staging_folder
from xsweep.search.levels import Level
from xsweep.search.optimize import trials as trial_io
from xsweep.search.pareto import non_dominated, objective_matrix, top_points
from xsweep.search.space.grid import work_values
from xsweep.search.space.planner import reason_kind, unused_axes
from xsweep.spec import plan_from_text
from xsweep.spec.sweep import IntRange, Sweep


def exact_trials(study, met: Callable[[np.ndarray], np.ndarray]) -> list:
    """The study's COMPLETE trials evaluated exactly whose training time ``met`` accepts."""
    import optuna

    done = [t for t in study.get_trials(deepcopy=False,
                                        states=(optuna.trial.TrialState.COMPLETE,))
            if t.user_attrs.get(trial_io.LEVEL) == Level.EXACT.label]
    times = np.array([_number(t.user_attrs[trial_io.METRICS_ATTR]["training_time_s"])
                      for t in done], float)
    return [t for t, ok in zip(done, met(times), strict=True) if ok]


@dataclass
class Best:
    """The answer's trials and the study's counts. The answer is one per work group (a
    value of the sweep's swept work axes: a model, say; the groups in ``work``, in the
    order of the axes' values): its front or best trials, best first by the first
    objective, each distinct plan once (``same``: trial number -> the numbers of the
    other trials of its plan). ``trials`` holds every group's, group by group."""

    sweep: Sweep
    trials: list
    counts: dict
    work: list[tuple] = field(default_factory=lambda: [()])  # each group's work values
    group_of: dict[int, int] = field(default_factory=dict)  # trial number -> group
    same: dict[int, list[int]] = field(default_factory=dict)

    def rows(self, group: int | None = None) -> list[dict]:
        """Each answer trial (of ``group``, or all) as a front-table row: its number,
        metrics, swept axes (``None`` where an axis does not apply to its plan) and the
        trials of the same plan."""
        swept = _swept(self.sweep)
        out = []
        for t in self.trials:
            if group is not None and self.group_of.get(t.number, 0) != group:
                continue
            metrics = t.user_attrs[trial_io.METRICS_ATTR]
            point = t.user_attrs[trial_io.POINT]
            unused = unused_axes(self.sweep, _complete(self.sweep, point))
            out.append({"point": t.number, **metrics,
                        "axes": {path: None if path in unused else point[path]
                                 for path in swept},
                        "same_plan": list(self.same.get(t.number, []))})
        return out

    @property
    def infeasible(self) -> dict:
        """The trials that failed with a reason (not the unfinished ones): how many, by kind
        of reason (:func:`xsweep.search.space.planner.reason_kind`), largest first."""
        return self.counts.get("infeasible", {"trials": 0, "kinds": []})

    def no_answer_line(self) -> str:
        """Why the study has no answer: its trials with a result, and why they failed."""
        found = self.infeasible
        kinds = ", ".join(k["text"] for k in found["kinds"])
        counted = self.counts["counted"]
        return (f"no feasible plan among {counted:,} trial{'s' if counted != 1 else ''}"
                + (f": {kinds}" if kinds else ""))

    def table_text(self) -> str:
        """The front table of each work group, under a heading naming its work values when
        the sweep has several."""
        pools = [p.gpu for p in self.sweep.cluster.pools]
        work_axes = self.sweep.work_axes()
        axes = [(path, report.axis_label(path, pools)) for path in _swept(self.sweep)
                if path not in work_axes]
        parts = []
        for group, values in enumerate(self.work):
            lines = report.front_table(self.rows(group), axes, "trial", self.sweep.objectives)
            text = report.format_table(lines) if len(lines) > 1 else "no plan yet"
            if work_axes:
                heading = ", ".join(f"{path} {v}" for path, v in zip(work_axes, values,
                                                                     strict=True))
                text = f"{heading}:\n{text}"
            parts.append(text)
        return "\n\n".join(parts)

    def summary(self) -> dict:
        work_axes = self.sweep.work_axes()
        return {"trials": self.counts, "answer": "front" if len(self.sweep.objectives) > 1
                else "best", "best": self.rows(), "infeasible": self.infeasible,
                "fronts": self.sweep.fronts,
                "work_axes": list(work_axes),
                "groups": [{"work": dict(zip(work_axes, values, strict=True)),
                            "best": self.rows(group)}
                           for group, values in enumerate(self.work)]}

    def write_plans(self, folder: Path) -> list[Path]:
        """Each answer trial's plan as ``trial-<number>.pbtxt`` in ``folder``, which is
        replaced whole: plans of trials no longer in the answer go."""
        staging = staging_folder(folder)
        try:
            for t in self.trials:
                (staging / f"trial-{t.number}.pbtxt").write_text(t.user_attrs[trial_io.PLAN],
                                                                 encoding="utf-8")
            replace_folder(staging, folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return [folder / f"trial-{t.number}.pbtxt" for t in self.trials]


def best_of_study(study, sweep: Sweep, met: Callable[[np.ndarray], np.ndarray]) -> Best:
    """The front (several objectives) or the ``validate.top`` best trials (one objective)."""
    trials = study.get_trials(deepcopy=False)
    counts = {"total": len(trials),
              "counted": sum(map(trial_io.counts, trials)),
              "unfinished": sum(map(trial_io.unfinished, trials)),
              "state": dict(sorted(Counter(t.state.name for t in trials).items())),
              "infeasible": _failed_by_kind(trials),
              "level": dict(sorted(Counter(t.user_attrs.get(trial_io.LEVEL, "none")
                                           for t in trials).items()))}
    done = exact_trials(study, met)
    values = objective_matrix({name: np.array([t.values[j] for t in done], float)
                               for j, name in enumerate(sweep.objectives)}, sweep.objectives)
    # each plan once (under its pricing): its first trial stands for it
    keys = [(_plan_key(t.user_attrs[trial_io.PLAN]),
             _complete(sweep, t.user_attrs[trial_io.POINT]).get("cost.pricing")) for t in done]
    first: dict[tuple, int] = {}
    same: dict[int, list[int]] = {}
    for i, key in enumerate(keys):
        if key in first:
            same.setdefault(done[first[key]].number, []).append(done[i].number)
        else:
            first[key] = i
    standing = np.zeros(len(done), bool)
    standing[list(first.values())] = True
    work = [work_values(sweep, _complete(sweep, t.user_attrs[trial_io.POINT])) for t in done]
    groups = _work_groups(sweep, study, work)
    chosen_all, group_of = [], {}
    for group, w in enumerate(groups):
        mine = np.where((standing & np.array([v == w for v in work], bool))[:, None],
                        values, np.nan)
        if len(sweep.objectives) > 1:
            chosen = np.flatnonzero(non_dominated(mine))
            chosen = chosen[np.lexsort((np.array([done[i].number for i in chosen], np.int64),
                                        *mine[chosen].T[::-1]))]
        else:
            chosen = top_points(mine[:, 0], sweep.validation.top)
        chosen_all += [done[i] for i in chosen]
        group_of |= {done[i].number: group for i in chosen}
    return Best(sweep, chosen_all, counts, groups, group_of,
                {t.number: same.get(t.number, []) for t in chosen_all})


def _work_groups(sweep: Sweep, study, work: list[tuple]) -> list[tuple]:
    """The work groups to answer for: the work values of the study's trials (any state),
    in the order of the axes' values; one group without a swept work axis."""
    axes = sweep.work_axes()
    if not axes:
        return [()]
    seen = set(work)
    for t in study.get_trials(deepcopy=False):
        point = t.user_attrs.get(trial_io.POINT)
        if isinstance(point, dict) and all(path in point for path in axes):
            seen.add(work_values(sweep, point))
    domains = sweep.domains()
    order = [list(_values_of(domains[path])) for path in axes]
    return sorted(seen, key=lambda w: tuple(o.index(v) if v in o else len(o)
                                            for o, v in zip(order, w, strict=True)))


def _values_of(domain) -> list:
    return domain.values() if isinstance(domain, IntRange) else list(domain)


def _complete(sweep: Sweep, point: dict) -> dict:
    """A trial's point with the single-value axes it may lack (xsweep writes every axis
    into a trial's point; a point written otherwise may hold the swept ones alone)."""
    fixed = {path: _values_of(d)[0] for path, d in sweep.domains().items() if len(d) == 1}
    return fixed | dict(point)


def _swept(sweep: Sweep) -> tuple[str, ...]:
    return tuple(path for path, domain in sweep.domains().items() if len(domain) > 1)


def _number(value) -> float:
    return np.nan if value is None else float(value)


def _plan_key(text: str) -> bytes:
    """The plan's bytes without its name (trials of one plan share a table row)."""
    return plan_key(plan_from_text(text))


def _failed_by_kind(trials: list) -> dict:
    """The trials failed with a result's reason, counted by kind of reason."""
    import optuna

    reasons = [str(t.user_attrs.get(trial_io.REASON, "")) for t in trials
               if t.state == optuna.trial.TrialState.FAIL and not trial_io.unfinished(t)]
    kinds = Counter(reason_kind(r) for r in reasons)
    return {"trials": len(reasons),
            "kinds": [{"kind": kind.name, "trials": n, "text": kind.count(n)}
                      for kind, n in kinds.most_common()]}
