"""Safe reading: file kinds, sizes, encodings, YAML and JSON structure, number size."""

from __future__ import annotations

import os

import pytest

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
def test_plain_yaml_reads_by_the_yaml_1_2_core_schema():
    text = ("name: x\nnumbers: [1, 2.5, -3, +4, 1e5, .5, 0, 00.5]\n"
            "flags: [true, False, TRUE, yes, no, on, off, y]\n"
            "nothing: [~, null, Null, NULL, nULL]\nempty:\nquoted: ['12', \"0x10\", '1:30']\n"
            "day: 2024-01-02\nblock: |\n  two\n  lines\nanchored: &n 7\nagain: *n\n"
            "tagged: [!!int 12, !!float 2, !!str 12, ! 010, !!bool true, !!null '']\n")
    doc = parse_yaml(text, "f")
    assert doc["numbers"] == [1, 2.5, -3, 4, 100000.0, 0.5, 0, 0.5]
    assert doc["flags"] == [True, False, True, "yes", "no", "on", "off", "y"]  # YAML 1.2
    assert doc["nothing"] == [None, None, None, None, "nULL"] and doc["empty"] is None
    assert doc["quoted"] == ["12", "0x10", "1:30"] and doc["day"] == "2024-01-02"
    assert doc["again"] == 7 and doc["block"] == "two\nlines\n"
    assert doc["tagged"] == [12, 2.0, "12", "010", True, None]
    assert isinstance(doc["tagged"][1], float)
    assert parse_yaml("", "f") is None


@pytest.mark.parametrize(("written", "form"), [
    ("1:30", "base 60"), ("-1:30:00", "base 60"), ("1:30.5", "base 60"),
    ("010", "leading zero"), ("-010", "leading zero"), ("09", "leading zero"),
    ("0_10", "leading zero"),
    ("0x8", "base prefix"), ("0o17", "base prefix"), ("0b101", "base prefix"),
    ("-0X1F", "base prefix"),
    ("1_000", "underscores"), ("1_000.5", "underscores"),
])
def test_numbers_the_yaml_versions_read_differently_are_refused(written, form):
    """YAML 1.1 reads ``1:30`` as 90 and ``010`` as 8: no reader may guess."""
    error = refused(parse_yaml, f"training:\n  global_batch_size: {written}\n", "s.yaml",
                    match=form)
    assert (error.field, error.value) == ("training.global_batch_size", written)
    assert "write it in decimal digits" in error.reason and "(line 2)" in error.reason
    assert parse_yaml(f"a: '{written}'\n", "s.yaml") == {"a": written}  # quoted: text


@pytest.mark.parametrize("text", ["a: !!int x\n", "a: !!int 010\n", "a: !!bool yes\n",
                                  "a: !!float abc\n", "a: !!null 0\n"])
def test_a_scalar_that_is_not_a_value_of_its_tag_is_refused(text):
    error = refused(parse_yaml, text, "f.yaml", match="a:|not a value of its tag")
    assert error.field == "a"


def test_a_merge_key_in_a_path_reads_as_itself():
    error = refused(parse_yaml, "name: x\ncost: &c\n  <<: *c\n", "s.yaml", match="a cycle")
    assert error.field == "cost.<<"
    assert str(error) == ("s.yaml: cost.<<: an alias inside the value it names (a cycle) "
                          "(line 3) (got '*c')")


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
    doc = parse_yaml("a: .nan\nb: -.inf\nc: 1e400\nd: +.INF\n", "f")
    assert doc["a"] != doc["a"] and doc["b"] == float("-inf")
    assert doc["c"] == doc["d"] == float("inf")  # YAML 1.2 needs no dot: a number too large


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


def test_a_file_name_with_a_nul_is_refused_in_one_line():
    with pytest.raises(InputError) as info:
        read_text_file("plan\0.pbtxt")
    assert info.value.field == "file name" and "NUL" in info.value.reason
