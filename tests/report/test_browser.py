"""The report in a real headless Chromium: no console error, and the charts drawn.

The page is loaded over the DevTools protocol (``tests/support/chromium.py``); a page
given a deliberate ``console.error`` and a failing resource shows that the check sees
what it looks for. Without Chromium the tests skip and say why.
"""

from __future__ import annotations

import io
import json
import shutil

import numpy as np
import pytest

from tests.report.conftest import xsweep
from tests.support import chromium

pytestmark = pytest.mark.skipif(chromium.why_not() is not None,
                                reason=chromium.why_not() or "")

FIRST_SVG = "JSON.stringify(document.querySelector('#pareto svg').getBoundingClientRect())"
BARS_SVG = "JSON.stringify(document.querySelector('#time svg').getBoundingClientRect())"


@pytest.fixture(scope="module")
def page(two_models, tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser") / "sweep"
    shutil.copytree(two_models, folder)
    done = xsweep("report", folder)
    assert done.returncode == 0, done.stderr
    return folder / "report.html"


def pixels(png: bytes, box: dict) -> np.ndarray:
    """The RGB pixels of ``png`` inside ``box`` (a bounding rectangle of the page), [N, 3]."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    crop = image.crop((int(box["left"]), int(box["top"]), int(box["right"]), int(box["bottom"])))
    return np.asarray(crop, dtype=int).reshape(-1, 3)


def near(inside: np.ndarray, colour: tuple[int, int, int], within: int) -> int:
    """How many of the pixels are within ``within`` (summed over R, G, B) of ``colour``."""
    return int((np.abs(inside - np.array(colour)).sum(axis=1) < within).sum())


def test_the_page_loads_without_a_console_error_and_draws_its_charts(page, tmp_path):
    seen = chromium.visit(chromium.file_url(page), height=1800,
                          evaluate={"pareto": FIRST_SVG, "bars": BARS_SVG})
    assert seen.errors == []
    (tmp_path / "report.png").write_bytes(seen.screenshot)
    pareto = json.loads(seen.values["pareto"])
    assert pareto["width"] > 500 and pareto["height"] > 300
    inside = pixels(seen.screenshot, pareto)
    ink = int((inside.sum(axis=1) < 3 * 235).sum())
    assert ink > 0.02 * len(inside)  # grid, axes, points, text
    # both fronts are drawn, each in its colour (FRONT_COLOURS: #d1495b, #00798c)
    for colour in ((0xd1, 0x49, 0x5b), (0x00, 0x79, 0x8c)):
        assert near(inside, colour, 30) > 30, colour
    bars = pixels(seen.screenshot, json.loads(seen.values["bars"]))
    assert near(bars, (0x4e, 0x79, 0xa7), 20) > 1000  # the compute parts of the time bars


def test_the_check_sees_a_console_error_an_exception_and_a_missing_file(page, tmp_path):
    broken = tmp_path / "broken.html"
    broken.write_text(page.read_text(encoding="utf-8").replace(
        "</body>", "<script>console.error('deliberate error')</script>"
        "<script>undefinedFunction()</script><img src='absent.png'></body>"), encoding="utf-8")
    seen = chromium.visit(chromium.file_url(broken))
    assert any("console.error: deliberate error" in e for e in seen.errors)
    assert any("undefinedFunction" in e for e in seen.errors)
    assert any("absent.png" in e for e in seen.errors)
