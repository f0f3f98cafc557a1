"""The table every result reader fills: one row per run, SI units, units in the names (``COLUMNS``),
and the checks of what a file says: numbers (``number``) and the hardware, parallelism, model and
engine knobs of a run (``hardware_fields``), from its metadata, a manifest or defaults.

Means of input and output length are per completed request. Times are seconds, throughputs per
second; ``request_rate`` is inf for "all at once".
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from gpucap.catalog.configfields import show_value

COLUMNS = (
    "source_file", "run_index", "engine", "model", "gpu", "num_gpus", "tp", "pp", "ep",
    "weight_dtype", "kv_cache_dtype", "max_num_seqs", "max_num_batched_tokens", "block_size",
    "gpu_memory_utilization", "enforce_eager", "overlap_host", "enable_prefix_caching", "range_ratio",
    "concurrency", "request_rate", "num_prompts", "completed", "failed", "input_len_mean",
    "output_len_mean", "duration_s", "request_throughput_per_s", "output_tokens_per_s",
    "total_tokens_per_s", "ttft_mean_s", "ttft_median_s", "ttft_p90_s", "ttft_p99_s",
    "tpot_mean_s", "tpot_median_s", "tpot_p90_s", "tpot_p99_s", "itl_mean_s", "itl_median_s",
    "itl_p99_s", "e2el_mean_s", "goodput_per_s",
)  # fmt: skip
# What a run ran on: hardware, split, formats and the engine knobs that change a prediction.
ENGINE_KNOBS = (
    "max_num_seqs", "max_num_batched_tokens", "block_size", "gpu_memory_utilization", "enforce_eager", "overlap_host",
    "enable_prefix_caching",
)  # fmt: skip
# ... and the load test's --random-range-ratio, which decides how its request lengths spread.
HARDWARE = (
    "gpu", "num_gpus", "tp", "pp", "ep", "engine", "model", "weight_dtype", "kv_cache_dtype", *ENGINE_KNOBS,
    "range_ratio",
)  # fmt: skip
INT_FIELDS = ("num_gpus", "tp", "pp", "ep", "max_num_seqs", "max_num_batched_tokens", "block_size")
META_KEYS = {"gpu": "gpu", "num_gpus": "num_gpus", "tp": "tp", "tensor_parallel_size": "tp", "pp": "pp",
             "pipeline_parallel_size": "pp", "ep": "ep", "engine": "engine", "model": "model",
             "weight_dtype": "weight_dtype", "kv_cache_dtype": "kv_cache_dtype", "kv_dtype": "kv_cache_dtype",
             "max_num_seqs": "max_num_seqs", "max_num_batched_tokens": "max_num_batched_tokens",
             "block_size": "block_size", "gpu_memory_utilization": "gpu_memory_utilization",
             "enforce_eager": "enforce_eager", "overlap_host": "overlap_host", "async_scheduling": "overlap_host",
             "range_ratio": "range_ratio", "random_range_ratio": "range_ratio",
             "enable_prefix_caching": "enable_prefix_caching", "prefix_caching": "enable_prefix_caching"}  # fmt: skip
TRUE, FALSE = ("true", "1", "yes"), ("false", "0", "no")
TEXT_FIELDS = ("weight_dtype", "kv_cache_dtype", "enforce_eager", "overlap_host", "enable_prefix_caching")  # bools last
LATENCY = tuple(c for c in COLUMNS if c.startswith(("ttft", "tpot", "itl", "e2el")))
# No count, time (s or ms) or rate a load test reports reaches this; a larger value is corrupt.
ABSURD = 1e12


def number(
    d: Mapping[str, Any], key: str, where: str, scale: float = 1.0, infinite: bool | None = None
) -> float | None:
    """d[key] times scale; None when absent or null. A string, NaN, a negative, an infinity
    (unless ``infinite``: by default for a request rate, where it means "all at once") or a value
    beyond ABSURD is an error."""
    v = d.get(key)
    if v is None:
        return None
    infinite = key == "request_rate" if infinite is None else infinite
    if infinite and isinstance(v, str) and v.strip().lower() in ("inf", "infinity"):
        return math.inf
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"{where}: {key} = {show_value(v)} is not a number")
    try:
        x = float(v)
    except OverflowError:  # an integer of hundreds of digits
        raise ValueError(f"{where}: {key} = {show_value(v)} is beyond any measurement (> {ABSURD:g})") from None
    if math.isnan(x) or x < 0:
        raise ValueError(f"{where}: {key} {'is NaN' if math.isnan(x) else f'= {show_value(v)} is negative'}")
    if math.isinf(x):
        if infinite:
            return math.inf
        raise ValueError(f"{where}: {key} is infinite, not a measurement")
    if x > ABSURD:
        raise ValueError(f"{where}: {key} = {show_value(v)} is beyond any measurement (> {ABSURD:g})")
    return x * scale


def new_row(**values: Any) -> dict[str, Any]:
    """A run with every column None (and the tool's ``backend``), then ``values``."""
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row["backend"] = None
    row.update(values)
    return row


def hardware_fields(d: Mapping[str, Any], where: str, strict: bool = False) -> dict[str, Any]:
    """The HARDWARE fields in ``d`` (metadata; a manifest entry or defaults when strict), checked."""
    out: dict[str, Any] = {}
    for key, v in d.items():
        name = META_KEYS.get(str(key).replace("-", "_"))
        if strict and key not in HARDWARE and not str(key).startswith("_"):
            raise ValueError(f"{where}: unknown field {key!r}; use {', '.join(HARDWARE)}")
        if name is None or v is None or v == "" or (isinstance(v, float) and math.isnan(v)):
            continue
        if name in INT_FIELDS:
            try:
                n = float(v)
                if isinstance(v, bool) or n != int(n) or n < 1:
                    raise ValueError
            except (TypeError, ValueError, OverflowError):
                raise ValueError(f"{where}: {key} = {show_value(v)} is not a positive whole number") from None
            out[name] = int(n)
        elif name == "gpu_memory_utilization":
            try:
                u = float(v)
                if isinstance(v, bool) or not 0 < u <= 1:
                    raise ValueError
            except (TypeError, ValueError, OverflowError):
                raise ValueError(f"{where}: {key} = {show_value(v)} is not a fraction in (0, 1]") from None
            out[name] = u
        elif name == "range_ratio":
            try:
                rr = float(v)
                if isinstance(v, bool) or not 0 <= rr < 1:
                    raise ValueError
            except (TypeError, ValueError, OverflowError):
                raise ValueError(f"{where}: {key} = {show_value(v)} is not a range ratio in [0, 1)") from None
            out[name] = rr
        elif name in ("enforce_eager", "overlap_host", "enable_prefix_caching"):
            text = str(v).strip().lower()
            if text not in TRUE + FALSE:
                raise ValueError(f"{where}: {key} = {show_value(v)} is not true or false")
            out[name] = text in TRUE
        else:
            out[name] = str(v).strip()
    m = re.fullmatch(r"(\d+)\s*[xX]\s*(.+)", out.get("gpu", ""))
    if m:  # "4xNVIDIA_L40S"
        out["gpu"] = m.group(2)
        out.setdefault("num_gpus", int(m.group(1)))
    return out
