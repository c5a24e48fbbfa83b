"""FP8 as Transformer Engine runs it, against closed forms: the GEMMs' FLOPs unchanged and
their time at the FP8 rate, the casts' bytes, what stays BF16, and the memory of the FP8
weight copies and saved GEMM inputs, per device group."""

from __future__ import annotations

import dataclasses

import pytest

from xsweep.plan.analysis import analyze
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan
from xsweep.plan.memory import layer_activation_bytes, memory_per_gpu
from xsweep.plan.stack import Stack
from xsweep.plan.workload import (
    FP8_CAST_BYTES,
    block_gemm_params,
    block_params,
    fp8_cast_bytes,
    gemm_tiles,
    iteration_model_flops,
    mlp_matrices,
    optimizer_time_s,
    rank_gemm_params,
    stage_cost,
    tp_shard,
    wave_efficiency,
)
from xsweep.spec.catalog import GIB, GpuSpec, ModelSpec, load_catalog

CATALOG = load_catalog()
H100, B200, A100 = CATALOG.gpu("H100-SXM"), CATALOG.gpu("B200"), CATALOG.gpu("A100-40GB")
LLAMA2_7B = ModelSpec("llama2-7b", 32, 4096, 11008, 32, 32, 32000, 4096, "swiglu")
GPT_1_3B = ModelSpec("gpt-1.3b", 24, 2048, 8192, 16, 16, 50257, 2048, "gelu", dropout=True)
# GQA: 8 KV heads of 32 query heads
LLAMA3_8B = ModelSpec("llama3-8b", 32, 4096, 14336, 32, 8, 128256, 8192, "swiglu")
FP8, BF16 = Stack(precision="fp8"), Stack()


def hbm_rate(gpu: GpuSpec) -> float:
    return gpu.hbm_bytes_per_s * gpu.hbm_efficiency


def gemm_shapes(model: ModelSpec, tp: int) -> list[tuple[int, int]]:
    """(k, n) of the block's four weights on the largest TP shard, written out anew."""
    shard = tp_shard(model, tp)
    h, d = model.hidden_size, model.hidden_size // model.num_attention_heads
    q, kv = d * shard.heads, 2 * d * shard.kv_heads
    return [(h, q + kv), (q, h), (h, (mlp_matrices(model) - 1) * shard.ffn), (shard.ffn, h)]


def gemm_time_s(gpu: GpuSpec, tokens: int, k: int, n: int, fp8: bool) -> float:
    """The roofline of one GEMM, from its closed form: FLOPs over the rate (FP8 peak x FP8
    efficiency, or the BF16 ones) with the wave factor, or its bytes over HBM."""
    flops = 2.0 * tokens * k * n
    if fp8:
        rate = gpu.peak_fp8_tflops * 1e12 * gpu.fp8_gemm_efficiency
        nbytes = 1 * (k * n + tokens * k) + 2 * tokens * n
    else:
        rate = gpu.peak_bf16_tflops * 1e12 * gpu.gemm_efficiency
        nbytes = 2 * (k * n + tokens * (k + n))
    rate *= wave_efficiency(gemm_tiles(tokens, n), gpu.num_sms)
    return max(flops / rate, nbytes / hbm_rate(gpu))


def test_the_catalog_gives_fp8_to_hopper_and_blackwell_only():
    assert (H100.peak_fp8_tflops, CATALOG.gpu("H200").peak_fp8_tflops, B200.peak_fp8_tflops) == (
        1979, 1979, 4500)
    assert H100.peak_fp8_tflops == pytest.approx(2 * H100.peak_bf16_tflops, rel=1e-3)
    assert B200.peak_fp8_tflops == 2 * B200.peak_bf16_tflops
    assert not A100.has_fp8 and not CATALOG.gpu("A100-80GB").has_fp8
    assert all(gpu.fp8_gemm_efficiency for gpu in (H100, B200))


