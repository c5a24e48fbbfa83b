"""Each command and each source in a folder of its own, and one process per folder, through
the real CLI: ``sweep``, ``optimize`` and their validations never write over each other,
``--overwrite`` removes only what a sweep owns, a second process on a held folder is
refused with a line naming the holder, and a holder killed with SIGKILL leaves no stuck
lock (nor, for a study, trials that count).

Every space here is infeasible at every point, so no kernel runs and each command takes
seconds. A sweep whose points are all infeasible writes its outputs and exits 0 or 1
(1: no work group has a feasible plan); either way its folder is whole.
"""

from __future__ import annotations

import hashlib
import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from xsweep.search.locks import LOCK_FILE

NAME = "a100-cannot-hold-70b"
# Llama-2-70B fits on no layout of one A100-40GB node.
NO_FIT = f"""\
name: {NAME}
model: llama2-70b
training: {{global_batch_size: 16, total_tokens: 1.0e+9}}
cluster:
  pools: [{{gpu: A100-40GB, nodes: 1}}]
parallelism:
  tp: {{A100-40GB: [4, 8]}}
  pp: [1, 2]
objectives: [iteration_time_s, cost_per_run_usd]
"""
#: The same model on up to 4 nodes at many layouts: a sweep that holds its folder a while.
LARGER = NO_FIT.replace("global_batch_size: 16", "global_batch_size: [16, 32, 64, 128, 256]") \
    .replace("nodes: 1}", "nodes: [1, 2, 3, 4]}").replace("[4, 8]", "[1, 2, 4, 8]") \
    .replace("pp: [1, 2]", "pp: [1, 2, 4, 8]\n  micro_batch_size: [1, 2, 4]")


def xsweep(cwd: Path, *args: object, timeout_s: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xsweep.cli.main", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout_s, check=False)


def start(cwd: Path, *args: object) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "xsweep.cli.main", *map(str, args)],
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def swept(result: subprocess.CompletedProcess) -> None:
    """A sweep of an infeasible space that ran to its end (see the module docstring)."""
    assert result.returncode == 1, result.stderr  # no point fits: a check failed
    assert "no feasible point among" in result.stderr and "Traceback" not in result.stderr


def files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def refused_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr
    return result.stderr.strip()


def test_each_command_and_each_source_writes_a_folder_of_its_own(tmp_path):
    (tmp_path / "space.yaml").write_text(NO_FIT)
    root = tmp_path / "results" / NAME
    swept(xsweep(tmp_path, "sweep", "space.yaml"))
    assert (root / "sweep" / "sweep.zarr").is_dir() and (root / "sweep" / "summary.json").is_file()
    studied = xsweep(tmp_path, "optimize", "space.yaml", "--trials", "4", "--batch", "2", "--json")
    assert studied.returncode == 1, studied.stderr
    study = root / "study"
    assert json.loads(studied.stdout)["folder"] == str(Path("results", NAME, "study"))
    assert json.loads((study / "study.json").read_text()) == json.loads(studied.stdout)
    assert (study / "study.db").is_file() and (study / "plans").is_dir()
    assert sorted(p.name for p in root.iterdir()) == ["study", "sweep"]

    # each validation inside the source it validates
    assert xsweep(tmp_path, "validate", root / "sweep", "--json").returncode == 0
    url = f"sqlite:///{Path('results', NAME, 'study', 'study.db')}"
    checked = xsweep(tmp_path, "validate", url, "--study", NAME, "--json")
    assert checked.returncode == 0, checked.stderr
    assert json.loads((root / "sweep" / "validate" / "validate.json").read_text())["source"] == "sweep"
    assert json.loads((study / "validate" / "validate.json").read_text())["source"] == "study"
    kept = files(study)

    # a changed sweep replaced with --overwrite: the sweep's own files go, the study's stay
    (tmp_path / "space.yaml").write_text(NO_FIT.replace("pp: [1, 2]", "pp: [1, 2, 4]"))
    assert "--overwrite" in refused_line(xsweep(tmp_path, "sweep", "space.yaml"))
    swept(xsweep(tmp_path, "sweep", "space.yaml", "--overwrite"))
    assert not (root / "sweep" / "validate").exists()  # it validated the replaced results
    assert files(study) == kept
    assert not any(p.name == LOCK_FILE for p in root.rglob("*"))  # released, removed

    # a study of another name (for the changed space) gets a folder of its own too
    other = xsweep(tmp_path, "optimize", "space.yaml", "--study", "v2", "--trials", "2", "--json")
    assert other.returncode == 1, other.stderr
    assert (root / "study-v2" / "study.db").is_file() and files(study) == kept
    assert optuna.get_all_study_names(f"sqlite:///{root / 'study-v2' / 'study.db'}") == ["v2"]


