"""``xsweep plan PLAN``: DP groups, rings, chunks, resharding, memory and workload of a plan."""

from __future__ import annotations

from xsweep.cli.common import ALLOW_OOM_HELP, emit, json_text, memory_check, wrong_kind
from xsweep.pipeline import prepare, resolve_inputs
from xsweep.plan.summary import format_plan, plan_summary
from xsweep.spec.catalog import load_catalog


def add_plan_inputs(parser) -> None:
    """Arguments shared by the commands that read one plan."""
    parser.add_argument("plan", metavar="PLAN", help="deployment plan (.pbtxt or .json)")
    parser.add_argument("--catalog", action="append", default=[], metavar="FILE",
                        help="YAML merged over the built-in GPU/NIC/model catalog (repeatable)")
    parser.add_argument("--profile", metavar="FILE",
                        help="measured per-layer times (YAML or CSV) overriding the estimates")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.add_argument("--allow-oom", action="store_true", help=ALLOW_OOM_HELP)


def prepare_from(args):
    """The plan named on the command line, prepared with the catalog and profile given.

    Raises:
        InputError: the file is not a plan (a sweep, a catalog: named as such) or not a
            valid one.
        CheckFailed: the plan does not fit in GPU memory and ``--allow-oom`` is not given
            (before its program is built).
    """
    error = wrong_kind(args.plan, "a deployment plan", "plan")
    if error is not None:
        raise error
    catalog, profile = resolve_inputs(load_catalog(args.catalog), args.profile)
    return prepare(args.plan, catalog, profile,
                   before_lowering=memory_check(args.plan, args.allow_oom))


def register(subparsers) -> None:
    p = subparsers.add_parser("plan", help="show groups, rings, chunks, resharding and memory",
                              description=__doc__ + " A plan that does not fit in GPU memory "
                              "fails (exit 1) unless --allow-oom is given.")
    add_plan_inputs(p)


def run(args) -> int:
    prepared = prepare_from(args)
    summary = plan_summary(prepared.analysis, prepared.program)
    emit(json_text(summary) if args.json else format_plan(summary))
    return 0
