"""The ``xsweep`` command line: a thin dispatcher over subcommand modules.

Each subcommand is a module of this package (``xsweep/cli/<name>.py``) that defines

- ``register(subparsers) -> argparse.ArgumentParser``: add the subcommand with
  ``subparsers.add_parser(...)``, declare its arguments, return the new parser;
- ``run(args: argparse.Namespace) -> int``: do the work and return the exit code
  (0 ok, 1 a check failed, 2 bad input).

Modules are discovered at start-up, so adding a subcommand means adding a
module; nothing here changes. ``run`` may raise ``InputError`` (or OSError,
YAML and protobuf parse errors): the dispatcher prints the one-line reason on
stderr and exits with 2 (see ``xsweep.cli.common``).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

import xsweep
import xsweep.cli
from xsweep.cli.common import run_guarded

_NOT_COMMANDS = {"main", "common"}


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every discovered subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="xsweep",
        description="Plan LLM training on heterogeneous GPU clusters.",
    )
    parser.add_argument("--version", action="version", version=f"xsweep {xsweep.__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(xsweep.cli.__path__), key=lambda m: m.name):
        if info.name in _NOT_COMMANDS or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"xsweep.cli.{info.name}")
        if hasattr(module, "register") and hasattr(module, "run"):
            module.register(subparsers).set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the subcommand, return its exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is None:
        parser.print_help(sys.stderr)
        return 2
    return run_guarded(args.run, args)


if __name__ == "__main__":
    sys.exit(main())
