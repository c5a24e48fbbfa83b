"""``run_sweep``: a sweep file to a published dataset, through the exact funnel.

1. Plan and bound every point, chunk by chunk (independent units, resumable).
2. Evaluate exactly, in rounds, the bounded points the funnel cannot prune
   (:mod:`xsweep.search.funnel`); each round's batches are units too.
3. Publish the dataset, the Pareto table, plot and summary, and the plans of the
   front and top points (:mod:`xsweep.search.sweep.store`).

The units this process runs it evaluates in the run's session
(:class:`~xsweep.search.evaluation.Session`), the caller's or one made for the run; units
run elsewhere, in the session of the process that runs them
(:mod:`xsweep.search.sweep.processes`, :mod:`xsweep.search.sweep.distributed`).

A rerun with the same inputs reuses every finished chunk and batch: the funnel's rounds
are a pure function of the bounds and exact results, so it replays to the same point.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

import xsweep
from xsweep.errors import InputError
from xsweep.metrics import jsonable
from xsweep.runtime import accelerator_possible, usable_cores
from xsweep.search import command, report
from xsweep.search.closed_form import METRICS as CLOSED_FORM_METRICS
from xsweep.search.evaluation import PLAN_DIGEST, PLAN_TEXT, PLAN_WIRE, Job, Session, exact_feasible
from xsweep.search.folders import sweep_folder
from xsweep.search.funnel import Funnel
from xsweep.search.levels import Level, Status
from xsweep.search.locks import FolderLock, command_line
from xsweep.search.pareto import objective_matrix
from xsweep.search.progress import Progress, eta
from xsweep.search.space.grid import Grid, check_grid
from xsweep.search.space.planner import Built, Infeasible, Planner, plan_name
from xsweep.search.sweep.distributed import DaskExecutor, LocalExecutor
from xsweep.search.sweep.drawing import Drawer
from xsweep.search.sweep.plot import figure_of
from xsweep.search.sweep.processes import ProcessExecutor
from xsweep.search.sweep.results import answers, dataset_arrays, plan_ids
from xsweep.search.sweep.store import SweepFolder
from xsweep.search.sweep.summary import infeasible_lines, report_text, summary_of, work_label
from xsweep.search.sweep.units import bound_batch, bound_chunk, bound_walk, exact_batch
from xsweep.search.table import Table, concat, update
from xsweep.spec import load_catalog, load_sweep, plan_to_text, xsweep_pb2
from xsweep.spec.catalog import Catalog


@dataclass(frozen=True)
class Options(command.Options):
    """How to run a sweep (none of these change its answer); ``out_dir`` by default
    results/<sweep name>/sweep."""

    overwrite: bool = False
    scheduler: str | None = None  # a Dask scheduler address
    chunk_size: int | None = None  # points planned and bounded per unit (default below)
    max_round: int = 256  # points evaluated exactly (or lowered) per funnel round at most
    # best plans by closed form lowered in the first round of that tier, twice as many in
    # each round after
    lowered_top: int = 8
    bound_batch: int = 64  # points per unit of the closed-form tier's rounds
    exact_batch: int = 64  # points per exact unit
    exhaustive: bool = False  # evaluate every bounded point exactly (no pruning)
    # worker processes of the bound phase (default: one per core, when the work left
    # is long enough to pay for their start; given: started at once)
    processes: int | None = None
    platform: str | None = None  # "cpu" or "gpu" (an accelerator): default, the devices'


#: The layout of a sweep folder's work files: a folder of another format is another
#: run's (4: chunks hold the closed-form tier; lowered points come in rounds of their own;
#: 5: plan digests from what a plan is made of, not from its built bytes; 6: the closed
#: form counts the gradient collectives after the last backward; 7: finished chunks kept
#: several to a file), refused unless --overwrite.
FOLDER_FORMAT = 7
#: Points planned and bounded per unit by default: on a CPU host a unit is a worker
#: process's work; on an accelerator host units are planned here and their plans
#: prepared by worker processes for the device, whose kernel calls want thousands of
#: variants each (a unit's buildable points are a small share of its points).
CHUNK_SIZE = {"cpu": 1024, "gpu": 16384}
#: Seconds between two saves of the bound phase's finished chunks (one file each time,
#: and one when the phase ends or is interrupted): a file per chunk cost a few
#: milliseconds each, as much as planning a chunk of infeasible points; an interrupted
#: run loses this much work at most.
SAVE_EVERY_S = 1.0
#: The interpreter's switch interval (s) while worker processes plan beside this one:
#: the threads that take a worker's answer and hand it its next chunk wait this long at
#: most for the lock this process's own planning holds, instead of Python's 5 ms several
#: times a chunk (the worker idled a quarter of the large space's bound phase).
WORKERS_SWITCH_S = 0.0005


@dataclass
class Outcome(command.Outcome):
    """A finished sweep (:class:`xsweep.search.command.Outcome`), with its front tables as
    text (one per work group, in order) and whether it resumed an interrupted run."""

    front_text: str = ""
    resumed: bool = False


def plan_of(path: str | Path, index: int, catalog_files=()) -> Built | Infeasible:
    """The plan of point ``index`` of the sweep at ``path`` (or why it has none)."""
    catalog = load_catalog(catalog_files)
    sweep = load_sweep(path, catalog)
    check_grid(sweep, str(path))
    grid = Grid(sweep)
    if not 0 <= index < grid.size:
        raise InputError(str(path), "point", index, f"the grid has points 0..{grid.size - 1}")
    return Planner(sweep, catalog).plan(grid.point(index), plan_name(sweep, index))


def _host(options: Options, session: Session | None) -> tuple[str, Session, bool]:
    """The platform this process evaluates on, ``"cpu"`` or ``"gpu"``, the session it
    evaluates in, and whether the session's evaluator was made for this run (which closes
    it when it ends).

    A session given is used as it is: its evaluator's platform is the run's. Otherwise a
    CPU host where no accelerator can be (:func:`xsweep.runtime.accelerator_possible`)
    is known without starting JAX, which a sweep of infeasible points planned here alone
    never needs (planned beside workers, it loads JAX while they start); else
    the process's default evaluator finds the platform (made here, before any JAX
    computation, so a CPU host is split into its CPU devices). On an accelerator host
    this process is the device's one owner: units are planned here, their plans prepared
    by the evaluator's worker processes (on the CPU only, ``options.processes`` of them
    when given, in an evaluator of the run's own) and run on the device in large calls.
    ``options.platform`` gives an accelerator host's code path on a CPU (tests)."""
    if session is not None:
        platform = session.evaluator.platform
        if options.platform not in (None, platform):
            raise ValueError(f"the session evaluates on {platform!r}, the options ask for "
                             f"{options.platform!r}")
        return platform, session, False
    if options.platform is None and not accelerator_possible():
        return "cpu", Session(), False
    session = Session()
    platform = options.platform or session.evaluator.platform
    if session.evaluator.platform == platform and (platform == "cpu" or not options.processes):
        return platform, session, False
    from xsweep.evaluator import Evaluator

    return platform, Session(Evaluator(platform=platform, processes=options.processes)), True


