"""Run the estimator on published or measured cases (the schema of ``measured-public.csv``) and
compare: one prediction per row, then error summaries by metric, model, GPU and engine."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .batching import LoadPoint, closed_loop, open_loop
from .engine import Coefficients, EngineConfig
from .estimate import DoesNotFit, batch_slots, hardware, memory_limit
from .runs import saturation_run, static_batch
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


def case_hardware(row: pd.Series) -> tuple[Hardware, int, list[str]]:
    """Hardware for one case row, the number of replicas, and the assumptions made. Optional
    columns max_num_seqs, max_num_batched_tokens, block_size, gpu_memory_utilization and
    enforce_eager set the engine's knobs (its defaults otherwise)."""
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
    eager = str(row.get("enforce_eager", "")).strip().lower() in ("true", "1", "1.0", "yes")
    util = _num(row, "gpu_memory_utilization")
    eng = EngineConfig(
        engine=engine,
        max_num_seqs=_int(row, "max_num_seqs", 0) or None,
        max_num_batched_tokens=_int(row, "max_num_batched_tokens", 0) or None,
        block_size=_int(row, "block_size", 0) or None,
        gpu_memory_utilization=util,
        cuda_graphs=not eager,
    )
    hw = hardware(
        str(row["model"]), gpu, tp=tp, pp=pp, ep=ep, attn_dp=attn_dp, weight_dtype=wd, kv_dtype=kv, engine=eng
    )
    per = hw.layout.gpus_per_replica
    if num_gpus % per:
        raise ValueError(f"num_gpus={num_gpus} is not a multiple of tp x pp x attn_dp = {per}")
    return hw, num_gpus // per, notes


@dataclass(frozen=True)
class PreparedCase:
    """One case row resolved into hardware and a load, ready to predict with any coefficients."""

    case_id: str
    hw: Hardware
    replicas: int
    mode: str
    lengths: str
    input_len: float
    output_len: float
    load: float  # prompts (saturation), concurrency, batch or request rate, for the whole case
    max_running: float  # per replica: min(max_num_seqs, requests memory holds)
    ttft_only: bool
    notes: str

    @property
    def group_key(self) -> tuple[Any, ...]:
        hw = self.hw
        return (hw.spec.name, hw.gpu.key, hw.layout, hw.weight_dtype, hw.kv_dtype, hw.engine, self.mode, self.lengths)


def prepare_case(row: pd.Series) -> PreparedCase:
    """Resolve one row; raises ValueError (or DoesNotFit) with the reason it cannot be predicted."""
    hw, replicas, notes = case_hardware(row)
    isl, osl = _num(row, "isl"), _num(row, "osl")
    mode = str(row["load_mode"])
    ttft_only = mode == "single-request" and osl is None
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
    if mode == "saturation":
        load = _num(row, "num_prompts", np.inf) or np.inf
    elif mode == "fixed-concurrency":
        load = _num(row, "concurrency", 1.0) or 1.0
    elif mode == "single-request":
        load = 1.0
    elif mode == "static-batch":
        load = _num(row, "concurrency") or 0.0
        if not load:
            raise ValueError("static-batch row without concurrency")
    elif mode == "poisson":
        load = _num(row, "request_rate") or 0.0
        if not load:
            raise ValueError("poisson row without request_rate")
    else:
        raise ValueError(f"load_mode {mode!r} is not one of {', '.join(LOAD_MODES)}")
    return PreparedCase(
        case_id=str(row.get("case_id")),
        hw=hw,
        replicas=replicas,
        mode=mode,
        lengths=lengths,
        input_len=isl,
        output_len=osl,
        load=float(load),
        max_running=batch_slots(hw, mem_cap),
        ttft_only=ttft_only,
        notes="; ".join(notes),
    )


def predict_prepared(
    cases: list[PreparedCase], coef: Coefficients | dict[str, Coefficients] | None = None
) -> pd.DataFrame:
    """Predictions for prepared cases, one vectorized call per (hardware, load mode, lengths).

    ``coef``: one set for every case, a dict engine -> set, or None for each engine's defaults.
    Returns whole-case output tokens/s and TTFT/TPOT in ms, indexed like ``cases``.
    """
    out = np.full((len(cases), 3), np.nan)
    groups: dict[tuple[Any, ...], list[int]] = {}
    for k, c in enumerate(cases):
        groups.setdefault(c.group_key, []).append(k)
    for idx in groups.values():
        first = cases[idx[0]]
        hw, mode = first.hw, first.mode
        if isinstance(coef, Coefficients):
            co = coef
        elif isinstance(coef, dict) and hw.engine.engine in coef:
            co = coef[hw.engine.engine]
        else:
            co = Coefficients.for_engine(hw.engine.engine)
        rep = np.array([cases[k].replicas for k in idx], dtype=float)
        isl = np.array([cases[k].input_len for k in idx])
        osl = np.array([cases[k].output_len for k in idx])
        load = np.array([cases[k].load for k in idx]) / rep
        cap = np.array([cases[k].max_running for k in idx])
        point: LoadPoint
        if mode == "saturation":
            point = saturation_run(
                hw, co, num_prompts=load, input_len=isl, output_len=osl, max_running=cap, lengths=first.lengths
            )
        elif mode in ("fixed-concurrency", "single-request"):
            point = closed_loop(hw, co, concurrency=load, input_len=isl, output_len=osl, max_running=cap)
        elif mode == "static-batch":
            point = static_batch(hw, co, batch=load, input_len=isl, output_len=osl)
        else:
            point = open_loop(hw, co, request_rate=load, input_len=isl, output_len=osl, max_running=cap)
        ttft = np.where(np.isfinite(point.ttft_s), point.ttft_s * 1e3, np.nan)
        only = np.array([cases[k].ttft_only for k in idx])
        out[idx, 0] = np.where(only, np.nan, point.output_tokens_per_s * rep)
        out[idx, 1] = ttft
        out[idx, 2] = np.where(only, np.nan, point.tpot_s * 1e3)
    return pd.DataFrame(out, columns=[f"{m}_predicted" for m in METRICS])


