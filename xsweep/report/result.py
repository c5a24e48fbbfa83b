"""A finished sweep's or study's folder, read for its report.

A sweep's (``xsweep sweep``): the published fronts (``summary.json``), the figures of
every point (``sweep.zarr``), the front plans (``plans/point-<index>.pbtxt``). A study's
(``xsweep optimize``): its answer and the figures of its plans (``study.json``), the
plans (``plans/trial-<number>.pbtxt``); the study's other trials stay in its storage.
Both: each front plan's memory (its plan file analysed again by the project's own plan
analysis) and the validation, if one ran (``validate/validate.json``).

Anything a sweep writes that is missing or malformed is an :class:`InputError` naming
the file, the field and the value.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from xsweep.errors import InputError
from xsweep.report.breakdown import MAXIMA, MEANS

DATASET, SUMMARY, PLANS, VALIDATION = "sweep.zarr", "summary.json", "plans", "validate"
STUDY = "study.json"
#: Variables of the dataset the report reads.
#: The figures of a plan the report shows.
FIGURES = ("iteration_time_s", "tokens_per_s", "mfu", "memory_per_gpu_gib", "cost_per_run_usd",
           "cost_per_million_tokens_usd", "exposed_dp_s_mean", *MEANS, *MAXIMA)
COLUMNS = ("point", "status", "level", "feasible", *FIGURES)


@dataclass(frozen=True)
class DeviceMemory:
    """Device groups of one plan that need the same memory on the same GPU."""

    groups: tuple[int, ...]
    gpu: str
    tp: int
    stage: int
    parts: tuple[tuple[str, float], ...]  # GiB per GPU: weights, gradients, ...
    capacity_gib: float
    fits: bool


@dataclass(frozen=True)
class FrontPlan:
    """One plan of a front as ``summary.json`` lists it, with its memory when its plan file
    could be analysed (else ``memory_note`` says why not)."""

    point: int
    same_plan: tuple[int, ...]
    axes: dict
    memory: tuple[DeviceMemory, ...] = ()
    memory_note: str = ""


@dataclass(frozen=True)
class Group:
    """A work group (one value of the work axes, e.g. one model) and its front."""

    work: dict
    front: tuple[FrontPlan, ...]
    why_empty: str = ""  # for a front without plans: why no point was feasible, if known

    @property
    def name(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in self.work.items()) or "all points"


@dataclass(frozen=True)
class Result:
    """What the report shows of a sweep or a study."""

    folder: Path
    name: str
    objectives: tuple[str, ...]
    summary: dict  # summary.json or study.json
    groups: tuple[Group, ...]
    table: dict[str, np.ndarray] | None  # a sweep's flat columns, row i is point i
    validation: dict | None
    kind: str = "sweep"  # or "study"
    figures: dict[int, dict[str, float]] = field(default_factory=dict)  # a study's plans

    @property
    def unit(self) -> str:
        """What the plans are called: ``point`` (of a sweep) or ``trial`` (of a study)."""
        return "trial" if self.kind == "study" else "point"

    def row(self, point: int) -> dict[str, float]:
        """The figures of ``point`` by variable name."""
        if point in self.figures:
            return self.figures[point]
        return {name: float(column[point]) for name, column in self.table.items()
                if column.dtype.kind in "fiub"}


#: At most this many plans of each front get bars (its ends and plans evenly between).
MOST_PLANS = 12


def shown_plans(front: tuple, most: int = MOST_PLANS) -> list:
    """The plans of a front that get bars: all of them, or ``most`` evenly spread from one
    end of the front to the other."""
    if len(front) <= most:
        return list(front)
    picks = sorted({round(k * (len(front) - 1) / (most - 1)) for k in range(most)})
    return [front[k] for k in picks]


def is_sweep_folder(path: Path) -> bool:
    return (path / DATASET).is_dir()


def is_study_folder(path: Path) -> bool:
    return (path / STUDY).is_file()


def read_json(path: Path) -> dict:
    """A JSON object from ``path``.

    Raises:
        InputError: the file is missing, unreadable or holds no JSON object.
    """
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(str(path), None, None, "is missing") from None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise InputError(str(path), None, None, f"cannot be read as JSON: {error}") from None
    if not isinstance(document, dict):
        raise InputError(str(path), None, None, "holds no JSON object")
    return document


def _field(document: dict, key: str, kind: type, path: Path):
    value = document.get(key)
    if not isinstance(value, kind):
        raise InputError(str(path), key, None if value is None else str(value)[:80],
                         f"expected {kind.__name__}")
    return value


def _objectives(document: dict, path: Path) -> tuple[str, ...]:
    """The document's ``objectives``: metric names a sweep can optimise."""
    from xsweep.metrics import directions

    objectives = _field(document, "objectives", list, path)
    for k, name in enumerate(objectives):
        if not isinstance(name, str) or name not in directions():
            raise InputError(str(path), f"objectives[{k}]", str(name)[:80],
                             "is not an objective's metric name")
    if not objectives:
        raise InputError(str(path), "objectives", "[]", "names no objective")
    return tuple(objectives)


