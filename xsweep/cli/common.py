"""What every subcommand shares: error lines and exit codes, output paths, JSON on stdout.

This module imports nothing heavy, so the dispatcher can load it (and catch a
Ctrl-C) before any command pulls in protobuf, YAML or numpy.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from xsweep.errors import CheckFailed, InputError
from xsweep.metrics import jsonable
from xsweep.workers.pipes import WorkerError

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # the shell's code for a process ended by SIGINT (128 + 2)
#: Environment variable read: set to 1, a failed worker's traceback follows its one line.
DEBUG_ENV = "XSWEEP_DEBUG"


def one_line(text: object) -> str:
    """``text`` with every run of whitespace (newlines included) folded to one space."""
    return " ".join(str(text).split())


def error_line(error: BaseException) -> str:
    """The one-line message for an error a user can cause."""
    if isinstance(error, InputError):
        return one_line(error)
    if isinstance(error, OSError):
        where = f"{error.filename}: " if error.filename else ""
        return one_line(f"{where}{error.strerror or error}")
    return one_line(f"{type(error).__name__}: {error}")


# Errors that mean "bad input" (exit 2) rather than a defect in xsweep. The readers turn
# parse errors into InputError; OSError is left for writing outputs.
BAD_INPUT_ERRORS: tuple[type[BaseException], ...] = (InputError, OSError)


def interrupted() -> int:
    """Report a Ctrl-C in one line; the exit code to return."""
    print("interrupted", file=sys.stderr)
    return EXIT_INTERRUPTED


def _on_sigint(signum: int, frame) -> None:
    """Raise KeyboardInterrupt where the main thread is."""
    raise KeyboardInterrupt


def _raised_on_interrupt(error: BaseException) -> bool:
    """Whether ``error`` came while a Ctrl-C was being handled: a library's clean-up that
    fails on the state the interrupt left (numpy's ``savez`` cannot close a zip file
    whose entry the interrupt cut short) hides the KeyboardInterrupt behind its own
    error, and the command was interrupted all the same."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def run_guarded(run: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Call ``run(args)``; bad input prints one line on stderr and returns 2, Ctrl-C 130."""
    try:
        from xsweep.cli.interrupts import redeliver_interrupts

        signal.signal(signal.SIGINT, _on_sigint)
        redeliver_interrupts()
        try:
            return run(args)
        except Exception as error:
            if _raised_on_interrupt(error):
                raise KeyboardInterrupt from error
            raise
    except BAD_INPUT_ERRORS as error:
        print(error_line(error), file=sys.stderr)
        return EXIT_BAD_INPUT
    except CheckFailed as error:  # valid input that fails a check: one line and exit 1
        print(one_line(error), file=sys.stderr)
        return EXIT_CHECK_FAILED
    except WorkerError as error:  # the run failed, not the input: one line and exit 1
        print(one_line(error), file=sys.stderr)
        if error.details and os.environ.get(DEBUG_ENV, "").strip() not in ("", "0"):
            print(error.details, file=sys.stderr)
        elif error.details:
            print(f"(set {DEBUG_ENV}=1 to see the worker's traceback)", file=sys.stderr)
        return EXIT_CHECK_FAILED
    except KeyboardInterrupt:
        return interrupted()


#: Help of ``--allow-oom`` (check, plan, simulate).
ALLOW_OOM_HELP = ("go on with a plan that does not fit in GPU memory (exit 0; the verdict is "
                  "still printed); without it such a plan fails with exit 1")


def memory_check(file: str, allow_oom: bool) -> Callable:
    """A check of a plan's analysis (``before_lowering`` of ``xsweep.pipeline.prepare``): a
    plan that does not fit in memory fails with :class:`CheckFailed` (exit 1) naming
    ``file``, the device group and its memory against its GPU's; with ``allow_oom`` the
    same line goes to stderr and the command goes on."""

    def check(analysis) -> None:
        verdict = analysis.memory_verdict()
        if not verdict:
            return
        if not allow_oom:
            raise CheckFailed(f"{file}: {verdict} (--allow-oom to go on)")
        print(one_line(f"{file}: {verdict} (going on: --allow-oom)"), file=sys.stderr,
              flush=True)

    return check


#: The kinds of input file, what each is, and which command takes it.
_KINDS = {"plan": ("a deployment plan", "use xsweep simulate"),
          "sweep": ("a sweep file", "use xsweep sweep or xsweep optimize"),
          "catalog": ("a catalog", "give it with --catalog"),
          "results": ("a sweep's results folder", "use xsweep validate")}
PLAN_SUFFIXES = (".pbtxt", ".textproto", ".txtpb", ".json")
YAML_SUFFIXES = (".yaml", ".yml")


