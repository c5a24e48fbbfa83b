"""The sweeper on this host's accelerator, in one prepared run with its own time limit.

Run: ``python benchmarks/bench_gpu.py [--budget-s 480] [--quick]``. On a GPU host it
prints, within the budget (each step is skipped, saying so, when what is left of the
budget cannot hold it):

1. **Kernels alone** (a component figure: the same programs repeated, so it measures the
   kernels, not preparation): bound and exact variants/s of ``Evaluator.run`` at 1k,
   16k and 128k variants per call, for the 16-64-GPU and the 256-1024-GPU classes of
   ``benchmarks/plans.py``, warm (the call after the one that compiled);
2. the same on the host's CPU (a child process with ``JAX_PLATFORMS=cpu``, every core),
   and the ratio of the two;
3. **end to end**, as a user meets it: ``xsweep.evaluate`` on sweep-like and all-distinct
   plans, a second set new to the process (warm in process), both levels;
4. **the large space**: ``xsweep sweep spaces/llama3-70b-512gpu.yaml`` in a new process,
   points/s, with the peak resident memory of its process tree and the device's peak
   memory (``nvidia-smi``, where there is one);
5. **HLO proxies** of launch-bound time (``benchmarks/hlo_proxies.py``): per class and
   level, the main loop's trip count, operations per step as lowered and as compiled,
   and the loops nested in it, as the accelerator runs the kernels (and, on a CPU-only
   machine, as its code path runs on CPU devices), with the compile time (cold) and
   the warm call.

On a CPU-only machine it runs the same steps at small sizes (``--quick`` shrinks them
further, for a smoke run) and says which figures need a GPU. Nothing here asserts a
time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
LARGE = HERE.parent / "spaces" / "llama3-70b-512gpu.yaml"
SMALL = HERE.parent / "spaces" / "search-bench.yaml"
CLASSES = {"16-64": (16, 32, 64), "256-1024": (256, 512, 1024)}


class Budget:
    """Seconds left of the run's own time limit."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def allows(self, seconds: float) -> bool:
        return self.left() > seconds


def _programs(evaluator, sizes: tuple[int, ...], quick: bool) -> list:
    sys.path.insert(0, str(HERE))
    from plans import llama7b_grid

    plans = llama7b_grid(sizes, tps=(4, 8), pps=(2, 4), micro_batches=(8, 16))
    plans = plans[:4] if quick else plans
    return [p.program for p in evaluator.prepare(plans)]


def kernels(budget: Budget, quick: bool, per_call: tuple[int, ...]) -> dict:
    """Variants/s of ``Evaluator.run`` per class, level and variants per call (warm)."""
    import xsweep

    evaluator = xsweep.Evaluator(processes=1)
    found: dict = {"platform": evaluator.platform, "devices": len(evaluator.devices),
                   "rates": {}}
    for name, sizes in CLASSES.items():
        programs = _programs(evaluator, sizes, quick)
        for level in ("bound", "exact"):
            last = None  # seconds per variant of the last size, to judge the next
            for count in per_call:
                key = f"{name} {level} {count}"
                if last is not None and not budget.allows(3 * last * count + 10):
                    found["rates"][key] = None
                    continue
                variants = [programs[i % len(programs)] for i in range(count)]
                start = time.perf_counter()
                evaluator.run(variants, level, chunk_size=count, with_metrics=False)
                cold = time.perf_counter() - start
                start = time.perf_counter()
                evaluator.run(variants, level, chunk_size=count, with_metrics=False)
                warm = time.perf_counter() - start
                last = warm / count
                found["rates"][key] = {"warm": count / warm, "cold_s": cold}
    return found


