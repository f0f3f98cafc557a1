"""Error-analysis tables: by model size (from the model specs), GPU, engine or source; defaults,
fitted, leave one model out, leave one source out; markdown, HTML and CSV."""

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
