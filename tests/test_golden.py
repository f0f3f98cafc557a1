"""No prediction drifts by accident: tests/golden/predictions.csv holds the estimator's output for
48 cases (dense, MoE, MLA, sliding-window; TP/PP/EP/attention-DP; every load mode and engine).
A change of more than 0.5% fails here; `make golden` rewrites the file on purpose."""

import math

import pandas as pd
import pytest

from .golden.make_golden import HERE, predictions

TOLERANCE = 0.005


@pytest.fixture(scope="module")
def pair() -> tuple[pd.DataFrame, pd.DataFrame]:
    saved = pd.read_csv(HERE / "predictions.csv").set_index("case_id")
    now = predictions().set_index("case_id")
    return saved, now


def test_same_cases(pair) -> None:
    saved, now = pair
    assert list(saved.index) == list(now.index)


@pytest.mark.parametrize("metric", ["output_tok_s_predicted", "ttft_ms_predicted", "tpot_ms_predicted"])
def test_predictions_within_half_a_percent(pair, metric: str) -> None:
    saved, now = pair
    moved = []
    for case in saved.index:
        a, b = saved.loc[case, metric], now.loc[case, metric]
        if pd.isna(a) and pd.isna(b):
            continue
        if pd.isna(a) != pd.isna(b) or not math.isclose(float(a), float(b), rel_tol=TOLERANCE):
            moved.append(f"{case}: {a} -> {b}")
    assert not moved, f"{metric} moved (run `make golden` if intended): " + "; ".join(moved)


def test_errors_unchanged(pair) -> None:
    saved, now = pair
    assert saved["error"].isna().equals(now["error"].isna())
