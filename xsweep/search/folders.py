"""Where the commands of a search write: the default output folder of a sweep or study,
and the checks that keep every output inside the folder it belongs in.

The default folder is ``results/<name>`` for a name that passed
:func:`xsweep.spec.sweep.check_name` (never a path, ``.`` or ``..``); a folder given
with ``-o`` may be any path a folder can have; every file inside has a name made by
xsweep (``point-<index>.pbtxt``, ``trial-<number>.json``, ...), checked to be a plain
file name.
"""

from __future__ import annotations

import os
from pathlib import Path

from xsweep.errors import InputError
from xsweep.spec.sweep import check_name

#: Where a sweep's or study's outputs go when no folder is given.
RESULTS = Path("results")


def results_folder(name: str, file: str | None = None, field: str | None = "name") -> Path:
    """``results/<name>``: the default output folder of the sweep or study ``name``. The
    name is checked again (:func:`xsweep.spec.sweep.check_name`), so that no name, however
    it was made, leads out of ``results``.

    Raises:
      InputError: naming ``file`` and ``field`` (the sweep file's ``name``, ``--study``).
    """
    return RESULTS / check_name(name, file, field)


def checked_folder(path: str | os.PathLike, option: str = "--output") -> Path:
    """``path`` as an output folder, or an InputError for a path no folder can have (a NUL
    character) rather than a traceback from the file system."""
    text = os.fspath(path)
    if "\0" in text:
        raise InputError(option, None, text, "a path cannot hold a NUL character")
    return Path(text)


def plain_file_name(name: str) -> str:
    """``name`` if it names a file inside a folder (no separator, not ``.`` or ``..``, no
    NUL); a ValueError otherwise: the names of outputs are made by xsweep."""
    if (not name or name in (".", "..") or "\0" in name or "/" in name
            or os.sep in name or (os.altsep and os.altsep in name)):
        raise ValueError(f"not a plain file name: {name!r}")
    return name
