"""Wall time of the exact simulator on one iteration of Llama-2-7B at scale.

Run: ``python benchmarks/bench_sim.py [--gpus 128 512 1024] [--mix h100 half-a100]``.
Prints, per plan, the program's size, the time to build it (analysis + lowering),
the wall time of one simulated iteration, the events and events per second.
Plans: TP 4 x PP 4 per replica (1F1B, 16 micro-batches), as many replicas as the
GPUs hold (see ``benchmarks/plans.py``).
"""

from __future__ import annotations

import argparse
import time

from plans import llama7b_plan

from xsweep.plan.analysis import analyze
from xsweep.plan.lower import lower
from xsweep.sim import simulate
from xsweep.spec import load_catalog


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[128, 512, 1024])
    parser.add_argument("--mix", nargs="+", default=["h100", "half-a100"])
    args = parser.parse_args()
    catalog = load_catalog()
    print(f"{'plan':<28}{'tasks':>8}{'flows':>9}{'build s':>9}{'sim s':>8}{'events':>9}"
          f"{'events/s':>11}{'iteration s':>13}")
    for gpus in args.gpus:
        for mix in args.mix:
            plan = llama7b_plan(gpus, mix)
            t0 = time.perf_counter()
            program = lower(analyze(plan, catalog))
            t1 = time.perf_counter()
            result = simulate(program)
            t2 = time.perf_counter()
            print(f"{plan.name:<28}{program.num_tasks:>8}{program.num_flows:>9}"
                  f"{t1 - t0:>9.2f}{t2 - t1:>8.2f}{result.num_events:>9}"
                  f"{result.num_events / (t2 - t1):>11,.0f}{result.iteration_time_s:>13.4f}")


if __name__ == "__main__":
    main()
