"""Reading input files safely: size, encoding, nesting, aliases, duplicate keys, number size.

Every input file goes through :func:`read_text_file`, and every YAML or JSON document
through :func:`parse_yaml` or :func:`parse_json`; each problem becomes one
``InputError`` naming the file (and the line or key where it can), never a traceback,
and is found before the document is expanded in memory.

YAML is built from the parser's event stream rather than with ``yaml.safe_load``:
one pass that counts values with every alias expanded (so a billion-laughs file
stops at the limit instead of growing through later copies), bounds the nesting,
accepts only the plain data tags (no ``!!python/...``), and rejects a key given
twice in one mapping (``<<`` merge keys still work, and explicit keys win over
merged ones as YAML specifies).

Plain scalars are read by the YAML 1.2 core schema, not by PyYAML's YAML 1.1 rules:
``yes``, ``off`` and ``2024-01-02`` are text, ``1e5`` is a number. A number whose value
depends on the YAML version or the reader (``1:30`` is 90 in YAML 1.1, ``010`` is 8,
``1_000`` is 1000; base prefixes such as ``0x8``) is refused rather than guessed: another
tool, or the author, may read it the other way.
"""

from __future__ import annotations

import codecs
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from xsweep.errors import InputError
from xsweep.spec.limits import MAX_INTEGER_DIGITS, MAX_NESTING_DEPTH, Limits, active_limits

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C parser when PyYAML has it

_TAG = "tag:yaml.org,2002:"
_SEQUENCE_TAG, _MAPPING_TAG, _MERGE_TAG = _TAG + "seq", _TAG + "map", _TAG + "merge"
_STR_TAG, _INT_TAG, _FLOAT_TAG = _TAG + "str", _TAG + "int", _TAG + "float"
_NULL_TAG, _BOOL_TAG = _TAG + "null", _TAG + "bool"

# The YAML 1.2 core schema (yaml.org/spec/1.2.2, section 10.3.2) for plain scalars, less its
# octal and hexadecimal integers, which are refused with the other ambiguous forms below.
_CORE_CONSTANTS: dict[str, Any] = {
    **dict.fromkeys(("", "~", "null", "Null", "NULL")),
    **dict.fromkeys(("true", "True", "TRUE"), True),
    **dict.fromkeys(("false", "False", "FALSE"), False),
    **{sign + dot: math.inf * (-1 if sign == "-" else 1)
       for sign in ("", "+", "-") for dot in (".inf", ".Inf", ".INF")},
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
}
_CORE_INT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")
_CORE_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_NUMBER_START = frozenset("+-.0123456789")
# Integers with a leading zero (octal in YAML 1.1, decimal in 1.2) or a base prefix.
_OTHER_BASE = re.compile(r"[-+]?0(?:[0-9_]+|[xX][0-9a-fA-F_]+|[oO][0-7_]+|[bB][01_]+)")


def read_text_file(path: str | Path, limits: Limits | None = None) -> str:
    """The text of a regular file of at most ``limits.file_bytes`` bytes, decoded as UTF-8.

    A UTF-8 byte-order mark is dropped. UTF-16 and UTF-32 files, files with NUL bytes
    (binary data) and bytes that are not UTF-8 are rejected, each with its reason.
    """
    file = str(path)
    limits = limits if limits is not None else active_limits()
    if not file:
        raise InputError(None, None, file, "an empty file name")
    if "\0" in file:
        raise InputError(None, "file name", file, "holds a NUL character")
    try:
        info = os.stat(file)
        if not stat.S_ISREG(info.st_mode):
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise InputError(file, None, None, f"is {kind}; expected a text file")
        _check_size(info.st_size, file, limits)
        with open(file, "rb") as stream:
            data = stream.read(limits.file_bytes + 1)
    except OSError as error:
        raise InputError(file, None, None, error.strerror or str(error)) from None
    _check_size(len(data), file, limits)  # the file may have grown since stat
    return decode_text(data, file)


def _check_size(size: int, file: str, limits: Limits) -> None:
    if size > limits.file_bytes:
        raise InputError(file, None, f"{size:,} bytes",
                         f"file larger than the limit of {limits.file_bytes:,} bytes "
                         f"(set {Limits.env_name('file_bytes')} to raise it)")


