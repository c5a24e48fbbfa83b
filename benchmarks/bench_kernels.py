"""Throughput of the batched kernels against the exact simulator and a per-variant loop.

Run: ``python benchmarks/bench_kernels.py [--small 256 --large 64 --many 100000]``
(``--cpu-devices 2`` splits the host into two XLA devices, one per core, to show
the sharded path; ``--quick`` shrinks everything for a smoke run).

Programs are lowered from seeded random plans (``xsweep.plan.builder.random_plan``)
in two size classes. Per class it prints: program sizes; variants/s of the bound
and exact levels (second call, compiled code reused) and of the simulator, with
ratios; the exact level's float32 error against the simulator; a Python loop of
single-variant jitted calls, as the baseline that batching must beat; event steps,
flows under way at once and padding overhead. Finally it runs the bound level over
``--many`` variants (the small class repeated) and reports variants/s and the
process's peak resident memory. Ratios are measured within one run; nothing here
asserts absolute times.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=256, help="programs of the small class")
    parser.add_argument("--large", type=int, default=64, help="programs of the large class")
    parser.add_argument("--many", type=int, default=100_000,
                        help="variants of the large bound run (0 skips it)")
    parser.add_argument("--loop", type=int, default=24, help="programs in the per-variant loop")
    parser.add_argument("--cpu-devices", type=int, default=0,
                        help="split the host CPU into this many XLA devices")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke run")
    return parser.parse_args()


ARGS = _parse()
if ARGS.cpu_devices:  # must be set before JAX initialises its backends
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + f" --xla_force_host_platform_device_count={ARGS.cpu_devices}")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from xsweep.kernels import exact  # noqa: E402

from xsweep.batch import evaluate_programs  # noqa: E402
from xsweep.encode import encode, program_sizes  # noqa: E402
from xsweep.plan.analysis import analyze  # noqa: E402
from xsweep.plan.builder import random_plan  # noqa: E402
from xsweep.plan.lower import lower  # noqa: E402
from xsweep.sim import simulate  # noqa: E402
from xsweep.spec.catalog import load_catalog  # noqa: E402

CLASSES = {"small": {"max_gpus": 16, "num_layers": 4}, "large": {"max_gpus": 64, "num_layers": 8}}


def programs_of(size_class: str, count: int) -> list:
    catalog = load_catalog()
    return [lower(analyze(random_plan(seed, **CLASSES[size_class]), catalog))
            for seed in range(count)]


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def per_variant_loop(programs) -> float:
    """Seconds per variant of a Python loop of single-variant jitted exact calls.

    Each program runs alone at its own shape, with a slot per flow (no overflow) and
    the unbatched water-filling: the best a per-variant loop of this kernel can do.
    """
    single = jax.jit(exact, static_argnames=("slots", "batched"))
    arrays = [jax.tree.map(lambda x: x[0], encode([p])) for p in programs]

    def run():
        return [single(a, slots=a.flow_bytes.shape[0], batched=False) for a in arrays]

    jax.block_until_ready(run())  # compile every shape first
    _, seconds = timed(lambda: jax.block_until_ready(run()))
    return seconds / len(programs)


def pct(values, qs=(50, 100)) -> str:
    return "/".join(f"{np.percentile(values, q):.3g}" for q in qs)


def bench_class(size_class: str, count: int) -> None:
    programs, gen_s = timed(lambda: programs_of(size_class, count))
    sizes = program_sizes(programs)
    print(f"\n== {size_class}: {count} programs (lowered in {gen_s:.1f} s); "
          f"tasks median/max {pct(sizes[:, 0])}, edges {pct(sizes[:, 1])}, "
          f"flows {pct(sizes[:, 2])}, links {pct(sizes[:, 4])}")
    sims, sim_s = timed(lambda: [simulate(p) for p in programs])
    reference = np.array([s.iteration_time_s for s in sims])
    print(f"simulator           {count / sim_s:10.1f} variants/s")
    rates = {}
    for level in ("bound", "exact"):
        _, cold_s = timed(lambda level=level: evaluate_programs(programs, level))
        out, seconds = timed(lambda level=level: evaluate_programs(programs, level))
        rates[level] = count / seconds
        error = np.abs(out["iteration_time_s"] - reference) / reference
        print(f"{level:5s} (batched)     {rates[level]:10.1f} variants/s = "
              f"{rates[level] * sim_s / count:7.2f} x simulator (first call, compiling: "
              f"{cold_s:.1f} s); padding overhead {np.mean(out['padding_overhead']):.2f}; "
              f"error vs simulator median/max {pct(error)}")
        if level == "exact":
            print(f"      steps median/max {pct(out['steps'])}; flows moving at once "
                  f"median/p99/max {pct(out['max_active_flows'], (50, 99, 100))}; "
                  f"water-filling rounds max {out['waterfill_rounds'].max()}; "
                  f"status counts {np.bincount(out['status']).tolist()}")
    loop = programs[: ARGS.loop]
    loop_s = per_variant_loop(loop)
    evaluate_programs(loop, "exact")
    _, batched_s = timed(lambda: evaluate_programs(loop, "exact"))
    print(f"exact, first {len(loop)} programs: Python loop of jitted single calls "
          f"{1 / loop_s:.1f} variants/s, batched {len(loop) / batched_s:.1f} variants/s "
          f"({loop_s * len(loop) / batched_s:.2f} x the loop)")


def bench_many(count: int) -> None:
    distinct = programs_of("small", min(count, 512))
    programs = [distinct[i % len(distinct)] for i in range(count)]
    for with_metrics in (False, True):
        evaluate_programs(distinct, "bound", with_metrics=with_metrics)  # compile
        out, seconds = timed(lambda w=with_metrics: evaluate_programs(programs, "bound",
                                                                        with_metrics=w))
        print(f"\nbound over {count} variants ({len(distinct)} distinct programs), metrics "
              f"{'on ' if with_metrics else 'off'}: {count / seconds:10.1f} variants/s, "
              f"{np.sum(out['status'] == 0)} ok")
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    print(f"peak resident memory of this process: {peak_gb:.2f} GB")


def main() -> None:
    if ARGS.quick:
        ARGS.small, ARGS.large, ARGS.many, ARGS.loop = 16, 4, 1000, 4
    print(f"devices: {jax.devices()}")
    bench_class("small", ARGS.small)
    bench_class("large", ARGS.large)
    if ARGS.many:
        bench_many(ARGS.many)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
