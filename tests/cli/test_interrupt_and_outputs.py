"""Ctrl-C at any moment, output paths checked before work, and strict JSON on stdout."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.support.budget import REPO_ROOT, run_cli
from tests.support.hostile_inputs import PLAN
from xsweep.cli.common import json_text

# A plan whose simulation runs for a few seconds: 1,500 micro-batches per replica.
SLOW_PLAN = (PLAN.replace("num_micro_batches: 4", "num_micro_batches: 1500")
             .replace("global_batch_size: 8", "global_batch_size: 3000"))


@pytest.mark.parametrize("delay_s", [0.3, 0.6, 1.0, 1.6, 2.5])
def test_ctrl_c_at_any_moment_exits_130_with_one_line(tmp_path, delay_s):
    plan = tmp_path / "slow.pbtxt"
    plan.write_text(SLOW_PLAN)
    trace = tmp_path / "trace.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "xsweep.cli.main", "simulate", plan, "--json", "--trace", trace],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(delay_s)  # start-up, loading modules, lowering or simulating
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert "Traceback" not in stderr
    if process.returncode == 0:  # finished first: a complete document
        json.loads(stdout)
        return
    assert process.returncode == 130, stderr
    assert stderr.splitlines()[-1] == "interrupted"
    assert stdout == ""
    assert [p.name for p in tmp_path.iterdir()] == ["slow.pbtxt"]  # nothing half-written


# Ctrl-C landing in a weak-reference callback (SQLAlchemy's, under an Optuna storage):
# the callback here raises KeyboardInterrupt as the signal handler would there.
SWALLOWED_SCRIPT = """
import argparse, sys, time, weakref
from xsweep.cli.common import run_guarded

class Thing:
    pass

def run(args):
    def callback(ref):
        raise KeyboardInterrupt
    thing = Thing()
    ref = weakref.ref(thing, callback)
    del thing  # the callback runs now; Python reports and swallows what it raises
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        time.sleep(0.01)
    return 0

sys.exit(run_guarded(run, argparse.Namespace()))
"""


# The same while the command's modules load, before run_guarded: importlib's module locks
# have weak-reference callbacks, where a real Ctrl-C at start-up can land.
SWALLOWED_AT_START_SCRIPT = """
import sys, time, weakref
from xsweep.cli import main as cli

class Thing:
    pass

parse = cli.build_parser

def build_parser(*args):
    def callback(ref):
        raise KeyboardInterrupt
    thing = Thing()
    ref = weakref.ref(thing, callback)
    del thing
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        time.sleep(0.01)
    return parse(*args)

cli.build_parser = build_parser
sys.exit(cli.main(["check", "--help"]))
"""


@pytest.mark.parametrize("script", [SWALLOWED_SCRIPT, SWALLOWED_AT_START_SCRIPT],
                         ids=["while-running", "while-loading"])
def test_ctrl_c_swallowed_by_a_callback_still_stops_the_command(script):
    process = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=60)
    assert process.returncode == 130, process.stderr
    assert process.stderr.splitlines() == ["interrupted"]


# A Ctrl-C at the two edges of the end of `xsweep simulate --trace`: the trace staged
# beside its name (not yet renamed there), and the trace in place while the result is
# printed. The function named by argv[1] sends this process SIGINT as it returns.
EDGE_SCRIPT = """
import os, signal, sys
import xsweep.cli.simulate as command

original = getattr(command, sys.argv[1])

def then_interrupted(*args):
    out = original(*args)
    os.kill(os.getpid(), signal.SIGINT)
    return out

