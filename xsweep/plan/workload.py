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

Time is a roofline per kernel, ``max(flops / rate, bytes / (HBM bandwidth x hbm_efficiency))``,
where bytes are the weights read once per micro-batch plus the activations read and
written (bf16; dropout masks one byte an element). The rate depends on the kernel:

* GEMMs run at ``peak x gemm_efficiency x w / max(w + 1/2, 1)`` with ``w`` the waves
  of output tiles over the GPU's SMs: the last wave is on average half empty, and a
  GEMM of fewer tiles than SMs leaves SMs idle. Tiles are 256 x 128 (the tile of
  cuBLAS's fastest kernels in NVIDIA's *Matrix Multiplication Background User's
  Guide*), narrowed to a dimension smaller than that, down to 64. Large GEMMs reach
  the sustained maximum (``gemm_efficiency``); small or skinny ones (high TP, short
  sequences) fall below it, and GEMMs of little arithmetic intensity hit the HBM roof.
  Tile quantization is left out (transformer sizes are multiples of 128).
* Fused (flash) attention runs at ``peak x flash_attention_efficiency`` with the same
  wave factor over blocks of 128 query rows; it skips the masked half of the causal
  scores, so it takes half the time of its counted FLOPs at that rate.
* Without flash attention the core is two batched GEMMs (scores ``Q K^T`` and weighted
  values), with the fused scale-mask-softmax and, for models with dropout, the dropout
  of the probabilities as memory-bound passes over the ``b x heads x s x s`` scores.
* Norms, activations, dropout and residual additions are memory bound (Megatron fuses
  bias, dropout and residual into one pass): two norms (read and write ``h``), two
  residual additions (read ``2h``, write ``h``, plus the dropout mask), the activation
  (GELU reads and writes ``f/t``; SwiGLU reads ``2f/t`` and writes ``f/t``). Without
  sequence parallelism every TP rank repeats the norms and residuals on all tokens;
  with it each handles ``1/t`` of them.

Backward time is twice the forward time of each kernel. Selective recompute adds the
forward of the attention core to the backward pass, full recompute the forward of the
whole block. A measured :class:`~xsweep.spec.profile.Profile` replaces the estimate of
the transformer blocks; embedding and head are always estimated.

The software profile of the stack (``stack.software``, a catalog entry) multiplies the
GEMM fractions (``gemm_efficiency``, ``fp8_gemm_efficiency``) by its ``gemm_factor`` and
the fused attention fraction by its ``attention_factor``: a compute-bound kernel takes
``1 / factor`` times as long, a memory-bound one is unchanged. The reference profile's
factors are 1, which changes no number. A measured profile's block times are taken as
measured (they were timed under some stack already).

**FP8** (``stack.precision == "fp8"``), as Transformer Engine (TE) runs it with its
delayed-scaling recipe (E4M3 forward, E5M2 backward, one scale per tensor from the amax
history):

