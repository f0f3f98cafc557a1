"""A scrape series cut into windows of time, and what each window says about the load and the
latencies.

A window runs from one scrape to the last scrape at most ``window_s`` later (never across a
restart); every quantity is a difference of counters between its two ends, so it is exact where a
scraped percentile would not be:

- completions ``n = d finished``; completion rate ``n / T``; requests in the system at each end
  ``N = running + waiting`` (gauges); arrivals ``n + N_end - N_start`` and their rate;
- mean prompt and output lengths ``d sum / d count`` of the length histograms, and their bucket
  counts (the shape); prompt tokens computed and found in the prefix cache;
- requests in the engine by Little's law, ``L = d(sum of the inference time) / T`` (each finished
  request contributes the time it ran), and in the system ``d(sum of E2E) / T``; beside them the
  running gauge averaged over the window's scrapes, which samples a batch that fills and drains
  between scrapes (shown, not trusted);
- engine steps per second ``d count / T`` and tokens per step ``d sum / d count`` of the step
  tokens histogram; preemptions;
- the outcome means ``d sum / d count`` of TTFT, ITL, TPOT, E2E and queue time, with their bucket
  counts (``Window.buckets``), never a percentile read off a bucket;
- where the HTTP server times its requests, their mean duration ``http_mean_s`` and the front end's
  time outside the engine, ``front_end_s = http_mean_s - e2e_mean_s`` (the request's parsing and
  tokenizing before the engine sees it, the response's end after).

A window is *steady* when nothing restarted in it, at least ``MIN_FINISHED`` requests finished,
its arrival rate did not change between its halves (their counts differ by less than
``RATE_Z`` standard deviations of a Poisson count), and Little's occupancy and the sampled gauge
agree: within ``OCCUPANCY_AGREEMENT`` of the larger, one request, or ``RATE_Z`` standard errors of
the gauge's mean over its samples (a closed loop of fixed lengths fills and drains its batch in
waves, so its samples scatter widely); ``reasons`` says why a window is not.
A window with no finished request is skipped, with its reason in ``Windows.skipped``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gpucap.telemetry.scrapes import Scrape, Series

DEFAULT_WINDOW_S = 300.0
MIN_FINISHED = 5
RATE_Z = 3.0
OCCUPANCY_AGREEMENT = 0.25
OUTCOMES = ("ttft", "itl", "tpot", "e2e", "queue", "prefill", "decode", "inference")
LENGTHS = ("prompt_len", "output_len")


@dataclass(frozen=True)
class Window:
    """One window: its span, the table row (``row``: every quantity of the module docstring) and
    the bucket counts of its histograms (``buckets[name] = (upper bounds, counts per bucket)``)."""

    start_s: float
    end_s: float
    row: dict[str, float | str | bool]
    buckets: dict[str, tuple[np.ndarray, np.ndarray]]


@dataclass
class Windows:
    """The windows of a series (``table()``: one row each) and the windows skipped, with why."""

    windows: list[Window]
    skipped: list[str] = field(default_factory=list)
    series: Series | None = None

    def table(self) -> pd.DataFrame:
        return pd.DataFrame([w.row for w in self.windows])

    @property
    def steady(self) -> list[Window]:
        return [w for w in self.windows if w.row["steady"]]


def _d(a: Scrape, b: Scrape, key: str) -> float:
    """``b - a`` of one value (NaN when either scrape lacks it)."""
    return b.values.get(key, math.nan) - a.values.get(key, math.nan)


def _mean(a: Scrape, b: Scrape, name: str) -> float:
    """``d sum / d count`` of a histogram between two scrapes (NaN with no new observation)."""
    n = _d(a, b, f"{name}_count")
    return _d(a, b, f"{name}_sum") / n if n > 0 else math.nan


def bucket_counts(a: Scrape, b: Scrape, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(upper bounds, observations per bucket) of a histogram between two scrapes: the cumulative
    counts' differences, bucket by bucket (the server's own boundaries)."""
    cb, ca = b.buckets.get(name, {}), a.buckets.get(name, {})
    bounds = np.array(sorted(cb), dtype=float)
    cum = np.array([cb[u] - ca.get(u, 0.0) for u in bounds])
    return bounds, np.diff(np.concatenate([[0.0], cum])) if cum.size else cum


def _in_system(s: Scrape) -> float:
    return s.values.get("running", math.nan) + s.values.get("waiting", 0.0)


