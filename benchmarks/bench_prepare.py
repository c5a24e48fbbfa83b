"""Host-side preparation of one plan for the kernels, per plan, stage by stage.

Run: ``python benchmarks/bench_prepare.py [--gpus 8 16 32 64] [--global-batch 256]
[--repeat 3] [--sample 8] [--gpt3]``.

Times, in microseconds per plan, what ``Evaluator.evaluate`` does on the host before
the kernels run: validation (``evaluation_plans``), the size estimate that cuts a call
into host chunks, the analysis, the lowering (templates kept between plans, as the
evaluator keeps them) and the bound's host layout (contention-free durations in the
block layout, structure kept per template). Three sets of plans, one process:

* **all-distinct** (``plans.distinct``): every plan its own structure, measured with
  every memo and cache empty;
* **sweep-like, new numbers** (``plans.sweep_like``): the process has seen every
  structure, through the variants on the first GPU model of each kind; measured on the
  variants on the second model (the NIC and recompute variants of each), whose numbers
  it has not seen;
* **sweep-like, again**: fresh plan objects of variants the process has seen;
* with ``--gpt3``, the buildable plans of ``spaces/gpt3-175b-64.yaml`` (GPT-3 175B on 64
  A100-80GB): the first plan of each program structure, from empty memos and caches,
  then the others, numeric variants (recompute, sequence parallelism) of the structures
  the first set built: what lowering costs when only numbers change.

Beside each stage, the ratio to the reference way of computing it in the same run, on
every ``--sample``-th plan: validation, chunking and analysis with every memo emptied
before the stage (``xsweep.memo.clear_memos``: as a fresh process meets the plan),
lowering from scratch (``lower(..., templates=None)``) and the layout from scratch
(``blocks.block_layout`` without the per-structure memo).

Times are the CPU time of this process (``time.process_time``): on a machine shared
with other work they move less than wall time, and the host stages run on one core.
Each set is measured ``--repeat`` times from the same state (memos emptied, new
template cache) and the quickest run is shown.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from plans import distinct, gpt3_space_plans, sweep_like

from xsweep.evaluator import blocks
from xsweep.evaluator.arguments import evaluation_plans
from xsweep.evaluator.derived import Derived
from xsweep.evaluator.evaluator import _host_chunks
from xsweep.evaluator.tuning import tuning
from xsweep.memo import clear_memos
from xsweep.plan.analysis import analyze
from xsweep.plan.lower import TemplateCache, lower
from xsweep.spec import load_catalog

STEP_COST = tuning("cpu", "bound").step_cost
GPT3_SPACE = Path(__file__).resolve().parent.parent / "spaces" / "gpt3-175b-64.yaml"
STAGES = ("validate", "chunks", "analyse", "lower", "layout")


def _per_plan_us(seconds: float, n: int) -> float:
    return seconds / n * 1e6


class Preparer:
    """The evaluator's host stages, with what it keeps between calls."""

    def __init__(self, catalog) -> None:
        self.catalog = catalog
        self.templates = TemplateCache()
        self.derived = Derived()

    def run(self, plans: list) -> tuple[dict[str, float], list, list]:
        """Per-plan microseconds of each stage; the analyses and programs."""
        n, us, clock = len(plans), {}, time.process_time
        start = clock()
        plans = evaluation_plans(plans, self.catalog)
        us["validate"] = _per_plan_us(clock() - start, n)
        start = clock()
        _host_chunks(plans)
        us["chunks"] = _per_plan_us(clock() - start, n)
        start = clock()
        analyses = [analyze(p, self.catalog) for p in plans]
        us["analyse"] = _per_plan_us(clock() - start, n)
        start = clock()
        programs = [lower(a, templates=self.templates, names=False) for a in analyses]
        us["lower"] = _per_plan_us(clock() - start, n)
        start = clock()
        for p in programs:
            self.derived.layout(p, self.derived.form(p, STEP_COST)[0])
        us["layout"] = _per_plan_us(clock() - start, n)
        us["total"] = sum(us[s] for s in STAGES)
        return us, analyses, programs