def decode_text(data: bytes, file: str) -> str:
    """``data`` decoded as UTF-8 text (see :func:`read_text_file` for what is rejected)."""
    for boms, name in (((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE), "UTF-32"),
                       ((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE), "UTF-16")):
        if data.startswith(boms):
            raise InputError(file, None, None, f"is {name} text; save it as UTF-8")
    nul = data.find(b"\0")
    if nul >= 0:
        raise InputError(file, None, None,
                         f"has a NUL byte at offset {nul}: binary data, or UTF-16/UTF-32 "
                         "without a byte-order mark; expected UTF-8 text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InputError(file, None, None,
                         f"is not UTF-8 text (byte 0x{data[error.start]:02x} at offset "
                         f"{error.start})") from None


def read_yaml_file(path: str | Path) -> Any:
    """:func:`parse_yaml` of :func:`read_text_file`."""
    return parse_yaml(read_text_file(path), str(path))


def parse_yaml(text: str, file: str | None, limits: Limits | None = None) -> Any:
    """One YAML document as plain Python data (dicts, lists, str, int, float, bool, None)."""
    limits = limits if limits is not None else active_limits()
    loader = _Loader(text)
    try:
        return _YamlBuilder(loader, file, limits).document()
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else None
        problem = getattr(error, "problem", None) or str(error)
        raise InputError(file, where, None, f"invalid YAML: {problem}") from None
    finally:
        loader.dispose()


class _Node:
    """A collection being built: its values so far, its anchor, and where its count began."""

    __slots__ = ("anchor", "first_count", "is_mapping", "keys", "merges", "values")

    def __init__(self, is_mapping: bool, anchor: str | None, first_count: int):
        self.is_mapping = is_mapping
        self.anchor = anchor
        self.first_count = first_count
        self.values: list = []  # a mapping's keys and values alternate
        self.keys: set = set()
        self.merges: list[dict] = []


