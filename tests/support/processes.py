"""Looking at real processes from tests."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a child its parent has reaped no longer exists)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
