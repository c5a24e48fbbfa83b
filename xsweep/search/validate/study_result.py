"""An Optuna study written by ``xsweep optimize`` as validation input.

What the study holds (the contract ``xsweep optimize`` writes):

- study user attributes ``xsweep_space_sha256``, ``xsweep_space_name``,
  ``xsweep_objectives`` (metric names, in the order of the trials' values),
  ``xsweep_catalog_version``, ``xsweep_version`` and ``xsweep_space_text`` (the space's
  YAML);
- each COMPLETE trial: values (the objectives, in order) and user attributes
  ``plan_pbtxt`` (its plan), ``level`` (``exact`` or ``bound``), ``metrics`` (metric ->
  number or None) and ``point`` (axis -> value); infeasible trials are FAIL or PRUNED
  and are not validated.

Opening a study never writes to its storage: an SQLite file that does not exist is not
created, and Optuna is told not to create its tables. A storage URL's password never
appears in a message.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import numpy as np

from xsweep.errors import InputError
from xsweep.search.evaluation import catalog_version, plan_key
from xsweep.search.levels import Level, codes
from xsweep.search.pareto import objective_matrix
from xsweep.search.space.grid import work_values
from xsweep.search.space.planner import Planner
from xsweep.search.storage import storage_class
from xsweep.search.validate.compare import COMPARED
from xsweep.search.validate.winners import Candidate, merged, pick
from xsweep.spec.catalog import Catalog
from xsweep.spec.plan_io import plan_from_text
from xsweep.spec.sweep import OBJECTIVE_DIRECTIONS, Sweep, Validation, check_name, sweep_from_text

STUDY_ATTRS = ("xsweep_space_sha256", "xsweep_space_name", "xsweep_objectives",
               "xsweep_catalog_version", "xsweep_version", "xsweep_space_text")
TRIAL_ATTRS = ("plan_pbtxt", "level", "metrics", "point")


def is_storage_url(text: str) -> bool:
    """Whether ``text`` is a database URL (``sqlite:///...``, ``postgresql://...``)."""
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text) is not None


