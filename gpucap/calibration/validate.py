"""Run the estimator on published or measured cases (the schema of ``measured-public.csv``) and
compare: read the cases, resolve each row into hardware and a load (``prepare_case``), predict
it, and set the prediction beside the measurement (``validate``). What a row says cell by cell:
``gpucap.calibration.cases``; error summaries and testbed speeds: ``gpucap.calibration.accuracy``.

Each row is predicted as the benchmark that produced it ran (``predict_prepared``, method
``simulate``): the step-level simulation (``gpucap.queueing.simulate.run_benchmark``) of its load mode --
all prompts at once for saturation rows, a closed loop at the row's concurrency, Poisson arrivals
at its rate -- with its lengths (fixed, uniform, or dataset-like) and the statistic it reports
(mean where given, else median). Static batches, and saturation rows that do not say how many
prompts were sent, use the closed forms (``gpucap.physics.runs``); ``method="closed-form"`` uses them for
every row (the fast path calibration fits with).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpucap.calibration.cases import (
    PreparedCase,
    at_speed,
    bench_load,
    cell_int,
    cell_number,
    read_table,
    row_front_end,
    row_lengths,
    row_overlap_host,
    row_prefix_caching,
    row_sampler,
    row_stats,
    row_utilization,
    testbed_keys,
)
from gpucap.catalog.gpus import get_gpu
from gpucap.catalog.lookup import load_model
from gpucap.config import EngineConfig, Hardware, hardware, split_of
from gpucap.errors import DoesNotFit
from gpucap.parallel import Runner, as_runner
from gpucap.physics.batching import LoadPoint, closed_loop, open_loop
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.memory import batch_slots, memory_limit
from gpucap.physics.requests import Requests
from gpucap.physics.runs import saturation_run, static_batch
from gpucap.physics.waves import wave_loop
from gpucap.queueing.simulate import run_benchmark
from gpucap.units import GiB

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
# Precision labels a results table gives a whole configuration ("H100 TP1 (FP8)", "B200 (FP4)"). For
# an MXFP4 checkpoint (gpt-oss) they do not say the weights were re-quantized: its MoE weights stay
# MXFP4 in every engine (TensorRT-LLM examples/models/core/gpt_oss: "the weights are pre-quantized
# to mxfp4"), so the checkpoint's format is kept.
PRECISION_LABELS = ("fp8", "nvfp4", "fp4")
METRICS = ("output_tok_s", "ttft_ms", "tpot_ms")  # what calibration fits
ALL_METRICS = METRICS + ("itl_ms",)  # what validation reports (ITL where a row gives it)
METHODS = ("simulate", "closed-form")


def read_cases(path: str | Path) -> pd.DataFrame:
    """Read a cases CSV; a missing required column is an error naming it."""
    df = read_table(Path(path), "cases file", REQUIRED_COLUMNS)
    if "case_id" not in df.columns:
        df.insert(0, "case_id", [f"row{i + 2}" for i in range(len(df))])
    return df


def case_hardware(row: pd.Series) -> tuple[Hardware, int, list[str]]:
    """Hardware for one case row, the number of replicas, and the assumptions made. Optional
    columns max_num_seqs, max_num_batched_tokens, block_size, gpu_memory_utilization,
    kv_cache_memory_gib (vLLM's --kv-cache-memory, or the CPU server's VLLM_CPU_KVCACHE_SPACE),
    enforce_eager, overlap_host, enable_prefix_caching, front_end and sampler set the engine's knobs
    (its defaults otherwise; ``row_front_end``, ``row_overlap_host``, ``row_prefix_caching``,
    ``row_sampler``)."""
    notes: list[str] = []
    num_gpus = cell_int(row, "num_gpus", 1)
    pp = cell_int(row, "pp", 1)
    attn_dp = cell_int(row, "attn_dp", 1)
    tp = cell_int(row, "tp", 0)
    if tp == 0:
        tp = max(num_gpus // (pp * attn_dp), 1)
        notes.append(f"tp not stated: taken as {tp}")
    ep = cell_int(row, "ep", 1)
    split, convention = split_of(num_gpus, tp=tp, pp=pp, ep=ep, attn_dp=attn_dp)
    if convention:
        tp = split.tp
        notes.append(convention)
    spec = load_model(str(row["model"]))
    wd: str | None = row.get("weight_dtype")
    if not isinstance(wd, str) or not wd:
        wd = None  # the checkpoint's own format (gpucap.config.hardware)
        notes.append("weight dtype not stated: taken as the checkpoint's format")
    elif wd in PRECISION_LABELS and spec.checkpoint_dtype == "mxfp4":
        notes.append(f"weights taken as the MXFP4 checkpoint's, not the row's precision label {wd}")
        wd = "mxfp4"
    kv = str(row.get("kv_cache_dtype") or "auto")
    gpu = str(row["gpu"])
    if kv == "fp8-on-blackwell":
        kv = "fp8" if gpu.startswith(BLACKWELL_PREFIXES) else "auto"
    engine = str(row.get("engine") or "vllm").lower()
    engine = ENGINE_ALIASES.get(engine, engine)
    eager = str(row.get("enforce_eager", "")).strip().lower() in ("true", "1", "1.0", "yes")
    util = row_utilization(row, engine)
    eng = EngineConfig(
        engine=engine,
        max_num_seqs=cell_int(row, "max_num_seqs", 0) or None,
        max_num_batched_tokens=cell_int(row, "max_num_batched_tokens", 0) or None,
        block_size=cell_int(row, "block_size", 0) or None,
        gpu_memory_utilization=util,
        cuda_graphs=not eager,
        overlap_host=row_overlap_host(row, engine, on_cpu=get_gpu(gpu).is_cpu),
        front_end=row_front_end(row),
        sampler=row_sampler(row, engine, spec.is_moe),
        kv_cache_memory_bytes=kv_gib * GiB if (kv_gib := cell_number(row, "kv_cache_memory_gib")) else None,
        prefix_caching=row_prefix_caching(row),
    )
    hw = hardware(
        str(row["model"]), gpu, tp=tp, pp=pp, ep=ep, attn_dp=attn_dp, weight_dtype=wd, kv_dtype=kv, engine=eng
    )
    per = hw.layout.gpus_per_replica
    if num_gpus % per:
        raise ValueError(f"num_gpus={num_gpus} is not a multiple of tp x pp x attn_dp = {per}")
    return hw, num_gpus // per, notes


def prepare_case(row: pd.Series) -> PreparedCase:
    """Resolve one row; raises ValueError (or DoesNotFit) with the reason it cannot be predicted."""
    hw, replicas, notes = case_hardware(row)
    isl, osl = cell_number(row, "isl"), cell_number(row, "osl")
    mode = str(row["load_mode"])
    ttft_only = mode == "single-request" and osl is None
    if ttft_only:  # a first-token latency measurement: one output token
        osl = 1.0
    if not isl or not osl or isl <= 0 or osl <= 0:
        raise ValueError(f"input/output length missing or not positive (isl={isl}, osl={osl})")
    lengths, dist_in, dist_out, length_notes = row_lengths(row, isl, osl)
    notes += length_notes
    isl, osl = dist_in.mean, dist_out.mean
    _, mem_cap = memory_limit(hw, isl + osl)
    if mem_cap < 1:
        raise DoesNotFit(f"KV cache holds no {isl + osl:.0f}-token request")
    if mode == "saturation":
        load = cell_number(row, "num_prompts", np.inf) or np.inf
    elif mode == "fixed-concurrency":
        load = cell_number(row, "concurrency", 1.0) or 1.0
    elif mode == "single-request":
        load = 1.0
    elif mode == "static-batch":
        load = cell_number(row, "concurrency") or 0.0
        if not load:
            raise ValueError("static-batch row without concurrency")
    elif mode == "poisson":
        load = cell_number(row, "request_rate") or 0.0
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
        bench=bench_load(mode, float(load), replicas, cell_number(row, "num_prompts")),
        input_dist=dist_in,
        output_dist=dist_out,
        stats=row_stats(row),
    )


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


def _coef_for(hw: Hardware, coef: Coefficients | dict[str, Coefficients] | None) -> Coefficients:
    """The coefficients for ``hw``'s engine: ``coef`` itself, its entry for the engine, or the
    engine's defaults."""
    if isinstance(coef, Coefficients):
        return coef
    if isinstance(coef, dict) and hw.engine.engine in coef:
        return coef[hw.engine.engine]
    return Coefficients.for_engine(hw.engine.engine)