* The four GEMMs of a block (QKV, attention projection, the FFN's input and output
  matrices) run at ``peak_fp8 x fp8_gemm_efficiency x w / max(w + 1/2, 1)``: their own
  peak and sustained fraction (catalog ``peak_fp8_tflops``, ``fp8_gemm_efficiency``),
  and by shape the wave factor over output tiles of the BF16 size (assumed: Hopper's
  FP8 kernels take a deeper slice of ``k`` per step, not a larger output tile); their
  FLOPs are unchanged. They read FP8
  weights and inputs (one byte an element) and write BF16 outputs. Forward, the
  gradient of the input (dgrad) and of the weight (wgrad) are all FP8 GEMMs, so the
  backward is still twice the forward. In a MoE block the FP8 GEMMs are the attention's
  two, the routed experts' grouped GEMMs (TE's grouped linear layers, one FP8 GEMM per
  local expert) and the shared experts'; the router stays BF16 (Megatron-Core's router
  is not a TE module, and DeepSeek-V3 keeps its gating in higher precision too), and so
  do the all-to-alls unless ``moe_fp8_dispatch`` (DeepSeek-V3's FP8 dispatch) puts the
  dispatch direction in FP8; the cast of the experts' inputs is then counted where it is
  without it, on the received copies, rather than once per token before the dispatch
  (an upper estimate of a memory-bound pass).
* Casts: before each FP8 GEMM of a micro-batch its BF16 input is cast to FP8 in the
  forward pass, and the gradient of its output in the backward pass, each a memory-bound
  pass that reads the BF16 tensor and writes its FP8 copy and the FP8 transpose the
  other GEMM layout needs (TE's fused cast-transpose): ``FP8_CAST_BYTES`` = 4 bytes an
  element. The amax of each tensor is taken in the same pass (no bytes of its own);
  the cross-GPU reduction of the amaxes, a few kilobytes once per iteration, is left
  out. A MoE block casts each FP8 GEMM's input and output gradient alike: the routed
  experts' on the rank's token copies (:func:`routed_rows`). Weights are cast once per
  iteration, not per micro-batch (TE keeps the FP8
  weights of the first micro-batch): 4 bytes per GEMM parameter, added to the
  optimizer step that produced the weights (:func:`optimizer_time_s`).
* What stays BF16: the attention core (fused or not), norms, residuals, activations,
  embedding and LM head (Megatron-LM's output layer is not a TE module), the gradients
  and their reduction, the optimizer (FP32 master weights and states), the TP and
  pipeline traffic, and the parameter all-gathers of ZeRO-1 and FSDP (FP8 parameter
  all-gathers, Megatron-LM's ``--fp8-param-gather``, are not modelled).

**Mixture of experts** (``model.num_experts > 0``; ``docs/model.md``): the layers after
the first ``moe_first_dense_layers`` replace the FFN by a router (an ``h x experts`` GEMM
on the rank's tokens, ``1/t`` of them under sequence parallelism), the routed experts and
the shared experts. Experts are split over ``EP = stack.expert_parallel`` ranks of the
TP group (``experts / EP`` per rank) and each expert's FFN over the other ``t / EP``
(expert TP); with EP a multiple of ``t``, over the TP ranks of ``EP / t`` replicas
(``experts / EP`` whole experts per rank). A rank runs its experts as grouped GEMMs (one
GEMM per expert, the tiles of all of them in one launch) over its EP group's tokens
times ``top_k x load / EP`` (:func:`routed_rows`; every rank of an expert's ``t / EP``
takes all its tokens), ``load`` the assumed imbalance of the busiest
expert (1 at EP 1; capped by a capacity factor), with a memory-bound permutation of the
copies before and after; the shared experts run as one dense FFN of ``num_shared_experts``
times their width, split over TP. Per MoE layer and pass, EP above 1 adds a dispatch and a
combine all-to-all (:func:`a2a_pair_bytes`; twice more in the backward under full
recompute), which the lowering puts on the wire; with FP8 dispatch (``moe_fp8_dispatch``)
half of them, those in the dispatch direction, move :data:`FP8_DISPATCH_BYTES` an element
(:func:`a2a_precision_factor`). Parameters: the routed experts count
``experts x ceil(f_e / t)`` FFN widths per rank whatever EP dividing ``t`` (exact when
``t`` divides ``f_e``), ``experts / EP`` whole widths with EP above ``t``
(:func:`routed_params`); the router is replicated.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import NamedTuple

from xsweep.errors import InputError
from xsweep.memo import cached
from xsweep.plan.stack import DEFAULT_STACK, ZERO_STAGES, Stack
from xsweep.spec.catalog import GpuSpec, ModelSpec
from xsweep.spec.profile import Profile

BF16_BYTES = 2
FP8_BYTES = 1
#: Bytes per element of a cast to FP8: read the BF16 tensor (2), write its FP8 copy (1) and
#: the FP8 transpose (1), with its amax taken in the same pass.
FP8_CAST_BYTES = 4
#: Bytes per element of a token dispatched in FP8 (DeepEP's FP8 dispatch as DeepSeek-V3
#: runs it): the FP8 element, and a float32 scale per 128 elements (1 x 128 tiles).
FP8_DISPATCH_BYTES = FP8_BYTES + 4 / 128
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


@functools.lru_cache(maxsize=65536)  # pure, and asked for per stage of every plan
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


def _ceil(n: float, d: int) -> int:
    return -(-int(n) // d)


def expert_width(model: ModelSpec, tp: int, ep: int) -> int:
    """FFN width of one routed expert on one rank: split over the ``tp / ep`` ranks that
    share the expert (expert TP)."""
    return _ceil(model.expert_ffn_hidden_size, max(tp // ep, 1))


def shared_width(model: ModelSpec, tp: int) -> int:
    """FFN width of the shared experts (as one dense FFN) on the largest TP shard."""
    width = model.shared_expert_ffn_hidden_size or model.expert_ffn_hidden_size
    return _ceil(model.num_shared_experts * width, tp)


def routed_params(model: ModelSpec, tp: int, ep: int = 1) -> int:
    """Routed-expert parameters of one MoE block on one rank: with EP dividing TP, every
    expert's FFN split over TP (``experts / EP`` experts of ``1 / (TP / EP)`` of the width
    each: the same at every such EP); with EP above TP (EP over the TP ranks of several
    replicas), ``experts / EP`` whole experts."""
    mats, h = mlp_matrices(model), model.hidden_size
    if ep > tp:
        return model.num_experts // ep * mats * h * model.expert_ffn_hidden_size
    return model.num_experts * mats * h * _ceil(model.expert_ffn_hidden_size, tp)


def expert_replicas(tp: int, ep: int) -> int:
    """Replicas an EP group spans: ``EP / TP`` when EP is above TP, else 1."""
    return ep // tp if ep > tp else 1


def _moe_block_weights(model: ModelSpec, shard: TpShard, tp: int, ep: int = 1) -> int:
    """A MoE block on one rank: attention, the router (``h x experts``, replicated), the
    routed experts (:func:`routed_params`) and the shared experts."""
    h, d, mats = model.hidden_size, _head_dim(model), mlp_matrices(model)
    attention = h * d * (2 * shard.heads + 2 * shard.kv_heads)
    routed = routed_params(model, tp, ep)
    shared = mats * h * shared_width(model, tp)
    return attention + h * model.num_experts + routed + shared + 2 * h


@functools.lru_cache(maxsize=65536)  # pure, and asked for per stage of every plan
def block_params(model: ModelSpec, tp: int = 1, ep: int = 1) -> int:
    """Parameters of one transformer block (on the largest shard at TP ``tp``); with
    experts, of the larger of a dense and a MoE block (at expert parallelism ``ep``:
    :func:`routed_params`)."""
    shard = tp_shard(model, tp)
    if model.is_moe:
        return max(_block_weights(model, shard), _moe_block_weights(model, shard, tp, ep))
    return _block_weights(model, shard)


def moe_layers_in(model: ModelSpec, first: int, last: int) -> int:
    """MoE layers among 1-based layers first..last."""
    if not model.is_moe:
        return 0
    return max(0, last - max(first, model.moe_first_dense_layers + 1) + 1)


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
                    total: int, tp: int = 1, ep: int = 1) -> int:
    h = model.hidden_size
    moe = moe_layers_in(model, first, last)
    params = (last - first + 1 - moe) * _block_weights(model, shard)
    if moe:
        params += moe * _moe_block_weights(model, shard, tp, ep)
    if first == 1:
        params += shard.vocab * h  # embedding
    if last == total:
        params += shard.vocab * h + h  # LM head and final norm
    return params


@functools.lru_cache(maxsize=65536)  # pure, and asked for per stage of every plan
def rank_params(model: ModelSpec, tp: int, first_layer: int, last_layer: int,
                ep: int = 1) -> int:
    """Parameters one rank (the largest TP shard) holds for layers first..last (1-based),
    at expert parallelism ``ep`` (:func:`routed_params`).

    The embedding belongs to layer 1 and the LM head to layer L.
    """
    total = _check_layers(model, first_layer, last_layer)
    return _segment_params(model, tp_shard(model, tp), first_layer, last_layer, total, tp, ep)


def rank_expert_params(model: ModelSpec, tp: int, first_layer: int, last_layer: int,
                       ep: int = 1) -> int:
    """The routed-expert part of :func:`rank_params`."""
    return moe_layers_in(model, first_layer, last_layer) * routed_params(model, tp, ep)


def segment_grad_bytes(model: ModelSpec, first: int, last: int,
                       num_layers: int | None = None, fold: int = 1) -> int:
    """Unsharded bf16 gradient bytes of layers first..last (1-based, inclusive): ``d`` such
    that a rank of TP ``t`` holds ``d / t``. With EP over ``fold`` replicas (EP = TP x
    fold), the routed experts count ``1 / fold`` of them (a rank holds ``experts / EP``).

    Includes the embedding when ``first == 1`` and the LM head when ``last`` is the last
    layer ``num_layers`` (default ``model.num_layers``).
    """
    total = _check_layers(model, first, last, num_layers)
    return BF16_BYTES * _segment_params(model, tp_shard(model, 1), first, last, total, 1, fold)


def segment_fp8_gather_bytes(model: ModelSpec, first: int, last: int,
                             num_layers: int | None = None) -> int:
    """Unsharded bytes of an FP8 parameter all-gather of layers first..last (1-based,
    inclusive): the blocks' GEMM weights as their FP8 copies (1 byte an element), every
    other parameter (norm gains, the embedding, the LM head) in BF16 (2 bytes)."""
    if model.is_moe:
        raise ValueError("FP8 parameter all-gathers are not modelled for a model with experts")
    gemm = (last - first + 1) * block_gemm_params(model, 1)
    return segment_grad_bytes(model, first, last, num_layers) - (BF16_BYTES - FP8_BYTES) * gemm


#: Output tile (rows, columns) of the GEMM kernels that reach ``gemm_efficiency``
#: (cuBLAS's 256 x 128), and the narrowest tile side used for smaller dimensions.
GEMM_TILE = (256, 128)
MIN_TILE_SIDE = 64
#: Query rows per thread block of a fused attention kernel (FlashAttention-2, head dim 128).
ATTENTION_TILE_ROWS = 128
#: Fraction of the counted attention FLOPs a fused causal kernel computes.
CAUSAL_WORK = 0.5
MASK_BYTES = 1  # a dropout mask element


@dataclass(frozen=True)
class _Op:
    """One kernel on one rank: counted FLOPs, HBM bytes moved, and how it runs."""

    kind: str  # "gemm", "attention" (fused) or "memory"
    flops: float
    bytes: float
    tiles: float = 0.0  # output tiles (GEMM) or query blocks (attention): the parallel work
    work: float = 1.0  # fraction of ``flops`` the kernel computes (causal skipping)


def wave_efficiency(tiles: float, num_sms: int) -> float:
    """Busy fraction of the SMs for ``tiles`` equal work units: ``w / max(w + 1/2, 1)``.

    ``w = tiles / num_sms`` waves; the last wave is taken as half full on average, and
    below one wave the idle SMs are counted. Increasing in ``tiles``, below 1.
    """
    waves = tiles / num_sms
    return waves / max(waves + 0.5, 1.0)


def gemm_tiles(m: float, n: float, batch: float = 1.0) -> float:
    """Output tiles of ``batch`` GEMMs with ``m x n`` outputs (see the module docstring)."""
    rows = min(GEMM_TILE[0], max(MIN_TILE_SIDE, m))
    cols = min(GEMM_TILE[1], max(MIN_TILE_SIDE, n))
    return batch * m * n / (rows * cols)


def gemm_efficiency(gpu: GpuSpec, m: float, n: float, batch: float = 1.0) -> float:
    """Fraction of peak a GEMM with a ``batch x m x n`` output reaches when compute bound."""
    return gpu.gemm_efficiency * wave_efficiency(gemm_tiles(m, n, batch), gpu.num_sms)


def _gemm(tokens: float, k: int, n: int, fp8: bool = False) -> _Op:
    """``tokens x k`` activations times a ``k x n`` weight (in FP8: FP8 inputs and weight,
    a BF16 output)."""
    if fp8:
        return _Op("gemm_fp8", 2.0 * tokens * k * n,
                   FP8_BYTES * (k * n + tokens * k) + BF16_BYTES * tokens * n,
                   tiles=gemm_tiles(tokens, n))
    return _Op("gemm", 2.0 * tokens * k * n, BF16_BYTES * (k * n + tokens * (k + n)),
               tiles=gemm_tiles(tokens, n))


def _memory(nbytes: float) -> _Op:
    return _Op("memory", 0.0, nbytes)


def _attention_ops(model: ModelSpec, micro_batch_size: int, shard: TpShard,
                   flash: bool, cp: int = 1) -> tuple[_Op, ...]:
    """The attention core: scores, softmax (and dropout), weighted values. Under context
    parallelism (fused attention only) a rank's ``s / cp`` queries meet every key, the
    causal half of it load-balanced (Megatron's 2 x cp chunks), and every K/V block
    passes through the rank once (the ring)."""
    s, d, b = model.seq_length, _head_dim(model), micro_batch_size
    heads = shard.heads
    if flash:  # reads Q, K, V and writes the output; the scores stay on chip
        q = s // cp  # the rank's queries
        return (_Op("attention", 4.0 * b * q * s * d * heads,
                    BF16_BYTES * b * (2 * d * heads * q + 2 * d * shard.kv_heads * s),
                    tiles=b * heads * max(q / ATTENTION_TILE_ROWS, 1.0), work=CAUSAL_WORK),)
    matrices, scores = b * heads, b * heads * s * s
    ops = [
        _Op("gemm", 2.0 * scores * d, BF16_BYTES * (2 * matrices * s * d + scores),
            tiles=gemm_tiles(s, s, matrices)),  # Q K^T
        _memory(2 * BF16_BYTES * scores),  # scale, mask and softmax in one pass
    ]
    if model.dropout:
        ops.append(_memory((2 * BF16_BYTES + MASK_BYTES) * scores))
    ops.append(_Op("gemm", 2.0 * scores * d, BF16_BYTES * (scores + 2 * matrices * s * d),
                   tiles=gemm_tiles(s, d, matrices)))  # probabilities x V
    return tuple(ops)


def _pointwise_ops(model: ModelSpec, micro_batch_size: int, shard: TpShard, tp: int,
                   stack: Stack, cp: int = 1) -> tuple[_Op, ...]:
    """Norms, residual additions (with dropout) and the activation of one block."""
    h, tokens = model.hidden_size, micro_batch_size * model.seq_length // cp
    shared = tokens / tp if stack.sequence_parallel else tokens  # tokens of the replicated ops
    norm = _memory(2 * BF16_BYTES * h * shared)
    residual = _memory((3 * BF16_BYTES + (MASK_BYTES if model.dropout else 0)) * h * shared)
    activation = _memory(mlp_matrices(model) * BF16_BYTES * shard.ffn * tokens)
    return (norm, residual, norm, residual, activation)


def _block_gemm_shapes(model: ModelSpec, shard: TpShard) -> tuple[tuple[int, int], ...]:
    """(k, n) of the weights of a block's four GEMMs on one rank: QKV, attention
    projection, the FFN's input matrices (gate and up for SwiGLU) and its output matrix."""
    h, d = model.hidden_size, _head_dim(model)
    q_cols, kv_cols = d * shard.heads, 2 * d * shard.kv_heads
    ffn_in = (mlp_matrices(model) - 1) * shard.ffn
    return ((h, q_cols + kv_cols), (q_cols, h), (h, ffn_in), (shard.ffn, h))


def _block_ops(model: ModelSpec, micro_batch_size: int, shard: TpShard, tp: int,
               stack: Stack, cp: int = 1) -> tuple[tuple[_Op, ...], tuple[_Op, ...]]:
    """The kernels of one block's forward pass on one rank: (attention core, everything
    else); under context parallelism on the rank's ``s / cp`` tokens of each sequence."""
    tokens = micro_batch_size * model.seq_length // cp
    fp8 = stack.precision == "fp8"
    gemms = tuple(_gemm(tokens, k, n, fp8) for k, n in _block_gemm_shapes(model, shard))
    return (_attention_ops(model, micro_batch_size, shard, stack.flash_attention, cp),
            gemms + _pointwise_ops(model, micro_batch_size, shard, tp, stack, cp))


def moe_load(model: ModelSpec, stack: Stack) -> float:
    """Token copies the busiest rank of experts takes over the mean: the assumed imbalance
    (``stack.moe_imbalance``, the busiest expert's load over the mean, taken for the whole
    rank that holds it), capped by the capacity factor when tokens are dropped; 1 at EP 1,
    where every rank holds a slice of every expert and so takes every token."""
    if stack.expert_parallel == 1:
        return 1.0
    cap = model.moe_capacity_factor
    return min(stack.moe_imbalance, cap) if cap > 0 else stack.moe_imbalance


def routed_rows(model: ModelSpec, micro_batch_size: int, tp: int, stack: Stack,
                cp: int = 1) -> float:
    """Token copies one rank's routed experts process per micro-batch: its EP group's
    tokens (``b s`` per replica it spans; ``b s / cp`` under context parallelism, whose
    ranks each dispatch their own share), ``top_k`` copies each, spread over the ``EP``
    ranks of experts at the busiest expert's load (every rank of an expert's ``TP / EP``
    ranks takes them all): ``b s top_k load / EP`` with EP dividing TP, ``b s top_k load /
    TP`` with EP above it."""
    ep = stack.expert_parallel
    tokens = micro_batch_size * model.seq_length // cp * expert_replicas(tp, ep)
    return tokens * model.moe_top_k * moe_load(model, stack) / ep


def a2a_pair_bytes(model: ModelSpec, micro_batch_size: int, tp: int, stack: Stack,
                   cp: int = 1) -> float:
    """Bytes one rank sends each other rank of its group in one all-to-all (dispatch or
    combine, on average: :func:`a2a_precision_factor`) of one MoE layer: its ``b s / (tp
    cp)`` tokens' hidden vectors, ``top_k`` copies, the share routed to one EP rank of
    experts, at the busiest expert's load."""
    tokens = micro_batch_size * (model.seq_length // cp) / tp
    return (BF16_BYTES * model.hidden_size * tokens * model.moe_top_k * moe_load(model, stack)
            / stack.expert_parallel * a2a_precision_factor(stack))


def a2a_precision_factor(stack: Stack) -> float:
    """The mean bytes of a MoE all-to-all over its BF16 bytes: 1; with FP8 dispatch
    (``moe_fp8_dispatch``), ``(1 + FP8_DISPATCH_BYTES / 2) / 2``. Each pass runs as many
    all-to-alls in the dispatch direction (the forward's tokens to their experts, the
    backward's gradients into the experts' down projections; the recomputed forward's
    dispatch under full recompute) as in the combine direction, and only the former move
    FP8; a piece's all-to-alls add up in one flow per pair, so their mean is what
    counts."""
    return (1.0 + FP8_DISPATCH_BYTES / BF16_BYTES) / 2.0 if stack.moe_fp8_dispatch else 1.0


def node_reach(model: ModelSpec, nodes: int) -> float:
    """The chance that a token has at least one of its ``top_k`` experts on a given node of
    an EP group spread evenly over ``nodes`` nodes, its experts drawn evenly at random
    (the balanced routing the token-imbalance assumption starts from): ``1 - C(E - E/n,
    k) / C(E, k)`` for ``E`` experts on ``n`` nodes. Under node-limited routing
    (``moe_max_nodes`` ``M`` below ``n``: DeepSeek-V3 picks ``M`` nodes, then the top-k
    experts among theirs) a node is among a token's ``M`` with chance ``M / n``, and then
    holds one of its ``k`` experts drawn from ``M E / n`` with chance ``1 - C(M E/n - E/n,
    k) / C(M E/n, k)`` (``M`` at least the nodes ``k`` experts need)."""
    if nodes <= 1:
        return 1.0
    k, per_node = model.moe_top_k, model.num_experts / nodes
    limit = model.moe_max_nodes
    chosen = nodes if not limit or limit >= nodes else max(limit, math.ceil(k / per_node))
    pool = chosen * per_node
    miss = 1.0  # C(pool - per_node, k) / C(pool, k), as a product of k ratios
    for i in range(k):
        miss *= max(pool - per_node - i, 0.0) / (pool - i)
    return min(chosen, nodes) / nodes * (1.0 - miss)


def deepep_factors(model: ModelSpec, width: int, nodes: int) -> tuple[float, float]:
    """DeepEP's dispatch (and combine, its mirror) over an EP group of ``width`` ranks
    spread evenly over ``nodes`` nodes, as multiples of the all-to-all's pair bytes
    (:func:`a2a_pair_bytes`, ``top_k / width`` of a rank's tokens per pair): (to each other
    rank on the sender's node, to the rank at its place on each other node).

    A token crosses the NICs once per node it reaches (:func:`node_reach`), to the rank at
    the same place on that node, which passes its copies on over NVLink to the ranks of
    their experts there. A rank so sends each rank on its node its own tokens' copies for
    that rank and those of the ``nodes - 1`` ranks at its place elsewhere: ``nodes`` times
    the pair bytes; and each rank at its place on another node ``b s / (tp cp) x
    reach`` token vectors: ``reach x width / top_k`` times the pair bytes (the flat
    all-to-all sends ``top_k (nodes - 1) / nodes`` copies of a token over the NICs; DeepEP
    ``(nodes - 1) x reach``). The hop through the passing rank is taken as pipelined (DeepEP
    forwards in chunks as they arrive): both kinds of flows run at once. On one node both
    are the flat all-to-all's."""
    if nodes <= 1:
        return 1.0, 1.0
    return float(nodes), node_reach(model, nodes) * width / model.moe_top_k


def _grouped_gemm(rows: float, k: int, n: int, experts: int, fp8: bool = False) -> _Op:
    """``experts`` GEMMs of ``rows / experts`` tokens each (a grouped GEMM): ``k x n``
    weights per expert, read once (in FP8: FP8 inputs and weights, BF16 outputs)."""
    tiles = gemm_tiles(rows / experts, n, experts)
    if fp8:
        return _Op("gemm_fp8", 2.0 * rows * k * n,
                   FP8_BYTES * (experts * k * n + rows * k) + BF16_BYTES * rows * n, tiles=tiles)
    return _Op("gemm", 2.0 * rows * k * n, BF16_BYTES * (experts * k * n + rows * (k + n)),
               tiles=tiles)


def _moe_ffn_ops(model: ModelSpec, micro_batch_size: int, tp: int,
                 stack: Stack, cp: int = 1) -> tuple[_Op, ...]:
    """A MoE layer's FFN on one rank: router, permutation, routed experts (grouped GEMMs
    and their activation), unpermutation, shared experts. In FP8 the experts' GEMMs run in
    FP8 (Transformer Engine's grouped linear layers); the router stays BF16. Under context
    parallelism, on the rank's ``s / cp`` tokens of each sequence."""
    h, mats = model.hidden_size, mlp_matrices(model)
    tokens = micro_batch_size * model.seq_length // cp
    shared_tokens = tokens / tp if stack.sequence_parallel else tokens
    ep = stack.expert_parallel
    fp8 = stack.precision == "fp8"
    local, width = model.num_experts // ep, expert_width(model, tp, ep)
    rows = routed_rows(model, micro_batch_size, tp, stack, cp)
    permute = _memory(2 * BF16_BYTES * h * rows)  # read each token copy, write it in place
    ops = [_gemm(shared_tokens, h, model.num_experts), permute,
           _grouped_gemm(rows, h, (mats - 1) * width, local, fp8),
           _memory(mats * BF16_BYTES * width * rows),
           _grouped_gemm(rows, width, h, local, fp8), permute]
    shared = shared_width(model, tp)
    if shared:
        ops += [_gemm(tokens, h, (mats - 1) * shared, fp8),
                _memory(mats * BF16_BYTES * shared * tokens), _gemm(tokens, shared, h, fp8)]
    return tuple(ops)


def _moe_gemm_shapes(model: ModelSpec, micro_batch_size: int, tp: int,
                     stack: Stack, cp: int = 1) -> tuple[tuple[float, int, int], ...]:
    """(rows, k, n) of the GEMMs a MoE block runs in FP8 on one rank: QKV and attention
    projection on the micro-batch's tokens, the routed experts' input and output matrices
    on the rank's token copies (:func:`routed_rows`, ``k x n`` per expert), the shared
    experts' on every token (of the rank's ``s / cp`` per sequence); not the router."""
    h, mats = model.hidden_size, mlp_matrices(model)
    tokens = micro_batch_size * model.seq_length // cp
    width = expert_width(model, tp, stack.expert_parallel)
    rows = routed_rows(model, micro_batch_size, tp, stack, cp)
    shapes = [(tokens, k, n) for k, n in _block_gemm_shapes(model, tp_shard(model, tp))[:2]]
    shapes += [(rows, h, (mats - 1) * width), (rows, width, h)]
    shared = shared_width(model, tp)
    if shared:
        shapes += [(tokens, h, (mats - 1) * shared), (tokens, shared, h)]
    return tuple(shapes)


def _moe_block_ops(model: ModelSpec, micro_batch_size: int, shard: TpShard, tp: int,
                   stack: Stack, cp: int = 1) -> tuple[tuple[_Op, ...], tuple[_Op, ...]]:
    """The kernels of one MoE block's forward pass: (attention core, everything else):
    QKV and projection GEMMs, norms and residuals as a dense block's, the MoE FFN; under
    context parallelism on the rank's ``s / cp`` tokens of each sequence."""
    tokens = micro_batch_size * model.seq_length // cp
    fp8 = stack.precision == "fp8"
    gemms = tuple(_gemm(tokens, k, n, fp8) for k, n in _block_gemm_shapes(model, shard)[:2])
    pointwise = _pointwise_ops(model, micro_batch_size, shard, tp, stack, cp)[:4]  # no act
    return (_attention_ops(model, micro_batch_size, shard, stack.flash_attention, cp),
            gemms + pointwise + _moe_ffn_ops(model, micro_batch_size, tp, stack, cp))


def fp8_cast_bytes(model: ModelSpec, micro_batch_size: int, tp: int = 1,
                   cp: int = 1, *, stack: Stack = DEFAULT_STACK,
                   moe: bool = False) -> tuple[float, float]:
    """HBM bytes of one block's casts to FP8 for one micro-batch on one rank (the largest
    TP shard): (forward: each GEMM's input, backward: each GEMM's output gradient), at
    :data:`FP8_CAST_BYTES` an element; with ``moe``, a MoE block's FP8 GEMMs
    (:func:`_moe_gemm_shapes`, at ``stack``'s expert parallelism and imbalance)."""
    if moe:
        shapes = _moe_gemm_shapes(model, micro_batch_size, tp, stack, cp)
    else:
        tokens = micro_batch_size * model.seq_length // cp
        shapes = tuple((tokens, k, n) for k, n in _block_gemm_shapes(model, tp_shard(model, tp)))
    return (float(FP8_CAST_BYTES * sum(rows * k for rows, k, _ in shapes)),
            float(FP8_CAST_BYTES * sum(rows * n for rows, _, n in shapes)))


def block_gemm_params(model: ModelSpec, tp: int = 1, ep: int = 1) -> int:
    """Weights of one block's GEMMs on the largest TP shard: the weights FP8 runs in FP8
    (every parameter of the block but its two norm gains); with experts, of the larger
    of a dense and a MoE block (at expert parallelism ``ep``, as :func:`block_params`)."""
    dense = sum(k * n for k, n in _block_gemm_shapes(model, tp_shard(model, tp)))
    return max(dense, _moe_block_gemm_params(model, tp, ep)) if model.is_moe else dense


def _moe_block_gemm_params(model: ModelSpec, tp: int, ep: int = 1) -> int:
    """Weights of a MoE block's FP8 GEMMs on one rank: its attention's, its routed experts'
    (:func:`routed_params`) and its shared experts'; the router stays BF16."""
    h = model.hidden_size
    attention = sum(k * n for k, n in _block_gemm_shapes(model, tp_shard(model, tp))[:2])
    return attention + routed_params(model, tp, ep) + mlp_matrices(model) * h * shared_width(
        model, tp)


def rank_gemm_params(model: ModelSpec, tp: int, first_layer: int, last_layer: int,
                     ep: int = 1) -> int:
    """GEMM weights of the blocks first..last on one rank (no embedding or LM head), at
    expert parallelism ``ep`` for a MoE layer's."""
    _check_layers(model, first_layer, last_layer)
    moe = moe_layers_in(model, first_layer, last_layer)
    dense = sum(k * n for k, n in _block_gemm_shapes(model, tp_shard(model, tp)))
    params = (last_layer - first_layer + 1 - moe) * dense
    return params + moe * _moe_block_gemm_params(model, tp, ep) if moe else params


def _embedding_ops(model: ModelSpec, micro_batch_size: int, cp: int = 1) -> tuple[_Op, ...]:
    row_bytes = BF16_BYTES * micro_batch_size * model.seq_length // cp * model.hidden_size
    return (_memory(2 * row_bytes),)  # gather the rows, write the layer input


def _head_ops(model: ModelSpec, micro_batch_size: int, shard: TpShard, tp: int,
              stack: Stack, cp: int = 1) -> tuple[_Op, ...]:
    h, tokens = model.hidden_size, micro_batch_size * model.seq_length // cp
    shared = tokens / tp if stack.sequence_parallel else tokens
    final_norm = _memory(2 * BF16_BYTES * h * shared)
    logits = _gemm(tokens, h, shard.vocab)
    loss = _memory(BF16_BYTES * tokens * shard.vocab)  # the loss reads the logits once more
    return (final_norm, logits, loss)


def _flops(ops: tuple[_Op, ...]) -> float:
    return sum(op.flops for op in ops)


def op_time_s(op: _Op, gpu: GpuSpec) -> float:
    """Roofline time of one kernel on ``gpu`` (see the module docstring)."""
    memory_s = op.bytes / (gpu.hbm_bytes_per_s * gpu.hbm_efficiency)
    if op.kind == "memory":
        return memory_s
    if op.kind == "gemm_fp8":
        peak, fraction = gpu.peak_fp8_flops, gpu.fp8_gemm_fraction
        if peak <= 0:
            raise ValueError(f"{gpu.name} has no FP8 tensor cores (peak_fp8_tflops is 0)")
    else:
        peak = gpu.peak_flops
        fraction = gpu.gemm_efficiency if op.kind == "gemm" else gpu.flash_attention_efficiency
    rate = peak * fraction * wave_efficiency(op.tiles, gpu.num_sms)
    return max(op.work * op.flops / rate, memory_s)


def _time_s(ops: tuple[_Op, ...], gpu: GpuSpec) -> float:
    return sum(op_time_s(op, gpu) for op in ops)


def block_forward_flops(model: ModelSpec, micro_batch_size: int) -> float:
    """Forward FLOPs of one transformer block for one micro-batch (no parallelism)."""
    attention, rest = _block_ops(model, micro_batch_size, tp_shard(model, 1), 1, DEFAULT_STACK)
    return _flops(attention + rest)


def moe_block_forward_flops(model: ModelSpec, micro_batch_size: int) -> float:
    """Forward FLOPs of one MoE block for one micro-batch (no parallelism, tokens spread
    evenly): attention, router, ``top_k`` routed experts and the shared experts per token,
    the block's active parameters."""
    attention, rest = _moe_block_ops(model, micro_batch_size, tp_shard(model, 1), 1,
                                     DEFAULT_STACK)
    return _flops(attention + rest)


def block_forward_bytes(model: ModelSpec, micro_batch_size: int,
                        stack: Stack = DEFAULT_STACK) -> float:
    """HBM bytes one block's forward pass moves for one micro-batch (no parallelism)."""
    attention, rest = _block_ops(model, micro_batch_size, tp_shard(model, 1), 1, stack)
    return sum(op.bytes for op in attention + rest)


def head_forward_flops(model: ModelSpec, micro_batch_size: int) -> float:
    """Forward FLOPs of the LM head (logits) for one micro-batch: ``2 b s h V``."""
    return _flops(_head_ops(model, micro_batch_size, tp_shard(model, 1), 1, DEFAULT_STACK))


def iteration_model_flops(model: ModelSpec, global_batch: int, recompute: bool = False) -> float:
    """FLOPs of one training iteration over ``global_batch`` sequences.

    Forward plus backward (twice the forward) of all blocks and the head; with
    ``recompute`` one more forward of the blocks (Megatron's hardware FLOPs under full
    recompute, the figure its papers report throughput in).
    """
    moe = moe_layers_in(model, 1, model.num_layers)
    blocks = (model.num_layers - moe) * block_forward_flops(model, global_batch)
    if moe:
        blocks += moe * moe_block_forward_flops(model, global_batch)
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
    tp_ops_per_allreduce: int  # NCCL operations per all-reduce: 2 under sequence parallelism
    activation_bytes: float  # sent to the next stage per micro-batch (gradient back: same)
    grad_bytes: float  # bf16 gradients held by one rank for its layers
    profiled: bool  # block times come from a measured profile, not the roofline
    # MoE with EP > 1: all-to-alls per layer (forward, backward) and the bytes one rank
    # sends each other rank of its group in one of them
    a2a_forward: tuple[int, ...] = ()
    a2a_backward: tuple[int, ...] = ()
    a2a_pair_bytes: float = 0.0
    # TP all-reduces per layer (forward, backward) where layers differ (MoE layers whose
    # tokens move by all-to-all alone); empty: the totals above, spread evenly
    tp_layer_forward: tuple[int, ...] = ()
    tp_layer_backward: tuple[int, ...] = ()
    #: context parallelism: the ring's steps per block and forward pass (cp - 1), the
    #: bytes a rank sends its CP successor per step (its K and V block), and the times a
    #: backward pass moves those bytes per step (K/V and their gradients, and with
    #: recompute the forward's ring again)
    cp_steps: int = 0
    cp_step_bytes: float = 0.0
    cp_backward_factor: float = 2.0


def _block_times_s(model: ModelSpec, gpu: GpuSpec, tp: int, micro_batch_size: int,
                   ops: tuple[_Op, ...], profile: Profile | None,
                   cp: int = 1) -> tuple[float, float, bool]:
    """Forward and backward time of one block (without recompute) and whether measured."""
    if profile is not None and cp > 1:
        raise InputError(profile.source, "context_parallel", cp, "a measured profile's "
                         "block times are per TP degree, without context parallelism")
    if profile is not None:
        if profile.model is not None and profile.model.lower() != model.name.lower():
            raise InputError(profile.source, "model", profile.model,
                             f"profile was measured for another model than {model.name!r}")
        measured = profile.lookup(gpu.name, tp, micro_batch_size)
        if measured is not None:
            return measured[0], measured[1], True
    forward_s = _time_s(ops, gpu)
    return forward_s, 2.0 * forward_s, False


class _BlockCost(NamedTuple):
    """One kind of block (dense or MoE) for one micro-batch on one rank."""

    forward_s: float
    backward_s: float  # recompute included
    flops: float  # forward
    recomputed_flops: float
    profiled: bool


# every stage of a plan, and every split of its layers a planner tries, has the same few
# kinds of block: their costs are kept (a stage's cost is then a sum over its layers)
@functools.lru_cache(maxsize=4096)
def _block_cost(model: ModelSpec, gpu: GpuSpec, tp: int, micro_batch_size: int, stack: Stack,
                profile: Profile | None, moe: bool, cp: int = 1) -> _BlockCost:
    shard = tp_shard(model, tp)
    if moe:
        attention, rest = _moe_block_ops(model, micro_batch_size, shard, tp, stack, cp)
    else:
        attention, rest = _block_ops(model, micro_batch_size, shard, tp, stack, cp)
    ops = attention + rest
    block_fwd_s, block_bwd_s, profiled = _block_times_s(model, gpu, tp, micro_batch_size,
                                                        ops, profile, cp)
    if stack.precision == "fp8" and not profiled:
        rate = gpu.hbm_bytes_per_s * gpu.hbm_efficiency
        cast_fwd, cast_bwd = fp8_cast_bytes(model, micro_batch_size, tp, cp, stack=stack,
                                            moe=moe)
        block_fwd_s += cast_fwd / rate
        block_bwd_s += cast_bwd / rate
    block_flops = _flops(ops)
    recomputed_flops = {"none": 0.0, "selective": _flops(attention),
                        "full": block_flops}[stack.recompute]
    block_bwd_s += {"none": 0.0, "selective": _time_s(attention, gpu),
                    "full": block_fwd_s}[stack.recompute]
    return _BlockCost(block_fwd_s, block_bwd_s, block_flops, recomputed_flops, profiled)


def _a2a_counts(model: ModelSpec, first: int, last: int,
                stack: Stack) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """All-to-alls per layer (forward, backward): a MoE layer's dispatch and combine in each
    pass, twice more in the backward under full recompute; none at EP 1 (every rank holds
    a slice of every expert, and the TP collectives move the tokens as for a dense FFN)."""
    if stack.expert_parallel == 1 or not model.is_moe:
        return (), ()
    moe = [model.moe_layer(layer) for layer in range(first, last + 1)]
    backward = 4 if stack.recompute == "full" else 2
    return tuple(2 * m for m in moe), tuple(backward * m for m in moe)


def _tp_counts(model: ModelSpec, tp: int, first: int, last: int,
               stack: Stack) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """TP all-reduces per layer (forward, backward) when some layers have fewer: at EP =
    TP without shared experts, under sequence parallelism, a MoE layer's FFN needs no TP
    collective (each rank dispatches its own sequence-parallel tokens and gets them back
    whole), so it keeps the attention's one; else () (two per layer, four backward under
    full recompute)."""
    if (not model.is_moe or stack.expert_parallel % tp or tp == 1 or model.num_shared_experts
            or not stack.sequence_parallel):
        return (), ()
    full = stack.recompute == "full"
    per = [1 if model.moe_layer(layer) else 2 for layer in range(first, last + 1)]
    return tuple(per), tuple(2 * n if full else n for n in per)


def stage_cost(model: ModelSpec, gpu: GpuSpec, tp: int, micro_batch_size: int,
               first_layer: int, last_layer: int, *, stack: Stack = DEFAULT_STACK,
               profile: Profile | None = None, cp: int = 1) -> StageCost:
    """Cost of one micro-batch on a device group running layers first..last (1-based).

    Args:
        stack: training-stack options (sequence parallelism, flash attention, recompute,
            expert parallelism and the token imbalance of a model with experts, the
            software profile, whose factors scale the GPU's compute fractions).
        cp: context-parallel ranks: each runs ``1/cp`` of every sequence's tokens and of
            its causal attention, and passes K/V blocks around the CP ring.
        profile: measured block times; where it has no entry for (GPU, TP, micro-batch
            size), or the size lies outside its measured range, the roofline is used. A
            measured time stands for every block, dense or MoE.
    """
    gpu = stack.software.applied_to(gpu)
    total = _check_layers(model, first_layer, last_layer)
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be at least 1, got {micro_batch_size}")
    shard = tp_shard(model, tp)
    num_blocks = last_layer - first_layer + 1
    num_moe = moe_layers_in(model, first_layer, last_layer)
    dense = _block_cost(model, gpu, tp, micro_batch_size, stack, profile, False, cp)
    fwd_s, bwd_s = [dense.forward_s] * num_blocks, [dense.backward_s] * num_blocks
    forward_flops = (num_blocks - num_moe) * dense.flops
    recomputed_flops = (num_blocks - num_moe) * dense.recomputed_flops
    profiled = dense.profiled
    if num_moe:
        moe = _block_cost(model, gpu, tp, micro_batch_size, stack, profile, True, cp)
        for i in range(num_blocks):
            if model.moe_layer(first_layer + i):
                fwd_s[i], bwd_s[i] = moe.forward_s, moe.backward_s
        forward_flops += num_moe * moe.flops
        recomputed_flops += num_moe * moe.recomputed_flops
        profiled = profiled and moe.profiled
    if first_layer == 1:
        embed_s = _time_s(_embedding_ops(model, micro_batch_size, cp), gpu)
        fwd_s[0] += embed_s
        bwd_s[0] += 2.0 * embed_s
    if last_layer == total:
        head = _head_ops(model, micro_batch_size, shard, tp, stack, cp)
        head_s = _time_s(head, gpu)
        fwd_s[-1] += head_s
        bwd_s[-1] += 2.0 * head_s
        forward_flops += _flops(head)
    backward_flops = 2.0 * forward_flops + recomputed_flops
    activation_bytes = float(BF16_BYTES * micro_batch_size * model.seq_length
                             * model.hidden_size)
    a2a_forward, a2a_backward = _a2a_counts(model, first_layer, last_layer, stack)
    tp_forward, tp_backward = _tp_counts(model, tp, first_layer, last_layer, stack)
    return StageCost(
        forward_flops=forward_flops,
        backward_flops=backward_flops,
        forward_time_s=sum(fwd_s),
        backward_time_s=sum(bwd_s),
        layer_forward_time_s=tuple(fwd_s),
        layer_backward_time_s=tuple(bwd_s),
        tp_allreduce_bytes=activation_bytes / cp,
        tp_allreduces_forward=sum(tp_forward) if tp_forward else 2 * num_blocks,
        tp_allreduces_backward=(sum(tp_backward) if tp_backward
                                else (4 if stack.recompute == "full" else 2) * num_blocks),
        tp_ops_per_allreduce=2 if stack.sequence_parallel else 1,
        activation_bytes=activation_bytes,
        grad_bytes=float(BF16_BYTES * rank_params(model, tp, first_layer, last_layer,
                                                  stack.expert_parallel)),
        profiled=profiled,
        a2a_forward=a2a_forward,
        a2a_backward=a2a_backward,
        a2a_pair_bytes=(a2a_pair_bytes(model, micro_batch_size, tp, stack, cp) if a2a_forward
                        else 0.0),
        tp_layer_forward=tp_forward,
        tp_layer_backward=tp_backward,
        cp_steps=cp - 1,
        cp_step_bytes=cp_step_bytes(model, micro_batch_size, tp, cp),
        cp_backward_factor=2.0 + (stack.recompute != "none"),
    )


# The planner, the closed-form tier and the analysis of a plan ask for the same stages (a
# sweep's layouts share GPUs, TP degrees and layer ranges): one memo serves them all,
# bounded, so that a long search does not grow it without end.
def cached_stage_cost(model: ModelSpec, gpu: GpuSpec, tp: int, micro_batch_size: int,
                      first_layer: int, last_layer: int, stack: Stack,
                      profile: Profile | None, cp: int) -> StageCost:
    """:func:`stage_cost`, memoized (positional arguments only), by the part of ``stack``
    it reads (:func:`compute_stack`): plans that differ in how they shard, overlap or
    schedule share their stages' costs."""
    return _stage_cost_memo(model, gpu, tp, micro_batch_size, first_layer, last_layer,
                            compute_stack(stack), profile, cp)


@cached(16384)
def _stage_cost_memo(model: ModelSpec, gpu: GpuSpec, tp: int, micro_batch_size: int,
                     first_layer: int, last_layer: int, stack: Stack,
                     profile: Profile | None, cp: int) -> StageCost:
    return stage_cost(model, gpu, tp, micro_batch_size, first_layer, last_layer, stack=stack,
                      profile=profile, cp=cp)


@cached(4096)
def compute_stack(stack: Stack) -> Stack:
    """``stack`` with the options :func:`stage_cost` never reads at their defaults: the
    sharding of weights and optimizer states, the interleaving, the overlaps of DP, TP and
    pipeline communication, and how MoE tokens cross nodes (the traffic, not the compute,
    of a pass). A stage's cost is the same for both (tests hold every option to that)."""
    return dataclasses.replace(stack, **_NOT_READ)


#: The options of a :class:`Stack` that :func:`stage_cost` does not read, at their defaults.
_NOT_READ = {"zero_stage": 0, "virtual_pipeline_stages": 1, "dp_overlap": False,
             "dp_bucket_params": 0, "tp_comm_overlap": False, "pp_p2p_overlap": True,
             "fp8_param_gather": False, "moe_dispatcher": "alltoall"}


def cp_step_bytes(model: ModelSpec, micro_batch_size: int, tp: int, cp: int) -> float:
    """Bytes one rank sends its CP successor per step of a block's forward ring: its K and
    V block, ``2 x (s / cp) x kv_heads x head_dim / tp`` BF16 values per sequence (0
    without context parallelism)."""
    if cp == 1:
        return 0.0
    kv = tp_shard(model, tp).kv_heads * _head_dim(model)
    return float(2 * BF16_BYTES * micro_batch_size * (model.seq_length // cp) * kv)


def optimizer_time_s(model: ModelSpec, gpu: GpuSpec, tp: int, first: int, last: int,
                     dp: int, zero_stage: int, precision: str = "bf16", ep: int = 1) -> float:
    """Time of one mixed-precision Adam step on one rank of a group (memory bound).

    With ZeRO stage 1 or 3 each of the ``dp`` replicas updates only its share of the
    states. In FP8 the rank's GEMM weights are then cast to FP8 (and transposed) once for
    the next iteration, :data:`FP8_CAST_BYTES` per GEMM parameter, whatever the ZeRO
    stage (each rank casts the weights it runs).
    """
    if zero_stage not in ZERO_STAGES:
        raise ValueError(f"zero_stage must be one of {ZERO_STAGES}, got {zero_stage}")
    if dp < 1:
        raise ValueError(f"dp must be at least 1, got {dp}")
    rate = gpu.hbm_bytes_per_s * gpu.hbm_efficiency
    params = rank_params(model, tp, first, last, ep)
    fold = expert_replicas(tp, ep)
    if fold > 1 and zero_stage:  # expert states are sharded over the dp / fold replicas
        experts = rank_expert_params(model, tp, first, last, ep)
        step_s = ADAM_STEP_BYTES_PER_PARAM * ((params - experts) / dp
                                              + experts / (dp // fold)) / rate
    else:
        step_bytes = ADAM_STEP_BYTES_PER_PARAM * params
        step_s = step_bytes / rate / (dp if zero_stage else 1)
    if precision == "fp8":
        step_s += FP8_CAST_BYTES * rank_gemm_params(model, tp, first, last, ep) / rate
    return step_s

