"""Memory one GPU of a device group needs: weights, gradients, optimizer states, activations.

Mixed-precision training with Adam: bf16 weights (2 bytes a parameter) and bf16
gradients (2 bytes; frameworks that accumulate gradients in fp32 need 2 more), fp32
master weights, first and second moments (12 bytes). ZeRO stage 1 (Megatron's
distributed optimizer) shards the 12 bytes over the ``dp`` replicas; stage 3 (FSDP)
shards all 16, and then holds the whole bf16 weights of two blocks (the one running
and the one prefetched) and the whole bf16 gradients of one block (before their
reduce-scatter). Parameters are those of the largest TP shard.

Activations follow Korthikanti et al. (2022), "Reducing Activation Recomputation in
Large Transformer Models" (Table 2): one GPT block keeps ``s*b*h*(34 + 5*a*s/h)`` bytes
per micro-batch; with TP degree ``t`` ``s*b*h*(10 + 24/t + 5*a*s/(h*t))``; with
sequence parallelism ``s*b*h*(34/t + 5*a*s/(h*t))``; the ``5*a*s/h`` term (softmax
output, its dropout mask and the dropout output) disappears under selective recompute.
The ``10*s*b*h`` that TP alone does not split are the two norm inputs, the inputs of
the QKV and first FFN matrices and two dropout masks; sequence parallelism splits them
too. Adaptation to other blocks: the ``8*s*b*h`` of Q, K, V and the output-projection
input becomes ``s*b*(4*q + 4*k*d)`` with ``q`` the query width and ``k`` KV heads of size
``d`` (GQA keeps smaller K and V); the FFN keeps ``4*s*b*f`` for GELU (its input and
output, ``16*s*b*h`` at ``f = 4h``) and ``6*s*b*f`` for SwiGLU (the gate and up outputs
and the down-projection input). Models trained without dropout keep no masks: ``8*s*b*h``
unsplit and ``2*a*s^2*b`` of softmax output. Flash attention never stores the scores,
only the fp32 log-sum-exp of each query row (``4*a*s*b``). Uneven TP shards use the
largest shard's heads and FFN width. With full recompute a block keeps only its
input, ``2*s*b*h`` (split by TP under sequence parallelism), and one block's full
activations exist while it is being recomputed. The first stage also keeps the
embedding's dropout mask (``s*b*h``, if the model has dropout), the last stage the fp32
logits (``4*s*b*V/t``).

In FP8 (``stack.precision == "fp8"``, as Transformer Engine runs it) a rank also keeps an
FP8 copy of each GEMM weight it holds and its FP8 transpose (the layout the other GEMM
of the pair needs on Hopper; assumed on Blackwell too): ``FP8_WEIGHT_BYTES`` = 2 bytes
per GEMM parameter (every block parameter but the norm gains; the embedding and LM head
stay BF16), counted with the weights; under FSDP, of the rank's shard and of the gathered
blocks. The BF16 weights, the gradients and the FP32 optimizer states are unchanged.
Activations: each FP8 GEMM keeps its input for the weight gradient as the FP8 copy the
forward cast made (one byte an element, not two): the QKV and first FFN inputs of the
unsplit ``10*s*b*h`` (the norm inputs stay BF16), the output-projection input (``2*s*b*q``
of the attention's ``4*s*b*q``) and the FFN's output-matrix input (``s*b*f`` of it). Q, K
and V (the attention core is BF16), the norm inputs, the FFN's input-matrix outputs, the
masks and, under full recompute, the block inputs stay as in BF16.

With FP8 parameters (``stack.fp8_param_gather``: Transformer Engine's FP8 model
initialisation, which Megatron-Core's ``--fp8-param-gather`` and NeMo's ``fp8_params``
turn on) the GEMM weights are held as FP8 tensors only: their FP8 data and transpose
(``FP8_WEIGHT_BYTES``, as above) and no BF16 copy, so 2 bytes less per GEMM parameter
held (of the rank's shard and of the gathered blocks under FSDP). The embedding, the LM
head and the norm gains stay BF16; the gradients and the FP32 master weights and Adam
states (the optimizer's, from which each step writes the FP8 weights) are unchanged.

In-flight micro-batches come from the schedule (``xsweep.plan.schedule.in_flight``):
GPipe keeps all ``m`` forward passes before the first backward; 1F1B keeps
``min(m, p - stage_index)`` with ``stage_index`` counted from 0; interleaved 1F1B with
``v`` model chunks per stage holds ``(2(p - i - 1) + (v - 1)p + 1) / v`` micro-batches'
worth of its layers (stage 0: ``p(1 + (p - 1)/(p v))``, Korthikanti et al.), at most ``m``.
No headroom is reserved for the framework, the allocator or communication buffers.
Sizes are reported in GiB (2^30 bytes), the unit of HBM capacities.
"""

