"""The metrics table: every figure xsweep reports, named once.

Each :class:`Metric` has its name (the public contract: a JSON key of ``xsweep
simulate --json``, a variable of the batched Dataset, an objective of a sweep),
its unit, whether it is a figure of the whole plan or of each stream (a stream is
one device group's timeline, shared by its ranks), how a per-stream metric is
summarised over ranks, the direction in which it is better, and what it means.
The simulator's report, the Dataset, the sweep objectives and validation all read
this table, so adding a metric means adding a row here and computing it in one
place (``xsweep.timeline`` for timeline figures, ``xsweep.figures`` for memory and
cost).

Missing values: a figure that cannot be known (the cost of a run without
``total_tokens``) is NaN in arrays and Datasets and ``null`` in JSON
(:func:`jsonable`); never a made-up number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xsweep.errors import MAX_REASON, did_you_mean

PLAN = "plan"
STREAM = "stream"
MINIMIZE = "minimize"
MAXIMIZE = "maximize"
#: How a per-stream metric is summarised over ranks, as suffixes of its name.
SUMMARIES = ("mean", "max")


@dataclass(frozen=True)
class Metric:
    """One reported figure."""

    name: str
    unit: str
    per: str  # PLAN or STREAM
    direction: str | None  # MINIMIZE, MAXIMIZE, or None where neither is "better"
    description: str


TABLE: tuple[Metric, ...] = (
    Metric("iteration_time_s", "s", PLAN, MINIMIZE, "time of one training iteration"),
    Metric("tokens_per_s", "tokens/s", PLAN, MAXIMIZE,
           "global batch x sequence length / iteration time"),
    Metric("mfu", "1", PLAN, MAXIMIZE,
           "model FLOPs per iteration (no recompute) / (iteration time x peak FLOP/s of the "
           "GPUs in use, dense BF16 also for plans in FP8)"),
    Metric("busy_s", "s", STREAM, None, "compute: forward, backward and optimizer"),
    Metric("idle_s", "s", STREAM, MINIMIZE, "iteration time - busy_s - exposed_tp_s"),
    Metric("bubble_s", "s", STREAM, MINIMIZE,
           "idle before the stream's last forward/backward task: waiting for another stage "
           "or a transfer"),
    Metric("straggler_wait_s", "s", STREAM, MINIMIZE,
           "idle at the DP barrier waiting for slower replicas"),
    Metric("exposed_tp_s", "s", STREAM, MINIMIZE,
           "tensor-parallel communication the stream waits for (all of it when blocking; "
           "with tp_comm_overlap, what outlasts the compute), and under context "
           "parallelism what its ring outlasts of the compute"),
    Metric("exposed_pp_s", "s", STREAM, MINIMIZE,
           "part of bubble_s spent waiting on a pipeline transfer, every phase of it"),
    Metric("exposed_reshard_s", "s", STREAM, MINIMIZE,
           "part of bubble_s spent waiting on a resharding transfer, every phase of it"),
    Metric("exposed_dp_s", "s", STREAM, MINIMIZE,
           "idle waiting on data-parallel communication: after the DP barrier until the "
           "optimizer can start, for parameter all-gathers (FSDP, ZeRO-1)"),
    Metric("memory_per_gpu_gib", "GiB", PLAN, MINIMIZE, "largest memory of one GPU, 2^30 bytes"),
    Metric("memory_fits", "bool", PLAN, None, "every GPU holds what it needs"),
    Metric("capex_usd", "USD", PLAN, MINIMIZE, "purchase price of every GPU and NIC port"),
    Metric("cost_rate_usd_per_hour", "USD/h", PLAN, MINIMIZE,
           "amortized capex + power x PUE x electricity, or the cloud price"),
    Metric("training_time_s", "s", PLAN, MINIMIZE,
           "time to train total_tokens (NaN/null without total_tokens)"),
    Metric("cost_per_run_usd", "USD", PLAN, MINIMIZE,
           "training_time_s x cost rate (NaN/null without total_tokens)"),
    Metric("cost_per_million_tokens_usd", "USD/1M tokens", PLAN, MINIMIZE,
           "cost rate / tokens trained per hour, for one million tokens (known without "
           "total_tokens)"),
    Metric("paper_tco", "USD/h", PLAN, None,
           "the seed paper's figure: capex / training hours (reported, not optimised)"),
)

BY_NAME = {m.name: m for m in TABLE}
#: Per-stream metric names, in report order.
STREAM_METRICS = tuple(m.name for m in TABLE if m.per == STREAM)
#: Metrics the timeline gives (the rest come from memory and cost).
TIMELINE_PLAN_METRICS = ("iteration_time_s", "tokens_per_s", "mfu")


def summary_name(name: str, how: str) -> str:
    """The plan-level name of a per-stream metric's summary, e.g. ``bubble_s_max``."""
    return f"{name}_{how}"


