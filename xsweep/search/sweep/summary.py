"""What a finished sweep tells the user: the summary document (``summary.json``, what
``--json`` prints; its layout is described in ``results/README.md``) and the text the
command prints: per work group its front table and best plans, or, where no point is
feasible, how many points fail for which kind of reason and the nearest misses."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from xsweep import metrics
from xsweep.search import report
from xsweep.search.evaluation import MEMORY_METRIC, PLAN_DIGEST, exact_feasible
from xsweep.search.levels import Level, Status, names
from xsweep.search.space.grid import Grid
from xsweep.search.space.planner import MEMORY_NUMBERS, REASON_KINDS, reason_kind, unused_axes
from xsweep.search.sweep.results import Answer, axis_attrs
from xsweep.search.table import Table
from xsweep.spec.catalog import describe_software
from xsweep.spec.sweep import Sweep

#: The layout of summary.json (2: one entry per work group in ``groups``).
SUMMARY_FORMAT = 2
#: Nearest misses listed per work group without a feasible point.
NEAREST_MISSES = 3
#: Statuses of points that are feasible (at their level).
_FEASIBLE = (Status.OK, Status.PRUNED)


def point_row(table: Table, grid: Grid, sweep: Sweep, index: int, objectives=(),
              same: list[int] | None = None) -> dict:
    """One point's metrics of the front table's columns
    (:func:`xsweep.search.report.columns`), its swept axes' values by the dataset's names
    (``None`` for an axis that does not apply to its plan:
    :func:`xsweep.search.space.planner.unused_axes`), its plan digest and the other
    points that build the same plan (JSON-ready)."""
    row: dict = {"point": int(index), "same_plan": list(same or [])}
    for name, _, _ in report.columns(objectives):
        if name in table:
            value = float(table[name][index])
            row[name] = value if math.isfinite(value) else None
    row[PLAN_DIGEST] = str(table[PLAN_DIGEST][index])
    point = grid.point(index)
    unused = unused_axes(sweep, point)
    row["axes"] = {grid.names[path]: None if path in unused else _plain(point[path])
                   for path in grid.dims}
    return row


def summary_of(table: Table, grid: Grid, sweep: Sweep, found: list[Answer]) -> dict:
    """The summary document (JSON-ready): counts, the axes and metrics it names (with their
    units), and one entry per work group with its front, top plans and infeasible points."""
    objectives = list(sweep.objectives)
    level = table["level"]
    bounded = int(np.sum((level == Level.BOUND) | (level == Level.EXACT)))
    exact = int(np.sum(level == Level.EXACT))
    groups = grid.group_of(table["point"])
    entries = [_group(table, grid, sweep, answer, groups == answer.group) for answer in found]
    shown = [name for name, _, _ in report.columns(objectives) if name in table]
    return {
        "format": SUMMARY_FORMAT,
        "points": grid.size,
        "status": _counts(table["status"], Status),
        "level": _counts(table["level"], Level),
        "evaluated_exactly": exact,
        "tiers": {"planned": grid.size, Level.CLOSED_FORM.label: int(np.sum(level != Level.NONE)),
                  Level.BOUND.label: bounded, Level.EXACT.label: exact},
        "exact_share_of_bounded": exact / bounded if bounded else 0.0,
        "objectives": objectives,
        "fronts": sweep.fronts,
        "work_axes": [grid.names[path] for path in grid.work],
        "axes": {grid.names[path]: {**axis_attrs(path), "values": [_plain(v) for v in values],
                                    "work": path in grid.work}
                 for path, values in grid.axes.items() if path in grid.dims},
        "fixed_axes": {grid.names[path]: _plain(value) for path, value in grid.fixed.items()},
        "metrics": {name: _metric(name, objectives) for name in shown},
        "empty_fronts": sum(not g["front"] for g in entries),
        "groups": entries,
    }


def _group(table: Table, grid: Grid, sweep: Sweep, answer: Answer, mine: np.ndarray) -> dict:
    objectives = list(sweep.objectives)

    def row(i) -> dict:
        return point_row(table, grid, sweep, int(i), objectives, answer.same.get(int(i)))

    status = table["status"][mine]
    return {
        "work": {grid.names[path]: _plain(value) for path, value in answer.work.items()},
        "points": int(mine.sum()),
        "status": _counts(status, Status),
        "level": _counts(table["level"][mine], Level),
        "evaluated_exactly": int(np.sum(table["level"][mine] == Level.EXACT)),
        "pruned": int(np.sum(status == Status.PRUNED)),
        "feasible_exact": int(np.sum(mine & exact_feasible(table))),
        "front": [row(i) for i in answer.front],
        "top": {name: [row(i) for i in points] for name, points in answer.top.items()},
        "infeasible": infeasible(table, np.flatnonzero(mine)),
    }


def infeasible(table: Table, rows: np.ndarray) -> dict:
    """The points of ``rows`` without a feasible result: how many, by kind of reason
    (:data:`xsweep.search.space.planner.REASON_KINDS`, the closest to fitting of the
    memory kind), and the nearest misses (the points nearest to fitting in memory, by the
    share of its GPU's memory the worst group needs; points with the same reason once).
    Reasons repeat (tens of thousands of points, dozens of texts): each text is read once."""
    status, level = table["status"][rows], table["level"][rows]
    failed = rows[~np.isin(status, _FEASIBLE)
                  | ((level == Level.EXACT) & ~table["feasible"][rows])]
    by_reason: dict[str, list[int]] = {}  # each reason's points, in order
    for i, reason, code in zip(failed.tolist(), table["reason"][failed].tolist(),
                               table["status"][failed].tolist(), strict=True):
        by_reason.setdefault(str(reason) or Status(code).label, []).append(i)
    counted: Counter = Counter()
    memory = {}
    for reason, points in by_reason.items():
        kind = reason_kind(reason)
        counted[kind] += len(points)
        if kind.name == "memory":
            memory[reason] = points
    nearest = _nearest_misses(table, memory)
    return {"points": len(failed), "kinds": _by_kind(counted, nearest),
            "nearest_misses": nearest}


def _memory_miss(table: Table, i: int, reason: str) -> tuple:
    """A memory reason's figures: (share of the GPU's memory, point, GiB needed, GPU,
    GiB it has, reason); the share is infinite where the reason names no figures."""
    numbers = MEMORY_NUMBERS.search(reason)
    if numbers is None:
        return (math.inf, i, float(table[MEMORY_METRIC][i]), None, math.nan, reason)
    need, capacity = float(numbers.group(1)), float(numbers.group(3))
    return (need / capacity, i, need, numbers.group(2), capacity, reason)


def _nearest_misses(table: Table, memory: dict[str, list[int]]) -> list[dict]:
    """The :data:`NEAREST_MISSES` memory reasons (each with its points, in order) nearest
    to fitting, nearest first: each names its first point, the others of the reason in
    ``same_reason``. A reason's share of memory is its text's, so its first point is the
    one that sorts first among its points."""
    misses = sorted(((_memory_miss(table, points[0], reason), points)
                     for reason, points in memory.items()), key=lambda m: m[0][:2])
    return [{"point": i, "same_reason": points[1:], "memory_per_gpu_gib": need, "gpu": gpu,
             "gpu_memory_gib": capacity, "reason": reason}
            for (_share, i, need, gpu, capacity, reason), points in misses[:NEAREST_MISSES]]


def _by_kind(counted: Counter, nearest: list[dict]) -> list[dict]:
    """Counts of failed points by kind of reason (``counted``: points per kind), in the
    kinds' order; the memory kind names its point closest to fitting."""
    by_kind = []
    for kind in (*REASON_KINDS, *(k for k in counted if k not in REASON_KINDS)):
        if not counted.get(kind):
            continue
        entry = {"kind": kind.name, "text": kind.count(counted[kind]), "points": counted[kind]}
        if kind.name == "memory" and nearest:
            entry["closest"] = {k: nearest[0][k] for k in
                                ("point", "memory_per_gpu_gib", "gpu", "gpu_memory_gib")}
        by_kind.append(entry)
    return by_kind


