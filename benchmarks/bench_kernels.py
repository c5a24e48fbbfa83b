"""Throughput of the batched kernels against the exact simulator and a per-variant loop.

Run: ``python benchmarks/bench_kernels.py [--classes llama-16-64 llama-256-1024 random]
[--many 100000]`` (the batched levels run on xsweep's default of one XLA CPU
device per core, ``--cpu-devices N`` chooses another count; ``--quick`` shrinks
everything for a smoke run).

Size classes of programs (see ``benchmarks/plans.py``):

* ``llama-16-64``: the Llama-2-7B grid on 16, 32 and 64 GPUs (TP 2/4/8, PP 2/4,
  8 or 16 micro-batches, 1F1B and GPipe, all-H100 and half-A100 clusters);
* ``llama-256-1024``: Llama-2-7B on 256, 512 and 1024 GPUs (TP 4/8, PP 4, 1F1B);
* ``random``: seeded random heterogeneous plans of up to 64 GPUs
  (``xsweep.plan.builder.random_plan``).

Per class it prints the program sizes; variants/s of the simulator (one process,
and one per core with ``--sim-processes``, the default) and of both
levels (the fastest of the calls after the first, compiled code reused, and the
first call with its compilations; iteration times only, as the simulator
gives, and again with every metric) with the ratios to the simulator; the error of
both levels against the simulator; the ratio to a Python loop of single-variant
jitted calls; event steps, flows under way at once and padding overhead. Finally
the bound level over ``--many`` variants (the first class repeated) reports
variants/s and the process's peak resident memory. Ratios are measured within
one run; each time is the fastest of ``--repeat`` runs, taken in turn, which keeps
the ratios steady on a shared machine. Nothing here asserts absolute times.

``--baseline GITREV`` runs a different comparison instead: the exact kernel of
``kernels/`` as of that git revision against the working tree's (see
:func:`compare_exact`).
"""

from __future__ import annotations

import argparse
import atexit
import functools
import importlib.util
import io
import multiprocessing
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", nargs="+", default=["llama-16-64", "llama-256-1024", "random"],
                        help="size classes to run, in order (the first one feeds --many)")
    parser.add_argument("--count", type=int, default=0,
                        help="programs per class at most (0: the whole class)")
    parser.add_argument("--many", type=int, default=100_000,
                        help="variants of the large bound run (0 skips it)")
    parser.add_argument("--loop", type=int, default=8,
                        help="programs in the per-variant loop of each class")
    parser.add_argument("--repeat", type=int, default=3,
                        help="timed runs of each measurement; the fastest counts")
    parser.add_argument("--sim-processes", type=int, default=os.cpu_count() or 1,
                        help="also time the simulator on this many processes (1: not)")
    parser.add_argument("--cpu-devices", type=int, default=0,
                        help="split the host CPU into this many XLA devices "
                             "(0: xsweep's default, one per core)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke run")
    parser.add_argument("--baseline", metavar="GITREV",
                        help="only time the exact kernel of kernels/ at GITREV against the "
                             "working tree's, in turn on the same inputs, per class")
    return parser.parse_args()


ARGS = _parse()
import xsweep  # noqa: E402

xsweep.use_cpu_devices(ARGS.cpu_devices or None)  # before JAX starts its backends
xsweep.runtime.use_compiled_loops()  # as the evaluator compiles the kernels

import jax  # noqa: E402
import numpy as np  # noqa: E402
from plans import llama7b_grid, simulated_time  # noqa: E402
from xsweep.kernels import Status, blocked_bound, exact  # noqa: E402

from xsweep.evaluator import default_evaluator  # noqa: E402
from xsweep.evaluator.blocks import block_form, block_layout, block_sizes, encode_blocks  # noqa: E402
from xsweep.evaluator.encode import encode  # noqa: E402
from xsweep.evaluator.shapes import BlockShape, program_sizes  # noqa: E402
from xsweep.evaluator.slots import exact_slots  # noqa: E402
from xsweep.evaluator.tuning import tuning  # noqa: E402
from xsweep.plan.analysis import analyze  # noqa: E402
from xsweep.plan.builder import random_plan  # noqa: E402
from xsweep.plan.lower import lower  # noqa: E402
from xsweep.sim import simulate  # noqa: E402
from xsweep.spec.catalog import load_catalog  # noqa: E402

