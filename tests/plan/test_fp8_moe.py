"""FP8 with experts, against closed forms written from the model's definition: a MoE
block's FP8 GEMMs (attention, the routed experts' grouped GEMMs, the shared experts') at
the FP8 rate with the router in BF16, their casts, the FP8 copies of the weights a rank
holds at its EP, the one-byte saved inputs, and plans of it through the lowering, the
closed form and the simulator."""

from __future__ import annotations

import dataclasses

import pytest

from tests.plan.reference_lowering import reference_lower
from tests.plan.test_fp8 import hbm_rate
from tests.support.lowering import assert_identical
from xsweep.plan.analysis import analyze
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan, random_plan
from xsweep.plan.lower import lower
from xsweep.plan.memory import memory_per_gpu, moe_layer_activation_bytes
from xsweep.plan.stack import Stack
from xsweep.plan.workload import (
    FP8_CAST_BYTES,
    gemm_tiles,
    optimizer_time_s,
    rank_gemm_params,
    routed_rows,
    stage_cost,
    wave_efficiency,
)
from xsweep.search.closed_form import iteration_lower_bound
from xsweep.sim import simulate
from xsweep.spec import validate_plan
from xsweep.spec import xsweep_pb2 as pb
from xsweep.spec.catalog import GIB, GpuSpec, load_catalog

CATALOG = load_catalog()
H100 = CATALOG.gpu("H100-SXM")
MODELS = ("mixtral-8x7b", "deepseek-v3")


def grouped_time_s(gpu: GpuSpec, rows: float, k: int, n: int, experts: int,
                   fp8: bool) -> float:
    """The roofline of ``experts`` GEMMs of ``rows / experts`` tokens each, ``k x n``
    weights apiece, written anew: FLOPs over the rate with the wave factor of all their
    output tiles, or their bytes over HBM (FP8: one-byte inputs and weights)."""
    flops = 2.0 * rows * k * n
    if fp8:
        rate = gpu.peak_fp8_tflops * 1e12 * gpu.fp8_gemm_efficiency
        nbytes = experts * k * n + rows * k + 2 * rows * n
    else:
        rate = gpu.peak_bf16_tflops * 1e12 * gpu.gemm_efficiency
        nbytes = 2 * (experts * k * n + rows * (k + n))
    rate *= wave_efficiency(gemm_tiles(rows / experts, n, experts), gpu.num_sms)
    return max(flops / rate, nbytes / hbm_rate(gpu))


