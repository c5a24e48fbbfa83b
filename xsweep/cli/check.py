"""``xsweep check FILE...``: validate deployment plans, sweeps and catalogs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from xsweep.cli.common import BAD_INPUT_ERRORS, EXIT_BAD_INPUT, EXIT_OK, error_line, one_line
from xsweep.errors import InputError
from xsweep.spec.catalog import Catalog, is_catalog_document, load_catalog
from xsweep.spec.plan_io import JSON_SUFFIXES, TEXT_SUFFIXES, load_plan
from xsweep.spec.reader import read_yaml_file
from xsweep.spec.sweep import check_sweep_names, sweep_from_dict

YAML_SUFFIXES = (".yaml", ".yml")


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "check",
        help="validate plans (.pbtxt, .json), sweeps and catalogs (.yaml)",
        description="Validate each FILE and print one line per file. A YAML file whose "
        "only top-level keys are gpus/nics/models is a catalog; any other YAML is a sweep.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE")
    parser.add_argument("--catalog", action="append", default=[], metavar="FILE",
                        help="catalog YAML merged over the defaults (repeatable)")
    return parser


def run(args: argparse.Namespace) -> int:
    """One line per FILE, in order: what it is on stdout, or why it is bad on stderr.

    Every file is checked whatever happened to the ones before; exit 2 if any is bad.
    """
    catalog = load_catalog(args.catalog)
    status = EXIT_OK
    for file in args.files:
        try:
            print(f"{file}: {describe(file, catalog, args.catalog)}", flush=True)
        except BAD_INPUT_ERRORS as error:
            print(error_line(error), file=sys.stderr, flush=True)
            status = EXIT_BAD_INPUT
        except Exception as error:  # a defect must not hide the verdict on the other files
            print(one_line(f"{file}: internal error, please report it: "
                           f"{type(error).__name__}: {error}")[:500], file=sys.stderr, flush=True)
            status = EXIT_BAD_INPUT
    return status


def describe(file: str, catalog: Catalog, catalog_files: list[str]) -> str:
    """Validate one file of any kind; return what it is, for the report line.

    Args:
        catalog: the catalog plans and sweeps are checked against.
        catalog_files: the files ``catalog`` was merged from; a catalog FILE is
            checked by merging it over them.
    """
    suffix = Path(file).suffix.lower()
    if suffix in TEXT_SUFFIXES + JSON_SUFFIXES:
        plan = load_plan(file, catalog)
        ranks = sum(node.num_gpus for node in plan.cluster.nodes)
        return (f"valid deployment plan {plan.name!r} "
                f"({ranks} ranks, {len(plan.device_groups)} device groups)")
    if suffix in YAML_SUFFIXES:
        document = read_yaml_file(file)
        if is_catalog_document(document):
            merged = load_catalog([*catalog_files, file])
            return (f"valid catalog ({len(merged.gpus)} gpus, {len(merged.nics)} nics, "
                    f"{len(merged.models)} models after merging)")
        sweep = sweep_from_dict(document, file)
        check_sweep_names(sweep, catalog, file)
        # lengths only: expanding the ranges would cost what they hold
        swept = sum(len(domain) > 1 for domain in sweep.domains().values())
        return f"valid sweep {sweep.name!r} ({swept} swept axes, {sweep.grid_size()} grid points)"
    raise InputError(file, None, suffix or None,
                     "unknown file kind; expected .pbtxt, .json, .yaml or .yml")
