"""``docs/formats.md`` states the limits and ranges the code enforces."""

from __future__ import annotations

import dataclasses

from tests.support.paths import REPO_ROOT
from xsweep.spec import ranges
from xsweep.spec.limits import MAX_INTEGER_DIGITS, MAX_NESTING_DEPTH, Limits

DOC = (REPO_ROOT / "docs" / "formats.md").read_text()
ROWS = [line for line in DOC.splitlines() if line.startswith("| ")]


def row_with(*parts: str) -> bool:
    return any(all(part in row for part in parts) for row in ROWS)


def test_every_range_is_documented():
    tables = {"plan": ranges.PLAN, "model": ranges.MODEL, "profile": ranges.PROFILE,
              "cost": ranges.COST,
              **{f"catalog {section}": fields for section, fields in ranges.CATALOG.items()
                 if section != "models"}}
    for name, table in tables.items():
        for field, bounds in table.items():
            assert row_with(f"{field}`", f"| {bounds.describe()}"), (name, field)


def test_every_limit_is_documented():
    for field in dataclasses.fields(Limits):
        assert row_with(f"{getattr(Limits(), field.name):,}", f"`{Limits.env_name(field.name)}`"), \
            field.name
    assert row_with(f"{MAX_NESTING_DEPTH} levels", "fixed")
    assert row_with(f"{MAX_INTEGER_DIGITS} characters", "fixed")
