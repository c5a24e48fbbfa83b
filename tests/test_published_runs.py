"""The model against real hardware: Megatron-LM's GPT runs, a held-out FSDP run, NeMo's
FP8 runs and Megatron-DeepSpeed's MT-NLG runs, each under the software profile its plan
names (``xsweep/spec/data/software.yaml``).

Narayanan et al. (2021), Table 1: GPT models of 1.7B-39.1B parameters on 32-512
A100-80GB GPUs reached 135-142 teraFLOP/s per GPU. The plans (``spaces/megatron``)
state every assumption, each with the data parallelism it ran; these runs set the one
catalog number without a published measurement, the A100's sustained GEMM fraction
(``gpus.yaml`` [CAL]), so they check that calibration: the achieved throughput, counted
as the paper counts it, within 7% of the published figure. The 512-GPU run is the slow
one. MPT-7B on 8 A100s with FSDP (llm-foundry, ``spaces/published``) played no part in
any number: it is the held-out check, tokens per second per GPU within 7%.
"""

from __future__ import annotations

import re

import pytest

from xsweep.plan.analysis import analyze
from xsweep.plan.lower import lower
from xsweep.plan.workload import iteration_model_flops
from xsweep.sim import simulate, summary
from xsweep.spec import load_plan

TOLERANCE = 0.07
PUBLISHED = re.compile(r"(\d+(?:\.\d+)?) achieved\s*\n?#?\s*teraFLOP/s per GPU")
MPT_7B_A100_TOKENS_PER_S_PER_GPU = 4641  # published.md: mosaicml/llm-foundry benchmarking


@pytest.mark.parametrize("run", [
    "gpt-1.7b", "gpt-3.6b", "gpt-7.5b", "gpt-18.4b",
    pytest.param("gpt-39.1b", marks=pytest.mark.slow),
])
def test_megatron_gpt_runs_within_seven_percent(catalog, spaces_dir, run):
    """Under the megatron-lm-2021 profile their plans name: four runs set the A100's GEMM
    rate, gpt-18.4b is held out (the fit without it gives the same rate); one tolerance
    for all five, as before the profile named them."""
    path = spaces_dir / "megatron" / f"{run}.pbtxt"
    achieved, published, a = _achieved_tflops(catalog, path)
    assert a.stack.dp_overlap == (run != "gpt-39.1b")  # PyTorch DDP vs Megatron's own
    profile = catalog.software_profile("megatron-lm-2021")
    assert a.stack.software is profile and f"megatron/{run}" in (*profile.calibrated_on,
                                                                 *profile.held_out)
    assert achieved == pytest.approx(published, rel=TOLERANCE)
    assert all(g.fits for g in a.groups)  # the runs fit their 80 GiB GPUs


#: The deeper rows of the same table (76.1B-1T on 1,024-3,072 GPUs; 4-64 stages, all but
#: the 1T interleaved): no number was set with them. Held out, within 10% as the Hopper
#: rows below; each is a large program (0.4-10 million tasks and flows), so slow.
MEGATRON_HELD_OUT = ("gpt-76.1b", "gpt-145.6b", "gpt-310.1b", "gpt-529.6b", "gpt-1008b")


@pytest.mark.slow
@pytest.mark.parametrize("run", MEGATRON_HELD_OUT)
def test_deep_megatron_pipelines_held_out_within_ten_percent(catalog, spaces_dir, run):
    path = spaces_dir / "megatron" / f"{run}.pbtxt"
    assert path.read_text(encoding="utf-8").startswith("# Held-out run")
    achieved, published, a = _achieved_tflops(catalog, path)  # the default limits take it
    assert (a.stack.virtual_pipeline_stages > 1) == (run != "gpt-1008b")
    profile = catalog.software_profile("megatron-lm-2021")
    assert a.stack.software is profile and f"megatron/{run}" in profile.held_out
    assert achieved == pytest.approx(published, rel=0.10)
    assert all(g.fits for g in a.groups)


def test_held_out_fsdp_run_within_seven_percent(catalog, spaces_dir):
    a = analyze(load_plan(spaces_dir / "published" / "mpt-7b-a100x8.pbtxt", catalog), catalog)
    assert a.fsdp
    program = lower(a)
    m = summary(program, simulate(program))
    per_gpu = m["tokens_per_s"] / sum(len(g.ranks) for g in a.groups)
    assert per_gpu == pytest.approx(MPT_7B_A100_TOKENS_PER_S_PER_GPU, rel=TOLERANCE)
    assert all(g.fits for g in a.groups)  # FSDP shards what ZeRO-1 could not fit


def _achieved_tflops(catalog, path) -> tuple[float, float, object]:
    """xsweep's achieved teraFLOP/s per GPU (Megatron's count, recompute FLOPs included)
    of a run whose header states the published one, and the analysis."""
    published = float(PUBLISHED.search(path.read_text(encoding="utf-8")).group(1))
    a = analyze(load_plan(path, catalog), catalog)
    time_s = simulate(lower(a)).iteration_time_s
    gpus = sum(len(g.ranks) for g in a.groups)
    flops = iteration_model_flops(a.model, a.global_batch_size, recompute=True)
    return flops / (time_s * gpus * 1e12), published, a


#: Megatron-Turing NLG 530B with Megatron-DeepSpeed of 2021 (spaces/deepspeed): two runs
#: set the deepspeed-2021 profile's GEMM factor (within 1% of both), the third is held out.
DEEPSPEED_TOLERANCE = {"mt-nlg-530b-a100x2240": 0.02, "mt-nlg-530b-a100x2800": 0.02,
                       "mt-nlg-530b-a100x3360": 0.07}