def run_sweep(path: str | Path, options: Options = Options(),
              progress: Progress | None = None, timings: dict | None = None,
              session: Session | None = None, drawer: Drawer | None = None) -> Outcome:
    """Run (or resume) the sweep at ``path``; see the module docstring.

    Args:
      timings: filled as the work goes (so it is meaningful after an interruption too):
        seconds spent in ``planning_s``, ``bound_s``, ``exact_s``, ``writing_s``, and the
        ``points_bounded`` and ``points_exact`` computed by this run.
      session: what this process evaluates the units it runs in, and keeps results and
        compiled kernels in for the caller's later runs; by default one made for this
        run (see :func:`_host`). Not used with ``options.scheduler``: the cluster's
        workers evaluate every unit.
      drawer: what draws the Pareto plot, started by the caller as early as it can (the
        command line: before it imports this module); by default one started here. The
        run closes it.

    Raises:
      InputError: besides bad input, the output folder is another run's (refused unless
        ``options.overwrite``), an Optuna study's, or in use by another process (its lock,
        :mod:`xsweep.search.locks`, held for the whole run).
    """
    with contextlib.ExitStack() as held:
        # the plot's process imports matplotlib while the sweep runs (at a low priority: on
        # the cores the sweep leaves free)
        drawer = held.enter_context(contextlib.closing(drawer or Drawer()))
        return _run_sweep(path, options, progress, timings, session, held, drawer)