def _print_kernels(found: dict, cpu: dict | None) -> None:
    print(f"kernels alone ({found['platform']}, {found['devices']} devices; "
          "component figure: programs repeated), variants/s warm:")
    for key, rate in found["rates"].items():
        if rate is None:
            print(f"  {key:>24}: skipped (not within the budget)")
            continue
        line = f"  {key:>24}: {rate['warm']:>12,.0f}/s  (first call {rate['cold_s']:.1f} s)"
        other = (cpu or {}).get("rates", {}).get(key)
        if cpu is not None and other:
            line += f"   host CPU {other['warm']:>10,.0f}/s   ratio {rate['warm'] / other['warm']:.1f}x"
        print(line)


def _rows(calls: list) -> list[int]:
    """Variants (rows) of each recorded kernel call."""
    import jax

    return [jax.tree.leaves(args[0])[0].shape[0] for _, args in calls]


def end_to_end(budget: Budget, quick: bool, platform: str | None = None,
               levels: tuple[str, ...] = ("bound", "exact")) -> None:
    """``xsweep.evaluate`` on plans new to the process, after a first set (warm), with the
    kernel calls it made and the variants each carried (an accelerator wants thousands)."""
    sys.path.insert(0, str(HERE))
    from bench_end_to_end import plans_of
    from hlo_proxies import recorded_calls

    import xsweep

    evaluator = xsweep.Evaluator(platform=platform)
    for family in ("sweep-like", "distinct"):
        for level in levels:
            if not budget.allows(60):
                print(f"  {family} {level}: skipped (not within the budget)")
                continue
            start = time.perf_counter()
            evaluator.evaluate(plans_of(family, False, quick), level=level)
            cold = time.perf_counter() - start
            plans = plans_of(family, True, quick)
            with recorded_calls() as calls:
                start = time.perf_counter()
                ds = evaluator.evaluate(plans, level=level)
                warm = time.perf_counter() - start
            rows = _rows(calls)
            ok = int((ds["status"] == "ok").sum())
            print(f"  {family:>10} {level}: {len(plans) / warm:>9,.1f} variants/s warm in "
                  f"process ({len(plans)} new plans in {warm:.2f} s; ok {ok}; "
                  f"{len(rows)} kernel calls in this process, {max(rows, default=0)} rows at "
                  f"most); first set {cold:.1f} s with its compilations")
    evaluator.close()


