"""Planning and evaluating points, in any process: the job every unit of a search shares,
the session a process evaluates in, and :func:`evaluate_points`, which plans points and
evaluates the buildable ones.

:func:`evaluate_points` returns a :class:`~xsweep.search.table.Table` (one row per point)
and the seconds it spent planning and evaluating. Infeasible points get their reason and
level :attr:`~xsweep.search.levels.Level.NONE`; a point with a plan gets its
:func:`plan_digest` (column ``plan_digest``), equal for points that build the same plan
under the same pricing.

What a process evaluates it keeps from call to call in a :class:`Session`, an object its
owner makes and passes to every call: its :class:`~xsweep.evaluator.Evaluator` (program
structures and compiled kernels are reused; it streams a call's plans in chunks, over
worker processes where a call is large enough) and the results of the plans it
evaluated, as the evaluator gives them (columns, never a Dataset), in one table with a
row per plan. The owners: a sweep's run for the units it runs itself, each of the sweep's
worker processes (:mod:`xsweep.search.sweep.processes`), each Dask worker
(:mod:`xsweep.search.sweep.distributed`) and a study's run. Points that plan to the same
plan under the same pricing are evaluated once and share the result, within a call and
across the calls of one session (a pool with no nodes makes its NIC and TP axes
irrelevant, so most large grids repeat plans). Which points share a call changes a
result by float32 rounding at most (the padded shape a plan lands in).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from xsweep import metrics
from xsweep.memo import Memo
from xsweep.search.closed_form import (
    Bound,
    Links,
    bound_parts,
    bound_seconds,
    cluster_rates_of,
    links_of,
    metric_arrays,
)
from xsweep.search.levels import CODE_DTYPE, Level, Status
from xsweep.search.space.grid import Point
from xsweep.search.space.planner import Identified, Planner, planner_for
from xsweep.search.space.screen import Screened
from xsweep.search.table import Table, blank, from_rows
from xsweep.spec.catalog import Catalog
from xsweep.spec.resolve import resolve_model, resolve_nodes
from xsweep.spec.sweep import Sweep

#: Variables of an evaluation that describe its batch, not a point.
BATCH_DIAGNOSTICS = ("padding_overhead",)
#: The metrics every table has (every plan-level figure of the metrics table), NaN (or
#: False for flags) where a point was not evaluated, so a chunk, or a whole sweep,
#: without a buildable point has the same variables as any other.
METRICS = metrics.plan_names()
#: The memory metric, which the planner knows before any evaluation.
MEMORY_METRIC = "memory_per_gpu_gib"
#: The column of each point's :func:`plan_digest` ("" where the point has no plan).
PLAN_DIGEST = "plan_digest"
#: The column of a point's plan in the protobuf wire format, base64-encoded, where a table
#: carries plans (a sweep's exact points: its answer's plans are written from it, never
#: planned again); "" where the point has none. Not a variable of any dataset. Encoding a
#: plan so costs microseconds; its text (milliseconds for a plan of hundreds of device
#: groups) is made only for the few plans an answer shows.
PLAN_WIRE = "plan_wire"
#: The column earlier versions kept plans in, as protobuf text (a resumed run's tables).
PLAN_TEXT = "plan_pbtxt"
#: The columns that carry plans.
PLAN_COLUMNS = (PLAN_WIRE, PLAN_TEXT)


#: Plan results a session keeps at most (a few kilobytes each: about 100 MB in all).
MAX_KEPT_RESULTS = 1 << 15


def catalog_version(catalog: Catalog) -> str:
    """A digest of every entry of every catalog section (GPUs, NICs, links, models,
    software profiles): equal digests, equal hardware, models and profiles."""
    sections = [f.name for f in dataclasses.fields(catalog) if not f.name.startswith("_")]
    content = {kind: {name: dataclasses.asdict(spec)
                      for name, spec in sorted(getattr(catalog, kind).items())}
               for kind in sections}
    text = json.dumps(content, sort_keys=True)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Job:
    """What every call of one sweep's search needs (its units, a study's batches): sent once
    to each worker."""

    sweep: Sweep
    catalog: Catalog
    dtype: str = "float32"
    catalog_version: str = dataclasses.field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "catalog_version", catalog_version(self.catalog))


class Session:
    """What one process keeps between the calls it evaluates: an Evaluator and the results
    of the plans it evaluated, by plan, pricing, level, dtype and catalog, as one table
    (a row per plan, :class:`ResultStore`).

    Args:
      evaluator: what it evaluates with; by default the process's default evaluator
        (:func:`xsweep.evaluator.default_evaluator`), taken when first needed, so a session
        that never evaluates never loads JAX.
      make_evaluator: without ``evaluator``, what makes it when first needed instead of
        the default (a worker's own evaluator, say).
      kept_results: the most plans' results kept (:class:`ResultStore`'s limit).
    """

    def __init__(self, evaluator=None, make_evaluator=None,
                 kept_results: int = MAX_KEPT_RESULTS):
        self._evaluator = evaluator
        self._make = make_evaluator
        self._results = ResultStore(kept_results)
        self._lock = threading.RLock()  # threads of one process may share a session

    @property
    def evaluator(self):
        """What this session evaluates with (the default evaluator made on first use)."""
        with self._lock:
            if self._evaluator is None:
                from xsweep.evaluator import default_evaluator  # JAX loads only where it evaluates

                self._evaluator = (self._make or default_evaluator)()
            return self._evaluator

    def results(self, job: Job, plans: dict[bytes, object], cost, level: str,
                timings: dict[str, float], progress=None,
                next_level: str | None = None) -> Table:
        """Each plan's results (``plans``: plan key -> plan), a row per plan in order,
        evaluating only those this session has not; adds where the time went to
        ``timings``; ``progress`` is the evaluator's (``progress(done, total)`` over the
        plans evaluated); ``next_level``: the level some of them are evaluated at next
        (the evaluator's ``evaluate_columns``)."""
        keys = [(hashlib.blake2b(key, digest_size=16).digest(), cost, level, job.dtype,
                 job.catalog_version) for key in plans]
        with self._lock:
            todo = [i for i, key in enumerate(keys) if key not in self._results]
            if todo:
                found = list(plans.values())
                columns, seconds = self.evaluator.evaluate_columns(
                    [found[i] for i in todo], level, catalog=job.catalog, cost=cost,
                    dtype=job.dtype, progress=progress, next_level=next_level)
                for stage in ("prepare_s", "kernels_s", "results_s", "compile_s"):
                    name = f"{level}_{stage}"
                    timings[name] = timings.get(name, 0.0) + seconds[stage]
                new = set(todo)
                self._results.add([keys[i] for i in todo], from_rows(
                    {name: values for name, values in columns.items()
                     if values.ndim == 1 and name not in _NOT_KEPT}),
                    keep=[key for i, key in enumerate(keys) if i not in new])
            return self._results.get(keys)


#: Columns of an evaluator's results a session does not keep: a plan's name (each point
#: has its own), and what describes the batch rather than the plan.
_NOT_KEPT = ("name", *BATCH_DIAGNOSTICS)


class ResultStore:
    """Rows of results by key, as one table whose columns grow by doubling; emptied when
    more than ``limit`` rows would be kept (but for the rows a caller still needs)."""

    def __init__(self, limit: int):
        self.limit = limit
        self._row: dict[tuple, int] = {}
        self._columns: dict[str, np.ndarray] = {}

    def __contains__(self, key: tuple) -> bool:
        return key in self._row

    def add(self, keys: list[tuple], rows: Table, keep: list[tuple] = ()) -> None:
        """Keep ``rows`` (one per key, columns of every call alike) under ``keys``. When
        that would keep more than ``limit`` rows, the others are let go first, but for
        those of ``keep`` (kept keys the caller reads next)."""
        if len(self._row) + len(keys) > self.limit:
            kept = self.get(list(keep)) if keep else None
            self._row.clear()
            if kept is not None:
                self.add(list(keep), kept)
        begin = len(self._row)
        end = begin + len(keys)
        for name, values in rows.items():
            column = self._columns.get(name)
            if column is None or len(column) < end:
                grown = np.empty(max(end, 2 * begin, 64), values.dtype)
                if column is not None:
                    grown[:begin] = column[:begin]
                self._columns[name] = column = grown
            column[begin:end] = values
        self._row.update(zip(keys, range(begin, end), strict=True))

    def get(self, keys: list[tuple]) -> Table:
        """The rows of ``keys`` (each kept), in order."""
        index = np.fromiter((self._row[key] for key in keys), np.int64, len(keys))
        return Table({name: column[index] for name, column in self._columns.items()})


def _blank_metrics(n: int) -> dict[str, np.ndarray]:
    return {name: np.zeros(n, bool) if metrics.metric_of(name).unit == "bool"
            else np.full(n, np.nan) for name in METRICS}


@dataclass
class _Planned:
    """What planning a call's points found: per pricing, each distinct plan's rows; each
    plan, by key, as the planner knows it (:class:`~xsweep.search.space.planner.Identified`)
    and its first point, from which it is built where a level needs it; each plan's
    layout rank (the rank of its layout's first plan)."""

    planner: Planner
    groups: dict[object, dict[bytes, list[int]]] = dataclasses.field(default_factory=dict)
    # each plan as the planner knows it, with the first point (and its name) that has it
    known: dict[bytes, tuple[Identified, Point, str]] = dataclasses.field(default_factory=dict)
    layout_of: dict[bytes, int] = dataclasses.field(default_factory=dict)
    keys: dict[int, bytes] = dataclasses.field(default_factory=dict)  # row -> plan key
    # the closed form's memo: by layout (and what else its parts read: shared_by), the
    # iteration bound's parts, the tokens of an iteration and the tokens in all
    lower_bounds: dict[tuple, tuple[Bound, float, float]] = dataclasses.field(
        default_factory=dict)
    _plans: dict[bytes, object] = dataclasses.field(default_factory=dict)

    def plan(self, key: bytes):
        """The plan of ``key``, built once (named as its first point)."""
        plan = self._plans.get(key)
        if plan is None:
            _, point, name = self.known[key]
            plan = self._plans[key] = self.planner.plan(point, name).plan
        return plan


#: What the closed form reads of a cluster's NICs (:class:`~xsweep.search.closed_form.Links`)
#: by catalog and cluster, kept across a process's units as the prices are.
_LINKS: Memo[tuple, Links] = Memo(16384)
#: Cluster prices (capex, hourly rate) by catalog, pricing and cluster (its message's
#: bytes), kept across a process's units: a sweep's chunks meet the same mixes of nodes
#: and NICs again and again (the large space: about 3,300 prices asked, a third distinct).
_PRICES: Memo[tuple, tuple[float, float]] = Memo(16384)


def evaluate_points(session: Session, job: Job, numbers: np.ndarray, points: Iterable[Point],
                    names: Sequence[str], level: str | Level, planner: Planner | None = None,
                    progress=None, screened: Screened | None = None,
                    built: dict[int, object] | None = None,
                    next_level: str | None = None) -> tuple[Table, dict[str, float]]:
    """Plan ``points`` (one row each, column ``point`` = ``numbers``, plans named ``names``)
    and evaluate the buildable ones at ``level`` in ``session``, each distinct plan once;
    ``planner`` (one of ``job``'s sweep) keeps its layouts between calls; ``progress`` is
    called as the evaluator's is, ``progress(done, total)``, per pricing of the points.

    ``screened``: the verdicts of the grid's arrays on these points
    (:func:`xsweep.search.space.screen.screen`); the points they prove infeasible take
    their reason and memory, and ``points`` and ``names`` then hold only the others
    (``screened.to_plan``, in order).

    ``built``: filled with the plan of each buildable row (row -> plan, named as the
    row's point), for a caller that uses the plans too (and so never plans them again).

    ``next_level``: the level the caller evaluates some of these points at next (a
    funnel's), whose kept kernels start loading meanwhile (:meth:`Session.results`)."""
    level = Level[str(level).upper()] if isinstance(level, str) else Level(level)
    began = time.perf_counter()
    planner = planner or planner_for(job.sweep, job.catalog)
    n = len(numbers)
    rows = {"point": np.asarray(numbers),
            "level": np.full(n, Level.NONE, CODE_DTYPE),
            "status": np.full(n, Status.INFEASIBLE, CODE_DTYPE), "feasible": np.zeros(n, bool),
            "reason": np.full(n, "", object), PLAN_DIGEST: np.full(n, "", object),
            **_blank_metrics(n)}
    planned_rows: Iterable[int] = range(n)
    if screened is not None:
        rows["reason"][screened.infeasible] = screened.reason[screened.infeasible]
        rows[MEMORY_METRIC][:] = screened.memory_gib
        planned_rows = screened.to_plan.tolist()
    found = _plan_rows(planner, rows, planned_rows, points, names)
    if built is not None:
        built.update(_named_plans(found, dict(zip(planned_rows, names, strict=True))))
    planned = time.perf_counter()
    timings = {"planning_s": planned - began, f"{level.label}_s": 0.0}
    for cost, by_plan in found.groups.items():
        # Plans of one layout side by side: those that differ only in numbers (NICs, say)
        # then share a worker process, which lowers their structure once.
        ordered = sorted(by_plan, key=found.layout_of.__getitem__)
        results = _results(session, job, found, ordered, cost, level, timings, progress,
                           next_level)
        members = [by_plan[key] for key in ordered]
        take = np.concatenate([np.full(len(m), i) for i, m in enumerate(members)])
        where = np.concatenate([np.asarray(m) for m in members])
        for name, values in results.items():  # per-stream detail stays with single plans
            if name not in rows:
                rows[name] = blank(values, n)
            rows[name][where] = values[take]
        rows["level"][where] = level
    timings[f"{level.label}_s"] = time.perf_counter() - planned
    return from_rows(rows), timings


def _plan_rows(planner: Planner, rows: dict[str, np.ndarray], planned_rows: Iterable[int],
               points: Iterable[Point], names: Sequence[str]) -> _Planned:
    """Plan each row of ``planned_rows``, filling its memory, reason and digest in ``rows``;
    a variant met before is not planned again, and no plan is built here (a level that
    needs one builds it: :meth:`_Planned.plan`)."""
    found = _Planned(planner)
    digests: dict[tuple, str] = {}
    layouts: dict[tuple, int] = {}  # the rank of each layout's first point
    variants: dict[tuple, tuple[bytes, float]] = {}  # a variant's plan key and memory
    for row, point, name in zip(planned_rows, points, names, strict=True):
        variant = planner.variant(point)
        if variant in variants:  # the same plan as an earlier point's: not planned again
            key, rows[MEMORY_METRIC][row] = variants[variant]
            cost = planner.cost_model(point)
        else:
            out = planner.identify(point)
            rows[MEMORY_METRIC][row] = out.memory_per_gpu_gib
            if not isinstance(out, Identified):
                rows["reason"][row] = out.reason
                continue
            key, cost = out.key, out.cost
            variants[variant] = (key, out.memory_per_gpu_gib)
            found.known.setdefault(key, (out, point, name))
            found.layout_of.setdefault(key, layouts.setdefault(out.layout, len(layouts)))
        found.groups.setdefault(cost, {}).setdefault(key, []).append(row)
        found.keys[row] = key
        rows[PLAN_DIGEST][row] = _digest(digests, key, cost)
    return found


def _named_plans(found: _Planned, names: dict[int, str]) -> dict[int, object]:
    """Each planned row's plan under its own name (a plan shared with an earlier row is
    copied, renamed)."""
    out = {}
    for row, key in found.keys.items():
        plan = first = found.plan(key)
        if plan.name != names[row]:
            plan = type(plan)()
            plan.CopyFrom(first)
            plan.name = names[row]
        out[row] = plan
    return out


def _results(session: Session, job: Job, found: _Planned, ordered: list[bytes], cost,
             level: Level, timings: dict[str, float], progress,
             next_level: str | None = None) -> Table:
    """The results of the plans ``ordered`` (keys of ``found``) at ``level``, a row each."""
    if level != Level.CLOSED_FORM:
        return session.results(job, {key: found.plan(key) for key in ordered}, cost,
                                level.label, timings, progress, next_level)
    # arithmetic on each plan: nothing lowered
    return _closed_form_table(job, found, ordered, cost)


def _closed_form_table(job: Job, found: _Planned, ordered: list[bytes], cost) -> Table:
    """The closed-form metrics of the plans ``ordered``, a row each: a plan's iteration
    bound is its layout's parts (``found.lower_bounds`` keeps them by layout and by the
    per-point fields they read, ``Identified.shared``: none without expert parallelism,
    as :func:`~xsweep.search.closed_form.shared_by` says) on its cluster's NICs
    (:data:`_LINKS` keeps them by catalog and cluster) and its DP overlap, a layout's
    points in one pass; its cluster's price that of its nodes' GPUs and NICs
    (:data:`_PRICES` keeps it by catalog, pricing and cluster), its tokens per iteration
    and in all its layout's (model, global batch, the sweep's tokens); the metrics are
    then arithmetic on arrays. A plan is built only where one of these is asked for the
    first time."""
    n = len(ordered)
    tokens, total = np.empty(n), np.empty(n)
    capex, rate = np.empty(n), np.empty(n)
    bounds, links, overlapped = [], [], []
    for i, key in enumerate(ordered):
        known = found.known[key][0]
        layout = (found.layout_of[key], known.shared)
        bound = found.lower_bounds.get(layout)
        if bound is None:
            plan = found.plan(key)
            model = resolve_model(plan, job.catalog)
            bound = found.lower_bounds[layout] = (
                bound_parts(plan, job.catalog),
                float(plan.training.global_batch_size * model.seq_length),
                plan.training.total_tokens)
        bounds.append(bound[0])
        overlapped.append(known.dp_overlap)
        links.append(_LINKS.get((job.catalog_version, known.cluster), lambda key=key: links_of(
            resolve_nodes(found.plan(key).cluster, job.catalog))))
        tokens[i], total[i] = bound[1], bound[2]
        capex[i], rate[i] = _PRICES.get(
            (job.catalog_version, cost, known.cluster),
            lambda key=key: cluster_rates_of(found.plan(key), job.catalog, cost))
    seconds = bound_seconds(bounds, links, overlapped)  # a layout's points at once
    table = from_rows(metric_arrays(seconds, tokens, total, capex, rate))
    table["status"] = np.full(n, Status.OK, CODE_DTYPE)
    table["feasible"] = np.ones(n, bool)
    return table


def plan_digest(key: bytes, cost) -> str:
    """The digest of a plan's key and its pricing (a ``CostModel``), in hex: points with
    equal digests build the same plan and have the same results. A sweep's points are
    keyed by what their plans are made of (``Identified.key`` of
    :mod:`xsweep.search.space.planner`), not by the plans' bytes (:func:`plan_key`), which
    only a plan built gives."""
    return hashlib.blake2b(key + repr(cost).encode(), digest_size=12).hexdigest()


def _digest(memo: dict[tuple, str], key: bytes, cost) -> str:
    found = memo.get((key, cost))
    if found is None:
        found = memo[(key, cost)] = plan_digest(key, cost)
    return found


def plan_key(plan) -> bytes:
    """The plan's bytes without its name: equal keys, equal results."""
    name, plan.name = plan.name, ""
    key = plan.SerializeToString(deterministic=True)
    plan.name = name
    return key


def plan_ids(table: Table) -> np.ndarray:
    """int64[n]: an id per point, equal for points that build the same plan under the same
    pricing (equal ``plan_digest``), -1 where a point has no plan."""
    digests = table[PLAN_DIGEST]
    ids = np.full(len(digests), -1, np.int64)
    built = np.flatnonzero(digests != "")
    if len(built):
        ids[built] = np.unique(digests[built].astype(str), return_inverse=True)[1]
    return ids


def exact_feasible(table: Table) -> np.ndarray:
    """``bool[n]``: points evaluated exactly with a feasible, converged result."""
    return (table["level"] == Level.EXACT) & table["feasible"] & (table["status"] == Status.OK)
