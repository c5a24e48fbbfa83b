"""Limits on what xsweep reads and builds, checked before anything large is allocated.

Every reader and the plan validation compare their input with these bounds, so
that a small hostile file can neither exhaust memory nor run for minutes. The
values are documented in ``docs/formats.md``. Those that a legitimate large job
may reach can be raised through an environment variable, ``XSWEEP_MAX_<NAME>``
(``XSWEEP_MAX_PROGRAM_SIZE=5000000``); the error that reports a limit names it.
The others are fixed: nothing valid comes near them.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from xsweep.errors import InputError
from xsweep.memo import cached

ENV_PREFIX = "XSWEEP_MAX_"

#: Nesting of mappings and lists in a YAML or JSON file. Plans, sweeps and catalogs
#: nest at most five deep; the parsers recurse once per level, so this stays fixed.
MAX_NESTING_DEPTH = 32

#: Digits of an integer literal: 64-bit integers have at most 19 (20 with a sign).
MAX_INTEGER_DIGITS = 30


@dataclass(frozen=True)
class Limits:
    """Bounds that may be raised by the environment (see the module docstring)."""

    file_bytes: int = 4 * 1024 * 1024  # size of one input file
    yaml_nodes: int = 1_000_000  # YAML values after alias expansion (billion laughs)
    gpus: int = 65_536  # GPUs of one plan's cluster
    device_groups: int = 65_536  # device groups of one plan (one per GPU at most)
    micro_batches: int = 65_536  # micro-batches of one replica per iteration
    # tasks + flows of one plan's lowered program: what a plan costs to evaluate grows
    # with it (xsweep.spec.program_size.program_cost), about 14 GB and three minutes at
    # this default. The largest published configuration we know, Megatron-LM's 530B GPT
    # (2,520 GPUs, 280 micro-batches of 35 stages of 3 chunks), is 10.0 million
    program_size: int = 20_000_000

    @staticmethod
    def env_name(name: str) -> str:
        return ENV_PREFIX + name.upper()


def active_limits() -> Limits:
    """The limits in force: the defaults, each replaced by its environment variable if set."""
    return _limits(tuple(os.environ.get(name) for name in _ENV_NAMES))


#: The environment variable of each field of :class:`Limits`, in field order.
_ENV_NAMES = tuple(Limits.env_name(field.name) for field in dataclasses.fields(Limits))


@cached(64)
def _limits(texts: tuple[str | None, ...]) -> Limits:
    """The limits of the environment variables' values ``texts`` (None: not set), read
    once per set of values (validation asks for every plan)."""
    values = {}
    for field, name, raw in zip(dataclasses.fields(Limits), _ENV_NAMES, texts, strict=True):
        text = (raw or "").strip().replace("_", "")
        if not text:
            continue
        if not (text.isascii() and text.isdigit()) or len(text) > MAX_INTEGER_DIGITS \
                or int(text) < 1:
            raise InputError("environment", name, raw, "must be a positive integer")
        values[field.name] = int(text)
    return Limits(**values)


def check_limit(count: int, limits: Limits, name: str, what: str, file: str | None,
                field: str | None = None) -> None:
    """Raise InputError when ``count`` (of ``what``) is above the raisable limit ``name``."""
    reason = over_limit(count, limits, name, what)
    if reason:
        raise InputError(file, field, count, reason)


def over_limit(count: int, limits: Limits, name: str, what: str) -> str:
    """Why ``count`` (of ``what``) is above the raisable limit ``name``; "" when it is not.
    Where a count over a limit is not an error but a verdict (a sweep's point that
    cannot be planned), this is its reason."""
    limit = getattr(limits, name)
    if count > limit:
        return f"{what} exceeds the limit of {limit:,} (set {Limits.env_name(name)} to raise it)"
    return ""
