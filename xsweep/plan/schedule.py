"""Pipeline schedules: the order in which one stage runs its forward and backward passes."""

from __future__ import annotations


def stage_order(schedule: str, stage: int, num_stages: int, num_micro_batches: int):
    """The passes of one stage in execution order, as ``("F" | "B", micro_batch)`` pairs.

    GPipe runs every forward pass, then every backward pass. 1F1B (PipeDream-flush,
    as in Megatron) runs ``num_stages - stage - 1`` warm-up forwards, then alternates one
    forward and one backward, then drains the remaining backwards; it keeps at most
    ``num_stages - stage`` micro-batches in flight.
    """
    m = num_micro_batches
    if schedule == "gpipe":
        return [("F", j) for j in range(m)] + [("B", j) for j in range(m)]
    if schedule != "1f1b":
        raise ValueError(f"unknown schedule {schedule!r}")
    warmup = min(num_stages - stage - 1, m)
    order = [("F", j) for j in range(warmup)]
    for j in range(m - warmup):
        order += [("F", warmup + j), ("B", j)]
    order += [("B", j) for j in range(m - warmup, m)]
    return order


def in_flight(schedule: str, stage: int, num_stages: int, num_micro_batches: int) -> int:
    """The largest number of micro-batches whose activations one stage holds at once."""
    live = peak = 0
    for kind, _ in stage_order(schedule, stage, num_stages, num_micro_batches):
        live += 1 if kind == "F" else -1
        peak = max(peak, live)
    return peak