@pytest.mark.slow
@pytest.mark.parametrize("run", sorted(DEEPSPEED_TOLERANCE))
def test_deepspeed_2021_runs_within_their_tolerance(catalog, spaces_dir, run):
    """Each run under the profile its plan names: the calibration runs within 2%, the
    held-out run within 7%; at the A100's rate as Megatron-LM 2021 set it (factor 1) the
    first run comes out more than 10% fast, the stack's cost that the profile states."""
    profile = catalog.software_profile("deepspeed-2021")
    role = profile.calibrated_on if DEEPSPEED_TOLERANCE[run] < 0.05 else profile.held_out
    assert f"deepspeed/{run}" in role
    path = spaces_dir / "deepspeed" / f"{run}.pbtxt"
    achieved, published, a = _achieved_tflops(catalog, path)
    assert a.stack.software is profile and profile.gemm_factor < 1
    assert achieved == pytest.approx(published, rel=DEEPSPEED_TOLERANCE[run])
    assert all(g.fits for g in a.groups)
    if run != "mt-nlg-530b-a100x2240":
        return
    plan = load_plan(path, catalog)
    plan.training.software = "megatron-lm-2021"  # the same plan at factor 1
    a = analyze(plan, catalog)
    unprofiled = iteration_model_flops(a.model, a.global_batch_size, recompute=True) / (
        simulate(lower(a)).iteration_time_s * sum(g.tp for g in a.groups) * 1e12)
    assert unprofiled > 1.1 * published


#: NeMo 24.07 on DGX-H100 in FP8 (published.md): tokens/s per GPU. The TP-1 rows set the
#: Hopper FP8 GEMM fraction (gpus.yaml [CAL-FP8]); the TP-4 rows are held out.
NEMO_CALIBRATION = {"nemo-llama2-7b-h100x8": 16847, "nemo-llama2-13b-h100x16": 8646}
NEMO_HELD_OUT = {"nemo-llama2-70b-h100x64": 1707, "nemo-gpt3-175b-h100x512": 782}


def _nemo_tokens_per_gpu(catalog, spaces_dir, name: str) -> tuple[float, dict]:
    a = analyze(load_plan(spaces_dir / "published" / f"{name}.pbtxt", catalog), catalog)
    assert a.stack.precision == "fp8" and all(g.fits for g in a.groups)
    assert a.stack.software is catalog.software_profile("nemo-24.07")
    program = lower(a)
    m = summary(program, simulate(program))
    return m["tokens_per_s"] / sum(len(g.ranks) for g in a.groups), m


@pytest.mark.parametrize("name", sorted(NEMO_CALIBRATION))
def test_nemo_fp8_calibration_rows_within_three_percent(catalog, spaces_dir, name):
    per_gpu, m = _nemo_tokens_per_gpu(catalog, spaces_dir, name)
    assert m["exposed_tp_s_max"] == 0.0  # TP 1: nothing but the GEMM rate to calibrate
    assert per_gpu == pytest.approx(NEMO_CALIBRATION[name], rel=0.03)


@pytest.mark.parametrize("name", [
    "nemo-llama2-70b-h100x64",
    pytest.param("nemo-gpt3-175b-h100x512", marks=pytest.mark.slow),
])
def test_nemo_fp8_held_out_rows_within_ten_percent(catalog, spaces_dir, name):
    """Held out: no number was set with them; their TP communication overlaps the GEMMs
    as NeMo ran it, and blocking it instead would lose them 8-17% (docs/validation.md)."""
    per_gpu, m = _nemo_tokens_per_gpu(catalog, spaces_dir, name)
    assert per_gpu == pytest.approx(NEMO_HELD_OUT[name], rel=0.10)
    plan = load_plan(spaces_dir / "published" / f"{name}.pbtxt", catalog)
    assert plan.training.tp_comm_overlap
    plan.training.tp_comm_overlap = False
    a = analyze(plan, catalog)
    program = lower(a)
    blocking = summary(program, simulate(program))
    assert blocking["iteration_time_s"] > m["iteration_time_s"] + 0.5 * blocking[
        "exposed_tp_s_max"] > m["iteration_time_s"]


#: NeMo 24.07's context-parallel rows (published.md; Llama-3, CP 2): held out, tokens/s
#: per GPU. Measured before any test was written: +12.6% (Llama-3-8B, TP 1) and +2.3%
#: (Llama-3-70B, TP 4 PP 4 VP 5), docs/validation.md. The tolerance guards that record
#: against drifting; it was set after the measurement and is no evidence of accuracy.
NEMO_CP_HELD_OUT = {"nemo-llama3-8b-h100x8": 12036, "nemo-llama3-70b-h100x64": 1533}
CP_TOLERANCE = 0.15


@pytest.mark.parametrize("name", sorted(NEMO_CP_HELD_OUT))
def test_nemo_fp8_context_parallel_rows_within_fifteen_percent(catalog, spaces_dir, name):
    per_gpu, m = _nemo_tokens_per_gpu(catalog, spaces_dir, name)
    assert per_gpu == pytest.approx(NEMO_CP_HELD_OUT[name], rel=CP_TOLERANCE)
    a = analyze(load_plan(spaces_dir / "published" / f"{name}.pbtxt", catalog), catalog)
    assert {g.cp for g in a.groups} == {2}
    assert a.model.seq_length == 8192
    # the gradients reduce over DP x CP: every rank of the plan in the DP rings
    assert sorted(r for g in a.dp_groups[:1] for ring in g.rings for r in ring.ranks) == sorted(
        r for g in a.groups if g.first_layer == 1 for r in g.ranks)