from __future__ import annotations

from dataclasses import dataclass

from xsweep.plan.schedule import in_flight as schedule_in_flight
from xsweep.plan.stack import DEFAULT_STACK, ZERO_STAGES, Stack
from xsweep.plan.workload import (
    BF16_BYTES,
    FP8_BYTES,
    MASK_BYTES,
    block_gemm_params,
    block_params,
    expert_replicas,
    expert_width,
    mlp_matrices,
    moe_layers_in,
    rank_expert_params,
    rank_gemm_params,
    rank_params,
    routed_rows,
    shared_width,
    tp_shard,
)
from xsweep.spec.catalog import GIB, GpuSpec, ModelSpec

GRAD_BYTES_PER_PARAM = 2  # bf16
ADAM_BYTES_PER_PARAM = 12  # fp32 master weight, m and v
LSE_BYTES = 4  # fp32 log-sum-exp per query row and head under flash attention
FSDP_GATHERED_BLOCKS = 2  # unsharded weights held: the block running and the one prefetched
FP8_WEIGHT_BYTES = 2 * FP8_BYTES  # an FP8 copy of a GEMM weight and its FP8 transpose


@dataclass(frozen=True)
class MemoryBreakdown:
    """Memory of one GPU, in GiB (2^30 bytes)."""

    weights_gib: float
    grads_gib: float
    optimizer_gib: float
    activations_gib: float
    total_gib: float


def layer_activation_bytes(model: ModelSpec, tp: int, micro_batch_size: int,
                           stack: Stack = DEFAULT_STACK) -> float:
    """Bytes one block keeps for the backward pass, per micro-batch, on one rank.

    Under full recompute this is what the block being recomputed holds; selective
    recompute drops the attention scores.
    """
    shard = tp_shard(model, tp)
    h, s, b = model.hidden_size, model.seq_length, micro_batch_size
    d = h // model.num_attention_heads
    masks = 2 * MASK_BYTES if model.dropout else 0
    # the saved inputs of the GEMMs: BF16, or the FP8 copies the forward casts made
    saved = FP8_BYTES if stack.precision == "fp8" else BF16_BYTES
    # two norm inputs, the QKV and first FFN inputs, dropout masks
    unsplit = (2 * BF16_BYTES + 2 * saved + masks) * s * b * h
    if stack.sequence_parallel:
        unsplit /= tp
    # Q (and the output-projection input), K and V
    attention = s * b * ((BF16_BYTES + saved) * d * shard.heads + 4 * d * shard.kv_heads)
    if stack.recompute != "selective":
        if stack.flash_attention:
            attention += LSE_BYTES * shard.heads * s * b
        else:  # softmax output, and with dropout its mask and the dropped-out copy
            kept = BF16_BYTES + (MASK_BYTES + BF16_BYTES if model.dropout else 0)
            attention += kept * shard.heads * s * s * b
    # the input matrices' outputs (BF16) and the output matrix's input
    ffn = ((mlp_matrices(model) - 1) * BF16_BYTES + saved) * s * b * shard.ffn
    return float(unsplit + attention + ffn)


