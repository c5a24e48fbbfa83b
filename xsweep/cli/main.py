"""The ``xsweep`` command line: a thin dispatcher over subcommand modules.

Each subcommand is a module of this package (``xsweep/cli/<name>.py``) that defines

- ``register(subparsers)``: add the subcommand with ``subparsers.add_parser(...)``
  and declare its arguments (a returned value is ignored);
- ``run(args: argparse.Namespace) -> int``: do the work and return the exit code
  (0 ok, 1 a check failed, 2 bad input).

Modules are discovered at start-up, so adding a subcommand means adding a
module; nothing here changes. ``run`` may raise ``InputError`` (or OSError): the
dispatcher prints the one-line reason on stderr and exits with 2 (see
``xsweep.cli.common``). Ctrl-C at any moment, the loading of a command's modules
included, ends the command with one line on stderr and exit code 130 (only the
interpreter's own start-up, before any xsweep code runs, is out of reach).
"""

from __future__ import annotations

# Only what the interpreter has loaded anyway, so that a Ctrl-C lands inside main()
# as early as possible; everything else is imported there.
import os
import signal
import sys
from typing import TYPE_CHECKING

from xsweep.cli.interrupts import redeliver_interrupts

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

_NOT_COMMANDS = {"main", "common"}


def command_modules() -> list[str]:
    """Names of the subcommand modules of this package, sorted."""
    import pkgutil

    import xsweep.cli

    return sorted(info.name for info in pkgutil.iter_modules(xsweep.cli.__path__)
                  if info.name not in _NOT_COMMANDS and not info.name.startswith("_"))


def build_parser(modules: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The top-level parser with the given subcommand modules (default: all) registered."""
    import argparse
    import importlib

    import xsweep

    parser = argparse.ArgumentParser(
        prog="xsweep",
        description="Plan LLM training on heterogeneous GPU clusters.",
    )
    parser.add_argument("--version", action="version", version=f"xsweep {xsweep.__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in command_modules() if modules is None else modules:
        module = importlib.import_module(f"xsweep.cli.{name}")
        if hasattr(module, "register") and hasattr(module, "run"):
            before = set(subparsers.choices)
            module.register(subparsers)
            for added in set(subparsers.choices) - before:
                subparsers.choices[added].set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the subcommand, return its exit code."""
    try:
        redeliver_interrupts()  # first: modules load next, and importlib has such callbacks
        return _main(argv)
    except KeyboardInterrupt:  # while modules load, before run_guarded
        from xsweep.cli.common import interrupted

        return interrupted()


def entry() -> None:
    """The ``xsweep`` program: :func:`main`, then exit with its code.

    Once the command has finished, its output is complete: a Ctrl-C while the
    interpreter shuts down is ignored rather than reported as a traceback. After an
    interrupt the process ends at once with 130: CPython would otherwise turn an
    interrupt that arrived inside some extension modules' start-up code into death
    by SIGINT, even though it was handled.

    Otherwise the exit handlers run (worker pools close, logs flush) and the process
    ends without tearing the interpreter down: freeing every module's objects one by one
    would add about 0.3 s to a sweep of seconds, after its results are written. A thread
    still running (none of xsweep's own outlive a command) gets the usual exit instead,
    which waits for it.

    Pydantic's plugins are off unless the environment says otherwise
    (``PYDANTIC_DISABLE_PLUGINS``): looking for them reads the entry points of every
    installed package, 40-60 ms of a command of two seconds, and xsweep's schemas
    use none.
    """
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    code = main()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.stdout.flush()
    sys.stderr.flush()
    if code == 130:  # xsweep.cli.common.EXIT_INTERRUPTED
        os._exit(code)
    import atexit
    import threading

    running = [t for t in threading.enumerate()
               if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if running or not hasattr(atexit, "_run_exitfuncs"):
        sys.exit(code)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _main(argv: Sequence[str] | None) -> int:
    from xsweep.cli.common import run_guarded

    argv = list(sys.argv[1:] if argv is None else argv)
    # Import only the named command's module when it has one: start-up stays fast
    # however heavy the other commands' imports are.
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    parser = build_parser([command] if command in command_modules() else None)
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is None:
        parser.print_help(sys.stderr)
        return 2
    return run_guarded(args.run, args)


if __name__ == "__main__":
    entry()
