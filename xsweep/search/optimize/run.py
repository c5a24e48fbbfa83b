"""``run_optimize``: an Optuna study over a sweep's space, asked and told in batches.

Each batch: ask ``batch`` trials, turn their suggestions into points, plan them and
evaluate the buildable ones at the bound level in one call; then the exact funnel
(:class:`xsweep.search.funnel.Funnel`) seeded with the study's current exact front: a
trial whose bound is already dominated by it (or whose bound misses the deadline) is
told its bound values with ``level = "bound"``; the others are evaluated exactly, in
rounds that prune as exact results arrive, and told ``level = "exact"``. A point that
cannot be built or does not fit is told FAIL with its reason, never a number.

The study lives in any Optuna storage, so several processes (on several machines)
can run on one study; each asks until the study holds ``trials`` trials that count
(:func:`xsweep.search.optimize.trials.counts`: trials with a result, and those being
evaluated; not the unfinished ones an interrupted or killed run left, which a rerun
replaces). A rerun continues the study. With ``constraints.training_days_max`` the
samplers get the deadline as a constraint and only plans that meet it make the answer.
Within a batch, progress lines say how far asking, evaluating and telling have come.

Everything a run writes goes into its output folder (``-o``, else ``results/<sweep
name>/study``, or ``study-<name>`` for a study of another name than the sweep's): the
default study database ``study.db``, whose URL is percent-encoded so that no character
of the folder's path can move it, the answer's plans (``plans/``, replaced whole) and
the summary ``study.json``. A folder holds one study, never a sweep's results. A study
in an SQLite file has one writer: the run holds the lock of the file's folder
(:mod:`xsweep.search.locks`) from start to end, and a second run is refused; with that
lock held, a trial still RUNNING was left by a killed run, and is failed as unfinished.
Workers on a database server share their study, and hold their output folder only while
they write it. A study name follows the sweep's name rule
(:func:`xsweep.spec.sweep.check_name`), and both are checked, with the sweep's size
limits, before anything is written.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xsweep.errors import InputError
from xsweep.metrics import jsonable
from xsweep.search import command as shared
from xsweep.search.evaluation import Job, Session, evaluate_points, exact_feasible
from xsweep.search.folders import checked_folder, refuse_foreign, study_folder, write_file
from xsweep.search.funnel import Funnel
from xsweep.search.levels import Level, Status
from xsweep.search.locks import FolderLock, command_line
from xsweep.search.optimize import trials as trial_io
from xsweep.search.optimize.best import Best, best_of_study, exact_trials
from xsweep.search.optimize.study import default_sampler, make_sampler, open_study, space_attrs
from xsweep.search.pareto import non_dominated, objective_matrix
from xsweep.search.progress import Progress
from xsweep.search.space.grid import work_values
from xsweep.search.space.planner import Planner
from xsweep.search.storage import (
    STUDY_DB,
    interrupts_deferred,
    masked,
    open_storage,
    sqlite_file,
)
from xsweep.search.table import Table, update
from xsweep.spec import plan_to_text
from xsweep.spec.sweep import check_name

SECONDS_PER_DAY = 86_400.0
#: The summary a run writes into its folder (what ``--json`` prints).
STUDY_SUMMARY = "study.json"
#: Seconds a worker on a database server waits for another's writing of the same folder.
PUBLISH_WAIT_S = 60.0


@dataclass(frozen=True)
class Options(shared.Options):
    """How to run a search; ``None`` takes the sweep's ``search`` section (or the default);
    ``out_dir`` by default results/<sweep name>/study (see ``study_folder``)."""

    trials: int | None = None  # the study's total, this run's and earlier ones together
    batch: int | None = None
    storage: str | None = None  # default: SQLite at <out_dir>/study.db
    study: str | None = None  # default: the sweep's name
    sampler: str | None = None
    seed: int | None = None


@dataclass
class Outcome(shared.Outcome):
    """A finished study (:class:`xsweep.search.command.Outcome`), with its answer: the best
    plans, as trials (``problem`` says when it has none)."""

    best: Best | None = None


class Deadline:
    """``constraints.training_days_max`` as an Optuna constraint (<= 0 when met)."""

    def __init__(self, days: float | None):
        self.limit_s = None if days is None else days * SECONDS_PER_DAY

    def met(self, training_time_s: np.ndarray) -> np.ndarray:
        """``bool[n]``: within the deadline (everything when there is none; NaN never)."""
        if self.limit_s is None:
            return np.ones(len(training_time_s), bool)
        return np.asarray(training_time_s) <= self.limit_s

    def days_past(self, training_time_s: float) -> float | None:
        """Days past the deadline (negative: days to spare); None without a deadline."""
        if self.limit_s is None:
            return None
        if not np.isfinite(training_time_s):
            return float("inf")
        return (float(training_time_s) - self.limit_s) / SECONDS_PER_DAY


def run_optimize(path: str | Path, options: Options = Options(),
                 progress: Progress | None = None, session: Session | None = None) -> Outcome:
    """Run (or continue) the study of the sweep at ``path``; see the module docstring.

    Args:
      session: what this process evaluates trials in, and keeps results and compiled
        kernels in for the caller's later runs; by default one made for this run, over
        the process's default evaluator.

    Raises:
      InputError: besides bad input, the output folder holds a sweep's results or another
        study's, or another process holds it or the folder of the study's SQLite file.
    """
    show = progress.update if progress is not None else (lambda text, final=False: None)
    if options.study is not None:
        check_name(options.study, "--study")
    out_dir = checked_folder(options.out_dir) if options.out_dir is not None else None
    setup = shared.set_up(path, options)
    text, sweep, job = setup.text, setup.sweep, setup.job
    search = sweep.search
    target = options.trials if options.trials is not None else search.trials
    batch = options.batch if options.batch is not None else search.batch
    seed = options.seed if options.seed is not None else search.seed
    sampler_name = options.sampler or default_sampler(sweep)
    study_name = options.study or sweep.name
    folder = out_dir or study_folder(sweep.name, study_name, str(path))
    url = options.storage
    database = folder / STUDY_DB if url is None else sqlite_file(url)
    refuse_foreign(folder, "study")
    _refuse_another_study(folder, study_name)
    command = command_line("optimize", path)
    with contextlib.ExitStack() as held:
        locked = None
        if database is not None and (url is None or database.parent.is_dir()):
            # A study in a file has one writer: this run, which holds the file's folder
            # for its whole length. Workers on a database server share their study; each
            # holds its output folder only to write its outputs.
            locked = held.enter_context(FolderLock(database.parent, command))
        storage = open_storage(url if url is not None else sqlite_url(database))
        shown_url = masked(url) if url is not None else str(database)
        found = _search(storage, shown_url, locked is not None, sweep, text, job, study_name,
                        target, batch, seed, sampler_name, session, show)
        if locked is None or os.path.abspath(locked.folder) != os.path.abspath(folder):
            held.enter_context(FolderLock(folder, command, wait_s=PUBLISH_WAIT_S))
        return _publish(found, folder)


def _search(storage, shown_url: str, locked: bool, sweep, text: str, job: Job,
            study_name: str, target: int, batch: int, seed: int, sampler_name: str,
            session: Session | None, show) -> Outcome:
    """Ask, evaluate and tell batches until the study holds ``target`` trials that count
    (:func:`xsweep.search.optimize.trials.counts`); the study's answer.

    ``locked``: this run is the one writer of the storage (an SQLite file whose folder it
    holds), so a trial RUNNING now was left by a run that was killed: it is failed as
    unfinished first."""
    import optuna

    deadline = Deadline(sweep.constraints.training_days_max)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    attrs = space_attrs(sweep, text, job.catalog_version)
    # The sampler's seed moves on with the study, so a rerun does not replay the
    # suggestions the study already holds.
    probe = open_study(storage, study_name, attrs, None, shown_url)
    start = len(probe.get_trials(deepcopy=False))
    if locked:
        _fail_abandoned(probe)
    sampler = make_sampler(sampler_name, seed + start, batch)
    study = open_study(storage, study_name, attrs, sampler, shown_url)
    if start:
        found = study.get_trials(deepcopy=False)
        unfinished = sum(map(trial_io.unfinished, found))
        show(f"continuing study {study_name!r}: {start} trials so far"
             + (f" ({unfinished} unfinished, not counted toward {target:,})"
                if unfinished else ""), final=True)
    began, told = time.perf_counter(), 0
    planner = Planner(sweep, job.catalog)
    session = session if session is not None else Session()
    while (count := min(batch, target - (held := _counted(study)))) > 0:
        asked: list = []

        def note(stage: str, done: int, total: int, held=held, count=count) -> None:
            show(f"{held:,}/{target:,} trials; batch of {count:,}: {stage} {done:,}/{total:,}")

        try:
            for _ in range(count):
                with interrupts_deferred():  # a trial asked is a trial this run will tell
                    asked.append(study.ask())
                note("asked", len(asked), count)
            _run_batch(study, asked, session, job, planner, deadline, note)
        except BaseException:
            _fail_unfinished(study, asked, trial_io.INTERRUPTED)
            raise
        told += count
        rate = told / (time.perf_counter() - began)
        held = _counted(study)
        # The last batch's line always shows, however soon after the one before it.
        show(f"{held:,}/{target:,} trials, {rate:,.1f} trials/s, "
             f"{_best_text(study, sweep.objectives)}", final=held >= target)
    best = best_of_study(study, sweep, deadline.met)
    spent = time.perf_counter() - began
    show(f"done: {told:,} trials in {spent:.1f} s ({told / spent if spent else 0:,.1f} trials/s); "
         f"study {study_name!r} holds {best.counts['total']:,} trials, "
         f"{best.counts['counted']:,} with a result", final=True)
    summary = {"sweep": sweep.name, "study": study_name, "storage": shown_url,
               "software": [job.catalog.software_profile(name).record()
                            for name in sweep.training.software],
               "sampler": sampler_name, "batch": batch, "trials_target": target,
               "trials_this_run": told, "trials_per_s": told / spent if spent else None,
               "objectives": list(sweep.objectives),
               "training_days_max": sweep.constraints.training_days_max, **best.summary()}
    return Outcome(Path(), summary, best=best)


def _publish(found: Outcome, folder: Path) -> Outcome:
    """Write the answer's plans (``plans/``, replaced whole) and the summary
    (``study.json``) into ``folder``, whose lock the caller holds."""
    written = found.best.write_plans(folder / "plans")
    summary = {**found.summary, "folder": str(folder), "plans": [str(p) for p in written]}
    write_file(folder / STUDY_SUMMARY, (json.dumps(jsonable(summary), indent=2, allow_nan=False)
                                        + "\n").encode())
    problem = "" if summary["best"] else found.best.no_answer_line()
    return Outcome(folder, summary, report_text(summary, found.best, folder), problem,
                   best=found.best)


def report_text(summary: dict, best: Best, folder: Path) -> str:
    """What ``xsweep optimize`` prints: a heading (the answer, the deadline, the trials by
    state), the front tables, and where the plans, summary and study are."""
    what = ("Pareto front" if summary["answer"] == "front"
            else f"best {len(summary['best'])} by {summary['objectives'][0]}")
    deadline = (f" within {summary['training_days_max']:g} days"
                if summary["training_days_max"] else "")
    trials = summary["trials"]
    counts = ", ".join(f"{n:,} {state.lower()}" for state, n in trials["state"].items())
    if trials["unfinished"]:
        counts += f"; {trials['unfinished']:,} unfinished, not counted"
    return "\n".join([f"{what} of study {summary['study']!r}{deadline} "
                      f"({trials['total']:,} trials: {counts})",
                      best.table_text(),
                      f"plans: {folder / 'plans'}", f"summary: {folder / STUDY_SUMMARY}",
                      f"study: {summary['storage']}"])


def sqlite_url(path: Path) -> str:
    """The SQLAlchemy URL of the SQLite database at ``path``, whatever the path holds: each
    character but letters, digits and ``/_.-~`` percent-encoded, so that a ``?`` or ``#``
    does not start the URL's query, a ``%`` is not read as an escape and braces are not
    read as fields of Optuna's URL template (SQLAlchemy decodes the database part)."""
    return "sqlite:///" + urllib.parse.quote(os.fspath(path), safe="/")


