"""Deployment plans in and out: protobuf text format and JSON, read and validated.

Conversions between strings and messages are pure; ``load_valid_plan`` (and
``load_plan``, its message) is the only function here that touches the file system.
What the names of a plan mean is :mod:`xsweep.spec.resolve`'s.

Reading is stricter than protobuf's own parsers in two ways, so that a number is
never read as something other than what its author meant and every error names the
plan field: text format refuses integers with a leading zero (protobuf reads ``040``
as octal 32), a base prefix or underscores; JSON is checked against the schema
before protobuf converts it, so that an error names the field (``training.total_tokens``)
and the value rather than protobuf's path and the whole object.
"""

from __future__ import annotations

import contextlib
import math
import re
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from google.protobuf.descriptor import FieldDescriptor

from xsweep.errors import InputError, did_you_mean, suggestion
from xsweep.spec import xsweep_pb2
from xsweep.spec.catalog import Catalog, load_catalog
from xsweep.spec.enums import TABLES
from xsweep.spec.limits import MAX_INTEGER_DIGITS
from xsweep.spec.reader import parse_json, read_text_file
from xsweep.spec.valid_plan import ValidPlan
from xsweep.spec.validate import validate_plan

DeploymentPlan = xsweep_pb2.DeploymentPlan

TEXT_SUFFIXES = (".pbtxt", ".textproto", ".txtpb")
JSON_SUFFIXES = (".json",)


def load_plan(path: str | Path, catalog: Catalog | None = None) -> DeploymentPlan:
    """Read a plan from ``.pbtxt`` (text format) or ``.json`` (protobuf JSON) and validate it.

    Raises:
        InputError: naming the file and the field (parse errors: the line).
    """
    return load_valid_plan(path, catalog).message


def load_valid_plan(path: str | Path, catalog: Catalog | None = None) -> ValidPlan:
    """:func:`load_plan`, typed: the plan as validation resolved it.

    Raises:
        InputError: naming the file and the field (parse errors: the line).
    """
    file = str(path)
    suffix = Path(file).suffix.lower()
    if suffix not in TEXT_SUFFIXES + JSON_SUFFIXES:
        raise InputError(file, None, suffix or None,
                         "unknown plan format; expected .pbtxt (text format) or .json")
    text = read_text_file(file)
    plan = plan_from_json(text, file) if suffix in JSON_SUFFIXES else plan_from_text(text, file)
    return validate_plan(plan, catalog if catalog is not None else load_catalog(), file)


def plan_from_text(text: str, file: str | None = None) -> DeploymentPlan:
    """Parse protobuf text format; a syntax error names its line, a number in another
    base than ten its field and line."""
    if _SUSPECT_NUMBER.search(text):  # rare: most plans hold no such characters at all
        _check_text_numbers(text, file)
    for _ in range(_MAX_ENUM_FIXES + 1):
        try:
            return text_format.Parse(text, DeploymentPlan())
        except text_format.ParseError as error:
            fixed = _enum_in_any_case(error, text)
            if fixed is None:
                raise _text_error(error, text, file) from None
            text = fixed
    raise AssertionError("unreachable: a plan holds fewer enum values than that")


#: Enum fields of a plan (each singular, in a singular message): at most this many values
#: in another case, each found by one parse.
_MAX_ENUM_FIXES = 8
_NO_ENUM_VALUE = re.compile(r'Enum type "([\w.]+)" has no value named ')
_NO_FIELD = re.compile(r'Message type "([\w.]+)" has no field named "?(\w+)"?')
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _enum_in_any_case(error: text_format.ParseError, text: str) -> str | None:
    """``text`` with the enum name ``error`` stopped at written as declared, when it is a
    declared name in another case (``schedule: gpipe``); else None. protobuf's text
    parser knows names in one case only, and tells where it stopped."""
    kind = _NO_ENUM_VALUE.search(str(error))
    line, column = error.GetLine(), error.GetColumn()
    if kind is None or not line or not column:
        return None
    lines = text.split("\n")
    if line > len(lines):
        return None
    word = _IDENTIFIER.match(lines[line - 1], column - 1)
    if word is None:
        return None
    enum = _enum_type(kind.group(1))
    name = None if enum is None else enum_value_name(enum, word.group())
    if name is None or name == word.group():
        return None
    lines[line - 1] = lines[line - 1][:word.start()] + name + lines[line - 1][word.end():]
    return "\n".join(lines)


def _enum_type(full_name: str):
    try:
        return xsweep_pb2.DESCRIPTOR.pool.FindEnumTypeByName(full_name)
    except KeyError:
        return None


