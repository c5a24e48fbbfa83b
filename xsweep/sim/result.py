"""What one simulation produces, and the per-rank and summary metrics read from it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xsweep import timeline
from xsweep.metrics import STREAM_METRICS
from xsweep.plan.program import Program


@dataclass(frozen=True, eq=False)
class SimResult:
    """The timeline of one simulated iteration (seconds from its start)."""

    task_start_s: np.ndarray  # float64[T]
    task_end_s: np.ndarray  # float64[T]
    flow_start_s: np.ndarray  # float64[F], its task's start
    flow_active_s: np.ndarray  # float64[F], start + latency: ready to transfer
    flow_end_s: np.ndarray  # float64[F], last byte delivered
    iteration_time_s: float
    num_events: int  # task ends, flow activations and flow completions processed
    num_rate_updates: int  # max-min recomputations


def _stream_metrics(program: Program, result: SimResult) -> tuple[timeline.MetricIndex, dict]:
    index = timeline.metric_index(program)
    return index, timeline.stream_metrics(np, index, result.task_start_s, result.task_end_s)


def rank_metrics(program: Program, result: SimResult) -> list[dict]:
    """Per-rank metrics (ranks of every stream, ascending), as plain JSON-ready dicts."""
    _, per_stream = _stream_metrics(program, result)
    rows = []
    for s in range(program.num_streams):
        common = {"stream": s, "device_group": int(program.stream_device_group[s]),
                  **{name: float(per_stream[name][s]) for name in STREAM_METRICS}}
        rows += [{"rank": int(r), **common} for r in program.ranks_of_stream(s)]
    return sorted(rows, key=lambda row: row["rank"])


def summary(program: Program, result: SimResult) -> dict:
    """Iteration time, tokens/s, MFU and the mean and max over ranks of every rank metric."""
    index, per_stream = _stream_metrics(program, result)
    out = timeline.summarize(np, index, per_stream, result.task_start_s, result.task_end_s,
                            program.tokens_per_iteration, program.model_flops_per_iteration,
                            program.peak_flops_per_s)
    return {name: float(value) for name, value in out.items()}
