"""The peer tools' reference workloads in xsweep, side by side with the peers' figures.

Reads ``spaces/peers/*.pbtxt`` (Llama-2-7B on 8 and 64 A100-80GB under the peers'
assumptions; written by ``benchmarks/reference_plans.py``) and prints, per layout,
xsweep's iteration, compute, bubble, exposed TP time, memory and MFU next to
Calculon's and xsweep 0.1.0's figures (peers.md); then one TP all-reduce in isolation,
the best 8-GPU layout of a small search with Megatron-LM's default stack, and the
published MFU range of real 7-8B runs on A100s. Peers are models, not ground truth.

Run: ``python benchmarks/compare_peers.py`` (under a minute on 2 cores).
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

from xsweep.plan.analysis import analyze
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan
from xsweep.plan.lower import lower
from xsweep.plan.stack import Stack
from xsweep.plan.transport import flow_numbers
from xsweep.sim import simulate, summary
from xsweep.spec import load_catalog, load_plan

PEERS_DIR = Path(__file__).resolve().parent.parent / "spaces" / "peers"
# peers.md: (iteration s, compute s, bubble s, exposed TP s, GiB per GPU, MFU)
CALCULON = {
    "llama2-7b-tp8": (13.95, 11.02, 0.0, 2.92, 28.8, 0.347),
    "llama2-7b-tp8-full": (19.27, 15.07, 0.0, 4.20, 14.3, 0.251),
    "llama2-7b-tp2pp2dp2": (9.15, 8.38, 0.28, 0.46, 75.1, 0.529),
    "llama2-7b-tp2pp2dp2-full": (12.59, 11.53, 0.38, 0.65, 28.6, 0.384),
}
XSWEEP_0_1 = {
    "llama2-7b-tp8": (11.31, 9.70, 0.0, 1.61, 29.1, 0.428),
    "llama2-7b-tp8-full": (15.29, 12.87, 0.0, 2.42, 14.1, 0.317),
    "llama2-7b-tp2pp2dp2": (10.42, 9.87, 0.64, 0.23, 76.2, 0.464),
    "llama2-7b-tp2pp2dp2-full": (13.81, 13.05, 0.74, 0.34, 27.7, 0.351),
}
PEER_64_GPUS = {"xsweep 0.1.0": 1.573, "Calculon, DP overlap off": 1.469,
                "Calculon, DP overlap on": 1.343}
PEER_BEST = "Calculon: TP2 PP1 DP4, ZeRO-1, sequence parallelism, TP and DP overlap: 7.99 s, 64.95 GiB"
PUBLISHED_MFU = ("MPT-7B, 8 x A100-80GB, seq 2048: 64.23%; seq 4096 with checkpointing: 54.84% "
                 "(llm-foundry); Llama-3-8B, 64 x A100, FSDP: 58.2% (torchtitan)")


def run(catalog, plan) -> tuple[dict, object]:
    a = analyze(plan, catalog)
    program = lower(a)
    m = summary(program, simulate(program))
    m["memory_gib"] = max(g.memory.total_gib for g in a.groups)
    m["fits"] = all(g.fits for g in a.groups)
    return m, a


def _row(label: str, values) -> str:
    it, comp, bubble, tp, mem, mfu = values
    return (f"  {label:<14}{it:>9.2f}{comp:>10.2f}{bubble:>9.2f}{tp:>8.2f}{mem:>9.1f}"
            f"{mfu:>8.1%}")


def layouts(catalog) -> dict:
    print(f"{'':<16}{'iter s':>9}{'compute s':>10}{'bubble s':>9}{'TP s':>8}{'GiB/GPU':>9}"
          f"{'MFU':>8}")
    times = {}
    for name in CALCULON:
        m, _ = run(catalog, load_plan(PEERS_DIR / f"{name}.pbtxt", catalog))
        times[name] = m["iteration_time_s"]
        print(name)
        print(_row("xsweep", (m["iteration_time_s"], m["busy_s_max"], m["bubble_s_max"],
                              m["exposed_tp_s_max"], m["memory_gib"], m["mfu"])))
        print(_row("Calculon", CALCULON[name]))
        print(_row("xsweep 0.1.0", XSWEEP_0_1[name]))
    ratio = times["llama2-7b-tp8"] / times["llama2-7b-tp2pp2dp2"]
    print(f"TP8 / TP2 PP2 DP2 iteration time: xsweep {ratio:.3f}, Calculon "
          f"{13.95 / 9.15:.3f}, xsweep 0.1.0 {11.31 / 10.42:.3f}")
    default = {}
    for name in ("llama2-7b-tp8", "llama2-7b-tp2pp2dp2"):
        plan = load_plan(PEERS_DIR / f"{name}.pbtxt", catalog)
        for field in ("sequence_parallel", "flash_attention", "dropout"):
            (plan.model if field == "dropout" else plan.training).ClearField(field)
        default[name] = run(catalog, plan)[0]
    tp8, mixed = default["llama2-7b-tp8"], default["llama2-7b-tp2pp2dp2"]
    print(f"with Megatron-LM's default stack (sequence parallelism, flash attention, Llama "
          f"without dropout): TP8 {tp8['iteration_time_s']:.2f} s ({tp8['mfu']:.1%}, "
          f"{tp8['memory_gib']:.1f} GiB), TP2 PP2 DP2 {mixed['iteration_time_s']:.2f} s "
          f"({mixed['mfu']:.1%}, {mixed['memory_gib']:.1f} GiB), ratio "
          f"{tp8['iteration_time_s'] / mixed['iteration_time_s']:.3f}")
    return times


def tp_all_reduce(catalog) -> None:
    """One TP-8 all-reduce of 33.5 MB (b s h bf16 values of Llama-2-7B) on an idle node."""
    a = analyze(load_plan(PEERS_DIR / "llama2-7b-tp8.pbtxt", catalog), catalog)
    size, k = a.groups[0].cost.tp_allreduce_bytes, 8
    path = a.topology.path(0, 1)
    wire, launch_s = flow_numbers(a.topology, path, 2 * (k - 1) / k * size, launches=1)
    capacity = float(a.topology.capacity[list(path)].min())
    hops_s = 2 * (k - 1) * a.topology.path_latency_s(path)
    print(f"TP8 all-reduce of {size / 1e6:.1f} MB on A100 NVLink: xsweep "
          f"{(launch_s + hops_s + wire / capacity) * 1e3:.3f} ms, Calculon 0.357 ms, "
          "xsweep 0.1.0 0.196 ms")


def best_layout(catalog) -> None:
    """The fastest 8-GPU Llama-2-7B layout that fits, with Megatron-LM's default stack."""
    best = None
    tried = fitting = 0
    for tp, pp, zero, recompute, mb, overlap in itertools.product(
            (1, 2, 4, 8), (1, 2, 4), (0, 1, 3), ("none", "selective", "full"), (1, 2),
            (False, True)):
        dp = 8 // (tp * pp)
        if dp < 1 or 64 % (dp * mb) or (overlap and (dp == 1 or zero == 3)):
            continue  # overlap needs data parallelism; FSDP always overlaps
        stages = tuple(StageReq("A100-80GB", tp, 32 // pp) for _ in range(pp))
        replica = ReplicaReq(stages, mb, 64 // dp // mb)
        stack = Stack(recompute=recompute, zero_stage=zero, dp_overlap=overlap)
        name = f"tp{tp}-pp{pp}-dp{dp}-zero{zero}-{recompute}-mb{mb}" + ("-overlap" * overlap)
        plan = build_plan(name, "llama2-7b", [NodeReq("A100-80GB", 8)], [replica] * dp,
                          stack=stack)
        m, _ = run(catalog, plan)
        tried += 1
        if not m["fits"]:
            continue
        fitting += 1
        if best is None or m["iteration_time_s"] < best[1]["iteration_time_s"]:
            best = (plan.name, m)
    name, m = best
    print(f"best of {fitting} fitting layouts ({tried} tried; SP and flash attention on, ZeRO "
          f"0/1/3, DP overlap off/on): {name}: {m['iteration_time_s']:.2f} s, MFU "
          f"{m['mfu']:.1%}, {m['memory_gib']:.1f} GiB/GPU")
    print(f"  peer: {PEER_BEST}")
    print(f"  published MFU of real 7-8B runs on A100: {PUBLISHED_MFU}")


def sixty_four_gpus(catalog) -> None:
    plan = load_plan(PEERS_DIR / "llama2-7b-64gpu-tp4dp16.pbtxt", catalog)
    figures = []
    for overlap in (False, True):
        plan.training.dp_overlap = overlap
        m, _ = run(catalog, plan)
        figures.append(f"DP overlap {'on' if overlap else 'off'} {m['iteration_time_s']:.3f} s "
                       f"(compute {m['busy_s_max']:.3f}, TP {m['exposed_tp_s_max']:.3f}, DP "
                       f"{m['exposed_dp_s_max']:.3f} exposed)")
    print("64 GPUs, TP4 PP1 DP16: xsweep " + ", ".join(figures) + "; "
          + ", ".join(f"{k} {v:.3f} s" for k, v in PEER_64_GPUS.items()))


def main() -> None:
    catalog = load_catalog()
    started = time.perf_counter()
    layouts(catalog)
    tp_all_reduce(catalog)
    sixty_four_gpus(catalog)
    best_layout(catalog)
    print(f"{time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
