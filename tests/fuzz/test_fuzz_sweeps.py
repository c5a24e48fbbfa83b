"""Property-based fuzzing of sweeps: hostile names, odd ranges, pools of any size.

Every generated sweep file is accepted or refused with one InputError line naming the
file, within the time and memory budget (``tests/support/budget.py``). An accepted one has a
name that is a plain folder name, and its points plan in a moment whatever its pools'
size: each into a plan that passes validation (so evaluating it cannot fail), or an
infeasible point with a one-line reason. Through the command line, ``xsweep check``
agrees with the library on every file, and ``xsweep sweep`` refuses what the library
refuses, writing nothing, or writes only under ``results/<name>`` of its working folder.
Fixed seed; ``-m slow`` runs more examples.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.mutations import SANDBOX, Sample, hostile_sweeps
from tests.support.budget import MEMORY_BYTES, in_process_budget, one_line_per_file
from xsweep.errors import InputError
from xsweep.search.folders import results_folder
from xsweep.search.space.grid import MAX_GRID_POINTS, Grid, check_grid_size
from xsweep.search.space.planner import Built, Planner, plan_name
from xsweep.spec.sweep import Sweep, check_sweep_limits, load_sweep, name_problem
from xsweep.spec.validate import validate_plan

#: Grids small enough to plan every point of, and to sweep through the CLI when no point
#: has a plan (no kernel runs then).
SMALL_GRID = 64


def fuzz(examples: int):
    return settings(max_examples=examples, derandomize=True, database=None, deadline=None,
                    suppress_health_check=list(HealthCheck))


def write_sweep(sample: Sample, folder: Path, sandbox: Path, index: int = 0) -> Path:
    """``sample`` in ``folder``, its drawn absolute names pointing into ``sandbox``."""
    path = folder / f"{index}-sweep.yaml"
    path.write_bytes(sample.data.replace(SANDBOX.encode(), str(sandbox).encode()))
    return path


def one_line_about(error: InputError, path: Path) -> None:
    text = str(error)
    assert "\n" not in text and text.startswith(f"{path}: "), text


def verdict(path: Path, catalog) -> tuple[Sweep | None, bool]:
    """The library's verdict on a sweep file: the sweep (None when refused, as ``xsweep
    check`` refuses it) and whether ``xsweep sweep`` takes its grid."""
    try:
        sweep = load_sweep(path, catalog)
        check_sweep_limits(sweep, str(path))
    except InputError as error:
        one_line_about(error, path)
        return None, False
    assert name_problem(sweep.name) == ""
    assert results_folder(sweep.name).parent == Path("results")
    try:
        check_grid_size(sweep, str(path))
    except InputError as error:
        one_line_about(error, path)
        return sweep, False
    return sweep, True


def plans_of(sweep: Sweep, catalog, every: bool) -> list:
    """Plan the first, middle and last points (every point with ``every``); each Built
    plan passes validation, each infeasible point has a one-line reason."""
    grid = Grid(sweep)
    planner = Planner(sweep, catalog)
    indices = range(grid.size) if every else sorted({0, grid.size // 2, grid.size - 1})
    found = []
    for index in indices:
        out = planner.plan(grid.point(index), plan_name(sweep, index))
        if isinstance(out, Built):
            validate_plan(out.plan, catalog)
        else:
            assert out.reason and "\n" not in out.reason, out.reason
        found.append(out)
    return found


@fuzz(100)
@given(sample=hostile_sweeps())
def test_a_sweep_is_planned_in_a_moment_or_refused_in_one_line(tmp_path_factory, catalog,
                                                               sample):
    folder = tmp_path_factory.mktemp("sweep")
    path = write_sweep(sample, folder, folder)
    with in_process_budget(seconds=20):
        sweep, gridded = verdict(path, catalog)
        if gridded:
            plans_of(sweep, catalog, every=False)
        elif sweep is None:
            # A sweep the commands refuse for its size still plans in a moment: the planner
            # holds each point to the limits by arithmetic, whoever calls it.
            try:
                sweep = load_sweep(path, catalog)
            except InputError:
                sweep = None
            if sweep is not None and sweep.grid_size() <= MAX_GRID_POINTS:
                plans_of(sweep, catalog, every=False)
    assert list(folder.iterdir()) == [path]  # the library writes nothing


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


def xsweep(cwd: Path, *args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xsweep.cli.main", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False,
                          preexec_fn=_limit_memory, env=dict(os.environ))


def everything(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def check_cli(root: Path, catalog, samples: list[Sample], commands: tuple[str, ...]) -> None:
    files_folder, cwd = root / "in", root / "a" / "b" / "cwd"
    files_folder.mkdir()
    cwd.mkdir(parents=True)
    files = [write_sweep(s, files_folder, root, i) for i, s in enumerate(samples)]
    verdicts = {path: verdict(path, catalog) for path in files}
    before = everything(root)
    result = xsweep(cwd, "check", *files)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    accepted = {path: sweep is not None for path, (sweep, _) in verdicts.items()}
    assert result.returncode == (0 if all(accepted.values()) else 2), result.stderr
    for path, (stream, line) in one_line_per_file(result, files).items():
        assert stream == ("stdout" if accepted[path] else "stderr"), line
    assert everything(root) == before
    for command in commands:
        for path in files:
            sweep, gridded = verdicts[path]
            taken = gridded if command == "sweep" else sweep is not None
            if taken and (Grid(sweep).size > SMALL_GRID or any(
                    isinstance(out, Built) for out in plans_of(sweep, catalog, every=True))):
                continue  # it would evaluate plans: too slow for this test
            result = xsweep(cwd, command, path, *(("--trials", "4") if command == "optimize"
                                                  else ()))
            assert "Traceback" not in result.stderr, result.stderr
            new = everything(root) - before
            if taken:  # no point of it builds a plan: no feasible point, a check failed
                assert result.returncode == 1, result.stderr
                assert "no feasible" in result.stderr, result.stderr
                assert new, "the results are written"
                inside = f"a/b/cwd/results/{sweep.name}"
                assert all(p == inside or p.startswith(f"{inside}/") or
                           p in ("a/b/cwd/results",) for p in new), sorted(new)
            else:
                assert result.returncode == 2 and result.stdout == "", result.stderr
                assert result.stderr.count("\n") == 1, result.stderr
                assert result.stderr.startswith(f"{path}: "), result.stderr
                assert not new, sorted(new)
            before = everything(root)


@fuzz(2)
@given(samples=st.lists(hostile_sweeps(), min_size=8, max_size=8))
def test_the_cli_agrees_and_writes_only_inside_its_folder(tmp_path_factory, catalog, samples):
    root = tmp_path_factory.mktemp("cli")
    check_cli(root, catalog, samples, ())
    check_cli(tmp_path_factory.mktemp("cli"), catalog, samples[:1], ("sweep",))


@pytest.mark.slow
@fuzz(20)
@given(samples=st.lists(hostile_sweeps(), min_size=4, max_size=4))
def test_more_sweeps_through_every_command(tmp_path_factory, catalog, samples):
    check_cli(tmp_path_factory.mktemp("cli"), catalog, samples, ("sweep", "optimize"))
