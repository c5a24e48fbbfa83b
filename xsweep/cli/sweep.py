"""``xsweep sweep SPACE.yaml``: every point of a design space, through the exact funnel, to a
dataset, a Pareto table and plot under ``results/<name>/``."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from xsweep.cli.common import (
    EXIT_CHECK_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    check_output_folder,
    emit,
    json_text,
    positive_int,
    refuse_other_kind,
    sweep_file_errors,
)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep", help="evaluate a sweep's grid: dataset, Pareto table and plot",
        description=__doc__ + " Progress goes to stderr; rerunning an interrupted sweep "
        "resumes it.")
    p.add_argument("space", metavar="SPACE.yaml", help="sweep definition")
    p.add_argument("-o", "--output", metavar="DIR", help="output folder (default: results/<name>)")
    p.add_argument("--json", action="store_true", help="print one JSON summary on stdout")
    p.add_argument("--catalog", action="append", default=[], metavar="FILE",
                   help="YAML merged over the built-in GPU/NIC/model catalog (repeatable)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace results of another sweep run in the output folder")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run the work on a Dask distributed cluster (e.g. tcp://host:8786)")
    p.add_argument("--exhaustive", action="store_true",
                   help="evaluate every bounded point exactly instead of pruning")
    p.add_argument("--chunk-size", type=positive_int, metavar="N",
                   help="points planned and bounded per unit of work (a unit is what a "
                   "rerun resumes from and what a Dask worker takes)")
    p.add_argument("--processes", type=positive_int, metavar="N",
                   help="worker processes that plan and bound chunks on this machine "
                   "(default: one per core, started once the work left would take this "
                   "process alone more than a few seconds; 1 runs everything in this process)")
    p.add_argument("--emit-plan", type=int, metavar="INDEX",
                   help="print the plan of point INDEX (the dataset's `point`) and exit")


def run(args) -> int:
    # before anything is imported or read: a plan or a sweep's results folder is no sweep
    refuse_other_kind(args.space, "a sweep file", "sweep", read=False)
    if args.emit_plan is None:  # the plot's process starts first: it imports beside us
        from xsweep.search.sweep.drawing import Drawer

        with contextlib.closing(Drawer()) as drawer:
            return _sweep(args, drawer)
    from xsweep.search.sweep.run import plan_of
    from xsweep.spec import plan_to_text

    with sweep_file_errors(args.space):
        found = plan_of(args.space, args.emit_plan, args.catalog)
    if not hasattr(found, "plan"):
        print(f"point {args.emit_plan}: infeasible: {found.reason}", file=sys.stderr)
        return EXIT_CHECK_FAILED
    emit(plan_to_text(found.plan).rstrip("\n"))
    return EXIT_OK


def _sweep(args, drawer) -> int:
    """Run the sweep, its plot drawn by ``drawer``."""
    from xsweep.search.progress import Progress
    from xsweep.search.sweep.run import Options, run_sweep

    check_output_folder(args.output, "--output")
    options = Options(out_dir=Path(args.output) if args.output else None,
                      catalog_files=tuple(args.catalog), overwrite=args.overwrite,
                      scheduler=args.scheduler, exhaustive=args.exhaustive,
                      processes=args.processes,
                      **({"chunk_size": args.chunk_size} if args.chunk_size else {}))
    try:
        with sweep_file_errors(args.space):
            outcome = run_sweep(args.space, options, Progress(), drawer=drawer)
    except KeyboardInterrupt:
        print("\ninterrupted: finished chunks are kept; rerun the same command to resume",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    emit(json_text(outcome.summary) if args.json else outcome.text)
    if outcome.problem:  # a work group without a feasible point: its outputs are written
        print(outcome.problem, file=sys.stderr)
        return EXIT_CHECK_FAILED
    return EXIT_OK
