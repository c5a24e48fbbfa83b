"""An Optuna study that belongs to one sweep file: its attributes, its sampler, and the
check that a named study is this space's before anything is added to it.

A study's user attributes (the contract other commands read):

- ``xsweep_space_sha256``: sha256 (hex) of the sweep file's text;
- ``xsweep_space_name``, ``xsweep_space_text``: the sweep's name and YAML text;
- ``xsweep_objectives``: the objective metric names, in the order of a trial's values;
- ``xsweep_catalog_version``, ``xsweep_version``.
"""

from __future__ import annotations

import hashlib

import xsweep
from xsweep.errors import InputError
from xsweep.spec.sweep import OBJECTIVE_DIRECTIONS, Sweep

SHA256, NAME, TEXT = "xsweep_space_sha256", "xsweep_space_name", "xsweep_space_text"
OBJECTIVES, CATALOG, VERSION = "xsweep_objectives", "xsweep_catalog_version", "xsweep_version"

SAMPLERS = ("nsga2", "tpe", "random")


def space_attrs(sweep: Sweep, text: str, catalog_version: str) -> dict[str, object]:
    """The user attributes of a study of the sweep whose file holds ``text``."""
    return {SHA256: hashlib.sha256(text.encode()).hexdigest(), NAME: sweep.name,
            OBJECTIVES: list(sweep.objectives), CATALOG: catalog_version,
            VERSION: xsweep.__version__, TEXT: text}


def default_sampler(sweep: Sweep) -> str:
    """NSGA-II for several objectives, TPE for one (the sweep's ``search.sampler`` when it
    names a sampler rather than ``grid``)."""
    if sweep.search.sampler in SAMPLERS:
        return sweep.search.sampler
    return "nsga2" if len(sweep.objectives) > 1 else "tpe"


def make_sampler(name: str, seed: int, batch: int):
    """The Optuna sampler ``name``. A deadline reaches NSGA-II and TPE as each trial's
    constraint (``Trial.set_constraint``, set when the trial is told).

    NSGA-II's population is the batch (at least 2): each batch is one generation. TPE
    lies about the trials of a batch still running (``constant_liar``) so that one batch
    does not ask the same point many times.
    """
    import optuna

    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=max(2, batch), seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)
    return optuna.samplers.RandomSampler(seed=seed)


def open_study(storage, study_name: str, attrs: dict[str, object], sampler, shown_url: str):
    """Load study ``study_name`` from ``storage`` if it is this space's (same sweep text and
    catalog), or create it; any other study of that name is an InputError, and nothing
    is written then."""
    import optuna

    try:
        study = optuna.load_study(study_name=study_name, storage=storage, sampler=sampler)
    except KeyError:
        directions = [OBJECTIVE_DIRECTIONS[name] for name in attrs[OBJECTIVES]]
        study = optuna.create_study(storage=storage, sampler=sampler, study_name=study_name,
                                    directions=directions, load_if_exists=True)
        if SHA256 not in study.user_attrs:  # another worker may have created it meanwhile
            for key, value in attrs.items():
                study.set_user_attr(key, value)
    _check_owner(study.user_attrs, study_name, attrs, shown_url)
    return study


def _check_owner(found: dict, study_name: str, attrs: dict, shown_url: str) -> None:
    where = f"study {study_name!r} in {shown_url}"
    if found.get(SHA256) is None:
        raise InputError("--study", None, study_name, f"{where} was not made by xsweep "
                         "optimize; choose another --study name")
    if found[SHA256] != attrs[SHA256]:
        raise InputError("--study", None, study_name, f"{where} belongs to another space "
                         f"({found.get(NAME)!r}, sweep sha256 {found[SHA256][:12]}...); "
                         "choose another --study name")
    if found.get(CATALOG) != attrs[CATALOG]:
        raise InputError("--study", None, study_name, f"{where} was run with catalog "
                         f"{found.get(CATALOG)}, this run has {attrs[CATALOG]}; choose another "
                         "--study name")
