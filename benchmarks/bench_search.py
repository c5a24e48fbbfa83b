"""Search quality and throughput of ``xsweep optimize`` on a space small enough to enumerate.

Run: ``python benchmarks/bench_search.py [--trials 1000] [--seeds 0 1 2] [--skip-quality]``.

1. Exhaustive answer: ``xsweep sweep``'s funnel over every point of
   ``spaces/search-bench.yaml`` (its front equals evaluating every point exactly). The
   deadline is set between the front's fastest and slowest training times so that it
   binds; the optimum is the cheapest exact plan within it (with one global batch,
   training time is proportional to iteration time, so that plan is on the front).
2. For NSGA-II, TPE and random search, several seeds, ``--trials`` trials each (goal:
   at most 5% of the points): the multi-objective study's hypervolume over the
   exhaustive front's (reference point: 1.1 x the worst exact value of each objective;
   goal >= 95%), and the single-objective study (cost per run under the deadline):
   its best cost over the optimum (goal: within 1%). Evaluations used and wall time.
3. Throughput: trials per second of ``optimize`` with batch 256 against the same
   study run one trial per call (``study.optimize`` with an objective that plans and
   evaluates one point exactly), both on SQLite files, in this process.

Everything runs in one session (:class:`xsweep.search.evaluation.Session`): a plan
evaluated by an earlier step is not evaluated again by a later one.

Ratios are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
SPACE = REPO_ROOT / "spaces" / "search-bench.yaml"
OBJECTIVES = ("iteration_time_s", "cost_per_run_usd")


def hypervolume_2d(points: np.ndarray, reference: np.ndarray) -> float:
    """Area dominated by ``points`` (minimised, float[n, 2]) below ``reference``."""
    inside = points[(points < reference).all(axis=1)]
    if not len(inside):
        return 0.0
    inside = inside[np.lexsort((inside[:, 1], inside[:, 0]))]
    area, best_y = 0.0, reference[1]
    for x, y in inside:
        if y < best_y:
            area += (reference[0] - x) * (best_y - y)
            best_y = y
    return area


def exhaustive(work: Path, session) -> dict:
    import xarray as xr

    from xsweep.search.sweep.run import Options, run_sweep

    began = time.perf_counter()
    outcome = run_sweep(SPACE, Options(out_dir=work / "sweep"), session=session)
    spent = time.perf_counter() - began
    ds = xr.open_zarr(outcome.folder / "sweep.zarr")
    exact = ((ds["level"] == "exact") & ds["feasible"] & (ds["status"] == "ok")).values.ravel()
    values = np.stack([ds[name].values.ravel()[exact] for name in OBJECTIVES], axis=1)
    all_days = dict(zip(ds["point"].values.ravel().tolist(),
                        ds["training_time_s"].values.ravel() / 86_400, strict=True))
    days = ds["training_time_s"].values.ravel()[exact] / 86_400
    front = np.array([[row[name] for name in OBJECTIVES] for row in outcome.summary["front"]])
    front_days = np.array([all_days[row["point"]] for row in outcome.summary["front"]])
    deadline = float(np.sqrt(front_days.min() * front_days.max()))
    reference = 1.1 * values.max(axis=0)
    return {"points": int(outcome.summary["points"]), "exact": int(exact.sum()),
            "front": front, "reference": reference, "hv": hypervolume_2d(front, reference),
            "deadline_days": deadline, "optimum_usd": float(values[days <= deadline, 1].min()),
            "wall_s": spent}


def search(space: Path, work: Path, name: str, sampler: str, seed: int, trials: int,
           batch: int, session) -> tuple[object, float]:
    from xsweep.search.optimize.run import Options, run_optimize

    folder = work / f"{name}-{sampler}-{seed}"
    began = time.perf_counter()
    outcome = run_optimize(space, Options(trials=trials, batch=batch, sampler=sampler, seed=seed,
                                          out_dir=folder, study=name), session=session)
    return outcome, time.perf_counter() - began


def quality(args, work: Path, truth: dict, session) -> None:
    document = yaml.safe_load(SPACE.read_text())
    document.update(name="search-bench-deadline", objectives=["cost_per_run_usd"],
                    constraints={"training_days_max": truth["deadline_days"]})
    single = work / "deadline.yaml"
    single.write_text(yaml.safe_dump(document, sort_keys=False))
    print(f"\n{args.trials} trials per search ({args.trials / truth['points']:.1%} of the "
          f"points), batch {args.batch}, seeds {args.seeds}")
    print(f"{'sampler':8} {'HV ratio (min/mean)':>20} {'cost/optimum-1 (max/mean)':>26} "
          f"{'exact evals':>12} {'wall s':>8}")
    for sampler in ("nsga2", "tpe", "random"):
        ratios, gaps, exact, walls = [], [], [], []
        for seed in args.seeds:
            multi, wall_m = search(SPACE, work, "multi", sampler, seed, args.trials, args.batch,
                                   session)
            front = np.array([[row[n] for n in OBJECTIVES] for row in multi.summary["best"]])
            ratios.append(hypervolume_2d(front, truth["reference"]) / truth["hv"]
                          if len(front) else 0.0)
            best, wall_s = search(single, work, "single", sampler, seed, args.trials, args.batch,
                                  session)
            found = best.summary["best"]
            gaps.append(found[0]["cost_per_run_usd"] / truth["optimum_usd"] - 1 if found
                        else float("inf"))
            exact += [multi.summary["trials"]["level"].get("exact", 0),
                      best.summary["trials"]["level"].get("exact", 0)]
            walls += [wall_m, wall_s]
        print(f"{sampler:8} {min(ratios):>9.1%} / {statistics.mean(ratios):>6.1%}     "
              f"{max(gaps):>12.2%} / {statistics.mean(gaps):>7.2%}     "
              f"{statistics.mean(exact):>9.0f} {statistics.mean(walls):>8.1f}")


def throughput(work: Path, trials: int, session) -> None:
    import optuna

    from xsweep.search.evaluation import Job, evaluate_points
    from xsweep.search.levels import Level, Status
    from xsweep.search.optimize import trials as trial_io
    from xsweep.spec import load_catalog, load_sweep

    batched, wall_b = search(SPACE, work, "throughput", "random", 7, trials, 256, session)
    rate_b = batched.summary["trials_per_s"]
    catalog = load_catalog()
    job = Job(load_sweep(SPACE, catalog), catalog)
    domains = job.sweep.domains()

    def objective(trial):
        point = trial_io.suggest_point(trial, domains)
        row, _ = evaluate_points(session, job, np.array([trial.number]), [point], ["one"],
                                 "exact")
        if (row["level"][0] != Level.EXACT or row["status"][0] != Status.OK
                or not row["feasible"][0]):
            raise optuna.TrialPruned()
        return [float(row[name][0]) for name in OBJECTIVES]

    study = optuna.create_study(storage=f"sqlite:///{work / 'one.db'}",
                                directions=["minimize", "minimize"],
                                sampler=optuna.samplers.RandomSampler(seed=7))
    single_trials = max(16, trials // 8)
    began = time.perf_counter()
    study.optimize(objective, n_trials=single_trials)
    rate_1 = single_trials / (time.perf_counter() - began)
    print(f"\nthroughput (random sampler, SQLite): batch 256: {rate_b:,.1f} trials/s "
          f"({trials} trials, {wall_b:.1f} s with start-up); one trial per call: "
          f"{rate_1:,.1f} trials/s ({single_trials} trials); ratio {rate_b / rate_1:,.1f}x")


def main() -> None:
    import optuna

    from xsweep.search.evaluation import Session

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--throughput-trials", type=int, default=1024)
    parser.add_argument("--skip-quality", action="store_true")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    session = Session()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        if not args.skip_quality:
            truth = exhaustive(work, session)
            print(f"exhaustive: {truth['points']:,} points, {truth['exact']:,} evaluated exactly "
                  f"by the funnel, {len(truth['front'])} on the front, {truth['wall_s']:.1f} s; "
                  f"deadline {truth['deadline_days']:.1f} days, cheapest plan within it "
                  f"${truth['optimum_usd']:,.0f}")
            quality(args, work, truth, session)
        throughput(work, args.throughput_trials, session)


if __name__ == "__main__":
    main()
