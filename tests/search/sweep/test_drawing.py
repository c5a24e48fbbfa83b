"""The Pareto plot drawn in a process of its own, and here when that process fails."""

from __future__ import annotations

import numpy as np

from xsweep.search.sweep.drawing import Drawer, draw


def figure() -> dict:
    x = np.array([12.0, 14.0, 30.0, 120.0])
    return {"title": "gpt3 训练", "x_label": "iteration_time_s (s)",
            "y_label": "cost_per_million_tokens_usd (USD/1M tokens)", "x_log": True,
            "y_log": False, "pruned": (x[2:], x[2:] / 10), "exact": (x[:2], x[:2] / 10),
            "fronts": [{"x": x[:1], "y": x[:1] / 10, "colour": "#d1495b",
                        "label": "Pareto front (1 plan)", "points": [("7", 12.0, 1.2)]}]}


def test_the_drawing_process_draws_what_this_one_would():
    drawer = Drawer()
    process = drawer._process
    drawer.send(figure())
    png = drawer.png()
    assert process.returncode == 0  # drawn there, not here after a failure
    assert png.startswith(b"\x89PNG") and png == draw(figure())


def test_a_failed_drawing_process_is_drawn_here():
    drawer = Drawer()
    drawer._process.kill()
    drawer._process.wait()
    drawer.send(figure())  # its input is gone: nothing raised
    assert drawer.png() == draw(figure())


def test_close_stops_a_process_that_never_drew():
    drawer = Drawer()
    process = drawer._process
    drawer.close()
    assert process.poll() is not None
    drawer.close()  # twice is harmless


def test_a_copy_of_its_input_held_open_elsewhere_does_not_keep_it_waiting():
    """A worker process forked after the drawer started holds its input open: the figure
    comes with its length, so the drawing process never waits for the input's end."""
    import os

    drawer = Drawer()
    held = os.dup(drawer._process.stdin.fileno())  # as a forked process would hold it
    try:
        drawer.send(figure())
        assert drawer.png() == draw(figure())
    finally:
        os.close(held)


def test_the_drawing_process_runs_at_a_lower_priority():
    import os
    import time

    import pytest

    from xsweep.search.sweep.drawing import NICENESS

    if not hasattr(os, "getpriority"):
        pytest.skip("no process priorities on this platform")
    drawer = Drawer()
    pid, ours = drawer._process.pid, os.getpriority(os.PRIO_PROCESS, 0)
    try:
        deadline = time.monotonic() + 60
        while (os.getpriority(os.PRIO_PROCESS, pid) == ours
               and time.monotonic() < deadline):  # it lowers its own as it starts
            time.sleep(0.01)
        assert os.getpriority(os.PRIO_PROCESS, pid) == min(ours + NICENESS, 19)
    finally:
        drawer.close()