def prepare_cases(cases: pd.DataFrame) -> tuple[list[PreparedCase], dict[int, str]]:
    """Prepared cases for the rows that can be predicted, and {row position: reason} for the rest."""
    prepared: list[PreparedCase] = []
    errors: dict[int, str] = {}
    for pos, (_, row) in enumerate(cases.iterrows()):
        try:
            prepared.append(prepare_case(row))
        except ValueError as exc:  # DoesNotFit is a ValueError
            errors[pos] = str(exc)
    return prepared, errors


def predict_case(row: pd.Series, coef: Coefficients | None = None) -> dict[str, Any]:
    """Predicted whole-case output tokens/s, and TTFT/TPOT (ms) where the load mode defines them."""
    case = prepare_case(row)
    pred = predict_prepared([case], coef).iloc[0]
    return {m: (None if pd.isna(pred[f"{m}_predicted"]) else float(pred[f"{m}_predicted"])) for m in METRICS} | {
        "notes": case.notes
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


def measured_metrics(cases: pd.DataFrame) -> pd.DataFrame:
    """Measured output tokens/s, TTFT and TPOT (ms) per row: mean where given, else median, else
    the value whose statistic the source does not state."""
    return pd.DataFrame(
        {f"{m}_measured": [_measured(row, m) for _, row in cases.iterrows()] for m in METRICS}, dtype=float
    )


def validate(cases: pd.DataFrame, coef: Coefficients | dict[str, Coefficients] | None = None) -> pd.DataFrame:
    """One row per case: measured and predicted metrics, their ratio, or the reason it cannot be
    predicted."""
    prepared, errors = prepare_cases(cases)
    ok = [pos for pos in range(len(cases)) if pos not in errors]
    pred = pd.DataFrame(np.nan, index=range(len(cases)), columns=[f"{m}_predicted" for m in METRICS])
    if prepared:
        pred.loc[ok] = predict_prepared(prepared, coef).to_numpy()
    keep = [
        k for k in ("case_id", "model", "gpu", "engine", "num_gpus", "load_mode", "isl", "osl") if k in cases.columns
    ]
    result = cases[keep].reset_index(drop=True).copy()
    result["error"] = [errors.get(pos) for pos in range(len(cases))]
    measured = measured_metrics(cases)
    for m in METRICS:
        result[f"{m}_measured"] = measured[f"{m}_measured"]
        result[f"{m}_predicted"] = pred[f"{m}_predicted"]
        result[f"{m}_ratio"] = result[f"{m}_predicted"] / result[f"{m}_measured"]
    notes = {c.case_id: c.notes for c in prepared}
    result["notes"] = [notes.get(str(cid), "") for cid in result["case_id"]]
    return result


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


def synthetic_cases(
    setups: Iterable[tuple[str, str, int]],
    concurrencies: Iterable[float],
    shapes: Iterable[tuple[float, float]],
    coef: Coefficients,
    *,
    noise: float,
    seed: int = 0,
) -> pd.DataFrame:
    """Closed-loop runs (vLLM, bf16) of every (model, GPU, tp) set-up at every concurrency and
    (input, output) shape, "measured" as gpucap predicts them with ``coef`` times log-normal noise
    of ``noise`` (sigma of the log): runs with a known answer, to check what a calibration
    recovers and how long it takes."""
    levels, lengths = [float(c) for c in concurrencies], list(shapes)
    rows = [
        {
            "case_id": f"{model}|{c:.4g}|{isl:g}",
            "model": model,
            "weight_dtype": "bf16",
            "kv_cache_dtype": "auto",
            "gpu": gpu,
            "num_gpus": tp,
            "tp": tp,
            "pp": 1,
            "engine": "vllm",
            "isl": isl,
            "osl": osl,
            "load_mode": "fixed-concurrency",
            "concurrency": c,
            "request_rate": np.nan,
        }
        for model, gpu, tp in setups
        for c in levels
        for isl, osl in lengths
    ]
    cases = pd.DataFrame(rows)
    pred = validate(cases, coef)
    rng = np.random.default_rng(seed)
    for metric, col in (("output_tok_s", "output_tok_s"), ("ttft_ms", "ttft_mean_ms"), ("tpot_ms", "tpot_mean_ms")):
        cases[col] = pred[f"{metric}_predicted"] * np.exp(rng.normal(0.0, noise, len(cases)))
    return cases