def _simulated(case: PreparedCase, coef: Coefficients | dict[str, Coefficients] | None) -> list[float]:
    """Whole-case output tokens/s and TTFT, TPOT, ITL (ms, the row's statistics) by simulating one
    replica's run (``gpucap.queueing.simulate.run_benchmark``)."""
    co = _coef_for(case.hw, coef)
    assert case.bench is not None and case.input_dist is not None and case.output_dist is not None
    run = run_benchmark(
        case.hw,
        co,
        case.bench,
        input_len=case.input_dist,
        output_len=case.output_dist,
    )  # the engine's own batch slots and KV policy (``gpucap.queueing.simulate.engine_slots``)
    s = run.stats
    out = [run.output_tokens_per_s * case.replicas]
    for metric, key in (("ttft_ms", "ttft"), ("tpot_ms", "tpot"), ("itl_ms", "itl")):
        out.append(s[key][case.stat(metric)] * 1e3)
    if case.ttft_only:
        out[0] = out[2] = out[3] = np.nan
    return out


def _closed_form(group: list[PreparedCase], co: Coefficients) -> np.ndarray:
    """Whole-case output tokens/s and TTFT, TPOT, ITL (ms) of cases sharing one (hardware, load
    mode, lengths), by one vectorized call of the closed form of their load mode (rows of
    ``ALL_METRICS``); a closed loop of fixed lengths runs in waves, the first of the run's prompts
    and the convoy after it (``gpucap.physics.waves``)."""
    first = group[0]
    hw, mode = first.hw, first.mode
    rep = np.array([c.replicas for c in group], dtype=float)
    isl = np.array([c.input_len for c in group])
    osl = np.array([c.output_len for c in group])
    load = np.array([c.load for c in group]) / rep
    cap = np.array([c.max_running for c in group])
    point: LoadPoint
    if mode == "saturation":
        shape = "fixed" if first.lengths == "range" else first.lengths  # the drain's shape
        point = saturation_run(hw, co, Requests(isl, osl, max_running=cap), num_prompts=load, lengths=shape)
    elif mode in ("fixed-concurrency", "single-request") and first.lengths == "fixed":
        # the run's prompts per replica: its first wave is C of them (``gpucap.physics.waves``)
        sent = np.array([np.inf if c.bench is None else c.bench.num_prompts for c in group], dtype=float)
        point = wave_loop(hw, co, Requests(isl, osl, max_running=cap), concurrency=load, num_prompts=sent)
    elif mode in ("fixed-concurrency", "single-request"):
        point = closed_loop(hw, co, Requests(isl, osl, max_running=cap), concurrency=load)
    elif mode == "static-batch":
        point = static_batch(hw, co, Requests(isl, osl), batch=load)
    else:
        point = open_loop(hw, co, Requests(isl, osl, max_running=cap), request_rate=load)
    ttft = np.where(np.isfinite(point.ttft_s), point.ttft_s * 1e3, np.nan)
    only = np.array([c.ttft_only for c in group])
    out = np.full((len(group), len(ALL_METRICS)), np.nan)
    out[:, 0] = np.where(only, np.nan, point.output_tokens_per_s * rep)
    out[:, 1] = ttft
    out[:, 2] = np.where(only, np.nan, point.tpot_s * 1e3)
    out[:, 3] = np.where(only, np.nan, point.tpot_s * 1e3)
    return out