setattr(command, sys.argv[1], then_interrupted)
from xsweep.cli.main import main
sys.exit(main(["simulate", sys.argv[2], "--json", "--trace", sys.argv[3]]))
"""


def _interrupted_after(function: str, tmp_path) -> subprocess.CompletedProcess:
    """``xsweep simulate --json --trace`` on a small plan in ``tmp_path``, sent SIGINT as
    ``function`` of the command returns (:data:`EDGE_SCRIPT`)."""
    plan, trace = tmp_path / "plan.pbtxt", tmp_path / "trace.json"
    plan.write_text(PLAN)
    return subprocess.run([sys.executable, "-c", EDGE_SCRIPT, function, plan, trace],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)


def test_ctrl_c_once_the_trace_is_staged_leaves_no_file(tmp_path):
    process = _interrupted_after("stage_trace", tmp_path)
    assert process.returncode == 130, process.stderr
    assert process.stderr.splitlines()[-1] == "interrupted"
    assert process.stdout == ""
    assert [p.name for p in tmp_path.iterdir()] == ["plan.pbtxt"]  # nor a temporary file


def test_ctrl_c_once_the_trace_is_in_place_is_dropped_and_the_result_printed(tmp_path):
    process = _interrupted_after("commit_trace", tmp_path)
    assert process.returncode == 0, process.stderr
    assert "interrupted" not in process.stderr
    assert json.loads(process.stdout)["iteration_time_s"] > 0
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.pbtxt", "trace.json"]


@pytest.mark.parametrize(("trace", "message"), [
    ("", "--trace: needs a file name (got '')"),
    ("{tmp}/no/such/folder/t.json", "{tmp}/no/such/folder/t.json: cannot be written: folder "
                                    "'{tmp}/no/such/folder' does not exist"),
    ("{tmp}", "{tmp}: is a folder; expected a file name"),
    ("{tmp}/plan.pbtxt/t.json", "{tmp}/plan.pbtxt/t.json: cannot be written: folder "
                                "'{tmp}/plan.pbtxt' does not exist"),
])
def test_an_unwritable_trace_is_refused_before_any_work(tmp_path, trace, message):
    plan = tmp_path / "plan.pbtxt"
    plan.write_text(PLAN)
    result = run_cli("simulate", plan, "--trace", trace.format(tmp=tmp_path))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [message.format(tmp=tmp_path)]  # no "simulating"
    assert result.stdout == ""


def test_json_output_has_no_nan_or_infinity():
    document = {"a": math.nan, "b": [math.inf, -math.inf, 1.5], "c": np.float32("nan"),
                "d": np.int64(3), "e": {"f": (np.float64(2.0), None)}}
    text = json_text(document)
    assert json.loads(text, parse_constant=pytest.fail) == {
        "a": None, "b": [None, None, 1.5], "c": None, "d": 3, "e": {"f": [2.0, None]}}


def test_simulate_json_is_strict_json_without_a_run_length(tmp_path):
    plan = tmp_path / "plan.pbtxt"
    plan.write_text(PLAN.replace(" total_tokens: 1e9", ""))
    result = run_cli("simulate", plan, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout, parse_constant=pytest.fail)
    assert doc["cost_per_run_usd"] is None and doc["iteration_time_s"] > 0


WORKERS_SCRIPT = """
import sys, time
import xsweep
evaluator = xsweep.Evaluator(processes=2, parallel_min=2)
try:
    evaluator.evaluate(sys.argv[1:], "bound")
    print("ready", flush=True)
    time.sleep(60)
except KeyboardInterrupt:
    evaluator.close()
    print("interrupted", file=sys.stderr)
    sys.exit(130)
"""


def test_ctrl_c_in_a_terminal_reaches_the_caller_not_the_evaluators_workers():
    """A terminal's Ctrl-C signals the whole process group: the evaluator's worker
    processes leave it to their caller, which stops them; none prints a traceback."""
    plans = [str(REPO_ROOT / "spaces" / name)
             for name in ("appendix-b.pbtxt", "h100x8-baseline.pbtxt")]
    process = subprocess.Popen([sys.executable, "-c", WORKERS_SCRIPT, *plans], cwd=REPO_ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)  # its own group, as a terminal's job
    assert process.stdout.readline().strip() == "ready"  # the workers evaluated, now idle
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert stderr.strip().splitlines()[-1] == "interrupted"


def test_an_error_raised_while_an_interrupt_is_handled_is_an_interrupt(capsys):
    """numpy's savez, interrupted inside a zip entry, raises ValueError from its clean-up
    (the zip cannot close): the command was interrupted, exit 130 and one line."""
    import argparse

    from xsweep.cli.common import run_guarded

    def run(args):
        try:
            raise KeyboardInterrupt
        finally:
            raise ValueError("Can't close the ZIP file while there is an open writing handle")

    def fails(args):
        raise ValueError("a defect, not an interrupt")

    assert run_guarded(run, argparse.Namespace()) == 130
    assert capsys.readouterr().err == "interrupted\n"
    with pytest.raises(ValueError, match="a defect"):
        run_guarded(fails, argparse.Namespace())