def reference_us(catalog, plans: list, sample: int) -> dict[str, float]:
    """Per-plan microseconds of each stage done the reference way (see the module's
    description) on every ``sample``-th plan."""
    us = dict.fromkeys(STAGES, 0.0)
    plans = plans[::sample]
    for plan in plans:
        for stage, run, arguments in (("validate", evaluation_plans, ([plan], catalog)),
                                      ("chunks", _host_chunks, ([plan],)),
                                      ("analyse", analyze, (plan, catalog))):
            clear_memos()
            start = time.process_time()
            run(*arguments)
            us[stage] += time.process_time() - start
        a = analyze(plan, catalog)
        start = time.process_time()
        program = lower(a, templates=None, names=False)
        us["lower"] += time.process_time() - start
        start = time.process_time()
        blocks.block_layout(program, blocks.block_form(program, STEP_COST)[0])
        us["layout"] += time.process_time() - start
    us = {stage: _per_plan_us(seconds, len(plans)) for stage, seconds in us.items()}
    return us | {"total": sum(us.values())}


def report(label: str, n: int, us: dict[str, float], ref: dict[str, float]) -> None:
    columns = (*STAGES, "total")
    print(f"{label:<26}{n:>7}" + "".join(f"{us[s]:>10.0f}" for s in columns))
    print(f"{'  reference':<26}{'':>7}" + "".join(f"{ref[s]:>10.0f}" for s in columns))
    print(f"{'  reference / this':<26}{'':>7}" + "".join(f"{ref[s] / us[s]:>9.1f}x"
                                                          for s in columns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--global-batch", type=int, default=256)
    parser.add_argument("--sample", type=int, default=8,
                        help="reference figures on every n-th plan (they are slow)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="measure each set this many times, from the same state, and "
                             "keep the quickest run (the machine may be shared)")
    parser.add_argument("--gpt3", action="store_true",
                        help="also the plans of spaces/gpt3-175b-64.yaml, first of each "
                             "structure and numeric variants")
    args = parser.parse_args()
    catalog = load_catalog()
    print(f"{'us per plan':<26}{'plans':>7}" + "".join(f"{s:>10}" for s in (*STAGES, "total")))

    def quickest(measure) -> dict[str, float]:
        """The run of least total of ``measure()`` (from a fresh state each time)."""
        runs = []
        for _ in range(args.repeat):
            clear_memos()
            runs.append(measure(Preparer(catalog)))
        return min(runs, key=lambda us: us["total"])

    plans = distinct(tuple(args.gpus), args.global_batch)
    us = quickest(lambda prep: prep.run(plans)[0])
    report("all-distinct", len(plans), us, reference_us(catalog, plans, args.sample))

    def variants(second: bool) -> list:
        return [p for p in sweep_like(tuple(args.gpus), args.global_batch)
                if (p.cluster.nodes[0].gpu in ("A100-80GB", "H200")) == second]

    def new_numbers(prep: Preparer) -> dict[str, float]:
        prep.run(variants(False))  # every structure, on the first GPU model of each kind
        return prep.run(variants(True))[0]

    def again(prep: Preparer) -> dict[str, float]:
        prep.run(variants(True))
        return prep.run(variants(True))[0]

    plans = variants(True)
    report("sweep-like, new numbers", len(plans), quickest(new_numbers),
           reference_us(catalog, plans, args.sample))
    report("sweep-like, again", len(plans), quickest(again),
           reference_us(catalog, plans, args.sample))
    if args.gpt3:
        groups = gpt3_space_plans(GPT3_SPACE)
        first = [plan for plan, _ in groups]
        numbers = [plan for _, others in groups for plan in others]

        def in_walk_order(prep: Preparer) -> tuple[dict[str, float], dict[str, float]]:
            """Per structure, as a sweep's unit meets it: its first plan, then its numeric
            variants; per-plan microseconds of each kind."""
            built, refilled = dict.fromkeys(STAGES, 0.0), dict.fromkeys(STAGES, 0.0)
            for plan, others in groups:
                for into, plans in ((built, [plan]), (refilled, others)):
                    if plans:
                        for stage, us in prep.run(plans)[0].items():
                            if stage in into:
                                into[stage] += us * len(plans)
            return ({s: us / len(first) for s, us in built.items()},
                    {s: us / max(1, len(numbers)) for s, us in refilled.items()})

        runs = []
        for _ in range(args.repeat):
            clear_memos()
            runs.append(in_walk_order(Preparer(catalog)))
        built, refilled = (min((run[k] for run in runs), key=lambda us: sum(us.values()))
                           for k in (0, 1))
        for us in (built, refilled):
            us["total"] = sum(us[s] for s in STAGES)
        report("gpt3-175b-64, structures", len(first), built,
               reference_us(catalog, first, args.sample))
        report("gpt3-175b-64, new numbers", len(numbers), refilled,
               reference_us(catalog, numbers, args.sample))

if __name__ == "__main__":
    main()