def predict_prepared(
    cases: list[PreparedCase],
    coef: Coefficients | dict[str, Coefficients] | None = None,
    method: str = "simulate",
    run: Runner | None = None,
) -> pd.DataFrame:
    """Predictions for prepared cases: by simulating each case's benchmark run where it has one
    (``method="simulate"``; the runs on ``run``'s processes or cluster, ``gpucap.parallel``,
    serially when None), else by the closed forms, one vectorized call per (hardware, load
    mode, lengths).

    ``coef``: one set for every case, a dict engine -> set, or None for each engine's defaults.
    Returns whole-case output tokens/s and TTFT/TPOT/ITL in ms, indexed like ``cases``.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    out = np.full((len(cases), len(ALL_METRICS)), np.nan)
    simulate = [k for k, c in enumerate(cases) if method == "simulate" and c.bench is not None]
    if simulate:
        done = (run or Runner()).map(
            partial(_simulated, coef=coef),
            [cases[k] for k in simulate],
            desc="simulating runs",
            label=lambda _, c: f"case {c.case_id}",
        )
        out[simulate] = np.array(done, dtype=float)
    groups: dict[tuple[Any, ...], list[int]] = {}
    for k in sorted(set(range(len(cases))) - set(simulate)):  # the rest by the closed forms
        groups.setdefault(cases[k].group_key, []).append(k)
    for idx in groups.values():
        out[idx] = _closed_form([cases[k] for k in idx], _coef_for(cases[idx[0]].hw, coef))
    return pd.DataFrame(out, columns=[f"{m}_predicted" for m in ALL_METRICS])


def predict_case(row: pd.Series, coef: Coefficients | None = None, method: str = "simulate") -> dict[str, Any]:
    """Predicted whole-case output tokens/s, and TTFT/TPOT/ITL (ms) where the load mode defines
    them."""
    case = prepare_case(row)
    pred = predict_prepared([case], coef, method).iloc[0]
    return {m: (None if pd.isna(pred[f"{m}_predicted"]) else float(pred[f"{m}_predicted"])) for m in ALL_METRICS} | {
        "notes": case.notes
    }


def _measured(row: pd.Series, metric: str) -> float | None:
    """The row's measured ``metric``: its mean, else its median, else the value of unstated statistic."""
    if metric == "output_tok_s":
        return cell_number(row, "output_tok_s")
    base = metric.replace("_ms", "")
    for stat in ("mean", "median"):
        v = cell_number(row, f"{base}_{stat}_ms")
        if v is not None:
            return v
    return cell_number(row, f"{metric}_stat_unknown")


