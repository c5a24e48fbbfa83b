"""Worst time and memory of every command on hostile inputs of about 1 MB.

Run: ``python benchmarks/bench_hostile.py [--size 1000000] [--huge 100]``.

Writes each input of ``tests/support/hostile_inputs.py`` at ``--size`` bytes (classes that do
not scale keep their own size), runs ``xsweep check`` on every one, ``xsweep plan
--json`` and ``xsweep simulate --json`` on the plans, and ``xsweep.evaluate`` (bound
level) on the plans from a Python process, each as a subprocess. For each run it
prints the exit code, the wall time and the peak resident memory of the process,
then, per command, the worst over the refused inputs and over the accepted ones.
The design's bar: no input of at most 1 MB makes a command use more than 1 GB or
run longer than 10 s before it is refused. ``--huge N`` adds an N MB file, to show
that the size limit refuses it before reading.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the catalogue of inputs lives with the tests

from tests.support.hostile_inputs import HOSTILE  # noqa: E402

EVALUATE = ("import sys, xsweep\n"
            "from xsweep.errors import InputError\n"
            "try:\n"
            "    xsweep.evaluate([sys.argv[1]], level='bound')\n"
            "except InputError as error:\n"
            "    print(error, file=sys.stderr)\n"
            "    sys.exit(2)\n")

COMMANDS = {
    "check": lambda path: [sys.executable, "-m", "xsweep.cli.main", "check", path],
    "plan": lambda path: [sys.executable, "-m", "xsweep.cli.main", "plan", path, "--json"],
    "simulate": lambda path: [sys.executable, "-m", "xsweep.cli.main", "simulate", path,
                              "--json"],
    "evaluate": lambda path: [sys.executable, "-c", EVALUATE, path],
}
TIME_BAR_S, MEMORY_BAR_MB = 10.0, 1024.0


# Runs the command and reports its wall time and peak memory. A separate small process,
# because a child's peak resident size starts from its parent's (fork, then exec).
_LAUNCHER = ("import resource, subprocess, sys, time\n"
             "start = time.perf_counter()\n"
             "code = subprocess.call(sys.argv[2:], stdout=subprocess.DEVNULL)\n"
             "wall_s = time.perf_counter() - start\n"
             "peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
             "open(sys.argv[1], 'w').write(f'{code} {wall_s} {peak_kb}')\n")


def measure(argv: list[str], timeout_s: float) -> tuple[int, float, float, str]:
    """Exit code, wall seconds, peak resident MB and last stderr line of one process."""
    with tempfile.TemporaryDirectory() as folder:
        report, errors = Path(folder) / "report", Path(folder) / "stderr"
        with open(errors, "wb") as err:
            launcher = subprocess.Popen([sys.executable, "-S", "-c", _LAUNCHER, str(report),
                                         *argv], cwd=REPO, stderr=err, start_new_session=True)
            try:
                launcher.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(launcher.pid, signal.SIGKILL)
                launcher.wait()
        lines = errors.read_text(errors="replace").strip().splitlines()
        if not report.exists():
            return -9, timeout_s, float("nan"), f"killed after {timeout_s:.0f} s"
        code, wall_s, peak_kb = report.read_text().split()
    return int(code), float(wall_s), int(peak_kb) / 1024, lines[-1] if lines else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000, help="bytes per input")
    parser.add_argument("--huge", type=int, default=100, help="MB of the oversized file (0: none)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    parser.add_argument("--commands", nargs="+", default=list(COMMANDS), choices=list(COMMANDS))
    args = parser.parse_args()
    worst: dict[tuple[str, bool], list[float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        inputs = []
        for hostile in HOSTILE:
            path = Path(folder) / (hostile.name.replace(" ", "_") + hostile.suffix)
            path.write_bytes(hostile.make(args.size))
            inputs.append((hostile.name, path, hostile.is_plan))
        if args.huge:
            path = Path(folder) / "huge.yaml"
            with open(path, "wb") as out:
                out.write(b"a: 1\n" * (args.huge * 1024 * 1024 // 5))
            inputs.append((f"{args.huge} MB yaml", path, False))
        print(f"{'input':<30}{'bytes':>11}  {'command':<9}{'exit':>5}{'time s':>8}{'peak MB':>9}"
              "  message")
        for name, path, is_plan in inputs:
            size = path.stat().st_size
            for command in args.commands:
                if command != "check" and not is_plan:
                    continue
                code, wall_s, peak_mb, line = measure(COMMANDS[command](str(path)), args.timeout)
                print(f"{name:<30}{size:>11,}  {command:<9}{code:>5}{wall_s:>8.2f}{peak_mb:>9.0f}"
                      f"  {line[:90]}", flush=True)
                if size <= args.size:
                    entry = worst.setdefault((command, code == 0), [0.0, 0.0])
                    entry[0], entry[1] = max(entry[0], wall_s), max(entry[1], peak_mb)
    print(f"\nworst per command over inputs of at most {args.size:,} bytes")
    print(f"{'command':<10}{'inputs':<10}{'time s':>8}{'peak MB':>9}  refused within "
          f"{TIME_BAR_S:.0f} s and {MEMORY_BAR_MB:.0f} MB")
    for (command, accepted), (wall_s, peak_mb) in sorted(worst.items()):
        within = wall_s <= TIME_BAR_S and peak_mb <= MEMORY_BAR_MB
        verdict = "(accepted: the work itself)" if accepted else "yes" if within else "NO"
        print(f"{command:<10}{'accepted' if accepted else 'refused':<10}{wall_s:>8.2f}"
              f"{peak_mb:>9.0f}  {verdict}")


if __name__ == "__main__":
    main()