def moe_layer_activation_bytes(model: ModelSpec, tp: int, micro_batch_size: int,
                               stack: Stack = DEFAULT_STACK) -> float:
    """Bytes one MoE block keeps for the backward pass, per micro-batch, on one rank: a
    dense block's without its FFN, plus the router's logits (``s b / t x experts``, fp32),
    the routed token copies' expert inputs, their input matrices' outputs and the output
    matrix's input (:func:`xsweep.plan.workload.routed_rows` rows of the rank's expert
    width), and the shared experts' FFN as a dense one's.

    In FP8 the inputs the experts' GEMMs keep (the token copies, the output matrices'
    inputs, the shared experts' input) are their one-byte FP8 copies, as a dense FFN's;
    the router is BF16 and keeps its BF16 input beside them (``2 s b h``, split under
    sequence parallelism)."""
    s, b, mats = model.seq_length, micro_batch_size, mlp_matrices(model)
    saved = FP8_BYTES if stack.precision == "fp8" else BF16_BYTES
    dense_ffn = (mats - 1) * BF16_BYTES + saved
    without_ffn = (layer_activation_bytes(model, tp, micro_batch_size, stack)
                   - dense_ffn * s * b * tp_shard(model, tp).ffn)
    rows = routed_rows(model, micro_batch_size, tp, stack)
    width = expert_width(model, tp, stack.expert_parallel)
    split = tp if stack.sequence_parallel else 1
    router = 4 * s * b / split * model.num_experts
    routed = rows * (saved * model.hidden_size + dense_ffn * width)
    shared_w = shared_width(model, tp)
    shared = dense_ffn * s * b * shared_w
    if saved != BF16_BYTES:  # the FFN input the dense block saves in FP8 is the shared
        # experts' (none without them); the router's BF16 input comes on top
        router += (BF16_BYTES - (0 if shared_w else saved)) * s * b * model.hidden_size / split
    return float(without_ffn + router + routed + shared)


def _held_activation_bytes(model: ModelSpec, tp: int, micro_batch_size: int, first_layer: int,
                           last_layer: int, in_flight: float, stack: Stack) -> float:
    """Activation bytes one rank holds with ``in_flight`` micro-batches in flight."""
    h, s, b = model.hidden_size, model.seq_length, micro_batch_size
    split = tp if stack.sequence_parallel else 1
    per_block = layer_activation_bytes(model, tp, b, stack)
    blocks = last_layer - first_layer + 1
    moe = moe_layers_in(model, first_layer, last_layer)
    if moe:
        per_moe = moe_layer_activation_bytes(model, tp, b, stack)
        if stack.recompute == "full":
            held = (blocks * in_flight * BF16_BYTES * s * b * h / split
                    + max(per_moe, per_block if moe < blocks else 0.0))
        else:
            held = in_flight * ((blocks - moe) * per_block + moe * per_moe)
    elif stack.recompute == "full":
        held = blocks * in_flight * BF16_BYTES * s * b * h / split + per_block
    else:
        held = blocks * in_flight * per_block
    if first_layer == 1 and model.dropout:
        held += in_flight * MASK_BYTES * s * b * h / split  # embedding dropout mask
    if last_layer == model.num_layers:
        held += in_flight * 4 * s * b * tp_shard(model, tp).vocab  # fp32 logits
    return held


def memory_per_gpu(model: ModelSpec, gpu: GpuSpec, tp: int, micro_batch_size: int,
                   first_layer: int, last_layer: int, *, stage_index: int, num_stages: int,
                   schedule: str, num_micro_batches: int, stack: Stack = DEFAULT_STACK,
                   dp: int = 1, cp: int = 1) -> MemoryBreakdown:
    """Peak memory of one GPU of a device group running layers first..last (1-based).

    Args:
        gpu: the group's GPU, taken like every per-group cost function takes it; the
            breakdown does not depend on it (:func:`fits` compares it with the GPU).
        stage_index: the group's pipeline stage, 0 to ``num_stages - 1``.
        schedule: ``"gpipe"`` or ``"1f1b"``.
        stack: training-stack options (sequence parallelism, flash attention, recompute,
            ZeRO stage, virtual pipeline stages).
        dp: ranks holding the same weights that the group's ZeRO sharding spreads over
            (the replicas times the CP ranks).
        cp: context-parallel ranks: each holds ``1/cp`` of every sequence's activations.
    """
    return memory_breakdown(model, tp, micro_batch_size, first_layer, last_layer,
                            stage_index, num_stages, schedule, num_micro_batches, stack, dp,
                            cp)


