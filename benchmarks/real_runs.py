"""xsweep against published real runs.

1. Calibration: Megatron-LM's GPT runs (Narayanan et al., 2021, Table 1: 1.7B-39.1B on
   32-512 A100s; ``spaces/megatron``), each with the data parallelism it ran (PyTorch
   DDP's overlapped buckets for 1.7B-18.4B, Megatron's own after the backward pass for
   39.1B). Throughput is counted as the paper counts it (its eq. 3: FLOPs of forward,
   backward and the recompute forward), so it is the iteration's model FLOPs with
   recompute over time and GPUs. Then the sweep that sets the A100's sustained GEMM
   fraction (the one catalog number without a published measurement): the largest
   error over the five runs for each candidate. Then the table's deeper rows (76.1B-1T
   on 1,024-3,072 A100s, interleaved pipelines of 4-35 stages and the 64-stage 1T),
   held out, with the schedule's own idle share beside the simulated bubble.
2. Held out: the runs of ``published.md`` in BF16 with FSDP (``spaces/published``).
3. Hopper in FP8: NeMo 24.07's DGX-H100 rows; the two TP-1 rows set the Hopper FP8 GEMM
   fraction (the sweep is printed), the TP-4 rows and the two context-parallel rows
   (Llama-3, CP 2) are held out. The uncatalogued H100 variant is not expressible.
4. Megatron-DeepSpeed of 2021: Megatron-Turing NLG 530B on 2,240-3,360 A100s
   (``spaces/deepspeed``); two runs set the deepspeed-2021 software profile's GEMM factor,
   the third is held out. ``--deepspeed-sweep`` adds the sweep that set it (minutes: each
   run is a 400,000-task program).
5. Software profiles (``xsweep/spec/data/software.yaml``): each profile's calibration
   runs and held-out runs, with their errors as the catalog stands.

``--p2p-sensitivity`` prints, instead of all that, one table: every run with more than one
pipeline stage simulated with its sends beside the compute (``training.pp_p2p_overlap``
cleared) and again with each stage waiting for its own sends (the field false), both set on
a copy of the plan in memory (the file is only read), beside what the stack that ran it did
and what the shipped plan says (303 s on 2 cores).

Every plan file states its sources and assumptions. Run:
``python benchmarks/real_runs.py [--deepspeed-sweep | --p2p-sensitivity]`` (minutes on 2
cores).
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from pathlib import Path

from xsweep.plan.analysis import analyze
from xsweep.plan.lower import lower
from xsweep.plan.workload import iteration_model_flops
from xsweep.sim import simulate, summary
from xsweep.spec import load_catalog, load_plan, validate_plan

SPACES = Path(__file__).resolve().parent.parent / "spaces"
MEGATRON_DIR = SPACES / "megatron"
RUNS = ("gpt-1.7b", "gpt-3.6b", "gpt-7.5b", "gpt-18.4b", "gpt-39.1b")
#: The deeper rows of the same table (interleaved pipelines of 4-64 stages), held out.
HELD_OUT = ("gpt-76.1b", "gpt-145.6b", "gpt-310.1b", "gpt-529.6b", "gpt-1008b")
PUBLISHED = re.compile(r"(\d+(?:\.\d+)?) achieved\s*\n?#?\s*teraFLOP/s per GPU")
#: Candidate sustained GEMM fractions of the A100 (burst: 267.9 / 312 = 0.859).
A100_CANDIDATES = (0.64, 0.66, 0.67, 0.68, 0.69, 0.70, 0.729)


def published_tflops(path: Path) -> float:
    """The published figure, read from the plan file's header (its stated source)."""
    found = PUBLISHED.search(path.read_text(encoding="utf-8"))
    if found is None:
        raise ValueError(f"{path}: no published teraFLOP/s in the header")
    return float(found.group(1))


#: How a run's stages treat their pipeline sends: as the plan file says, or set on a copy.
SENDS = ("shipped", "overlapped", "waited")


def sends_plan(path: Path, catalog, overlapped: bool):
    """The plan at ``path`` with its stages' pipeline sends overlapped (``training.
    pp_p2p_overlap`` cleared: unset means overlapped) or waited for (the field false),
    validated against ``catalog``: a copy in memory, the file only read."""
    shipped = load_plan(path, catalog)
    plan = type(shipped)()
    plan.CopyFrom(shipped)
    if overlapped:
        plan.training.ClearField("pp_p2p_overlap")
    else:
        plan.training.pp_p2p_overlap = False
    return validate_plan(plan, catalog, str(path))


