"""Re-run winners in the exact event-driven simulator and compare them with their batched
results (:mod:`xsweep.search.validate.compare`); write what the simulator found.

For each candidate the output folder gets ``<name>.json`` (the record ``xsweep simulate
--json`` prints) and ``<name>.trace.json`` (the Perfetto trace ``xsweep simulate --trace``
writes), and once all are done ``validate.json``, the summary. Files are written into a
staging folder beside the output folder, which takes the output folder's name (replacing
an earlier validation's) only when every candidate is done: an interrupted or failed run
leaves the output folder as it was. Every file name inside is a plain name made from
the candidate's (``point-<index>``, ``trial-<number>``); the output folder is the folder
its path names (:func:`output_folder`), never the working folder or one above it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from xsweep.errors import InputError
from xsweep.metrics import jsonable
from xsweep.outcome import simulate_plan
from xsweep.pipeline import prepare
from xsweep.search.evaluation import plan_key
from xsweep.search.folders import checked_folder, plain_file_name
from xsweep.search.validate.compare import FLOAT32_SLACK, SMALL_PART, compare, failure_line
from xsweep.search.validate.winners import Candidate
from xsweep.sim import write_trace
from xsweep.spec.catalog import Catalog

SUMMARY = "validate.json"


def validate(candidates: list[Candidate], catalog: Catalog, tolerance: float, out_dir: Path,
             about: dict, show: Callable[..., None] = lambda text, final=False: None) -> dict:
    """Simulate every candidate, compare, write the outputs; the summary document.

    Args:
      about: what was validated (source, name, objectives, top), copied into the summary.
      show: progress callback (``Progress.update``).
    """
    out_dir = output_folder(out_dir)
    for c in candidates:
        plain_file_name(f"{c.name}.trace.json")
    staging = out_dir.with_name(f".{out_dir.name}.partial-{os.getpid()}")
    staging.mkdir(parents=True)
    try:
        points, failures = [], []
        simulated: dict[tuple, tuple[str, dict]] = {}
        began = time.perf_counter()
        for done, c in enumerate(candidates):
            key = (plan_key(c.plan), c.cost)
            if key not in simulated:  # points with the same plan share one simulation
                show(f"simulating {c.label}{_also(c)} ({c.level}; {done + 1} of "
                     f"{len(candidates)}) ...", final=True)
                prepared = prepare(c.plan, catalog)
                result, record = simulate_plan(prepared, c.cost)
                simulated[key] = (c.name, record)
                write_trace(prepared.program, result, staging / f"{c.name}.trace.json")
            else:
                first, record = simulated[key]
                shutil.copyfile(staging / f"{first}.trace.json", staging / f"{c.name}.trace.json")
                record = {**record, "name": c.plan.name}
            _write_json(staging / f"{c.name}.json", record)
            checks = compare(c.level, c.batched, record, tolerance)
            failed = [k for k in checks if not k.passed]
            if failed:
                failures.append(failure_line(c.label, c.level, failed, tolerance))
            points.append({
                "name": c.name, "level": c.level.label, "picked": list(c.picked),
                "same_plan": list(c.same),
                "passed": all(k.passed for k in checks),
                "metrics": {k.metric: {"batched": k.batched, "simulated": k.simulated,
                                       "error": k.error, "passed": k.passed} for k in checks},
                "result": str(out_dir / f"{c.name}.json"),
                "trace": str(out_dir / f"{c.name}.trace.json")})
        summary = {**about, "tolerance": tolerance, "float32_slack": FLOAT32_SLACK,
                   "small_part": SMALL_PART, "passed": not failures,
                   "validated": len(points), "failed": sum(not p["passed"] for p in points),
                   "failures": failures, "points": points,
                   "summary": str(out_dir / SUMMARY),
                   "simulate_s": round(time.perf_counter() - began, 3)}
        _write_json(staging / SUMMARY, summary)
        _swap(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return summary


def check_output(out_dir: Path, about: dict | None = None) -> None:
    """Refuse, before any work, an output folder that holds anything but an earlier
    validation's outputs (which a new run replaces whole), or a validation of another
    source than ``about``'s (another study or sweep): each source keeps its own.

    Raises:
      InputError: naming the folder.
    """
    out_dir = output_folder(out_dir)
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / SUMMARY).is_file():
        raise InputError(str(out_dir), None, None, f"holds files that are not a validation's "
                         f"(no {SUMMARY}); choose an empty or new folder with -o")
    if about is None or not (out_dir / SUMMARY).is_file():
        return
    try:
        found = json.loads((out_dir / SUMMARY).read_text(encoding="utf-8"))
        theirs = (found.get("source"), found.get(found.get("source")))
    except (OSError, ValueError, AttributeError, TypeError):
        return  # unreadable: an earlier validation's, replaced
    if theirs != (about["source"], about[about["source"]]):
        raise InputError(str(out_dir), None, None, f"holds the validation of {theirs[0]} "
                         f"{theirs[1]!r}, not of {about['source']} {about[about['source']]!r}; "
                         "choose another folder with -o")


def output_folder(out_dir: str | os.PathLike) -> Path:
    """``out_dir`` as the folder it names (``a/../out`` is ``out``). A validation replaces
    its output folder whole, by a rename from beside it: the working folder or a folder
    that holds it (``.``, ``..``, ``x/..``, ``/``) is refused, and so is a NUL.

    Raises:
      InputError: naming the folder as given.
    """
    folder = Path(os.path.normpath(checked_folder(out_dir)))
    absolute = Path(os.path.abspath(folder))
    here = Path(os.path.abspath(os.curdir))
    if absolute == here or absolute in here.parents:
        raise InputError(os.fspath(out_dir), None, None, "is the working folder or holds it, "
                         "and a validation replaces its output folder whole; choose a folder "
                         "of its own with -o")
    return folder


def format_report(summary: dict) -> str:
    """The side-by-side table of every validated point, and the verdict."""
    lines = []
    for p in summary["points"]:
        verdict = "ok" if p["passed"] else "FAILED"
        same = (f"; same plan: {' '.join(map(str, p['same_plan']))}"
                if p.get("same_plan") else "")
        lines.append(f"{p['name']} ({p['level']}; {', '.join(p['picked'])}{same}): {verdict}")
        head = "bound" if p["level"] == "bound" else "batched"
        lines.append(f"  {'metric':<24}{head:>14}{'simulated':>14}{'rel. error':>12}")
        for name, m in p["metrics"].items():
            mark = "" if m["passed"] else "  <-"
            lines.append(f"  {name:<24}{_cell(m['batched']):>14}{_cell(m['simulated']):>14}"
                         f"{_cell(m['error'], '.2e'):>12}{mark}")
    exact = [p for p in summary["points"] if p["level"] == "exact"]
    lines.append(f"{summary['validated']} plans validated ({len(exact)} exact within tolerance "
                 f"{summary['tolerance']:g}, {summary['validated'] - len(exact)} bound-only "
                 f"at or below the simulator): "
                 + ("all passed" if summary["passed"] else f"{summary['failed']} FAILED"))
    lines.append(f"results and traces: {Path(summary['summary']).parent}")
    return "\n".join(lines)


def _swap(staging: Path, out_dir: Path) -> None:
    """Put the finished ``staging`` folder at ``out_dir``, replacing an earlier one."""
    old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
    if out_dir.exists():
        out_dir.rename(old)
    staging.rename(out_dir)
    shutil.rmtree(old, ignore_errors=True)


def _also(c: Candidate) -> str:
    """`` (also 241 246)``: the other points (or trials) of a candidate's plan."""
    return f" (also {' '.join(map(str, c.same))})" if c.same else ""


def _cell(value: float | None, fmt: str = ".6g") -> str:
    return "-" if value is None else format(value, fmt)


def _write_json(path: Path, document: dict) -> None:
    with open(path, "w", encoding="utf-8") as out:
        json.dump(jsonable(document), out, indent=2, allow_nan=False)
        out.write("\n")