def _run_batch(study, asked: list, session: Session, job: Job, planner: Planner,
               deadline: Deadline, note=lambda stage, done, total: None) -> None:
    """Evaluate and tell the trials ``asked``; ``note(stage, done, total)`` is called as
    each stage goes (suggested, bound, exact, told), for progress lines."""
    sweep = job.sweep
    domains = sweep.domains()
    n = len(asked)
    points = []
    for trial in asked:
        points.append(trial_io.suggest_point(trial, domains))
        note("suggested", len(points), n)
    names = [f"{sweep.name}-t{trial.number}" for trial in asked]
    plans: dict[int, object] = {}  # each buildable trial's plan, planned once
    table, _ = evaluate_points(session, job, np.arange(n), points, names, Level.BOUND,
                               planner, lambda done, total: note("bound evaluation", done, total),
                               built=plans)
    front, work = _exact_front(study, sweep, deadline)
    candidates = ((table["level"] == Level.BOUND) & (table["status"] == Status.OK)
                  & deadline.met(table["training_time_s"]))
    work += [work_values(sweep, point) for point in points]  # a funnel per work group
    groups = {w: g for g, w in enumerate(dict.fromkeys(work))}
    funnel = Funnel(np.concatenate([front, objective_matrix(table, sweep.objectives)]),
                    np.concatenate([np.zeros(len(front), bool), candidates]), top=0,
                    max_round=n, groups=np.array([groups[w] for w in work], np.int64))
    funnel.record(np.arange(len(front)), front, np.ones(len(front), bool))
    rounds = 0
    while len(picks := funnel.next_round()):
        rows = picks - len(front)
        rounds += 1
        exact, _ = evaluate_points(
            session, job, rows, [points[i] for i in rows], [names[i] for i in rows], Level.EXACT,
            planner, lambda done, total, r=rounds: note(f"exact round {r}", done, total))
        update(table, exact)
        feasible = exact_feasible(exact) & deadline.met(exact["training_time_s"])
        funnel.record(picks, objective_matrix(exact, sweep.objectives), feasible)
    for i, trial in enumerate(asked):
        reason = _failure(table, i, sweep.objectives)
        if reason:
            trial_io.fail(study, trial, reason, points[i])
        else:
            trial_io.complete(study, trial, sweep, table, i, points[i], plan_to_text(plans[i]),
                              deadline.days_past(table["training_time_s"][i]))
        note("told", i + 1, n)


