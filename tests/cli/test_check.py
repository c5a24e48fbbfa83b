"""``xsweep check`` on the shipped examples, kind detection, and the dispatcher's exit codes."""

from __future__ import annotations

import argparse
import shutil
import subprocess

import pytest

from xsweep import __version__
from xsweep.cli.common import run_guarded
from xsweep.spec.plan_io import load_plan, plan_to_json


def shipped_examples(spaces_dir) -> list:
    return sorted(spaces_dir.glob("*.pbtxt")) + sorted(spaces_dir.glob("*.yaml"))


def test_every_shipped_example_is_valid(run_xsweep, spaces_dir):
    files = shipped_examples(spaces_dir)
    assert len(files) >= 4
    result = run_xsweep("check", *files)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert len(lines) == len(files)
    assert lines[0] == (f"{files[0]}: valid deployment plan 'appendix-b' "
                        "(10 ranks, 4 device groups)")


def test_kinds_are_detected(run_xsweep, spaces_dir, tmp_path):
    json_plan = tmp_path / "plan.json"
    json_plan.write_text(plan_to_json(load_plan(spaces_dir / "h100x8-baseline.pbtxt")))
    catalog = tmp_path / "mine.yaml"
    catalog.write_text("nics:\n  cx9: {bandwidth_gbps: 1600, latency_ns: 300, bus_efficiency: 0.96,"
                       " launch_latency_us: 22}\n")
    result = run_xsweep("check", json_plan, catalog, spaces_dir / "quickstart.yaml")
    assert result.returncode == 0, result.stderr
    plan_line, catalog_line, sweep_line = result.stdout.splitlines()
    assert plan_line == f"{json_plan}: valid deployment plan 'h100x8-baseline' (8 ranks, 4 device groups)"
    assert catalog_line.startswith(f"{catalog}: valid catalog (5 gpus, 7 nics")
    assert "valid sweep 'quickstart-llama2-7b'" in sweep_line


def test_user_catalog_is_used_for_plans(run_xsweep, spaces_dir, tmp_path):
    plan = tmp_path / "p.pbtxt"
    text = (spaces_dir / "h100x8-baseline.pbtxt").read_text()
    plan.write_text(text.replace('gpu: "H100-SXM"', 'gpu: "H100-SXM" nic: "cx9"'))
    catalog = tmp_path / "mine.yaml"
    catalog.write_text("nics:\n  cx9: {bandwidth_gbps: 1600, latency_ns: 300, bus_efficiency: 0.96,"
                       " launch_latency_us: 22}\n")
    assert run_xsweep("check", plan).returncode == 2
    result = run_xsweep("check", plan, "--catalog", catalog)
    assert result.returncode == 0, result.stderr


def test_good_and_bad_files_together(run_xsweep, spaces_dir, tmp_path):
    bad = tmp_path / "bad.pbtxt"
    bad.write_text('name: "x"\n')
    result = run_xsweep("check", spaces_dir / "appendix-b.pbtxt", bad)
    assert result.returncode == 2
    assert len(result.stdout.splitlines()) == 1
    assert len(result.stderr.splitlines()) == 1


def test_version_and_help(run_xsweep):
    assert run_xsweep("--version").stdout.strip() == f"xsweep {__version__}"
    help_text = run_xsweep("--help").stdout
    assert "check" in help_text
    result = run_xsweep()
    assert result.returncode == 2 and "usage: xsweep" in result.stderr


def test_console_script():
    script = shutil.which("xsweep")
    if script is None:
        pytest.skip("xsweep is not installed (pip install -e .)")
    result = subprocess.run([script, "--version"], capture_output=True, text=True, check=False)
    assert result.stdout.strip() == f"xsweep {__version__}"


def test_interrupt_exits_130(capsys):
    def interrupted(_args):
        raise KeyboardInterrupt

    assert run_guarded(interrupted, argparse.Namespace()) == 130
    assert capsys.readouterr().err == "interrupted\n"