def _window(series: Series, i: int, j: int) -> Window:
    """The window from scrape ``i`` to scrape ``j`` (same segment)."""
    sc = series.scrapes
    a, b = sc[i], sc[j]
    span = b.time_s - a.time_s
    finished = _d(a, b, "finished")
    n0, n1 = _in_system(a), _in_system(b)
    arrivals = finished + n1 - n0 if math.isfinite(n1 - n0) else finished
    running = np.array([sc[k].values.get("running", math.nan) for k in range(i, j + 1)])
    row: dict[str, float | str | bool] = {
        "start_s": a.time_s,
        "end_s": b.time_s,
        "duration_s": span,
        "scrapes": j - i + 1,
        "finished": finished,
        "completion_rate_per_s": finished / span,
        "arrivals": arrivals,
        "arrival_rate_per_s": arrivals / span,
        "in_system_start": n0,
        "in_system_end": n1,
        "prompt_tokens_mean": _mean(a, b, "prompt_len"),
        "output_tokens_mean": _mean(a, b, "output_len"),
        "prompt_tokens_computed": _d(a, b, "prompt_tokens") - max(_d(a, b, "cached_prompt_tokens"), 0.0),
        "prompt_tokens_cached": _d(a, b, "cached_prompt_tokens"),
        "generation_tokens_per_s": _d(a, b, "generation_tokens") / span,
        "running_little": _d(a, b, "inference_sum") / span,
        "in_system_little": _d(a, b, "e2e_sum") / span,
        "running_sampled": float(np.mean(running)),
        "running_sampled_se": float(np.std(running, ddof=1) / math.sqrt(running.size))
        if running.size > 1
        else math.inf,
        "steps_per_s": _d(a, b, "step_tokens_count") / span,
        "tokens_per_step": _mean(a, b, "step_tokens"),
        "preemptions": _d(a, b, "preemptions"),
        "kv_usage_mean": float(np.mean([sc[k].values.get("kv_usage", math.nan) for k in range(i, j + 1)])),
    }
    for name in OUTCOMES:
        row[f"{name}_mean_s"] = _mean(a, b, name)
        row[f"{name}_count"] = _d(a, b, f"{name}_count")
    row["http_mean_s"] = _mean(a, b, "http")
    row["front_end_s"] = float(row["http_mean_s"]) - float(row["e2e_mean_s"])
    buckets = {name: bucket_counts(a, b, name) for name in (*OUTCOMES, *LENGTHS) if name in b.buckets}
    reasons = _unsteady(series, i, j, row)
    row["steady"] = not reasons
    row["reasons"] = "; ".join(reasons)
    return Window(a.time_s, b.time_s, row, buckets)


def _unsteady(series: Series, i: int, j: int, row: dict[str, float | str | bool]) -> list[str]:
    """Why the window from scrape i to j is not steady (module docstring); empty if it is."""
    reasons = []
    finished = float(row["finished"])
    if finished < MIN_FINISHED:
        reasons.append(f"{finished:.0f} requests finished (fewer than {MIN_FINISHED})")
    sc = series.scrapes
    mid = i + (j - i) // 2
    if j - i >= 2:
        c1 = _d(sc[i], sc[mid], "finished") + _in_system(sc[mid]) - _in_system(sc[i])
        c2 = _d(sc[mid], sc[j], "finished") + _in_system(sc[j]) - _in_system(sc[mid])
        t1, t2 = sc[mid].time_s - sc[i].time_s, sc[j].time_s - sc[mid].time_s
        rate = (c1 + c2) / (t1 + t2)
        expected1 = rate * t1
        var = rate * (t1 + t2) * (t1 / (t1 + t2)) * (t2 / (t1 + t2))  # binomial split of a Poisson count
        if var > 0 and abs(c1 - expected1) / math.sqrt(var) > RATE_Z:
            reasons.append(f"arrival rate changed within the window ({c1 / t1:.3g}/s then {c2 / t2:.3g}/s)")
    little, sampled, se = (float(row[k]) for k in ("running_little", "running_sampled", "running_sampled_se"))
    if math.isfinite(little) and math.isfinite(sampled):
        if abs(little - sampled) > max(OCCUPANCY_AGREEMENT * max(little, sampled), 1.0, RATE_Z * se):
            reasons.append(
                f"requests in the engine: {little:.3g} by Little's law, {sampled:.3g} sampled (the batch changed "
                "between scrapes)"
            )
    return reasons


def cut_windows(series: Series, window_s: float = DEFAULT_WINDOW_S) -> Windows:
    """Consecutive windows of at most ``window_s`` seconds over ``series`` (module docstring);
    a restart ends a window early, and a window without a finished request is skipped."""
    if not (math.isfinite(window_s) and window_s > 0):
        raise ValueError(f"window length must be a positive number of seconds, got {window_s!r}")
    sc, seg = series.scrapes, series.segments
    out, skipped = [], []
    i = 0
    while i < len(sc) - 1:
        j = i
        while j + 1 < len(sc) and seg[j + 1] == seg[i] and sc[j + 1].time_s - sc[i].time_s <= window_s + 1e-6:
            j += 1
        if j == i:  # the next scrape is a restart, or further than one window away
            why = "the server restarted" if i + 1 < len(sc) and seg[i + 1] != seg[i] else "no scrape within a window"
            skipped.append(f"{sc[i].path} -> {sc[i + 1].path}: {why}")
            i += 1
            continue
        w = _window(series, i, j)
        if float(w.row["finished"]) > 0:
            out.append(w)
        else:
            skipped.append(f"{sc[i].path} -> {sc[j].path}: no request finished")
        i = j
    return Windows(out, skipped, series)
