"""Reports and figures: each figure draws what it says for the plan it is given (the demo's report and verify's
are written end to end in tests/test_demo.py and tests/cli/test_convert_cmd.py)."""

import pytest

from ropebridge import reports
from ropebridge.checkpoint.config import from_heads
from ropebridge.emulation import PlanRequest, plan


@pytest.fixture(scope="module")
def plans():
    source = from_heads(4, 64)
    return {"single": plan(source, PlanRequest(window=1024, dtype="float32")),
            "ladder": plan(source, PlanRequest(window=512, dtype="bfloat16", rotary_dim=16))}


def _lines(ax):
    return [line.get_label() for line in ax.get_lines()]


def test_the_emulation_figure_draws_alibi_against_the_emulated_bias_per_head(plans):
    fig = reports.emulation_figure(plans["single"], heads=[0, 3])
    left, right = fig.axes
    assert len(left.get_lines()) == 4  # ALiBi and the emulation for each of two heads
    assert right.get_yscale() == "log" and len(right.get_lines()) >= 2


def test_the_ladder_figure_draws_each_head(plans):
    fig = reports.ladder_figure(plans["ladder"], heads=[1])
    assert len(fig.axes) == 2 and all(ax.get_lines() for ax in fig.axes)


def test_the_wavelength_figure_marks_the_context():
    from ropebridge.analysis import analyse

    fig = reports.wavelength_figure(analyse(64, {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}, 4096))
    (ax,) = fig.axes
    assert {"default", "linear", "context 4096"} <= set(_lines(ax)) and ax.get_yscale() == "log"


def test_the_demo_figures(plans, tmp_path):
    assert len(reports.heads_figure(plans["single"]).axes) >= 1
    fig = reports.perplexity_figure({"context": [256, 1024], "native": [20.0, 19.0], "converted": [20.0, 19.1]}, 256)
    assert {"native ALiBi", "training context 256"} <= set(_lines(fig.axes[0]))