@pytest.mark.parametrize("model", [LLAMA2_7B, GPT_1_3B, LLAMA3_8B], ids=lambda m: m.name)
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_fp8_leaves_the_flops_unchanged(model, recompute):
    for tp in (1, 2, 8):
        bf16 = stage_cost(model, H100, tp, 2, 1, model.num_layers,
                          stack=Stack(recompute=recompute))
        fp8 = stage_cost(model, H100, tp, 2, 1, model.num_layers,
                         stack=Stack(recompute=recompute, precision="fp8"))
        assert (fp8.forward_flops, fp8.backward_flops) == (bf16.forward_flops,
                                                            bf16.backward_flops)
        # and the communication: TP all-reduces and pipeline activations stay BF16
        assert (fp8.tp_allreduce_bytes, fp8.activation_bytes, fp8.grad_bytes) == (
            bf16.tp_allreduce_bytes, bf16.activation_bytes, bf16.grad_bytes)
    assert iteration_model_flops(model, 8) > 0  # the model FLOPs take no precision


def test_the_cast_bytes_by_hand():
    # Llama-2-7B at TP 2, micro-batch 1: h 4096, 16 heads of 128 (q = kv/2 = 2048), f 5504
    t, h, q, f = 4096, 4096, 2048, 5504
    forward, backward = fp8_cast_bytes(LLAMA2_7B, 1, 2)
    # inputs of QKV (h), projection (q), gate+up (h) and down (f)
    assert forward == FP8_CAST_BYTES * t * (h + q + h + f)
    # gradients of the outputs: QKV (3q), projection (h), gate+up (2f), down (h)
    assert backward == FP8_CAST_BYTES * t * (3 * q + h + 2 * f + h)
    assert FP8_CAST_BYTES == 4  # read BF16 (2), write FP8 (1) and its transpose (1)


@pytest.mark.parametrize("gpu", [H100, B200], ids=lambda g: g.name)
@pytest.mark.parametrize("model", [LLAMA2_7B, GPT_1_3B, LLAMA3_8B], ids=lambda m: m.name)
@pytest.mark.parametrize(("tp", "b"), [(1, 1), (2, 4), (8, 1)])
def test_a_block_in_fp8_is_its_bf16_time_with_fp8_gemms_and_the_casts(gpu, model, tp, b):
    """Only the four GEMMs change (each to its FP8 closed form) and the casts are added:
    the attention core, norms, residuals and the activation keep their BF16 time."""
    tokens = b * model.seq_length
    bf16 = stage_cost(model, gpu, tp, b, 2, 2, stack=BF16)
    fp8 = stage_cost(model, gpu, tp, b, 2, 2, stack=FP8)
    change = sum(gemm_time_s(gpu, tokens, k, n, True) - gemm_time_s(gpu, tokens, k, n, False)
                 for k, n in gemm_shapes(model, tp))
    cast_forward, cast_backward = fp8_cast_bytes(model, b, tp)
    assert fp8.forward_time_s == pytest.approx(
        bf16.forward_time_s + change + cast_forward / hbm_rate(gpu), rel=1e-12)
    assert fp8.backward_time_s == pytest.approx(
        bf16.backward_time_s + 2 * change + cast_backward / hbm_rate(gpu), rel=1e-12)
    assert fp8.forward_time_s < bf16.forward_time_s  # FP8 pays for its casts


