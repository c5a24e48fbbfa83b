"""Workload accounting against Megatron's closed forms, hand counts and invariants."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xsweep.plan.workload import (
    block_forward_bytes,
    block_forward_flops,
    block_params,
    head_forward_flops,
    iteration_model_flops,
    optimizer_time_s,
    rank_params,
    segment_grad_bytes,
    stage_cost,
)
from xsweep.spec.catalog import GpuSpec, ModelSpec, load_catalog

# Published configurations (GPT-3 paper, Table 2.1; GPT-2 medium; Llama 2 release).
GPT3 = ModelSpec("gpt3-175b", 96, 12288, 49152, 96, 96, 50257, 2048, "gelu")
GPT_MEDIUM = ModelSpec("gpt-350m", 24, 1024, 4096, 16, 16, 50257, 1024, "gelu")
LLAMA2_7B = ModelSpec("llama2-7b", 32, 4096, 11008, 32, 32, 32000, 4096, "swiglu")
# Small enough to count by hand: head size 2, two KV heads.
TINY = ModelSpec("tiny", 3, 8, 12, 4, 2, 16, 4, "swiglu")
# A100 SXM 40 GB datasheet figures; half of peak reached on GEMMs.
A100 = GpuSpec("A100-40GB", 312, 40, 1.555, 2400, 30.66, 256, 575, "cx6", 10375, 812.5,
               1.29, 0.5)


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
    # output 2*(64 + 4*(8+8)) = 256, gate+up 2*(192 + 4*(8+24)) = 640, down 2*(96 + 4*(12+8)) = 352
    assert block_forward_bytes(TINY, 1) == 1888
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
    full = stage_cost(model, A100, 2, 2, 1, model.num_layers, recompute=True)
    assert full.forward_time_s == sum(full.layer_forward_time_s)
    assert full.backward_time_s == sum(full.layer_backward_time_s)
    assert len(full.layer_forward_time_s) == model.num_layers
    pieces = [stage_cost(model, A100, 2, 2, i, i, recompute=True)
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
        stages = [stage_cost(model, A100, tp, micro, 1, 40, recompute=recompute),
                  stage_cost(model, A100, tp, micro, 41, 96, recompute=recompute)]
        total = sum((c.forward_flops + c.backward_flops) * tp * batch // micro for c in stages)
        assert total == pytest.approx(iteration_model_flops(model, batch, recompute), rel=1e-12)


def test_roofline_memory_bound_for_single_tokens():
    # One token: every GEMM is a matrix-vector product, bound by reading the weights.
    model = dataclasses.replace(GPT_MEDIUM, seq_length=1)
    cost = stage_cost(model, A100, 1, 1, 2, 2)
    assert cost.forward_time_s == pytest.approx(
        block_forward_bytes(model, 1) / A100.hbm_bytes_per_s, rel=1e-12)


def test_roofline_compute_bound_for_large_gemms():
    cost = stage_cost(GPT3, A100, 1, 8, 2, 2)
    assert cost.forward_time_s == pytest.approx(
        block_forward_flops(GPT3, 8) / (A100.peak_flops * A100.efficiency), rel=1e-12)


def test_backward_is_twice_forward_and_recompute_adds_one_block_forward():
    model = GPT_MEDIUM
    plain = stage_cost(model, A100, 4, 1, 1, model.num_layers)
    again = stage_cost(model, A100, 4, 1, 1, model.num_layers, recompute=True)
    assert plain.layer_backward_time_s == pytest.approx(
        [2 * t for t in plain.layer_forward_time_s], rel=1e-12)
    block_s = plain.layer_forward_time_s[1]
    extra = [r - p for r, p in zip(again.layer_backward_time_s, plain.layer_backward_time_s,
                                   strict=True)]
    assert extra == pytest.approx([block_s] * model.num_layers, rel=1e-9)  # head not recomputed
    assert again.backward_flops - plain.backward_flops == pytest.approx(
        model.num_layers * block_forward_flops(model, 1) / 4, rel=1e-12)
    assert (plain.tp_allreduces_forward, plain.tp_allreduces_backward) == (48, 48)
    assert (again.tp_allreduces_forward, again.tp_allreduces_backward) == (48, 96)


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
    assert alone == pytest.approx(28 * params / A100.hbm_bytes_per_s, rel=1e-12)
    sharded = optimizer_time_s(LLAMA2_7B, A100, 2, 1, 16, dp=4, zero_stage=1)
    assert sharded == pytest.approx(alone / 4, rel=1e-12)


@pytest.mark.parametrize("first,last", [(0, 3), (3, 2), (1, 33)])
def test_layer_ranges_outside_the_model_are_rejected(first, last):
    with pytest.raises(ValueError, match="layers"):
        stage_cost(LLAMA2_7B, A100, 1, 1, first, last)


def test_unknown_mlp_is_rejected():
    with pytest.raises(ValueError, match="mlp"):
        block_params(dataclasses.replace(TINY, mlp="relu"))
