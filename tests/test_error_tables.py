"""Error-analysis tables: by model size (from the model specs), GPU, engine or source; defaults,
fitted, leave one model out, leave one source out; markdown, HTML and CSV."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from gpucap.calibration.analysis import error_tables, format_error_table, size_class, wide_error_table
from gpucap.calibration.validate import synthetic_cases
from gpucap.cli.main import main
from gpucap.physics.coefficients import Coefficients

TRUTH = Coefficients(u_compute=0.62, u_hbm=0.71, overlap=0.3, t_overhead_s=3e-3, t_seq_s=10e-6, t_request_s=0.01)
SETUPS = (("meta-llama/Llama-3.1-8B", "H100-SXM-80GB", 1), ("Qwen/Qwen3-32B", "H100-SXM-80GB", 2))


@pytest.fixture(scope="module")
def cases() -> pd.DataFrame:
    c = synthetic_cases(SETUPS, (1, 8, 64), ((1000, 200), (4000, 500)), TRUTH, noise=0.0)
    return c.assign(source_id=np.where(c["model"].str.contains("Qwen"), "lab-a", "lab-b"))


def test_size_classes_come_from_the_model_specs() -> None:
    # model cards: Llama-3.1-8B 8.0B dense; Qwen3-32B 32.8B dense; Qwen3-30B-A3B 3.3B activated of 30.5B
    assert size_class("meta-llama/Llama-3.1-8B") == "<10B"
    assert size_class("Qwen/Qwen3-32B") == "10-40B"
    assert size_class("Qwen/Qwen3-30B-A3B") == "MoE <10B active"


def test_fitted_with_the_true_coefficients_is_exact(cases) -> None:
    table = error_tables(cases, TRUTH, by=("size",), variants=("defaults", "fitted"))
    fitted = table[table["variant"] == "fitted"]
    # the runs were generated from TRUTH without noise: predicted / measured = 1 everywhere
    assert np.allclose(fitted["median_abs_err"], 0.0, atol=1e-9) and np.allclose(fitted["median_ratio"], 1.0)
    assert set(fitted["size"]) == {"<10B", "10-40B"} and (fitted["n"] == 6).all()
    assert set(table["metric"]) == {"output_tok_s", "ttft_ms", "tpot_ms"}
    assert (table.loc[table["variant"] == "defaults", "median_abs_err"] > 0.01).any()


def test_held_out_variants_predict_each_model_and_source(cases) -> None:
    table = error_tables(cases, by=("engine",), variants=("lomo", "loso"), free=("u_compute",))
    assert set(table["variant"]) == {"lomo", "loso"}
    # every row is predicted once in each variant: 12 runs, three metrics
    assert (table.groupby("variant")["n"].sum() == 36).all()


def test_formats(cases) -> None:
    table = error_tables(cases, TRUTH, by=("size", "gpu"), variants=("defaults", "fitted"))
    md = format_error_table(table, "markdown").splitlines()
    assert md[0].startswith("| size | gpu | variant |") and md[1].startswith("|---")
    assert len(md) == 2 + 4  # two sizes x one GPU x two variants
    assert md[2].split(" | ")[0] == "| <10B"  # sizes in order, not alphabetical
    assert "<table" in format_error_table(table, "html")
    assert format_error_table(table, "csv").splitlines()[0].startswith("size,gpu,variant,metric,n")
    assert list(wide_error_table(table).columns[:3]) == ["size", "gpu", "variant"]
    with pytest.raises(ValueError, match="format"):
        format_error_table(table, "latex")


def test_bad_requests(cases) -> None:
    with pytest.raises(ValueError, match="group rows by"):
        error_tables(cases, by=("colour",))
    with pytest.raises(ValueError, match="variants must be"):
        error_tables(cases, variants=("best",))
    with pytest.raises(ValueError, match="source_id"):
        error_tables(cases.drop(columns="source_id"), variants=("loso",))


def test_cli_errors(cases, tmp_path, capsys) -> None:
    path = tmp_path / "cases.csv"
    cases.to_csv(path, index=False)
    assert main(["errors", str(path), "--by", "size,engine", "--variants", "defaults", "--format", "markdown"]) == 0
    assert capsys.readouterr().out.startswith("| size | engine | variant |")
    assert main(["errors", str(path), "--by", "colour"]) == 2
    assert "group rows by" in capsys.readouterr().err


def test_within_testbed_variants_hold_out_each_sweep_and_model() -> None:
    # vLLM's defaults but u_compute 0.62 and u_hbm 0.71; both models on one lab's H100s: one testbed
    truth = dataclasses.replace(Coefficients.for_engine("vllm"), u_compute=0.62, u_hbm=0.71)
    one_lab = synthetic_cases(SETUPS, (1, 8, 64), ((1000, 200), (4000, 500)), truth, noise=0.0).assign(source_id="lab")
    table = error_tables(one_lab, by=("model",), variants=("losweep", "lomo-testbed"), free=("u_compute", "u_hbm"))
    # 12 runs without noise; each held-out fit starts from vLLM's defaults, so the other sweeps
    # (or the other model) determine u_compute and u_hbm exactly and every held-out run is
    # predicted as it was generated
    assert (table.groupby("variant")["n"].sum() == 36).all()
    assert table["median_abs_err"].max() < 0.01
    assert not any("nothing to hold out" in n for n in table.attrs["notes"])


def test_a_variant_with_one_group_per_testbed_is_skipped_with_a_note(cases) -> None:
    # lab-a holds only Qwen3-32B and lab-b only Llama-3.1-8B; every run is at fixed concurrency
    table = error_tables(cases, by=("engine",), variants=("defaults", "lomo-testbed", "lomode"), free=("u_compute",))
    assert set(table["variant"]) == {"defaults"}
    notes = "\n".join(table.attrs["notes"])
    assert "lomo-testbed: skipped, no testbed has two or more models" in notes
    assert "lomode: skipped, no testbed has two or more load modes" in notes
    assert "lab-a / H100-SXM-80GB / vllm" in notes


def test_cli_errors_prints_the_notes(cases, tmp_path, capsys) -> None:
    path = tmp_path / "cases.csv"
    cases.to_csv(path, index=False)
    assert main(["errors", str(path), "--variants", "defaults,lomode", "--free", "u_compute"]) == 0
    out = capsys.readouterr().out
    assert "Notes:" in out and "lomode: skipped" in out


def test_only_skipped_variants_give_an_empty_table_and_the_notes(cases) -> None:
    table = error_tables(cases, by=("size",), variants=("lomode",), free=("u_compute",))
    assert table.empty and list(table.columns[:3]) == ["size", "variant", "metric"]
    assert table.attrs["notes"][-1] == "lomode: skipped, no testbed has two or more load modes"
    assert format_error_table(table).startswith("No rows: every variant asked for was skipped")