class _YamlBuilder:
    """Turns the parser's events into Python values (see the module docstring)."""

    def __init__(self, loader, file: str | None, limits: Limits):
        self.loader = loader
        self.file = file
        self.max_count = limits.yaml_nodes
        self.stack: list[_Node] = []
        self.anchors: dict[str, tuple[Any, int]] = {}  # name -> (value, values it expands to)
        self.count = 0  # values so far, aliases expanded
        self.documents = 0
        self.result: Any = None

    def document(self) -> Any:
        loader = self.loader
        handlers = {yaml.ScalarEvent: self.on_scalar, yaml.AliasEvent: self.on_alias,
                    yaml.MappingStartEvent: self.on_start, yaml.SequenceStartEvent: self.on_start,
                    yaml.MappingEndEvent: self.on_end, yaml.SequenceEndEvent: self.on_end,
                    yaml.DocumentStartEvent: self.on_document}
        while loader.check_event():
            event = loader.get_event()
            handler = handlers.get(type(event))
            if handler is not None:
                handler(event)
        return self.result

    # -- events ----------------------------------------------------------------------------
    def on_document(self, event) -> None:
        self.documents += 1
        if self.documents > 1:
            raise self.fail(event, None, "a file holds one YAML document", with_path=False)

    def on_scalar(self, event) -> None:
        self.counted(1, event)
        tag, text = event.tag, event.value
        if tag in (None, "!"):
            if tag == "!" or not event.implicit[0]:  # quoted, or tagged "!": a string
                value = text
            elif text == "<<" and self.at_key():
                value = _MERGE
            else:
                value = self.plain(text, event)
        elif tag == _MERGE_TAG and self.at_key():
            value = _MERGE
        else:
            value = self.tagged(tag, text, event)
        self.add(value, event, event.anchor)

    def plain(self, text: str, event) -> Any:
        """A plain scalar's value by the YAML 1.2 core schema; a number the YAML versions
        read differently is an error."""
        if text in _CORE_CONSTANTS:
            return _CORE_CONSTANTS[text]
        if text[0] not in _NUMBER_START:
            return text
        if _CORE_INT.fullmatch(text):
            if len(text) > MAX_INTEGER_DIGITS:
                raise self.fail(event, text[:20] + "...",
                                f"an integer longer than {MAX_INTEGER_DIGITS} characters")
            return int(text)
        form = _ambiguous_number(text, self.loader)
        if form is not None:
            raise self.fail(event, text, f"a number in a form YAML versions read differently "
                            f"({form}); write it in decimal digits, or quote it to mean text")
        if _CORE_FLOAT.fullmatch(text):
            return float(text)
        return text

    def tagged(self, tag: str, text: str, event) -> Any:
        """A scalar with an explicit tag: ``!!str`` keeps the text, ``!!int``, ``!!float``,
        ``!!bool`` and ``!!null`` take what the core schema reads and must match it."""
        if tag == _STR_TAG:
            return text
        if tag not in (_INT_TAG, _FLOAT_TAG, _BOOL_TAG, _NULL_TAG):
            raise self.fail(event, _short(tag), _UNKNOWN_TAG)
        value = self.plain(text, event) if text else None
        if tag == _FLOAT_TAG and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        kind = {_INT_TAG: int, _FLOAT_TAG: float, _BOOL_TAG: bool, _NULL_TAG: type(None)}[tag]
        if type(value) is not kind:
            raise self.fail(event, text, f"not a value of its tag {_short(tag)}")
        return value

    def on_alias(self, event) -> None:
        if event.anchor not in self.anchors:
            cycle = any(node.anchor == event.anchor for node in self.stack)
            raise self.fail(event, f"*{event.anchor}",
                            "an alias inside the value it names (a cycle)" if cycle
                            else "an alias to no anchor")
        value, expands_to = self.anchors[event.anchor]
        self.counted(expands_to, event)
        self.add(value, event, None)

    def on_start(self, event) -> None:
        self.counted(1, event)
        is_mapping = isinstance(event, yaml.MappingStartEvent)
        tag = event.tag
        if tag not in (None, "!", _MAPPING_TAG if is_mapping else _SEQUENCE_TAG):
            raise self.fail(event, _short(tag), _UNKNOWN_TAG)
        if len(self.stack) >= MAX_NESTING_DEPTH:
            raise self.fail(event, None, _TOO_DEEP)
        self.stack.append(_Node(is_mapping, event.anchor, self.count))

    def on_end(self, event) -> None:
        node = self.stack.pop()
        if node.is_mapping:
            value: Any = {}
            for merged in reversed(node.merges):  # earlier merged mappings win over later ones
                value.update(merged)
            value.update(zip(node.values[0::2], node.values[1::2], strict=True))
        else:
            value = node.values
        if node.anchor is not None:
            self.anchors[node.anchor] = (value, self.count - node.first_count + 1)
        self.add(value, event, None)

    # -- helpers ---------------------------------------------------------------------------
    def counted(self, values: int, event) -> None:
        self.count += values
        if self.count > self.max_count:
            raise self.fail(event, None,
                            f"the document expands (aliases included) to more than "
                            f"{self.max_count:,} values "
                            f"(set {Limits.env_name('yaml_nodes')} to raise the limit)",
                            with_path=False)

    def at_key(self) -> bool:
        return bool(self.stack) and self.stack[-1].is_mapping \
            and len(self.stack[-1].values) % 2 == 0

    def add(self, value: Any, event, anchor: str | None) -> None:
        if anchor is not None:  # a scalar's anchor (a collection's is set when it ends)
            self.anchors[anchor] = (value, 1)
        if not self.stack:
            self.result = value
            return
        node = self.stack[-1]
        if not node.is_mapping:
            node.values.append(value)
        elif len(node.values) % 2 == 0:  # a key
            if value is not _MERGE:
                if isinstance(value, list | dict):
                    raise self.fail(event, None,
                                    "a mapping key must be a plain value, not a list or mapping")
                if value in node.keys:
                    raise self.fail(event, value, "key given twice in one mapping")
                node.keys.add(value)
            node.values.append(value)
        elif node.values[-1] is _MERGE:
            node.values.pop()
            merged = value if isinstance(value, list) else [value]
            if not all(isinstance(m, dict) for m in merged):
                raise self.fail(event, None,
                                "a merge key (<<) takes a mapping or a list of mappings")
            node.merges.extend(merged)
        else:
            node.values.append(value)

    def path(self) -> str:
        """Where the event being read sits, as ``key.key[index]`` (computed on errors only)."""
        text = ""
        for node in self.stack:
            if not node.is_mapping:
                text += f"[{len(node.values)}]"
            elif len(node.values) % 2:
                key = "<<" if node.values[-1] is _MERGE else str(node.values[-1])
                text += f".{key}" if text else key
        return text

    def fail(self, event, value: object, reason: str, with_path: bool = True) -> InputError:
        line = event.start_mark.line + 1
        path = self.path() if with_path else ""
        if path:
            return InputError(self.file, path, value, f"{reason} (line {line})")
        return InputError(self.file, f"line {line}", value, reason)


