"""gpucap validate on the published measurements: rows predicted, reader errors."""

import pandas as pd
import pytest

from gpucap.validate import error_summary, read_cases, validate


def test_predicts_at_least_90_percent_of_published_rows(shared_cases) -> None:
    result = validate(read_cases(shared_cases))
    predicted = result["error"].isna().mean()
    assert predicted >= 0.9
    summary = error_summary(result)
    assert set(summary["metric"]) == {"output_tok_s", "ttft_ms", "tpot_ms"}


def test_missing_required_column_is_named(tmp_path) -> None:
    path = tmp_path / "cases.csv"
    pd.DataFrame({"model": ["Qwen/Qwen3-8B"], "gpu": ["H100-SXM-80GB"]}).to_csv(path, index=False)
    with pytest.raises(ValueError, match=r"cases.csv lacks required columns: weight_dtype, kv_cache_dtype"):
        read_cases(path)


def test_unreadable_rows_get_an_error_not_an_exception(tmp_path) -> None:
    rows = pd.DataFrame(
        {
            "case_id": ["ok", "bad-gpu", "bad-len"],
            "model": ["Qwen/Qwen3-8B"] * 3,
            "weight_dtype": ["bf16"] * 3,
            "kv_cache_dtype": ["auto"] * 3,
            "gpu": ["H100-SXM-80GB", "H999", "H100-SXM-80GB"],
            "num_gpus": [1] * 3,
            "tp": [1] * 3,
            "pp": [1] * 3,
            "engine": ["vllm"] * 3,
            "isl": [1000, 1000, -1],
            "osl": [100] * 3,
            "load_mode": ["fixed-concurrency"] * 3,
            "concurrency": [8] * 3,
            "request_rate": [None] * 3,
        }
    )
    path = tmp_path / "cases.csv"
    rows.to_csv(path, index=False)
    result = validate(read_cases(path)).set_index("case_id")
    assert pd.isna(result.loc["ok", "error"]) and result.loc["ok", "output_tok_s_predicted"] > 0
    assert "unknown GPU 'H999'" in result.loc["bad-gpu", "error"]
    assert "not positive" in result.loc["bad-len", "error"]