def blocking_sends_plan(path: Path, catalog):
    """The plan at ``path`` with every stage waiting for its own pipeline sends."""
    return sends_plan(path, catalog, overlapped=False)


def run_plan(path: Path, catalog, sends: str = "shipped"):
    """The plan at ``path`` as shipped, or with its pipeline sends ``overlapped`` or
    ``waited`` for whatever the file says."""
    if sends == "shipped":
        return load_plan(path, catalog)
    return sends_plan(path, catalog, overlapped=sends == "overlapped")


_CHECKED: dict = {}  # (catalog id, path, sends) -> check(): slow runs simulated once


def check(catalog, path: Path, sends: str = "shipped") -> dict:
    """A run whose header gives its achieved teraFLOP/s per GPU (Megatron's count), as the
    catalog stands (``sends``: its pipeline sends as shipped, overlapped or waited for)."""
    key = (id(catalog), path, sends)
    if key not in _CHECKED:  # the catalog kept: its id stays
        _CHECKED[key] = (catalog, _check(catalog, path, sends))
    return _CHECKED[key][1]


def _check(catalog, path: Path, sends: str) -> dict:
    a = analyze(run_plan(path, catalog, sends), catalog)
    program = lower(a)
    m = summary(program, simulate(program))
    gpus = sum(len(g.ranks) for g in a.groups)
    flops = iteration_model_flops(a.model, a.global_batch_size, recompute=True)
    return {
        "gpus": gpus, "iteration_s": m["iteration_time_s"],
        "tflops": flops / m["iteration_time_s"] / gpus / 1e12,
        "published": published_tflops(path), "compute_s": m["busy_s_max"],
        "tp_s": m["exposed_tp_s_max"], "bubble_s": m["bubble_s_max"],
        "dp_s": m["exposed_dp_s_max"], "memory_gib": max(g.memory.total_gib for g in a.groups),
        "overlap": a.stack.dp_overlap, "software": a.stack.software.name,
        # the interleaved 1F1B schedule's own idle share of the compute, (p - 1) / (v m)
        "schedule_share": max(g.stage for g in a.groups) / (
            a.stack.virtual_pipeline_stages * a.groups[0].num_micro_batches),
    }


def candidate_catalogs(field: str, entries: tuple[str, ...], fractions: tuple[float, ...],
                       section: str = "gpus"):
    """(fraction, the shipped catalog with ``field`` of ``entries`` of ``section`` set to
    it) for each candidate, through a user catalog file as a user would override it."""
    with tempfile.TemporaryDirectory() as tmp:
        for fraction in fractions:
            mine = Path(tmp) / f"{field}-{fraction}.yaml"
            mine.write_text(f"{section}:\n" + "".join(f"  {entry}: {{{field}: {fraction}}}\n"
                                                      for entry in entries), encoding="utf-8")
            yield fraction, load_catalog([mine])


def calibration_sweep() -> None:
    """The largest error over the Megatron runs that calibrate the megatron-lm-2021 profile
    for each candidate A100 GEMM fraction (the held-out run shown beside it, not used)."""
    profile = load_catalog().software_profile("megatron-lm-2021")
    print("A100 sustained GEMM fraction: largest error over megatron-lm-2021's calibration "
          "runs (the held-out one of the five after |)")
    for fraction, catalog in candidate_catalogs("gemm_efficiency", ("A100-40GB", "A100-80GB"),
                                                A100_CANDIDATES):
        errors = {}
        for run in RUNS:
            r = check(catalog, MEGATRON_DIR / f"{run}.pbtxt")
            errors[f"megatron/{run}"] = r["tflops"] / r["published"] - 1
        fit = [errors[run] for run in profile.calibrated_on]
        held = [errors[run] for run in profile.held_out if run in errors]  # of these five
        print(f"  {fraction:<6} {max(fit, key=abs):+.1%}   ("
              + ", ".join(f"{e:+.1%}" for e in fit) + " | "
              + ", ".join(f"{e:+.1%}" for e in held) + ")")


# published.md: tokens/s per GPU (None: not published) and MFU as the project reports it.
PUBLISHED_RUNS = {
    "mpt-7b-a100x8": (4641, 0.6423),  # mosaicml/llm-foundry, scripts/train/benchmarking
    "mpt-7b-h100x8": (10643, 0.4644),  # mosaicml/llm-foundry, scripts/train/benchmarking
    "llama3-8b-a100x64": (None, 0.582),  # pytorch/torchtitan, docs/performance.md
}


