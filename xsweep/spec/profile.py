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
seconds. Each (gpu, tp, micro_batch_size) may appear once. In YAML they are YAML
numbers (a quoted ``"2"`` is text, refused); in CSV, decimal digits (``2``, ``0.0021``,
``2.1e-3``), spaces around them allowed, underscores not (Python would read ``0.00_2``).
The CSV header must name the five columns, in any order; an error names the line of the
value it is about, also where a quoted value spans lines.

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
import re
from dataclasses import dataclass
from pathlib import Path

from xsweep.errors import InputError, did_you_mean
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


@dataclass(frozen=True)
class _Place:
    """Where one measurement sits, to name its fields in messages: an item of the YAML
    list, or a CSV row (the line each of its values starts on)."""

    prefix: str  # "measurements[3]" or "line 7" (a CSV row's first line)
    lines: dict[str, int] | None = None  # CSV: the line of each value

    def of(self, name: str) -> str:
        if self.lines is None:
            return f"{self.prefix}.{name}"
        line = self.lines.get(name)
        return f"line {line}: {name}" if line is not None else f"{self.prefix}: {name}"


# CSV cells are text: these are the numbers they may spell (Python's int() and float()
# would also take underscores, other scripts' digits and "inf").
_CSV_INT = re.compile(r"[0-9]+")
_CSV_FLOAT = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


def _csv_number(text: str) -> object:
    """The number a CSV cell spells in decimal digits, else the text (refused later)."""
    stripped = text.strip(" \t")
    if _CSV_INT.fullmatch(stripped) and len(stripped) <= MAX_INTEGER_DIGITS:
        return int(stripped)
    if _CSV_FLOAT.fullmatch(stripped):
        return float(stripped)
    return text


def _not_a_number(file: str, where: str, value: object, reason: str) -> InputError:
    if isinstance(value, str) and "_" in value and \
            isinstance(_csv_number(value.replace("_", "")), int | float):
        reason = "digits grouped by underscores; write the number in plain decimal digits"
    return InputError(file, where, value, reason)


def _count(file: str, where: str, name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise _not_a_number(file, where, value, "must be a positive integer")
    ranges.PROFILE[name].check(value, file, where)
    return value


def _seconds(file: str, where: str, name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value <= 0:
        raise _not_a_number(file, where, value, "must be a positive number of seconds")
    ranges.PROFILE[name].check(value, file, where)
    return float(value)


def _measurement(file: str, place: _Place, record: object) -> tuple[str, int, int, float, float]:
    """One validated record."""
    if not isinstance(record, dict):
        raise InputError(file, place.prefix, record,
                         "must be a mapping of " + ", ".join(_FIELDS))
    unknown = sorted(str(key) for key in set(record) - set(_FIELDS))
    if unknown:
        raise InputError(file, place.of(unknown[0]), None,
                         f"unknown field{did_you_mean(unknown[0], _FIELDS)} (expected "
                         + ", ".join(_FIELDS) + ")")
    for name in _FIELDS:
        if record.get(name) in (None, ""):
            raise InputError(file, place.of(name), None, "is missing")
    gpu = record["gpu"]
    if not isinstance(gpu, str) or not gpu.strip():
        raise InputError(file, place.of("gpu"), gpu, "must be a GPU name")
    numbers = []
    for check, name in ((_count, "tp"), (_count, "micro_batch_size"),
                        (_seconds, "forward_s"), (_seconds, "backward_s")):
        written = record[name]
        if place.lines is None:
            numbers.append(check(file, place.of(name), name, written))
            continue
        try:  # CSV: the number the text spells; a message quotes the text as written
            numbers.append(check(file, place.of(name), name, _csv_number(written)))
        except InputError as error:
            raise InputError(file, error.field, written, error.reason) from None
    return (gpu.strip(), *numbers)


def _records(file: str, text: str) -> tuple[str | None, list[tuple[_Place, object]]]:
    """The model name and the (place, record) pairs of a YAML or CSV profile."""
    if file.lower().endswith(".csv"):
        return None, _csv_records(file, text)
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
    if not items:
        raise InputError(file, "measurements", None, "has no measurement")
    return model, [(_Place(f"measurements[{i}]"), item) for i, item in enumerate(items)]


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def _csv_records(file: str, text: str) -> list[tuple[_Place, object]]:
    """The rows of a CSV profile after its header, as records by column name."""
    rows = _csv_rows(file, text)
    header = next(rows, None)
    if header is None:
        raise InputError(file, None, None, "is empty; expected a header " + ",".join(_FIELDS))
    columns = _csv_header(file, *header)
    records = []
    for start, row in rows:
        if len(row) > len(columns):
            raise InputError(file, f"line {start}: extra column", row[len(columns):],
                             f"more values than the header's {len(columns)} columns")
        lines, line = {}, start
        for name, value in zip(columns, row, strict=False):
            lines[name] = line
            line += len(_LINE_BREAK.findall(value))  # a quoted value may span lines
        records.append((_Place(f"line {start}", lines), dict(zip(columns, row, strict=False))))
    if not records:
        raise InputError(file, None, None, "has no measurement: only a header line")
    return records


def _csv_rows(file: str, text: str):
    """(first line, cells) of each non-blank row: a quoted value may hold line breaks, so
    a row's first line is counted before it is read."""
    reader = csv.reader(io.StringIO(text, newline=""))
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            raise InputError(file, f"line {reader.line_num}", None,
                             f"invalid CSV: {error}") from None
        if row:
            yield start, row


def _csv_header(file: str, line: int, cells: list[str]) -> list[str]:
    """The column names of the header line, checked: each of the five once."""
    columns = [cell.strip(" \t") for cell in cells]
    expected = ",".join(_FIELDS)
    if not set(columns) & set(_FIELDS):
        raise InputError(file, f"line {line}", ",".join(cells),
                         f"the header line is missing: the first line must name the "
                         f"columns {expected}")
    for index, name in enumerate(columns):
        if name not in _FIELDS:
            raise InputError(file, f"line {line}", name, f"unknown column; expected {expected}")
        if name in columns[:index]:
            raise InputError(file, f"line {line}", name, "column named twice")
    missing = [name for name in _FIELDS if name not in columns]
    if missing:
        raise InputError(file, f"line {line}", None,
                         f"the header lacks the column {missing[0]}; expected {expected}")
    return columns


def load_profile(path: str | Path, catalog: Catalog | None = None) -> Profile:
    """Read and validate a profile file (YAML, or CSV when the name ends in ``.csv``).

    Args:
        catalog: when given, GPU names may be any name or alias the catalog knows (they
            are stored under the catalog's name) and unknown GPUs are rejected.
    """
    file = str(path)
    model, records = _records(file, read_text_file(file))
    table: dict[tuple[str, int], dict[int, tuple[float, float]]] = {}
    for place, record in records:
        gpu, tp, size, forward_s, backward_s = _measurement(file, place, record)
        if catalog is not None:
            gpu = catalog.gpu(gpu, file=file, field=place.of("gpu")).name
        sizes = table.setdefault((gpu.lower(), tp), {})
        if size in sizes:
            raise InputError(file, place.of("micro_batch_size"),
                             f"{gpu}, tp {tp}, micro_batch_size {size}",
                             "measured twice")
        sizes[size] = (forward_s, backward_s)
    points = {key: tuple((b, *times) for b, times in sorted(sizes.items()))
              for key, sizes in table.items()}
    return Profile(source=file, model=model.strip() if model else None, points=points)
