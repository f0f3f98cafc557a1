"""Benchmark loads and request lengths as vllm bench serve draws them (gpucap.queueing.loads,
gpucap.queueing.lengths): bad input is refused in one line naming the value."""

import numpy as np
import pytest

from gpucap.queueing.lengths import Lengths
from gpucap.queueing.loads import Load, open_loop_sends


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: Load("burst", 10), "unknown load mode 'burst'"),
        (lambda: Load.closed_loop(64, 16), "concurrency 64 is above num_prompts 16"),
        (lambda: Load("open-loop", 10, request_rate=0.0), "request rate > 0"),
        (lambda: Load("open-loop", 10, request_rate=2.0, arrivals="uniform"), "unknown arrivals 'uniform'"),
        (lambda: Load("all-at-once", 0), "num_prompts must be a whole number >= 1"),
        (lambda: Load.open_loop(2.0, 10, burstiness=-1.0), "burstiness must be a positive number"),
        (lambda: Lengths.range_ratio(256, 1.0), r"range ratio must be in \[0, 1\)"),
        (lambda: Lengths.range_ratio(256, -0.1), r"range ratio must be in \[0, 1\)"),
    ],
)
def test_bad_loads_are_refused(make, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        make()


def test_range_ratio_is_vllms_integer_range() -> None:
    """--random-input-len 256 --random-range-ratio 0.5: integers uniform on [128, 384]."""
    lengths = Lengths.range_ratio(256, 0.5)
    assert min(lengths.values) == 128 and max(lengths.values) == 384 and len(lengths.values) == 257
    assert lengths.mean == pytest.approx(256.0)
    assert Lengths.range_ratio(256, 0.0).is_fixed


def test_draws_keep_the_mean_and_the_spread() -> None:
    rng = np.random.default_rng(0)
    drawn = Lengths.exponential(200.0).draw(1000, rng)
    assert drawn.mean() == pytest.approx(200.0, rel=0.01)
    assert np.median(drawn) == pytest.approx(200.0 * np.log(2), rel=0.05)  # exponential: median = mean ln 2
    uniform = Lengths.uniform(1, 1024).draw(3000, rng)
    assert uniform.min() >= 1 and uniform.max() <= 1024 and uniform.mean() == pytest.approx(512.5, rel=0.01)


def test_open_loop_sends_end_at_n_over_rate() -> None:
    """vLLM rescales the drawn gaps so that the last of N requests is sent at N / rate."""
    rng = np.random.default_rng(1)
    poisson = open_loop_sends(Load.open_loop(4.0, 200), rng)
    assert poisson[-1] == pytest.approx(50.0) and np.all(np.diff(poisson) >= 0)
    constant = open_loop_sends(Load.open_loop(4.0, 8, burstiness=np.inf), rng)
    assert constant == pytest.approx(np.arange(1, 9) / 4.0)
