"""``gpucap telemetry``: what a running engine reports (its ``/metrics`` scrapes and step log) read
into windows, its KV cache checked against gpucap's memory model, the coefficients refitted with
the last calibration as the prior, and what changed since.

    gpucap telemetry SCRAPES [--step-log LOG] --model M --gpu G [deployment options] [--history H]
    gpucap telemetry --scrape URL --every 5s --for 10m --scrape-to FOLDER   (sample first, then the same)
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Any

from gpucap.calibration.settings import FitSettings
from gpucap.cli.common import History, KvBudget, add_coefficients, add_json
from gpucap.cli.fields import add_options, values
from gpucap.config import SLO, Deployment, EngineConfig
from gpucap.options import option
from gpucap.types import LIMIT_STATISTICS
from gpucap.units import GiB


@dataclass(frozen=True)
class Sampling:
    """Sampling a running engine's ``/metrics`` first (``gpucap.telemetry.scrape``)."""

    scrape: str | None = option(None, metavar="URL", help="sample this /metrics URL first (--scrape-to)")
    scrape_to: str | None = option(None, help="folder the samples are written to (one file each, kept)")
    every: float = option(5.0, kind="duration", help="between samples (default 5s)")
    for_s: float = option(600.0, kind="duration", flag="--for", help="how long to sample (default 10m)")


@dataclass(frozen=True)
class TelemetryOptions:
    """``gpucap telemetry``'s own options: what it reads and how it cuts and simulates windows."""

    scrapes: str | None = option(
        None, flag="", nargs="?", help="a folder of /metrics scrapes, one scrape file, or a query_range JSON"
    )
    step_log: str | None = option(None, help="the server's log with --enable-logging-iteration-details")
    model_name: str | None = option(None, help="the model_name label to read (when the scrapes carry several)")
    window: float = option(300.0, kind="duration", help="window length (default 5m)")
    load: str = option(
        "poisson",
        choices=("poisson", "closed"),
        help="how to simulate a window: poisson arrivals at its rate (production traffic, default) or a closed loop "
        "at its requests in flight (a load test at fixed concurrency)",
    )
    engine_version: str | None = option(None, help="e.g. 0.32.0 (whether the host runs beside the GPU)")
    no_fit: bool = option(False, kind="switch", help="windows and memory check only")