LEVELS = ("bound", "exact")


def plans_of(size_class: str) -> list:
    if size_class == "llama-16-64":
        return llama7b_grid((16, 32, 64))
    if size_class == "llama-256-1024":
        return llama7b_grid((256, 512, 1024), tps=(4, 8), pps=(4,), micro_batches=(16,),
                            schedules=("1f1b",))
    if size_class == "random":
        return [random_plan(seed, max_gpus=64, num_layers=8) for seed in range(128)]
    raise SystemExit(f"unknown class {size_class!r}")


def programs_of(size_class: str) -> list:
    plans = plans_of(size_class)
    if ARGS.count:
        plans = plans[:: max(1, len(plans) // ARGS.count)][: ARGS.count]
    catalog = load_catalog()
    return [lower(analyze(plan, catalog)) for plan in plans]


def timed(fn, repeat: int = 1):
    """``fn()`` and the fewest seconds it took in ``repeat`` runs."""
    best = np.inf
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return value, best


def _fitting_slots(single, arrays, program, sim) -> tuple[int, int]:
    """The simulator's own peaks of tasks and flows under way, on the ladder, doubled
    until ``arrays`` runs without overflow: the fewest slots a loop could know of."""
    slots = exact_slots(program, sim.task_start_s, sim.task_end_s, margin=1.0)
    while int(single(arrays, slots=slots, batched=False).status) == Status.OVERFLOW:
        slots = (2 * slots[0], 2 * slots[1])
    return slots


def per_variant_loop(level: str, programs, sims) -> float:
    """Seconds per variant of a Python loop of single-variant jitted calls.

    Each program runs alone at its own shape; the exact level gets slots sized from
    the simulator's own schedule and the unbatched water-filling: the best a
    per-variant loop of these kernels can do.
    """
    arrays = [jax.tree.map(lambda x: x[0], encode([p])) for p in programs]
    if level == "bound":
        single = jax.jit(blocked_bound)
        step_cost = tuning("cpu", "bound").step_cost
        shapes = [BlockShape(*block_sizes([p], [block_form(p, step_cost)])[0]) for p in programs]
        blocked = [jax.tree.map(lambda x: x[0], encode_blocks([block_layout(p, s.width)], s))
                   for p, s in zip(programs, shapes, strict=True)]
        calls = [lambda b=b: single(b) for b in blocked]
    else:
        single = jax.jit(exact, static_argnames=("slots", "batched"))
        fitting = [_fitting_slots(single, a, p, sim)
                   for a, p, sim in zip(arrays, programs, sims, strict=True)]
        calls = [lambda a=a, k=k: single(a, slots=k, batched=False)
                 for a, k in zip(arrays, fitting, strict=True)]
    jax.block_until_ready([call() for call in calls])  # compile every shape first
    _, seconds = timed(lambda: jax.block_until_ready([call() for call in calls]), ARGS.repeat)
    return seconds / len(programs)


def timed_in_turn(calls: dict, repeat: int) -> tuple[dict, dict]:
    """Each call's last value and fewest seconds, over ``repeat`` rounds that run every
    call once in turn: a machine whose speed drifts over minutes slows all of them
    alike, so their ratios hold."""
    values, best = {}, dict.fromkeys(calls, np.inf)
    for _ in range(repeat):
        for name, call in calls.items():
            start = time.perf_counter()
            values[name] = call()
            best[name] = min(best[name], time.perf_counter() - start)
    return values, best


def pct(values, qs=(50, 100)) -> str:
    return "/".join(f"{np.percentile(values, q):.3g}" for q in qs)


def bench_class(size_class: str) -> list:
    programs, gen_s = timed(lambda: programs_of(size_class))
    count = len(programs)
    sizes = program_sizes(programs)
    print(f"\n== {size_class}: {count} programs (built and lowered in {gen_s:.1f} s); "
          f"median/max tasks {pct(sizes[:, 0])}, edges {pct(sizes[:, 1])}, "
          f"flows {pct(sizes[:, 2])}, links {pct(sizes[:, 4])}")
    calls = {"simulator": lambda: [simulate(p) for p in programs]}
    cold = {}
    for level in LEVELS:
        for with_metrics in (False, True):
            def call(level=level, w=with_metrics):
                return default_evaluator().run(programs, level, with_metrics=w)
            _, cold[level, with_metrics] = timed(call)  # the first call compiles
            calls[level, with_metrics] = call
    # forkserver: forking this process, whose JAX runtime runs threads, is unsafe
    pool = (multiprocessing.get_context("forkserver").Pool(ARGS.sim_processes)
            if ARGS.sim_processes > 1 else None)
    if pool is not None:
        pool.map(simulated_time, programs[: ARGS.sim_processes])  # start every worker
        calls["pool"] = lambda: pool.map(simulated_time, programs, chunksize=1)
    try:
        values, seconds = timed_in_turn(calls, ARGS.repeat)
    finally:
        if pool is not None:
            pool.terminate()
    sim_s, pool_s = seconds["simulator"], seconds.get("pool")
    reference = np.array([s.iteration_time_s for s in values["simulator"]])
    print(f"simulator          {count / sim_s:10.1f} variants/s ({1e3 * sim_s / count:.1f} ms "
          f"per variant)")
    if pool_s:
        print(f"simulator x {ARGS.sim_processes}      {count / pool_s:10.1f} variants/s on "
              f"{ARGS.sim_processes} processes")
    picked = slice(None, None, max(1, count // ARGS.loop))
    loop, loop_sims = programs[picked][: ARGS.loop], values["simulator"][picked][: ARGS.loop]
    for level in LEVELS:
        out, level_s, metric_s = values[level, True], seconds[level, False], seconds[level, True]
        error = (out["iteration_time_s"] - reference) / reference
        on_all = (f" ({pool_s / level_s:.2f} x the simulator on {ARGS.sim_processes} processes)"
                  if pool_s else "")
        print(f"{level:5s} (batched)    {count / level_s:10.1f} variants/s = "
              f"{sim_s / level_s:7.2f} x simulator{on_all}; relative error vs simulator "
              f"median/max {pct(np.abs(error))}"
              + (f", never above: {bool(np.all(error <= 1e-6))}" if level == "bound" else ""))
        print(f"      with metrics {count / metric_s:10.1f} variants/s = "
              f"{sim_s / metric_s:7.2f} x simulator; padding overhead "
              f"{np.mean(out['padding_overhead']):.2f}; first call, compiling: "
              f"{cold[level, False]:.1f} s")
        if level == "exact":
            print(f"      steps median/max {pct(out['steps'])}; flows moving at once "
                  f"median/p99/max {pct(out['max_active_flows'], (50, 99, 100))}; "
                  f"water-filling rounds max {out['waterfill_rounds'].max()}; "
                  f"status counts {np.bincount(out['status']).tolist()}")
        loop_s = per_variant_loop(level, loop, loop_sims)
        default_evaluator().run(loop, level, with_metrics=False)
        _, batched_s = timed(lambda level=level: default_evaluator().run(loop, level,
                                                                   with_metrics=False),
                             ARGS.repeat)
        print(f"      {len(loop)} of them: Python loop of jitted single calls "
              f"{1 / loop_s:.1f} variants/s, batched {len(loop) / batched_s:.1f} variants/s "
              f"({loop_s * len(loop) / batched_s:.2f} x the loop)")
    return programs


def bench_many(distinct: list, count: int) -> None:
    programs = [distinct[i % len(distinct)] for i in range(count)]
    for with_metrics in (False, True):
        default_evaluator().run(distinct, "bound", with_metrics=with_metrics)  # compile
        out, seconds = timed(lambda w=with_metrics: default_evaluator().run(programs, "bound",
                                                                        with_metrics=w))
        print(f"\nbound over {count} variants ({len(distinct)} distinct programs), metrics "
              f"{'on ' if with_metrics else 'off'}: {count / seconds:10.1f} variants/s, "
              f"{np.sum(out['status'] == 0)} ok")
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    print(f"peak resident memory of this process: {peak_gb:.2f} GB")


def baseline_kernels(rev: str):
    """``kernels/`` as of git revision ``rev``, imported as a package of its own."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    archive = subprocess.run(["git", "archive", rev, "kernels"], cwd=root, capture_output=True)
    if archive.returncode:
        raise SystemExit(f"--baseline {rev}: {archive.stderr.decode().strip()}")
    where = tempfile.mkdtemp(prefix="kernels-baseline-")
    atexit.register(shutil.rmtree, where)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(where, filter="data")
    package = os.path.join(where, "kernels")
    spec = importlib.util.spec_from_file_location(
        "kernels_baseline", os.path.join(package, "__init__.py"),
        submodule_search_locations=[package])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its relative imports look it up there
    spec.loader.exec_module(module)
    return module


def compare_exact(size_class: str, kernels: dict) -> None:
    """Seconds of each version's exact kernel (``kernels``: name -> package), in turn.

    The inputs are the same for all: the class's programs (or ``--count`` of them spread
    over it: shorter calls fit more rounds) encoded at one shape, with
    the slots the most demanding program needs by its simulated schedule. Two forms:
    ``map``, the unbatched kernel over the variants one after another (``lax.map``,
    the driver's form on CPU), and ``vmap``, the batched kernel in lockstep (its form
    on accelerators). Neither compilation nor the inputs' transfer is timed.
    """
    programs = programs_of(size_class)
    sims = [simulate(p) for p in programs]
    slots = tuple(int(n) for n in np.max([exact_slots(p, s.task_start_s, s.task_end_s)
                                          for p, s in zip(programs, sims, strict=True)], axis=0))
    arrays = jax.device_put(encode(programs))  # once: time the kernels, not the copies
    forms = {
        "map": lambda exact: jax.jit(lambda a: jax.lax.map(
            functools.partial(exact, slots=slots, batched=False), a)),
        "vmap": lambda exact: jax.jit(jax.vmap(functools.partial(exact, slots=slots))),
    }
    calls = {(form, name): functools.partial(make(package.exact), arrays)
             for form, make in forms.items() for name, package in kernels.items()}
    values = {key: jax.block_until_ready(call()) for key, call in calls.items()}  # compiles
    timers = {key: lambda call=call: jax.block_until_ready(call()) for key, call in calls.items()}
    rounds = [timed_in_turn(timers, 1)[1] for _ in range(ARGS.repeat)]
    seconds = {key: min(r[key] for r in rounds) for key in calls}
    statuses = np.bincount(np.asarray(values["map", "tree"].status), minlength=4).tolist()
    print(f"\n== {size_class}: {len(programs)} programs at one shape, slots {slots}, "
          f"status counts {statuses}")
    base, tree = kernels
    for form in forms:
        same = all(np.array_equal(np.asarray(a), np.asarray(b))
                   for a, b in zip(values[form, base], values[form, tree], strict=True))
        print(f"exact {form:4s}  {base} {seconds[form, base]:8.3f} s, {tree} "
              f"{seconds[form, tree]:8.3f} s: {tree}/{base} = "
              f"{seconds[form, tree] / seconds[form, base]:.3f} (median of the rounds' ratios "
              f"{np.median([r[form, tree] / r[form, base] for r in rounds]):.3f}); "
              f"identical results: {same}")


def main() -> None:
    if ARGS.quick:
        ARGS.count, ARGS.many, ARGS.loop = ARGS.count or 6, min(ARGS.many, 1000), 2
    print(f"devices: {jax.devices()}")
    if ARGS.baseline:
        import xsweep.kernels

        kernels = {"baseline": baseline_kernels(ARGS.baseline), "tree": xsweep.kernels}
        print(f"exact kernel of kernels/ at {ARGS.baseline} (baseline) against the working "
              f"tree's (tree); fastest of {ARGS.repeat} rounds, in turn")
        for size_class in ARGS.classes:
            compare_exact(size_class, kernels)
        return
    first = None
    for size_class in ARGS.classes:
        programs = bench_class(size_class)
        first = programs if first is None else first
    if ARGS.many and first:
        bench_many(first, ARGS.many)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
