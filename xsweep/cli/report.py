"""``xsweep report RESULT``: one self-contained HTML page of a sweep's or an Optuna
study's results: its Pareto fronts, where the time of an iteration goes, memory against capacity, cost, and the
validation if one ran."""

from __future__ import annotations

from pathlib import Path

from xsweep.cli.common import check_output_path, emit, refuse_other_kind
from xsweep.errors import InputError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="write an HTML page of a sweep's results",
        description=__doc__ + " The page holds its charts (SVG) and style inline and "
        "fetches nothing: it can be mailed or opened offline.")
    p.add_argument("result", metavar="RESULT",
                   help="a sweep's output folder (results/<name>/sweep) or a study's "
                   "(results/<name>/study, holding study.json)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="the page's file (default: report.html inside RESULT)")
    p.add_argument("--catalog", action="append", default=[], metavar="FILE",
                   help="YAML merged over the built-in catalog, as given to the sweep or "
                   "study")


def run(args) -> int:
    refuse_other_kind(args.result, "a sweep's results", "results")
    check_output_path(args.output, "--output")
    from xsweep.report.page import write_report
    from xsweep.report.result import is_study_folder, is_sweep_folder, open_result, open_study
    from xsweep.search.folders import REPORT
    from xsweep.search.locks import FolderLock, command_line, refuse_if_held
    from xsweep.spec.catalog import load_catalog

    folder = Path(args.result)
    if not folder.exists():
        raise InputError(args.result, None, None, "does not exist")
    sweep = is_sweep_folder(folder)
    if not sweep and not is_study_folder(folder):
        refuse_if_held(args.result)  # a sweep or study still writing it: say so
        raise InputError(args.result, None, None, "is neither a sweep's output folder (no "
                         "sweep.zarr inside) nor a study's (no study.json)" + _inside(folder))
    catalog = load_catalog(args.catalog)
    output = Path(args.output) if args.output else folder / REPORT
    # the folder's lock: no sweep or study rewrites it while its report is read and written
    with FolderLock(folder, command_line("report", args.result)):
        result = (open_result if sweep else open_study)(folder, catalog)
        write_report(result, output)
    emit(f"report: {output}")
    return 0


def _inside(folder: Path) -> str:
    """A hint when ``folder`` holds a sweep's or a study's folder (``results/<name>``)."""
    hints = [f"xsweep report {inner}" for inner in sorted(folder.glob("s*"))
             if (inner / "sweep.zarr").is_dir() or (inner / "study.json").is_file()]
    return f"; for what it holds: {' or '.join(hints)}" if hints else ""