_UNKNOWN_TAG = "invalid YAML: a tag xsweep does not read (files hold plain data only)"
_TOO_DEEP = f"nested deeper than the limit of {MAX_NESTING_DEPTH} levels"
_PENDING = object()  # "no finished top-level value yet"
_MERGE = object()  # the merge key ``<<`` while its value is read


def _short(tag: str) -> str:
    """``!!python/...`` rather than ``tag:yaml.org,2002:python/...``."""
    return "!!" + tag[len(_TAG):] if tag.startswith(_TAG) else tag


def _ambiguous_number(text: str, loader) -> str | None:
    """What makes ``text``, a plain scalar that is no decimal integer, a number whose value
    depends on the YAML version (PyYAML's YAML 1.1 resolver, or the 1.2 core schema);
    None when it is not such a number."""
    if _OTHER_BASE.fullmatch(text):
        if text.lstrip("+-")[1] in "0123456789_":
            return "a leading zero: YAML 1.1 reads 010 as octal 8, YAML 1.2 as 10"
        return "a base prefix: YAML 1.1 and 1.2 accept different ones of 0x, 0o, 0b"
    if _CORE_FLOAT.fullmatch(text) or \
            loader.resolve(yaml.ScalarNode, text, (True, False)) not in (_INT_TAG, _FLOAT_TAG):
        return None
    if ":" in text:
        return "base 60 in YAML 1.1, text in YAML 1.2"
    if "_" in text:
        return "digits grouped by underscores: a number in YAML 1.1, text in YAML 1.2"
    return "a number in YAML 1.1, text in YAML 1.2"


def parse_json(text: str, file: str | None) -> Any:
    """One JSON document; duplicate keys, NaN/Infinity and over-long integers are errors."""
    try:
        document = json.loads(text, object_pairs_hook=_unique_keys,
                              parse_constant=_no_constant, parse_int=_bounded_int)
    except json.JSONDecodeError as error:
        raise InputError(file, f"line {error.lineno}", None,
                         f"invalid JSON: {error.msg}") from None
    except _JsonProblem as problem:
        raise InputError(file, None, problem.value, problem.reason) from None
    except RecursionError:
        raise InputError(file, None, None, _TOO_DEEP) from None
    if _depth(document) > MAX_NESTING_DEPTH:
        raise InputError(file, None, None, _TOO_DEEP)
    return document


class _JsonProblem(ValueError):
    def __init__(self, value: object, reason: str):
        super().__init__(reason)
        self.value, self.reason = value, reason


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    document = dict(pairs)
    if len(document) < len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise _JsonProblem(key, "key given twice in one object")
    return document


def _no_constant(name: str) -> None:
    raise _JsonProblem(name, "not a JSON number (NaN and Infinity are not JSON)")


def _bounded_int(text: str) -> int:
    if len(text) > MAX_INTEGER_DIGITS:
        raise _JsonProblem(text[:20] + "...",
                           f"an integer longer than {MAX_INTEGER_DIGITS} characters")
    return int(text)


def _depth(document: Any) -> int:
    """Levels of nested lists and objects (0 for a plain value), without recursion."""
    deepest, todo = 0, [(document, 0)]
    while todo:
        value, depth = todo.pop()
        if isinstance(value, dict | list):
            depth += 1
            deepest = max(deepest, depth)
            if depth <= MAX_NESTING_DEPTH:
                todo.extend((child, depth) for child in
                            (value.values() if isinstance(value, dict) else value))
    return deepest
