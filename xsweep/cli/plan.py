"""``xsweep plan PLAN``: DP groups, rings, chunks, resharding, memory and workload of a plan."""

from __future__ import annotations

from xsweep.cli.common import emit, json_text
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


def prepare_from(args):
    """The plan named on the command line, prepared with the catalog and profile given."""
    catalog, profile = resolve_inputs(load_catalog(args.catalog), args.profile)
    return prepare(args.plan, catalog, profile)


def register(subparsers) -> None:
    p = subparsers.add_parser("plan", help="show groups, rings, chunks, resharding and memory",
                              description=__doc__)
    add_plan_inputs(p)


def run(args) -> int:
    prepared = prepare_from(args)
    summary = plan_summary(prepared.analysis, prepared.program)
    emit(json_text(summary) if args.json else format_plan(summary))
    return 0
