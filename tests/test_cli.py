"""The command line: `gpucap estimate | validate | gpus | models`, driven in-process through
``gpucap.cli.main.main`` and once through ``python -m gpucap``.

Expected numbers are derived by hand from the model's config.json (cited next to each) or from
the CLI's documented contract (exit 2 for bad input, 3 when the model does not fit, one line
on stderr, never a traceback).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpucap.catalog.gpus import GPU_FILE, load_gpus
from gpucap.catalog.lookup import MODEL_DIR, model_cards
from gpucap.cli.main import main

ROOT = Path(__file__).resolve().parent.parent

LLAMA70_ARGS = [
    "estimate", "--model", "meta-llama/Llama-3.3-70B-Instruct", "--gpu", "A100-SXM-80GB",
    "--num-gpus", "8", "--tp", "8", "--input-len", "3840", "--output-len", "256",
]  # fmt: skip
QWEN8_ARGS = ["--model", "Qwen/Qwen3-8B", "--gpu", "H100-SXM-80GB", "--input-len", "1000", "--output-len", "100"]


@pytest.fixture(autouse=True)
def _no_user_gpu_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU file in the caller's environment must not leak into these tests."""
    monkeypatch.delenv("GPUCAP_GPU_FILE", raising=False)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run ``gpucap ARGS`` in-process: (exit code, stdout, stderr). argparse errors exit via SystemExit."""
    try:
        rc = main(list(args))
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return rc, out, err


def assert_clean_error(rc: int, out: str, err: str, *needles: str, code: int | None = None) -> None:
    """Non-zero exit, exactly one line on stderr naming every needle, no traceback anywhere."""
    assert rc != 0
    if code is not None:
        assert rc == code
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for n in needles:
        assert n in lines[0], (n, lines[0])


# --- estimate ------------------------------------------------------------------------------


def test_estimate_json_llama70b_tp8(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = cli(capsys, *LLAMA70_ARGS, "--json")
    assert rc == 0, err
    d = json.loads(out)
    mem = d["memory"]
    for key in (
        "weights_bytes_per_gpu", "kv_bytes_per_token", "kv_bytes_per_token_per_gpu", "kv_budget_bytes_per_gpu",
    ):  # fmt: skip
        assert key in mem
    assert set(d["limits"]) >= {"memory", "compute", "hbm_bandwidth", "interconnect"}
    for key in ("recommended_concurrency", "bottleneck", "ttft_s", "tpot_s", "output_tokens_per_s"):
        assert key in d

    # config.json: 80 layers, 8 KV heads, head_dim 128; K and V; bf16 = 2 bytes.
    assert mem["kv_bytes_per_token"] == 80 * 8 * 128 * 2 * 2 == 327680
    # tp=8 over 8 KV heads: one KV head per GPU = 1/8 of the token's KV.
    assert mem["kv_bytes_per_token_per_gpu"] == 80 * 1 * 128 * 2 * 2 == 40960

    # Parameters from config.json (hidden 8192, 64 heads, 8 KV heads x 128, MLP 28672, 80 layers,
    # vocab 128256, untied embeddings): per layer q,o 2*8192*8192 + k,v 2*8192*1024 + MLP
    # 3*8192*28672 = 855.6M; x80 = 68.45B; + 2*128256*8192 = 2.10B -> 70.55B params (Meta
    # publishes 70.6B). bf16 over tp=8: 70.55e9 * 2 / 8 = 17.64e9 bytes per GPU (norms ~ 0).
    assert mem["weights_bytes_per_gpu"] == pytest.approx(70.55e9 * 2 / 8, rel=0.01)

    # vLLM's default gpu_memory_utilization (0.92 since v0.20) of the 79.15 GiB the CUDA runtime
    # reports on an A100 80GB; the KV budget is what is left after weights, so it is positive and
    # below 0.92 * 79.15 GiB - weights.
    usable = 0.92 * 79.15 * 2**30
    assert 0 < mem["kv_budget_bytes_per_gpu"] < usable - mem["weights_bytes_per_gpu"]
    # Each request holds 3840 + 256 = 4096 tokens (a whole number of 16-token blocks).
    assert d["limits"]["memory"] == (mem["kv_budget_bytes_per_gpu"] // (4096 * 40960))

    assert 1 <= d["recommended_concurrency"] <= d["limits"]["memory"]
    assert d["bottleneck"] in {"memory", "compute", "hbm_bandwidth", "interconnect", "max_num_seqs", "step_overhead"}
    assert d["ttft_s"] > 0 and d["tpot_s"] > 0 and d["output_tokens_per_s"] > 0


def test_estimate_text(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = cli(capsys, *LLAMA70_ARGS)
    assert rc == 0, err
    assert "recommended concurrency" in out
    assert "bottleneck" in out
    assert err == ""


def test_module_entry_point() -> None:
    """`python -m gpucap` runs the same CLI (and its exit codes) in a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("GPUCAP_GPU_FILE", None)
    ok = subprocess.run(
        [sys.executable, "-m", "gpucap", *LLAMA70_ARGS, "--json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["memory"]["kv_bytes_per_token"] == 327680
    bad = subprocess.run(
        [sys.executable, "-m", "gpucap", "estimate", "--model", "Qwen/Qwen3-8B", "--gpu", "H100",
         "--input-len", "10", "--output-len", "10"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2
    assert_clean_error(bad.returncode, bad.stdout, bad.stderr, "'H100'", "H100-SXM-80GB")


# --- estimate: bad input -------------------------------------------------------------------


def test_unknown_gpu_lists_close_matches(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = cli(
        capsys, "estimate", "--model", "Qwen/Qwen3-8B", "--gpu", "H100", "--input-len", "10", "--output-len", "10"
    )
    assert_clean_error(rc, out, err, "'H100'", "H100-SXM-80GB", code=2)


def test_unknown_model(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = cli(
        capsys,
        "estimate",
        "--model",
        "not-a-model",
        "--gpu",
        "H100-SXM-80GB",
        "--input-len",
        "10",
        "--output-len",
        "10",
    )
    assert_clean_error(rc, out, err, "not-a-model", code=2)


def test_tp_not_dividing_heads(capsys: pytest.CaptureFixture[str]) -> None:
    # Qwen3-8B config.json: 32 attention heads; 32 % 3 != 0.
    rc, out, err = cli(capsys, "estimate", *QWEN8_ARGS, "--tp", "3")
    assert_clean_error(rc, out, err, "tp=3", "32", code=2)


@pytest.mark.parametrize("value", ["0", "-5"])
def test_non_positive_input_len(capsys: pytest.CaptureFixture[str], value: str) -> None:
    rc, out, err = cli(
        capsys,
        "estimate",
        "--model",
        "Qwen/Qwen3-8B",
        "--gpu",
        "H100-SXM-80GB",
        f"--input-len={value}",
        "--output-len",
        "10",
    )
    assert rc == 2
    assert "Traceback" not in out + err
    last = err.strip().splitlines()[-1]
    assert "--input-len" in last and value in last


@pytest.mark.parametrize("value", ["0", "-5"])
def test_non_positive_input_len_is_one_line(capsys: pytest.CaptureFixture[str], value: str) -> None:
    rc, out, err = cli(
        capsys,
        "estimate",
        "--model",
        "Qwen/Qwen3-8B",
        "--gpu",
        "H100-SXM-80GB",
        f"--input-len={value}",
        "--output-len",
        "10",
    )
    assert_clean_error(rc, out, err, "--input-len", value, code=2)


def test_model_does_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    # 405B parameters x 2 bytes (bf16) = ~810 GB of weights against one 80 GB H100.
    rc, out, err = cli(
        capsys, "estimate", "--model", "meta-llama/Llama-3.1-405B", "--gpu", "H100-SXM-80GB",
        "--input-len", "1000", "--output-len", "100",
    )  # fmt: skip
    assert_clean_error(rc, out, err, "short by", "GiB", code=3)


def test_coefficients_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "nope.json"
    rc, out, err = cli(capsys, "estimate", *QWEN8_ARGS, "--coefficients", str(path))
    assert_clean_error(rc, out, err, str(path), code=2)


def test_coefficients_invalid_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"u_compute": 0.5,')
    rc, out, err = cli(capsys, "estimate", *QWEN8_ARGS, "--coefficients", str(path))
    assert_clean_error(rc, out, err, str(path), "JSON", code=2)


def test_coefficients_unknown_name(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "unknown.json"
    path.write_text(json.dumps({"coefficients": {"u_compute": 0.5, "u_warp_drive": 0.9}}))
    rc, out, err = cli(capsys, "estimate", *QWEN8_ARGS, "--coefficients", str(path))
    assert_clean_error(rc, out, err, "u_warp_drive", code=2)


def test_coefficients_valid_file_is_used(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "coef.json"
    path.write_text(json.dumps({"u_compute": 0.3, "u_hbm": {"value": 0.7}}))
    rc, out, err = cli(capsys, "estimate", *QWEN8_ARGS, "--coefficients", str(path), "--json")
    assert rc == 0, err
    coef = json.loads(out)["coefficients"]
    assert coef["u_compute"] == 0.3 and coef["u_hbm"] == 0.7


def test_num_gpus_not_multiple_of_replica(capsys: pytest.CaptureFixture[str]) -> None:
    # 6 GPUs cannot be cut into whole tp=4 replicas.
    rc, out, err = cli(capsys, "estimate", *QWEN8_ARGS, "--num-gpus", "6", "--tp", "4")
    assert_clean_error(rc, out, err, "num_gpus=6", "4", code=2)


# --- estimate: model as a config.json path -------------------------------------------------


@pytest.mark.parametrize("as_folder", [False, True])
def test_model_from_config_path(capsys: pytest.CaptureFixture[str], tmp_path: Path, as_folder: bool) -> None:
    folder = tmp_path / "my-private-model"
    folder.mkdir()
    config = folder / "config.json"
    shutil.copy(MODEL_DIR / "Qwen" / "Qwen3-8B" / "config.json", config)
    target = folder if as_folder else config
    rc, out, err = cli(
        capsys, "estimate", "--model", str(target), "--gpu", "H100-SXM-80GB",
        "--input-len", "1000", "--output-len", "100", "--json",
    )  # fmt: skip
    assert rc == 0, err
    # Qwen3-8B config.json: 36 layers x 8 KV heads x head_dim 128 x (K, V) x 2 bytes.
    assert json.loads(out)["memory"]["kv_bytes_per_token"] == 36 * 8 * 128 * 2 * 2 == 147456


# --- gpus / models -------------------------------------------------------------------------


def _catalog_gpu_keys() -> list[str]:
    """Keys read straight from data/gpus.csv (first column), independent of gpucap.catalog.gpus."""
    import csv

    with open(GPU_FILE, newline="") as f:
        return [row["key"] for row in csv.DictReader(f)]


def test_gpus_lists_every_catalog_entry(capsys: pytest.CaptureFixture[str]) -> None:
    keys = _catalog_gpu_keys()
    assert len(keys) >= 16
    rc, out, err = cli(capsys, "gpus")
    assert rc == 0, err
    first_words = {line.split()[0] for line in out.splitlines()[1:] if line.strip()}
    assert first_words == set(keys)

    rc, out, err = cli(capsys, "gpus", "--json")
    assert rc == 0, err
    rows = json.loads(out)
    assert [r["key"] for r in rows] == keys
    h100 = next(r for r in rows if r["key"] == "H100-SXM-80GB")
    # H100 SXM datasheet: 1,979 TFLOPS bf16 with sparsity -> 989.5 dense; 3.35 TB/s HBM3.
    assert h100["bf16_TFLOPs"] == pytest.approx(989.5)
    assert h100["hbm_TB_per_s"] == pytest.approx(3.35)


def test_models_lists_every_catalog_entry(capsys: pytest.CaptureFixture[str]) -> None:
    # One card.json per shipped model folder data/models/<org>/<repo>/.
    ids = {json.loads(p.read_text())["hf_id"] for p in MODEL_DIR.glob("*/*/card.json")}
    assert len(ids) >= 23
    assert ids == set(model_cards())
    rc, out, err = cli(capsys, "models")
    assert rc == 0, err
    listed = {line.split()[0] for line in out.splitlines()[1:] if line.strip()}
    assert listed == ids

    rc, out, err = cli(capsys, "models", "--json")
    assert rc == 0, err
    rows = json.loads(out)
    assert {r["id"] for r in rows} == ids
    assert len(rows) == len(ids)
    qwen = next(r for r in rows if r["id"] == "Qwen/Qwen3-8B")
    # Qwen3-8B config.json: 36 layers, 32 query heads, 8 KV heads.
    assert qwen["layers"] == 36 and qwen["attention"] == "GQA 32/8"


def test_gpus_with_user_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    header = GPU_FILE.read_text().splitlines()[0]
    cols = header.split(",")
    row = dict.fromkeys(cols, "")
    row.update({
        "key": "MY-ACCEL-100GB", "name": "My accelerator", "memory_GB": "100", "bf16_dense_TFLOPs": "500",
        "hbm_TB_per_s": "4", "link_kind": "nvswitch", "link_GB_per_s_per_direction": "400", "source": "my lab",
    })  # fmt: skip
    path = tmp_path / "cli_user_gpus.csv"
    path.write_text(header + "\n" + ",".join(row[c] for c in cols) + "\n")

    rc, out, err = cli(capsys, "gpus", "--gpu-file", str(path))
    assert rc == 0, err
    assert any(line.startswith("MY-ACCEL-100GB") for line in out.splitlines())

    rc, out, err = cli(capsys, "gpus", "--gpu-file", str(path), "--json")
    assert rc == 0, err
    rows = {r["key"]: r for r in json.loads(out)}
    assert set(rows) == set(_catalog_gpu_keys()) | {"MY-ACCEL-100GB"}
    mine = rows["MY-ACCEL-100GB"]
    # 100 GB (no nvidia-smi figure given) = 100e9 / 2**30 = 93.13 GiB.
    assert mine["memory_GiB"] == 93.1
    assert mine["bf16_TFLOPs"] == 500 and mine["link"] == "nvswitch" and mine["link_GB_per_s"] == 400
    # The user file is not part of the plain catalog.
    assert "MY-ACCEL-100GB" not in load_gpus()


# --- validate ------------------------------------------------------------------------------

CASE_COLUMNS = [
    "case_id", "model", "weight_dtype", "kv_cache_dtype", "gpu", "num_gpus", "tp", "pp", "engine",
    "isl", "osl", "load_mode", "concurrency", "request_rate", "my_extra_column", "output_tok_s",
]  # fmt: skip
CASE_ROWS = [
    ["a", "meta-llama/Llama-3.1-8B-Instruct", "bf16", "auto", "H100-SXM-80GB", "1", "1", "1", "vllm",
     "1000", "1000", "fixed-concurrency", "16", "", "ignored", "1500"],
    ["b", "Qwen/Qwen3-8B", "bf16", "auto", "NOPE-GPU-1GB", "1", "1", "1", "vllm",
     "1000", "1000", "fixed-concurrency", "16", "", "ignored", "1500"],
    ["c", "Qwen/Qwen3-8B", "bf16", "auto", "H100-SXM-80GB", "2", "1", "1", "sglang",
     "1000", "200", "poisson", "", "4", "ignored", ""],
]  # fmt: skip


def write_cases(path: Path, rows: list[list[str]], columns: list[str] = CASE_COLUMNS) -> Path:
    keep = [CASE_COLUMNS.index(c) for c in columns]
    lines = [",".join(columns)] + [",".join(r[i] for i in keep) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_validate_text(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cases = write_cases(tmp_path / "cases.csv", CASE_ROWS)
    rc, out, err = cli(capsys, "validate", str(cases))
    assert rc == 0, err
    assert "2 of 3 rows predicted" in out
    assert "not predicted: b" in out and "NOPE-GPU-1GB" in out
    assert "Traceback" not in out + err


def test_validate_with_corrections(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cases = write_cases(tmp_path / "cases.csv", CASE_ROWS)
    fixes = tmp_path / "fixes.csv"
    fixes.write_text(
        "case_id,column,value,stated,source,reason\nb,gpu,H100-SXM-80GB,NOPE-GPU-1GB,the run's log,a typo\n"
    )
    rc, out, err = cli(capsys, "validate", str(cases), "--corrections", str(fixes))
    assert rc == 0, err
    assert "3 of 3 rows predicted" in out
    stale = tmp_path / "stale.csv"
    stale.write_text("case_id,column,value,stated,source,reason\na,osl,900,2000,the run's log,a typo\n")
    rc, out, err = cli(capsys, "validate", str(cases), "--corrections", str(stale))
    assert rc != 0
    assert "stale.csv, row 2: a osl reads 1000, not the stated 2000" in err
    assert "Traceback" not in out + err


def test_validate_json_error_row(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cases = write_cases(tmp_path / "cases.csv", CASE_ROWS)
    rc, out, err = cli(capsys, "validate", str(cases), "--json")
    assert rc == 0, err
    rows = json.loads(out)
    assert [r["case_id"] for r in rows] == ["a", "b", "c"]
    assert "NOPE-GPU-1GB" in rows[1]["error"]


def test_validate_json_all_predicted(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cases = write_cases(tmp_path / "cases.csv", [CASE_ROWS[0], CASE_ROWS[2]])
    rc, out, err = cli(capsys, "validate", str(cases), "--json")
    assert rc == 0, err
    rows = json.loads(out)
    assert [r["case_id"] for r in rows] == ["a", "c"]
    for r in rows:
        assert "error" not in r
        assert set(r) == {"case_id", "output_tok_s", "ttft_ms", "tpot_ms"}
        assert r["output_tok_s"] > 0 and r["ttft_ms"] > 0 and r["tpot_ms"] > 0


def _strict_json(text: str) -> object:
    def reject(name: str) -> object:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=reject)


def test_validate_json_mixed_rows(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cases = write_cases(tmp_path / "cases.csv", CASE_ROWS)
    rc, out, err = cli(capsys, "validate", str(cases), "--json")
    assert rc == 0, err
    rows = _strict_json(out)
    assert isinstance(rows, list)
    for r in (rows[0], rows[2]):
        assert "error" not in r
        assert r["output_tok_s"] > 0


def test_validate_missing_gpu_column(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cases = write_cases(tmp_path / "nogpu.csv", CASE_ROWS, [c for c in CASE_COLUMNS if c != "gpu"])
    rc, out, err = cli(capsys, "validate", str(cases))
    assert_clean_error(rc, out, err, str(cases), code=2)
    assert err.strip().endswith("gpu")


def test_validate_out_writes_new_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cases = write_cases(tmp_path / "cases.csv", CASE_ROWS)
    out_path = tmp_path / "result.csv"
    rc, out, err = cli(capsys, "validate", str(cases), "--out", str(out_path))
    assert rc == 0, err
    lines = out_path.read_text().splitlines()
    assert len(lines) == 1 + 3  # header + one line per case
    assert lines[0].startswith("case_id,")


def test_validate_out_refuses_to_overwrite(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cases = write_cases(tmp_path / "cases.csv", CASE_ROWS)
    out_path = tmp_path / "precious.csv"
    out_path.write_text("do not touch\n")
    rc, out, err = cli(capsys, "validate", str(cases), "--out", str(out_path))
    assert_clean_error(rc, out, err, str(out_path), code=2)
    assert out_path.read_text() == "do not touch\n"


def test_estimate_with_images_and_speculation(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["estimate", "--gpu", "H100-SXM-80GB", "--input-len", "500", "--output-len", "200", "--json"]
    assert main([*base, "--model", "Qwen/Qwen2.5-VL-7B-Instruct"]) == 0
    text_only = json.loads(capsys.readouterr().out)
    args = [*base, "--model", "Qwen/Qwen2.5-VL-7B-Instruct", "--images-per-request", "2", "--image-size-px", "1344"]
    assert main(args) == 0
    with_images = json.loads(capsys.readouterr().out)
    # two 1344 px images: (1344 / 14)^2 / 4 = 2304 tokens each after the 2 x 2 merge -> 4608 more prompt
    # tokens per request, so the KV cache holds fewer requests and each first token comes later
    assert with_images["limits"]["memory"] < text_only["limits"]["memory"]
    # speculation at alpha = 0.7 with k = 3: tau = (1 - 0.7^4) / (1 - 0.7) = 2.533 tokens per step
    spec = ["--model", "meta-llama/Llama-3.1-8B", "--concurrency", "1"]
    assert main([*base, *spec]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*base, *spec, "--speculative-draft-tokens", "3", "--speculative-acceptance-rate", "0.7"]) == 0
    fast = json.loads(capsys.readouterr().out)
    assert fast["tpot_s"] < plain["tpot_s"] / 1.5
    assert fast["speculative"]["acceptance_length"] == pytest.approx((1 - 0.7**4) / (1 - 0.7))
    assert with_images["images"]["tokens_per_request"] == 4608
    assert main([*base, *spec, "--speculative-acceptance-rate", "0.7"]) == 2
    assert "--speculative-draft-tokens" in capsys.readouterr().err
