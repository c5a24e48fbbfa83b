"""The metrics of ``xsweep.timeline`` computed on the host, from the task times a kernel
returned: what a CPU host does instead of compiling them into every kernel.

The kernels' compiled call computes the metrics from task times that never leave the
device, which suits an accelerator. On a CPU the device's memory is the host's, and
the metrics in the call cost more than they save: they made the bound level's
executables several times as large (and as slow to compile and to load from the
kernel store), and their index added its own sizes to the shapes programs share
(``xsweep.evaluator.driver``). Here the same functions of ``xsweep.timeline`` run with
numpy on each structure's own index, unpadded, over the numeric variants of that
structure at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from xsweep import timeline
from xsweep.evaluator.encode import rows_by_object
from xsweep.metrics import STREAM_METRICS, SUMMARIES, summary_name
from xsweep.plan.program import Program

_SCALARS = ("tokens_per_iteration", "model_flops_per_iteration", "peak_flops_per_s")


def metric_names() -> tuple[str, ...]:
    """The scalar metrics besides the iteration time, as the kernels' call names them."""
    return ("tokens_per_s", "mfu",
            *(summary_name(name, how) for name in STREAM_METRICS for how in SUMMARIES))


def host_metrics(programs: Sequence[Program], indices: Sequence[timeline.MetricIndex],
                 start_s: np.ndarray, end_s: np.ndarray, dtype) -> dict[str, np.ndarray]:
    """Metrics of every program from its task times, as the kernels' call gives them.

    Args:
      programs: the programs, one per row of the times.
      indices: each program's :func:`xsweep.timeline.metric_index` (one object per
        structure: rows that share it are computed together).
      start_s, end_s: task times, [N, at least each program's tasks].
      dtype: the type of the results (the evaluation's); they are computed in float64.

    Returns:
      Each name of ``xsweep.metrics.STREAM_METRICS`` as [N, most streams] (0 past a
      program's streams) and every name of :func:`metric_names` as [N].
    """
    n = len(programs)
    width = max([p.num_streams for p in programs] + [1])
    out = {name: np.zeros((n, width), dtype) for name in STREAM_METRICS}
    out |= {name: np.zeros(n, dtype) for name in metric_names()}
    scalars = {name: np.array([getattr(p, name) for p in programs], np.float64)
               for name in _SCALARS}
    for index, rows in rows_by_object(indices):
        tasks = index.task_valid.shape[0]
        start = np.asarray(start_s[rows, :tasks], np.float64)
        end = np.asarray(end_s[rows, :tasks], np.float64)
        per_stream = timeline.stream_metrics(np, index, start, end)
        summary = timeline.summarize(np, index, per_stream, start, end,
                                     *(scalars[name][rows] for name in _SCALARS))
        streams = index.stream_weight.shape[0]
        for name, value in per_stream.items():
            out[name][rows, :streams] = np.where(index.stream_weight > 0, value, 0.0)
        for name in metric_names():
            out[name][rows] = summary[name]
    return out
