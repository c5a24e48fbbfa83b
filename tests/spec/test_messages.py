"""Messages about bad input: one line, the value quoted as written, nothing invisible."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from matplotlib.font_manager import FontProperties

from tests.support.hostile_inputs import SWEEP
from xsweep.errors import InputError
from xsweep.search.sweep.drawing import drawable
from xsweep.search.sweep.plot import pareto_png
from xsweep.search.sweep.results import Answer
from xsweep.spec.reader import parse_yaml, read_text_file
from xsweep.spec.sweep import sweep_from_dict


def test_a_value_keeps_its_spaces_and_shows_invisible_characters():
    error = InputError("f.yaml", "training.schedule", "GPIPE  \u200b", "unknown value")
    assert str(error) == r"f.yaml: training.schedule: unknown value (got 'GPIPE  \u200b')"


def test_file_field_and_reason_are_one_line_with_invisible_characters_escaped():
    error = InputError("a\nb.yaml", "\ufeffname", None, "found '\ufeff'\n that cannot\tstart")
    assert str(error) == r"a b.yaml: \ufeffname: found '\ufeff' that cannot start"


def test_a_byte_order_mark_in_a_yaml_key_is_shown_escaped(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes(b"\xef\xbb\xbf" * 2 + SWEEP.replace("\nmodel", "\nmodel: x\nmodel\ufeff")
                     .encode())
    text = read_text_file(path)
    assert text.startswith("\ufeff")  # the first mark is dropped, the second one is text
    with pytest.raises(InputError) as info:
        sweep_from_dict(parse_yaml(text, str(path)), str(path))
    assert info.value.field == "model\ufeff"
    assert str(info.value) == (f"{path}: model\\ufeff: unknown key; did you mean 'model'? "
                               "(known: name, model, training, cluster, parallelism, cost, "
                               "objectives, fronts, constraints, search, validate)")


def test_a_title_in_any_script_draws_without_warnings():
    """A sweep name in CJK or emoji must not print matplotlib's glyph warnings on stderr,
    and a ``$`` in it must not be read as mathtext."""
    table = {"iteration_time_s": np.array([1.0, 2.0, 3.0]),
             "cost_per_run_usd": np.array([3.0, 2.0, 1.0]),
             "cost_per_million_tokens_usd": np.array([3.0, 2.0, 1.0]),
             "level": np.array(["exact"] * 3), "feasible": np.array([True] * 3),
             "status": np.array(["ok", "ok", "pruned"])}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        png = pareto_png(table, None, ["iteration_time_s"],
                         [Answer(group=0, work={}, front=np.array([0, 1]), top={}, same={})],
                         "训练 🚀 $\\notasymbol$: 2 on the front")
    assert png.startswith(b"\x89PNG")
    assert [str(w.message) for w in caught] == []


def test_characters_without_a_glyph_are_drawn_as_escapes():
    font = FontProperties()
    assert drawable("llama sweep: café", font) == "llama sweep: café"
    assert drawable("训练 🚀\u200b", font) == r"\u8bad\u7ec3 \U0001f680\u200b"
