"""``xsweep plan PLAN``: DP groups, rings, chunks, resharding, memory and workload of a plan."""

from __future__ import annotations

from xsweep.cli.common import emit, json_text
from xsweep.plan.analysis import analyze
from xsweep.plan.lower import lower
from xsweep.plan.profile import load_profile
from xsweep.plan.summary import format_plan, plan_summary
from xsweep.spec import load_catalog, load_plan


def add_plan_inputs(parser) -> None:
    """Arguments shared by the commands that read one plan."""
    parser.add_argument("plan", metavar="PLAN", help="deployment plan (.pbtxt or .json)")
    parser.add_argument("--catalog", action="append", default=[], metavar="FILE",
                        help="YAML merged over the built-in GPU/NIC/model catalog (repeatable)")
    parser.add_argument("--profile", metavar="FILE",
                        help="measured per-layer times (YAML or CSV) overriding the estimates")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")


def read_plan(args):
    """Load, validate, analyse and lower the plan named on the command line."""
    catalog = load_catalog(args.catalog)
    plan = load_plan(args.plan, catalog)
    profile = load_profile(args.profile, catalog) if args.profile else None
    analysis = analyze(plan, catalog, profile=profile)
    return analysis, lower(analysis)


def register(subparsers) -> None:
    p = subparsers.add_parser("plan", help="show groups, rings, chunks, resharding and memory",
                              description=__doc__)
    add_plan_inputs(p)
    p.set_defaults(run=run)


def run(args) -> int:
    analysis, program = read_plan(args)
    summary = plan_summary(analysis, program)
    emit(json_text(summary) if args.json else format_plan(summary))
    return 0