def published(catalog) -> None:
    print(f"\n{'held out (FSDP)':<20}{'iteration s':>12}{'exposed DP s':>13}{'bubble s':>9}"
          f"{'GiB/GPU':>9}{'tokens/s/GPU':>14}{'published':>11}{'error':>8}{'MFU':>7}"
          f"{'published':>10}")
    for name, (tokens, mfu) in PUBLISHED_RUNS.items():
        a = analyze(load_plan(SPACES / "published" / f"{name}.pbtxt", catalog), catalog)
        program = lower(a)
        m = summary(program, simulate(program))
        per_gpu = m["tokens_per_s"] / sum(len(g.ranks) for g in a.groups)
        fits = "" if all(g.fits for g in a.groups) else "*"
        error = f"{per_gpu / tokens - 1:+.1%}" if tokens else "-"
        print(f"{name:<20}{m['iteration_time_s']:>12.3f}{m['exposed_dp_s_max']:>13.3f}"
              f"{m['bubble_s_max']:>9.3f}{max(g.memory.total_gib for g in a.groups):>8.1f}"
              f"{fits:1}{per_gpu:>14,.0f}{(f'{tokens:,}' if tokens else '-'):>11}{error:>8}"
              f"{m['mfu']:>7.1%}{mfu:>10.1%}")


# NeMo 24.07 on DGX-H100, FP8 (published.md): tokens/s per GPU, and whether the run sets
# the Hopper FP8 GEMM fraction (calibration) or is held out (the context-parallel rows
# among them).
NEMO_RUNS = {
    "nemo-llama2-7b-h100x8": (16847, True),
    "nemo-llama2-13b-h100x16": (8646, True),
    "nemo-llama2-70b-h100x64": (1707, False),
    "nemo-gpt3-175b-h100x512": (782, False),
    "nemo-llama3-8b-h100x8": (12036, False),
    "nemo-llama3-70b-h100x64": (1533, False),
}
#: Candidate sustained FP8 GEMM fractions of Hopper (the BF16 fraction: 0.711).
FP8_CANDIDATES = (0.43, 0.45, 0.47, 0.49, 0.51, 0.55, 0.711)


def tokens_per_gpu(catalog, name: str, sends: str = "shipped") -> tuple[float, dict, object]:
    a = analyze(run_plan(SPACES / "published" / f"{name}.pbtxt", catalog, sends), catalog)
    program = lower(a)
    m = summary(program, simulate(program))
    return m["tokens_per_s"] / sum(len(g.ranks) for g in a.groups), m, a


def hopper_fp8(catalog) -> None:
    """The FP8 runs as the catalog stands, then the sweep that set the Hopper FP8 GEMM
    fraction on the calibration rows (the held-out rows shown beside it, not used)."""
    print(f"\n{'NeMo 24.07, FP8':<25}{'role':>12}{'iteration s':>12}{'compute s':>10}"
          f"{'TP s':>7}{'bubble s':>9}{'GiB/GPU':>8}{'tokens/s/GPU':>13}{'published':>10}"
          f"{'error':>8}")
    for name, (tokens, calibration) in NEMO_RUNS.items():
        per_gpu, m, a = tokens_per_gpu(catalog, name)
        role = "calibration" if calibration else "held out"
        print(f"{name:<25}{role:>12}{m['iteration_time_s']:>12.3f}{m['busy_s_max']:>10.3f}"
              f"{m['exposed_tp_s_max']:>7.3f}{m['bubble_s_max']:>9.3f}"
              f"{max(g.memory.total_gib for g in a.groups):>8.1f}{per_gpu:>13,.0f}"
              f"{tokens:>10,}{per_gpu / tokens - 1:>+8.1%}")
    print("\nHopper sustained FP8 GEMM fraction: largest error over the calibration rows "
          "(held-out rows after |)")
    for fraction, candidate in candidate_catalogs("fp8_gemm_efficiency", ("H100-SXM", "H200"),
                                                  FP8_CANDIDATES):
        errors = {name: tokens_per_gpu(candidate, name)[0] / tokens - 1
                  for name, (tokens, _) in NEMO_RUNS.items()}
        fit = [e for name, e in errors.items() if NEMO_RUNS[name][1]]
        held = [e for name, e in errors.items() if not NEMO_RUNS[name][1]]
        print(f"  {fraction:<6} {max(fit, key=abs):+.1%}   ("
              + ", ".join(f"{e:+.1%}" for e in fit) + " | "
              + ", ".join(f"{e:+.1%}" for e in held) + ")")


