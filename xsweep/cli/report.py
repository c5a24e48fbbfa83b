"""``xsweep report RESULT``: one self-contained HTML page of a sweep's results: its Pareto
fronts, where the time of an iteration goes, memory against capacity, cost, and the
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
                   help="a sweep's output folder (results/<name>/sweep)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="the page's file (default: report.html inside RESULT)")
    p.add_argument("--catalog", action="append", default=[], metavar="FILE",
                   help="YAML merged over the built-in catalog, as given to the sweep")


def run(args) -> int:
    refuse_other_kind(args.result, "a sweep's results", "results")
    check_output_path(args.output, "--output")
    from xsweep.report.page import REPORT, write_report
    from xsweep.report.result import is_sweep_folder, open_result
    from xsweep.search.locks import FolderLock, command_line, refuse_if_held
    from xsweep.spec.catalog import load_catalog

    folder = Path(args.result)
    if not folder.exists():
        raise InputError(args.result, None, None, "does not exist")
    if not is_sweep_folder(folder):
        refuse_if_held(args.result)  # a sweep still writing it: say so
        raise InputError(args.result, None, None, "is not a sweep's output folder (no "
                         "sweep.zarr inside)" + _inside(folder))
    catalog = load_catalog(args.catalog)
    output = Path(args.output) if args.output else folder / REPORT
    # the sweep's lock: no sweep rewrites the folder while its report is read and written
    with FolderLock(folder, command_line("report", args.result)):
        result = open_result(folder, catalog)
        write_report(result, output)
    emit(f"report: {output}")
    return 0


def _inside(folder: Path) -> str:
    """A hint when ``folder`` holds a sweep's folder (``results/<name>``)."""
    if (folder / "sweep" / "sweep.zarr").is_dir():
        return f"; for what it holds: xsweep report {folder / 'sweep'}"
    return ""
