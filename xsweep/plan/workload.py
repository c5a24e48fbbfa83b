"""Per-layer workload of a transformer: parameters, FLOPs, bytes moved and stage costs.

The accounting follows Megatron-LM (Narayanan et al., 2021): a matrix multiply of an
``m x k`` by a ``k x n`` matrix costs ``2mkn`` FLOPs, attention scores and the
attention-weighted values cost ``2 b s^2 h`` each (no halving for the causal mask),
the backward pass costs twice the forward pass, and full activation recompute adds one
more forward pass of the transformer blocks (the LM head is not recomputed). Grouped-query
attention shrinks the K and V projections to ``num_kv_heads`` heads; SwiGLU uses three
FFN matrices where GELU uses two. Norms, activations and residual additions are left out
of the FLOP count, as in Megatron's formula; a block's parameters do include its two
norm gains (no biases), and the LM head carries the final norm.

Tensor parallelism (Megatron): QKV, attention and the output projection are split by
heads, the FFN by its width, embedding and LM head by vocabulary. TP need not divide
these sizes; the largest shard (``ceil(n / tp)`` of ``n``) sets a group's time and
memory, so every per-GPU figure here is that of the largest shard. When ``tp`` exceeds
the number of KV heads, each rank keeps one KV head.

Compute time is a roofline per operator group (one fused kernel each: the QKV
projection, the attention core, the output projection, the FFN input and output
matrices, the embedding gather, the logits and the loss):
``max(flops / (peak x efficiency), bytes / HBM bandwidth)``, where bytes are the
weights read once per micro-batch plus the activations read and written, in bf16. The
attention core is taken as fused (flash attention): it reads Q, K, V and writes its
output without materialising the scores. Backward time is twice the forward time of
each group. A measured :class:`~xsweep.spec.profile.Profile` replaces the estimate of
the transformer blocks; embedding and head are always estimated.
"""

from __future__ import annotations

from dataclasses import dataclass

from xsweep.errors import InputError
from xsweep.spec.catalog import GpuSpec, ModelSpec
from xsweep.spec.profile import Profile

BF16_BYTES = 2
#: Bytes one parameter's mixed-precision Adam step touches: it reads fp32 master weight,
#: m and v (12) and the bf16 gradient (2), and writes master, m, v (12) and bf16 weight (2).
ADAM_STEP_BYTES_PER_PARAM = 28


@dataclass(frozen=True)
class TpShard:
    """Sizes held by the largest shard of a tensor-parallel group."""

    heads: int  # query heads
    kv_heads: int
    ffn: int  # FFN width
    vocab: int