class _DeviceMemory:
    """The device's peak used memory while it runs, from ``nvidia-smi`` (None without)."""

    def __init__(self):
        self.peak_mib: float | None = None
        self._stop = threading.Event()
        self._tool = shutil.which("nvidia-smi")

    def __enter__(self):
        if self._tool:
            threading.Thread(target=self._watch, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            try:
                text = subprocess.run([self._tool, "--query-gpu=memory.used",
                                       "--format=csv,noheader,nounits"], capture_output=True,
                                      text=True, timeout=5).stdout
                used = max(float(v) for v in text.split())
            except (OSError, ValueError, subprocess.SubprocessError):
                continue
            self.peak_mib = max(self.peak_mib or 0.0, used)


def large_space(budget: Budget, space: Path) -> None:
    """The sweep of ``space`` in a new process: points/s, peak host and device memory."""
    sys.path.insert(0, str(HERE))
    from bench_sweep import TreeMemory

    from xsweep.spec import load_sweep

    points = load_sweep(space).grid_size()
    with tempfile.TemporaryDirectory() as work:
        command = [sys.executable, "-m", "xsweep.cli.main", "sweep", str(space), "-o",
                   work, "--json"]
        start = time.perf_counter()
        with TreeMemory() as host, _DeviceMemory() as device:
            try:
                result = subprocess.run(command, capture_output=True, text=True,
                                        timeout=max(budget.left() - 5, 1), check=False)
            except subprocess.TimeoutExpired:
                print(f"  {space.name}: not finished within the budget")
                return
        wall = time.perf_counter() - start
    if result.returncode != 0:
        print(f"  {space.name}: failed (exit {result.returncode}): "
              f"{result.stderr.strip().splitlines()[-1:]}")
        return
    summary = json.loads(result.stdout)
    device_text = (f"{device.peak_mib / 1024:.2f} GiB" if device.peak_mib is not None
                   else "n/a (no nvidia-smi: needs a GPU)")
    print(f"  {space.name}: {points:,} points in {wall:.1f} s: {points / wall:,.0f} points/s; "
          f"{summary['evaluated_exactly']:,} evaluated exactly; peak host memory "
          f"{host.peak_bytes / 1e9:.2f} GB (process tree); peak device memory {device_text}")


def proxies(budget: Budget, quick: bool, platform: str) -> None:
    """HLO proxies per class and level, with the compile (cold) and warm call times."""
    sys.path.insert(0, str(HERE))
    from hlo_proxies import profile, recorded_calls

    import xsweep

    evaluator = xsweep.Evaluator(processes=1, platform=platform)
    for name, sizes in CLASSES.items():
        program = _programs(evaluator, sizes[:1], True)[0]
        for level in ("bound", "exact"):
            if not budget.allows(45):
                print(f"  {name} {level}: skipped (not within the budget)")
                continue
            variants = [program] * (4 if quick else 64)
            with recorded_calls() as calls:
                start = time.perf_counter()
                out = evaluator.run(variants, level, with_metrics=False)
                cold = time.perf_counter() - start
            start = time.perf_counter()
            evaluator.run(variants, level, with_metrics=False)
            warm = time.perf_counter() - start
            found = profile(*calls[-1])
            steps = found["trip_count"] if level == "bound" else int(out["steps"][0])
            print(f"  {name} {level}: steps {steps}, ops per step lowered "
                  f"{found['lowered_ops']}, compiled {found['compiled_ops']} "
                  f"(+{found['nested_loops']} nested loops), steps x ops "
                  f"{(steps or 0) * found['compiled_ops']:,}; call of {len(variants)}: "
                  f"cold {cold:.2f} s, warm {warm * 1e3:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=480.0,
                        help="the run's own time limit, seconds (default 8 minutes)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--child", choices=("kernels",), help=argparse.SUPPRESS)
    args = parser.parse_args()
    budget = Budget(args.budget_s)
    import jax

    accelerator = jax.default_backend() != "cpu"
    per_call = (256,) if args.quick else ((1024, 16384, 131072) if accelerator else (1024,))
    if args.child:
        print(json.dumps(kernels(budget, args.quick, per_call)))
        return
    print(f"devices: {jax.devices()}; host cores: {os.cpu_count()}; JAX {jax.__version__}")
    if not accelerator:
        print("no accelerator here: the figures below are this CPU's, at small sizes; the "
              "GPU figures (kernels at 16k and 128k variants per call, the ratio to the "
              "host's CPU, device memory) need a GPU host")
    print("1-2. kernels alone")
    found = kernels(budget, args.quick, per_call)
    cpu = None
    if accelerator and budget.allows(60):
        env = dict(os.environ, JAX_PLATFORMS="cpu")
        child = subprocess.run([sys.executable, __file__, "--child", "kernels", "--budget-s",
                                str(min(budget.left() / 3, 150))],
                               capture_output=True, text=True, env=env, check=False)
        cpu = json.loads(child.stdout.strip().splitlines()[-1]) if child.returncode == 0 \
            else None
    _print_kernels(found, cpu)
    print("3. end to end (xsweep.evaluate, plans new to the process)")
    end_to_end(budget, args.quick)
    if not accelerator:
        print("3b. the same, bound level, by an accelerator host's code path on these CPU "
              "devices (its kernel calls: how many variants each carries)")
        end_to_end(budget, args.quick, "gpu", ("bound",))
    print("4. the large space")
    large_space(budget, LARGE if accelerator and not args.quick else SMALL)
    print("5. HLO proxies (main loop of each kernel call)")
    proxies(budget, args.quick, "gpu")
    print(f"done with {max(budget.left(), 0):.0f} s of the budget left")


if __name__ == "__main__":
    main()