def _close_names_hint(reason: str) -> str:
    """The close names of an unknown field or enum value protobuf's message names."""
    unknown_field = _NO_FIELD.search(reason)
    if unknown_field is not None:
        try:
            message = xsweep_pb2.DESCRIPTOR.pool.FindMessageTypeByName(unknown_field.group(1))
        except KeyError:
            return ""
        return did_you_mean(unknown_field.group(2), [f.name for f in message.fields])
    unknown_value = _NO_ENUM_VALUE.search(reason)
    enum = None if unknown_value is None else _enum_type(unknown_value.group(1))
    if enum is None:
        return ""
    written = reason[unknown_value.end():].strip().rstrip(".")
    declared = ", ".join(v.name for v in enum.values if v.number != 0)
    quoted = len(written) > 1 and written[0] == written[-1] == '"'
    if quoted and enum_value_name(enum, written[1:-1]) is not None:
        return (f"; an enum value is a name, not a string: write "
                f"{enum_value_name(enum, written[1:-1])} without quotes")
    return f"{_enum_hint(enum, written.strip(chr(34)))} (expected one of {declared})"


def _enum_hint(enum, written: str) -> str:
    """The declared names of ``enum`` close to ``written``, or the one a sweep spells
    ``written`` (``1f1b`` is ``ONE_F_ONE_B``, ``none`` is ``NO_RECOMPUTE``)."""
    table = next((t for t in TABLES if t.enum.DESCRIPTOR.full_name == enum.full_name), None)
    if table is not None and written.strip().lower() in table.known():
        return suggestion([table.enum.Name(table.value(written.strip().lower()))])
    return did_you_mean(written, [v.name for v in enum.values if v.number != 0])


def _text_error(error: text_format.ParseError, text: str, file: str | None) -> InputError:
    """protobuf's message without the copy of the line it puts in front (the line is
    named instead)."""
    line = error.GetLine()
    if not line:
        return InputError(file, None, None, str(error))
    reason = str(error).split(" : ", 1)[-1]
    lines = text.split("\n")
    echo = f"'{lines[line - 1]}': " if line <= len(lines) else ""
    if echo and reason.startswith(echo):
        reason = reason[len(echo):]
    hint = _close_names_hint(reason)
    if hint:
        reason = reason.rstrip(".") + hint
    return InputError(file, f"line {line}", None, f"{reason} (column {error.GetColumn()})")


# A number token with a leading zero, a base prefix or an underscore may be somewhere: the
# careful scan below runs only then (strings and comments may match too; it skips them).
_SUSPECT_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:0[0-9xXoObB]|\.?[0-9][\w.+-]*_)")


class _StopScan(Exception):
    """The text is malformed where the scan stands: the parser will say how."""


def _check_text_numbers(text: str, file: str | None) -> None:
    """Refuse a number written in a form protobuf's text parser reads unlike decimal
    digits, naming its field and line. The scan follows the schema with protobuf's own
    tokenizer (which skips strings and comments); where the text is malformed it stops and
    leaves the error to the parser."""
    tokenizer = text_format.Tokenizer(text.split("\n"))
    with contextlib.suppress(_StopScan):
        _scan_fields(tokenizer, DeploymentPlan.DESCRIPTOR, "", "", file)


def _scan_fields(tokenizer, descriptor, prefix: str, end: str, file: str | None) -> None:
    """The fields of one message up to ``end`` (``}``, ``>``, or the end of the text)."""
    counts: dict[str, int] = {}  # values of each repeated field so far: their indices
    while not tokenizer.LookingAt(end):
        field = descriptor.fields_by_name.get(tokenizer.token)
        if field is None:
            raise _StopScan
        tokenizer.NextToken()
        tokenizer.TryConsume(":")
        if tokenizer.TryConsume("["):
            while not tokenizer.TryConsume("]"):
                _scan_value(tokenizer, field, _field_path(prefix, field, counts), file)
                if not tokenizer.TryConsume(",") and not tokenizer.LookingAt("]"):
                    raise _StopScan
        else:
            _scan_value(tokenizer, field, _field_path(prefix, field, counts), file)
        if not tokenizer.TryConsume(";"):
            tokenizer.TryConsume(",")
    if end:
        tokenizer.NextToken()


def _field_path(prefix: str, field, counts: dict[str, int]) -> str:
    if not field.is_repeated:
        return prefix + field.name
    index = counts.get(field.name, 0)
    counts[field.name] = index + 1
    return f"{prefix}{field.name}[{index}]"


def _scan_value(tokenizer, field, path: str, file: str | None) -> None:
    if field.message_type is not None:
        end = {"{": "}", "<": ">"}.get(tokenizer.token)
        if end is None:
            raise _StopScan
        tokenizer.NextToken()
        _scan_fields(tokenizer, field.message_type, path + ".", end, file)
        return
    token = tokenizer.token
    if not token:
        raise _StopScan
    if token[0] in "'\"":
        while tokenizer.token[:1] in ("'", '"'):  # adjacent strings are concatenated
            tokenizer.NextToken()
        return
    form = _integer_form(token)
    if form is not None:
        line = tokenizer.ParseError("").GetLine()
        raise InputError(file, path, token, f"{form}; write the number in decimal digits "
                                            f"(line {line})")
    tokenizer.NextToken()


