"""``xsweep optimize SPACE.yaml``: an Optuna study over a sweep's space, trials asked and
evaluated in batches, the best plans (or the Pareto front) printed and written as
.pbtxt files."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from xsweep.cli.common import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    check_output_folder,
    emit,
    json_text,
    positive_int,
    refuse_other_kind,
    sweep_file_errors,
)

#: Read when --storage is absent, so a URL with a password need not appear in a process
#: listing or a shell history.
STORAGE_ENV = "XSWEEP_STORAGE"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "optimize", help="search a sweep's space with Optuna (batched trials, shared studies)",
        description=__doc__ + " Progress goes to stderr; rerunning continues the study. "
        "Several processes, on one machine or many, may run on one study in a shared "
        "database.")
    p.add_argument("space", metavar="SPACE.yaml", help="sweep definition")
    p.add_argument("--trials", type=positive_int, metavar="N",
                   help="trials with a result the study should hold in all, earlier runs' "
                   "included; unfinished ones (interrupted, killed) do not count (default: "
                   "the sweep's search.trials)")
    p.add_argument("--batch", type=positive_int, metavar="B",
                   help="trials asked and evaluated together (default: search.batch)")
    p.add_argument("--storage", metavar="URL",
                   help=f"Optuna storage URL, e.g. postgresql://user:password@host/db (default: "
                   f"${STORAGE_ENV}, else SQLite at <output>/study.db)")
    p.add_argument("--study", metavar="NAME",
                   help="study name (default: the sweep's name; the same rule: letters, digits, "
                   "'-', '_', '.', starting with a letter or digit)")
    p.add_argument("--sampler", choices=("nsga2", "tpe", "random"),
                   help="default: nsga2 for several objectives, tpe for one")
    p.add_argument("--seed", type=_natural, metavar="S", help="sampler seed (default: search.seed)")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="output folder, of this study alone (default: results/<name>/study, "
                   "or results/<name>/study-<study> for a --study of another name)")
    p.add_argument("--json", action="store_true", help="print one JSON summary on stdout")
    p.add_argument("--catalog", action="append", default=[], metavar="FILE",
                   help="YAML merged over the built-in GPU/NIC/model catalog (repeatable)")


def _natural(text: str) -> int:
    value = int(text)
    if not 0 <= value < 2**32:
        raise ValueError(text)
    return value


def run(args) -> int:
    # before anything is imported or read: a plan or a sweep's results folder is no sweep
    refuse_other_kind(args.space, "a sweep file", "sweep", read=False)
    from xsweep.search.optimize.run import Options, run_optimize
    from xsweep.search.progress import Progress
    from xsweep.spec.sweep import check_name

    if args.study is not None:  # before anything is read or written
        check_name(args.study, "--study")
    check_output_folder(args.output, "--output")
    options = Options(trials=args.trials, batch=args.batch,
                      storage=args.storage or os.environ.get(STORAGE_ENV) or None,
                      study=args.study, sampler=args.sampler, seed=args.seed,
                      out_dir=Path(args.output) if args.output else None,
                      catalog_files=tuple(args.catalog))
    with sweep_file_errors(args.space):
        outcome = run_optimize(args.space, options, Progress())
    emit(json_text(outcome.summary) if args.json else outcome.text)
    if outcome.problem:  # no feasible trial: a check failed, as a sweep's empty front
        print(outcome.problem, file=sys.stderr)
        return EXIT_CHECK_FAILED
    return EXIT_OK
