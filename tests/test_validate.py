"""gpucap validate on the published measurements: rows predicted, reader errors."""

import pandas as pd
import pytest

from gpucap.calibration.accuracy import error_summary
from gpucap.calibration.cases import row_front_end, row_overlap_host, row_sampler
from gpucap.calibration.validate import prepare_cases, read_cases, validate


def test_predicts_at_least_90_percent_of_published_rows(shared_cases) -> None:
    """Every row by the closed forms (the whole set by simulation takes a minute and a half:
    benchmarks/accuracy.py)."""
    result = validate(read_cases(shared_cases), method="closed-form")
    predicted = result["error"].isna().mean()
    assert predicted >= 0.9
    summary = error_summary(result)
    assert set(summary["metric"]) == {"output_tok_s", "ttft_ms", "tpot_ms", "itl_ms"}


def test_rows_are_simulated_as_their_benchmark_ran(shared_cases) -> None:
    """One published row of each source and load mode, simulated: every metric the row measured
    is predicted, and the simulated benchmark is the row's (prompts, concurrency, rate)."""
    cases = read_cases(shared_cases)
    sample = cases.groupby(["source_id", "load_mode"]).head(1)
    sample = sample[sample["isl"].notna()]
    prepared, errors = prepare_cases(sample)
    by_id = {c.case_id: c for c in prepared}
    for _, row in sample.iterrows():
        case = by_id.get(str(row["case_id"]))
        if case is None or case.bench is None:
            continue
        if row["load_mode"] == "saturation":
            assert case.bench.mode == "all-at-once" and case.bench.num_prompts == int(row["num_prompts"])
        elif row["load_mode"] == "poisson":
            assert case.bench.mode == "open-loop" and case.bench.request_rate == pytest.approx(row["request_rate"])
        elif row["load_mode"] == "fixed-concurrency":
            assert case.bench.mode == "closed-loop" and case.bench.concurrency == int(row["concurrency"])
    result = validate(sample)
    for metric in ("output_tok_s", "ttft_ms", "tpot_ms", "itl_ms"):
        measured = result[f"{metric}_measured"].notna() & result["error"].isna()
        assert result.loc[measured, f"{metric}_predicted"].gt(0).all(), metric


def test_front_end_and_host_overlap_come_from_the_row() -> None:
    """trtllm-bench runs (prepare_dataset lengths) have no HTTP server; vLLM before 0.14 ran its
    host work between steps, later versions beside them (async scheduling, default from v0.14.0:
    PR #27614)."""
    row = pd.Series({"length_dist": "fixed (prepare_dataset token-norm-dist stdev 0)", "engine": "trtllm"})
    assert row_front_end(row) == "offline"
    assert row_front_end(pd.Series({"length_dist": "ShareGPT (variable)", "engine": "vllm"})) == "http"
    assert row_overlap_host(pd.Series({"engine_version": "v0.11.0"}), "vllm") is False
    assert row_overlap_host(pd.Series({"engine_version": "0.16.1"}), "vllm") is True
    assert row_overlap_host(pd.Series({"engine_version": "v0.13.0"}), "vllm") is False
    assert row_overlap_host(pd.Series({"engine_version": "0.14.0"}), "vllm") is True
    assert row_overlap_host(pd.Series({"engine_version": "v0.11.0", "overlap_host": "true"}), "vllm") is True
    # vLLM's CPU platform turns async scheduling off whatever the version (vllm/platforms/cpu.py)
    assert row_overlap_host(pd.Series({"engine_version": "0.32.0"}), "vllm", on_cpu=True) is False
    assert (
        row_overlap_host(pd.Series({"engine_version": "0.32.0", "overlap_host": "true"}), "vllm", on_cpu=True) is True
    )


def test_sampler_follows_the_rows_vllm_version() -> None:
    """vLLM's sampler at its profiling run, by version (each read from that release's sources):
    FlashInfer's by default to 0.11.0, PyTorch's sort from 0.11.1 (FlashInfer opt-in), Triton's
    top-k/top-p from 0.17, the V2 runner's logits for dense models from 0.22 and for all from 0.29."""

    def at(version: str, moe: bool = False, **extra: str) -> str:
        return row_sampler(pd.Series({"engine_version": version, **extra}), "vllm", moe)

    assert [at("v0.10.2"), at("v0.11.0"), at("0.11.1"), at("0.14.1"), at("0.17.0"), at("0.21.0")] == [
        "in-place", "in-place", "sort", "sort", "in-place", "in-place",
    ]  # fmt: skip
    assert [at("0.22.0"), at("0.27.1", moe=True), at("0.29.0", moe=True), at("0.32.0")] == [
        "logits", "in-place", "logits", "logits",
    ]  # fmt: skip
    assert at("v0.11.0", sampler="sort") == "sort"  # a stated column wins
    assert row_sampler(pd.Series({}), "vllm", False) == "logits"  # no version: today's default
    assert row_sampler(pd.Series({"engine_version": "0.4.3"}), "sglang", False) == "logits"


def test_an_mxfp4_checkpoint_keeps_its_format_under_a_precision_label() -> None:
    """TensorRT-LLM's perf tables label a configuration "(FP8)" or "(FP4)"; gpt-oss's MoE weights
    stay MXFP4 whatever the label (its checkpoint is published so), a Llama's label is kept."""
    from gpucap.calibration.validate import case_hardware

    row = {"gpu": "H100-SXM-80GB", "num_gpus": 1, "tp": 1, "engine": "trtllm", "kv_cache_dtype": "auto"}
    hw, _, notes = case_hardware(pd.Series({**row, "model": "openai/gpt-oss-20b", "weight_dtype": "fp8"}))
    assert hw.weight_dtype == "mxfp4" and "precision label fp8" in notes[0]
    hw, _, notes = case_hardware(pd.Series({**row, "model": "meta-llama/Llama-3.1-8B", "weight_dtype": "fp8"}))
    assert hw.weight_dtype == "fp8" and notes == []


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
