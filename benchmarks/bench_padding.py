"""What padding costs in kernel time, not in array cells: each variant at the shape the
evaluator ran it at against the same variant at its own, unpadded shape.

Run: ``python benchmarks/bench_padding.py [--family distinct] [--sample 16]``.

The padding overhead ``xsweep.evaluate`` reports counts array cells: padded cells per
real cell of each chunk's arrays. For the bound, whose chunks run their rows vmapped
(every cell takes part in every step), cells are a fair measure of the work padding
adds. The exact level on a CPU runs a chunk's rows one after another over the rows that
hold a variant (an empty row is neither read nor run, and is not counted), and within a
row its loop's steps cost by its slots far more than by its sizes, so cells overstate
what padding costs there. This benchmark measures it.

In one process on one CPU device (as each worker of an evaluation runs), it evaluates a
family's two sets of plans (``bench_end_to_end.py``'s) at the exact level as
``xsweep.evaluate`` does, recording the shape, rows and slots of every variant's chunk in
the second set (the "warm in process" run there). For a sample of the variants it then times the exact kernel alone
(loading and compiling excluded, the best of three calls):

* **as run**: the variant at its chunk's shape, rows and slots, the other rows empty;
* **own shape**: the variant alone in one row, at its own sizes (not rounded) and its
  own slots (those sized from its bound schedule, doubled until it does not overflow).

It prints the sum of each, their ratio (the padding's cost: 1.0 is none), and the cells
ratio of the same variants for comparison. Every own shape compiles once, seconds each.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", default="distinct", choices=("distinct", "sweep-like"))
    parser.add_argument("--sample", type=int, default=16, help="variants timed alone")
    args = parser.parse_args()
    os.environ.setdefault("XSWEEP_CPU_DEVICES", "1")  # one device, as in a worker process

    import jax
    import numpy as np
    from xsweep.kernels import Status

    import xsweep
    from xsweep.evaluator import driver, executables
    from xsweep.evaluator.shapes import Shape, cells, program_sizes
    from xsweep.evaluator.tuning import tuning

    sys.path.insert(0, str(HERE))
    from bench_end_to_end import plans_of

    # The slots and (rows, *shape) key of the chunk each program last ran in (the one it
    # did not overflow in) and, for the timing calls below, the kernel time of the last
    # call (after loading).
    chunk_of: dict[int, tuple] = {}
    last_run = [0.0]
    dispatch, call = driver._Run.dispatch, executables._Kernel.__call__

    def recording_dispatch(self, programs, sizes, with_metrics, key):
        for p in programs:
            chunk_of[id(p)] = key
        return dispatch(self, programs, sizes, with_metrics, key)

    def timed_call(self, *arguments):
        out = call(self, *arguments)  # loads or compiles the executable, and runs it once
        best = np.inf
        for _ in range(3):
            start = time.perf_counter()
            out = jax.block_until_ready(call(self, *arguments))
            best = min(best, time.perf_counter() - start)
        last_run[0] = best
        return out

    evaluator = xsweep.Evaluator(processes=1)
    # the first set first, as bench_end_to_end.py's "warm in process" run: the shapes the
    # second set runs at are those a process that has evaluated plans before chooses
    evaluator.run([prepared.program for prepared in
                   evaluator.prepare(plans_of(args.family, False, False))], "exact",
                  with_metrics=False)
    plans = plans_of(args.family, True, False)
    programs = [prepared.program for prepared in evaluator.prepare(plans)]
    driver._Run.dispatch = recording_dispatch
    try:
        result = evaluator.run(programs, "exact", with_metrics=False)
    finally:
        driver._Run.dispatch = dispatch
    sizes = program_sizes(programs)
    pick = np.linspace(0, len(programs) - 1, min(args.sample, len(programs))).astype(int)

    cfg = driver._Config("exact", np.float32, evaluator.max_rounds, False, False, False,
                         tuning("cpu", "exact"))
    fmt = driver._format("exact", cfg.tune.step_cost, evaluator._derived)
    # own shapes compile in an evaluator that keeps nothing on disk
    alone_in = xsweep.Evaluator(processes=1, compile_cache=False)
    runs = {"as run": driver._Run(cfg, fmt, evaluator._executables, evaluator._derived),
            "own": driver._Run(cfg, fmt, alone_in._executables, alone_in._derived)}

    def kernel_time(how, program, size, key) -> tuple[float, int]:
        out = runs[how].dispatch([program], size[None], False, key)
        return last_run[0], int(np.asarray(out["packed"]["ints"])[0, 0])

    executables._Kernel.__call__ = timed_call
    as_run = own = cells_run = cells_own = 0.0
    try:
        for i in pick:
            program = programs[i]
            key = chunk_of[id(program)]
            padded, status = kernel_time("as run", program, sizes[i], key)
            assert status == result["status"][i], (status, result["status"][i])
            need = tuple(int(n) for n in driver._initial_slots(
                [program], evaluator._executables, evaluator._derived)[0])
            own_shape = tuple(int(n) for n in sizes[i])
            while True:
                alone, status = kernel_time("own", program, sizes[i],
                                            driver.ChunkKey(1, own_shape, (), need))
                if status != Status.OVERFLOW:
                    break
                need = (2 * need[0], 2 * need[1])
            as_run += padded
            own += alone
            cells_run += cells(Shape(*key.shape))  # the rows run: its own
            cells_own += cells(Shape(*own_shape))
            print(f"  variant {i:4d}: tasks {sizes[i][0]:5d}, flows {sizes[i][2]:5d}; as run "
                  f"{padded * 1e3:7.2f} ms (rows {key.rows}, shape {key.shape}, slots "
                  f"{key.slots}); own shape {alone * 1e3:7.2f} ms (slots {need})",
                  file=sys.stderr)
    finally:
        executables._Kernel.__call__ = call
    print(f"{args.family}, exact level, {len(pick)} of {len(programs)} variants: kernel time "
          f"as run {as_run:.3f} s, at their own shapes {own:.3f} s: padding costs "
          f"{as_run / own:.2f}x in time; the same variants' arrays hold "
          f"{cells_run / cells_own:.1f}x their cells")


if __name__ == "__main__":
    main()