def test_large_gemms_run_at_the_fp8_rate():
    # GPT-3-wide GEMMs over 16k tokens: compute bound, many waves: FLOPs / (FP8 peak x
    # efficiency x wave factor), the BF16 time scaled by the ratio of the sustained rates
    # (half on B200, whose FP8 fraction is the BF16 one; 1/1.32 on Hopper, calibrated)
    tokens, k, n = 16384, 12288, 4 * 12288
    for gpu in (H100, B200):
        fp8 = gemm_time_s(gpu, tokens, k, n, True)
        wave = wave_efficiency(gemm_tiles(tokens, n), gpu.num_sms)
        assert fp8 == 2.0 * tokens * k * n / (gpu.peak_fp8_flops * gpu.fp8_gemm_efficiency * wave)
        ratio = (gpu.peak_fp8_flops * gpu.fp8_gemm_efficiency) / (gpu.peak_flops
                                                                  * gpu.gemm_efficiency)
        assert fp8 == pytest.approx(gemm_time_s(gpu, tokens, k, n, False) / ratio, rel=2e-3)
    assert B200.fp8_gemm_efficiency == B200.gemm_efficiency


def test_an_unset_fp8_efficiency_is_the_bf16_one():
    gpu = dataclasses.replace(H100, fp8_gemm_efficiency=0.0)
    assert gpu.fp8_gemm_fraction == H100.gemm_efficiency
    assert dataclasses.replace(H100, fp8_gemm_efficiency=0.5).fp8_gemm_fraction == 0.5


def test_the_weights_are_cast_once_per_iteration_after_the_optimizer():
    for zero, dp in ((0, 1), (1, 4), (3, 4)):
        bf16 = optimizer_time_s(LLAMA2_7B, H100, 2, 1, 16, dp, zero)
        fp8 = optimizer_time_s(LLAMA2_7B, H100, 2, 1, 16, dp, zero, "fp8")
        cast = FP8_CAST_BYTES * rank_gemm_params(LLAMA2_7B, 2, 1, 16)
        assert fp8 - bf16 == pytest.approx(cast / hbm_rate(H100), rel=1e-12)
    # the GEMM weights are every block parameter but the two norm gains; no embedding or head
    assert block_gemm_params(LLAMA2_7B, 2) == block_params(LLAMA2_7B, 2) - 2 * 4096
    assert rank_gemm_params(LLAMA2_7B, 2, 1, 32) == 32 * block_gemm_params(LLAMA2_7B, 2)


def saved_input_bytes(model: ModelSpec, tp: int, b: int, stack: Stack) -> float:
    """What FP8 saves of a block's activations: one byte an element of the QKV and first
    FFN inputs (split by TP under sequence parallelism), of the output-projection input
    and of the FFN output matrix's input."""
    s, h = model.seq_length, model.hidden_size
    shard = tp_shard(model, tp)
    q = h // model.num_attention_heads * shard.heads
    split = tp if stack.sequence_parallel else 1
    return b * s * (2 * h / split + q + shard.ffn)


@pytest.mark.parametrize("model", [LLAMA2_7B, GPT_1_3B, LLAMA3_8B], ids=lambda m: m.name)
@pytest.mark.parametrize("stack", [Stack(), Stack(sequence_parallel=False),
                                   Stack(recompute="selective"),
                                   Stack(flash_attention=False)], ids=repr)
def test_fp8_saves_its_gemm_inputs_in_one_byte(model, stack):
    for tp, b in ((1, 1), (4, 2)):
        bf16 = layer_activation_bytes(model, tp, b, stack)
        fp8 = layer_activation_bytes(model, tp, b, dataclasses.replace(stack, precision="fp8"))
        assert bf16 - fp8 == pytest.approx(saved_input_bytes(model, tp, b, stack), rel=1e-12)


def memory(model, tp, b, first, last, stack, dp=1, stage=0, stages=2, m=8):
    return memory_per_gpu(model, H100, tp, b, first, last, stage_index=stage, num_stages=stages,
                          schedule="1f1b", num_micro_batches=m, stack=stack, dp=dp)


