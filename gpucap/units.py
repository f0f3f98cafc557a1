"""Unit constants and bytes per value of each number format.

Everything inside gpucap is base SI: bytes, seconds, FLOP, bytes/s. These constants convert at
the edges (catalog files, command line, display). GB and GiB are different numbers and are kept
apart on purpose: datasheets print GB (1e9), vLLM and nvidia-smi print GiB (2**30).
"""

from __future__ import annotations

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
KiB = 2.0**10
MiB = 2.0**20
GiB = 2.0**30
TERA = 1e12
MS = 1e-3
US = 1e-6

# Bytes per weight value, scales included (DESIGN.md section 3).
#   fp8: 1 byte + one fp32 scale per 128x128 block (DeepSeek-style) ~ 1.0002, rounded to 1.
#   int4 AWQ/GPTQ, group 128: 4 bits + fp16 scale and zero per 128 values = 0.5 + 4/128 = 0.53.
#   NVFP4: 4 bits + one fp8 (e4m3) scale per 16 values = 0.5 + 1/16 = 9/16.
#   MXFP4: 4 bits + one e8m0 scale per 32 values = 0.5 + 1/32 = 17/32.
# Sources: OCP Microscaling Formats v1.0 (MXFP4); NVIDIA "Introducing NVFP4" blog (2025);
# AutoAWQ / GPTQ group-128 layout.
WEIGHT_BYTES_PER_PARAM: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5 + 4.0 / 128.0,
    "nvfp4": 9.0 / 16.0,
    "mxfp4": 17.0 / 32.0,
}

# Which tensor-core throughput a weight format runs its matrix multiplies at. Weight-only int4
# (AWQ/GPTQ) dequantizes to 16 bit before the multiply, so it computes at bf16 rate.
COMPUTE_FORMAT: dict[str, str] = {
    "fp32": "bf16",
    "bf16": "bf16",
    "fp16": "bf16",
    "fp8": "fp8",
    "int8": "int8",
    "int4": "bf16",
    "nvfp4": "fp4",
    "mxfp4": "mxfp4",
}

# Bytes per KV-cache element. "auto" means the model's activation dtype (bf16/fp16: 2 bytes).
KV_BYTES_PER_ELEMENT: dict[str, float] = {
    "fp32": 4.0,  # a float32 model's cache (CPU servers)
    "auto": 2.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
}

ACTIVATION_BYTES = 2.0  # bf16 activations and all-reduce messages


def weight_bytes_per_param(dtype: str) -> float:
    """Bytes one weight value takes in format ``dtype``, block scales included."""
    try:
        return WEIGHT_BYTES_PER_PARAM[dtype]
    except KeyError:
        raise ValueError(f"unknown weight dtype {dtype!r}; use one of {', '.join(WEIGHT_BYTES_PER_PARAM)}") from None


def kv_bytes_per_element(kv_dtype: str) -> float:
    """Bytes one KV-cache element takes for ``kv_dtype``."""
    try:
        return KV_BYTES_PER_ELEMENT[kv_dtype]
    except KeyError:
        raise ValueError(f"unknown KV-cache dtype {kv_dtype!r}; use one of {', '.join(KV_BYTES_PER_ELEMENT)}") from None