def memory_breakdown(model: ModelSpec, tp: int, micro_batch_size: int, first_layer: int,
                     last_layer: int, stage_index: int, num_stages: int, schedule: str,
                     num_micro_batches: int, stack: Stack, dp: int,
                     cp: int = 1) -> MemoryBreakdown:
    """:func:`memory_per_gpu` without the GPU, which it does not depend on: a memo keyed
    by these arguments serves every GPU model of a sweep."""
    if stack.zero_stage not in ZERO_STAGES:
        raise ValueError(f"zero_stage must be one of {ZERO_STAGES}, got {stack.zero_stage}")
    if dp < 1:
        raise ValueError(f"dp must be at least 1, got {dp}")
    params = rank_params(model, tp, first_layer, last_layer, stack.expert_parallel)
    in_flight = schedule_in_flight(schedule, stage_index, num_stages, num_micro_batches,
                                   stack.virtual_pipeline_stages)
    weights = BF16_BYTES * params
    grads = GRAD_BYTES_PER_PARAM * params
    optimizer = ADAM_BYTES_PER_PARAM * params / (dp if stack.zero_stage else 1)
    fold = expert_replicas(tp, stack.expert_parallel)
    if fold > 1 and stack.zero_stage:  # expert states: sharded over the dp / fold replicas
        experts = rank_expert_params(model, tp, first_layer, last_layer, stack.expert_parallel)
        optimizer = ADAM_BYTES_PER_PARAM * ((params - experts) / dp + experts / (dp // fold))
    fp8_copies = 0.0
    if stack.precision == "fp8":
        fp8_copies = FP8_WEIGHT_BYTES * rank_gemm_params(model, tp, first_layer, last_layer,
                                                         stack.expert_parallel)
    if stack.zero_stage == 3:
        ep = stack.expert_parallel
        block = block_params(model, tp, ep)  # unsharded over DP, still split by TP (and EP)
        # a rank's share: its parameters over the dp replicas; with EP over fold replicas,
        # its experts over the dp / fold that hold them
        if fold > 1:
            experts = rank_expert_params(model, tp, first_layer, last_layer, ep)
            held = (params - experts) / dp + experts / (dp // fold)
            weights, grads = BF16_BYTES * held, GRAD_BYTES_PER_PARAM * held
        else:
            weights, grads = weights / dp, grads / dp
        weights += FSDP_GATHERED_BLOCKS * BF16_BYTES * block
        grads += GRAD_BYTES_PER_PARAM * block
        if stack.precision == "fp8":
            if fold > 1:
                gemm = rank_gemm_params(model, tp, first_layer, last_layer, ep)
                fp8_copies = FP8_WEIGHT_BYTES * ((gemm - experts) / dp + experts / (dp // fold))
            else:
                fp8_copies = fp8_copies / dp
            fp8_copies += FSDP_GATHERED_BLOCKS * FP8_WEIGHT_BYTES * block_gemm_params(model, tp,
                                                                                      ep)
    if stack.fp8_param_gather:  # FP8 parameters: no BF16 copy of the GEMM weights
        weights -= BF16_BYTES * _held_gemm_params(model, tp, first_layer, last_layer, stack, dp)
    weights += fp8_copies
    activations = _held_activation_bytes(model, tp, micro_batch_size, first_layer,
                                         last_layer, in_flight, stack) / cp
    parts = [x / GIB for x in (weights, grads, optimizer, activations)]
    return MemoryBreakdown(*parts, sum(parts))


def _held_gemm_params(model: ModelSpec, tp: int, first_layer: int, last_layer: int,
                      stack: Stack, dp: int) -> float:
    """GEMM weights a rank holds: its layers' (ZeRO-1), or under FSDP its shard of them
    and the gathered blocks'."""
    gemm = rank_gemm_params(model, tp, first_layer, last_layer, stack.expert_parallel)
    if stack.zero_stage == 3:
        return gemm / dp + FSDP_GATHERED_BLOCKS * block_gemm_params(model, tp)
    return float(gemm)


def fits(breakdown: MemoryBreakdown, gpu: GpuSpec) -> bool:
    """Whether the breakdown fits the GPU's HBM."""
    return breakdown.total_gib <= gpu.hbm_gib