def test_a_command_refuses_another_commands_folder(tmp_path):
    (tmp_path / "space.yaml").write_text(NO_FIT)
    assert xsweep(tmp_path, "optimize", "space.yaml", "-o", "out", "--trials", "2").returncode == 1
    kept = files(tmp_path / "out")
    for extra in ((), ("--overwrite",)):
        assert refused_line(xsweep(tmp_path, "sweep", "space.yaml", "-o", "out", *extra)) == (
            "out: holds an Optuna study (study.db, written by xsweep optimize); a sweep needs a "
            "folder of its own: choose another with -o")
    assert files(tmp_path / "out") == kept  # the study's plans too
    assert refused_line(xsweep(tmp_path, "optimize", "space.yaml", "-o", "out", "--study", "s2")) \
        == (f"out: holds study '{NAME}' (study.json); study 's2' needs a folder of its own: "
            "choose another with -o")
    swept(xsweep(tmp_path, "sweep", "space.yaml", "-o", "swept"))
    assert refused_line(xsweep(tmp_path, "optimize", "space.yaml", "-o", "swept")) == (
        "swept: holds a sweep's results (sweep.zarr, written by xsweep sweep); a study needs a "
        "folder of its own: choose another with -o")
    assert files(tmp_path / "out") == kept


def holder_of(folder: Path) -> int | None:
    try:
        return json.loads((folder / LOCK_FILE).read_text()).get("pid")
    except (OSError, ValueError):
        return None


def stopped_holding(cwd: Path, folder: Path, *args: object) -> subprocess.Popen:
    """A command started with ``args``, stopped (SIGSTOP) as soon as it holds ``folder``."""
    for _ in range(3):  # on a loaded machine it may finish before it is caught holding
        process = start(cwd, *args)
        deadline = time.monotonic() + 120
        while holder_of(folder) != process.pid and process.poll() is None:
            assert time.monotonic() < deadline, "the command never took its folder's lock"
            time.sleep(0.005)
        if process.poll() is None:
            process.send_signal(signal.SIGSTOP)
            return process
        process.communicate()
    pytest.fail("the command always ended before it could be stopped")


def test_a_second_sweep_is_refused_and_a_killed_holder_frees_the_folder(tmp_path):
    (tmp_path / "space.yaml").write_text(LARGER)
    out = tmp_path / "out"
    first = stopped_holding(tmp_path, out, "sweep", "space.yaml", "-o", out, "--processes", "1")
    try:
        line = refused_line(xsweep(tmp_path, "sweep", "space.yaml", "-o", out))
        assert line.startswith(f"{out}: in use by xsweep sweep space.yaml (pid {first.pid}, since ")
        assert line.endswith("); wait for it to end, or choose another folder with -o")
        # validating the folder while a sweep writes it is refused the same way
        assert refused_line(xsweep(tmp_path, "validate", out)).startswith(
            f"{out}: in use by xsweep sweep space.yaml (pid {first.pid}, since ")
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate()
    assert first.returncode == -signal.SIGKILL
    assert (out / LOCK_FILE).exists()  # left by the killed holder, but not locked
    again = xsweep(tmp_path, "sweep", "space.yaml", "-o", out, "--processes", "1")
    swept(again)
    assert "in use" not in again.stderr and (out / "sweep.zarr").is_dir()
    assert not (out / LOCK_FILE).exists()


