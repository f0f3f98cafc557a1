"""GPU catalog: sourced datasheet numbers in ``data/gpus.csv``, converted to SI on load.

A GPU's memory is the total the CUDA (or HIP) runtime reports, ``memory_GiB_cuda``: what
``torch.cuda.mem_get_info`` returns, PyTorch prints in its out-of-memory message ("GPU 0 has a
total capacity of 79.15 GiB") and vLLM multiplies by ``gpu_memory_utilization``. It is below
nvidia-smi's total (``memory_GiB_reported``; an A100 80GB: 79.15 against 80.0 GiB), which is used
where no log gives the runtime's figure.

Users add or override GPUs with a CSV of the same columns (``load_gpus(extra=...)``, the
``--gpu-file`` option, ``add_gpu_file(path)`` for the rest of a Python session, or the
``GPUCAP_GPU_FILE`` environment variable), never by editing code.
"""

from __future__ import annotations

import csv
import dataclasses
import difflib
import math
import os
from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files
from pathlib import Path

from gpucap.errors import UnknownName
from gpucap.parallel import carry
from gpucap.textfiles import read_text
from gpucap.units import GB, TB, TERA, US, GiB


def data_dir() -> Path:
    """Where the shipped data is: ``GPUCAP_DATA`` when set (a folder of one's own), else the
    package ``gpucap.data`` (the repository's data/ folder, mapped in pyproject.toml, so an
    installed wheel carries it), else the data/ folder beside the package (a checkout on
    ``sys.path`` that was never installed)."""
    if os.environ.get("GPUCAP_DATA"):
        return Path(os.environ["GPUCAP_DATA"])
    try:
        return Path(str(files("gpucap.data")))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / "data"


DATA_DIR = data_dir()
GPU_FILE = DATA_DIR / "gpus.csv"

REQUIRED_COLUMNS = ("key", "memory_GB", "bf16_dense_TFLOPs", "hbm_TB_per_s", "link_kind", "link_GB_per_s_per_direction")
LINK_KINDS = ("nvswitch", "nvlink-bridge", "xgmi", "pcie")

# Small-message all-reduce latency (the ring's alpha term) per link kind: assumed values of the
# order nccl-tests prints for small all-reduces, not measured here. Calibration does not fit them
# (u_link scales only the bandwidth term); a GPU file cannot override them yet.
LINK_LATENCY_S: dict[str, float] = {"nvswitch": 10 * US, "nvlink-bridge": 10 * US, "xgmi": 20 * US, "pcie": 25 * US}