DEEPSPEED_DIR = SPACES / "deepspeed"
#: Candidate GEMM factors of the deepspeed-2021 profile (1: the A100's rate as Megatron-LM
#: 2021's runs set it).
DEEPSPEED_CANDIDATES = (0.82, 0.84, 0.85, 0.86, 0.88, 1.0)


def deepspeed_2021(catalog, sweep: bool) -> None:
    """Megatron-Turing NLG 530B's runs (Megatron-DeepSpeed of 2021) as the catalog stands,
    then, with ``sweep``, the sweep that sets the deepspeed-2021 profile's GEMM factor on
    its calibration runs (the held-out run beside it, not used)."""
    profile = catalog.software_profile("deepspeed-2021")
    print(f"\n{'DeepSpeed 2021':<24}{'role':>12}{'GPUs':>6}{'iteration s':>12}{'compute s':>10}"
          f"{'TP s':>7}{'bubble s':>9}{'DP s':>7}{'GiB/GPU':>8}{'TFLOP/s':>8}{'published':>10}"
          f"{'error':>8}")
    for run in (*profile.calibrated_on, *profile.held_out):
        r = check(catalog, SPACES / f"{run}.pbtxt")
        role = "calibration" if run in profile.calibrated_on else "held out"
        print(f"{run.split('/')[1]:<24}{role:>12}{r['gpus']:>6}{r['iteration_s']:>12.3f}"
              f"{r['compute_s']:>10.3f}{r['tp_s']:>7.3f}{r['bubble_s']:>9.3f}{r['dp_s']:>7.3f}"
              f"{r['memory_gib']:>8.1f}{r['tflops']:>8.1f}{r['published']:>10.0f}"
              f"{r['tflops'] / r['published'] - 1:>+8.1%}")
    if not sweep:
        return
    print("\ndeepspeed-2021 GEMM factor: largest error over its calibration runs "
          "(held-out run after |)")
    for factor, candidate in candidate_catalogs("gemm_factor", ("deepspeed-2021",),
                                                DEEPSPEED_CANDIDATES, section="software"):
        errors = {}
        for run in (*profile.calibrated_on, *profile.held_out):
            r = check(candidate, SPACES / f"{run}.pbtxt")
            errors[run] = r["tflops"] / r["published"] - 1
        fit = [errors[run] for run in profile.calibrated_on]
        held = [errors[run] for run in profile.held_out]
        print(f"  {factor:<6} {max(fit, key=abs):+.1%}   ("
              + ", ".join(f"{e:+.1%}" for e in fit) + " | "
              + ", ".join(f"{e:+.1%}" for e in held) + ")")


def run_error(catalog, run: str, sends: str = "shipped") -> tuple[str, float, float, str]:
    """One real run (``megatron/<name>`` or ``published/<name>``, a plan under ``spaces/``)
    as the catalog stands (``sends``: its pipeline sends as shipped, overlapped or waited for):
    what is compared, xsweep's figure, the published one, and the software profile its plan
    names."""
    folder, name = run.split("/")
    if folder in ("megatron", "deepspeed"):
        r = check(catalog, SPACES / f"{run}.pbtxt", sends)
        return "TFLOP/s/GPU", r["tflops"], r["published"], r["software"]
    per_gpu, _, a = tokens_per_gpu(catalog, name, sends)
    published_figure = {**{k: v[0] for k, v in NEMO_RUNS.items()},
                        **{k: v[0] for k, v in PUBLISHED_RUNS.items()}}[name]
    return "tokens/s/GPU", per_gpu, published_figure, a.stack.software.name


def software_profiles(catalog) -> None:
    """Each software profile's runs: those that set its factors and those held out."""
    print(f"\n{'software profile':<18}{'factors':>18}  {'run':<36}{'role':>12}{'compared':>14}"
          f"{'xsweep':>10}{'published':>11}{'error':>8}")
    for profile in catalog.software.values():
        factors = f"GEMM {profile.gemm_factor:g}, attn {profile.attention_factor:g}"
        runs = ([(run, "calibration") for run in profile.calibrated_on]
                + [(run, "held out") for run in profile.held_out])
        if not runs:
            print(f"{profile.name:<18}{factors:>18}  (no runs of its own)")
        for run, role in runs:
            what, figure, published_figure, named = run_error(catalog, run)
            mark = "" if named == profile.name else f"  (plan names {named})"
            print(f"{profile.name:<18}{factors:>18}  {run:<36}{role:>12}{what:>14}"
                  f"{figure:>10,.1f}{published_figure:>11,}{figure / published_figure - 1:>+8.1%}"
                  f"{mark}")
        if runs and not profile.held_out:
            print(f"{'':<38}too few runs to hold any out")