def _run_sweep(path: str | Path, options: Options, progress: Progress | None,
               timings: dict | None, session: Session | None,
               held: contextlib.ExitStack, drawer: Drawer) -> Outcome:
    """:func:`run_sweep`, the output folder's lock entered on ``held``."""
    began = time.perf_counter()
    show = progress.update if progress is not None else (lambda text, final=False: None)
    setup = command.set_up(path, options, whole_grid=True)
    text, sweep, catalog = setup.text, setup.sweep, setup.catalog
    grid = Grid(sweep)
    folder = SweepFolder(options.out_dir or sweep_folder(sweep.name, str(path)))
    # one run per folder: another is refused while this one holds it
    held.enter_context(FolderLock(folder.root, command_line("sweep", path)))
    platform, session, made = _host(options, session) if not options.scheduler else (
        "cpu", None, False)
    try:
        options = replace(options, platform=platform,
                          chunk_size=options.chunk_size or CHUNK_SIZE[platform])
        job = setup.job
        manifest = {
            "format": FOLDER_FORMAT, "sweep_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "catalog_version": job.catalog_version, "xsweep_version": xsweep.__version__,
            "chunk_size": options.chunk_size, "max_round": options.max_round,
            "exact_batch": options.exact_batch, "exhaustive": options.exhaustive,
            "lowered_top": options.lowered_top, "bound_batch": options.bound_batch,
            "dtype": options.dtype,
        }
        resumed = folder.claim(manifest, options.overwrite)
        timings = timings if timings is not None else {}
        for key in ("planning_s", "closed_form_s", "bound_s", "exact_s", "writing_s",
                    "points_bounded", "points_lowered", "points_exact"):
            timings.setdefault(key, 0)
        executor = (DaskExecutor(options.scheduler) if options.scheduler
                    else LocalExecutor(session))
        try:
            table = _bound_phase(grid, folder, job, executor, options, timings, show)
            funnel = _funnel_phase(table, grid, folder, job, executor, options, timings, show)
        finally:
            executor.close()
    finally:
        if made:  # what the run made it closes: its worker processes end with it
            session.evaluator.close()
    finishing = time.perf_counter()
    summary, tables = _publish(table, funnel, sweep, catalog, grid, folder, drawer, {
        "sweep_name": sweep.name, "sweep_file": str(path), "sweep_yaml": text,
        "catalog_version": manifest["catalog_version"], "xsweep_version": xsweep.__version__,
        "objectives": list(sweep.objectives), "top": sweep.validation.top,
        "dtype": options.dtype})
    timings["writing_s"] += time.perf_counter() - finishing
    timings["total_s"] = time.perf_counter() - began
    summary["timings"] = {k: round(v, 3) for k, v in timings.items()}
    tiers = summary["tiers"]
    show(f"done: {grid.size:,} points, {tiers['closed_form']:,} planned, {tiers['bound']:,} "
         f"lowered and bounded, {tiers['exact']:,} evaluated exactly; "
         f"{int(funnel.pruned.sum()):,} pruned, in {timings['total_s']:.1f} s; "
         f"results in {folder.root}", final=True)
    empty = [g for g in summary["groups"] if not g["front"]]
    problem = "; ".join((f"{work_label(g['work'])}: " if g["work"] else "")
                        + infeasible_lines(g)[0] for g in empty)
    return Outcome(folder.root, summary, report_text(summary, tables), problem, timings,
                   front_text="\n\n".join(tables), resumed=resumed)


