"""The Chrome trace export: structure, completeness, non-overlapping tracks, atomic write."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest

from tests.support.programs import random_program, two_replica_dp_program
from xsweep.plan.program import Category
from xsweep.sim import simulate, write_trace


def _load(tmp_path, program):
    result = simulate(program)
    path = write_trace(program, result, tmp_path / "trace.json")
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]  # no temporary left over
    return result, json.loads(path.read_text())


@pytest.mark.parametrize("program", [two_replica_dp_program(0.01), random_program(5),
                                     random_program(12)], ids=["two-replica", "r5", "r12"])
def test_trace_structure(tmp_path, program):
    result, doc = _load(tmp_path, program)
    events = doc["traceEvents"]
    meta = [e for e in events if e["ph"] == "M"]
    processes = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert processes == {int(n): f"node {n}" for n in np.unique(program.rank_node)}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    rank_of_tid = {}
    for (pid, tid), name in threads.items():
        rank = int(name.split()[1])
        assert pid == program.rank_node[rank]
        rank_of_tid[tid] = rank
    assert sorted(set(rank_of_tid.values())) == list(range(program.num_ranks))

    slices = [e for e in events if e["ph"] == "X"]
    by_task = defaultdict(set)
    for e in slices:
        t = e["args"]["task"]
        assert e["cat"] == Category(int(program.task_category[t])).name.lower()
        assert e["args"]["stage"] == program.task_stage[t]
        assert e["args"]["micro_batch"] == program.task_micro_batch[t]
        assert e["ts"] == pytest.approx(result.task_start_s[t] * 1e6)
        by_task[t].add(rank_of_tid[e["tid"]])
        is_compute_track = threads[(e["pid"], e["tid"])] == f"rank {rank_of_tid[e['tid']]}"
        assert is_compute_track == (program.task_stream[t] >= 0)
    for t in range(program.num_tasks):
        s = int(program.task_stream[t])
        if s >= 0:
            expected = set(program.ranks_of_stream(s).tolist())
        else:
            expected = set(program.flow_src[list(program.flows(t))].tolist())
        assert by_task.get(t, set()) == expected, t

    per_track = defaultdict(list)
    for e in slices:
        per_track[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for spans in per_track.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert start >= end - 1e-6  # slices on one track never overlap

    barriers = [e for e in events if e["ph"] == "i"]
    assert len(barriers) == int((program.task_category == Category.BARRIER).sum())


def test_trace_replaces_an_existing_file(tmp_path):
    program = two_replica_dp_program(0.0)
    target = tmp_path / "trace.json"
    target.write_text("old")
    write_trace(program, simulate(program), target)
    assert json.loads(target.read_text())["displayTimeUnit"] == "ms"


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_trace_has_the_mode_of_every_output(tmp_path, umask):
    """0666 less the umask, as ``open(name, "w")`` makes files: not a temporary file's 0600."""
    import os
    import stat

    program = two_replica_dp_program(0.01)
    previous = os.umask(umask)
    try:
        path = write_trace(program, simulate(program), tmp_path / "trace.json")
        other = tmp_path / "other.json"
        other.write_text("{}")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(other.stat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.json", "trace.json"]
