"""``xsweep report`` in a real process: where it writes, its mode, and bad input as one line
with exit code 2 and nothing written."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from tests.report.conftest import xsweep
from tests.support.paths import SPACES


def written(folder: Path) -> list[str]:
    """Report files and half-written files under ``folder``."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.name == "report.html" or ".partial-" in p.name)


def one_line_error(done, *words: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    for word in words:
        assert word in done.stderr


def test_the_report_goes_into_the_sweeps_folder_with_the_usual_mode(two_models, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(two_models, folder)
    done = xsweep("report", folder)
    assert done.returncode == 0, done.stderr
    page = folder / "report.html"
    assert done.stdout.strip() == f"report: {page}"
    umask = os.umask(0)
    os.umask(umask)
    assert page.stat().st_mode & 0o777 == 0o666 & ~umask
    text = page.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert "report-two-models: Pareto fronts" in text
    assert written(folder) == ["report.html"]
    again = xsweep("report", folder)  # a second run replaces the page whole
    assert again.returncode == 0 and written(folder) == ["report.html"]


def test_dash_o_writes_the_page_where_it_says_and_nothing_in_the_sweep(two_models, tmp_path):
    target = tmp_path / "elsewhere.html"
    done = xsweep("report", two_models, "-o", target)
    assert done.returncode == 0, done.stderr
    assert target.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert written(two_models) == []


@pytest.mark.parametrize(("make", "words"), [
    (lambda root, sweep: root / "missing", ["missing: does not exist"]),
    (lambda root, sweep: SPACES / "h100x8-baseline.pbtxt",
     ["not a sweep's results: a deployment plan"]),
    (lambda root, sweep: SPACES / "quickstart.yaml", ["not a sweep's results: a sweep file"]),
    (lambda root, sweep: root, ["is neither a sweep's output folder (no sweep.zarr inside) "
                                "nor a study's (no study.json)",
                                "for what it holds: xsweep report ", "results/sweep"]),
])
def test_what_is_no_sweeps_folder_is_refused_in_one_line(two_models, tmp_path, make, words):
    root = tmp_path / "results"
    shutil.copytree(two_models, root / "sweep")
    done = xsweep("report", make(root, root / "sweep"))
    one_line_error(done, *words)
    assert written(tmp_path) == []


def test_an_output_that_cannot_be_written_is_refused_before_anything(two_models, tmp_path):
    one_line_error(xsweep("report", two_models, "-o", tmp_path / "no" / "page.html"),
                   "does not exist")
    one_line_error(xsweep("report", two_models, "-o", tmp_path), "is a folder")
    assert written(tmp_path) == [] and written(two_models) == []


@pytest.mark.parametrize(("file", "content", "words"), [
    ("summary.json", "{not json", ["summary.json: cannot be read as JSON"]),
    ("summary.json", '{"sweep": "x", "objectives": ["iteration_time_s"], "groups": 3}',
     ["summary.json", "groups", "expected list"]),
    ("validate/validate.json", "[]", ["validate.json: holds no JSON object"]),
])
def test_a_damaged_file_of_the_sweep_is_named_and_nothing_is_written(two_models, tmp_path, file,
                                                                   content, words):
    folder = tmp_path / "copy"
    shutil.copytree(two_models, folder)
    (folder / file).write_text(content)
    one_line_error(xsweep("report", folder), *words)
    assert written(folder) == []


def test_a_missing_front_plan_is_said_on_the_page(two_models, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(two_models, folder)
    removed = sorted((folder / "plans").glob("point-*.pbtxt"))[0]
    removed.unlink()
    done = xsweep("report", folder)
    assert done.returncode == 0, done.stderr
    assert f"{removed.name} is not in the sweep&#x27;s folder" in (
        folder / "report.html").read_text(encoding="utf-8")


def test_a_studys_folder_gets_its_report_of_trials(study, tmp_path):
    folder = tmp_path / "study"
    shutil.copytree(study, folder)
    done = xsweep("report", folder)
    assert done.returncode == 0, done.stderr
    text = (folder / "report.html").read_text(encoding="utf-8")
    document = json.loads((folder / "study.json").read_text())
    best = document["groups"][0]["best"]
    assert best and f"xsweep report: {document['study']} (study)" in text
    for plan in best:
        assert f'data-label="trial {plan["point"]}" data-total="' in text
        assert f"trial {plan['point']}: memory per GPU against capacity" in text
    totals = [float(t) for t in re.findall(
        r'data-label="trial \d+" data-total="([^"]+)"><title>trial \d+: iteration', text)]
    assert totals == pytest.approx([plan["iteration_time_s"] for plan in best], rel=1e-5)
    assert "The study&#x27;s other trials are in its storage" in text


def test_a_damaged_study_json_is_named_and_nothing_is_written(study, tmp_path):
    folder = tmp_path / "study"
    shutil.copytree(study, folder)
    document = json.loads((folder / "study.json").read_text())
    document["groups"][0]["best"][0]["iteration_time_s"] = "fast"
    (folder / "study.json").write_text(json.dumps(document))
    one_line_error(xsweep("report", folder), "study.json",
                   "groups[0].best[0].iteration_time_s", "fast", "expected a number")
    assert written(folder) == []


def test_a_sweep_without_a_feasible_point_gets_a_page_that_says_why(tmp_path):
    (tmp_path / "none.yaml").write_text(
        "name: nothing-fits\nmodel: llama2-70b\ntraining: {global_batch_size: 32}\n"
        "cluster:\n  pools: [{gpu: A100-40GB, nodes: 1, gpus_per_node: 8}]\n"
        "parallelism:\n  tp: {A100-40GB: [1, 2]}\nobjectives: [iteration_time_s]\n")
    swept = xsweep("sweep", tmp_path / "none.yaml", "-o", tmp_path / "sweep")
    assert swept.returncode == 1, swept.stderr  # no feasible point: the sweep's check fails
    done = xsweep("report", tmp_path / "sweep")
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "sweep" / "report.html").read_text(encoding="utf-8")
    assert "The front: no feasible point: 2 do not fit in GPU memory." in text
    assert text.count("No front: no plan to show.") == 3


def test_a_sweep_read_with_another_catalog_is_refused(two_models, tmp_path):
    """Another catalog would give the front plans other memory figures than the sweep's."""
    bigger = tmp_path / "bigger.yaml"
    bigger.write_text("gpus:\n  H100-SXM:\n    hbm_gib: 96\n")
    one_line_error(xsweep("report", two_models, "--catalog", bigger, "-o", tmp_path / "r.html"),
                   "sweep.zarr: catalog_version: the sweep ran with another catalog than this "
                   "one", "pass the --catalog files it used")
    assert written(tmp_path) == []


def _set(path: str, value):
    """A change of summary.json: ``path`` (keys and list indices, dotted) set to ``value``."""
    def change(document: dict) -> None:
        *parents, last = (int(k) if k.isdigit() else k for k in path.split("."))
        node = document
        for key in parents:
            node = node[key]
        node[last] = value
    return change


@pytest.mark.parametrize(("change", "words"), [
    (_set("objectives", ["bogus"]), ["objectives[0]", "bogus", "is not an objective"]),
    (_set("groups.0.work", ["model"]), ["groups[0].work", "expected an object"]),
    (_set("groups.0.front.0.point", 10 ** 9), ["groups[0].front[0].point", "is not a point"]),
    (_set("groups.0.front.0.point", "7"), ["groups[0].front[0].point", "expected a whole"]),
    (_set("groups.0.front.0.axes", "tp 2"), ["groups[0].front[0].axes", "expected an object"]),
    (_set("groups.0.front.0.same_plan", "3"), ["groups[0].front[0].same_plan"]),
])
def test_a_summary_json_not_as_a_sweep_writes_it_is_named_in_one_line(two_models, tmp_path,
                                                                        change, words):
    folder = tmp_path / "copy"
    shutil.copytree(two_models, folder)
    document = json.loads((folder / "summary.json").read_text())
    change(document)
    (folder / "summary.json").write_text(json.dumps(document))
    one_line_error(xsweep("report", folder), "summary.json", *words)
    assert written(folder) == []


def test_a_damaged_front_plan_file_is_named_and_nothing_is_written(two_models, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(two_models, folder)
    point = json.loads((folder / "summary.json").read_text())["groups"][0]["front"][0]["point"]
    plan = folder / "plans" / f"point-{point}.pbtxt"
    plan.write_text("name: 'x'\nmodel { preset: ")  # cut short
    one_line_error(xsweep("report", folder), str(plan))
    assert written(folder) == []