def moe_gemms(model, tp: int, b: int, stack: Stack) -> list[tuple[float, int, int, int]]:
    """(rows, k, n, experts) of the GEMMs a MoE block runs in FP8 on one rank: Q/K/V and
    the projection on the ``b s`` tokens, each local expert's input matrices (gate and up)
    and output matrix on its share of the rank's routed token copies, the shared experts'
    on every token. Not the router."""
    h, s = model.hidden_size, model.seq_length
    d = h // model.num_attention_heads
    heads, kv = -(-model.num_attention_heads // tp), -(-model.num_kv_heads // tp)
    ep = stack.expert_parallel
    local = model.num_experts // ep
    width = -(-model.expert_ffn_hidden_size // max(tp // ep, 1))
    rows = routed_rows(model, b, tp, stack)
    out = [(b * s, h, d * (heads + 2 * kv), 1), (b * s, d * heads, h, 1),
           (rows, h, 2 * width, local), (rows, width, h, local)]
    if model.num_shared_experts:
        shared = -(-model.num_shared_experts * (model.shared_expert_ffn_hidden_size
                                                or model.expert_ffn_hidden_size) // tp)
        out += [(b * s, h, 2 * shared, 1), (b * s, shared, h, 1)]
    return out


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize(("tp", "ep"), [(1, 8), (4, 4), (8, 2)])
def test_a_moe_block_in_fp8_is_its_bf16_time_with_fp8_gemms_and_their_casts(name, tp, ep):
    """Only the FP8 GEMMs change, each to its FP8 closed form, and their casts are added
    (4 bytes an element of each input forward, of each output gradient backward): the
    router, permutations, activation, attention core and norms keep their BF16 time, and
    the FLOPs are unchanged."""
    model = CATALOG.model(name)
    layer = model.moe_first_dense_layers + 1  # a MoE layer
    bf16_stack = Stack(expert_parallel=ep, moe_imbalance=1.25)
    fp8_stack = dataclasses.replace(bf16_stack, precision="fp8")
    bf16 = stage_cost(model, H100, tp, 1, layer, layer, stack=bf16_stack)
    fp8 = stage_cost(model, H100, tp, 1, layer, layer, stack=fp8_stack)
    gemms = moe_gemms(model, tp, 1, fp8_stack)
    change = sum(grouped_time_s(H100, rows, k, n, e, True)
                 - grouped_time_s(H100, rows, k, n, e, False) for rows, k, n, e in gemms)
    cast_forward = FP8_CAST_BYTES * sum(rows * k for rows, k, _, _ in gemms)
    cast_backward = FP8_CAST_BYTES * sum(rows * n for rows, _, n, _ in gemms)
    rate = hbm_rate(H100)
    assert fp8.forward_time_s == pytest.approx(
        bf16.forward_time_s + change + cast_forward / rate, rel=1e-12)
    assert fp8.backward_time_s == pytest.approx(
        bf16.backward_time_s + 2 * change + cast_backward / rate, rel=1e-12)
    assert fp8.forward_time_s < bf16.forward_time_s
    assert (fp8.forward_flops, fp8.backward_flops, fp8.a2a_pair_bytes, fp8.grad_bytes) == (
        bf16.forward_flops, bf16.backward_flops, bf16.a2a_pair_bytes, bf16.grad_bytes)


def gemm_params(model, tp: int, ep: int) -> int:
    """FP8 GEMM weights of one MoE block on one rank: attention (Q, K, V, projection), the
    rank's routed experts (``experts / EP`` whole ones across replicas, else every
    expert's ``1 / TP`` of the width) and its shared experts; not the router."""
    h = model.hidden_size
    d = h // model.num_attention_heads
    heads, kv = -(-model.num_attention_heads // tp), -(-model.num_kv_heads // tp)
    attention = h * d * (2 * heads + 2 * kv)
    f = model.expert_ffn_hidden_size
    routed = (model.num_experts // ep * 3 * h * f if ep > tp
              else model.num_experts * 3 * h * -(-f // tp))
    shared = 0
    if model.num_shared_experts:
        shared = 3 * h * -(-model.num_shared_experts * (model.shared_expert_ffn_hidden_size
                                                        or f) // tp)
    return attention + routed + shared


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize(("tp", "ep"), [(1, 8), (4, 4), (2, 8)])
def test_fp8_weight_copies_and_the_optimizers_cast_count_the_experts_a_rank_holds(
        name, tp, ep):
    """A rank's FP8 copies (data and transpose, 2 bytes a parameter) and the optimizer's
    once-an-iteration cast (4 bytes) cover its MoE layers' GEMM weights at its EP, and its
    dense layers' (DeepSeek-V3's first three) as a dense model's."""
    model = CATALOG.model(name)
    first = 1
    last = model.moe_first_dense_layers + 2
    moe = 2
    dense = last - moe
    dense_block = rank_gemm_params(model, tp, 1, 1) if dense else 0
    want = dense * dense_block + moe * gemm_params(model, tp, ep)
    assert rank_gemm_params(model, tp, first, last, ep) == want
    stack = Stack(expert_parallel=ep, zero_stage=1)
    fp8 = dataclasses.replace(stack, precision="fp8")

    def mem(s):
        return memory_per_gpu(model, H100, tp, 1, first, last, stage_index=0, num_stages=1,
                              schedule="1f1b", num_micro_batches=4, stack=s, dp=8)

    assert (mem(fp8).weights_gib - mem(stack).weights_gib) * GIB == pytest.approx(
        2 * want, rel=1e-12)
    step = (optimizer_time_s(model, H100, tp, first, last, 8, 1, "fp8", ep)
            - optimizer_time_s(model, H100, tp, first, last, 8, 1, "bf16", ep))
    assert step == pytest.approx(FP8_CAST_BYTES * want / hbm_rate(H100), rel=1e-12)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("sequence_parallel", [True, False])
def test_fp8_saves_a_moe_blocks_gemm_inputs_in_one_byte_and_the_routers_in_two(
        name, sequence_parallel):
    """FP8 keeps one byte less of each saved FP8 GEMM input: QKV's (split under sequence
    parallelism), the projection's, each routed token copy's ``h`` and its output matrix's
    ``width``, the shared experts' output-matrix input; the router keeps its BF16 input
    (the layer's FFN input, 2 bytes), beside the shared experts' FP8 copy of it where there
    are shared experts (1 byte more), in place of it (the same bytes as BF16) where not."""
    model = CATALOG.model(name)
    tp, ep, b = 4, 8, 1
    stack = Stack(expert_parallel=ep, sequence_parallel=sequence_parallel)
    bf16 = moe_layer_activation_bytes(model, tp, b, stack)
    fp8 = moe_layer_activation_bytes(model, tp, b, dataclasses.replace(stack, precision="fp8"))
    s, h = model.seq_length, model.hidden_size
    split = tp if sequence_parallel else 1
    q = h // model.num_attention_heads * -(-model.num_attention_heads // tp)
    rows = routed_rows(model, b, tp, stack)
    width = model.expert_ffn_hidden_size  # whole experts across replicas
    saved = b * s * h / split + b * s * q + rows * (h + width)
    if model.num_shared_experts:
        shared = -(-model.num_shared_experts * (model.shared_expert_ffn_hidden_size
                                                or width) // tp)
        saved += b * s * shared - b * s * h / split
    assert bf16 - fp8 == pytest.approx(saved, rel=1e-12)


def fp8_plan(name: str, tp: int, ep: int):
    """The model cut to 4 layers (DeepSeek-V3: 3 dense, 1 MoE) on two nodes of 4 H100s,
    replicas of one TP-``tp`` stage, EP ``ep``, ZeRO-1, in FP8."""
    replicas = 8 // tp
    return build_plan(f"{name}-fp8-ep{ep}", name, [NodeReq("H100-SXM", 4, "cx7")] * 2,
                      [ReplicaReq((StageReq("H100-SXM", tp, 4),), 1, 2)] * replicas,
                      seq_length=1024, num_layers=4,
                      stack=Stack(expert_parallel=ep, zero_stage=1, precision="fp8"))


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize(("tp", "ep"), [(1, 8), (4, 4), (4, 8)])
def test_fp8_moe_plans_validate_lower_as_the_reference_and_stay_above_the_closed_form(
        name, tp, ep):
    """FP8 plans with experts (EP inside TP, across replicas, at TP 1) validate, lower as
    the task-by-task reference, run faster than the same plan in BF16 in the simulator,
    and the closed form stays under the simulator."""
    plan = fp8_plan(name, tp, ep)
    a = analyze(validate_plan(plan, CATALOG), CATALOG)
    assert a.stack.precision == "fp8"
    program = lower(a)
    assert_identical(program, reference_lower(a))
    exact = simulate(program).iteration_time_s
    assert iteration_lower_bound(plan, CATALOG) <= exact
    bf16 = fp8_plan(name, tp, ep)
    bf16.training.ClearField("precision")
    assert exact < simulate(lower(analyze(validate_plan(bf16, CATALOG), CATALOG))).iteration_time_s


def test_random_moe_plans_draw_fp8():
    plans = [random_plan(seed, max_gpus=32, model=MODELS[seed % 2]) for seed in range(24)]
    assert {p.training.precision for p in plans} == {pb.BF16, pb.FP8}
    assert not any(p.training.fp8_param_gather for p in plans)