@dataclass(frozen=True)
class GPU:
    """One accelerator, SI units: bytes, FLOP/s, bytes/s."""

    key: str
    memory_bytes: float  # the total the CUDA runtime reports (``memory_GiB_cuda``), below nvidia-smi's
    flops_per_s: dict[str, float]  # dense peak by format: bf16, fp8, fp4, int8
    hbm_bytes_per_s: float
    link_kind: str
    link_bytes_per_s: float  # per direction, per GPU
    max_tp_on_link: int
    link_latency_s: float
    name: str = ""
    source: str = ""
    tdp_w: float = 0.0  # board power, W (0 when the catalog row gives none)
    vendor: str = ""  # "NVIDIA", "AMD", ... (the catalog's vendor column)
    exp_per_s: float = 0.0  # softmax exponentials the special-function units give a second (0: not given)
    mxfp4_bf16_share: float = 0.0  # measured ceiling of a bf16 x MXFP4 MoE GEMM, share of bf16 peak (0: none)
    mxfp4_fp8_share: float = 0.0  # measured ceiling of an MXFP8 x MXFP4 MoE GEMM, share of fp8 peak (0: none)
    # share of a kernel's shorter roofline (compute or memory) hidden under the longer, 0-1:
    # ``gpucap.physics.steptime.step_terms``; 1 (the roofline's max) unless the row measures it
    roofline_overlap: float = 1.0

    @property
    def is_cpu(self) -> bool:
        """A CPU measured as a catalog row (vendor "CPU": ``benchmarks/e2e/measure_cpu.py``)."""
        return self.vendor.strip().upper() == "CPU"

    @property
    def is_amd(self) -> bool:
        """An AMD Instinct GPU (ROCm: its own kernels and formats in vLLM)."""
        return self.vendor.upper() == "AMD"

    def peak_flops_per_s(self, fmt: str) -> float:
        """Dense peak for a compute format, falling back to the next wider format the chip has
        (fp4 -> fp8 -> bf16): a chip without fp4 tensor cores runs an fp4 model's matmuls in fp8
        or bf16 after dequantizing. "mxfp4" is the weight-only W4A16 rate, bf16's, on every chip:
        MXFP4 checkpoints (gpt-oss) are upcast and multiplied by bf16 activations (Marlin on
        Ampere, Triton ``matmul_ogs`` on Hopper, FlashInfer's MXFP4 x BF16 first on Blackwell in
        vLLM 0.32; on AMD every ROCm MoE backend maps to ``mxfp4_w4a16_moe_quant_config``, vllm
        ``fused_moe/oracle/mxfp4.py`` @ 001eda31, even where the chip has fp4 matrix cores, as
        native fp4 x fp4 is for Quark OCP-MX checkpoints only). Which format an engine's MXFP4
        matmuls run in on a given chip is ``gpucap.physics.step.matmul_format``.
        """
        chains = {
            "fp4": ("fp4", "fp8", "bf16"),
            "mxfp4": ("bf16",),
            "fp8": ("fp8", "bf16"),
            "int8": ("int8", "bf16"),
        }
        for f in chains.get(fmt, (fmt,)):
            if self.flops_per_s.get(f):
                return self.flops_per_s[f]
        return self.flops_per_s["bf16"]


SPEED_PARTS = ("compute", "all")


def scaled(gpu: GPU, speed: float, part: str = "compute") -> GPU:
    """``gpu`` with its rates times ``speed``: a testbed that runs the same kernels ``speed`` times
    as fast as the datasheet and the default efficiencies say. ``part="compute"`` scales the
    tensor-core FLOP/s and the special-function units' exponentials only (clocks held down by a
    power cap slow compute-bound kernels and leave memory-bound ones as they are); ``"all"`` also
    memory and link bandwidth. Host times are not scaled."""
    if not (math.isfinite(speed) and speed > 0):
        raise ValueError(f"speed must be a positive number, got {speed!r}")
    if part not in SPEED_PARTS:
        raise ValueError(f"part must be one of {', '.join(SPEED_PARTS)}, got {part!r}")
    bw = speed if part == "all" else 1.0
    return dataclasses.replace(
        gpu,
        flops_per_s={k: v * speed for k, v in gpu.flops_per_s.items()},
        exp_per_s=gpu.exp_per_s * speed,
        hbm_bytes_per_s=gpu.hbm_bytes_per_s * bw,
        link_bytes_per_s=gpu.link_bytes_per_s * bw,
    )


