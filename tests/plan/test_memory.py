"""Memory per GPU against Korthikanti et al.'s formulas, schedules, ZeRO-1 and real GPUs."""

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
from xsweep.plan.workload import rank_params
from xsweep.spec.catalog import GpuSpec, ModelSpec

GPT3 = ModelSpec("gpt3-175b", 96, 12288, 49152, 96, 96, 50257, 2048, "gelu")
GPT_MEDIUM = ModelSpec("gpt-350m", 24, 1024, 4096, 16, 16, 50257, 1024, "gelu")
LLAMA2_7B = ModelSpec("llama2-7b", 32, 4096, 11008, 32, 32, 32000, 4096, "swiglu")
LLAMA2_70B = ModelSpec("llama2-70b", 80, 8192, 28672, 64, 8, 32000, 4096, "swiglu")
A100_40 = GpuSpec("A100-40GB", 312, 40, 1.555, 2400, 30.66, 256, 575, "cx6", 10375, 812.5,
                  1.29, 0.5)


def memory(model, *, tp=1, b=1, first=1, last=None, stage=0, stages=1, schedule="1f1b", m=1,
           recompute=False, zero_stage=0, dp=1):
    return memory_per_gpu(model, A100_40, tp, b, first, last or model.num_layers,
                          stage_index=stage, num_stages=stages, schedule=schedule,
                          num_micro_batches=m, recompute=recompute, zero_stage=zero_stage,
                          dp=dp)


@pytest.mark.parametrize("model", [GPT3, GPT_MEDIUM], ids=lambda m: m.name)
@pytest.mark.parametrize("b", [1, 4])
def test_korthikanti_per_layer_activations_without_parallelism(model, b):
    s, h, a = model.seq_length, model.hidden_size, model.num_attention_heads
    assert layer_activation_bytes(model, 1, b) == s * b * h * (34 + 5 * a * s / h)


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_korthikanti_per_layer_activations_with_tensor_parallelism(tp):
    s, h, a = GPT3.seq_length, GPT3.hidden_size, GPT3.num_attention_heads
    expected = s * h * (10 + 24 / tp + 5 * a * s / (h * tp))
    assert layer_activation_bytes(GPT3, tp, 1) == pytest.approx(expected, rel=1e-12)


def test_uneven_tp_keeps_the_largest_shards_activations():
    # 32 heads at TP 3 -> 11 heads; 12288 FFN columns -> 4096 (GELU keeps 4 bytes a column)
    model = dataclasses.replace(LLAMA2_7B, ffn_hidden_size=12288, mlp="gelu")
    s, h, a = model.seq_length, model.hidden_size, model.num_attention_heads
    expected = 10 * s * h + (8 * s * h + 5 * a * s * s) * 11 / 32 + 4 * s * 4096
    assert layer_activation_bytes(model, 3, 1) == pytest.approx(expected, rel=1e-12)


def test_gqa_and_swiglu_move_activations_the_expected_way():
    mha = LLAMA2_7B
    gqa = dataclasses.replace(mha, num_kv_heads=8)
    gelu = dataclasses.replace(mha, mlp="gelu")
    s, h, f = mha.seq_length, mha.hidden_size, mha.ffn_hidden_size
    assert layer_activation_bytes(mha, 1, 1) - layer_activation_bytes(gqa, 1, 1) == (
        4 * s * h * 3 / 4)  # K and V keep a quarter of their 4*s*h
    assert layer_activation_bytes(mha, 1, 1) - layer_activation_bytes(gelu, 1, 1) == 2 * s * f


def test_recompute_keeps_layer_inputs_plus_one_layer():
    model, b, m, stages = GPT_MEDIUM, 2, 8, 4
    s, h = model.seq_length, model.hidden_size
    # stage 1 of 4 (interior, layers 7..12) under 1F1B holds 3 micro-batches
    kept = memory(model, tp=2, b=b, first=7, last=12, stage=1, stages=stages, m=m,
                  recompute=True)
    expected = 6 * 3 * 2 * s * b * h + layer_activation_bytes(model, 2, b)
    assert kept.activations_gb == pytest.approx(expected / 1e9, rel=1e-12)
    full = memory(model, tp=2, b=b, first=7, last=12, stage=1, stages=stages, m=m)
    assert full.activations_gb == pytest.approx(
        6 * 3 * layer_activation_bytes(model, 2, b) / 1e9, rel=1e-12)


