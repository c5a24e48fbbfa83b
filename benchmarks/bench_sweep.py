"""End-to-end cost of ``xsweep sweep``: the quickstart cold and warm, and the large space.

Run: ``python benchmarks/bench_sweep.py [--large-budget-s 1800] [--large-runs 2] [--skip-large]
[--skip-arrays] [--skip-gpt3] [--calculon PATH] [--exhaustive-check]
[--exhaustive-large]``.

1. ``spaces/quickstart.yaml`` through the real CLI, twice, each time in a new process
   and a new output folder: first with an empty persistent compilation cache (cold),
   then with the cache the first run filled (warm). Prints both wall times, the points
   evaluated exactly and their share of the bounded points.
2. ``spaces/llama3-70b-512gpu.yaml`` in this process, end to end (planning, bound level,
   exact funnel, writing), with the compilation cache the quickstart runs filled. Prints
   points per second over the whole grid, the time in each stage and the peak memory:
   the largest sum of the resident sets of this process and its worker processes,
   sampled every 0.2 s (and this process's own peak). When the run outlasts ``--large-budget-s`` it
   is interrupted and the rate so far is printed instead, marked as partial. With
   ``--large-runs 2`` it runs again in a new process and a new folder: nothing is kept
   in memory, the kernels the first run compiled come from the disk cache (warm).

3. The grid's arrays on ``spaces/gpt3-175b-64.yaml`` and the large space, in this
   process: microseconds a point and the share of points they decide (goal: an
   infeasible point in 5 us or less, 200,000 points/s), then the whole planning of the
   GPT-3 space to the closed form, points per second.
4. ``spaces/gpt3-175b-64.yaml`` (issue 39's question: GPT-3 175B on 64 A100-80GB, the
   fastest iteration) through the real CLI, cold (a new process, an empty compilation
   cache in a folder of its own) and warm (new processes, that cache filled; the median
   of ``--gpt3-warm-runs`` runs, 3 by default, with their range): time to the
   answer, the points each tier took (planned by the grid's arrays and the planner, bounded
   in closed form, lowered and bounded, evaluated exactly) and its points per second of
   the stage's time, lowering time per plan, and peak memory. With ``--calculon PATH`` (a
   checkout of Calculon, never installed or vendored) it runs Calculon's
   ``llm-optimal-execution`` search on the same question in the same run and prints the
   ratio of the two times; without it, or when Calculon fails, it says the ratio is
   unmeasured.

With ``--exhaustive-check`` the GPT-3 space is swept again with ``--exhaustive`` (every
buildable point lowered and evaluated exactly) and the fronts and top plans compared
with the funnel's; ``--exhaustive-large`` does the same for the large space, whose
74,358 buildable points take two hours or more on 2 cores (a stopped run resumes from
its folder: ``xsweep sweep <space> --exhaustive -o <folder>``).

Before any timing the package's modules are compiled to bytecode, as an installation
has them (:func:`bytecode`).

Goals on a 2-core machine: quickstart under 60 s cold and 15 s warm; the large space at
20,000 points/s or more (warm) with a peak memory under 4 GB. Ratios to the goals are printed;
nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = REPO_ROOT / "spaces" / "quickstart.yaml"
LARGE = REPO_ROOT / "spaces" / "llama3-70b-512gpu.yaml"
GPT3 = REPO_ROOT / "spaces" / "gpt3-175b-64.yaml"
GOALS = {"cold_s": 60.0, "warm_s": 15.0, "points_per_s": 20000.0, "peak_gb": 4.0,
         "gpt3_cold_s": 10.0, "gpt3_warm_s": 2.0, "calculon_ratio": 10.0}
#: Calculon's search for the same question, relative to its checkout: the model, GPUs,
#: maximum batch, datatype, system (written by :func:`calculon_system`), output file, worker
#: count, TP overlap off (xsweep has none to match it) and its own early exit over
#: micro-batch sizes (its fastest search; the best execution is the same without it).
CALCULON_ARGS = ("llm-optimal-execution", "models/gpt3-175B.json", "64", "64", "bfloat16",
                 "{system}", "{output}", "-c", "2", "--no-tp-overlap", "--mbs-break")
#: Runs Calculon's command line with DEBUG records switched off before any is built (its
#: per-layer debug lines cost it about three quarters of its time, then are dropped);
#: its code is left as it is.
CALCULON_MAIN = ("import logging, runpy, sys; logging.disable(logging.DEBUG); "
                 "sys.argv[0] = 'calculon'; runpy.run_path('bin/calculon', run_name='__main__')")


def cli_sweep(space: Path, out: Path, env: dict, *more: str) -> tuple[float, dict]:
    """Wall time and JSON summary of one ``xsweep sweep`` in a new process."""
    began = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "xsweep.cli.main", "sweep", str(space), "-o", str(out), "--json",
         *more], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False)
    wall_s = time.perf_counter() - began
    if result.returncode != 0:
        raise SystemExit(f"xsweep sweep failed ({result.returncode}):\n{result.stderr}")
    return wall_s, json.loads(result.stdout)


def bytecode() -> str:
    """Compile the package's modules to bytecode, as installing it does (pip writes an
    installed package's bytecode, and a first run of an editable one does): every timed
    process then reads it, whatever the environment says (``PYTHONDONTWRITEBYTECODE`` would
    otherwise have each new process compile every module again, about 0.2 s). Returns the
    line that says so."""
    import compileall

    ok = all(compileall.compile_dir(REPO_ROOT / package, quiet=1)
             for package in ("xsweep", "kernels"))
    said = "set" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "not set"
    return (f"bytecode: {'compiled' if ok else 'NOT all compiled'} before any timing "
            f"(PYTHONDONTWRITEBYTECODE {said})")


def quickstart(work: Path, env: dict) -> None:
    cold_s, summary = cli_sweep(QUICKSTART, work / "cold", env)
    warm_s, again = cli_sweep(QUICKSTART, work / "warm", env)
    fronts = [[r["point"] for r in g["front"]] for g in summary["groups"]]
    assert fronts == [[r["point"] for r in g["front"]] for g in again["groups"]]
    tiers = summary["tiers"]
    print(f"quickstart: {summary['points']} points, {tiers['closed_form']} planned, "
          f"{tiers['bound']} lowered and bounded, "
          f"{summary['evaluated_exactly']} evaluated exactly "
          f"({summary['exact_share_of_bounded']:.1%} of the bounded), "
          f"{sum(len(f) for f in fronts)} on the fronts")
    print(f"  cold (empty compile cache): {cold_s:7.1f} s   goal {GOALS['cold_s']:.0f} s   "
          f"ratio {cold_s / GOALS['cold_s']:.2f}")
    print(f"  warm (cache filled)       : {warm_s:7.1f} s   goal {GOALS['warm_s']:.0f} s   "
          f"ratio {warm_s / GOALS['warm_s']:.2f}")
    print(f"  cold / warm: {cold_s / warm_s:.1f}x; stages of the warm run (s): "
          + ", ".join(f"{k} {v:.2f}" for k, v in again["timings"].items() if k.endswith("_s")))


def timed_sweep(space: Path, out: Path, env: dict) -> tuple[float, dict, float]:
    """:func:`cli_sweep` with the peak resident memory of its process tree (GB)."""
    with TreeMemory() as memory:
        wall_s, summary = cli_sweep(space, out, env)
    return wall_s, summary, memory.peak_bytes / 1e9


def answer_of(summary: dict) -> list:
    """Per work group: its front's points and each objective's top points."""
    return [(sorted(r["point"] for r in g["front"]),
             {name: [r["point"] for r in rows] for name, rows in g["top"].items()})
            for g in summary["groups"]]


def check_exhaustive(name: str, summary: dict, everything: dict, seconds: float) -> None:
    """Print whether the funnel's answer is the exhaustive run's (every point evaluated)."""
    same = answer_of(summary) == answer_of(everything)
    print(f"  {name} --exhaustive: {everything['evaluated_exactly']:,} points evaluated "
          f"exactly in {seconds:.1f} s; fronts and top plans "
          + ("equal the funnel's" if same else
             f"DIFFER: funnel {answer_of(summary)} vs exhaustive {answer_of(everything)}"))


def gpt3(work: Path, env: dict, calculon: Path | None, exhaustive: bool = False,
         warm_runs: int = 3) -> None:
    """Issue 39's space, cold and warm (the median of ``warm_runs`` runs, each in a new
    process and folder: one run of two seconds is at the mercy of the machine's other
    work), and Calculon's search when given its checkout."""
    env = env | {"XSWEEP_CACHE_DIR": str(work / "gpt3-cache")}  # empty: cold
    cold_s, summary, cold_gb = timed_sweep(GPT3, work / "gpt3-cold", env)
    warm = [timed_sweep(GPT3, work / f"gpt3-warm-{i}", env) for i in range(max(1, warm_runs))]
    times = sorted(seconds for seconds, _, _ in warm)
    warm_s, warm_gb = statistics.median(times), max(gb for _, _, gb in warm)
    again = warm[0][1]
    (group,), (same,) = summary["groups"], again["groups"]
    assert [r["point"] for r in group["front"]] == [r["point"] for r in same["front"]]
    tiers, timings = again["tiers"], again["timings"]
    best = group["front"][0]
    print(f"gpt3-175b-64: {tiers['planned']:,} points, {tiers['closed_form']:,} planned to a "
          f"closed form, {tiers['bound']:,} lowered and bounded, {tiers['exact']:,} evaluated "
          f"exactly; best point {best['point']} at {best['iteration_time_s']:.3f} s")
    spread = (f" (median of {len(times)} runs: {times[0]:.2f} to {times[-1]:.2f} s)"
              if len(times) > 1 else "")
    for name, seconds, goal in (("cold", cold_s, GOALS["gpt3_cold_s"]),
                                ("warm", warm_s, GOALS["gpt3_warm_s"])):
        print(f"  {name}: {seconds:6.2f} s to the answer{spread if name == 'warm' else ''}   "
              f"goal {goal:.0f} s   ratio {seconds / goal:.2f}   peak memory "
              f"{cold_gb if name == 'cold' else warm_gb:.2f} GB")
    rates = (("planned (arrays and planner, closed form)", tiers["planned"],
              timings.get("planning_s", 0.0)),
             ("lowered and bounded", tiers["bound"], timings.get("bound_s", 0.0)),
             ("evaluated exactly", tiers["exact"], timings.get("exact_s", 0.0)))
    for name, points, seconds in rates:
        rate = f"{points / seconds:,.0f} points/s" if seconds else "-"
        print(f"  warm, {name}: {points:,} points in {seconds:.2f} s of the stage: {rate}")
    lowered = timings.get("points_lowered", 0)
    if lowered:
        print(f"  warm, lowering: {timings.get('bound_prepare_s', 0.0) / lowered * 1e3:.1f} ms "
              "a plan (validation, analysis and lowering, per plan lowered)")
    print("  warm stages (s): " + ", ".join(f"{k} {v:.2f}" for k, v in timings.items()
                                           if k.endswith("_s")))
    if exhaustive:
        seconds, everything = cli_sweep(GPT3, work / "gpt3-exhaustive", env, "--exhaustive")
        check_exhaustive("gpt3-175b-64", summary, everything, seconds)
    peer = run_calculon(calculon, work) if calculon else None
    if peer is None:
        print("  Calculon: unmeasured" + ("" if calculon else " (no --calculon PATH)"))
        return
    peer_s, found = peer
    run = found["execution"]
    print(f"  Calculon llm-optimal-execution ({'; '.join(found['counts'])}): {peer_s:.1f} s; "
          f"xsweep is {peer_s / cold_s:.1f}x faster cold, {peer_s / warm_s:.1f}x warm   "
          f"goal {GOALS['calculon_ratio']:.0f}x")
    print(f"  Calculon's best: TP{run['tensor_par']} PP{run['pipeline_par']} "
          f"DP{run['data_par']}, micro-batch {run['microbatch_size']}, interleaving "
          f"{run['pipeline_interleaving']}, recompute {run['activation_recompute']}, "
          f"optimizer sharding {run['optimizer_sharding']}, TP {run['tensor_par_comm_type']}, "
          f"DP overlap {run['data_par_overlap']}: {found['stats']['total_time']:.3f} s "
          "(its own model)")


