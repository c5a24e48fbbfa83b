"""Measured per-layer times that replace the roofline estimate of the transformer blocks.

A profile holds, for each GPU type, TP degree and micro-batch size that was measured,
the time one transformer block takes forward and backward on one GPU of the
tensor-parallel group, for one micro-batch of the model's sequence length. Times are
compute only: the TP all-reduces are modelled as communication and must not be
included; the backward time excludes activation recompute (xsweep adds one forward
when recompute is on). Embedding and LM head are always estimated.

YAML form::

    model: llama2-7b        # optional: when given, only this model may use the profile
    measurements:
      - {gpu: H100, tp: 2, micro_batch_size: 1, forward_s: 0.0021, backward_s: 0.0043}
      - {gpu: H100, tp: 2, micro_batch_size: 4, forward_s: 0.0079, backward_s: 0.0160}

CSV form (a file whose name ends in ``.csv``; one header line, one measurement a row)::

    gpu,tp,micro_batch_size,forward_s,backward_s
    H100,2,1,0.0021,0.0043

``gpu`` is the catalog's name of the GPU (any case; aliases too when the profile is
loaded with the catalog), ``tp`` and
``micro_batch_size`` are positive integers, ``forward_s`` and ``backward_s`` positive
seconds. Each (gpu, tp, micro_batch_size) may appear once.

Lookup interpolates linearly in the micro-batch size between the nearest measured sizes
of the same GPU and TP degree. It does not extrapolate: a size below the smallest or
above the largest measured one, or a GPU and TP never measured, has no entry
(``None``), and the caller falls back to the roofline estimate.
"""

from __future__ import annotations

import bisect
import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

from xsweep.errors import InputError
from xsweep.spec import ranges
from xsweep.spec.catalog import Catalog
from xsweep.spec.limits import MAX_INTEGER_DIGITS
from xsweep.spec.reader import parse_yaml, read_text_file

_FIELDS = ("gpu", "tp", "micro_batch_size", "forward_s", "backward_s")
_TOP_KEYS = ("model", "measurements")

#: (micro_batch_size, forward_s, backward_s), sorted by size
Points = tuple[tuple[int, float, float], ...]


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: it keys memos
class Profile:
    """Measured block times keyed by (lower-case GPU name, TP degree)."""

    source: str  # the file it was read from, for error messages
    model: str | None
    points: dict[tuple[str, int], Points]

    def lookup(self, gpu_name: str, tp: int, micro_batch_size: int) -> tuple[float, float] | None:
        """(forward_s, backward_s) of one block, interpolated; None outside the measured range."""
        points = self.points.get((gpu_name.lower(), tp), ())
        sizes = [p[0] for p in points]
        i = bisect.bisect_left(sizes, micro_batch_size)
        if i < len(sizes) and sizes[i] == micro_batch_size:
            return points[i][1], points[i][2]
        if i == 0 or i == len(sizes):
            return None
        (b0, f0, g0), (b1, f1, g1) = points[i - 1], points[i]
        w = (micro_batch_size - b0) / (b1 - b0)
        return f0 + w * (f1 - f0), g0 + w * (g1 - g0)


def _count(file: str, where: str, name: str, value: object) -> int:
    text = value.strip() if isinstance(value, str) else value
    if isinstance(text, str) and text.isascii() and text.isdigit() \
            and len(text) <= MAX_INTEGER_DIGITS:
        text = int(text)
    if not isinstance(text, int) or isinstance(text, bool) or text < 1:
        raise InputError(file, where, value, "must be a positive integer")
    ranges.PROFILE[name].check(text, file, where)
    return text


def _seconds(file: str, where: str, name: str, value: object) -> float:
    try:
        seconds = float(value) if isinstance(value, int | float | str) else math.nan
    except ValueError:
        seconds = math.nan
    if isinstance(value, bool) or not math.isfinite(seconds) or seconds <= 0:
        raise InputError(file, where, value, "must be a positive number of seconds")
    ranges.PROFILE[name].check(seconds, file, where)
    return seconds


def _measurement(file: str, where: str, record: object) -> tuple[str, int, int, float, float]:
    """One validated record; ``where`` is a field-path template with one ``{}`` for the field."""
    if not isinstance(record, dict):
        raise InputError(file, where.format("").rstrip(".: "), record,
                         "must be a mapping of " + ", ".join(_FIELDS))
    unknown = sorted(str(key) for key in set(record) - set(_FIELDS))
    if unknown:
        raise InputError(file, where.format(unknown[0]), None,
                         "unknown field; expected " + ", ".join(_FIELDS))
    for name in _FIELDS:
        if record.get(name) in (None, ""):
            raise InputError(file, where.format(name), None, "is missing")
    gpu = record["gpu"]
    if not isinstance(gpu, str) or not gpu.strip():
        raise InputError(file, where.format("gpu"), gpu, "must be a GPU name")
    numbers = [check(file, where.format(name), name, record[name])
               for check, name in ((_count, "tp"), (_count, "micro_batch_size"),
                                   (_seconds, "forward_s"), (_seconds, "backward_s"))]
    return (gpu.strip(), *numbers)


def _records(file: str, text: str) -> tuple[str | None, list[tuple[str, object]]]:
    """The model name and the (location, record) pairs of a YAML or CSV profile."""
    if file.lower().endswith(".csv"):
        rows = csv.DictReader(io.StringIO(text), restkey="extra column")
        try:
            if rows.fieldnames is None:
                raise InputError(file, None, None,
                                 "is empty; expected a header " + ",".join(_FIELDS))
            return None, [(f"line {rows.line_num}: {{}}", row) for row in rows]
        except csv.Error as error:
            raise InputError(file, f"line {rows.line_num}", None,
                             f"invalid CSV: {error}") from None
    data = parse_yaml(text, file)
    if not isinstance(data, dict):
        raise InputError(file, None, type(data).__name__,
                         "must be a mapping with a 'measurements' list")
    unknown = sorted(set(data) - set(_TOP_KEYS))
    if unknown:
        raise InputError(file, unknown[0], None, "unknown key; expected model, measurements")
    model = data.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise InputError(file, "model", model, "must be a model name")
    items = data.get("measurements")
    if not isinstance(items, list):
        raise InputError(file, "measurements", items, "must be a list")
    return model, [(f"measurements[{i}].{{}}", item) for i, item in enumerate(items)]


def load_profile(path: str | Path, catalog: Catalog | None = None) -> Profile:
    """Read and validate a profile file (YAML, or CSV when the name ends in ``.csv``).

    Args:
        catalog: when given, GPU names may be any name or alias the catalog knows (they
            are stored under the catalog's name) and unknown GPUs are rejected.
    """
    file = str(path)
    model, records = _records(file, read_text_file(file))
    if not records:
        raise InputError(file, "measurements", None, "has no measurement")
    table: dict[tuple[str, int], dict[int, tuple[float, float]]] = {}
    for where, record in records:
        gpu, tp, size, forward_s, backward_s = _measurement(file, where, record)
        if catalog is not None:
            gpu = catalog.gpu(gpu, file=file, field=where.format("gpu")).name
        sizes = table.setdefault((gpu.lower(), tp), {})
        if size in sizes:
            raise InputError(file, where.format("micro_batch_size"),
                             f"{gpu}, tp {tp}, micro_batch_size {size}",
                             "measured twice")
        sizes[size] = (forward_s, backward_s)
    points = {key: tuple((b, *times) for b, times in sorted(sizes.items()))
              for key, sizes in table.items()}
    return Profile(source=file, model=model.strip() if model else None, points=points)
