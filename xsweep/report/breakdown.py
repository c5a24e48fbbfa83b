"""Where the time of one iteration goes, in parts that add up to the iteration time.

The per-stream metrics (``xsweep.timeline``) hold, for every stream and so for every
GPU: ``iteration_time_s = busy_s + exposed_tp_s + idle_s``; ``bubble_s`` and
``straggler_wait_s`` are disjoint parts of ``idle_s`` (the idle time before the stream's
last forward/backward task, and the wait at the DP barrier after it); ``exposed_pp_s``
and ``exposed_reshard_s`` are parts of ``bubble_s``. Averages over GPUs (the ``_mean``
summaries, weighted by ranks) keep these sums, maxima over GPUs (``_max``) do not: each
maximum may come from another GPU. So the bar of a plan stacks rank means:

* compute, exposed TP;
* within the bubble: exposed PP, exposed resharding, and the rest of the bubble
  (waiting for another stage's compute, or for a parameter all-gather of FSDP or an
  overlapped ZeRO-1);
* straggler wait;
* the rest of the idle time, after the last forward/backward: the exposed DP
  communication after the barrier, and the wait for the slowest GPU's last task.

``exposed_dp_s`` is not a part of its own: it counts time in the last two parts (and,
with parameter all-gathers, in the bubble), so it is shown beside the bars, as are the
maxima.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

#: Parts of a bar: name, colour, what it is. They add up to the iteration time.
PARTS = (
    ("compute", "#4e79a7", "forward, backward and optimizer (busy_s)"),
    ("exposed TP", "#f28e2b", "tensor-parallel communication the GPUs wait for (exposed_tp_s)"),
    ("exposed PP", "#e15759", "bubble spent waiting on a pipeline transfer (exposed_pp_s)"),
    ("exposed resharding", "#b07aa1",
     "bubble spent waiting on a resharding transfer (exposed_reshard_s)"),
    ("other bubble", "#edc948",
     "rest of bubble_s: waiting for another stage's compute or a parameter all-gather"),
    ("straggler wait", "#9c755f", "idle at the DP barrier for slower replicas "
     "(straggler_wait_s)"),
    ("after forward/backward", "#76b7b2",
     "rest of idle_s: exposed DP communication after the barrier, wait for the last GPU"),
)
COLOURS = {name: colour for name, colour, _ in PARTS}
#: The dataset's variables a bar is made of (rank means).
MEANS = ("busy_s_mean", "exposed_tp_s_mean", "idle_s_mean", "bubble_s_mean",
         "exposed_pp_s_mean", "exposed_reshard_s_mean", "straggler_wait_s_mean")
#: The maxima over GPUs shown beside the bars: they do not add up.
MAXIMA = ("busy_s_max", "bubble_s_max", "straggler_wait_s_max", "exposed_tp_s_max",
          "exposed_pp_s_max", "exposed_dp_s_max", "exposed_reshard_s_max")


def parts(row: Mapping[str, float]) -> list[tuple[str, float]]:
    """The parts of :data:`PARTS` of one plan, in seconds, from its rank means (``row``
    maps the dataset's variable names to the plan's values). A part that float32
    rounding makes slightly negative is 0."""
    busy, tp, idle = row["busy_s_mean"], row["exposed_tp_s_mean"], row["idle_s_mean"]
    bubble, straggler = row["bubble_s_mean"], row["straggler_wait_s_mean"]
    pp, reshard = row["exposed_pp_s_mean"], row["exposed_reshard_s_mean"]
    values = (busy, tp, pp, reshard, bubble - pp - reshard, straggler,
              idle - bubble - straggler)
    return [(name, max(0.0, v) if math.isfinite(v) else math.nan)
            for (name, _, _), v in zip(PARTS, values, strict=True)]


def gap(row: Mapping[str, float]) -> float:
    """How far the parts' sum is from the iteration time, relative to it: float32
    rounding, nothing more, for the evaluators' figures."""
    total = sum(v for _, v in parts(row))
    return abs(total - row["iteration_time_s"]) / max(row["iteration_time_s"], 1e-30)
