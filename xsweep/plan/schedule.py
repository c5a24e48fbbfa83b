"""Pipeline schedules: the order in which one stage runs its forward and backward passes."""

from __future__ import annotations

from xsweep.spec.enums import SCHEDULE


def stage_order(schedule: str, stage: int, num_stages: int, num_micro_batches: int,
                virtual_stages: int = 1) -> list[tuple[str, int, int]]:
    """The passes of one stage in execution order, as ``("F" | "B", micro_batch, chunk)``.

    GPipe runs every forward pass, then every backward pass. 1F1B (PipeDream-flush,
    as in Megatron) runs ``num_stages - stage - 1`` warm-up forwards, then alternates one
    forward and one backward, then drains the remaining backwards; it keeps at most
    ``num_stages - stage`` micro-batches in flight.

    Interleaved 1F1B (``virtual_stages`` = ``v`` > 1, Megatron-LM's schedule): the stage
    holds ``v`` model chunks; the model runs chunk 0 of every stage, then chunk 1 of
    every stage, and so on. Passes go in groups of ``num_stages`` micro-batches: forward
    pass ``i`` is micro-batch ``(i // pv) p + i % p`` of chunk ``(i % pv) // p``, backward
    pass ``i`` the same micro-batch of chunk ``v - 1 - (i % pv) // p``. The stage runs
    ``2(p - stage - 1) + (v - 1) p`` warm-up forwards (at most all ``m v``), then
    alternates, then drains. It needs ``num_micro_batches`` to be a multiple of the
    stages. Without interleaving every pass is chunk 0.
    """
    m, p, v = num_micro_batches, num_stages, virtual_stages
    if schedule == "gpipe":
        if v != 1:
            raise ValueError("GPipe runs one model chunk per stage")
        return [("F", j, 0) for j in range(m)] + [("B", j, 0) for j in range(m)]
    if schedule != "1f1b":
        raise ValueError(f"unknown schedule {schedule!r}")
    if v == 1:
        warmup = min(p - stage - 1, m)
        order = [("F", j, 0) for j in range(warmup)]
        for j in range(m - warmup):
            order += [("F", warmup + j, 0), ("B", j, 0)]
        return order + [("B", j, 0) for j in range(m - warmup, m)]
    if m % p:
        raise ValueError(f"interleaving needs micro-batches ({m}) in multiples of the "
                         f"stages ({p})")

    def unit(kind: str, i: int) -> tuple[str, int, int]:
        group, rest = divmod(i, p * v)
        chunk = rest // p
        return kind, group * p + rest % p, chunk if kind == "F" else v - 1 - chunk

    total = m * v
    warmup = min(2 * (p - stage - 1) + (v - 1) * p, total)
    order = [unit("F", i) for i in range(warmup)]
    for i in range(total - warmup):
        order += [unit("F", warmup + i), unit("B", i)]
    return order + [unit("B", i) for i in range(total - warmup, total)]


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
