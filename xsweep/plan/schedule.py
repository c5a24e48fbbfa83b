"""Pipeline schedules: the order in which one stage runs its forward and backward passes."""

from __future__ import annotations

from xsweep.spec.enums import SCHEDULE


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


def in_flight(schedule: str, stage: int, num_stages: int, num_micro_batches: int,
              virtual_stages: int = 1) -> float:
    """The largest number of micro-batches whose activations one stage holds at once:
    all ``m`` under GPipe, ``min(m, num_stages - stage)`` under 1F1B (the peak of
    :func:`stage_order`'s forwards not yet matched by a backward).

    Interleaved 1F1B (``virtual_stages`` model chunks per stage, Megatron-LM) runs
    ``2(p - i - 1) + (v - 1)p`` warm-up chunk passes before its first backward, each
    holding ``1/v`` of the stage's layers: ``(warm-up + 1) / v`` micro-batches' worth,
    at most ``m`` (fractional).
    """
    if schedule not in SCHEDULE.known():
        raise ValueError(f"schedule must be one of {SCHEDULE.known()}, got {schedule!r}")
    if not 0 <= stage < num_stages:
        raise ValueError(f"stage {stage} is not inside 0..{num_stages - 1}")
    if num_micro_batches < 1:
        raise ValueError(f"num_micro_batches must be at least 1, got {num_micro_batches}")
    if schedule == "gpipe":
        return num_micro_batches
    if virtual_stages == 1:
        return min(num_micro_batches, num_stages - stage)
    warmup = 2 * (num_stages - stage - 1) + (virtual_stages - 1) * num_stages
    return min(num_micro_batches, (warmup + 1) / virtual_stages)