def _failure(table: Table, i: int, objectives: list[str]) -> str:
    """Why row ``i`` has no objective values to tell ("" when it has them)."""
    level, status, reason = Level(table["level"][i]), Status(table["status"][i]), \
        str(table["reason"][i])
    if level == Level.NONE:
        return reason or "not buildable"
    if status != Status.OK:
        detail = f": {reason}" if reason else ""
        return f"{level.label} evaluation: {status.label}{detail}"
    if level == Level.EXACT and not table["feasible"][i]:
        return reason or "infeasible"
    missing = [name for name in objectives if not np.isfinite(table[name][i])]
    if missing:
        return f"objective {missing[0]} is not a number at the {level.label} level"
    return ""


def _exact_front(study, sweep, deadline: Deadline) -> tuple[np.ndarray, list[tuple]]:
    """Objective values (minimisation form) of the fronts of the study's exact trials that
    meet the deadline, one front per work group, and each row's work values: the funnel's
    evaluated rows."""
    done = exact_trials(study, deadline.met)
    values = objective_matrix({name: np.array([t.values[j] for t in done], float)
                               for j, name in enumerate(sweep.objectives)}, sweep.objectives)
    work = [work_values(sweep, t.user_attrs[trial_io.POINT]) for t in done]
    keep = np.zeros(len(done), bool)
    for w in set(work):
        mine = np.array([v == w for v in work])
        keep[mine] = non_dominated(values[mine])
    return values[keep], [w for w, k in zip(work, keep, strict=True) if k]