def plan_names() -> tuple[str, ...]:
    """Every plan-level figure, in report order: plan metrics and per-stream summaries."""
    out: list[str] = []
    for m in TABLE:
        out += ([m.name] if m.per == PLAN
                else [summary_name(m.name, how) for how in SUMMARIES])
    return tuple(out)


def directions() -> dict[str, str]:
    """Every plan-level figure that can be optimised, with its direction."""
    out = {}
    for m in TABLE:
        if m.direction is None:
            continue
        names = [m.name] if m.per == PLAN else [summary_name(m.name, h) for h in SUMMARIES]
        out |= dict.fromkeys(names, m.direction)
    return out


#: Short names a sweep may give for some objectives, and the metric each stands for.
OBJECTIVE_SHORT_FORMS = {"iteration_time": "iteration_time_s", "cost_per_run": "cost_per_run_usd",
                         "cost_per_million_tokens": "cost_per_million_tokens_usd",
                         "cost_rate": "cost_rate_usd_per_hour", "capex": "capex_usd",
                         "memory_per_gpu": "memory_per_gpu_gib"}
#: Where the objectives are listed for readers (the table :func:`objectives_markdown` makes).
OBJECTIVES_DOC = "docs/formats.md#objectives"


def objective_name(name: object) -> str | None:
    """The metric an objective names (a metric name or a short form, in any case), or None
    when it names none."""
    if not isinstance(name, str):
        return None
    key = name.lower()
    key = OBJECTIVE_SHORT_FORMS.get(key, key)
    return key if key in directions() else None


def unknown_objective(name: object, limit: int = MAX_REASON) -> str:
    """Why ``name`` is no objective, on one line of at most ``limit`` characters: the
    closest objectives, then every objective (the per-stream metrics named once, with
    their summaries' suffixes), or, when that would not fit, where they are listed."""
    names = [*directions(), *OBJECTIVE_SHORT_FORMS]
    hint = did_you_mean(name, names)
    plan_level = [m.name for m in TABLE if m.per == PLAN and m.direction is not None]
    per_stream = [m.name for m in TABLE if m.per == STREAM and m.direction is not None]
    suffixes = " or ".join(f"_{how}" for how in SUMMARIES)
    every = (f" (objectives: {', '.join(plan_level)}; {', '.join(per_stream)} with "
             f"{suffixes})")
    where = f" (the objectives are listed in {OBJECTIVES_DOC})"
    reason = f"unknown objective{hint}"
    return reason + (every if len(reason + every) <= limit else where)


def objectives_markdown() -> str:
    """The Markdown table of every objective a sweep accepts (every plan-level figure with
    a direction), as ``docs/formats.md`` holds it: name, direction, unit, meaning."""
    short = {metric: form for form, metric in OBJECTIVE_SHORT_FORMS.items()}
    lines = ["| Objective | Better | Unit | Meaning |", "|---|---|---|---|"]
    for name, direction in directions().items():
        m = metric_of(name)
        meaning = m.description
        if m.per == STREAM:
            how = name.rpartition("_")[2]
            meaning = f"{how} over ranks of {m.name}: {meaning}"
        cell = f"`{name}`" + (f" (or `{short[name]}`)" if name in short else "")
        better = "lower" if direction == MINIMIZE else "higher"
        lines.append(f"| {cell} | {better} | {m.unit} | {meaning} |")
    return "\n".join(lines) + "\n"


def metric_of(name: str) -> Metric:
    """The row behind a plan-level or per-stream name (summaries map to their metric)."""
    if name in BY_NAME:
        return BY_NAME[name]
    base, _, how = name.rpartition("_")
    if how in SUMMARIES and base in BY_NAME:
        return BY_NAME[base]
    raise KeyError(name)


def jsonable(value):
    """``value`` with every non-finite float (NaN, inf) replaced by ``None``, recursively,
    and numpy scalars turned into Python numbers: what strict JSON can carry."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