def tp_shard(model: ModelSpec, tp: int) -> TpShard:
    """The largest shard's share of heads, KV heads, FFN width and vocabulary at TP ``tp``."""
    if tp < 1:
        raise ValueError(f"tp must be at least 1, got {tp}")
    sizes = (model.num_attention_heads, model.num_kv_heads, model.ffn_hidden_size,
             model.vocab_size)
    return TpShard(*(-(-n // tp) for n in sizes))  # ceiling division


def mlp_matrices(model: ModelSpec) -> int:
    """Number of FFN weight matrices: 2 for GELU, 3 for SwiGLU (gate, up, down)."""
    kind = model.mlp.lower()
    if kind == "gelu":
        return 2
    if kind == "swiglu":
        return 3
    raise ValueError(f"model {model.name!r}: unknown mlp {model.mlp!r} (gelu or swiglu)")


def _head_dim(model: ModelSpec) -> int:
    return model.hidden_size // model.num_attention_heads


def _block_weights(model: ModelSpec, shard: TpShard) -> int:
    h, d = model.hidden_size, _head_dim(model)
    attention = h * d * (2 * shard.heads + 2 * shard.kv_heads)  # Q, K, V, output projection
    ffn = mlp_matrices(model) * h * shard.ffn
    return attention + ffn + 2 * h  # two norm gains, replicated on every rank


def block_params(model: ModelSpec) -> int:
    """Parameters of one transformer block."""
    return _block_weights(model, tp_shard(model, 1))


def embedding_params(model: ModelSpec) -> int:
    """Parameters of the token embedding."""
    return model.vocab_size * model.hidden_size


def head_params(model: ModelSpec) -> int:
    """Parameters of the untied LM head, final norm included."""
    return model.vocab_size * model.hidden_size + model.hidden_size


def _check_layers(model: ModelSpec, first: int, last: int, num_layers: int | None = None) -> int:
    total = model.num_layers if num_layers is None else num_layers
    if not 1 <= first <= last <= total:
        raise ValueError(f"layers {first}..{last} are not inside 1..{total}")
    return total


def _segment_params(model: ModelSpec, shard: TpShard, first: int, last: int,
                    total: int) -> int:
    h = model.hidden_size
    params = (last - first + 1) * _block_weights(model, shard)
    if first == 1:
        params += shard.vocab * h  # embedding
    if last == total:
        params += shard.vocab * h + h  # LM head and final norm
    return params


def rank_params(model: ModelSpec, tp: int, first_layer: int, last_layer: int) -> int:
    """Parameters one rank (the largest TP shard) holds for layers first..last (1-based).

    The embedding belongs to layer 1 and the LM head to layer L.
    """
    total = _check_layers(model, first_layer, last_layer)
    return _segment_params(model, tp_shard(model, tp), first_layer, last_layer, total)


def segment_grad_bytes(model: ModelSpec, first: int, last: int,
                       num_layers: int | None = None) -> int:
    """Unsharded bf16 gradient bytes of layers first..last (1-based, inclusive).

    Includes the embedding when ``first == 1`` and the LM head when ``last`` is the last
    layer ``num_layers`` (default ``model.num_layers``).
    """
    total = _check_layers(model, first, last, num_layers)
    return BF16_BYTES * _segment_params(model, tp_shard(model, 1), first, last, total)


@dataclass(frozen=True)
class _Op:
    """One kernel on one rank: FLOPs and HBM bytes moved."""

    flops: float
    bytes: float


def _gemm(tokens: int, k: int, n: int, *, in_cols: int, out_cols: int) -> _Op:
    """``tokens x k`` times ``k x n`` weight; reads ``in_cols``, writes ``out_cols`` per token."""
    return _Op(2.0 * tokens * k * n, BF16_BYTES * (k * n + tokens * (in_cols + out_cols)))


def _block_ops(model: ModelSpec, micro_batch_size: int, shard: TpShard) -> tuple[_Op, ...]:
    h, s, d = model.hidden_size, model.seq_length, _head_dim(model)
    tokens = micro_batch_size * s
    q_cols, kv_cols = d * shard.heads, 2 * d * shard.kv_heads
    qkv_cols = q_cols + kv_cols
    ffn_in = (mlp_matrices(model) - 1) * shard.ffn
    attention_core = _Op(  # scores and weighted values, 2*b*s^2*d per head each
        4.0 * micro_batch_size * s * s * q_cols,
        BF16_BYTES * tokens * (qkv_cols + q_cols),
    )
    return (
        _gemm(tokens, h, qkv_cols, in_cols=h, out_cols=qkv_cols),
        attention_core,
        _gemm(tokens, q_cols, h, in_cols=q_cols, out_cols=h),
        _gemm(tokens, h, ffn_in, in_cols=h, out_cols=ffn_in),
        _gemm(tokens, shard.ffn, h, in_cols=shard.ffn, out_cols=h),
    )


def _embedding_ops(model: ModelSpec, micro_batch_size: int) -> tuple[_Op, ...]:
    row_bytes = BF16_BYTES * micro_batch_size * model.seq_length * model.hidden_size
    return (_Op(0.0, 2 * row_bytes),)  # gather the rows, write the layer input


def _head_ops(model: ModelSpec, micro_batch_size: int, shard: TpShard) -> tuple[_Op, ...]:
    tokens = micro_batch_size * model.seq_length
    logits = _gemm(tokens, model.hidden_size, shard.vocab, in_cols=model.hidden_size,
                   out_cols=shard.vocab)
    loss = _Op(0.0, BF16_BYTES * tokens * shard.vocab)  # the loss reads the logits once more
    return (logits, loss)


def _flops(ops: tuple[_Op, ...]) -> float:
    return sum(op.flops for op in ops)


def _roofline_s(ops: tuple[_Op, ...], gpu: GpuSpec) -> float:
    rate = gpu.peak_flops * gpu.efficiency
    return sum(max(op.flops / rate, op.bytes / gpu.hbm_bytes_per_s) for op in ops)


def block_forward_flops(model: ModelSpec, micro_batch_size: int) -> float:
    """Forward FLOPs of one transformer block for one micro-batch (no parallelism)."""
    return _flops(_block_ops(model, micro_batch_size, tp_shard(model, 1)))


def block_forward_bytes(model: ModelSpec, micro_batch_size: int) -> float:
    """HBM bytes one block's forward pass moves for one micro-batch (no parallelism)."""
    return sum(op.bytes for op in _block_ops(model, micro_batch_size, tp_shard(model, 1)))


def head_forward_flops(model: ModelSpec, micro_batch_size: int) -> float:
    """Forward FLOPs of the LM head (logits) for one micro-batch: ``2 b s h V``."""
    return _flops(_head_ops(model, micro_batch_size, tp_shard(model, 1)))


def iteration_model_flops(model: ModelSpec, global_batch: int, recompute: bool = False) -> float:
    """FLOPs of one training iteration over ``global_batch`` sequences.

    Forward plus backward (twice the forward) of all blocks and the head; with
    ``recompute`` one more forward of the blocks.
    """
    blocks = model.num_layers * block_forward_flops(model, global_batch)
    head = head_forward_flops(model, global_batch)
    return 3.0 * (blocks + head) + (blocks if recompute else 0.0)


@dataclass(frozen=True)
class StageCost:
    """Cost of one micro-batch on one device group (per GPU: the largest TP shard).

    Layer tuples run from ``first_layer`` to ``last_layer``; the embedding is added to
    layer 1's entry and the head and loss to layer L's, so each tuple sums to the stage
    time. Backward figures include the recompute forward when recompute is on.
    """

    forward_flops: float
    backward_flops: float
    forward_time_s: float
    backward_time_s: float
    layer_forward_time_s: tuple[float, ...]
    layer_backward_time_s: tuple[float, ...]
    tp_allreduce_bytes: float  # one Megatron TP all-reduce: b*s*h bf16 values
    tp_allreduces_forward: int
    tp_allreduces_backward: int
    activation_bytes: float  # sent to the next stage per micro-batch (gradient back: same)
    grad_bytes: float  # bf16 gradients held by one rank for its layers
    profiled: bool  # block times come from a measured profile, not the roofline


def _block_times_s(model: ModelSpec, gpu: GpuSpec, tp: int, micro_batch_size: int,
                   ops: tuple[_Op, ...], profile: Profile | None) -> tuple[float, float, bool]:
    """Forward and backward time of one block (without recompute) and whether measured."""
    if profile is not None:
        if profile.model is not None and profile.model.lower() != model.name.lower():
            raise InputError(profile.source, "model", profile.model,
                             f"profile was measured for another model than {model.name!r}")
        measured = profile.lookup(gpu.name, tp, micro_batch_size)
        if measured is not None:
            return measured[0], measured[1], True
    forward_s = _roofline_s(ops, gpu)
    return forward_s, 2.0 * forward_s, False


def stage_cost(model: ModelSpec, gpu: GpuSpec, tp: int, micro_batch_size: int,
               first_layer: int, last_layer: int, *, recompute: bool = False,
               profile: Profile | None = None) -> StageCost:
    """Cost of one micro-batch on a device group running layers first..last (1-based).

    Args:
        profile: measured block times; where it has no entry for (GPU, TP, micro-batch
            size), or the size lies outside its measured range, the roofline is used.
    """
    total = _check_layers(model, first_layer, last_layer)
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be at least 1, got {micro_batch_size}")
    shard = tp_shard(model, tp)
    num_blocks = last_layer - first_layer + 1
    ops = _block_ops(model, micro_batch_size, shard)
    block_fwd_s, block_bwd_s, profiled = _block_times_s(model, gpu, tp, micro_batch_size,
                                                        ops, profile)
    if recompute:
        block_bwd_s += block_fwd_s
    fwd_s, bwd_s = [block_fwd_s] * num_blocks, [block_bwd_s] * num_blocks
    block_flops = _flops(ops)
    forward_flops = num_blocks * block_flops
    if first_layer == 1:
        embed_s = _roofline_s(_embedding_ops(model, micro_batch_size), gpu)
        fwd_s[0] += embed_s
        bwd_s[0] += 2.0 * embed_s
    if last_layer == total:
        head = _head_ops(model, micro_batch_size, shard)
        head_s = _roofline_s(head, gpu)
        fwd_s[-1] += head_s
        bwd_s[-1] += 2.0 * head_s
        forward_flops += _flops(head)
    backward_flops = 2.0 * forward_flops + (num_blocks * block_flops if recompute else 0.0)
    activation_bytes = float(BF16_BYTES * micro_batch_size * model.seq_length
                             * model.hidden_size)
    return StageCost(
        forward_flops=forward_flops,
        backward_flops=backward_flops,
        forward_time_s=sum(fwd_s),
        backward_time_s=sum(bwd_s),
        layer_forward_time_s=tuple(fwd_s),
        layer_backward_time_s=tuple(bwd_s),
        tp_allreduce_bytes=activation_bytes,
        tp_allreduces_forward=2 * num_blocks,
        tp_allreduces_backward=(4 if recompute else 2) * num_blocks,
        activation_bytes=activation_bytes,
        grad_bytes=float(BF16_BYTES * rank_params(model, tp, first_layer, last_layer)),
        profiled=profiled,
    )


def optimizer_time_s(model: ModelSpec, gpu: GpuSpec, tp: int, first: int, last: int,
                     dp: int, zero_stage: int) -> float:
    """Time of one mixed-precision Adam step on one rank of a group (memory bound).

    With ZeRO stage 1 each of the ``dp`` replicas updates only its share of the states.
    """
    if zero_stage not in (0, 1):
        raise ValueError(f"zero_stage must be 0 or 1, got {zero_stage}")
    if dp < 1:
        raise ValueError(f"dp must be at least 1, got {dp}")
    step_bytes = ADAM_STEP_BYTES_PER_PARAM * rank_params(model, tp, first, last)
    return step_bytes / gpu.hbm_bytes_per_s / (dp if zero_stage == 1 else 1)

