"""Workload accounting against Megatron's closed forms, hand counts and invariants."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xsweep.plan.stack import Stack
from xsweep.plan.workload import (
    CAUSAL_WORK,
    block_forward_bytes,
    block_forward_flops,
    block_params,
    gemm_efficiency,
    gemm_tiles,
    head_forward_flops,
    iteration_model_flops,
    optimizer_time_s,
    rank_params,
    segment_grad_bytes,
    stage_cost,
    wave_efficiency,
)
from xsweep.spec.catalog import ModelSpec, load_catalog

# Published configurations (GPT-3 paper, Table 2.1; GPT-2 medium; Llama 2 release).
GPT3 = ModelSpec("gpt3-175b", 96, 12288, 49152, 96, 96, 50257, 2048, "gelu")
GPT_MEDIUM = ModelSpec("gpt-350m", 24, 1024, 4096, 16, 16, 50257, 1024, "gelu")
LLAMA2_7B = ModelSpec("llama2-7b", 32, 4096, 11008, 32, 32, 32000, 4096, "swiglu")
# Small enough to count by hand: head size 2, two KV heads.
TINY = ModelSpec("tiny", 3, 8, 12, 4, 2, 16, 4, "swiglu")
A100 = load_catalog().gpu("A100-40GB")
FULL = Stack(recompute="full")


def narayanan_flops(model: ModelSpec, batch: int, recompute: bool) -> float:
    """Narayanan et al. (2021), eq. 3 and its form without recompute."""
    s, layers, h, v = model.seq_length, model.num_layers, model.hidden_size, model.vocab_size
    if recompute:
        return 96 * batch * s * layers * h**2 * (1 + s / (6 * h) + v / (16 * layers * h))
    return 72 * batch * s * layers * h**2 * (1 + s / (6 * h) + v / (12 * layers * h))


@pytest.mark.parametrize("model", [GPT3, GPT_MEDIUM], ids=lambda m: m.name)
@pytest.mark.parametrize("batch", [1, 1536])
@pytest.mark.parametrize("recompute", [False, True])
def test_iteration_flops_match_megatron_closed_forms(model, batch, recompute):
    # The accounting is Megatron's term by term, so the match is exact, not just within 1%.
    assert iteration_model_flops(model, batch, recompute=recompute) == pytest.approx(
        narayanan_flops(model, batch, recompute), rel=1e-12)


def test_hand_count_of_a_small_gqa_swiglu_block():
    # h=8, a=4 heads of size 2, k=2 KV heads, f=12, s=4, b=1
    # params: Q 8*8 + K,V 2*(8*4) + output 8*8 + FFN 3*8*12 + two norms 2*8 = 496
    assert block_params(TINY) == 496
    # FLOPs over 4 tokens: QKV 2*4*8*16 = 1024, scores+AV 4*1*16*8 = 512,
    # output 2*4*8*8 = 512, gate+up 2*4*8*24 = 1536, down 2*4*12*8 = 768
    assert block_forward_flops(TINY, 1) == 4352
    # bytes (bf16): QKV 2*(128 + 4*(8+16)) = 448, attention 2*4*(16+8) = 192,
    # output 2*(64 + 4*(8+8)) = 256, gate+up 2*(192 + 4*(8+24)) = 640, down 2*(96 + 4*(12+8)) = 352;
    # two norms 2 * 2*4*8*2 = 256, two residual additions 2 * 3*2*4*8 = 384, SwiGLU
    # 3*2*4*12 = 288 (no dropout masks)
    assert block_forward_bytes(TINY, 1) == 1888 + 256 + 384 + 288
    assert head_forward_flops(TINY, 1) == 2 * 4 * 8 * 16


def test_llama2_7b_has_its_published_parameter_count():
    assert segment_grad_bytes(LLAMA2_7B, 1, 32) == 2 * 6_738_415_616


def test_catalog_presets_agree_with_the_published_configs():
    catalog = load_catalog()
    assert segment_grad_bytes(catalog.model("llama2-7b"), 1, 32) == 2 * 6_738_415_616
    assert iteration_model_flops(catalog.model("gpt3-175b"), 1536) == pytest.approx(
        narayanan_flops(GPT3, 1536, False), rel=1e-12)


def test_gqa_shrinks_and_swiglu_grows_the_counts():
    mha = dataclasses.replace(LLAMA2_7B, num_kv_heads=32)
    gqa = dataclasses.replace(LLAMA2_7B, num_kv_heads=8)
    gelu = dataclasses.replace(LLAMA2_7B, mlp="gelu")
    for count in (block_params, lambda m: block_forward_flops(m, 1)):
        assert count(gqa) < count(mha)
        assert count(gelu) < count(LLAMA2_7B)
    h = LLAMA2_7B.hidden_size
    # GQA at 8 of 32 heads drops 3/4 of the K and V weights: 2 * h * h * 3/4
    assert block_params(mha) - block_params(gqa) == 2 * h * h * 3 // 4
    assert block_params(LLAMA2_7B) - block_params(gelu) == h * LLAMA2_7B.ffn_hidden_size


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_tp_divides_the_work_when_it_divides_the_shapes(tp):
    padded = dataclasses.replace(GPT3, vocab_size=51200)  # Megatron pads V to a multiple of tp
    whole = stage_cost(padded, A100, 1, 1, 1, padded.num_layers)
    shard = stage_cost(padded, A100, tp, 1, 1, padded.num_layers)
    assert shard.forward_flops * tp == pytest.approx(whole.forward_flops, rel=1e-12)
    assert shard.backward_flops * tp == pytest.approx(whole.backward_flops, rel=1e-12)


def test_uneven_tp_uses_the_largest_shard():
    # Llama-2-7B at TP 3 (as in the paper): 32 heads -> 11 on the largest shard,
    # 11008 FFN columns -> 3670.
    model, b = LLAMA2_7B, 1
    tokens, h, s, f = b * model.seq_length, model.hidden_size, model.seq_length, 11008
    attention = 2 * tokens * h * 3 * h + 4 * b * s * s * h + 2 * tokens * h * h
    ffn = 3 * 2 * tokens * h * f
    cost = stage_cost(model, A100, 3, b, 2, 2)
    assert cost.forward_flops == pytest.approx(attention * 11 / 32 + ffn * 3670 / f, rel=1e-12)
    assert rank_params(model, 3, 2, 2) == (4 * h * 128 * 11 + 3 * h * 3670 + 2 * h)


@settings(max_examples=60, deadline=None)
@given(heads=st.integers(1, 16), head_dim=st.sampled_from([2, 4, 8]),
       kv_div=st.sampled_from([1, 2, 4]), ffn=st.integers(1, 64), vocab=st.integers(1, 100),
       tp=st.integers(1, 16), mlp=st.sampled_from(["gelu", "swiglu"]))
def test_largest_shard_is_between_the_average_and_the_whole(heads, head_dim, kv_div, ffn,
                                                            vocab, tp, mlp):
    kv = max(1, heads // kv_div)
    model = ModelSpec("m", 2, heads * head_dim, ffn, heads, kv, vocab, 8, mlp)
    whole = stage_cost(model, A100, 1, 2, 1, 2).forward_flops
    shard = stage_cost(model, A100, tp, 2, 1, 2).forward_flops
    assert whole / tp <= shard * (1 + 1e-12) and shard <= whole


def test_stage_times_are_the_sums_of_their_layers_and_split_additively():
    model = GPT_MEDIUM
    full = stage_cost(model, A100, 2, 2, 1, model.num_layers, stack=FULL)
    assert full.forward_time_s == sum(full.layer_forward_time_s)
    assert full.backward_time_s == sum(full.layer_backward_time_s)
    assert len(full.layer_forward_time_s) == model.num_layers
    pieces = [stage_cost(model, A100, 2, 2, i, i, stack=FULL)
              for i in range(1, model.num_layers + 1)]
    assert math.fsum(p.forward_time_s for p in pieces) == pytest.approx(full.forward_time_s,
                                                                         rel=1e-12)
    assert math.fsum(p.backward_flops for p in pieces) == pytest.approx(full.backward_flops,
                                                                         rel=1e-12)
    assert [p.forward_time_s for p in pieces] == pytest.approx(list(full.layer_forward_time_s),
                                                                rel=1e-12)
    interior = full.layer_forward_time_s[1]
    assert full.layer_forward_time_s[0] > interior  # embedding
    assert full.layer_forward_time_s[-1] > interior  # head and loss
    assert set(full.layer_forward_time_s[1:-1]) == {interior}


def test_stage_flops_over_an_iteration_add_up_to_the_model_flops():
    model = dataclasses.replace(GPT3, vocab_size=51200)
    batch, micro, tp = 16, 2, 8
    for recompute in (False, True):
        stack = FULL if recompute else Stack()
        stages = [stage_cost(model, A100, tp, micro, 1, 40, stack=stack),
                  stage_cost(model, A100, tp, micro, 41, 96, stack=stack)]
        total = sum((c.forward_flops + c.backward_flops) * tp * batch // micro for c in stages)
        assert total == pytest.approx(iteration_model_flops(model, batch, recompute), rel=1e-12)


def test_roofline_memory_bound_for_few_tokens():
    # 64 tokens: each GEMM does 64 FLOPs per weight byte read, below the A100's ridge, and
    # GPT-3's wide matrices give enough tiles to keep the SMs busy, so the block is bound
    # by reading its weights and activations.
    model = dataclasses.replace(GPT3, seq_length=64)
    ridge = A100.peak_flops * A100.gemm_efficiency / (A100.hbm_bytes_per_s * A100.hbm_efficiency)
    assert ridge > 64
    cost = stage_cost(model, A100, 1, 1, 2, 2)
    hbm = A100.hbm_bytes_per_s * A100.hbm_efficiency
    assert cost.forward_time_s == pytest.approx(block_forward_bytes(model, 1) / hbm, rel=1e-3)


def test_large_gemms_run_at_the_sustained_gemm_efficiency():
    tokens, h = 8 * GPT3.seq_length, GPT3.hidden_size
    assert gemm_efficiency(A100, tokens, 4 * h) == pytest.approx(A100.gemm_efficiency, rel=3e-3)
    # a block of GPT-3 at micro-batch 8 is GEMM-bound: the roofline of its GEMMs alone,
    # plus memory-bound norms and a fused attention core, is its whole forward time
    plain = stage_cost(GPT3, A100, 1, 8, 2, 2)
    gemm_flops = 24 * tokens * h * h
    gemm_s = gemm_flops / (A100.peak_flops * A100.gemm_efficiency)
    assert gemm_s < plain.forward_time_s < 1.1 * gemm_s


@settings(max_examples=80, deadline=None)
@given(m=st.integers(1, 1 << 16), n=st.integers(1, 1 << 16), factor=st.integers(1, 64),
       gpu=st.sampled_from(sorted(load_catalog().gpus)))
def test_gemm_efficiency_grows_with_the_gemm_and_stays_below_its_maximum(m, n, factor, gpu):
    spec = load_catalog().gpu(gpu)
    small, large = gemm_efficiency(spec, m, n), gemm_efficiency(spec, m * factor, n)
    assert 0 < small <= large < spec.gemm_efficiency
    # a batch of GEMMs has the tiles of one stacked GEMM, or more where narrow ones
    # each need their own narrowed tiles
    batched = gemm_efficiency(spec, m, n, batch=factor)
    assert batched == pytest.approx(large, rel=1e-12) if m >= 256 else batched >= large


def test_wave_efficiency_closed_forms():
    sms = 108
    assert wave_efficiency(54, sms) == 0.5  # half the SMs busy, one wave
    assert wave_efficiency(108, sms) == pytest.approx(1 / 1.5)  # one full wave + half a tail
    assert wave_efficiency(108 * 99.5, sms) == pytest.approx(0.995)


def test_skinny_gemms_of_high_tp_run_slower_per_flop():
    # Llama-2-7B's QKV projection over 4096 tokens: 3h/t output columns per rank.
    tokens, h = 4096, 4096
    per_rank = [gemm_efficiency(A100, tokens, 3 * h // tp) for tp in (1, 2, 4, 8)]
    assert per_rank == sorted(per_rank, reverse=True)
    assert per_rank[-1] < 0.85 * per_rank[0]
    assert gemm_tiles(tokens, 3 * h // 8) < 2 * A100.num_sms  # under two waves at TP 8


@pytest.mark.parametrize("model", [LLAMA2_7B, GPT_MEDIUM], ids=lambda m: m.name)
def test_per_gpu_compute_falls_slower_than_one_over_tp(model):
    # Amdahl: norms and residuals are not split without sequence parallelism, and the
    # GEMMs get skinnier; with it every rank still does at least 1/t of the work.
    for stack in (Stack(sequence_parallel=False), Stack()):
        times = [stage_cost(model, A100, tp, 1, 2, 2, stack=stack).forward_time_s * tp
                 for tp in (1, 2, 4, 8)]
        assert times == sorted(times)


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_sequence_parallelism_splits_the_pointwise_work_and_keeps_the_tp_volume(tp):
    model = LLAMA2_7B
    with_sp = stage_cost(model, A100, tp, 1, 2, 2, stack=Stack(sequence_parallel=True))
    without = stage_cost(model, A100, tp, 1, 2, 2, stack=Stack(sequence_parallel=False))
    assert with_sp.tp_allreduce_bytes == without.tp_allreduce_bytes
    assert (with_sp.tp_allreduces_forward, with_sp.tp_allreduces_backward) == (
        without.tp_allreduces_forward, without.tp_allreduces_backward)
    assert (with_sp.tp_ops_per_allreduce, without.tp_ops_per_allreduce) == (2, 1)
    # two norms (read and write h) and two residual additions (read 2h, write h) per token
    tokens, h = model.seq_length, model.hidden_size
    shared_bytes = (2 * 2 * 2 + 2 * 3 * 2) * h * tokens
    saved_s = shared_bytes * (1 - 1 / tp) / (A100.hbm_bytes_per_s * A100.hbm_efficiency)
    assert without.forward_time_s - with_sp.forward_time_s == pytest.approx(saved_s, rel=1e-9)
    assert with_sp.forward_flops == without.forward_flops


def test_flash_attention_runs_the_causal_half_and_moves_no_scores():
    model, b = LLAMA2_7B, 1
    s, h = model.seq_length, model.hidden_size
    flash = stage_cost(model, A100, 1, b, 2, 2, stack=Stack(flash_attention=True))
    plain = stage_cost(model, A100, 1, b, 2, 2, stack=Stack(flash_attention=False))
    assert flash.forward_flops == plain.forward_flops  # the count is Megatron's either way
    attention_flops = 4 * b * s * s * h
    blocks = b * model.num_attention_heads * s / 128
    flash_s = (CAUSAL_WORK * attention_flops / (A100.peak_flops * A100.flash_attention_efficiency
                                                * wave_efficiency(blocks, A100.num_sms)))
    # without flash the scores (b a s^2, bf16) are written, softmax-ed and read back
    scores_bytes = b * model.num_attention_heads * s * s * 2
    assert plain.forward_time_s - flash.forward_time_s > (
        4 * scores_bytes / (A100.hbm_bytes_per_s * A100.hbm_efficiency) - flash_s)
    # flash attention's bytes are affine in s (weights plus activations), the materialised
    # scores' quadratic: equal steps from s/4 to s/2 to s, or growing ones
    for stack, quadratic in ((Stack(), False), (Stack(flash_attention=False), True)):
        sizes = [block_forward_bytes(dataclasses.replace(model, seq_length=s // k), b, stack)
                 for k in (4, 2, 1)]
        steps = sizes[1] - sizes[0], sizes[2] - sizes[1]
        if quadratic:
            assert steps[1] > 2.5 * steps[0]
        else:
            assert steps[1] == pytest.approx(2 * steps[0], rel=1e-12)


def test_backward_is_twice_forward_and_recompute_adds_its_forward():
    model = GPT_MEDIUM
    plain = stage_cost(model, A100, 4, 1, 1, model.num_layers)
    again = stage_cost(model, A100, 4, 1, 1, model.num_layers, stack=FULL)
    selective = stage_cost(model, A100, 4, 1, 1, model.num_layers,
                           stack=Stack(recompute="selective"))
    assert plain.layer_backward_time_s == pytest.approx(
        [2 * t for t in plain.layer_forward_time_s], rel=1e-12)
    block_s = plain.layer_forward_time_s[1]
    extra = [r - p for r, p in zip(again.layer_backward_time_s, plain.layer_backward_time_s,
                                   strict=True)]
    assert extra == pytest.approx([block_s] * model.num_layers, rel=1e-9)  # head not recomputed
    assert again.backward_flops - plain.backward_flops == pytest.approx(
        model.num_layers * block_forward_flops(model, 1) / 4, rel=1e-12)
    # selective recomputes the attention core only: 4 b s^2 h / t per block
    s, h = model.seq_length, model.hidden_size
    assert selective.backward_flops - plain.backward_flops == pytest.approx(
        model.num_layers * 4 * s * s * h / 4, rel=1e-12)
    assert 0 < selective.backward_time_s - plain.backward_time_s < (
        again.backward_time_s - plain.backward_time_s)
    assert (plain.tp_allreduces_forward, plain.tp_allreduces_backward) == (48, 48)
    assert (again.tp_allreduces_forward, again.tp_allreduces_backward) == (48, 96)
    assert selective.tp_allreduces_backward == 48


def test_communication_sizes():
    cost = stage_cost(LLAMA2_7B, A100, 3, 2, 5, 12)
    assert cost.tp_allreduce_bytes == cost.activation_bytes == 2 * 4096 * 4096 * 2
    assert cost.grad_bytes == 2 * rank_params(LLAMA2_7B, 3, 5, 12)
    whole = stage_cost(LLAMA2_7B, A100, 1, 2, 1, 32)
    assert whole.grad_bytes == segment_grad_bytes(LLAMA2_7B, 1, 32)


def test_segment_grad_bytes_partition_the_model():
    parts = [(1, 7), (8, 20), (21, 32)]
    assert sum(segment_grad_bytes(LLAMA2_7B, a, b, 32) for a, b in parts) == (
        segment_grad_bytes(LLAMA2_7B, 1, 32))
    assert segment_grad_bytes(LLAMA2_7B, 8, 20) == 2 * 13 * block_params(LLAMA2_7B)


def test_optimizer_step_is_memory_bound_and_sharded_by_zero1():
    params = rank_params(LLAMA2_7B, 2, 1, 16)
    alone = optimizer_time_s(LLAMA2_7B, A100, 2, 1, 16, dp=4, zero_stage=0)
    assert alone == pytest.approx(
        28 * params / (A100.hbm_bytes_per_s * A100.hbm_efficiency), rel=1e-12)
    for stage in (1, 3):
        sharded = optimizer_time_s(LLAMA2_7B, A100, 2, 1, 16, dp=4, zero_stage=stage)
        assert sharded == pytest.approx(alone / 4, rel=1e-12)


@pytest.mark.parametrize("first,last", [(0, 3), (3, 2), (1, 33)])
def test_layer_ranges_outside_the_model_are_rejected(first, last):
    with pytest.raises(ValueError, match="layers"):
        stage_cost(LLAMA2_7B, A100, 1, 1, first, last)


def test_unknown_mlp_is_rejected():
    with pytest.raises(ValueError, match="mlp"):
        block_params(dataclasses.replace(TINY, mlp="relu"))
