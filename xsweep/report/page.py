"""The report page: one HTML document, its style and charts inline, nothing fetched.

:func:`page` turns a :class:`~xsweep.report.result.Result` into the HTML text; every
text that comes from the sweep (its name, axis values, plan names) is escaped where it
is written. :func:`write_report` writes it whole or not at all.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from xsweep.metrics import metric_of
from xsweep.report import breakdown
from xsweep.report.charts import LOG_DECADES, Bar, Series, esc, fmt, scatter, stacked_bars
from xsweep.report.result import FrontPlan, Group, Result, shown_plans
from xsweep.search.folders import write_file
from xsweep.search.sweep.plot import FRONT_COLOURS, MOST_LABELS, axes_of, label
from xsweep.spec.catalog import REFERENCE_SOFTWARE, describe_software

#: At most this many grey points are drawn (evenly chosen by index): a page stays light
#: for a sweep of millions of points.
MOST_BACKGROUND = 4000
MEMORY_COLOURS = {"weights": "#4e79a7", "gradients": "#f28e2b", "optimizer states": "#59a14f",
                  "activations": "#edc948", "capacity": "#222"}
COST = ("cost_per_run_usd", "cost_per_million_tokens_usd")
NO_FRONT = "No front: no plan to show."

STYLE = """
body{font-family:system-ui,sans-serif;margin:24px auto;max-width:1000px;color:#222;
line-height:1.4;padding:0 16px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:18px;margin-top:32px;border-bottom:1px
solid #ddd;padding-bottom:4px}h3{font-size:15px;margin:18px 0 4px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
td,th{border:1px solid #ddd;padding:3px 7px;text-align:right}
th{background:#f4f4f4}td.text,th.text{text-align:left}
.note{color:#555;font-size:13px}.fail{color:#b00;font-weight:600}.ok{color:#286d28}
figure{margin:12px 0}svg{max-width:100%;height:auto}
"""


def plan_label(plan: FrontPlan, group: Group, result: Result) -> str:
    """``point 267`` (``trial 12`` in a study) or, when the sweep has several work groups,
    ``point 267 (model x)``."""
    text = f"{result.unit} {plan.point}"
    return f"{text} ({group.name})" if len(result.groups) > 1 else text


def _value(name: str, value: float) -> str:
    unit = metric_of(name).unit
    return f"{fmt(value)}" + ("" if unit in ("1", "bool") else f" {unit}")


def hover(result: Result, plan: FrontPlan, group: Group, names: tuple[str, ...]) -> str:
    """The hover text of a front plan: its index, work group, key axes and metrics."""
    row = result.row(plan.point)
    lines = [f"{result.unit} {plan.point}" + (f" ({group.name})" if group.work else "")]
    if plan.same_plan:
        lines.append(f"same plan: {result.unit}s " + ", ".join(map(str, plan.same_plan)))
    axes = [f"{k} {v}" for k, v in plan.axes.items() if v is not None]
    if axes:
        lines.append(", ".join(axes))
    lines += [f"{name}: {_value(name, row[name])}" for name in names]
    return "\n".join(lines)


def pareto_section(result: Result) -> str:
    x_name, y_name = axes_of(list(result.objectives))
    series, cut = [], []
    for kind, x, y, points, hollow, colour in _background(result, x_name, y_name):
        drawn = points
        if len(points) > MOST_BACKGROUND:
            drawn = points[np.unique(np.linspace(0, len(points) - 1, MOST_BACKGROUND)
                                     .round().astype(int))]
            cut.append(f"{len(drawn)} of the {len(points)} {kind.split(',')[0]} points drawn")
        series.append(Series(
            f"{kind} ({len(points)})", colour, tuple(
                (float(x[i]), float(y[i]), f"point {i} ({kind})\n{x_name}: "
                 f"{_value(x_name, x[i])}\n{y_name}: {_value(y_name, y[i])}") for i in drawn),
            hollow=hollow))
    names = tuple(dict.fromkeys((x_name, y_name, "iteration_time_s", "tokens_per_s", "mfu",
                                 "memory_per_gpu_gib", *COST)))
    for k, group in enumerate(result.groups):
        front = group.front
        plans = "plan" if len(front) == 1 else "plans"
        series.append(Series(
            f"Pareto front{', ' + group.name if group.work else ''} ({len(front)} {plans})",
            _colour(k), tuple(
                (result.row(p.point)[x_name], result.row(p.point)[y_name],
                 hover(result, p, group, names))
                for p in front), line=True, labels=front_labels(front)))
    empty = [g for g in result.groups if not g.front]
    drawn = any(s.points for s in series)
    svg = scatter(series, label(x_name), label(y_name), f"{result.name}: Pareto front"
                  + ("s" if len(result.groups) > 1 else "")) if drawn else ""
    notes = [f"Each work group's front in a colour of its own (work axes: "
             f"{', '.join(result.summary.get('work_axes') or []) or 'none'}); an axis whose "
             f"values span {LOG_DECADES:g} decades or more is logarithmic. Hover over a point "
             "for its "
             "index, axes and metrics."] + cut
    if result.table is None:
        notes.append("The study's other trials are in its storage, not drawn here.")
    notes += [f"{'Front' if g.work else 'The front'}{', ' + g.name if g.work else ''}: no "
              f"feasible point{': ' + g.why_empty if g.why_empty else ''}." for g in empty]
    if not drawn:
        notes.append("Nothing to draw: no point has both figures.")
    return _section("pareto", "Pareto front", svg, notes)


def front_labels(front: tuple[FrontPlan, ...]) -> tuple[str, ...]:
    """The numbers written beside a front's points: every plan's, or on a front of more
    than ``MOST_LABELS`` plans every few and the last (hovering shows every one)."""
    step = max(1, -(-len(front) // MOST_LABELS))
    return tuple(str(p.point) if k % step == 0 or k == len(front) - 1 else ""
                 for k, p in enumerate(front))


def _background(result: Result, x_name: str, y_name: str) -> list[tuple]:
    """The points drawn in grey under the fronts: a sweep's pruned points (at their
    bounds) and its exactly evaluated feasible ones; none for a study."""
    table = result.table
    if table is None:
        return []
    x, y = table[x_name].astype(float), table[y_name].astype(float)
    pruned = np.flatnonzero(table["status"] == "pruned")
    exact = np.flatnonzero(table["feasible"] & (table["level"] == "exact"))
    return [("pruned, at its lower bound", x, y, pruned, True, "#b5b5b5"),
            ("feasible, exact", x, y, exact, False, "#8c8c8c")]


def _colour(k: int) -> str:
    return FRONT_COLOURS[k % len(FRONT_COLOURS)]


def _shown(result: Result) -> list[tuple[Group, FrontPlan]]:
    return [(g, p) for g in result.groups for p in shown_plans(g.front)]


def time_section(result: Result) -> str:
    shown = _shown(result)
    if not shown:
        return _section("time", "Where the time goes", "", [NO_FRONT])
    bars = []
    for group, plan in shown:
        row = result.row(plan.point)
        parts = breakdown.parts(row)
        text = [f"{plan_label(plan, group, result)}: iteration "
                f"{fmt(row['iteration_time_s'])} s; means over GPUs:"]
        text += [f"  {name} {fmt(v)} s" for name, v in parts]
        text.append(f"  exposed DP (inside the last parts) {fmt(row['exposed_dp_s_mean'])} s")
        bars.append(Bar(plan_label(plan, group, result), tuple(parts), "\n".join(text)))
    svg = stacked_bars(bars, breakdown.COLOURS, "seconds per iteration (mean over GPUs)",
                       "One iteration, mean over GPUs",
                       [(name, meaning) for name, _, meaning in breakdown.PARTS])
    head = "".join(f"<th>{esc(n.removesuffix('_s_max').replace('_', ' '))}</th>"
                   for n in breakdown.MAXIMA)
    rows = []
    for group, plan in shown:
        row = result.row(plan.point)
        rows.append(f'<tr><td class="text">{esc(plan_label(plan, group, result))}</td>'
                    f"<td>{esc(fmt(row['iteration_time_s']))}</td>"
                    + "".join(f"<td>{esc(fmt(row[n]))}</td>" for n in breakdown.MAXIMA)
                    + f"<td>{esc(fmt(row['exposed_dp_s_mean']))}</td></tr>")
    table = ('<table><tr><th class="text">plan</th><th>iteration</th>' + head
             + "<th>exposed dp (mean)</th></tr>" + "".join(rows) + "</table>")
    notes = ["Each bar is one iteration of a front plan, averaged over its GPUs (weighted by "
             "ranks): the parts add up to the iteration time. Exposed PP and resharding are "
             "parts of the bubble; exposed DP is no part of its own (it lies in the last "
             "part and, with parameter all-gathers, in the bubble): the table gives it.",
             "The table below gives, in seconds, the iteration time and the largest value "
             "over GPUs of each figure (the *_max figures): each maximum may come from "
             "another GPU, so they do not add up; the last column is the mean exposed DP."]
    return _section("time", "Where the time goes", svg + table, notes)


def memory_section(result: Result) -> str:
    shown = _shown(result)
    if not shown:
        return _section("memory", "Memory against capacity", "", [NO_FRONT])
    blocks = []
    for group, plan in shown:
        title = plan_label(plan, group, result)
        if not plan.memory:
            blocks.append(f"<h3>{esc(title)}</h3><p class='note'>"
                          f"{esc(plan.memory_note or 'no memory figures')}</p>")
            continue
        bars = []
        for m in plan.memory:
            ids = _ids(m.groups)
            name = f"{ids} {m.gpu} TP {m.tp} stage {m.stage}"
            total = sum(v for _, v in m.parts)
            verdict = "fits" if m.fits else "DOES NOT FIT"
            bars.append(Bar(name, m.parts, f"{name}: {fmt(total)} of {fmt(m.capacity_gib)} GiB "
                            f"per GPU ({verdict})", m.capacity_gib, "capacity of the GPU",
                            not m.fits, f"{fmt(total)} of {fmt(m.capacity_gib)}"))
        svg = stacked_bars(bars, MEMORY_COLOURS, "GiB per GPU",
                           f"{title}: memory per GPU against capacity",
                           [("weights", ""), ("gradients", ""), ("optimizer states", ""),
                            ("activations", ""),
                            ("capacity", "black line: the GPU's memory (red outline: over it)")])
        blocks.append(f"<figure>{svg}</figure>")
    notes = ["Per device group (groups of equal figures on one line), what one GPU holds, as "
             "`xsweep plan` computes it from the plan's file in plans/."]
    return _section("memory", "Memory against capacity", "".join(blocks), notes)


def _ids(groups: tuple[int, ...]) -> str:
    if len(groups) == 1:
        return f"DG {groups[0]}"
    if list(groups) == list(range(groups[0], groups[-1] + 1)):
        return f"DG {groups[0]}-{groups[-1]}"
    listed = ", ".join(map(str, groups[:4])) + (", ..." if len(groups) > 4 else "")
    return f"DG {listed} ({len(groups)})"


def cost_section(result: Result) -> str:
    shown = _shown(result)
    if not shown:
        return _section("cost", "Cost", "", [NO_FRONT])
    charts = []
    for name, colour in zip(COST, ("#59a14f", "#4e79a7"), strict=True):
        unit = metric_of(name).unit
        bars = [Bar(plan_label(p, g, result), ((name, result.row(p.point)[name]),),
                    f"{plan_label(p, g, result)}: {_value(name, result.row(p.point)[name])}")
                for g, p in shown]
        if any(math.isfinite(b.segments[0][1]) for b in bars):
            charts.append(stacked_bars(bars, {name: colour}, unit, name, None))
        else:
            charts.append(f"<p class='note'>{esc(name)} is not known (the sweep gives no "
                          "training.total_tokens).</p>")
    head = "".join(f"<th>{esc(label(n))}</th>" for n in (*COST, "tokens_per_s", "mfu"))
    rows = "".join(
        f'<tr><td class="text">{esc(plan_label(p, g, result))}</td>'
        + "".join(f"<td>{esc(fmt(result.row(p.point)[n]))}</td>"
                  for n in (*COST, "tokens_per_s", "mfu")) + "</tr>" for g, p in shown)
    table = f'<table><tr><th class="text">plan</th>{head}</tr>{rows}</table>'
    return _section("cost", "Cost", "".join(f"<figure>{c}</figure>" for c in charts) + table,
                    ["Cost of a training run (training.total_tokens tokens) and of a million "
                     "tokens, at the sweep's cost model."])


def validation_section(result: Result) -> str:
    doc = result.validation
    if doc is None:
        how = (f"xsweep validate {result.folder}" if result.kind == "sweep" else
               "xsweep validate with the study's storage URL and --study")
        return _section("validation", "Validation", "", [
            f"No validation yet: run {how} to re-run the winners in the exact simulator."])
    verdict = ("<span class='ok'>passed</span>" if doc.get("passed")
               else "<span class='fail'>failed</span>")
    summary, detail = [], []
    for point in doc["points"]:
        metrics = {k: m for k, m in (point.get("metrics") or {}).items() if isinstance(m, dict)}
        lead = (f'<td class="text">{esc(point.get("name"))}</td>'
                f'<td class="text">{esc(point.get("level"))}</td>'
                f'<td class="text">{esc(", ".join(map(str, point.get("picked") or [])))}</td>')
        it = metrics.get("iteration_time_s", {})
        worst = max(metrics, key=lambda k: _float(metrics[k].get("error")), default=None)
        summary.append(f"<tr>{lead}{_compared(it)}<td class='text'>{esc(worst or '')} "
                       f"{esc(_error(metrics[worst]) if worst else '')}</td>"
                       f"{_verdict(point.get('passed'))}</tr>")
        spanned = lead.replace("<td", f'<td rowspan="{len(metrics)}"')
        for k, (name, m) in enumerate(metrics.items()):
            detail.append(f'<tr>{spanned if k == 0 else ""}<td class="text">{esc(name)}</td>'
                          f"{_compared(m)}{_verdict(m.get('passed'))}</tr>")
    heads = ("<th>batched</th><th>simulated</th><th>rel. error</th>")
    table = ('<table><tr><th class="text">plan</th><th class="text">level</th>'
             '<th class="text">picked as</th>' + heads.replace("batched", "batched iteration s")
             + '<th class="text">largest rel. error</th><th>verdict</th></tr>'
             + "".join(summary) + "</table>")
    every = ('<details><summary>every metric compared</summary><table><tr><th class="text">'
             'plan</th><th class="text">level</th><th class="text">picked as</th>'
             f'<th class="text">metric</th>{heads}<th>verdict</th></tr>'
             + "".join(detail) + "</table></details>")
    notes = [f"xsweep validate re-ran {len(doc['points'])} plans in the exact simulator "
             f"(tolerance {fmt(_float(doc.get('tolerance')))}): batched against simulated "
             "values; a bound-level plan passes when its bound is at or below the simulated "
             "value."]
    return _section("validation", "Validation", f"<p>Verdict: {verdict}</p>" + table + every,
                    notes)


def _compared(m: dict) -> str:
    return (f"<td>{esc(fmt(_float(m.get('batched'))))}</td>"
            f"<td>{esc(fmt(_float(m.get('simulated'))))}</td><td>{esc(_error(m))}</td>")


def _error(m: dict) -> str:
    error = _float(m.get("error"))
    return f"{error:.2e}" if math.isfinite(error) else "n/a"


def _verdict(passed) -> str:
    return "<td class='ok'>ok</td>" if passed else "<td class='fail'>FAIL</td>"


def _float(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _section(key: str, heading: str, body: str, notes: list[str]) -> str:
    text = "".join(f"<p class='note'>{esc(n)}</p>" for n in notes)
    return f'<section id="{key}"><h2>{esc(heading)}</h2>{text}{body}</section>'


def page(result: Result) -> str:
    """The report of ``result`` as one HTML document."""
    s = result.summary
    groups = f"{len(result.groups)} work group{'s' if len(result.groups) != 1 else ''}"
    if result.kind == "study":
        trials = s.get("trials") if isinstance(s.get("trials"), dict) else {}
        state = ", ".join(f"{v} {k.lower()}" for k, v in (trials.get("state") or {}).items())
        lead = (f"Optuna study of the sweep {s.get('sweep', '?')}: {trials.get('total', '?')} "
                f"trials ({state}); sampler {s.get('sampler', '?')}; objectives: "
                f"{', '.join(result.objectives)}; {groups}.")
    else:
        status = ", ".join(f"{v} {k}" for k, v in (s.get("status") or {}).items())
        lead = (f"{s.get('points', '?')} points ({status}); {s.get('evaluated_exactly', '?')} "
                f"evaluated exactly; objectives: {', '.join(result.objectives)}; {groups}.")
    lead += " Software profile: " + "; ".join(
        describe_software(entry) for entry in s.get("software") or [REFERENCE_SOFTWARE.record()]
    ) + "."
    body = "".join((pareto_section(result), time_section(result), memory_section(result),
                    cost_section(result), validation_section(result)))
    title = f"xsweep report: {result.name}" + (" (study)" if result.kind == "study" else "")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{esc(title)}</h1><p>{esc(lead)}</p>{body}</body></html>\n")


def write_report(result: Result, path: Path) -> None:
    """The report of ``result`` at ``path``, written under a temporary name and renamed."""
    write_file(path, page(result).encode("utf-8"))
