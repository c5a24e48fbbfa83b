"""What the commands that search a sweep's space (``xsweep sweep``, ``xsweep optimize``)
share: the shape of their options and outcome, and their setup.

Each command's ``Options`` extends :class:`Options` with its own fields and its
``Outcome`` extends :class:`Outcome`; both begin with :func:`set_up`, which reads the
sweep file and the catalog and makes the :class:`~xsweep.search.evaluation.Job` every unit
of the search is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from xsweep.search.evaluation import Job
from xsweep.search.space.grid import check_grid
from xsweep.spec import load_catalog, load_sweep
from xsweep.spec.catalog import Catalog
from xsweep.spec.reader import read_text_file
from xsweep.spec.sweep import Sweep


@dataclass(frozen=True)
class Options:
    """What every search takes (none of it changes the answer but the catalog's files)."""

    out_dir: Path | None = None  # default: the command's folder under results/<sweep name>
    catalog_files: tuple[str, ...] = ()
    dtype: str = "float32"


@dataclass
class Outcome:
    """A finished search: its output folder, its summary document (what ``--json``
    prints), the text the command prints, and, where an answer is missing (a work group
    without a feasible point), the one line that says so (``problem``; "" otherwise): the
    command then exits 1, its outputs written; where the time went (``timings``)."""

    folder: Path
    summary: dict
    text: str = ""
    problem: str = ""
    timings: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Setup:
    """A search's inputs, read and checked: the sweep file's text, the sweep, the catalog
    and the job of its units."""

    text: str
    sweep: Sweep
    catalog: Catalog
    job: Job


def set_up(path: str | Path, options: Options, whole_grid: bool = False) -> Setup:
    """Read the sweep at ``path`` against the catalog of ``options``; ``whole_grid``: the
    search visits every point, so the grid must be within the size limits
    (:func:`xsweep.search.space.grid.check_grid`).

    Raises:
      InputError: the file, the catalog or the sweep is bad, or the grid too large.
    """
    catalog = load_catalog(options.catalog_files)
    text = read_text_file(str(path))
    sweep = load_sweep(path, catalog)
    if whole_grid:
        check_grid(sweep, str(path))
    return Setup(text, sweep, catalog, Job(sweep, catalog, options.dtype))