def measured_metrics(cases: pd.DataFrame) -> pd.DataFrame:
    """Measured output tokens/s, TTFT, TPOT and ITL (ms) per row: mean where given, else median,
    else the value whose statistic the source does not state."""
    return pd.DataFrame(
        {f"{m}_measured": [_measured(row, m) for _, row in cases.iterrows()] for m in ALL_METRICS}, dtype=float
    )


def validate(
    cases: pd.DataFrame,
    coef: Coefficients | dict[str, Coefficients] | None = None,
    method: str = "simulate",
    speed: dict[str, float] | None = None,
    by: str = "source_id",
    part: str = "compute",
    *,
    n_jobs: int | Runner | None = None,
    dask: Any = None,
    progress: bool = False,
) -> pd.DataFrame:
    """One row per case: measured and predicted metrics, their ratio, or the reason it cannot be
    predicted. ``speed``: a testbed speed factor per value of column ``by`` (``at_speed``; 1
    elsewhere). The simulated runs go to ``n_jobs`` processes (None: every core; 1: serially) or
    the Dask cluster ``dask`` (a ``distributed.Client`` or an address), with a progress bar when
    ``progress`` (``gpucap.parallel``); ``n_jobs`` may also be a ``Runner``."""
    prepared, errors = prepare_cases(cases)
    if speed:
        keys = testbed_keys(cases, by)
        ok = [pos for pos in range(len(cases)) if pos not in errors]
        prepared = [at_speed(c, speed.get(keys[pos], 1.0), part) for c, pos in zip(prepared, ok, strict=True)]
    run = as_runner(n_jobs, dask, progress)
    return compare(cases, prepared, errors, coef, method, run)


def compare(
    cases: pd.DataFrame,
    prepared: list[PreparedCase],
    errors: dict[int, str],
    coef: Coefficients | dict[str, Coefficients] | None = None,
    method: str = "simulate",
    run: Runner | None = None,
) -> pd.DataFrame:
    """``validate``'s table from cases already prepared (``prepare_cases``, in row order)."""
    ok = [pos for pos in range(len(cases)) if pos not in errors]
    pred = pd.DataFrame(np.nan, index=range(len(cases)), columns=[f"{m}_predicted" for m in ALL_METRICS])
    if prepared:
        pred.loc[ok] = predict_prepared(prepared, coef, method, run).to_numpy()
    keep = [
        k
        for k in ("case_id", "source_id", "model", "gpu", "engine", "num_gpus", "load_mode", "isl", "osl", "corrected")
        if k in cases.columns
    ]
    result = cases[keep].reset_index(drop=True).copy()
    result["error"] = [errors.get(pos) for pos in range(len(cases))]
    measured = measured_metrics(cases)
    for m in ALL_METRICS:
        result[f"{m}_measured"] = measured[f"{m}_measured"]
        result[f"{m}_predicted"] = pred[f"{m}_predicted"]
        result[f"{m}_ratio"] = result[f"{m}_predicted"] / result[f"{m}_measured"]
    notes = {c.case_id: c.notes for c in prepared}
    result["notes"] = [notes.get(str(cid), "") for cid in result["case_id"]]
    return result


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
    pred = validate(cases, coef, method="closed-form")
    rng = np.random.default_rng(seed)
    for metric, col in (("output_tok_s", "output_tok_s"), ("ttft_ms", "ttft_mean_ms"), ("tpot_ms", "tpot_mean_ms")):
        cases[col] = pred[f"{metric}_predicted"] * np.exp(rng.normal(0.0, noise, len(cases)))
    return cases
