"""``xsweep check FILE...``: validate deployment plans, sweeps and catalogs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from xsweep.cli.common import (
    ALLOW_OOM_HELP,
    BAD_INPUT_ERRORS,
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    EXIT_OK,
    error_line,
    one_line,
)
from xsweep.errors import CheckFailed, InputError
from xsweep.spec.catalog import Catalog, is_catalog_document, load_catalog
from xsweep.spec.plan_io import JSON_SUFFIXES, TEXT_SUFFIXES, load_valid_plan
from xsweep.spec.reader import read_yaml_file
from xsweep.spec.sweep import check_sweep_names, sweep_from_dict

YAML_SUFFIXES = (".yaml", ".yml")
#: The files a folder given to ``check`` contributes: these suffixes, in any case.
CHECKED_SUFFIXES = TEXT_SUFFIXES + JSON_SUFFIXES + YAML_SUFFIXES


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "check",
        help="validate plans (.pbtxt, .json), sweeps and catalogs (.yaml)",
        description="Validate each FILE and print one line per file. A YAML file whose "
        "only top-level keys are gpus/nics/links/models is a catalog; any other YAML is a "
        "sweep. A FOLDER stands for every .pbtxt, .textproto, .txtpb, .json, .yaml and .yml "
        "file below it, in its subfolders too (hidden ones skipped), in sorted order. A plan "
        "that does not fit in GPU memory fails (exit 1) unless --allow-oom is given. The "
        "exit code is the worst of the files': 2 for bad input, 1 for a failed check.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE")
    parser.add_argument("--catalog", action="append", default=[], metavar="FILE",
                        help="catalog YAML merged over the defaults (repeatable)")
    parser.add_argument("--allow-oom", action="store_true", help=ALLOW_OOM_HELP)
    return parser


def run(args: argparse.Namespace) -> int:
    """One line per file, in order: what it is on stdout, or why it is bad on stderr.

    Every file is checked whatever happened to the ones before; the exit code is the
    worst: 2 if any is bad input, else 1 if any failed a check (a plan that does not fit
    in memory), else 0.
    """
    catalog = load_catalog(args.catalog)
    status = EXIT_OK
    for given in args.files:
        try:
            files = files_to_check(given)
        except BAD_INPUT_ERRORS as error:
            print(error_line(error), file=sys.stderr, flush=True)
            status = max(status, EXIT_BAD_INPUT)
            continue
        for file in files:
            status = max(status, _check_one(file, catalog, args))
    return status


def _check_one(file: str, catalog: Catalog, args: argparse.Namespace) -> int:
    """Check one file and print its line; its exit code."""
    try:
        print(f"{file}: {describe(file, catalog, args.catalog, args.allow_oom)}", flush=True)
        return EXIT_OK
    except CheckFailed as error:
        print(one_line(error), file=sys.stderr, flush=True)
        return EXIT_CHECK_FAILED
    except BAD_INPUT_ERRORS as error:
        print(error_line(error), file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    except Exception as error:  # a defect must not hide the verdict on the other files
        print(one_line(f"{file}: internal error, please report it: "
                       f"{type(error).__name__}: {error}")[:500], file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT


def files_to_check(given: str) -> list[str]:
    """``given`` itself, or for a folder every file of a checked kind (by suffix) below it,
    subfolders included, hidden files and folders (a name starting with ``.``) and links
    to folders skipped, sorted by path.

    Raises:
        InputError: a folder holding no such file.
    """
    folder = Path(given)
    if not folder.is_dir():
        return [given]
    found = []
    for path in sorted(_walk(folder)):
        if path.suffix.lower() in CHECKED_SUFFIXES:
            found.append(str(path))
    if not found:
        raise InputError(given, None, None, "a folder with no plan, sweep or catalog inside "
                         f"(no {', '.join(CHECKED_SUFFIXES)} file in it or below it)")
    return found


def _walk(folder: Path):
    for entry in folder.iterdir():
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            if not entry.is_symlink():
                yield from _walk(entry)
        else:
            yield entry


def describe(file: str, catalog: Catalog, catalog_files: list[str],
             allow_oom: bool = False) -> str:
    """Validate one file of any kind; return what it is, for the report line.

    Args:
        catalog: the catalog plans and sweeps are checked against.
        catalog_files: the files ``catalog`` was merged from; a catalog FILE is
            checked by merging it over them.
        allow_oom: a plan that does not fit in GPU memory passes, its verdict in the line.

    Raises:
        InputError: the file is not valid.
        CheckFailed: a plan that does not fit in memory (without ``allow_oom``).
    """
    suffix = Path(file).suffix.lower()
    if suffix in TEXT_SUFFIXES + JSON_SUFFIXES:
        from xsweep.plan.analysis import analyze

        valid = load_valid_plan(file, catalog)
        plan = valid.message
        ranks = sum(node.num_gpus for node in plan.cluster.nodes)
        line = (f"valid deployment plan {plan.name!r} "
                f"({ranks} ranks, {len(plan.device_groups)} device groups)")
        verdict = analyze(valid, catalog).memory_verdict()
        if verdict and not allow_oom:
            raise CheckFailed(f"{file}: {verdict} (--allow-oom to accept it)")
        return f"{line}; {verdict}" if verdict else line
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
