"""The summary's infeasible points, which read each distinct reason once: held to a
point-by-point reading of the same table."""

import math
import random
from collections import Counter

import numpy as np
import pytest

from xsweep.search.evaluation import MEMORY_METRIC
from xsweep.search.levels import Level, Status
from xsweep.search.space.planner import MEMORY_NUMBERS, reason_kind
from xsweep.search.sweep.summary import NEAREST_MISSES, infeasible

REASONS = [
    "does not fit in GPU memory: 91.5 GiB per GPU on H100-SXM (80.0 GiB)",
    "does not fit in GPU memory: 120.25 GiB per GPU on A100-80GB (80.0 GiB)",
    "does not fit in GPU memory: 41.0 GiB per GPU on A100-40GB (40.0 GiB)",
    "does not fit in GPU memory: 200.0 GiB per GPU on H200 (141.0 GiB)",
    "does not fit in GPU memory: 85.0 GiB per GPU on H100-SXM (80.0 GiB)",
    "does not fit in GPU memory",  # no figures: the point's memory metric stands in
    "TP 16 exceeds the 8 GPUs of a H100-SXM node",
    "TP 64 exceeds the model's 48 attention heads",
    "CP 3 does not divide the sequence length",
    "",  # the evaluator's status name stands in
]


def _table(seed: int, n: int = 400) -> dict:
    rng = random.Random(seed)
    status = np.array([rng.choice([Status.OK, Status.INFEASIBLE, Status.PRUNED,
                                   Status.NOT_CONVERGED]) for _ in range(n)], np.int8)
    level = np.array([rng.choice([Level.CLOSED_FORM, Level.BOUND, Level.EXACT])
                      for _ in range(n)], np.int8)
    reason = np.array([rng.choice(REASONS) for _ in range(n)], object)
    return {"status": status, "level": level, "reason": reason,
            "feasible": np.array([rng.random() < 0.5 for _ in range(n)]),
            MEMORY_METRIC: np.array([rng.uniform(10, 300) for _ in range(n)])}


def _one_by_one(table: dict, rows: np.ndarray) -> dict:
    """The same answer read point by point: every failed point's reason, kind and share of
    memory, all misses sorted by (share, point), each reason's first point named."""
    failed = [int(i) for i in rows
              if table["status"][i] not in (Status.OK, Status.PRUNED)
              or (table["level"][i] == Level.EXACT and not table["feasible"][i])]
    reasons = {i: str(table["reason"][i]) or Status(int(table["status"][i])).label
               for i in failed}
    kinds = Counter(reason_kind(reasons[i]).name for i in failed)
    misses = []
    for i in failed:
        if reason_kind(reasons[i]).name != "memory":
            continue
        found = MEMORY_NUMBERS.search(reasons[i])
        share = float(found.group(1)) / float(found.group(3)) if found else math.inf
        misses.append((share, i))
    nearest: dict[str, dict] = {}
    for _, i in sorted(misses):
        entry = nearest.get(reasons[i])
        if entry is not None:
            entry["same_reason"].append(i)
        elif len(nearest) < NEAREST_MISSES:
            nearest[reasons[i]] = {"point": i, "same_reason": []}
    return {"points": len(failed), "kinds": dict(kinds),
            "nearest": [(reason, e["point"], e["same_reason"]) for reason, e in nearest.items()]}


@pytest.mark.parametrize("seed", range(6))
def test_infeasible_points_are_counted_and_ranked_as_one_by_one(seed):
    table = _table(seed)
    rows = np.flatnonzero(np.random.default_rng(seed).random(len(table["status"])) < 0.8)
    found, expected = infeasible(table, rows), _one_by_one(table, rows)
    assert found["points"] == expected["points"] > 0
    assert {k["kind"]: k["points"] for k in found["kinds"]} == expected["kinds"]
    assert [(m["reason"], m["point"], m["same_reason"])
            for m in found["nearest_misses"]] == expected["nearest"]
    memory = next(k for k in found["kinds"] if k["kind"] == "memory")
    first = found["nearest_misses"][0]
    assert memory["closest"]["point"] == first["point"]
    # the nearest here is 41.0 of 40.0 GiB, its figures read from the reason's text
    assert (first["memory_per_gpu_gib"], first["gpu"], first["gpu_memory_gib"]) == (
        41.0, "A100-40GB", 40.0)


def test_a_memory_reason_without_figures_names_its_first_points_memory():
    table = _table(0, n=6)
    table["status"][:] = Status.INFEASIBLE
    table["reason"][:] = "does not fit in GPU memory"
    found = infeasible(table, np.arange(2, 6))
    (miss,) = found["nearest_misses"]
    assert (miss["point"], miss["same_reason"]) == (2, [3, 4, 5])
    assert miss["memory_per_gpu_gib"] == table[MEMORY_METRIC][2]
    assert miss["gpu"] is None and math.isnan(miss["gpu_memory_gib"])