def _publish(table: Table, funnel: Funnels, sweep, catalog: Catalog, grid: Grid,
             folder: SweepFolder, drawer: Drawer, attrs: dict) -> tuple[dict, list[str]]:
    """Mark the pruned points, find the answer of each work group and write every output;
    return the summary and each group's front table as text."""
    table["status"][funnel.pruned] = Status.PRUNED
    found = answers(table, grid, sweep.objectives, sweep.validation.top)
    drawer.send(figure_of(table, grid, sweep.objectives, found, sweep.name))  # drawn meanwhile
    software = [catalog.software_profile(name).record() for name in sweep.training.software]
    summary = {"sweep": sweep.name, "software": software,
               **summary_of(table, grid, sweep, found),
               "rounds": funnel.rounds, "closed_form_rounds": funnel.closed_form_rounds,
               "outputs": {name: str(folder.path(name)) for name in
                           ("sweep.zarr", "pareto.png", "pareto.csv", "summary.json", "plans")}}
    shown = sorted({int(i) for a in found
                    for i in (*a.front, *(j for t in a.top.values() for j in t))})
    plans = _answer_plans(table, shown, sweep, catalog, grid)
    pools = [p.gpu for p in sweep.cluster.pools]
    axes = [(grid.names[path], report.axis_label(path, pools)) for path in grid.dims]
    within = [axis for path, axis in zip(grid.dims, axes, strict=True) if path not in grid.work]
    # a group's table leaves out its work axes, which its heading names
    tables = [report.format_table(report.front_table(g["front"], within,
                                                     objectives=sweep.objectives))
              for g in summary["groups"]]
    rows = [row for g in summary["groups"] for row in g["front"]]
    attrs = attrs | {"evaluated_exactly": summary["evaluated_exactly"], "fronts": sweep.fronts,
                     **{f"tier_{name}": count for name, count in summary["tiers"].items()},
                     "work_axes": [grid.names[path] for path in grid.work],
                     "software": ", ".join(entry["name"] for entry in software)}
    folder.publish(dataset_arrays(grid, table, attrs),
                   {"pareto.csv": report.csv_text(rows, [key for key, _ in axes],
                                                  objectives=sweep.objectives).encode(),
                    "pareto.png": drawer.png,  # taken last: drawn while the rest is written
                    "summary.json": (json.dumps(jsonable(summary), indent=2, allow_nan=False)
                                     + "\n").encode()},
                   {f"point-{i}.pbtxt": text for i, text in plans.items()})
    return summary, tables


def _answer_plans(table: Table, shown: list[int], sweep, catalog: Catalog,
                  grid: Grid) -> dict[int, str]:
    """The plans of the points ``shown`` in protobuf text: as their exact units kept them
    (:data:`~xsweep.search.evaluation.PLAN_WIRE`; an earlier version's units,
    :data:`~xsweep.search.evaluation.PLAN_TEXT`), planned here only where a unit of a
    much earlier version, resumed, kept none."""
    wire, text = table.get(PLAN_WIRE), table.get(PLAN_TEXT)
    planner = Planner(sweep, catalog)
    out = {}
    for i in shown:
        if wire is not None and wire[i]:
            out[i] = plan_to_text(xsweep_pb2.DeploymentPlan.FromString(base64.b64decode(wire[i])))
        elif text is not None and text[i]:
            out[i] = str(text[i])
        else:
            out[i] = plan_to_text(planner.plan(grid.point(i), plan_name(sweep, i)).plan)
    return out


def _add(timings: dict, more: dict) -> None:
    for key, value in more.items():
        timings[key] = timings.get(key, 0) + value