def _integer_form(token: str) -> str | None:
    """Why a number token is not plain decimal digits, or None."""
    digits = token.lstrip("+-")
    if not digits[:1].isdigit() and not digits.startswith("."):
        return None  # an identifier: an enum name, true, inf, ...
    if digits[:2].lower() in ("0x", "0o", "0b"):
        return "a number with a base prefix (protobuf reads 0x20 as 32)"
    if len(digits) > 1 and digits[0] == "0" and digits[1].isdigit():
        return "a number with a leading zero (protobuf reads 040 as octal 32)"
    if "_" in digits:
        return "digits grouped by underscores"
    return None


def plan_from_json(text: str, file: str | None = None) -> DeploymentPlan:
    """Parse the protobuf JSON mapping; a syntax error names its line, a wrong value its
    field (the plan's snake_case path) and the value.

    A field given twice, also under its two spellings (``firstLayer`` and
    ``first_layer``), is an error rather than the last one winning.
    """
    document = parse_json(text, file)
    if not isinstance(document, dict):
        raise InputError(file, None, type(document).__name__,
                         "a plan in JSON is an object of plan fields")
    _check_json_message(document, DeploymentPlan.DESCRIPTOR, "", file)
    try:
        return json_format.ParseDict(document, DeploymentPlan())
    except (json_format.ParseError, ValueError, TypeError) as error:
        raise _json_error(error, file) from None


def _some_names(names: list[str], width: int = 100) -> str:
    """``names`` joined by commas, the first that fit in about ``width`` characters and a
    count of the rest (an error stays one short line)."""
    shown: list[str] = []
    for name in names:
        if shown and len(", ".join([*shown, name])) > width:
            return f"{', '.join(shown)} and {len(names) - len(shown)} more"
        shown.append(name)
    return ", ".join(shown)


def _check_json_message(document: dict, descriptor, path: str, file: str | None) -> None:
    """Check a JSON object against the message ``descriptor`` as ``ParseDict`` will read it,
    so that each problem is reported with its field path and value."""
    seen: dict[str, str] = {}
    for key, value in document.items():
        field = descriptor.fields_by_name.get(key) or descriptor.fields_by_camelcase_name.get(key)
        if field is None:
            names = [f.name for f in descriptor.fields]
            spelled = [f.json_name for f in descriptor.fields] if key != key.lower() else names
            raise InputError(file, f"{path}{key}", None,
                             f"unknown field{did_you_mean(key, spelled)} (expected one of "
                             f"{_some_names(names)})")
        where = f"{path}{field.name}"
        if field.name in seen:
            raise InputError(file, where, None, f"given twice (as {seen[field.name]!r} and {key!r})")
        seen[field.name] = key
        if value is None:
            continue  # null: the field's default
        if not field.is_repeated:
            document[key] = _check_json_value(value, field, where, file)
            continue
        if not isinstance(value, list):
            raise _wrong(value, "a list [...]", where, file)
        for index, item in enumerate(value):
            if item is None:
                raise InputError(file, f"{where}[{index}]", None, "null is not allowed in a list")
            value[index] = _check_json_value(item, field, f"{where}[{index}]", file)


_INT_BITS = {FieldDescriptor.CPPTYPE_INT32: (True, 32), FieldDescriptor.CPPTYPE_INT64: (True, 64),
             FieldDescriptor.CPPTYPE_UINT32: (False, 32),
             FieldDescriptor.CPPTYPE_UINT64: (False, 64)}
_FLOAT_TYPES = (FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT)
# A number in a string, as JSON writes numbers (protobuf also accepts "1_000", " 12", "+12").
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_JSON_FLOAT_WORDS = ("NaN", "Infinity", "-Infinity")  # the mapping's names; ranges refuse them


def _check_json_value(value: Any, field, path: str, file: str | None) -> Any:
    """One value of ``field`` (an item, for a repeated field), as ``ParseDict`` is to read
    it: an enum name written in another case is given as declared."""
    kind = field.cpp_type
    if kind == FieldDescriptor.CPPTYPE_MESSAGE:
        if not isinstance(value, dict):
            raise _wrong(value, "an object {...} of fields", path, file)
        _check_json_message(value, field.message_type, path + ".", file)
    elif kind in _INT_BITS:
        _check_json_integer(value, *_INT_BITS[kind], path, file)
    elif kind in _FLOAT_TYPES:
        _check_json_float(value, path, file)
    elif kind == FieldDescriptor.CPPTYPE_BOOL:
        if not isinstance(value, bool):
            raise _wrong(value, "true or false (no quotes)", path, file)
    elif kind == FieldDescriptor.CPPTYPE_ENUM:
        return _check_json_enum(value, field.enum_type, path, file)
    elif not isinstance(value, str):
        raise _wrong(value, "a string", path, file)
    elif not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            raise InputError(file, path, value[error.start:error.end],
                             "a string with an unpaired surrogate escape") from None
    return value


