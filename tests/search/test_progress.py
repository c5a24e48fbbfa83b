"""Progress lines: a file gets whole lines at most once a second; a terminal gets one
line rewritten in place."""

from __future__ import annotations

import io

from xsweep.search.progress import Progress, eta


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_file_gets_lines_and_final_ones_always():
    out = io.StringIO()
    progress = Progress(out, min_interval_s=3600)
    progress.update("first")
    progress.update("dropped: too soon")
    progress.update("last", final=True)
    assert out.getvalue() == "first\nlast\n"


def test_a_terminal_line_is_rewritten_in_place():
    out = Terminal()
    progress = Progress(out, min_interval_s=0)
    progress.update("a longer line")
    progress.update("short")
    progress.update("done", final=True)
    assert out.getvalue() == "\ra longer line\rshort        \rdone \n"


def test_eta():
    assert eta(0, 10, 5.0) == "?"
    assert eta(5, 10, 5.0) == "5 s"
    assert eta(1, 100, 65.0) == "107 min 15 s"
