"""Run the estimator on published or measured cases (the schema of ``measured-public.csv``) and
compare: one prediction per row, then error summaries by metric, model, GPU and engine."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .batching import LoadPoint, closed_loop, open_loop, saturation_run, static_batch
from .engine import Coefficients, EngineConfig
from .estimate import DoesNotFit, hardware, memory_limit
from .step import Hardware

REQUIRED_COLUMNS = (
    "model",
    "weight_dtype",
    "kv_cache_dtype",
    "gpu",
    "num_gpus",
    "tp",
    "pp",
    "engine",
    "isl",
    "osl",
    "load_mode",
    "concurrency",
    "request_rate",
)
LOAD_MODES = ("saturation", "fixed-concurrency", "poisson", "static-batch", "single-request")
# Engines in the measurements that run one of the modelled engines underneath.
ENGINE_ALIASES = {"nim": "trtllm", "other": "vllm", "tensorrt-llm": "trtllm", "trt-llm": "trtllm"}
BLACKWELL_PREFIXES = ("B200", "GB200", "B300", "GB300", "RTX-PRO-6000")
METRICS = ("output_tok_s", "ttft_ms", "tpot_ms")


def read_cases(path: str | Path) -> pd.DataFrame:
    """Read a cases CSV; a missing required column is an error naming it."""
    path = Path(path)
    try:
        df = pd.read_csv(path)
    except FileNotFoundError:
        raise ValueError(f"cases file {path} does not exist") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ValueError(f"cases file {path} is not a readable CSV ({exc})") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"cases file {path} lacks required columns: {', '.join(missing)}")
    if "case_id" not in df.columns:
        df.insert(0, "case_id", [f"row{i + 2}" for i in range(len(df))])
    return df


def _num(row: pd.Series, col: str, default: float | None = None) -> float | None:
    v = row.get(col)
    if v is None or (isinstance(v, float) and math.isnan(v)) or v == "":
        return default
    try:
        return float(v)
    except (TypeError, ValueError):
        raise ValueError(f"column {col!r} = {v!r} is not a number") from None


def _int(row: pd.Series, col: str, default: int) -> int:
    v = _num(row, col)
    return default if v is None else int(v)


def case_hardware(row: pd.Series, engine_overrides: dict[str, Any] | None = None) -> tuple[Hardware, int, list[str]]:
    """Hardware for one case row, the number of replicas, and the assumptions made."""
    notes: list[str] = []
    num_gpus = _int(row, "num_gpus", 1)
    pp = _int(row, "pp", 1)
    attn_dp = _int(row, "attn_dp", 1)
    tp = _int(row, "tp", 0)
    if tp == 0:
        tp = max(num_gpus // (pp * attn_dp), 1)
        notes.append(f"tp not stated: taken as {tp}")
    ep = _int(row, "ep", 1)
    wd = row.get("weight_dtype")
    if not isinstance(wd, str) or not wd:
        wd = "bf16"
        notes.append("weight dtype not stated: taken as bf16")
    kv = str(row.get("kv_cache_dtype") or "auto")
    gpu = str(row["gpu"])
    if kv == "fp8-on-blackwell":
        kv = "fp8" if gpu.startswith(BLACKWELL_PREFIXES) else "auto"
    engine = str(row.get("engine") or "vllm").lower()
    engine = ENGINE_ALIASES.get(engine, engine)
    eng = EngineConfig(engine=engine, **(engine_overrides or {}))
    hw = hardware(
        str(row["model"]), gpu, tp=tp, pp=pp, ep=ep, attn_dp=attn_dp, weight_dtype=wd, kv_dtype=kv, engine=eng
    )
    per = hw.layout.gpus_per_replica
    if num_gpus % per:
        raise ValueError(f"num_gpus={num_gpus} is not a multiple of tp x pp x attn_dp = {per}")
    return hw, num_gpus // per, notes


def predict_case(row: pd.Series, coef: Coefficients | None = None) -> dict[str, Any]:
    """Predicted whole-case output tokens/s, and TTFT/TPOT (ms) where the load mode defines them."""
    hw, replicas, notes = case_hardware(row)
    coef = coef or Coefficients.for_engine(hw.engine.engine)
    isl, osl = _num(row, "isl"), _num(row, "osl")
    ttft_only = str(row["load_mode"]) == "single-request" and osl is None
    if ttft_only:  # a first-token latency measurement: one output token
        osl = 1.0
    if not isl or not osl or isl <= 0 or osl <= 0:
        raise ValueError(f"input/output length missing or not positive (isl={isl}, osl={osl})")
    dist = str(row.get("length_dist") or "fixed").lower()
    lengths = "dataset" if dist.startswith(("sharegpt", "mlperf", "dataset")) else "fixed"
    if "nominal maxima" in dist:  # uniform on [0, max]: the means are half the stated lengths
        isl, osl, lengths = isl / 2.0, osl / 2.0, "uniform"
        notes.append("uniform random lengths: means taken as half the stated maxima")
    _, mem_cap = memory_limit(hw, isl + osl)
    if mem_cap < 1:
        raise DoesNotFit(f"KV cache holds no {isl + osl:.0f}-token request")
    cap = min(float(hw.engine.max_num_seqs or np.inf), mem_cap)
    mode = str(row["load_mode"])
    point: LoadPoint
    if mode == "saturation":
        n = _num(row, "num_prompts", np.inf) or np.inf
        point = saturation_run(
            hw, coef, num_prompts=n / replicas, input_len=isl, output_len=osl, max_running=cap, lengths=lengths
        )
    elif mode in ("fixed-concurrency", "single-request"):
        c = _num(row, "concurrency", 1.0) if mode == "fixed-concurrency" else 1.0
        point = closed_loop(hw, coef, concurrency=(c or 1.0) / replicas, input_len=isl, output_len=osl, max_running=cap)
    elif mode == "static-batch":
        c = _num(row, "concurrency")
        if not c:
            raise ValueError("static-batch row without concurrency")
        point = static_batch(hw, coef, batch=c / replicas, input_len=isl, output_len=osl)
    elif mode == "poisson":
        rate = _num(row, "request_rate")
        if not rate:
            raise ValueError("poisson row without request_rate")
        point = open_loop(hw, coef, request_rate=rate / replicas, input_len=isl, output_len=osl, max_running=cap)
    else:
        raise ValueError(f"load_mode {mode!r} is not one of {', '.join(LOAD_MODES)}")
    ttft = float(point.ttft_s) * 1e3
    return {
        "output_tok_s": None if ttft_only else float(point.output_tokens_per_s) * replicas,
        "ttft_ms": ttft if math.isfinite(ttft) else None,
        "tpot_ms": None if ttft_only else float(point.tpot_s) * 1e3,
        "notes": "; ".join(notes),
    }


def _measured(row: pd.Series, metric: str) -> float | None:
    if metric == "output_tok_s":
        return _num(row, "output_tok_s")
    base = metric.replace("_ms", "")
    for stat in ("mean", "median"):
        v = _num(row, f"{base}_{stat}_ms")
        if v is not None:
            return v
    return _num(row, f"{metric}_stat_unknown")


def validate(cases: pd.DataFrame, coef: Coefficients | None = None) -> pd.DataFrame:
    """One row per case: measured and predicted metrics, the ratio, or the error."""
    out = []
    for _, row in cases.iterrows():
        rec: dict[str, Any] = {
            k: row.get(k) for k in ("case_id", "model", "gpu", "engine", "num_gpus", "load_mode", "isl", "osl")
        }
        try:
            pred = predict_case(row, coef)
            rec["error"] = None
        except ValueError as exc:  # DoesNotFit is a ValueError
            pred = {}
            rec["error"] = str(exc)
        for m in METRICS:
            meas = _measured(row, m)
            p = pred.get(m)
            rec[f"{m}_measured"] = meas
            rec[f"{m}_predicted"] = p
            rec[f"{m}_ratio"] = (p / meas) if (p is not None and meas) else None
        rec["notes"] = pred.get("notes", "")
        out.append(rec)
    return pd.DataFrame(out)


def abs_error(ratio: pd.Series) -> pd.Series:
    """|predicted / measured - 1|."""
    return (ratio.astype(float) - 1.0).abs()


def error_summary(result: pd.DataFrame, by: str | None = None) -> pd.DataFrame:
    """Rows compared, median and 90th-percentile absolute error, and median signed bias, per metric
    (and per value of ``by``)."""
    rows = []
    groups = [("all", result)] if by is None else list(result.groupby(by))
    for key, g in groups:
        for m in METRICS:
            r = g[f"{m}_ratio"].dropna().astype(float)
            if r.empty:
                continue
            e = abs_error(r)
            rows.append(
                {
                    **({by: key} if by else {}),
                    "metric": m,
                    "n": len(r),
                    "median_abs_err": float(e.median()),
                    "p90_abs_err": float(e.quantile(0.9)),
                    "median_ratio": float(r.median()),
                }
            )
    return pd.DataFrame(rows)