def _metric(name: str, objectives: list[str]) -> dict:
    m = metrics.metric_of(name)
    return {"unit": m.unit, "direction": m.direction, "description": m.description,
            "objective": name in objectives}


def _counts(values: np.ndarray, kind: type[Level] | type[Status]) -> dict[str, int]:
    """How many of ``values`` (codes of ``kind``) have each name, by name."""
    return dict(sorted(Counter(names(values, kind).tolist()).items()))


# -- the text the command prints ----------------------------------------------------------

def work_label(work: dict) -> str:
    """``model llama2-13b, global_batch_size 64``: a group's work axes and values."""
    return ", ".join(f"{name} {value}" for name, value in work.items())


def best_lines(group: dict) -> list[str]:
    """One line per objective naming its best plans, best first."""
    lines = []
    for name, rows in group["top"].items():
        if rows:
            points = ", ".join(f"{r['point']} ({r[name]:.6g}{_also(r)})" for r in rows)
            lines.append(f"best by {name}: {points}")
    return lines


def infeasible_lines(group: dict) -> list[str]:
    """Why a group has no feasible point: counts by kind of reason and the nearest misses."""
    found = group["infeasible"]
    kinds = []
    for k in found["kinds"]:
        closest = k.get("closest")
        near = ""
        if closest and closest["gpu"] is not None:
            near = (f" (nearest: {closest['memory_per_gpu_gib']:.1f} of "
                    f"{closest['gpu_memory_gib']:g} GiB per {closest['gpu']})")
        kinds.append(f"{k['text']}{near}")
    lines = [f"no feasible point among {group['points']:,} points: {', '.join(kinds)}"]
    for miss in found["nearest_misses"]:
        also = f" (also {' '.join(map(str, miss['same_reason']))})" if miss["same_reason"] else ""
        lines.append(f"nearest miss: point {miss['point']}{also}: {miss['reason']}")
    return lines


