"""The model catalog (names -> shipped config.json) and the GPU catalog (data/gpus.csv plus
user GPU files).

Expected GPU numbers are the vendors' datasheet figures, cited next to each assertion.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from gpucap.catalog.gpus import GPU_FILE, get_gpu, load_gpus, read_gpu_file
from gpucap.catalog.lookup import model_cards, resolve_model_id

ROOT = Path(__file__).resolve().parent.parent
MEASURED = ROOT.parent / "shared" / "data" / "measured-public.csv"


@pytest.fixture(autouse=True)
def _no_user_gpu_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUCAP_GPU_FILE", raising=False)


# --- model catalog -------------------------------------------------------------------------

# name -> the catalog id it must resolve to (short names resolve to the shipped Hugging Face repo).
CATALOG_NAMES = {
    "meta-llama/Llama-2-7b-hf": "meta-llama/Llama-2-7b-hf",
    "meta-llama/Llama-2-70b-hf": "meta-llama/Llama-2-70b-hf",
    "meta-llama/Llama-3.1-8B": "meta-llama/Llama-3.1-8B",
    "meta-llama/Llama-3.3-70B-Instruct": "meta-llama/Llama-3.3-70B-Instruct",
    "meta-llama/Llama-3.1-405B": "meta-llama/Llama-3.1-405B",
    "Llama-4-Scout-17B-16E": "meta-llama/Llama-4-Scout-17B-16E-Instruct",
    "Llama-4-Maverick-17B-128E": "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
    "Qwen3-8B": "Qwen/Qwen3-8B",
    "Qwen3-14B": "Qwen/Qwen3-14B",
    "Qwen3-32B": "Qwen/Qwen3-32B",
    "Qwen3-30B-A3B": "Qwen/Qwen3-30B-A3B",
    "Qwen3-235B-A22B": "Qwen/Qwen3-235B-A22B",
    "Qwen2.5-72B": "Qwen/Qwen2.5-72B",
    "DeepSeek-V3": "deepseek-ai/DeepSeek-V3",
    # R1-0528 is a fine-tune of the V3 architecture (same config.json shape).
    "DeepSeek-R1-0528": "deepseek-ai/DeepSeek-V3",
    "DeepSeek-V3.2": "deepseek-ai/DeepSeek-V3.2",
    "gpt-oss-20b": "openai/gpt-oss-20b",
    "gpt-oss-120b": "openai/gpt-oss-120b",
    "Mistral-7B-v0.3": "mistralai/Mistral-7B-v0.3",
    "Mixtral-8x7B": "mistralai/Mixtral-8x7B-v0.1",
    "gemma-3-27b": "google/gemma-3-27b-it",
    "GLM-4.5-Air": "zai-org/GLM-4.5-Air",
    "GLM-4.6": "zai-org/GLM-4.6",
    "falcon-180B": "tiiuae/falcon-180B",
}
UNRESOLVED = {
    "Mixtral-8x7B": "the catalog id is mistralai/Mixtral-8x7B-v0.1 and neither an alias nor "
    "catalog._VARIANT covers the '-v0.1' version suffix",
    "gemma-3-27b": "the catalog id is google/gemma-3-27b-it; resolve_model_id strips variant "
    "suffixes from the query only, never from catalog ids, so the base name is not indexed",
}


@pytest.mark.parametrize(
    ("name", "expected"),
    [pytest.param(n, e) if n in UNRESOLVED else pytest.param(n, e) for n, e in CATALOG_NAMES.items()],
)
def test_catalog_names_resolve(name: str, expected: str) -> None:
    assert resolve_model_id(name) == expected
    assert expected in model_cards()


@pytest.mark.parametrize(
    ("variant", "base"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B"),
        ("Qwen/Qwen3-235B-A22B-FP8", "Qwen/Qwen3-235B-A22B"),
        ("meta-llama/Llama-2-70b-chat-hf", "meta-llama/Llama-2-70b-hf"),
        ("qwen/qwen3-8b", "Qwen/Qwen3-8B"),  # case-insensitive
        ("  Qwen3-8B  ", "Qwen/Qwen3-8B"),  # surrounding blanks
    ],
)
def test_variants_resolve_to_base(variant: str, base: str) -> None:
    assert resolve_model_id(variant) == base


@pytest.mark.parametrize(
    ("variant", "base"),
    [
        ("nvidia/Llama-3.3-70B-Instruct-FP8", "meta-llama/Llama-3.3-70B-Instruct"),
        ("google/gemma-3-27b-it-fp8", "google/gemma-3-27b-it"),
    ],
)
def test_quantized_variant_of_instruct_id_resolves(variant: str, base: str) -> None:
    assert resolve_model_id(variant) == base


def _measured_models() -> list[str]:
    if not MEASURED.exists():
        return []
    with open(MEASURED, newline="") as f:
        return sorted({row["model"] for row in csv.DictReader(f) if row.get("model")})


@pytest.mark.skipif(not MEASURED.exists(), reason=f"{MEASURED} not present")
def test_every_measured_model_resolves() -> None:
    models = _measured_models()
    assert models
    unresolved = []
    for m in models:
        try:
            assert resolve_model_id(m) in model_cards()
        except ValueError as exc:
            unresolved.append(f"{m}: {exc}")
    assert not unresolved, "\n".join(unresolved)


def test_unknown_model_lists_close_matches() -> None:
    with pytest.raises(ValueError, match="did you mean") as info:
        resolve_model_id("Qwen3-9B")
    msg = str(info.value)
    assert "'Qwen3-9B'" in msg
    assert "Qwen/Qwen3-8B" in msg


def test_unknown_model_without_close_match_still_names_it() -> None:
    with pytest.raises(ValueError, match="unknown model 'zzzz-qqqq'"):
        resolve_model_id("zzzz-qqqq")


# --- GPU catalog ---------------------------------------------------------------------------

GPU_KEYS = [
    "A100-SXM-40GB", "A100-SXM-80GB", "A100-PCIE-80GB", "H100-SXM-80GB", "H100-PCIE-80GB",
    "H200-SXM-141GB", "H20-96GB", "L4-24GB", "L40S-48GB", "A10G-24GB", "RTX-4090-24GB",
    "RTX-PRO-6000-96GB", "B200-180GB", "GB200-192GB", "MI300X-192GB", "MI325X-256GB",
    "MI355X-288GB", "MI350X-288GB",
]  # fmt: skip


def test_catalog_has_every_gpu_with_a_source() -> None:
    gpus = load_gpus()
    missing = [k for k in GPU_KEYS if k not in gpus]
    assert not missing
    for key, g in gpus.items():
        assert g.key == key
        assert g.source.strip(), f"{key} has no source"
        assert g.memory_bytes > 0 and g.flops_per_s["bf16"] > 0 and g.hbm_bytes_per_s > 0


def test_h100_sxm_datasheet() -> None:
    g = load_gpus()["H100-SXM-80GB"]
    # H100 SXM datasheet: BF16 1,979 TFLOPS "with sparsity" -> 989.5e12 dense.
    assert g.flops_per_s["bf16"] == pytest.approx(1979e12 / 2)
    # FP8 3,958 TFLOPS with sparsity -> 1,979e12 dense.
    assert g.flops_per_s["fp8"] == pytest.approx(1979e12)
    # HBM3 3.35 TB/s.
    assert g.hbm_bytes_per_s == pytest.approx(3.35e12)
    # NVLink 4: 900 GB/s total = 450 GB/s per direction, through NVSwitch on HGX H100.
    assert g.link_bytes_per_s == pytest.approx(900e9 / 2)
    assert g.link_kind == "nvswitch"


def test_h100_pcie_links_over_pcie() -> None:
    assert load_gpus()["H100-PCIE-80GB"].link_kind == "pcie"


def test_a100_sxm_80gb_datasheet() -> None:
    g = load_gpus()["A100-SXM-80GB"]
    # A100 datasheet: BF16 312 TFLOPS dense (624 with sparsity); HBM2e 2,039 GB/s.
    assert g.flops_per_s["bf16"] == pytest.approx(312e12)
    assert g.hbm_bytes_per_s == pytest.approx(2.039e12)
    # nvidia-smi reports 81920 MiB = 80 GiB, but the CUDA runtime gives PyTorch 79.15 GiB ("GPU 0 has
    # a total capacity of 79.15 GiB", vllm-project/vllm#4408): that is what vLLM's utilization
    # multiplies, so that is the GPU's memory.
    assert g.memory_bytes == pytest.approx(79.15 * 2**30)
    # NVLink 3: 600 GB/s total = 300 per direction.
    assert g.link_bytes_per_s == pytest.approx(300e9)


def test_memory_falls_back_to_nvidia_smi_then_datasheet(tmp_path) -> None:
    # H20: no log gives the CUDA runtime's total, so nvidia-smi's 97871 MiB = 95.58 GiB is used.
    assert load_gpus()["H20-96GB"].memory_bytes == pytest.approx(95.58 * 2**30)
    head = "key,memory_GB,memory_GiB_reported,memory_GiB_cuda,bf16_dense_TFLOPs,hbm_TB_per_s,link_kind,link_GB_per_s_per_direction"
    f = tmp_path / "gpus.csv"
    f.write_text(head + "\nX-A,80,80.0,79.0,100,1,pcie,32\nX-B,80,80.0,,100,1,pcie,32\nX-C,80,,,100,1,pcie,32\n")
    gpus = load_gpus(extra=f)
    assert gpus["X-A"].memory_bytes == 79 * 2**30
    assert gpus["X-B"].memory_bytes == 80 * 2**30
    assert gpus["X-C"].memory_bytes == 80e9


def test_peak_flops_fallback() -> None:
    gpus = load_gpus()
    # Hopper has no FP4 tensor cores: FP4 matmuls run at the FP8 rate (1,979 TFLOPS dense).
    assert gpus["H100-SXM-80GB"].peak_flops_per_s("fp4") == pytest.approx(1979e12)
    # Ampere has neither FP8 nor FP4: both fall back to BF16 (312 TFLOPS dense).
    assert gpus["A100-SXM-80GB"].peak_flops_per_s("fp8") == pytest.approx(312e12)
    assert gpus["A100-SXM-80GB"].peak_flops_per_s("fp4") == pytest.approx(312e12)
    # B200 has FP4: 18 PFLOPS with sparsity -> 9e15 dense.
    assert gpus["B200-180GB"].peak_flops_per_s("fp4") == pytest.approx(9e15)


def test_cdna4_rates_and_mxfp4_on_amd() -> None:
    gpus = load_gpus()
    g = gpus["MI355X-288GB"]
    # 256 CUs at 2.4 GHz x 4,096 / 8,192 / 16,384 FLOP per clock per CU (AMD prints 2.5 / 5.0 / 10 PF dense)
    assert g.flops_per_s["bf16"] == pytest.approx(256 * 2.4e9 * 4096, rel=1e-4)
    assert g.flops_per_s["fp8"] == pytest.approx(256 * 2.4e9 * 8192, rel=1e-4)
    assert g.peak_flops_per_s("fp4") == pytest.approx(256 * 2.4e9 * 16384, rel=1e-4)
    # vLLM on ROCm runs MXFP4 checkpoints (gpt-oss) as W4A16: the bf16 rate, fp4 cores or not
    assert g.peak_flops_per_s("mxfp4") == g.flops_per_s["bf16"]
    assert gpus["MI300X-192GB"].peak_flops_per_s("mxfp4") == pytest.approx(1307.4e12)
    # and so does vLLM on NVIDIA Blackwell (FlashInfer's MXFP4 x BF16 backend first): 2.25 PF dense
    assert gpus["B200-180GB"].peak_flops_per_s("mxfp4") == pytest.approx(2.25e15)
    # 7 Infinity Fabric links of 153.6 GB/s both ways: 76.8 per direction per peer, 537.6 at TP=8
    assert g.link_bytes_per_s == pytest.approx(7 * 153.6e9 / 2)


def test_fp8_e5m2_kv_is_refused_on_amd() -> None:
    from gpucap.config import hardware

    # vLLM's ROCm KV kernels take fp8 = fp8_e4m3 only (csrc/quantization/fp8/amd/quant_utils.cuh)
    with pytest.raises(ValueError, match="fp8_e5m2.*ROCm.*fp8"):
        hardware("meta-llama/Llama-3.1-8B", "MI300X-192GB", kv_dtype="fp8_e5m2")
    assert hardware("meta-llama/Llama-3.1-8B", "MI300X-192GB", kv_dtype="fp8").kv_dtype == "fp8"


def test_get_gpu_is_case_insensitive_and_lists_close_matches() -> None:
    assert get_gpu("h100-sxm-80gb").key == "H100-SXM-80GB"
    with pytest.raises(ValueError, match="H100-SXM-80GB"):
        get_gpu("H100")


# --- user GPU files ------------------------------------------------------------------------

HEADER = GPU_FILE.read_text().splitlines()[0].split(",")


def gpu_row(**values: str) -> dict[str, str]:
    row = dict.fromkeys(HEADER, "")
    row.update({
        "key": "MY-GPU-64GB", "memory_GB": "64", "bf16_dense_TFLOPs": "400", "hbm_TB_per_s": "2.5",
        "link_kind": "pcie", "link_GB_per_s_per_direction": "32", "source": "my datasheet",
    })  # fmt: skip
    row.update(values)
    return row


def write_gpu_file(path: Path, rows: list[dict[str, str]], columns: list[str] = HEADER) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


def test_user_file_adds_a_gpu(tmp_path: Path) -> None:
    path = write_gpu_file(tmp_path / "add_gpu.csv", [gpu_row()])
    gpus = load_gpus(path)
    g = gpus["MY-GPU-64GB"]
    assert g.memory_bytes == pytest.approx(64e9)  # GB column: 1e9 bytes
    assert g.flops_per_s["bf16"] == pytest.approx(400e12)
    assert g.hbm_bytes_per_s == pytest.approx(2.5e12)
    assert g.link_bytes_per_s == pytest.approx(32e9)
    assert g.source == "my datasheet"
    # The catalog is still all there, and the plain catalog is unchanged.
    assert set(GPU_KEYS) <= set(gpus)
    assert "MY-GPU-64GB" not in load_gpus()
    assert get_gpu("MY-GPU-64GB", path) == g


def test_user_file_overrides_a_catalog_gpu(tmp_path: Path) -> None:
    path = write_gpu_file(
        tmp_path / "override_gpu.csv", [gpu_row(key="H100-SXM-80GB", hbm_TB_per_s="4.0", link_kind="nvswitch")]
    )
    assert load_gpus(path)["H100-SXM-80GB"].hbm_bytes_per_s == pytest.approx(4.0e12)
    assert load_gpus()["H100-SXM-80GB"].hbm_bytes_per_s == pytest.approx(3.35e12)


def test_user_file_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_gpu_file(tmp_path / "env_gpu.csv", [gpu_row(key="ENV-GPU-1")])
    monkeypatch.setenv("GPUCAP_GPU_FILE", str(path))
    assert "ENV-GPU-1" in load_gpus()


def test_added_file_serves_every_later_lookup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpucap.catalog import gpus as gpus_module

    monkeypatch.setattr(gpus_module, "_ADDED_FILES", [])
    path = write_gpu_file(tmp_path / "added.csv", [gpu_row(key="ADDED-GPU")])
    assert "ADDED-GPU" not in load_gpus()
    assert gpus_module.add_gpu_file(path) == ["ADDED-GPU"]
    assert get_gpu("ADDED-GPU").hbm_bytes_per_s == pytest.approx(2.5e12)  # no file named at the lookup
    gpus_module.add_gpu_file(path)  # twice: still one entry
    assert gpus_module._ADDED_FILES == [str(path.resolve())]
    broken = write_gpu_file(tmp_path / "broken.csv", [gpu_row(key="BAD", memory_GB="-1")])
    with pytest.raises(ValueError, match="broken.csv"):
        gpus_module.add_gpu_file(broken)  # read at once: a bad file fails where it is added
    assert gpus_module._ADDED_FILES == [str(path.resolve())]


def test_user_file_missing_required_column(tmp_path: Path) -> None:
    cols = [c for c in HEADER if c != "hbm_TB_per_s"]
    path = write_gpu_file(tmp_path / "no_hbm_column.csv", [gpu_row()], cols)
    with pytest.raises(ValueError) as info:
        load_gpus(path)
    assert str(path) in str(info.value) and "hbm_TB_per_s" in str(info.value)


@pytest.mark.parametrize(
    ("name", "bad", "needles"),
    [
        ("non_numeric", {"bf16_dense_TFLOPs": "lots"}, ["bf16_dense_TFLOPs", "'lots'"]),
        ("negative", {"memory_GB": "-64"}, ["memory_GB", "negative"]),
        ("link_kind", {"link_kind": "infiniband"}, ["link_kind", "'infiniband'"]),
        ("empty_key", {"key": "  "}, ["empty key"]),
        ("empty_required", {"hbm_TB_per_s": ""}, ["hbm_TB_per_s"]),
    ],
)
def test_user_file_row_errors_name_file_and_line(
    tmp_path: Path, name: str, bad: dict[str, str], needles: list[str]
) -> None:
    # Line 1 is the header, line 2 a good GPU, line 3 the bad one.
    path = write_gpu_file(tmp_path / f"bad_{name}.csv", [gpu_row(key="GOOD-GPU"), gpu_row(**bad)])
    with pytest.raises(ValueError) as info:
        load_gpus(path)
    msg = str(info.value)
    assert str(path) in msg
    assert "line 3" in msg
    for n in needles:
        assert n in msg


def test_user_file_missing(tmp_path: Path) -> None:
    path = tmp_path / "does_not_exist.csv"
    with pytest.raises(ValueError, match="does not exist") as info:
        load_gpus(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_user_file_rejects_nan_and_inf(tmp_path: Path, value: str) -> None:
    path = write_gpu_file(tmp_path / f"gpu_{value}.csv", [gpu_row(bf16_dense_TFLOPs=value)])
    with pytest.raises(ValueError, match="bf16_dense_TFLOPs"):
        load_gpus(path)


@pytest.mark.parametrize("column", ["memory_GB", "bf16_dense_TFLOPs", "hbm_TB_per_s"])
def test_user_file_rejects_zero_for_required_rates(tmp_path: Path, column: str) -> None:
    path = write_gpu_file(tmp_path / f"gpu_zero_{column}.csv", [gpu_row(**{column: "0"})])
    with pytest.raises(ValueError, match=column):
        load_gpus(path)


def test_user_file_line_numbers_count_blank_lines(tmp_path: Path) -> None:
    good = gpu_row(key="GOOD-GPU")
    bad = gpu_row(bf16_dense_TFLOPs="lots")
    path = tmp_path / "blank_line.csv"
    path.write_text(
        ",".join(HEADER) + "\n" + ",".join(good[c] for c in HEADER) + "\n\n" + ",".join(bad[c] for c in HEADER) + "\n"
    )
    with pytest.raises(ValueError) as info:
        read_gpu_file(path)
    assert "line 4" in str(info.value)  # header, good row, blank, bad row


def test_catalog_numbers_are_finite() -> None:
    for g in load_gpus().values():
        for v in (g.memory_bytes, g.hbm_bytes_per_s, g.link_bytes_per_s, *g.flops_per_s.values()):
            assert math.isfinite(v) and v >= 0


def test_user_file_refuses_duplicate_keys_and_fractional_link_domains(tmp_path: Path) -> None:
    path = write_gpu_file(tmp_path / "dup.csv", [gpu_row(key="MY-GPU"), gpu_row(key="MY-GPU")])
    with pytest.raises(ValueError, match="key 'MY-GPU' appears twice"):
        read_gpu_file(path)
    path = write_gpu_file(tmp_path / "half.csv", [gpu_row(max_tp_on_link="0.5")])
    with pytest.raises(ValueError, match="max_tp_on_link' = 0.5 is not a whole number"):
        read_gpu_file(path)


@pytest.mark.parametrize(("text", "expected"), [("", 1.0), ("0", 0.0), ("0.4", 0.4), ("1", 1.0)])
def test_roofline_overlap_column(tmp_path: Path, text: str, expected: float) -> None:
    """Optional: empty is the roofline's max (1); a measured share in [0, 1] is kept."""
    columns = [*HEADER, "roofline_overlap"]
    path = write_gpu_file(tmp_path / "gpus.csv", [{**gpu_row(), "roofline_overlap": text}], columns)
    assert load_gpus(path)["MY-GPU-64GB"].roofline_overlap == expected
    assert get_gpu("H100-SXM-80GB").roofline_overlap == 1.0  # the catalog's rows leave it empty


@pytest.mark.parametrize("text", ["1.5", "-0.1", "abc"])
def test_roofline_overlap_outside_its_range_names_the_column(tmp_path: Path, text: str) -> None:
    columns = [*HEADER, "roofline_overlap"]
    path = write_gpu_file(tmp_path / "gpus.csv", [{**gpu_row(), "roofline_overlap": text}], columns)
    with pytest.raises(ValueError, match=r"gpus.csv.*line 2.*roofline_overlap"):
        load_gpus(path)