def arrays() -> None:
    """The grid's arrays alone (:mod:`xsweep.search.space.screen`), in this process, in the
    sweep's chunks of 1,024 points: microseconds a point (columns and rules) and the share
    they decide; then the whole planning of issue 39's space to the closed form (arrays,
    per-point planner for the rest, closed form per layout), points per second."""

    from xsweep.search.evaluation import Job, Session
    from xsweep.search.levels import Level
    from xsweep.search.space.grid import Grid
    from xsweep.search.space.screen import columns_of_grid, screen
    from xsweep.search.sweep.units import bound_chunk, bound_walk
    from xsweep.spec import load_catalog, load_sweep

    catalog = load_catalog()
    for space in (GPT3, LARGE):
        sweep = load_sweep(space, catalog)
        grid, walk = Grid(sweep), bound_walk(sweep)
        chunks = walk.chunks(1024)
        screen(sweep, catalog, columns_of_grid(grid, walk.points(*chunks[0])))  # warm up
        began, decided = time.perf_counter(), 0
        for start, stop in chunks:
            decided += int(screen(sweep, catalog,
                                  columns_of_grid(grid, walk.points(start, stop))).infeasible.sum())
        seconds = time.perf_counter() - began
        print(f"grid arrays, {space.name}: {grid.size / seconds * 1e-3:,.0f} thousand points/s, "
              f"{seconds / grid.size * 1e6:.1f} us a point; {decided:,} of {grid.size:,} "
              f"({decided / grid.size:.1%}) proved infeasible without the planner")
    sweep = load_sweep(GPT3, catalog)
    job, session = Job(sweep, catalog), Session()
    walk = bound_walk(sweep)
    began = time.perf_counter()
    for start, stop in walk.chunks(1024):
        bound_chunk(session, job, start, stop, Level.CLOSED_FORM)
    seconds = time.perf_counter() - began
    print(f"planning {GPT3.name} to the closed form (one process, first time): "
          f"{walk.size / seconds:,.0f} points/s ({seconds:.2f} s)")