@given(m=st.integers(1, 64), p=st.integers(1, 16), data=st.data())
def test_1f1b_holds_at_most_what_gpipe_holds(m, p, data):
    stage = data.draw(st.integers(0, p - 1))
    gpipe = memory(GPT_MEDIUM, first=1, last=4, stage=stage, stages=p, m=m, schedule="gpipe")
    one_f = memory(GPT_MEDIUM, first=1, last=4, stage=stage, stages=p, m=m, schedule="1f1b")
    assert one_f.activations_gb <= gpipe.activations_gb
    if m <= p - stage:
        assert one_f.activations_gb == gpipe.activations_gb
    else:
        assert one_f.activations_gb < gpipe.activations_gb
    assert (one_f.weights_gb, one_f.optimizer_gb) == (gpipe.weights_gb, gpipe.optimizer_gb)


def test_weights_grads_and_optimizer_per_parameter():
    params = rank_params(LLAMA2_7B, 4, 1, 8)
    mem = memory(LLAMA2_7B, tp=4, first=1, last=8, stages=4)
    assert mem.weights_gb == pytest.approx(2 * params / 1e9, rel=1e-12)
    assert mem.grads_gb == pytest.approx(2 * params / 1e9, rel=1e-12)
    assert mem.optimizer_gb == pytest.approx(12 * params / 1e9, rel=1e-12)
    assert mem.total_gb == pytest.approx(
        mem.weights_gb + mem.grads_gb + mem.optimizer_gb + mem.activations_gb, rel=1e-12)


def test_zero1_divides_optimizer_states_by_dp():
    plain = memory(LLAMA2_7B, tp=2, first=9, last=16, stage=1, stages=4, dp=4)
    zero1 = memory(LLAMA2_7B, tp=2, first=9, last=16, stage=1, stages=4, dp=4, zero_stage=1)
    alone = memory(LLAMA2_7B, tp=2, first=9, last=16, stage=1, stages=4, dp=1)
    assert zero1.optimizer_gb == pytest.approx(plain.optimizer_gb / 4, rel=1e-12)
    assert plain.optimizer_gb == alone.optimizer_gb  # without ZeRO dp changes nothing
    assert (zero1.weights_gb, zero1.grads_gb, zero1.activations_gb) == (
        plain.weights_gb, plain.grads_gb, plain.activations_gb)


def test_embedding_and_head_sit_on_the_end_stages():
    s, h, v = LLAMA2_7B.seq_length, LLAMA2_7B.hidden_size, LLAMA2_7B.vocab_size
    first = memory(LLAMA2_7B, first=1, last=8, stage=0, stages=4, m=1)
    middle = memory(LLAMA2_7B, first=9, last=16, stage=1, stages=4, m=1)
    last = memory(LLAMA2_7B, first=25, last=32, stage=3, stages=4, m=1)
    assert first.weights_gb - middle.weights_gb == pytest.approx(2 * v * h / 1e9, rel=1e-12)
    assert last.weights_gb - middle.weights_gb == pytest.approx(2 * (v * h + h) / 1e9, rel=1e-12)
    assert first.activations_gb - middle.activations_gb == pytest.approx(s * h / 1e9, rel=1e-12)
    assert last.activations_gb - middle.activations_gb == pytest.approx(4 * s * v / 1e9,
                                                                        rel=1e-12)


def test_70b_does_not_fit_one_a100_40gb_but_two_llama2_7b_layers_do():
    big = memory(LLAMA2_70B, recompute=True, schedule="gpipe")
    assert not fits(big, A100_40)
    assert big.weights_gb > 130  # 69 billion bf16 parameters alone
    small = memory(dataclasses.replace(LLAMA2_7B, num_layers=2), schedule="gpipe")
    assert fits(small, A100_40)
    assert 15 < small.total_gb < 20  # 0.67 billion parameters at 16 B plus ~7 GB activations