def _fail_unfinished(study, asked: list, reason: str) -> None:
    """Fail the trials of ``asked`` not yet told, as unfinished: they do not count."""
    import optuna

    running = {t.number for t in study.get_trials(deepcopy=False,
                                                  states=(optuna.trial.TrialState.RUNNING,))}
    for trial in asked:
        if trial.number in running:
            with interrupts_deferred():  # a second Ctrl-C does not leave one half told
                trial_io.fail_unfinished(study, trial, reason)


def _fail_abandoned(study) -> None:
    """Fail, as unfinished, the trials RUNNING in a study this run is the one writer of:
    a run that was killed asked them and never told them."""
    import optuna

    for frozen in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        trial_io.fail_unfinished(study, optuna.trial.Trial(study, frozen._trial_id),
                                 trial_io.ABANDONED)


def _counted(study) -> int:
    """The study's trials that count toward ``--trials``."""
    return sum(map(trial_io.counts, study.get_trials(deepcopy=False)))


def _refuse_another_study(folder: Path, study_name: str) -> None:
    """Refuse a folder whose summary names another study: one study per folder.

    Raises:
      InputError: naming the folder and the study it holds.
    """
    try:
        found = json.loads((folder / STUDY_SUMMARY).read_text(encoding="utf-8")).get("study")
    except (OSError, ValueError, AttributeError):
        return
    if found is not None and found != study_name:
        raise InputError(str(folder), None, None, f"holds study {found!r} ({STUDY_SUMMARY}); "
                         f"study {study_name!r} needs a folder of its own: choose another "
                         "with -o")


def _best_text(study, objectives: list[str]) -> str:
    try:
        front = study.best_trials
    except ValueError:
        return "no plan yet"
    if len(objectives) == 1:
        return f"best {objectives[0]} {front[0].values[0]:.6g}" if front else "no plan yet"
    return f"{len(front)} trials on the front"
