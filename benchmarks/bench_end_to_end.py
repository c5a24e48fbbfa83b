"""End to end, as a user meets it: plans in, a Dataset out, through ``xsweep.evaluate``.

Run: ``python benchmarks/bench_end_to_end.py [--families sweep-like distinct large]
[--levels bound exact] [--many 100000] [--quick]``.

Every measurement runs in a new process, on plans that process has never seen, and
times ``Evaluator.evaluate`` whole: validation, analysis, lowering, encoding, the
kernels, memory and cost, the Dataset. Per family and level:

* **cold**: a new process with an empty compilation cache (every kernel shape
  compiles); the time to the first finished chunk and to the end;
* **warm process**: a new process with the cache the cold one left (no compilation:
  kernels load from disk), on the same plans;
* **warm in process**: the same process again, on a second set of plans it has not
  seen (other micro-batch counts, so other structures and numbers): the steady rate of
  a long sweep or search.

Each line splits the time into preparing plans (validate, analyse, lower), kernels
(encode and run, compilations included), results (memory, cost, Dataset) and
compilation, and gives the padding overhead of the kernels' arrays. The exact event
simulator runs on a sample of the same plans in the same run (one process) for the
ratio; the figures of ``peers.md`` (a peer analytical tool and xsweep 0.1.0, measured on
this machine kind) are printed beside them. Finally the bound level streams
``--many`` sweep-like variants and reports the peak memory of that process.

Families (``benchmarks/plans.py``): ``sweep-like`` (Llama-2-7B on 8-64 GPUs, every
structure in 12 numeric variants: GPU model within its kind, NIC, recompute),
``distinct`` (every plan its own structure: TP, PP, micro-batch counts, schedules,
resharding, cluster mixes; plus random heterogeneous plans up to 64 GPUs), ``large``
(Llama-2-7B on 256-1024 GPUs, distinct structures).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: Reference rates of peers.md (variants or configs per second on this machine kind).
#: Calculon's are its search's full evaluations with its DEBUG log records switched off
#: (with them on, three quarters of its time goes into records it drops: 30-80/s): 1,420/s
#: in peers.md, about 2,000/s in ``bench_sweep.py --calculon`` on a quieter machine.
PEER_RATES = {"Calculon search, DEBUG off": (1420, 2070), "xsweep 0.1.0 bound": (28, 46),
              "xsweep 0.1.0 exact": (25, 35)}


def plans_of(family: str, second: bool, quick: bool) -> list:
    sys.path.insert(0, str(HERE))
    from plans import distinct, llama7b_grid, sweep_like

    batch = 256 if second else 128
    if family == "sweep-like":
        plans = sweep_like(global_batch=batch)
    elif family == "distinct":
        plans = distinct(global_batch=batch, seed=int(second))
    elif family == "large":
        plans = [p for p in llama7b_grid((256, 512, 1024), tps=(4, 8), pps=(2, 4),
                                         micro_batches=(8, 16) if second else (4, 12))]
    else:
        raise SystemExit(f"unknown family {family!r}")
    if quick:
        plans = plans[:: max(1, len(plans) // 48)][:48]
    return plans


def worker(args: argparse.Namespace) -> None:
    """One process: evaluate a family cold (or warm from the disk cache), then again on new
    plans; print one JSON line."""
    import xsweep

    evaluator = xsweep.Evaluator()
    out = {"devices": len(evaluator.devices), "cache": str(evaluator.cache_dir)}
    for run, second in (("first", False), ("again", True)):
        plans = plans_of(args.family, second, args.quick)
        first_chunk = []
        start = time.perf_counter()

        def progress(done, total, start=start, first_chunk=first_chunk):
            if not first_chunk:
                first_chunk.append(time.perf_counter() - start)

        ds = evaluator.evaluate(plans, args.level, progress=progress)
        wall = time.perf_counter() - start
        out[run] = {
            "variants": len(plans), "wall_s": wall,
            "first_chunk_s": first_chunk[0] if first_chunk else wall,
            **{k: ds.attrs[k] for k in ("prepare_s", "kernels_s", "results_s", "compile_s",
                                        "compiles", "compile_cache_hits")},
            "padding_overhead": float(ds["padding_overhead"].mean()),
            "ok": int((ds["status"] == "ok").sum()),
        }
    out["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(json.dumps(out))


def many(args: argparse.Namespace) -> None:
    """Stream ``--many`` sweep-like variants through the bound level; print one JSON line."""
    import xsweep

    sys.path.insert(0, str(HERE))
    from plans import sweep_like

    base = sweep_like(global_batch=128) + sweep_like(global_batch=256)
    plans = [base[i % len(base)] for i in range(args.many)]
    evaluator = xsweep.Evaluator()
    start = time.perf_counter()
    ds = evaluator.evaluate(plans, "bound")
    wall = time.perf_counter() - start
    evaluator.close()  # its worker processes end, so their peak is known
    print(json.dumps({"variants": len(plans), "distinct": len(base), "wall_s": wall,
                      "ok": int((ds["status"] == "ok").sum()),
                      "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                      "worker_peak_rss_gb":
                          resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20,
                      **{k: ds.attrs[k] for k in ("prepare_s", "kernels_s", "results_s",
                                                  "compile_s")}}))


def _spawn(argv: list[str], cache: Path) -> dict:
    env = dict(os.environ, XSWEEP_CACHE_DIR=str(cache))
    run = subprocess.run([sys.executable, __file__, *argv], env=env, capture_output=True,
                         text=True, check=False)
    if run.returncode:
        raise SystemExit(f"worker {argv} failed:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def _line(label: str, r: dict) -> str:
    n, wall = r["variants"], r["wall_s"]
    return (f"  {label:16s} {n / wall:9.1f} variants/s  ({n} in {wall:6.2f} s; first chunk "
            f"{r['first_chunk_s']:5.2f} s) prepare {r['prepare_s']:6.2f} s, kernels "
            f"{r['kernels_s']:6.2f} s, results {r['results_s']:5.2f} s; compile "
            f"{r['compile_s']:5.1f} s in {r['compiles']} ({r['compile_cache_hits']} from disk); "
            f"padding {r['padding_overhead']:.2f}; ok {r['ok']}/{n}")


def simulator_rate(family: str, quick: bool, sample: int) -> tuple[float, int]:
    """Variants per second of the exact event simulator (one process) on a sample."""
    import xsweep
    from xsweep.sim import simulate

    plans = plans_of(family, False, quick)
    plans = plans[:: max(1, len(plans) // sample)][:sample]
    start = time.perf_counter()
    for plan in plans:
        simulate(xsweep.prepare(plan, names=False).program)
    return len(plans) / (time.perf_counter() - start), len(plans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=["sweep-like", "distinct", "large"])
    parser.add_argument("--levels", nargs="+", default=["bound", "exact"])
    parser.add_argument("--many", type=int, default=100_000,
                        help="bound variants of the streaming run (0 skips it)")
    parser.add_argument("--sim-sample", type=int, default=24,
                        help="plans of each family the simulator runs")
    parser.add_argument("--quick", action="store_true", help="48 plans per family, a smoke run")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--many-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--family", help=argparse.SUPPRESS)
    parser.add_argument("--level", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    if args.many_worker:
        return many(args)

    print(f"cores: {len(os.sched_getaffinity(0))} (load average {os.getloadavg()[0]:.1f} at "
          f"the start: other work on the machine slows every figure); reference rates (peers.md, this machine "
          "kind): " + "; ".join(f"{k} {lo}-{hi}/s" for k, (lo, hi) in PEER_RATES.items()))
    quick = ["--quick"] if args.quick else []
    for family in args.families:
        sim_rate, sampled = simulator_rate(family, args.quick, args.sim_sample)
        print(f"\n== {family}: simulator {sim_rate:.1f} variants/s (one process, {sampled} "
              "of the plans)")
        for level in args.levels:
            with tempfile.TemporaryDirectory() as cache:
                argv = ["--worker", "--family", family, "--level", level, *quick]
                cold = _spawn(argv, Path(cache))
                warm = _spawn(argv, Path(cache))
            print(f" {level}:")
            print(_line("cold", cold["first"]))
            print(_line("warm process", warm["first"]))
            print(_line("warm in process", warm["again"]))
            steady = warm["again"]["variants"] / warm["again"]["wall_s"]
            print(f"  steady rate = {steady / sim_rate:.1f} x the simulator; "
                  + ", ".join(f"{steady / hi:.1f}-{steady / lo:.1f} x {k}"
                              for k, (lo, hi) in PEER_RATES.items()))
    if args.many:
        with tempfile.TemporaryDirectory() as cache:
            r = _spawn(["--many-worker", "--many", str(args.many)], Path(cache))
        print(f"\nbound, {r['variants']} sweep-like variants streamed ({r['distinct']} distinct "
              f"plans repeated): {r['variants'] / r['wall_s']:.0f} variants/s, {r['ok']} ok, "
              f"peak memory {r['peak_rss_gb']:.2f} GB in the calling process, "
              f"{r['worker_peak_rss_gb']:.2f} GB in its largest worker process (prepare {r['prepare_s']:.1f} s, kernels "
              f"{r['kernels_s']:.1f} s, results {r['results_s']:.1f} s, compile "
              f"{r['compile_s']:.1f} s)")


if __name__ == "__main__":
    main()