def file_kind(path: str, read: bool = True) -> str | None:
    """What ``path`` holds, as far as its name tells (and, for YAML with ``read``, its
    top-level keys): ``plan``, ``sweep``, ``catalog``, ``results`` (a folder with a
    ``sweep.zarr``), ``yaml`` (not read) or None (another file or folder, or one that
    cannot be read)."""
    target = Path(path)
    if target.is_dir():
        return "results" if (target / "sweep.zarr").is_dir() else None
    if not target.is_file():
        return None
    suffix = target.suffix.lower()
    if suffix in PLAN_SUFFIXES:
        return "plan"
    if suffix not in YAML_SUFFIXES:
        return None
    if not read:
        return "yaml"
    from xsweep.spec.catalog import is_catalog_document
    from xsweep.spec.reader import read_yaml_file

    try:
        document = read_yaml_file(path)
    except (InputError, OSError):
        return None
    return "catalog" if is_catalog_document(document) else "sweep"


def wrong_kind(path: str, wanted: str, expected: str | tuple[str, ...],
               read: bool = True) -> InputError | None:
    """The error for ``path`` given where ``wanted`` (``"a sweep file"``) is expected when
    it is another kind of input (:func:`file_kind`): ``not a sweep file: a deployment plan;
    use xsweep simulate``. None when it is of an ``expected`` kind or of no known kind
    (the reader will say what is wrong)."""
    kind = file_kind(path, read)
    if kind is None or kind == "yaml" or kind in (expected if isinstance(expected, tuple)
                                                  else (expected,)):
        return None
    what, hint = _KINDS[kind]
    return InputError(path, None, None, f"not {wanted}: {what}; {hint}")


def refuse_other_kind(path: str, wanted: str, expected: str, read: bool = True) -> None:
    """Raise :func:`wrong_kind`'s error, if any, for ``path``.

    Raises:
        InputError: ``path`` is another kind of input than ``expected``: ``not a sweep
            file: a deployment plan; use xsweep simulate``.
    """
    error = wrong_kind(path, wanted, expected, read)
    if error is not None:
        raise error


@contextlib.contextmanager
def sweep_file_errors(path: str):
    """Within: an error about the sweep file ``path`` that is a catalog (read as a sweep,
    it failed) says so, and which command takes a catalog (see also
    :func:`refuse_other_kind`)."""
    try:
        yield
    except InputError as error:
        if error.file != path:
            raise
        other = wrong_kind(path, "a sweep file", "sweep")
        if other is None:
            raise
        raise other from None


def check_output_path(path: str | None, option: str) -> None:
    """Refuse an output path that cannot be written, before any work starts.

    Args:
        path: the path as the user gave it (None: the option was not given).
        option: the option's name, for the message when the path is empty.

    Raises:
        InputError: naming the path as given (an empty one: the option).
    """
    if path is None:
        return
    if not path.strip():
        raise InputError(option, None, path, "needs a file name")
    target = Path(path)
    folder = target.parent
    if target.is_dir():
        raise InputError(path, None, None, "is a folder; expected a file name")
    if not folder.is_dir():
        raise InputError(path, None, None, f"cannot be written: folder {str(folder)!r} "
                         "does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(path, None, None, f"cannot be written: no permission to create "
                         f"files in {str(folder)!r}")


def check_output_folder(path: str | None, option: str) -> None:
    """Refuse an output folder that cannot be made or written, before any work starts.

    The folder may exist (its contents are the command's to judge) or not yet (it and
    missing parents are made later); what must hold is that the path names no file and
    that the folder, or its nearest existing parent, takes new entries.

    Raises:
        InputError: naming the path as given (an empty one: the option).
    """
    if path is None:
        return
    if not path.strip():
        raise InputError(option, None, path, "needs a folder name")
    target = Path(path)
    existing = next(p for p in (target, *target.parents) if p.exists() or p == Path(p.anchor))
    if not existing.is_dir():
        what = "is a file" if existing == target else f"cannot be made: {str(existing)!r} is a file"
        raise InputError(path, None, None, f"{what}; expected a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(path, None, None, f"cannot be written: no permission to create "
                         f"files in {str(existing)!r}")


def emit(text: str) -> None:
    """Print a command's result on stdout whole, its last output (:func:`finishing`)."""
    with finishing():
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


@contextlib.contextmanager
def finishing():
    """Write a command's last outputs inside: a Ctrl-C that comes meanwhile is dropped, as
    the command then has all but finished (interrupted, it would exit 130 with its results
    out); one that came just before interrupts on entry, before any output. SIGINT is
    ignored for the while, not blocked: a signal sent to the process reaches whichever of
    its threads does not block it (JAX's among them). Outside the main thread, nothing is
    held."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _handled()
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler if handler is None else handler)


def _handled() -> None:
    """Nothing: a call, at whose start the interpreter runs the Python handlers of the
    signals that arrived before (SIGINT's raises KeyboardInterrupt here)."""


def json_text(document: object) -> str:
    """``document`` as JSON text; NaN and infinities become ``null`` (JSON has neither)."""
    return json.dumps(jsonable(document), indent=2, allow_nan=False)


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (argparse names the option when not)."""
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value
