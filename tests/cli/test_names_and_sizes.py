"""Hostile names and huge pools through the real command line.

A sweep's or study's name that is no plain folder name (absolute, ``..``, ``.``, a NUL,
too long, not ASCII) is refused by ``check``, ``sweep`` and ``optimize`` with one line
naming the file and the field, exit 2, and nothing written anywhere. A pool of 65,536 x
65,536 GPUs is refused before anything is planned; a space of 4,096 x 4,096 GPUs whose
points are all infeasible is found so in seconds, within the 1 GB budget. Commands run
in a working folder nested inside the test's folder, so that any write outside the
output folder shows.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.support.budget import MEMORY_BYTES, run_cli

BASE = {
    "name": "tiny",
    "model": "llama2-70b",  # fits on no layout of one A100-40GB node: no kernel runs
    "training": {"global_batch_size": 16},
    "cluster": {"pools": [{"gpu": "A100-40GB", "nodes": 1}]},
    "parallelism": {"tp": {"A100-40GB": [4, 8]}, "pp": [1, 2]},
}
ABSOLUTE = "@ABSOLUTE@"  # replaced by a folder of the test's own
NAMES = {
    "absolute": ABSOLUTE,
    "parent": "../../escaped",
    "grandparent": "../../../../escaped",
    "dot": ".",
    "dot-dot": "..",
    "nul": "a\0b",
    "long": "x" * 300,
    "unicode": "café-ü-名前",
}


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


def xsweep(cwd: Path, *args: object, env: dict | None = None, timeout_s: float = 120):
    """The real CLI in ``cwd``, within the memory budget of ``tests/support/budget.py``."""
    return subprocess.run([sys.executable, "-m", "xsweep.cli.main", *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, timeout=timeout_s,
                          check=False, preexec_fn=_limit_memory,
                          env={**os.environ, **(env or {})})


def everything(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture
def sandbox(tmp_path) -> tuple[Path, Path]:
    """(root, working folder three levels below it)."""
    cwd = tmp_path / "a" / "b" / "cwd"
    cwd.mkdir(parents=True)
    return tmp_path, cwd


def write_space(root: Path, name: str, document: dict | None = None, file: str = "space") -> Path:
    document = dict(document or BASE, name=name.replace(ABSOLUTE, str(root / "abs")))
    path = root / "spaces" / f"{file}.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(document))
    return path


def refused_in_one_line(result: subprocess.CompletedProcess, start: str) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == "" and "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(start), result.stderr
    return lines[0]


@pytest.mark.parametrize("name", NAMES.values(), ids=NAMES.keys())
def test_a_hostile_sweep_name_is_refused_by_every_command(sandbox, name):
    root, cwd = sandbox
    space = write_space(root, name)
    before = everything(root)
    checked = xsweep(cwd, "check", space)
    assert checked.returncode == 2 and checked.stdout == ""
    assert checked.stderr.startswith(f"{space}: name: ")
    for command in (("sweep", space), ("sweep", space, "--json"), ("optimize", space),
                    ("optimize", space, "--trials", "2", "--json"),
                    ("sweep", space, "--emit-plan", "0")):
        refused_in_one_line(xsweep(cwd, *command), f"{space}: name: ")
    assert everything(root) == before  # nothing written, inside the sandbox or out of it


@pytest.mark.parametrize("name", [n for n in NAMES.values() if "\0" not in n],
                         ids=[k for k, n in NAMES.items() if "\0" not in n])
def test_a_hostile_study_name_is_refused_before_anything_is_written(sandbox, name):
    root, cwd = sandbox
    space = write_space(root, "tiny")
    study = name.replace(ABSOLUTE, str(root / "abs"))
    before = everything(root)
    refused_in_one_line(xsweep(cwd, "optimize", space, "--study", study, "--trials", "2"),
                        "--study: ")
    refused_in_one_line(xsweep(cwd, "validate", f"sqlite:///{root / 'none.db'}", "--study",
                               study), "--study: ")
    assert everything(root) == before


def test_a_valid_name_writes_only_under_results(sandbox):
    root, cwd = sandbox
    space = write_space(root, "Tiny.Space-1_a")
    before = everything(root)
    result = xsweep(cwd, "sweep", space, "--json")
    assert result.returncode == 1, result.stderr  # no point fits: a check failed
    assert json.loads(result.stdout)["status"] == {"infeasible": 4}
    new = everything(root) - before
    assert new and all(p.startswith("a/b/cwd/results") for p in new), sorted(new)
    assert "a/b/cwd/results/Tiny.Space-1_a/sweep/summary.json" in new


def test_the_study_database_stays_in_an_output_folder_of_any_name(sandbox):
    root, cwd = sandbox
    space = write_space(root, "tiny")
    folder = "o?x#y%20z{SCHEMA_VERSION}"  # a query, a fragment, an escape, a template field
    before = everything(root)
    result = xsweep(cwd, "optimize", space, "-o", folder, "--trials", "2", "--json")
    assert result.returncode == 1, result.stderr  # no plan fits: a check failed
    new = everything(root) - before
    assert (cwd / folder / "study.db").is_file()
    assert all(p.startswith(f"a/b/cwd/{folder}") for p in new), sorted(new)


HUGE = {**BASE, "name": "huge", "training": {"global_batch_size": 32},
        "cluster": {"pools": [{"gpu": "H100-SXM", "nodes": 65_536, "gpus_per_node": 65_536}]},
        "parallelism": {"tp": {"H100-SXM": 1}}}


def test_a_pool_of_65536_by_65536_gpus_is_refused_at_once(sandbox):
    root, cwd = sandbox
    space = write_space(root, "huge", HUGE)
    before = everything(root)
    for command in ("check", "sweep", "optimize"):
        began = time.perf_counter()
        result = xsweep(cwd, command, space, timeout_s=60)
        spent = time.perf_counter() - began
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.strip() == (
            f"{space}: cluster.pools[0]: the pool's GPU count at its largest (65,536 nodes of "
            "65,536 GPUs) exceeds the limit of 65,536 (set XSWEEP_MAX_GPUS to raise it) (got "
            "4294967296)")
        assert spent < 30, (command, spent)  # a guard: the refusal takes well under a second
    assert everything(root) == before


def test_a_space_of_4096_by_4096_gpus_all_infeasible_is_swept_in_seconds(sandbox):
    root, cwd = sandbox
    document = {**HUGE, "name": "big", "training": {"global_batch_size": [32, 64]},
                "cluster": {"pools": [{"gpu": "H100-SXM", "nodes": 4096,
                                       "gpus_per_node": 4096}]},
                "parallelism": {"tp": {"H100-SXM": [1, 2, 4, 8]}, "pp": [1, 2, 4, 8]}}
    space = write_space(root, "big", document)
    refused_in_one_line(xsweep(cwd, "sweep", space), f"{space}: cluster.pools[0]: ")
    env = {"XSWEEP_MAX_GPUS": str(4096 * 4096)}
    result = xsweep(cwd, "sweep", space, "--json", env=env, timeout_s=60)
    assert result.returncode == 1, result.stderr  # no feasible point: said, and exit 1
    assert "16 have a global batch that does not split" in result.stderr
    summary = json.loads(result.stdout)
    assert summary["points"] == 32 and summary["status"] == {"infeasible": 32}
    assert summary["timings"]["planning_s"] < 10
    checked = run_cli("check", space, env=env)
    assert checked.returncode == 0 and "32 grid points" in checked.stdout
