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

import errno
import glob
import json
import os
import secrets
from pathlib import Path

import numpy as np

from xsweep.plan.program import Category, Program
from xsweep.sim.result import SimResult


def _labels(program: Program) -> list[tuple[str, dict]]:
    """Per task: its slice name, and its category and arguments."""
    categories = [c.name.lower() for c in Category]
    columns = zip(program.task_category.tolist(), program.task_stage.tolist(),
                  program.task_micro_batch.tolist(), program.task_device_group.tolist(),
                  program.task_phase.tolist(), strict=True)
    names = program.task_names or ("",) * program.num_tasks
    out = []
    for t, ((category, stage, mb, group, phase), name) in enumerate(zip(columns, names,
                                                                        strict=True)):
        cat = categories[category]
        out.append((name or f"{cat} s{stage} mb{mb}",
                    {"cat": cat, "args": {"task": t, "stage": stage, "micro_batch": mb,
                                          "device_group": group, "phase": phase}}))
    return out


def _comm_slices(program: Program, result: SimResult) -> dict[int, list[tuple[float, float, int]]]:
    """Off-stream COMM tasks per source rank, as (task start, end of the rank's last flow, task)."""
    flow_task = np.repeat(np.arange(program.num_tasks), np.diff(program.flow_ptr))
    off_stream = program.task_stream[flow_task] < 0
    task, src = flow_task[off_stream], program.flow_src[off_stream]
    if not task.size:
        return {}
    order = np.lexsort((src, task))
    task, src, end = task[order], src[order], result.flow_end_s[off_stream][order]
    first = np.flatnonzero(np.r_[True, (task[1:] != task[:-1]) | (src[1:] != src[:-1])])
    last_end = np.maximum.reduceat(end, first)
    per_rank: dict[int, list[tuple[float, float, int]]] = {}
    start = result.task_start_s
    for t, r, e in zip(task[first].tolist(), src[first].tolist(), last_end.tolist(),
                       strict=True):
        per_rank.setdefault(r, []).append((float(start[t]), e, t))
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
    labels = _labels(program)
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
        name, extra = labels[t]
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
        name, extra = labels[t]
        events.append({"ph": "i", "s": "g", "name": name, "pid": 0, "tid": 0,
                       "ts": float(end[t]) * 1e6, **extra})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_trace(program: Program, result: SimResult, path) -> Path:
    """Write the trace JSON to ``path`` atomically (a temporary file beside it, then a
    rename). The file gets the mode every other output gets, 0666 less the umask (0644
    under the usual umask 022), not the owner-only mode of a temporary file."""
    staged = stage_trace(program, result, path)
    try:
        return commit_trace(staged, path)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise


def stage_trace(program: Program, result: SimResult, path) -> Path:
    """The trace JSON written to a new temporary file beside ``path`` (removed again if the
    writing fails or is interrupted): :func:`commit_trace` puts it at ``path``."""
    path = Path(path)
    document = trace_events(program, result)
    try:
        fd, tmp = _new_file(path)
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(document, out, separators=(",", ":"))
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as error:  # name the file the caller asked for, not the temporary one
        raise OSError(error.errno, error.strerror, str(path)) from None
    return tmp


def commit_trace(staged: Path, path) -> Path:
    """Rename the file :func:`stage_trace` wrote to ``path``."""
    try:
        os.replace(staged, path)
    except OSError as error:
        raise OSError(error.errno, error.strerror, str(path)) from None
    return Path(path)


def discard_staged(path) -> None:
    """Remove the temporary files this process's :func:`stage_trace` made beside ``path``
    (one an interrupt left between its writing and its rename)."""
    path = Path(path)
    for staged in path.parent.glob(f".{glob.escape(path.name)}.{os.getpid()}-*.tmp"):
        staged.unlink(missing_ok=True)


def _new_file(path: Path) -> tuple[int, Path]:
    """A new file beside ``path`` under a name no other writer takes, opened for writing
    with mode 0666 less the umask, as ``open(name, "w")`` creates files."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name beside it", str(path))
