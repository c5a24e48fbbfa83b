"""Plans at the scale of today's largest runs: time and peak memory of each evaluator.

Run: ``python benchmarks/bench_scale.py [--gpus 2048 16384 65536]``. For each GPU count
it builds Llama-3-405B on that many H100s (TP 8, PP 16, data parallel over the rest,
global batch 2,048 sequences, full recompute: the layout of the published 405B run on
16,384 H100s), and runs, each in a new process so that its peak memory is its own:

* ``xsweep simulate`` (the exact event-driven simulator, ``--allow-oom``: the timing of
  a plan is wanted even where its memory does not fit);
* ``xsweep.evaluate`` at the bound and at the exact level (compilations included).

It prints the program's size, the estimate of its cost that the program-size limit
reads (``xsweep.spec.program_size.program_cost``), and the measured time and peak
resident memory, so the estimate is checked against measurements in one run. The
default limits apply: a plan they refuse is reported as refused.

With ``--deepseek`` it also builds a DeepSeek-V3-shaped plan on 2,048 H100s (TP 1, PP 16,
DP 128, EP 64: each stage's EP groups on 8 nodes of 8, as DeepSeek-V3 lays them out; FP8,
ZeRO-1, full recompute, 8 micro-batches per replica) and simulates it with NCCL's flat
all-to-all, with DeepEP's dispatch (``training.moe_dispatcher``) and with DeepEP's
dispatch in FP8 as DeepSeek-V3 runs it (``training.moe_fp8_dispatch``), printing each and
their ratios.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EVALUATE = """
import json, resource, sys, time
import xsweep
plan = xsweep.load_plan(sys.argv[1])
start = time.perf_counter()
ds = xsweep.Evaluator(processes=1).evaluate([plan], level=sys.argv[2])
print(json.dumps({"seconds": time.perf_counter() - start,
                  "iteration_time_s": float(ds["iteration_time_s"][0]),
                  "status": str(ds["status"].values[0])}))
