"""Error mapping shared by every subcommand: domain errors become one stderr line and an exit code."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import yaml
from google.protobuf import json_format, text_format

from xsweep.errors import InputError

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


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


# Errors that mean "bad input" (exit 2) rather than a defect in xsweep.
BAD_INPUT_ERRORS: tuple[type[BaseException], ...] = (
    InputError,
    OSError,
    yaml.YAMLError,
    text_format.ParseError,
    json_format.ParseError,
)


def run_guarded(run: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Call ``run(args)``; bad input prints one line on stderr and returns 2, Ctrl-C 130."""
    try:
        return run(args)
    except BAD_INPUT_ERRORS as error:
        print(error_line(error), file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