def calculon_system(checkout: Path, work: Path) -> Path:
    """Calculon's A100-80GB system file as the question needs it, written beside the
    results: bfloat16 at its float16 rates (the file lists float16 only) and no second
    memory tier (xsweep has no offload, so the search must not try one)."""
    system = json.loads((checkout / "systems" / "a100_80g.json").read_text())
    for unit in ("matrix", "vector"):
        system[unit]["bfloat16"] = system[unit]["float16"]
    system["mem2"]["GiB"] = 0
    path = work / "calculon-a100_80g.json"
    path.write_text(json.dumps(system, indent=1))
    return path


def run_calculon(checkout: Path, work: Path) -> tuple[float, dict] | None:
    """Seconds Calculon's search takes on the question (a new process, its own checkout
    on the path) and the best execution it found, or None, saying why, when it cannot run."""
    checkout = checkout.expanduser().resolve()
    if not (checkout / "calculon").is_dir() or not (checkout / "bin" / "calculon").is_file():
        print(f"  Calculon: {checkout} holds no calculon package and bin/calculon; skipped")
        return None
    output = work / "calculon.json"
    args = [a.format(system=calculon_system(checkout, work), output=output)
            for a in CALCULON_ARGS]
    env = dict(os.environ) | {"PYTHONPATH": str(checkout)}
    began = time.perf_counter()
    try:
        result = subprocess.run([sys.executable, "-c", CALCULON_MAIN, *args], cwd=checkout,
                                env=env, capture_output=True, text=True, check=False,
                                timeout=3600)
    except (OSError, subprocess.TimeoutExpired) as error:
        print(f"  Calculon: could not run ({error})")
        return None
    seconds = time.perf_counter() - began
    if result.returncode != 0 or not output.is_file():
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        print(f"  Calculon: exited {result.returncode}: " + " | ".join(tail))
        return None
    counts = [line for line in result.stdout.splitlines() if "executions" in line]
    best = json.loads(output.read_text())["0"]
    return seconds, {"counts": counts, **best}


