"""Every rule of plan validation: ``xsweep check`` refuses the plan, and so does the library.

The library must never score a plan the command line refuses: ``xsweep.load_plan``
and ``xsweep.evaluate`` (on paths and on messages built in memory) raise the same
``InputError``, naming the same field, as ``xsweep check`` prints.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import xsweep
from tests.support.invalid_plans import RULES
from tests.support.paths import REPO_ROOT
from xsweep.errors import InputError
from xsweep.spec import enums, validate
from xsweep.spec.plan_io import plan_to_text

IDS = [rule.name for rule in RULES]


def raise_lines(module) -> set[int]:
    tree = ast.parse(Path(module.__file__).read_text())
    return {node.lineno for node in ast.walk(tree) if isinstance(node, ast.Raise)}


def test_the_rules_reach_every_raise_of_plan_validation(catalog, monkeypatch):
    files = {validate.__file__: validate, enums.__file__: enums}
    reached: set[tuple[str, int]] = set()

    def trace(frame, event, _arg):
        if frame.f_code.co_filename in files:
            if event == "line":
                reached.add((frame.f_code.co_filename, frame.f_lineno))
            return trace
        return None

    for rule in RULES:
        with monkeypatch.context() as env:
            for name, value in rule.env.items():
                env.setenv(name, value)
            sys.settrace(trace)
            try:
                with pytest.raises(InputError):
                    validate.validate_plan(rule.plan(), catalog, "p.pbtxt")
            finally:
                sys.settrace(None)
    sys.settrace(trace)
    try:
        with pytest.raises(InputError, match="expected a DeploymentPlan"):
            validate.validate_plan("p.pbtxt", catalog)  # a library caller's mistake
    finally:
        sys.settrace(None)
    for file, module in files.items():
        missed = sorted(raise_lines(module) - {line for f, line in reached if f == file})
        assert not missed, f"{Path(file).name}: no rule reaches the raise on lines {missed}"


@pytest.fixture(scope="module")
def check_lines(tmp_path_factory) -> dict[str, str]:
    """``xsweep check`` on every rule's plan: rule name -> its stderr line."""
    folder = tmp_path_factory.mktemp("rules")
    paths = {}
    for index, rule in enumerate(RULES):
        paths[rule.name] = folder / f"rule{index}.pbtxt"
        paths[rule.name].write_text(plan_to_text(rule.plan()))
    lines = {}
    for env in {tuple(sorted(rule.env.items())) for rule in RULES}:
        group = [rule for rule in RULES if tuple(sorted(rule.env.items())) == env]
        result = subprocess.run(
            [sys.executable, "-m", "xsweep.cli.main", "check",
             *(str(paths[rule.name]) for rule in group)],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False,
            env={**os.environ, **dict(env)})
        assert result.returncode == 2 and result.stdout == "", result.stdout
        errors = result.stderr.splitlines()
        assert len(errors) == len(group), result.stderr
        for rule, line in zip(group, errors, strict=True):
            assert line.startswith(f"{paths[rule.name]}: "), line
            lines[rule.name] = line
    return lines


@pytest.mark.parametrize("rule", RULES, ids=IDS)
def test_check_and_the_library_refuse_the_same_plan(rule, check_lines, monkeypatch, tmp_path,
                                                    catalog):
    assert f": {rule.field}: " in check_lines[rule.name]
    for name, value in rule.env.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "plan.pbtxt"
    path.write_text(plan_to_text(rule.plan()))
    with pytest.raises(InputError) as loaded:
        xsweep.load_plan(path)
    assert (loaded.value.file, loaded.value.field) == (str(path), rule.field)
    with pytest.raises(InputError) as from_path:
        xsweep.evaluate([path], level="bound")
    assert (from_path.value.file, from_path.value.field) == (str(path), rule.field)
    with pytest.raises(InputError) as in_memory:
        xsweep.evaluate([rule.plan()], level="bound", catalog=catalog)
    assert in_memory.value.field == rule.field
    assert in_memory.value.file.startswith("plans[0]")
