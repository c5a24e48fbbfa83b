"""A software profile's factors in the workload: compute-bound kernels take ``1 / factor``
times as long, memory-bound ones do not change, and the reference profile changes no
number (the same record, bit for bit, as a plan that names no profile)."""

from __future__ import annotations

import pytest

from xsweep.outcome import simulate_plan
from xsweep.pipeline import prepare
from xsweep.plan.stack import Stack
from xsweep.plan.workload import gemm_efficiency, stage_cost
from xsweep.spec import load_plan
from xsweep.spec.catalog import SoftwareSpec, load_catalog

LAYER = (2, 2)  # one block in the middle: no embedding, no LM head


def profile(gemm: float = 1.0, attention: float = 1.0) -> SoftwareSpec:
    return SoftwareSpec(name="test", gemm_factor=gemm, attention_factor=attention)


def block_forward_s(catalog, gpu: str, software: SoftwareSpec, **stack) -> float:
    model, spec = catalog.model("llama2-7b"), catalog.gpu(gpu)
    return stage_cost(model, spec, 1, 1, *LAYER,
                      stack=Stack(software=software, **stack)).forward_time_s


def test_the_gemm_time_of_a_block_grows_by_the_inverse_of_the_factor(catalog):
    """Llama-2-7B's four block GEMMs at micro-batch 1 (4,096 tokens) are compute bound, so
    the forward pass grows by exactly ``(1/f - 1)`` times their time at the GPU's rate,
    written out here: ``2 t k n / (peak x gemm_efficiency(t, n))`` each."""
    model, a100 = catalog.model("llama2-7b"), catalog.gpu("A100-80GB")
    h, f, t = model.hidden_size, model.ffn_hidden_size, model.seq_length
    shapes = ((h, 3 * h), (h, h), (h, 2 * f), (f, h))  # QKV, projection, gate+up, down
    gemm_s = sum(2.0 * t * k * n / (a100.peak_flops * gemm_efficiency(a100, t, n))
                 for k, n in shapes)
    reference = block_forward_s(catalog, "A100-80GB", profile())
    for factor in (0.9, 0.5, 0.25):
        slower = block_forward_s(catalog, "A100-80GB", profile(gemm=factor))
        assert slower - reference == pytest.approx(gemm_s * (1 / factor - 1), rel=1e-9)


def test_compute_and_memory_parts_separate_exactly(catalog):
    """With both factors, a block's time is ``M + G / g + A / a``: the memory-bound part M
    does not move, the GEMMs G and the fused attention A scale apart."""
    base = block_forward_s(catalog, "H100-SXM", profile())
    gemm_s = block_forward_s(catalog, "H100-SXM", profile(gemm=0.5)) - base
    attention_s = block_forward_s(catalog, "H100-SXM", profile(attention=0.5)) - base
    memory_s = base - gemm_s - attention_s
    assert gemm_s > 0 and attention_s > 0 and memory_s > 0
    for g, a in ((0.3, 0.7), (0.8, 0.2), (1.0, 0.6)):
        both = block_forward_s(catalog, "H100-SXM", profile(gemm=g, attention=a))
        assert both == pytest.approx(memory_s + gemm_s / g + attention_s / a, rel=1e-9)


def test_a_memory_bound_pass_is_untouched(catalog):
    """Without flash attention the softmax over the scores is a memory-bound pass; a profile
    that slows only attention kernels has nothing fused to slow there."""
    plain = {"flash_attention": False}
    assert (block_forward_s(catalog, "A100-80GB", profile(attention=0.5), **plain)
            == block_forward_s(catalog, "A100-80GB", profile(), **plain))


@pytest.mark.parametrize("gpu", ["H100-SXM", "B200"])
def test_the_gemm_factor_scales_the_fp8_fraction_once(catalog, gpu):
    """H100 has its own FP8 fraction, B200 falls back to its BF16 one: either way the FP8
    GEMMs run at ``factor`` times the reference fraction, not its square."""
    spec = catalog.gpu(gpu)
    slowed = profile(gemm=0.6).applied_to(spec)
    assert slowed.fp8_gemm_fraction == pytest.approx(0.6 * spec.fp8_gemm_fraction, rel=1e-12)
    assert slowed.gemm_efficiency == pytest.approx(0.6 * spec.gemm_efficiency, rel=1e-12)
    assert slowed.hbm_efficiency == spec.hbm_efficiency


def test_the_reference_profile_is_the_same_record_as_no_profile(catalog, spaces_dir):
    plan = load_plan(spaces_dir / "published" / "mpt-7b-a100x8.pbtxt", catalog)
    assert not plan.training.software
    unnamed = simulate_plan(prepare(plan, catalog))[1]
    plan.training.software = "reference"
    named = simulate_plan(prepare(plan, catalog))[1]
    assert named == unnamed
    assert named["software"] == {"name": "reference", "gemm_factor": 1.0,
                                 "attention_factor": 1.0}


def test_a_slower_profile_slows_the_simulated_iteration(catalog, spaces_dir, tmp_path):
    """Through a user catalog, as a user would add a profile: MPT-7B on 8 A100s is compute
    bound, so a GEMM factor of 0.8 costs it most of the 25% a pure GEMM load would lose,
    and no more."""
    mine = tmp_path / "slow.yaml"
    mine.write_text("software:\n  slow: {gemm_factor: 0.8}\n")
    slow_catalog = load_catalog([mine])
    plan = load_plan(spaces_dir / "published" / "mpt-7b-a100x8.pbtxt", catalog)
    base = simulate_plan(prepare(plan, slow_catalog))[1]
    plan.training.software = "slow"
    slow = simulate_plan(prepare(plan, slow_catalog))[1]
    ratio = slow["iteration_time_s"] / base["iteration_time_s"]
    assert 1.15 < ratio < 1.25
    assert slow["software"]["name"] == "slow" and slow["software"]["gemm_factor"] == 0.8
    assert slow["memory_per_gpu_gib"] == base["memory_per_gpu_gib"]
