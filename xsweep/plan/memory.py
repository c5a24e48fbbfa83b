"""Memory one GPU of a device group needs: weights, gradients, optimizer states, activations.

Mixed-precision training with Adam: bf16 weights (2 bytes a parameter) and bf16
gradients (2 bytes; frameworks that accumulate gradients in fp32 need 2 more), fp32
master weights, first and second moments (12 bytes), which ZeRO stage 1 shards over
the ``dp`` replicas. Parameters are those of the largest TP shard.

Activations follow Korthikanti et al. (2022), "Reducing Activation Recomputation in
Large Transformer Models", without sequence parallelism: one GPT block keeps
``s*b*h*(34 + 5*a*s/h)`` bytes per micro-batch, and with TP degree ``t``
``s*b*h*(10 + 24/t + 5*a*s/(h*t))``. The ``5*a*s/h`` term assumes the attention
scores are materialised (no flash attention), which makes the figure conservative.
Adaptation to other blocks, approximate: the ``8*s*b*h`` of Q, K, V and the
output-projection input becomes ``s*b*(4*h + 4*k*d)`` with ``k`` KV heads of size ``d``
(GQA keeps smaller K and V); the FFN keeps ``4*s*b*f`` for GELU (its input and output,
``16*s*b*h`` at ``f = 4h``) and ``6*s*b*f`` for SwiGLU (the gate and up outputs and the
down-projection input); dropout masks are counted even for models trained without
dropout. Uneven TP shards use the largest shard's heads and FFN width. With full
recompute a block keeps only its input, ``2*s*b*h``, and one block's full activations
exist while it is being recomputed. The first stage also keeps the embedding's dropout
mask (``s*b*h``), the last stage the fp32 logits (``4*s*b*V/t``).

In-flight micro-batches: GPipe keeps all ``m`` forward passes before the first
backward; 1F1B keeps ``min(m, p - stage_index)`` with ``stage_index`` counted from 0.
No headroom is reserved for the framework, the allocator or communication buffers.
"""

from __future__ import annotations

from dataclasses import dataclass

from xsweep.plan.workload import BF16_BYTES, mlp_matrices, rank_params, tp_shard
from xsweep.spec.catalog import GpuSpec, ModelSpec
from xsweep.spec.enums import SCHEDULE

GB = 1e9
GRAD_BYTES_PER_PARAM = 2  # bf16
ADAM_BYTES_PER_PARAM = 12  # fp32 master weight, m and v


@dataclass(frozen=True)
class MemoryBreakdown:
    """Memory of one GPU, in GB (1e9 bytes)."""

    weights_gb: float
    grads_gb: float
    optimizer_gb: float
    activations_gb: float
    total_gb: float


def layer_activation_bytes(model: ModelSpec, tp: int, micro_batch_size: int) -> float:
    """Bytes one block keeps for the backward pass, per micro-batch, on one rank (no recompute)."""
    shard = tp_shard(model, tp)
    h, s, b = model.hidden_size, model.seq_length, micro_batch_size
    d = h // model.num_attention_heads
    replicated = 10 * s * b * h  # norm inputs, QKV and FFN inputs, two dropout masks
    attention = (s * b * (4 * d * shard.heads + 4 * d * shard.kv_heads)
                 + 5 * shard.heads * s * s * b)
    ffn_bytes_per_unit = 4 if mlp_matrices(model) == 2 else 6
    return float(replicated + attention + ffn_bytes_per_unit * s * b * shard.ffn)


def in_flight_micro_batches(schedule: str, num_micro_batches: int, stage_index: int,
                            num_stages: int) -> int:
    """Micro-batches whose activations a stage holds at its peak."""
    if schedule not in SCHEDULE.known():
        raise ValueError(f"schedule must be one of {SCHEDULE.known()}, got {schedule!r}")
    if not 0 <= stage_index < num_stages:
        raise ValueError(f"stage_index {stage_index} is not inside 0..{num_stages - 1}")
    if num_micro_batches < 1:
        raise ValueError(f"num_micro_batches must be at least 1, got {num_micro_batches}")
    if schedule == "gpipe":
        return num_micro_batches
    return min(num_micro_batches, num_stages - stage_index)


def _held_activation_bytes(model: ModelSpec, tp: int, micro_batch_size: int, first_layer: int,
                     last_layer: int, in_flight: int, recompute: bool) -> float:
    """Activation bytes one rank holds with ``in_flight`` micro-batches in flight."""
    h, s, b = model.hidden_size, model.seq_length, micro_batch_size
    per_block = layer_activation_bytes(model, tp, b)
    blocks = last_layer - first_layer + 1
    if recompute:
        held = blocks * in_flight * BF16_BYTES * s * b * h + per_block
    else:
        held = blocks * in_flight * per_block
    if first_layer == 1:
        held += in_flight * s * b * h  # embedding dropout mask, one byte an element
    if last_layer == model.num_layers:
        held += in_flight * 4 * s * b * tp_shard(model, tp).vocab  # fp32 logits
    return held


def memory_per_gpu(model: ModelSpec, gpu: GpuSpec, tp: int, micro_batch_size: int,
                   first_layer: int, last_layer: int, *, stage_index: int, num_stages: int,
                   schedule: str, num_micro_batches: int, recompute: bool = False,
                   zero_stage: int = 0, dp: int = 1) -> MemoryBreakdown:
    """Peak memory of one GPU of a device group running layers first..last (1-based).

    Args:
        gpu: the group's GPU, taken like every per-group cost function takes it; the
            breakdown does not depend on it (:func:`fits` compares it with the GPU).
        stage_index: the group's pipeline stage, 0 to ``num_stages - 1``.
        schedule: ``"gpipe"`` or ``"1f1b"``.
        zero_stage: 0, or 1 to shard optimizer states over the ``dp`` replicas.
    """
    if zero_stage not in (0, 1):
        raise ValueError(f"zero_stage must be 0 or 1, got {zero_stage}")
    if dp < 1:
        raise ValueError(f"dp must be at least 1, got {dp}")
    params = rank_params(model, tp, first_layer, last_layer)
    in_flight = in_flight_micro_batches(schedule, num_micro_batches, stage_index, num_stages)
    weights = BF16_BYTES * params / GB
    grads = GRAD_BYTES_PER_PARAM * params / GB
    optimizer = ADAM_BYTES_PER_PARAM * params / (dp if zero_stage == 1 else 1) / GB
    activations = _held_activation_bytes(model, tp, micro_batch_size, first_layer, last_layer,
                                   in_flight, recompute) / GB
    return MemoryBreakdown(weights, grads, optimizer, activations,
                           weights + grads + optimizer + activations)


def fits(breakdown: MemoryBreakdown, gpu: GpuSpec) -> bool:
    """Whether the breakdown fits the GPU's HBM."""
    return breakdown.total_gb <= gpu.hbm_gb
