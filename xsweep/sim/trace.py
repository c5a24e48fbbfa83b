"""Chrome trace event JSON of a simulated iteration (opens in ui.perfetto.dev).

One process per node, and per rank one compute track (the stream's compute and
TP slices, which never overlap) followed by as many communication tracks as the
rank's off-stream transfers need so that no two slices on a track overlap
(Chrome and Perfetto require slices on one track to nest). An off-stream
transfer appears on the tracks of the source ranks of its flows, from the task's
start to the end of that rank's last flow. DP barriers are global instant events.
Timestamps are microseconds.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np

from xsweep.plan.program import Category, Program
from xsweep.sim.result import SimResult


def _label(program: Program, t: int) -> tuple[str, dict]:
    category = Category(int(program.task_category[t])).name.lower()
    stage, mb = int(program.task_stage[t]), int(program.task_micro_batch[t])
    name = program.task_names[t] if program.task_names and program.task_names[t] else (
        f"{category} s{stage} mb{mb}")
    args = {"task": t, "stage": stage, "micro_batch": mb,
            "device_group": int(program.task_device_group[t]),
            "phase": int(program.task_phase[t])}
    return name, {"cat": category, "args": args}


def _comm_slices(program: Program, result: SimResult) -> dict[int, list[tuple[float, float, int]]]:
    """Off-stream COMM tasks per source rank, as (start, end, task)."""
    per_rank: dict[int, list[tuple[float, float, int]]] = {}
    off_stream = np.flatnonzero((program.task_stream < 0) & (np.diff(program.flow_ptr) > 0))
    for t in off_stream.tolist():
        flows = np.arange(program.flow_ptr[t], program.flow_ptr[t + 1])
        src = program.flow_src[flows]
        for r in np.unique(src).tolist():
            end = float(result.flow_end_s[flows[src == r]].max())
            per_rank.setdefault(r, []).append((float(result.task_start_s[t]), end, t))
    return per_rank


def _lanes(slices: list[tuple[float, float, int]]) -> list[int]:
    """Greedy interval partitioning: the first lane whose last slice has ended."""
    lane_end: list[float] = []
    lanes = []
    for start, end, _ in slices:
        lane = next((i for i, e in enumerate(lane_end) if e <= start), len(lane_end))
        if lane == len(lane_end):
            lane_end.append(end)
        else:
            lane_end[lane] = end
        lanes.append(lane)
    return lanes


def trace_events(program: Program, result: SimResult) -> dict:
    """The trace as a Chrome trace event document (a dict ready for ``json.dump``)."""
    comm = {r: sorted(s) for r, s in _comm_slices(program, result).items()}
    comm_lanes = {r: _lanes(s) for r, s in comm.items()}
    stride = 1 + max((max(lanes) + 1 for lanes in comm_lanes.values()), default=0)
    node = program.rank_node
    events: list[dict] = []
    for n in np.unique(node).tolist():
        events.append({"ph": "M", "name": "process_name", "pid": n, "tid": 0,
                       "args": {"name": f"node {n}"}})
    for r in range(program.num_ranks):
        pid = int(node[r])
        lanes = 1 + (max(comm_lanes[r]) + 1 if r in comm_lanes else 0)
        for lane in range(lanes):
            tid = r * stride + lane
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                           "args": {"name": f"rank {r}" + (f" comm {lane}" if lane else "")}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                           "args": {"sort_index": tid}})

    def slice_event(t: int, rank: int, lane: int, start: float, end: float) -> dict:
        name, extra = _label(program, t)
        return {"ph": "X", "name": name, "pid": int(node[rank]), "tid": rank * stride + lane,
                "ts": start * 1e6, "dur": (end - start) * 1e6, **extra}

    start, end = result.task_start_s, result.task_end_s
    for t in np.flatnonzero(program.task_stream >= 0).tolist():
        for r in program.ranks_of_stream(int(program.task_stream[t])).tolist():
            events.append(slice_event(t, r, 0, float(start[t]), float(end[t])))
    for r, slices in comm.items():
        for (s, e, t), lane in zip(slices, comm_lanes[r], strict=True):
            events.append(slice_event(t, r, 1 + lane, s, e))
    for t in np.flatnonzero(program.task_category == Category.BARRIER).tolist():
        name, extra = _label(program, t)
        events.append({"ph": "i", "s": "g", "name": name, "pid": 0, "tid": 0,
                       "ts": float(end[t]) * 1e6, **extra})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_trace(program: Program, result: SimResult, path) -> Path:
    """Write the trace JSON to ``path`` atomically (a temporary file, then a rename)."""
    path = Path(path)
    document = trace_events(program, result)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(document, out, separators=(",", ":"))
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path
