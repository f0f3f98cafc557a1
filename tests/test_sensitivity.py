"""What-if rows around one estimate, and the measured band drawn across them."""

from dataclasses import replace

import gpucap
from gpucap.physics.coefficients import Coefficients
from gpucap.teaching.sensitivity import SEED1_MEASURED, band_figure, what_moves

BASE = dict(model="meta-llama/Llama-3.1-8B-Instruct", gpu="H100-SXM-80GB", num_gpus=1, input_len=2000, output_len=200)


def test_each_row_is_the_estimate_with_that_change() -> None:
    vllm = Coefficients.for_engine("vllm")
    table = what_moves(
        BASE, {"faster prefill": {"coefficients": replace(vllm, u_compute=0.8)}, "tight TPOT": {"tpot_slo_s": 0.02}}
    )
    assert list(table["change"]) == ["as given", "faster prefill", "tight TPOT"]
    assert table["recommended"][0] == gpucap.estimate(**BASE).recommended_concurrency
    tight = gpucap.estimate(**BASE, tpot_slo_s=0.02)
    assert table["recommended"][2] == tight.recommended_concurrency
    assert table["tpot_ms"][2] <= 20.0 or table["recommended"][2] == 0  # the SLO holds at the recommendation
    # a faster prefill never lowers what the box carries
    assert table["recommended"][1] >= table["recommended"][0]


def test_band_figure_shades_the_measurement() -> None:
    table = what_moves(BASE, {})
    fig = band_figure(table, SEED1_MEASURED, band_label="measured")
    ax = fig.axes[0]
    (band,) = [p for p in ax.patches if p.get_label() == "measured"]
    assert (band.get_x(), band.get_x() + band.get_width()) == (60.0, 70.0)  # seed 1, section 5.1: 60 to 70
    assert ax.get_xlim()[1] >= 70.0
