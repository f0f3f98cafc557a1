"""From load-test runs (``gpucap.calibration.results.read_results``) to what calibration and the error tables
use: cases in the schema of the measurements file, and the concurrency limit a sweep measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpucap.calibration.resultfields import ENGINE_KNOBS
from gpucap.catalog.gpus import get_gpu
from gpucap.types import STATISTICS


def _mode(row: pd.Series) -> str:
    rate, conc = row.get("request_rate"), row.get("concurrency")
    if pd.notna(rate) and math.isfinite(rate):
        return "poisson"
    if pd.notna(conc):
        return "fixed-concurrency"
    return "saturation"


def _given(v: object) -> bool:
    return v is not None and not (isinstance(v, float) and np.isnan(v)) and v != ""


def cases_from_runs(
    runs: pd.DataFrame,
    *,
    weight_dtype: str | None = None,
    kv_cache_dtype: str = "auto",
    length_dist: str = "fixed",
) -> pd.DataFrame:
    """One case row per run, in the schema of ``measured-public.csv``, times in ms.

    Load mode: a finite request rate is ``poisson`` (open loop), a concurrency cap with requests
    sent as fast as allowed is ``fixed-concurrency``, neither is ``saturation`` (all at once; the
    prompts are the completed plus failed requests). Lengths are the run's means. GPU names as
    tools write them ("NVIDIA_L40S") map to catalog keys. ``weight_dtype`` and ``kv_cache_dtype``
    apply to runs whose metadata does not say (``weight_dtype`` None: the checkpoint's own format,
    resolved when the case is predicted); ``length_dist`` to every run. Engine knobs in the
    metadata (max_num_seqs, max_num_batched_tokens, block_size, gpu_memory_utilization,
    enforce_eager) become columns ``gpucap.calibration.validate`` builds the engine from. A run that gives
    ITL but no TPOT (older SGLang files) has its ITL as TPOT, ``tpot_from`` "itl".
    """
    rows = []
    for k, r in enumerate(runs.to_dict("records")):  # dicts: a row loop over 10^5 runs, not Series
        gpu = r.get("gpu")
        try:
            gpu = get_gpu(str(gpu)).key if pd.notna(gpu) else gpu
        except ValueError:
            pass  # left as is: the prediction reports the unknown GPU by name
        prompts = (r.get("completed") or 0) + (0 if pd.isna(r.get("failed")) else r.get("failed"))
        rows.append(
            {
                "case_id": f"{r.get('source_file')}#{int(r.get('run_index', k)) if pd.notna(r.get('run_index')) else k}",
                "model": r.get("model"),
                "weight_dtype": r.get("weight_dtype") if _given(r.get("weight_dtype")) else weight_dtype,
                "kv_cache_dtype": r.get("kv_cache_dtype") if _given(r.get("kv_cache_dtype")) else kv_cache_dtype,
                **{k: r.get(k) for k in ENGINE_KNOBS if _given(r.get(k))},
                "gpu": gpu,
                "num_gpus": r.get("num_gpus"),
                "tp": r.get("tp"),
                "pp": r.get("pp") if pd.notna(r.get("pp")) else 1,
                "ep": r.get("ep") if pd.notna(r.get("ep")) else 1,
                "attn_dp": 1,
                "engine": r.get("engine"),
                "isl": r.get("input_len_mean"),
                "osl": r.get("output_len_mean"),
                "length_dist": length_dist,
                "range_ratio": r.get("range_ratio") if _given(r.get("range_ratio")) else 0.0,
                "load_mode": _mode(r),
                "concurrency": r.get("concurrency"),
                "request_rate": r.get("request_rate"),
                "num_prompts": r.get("num_prompts") if pd.notna(r.get("num_prompts")) else prompts or np.nan,
                "output_tok_s": r.get("output_tokens_per_s"),
                **{f"ttft_{s}_ms": r.get(f"ttft_{s}_s", np.nan) * 1e3 for s in ("mean", "median", "p99")},
                **_tpot_ms(r),
                "itl_median_ms": r.get("itl_median_s", np.nan) * 1e3,
            }
        )
    return pd.DataFrame(rows)


def _tpot_ms(run: pd.Series) -> dict[str, float | str]:
    """The run's TPOT statistics in ms; where the file gives none, its ITL statistics stand in
    (streamed decoding without speculative tokens: the same gap between tokens), and
    ``tpot_from`` says so."""
    stats = ("mean", "median", "p99")
    tpot = {s: run.get(f"tpot_{s}_s", np.nan) for s in stats}
    if all(pd.isna(v) for v in tpot.values()):
        itl = {s: run.get(f"itl_{s}_s", np.nan) for s in stats}
        if not all(pd.isna(v) for v in itl.values()):
            return {**{f"tpot_{s}_ms": itl[s] * 1e3 for s in stats}, "tpot_from": "itl"}
    return {**{f"tpot_{s}_ms": tpot[s] * 1e3 for s in stats}, "tpot_from": "tpot"}


@dataclass(frozen=True)
class MeasuredLimit:
    """The concurrency at which a sweep's chosen statistic crosses an SLO."""

    limit: float | None  # None when not reached or already violated
    status: str  # "interpolated", "not reached", "already violated"
    binding: str  # "ttft", "tpot", or "" when not reached
    below: float | None  # the last concurrency that met both SLOs
    above: float | None  # the first that missed one


