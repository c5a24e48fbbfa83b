"""``xsweep simulate PLAN``: exact event-driven simulation of one iteration of a plan."""

from __future__ import annotations

import sys

from xsweep.cli.common import check_output_path, emit, finishing, json_text
from xsweep.cli.plan import add_plan_inputs, prepare_from
from xsweep.outcome import format_outcome, simulate_plan
from xsweep.sim.trace import commit_trace, discard_staged, stage_trace


def register(subparsers) -> None:
    p = subparsers.add_parser("simulate", help="simulate one iteration exactly",
                              description=__doc__ + " A plan that does not fit in GPU memory "
                              "fails (exit 1) unless --allow-oom is given.")
    add_plan_inputs(p)
    p.add_argument("--trace", metavar="FILE",
                   help="write a Chrome/Perfetto trace (open in ui.perfetto.dev)")


def run(args) -> int:
    check_output_path(args.trace, "--trace")
    prepared = prepare_from(args)
    program = prepared.program
    print(f"simulating {program.num_tasks} tasks, {program.num_flows} flows ...",
          file=sys.stderr)
    result, doc = simulate_plan(prepared)
    text = json_text(doc) if args.json else format_outcome(doc)
    if args.trace is None:
        emit(text)
        return 0
    # the trace is written beside its name, then renamed there as the result is printed:
    # interrupted before, the command leaves no file; after, it has finished
    try:
        staged = stage_trace(program, result, args.trace)
        with finishing():
            commit_trace(staged, args.trace)
            print(f"trace written to {args.trace}", file=sys.stderr)
            emit(text)
    except BaseException:
        discard_staged(args.trace)
        raise
    return 0
