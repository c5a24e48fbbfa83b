"""FP8 parameter all-gathers (``fp8_param_gather``): the gathers' bytes and the memory in
closed form, the reference lowering, agreement of the batched levels with the simulator,
and the plans validation refuses."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.evaluator.test_catalogue_agreement import _catalogue, _check
from tests.plan.reference_lowering import reference_lower
from tests.support.lowering import assert_identical
from xsweep.errors import InputError
from xsweep.plan.analysis import analyze
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan
from xsweep.plan.lower import lower, structure_key
from xsweep.plan.memory import memory_breakdown
from xsweep.plan.stack import Stack
from xsweep.spec import load_catalog, validate_plan
from xsweep.spec import xsweep_pb2 as pb

GIB = 2**30
# Llama-2-7B: hidden 4096, 32 heads of 128 (no GQA), SwiGLU FFN of 11008, vocabulary 32000
H, F, V = 4096, 11008, 32000
GEMM = 4 * H * H + 3 * H * F  # QKV, output projection, gate, up and down
BLOCK = GEMM + 2 * H  # and the two norm gains
FP8 = Stack(precision="fp8", zero_stage=1)
GATHER = dataclasses.replace(FP8, fp8_param_gather=True)


def zero1(stack: Stack, dp_overlap: bool = False, zero: int = 1):
    """Two replicas of two stages (layers 1-4 and 5-8 of Llama-2-7B), TP 2, on H100s in
    two nodes: each stage's DP group gathers its parameters over the nodes."""
    stack = dataclasses.replace(stack, dp_overlap=dp_overlap, zero_stage=zero,
                                dp_bucket_params=30_000_000 if dp_overlap else 0)
    replica = ReplicaReq((StageReq("H100-SXM", 2, 4), StageReq("H100-SXM", 2, 4)), 1, 2)
    nodes = [NodeReq("H100-SXM", 4, "cx7"), NodeReq("H100-SXM", 4, "cx7")]
    return build_plan("fp8-gather", "llama2-7b", nodes, [replica, replica], stack=stack,
                      num_layers=8, seq_length=2048)


def _gathers(program) -> dict[str, np.ndarray]:
    """Name -> flow bytes of each parameter all-gather of the program."""
    out = {}
    for t, name in enumerate(program.task_names):
        if name.startswith("ag L"):
            out[name] = program.flow_bytes[program.flow_ptr[t]:program.flow_ptr[t + 1]]
    return out


def _expected_ratio(first: int, last: int, num_layers: int = 8) -> float:
    """FP8 over BF16 bytes of layers first..last: GEMM weights at 1 byte instead of 2, norm
    gains, the embedding (layer 1) and the LM head (last layer) at 2 either way."""
    n = last - first + 1
    other = 2 * H * n + (V * H if first == 1 else 0) + (V * H + H if last == num_layers else 0)
    return (GEMM * n + 2 * other) / (2 * (GEMM * n + other))


@pytest.mark.parametrize("dp_overlap", [False, True])
def test_zero1_gathers_move_the_fp8_copies(catalog, dp_overlap):
    plain = lower(analyze(zero1(FP8, dp_overlap), catalog))
    fp8 = lower(analyze(zero1(GATHER, dp_overlap), catalog))
    bf16_gathers, fp8_gathers = _gathers(plain), _gathers(fp8)
    assert bf16_gathers.keys() == fp8_gathers.keys() and len(fp8_gathers) >= 2
    for name, flows in fp8_gathers.items():
        first, last = (int(x) for x in name.removeprefix("ag L").split("-"))
        np.testing.assert_allclose(flows / bf16_gathers[name], _expected_ratio(first, last),
                                   rtol=1e-12)
    # everything else as it was: the reduce-scatters, the tasks, the durations
    gathered = np.zeros(fp8.num_tasks, bool)
    gathered[[fp8.task_names.index(n) for n in fp8_gathers]] = True
    flow_task = np.repeat(np.arange(fp8.num_tasks), np.diff(fp8.flow_ptr))
    other = ~gathered[flow_task]
    np.testing.assert_array_equal(fp8.flow_bytes[other], plain.flow_bytes[other])
    np.testing.assert_array_equal(fp8.task_duration_s, plain.task_duration_s)
    np.testing.assert_array_equal(fp8.dep_idx, plain.dep_idx)