@pytest.mark.parametrize("zero", [0, 1, 3])
def test_the_memory_delta_is_the_fp8_weight_copies_and_the_saved_inputs(zero):
    model, tp, b, dp, first, last = LLAMA2_7B, 2, 1, 4, 1, 16
    bf16 = memory(model, tp, b, first, last, Stack(zero_stage=zero), dp)
    fp8 = memory(model, tp, b, first, last, Stack(zero_stage=zero, precision="fp8"), dp)
    gemm = rank_gemm_params(model, tp, first, last)
    copies = 2 * gemm if zero != 3 else 2 * gemm / dp + 2 * 2 * block_gemm_params(model, tp)
    assert (fp8.weights_gib - bf16.weights_gib) * GIB == pytest.approx(copies, rel=1e-12)
    # gradients and the FP32 optimizer states are those of BF16
    assert (fp8.grads_gib, fp8.optimizer_gib) == (bf16.grads_gib, bf16.optimizer_gib)
    # stage 0 of 2 under 1F1B holds 2 micro-batches of its 16 blocks
    saved = 16 * 2 * saved_input_bytes(model, tp, b, Stack())
    assert (bf16.activations_gib - fp8.activations_gib) * GIB == pytest.approx(saved, rel=1e-12)
    assert fp8.total_gib - bf16.total_gib == pytest.approx(
        (copies - saved) / GIB, rel=1e-9)


def test_full_recompute_keeps_bf16_block_inputs():
    bf16 = memory(LLAMA2_7B, 2, 1, 1, 16, Stack(recompute="full"))
    fp8 = memory(LLAMA2_7B, 2, 1, 1, 16, Stack(recompute="full", precision="fp8"))
    # the block inputs are BF16; only the one block being recomputed keeps FP8 inputs
    saved = saved_input_bytes(LLAMA2_7B, 2, 1, Stack())
    assert (bf16.activations_gib - fp8.activations_gib) * GIB == pytest.approx(saved, rel=1e-12)


def test_each_group_of_a_heterogeneous_plan_runs_its_own_gpu_in_fp8():
    """H100 and B200 stages in one pipeline, per group: its own FP8 rate, casts at its own
    HBM bandwidth, its own memory delta."""
    nodes = [NodeReq("H100-SXM", 8), NodeReq("B200", 8)]
    replicas = [ReplicaReq((StageReq("H100-SXM", 4, 12), StageReq("B200", 2, 20)), 1, 8)] * 2
    plans = {precision: build_plan("het", "llama2-7b", nodes, replicas,
                                   stack=Stack(precision=precision), seq_length=2048)
             for precision in ("bf16", "fp8")}
    bf16, fp8 = (analyze(plans[p], CATALOG) for p in ("bf16", "fp8"))
    model = bf16.model
    for before, after in zip(bf16.groups, fp8.groups, strict=True):
        gpu, tp, b = after.gpu, after.tp, after.micro_batch_size
        tokens = b * model.seq_length
        layers = after.last_layer - after.first_layer + 1
        change = layers * sum(gemm_time_s(gpu, tokens, k, n, True)
                              - gemm_time_s(gpu, tokens, k, n, False)
                              for k, n in gemm_shapes(model, tp))
        cast = layers * fp8_cast_bytes(model, b, tp)[0] / hbm_rate(gpu)
        assert after.cost.forward_time_s == pytest.approx(
            before.cost.forward_time_s + change + cast, rel=1e-12)
        assert after.cost.forward_flops == before.cost.forward_flops
        copies = 2 * rank_gemm_params(model, tp, after.first_layer, after.last_layer)
        assert (after.memory.weights_gib - before.memory.weights_gib) * GIB == pytest.approx(
            copies, rel=1e-12)
        assert after.optimizer_time_s - before.optimizer_time_s == pytest.approx(
            FP8_CAST_BYTES * copies / 2 / hbm_rate(gpu), rel=1e-9)
    # the MFU's peak stays the BF16 one
    assert fp8.peak_flops_per_s == bf16.peak_flops_per_s


def test_the_workload_refuses_fp8_on_a_gpu_without_it():
    with pytest.raises(ValueError, match="no FP8 tensor cores"):
        stage_cost(LLAMA2_7B, A100, 1, 1, 2, 2, stack=FP8)