def _work(entry: dict, path: Path, where: str) -> dict:
    work = entry.get("work") or {}
    if not isinstance(work, dict):
        raise InputError(str(path), f"{where}.work", str(work)[:80], "expected an object")
    return dict(work)


def _plan_entry(plan: object, path: Path, where: str) -> dict:
    """A front's plan as the summary lists it: a point (or trial) number, its axes and the
    numbers of the points of the same plan."""
    if not isinstance(plan, dict) or isinstance(plan.get("point"), bool) or \
            not isinstance(plan.get("point"), int):
        raise InputError(str(path), f"{where}.point", None, "expected a whole number")
    if not isinstance(plan.get("axes") or {}, dict):
        raise InputError(str(path), f"{where}.axes", str(plan["axes"])[:80],
                         "expected an object")
    same = plan.get("same_plan") or []
    if not isinstance(same, list) or not all(isinstance(i, int) for i in same):
        raise InputError(str(path), f"{where}.same_plan", str(same)[:80],
                         "expected a list of whole numbers")
    return plan


def open_result(folder: Path, catalog) -> Result:
    """Read the sweep in ``folder`` for its report; ``catalog``: the one the sweep ran with
    (the front plans are analysed against it).

    Raises:
        InputError: a file the sweep writes is missing or is not what it writes.
    """
    summary_path = folder / SUMMARY
    summary = read_json(summary_path)
    name = str(_field(summary, "sweep", str, summary_path))
    objectives = _objectives(summary, summary_path)
    table = _table(folder / DATASET, objectives, catalog)
    groups = []
    for k, entry in enumerate(_field(summary, "groups", list, summary_path)):
        if not isinstance(entry, dict) or not isinstance(entry.get("front"), list):
            raise InputError(str(summary_path), f"groups[{k}].front", None, "expected a list")
        front = []
        for j, plan in enumerate(entry["front"]):
            where = f"groups[{k}].front[{j}]"
            point = _plan_entry(plan, summary_path, where)["point"]
            if not 0 <= point < len(table["point"]):
                raise InputError(str(summary_path), f"{where}.point", str(point),
                                 "is not a point of the sweep's dataset")
            front.append(plan)
        groups.append(Group(_work(entry, summary_path, f"groups[{k}]"),
                            _front(folder, "point", front, catalog), _why_empty(entry)))
    return Result(folder, name, objectives, summary, tuple(groups), table,
                  read_validation(folder))


def _why_empty(entry: dict) -> str:
    """The reasons ``summary.json`` gives for a work group's infeasible points (``2 do not
    fit in GPU memory; ...``), or ``""``."""
    infeasible = entry.get("infeasible")
    kinds = infeasible.get("kinds") if isinstance(infeasible, dict) else None
    if not isinstance(kinds, list):
        return ""
    return "; ".join(str(k["text"]) for k in kinds if isinstance(k, dict) and "text" in k)


