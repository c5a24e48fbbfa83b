"""Progress lines on stderr: rewritten in place on a terminal, at most one a second elsewhere."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Shows the latest state of a long computation."""

    def __init__(self, stream: TextIO | None = None, min_interval_s: float = 1.0):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.min_interval_s = min_interval_s
        self._last = -float("inf")
        self._width = 0

    def update(self, text: str, *, final: bool = False) -> None:
        """Show ``text``; a ``final`` line always appears and is never overwritten."""
        now = time.monotonic()
        if not final and now - self._last < self.min_interval_s:
            return
        self._last = now
        if self.tty:
            self.stream.write("\r" + text.ljust(self._width) + ("\n" if final else ""))
            self._width = 0 if final else len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


def eta(done: int, total: int, elapsed_s: float) -> str:
    """Time left at the rate so far, as ``1 min 05 s`` or ``12 s``; ``?`` before any progress."""
    if done <= 0 or elapsed_s <= 0:
        return "?"
    left = elapsed_s * (total - done) / done
    minutes, seconds = divmod(int(round(left)), 60)
    return f"{minutes} min {seconds:02d} s" if minutes else f"{seconds} s"
