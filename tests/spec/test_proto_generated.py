"""The committed protobuf module matches what protoc generates from xsweep.proto."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SPEC_DIR = Path(__file__).resolve().parents[2] / "xsweep" / "spec"


def test_generated_code_is_not_stale(tmp_path):
    pytest.importorskip("grpc_tools")
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I.", f"--python_out={tmp_path}",
         f"--pyi_out={tmp_path}", "xsweep.proto"],
        cwd=SPEC_DIR, check=True, capture_output=True,
    )
    for name in ("xsweep_pb2.py", "xsweep_pb2.pyi"):
        assert (tmp_path / name).read_bytes() == (SPEC_DIR / name).read_bytes(), (
            f"{name} is stale; regenerate it with the command in xsweep.proto")