def _bound_phase(grid: Grid, folder: SweepFolder, job: Job, executor, options: Options,
                 timings: dict, show: Callable) -> Table:
    walk = bound_walk(job.sweep)
    chunks = walk.chunks(options.chunk_size)
    kept = folder.load_bound({c: walk.points(*c) for c in chunks})
    found = {c: _current(kept.get(c)) for c in chunks}
    level = first_level(job.sweep)
    todo = [(c, (*c, level)) for c in chunks if found[c] is None]
    reused = len(chunks) - len(todo)
    if reused:
        show(f"resuming: {reused} of {len(chunks)} chunks already planned and bounded", final=True)
    started, done_points = time.perf_counter(), 0
    left = sum(stop - start for (start, stop), _ in todo)
    buildable = sum(int(np.sum(t["level"] != Level.NONE)) for t in found.values() if t is not None)
    units = executor
    processes = min(len(todo), options.processes or usable_cores())
    if isinstance(executor, LocalExecutor) and processes > 1 and options.platform == "cpu":
        # whole chunks on a worker process per core: planning runs in parallel too, and
        # no chunk waits for another's slowest share. Chunks planned to the closed form
        # evaluate nothing: unless worker processes were asked for, this process plans
        # them too, on a core of its own beside one worker fewer, once it has loaded its
        # evaluator (JAX, for the funnel's lowered points) while the workers start (they
        # load none to plan)
        helps = level == Level.CLOSED_FORM and options.processes is None
        session = executor.session
        units = ProcessExecutor(max(1, processes - 1) if helps else processes,
                                session if helps else None,
                                prepare=(lambda: session.evaluator) if helps else None)
    switch = sys.getswitchinterval()
    if units is not executor:
        sys.setswitchinterval(min(switch, WORKERS_SWITCH_S))
    unsaved: list[tuple[int, int, Table]] = []
    saved = time.perf_counter()

    def save() -> None:  # the chunks finished since the last save, in one file
        nonlocal unsaved, saved
        saving = time.perf_counter()
        folder.save_bound(unsaved)
        unsaved, saved = [], time.perf_counter()
        _add(timings, {"writing_s": saved - saving})

    try:
        for (start, stop), (table, spent) in units.run(bound_chunk, job, todo):
            unsaved.append((start, stop, table))
            if time.perf_counter() - saved >= SAVE_EVERY_S:
                save()
            found[(start, stop)] = table
            _add(timings, spent | {"points_bounded": stop - start})
            done_points += stop - start
            elapsed = time.perf_counter() - started
            buildable += int(np.sum(table["level"] != Level.NONE))
            show(f"planned {grid.size - left + done_points:,}/{grid.size:,} points "
                 f"({buildable:,} buildable, bounded "
                 f"{'in closed form' if level == Level.CLOSED_FORM else 'by the kernels'}), "
                 f"{done_points / elapsed:,.0f} points/s, "
                 f"ETA {eta(done_points, left, elapsed)}", final=done_points == left)
    finally:
        sys.setswitchinterval(switch)
        if units is not executor:
            units.close()
        save()  # what finished is kept, however the loop ended (an interrupt, say)
    table = concat([found[c] for c in chunks])  # in the walk's order: back to the grid's
    order = np.argsort(table["point"])  # once, not per column
    return {name: values[order] for name, values in table.items()}


def _current(table: Table | None) -> Table | None:
    """A table a run kept, if it holds every column this version writes (an older
    version's tables, without the plans' digests, are computed again)."""
    return table if table is not None and PLAN_DIGEST in table else None


@dataclass
class Funnels:
    """How the tiers' funnels ended: the points they pruned (at the closed form or at the
    bound level) and the rounds each ran."""

    pruned: np.ndarray
    rounds: int = 0  # exact rounds
    closed_form_rounds: int = 0


def first_level(sweep) -> Level:
    """The level a sweep's chunks are planned to: the closed form where it bounds every
    objective (:data:`xsweep.search.closed_form.METRICS`), else the bound level, as every
    point would be lowered anyway (a NaN closed form prunes nothing)."""
    known = set(CLOSED_FORM_METRICS)
    return (Level.CLOSED_FORM if all(name in known for name in sweep.objectives)
            else Level.BOUND)


