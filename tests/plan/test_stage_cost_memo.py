"""The shared memo of stage costs: keyed by the part of the stack a stage's cost reads, so
it must give what :func:`stage_cost` gives for every option of the stack."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from xsweep.plan.stack import RECOMPUTE, ZERO_STAGES, Stack
from xsweep.plan.workload import cached_stage_cost, compute_stack, stage_cost
from xsweep.spec.catalog import load_catalog

CATALOG = load_catalog()
MODELS = ("gpt3-175b", "llama3-8b", "mixtral-8x7b", "deepseek-v3")


@st.composite
def stages(draw):
    """A model, GPU, TP degree, micro-batch size, layer range, CP degree and a stack with
    every option drawn (expert parallelism only for models with experts)."""
    model = CATALOG.model(draw(st.sampled_from(MODELS)))
    fp8 = draw(st.booleans())
    gpus = sorted(name for name in CATALOG.gpus if not fp8 or CATALOG.gpu(name).peak_fp8_tflops)
    gpu = CATALOG.gpu(draw(st.sampled_from(gpus)))
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    first = draw(st.integers(1, model.num_layers))
    last = draw(st.integers(first, min(model.num_layers, first + 5)))
    sp = draw(st.booleans())
    zero = draw(st.sampled_from(ZERO_STAGES))
    stack = Stack(
        sequence_parallel=sp, flash_attention=draw(st.booleans()),
        recompute=draw(st.sampled_from(RECOMPUTE)), zero_stage=zero,
        virtual_pipeline_stages=draw(st.sampled_from([1, 2, 4])),
        dp_overlap=draw(st.booleans()), dp_bucket_params=draw(st.sampled_from([0, 10**7])),
        precision="fp8" if fp8 else "bf16",
        tp_comm_overlap=sp and draw(st.booleans()),
        expert_parallel=draw(st.sampled_from([1, 2, 4, 8])) if model.is_moe else 1,
        moe_imbalance=draw(st.sampled_from([1.0, 1.3])),
        pp_p2p_overlap=draw(st.booleans()),
        fp8_param_gather=fp8 and zero > 0 and draw(st.booleans()),
        moe_dispatcher=draw(st.sampled_from(["alltoall", "deepep"])),
        moe_fp8_dispatch=fp8 and draw(st.booleans()),
        software=CATALOG.software_profile(draw(st.sampled_from(["reference", "deepspeed-2021"]))))
    return model, gpu, tp, draw(st.sampled_from([1, 2, 4])), first, last, stack, \
        draw(st.sampled_from([1, 2]))


@settings(max_examples=150, deadline=None)
@given(stages())
def test_a_stage_costs_the_same_under_the_part_of_the_stack_it_reads(case):
    model, gpu, tp, b, first, last, stack, cp = case
    whole = stage_cost(model, gpu, tp, b, first, last, stack=stack, cp=cp)
    assert stage_cost(model, gpu, tp, b, first, last, stack=compute_stack(stack), cp=cp) == whole
    assert cached_stage_cost(model, gpu, tp, b, first, last, stack, None, cp) == whole


#: The options a stage's cost reads; every other option of the stack is left out of the
#: memo's key (set to its default there).
READ = {"sequence_parallel", "flash_attention", "recompute", "precision", "expert_parallel",
        "moe_imbalance", "moe_fp8_dispatch", "software"}
#: A value other than the default for each option left out.
OTHER = {"zero_stage": 1, "virtual_pipeline_stages": 2, "dp_overlap": True,
         "dp_bucket_params": 10**7, "tp_comm_overlap": True, "pp_p2p_overlap": False,
         "fp8_param_gather": True, "moe_dispatcher": "deepep"}


def test_the_key_leaves_out_exactly_the_options_a_stage_cost_does_not_read():
    """A new option of the stack must be classed here: read (kept in the key) or not."""
    assert {f.name for f in dataclasses.fields(Stack)} == READ | set(OTHER)
    fp8 = Stack(precision="fp8")
    assert compute_stack(dataclasses.replace(fp8, **OTHER)) == compute_stack(fp8) == fp8


def test_each_option_read_changes_the_key_and_a_stage_cost():
    moe = CATALOG.model("mixtral-8x7b")
    gpu = CATALOG.gpu("H100-SXM")
    base = Stack(precision="fp8", expert_parallel=2, moe_fp8_dispatch=True)
    pairs = {name: (base, dataclasses.replace(base, **{name: value})) for name, value in {
        "sequence_parallel": False, "flash_attention": False, "recompute": "full",
        "expert_parallel": 4, "moe_imbalance": 1.5, "moe_fp8_dispatch": False,
        "software": CATALOG.software_profile("deepspeed-2021")}.items()}
    pairs["precision"] = (Stack(expert_parallel=2), Stack(expert_parallel=2, precision="fp8"))
    assert set(pairs) == READ
    for name, (one, other) in pairs.items():
        assert compute_stack(one) != compute_stack(other), name
        assert (stage_cost(moe, gpu, 4, 1, 1, 2, stack=one)
                != stage_cost(moe, gpu, 4, 1, 1, 2, stack=other)), name