class TreeMemory:
    """The largest resident memory of this process and its descendants together, sampled
    from ``/proc`` (Linux) in a background thread."""

    def __init__(self, every_s: float = 0.2):
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(every_s,), daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _sample(self, every_s: float) -> None:
        page = os.sysconf("SC_PAGE_SIZE")
        while not self._stop.wait(every_s):
            parents, rss = {}, {}
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:  # ended meanwhile
                    continue
                parents[int(entry.name)] = int(fields[1])
                rss[int(entry.name)] = int(fields[21]) * page
            tree, grew = {os.getpid()}, True
            while grew:
                more = {pid for pid, parent in parents.items() if parent in tree} - tree
                tree |= more
                grew = bool(more)
            self.peak_bytes = max(self.peak_bytes, sum(rss.get(pid, 0) for pid in tree))


RUNS = ("first run (its own kernels compile in it)",
        "again (new process and folder; the first run's kernels loaded from disk)")


class _OutOfTime(BaseException):
    """Raised by the budget's alarm; not an Exception, so no library swallows it."""


def large(work: Path, budget_s: float, run: int, exhaustive: bool = False) -> None:
    from xsweep.search.sweep.run import Options, run_sweep
    from xsweep.spec import load_sweep

    points = load_sweep(LARGE).grid_size()
    timings: dict = {}

    def out_of_time(signum, frame):
        raise _OutOfTime

    signal.signal(signal.SIGALRM, out_of_time)
    signal.setitimer(signal.ITIMER_REAL, budget_s, 5.0)  # and again every 5 s until caught
    began = time.perf_counter()
    finished = True
    with TreeMemory() as memory:
        try:
            outcome = run_sweep(LARGE, Options(out_dir=work / f"large-{run}"), timings=timings)
        except _OutOfTime:
            finished = False
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    wall_s = time.perf_counter() - began
    peak_gb = memory.peak_bytes / 1e9
    own_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # Linux: KiB
    stages = {k: timings.get(k, 0.0) for k in ("planning_s", "bound_s", "exact_s", "writing_s")}
    if finished:
        rate = points / wall_s
        print(f"large space, {RUNS[min(run, 2) - 1]}: {points:,} points end to end in "
              f"{wall_s:.1f} s: "
              f"{rate:,.0f} points/s   goal {GOALS['points_per_s']:,.0f}   "
              f"ratio {rate / GOALS['points_per_s']:.3f}")
        summary = outcome.summary
        tiers = summary["tiers"]
        print(f"  tiers: {tiers['planned']:,} points, {tiers['closed_form']:,} planned to a closed "
              f"form, {tiers['bound']:,} lowered and bounded")
        print(f"  evaluated exactly: {summary['evaluated_exactly']:,} "
              f"({summary['exact_share_of_bounded']:.2%} of the bounded), "
              f"{summary['status'].get('pruned', 0):,} pruned, {summary['rounds']} rounds")
    else:
        done = timings.get("points_bounded", 0)
        rate = done / wall_s
        print(f"large space, {RUNS[min(run, 2) - 1]}: PARTIAL, interrupted after {wall_s:.0f} s "
              "(--large-budget-s): "
              f"{done:,} of {points:,} points planned and bounded, {rate:,.1f} points/s so far "
              f"(goal {GOALS['points_per_s']:,.0f}, ratio {rate / GOALS['points_per_s']:.4f}); "
              f"{timings.get('points_exact', 0):,} evaluated exactly")
    total = sum(stages.values()) or 1.0
    print("  time by stage: " + ", ".join(
        f"{k[:-2]} {v:.1f} s ({v / total:.0%})" for k, v in stages.items()))
    print(f"  peak memory (resident, this process and its workers together): {peak_gb:.2f} GB"
          f"   goal {GOALS['peak_gb']:.0f} GB   ratio {peak_gb / GOALS['peak_gb']:.2f} "
          f"(this process alone: {own_gb:.2f} GB)")
    if exhaustive and finished:
        began = time.perf_counter()
        everything = run_sweep(LARGE, Options(out_dir=work / f"large-{run}-exhaustive",
                                              exhaustive=True)).summary
        check_exhaustive("large space", outcome.summary, everything,
                         time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large-budget-s", type=float, default=1800.0,
                        help="interrupt the large space after this many seconds (default 1800)")
    parser.add_argument("--skip-large", action="store_true")
    parser.add_argument("--large-runs", type=int, default=1,
                        help="run the large space this many times, each into a new folder "
                             "(the second finds the kernels the first compiled; default 1)")
    parser.add_argument("--skip-quickstart", action="store_true")
    parser.add_argument("--skip-gpt3", action="store_true")
    parser.add_argument("--gpt3-warm-runs", type=int, default=3,
                        help="warm runs of issue 39's space; the median is reported "
                             "(default 3)")
    parser.add_argument("--skip-arrays", action="store_true")
    parser.add_argument("--exhaustive-check", action="store_true",
                        help="run the GPT-3 space with --exhaustive too and compare fronts "
                             "and top plans (about 2 minutes on 2 cores)")
    parser.add_argument("--exhaustive-large", action="store_true",
                        help="the same for the large space (every buildable point, about "
                             "74,000, evaluated exactly: two hours or more on 2 cores)")
    parser.add_argument("--calculon", type=Path, metavar="PATH",
                        help="a checkout of Calculon: run its search on the GPT-3 question too")
    parser.add_argument("--large-run", type=int, help=argparse.SUPPRESS)  # a later run, in
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)  # a process of its own
    args = parser.parse_args()
    if args.large_run:  # a later run of the large space, as a new process starts it
        large(args.work, args.large_budget_s, args.large_run)
        return
    print(f"cores: {len(os.sched_getaffinity(0))}; load average {os.getloadavg()[0]:.1f} at the "
          "start (other work on the machine slows every figure)")
    print(bytecode())
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        work = Path(tmp)
        cache = work / "compile-cache"
        os.environ["XSWEEP_CACHE_DIR"] = str(cache)  # this process and its children
        env = dict(os.environ)
        if not args.skip_quickstart:
            quickstart(work, env)
        if not args.skip_arrays:
            arrays()
        if not args.skip_gpt3:
            gpt3(work, env, args.calculon, args.exhaustive_check, args.gpt3_warm_runs)
        if not args.skip_large:
            large(work, args.large_budget_s, 1, args.exhaustive_large)
            for run in range(2, args.large_runs + 1):  # a new process, nothing kept in memory
                sys.stdout.flush()
                subprocess.run([sys.executable, __file__, "--work", str(work), "--large-run",
                                str(run), "--large-budget-s", str(args.large_budget_s)],
                               env=env, check=False)


if __name__ == "__main__":
    main()