def _funnel_phase(table: Table, grid: Grid, folder: SweepFolder, job: Job, executor,
                  options: Options, timings: dict, show: Callable) -> Funnels:
    """The closed-form tier's funnel around the exact one (:mod:`xsweep.search.funnel`).

    Each round lowers and bounds the points whose closed form could still reach the
    answer (the front of their closed-form values and their ``lowered_top`` best plans,
    per work group, twice as many best plans each round), then runs the exact funnel over every bounded point to its end; the
    exact results prune the points still at the closed form, as they prune bounded ones.
    The closed form is a lower bound on the bound level and so on the exact one: a point
    pruned at either tier can change no front and no top point."""
    sweep = job.sweep
    groups, plans = grid.group_of(table["point"]), plan_ids(table)
    cheap = Funnel(objective_matrix(table, sweep.objectives),
                   (table["level"] == Level.CLOSED_FORM) & (table["status"] == Status.OK),
                   sweep.validation.top, options.max_round, options.exhaustive,
                   groups=groups, plans=plans, pick_top=options.lowered_top, grow=True)
    out = Funnels(np.zeros(len(table["point"]), bool))
    bound_pruned = out.pruned
    if first_level(sweep) == Level.BOUND:  # every point bounded already: the exact funnel alone
        out.pruned = _exact_phase(table, grid, folder, job, executor, options, timings, show,
                                  out)
        return out
    while len(picks := cheap.next_round()):
        show(f"closed-form round {cheap.rounds}: lowering and bounding {len(picks):,} "
             "points")
        batches = [picks[i: i + options.bound_batch]
                   for i in range(0, len(picks), options.bound_batch)]
        found = {b: _current(folder.load_exact(cheap.rounds, b, points, "lowered"))
                 for b, points in enumerate(batches)}
        todo = [(b, (batches[b],)) for b, got in found.items() if got is None]
        for b, (rows, spent) in executor.run(bound_batch, job, todo):
            saving = time.perf_counter()
            folder.save_exact(cheap.rounds, b, rows, "lowered")
            found[b] = rows
            _add(timings, spent | {"writing_s": time.perf_counter() - saving,
                                   "points_lowered": len(rows["point"])})
        for b in range(len(batches)):
            update(table, found[b])
        bound_pruned = _exact_phase(table, grid, folder, job, executor, options, timings, show,
                                    out, plans)
        done = exact_feasible(table)[picks]
        values = objective_matrix(table, sweep.objectives)[picks]
        cheap.record(picks, values, done)
        cheap.prune()
        show(f"closed-form round {cheap.rounds} done (its points' exact rounds above): "
             f"{len(picks):,} points lowered and bounded; "
             f"{int(cheap.evaluated.sum()):,} lowered, {int(cheap.pruned.sum()):,} pruned "
             f"at the closed form, {int(cheap.remaining.sum()):,} left", final=True)
    out.closed_form_rounds = cheap.rounds
    out.pruned = cheap.pruned | bound_pruned
    return out


def _exact_phase(table: Table, grid: Grid, folder: SweepFolder, job: Job, executor,
                 options: Options, timings: dict, show: Callable, out: Funnels,
                 plans: np.ndarray | None = None) -> np.ndarray:
    """The exact funnel, one per work group (:mod:`xsweep.search.funnel`), each plan once
    among the top points, over every bounded point, the exact results so far recorded;
    its rounds are numbered on from ``out.rounds``. Returns the points it pruned.

    ``plans``: the points' :func:`plan_ids`, where the caller has them (a point's plan,
    and so its digest, is the same at every level: lowering it changes neither)."""
    sweep = job.sweep
    plans = plan_ids(table) if plans is None else plans
    done = table["level"] == Level.EXACT
    candidates = ((table["level"] == Level.BOUND) & (table["status"] == Status.OK)) | done
    funnel = Funnel(objective_matrix(table, sweep.objectives), candidates,
                    sweep.validation.top, options.max_round, options.exhaustive,
                    groups=grid.group_of(table["point"]), plans=plans)
    known = np.flatnonzero(done)
    funnel.record(known, objective_matrix(table, sweep.objectives)[known],
                  exact_feasible(table)[known])
    while len(picks := funnel.next_round()):
        out.rounds += 1
        batches = [picks[i: i + options.exact_batch]
                   for i in range(0, len(picks), options.exact_batch)]
        found = {b: _current(folder.load_exact(out.rounds, b, points))
                 for b, points in enumerate(batches)}
        todo = [(b, (batches[b],)) for b, got in found.items() if got is None]
        for b, (rows, spent) in executor.run(exact_batch, job, todo):
            saving = time.perf_counter()
            folder.save_exact(out.rounds, b, rows)
            found[b] = rows
            _add(timings, spent | {"writing_s": time.perf_counter() - saving,
                                   "points_exact": len(rows["point"])})
        for b in range(len(batches)):
            rows = found[b]
            update(table, rows)
            funnel.record(rows["point"], objective_matrix(rows, sweep.objectives),
                          exact_feasible(rows))
        funnel.prune()
        show(f"exact round {out.rounds}: {len(picks):,} points "
             f"({len(todo)} of {len(batches)} batches computed); "
             f"{int(funnel.evaluated.sum()):,} exact, {int(funnel.pruned.sum()):,} pruned, "
             f"{int(funnel.remaining.sum()):,} left", final=True)
    return funnel.pruned
