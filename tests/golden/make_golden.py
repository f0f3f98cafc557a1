"""Rewrite tests/golden/predictions.csv from tests/golden/cases.csv.

    make golden

Run only when the physics changed on purpose; the commit that does so says why and what the
accuracy table did (before -> after). tests/test_golden.py fails when any prediction moves by
more than 0.5% from this file.
"""

from pathlib import Path

from gpucap.calibration.validate import read_cases, validate

HERE = Path(__file__).resolve().parent
COLUMNS = ["case_id", "output_tok_s_predicted", "ttft_ms_predicted", "tpot_ms_predicted", "error"]


def predictions():
    return validate(read_cases(HERE / "cases.csv"))[COLUMNS]


if __name__ == "__main__":
    out = HERE / "predictions.csv"
    predictions().to_csv(out, index=False, float_format="%.6g")
    print(f"wrote {out}")