def test_fsdp_gathers_move_the_fp8_copies_and_scatters_stay_bf16(catalog):
    plain = lower(analyze(zero1(FP8, zero=3), catalog))
    fp8 = lower(analyze(zero1(GATHER, zero=3), catalog))
    names = plain.task_names
    assert names == fp8.task_names
    flow_task = np.repeat(np.arange(plain.num_tasks), np.diff(plain.flow_ptr))
    seen = set()
    for t, name in enumerate(names):
        flows = flow_task == t
        if name.startswith("ag L"):
            layer = int(name.split()[1][1:])
            np.testing.assert_allclose(fp8.flow_bytes[flows] / plain.flow_bytes[flows],
                                       _expected_ratio(layer, layer), rtol=1e-12)
            seen.add("ag")
        elif flows.any():  # reduce-scatters, TP rings, pipeline transfers
            np.testing.assert_array_equal(fp8.flow_bytes[flows], plain.flow_bytes[flows])
            seen.add("rs" if name.startswith("rs") else "other")
    assert seen == {"ag", "rs", "other"}


def test_memory_drops_the_bf16_copy_of_every_gemm_weight():
    """2 bytes less per GEMM parameter held: the layers' (ZeRO-1), or under FSDP the
    shard's and the two gathered blocks'; gradients, optimizer and activations unchanged."""
    def breakdown(stack, dp):
        return memory_breakdown(_llama(), 2, 1, 2, 5, 1, 2, "1f1b", 4, stack, dp)
    for zero, dp, held in ((1, 4, 4 * GEMM / 2), (3, 4, 4 * GEMM / 2 / 4 + 2 * GEMM / 2)):
        before = breakdown(dataclasses.replace(FP8, zero_stage=zero), dp)
        after = breakdown(dataclasses.replace(GATHER, zero_stage=zero), dp)
        assert before.weights_gib - after.weights_gib == pytest.approx(2 * held / GIB, rel=1e-12)
        for part in ("grads_gib", "optimizer_gib", "activations_gib"):
            assert getattr(after, part) == getattr(before, part)


def _llama():
    return dataclasses.replace(load_catalog().model("llama2-7b"), num_layers=8,
                               seq_length=2048)


def test_the_option_is_a_structure_and_equals_the_reference(catalog):
    for zero, overlap in ((1, False), (1, True), (3, False)):
        plans = [zero1(s, overlap, zero) for s in (FP8, GATHER)]
        a, b = (analyze(p, catalog) for p in plans)
        assert structure_key(a) != structure_key(b)
        for x in (a, b):
            assert_identical(lower(x), reference_lower(x))


@pytest.mark.parametrize(("precision", "zero"), [(pb.BF16, 1), (pb.FP8, 0), (pb.BF16, 3)])
def test_needs_fp8_and_sharded_parameters(catalog, precision, zero):
    plan = zero1(FP8)
    plan.training.precision, plan.training.zero_stage = precision, zero
    plan.training.fp8_param_gather = True
    with pytest.raises(InputError, match="training.fp8_param_gather: needs precision FP8"):
        validate_plan(plan, catalog, "p.pbtxt")
    with pytest.raises(ValueError, match="fp8_param_gather needs"):
        Stack(precision="bf16", zero_stage=1, fp8_param_gather=True)


def test_fp8_gather_plans_agree_with_the_simulator():
    plans = [zero1(GATHER, overlap, zero) for zero, overlap in ((1, False), (1, True), (3, False))]
    programs, reference = _catalogue([], max_gpus=32, plans=plans,
                                     options_needed={"fp8", "zero1", "zero1-overlap", "fsdp",
                                                     "fp8-gather"})
    _check(programs, reference)
