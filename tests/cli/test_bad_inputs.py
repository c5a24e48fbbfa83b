"""Bad inputs through the real CLI: exit 2 and one stderr line naming the file and the field."""

from __future__ import annotations

import pytest

from tests.support.bad_inputs import CASES


@pytest.mark.parametrize(("name", "content", "field"), CASES.values(), ids=list(CASES))
def test_bad_input_exits_2_with_one_line(tmp_path, run_xsweep, name, content, field):
    path = tmp_path / name
    path.write_text(content)
    result = run_xsweep("check", path)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{path}: ")
    assert field in lines[0]


def test_missing_file(tmp_path, run_xsweep):
    result = run_xsweep("check", tmp_path / "absent.pbtxt")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"{tmp_path / 'absent.pbtxt'}: No such file or directory"]


def test_missing_catalog_file(tmp_path, run_xsweep, spaces_dir):
    result = run_xsweep("check", spaces_dir / "appendix-b.pbtxt", "--catalog", tmp_path / "c.yaml")
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1
    assert "c.yaml" in result.stderr
