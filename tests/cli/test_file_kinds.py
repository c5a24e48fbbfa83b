"""A file of the wrong kind names what it is and the command that takes it (exit 2);
``xsweep check DIR`` checks the files below a folder, one line each."""

from __future__ import annotations

import pytest

CATALOG = "gpus:\n  H100:\n    capex_usd: 30000\n"


@pytest.fixture
def catalog_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(CATALOG)
    return path


def one_line_error(result) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("command", ["sweep", "optimize"])
def test_a_plan_given_for_a_sweep(run_xsweep, spaces_dir, command):
    plan = spaces_dir / "appendix-b.pbtxt"
    assert one_line_error(run_xsweep(command, plan)) == (
        f"{plan}: not a sweep file: a deployment plan; use xsweep simulate")


def test_a_plan_given_for_a_sweep_with_emit_plan(run_xsweep, spaces_dir):
    plan = spaces_dir / "appendix-b.pbtxt"
    line = one_line_error(run_xsweep("sweep", plan, "--emit-plan", "0"))
    assert line.endswith("not a sweep file: a deployment plan; use xsweep simulate")


@pytest.mark.parametrize("command", ["sweep", "optimize"])
def test_a_catalog_given_for_a_sweep(run_xsweep, catalog_file, command, tmp_path):
    line = one_line_error(run_xsweep(command, catalog_file, "-o", tmp_path / "out"))
    assert line == f"{catalog_file}: not a sweep file: a catalog; give it with --catalog"


def test_a_results_folder_given_for_a_sweep(run_xsweep, tmp_path):
    folder = tmp_path / "results"
    (folder / "sweep.zarr").mkdir(parents=True)
    line = one_line_error(run_xsweep("sweep", folder))
    assert line == f"{folder}: not a sweep file: a sweep's results folder; use xsweep validate"


@pytest.mark.parametrize("command", ["plan", "simulate"])
def test_a_sweep_or_catalog_given_for_a_plan(run_xsweep, spaces_dir, catalog_file, command):
    space = spaces_dir / "quickstart.yaml"
    assert one_line_error(run_xsweep(command, space)) == (
        f"{space}: not a deployment plan: a sweep file; use xsweep sweep or xsweep optimize")
    assert one_line_error(run_xsweep(command, catalog_file)) == (
        f"{catalog_file}: not a deployment plan: a catalog; give it with --catalog")


def test_files_given_for_results(run_xsweep, spaces_dir, catalog_file):
    plan, space = spaces_dir / "appendix-b.pbtxt", spaces_dir / "quickstart.yaml"
    assert one_line_error(run_xsweep("validate", plan)) == (
        f"{plan}: not a sweep's results: a deployment plan; use xsweep simulate")
    assert one_line_error(run_xsweep("validate", space)) == (
        f"{space}: not a sweep's results: a sweep file; use xsweep sweep or xsweep optimize")
    assert one_line_error(run_xsweep("validate", catalog_file)) == (
        f"{catalog_file}: not a sweep's results: a catalog; give it with --catalog")


def test_check_a_folder_checks_the_files_below_it(run_xsweep, spaces_dir, tmp_path):
    folder = tmp_path / "plans"
    (folder / "deeper").mkdir(parents=True)
    (folder / ".hidden").mkdir()
    baseline = (spaces_dir / "h100x8-baseline.pbtxt").read_text()
    (folder / "b.pbtxt").write_text(baseline)
    (folder / "a.yaml").write_text((spaces_dir / "quickstart.yaml").read_text())
    (folder / "deeper" / "c.PBTXT").write_text(baseline)
    (folder / "notes.txt").write_text("not checked")
    (folder / ".hidden" / "d.pbtxt").write_text("not checked either")
    (folder / ".e.pbtxt").write_text("nor this")
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    result = run_xsweep("check", folder, bad)
    assert result.returncode == 2
    lines = result.stdout.splitlines()
    assert [line.split(": ", 1)[0] for line in lines] == [
        str(folder / "a.yaml"), str(folder / "b.pbtxt"), str(folder / "deeper" / "c.PBTXT")]
    assert "valid sweep 'quickstart-llama2-7b'" in lines[0]
    assert all("valid deployment plan 'h100x8-baseline'" in line for line in lines[1:])
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(f"{bad}: ")
    assert run_xsweep("check", folder).returncode == 0


def test_check_a_folder_with_nothing_to_check(run_xsweep, tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    line = one_line_error(run_xsweep("check", tmp_path))
    assert line.startswith(f"{tmp_path}: a folder with no plan, sweep or catalog inside")


def test_check_the_shipped_spaces_folder(run_xsweep, spaces_dir):
    """Every shipped file is checked; the seed paper's plans that do not fit in memory
    (docs/validation.md) fail the check, and pass it with --allow-oom."""
    files = sorted(p for p in spaces_dir.rglob("*") if p.suffix in (".pbtxt", ".yaml"))
    result = run_xsweep("check", spaces_dir)
    assert result.returncode == 1
    assert len(result.stdout.splitlines()) + len(result.stderr.splitlines()) == len(files)
    assert all("/paper/" in line and "does not fit in memory" in line
               for line in result.stderr.splitlines())
    allowed = run_xsweep("check", spaces_dir, "--allow-oom")
    assert allowed.returncode == 0 and allowed.stderr == ""
    assert len(allowed.stdout.splitlines()) == len(files)
