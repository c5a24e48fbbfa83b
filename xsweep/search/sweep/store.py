"""A sweep's output folder: resume state while it runs, the published results when done.

Layout of ``results/<name>/sweep/`` (or the folder given with ``-o``)::

    work/manifest.json          what was run (hashes of the sweep file and catalog, settings)
    work/bound/<start>.npz      finished chunks of planned and bounded points, saved
                                together (each file names its chunks: positions in the
                                bound walk, ``units.bound_walk``; ``<start>`` is its first)
    work/exact/r<round>-b<batch>.npz  one finished batch of exactly evaluated points
    sweep.zarr   pareto.csv   pareto.png   summary.json   plans/
    validate/                   what ``xsweep validate`` of this folder wrote
    report.html                 what ``xsweep report`` of this folder wrote
    .xsweep.lock                while a run holds the folder (:mod:`xsweep.search.locks`)

Every file is written under a temporary name and renamed, so a file that exists is
whole: a killed run leaves finished chunks and batches, never half of one, and the
published outputs appear only once the whole sweep is done (the dataset last). A
rerun into a folder whose manifest differs is refused unless ``overwrite``, which
removes what a sweep owns there (the list above) and nothing else; a folder that holds
an Optuna study is refused even then (:func:`xsweep.search.folders.refuse_foreign`).

Nothing is written outside the folder (:mod:`xsweep.search.folders`): every file inside
has a name made here (``point-<index>.pbtxt``, ...), checked to be a plain file name.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from xsweep.errors import InputError
from xsweep.search import table as tables
from xsweep.search.folders import (
    REPORT,
    VALIDATE,
    checked_folder,
    plain_file_name,
    refuse_foreign,
)
from xsweep.search.sweep import zarr_v2
from xsweep.search.table import Table

OUTPUTS = ("sweep.zarr", "pareto.csv", "pareto.png", "summary.json", "plans")
#: The array of a bound file that names its chunks: ``(start, stop)`` of each, in the
#: order of its rows.
_CHUNKS = ".chunks"
#: What reading a damaged work file raises (empty, cut short, a broken zip, a missing
#: array): its points are computed again.
UNREADABLE = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)
_PARTIAL = ".partial"
#: Manifest entries and how a refusal names them.
_DESCRIBED = {"format": "folder format", "sweep_sha256": "sweep file", "catalog_version": "catalog",
              "xsweep_version": "xsweep version"}


class SweepFolder:
    """The output folder of one sweep."""

    def __init__(self, root: Path):
        self.root = checked_folder(root)
        self.work = self.root / "work"

    def path(self, output: str) -> Path:
        return self.root / output

    def claim(self, manifest: dict, overwrite: bool) -> bool:
        """Make the folder this run's; True when it resumes a run of the same manifest.

        Raises:
          InputError: the folder holds another run's results and not ``overwrite``, or an
            Optuna study's files (whatever ``overwrite`` says).
        """
        refuse_foreign(self.root, "sweep")
        found = self._manifest()
        ours = any(self.path(name).exists() for name in OUTPUTS) or self._work_done()
        if found == manifest and not overwrite:
            self._sweep_partials()
            return True
        if ours and not overwrite:
            raise InputError(str(self.root), None, None, _refusal(found, manifest))
        # what ``xsweep validate`` and ``xsweep report`` wrote were of the results being
        # replaced: they go too
        for name in (*OUTPUTS, "work", VALIDATE, REPORT):
            _remove(self.path(name))
        (self.work / "bound").mkdir(parents=True, exist_ok=True)
        (self.work / "exact").mkdir(parents=True, exist_ok=True)
        (self.work / "lowered").mkdir(parents=True, exist_ok=True)
        _write_text(self.work / "manifest.json", json.dumps(manifest, indent=2, sort_keys=True))
        return False

    def _work_done(self) -> bool:
        """Whether ``work/`` holds anything a run wrote (a finished chunk, a manifest): a run
        killed as it made its empty folders left nothing to protect."""
        return self.work.exists() and any(p.is_file() and _PARTIAL not in p.name
                                          for p in self.work.rglob("*"))

    def _manifest(self) -> dict | None:
        try:
            return json.loads((self.work / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def _sweep_partials(self) -> None:
        """Remove what a killed run was writing when it died."""
        for folder in (self.root, self.work / "bound", self.work / "lowered",
                       self.work / "exact"):
            for leftover in folder.glob(f"*{_PARTIAL}*"):
                _remove(leftover)

    def _bound_file(self, start: int) -> Path:
        return self.work / "bound" / f"{start:012d}.npz"

    def _exact_file(self, round_: int, batch: int, kind: str = "exact") -> Path:
        return self.work / kind / f"r{round_:05d}-b{batch:05d}.npz"

    def load_bound(self, points: Mapping[tuple[int, int], np.ndarray]) -> dict[tuple[int, int], Table]:
        """The finished chunks kept, by ``(start, stop)``, of those ``points`` asks for: each
        only where it holds the points given for it (an unreadable file, or a chunk of
        other points, is computed again)."""
        found: dict[tuple[int, int], Table] = {}
        for path in sorted((self.work / "bound").glob("*.npz")):
            try:
                kept = tables.load(path)
                bounds = kept.pop(_CHUNKS).reshape(-1, 2).tolist()
            except UNREADABLE:  # computed again
                continue
            offset = 0
            for start, stop in bounds:
                rows = slice(offset, offset + stop - start)
                offset += stop - start
                wanted = points.get((start, stop))
                if wanted is not None and np.array_equal(kept["point"][rows], wanted):
                    found[(start, stop)] = Table({k: v[rows] for k, v in kept.items()})
        return found

    def save_bound(self, chunks: Sequence[tuple[int, int, Table]]) -> None:
        """Keep finished chunks ``(start, stop, table)`` (rows in the walk's order), in
        one file."""
        if not chunks:
            return
        table = dict(tables.concat([table for _, _, table in chunks]))
        table[_CHUNKS] = np.array([(start, stop) for start, stop, _ in chunks], np.int64)
        tables.save(table, self._bound_file(min(start for start, _, _ in chunks)))

    def load_exact(self, round_: int, batch: int, points: np.ndarray,
                   kind: str = "exact") -> Table | None:
        """The finished batch ``batch`` of round ``round_`` if it holds ``points``, or None;
        ``kind`` "lowered": a batch of the closed-form tier's rounds (bound level)."""
        return _load(self._exact_file(round_, batch, kind), points)

    def save_exact(self, round_: int, batch: int, table: Table, kind: str = "exact") -> None:
        tables.save(table, self._exact_file(round_, batch, kind))

    def publish(self, dataset: zarr_v2.Arrays, files: dict[str, bytes | Callable[[], bytes]],
                plans: dict[str, str]) -> None:
        """Write the results: ``files`` (name -> content, or what gives it: called after
        the rest is written, a plot drawn meanwhile elsewhere, say) and ``plans`` (file
        name -> text) first, the dataset last, each complete before it takes its final
        name."""
        for name in (*files, *plans):  # all before anything is written
            plain_file_name(name)
        folder = self.path("plans")
        staging = _staging(folder)
        staging.mkdir()
        for name, text in plans.items():
            (staging / name).write_text(text, encoding="utf-8")
        _swap(staging, folder)
        staging = _staging(self.path("sweep.zarr"))
        # Zarr format 2: its fixed-width text (numpy "<U") and consolidated metadata are in
        # its specification, and xarray reads that text back as numpy str
        zarr_v2.write(dataset, staging)
        for name, content in files.items():
            _write_bytes(self.path(name), content() if callable(content) else content)
        _swap(staging, self.path("sweep.zarr"))


def _load(path: Path, points: np.ndarray) -> Table | None:
    if not path.exists():
        return None
    try:
        found = tables.load(path)
    except UNREADABLE:  # computed again
        return None
    return found if np.array_equal(found.get("point"), points) else None


def _refusal(found: dict | None, wanted: dict) -> str:
    if found is None:
        return ("holds results this run did not write (or from a killed run that never "
                "started); rerun with --overwrite to replace them")
    changed = [_DESCRIBED.get(k, k.replace("_", " ")) for k in sorted(set(found) | set(wanted))
               if found.get(k) != wanted.get(k)]
    return (f"holds results of another sweep run ({', '.join(changed)} changed); "
            "rerun with --overwrite to replace them, or choose another folder with -o")


def _staging(path: Path) -> Path:
    return path.with_name(f"{path.name}{_PARTIAL}-{os.getpid()}")


def _swap(staging: Path, final: Path) -> None:
    """Put the finished ``staging`` at ``final``, replacing what was there."""
    old = final.with_name(f"{final.name}{_PARTIAL}-old-{os.getpid()}")
    if final.exists():
        final.rename(old)
    staging.rename(final)
    _remove(old)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _write_bytes(path: Path, content: bytes) -> None:
    staging = _staging(path)
    with open(staging, "wb") as file:
        file.write(content)
        file.flush()
        os.fsync(file.fileno())
    os.replace(staging, path)


def _write_text(path: Path, text: str) -> None:
    _write_bytes(path, text.encode("utf-8"))