def report_text(summary: dict, tables: list[str]) -> str:
    """What ``xsweep sweep`` prints: a heading, then per work group its front table
    (``tables``, in the groups' order) and best plans, or why it has none; the software
    profiles the points ran under; the outputs."""
    objectives = ", ".join(summary["objectives"])
    groups = summary["groups"]
    exact = f"{summary['evaluated_exactly']:,} of {summary['points']:,} points evaluated exactly"
    lines = []
    if len(groups) == 1:
        lines.append(f"Pareto front of {summary['sweep']} ({objectives}): "
                     f"{_front_count(groups[0])}; {exact}")
    else:
        per = " and ".join(summary["work_axes"])
        lines.append(f"Pareto fronts of {summary['sweep']} ({objectives}), one per {per}: "
                     f"{len(groups)} fronts; {exact}")
    for group, table in zip(groups, tables, strict=True):
        if len(groups) > 1:
            lines.append("")
            lines.append(f"{work_label(group['work'])}: {_front_count(group)}; "
                         f"{group['evaluated_exactly']:,} of {group['points']:,} points "
                         "evaluated exactly")
        if group["front"]:
            lines += [table, *best_lines(group)]
        else:
            lines += infeasible_lines(group)
    if len(groups) > 1:
        lines.append("")
    lines.append("software profile: " + "; ".join(describe_software(entry)
                                                  for entry in summary["software"]))
    lines += [f"{name:>12}: {path}" for name, path in summary["outputs"].items()]
    return "\n".join(lines)


def _front_count(group: dict) -> str:
    if not group["front"]:
        return "no feasible plan"
    plans = len(group["front"])
    points = plans + sum(len(r["same_plan"]) for r in group["front"])
    counted = f"{plans} plan{'s' if plans != 1 else ''}"
    return f"{counted} on the front" + (f" ({points} points)" if points != plans else "")


def _also(row: dict) -> str:
    return f"; also {' '.join(map(str, row['same_plan']))}" if row["same_plan"] else ""


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value