def running_trials(database: Path) -> int:
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=1) as db:
            return db.execute("select count(*) from trials where state = 'RUNNING'").fetchone()[0]
    except sqlite3.Error:  # not made yet, or being written
        return 0


def test_a_second_optimize_is_refused_and_a_killed_runs_trials_do_not_count(tmp_path):
    (tmp_path / "space.yaml").write_text(NO_FIT)
    out = tmp_path / "out"
    first = start(tmp_path, "optimize", "space.yaml", "-o", out, "--trials", "1000",
                  "--batch", "200")
    try:
        deadline = time.monotonic() + 120
        while running_trials(out / "study.db") < 3:  # asked, not yet told
            assert first.poll() is None and time.monotonic() < deadline, first.stderr.read()
            time.sleep(0.05)
        first.send_signal(signal.SIGSTOP)
        assert holder_of(out) == first.pid
        line = refused_line(xsweep(tmp_path, "optimize", "space.yaml", "-o", out, "--trials", "8"))
        assert line.startswith(f"{out}: in use by xsweep optimize space.yaml (pid {first.pid}, ")
        assert refused_line(xsweep(tmp_path, "validate", f"sqlite:///{out / 'study.db'}",
                                   "--study", NAME)).startswith(
            f"{out}: in use by xsweep optimize space.yaml (pid {first.pid}, ")
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate()
    storage = f"sqlite:///{out / 'study.db'}"
    states = optuna.trial.TrialState
    left = [t.number for t in optuna.load_study(study_name=NAME, storage=storage).get_trials()
            if t.state == states.RUNNING]
    assert left  # the killed run's trials, asked and never told
    rerun = xsweep(tmp_path, "optimize", "space.yaml", "-o", out, "--trials", "8", "--batch", "4",
                   "--json")
    assert rerun.returncode == 1, rerun.stderr
    summary = json.loads(rerun.stdout)
    assert summary["trials_this_run"] == 8
    assert summary["trials"]["counted"] == 8 and summary["trials"]["unfinished"] == len(left)
    trials = optuna.load_study(study_name=NAME, storage=storage).get_trials()
    for t in trials:
        if t.number in left:
            assert t.state == states.FAIL and t.user_attrs["unfinished"] is True
            assert t.user_attrs["reason"] == "its run ended before its result was told (killed)"
        else:
            assert t.state == states.FAIL and "unfinished" not in t.user_attrs
    assert len(trials) == len(left) + 8
    assert not (out / LOCK_FILE).exists()


def test_a_study_in_a_file_elsewhere_locks_that_files_folder(tmp_path):
    """``--storage sqlite:///...`` outside the output folder: the file's folder is held."""
    (tmp_path / "space.yaml").write_text(NO_FIT)
    (tmp_path / "db").mkdir()
    url = f"sqlite:///{tmp_path / 'db' / 'studies.db'}"
    first = start(tmp_path, "optimize", "space.yaml", "-o", "a", "--storage", url,
                  "--trials", "1000", "--batch", "200")
    try:
        deadline = time.monotonic() + 120
        while running_trials(tmp_path / "db" / "studies.db") < 1:
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        first.send_signal(signal.SIGSTOP)
        line = refused_line(xsweep(tmp_path, "optimize", "space.yaml", "-o", "b", "--storage",
                                   url, "--trials", "8"))
        assert line.startswith(f"{tmp_path / 'db'}: in use by xsweep optimize space.yaml "
                               f"(pid {first.pid}, ")
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate()
    assert not (tmp_path / "b").exists()  # refused before anything was written