"""


def build(gpus: int, folder: Path) -> tuple[Path, int]:
    from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan
    from xsweep.plan.stack import Stack
    from xsweep.spec.plan_io import plan_to_text
    from xsweep.spec.program_size import estimate_program_size

    tp, pp, layers, batch = 8, 16, 126, 2048
    dp = gpus // (tp * pp)
    per_stage = [layers // pp] * pp
    per_stage[0] += layers - sum(per_stage)
    stages = tuple(StageReq("H100-SXM", tp, n) for n in per_stage)
    plan = build_plan(f"llama3-405b-h100x{gpus}", "llama3-405b",
                      [NodeReq("H100-SXM", 8)] * (gpus // 8),
                      [ReplicaReq(stages, 1, batch // dp)] * dp, stack=Stack(recompute="full"),
                      total_tokens=1.5e13)
    path = folder / f"{plan.name}.pbtxt"
    path.write_text(plan_to_text(plan))
    return path, estimate_program_size(plan)


def build_deepseek(dispatcher: str, folder: Path, fp8_dispatch: bool = False) -> Path:
    """DeepSeek-V3 on 2,048 H100s, PP 16 x DP 128 at TP 1, EP 64, placed stage by stage
    (stage ``s`` of replica ``k`` on rank ``128 s + k``: an EP group of 64 consecutive
    replicas of a stage spans 8 nodes of 8 GPUs); ``fp8_dispatch``: its dispatches in FP8."""
    from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan
    from xsweep.plan.stack import Stack
    from xsweep.spec.plan_io import plan_to_text

    pp, dp, layers = 16, 128, 61
    base, extra = divmod(layers, pp)
    stages = tuple(StageReq("H100-SXM", 1, base + (s >= pp - extra)) for s in range(pp))
    plan = build_plan(f"deepseek-v3-h100x2048-{dispatcher}{'-fp8' * fp8_dispatch}",
                      "deepseek-v3",
                      [NodeReq("H100-SXM", 8, "cx7")] * (pp * dp // 8),
                      [ReplicaReq(stages, 1, 8)] * dp,
                      stack=Stack(expert_parallel=64, zero_stage=1, recompute="full",
                                  precision="fp8", moe_dispatcher=dispatcher,
                                  moe_fp8_dispatch=fp8_dispatch),
                      total_tokens=14.8e12)
    for g in plan.device_groups:
        g.ranks[0] = g.pp_stage * dp + g.dp_replica
    path = folder / f"{plan.name}.pbtxt"
    path.write_text(plan_to_text(plan))
    return path


def deepseek(folder: Path) -> None:
    """Simulate :func:`build_deepseek`'s plan under both dispatchers and DeepEP's in FP8;
    print their ratios."""
    times = {}
    for dispatcher, fp8 in (("alltoall", False), ("deepep", False), ("deepep", True)):
        path = build_deepseek(dispatcher, folder, fp8)
        name = f"{dispatcher}{' fp8' * fp8}"
        wall, peak, out = measured([sys.executable, "-m", "xsweep.cli.main", "simulate",
                                    str(path), "--json"])
        found = json.loads(out)
        times[name] = found["iteration_time_s"]
        print(f"DeepSeek-V3 on 2,048 H100s, EP 64 over 8 nodes, {name:>12}: iteration "
              f"{found['iteration_time_s']:.4f} s, exposed TP + all-to-all "
              f"{found['exposed_tp_s_max']:.4f} s, MFU {found['mfu']:.1%} "
              f"(simulated in {wall:.1f} s, peak {peak:.2f} GB)")
    print(f"  flat all-to-all / DeepEP: {times['alltoall'] / times['deepep']:.2f}x; DeepEP "
          f"in BF16 / in FP8: {times['deepep'] / times['deepep fp8']:.2f}x")


def measured(command: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak resident GB and output of ``command`` in a new process."""
    start = time.perf_counter()
    run = subprocess.run(["/usr/bin/time", "-f", "%M", *command], capture_output=True,
                         text=True, check=False)
    wall = time.perf_counter() - start
    lines = run.stderr.strip().splitlines()
    peak = int(lines[-1]) * 1024 / 1e9 if lines and lines[-1].isdigit() else float("nan")
    out = run.stdout if run.returncode == 0 else (lines[-2] if len(lines) > 1 else run.stderr)
    return wall, peak, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="*", default=[2048, 16384, 65536])
    parser.add_argument("--deepseek", action="store_true",
                        help="also simulate a DeepSeek-V3-shaped plan under both MoE "
                             "dispatchers, and DeepEP's dispatching in FP8")
    args = parser.parse_args()
    from xsweep.spec.program_size import program_cost

    with tempfile.TemporaryDirectory() as work:
        if args.deepseek:
            deepseek(Path(work))
        for gpus in args.gpus:
            path, size = build(gpus, Path(work))
            memory, seconds = program_cost(size)
            print(f"Llama-3-405B on {gpus:,} H100s: {size:,} tasks and flows (estimated); "
                  f"the limit's estimate: {memory / 1e9:.1f} GB, {seconds:.0f} s")
            runs = {"simulate": [sys.executable, "-m", "xsweep.cli.main", "simulate",
                                 str(path), "--json", "--allow-oom"],
                    "bound": [sys.executable, "-c", EVALUATE, str(path), "bound"],
                    "exact": [sys.executable, "-c", EVALUATE, str(path), "exact"]}
            for name, command in runs.items():
                wall, peak, out = measured(command)
                try:
                    found = json.loads(out)
                    detail = f"iteration {found['iteration_time_s']:.4f} s"
                except (ValueError, KeyError, TypeError):
                    detail = f"refused or failed: {out.strip()[:160]}"
                print(f"  {name:>8}: {wall:6.1f} s, peak {peak:.2f} GB; {detail}")


if __name__ == "__main__":
    main()
