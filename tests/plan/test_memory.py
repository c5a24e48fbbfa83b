"""Memory per GPU against Korthikanti et al.'s formulas, the stack options, schedules, ZeRO
and real GPUs."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xsweep.plan.memory import (
    fits,
    layer_activation_bytes,
    memory_per_gpu,
)
from xsweep.plan.schedule import in_flight
from xsweep.plan.stack import Stack
from xsweep.plan.workload import block_params, rank_params
from xsweep.spec.catalog import GIB, ModelSpec, load_catalog

# GPT models as Megatron trains them (with dropout), Llama 2 as released (without).
GPT3 = ModelSpec("gpt3-175b", 96, 12288, 49152, 96, 96, 50257, 2048, "gelu", dropout=True)
GPT_MEDIUM = ModelSpec("gpt-350m", 24, 1024, 4096, 16, 16, 50257, 1024, "gelu", dropout=True)
LLAMA2_7B = ModelSpec("llama2-7b", 32, 4096, 11008, 32, 32, 32000, 4096, "swiglu")
LLAMA2_70B = ModelSpec("llama2-70b", 80, 8192, 28672, 64, 8, 32000, 4096, "swiglu")
A100_40 = load_catalog().gpu("A100-40GB")
# Megatron-LM 2021: no sequence parallelism, no fused attention (Korthikanti's baseline).
PLAIN = Stack(sequence_parallel=False, flash_attention=False)


def memory(model, *, tp=1, b=1, first=1, last=None, stage=0, stages=1, schedule="1f1b", m=1,
           stack=PLAIN, dp=1):
    return memory_per_gpu(model, A100_40, tp, b, first, last or model.num_layers,
                          stage_index=stage, num_stages=stages, schedule=schedule,
                          num_micro_batches=m, stack=stack, dp=dp)


@pytest.mark.parametrize("model", [GPT3, GPT_MEDIUM], ids=lambda m: m.name)
@pytest.mark.parametrize("b", [1, 4])
def test_korthikanti_per_layer_activations_without_parallelism(model, b):
    s, h, a = model.seq_length, model.hidden_size, model.num_attention_heads
    assert layer_activation_bytes(model, 1, b, PLAIN) == s * b * h * (34 + 5 * a * s / h)


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_korthikanti_per_layer_activations_with_tensor_parallelism(tp):
    s, h, a = GPT3.seq_length, GPT3.hidden_size, GPT3.num_attention_heads
    expected = s * h * (10 + 24 / tp + 5 * a * s / (h * tp))
    assert layer_activation_bytes(GPT3, tp, 1, PLAIN) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_sequence_parallelism_divides_the_activations_by_tp(tp):
    # Korthikanti Table 2: sbh(34/t + 5as/(ht)), i.e. the unparallelised figure over t.
    sp = dataclasses.replace(PLAIN, sequence_parallel=True)
    s, h, a = GPT3.seq_length, GPT3.hidden_size, GPT3.num_attention_heads
    assert layer_activation_bytes(GPT3, tp, 1, sp) == pytest.approx(
        s * h * (34 / tp + 5 * a * s / (h * tp)), rel=1e-12)
    assert layer_activation_bytes(GPT3, tp, 1, sp) == pytest.approx(
        layer_activation_bytes(GPT3, 1, 1, PLAIN) / tp, rel=1e-12)


@pytest.mark.parametrize("tp", [1, 8])
def test_selective_recompute_and_flash_attention_drop_the_score_term(tp):
    s, h, a, b = GPT3.seq_length, GPT3.hidden_size, GPT3.num_attention_heads, 2
    sp = Stack(sequence_parallel=True, flash_attention=False)
    selective = dataclasses.replace(sp, recompute="selective")
    flash = dataclasses.replace(sp, flash_attention=True)
    assert layer_activation_bytes(GPT3, tp, b, selective) == pytest.approx(
        s * b * h * 34 / tp, rel=1e-12)  # Korthikanti: sbh * 34/t
    # flash keeps one fp32 log-sum-exp per query row and head instead of 5 a s^2 b
    assert (layer_activation_bytes(GPT3, tp, b, sp) - layer_activation_bytes(GPT3, tp, b, flash)
            ) == pytest.approx((5 * a * s * s * b - 4 * a * s * b) / tp, rel=1e-12)


def test_flash_attention_activations_grow_linearly_with_the_sequence():
    flash = Stack()
    short = dataclasses.replace(LLAMA2_7B, seq_length=2048)
    assert layer_activation_bytes(LLAMA2_7B, 2, 1, flash) == pytest.approx(
        2 * layer_activation_bytes(short, 2, 1, flash), rel=1e-12)
    assert layer_activation_bytes(LLAMA2_7B, 2, 1, PLAIN) > 2 * layer_activation_bytes(
        short, 2, 1, PLAIN)


def test_models_without_dropout_keep_no_masks():
    s, h, a = LLAMA2_7B.seq_length, LLAMA2_7B.hidden_size, LLAMA2_7B.num_attention_heads
    with_dropout = dataclasses.replace(LLAMA2_7B, dropout=True)
    # two s*b*h masks in the block, and the attention mask plus its dropped-out copy
    assert (layer_activation_bytes(with_dropout, 1, 1, PLAIN)
            - layer_activation_bytes(LLAMA2_7B, 1, 1, PLAIN)) == 2 * s * h + 3 * a * s * s


def test_uneven_tp_keeps_the_largest_shards_activations():
    # 32 heads at TP 3 -> 11 heads; 12288 FFN columns -> 4096 (GELU keeps 4 bytes a column)
    model = dataclasses.replace(LLAMA2_7B, ffn_hidden_size=12288, mlp="gelu", dropout=True)
    s, h, a = model.seq_length, model.hidden_size, model.num_attention_heads
    expected = 10 * s * h + (8 * s * h + 5 * a * s * s) * 11 / 32 + 4 * s * 4096
    assert layer_activation_bytes(model, 3, 1, PLAIN) == pytest.approx(expected, rel=1e-12)


def test_gqa_and_swiglu_move_activations_the_expected_way():
    mha = LLAMA2_7B
    gqa = dataclasses.replace(mha, num_kv_heads=8)
    gelu = dataclasses.replace(mha, mlp="gelu")
    s, h, f = mha.seq_length, mha.hidden_size, mha.ffn_hidden_size
    assert layer_activation_bytes(mha, 1, 1) - layer_activation_bytes(gqa, 1, 1) == (
        4 * s * h * 3 / 4)  # K and V keep a quarter of their 4*s*h
    assert layer_activation_bytes(mha, 1, 1) - layer_activation_bytes(gelu, 1, 1) == 2 * s * f


@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_full_recompute_keeps_layer_inputs_plus_one_layer(sequence_parallel):
    model, b, m, stages, tp = GPT_MEDIUM, 2, 8, 4, 2
    s, h = model.seq_length, model.hidden_size
    stack = dataclasses.replace(PLAIN, sequence_parallel=sequence_parallel)
    full = dataclasses.replace(stack, recompute="full")
    # stage 1 of 4 (interior, layers 7..12) under 1F1B holds 3 micro-batches
    kept = memory(model, tp=tp, b=b, first=7, last=12, stage=1, stages=stages, m=m, stack=full)
    split = tp if sequence_parallel else 1
    expected = 6 * 3 * 2 * s * b * h / split + layer_activation_bytes(model, tp, b, stack)
    assert kept.activations_gib == pytest.approx(expected / GIB, rel=1e-12)
    plain = memory(model, tp=tp, b=b, first=7, last=12, stage=1, stages=stages, m=m,
                   stack=stack)
    assert plain.activations_gib == pytest.approx(
        6 * 3 * layer_activation_bytes(model, tp, b, stack) / GIB, rel=1e-12)


@given(m=st.integers(1, 64), p=st.integers(1, 16), data=st.data())
def test_1f1b_holds_at_most_what_gpipe_holds(m, p, data):
    stage = data.draw(st.integers(0, p - 1))
    gpipe = memory(GPT_MEDIUM, first=1, last=4, stage=stage, stages=p, m=m, schedule="gpipe")
    one_f = memory(GPT_MEDIUM, first=1, last=4, stage=stage, stages=p, m=m, schedule="1f1b")
    assert one_f.activations_gib <= gpipe.activations_gib
    if m <= p - stage:
        assert one_f.activations_gib == gpipe.activations_gib
    else:
        assert one_f.activations_gib < gpipe.activations_gib
    assert (one_f.weights_gib, one_f.optimizer_gib) == (gpipe.weights_gib, gpipe.optimizer_gib)


@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("v", [2, 3, 4])
def test_interleaving_holds_korthikantis_first_stage_figure(p, v):
    # The first stage holds p (1 + (p - 1)/(p v)) micro-batches' worth of its layers:
    # more than 1F1B's p, and closer to it the more chunks.
    held = in_flight("1f1b", 0, p, 64, v)
    assert held == pytest.approx(p * (1 + (p - 1) / (p * v)), rel=1e-12)
    assert in_flight("1f1b", 0, p, 64) < held
    assert held < in_flight("1f1b", 0, p, 64, v - 1) or v == 2
    last = in_flight("1f1b", p - 1, p, 64, v)
    assert last == pytest.approx(((v - 1) * p + 1) / v, rel=1e-12)


def test_weights_grads_and_optimizer_per_parameter():
    params = rank_params(LLAMA2_7B, 4, 1, 8)
    mem = memory(LLAMA2_7B, tp=4, first=1, last=8, stages=4)
    assert mem.weights_gib == pytest.approx(2 * params / GIB, rel=1e-12)
    assert mem.grads_gib == pytest.approx(2 * params / GIB, rel=1e-12)
    assert mem.optimizer_gib == pytest.approx(12 * params / GIB, rel=1e-12)
    assert mem.total_gib == pytest.approx(
        mem.weights_gib + mem.grads_gib + mem.optimizer_gib + mem.activations_gib, rel=1e-12)


def test_zero1_divides_optimizer_states_by_dp():
    plain = memory(LLAMA2_7B, tp=2, first=9, last=16, stage=1, stages=4, dp=4)
    zero1 = memory(LLAMA2_7B, tp=2, first=9, last=16, stage=1, stages=4, dp=4,
                   stack=dataclasses.replace(PLAIN, zero_stage=1))
    alone = memory(LLAMA2_7B, tp=2, first=9, last=16, stage=1, stages=4, dp=1)
    assert zero1.optimizer_gib == pytest.approx(plain.optimizer_gib / 4, rel=1e-12)
    assert plain.optimizer_gib == alone.optimizer_gib  # without ZeRO dp changes nothing
    assert (zero1.weights_gib, zero1.grads_gib, zero1.activations_gib) == (
        plain.weights_gib, plain.grads_gib, plain.activations_gib)


def test_fsdp_shards_every_state_and_gathers_two_blocks():
    dp, tp = 8, 2
    params = rank_params(LLAMA2_7B, tp, 1, 32)
    block = block_params(LLAMA2_7B, tp)
    fsdp = memory(LLAMA2_7B, tp=tp, dp=dp, stack=dataclasses.replace(PLAIN, zero_stage=3))
    plain = memory(LLAMA2_7B, tp=tp, dp=dp)
    assert fsdp.weights_gib == pytest.approx((2 * params / dp + 2 * 2 * block) / GIB, rel=1e-12)
    assert fsdp.grads_gib == pytest.approx((2 * params / dp + 2 * block) / GIB, rel=1e-12)
    assert fsdp.optimizer_gib == pytest.approx(plain.optimizer_gib / dp, rel=1e-12)
    assert fsdp.activations_gib == plain.activations_gib


def test_embedding_and_head_sit_on_the_end_stages():
    model = dataclasses.replace(LLAMA2_7B, dropout=True)
    s, h, v = model.seq_length, model.hidden_size, model.vocab_size
    first = memory(model, first=1, last=8, stage=0, stages=4, m=1)
    middle = memory(model, first=9, last=16, stage=1, stages=4, m=1)
    last = memory(model, first=25, last=32, stage=3, stages=4, m=1)
    assert first.weights_gib - middle.weights_gib == pytest.approx(2 * v * h / GIB, rel=1e-12)
    assert last.weights_gib - middle.weights_gib == pytest.approx(2 * (v * h + h) / GIB,
                                                                  rel=1e-12)
    assert first.activations_gib - middle.activations_gib == pytest.approx(s * h / GIB,
                                                                           rel=1e-12)
    assert last.activations_gib - middle.activations_gib == pytest.approx(4 * s * v / GIB,
                                                                          rel=1e-12)


def test_capacities_are_gib_as_vendors_count_hbm(catalog):
    # An A100-80GB holds 80 GiB: a plan needing 79 GiB (84.8 GB) fits it.
    assert catalog.gpu("A100-80GB").hbm_bytes == 80 * 2**30
    need = dataclasses.replace(memory(LLAMA2_7B), total_gib=79.0)
    assert fits(need, catalog.gpu("A100-80GB")) and need.total_gib * GIB > 80e9


def test_70b_does_not_fit_one_a100_40gb_but_two_llama2_7b_layers_do():
    big = memory(LLAMA2_70B, stack=Stack(recompute="full"), schedule="gpipe")
    assert not fits(big, A100_40)
    assert big.weights_gib > 128  # 69 billion bf16 parameters alone
    small = memory(dataclasses.replace(LLAMA2_7B, num_layers=2), schedule="gpipe")
    assert fits(small, A100_40)
    assert 13 < small.total_gib < 14  # 0.67 billion parameters at 16 B plus ~3.5 GiB activations
