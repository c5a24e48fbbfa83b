"""Safe reading: file kinds, sizes, encodings, YAML and JSON structure, number size."""

from __future__ import annotations

import datetime
import os

import pytest
import yaml

from xsweep.errors import InputError
from xsweep.spec.limits import MAX_NESTING_DEPTH, Limits
from xsweep.spec.reader import parse_json, parse_yaml, read_text_file


def refused(call, *args, match: str) -> InputError:
    with pytest.raises(InputError, match=match) as info:
        call(*args)
    assert "\n" not in str(info.value)
    return info.value


# -- files ---------------------------------------------------------------------------------
def test_text_is_read_as_utf8_without_its_byte_order_mark(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_bytes("\ufeffname: café\n".encode())
    assert read_text_file(path) == "name: café\n"


@pytest.mark.parametrize(("data", "reason"), [
    ("name: x\n".encode("utf-16"), "is UTF-16 text"),
    ("name: x\n".encode("utf-16-be"), "NUL byte at offset 0"),
    ("name: x\n".encode("utf-32"), "is UTF-32 text"),
    (b"name: caf\xe9\n", r"not UTF-8 text \(byte 0xe9 at offset 9\)"),
    (b"\x89PNG\r\n\x1a\n\x00\x00", "NUL byte at offset 8"),
])
def test_other_encodings_and_binary_files_are_refused(tmp_path, data, reason):
    path = tmp_path / "p.yaml"
    path.write_bytes(data)
    error = refused(read_text_file, path, match=reason)
    assert error.file == str(path)


def test_size_limit_is_checked_before_reading(tmp_path, monkeypatch):
    path = tmp_path / "big.yaml"
    with open(path, "wb") as out:
        out.truncate(10**9)  # sparse: a 1 GB file costs nothing to make
    refused(read_text_file, path, match="file larger than the limit of 4,194,304 bytes "
            r"\(set XSWEEP_MAX_FILE_BYTES to raise it\)")
    monkeypatch.setenv("XSWEEP_MAX_FILE_BYTES", "10")
    path.write_text("a: 1\nb: 2\n\n")
    refused(read_text_file, path, match="limit of 10 bytes")
    assert read_text_file(path, Limits(file_bytes=11)) == "a: 1\nb: 2\n\n"


def test_folders_missing_files_and_pipes_are_refused(tmp_path):
    refused(read_text_file, tmp_path, match="is a directory")
    refused(read_text_file, tmp_path / "absent.yaml", match="No such file or directory")
    refused(read_text_file, "", match="an empty file name")
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    refused(read_text_file, fifo, match="not a regular file")  # and does not block


# -- YAML ----------------------------------------------------------------------------------
def test_plain_yaml_reads_as_safe_load_would():
    text = ("name: x\nnumbers: [1, 2.5, 0x10, 1_000, -3, 1:30]\nflags: {on: true, off: no}\n"
            "nothing: ~\nquoted: '12'\nday: 2024-01-02\nblock: |\n  two\n  lines\n"
            "anchored: &n 7\nagain: *n\n")
    doc = parse_yaml(text, "f")
    assert doc == yaml.safe_load(text)
    assert doc["numbers"] == [1, 2.5, 16, 1000, -3, 90] and doc["again"] == 7
    assert doc["flags"] == {True: True, False: False}  # YAML 1.1: on and off are booleans
    assert doc["day"] == datetime.date(2024, 1, 2)
    assert parse_yaml("", "f") is None


def test_anchors_aliases_and_merge_keys_work():
    text = ("base: &base {tp: 2, pp: 1}\nfirst: *base\n"
            "second:\n  <<: *base\n  pp: 4\n"
            "third:\n  <<: [{tp: 8}, *base]\n")
    doc = parse_yaml(text, "f")
    assert doc["first"] == {"tp": 2, "pp": 1}
    assert doc["second"] == {"tp": 2, "pp": 4}  # explicit keys win over merged ones
    assert doc["third"] == {"tp": 8, "pp": 1}  # earlier merged mappings win over later


def test_billion_laughs_stops_at_the_expansion_limit():
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    error = refused(parse_yaml, "\n".join(lines), "f",
                    match=r"expands \(aliases included\) to more than 1,000,000 values "
                    r"\(set XSWEEP_MAX_YAML_NODES")
    assert error.field == "line 7"  # a6 alone expands to 9**6 * 10 values
    # the same document with fewer levels is fine, and so is raising the limit
    assert len(parse_yaml("\n".join(lines[:3]), "f")) == 3
    assert len(parse_yaml("\n".join(lines), "f", Limits(yaml_nodes=10**9))) == 9


@pytest.mark.parametrize(("text", "field", "reason"), [
    ("a: 1\nb: 2\na: 3\n", "line 3", "key given twice"),
    ("x:\n  y: 1\n  y: 2\n", "x", "key given twice"),
    ("a: !!python/object/apply:os.system [true]\n", "a", "a tag xsweep does not read"),
    ("a: !!binary aGVsbG8=\n", "a", "a tag xsweep does not read"),
    ("a: !!set {x}\n", "a", "a tag xsweep does not read"),
    ("a: &x [1, *x]\n", "a[1]", "a cycle"),
    ("a: *nowhere\n", "a", "an alias to no anchor"),
    ("? [1, 2]\n: x\n", "line 1", "a mapping key must be a plain value"),
    ("a:\n  <<: 3\n", "a", "a merge key"),
    ("a: 1\n---\nb: 2\n", "line 2", "one YAML document"),
    ("a: [1, 2\n", "line 2", "invalid YAML"),
    ("a: " + "9" * 31 + "\n", "a", "an integer longer than 30 characters"),
])
def test_malformed_yaml_is_one_error_naming_the_place(text, field, reason):
    error = refused(parse_yaml, text, "f.yaml", match=reason)
    assert (error.file, error.field) == ("f.yaml", field)


def test_deep_yaml_nesting_is_refused():
    deep = "[" * (MAX_NESTING_DEPTH + 1) + "]" * (MAX_NESTING_DEPTH + 1)
    refused(parse_yaml, deep, "f", match=f"nested deeper than the limit of {MAX_NESTING_DEPTH}")
    shallow = "[" * MAX_NESTING_DEPTH + "]" * MAX_NESTING_DEPTH
    assert parse_yaml(shallow, "f") is not None
    refused(parse_yaml, "[" * 100_000 + "]" * 100_000, "f", match="nest")


def test_yaml_special_floats_are_read_for_the_validators_to_refuse():
    doc = parse_yaml("a: .nan\nb: -.inf\nc: 1e400\n", "f")
    assert doc["a"] != doc["a"] and doc["b"] == float("-inf")
    assert doc["c"] == "1e400"  # YAML 1.1 needs a dot in a float: this is a string


# -- JSON ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "reason"), [
    ('{"a": 1, "a": 2}', "key given twice in one object"),
    ('{"a": NaN}', "NaN and Infinity are not JSON"),
    ('{"a": -Infinity}', "NaN and Infinity are not JSON"),
    ('{"a": ' + "1" * 31 + "}", "an integer longer than 30 characters"),
    ("[" * 100_000 + "]" * 100_000, "nested deeper than the limit"),
    ("[" * (MAX_NESTING_DEPTH + 1) + "]" * (MAX_NESTING_DEPTH + 1), "nested deeper"),
    ('{"a": [1, 2}', "invalid JSON"),
])
def test_malformed_json_is_one_error(text, reason):
    refused(parse_json, text, "p.json", match=reason)


def test_plain_json_reads_normally():
    assert parse_json('{"a": [1, 2.5, "x", null, true]}', "f") == {"a": [1, 2.5, "x", None, True]}
    assert parse_json("5", "f") == 5  # callers decide what a document must be