def crossing(x: np.ndarray, y: np.ndarray, slo: float) -> float:
    """First ``x`` where ``y`` reaches ``slo``, linear between the two points that bracket it; 0
    when the first point is already over, inf when none is; where the first point over has no
    finite value (a queue without bound), the last point under."""
    over = np.flatnonzero(~(y <= slo))  # NaN counts as over
    if over.size == 0:
        return float("inf")
    k = int(over[0])
    if k == 0:
        return 0.0
    x0, x1, y0, y1 = x[k - 1], x[k], y[k - 1], y[k]
    if not np.isfinite(y1):
        return float(x0)
    return float(x0 + (slo - y0) * (x1 - x0) / (y1 - y0))


def measured_limit(
    sweep: pd.DataFrame, *, ttft_slo_s: float = 2.0, tpot_slo_s: float = 0.1, stat: str = "mean", x: str = "concurrency"
) -> MeasuredLimit:
    """Where a sweep of one configuration over ``x`` (concurrency, or request_rate for open-loop
    sweeps) first misses TTFT or TPOT at ``stat``.

    Runs are ordered by ``x``; each metric's crossing is interpolated linearly between the last
    run under its SLO and the first over it; the limit is the smaller crossing. "already
    violated": the lowest ``x`` misses an SLO; "not reached": the highest still meets both.
    Files that give no TPOT but the inter-token latency (older SGLang) use ITL: for streamed
    decoding without speculative tokens the two measure the same gap.
    """
    if stat not in STATISTICS:
        raise ValueError(f"stat must be one of {', '.join(STATISTICS)}, got {stat!r}")
    tpot = f"tpot_{stat}_s"
    if (tpot not in sweep or sweep[tpot].isna().all()) and f"itl_{stat}_s" in sweep:
        tpot = f"itl_{stat}_s"
    cols = [f"ttft_{stat}_s", tpot]
    missing = [col for col in [x, *cols] if col not in sweep or sweep[col].isna().all()]
    if missing:
        raise ValueError(f"sweep lacks {', '.join(missing)}: cannot find where {stat} crosses the SLO")
    s = sweep.dropna(subset=[x, *cols]).sort_values(x)
    c = s[x].to_numpy(float)
    ttft, tpot = s[cols[0]].to_numpy(float), s[cols[1]].to_numpy(float)
    ok = (ttft <= ttft_slo_s) & (tpot <= tpot_slo_s)
    if not ok[0]:
        return MeasuredLimit(None, "already violated", "ttft" if ttft[0] > ttft_slo_s else "tpot", None, float(c[0]))
    if ok.all():
        return MeasuredLimit(None, "not reached", "", float(c[-1]), None)
    crossings = {"ttft": crossing(c, ttft, ttft_slo_s), "tpot": crossing(c, tpot, tpot_slo_s)}
    binding = min(crossings, key=lambda k: crossings[k])
    first_bad = int(np.flatnonzero(~ok)[0])
    return MeasuredLimit(crossings[binding], "interpolated", binding, float(c[first_bad - 1]), float(c[first_bad]))
