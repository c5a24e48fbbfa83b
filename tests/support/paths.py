"""Where the repository and its shipped examples are."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SPACES = REPO_ROOT / "spaces"