def megatron_table(catalog, title: str, runs: tuple[str, ...]) -> None:
    """Megatron-LM's runs as the catalog stands: time split, TFLOP/s and the error."""
    print(f"{title:<11}{'GPUs':>6}{'DP':>9}{'iteration s':>13}{'compute s':>11}"
          f"{'TP s':>8}{'bubble s':>10}{'(p-1)/vm':>9}{'DP s':>8}{'GiB/GPU':>9}{'TFLOP/s':>9}"
          f"{'published':>11}{'error':>8}")
    errors = []
    for run in runs:
        r = check(catalog, MEGATRON_DIR / f"{run}.pbtxt")
        error = r["tflops"] / r["published"] - 1
        errors.append(error)
        ddp = "overlap" if r["overlap"] else "after"
        print(f"{run:<11}{r['gpus']:>6}{ddp:>9}{r['iteration_s']:>13.3f}{r['compute_s']:>11.3f}"
              f"{r['tp_s']:>8.3f}{r['bubble_s']:>10.3f}{r['schedule_share'] * r['compute_s']:>9.3f}"
              f"{r['dp_s']:>8.3f}{r['memory_gib']:>9.1f}{r['tflops']:>9.1f}{r['published']:>11.0f}"
              f"{error:>+8.1%}")
    print(f"largest error {max(errors, key=abs):+.1%}\n")


#: What each stack did with a stage's pipeline sends (sources: docs/validation.md,
#: "Pipeline sends: waited for or not").
STACK_SENDS = {"megatron-lm-2021": "waited", "nemo-24.07": "overlapped",
               "deepspeed-2021": "waited"}


def pipelined_runs(catalog):
    """(software profile, run) for every run of the profiles with more than one pipeline
    stage (every shipped real run with pipeline parallelism belongs to a profile)."""
    for profile in catalog.software.values():
        for run in (*profile.calibrated_on, *profile.held_out):
            plan = load_plan(SPACES / f"{run}.pbtxt", catalog)
            if len({g.pp_stage for g in plan.device_groups}) > 1:
                yield profile.name, run


def shipped_sends(catalog, run: str) -> str:
    """What the plan file of ``run`` says of its pipeline sends."""
    training = load_plan(SPACES / f"{run}.pbtxt", catalog).training
    waits = training.HasField("pp_p2p_overlap") and not training.pp_p2p_overlap
    return "waited" if waits else "overlapped"  # unset means overlapped


def p2p_sensitivity(catalog) -> None:
    """Each pipelined run's error with its stages' sends beside the compute and with every
    stage waiting for its own sends, beside what the stack that ran it did and what the
    shipped plan says."""
    print(f"{'run':<36}{'stack':>18}{'its sends':>12}{'plan':>12}{'compared':>14}"
          f"{'published':>11}{'overlapped':>12}{'waited':>9}{'change':>9}")
    for profile, run in pipelined_runs(catalog):
        what, overlapped, published_figure, _ = run_error(catalog, run, "overlapped")
        waited = run_error(catalog, run, "waited")[1]
        before, after = overlapped / published_figure - 1, waited / published_figure - 1
        print(f"{run:<36}{profile:>18}{STACK_SENDS[profile]:>12}"
              f"{shipped_sends(catalog, run):>12}{what:>14}{published_figure:>11,}"
              f"{before:>+12.1%}{after:>+9.1%}{(after - before) * 100:>+6.1f} pt")


def main() -> None:
    catalog = load_catalog()
    started = time.perf_counter()
    if "--p2p-sensitivity" in sys.argv[1:]:
        p2p_sensitivity(catalog)
        print(f"{time.perf_counter() - started:.1f} s")
        return
    megatron_table(catalog, "calibration", RUNS)
    calibration_sweep()
    print()
    megatron_table(catalog, "held out", HELD_OUT)
    published(catalog)
    hopper_fp8(catalog)
    deepspeed_2021(catalog, sweep="--deepspeed-sweep" in sys.argv[1:])
    software_profiles(catalog)
    print(f"{time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
