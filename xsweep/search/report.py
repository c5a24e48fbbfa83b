"""The front table a finished sweep or study shows: one line per distinct plan, as aligned
text and as CSV."""

from __future__ import annotations

import csv
import io
import re

from xsweep.search.evaluation import MEMORY_METRIC

#: Metrics of the front table, with their headers and formats.
COLUMNS = (("iteration_time_s", "iteration_s", "{:.4f}"),
           ("cost_per_run_usd", "cost_per_run_usd", "{:,.0f}"),
           ("tokens_per_s", "tokens_per_s", "{:,.0f}"),
           ("mfu", "mfu", "{:.3f}"),
           (MEMORY_METRIC, "memory_gib", "{:.1f}"))


def axis_label(path: str, pools: list[str]) -> str:
    """A short header for an axis path: ``cluster.pools[0].nodes`` -> ``H100-SXM nodes``,
    ``parallelism.tp.H100-SXM`` -> ``H100-SXM tp``, ``training.schedule`` -> ``schedule``."""
    pool = re.fullmatch(r"cluster\.pools\[(\d+)\]\.(.+)", path)
    if pool:
        return f"{pools[int(pool.group(1))]} {pool.group(2)}"
    if path.startswith("parallelism.tp."):
        return f"{path[len('parallelism.tp.'):]} tp"
    return path.rsplit(".", 1)[-1]


def front_table(rows: list[dict], dims: tuple[str, ...], pools: list[str],
                keys: dict[int, bytes], label: str = "point") -> list[list[str]]:
    """Header and one line per distinct plan of the front (``keys``: each row's plan key;
    ``dims``: the swept axes; ``label``: what ``row["point"]`` numbers, a grid point or a
    trial); rows with the same plan as an earlier row are listed in its ``same plan``
    cell."""
    present = [(name, header, fmt) for name, header, fmt in COLUMNS
               if any(name in row for row in rows) or not rows]
    header = [label, *(h for _, h, _ in present), *(axis_label(p, pools) for p in dims),
              "same plan"]
    first: dict[bytes, list[str]] = {}
    lines = [header]
    for row in rows:
        key = keys[row["point"]]
        if key in first:
            first[key].append(str(row["point"]))
            continue
        cells = [str(row["point"])]
        cells += ["-" if row.get(name) is None else fmt.format(row[name])
                  for name, _, fmt in present]
        cells += [str(row["axes"][p]) for p in dims]
        first[key] = []
        lines.append(cells)
    for line in lines[1:]:
        line.append(" ".join(first[keys[int(line[0])]]))
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


def csv_text(lines: list[list[str]], rows: list[dict]) -> str:
    """The front table as CSV, with full-precision numbers."""
    by_point = {row["point"]: row for row in rows}
    names = [n for n, h, _ in COLUMNS if h in lines[0]]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(lines[0])
    for line in lines[1:]:
        row = by_point[int(line[0])]
        writer.writerow([row["point"], *("" if row.get(n) is None else repr(row[n]) for n in names),
                         *row["axes"].values(), line[-1]])
    return buffer.getvalue()


def _is_number(cell: str) -> bool:
    try:
        float(cell.replace(",", ""))
    except ValueError:
        return cell == "-"
    return True