def add_parser(sub: Any) -> None:
    t = sub.add_parser(
        "telemetry",
        help="windows of a running engine's /metrics, its step log, a memory check, a refit and what changed",
    )
    add_options(t, TelemetryOptions, ("scrapes",))
    add_options(t, Sampling)
    add_options(t, TelemetryOptions, ("step_log", "model_name", "window", "load"))
    add_options(
        t,
        Deployment,
        ("model", "gpu", "gpu_file", "num_gpus", "tp", "pp", "ep", "weight_dtype", "kv_dtype"),
        defaults={"model": None, "gpu": None},  # only the fit and the memory check need them
    )
    add_options(t, EngineConfig, ("engine",))
    add_options(t, TelemetryOptions, ("engine_version",))
    add_options(
        t,
        EngineConfig,
        ("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "block_size", "cuda_graphs"),
    )
    add_options(t, KvBudget)
    add_options(t, TelemetryOptions, ("no_fit",))
    add_options(
        t,
        FitSettings,
        ("free",),
        defaults={"free": None},
        helps={"free": "coefficients to fit, comma-separated (default: the telemetry set)"},
    )
    add_coefficients(t, "start from these coefficients (a calibration JSON)")
    add_options(
        t,
        History,
        helps={
            "history": "calibration history: its last entry is the prior; the fit is appended",
            "label": "a name for this fit in the history",
        },
    )
    add_options(t, SLO, choices={"statistic": LIMIT_STATISTICS})  # for the SLO-limited concurrency
    add_json(t, "the windows and the fit")


def deployment_row(a: argparse.Namespace) -> dict[str, Any]:
    """The deployment flags as a row of the cases schema (``gpucap.calibration.validate.case_hardware``)."""
    row: dict[str, Any] = {
        "model": a.model,
        "gpu": a.gpu,
        "num_gpus": a.num_gpus or a.tp * a.pp,
        "tp": a.tp,
        "pp": a.pp,
        "ep": a.ep,
        "engine": a.engine,
        "weight_dtype": a.weight_dtype,
        "kv_cache_dtype": a.kv_dtype,
        "case_id": "telemetry",
    }
    for name in ("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "block_size", "engine_version"):
        if getattr(a, name) is not None:
            row[name] = getattr(a, name)
    if not a.cuda_graphs:
        row["enforce_eager"] = True
    if a.kv_cache_memory:
        row["kv_cache_memory_gib"] = a.kv_cache_memory
    return row


def _hardware(row: dict[str, Any]) -> Any:
    """The deployment row as ``Hardware`` (``gpucap.calibration.validate.case_hardware``)."""
    import pandas as pd

    from gpucap.calibration.validate import case_hardware

    hw, _, _ = case_hardware(pd.Series(row))
    return hw


WINDOW_COLUMNS = {
    "start_s": "start",
    "duration_s": "s",
    "arrival_rate_per_s": "arrivals/s",
    "finished": "done",
    "prompt_tokens_mean": "prompt",
    "output_tokens_mean": "output",
    "running_little": "in engine (Little)",
    "running_sampled": "(sampled)",
    "steps_per_s": "steps/s",
    "tokens_per_step": "tokens/step",
    "preemptions": "preempt",
    "ttft_mean_s": "TTFT ms",
    "itl_mean_s": "ITL ms",
    "tpot_mean_s": "TPOT ms",
    "e2e_mean_s": "E2E s",
}


def format_windows(table: Any) -> str:
    """The windows as a text table (times from the first window's start; ms where the header says)."""
    if table.empty:
        return "no window with a finished request"
    t = table[list(WINDOW_COLUMNS)].copy()
    t["start_s"] = t["start_s"] - t["start_s"].iloc[0]
    for c in ("ttft_mean_s", "itl_mean_s", "tpot_mean_s"):
        t[c] = t[c] * 1e3
    t["steady"] = table["steady"].map({True: "steady", False: ""})
    t = t.rename(columns=WINDOW_COLUMNS)
    text = t.to_string(index=False, float_format=lambda v: f"{v:.3g}")
    why = [
        f"  window at +{s - table['start_s'].iloc[0]:.0f} s: {r}"
        for s, r in zip(table["start_s"], table["reasons"], strict=True)
        if r
    ]
    return text + ("\nnot steady:\n" + "\n".join(why) if why else "")


def run(a: argparse.Namespace) -> int:
    from gpucap.telemetry.scrapes import read_scrapes
    from gpucap.telemetry.windows import cut_windows

    if a.scrape:
        from gpucap.telemetry.scrape import scrape_to_folder

        if not a.scrape_to:
            raise ValueError("--scrape needs --scrape-to FOLDER: every sample is kept there")
        if a.scrapes:
            raise ValueError("give either a scrapes folder or --scrape URL, not both")
        files = scrape_to_folder(
            a.scrape,
            a.scrape_to,
            every_s=a.every,
            for_s=a.for_s,
            on_error=lambda m: print(f"scrape: {m}", file=sys.stderr),
        )
        print(f"{len(files)} scrapes of {a.scrape} in {a.scrape_to}")
        a.scrapes = a.scrape_to
    if not a.scrapes:
        raise ValueError("give a folder of scrapes (or a query_range JSON), or --scrape URL --scrape-to FOLDER")
    if a.gpu_file:
        from gpucap.catalog.gpus import add_gpu_file

        add_gpu_file(a.gpu_file)
    series = read_scrapes(a.scrapes, model_name=a.model_name)
    windows = cut_windows(series, a.window)
    table = windows.table()
    out: dict[str, Any] = {"series": {"engine": series.engine, "model_name": series.model_name, "notes": series.notes}}
    restarts = series.segments[-1]
    lines = [
        f"{series.engine} telemetry of {series.model_name or 'one model'}: "
        + "; ".join(series.notes)
        + (f"; {restarts} restart(s)" if restarts else ""),  # fmt: skip
        f"windows of {a.window:g} s: {len(windows.windows)} ({len(windows.steady)} steady), {len(windows.skipped)} skipped",
        format_windows(table),
    ]
    lines += [f"skipped: {s}" for s in windows.skipped]
    out["windows"] = json.loads(table.to_json(orient="records")) if not table.empty else []
    steps = None
    if a.step_log:
        from gpucap.telemetry.steplog import read_step_log

        steps = read_step_log(a.step_log)
        lines.append(f"step log {a.step_log}: {len(steps.real)} steps")
    if a.model and a.gpu:
        row = deployment_row(a)
        hw = _hardware(row)
        if series.engine == "vllm" and any(s.info for s in series.scrapes):
            from gpucap.telemetry.memcheck import memory_check

            check = memory_check(series, hw)
            lines += ["", "[[Memory]]", check.report()]
            out["memory"] = {
                "server_tokens": check.server_tokens,
                "stated_tokens": check.stated_tokens,
                "gpucap_tokens": check.gpucap_tokens,
                "difference_gib": check.difference_bytes / GiB,
                "explanation": check.explanation(),
            }
        if not a.no_fit:
            lines += ["", *_fit(a, row, hw, windows, steps, out)]
    elif not a.no_fit:
        lines.append("(give --model and --gpu for the memory check and the fit)")
    if a.json:
        print(json.dumps(out, indent=2, default=str))
    else:
        print("\n".join(lines))
    return 0


def _fit(
    a: argparse.Namespace, row: dict[str, Any], hw: Any, windows: Any, steps: Any, out: dict[str, Any]
) -> list[str]:
    """The telemetry fit, its windows, and what changed against the prior; appended to the history."""
    import pandas as pd

    from gpucap.calibration.fitlimits import limit_table
    from gpucap.calibration.limits import deployment_sweep
    from gpucap.calibration.telemetryfit import (
        TELEMETRY_FREE,
        fit_telemetry,
        prior_from_history,
        weak_prior,
        window_targets,
    )
    from gpucap.physics.coefficients import Coefficients

    start = Coefficients.resolve(a.coefficients, hw.engine.engine)
    free = a.free or tuple(TELEMETRY_FREE)
    if a.history:
        from gpucap.calibration.history import history_path, read_history

        entries = read_history(history_path(a.history))  # a history that does not read stops here
        prior = prior_from_history(a.history, start, free) if entries else weak_prior(start, free)
    else:
        prior = weak_prior(start, free)
    targets, skipped = window_targets(windows, row, a.load)
    span = (windows.windows[0].start_s, windows.windows[-1].end_s) if windows.windows else None
    tf = fit_telemetry(
        targets, start=start, free=free, prior=prior, steps=steps, step_hw=hw, skipped=skipped, span=span
    )
    lines = [tf.report(), "", "[[Windows: measured / at the prior / fitted]]"]
    lines.append(
        tf.windows.drop(columns=["start_s", "end_s"]).to_string(index=False, float_format=lambda v: f"{v:.3g}")
    )
    isl = float(pd.Series([t.case.input_len for t in targets]).mean()) if targets else float("nan")
    osl = float(pd.Series([t.case.output_len for t in targets]).mean()) if targets else float("nan")
    slo = SLO(**values(a, SLO))
    if targets:
        sweep_row = pd.Series(dict(row, isl=isl, osl=osl, front_end="http", length_dist="dataset"))
        sweep = deployment_sweep(sweep_row, slo, top=targets[0].case.max_running)
        lim = limit_table([sweep], slo, prior.mean, tf.fit.coefficients, tf.fit.free, tf.fit.covariance).iloc[0]
        lines += [
            "",
            f"[[What changed since {prior.source}]]",
            *(
                f"    {n}: {getattr(prior.mean, n):.4g} -> {getattr(tf.fit.coefficients, n):.4g} "
                f"+/- {tf.fit.stderr[n]:.2g}" + ("  (moved beyond its uncertainty)" if _moved(tf, prior, n) else "")
                for n in tf.fit.free
            ),
            f"    SLO-limited concurrency ({slo}; {isl:.0f} / {osl:.0f} tokens): {lim['default']:.3g} then, "
            f"{lim['fitted']:.3g} [{lim['fitted_low']:.3g}, {lim['fitted_high']:.3g}] now",
        ]
        tf.fit.limits = pd.DataFrame([lim])
        tf.fit.provenance["slo"] = str(slo)
    out["fit"] = tf.fit.to_dict()
    if a.history:
        from gpucap.calibration.history import append_history

        path = append_history(tf.fit, a.history, label=a.label)
        lines.append(f"appended to {path} (source: telemetry)")
    return lines


def _moved(tf: Any, prior: Any, name: str) -> bool:
    """Whether a coefficient moved by more than 1.96 x the quadrature sum of the prior's width and
    the fit's standard error."""
    import math

    change = getattr(tf.fit.coefficients, name) - getattr(prior.mean, name)
    band = 1.96 * math.hypot(prior.sd.get(name, 0.0), tf.fit.stderr.get(name, 0.0))
    return math.isfinite(band) and abs(change) > band
