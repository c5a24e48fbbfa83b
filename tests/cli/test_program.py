"""The ``xsweep`` program itself (:func:`xsweep.cli.main.entry`), in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

#: Runs ``xsweep --version`` as the installed program does, and prints what the process's
#: environment says of pydantic's plugins once the command is done.
_PROGRAM = """
import atexit, os, sys
atexit.register(lambda: print(repr(os.environ.get("PYDANTIC_DISABLE_PLUGINS"))))
sys.argv = ["xsweep", "--version"]
from xsweep.cli.main import entry
entry()
"""


@pytest.mark.parametrize(("given", "seen"), [(None, "'__all__'"), ("", "''"),
                                              ("logfire", "'logfire'")])
def test_pydantic_plugins_are_off_unless_the_environment_says(given, seen):
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    if given is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = given
    done = subprocess.run([sys.executable, "-c", _PROGRAM], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == seen