def _check_json_integer(value: Any, signed: bool, bits: int, path: str,
                        file: str | None) -> None:
    """An integer: a JSON number, or a string of one (the mapping's form for 64-bit ones)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _wrong(value, "an integer", path, file)
    number: float | int = value
    if isinstance(value, str):
        if not _JSON_NUMBER.fullmatch(value):
            raise InputError(file, path, value, "expected an integer in decimal digits")
        if len(value) > MAX_INTEGER_DIGITS:
            raise InputError(file, path, value[:20] + "...",
                             f"an integer longer than {MAX_INTEGER_DIGITS} characters")
        number = int(value) if value.lstrip("-").isdigit() else float(value)
    if isinstance(number, float):
        if not math.isfinite(number):
            raise InputError(file, path, value, "a number too large for an integer field")
        if not number.is_integer():
            raise InputError(file, path, value, "expected an integer")
        number = int(number)
    low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    if not low <= number <= high:
        raise InputError(file, path, value,
                         f"outside the range of a {'' if signed else 'u'}int{bits} field "
                         f"({low:,} to {high:,})")


def _check_json_float(value: Any, path: str, file: str | None) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _wrong(value, "a number", path, file)
    if isinstance(value, str):
        if value in _JSON_FLOAT_WORDS:
            return
        if not _JSON_NUMBER.fullmatch(value):
            raise InputError(file, path, value, "expected a number in decimal digits")
        number = float(value)
    else:
        number = float(value)
    if math.isinf(number):  # a literal such as 1e999: Python reads it as infinity
        raise InputError(file, path, value, "a number too large for a double")


def _check_json_enum(value: Any, enum, path: str, file: str | None) -> Any:
    """An enum value: its name in any case (returned as declared), or its number (the plan
    validation refuses an undeclared number)."""
    if isinstance(value, str) and enum_value_name(enum, value) is not None:
        return enum_value_name(enum, value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    names = ", ".join(v.name for v in enum.values if v.number != 0)
    if isinstance(value, str):
        raise InputError(file, path, value,
                         f"unknown value{_enum_hint(enum, value)} (expected one of {names})")
    raise _wrong(value, f"one of {names}", path, file)


def enum_value_name(enum, name: str) -> str | None:
    """The declared name of the value of ``enum`` (a descriptor) called ``name`` in any case
    (``GPIPE`` for ``gpipe``), or None. Only ASCII letters change case: ``GPıPE`` (a dotless
    i) names nothing."""
    value = enum.values_by_name.get(name.upper() if name.isascii() else name)
    return None if value is None else value.name


def _wrong(value: Any, expected: str, path: str, file: str | None) -> InputError:
    """``expected`` where ``value`` stands; a list or an object is named by its kind, not
    printed (it may be large)."""
    if isinstance(value, dict | list):
        kind = "an object" if isinstance(value, dict) else "a list"
        return InputError(file, path, None, f"expected {expected}, not {kind}")
    return InputError(file, path, value, f"expected {expected}")


def _json_error(error: Exception, file: str | None) -> InputError:
    """Whatever ``ParseDict`` still raises, on one short line naming the plan field."""
    reason = str(error).split("\n", 1)[0]
    while (prefix := re.match(r"Failed to parse \w+ field: ", reason)) is not None:
        reason = reason[prefix.end():]
    field = None
    where = re.search(r" at \"?DeploymentPlan\.?([\w.\[\]]*)\"?[.\s]*$", reason)
    if where is not None:
        field = re.sub(r"(?<=[a-z0-9])([A-Z])", lambda m: "_" + m.group(1).lower(),
                       where.group(1).rstrip(".")) or None
        reason = reason[:where.start()]
    reason = reason.split(" which is ", 1)[0]  # protobuf would print the value in full
    return InputError(file, field, None, f"invalid plan JSON: {reason.rstrip('. ')}")


def plan_to_text(plan: DeploymentPlan) -> str:
    """The plan in protobuf text format."""
    return text_format.MessageToString(plan)


def plan_to_json(plan: DeploymentPlan) -> str:
    """The plan in the protobuf JSON mapping (camelCase keys, enums by name)."""
    return json_format.MessageToJson(plan, indent=2) + "\n"