def redacted(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``."""
    return re.sub(r"^([^:/]+://[^/@:]*):[^/@]*@", r"\1:***@", url)


@dataclass(frozen=True)
class StudyResult:
    """A study opened for validation."""

    where: str  # "<redacted url> study <name>", for messages
    name: str
    sweep: Sweep
    catalog: Catalog
    objectives: list[str]
    trials: list  # COMPLETE FrozenTrials

    @property
    def validation(self) -> Validation:
        return self.sweep.validation

    def candidates(self, top: int) -> list[Candidate]:
        """The winners to re-run (:mod:`xsweep.search.validate.winners`), exact ones first."""
        attrs = [self._trial_attrs(t) for t in self.trials]
        levels = codes([a["level"] for a in attrs], Level)
        values = objective_matrix({name: [_float(t.values[j]) for t in self.trials]
                                   for j, name in enumerate(self.objectives)}, self.objectives)
        planner = Planner(self.sweep, self.catalog)
        fixed = {path: values_[0] for path, values_ in self.sweep.axes().items()
                 if len(values_) == 1}
        plans, costs, keys = [], [], []
        for trial, a in zip(self.trials, attrs, strict=True):
            label = f"trial {trial.number}"
            plans.append(plan_from_text(a["plan_pbtxt"], f"{self.where}: {label}: plan_pbtxt"))
            costs.append(planner.cost_model(fixed | dict(a["point"])))
            keys.append((plan_key(plans[-1]), costs[-1]))
        ids = {key: i for i, key in enumerate(dict.fromkeys(keys))}
        plan_of = np.array([ids[key] for key in keys], np.int64)
        work = [work_values(self.sweep, fixed | dict(a["point"])) for a in attrs]
        groups = np.array([{w: i for i, w in enumerate(dict.fromkeys(work))}[w] for w in work],
                          np.int64)
        out = []
        for level in (Level.EXACT, Level.BOUND):
            eligible = levels == level
            for row, why in pick(values, self.objectives, eligible, top, groups,
                                 plan_of).items():
                trial, a = self.trials[row], attrs[row]
                metrics = a["metrics"]
                same = tuple(sorted(self.trials[k].number
                                    for k in np.flatnonzero(plan_of == plan_of[row]) if k != row))
                out.append(Candidate(f"trial-{trial.number}", f"trial {trial.number}", level,
                                     tuple(why), plans[row], costs[row],
                                     {name: _float(metrics.get(name)) for name in COMPARED},
                                     same))
        return merged(out)

    def _trial_attrs(self, trial) -> dict:
        attrs = trial.user_attrs
        missing = [name for name in TRIAL_ATTRS if name not in attrs]
        where = f"{self.where}: trial {trial.number}"
        if missing:
            raise InputError(where, None, None, f"lacks the user attribute(s) "
                             f"{', '.join(missing)} that xsweep optimize writes")
        if attrs["level"] not in (Level.EXACT.label, Level.BOUND.label):
            raise InputError(where, "level", attrs["level"], "expected 'exact' or 'bound'")
        if not isinstance(attrs["metrics"], dict) or not isinstance(attrs["point"], dict):
            raise InputError(where, "metrics", None, "metrics and point must be mappings")
        if len(trial.values) != len(self.objectives):
            raise InputError(where, "values", trial.values,
                             f"expected one value per objective ({', '.join(self.objectives)})")
        return attrs


def open_study_result(url: str, name: str | None, catalog: Catalog) -> StudyResult:
    """Open study ``name`` in the storage at ``url`` without writing to it.

    Raises:
      InputError: the name breaks the name rule (:func:`xsweep.spec.sweep.check_name`: the
        name makes the default output folder), the storage cannot be reached, the study
        does not exist, lacks the contract's attributes, or was made with another catalog.
    """
    shown = redacted(url)
    if not name:
        raise InputError(shown, None, None, "a storage URL needs the study's name (--study NAME)")
    check_name(name, "--study")
    import optuna

    with _storage_errors(url, shown):
        storage = storage_class()(url, skip_table_creation=True)
        try:
            study = optuna.load_study(study_name=name, storage=storage)
        except KeyError:
            known = optuna.get_all_study_names(storage)
            raise InputError(shown, "study", name, "no such study in this storage (it holds: "
                             f"{', '.join(known) or 'none'})") from None
    where = f"{shown} study {name!r}"
    attrs = study.user_attrs
    missing = [key for key in STUDY_ATTRS if key not in attrs]
    if missing:
        raise InputError(where, None, None, f"lacks the user attribute(s) {', '.join(missing)}: "
                         "not a study written by xsweep optimize")
    version = catalog_version(catalog)
    if attrs["xsweep_catalog_version"] != version:
        raise InputError(where, "xsweep_catalog_version", attrs["xsweep_catalog_version"],
                         f"the study ran with another catalog than this one ({version}); "
                         "pass the --catalog files it used")
    objectives = attrs["xsweep_objectives"]
    if (not isinstance(objectives, list) or not objectives
            or any(o not in OBJECTIVE_DIRECTIONS for o in objectives)):
        raise InputError(where, "xsweep_objectives", objectives, "expected a list of metric names")
    sweep = sweep_from_text(attrs["xsweep_space_text"], f"{where}: xsweep_space_text", catalog)
    import optuna.trial

    trials = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    return StudyResult(where, name, sweep, catalog, list(objectives), trials)


@contextlib.contextmanager
def _storage_errors(url: str, shown: str):
    """Turn the ways a storage can fail to open into one-line InputErrors; an SQLite file
    that does not exist is refused before anything could create it."""
    import optuna.exceptions
    import sqlalchemy.exc

    if url.startswith("sqlite:"):
        # as SQLAlchemy reads it: the query cut off, the rest percent-decoded
        path = unquote(re.sub(r"^sqlite:///", "", url).split("?", 1)[0])
        if not path or path == ":memory:" or "\0" in path or not Path(path).is_file():
            raise InputError(shown, None, None, "no such SQLite database file")
    try:
        yield
    except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError,
            ImportError, ValueError, RuntimeError) as error:
        cause = error.__cause__ if isinstance(error.__cause__, Exception) else error
        lines = str(cause).strip().splitlines()
        reason = lines[0] if lines else type(error).__name__
        password = re.match(r"^[^:/]+://[^/@:]*:([^/@]*)@", url)
        if password and password.group(1):
            reason = reason.replace(password.group(1), "***")
        raise InputError(shown, None, None, f"cannot read the storage: {reason}") from None


def _float(value) -> float:
    return float("nan") if value is None else float(value)