def open_study(folder: Path, catalog) -> Result:
    """Read the study in ``folder`` (what ``xsweep optimize`` wrote) for its report.

    Raises:
        InputError: ``study.json`` is missing or is not what a study writes.
    """
    path = folder / STUDY
    summary = read_json(path)
    name = str(_field(summary, "study", str, path))
    objectives = _objectives(summary, path)
    groups, figures = [], {}
    for k, entry in enumerate(_field(summary, "groups", list, path)):
        if not isinstance(entry, dict) or not isinstance(entry.get("best"), list):
            raise InputError(str(path), f"groups[{k}].best", None, "expected a list")
        front = []
        for j, plan in enumerate(entry["best"]):
            where = f"groups[{k}].best[{j}]"
            _plan_entry(plan, path, where)
            row = {}
            for key in dict.fromkeys((*FIGURES, *objectives)):
                value = plan.get(key, math.nan)
                value = math.nan if value is None else value  # JSON's null: not known
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise InputError(str(path), f"{where}.{key}", str(value)[:80],
                                     "expected a number")
                row[key] = float(value)
            figures[plan["point"]] = row
            front.append(plan)
        groups.append(Group(_work(entry, path, f"groups[{k}]"),
                            _front(folder, "trial", front, catalog)))
    return Result(folder, name, objectives, summary, tuple(groups), None,
                  read_validation(folder), "study", figures)


def _front(folder: Path, unit: str, entries: list[dict], catalog) -> tuple[FrontPlan, ...]:
    """The front's plans; those :func:`shown_plans` picks with their memory, from their
    plan files (``plans/<unit>-<number>.pbtxt``)."""
    front = [FrontPlan(e["point"], tuple(e.get("same_plan") or ()), dict(e.get("axes") or {}))
             for e in entries]
    shown = {plan.point for plan in shown_plans(front)}
    out = []
    for plan in front:
        if plan.point in shown:
            memory, note = plan_memory(folder / PLANS / f"{unit}-{plan.point}.pbtxt", catalog)
            plan = dataclasses.replace(plan, memory=memory, memory_note=note)
        out.append(plan)
    return tuple(out)


def read_validation(folder: Path) -> dict | None:
    """``validate/validate.json`` of ``folder``, if ``xsweep validate`` wrote one."""
    path = folder / VALIDATION / "validate.json"
    if not path.is_file():
        return None
    validation = read_json(path)
    if not isinstance(validation.get("points"), list):
        raise InputError(str(path), "points", None, "expected a list")
    return validation


def _table(store: Path, objectives: tuple[str, ...], catalog) -> dict[str, np.ndarray]:
    from xsweep.search.dataset import open_sweep_dataset

    wanted = tuple(dict.fromkeys((*COLUMNS, *objectives)))
    ds = open_sweep_dataset(store, catalog, wanted)
    points = ds["point"].values.ravel()
    order = np.argsort(points, kind="stable")
    if not np.array_equal(points[order], np.arange(len(points))):
        raise InputError(str(store), "point", None, "is not 0, 1, ... over the grid")
    table = {name: ds[name].values.ravel()[order] for name in wanted}
    table["feasible"] = table["feasible"].astype(bool)
    table["status"] = table["status"].astype(str)
    table["level"] = table["level"].astype(str)
    return table


#: Memory parts of a GPU, in the order of ``xsweep plan``, with their keys there.
MEMORY_PARTS = (("weights", "weights_gib"), ("gradients", "grads_gib"),
                ("optimizer states", "optimizer_gib"), ("activations", "activations_gib"))


def plan_memory(path: Path, catalog) -> tuple[tuple[DeviceMemory, ...], str]:
    """The memory of each device group of the plan in ``path`` against its GPU's capacity, as
    ``xsweep plan`` computes it (the plan validated and analysed, not lowered), device groups
    of equal figures merged; and an empty note, or why there is nothing (no such file)."""
    from xsweep.pipeline import load
    from xsweep.plan.analysis import analyze
    from xsweep.plan.summary import memory_rows

    if not path.is_file():
        return (), f"{path.name} is not in the sweep's folder"
    analysis = analyze(load(path, catalog)[0], catalog)
    merged: dict[tuple, list[int]] = {}
    for group, row in zip(analysis.groups, memory_rows(analysis), strict=True):
        key = (row["gpu"], group.tp, group.stage,
               tuple((name, row[field]) for name, field in MEMORY_PARTS),
               row["capacity_gib"], row["fits"])
        merged.setdefault(key, []).append(row["device_group"])
    return tuple(DeviceMemory(tuple(ids), gpu, tp, stage, parts, capacity, fits)
                 for (gpu, tp, stage, parts, capacity, fits), ids in merged.items()), ""