def _num(row: dict[str, str], col: str, where: str, required: bool = False) -> float:
    """A finite number >= 0 (> 0 when required); empty optional cells read as 0."""
    text = (row.get(col) or "").strip()
    if not text:
        if required:
            raise ValueError(f"{where}: column {col!r} is empty; give the datasheet number")
        return 0.0
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{where}: column {col!r} = {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0 or (required and value == 0):
        need = "a positive number" if required else "a number >= 0"
        raise ValueError(f"{where}: column {col!r} = {text!r}; it must be {need}")
    return value


def _gpu_from_row(row: dict[str, str], where: str) -> GPU:
    kind = (row.get("link_kind") or "").strip()
    if kind not in LINK_KINDS:
        raise ValueError(f"{where}: link_kind {kind!r} is not one of {', '.join(LINK_KINDS)}")
    # The total the CUDA runtime reports (what gpu_memory_utilization multiplies), else nvidia-smi's,
    # else the datasheet's
    gib = _num(row, "memory_GiB_cuda", where) or _num(row, "memory_GiB_reported", where)
    memory = gib * GiB if gib else _num(row, "memory_GB", where, True) * GB
    flops = {
        "bf16": _num(row, "bf16_dense_TFLOPs", where, True) * TERA,
        "fp8": _num(row, "fp8_dense_TFLOPs", where) * TERA,
        "fp4": _num(row, "fp4_dense_TFLOPs", where) * TERA,
        "int8": _num(row, "int8_dense_TOPs", where) * TERA,
    }
    return GPU(
        key=row["key"].strip(),
        memory_bytes=memory,
        flops_per_s=flops,
        hbm_bytes_per_s=_num(row, "hbm_TB_per_s", where, True) * TB,
        link_kind=kind,
        link_bytes_per_s=_num(row, "link_GB_per_s_per_direction", where, True) * GB,
        max_tp_on_link=_link_domain(row, where),
        link_latency_s=LINK_LATENCY_S[kind],
        name=(row.get("name") or "").strip(),
        source=(row.get("source") or "").strip(),
        tdp_w=_num(row, "tdp_W", where),
        vendor=(row.get("vendor") or "").strip(),
        exp_per_s=exp_per_s(row, where),
        mxfp4_bf16_share=_share(row, "mxfp4_bf16_peak_share", where),
        mxfp4_fp8_share=_share(row, "mxfp4_mxfp8_peak_share", where),
        roofline_overlap=_roofline_overlap(row, where),
    )


def _roofline_overlap(row: dict[str, str], where: str) -> float:
    """The optional ``roofline_overlap`` column, a share in [0, 1]; empty reads as 1: a GPU keeps
    enough warps in flight to hide the shorter roofline under the longer, the roofline model's
    premise (Williams, Waterman and Patterson, "Roofline", CACM 52(4), 2009). A device that does
    not (one CPU core streaming its weights: 0, benchmarks/e2e/measure_cpu.py) states it."""
    if not (row.get("roofline_overlap") or "").strip():
        return 1.0
    value = _num(row, "roofline_overlap", where)
    if value > 1:
        raise ValueError(
            f"{where}: column 'roofline_overlap' = {value:g} is the share of the shorter roofline hidden "
            "under the longer; give a number in [0, 1]"
        )
    return value


def exp_per_s(row: dict[str, str], where: str) -> float:
    """Exponentials per second of the special-function units, the ceiling of a softmax:
    ``SMs x SM clock x exp2 results per clock per SM`` (columns ``sm_count``, ``sm_clock_MHz``: the
    clock the datasheet's tensor peak is computed at, ``exp2_per_clock_per_sm``; 0 unless all three
    are given). The CUDA C++ Programming Guide's table of arithmetic-instruction throughput gives 16
    base-2 exponentials per clock per SM on compute capabilities 8.0 to 9.0, FlashAttention-4 the
    same on 10.0; Blackwell Ultra doubles it (NVIDIA)."""
    sms = _num(row, "sm_count", where)
    clock_hz = _num(row, "sm_clock_MHz", where) * 1e6
    return sms * clock_hz * _num(row, "exp2_per_clock_per_sm", where)


def _share(row: dict[str, str], col: str, where: str) -> float:
    """An optional share in (0, 1]; empty reads as 0 (not given)."""
    value = _num(row, col, where)
    if value > 1:
        raise ValueError(f"{where}: column {col!r} = {value:g} is a share of the peak; give a number in (0, 1]")
    return value


def _link_domain(row: dict[str, str], where: str) -> int:
    """GPUs one NVLink/NVSwitch (or PCIe) domain joins: a whole number >= 1 (8 when empty)."""
    v = _num(row, "max_tp_on_link", where)
    if not v:
        return 8
    if not v.is_integer():
        raise ValueError(f"{where}: column 'max_tp_on_link' = {v:g} is not a whole number of GPUs")
    return int(v)


def read_gpu_file(path: str | Path) -> dict[str, GPU]:
    """Read a GPU CSV (the columns of ``data/gpus.csv``); errors name the file, row and column."""
    path = Path(path)
    text = read_text(path, "GPU file")
    try:
        reader = csv.DictReader(text.splitlines())
        missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
        rows = [(reader.line_num, row) for row in reader]
    except csv.Error as exc:
        raise ValueError(f"GPU file {path} is not a readable CSV ({exc})") from None
    if missing:
        raise ValueError(f"GPU file {path} lacks columns: {', '.join(missing)}")
    gpus: dict[str, GPU] = {}
    for line, row in rows:
        if not (row.get("key") or "").strip():
            raise ValueError(f"{path}, line {line}: empty key")
        gpu = _gpu_from_row(row, f"{path}, line {line} ({row['key']})")
        if gpu.key in gpus:
            raise ValueError(f"{path}, line {line}: key {gpu.key!r} appears twice; keep one row per GPU")
        gpus[gpu.key] = gpu
    return gpus


@lru_cache(maxsize=8)
def _load(extra: tuple[str, ...]) -> dict[str, GPU]:
    gpus = read_gpu_file(GPU_FILE)
    for path in extra:
        gpus.update(read_gpu_file(path))
    return gpus


_ADDED_FILES: list[str] = []  # add_gpu_file's, in the order added


def add_gpu_file(path: str | Path) -> list[str]:
    """Add the GPUs in ``path`` (a CSV of ``data/gpus.csv``'s columns) to every later lookup in
    this process, overriding catalog rows of the same key; the file is read now, so a bad one
    fails here, naming its line. Returns the keys it adds."""
    text = str(Path(path).resolve())
    keys = list(read_gpu_file(text))
    if text not in _ADDED_FILES:
        _ADDED_FILES.append(text)
    return keys


def _add_gpu_files(paths: list[str]) -> None:
    """``add_gpu_file`` of each of ``paths`` not added yet (a worker taking its caller's files)."""
    for path in paths:
        if path not in _ADDED_FILES:
            add_gpu_file(path)


carry("gpu files", lambda: list(_ADDED_FILES), _add_gpu_files)  # tasks run in other processes see them


def load_gpus(extra: str | Path | None = None) -> dict[str, GPU]:
    """The catalog, plus (overriding, later wins) the GPUs in ``$GPUCAP_GPU_FILE``, the files of
    ``add_gpu_file`` and ``extra``."""
    files = [p for p in (os.environ.get("GPUCAP_GPU_FILE"), *_ADDED_FILES, extra) if p]
    return dict(_load(tuple(str(p) for p in files)))


def _normalize(name: str) -> str:
    text = name.lower()
    for vendor in ("nvidia", "amd", "instinct", "geforce", "tesla"):
        text = text.replace(vendor, "")
    return "".join(ch for ch in text if ch.isalnum())


def get_gpu(key: str | GPU, extra: str | Path | None = None) -> GPU:
    """Look a GPU up by catalog key (case-insensitive); unknown keys list close matches."""
    if isinstance(key, GPU):
        return key
    gpus = load_gpus(extra)
    if key in gpus:
        return gpus[key]
    lower = {k.lower(): k for k in gpus}
    if key.lower() in lower:
        return gpus[lower[key.lower()]]
    # names as tools write them ("NVIDIA_L40S", "NVIDIA H200"): one catalog key must start so
    wanted = _normalize(key)
    starts = [k for k in gpus if wanted and _normalize(k).startswith(wanted)]
    if len(starts) == 1:
        return gpus[starts[0]]
    close = starts or difflib.get_close_matches(key, list(gpus), n=4, cutoff=0.4)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UnknownName(f"unknown GPU {key!r}{hint}", kind="GPU", name=key, close=tuple(close))
