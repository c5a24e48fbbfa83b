"""``xsweep validate RESULT``: re-run a sweep's or study's winners in the exact event-driven
simulator and compare them with their batched results."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from xsweep.cli.common import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    check_output_folder,
    emit,
    json_text,
    refuse_other_kind,
)
from xsweep.errors import InputError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "validate", help="re-run the winners of a sweep or study in the exact simulator",
        description=__doc__ + " RESULT is a sweep's output folder or an Optuna storage URL "
        "(with --study). The points re-run are the Pareto front and the top K of each "
        "objective among the exactly evaluated points, and the same among the points only "
        "bounded. Exit 1 when an exact point's relative error exceeds the tolerance or a "
        "bound is above the simulated time.")
    p.add_argument("result", metavar="RESULT",
                   help="a sweep's output folder (results/<name>/sweep), or a storage URL such "
                   "as sqlite:///results/<name>/study/study.db")
    p.add_argument("--study", metavar="NAME",
                   help="the study's name (with a storage URL; a name as a sweep's: letters, "
                   "digits, '-', '_', '.')")
    p.add_argument("--top", type=_count, metavar="K",
                   help="best points of each objective to re-run (default: the space's "
                   "validate.top)")
    p.add_argument("--tolerance", type=_tolerance, metavar="X",
                   help="largest relative error allowed (default: the space's "
                   "validate.tolerance)")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="output folder (default: validate/ inside the sweep's folder, or "
                   "beside the study's SQLite file, or in the study's folder of xsweep "
                   "optimize for a database server)")
    p.add_argument("--catalog", action="append", default=[], metavar="FILE",
                   help="YAML merged over the built-in catalog, as given to the sweep or study")
    p.add_argument("--json", action="store_true", help="print one JSON summary on stdout")


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


def _tolerance(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise ValueError(text)
    return value


def run(args) -> int:
    # before anything is imported: a plan, a sweep or a catalog file is no result
    refuse_other_kind(args.result, "a sweep's results", "results")
    from xsweep.search.folders import VALIDATE, study_folder
    from xsweep.search.locks import FolderLock, command_line, refuse_if_held
    from xsweep.search.progress import Progress
    from xsweep.search.storage import masked, sqlite_file
    from xsweep.search.validate.run import check_output, format_report, output_folder, validate
    from xsweep.search.validate.study_result import is_storage_url, open_study_result, redacted
    from xsweep.search.validate.sweep_result import is_sweep_folder, open_sweep_result
    from xsweep.spec.catalog import load_catalog
    from xsweep.spec.sweep import check_name

    if args.study is not None:  # it may make the output folder: checked before anything
        check_name(args.study, "--study")
    check_output_folder(args.output, "--output")
    if args.output:
        check_output(Path(args.output))
    catalog = load_catalog(args.catalog)
    study = is_storage_url(args.result)
    command = command_line("validate", masked(args.result) if study else args.result)
    # A validation reads its source and writes beside its output folder (by default inside
    # the source's folder): it holds the lock of each such folder (xsweep.search.locks), so
    # that it never runs while a sweep or study rewrites what it reads, nor two at once.
    with contextlib.ExitStack() as held:
        locked = set()

        def hold(folder: Path) -> None:
            if os.path.abspath(folder) not in locked:
                held.enter_context(FolderLock(folder, command))
                locked.add(os.path.abspath(folder))

        if study:
            database = sqlite_file(args.result)
            if database is not None and database.is_file():
                hold(database.parent)
            source = open_study_result(args.result, args.study, catalog)
            about = {"source": "study", "storage": redacted(args.result), "study": source.name}
            # beside the study's file, or where xsweep optimize puts it by default
            default_out = (database.parent if database is not None
                           else study_folder(source.sweep.name, source.name)) / VALIDATE
        elif is_sweep_folder(Path(args.result)):
            if args.study:
                raise InputError(args.result, "--study", args.study, "names a study, but RESULT "
                                 "is a sweep's folder, not a storage URL")
            hold(Path(args.result))
            source = open_sweep_result(Path(args.result), catalog)
            about = {"source": "sweep", "folder": args.result, "sweep": source.sweep.name}
            default_out = Path(args.result) / VALIDATE
        else:
            refuse_if_held(args.result)  # a sweep still writing it: say so
            raise InputError(args.result, None, None, "is neither a sweep's output folder (no "
                             "sweep.zarr inside) nor a storage URL (such as sqlite:///study.db)"
                             + _inside(Path(args.result)))
        out_dir = Path(args.output) if args.output else default_out
        check_output_folder(str(out_dir), "--output")
        check_output(out_dir, about)
        top = source.validation.top if args.top is None else args.top
        tolerance = source.validation.tolerance if args.tolerance is None else args.tolerance
        candidates = source.candidates(top)
        hold(output_folder(out_dir).parent)
        progress = Progress()
        progress.update(f"validating {len(candidates)} points of "
                        f"{about.get('sweep') or about['study']} (top {top} of each objective "
                        "and the front) in the exact simulator", final=True)
        summary = validate(candidates, catalog, tolerance, out_dir,
                           {**about, "objectives": source.objectives, "top": top},
                           progress.update)
    for line in summary["failures"]:
        print(line, file=sys.stderr)
    emit(json_text(summary) if args.json else format_report(summary))
    return EXIT_OK if summary["passed"] else EXIT_CHECK_FAILED


def _inside(folder: Path) -> str:
    """A hint when ``folder`` holds a sweep's or a study's folder (``results/<name>``)."""
    hints = []
    if (folder / "sweep" / "sweep.zarr").is_dir():
        hints.append(f"xsweep validate {folder / 'sweep'}")
    if (folder / "study" / "study.db").is_file():
        hints.append(f"xsweep validate sqlite:///{folder / 'study' / 'study.db'} --study NAME")
    return f"; for what it holds: {' or '.join(hints)}" if hints else ""
