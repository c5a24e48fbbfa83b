"""The front table a finished sweep or study shows: one line per distinct plan, as aligned
text (short headers) and as CSV (the metrics' and the dataset's names).

A row is a dict: ``point`` (a grid point or a trial number), metric values (``None``
where not a number), ``axes`` (key -> value, ``None`` where the axis does not apply to the
plan) and ``same_plan`` (the other points that build the same plan).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence

from xsweep.search.evaluation import MEMORY_METRIC

#: Metrics every front table shows, with their short headers and formats; the sweep's
#: objectives follow where they are not among them (:func:`columns`).
COLUMNS = (("iteration_time_s", "iteration_s", "{:.4f}"),
           ("cost_per_run_usd", "cost_per_run_usd", "{:,.0f}"),
           ("tokens_per_s", "tokens_per_s", "{:,.0f}"),
           ("mfu", "mfu", "{:.3f}"),
           (MEMORY_METRIC, "memory_gib", "{:.1f}"))
#: Formats of the other metrics an objective may name (default: 4 significant digits).
FORMATS = {"cost_per_million_tokens_usd": "{:.4f}", "capex_usd": "{:,.0f}",
           "cost_rate_usd_per_hour": "{:,.2f}", "training_time_s": "{:,.0f}"}


def columns(objectives: Sequence[str] = ()) -> list[tuple[str, str, str]]:
    """(metric, header, format) of the table: :data:`COLUMNS`, then each objective not
    among them, headed by its name."""
    out = list(COLUMNS)
    for name in objectives:
        if name not in {c[0] for c in out}:
            out.append((name, name, FORMATS.get(name, "{:.4g}")))
    return out


def axis_label(path: str, pools: list[str]) -> str:
    """A short header for an axis path: ``cluster.pools[0].nodes`` -> ``H100-SXM nodes``,
    ``parallelism.tp.H100-SXM`` -> ``H100-SXM tp``, ``training.schedule`` -> ``schedule``."""
    pool = re.fullmatch(r"cluster\.pools\[(\d+)\]\.(.+)", path)
    if pool:
        return f"{pools[int(pool.group(1))]} {pool.group(2)}"
    if path.startswith("parallelism.tp."):
        return f"{path[len('parallelism.tp.'):]} tp"
    return path.rsplit(".", 1)[-1]


def collapse(rows: list[dict], keys: dict[int, bytes]) -> list[dict]:
    """``rows`` with each plan once (``keys``: each row's plan key): the first row of a
    plan, in order, lists the later ones' points in ``same_plan``."""
    first: dict[bytes, dict] = {}
    out = []
    for row in rows:
        key = keys[row["point"]]
        if key in first:
            first[key]["same_plan"].append(row["point"])
            continue
        first[key] = row | {"same_plan": list(row.get("same_plan", []))}
        out.append(first[key])
    return out


def front_table(rows: list[dict], axes: Sequence[tuple[str, str]], label: str = "point",
                objectives: Sequence[str] = ()) -> list[list[str]]:
    """Header and one line per row (each a distinct plan): its point, the metrics of
    :func:`columns`, the ``axes`` (each ``(key in row["axes"], header)``; ``-`` where an
    axis does not apply) and the points of the same plan."""
    present = [(name, header, fmt) for name, header, fmt in columns(objectives)
               if any(name in row for row in rows) or not rows]
    lines = [[label, *(h for _, h, _ in present), *(h for _, h in axes), "same plan"]]
    for row in rows:
        cells = [str(row["point"])]
        cells += ["-" if row.get(name) is None else fmt.format(row[name])
                  for name, _, fmt in present]
        cells += [_cell(row["axes"].get(key)) for key, _ in axes]
        cells.append(" ".join(str(p) for p in row.get("same_plan", [])))
        lines.append(cells)
    return lines


def format_table(lines: list[list[str]]) -> str:
    """Cells in aligned columns: numbers right, text left."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    numeric = [all(_is_number(line[i]) for line in lines[1:]) and len(lines) > 1
               for i in range(len(widths))]
    out = []
    for line in lines:
        cells = [cell.rjust(w) if num else cell.ljust(w)
                 for cell, w, num in zip(line, widths, numeric, strict=True)]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)


def csv_text(rows: list[dict], axes: Sequence[str], label: str = "point",
             objectives: Sequence[str] = ()) -> str:
    """The rows as CSV with full-precision numbers, headed by the metrics' names and the
    ``axes`` keys (the dataset's names of the axes), then ``same_plan`` (the other points
    of the plan, space-separated); an empty cell where a value is missing or an axis does
    not apply."""
    names = [name for name, _, _ in columns(objectives)
             if any(name in row for row in rows) or not rows]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([label, *names, *axes, "same_plan"])
    for row in rows:
        writer.writerow([row["point"], *("" if row.get(n) is None else repr(row[n]) for n in names),
                         *("" if row["axes"].get(key) is None else row["axes"][key]
                           for key in axes),
                         " ".join(str(p) for p in row.get("same_plan", []))])
    return buffer.getvalue()


def _cell(value) -> str:
    return "-" if value is None else str(value)


def _is_number(cell: str) -> bool:
    try:
        float(cell.replace(",", ""))
    except ValueError:
        return cell == "-"
    return True
