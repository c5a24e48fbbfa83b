"""Where the commands of a search write: the default output folder of a sweep or study,
and the checks that keep every output inside the folder it belongs in.

Each command and each source has a folder of its own, under ``results/<name>`` for the
sweep file's ``name``::

    results/<name>/sweep/            xsweep sweep (its dataset, front, plans, resume state)
    results/<name>/sweep/validate/   xsweep validate of that sweep
    results/<name>/sweep/report.html xsweep report of that sweep
    results/<name>/study/            xsweep optimize (study.db, study.json, plans)
    results/<name>/study-<S>/        the same for a study named ``--study S``
    results/<name>/study/validate/   xsweep validate of that study

A name passed :func:`xsweep.spec.sweep.check_name` (never a path, ``.`` or ``..``); a
folder given with ``-o`` may be any path a folder can have; every file inside has a name
made by xsweep (``point-<index>.pbtxt``, ``trial-<number>.json``, ...), checked to be a
plain file name. A sweep never writes into a study's folder, nor a study into a
sweep's (:func:`refuse_foreign`), ``--overwrite`` included.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from xsweep.errors import InputError
from xsweep.spec.sweep import check_name

#: Where a sweep's or study's outputs go when no folder is given.
RESULTS = Path("results")
#: The folder of a sweep's or study's validation, inside the sweep's or study's folder.
VALIDATE = "validate"
#: The page ``xsweep report`` writes, by default inside the sweep's or study's folder.
REPORT = "report.html"
#: What marks a folder as a sweep's (``xsweep sweep``) or a study's (``xsweep optimize``).
SWEEP_MARKS = ("sweep.zarr", "work")
STUDY_MARKS = ("study.db", "study.json")


def results_folder(name: str, file: str | None = None, field: str | None = "name") -> Path:
    """``results/<name>``: the default output folder of the sweep or study ``name``. The
    name is checked again (:func:`xsweep.spec.sweep.check_name`), so that no name, however
    it was made, leads out of ``results``.

    Raises:
      InputError: naming ``file`` and ``field`` (the sweep file's ``name``, ``--study``).
    """
    return RESULTS / check_name(name, file, field)


def sweep_folder(name: str, file: str | None = None) -> Path:
    """``results/<name>/sweep``: where ``xsweep sweep`` writes the sweep ``name``."""
    return results_folder(name, file) / "sweep"


def study_folder(space: str, study: str, file: str | None = None) -> Path:
    """``results/<space>/study``: where ``xsweep optimize`` writes the study of the sweep
    named ``space``; ``results/<space>/study-<study>`` for a study of another name.

    Raises:
      InputError: a name that breaks the rule, naming ``file`` (or ``--study``).
    """
    root = results_folder(space, file)
    check_name(study, "--study")
    return root / ("study" if study == space else f"study-{study}")


def refuse_foreign(folder: Path, mine: str) -> None:
    """Refuse ``folder`` when it holds another command's results: a study's (``mine`` is
    ``"sweep"``) or a sweep's (``mine`` is ``"study"``). Each command writes only a
    folder of its own, so that ``--overwrite`` never removes another command's files.

    Raises:
      InputError: naming the folder and whose results it holds.
    """
    theirs, marks, command = (("an Optuna study", STUDY_MARKS, "xsweep optimize")
                              if mine == "sweep" else
                              ("a sweep's results", SWEEP_MARKS, "xsweep sweep"))
    found = [name for name in marks if (folder / name).exists()]
    if found:
        raise InputError(str(folder), None, None, f"holds {theirs} ({found[0]}, written by "
                         f"{command}); a {mine} needs a folder of its own: choose another "
                         "with -o")


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


def staging_folder(final: Path) -> Path:
    """A new, empty folder beside ``final`` to build its next content in (this process's)."""
    staging = final.with_name(f"{final.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def replace_folder(staging: Path, final: Path) -> None:
    """Put the finished ``staging`` folder at ``final``, replacing what was there whole."""
    old = final.with_name(f"{final.name}.partial-old-{os.getpid()}")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    staging.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def write_file(path: Path, content: bytes) -> None:
    """``content`` at ``path``, written under a temporary name and renamed: whole or absent."""
    partial = path.with_name(f"{path.name}.partial-{os.getpid()}")
    with open(partial, "wb") as file:
        file.write(content)
    os.replace(partial, path)
