"""Ranges on every answer: how far measured values have fallen from gpucap's predictions.

A prediction ``p`` of a metric carries the range ``[p x f_low, p x f_high]``, where ``f_low`` and
``f_high`` are the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of ``measured /
predicted`` over published runs like it (same engine, load mode and model class: dense or MoE;
a coarser group where too few runs share all three). The quantiles are taken over the log
ratios, with linear interpolation between order statistics (numpy's default).

The shipped table (``data/ranges.csv``) is built by ``benchmarks/ranges.py`` from the default
coefficients' errors on ``measured-public.csv``, which were not fitted to it; its coverage is
checked leave-one-source-out: each source's runs against a table built without them. Errors
cluster by testbed, so a group needs runs from two sources or more and each source weighs the
same in its quantiles (``band_quantiles``). TPOT's band also takes median ITL from runs that
report no TPOT (both are the decode step's time per token).
After ``calibrate``, the saved coefficients carry the fit's own residual quantiles
(``FitResult.to_dict()["ranges"]``), and an estimate made with that file takes them instead.

The SLO-limited concurrency gets its range from the latency factors: a measured latency ``f x``
the predicted one meets the SLO where the predicted one meets ``SLO / f``, so the concurrency
range is the SLO search repeated with both SLOs divided by ``f_high`` (low end) and ``f_low``
(high end) (``gpucap.estimate``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from io import StringIO
from pathlib import Path

import numpy as np
import pandas as pd

from gpucap.catalog.gpus import DATA_DIR
from gpucap.catalog.models import ModelSpec
from gpucap.config import SLO
from gpucap.textfiles import read_json, read_text

RANGES_FILE = DATA_DIR / "ranges.csv"
LEVEL = 0.8  # the range holds 80% of measured values, when the past is a guide
METRICS = ("output_tok_s", "ttft_ms", "tpot_ms")
MIN_RUNS = 8  # fewest runs a group needs to have its own quantiles
# ... and fewest sources: one lab's scatter says nothing of how far another lab's runs fall
MIN_SOURCES = 2
# Lookup from the most specific group to all runs; "" matches any value.
GROUP_KEYS = (("engine", "load_mode", "model_class"), ("engine", "load_mode"), ("load_mode",), ())
COLUMNS = ("metric", "engine", "load_mode", "model_class", "runs", "sources", "f_low", "f_high", "level")
MODEL_CLASSES = ("dense", "moe")


@dataclass(frozen=True)
class Band:
    """``measured / predicted`` factors holding ``level`` of past runs of one group."""

    metric: str
    f_low: float
    f_high: float
    runs: int
    group: str  # e.g. "vllm, fixed-concurrency, dense", or "all runs"
    level: float = LEVEL
    basis: str = "the published runs in data/ranges.csv"

    def apply(self, value: float) -> tuple[float, float]:
        return value * self.f_low, value * self.f_high


@dataclass(frozen=True)
class Range:
    """A predicted value with its range: ``low <= measured <= high`` for ``level`` of past runs."""

    value: float
    low: float
    high: float
    band: Band

    @property
    def level(self) -> float:
        return self.band.level

    def text(self, fmt: str = "{:.3g}", scale: float = 1.0) -> str:
        """'80% range a-b'; around a recommendation of 0, what its top means."""
        lo, hi = fmt.format(self.low * scale), fmt.format(self.high * scale)
        if self.value == 0 and self.high > 0:
            return (
                f"{self.level:.0%} range {lo}-{hi}: as predicted none meets the SLOs; with latencies at the fast "
                f"end of the measured spread, up to {hi} would"
            )
        return f"{self.level:.0%} range {lo}-{hi}"


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """Quantile ``q`` of ``values`` where each carries ``weights``: the inverse of the weighted
    empirical distribution, with each value at the middle of its weight
    (``F_i = (cumsum(w)_i - w_i / 2) / sum(w)``), linear in between; equal weights give
    ``np.quantile(..., method="hazen")``."""
    order = np.argsort(values)
    v, w = values[order], weights[order]
    f = (np.cumsum(w) - w / 2) / w.sum()
    return float(np.interp(q, f, v))


def range_note(ranges: dict[str, Range], key: str, fmt: str, scale: float = 1.0) -> str:
    """' (80% range a-b)' for ``key`` of an estimate's ranges when it has one, else ''."""
    return f" ({ranges[key].text(fmt, scale)})" if key in ranges else ""


def band_quantiles(
    log_ratios: Iterable[float], level: float = LEVEL, sources: Iterable[str] | None = None
) -> tuple[float, float]:
    """``(f_low, f_high)``: ``exp`` of the ``(1 -/+ level) / 2`` quantiles of ``log(measured /
    predicted)``. With ``sources`` each source weighs the same in total (each of its n runs
    ``1 / n``): errors cluster by testbed, and a new testbed is one more source, not one more run."""
    r = np.asarray(list(log_ratios), dtype=float)
    src = np.asarray(list(sources), dtype=object) if sources is not None else np.zeros(r.size, dtype=object)
    keep = np.isfinite(r)
    r, src = r[keep], src[keep]
    if r.size == 0:
        raise ValueError("no finite log ratio to take quantiles of")
    _, inverse, counts = np.unique(src.astype(str), return_inverse=True, return_counts=True)
    w = 1.0 / counts[inverse]
    lo, hi = (weighted_quantile(r, w, q) for q in ((1 - level) / 2, (1 + level) / 2))
    return float(np.exp(lo)), float(np.exp(hi))


def build_table(runs: pd.DataFrame, level: float = LEVEL, min_runs: int = MIN_RUNS) -> pd.DataFrame:
    """The band of every group with at least ``min_runs`` runs, per metric.

    ``runs`` has one row per run: ``source_id``, ``engine``, ``load_mode``, ``model_class`` and,
    per metric m, ``m_measured`` and ``m_predicted``. Groups are those of ``GROUP_KEYS`` with runs
    from ``MIN_SOURCES`` sources or more, each source weighing the same (``band_quantiles``); a
    column a group does not use is "" in the table.
    """
    rows = []
    for metric in METRICS:
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.log(runs[f"{metric}_measured"].astype(float) / runs[f"{metric}_predicted"].astype(float))
        data = runs.assign(_r=r)[np.isfinite(r)]
        for keys in GROUP_KEYS:
            groups = data.groupby(list(keys)) if keys else [((), data)]
            for key, g in groups:
                if len(g) < min_runs or g["source_id"].nunique() < MIN_SOURCES:
                    continue
                key = key if isinstance(key, tuple) else (key,)
                f_low, f_high = band_quantiles(g["_r"], level, g["source_id"].astype(str))
                named = dict(zip(keys, key, strict=True))
                rows.append(
                    {
                        "metric": metric,
                        **{k: named.get(k, "") for k in ("engine", "load_mode", "model_class")},
                        "runs": len(g),
                        "sources": g["source_id"].nunique(),
                        "f_low": f_low,
                        "f_high": f_high,
                        "level": level,
                    }
                )
    return pd.DataFrame(rows, columns=list(COLUMNS))


@lru_cache(maxsize=8)
def _shipped(path: str) -> pd.DataFrame:
    return read_table(path)


@lru_cache(maxsize=256)
def published_bands(engine: str, load_mode: str, model_class: str, path: str | None = None) -> dict[str, Band]:
    """Per metric, the band of published runs most like these (``find_band`` on the shipped
    table, or the table at ``path``); empty when there is no table."""
    where = Path(path or RANGES_FILE)
    if not where.exists():  # a data folder of one's own (GPUCAP_DATA) without a ranges table
        return {}
    table = _shipped(str(where))
    out = {}
    for metric in METRICS:
        band = find_band(table, metric, engine=engine, load_mode=load_mode, model_class=model_class)
        if band is not None:
            out[metric] = band
    return out


def read_table(path: str | Path | None = None) -> pd.DataFrame:
    """The bands table (``data/ranges.csv`` by default), checked column by column."""
    path = Path(path or RANGES_FILE)
    try:
        text = read_text(path, "ranges table")
    except FileNotFoundError:
        raise ValueError(f"ranges table {path} does not exist; build it with benchmarks/ranges.py") from None
    table = pd.read_csv(StringIO(text), keep_default_na=False)
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"ranges table {path}: missing column(s) {', '.join(missing)}")
    for col in ("runs", "sources", "f_low", "f_high", "level"):
        values = pd.to_numeric(table[col], errors="coerce")
        bad = table[~np.isfinite(values) | (values <= 0)]
        if len(bad):
            raise ValueError(
                f"ranges table {path}: {col} on line {bad.index[0] + 2} is {bad[col].iloc[0]!r}, not a positive number"
            )
        table[col] = values
    if (table["f_low"] > table["f_high"]).any():
        line = int(np.flatnonzero(table["f_low"] > table["f_high"])[0]) + 2
        raise ValueError(f"ranges table {path}: f_low exceeds f_high on line {line}")
    return table


def _group_name(row: pd.Series) -> str:
    parts = [str(row[k]) for k in ("engine", "load_mode", "model_class") if row[k]]
    return ", ".join(parts) if parts else "all runs"


def find_band(
    table: pd.DataFrame,
    metric: str,
    *,
    engine: str,
    load_mode: str,
    model_class: str,
    basis: str = "the published runs in data/ranges.csv",
) -> Band | None:
    """The band of the most specific group (``GROUP_KEYS`` order) that matches; None when the
    table has no row for ``metric``."""
    want = {"engine": engine, "load_mode": load_mode, "model_class": model_class}
    rows = table[table["metric"] == metric]
    for keys in GROUP_KEYS:
        hit = rows
        for k in ("engine", "load_mode", "model_class"):
            hit = hit[hit[k] == (want[k] if k in keys else "")]
        if len(hit):
            row = hit.iloc[0]
            return Band(
                metric,
                float(row["f_low"]),
                float(row["f_high"]),
                int(row["runs"]),
                _group_name(row),
                float(row["level"]),
            )
    return None


def fit_bands(log_ratios: pd.DataFrame, level: float = LEVEL) -> dict[str, dict[str, float]]:
    """A calibration's own bands: per metric column of ``log(measured / predicted)`` with the
    fitted coefficients, its quantile factors and run count (metrics with fewer than 3 runs are
    left out: no range is better than one from two points)."""
    out = {}
    for metric in log_ratios.columns:
        r = log_ratios[metric].to_numpy(dtype=float)
        r = r[np.isfinite(r)]
        if r.size >= 3:
            f_low, f_high = band_quantiles(r, level)
            out[str(metric)] = {"f_low": f_low, "f_high": f_high, "runs": int(r.size), "level": level}
    return out


def bands_from_coefficients(path: str | Path) -> dict[str, Band]:
    """The bands a calibration saved with its coefficients (``"ranges"``); empty when the file
    has none (a hand-written coefficients file)."""
    data = read_json(path, "coefficients file", 1 << 20)
    saved = data.get("ranges") if isinstance(data, dict) else None
    if not isinstance(saved, dict):
        return {}
    runs = data.get("statistics", {}).get("runs", "?") if isinstance(data.get("statistics"), dict) else "?"
    out = {}
    for metric, b in saved.items():
        try:
            f_low, f_high, n, level = (float(b[k]) for k in ("f_low", "f_high", "runs", "level"))
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                f"coefficients file {path}: ranges.{metric} needs numbers f_low, f_high, runs and level"
            ) from None
        if not (0 < f_low <= f_high and math.isfinite(f_high) and 0 < level < 1):
            raise ValueError(f"coefficients file {path}: ranges.{metric} has f_low {f_low:g}, f_high {f_high:g}")
        out[metric] = Band(metric, f_low, f_high, int(n), "the fitted runs", level, f"the calibration's {runs} runs")
    return out


def coverage(runs: pd.DataFrame, level: float = LEVEL, min_runs: int = MIN_RUNS) -> pd.DataFrame:
    """Leave-one-source-out coverage: each source's runs checked against the bands built from
    every other source's runs. One row per (source, metric): runs checked, share inside."""
    rows = []
    for source in sorted(runs["source_id"].astype(str).unique()):
        held = runs[runs["source_id"].astype(str) == source]
        table = build_table(runs[runs["source_id"].astype(str) != source], level, min_runs)
        for metric in METRICS:
            inside, n = 0, 0
            for _, run in held.iterrows():
                m, p = float(run[f"{metric}_measured"]), float(run[f"{metric}_predicted"])
                if not (math.isfinite(m) and math.isfinite(p) and m > 0 and p > 0):
                    continue
                band = find_band(
                    table,
                    metric,
                    engine=str(run["engine"]),
                    load_mode=str(run["load_mode"]),
                    model_class=str(run["model_class"]),
                )
                if band is None:
                    continue
                lo, hi = band.apply(p)
                n += 1
                inside += lo <= m <= hi
            if n:
                rows.append({"source_id": source, "metric": metric, "runs": n, "inside": inside})
    return pd.DataFrame(rows, columns=["source_id", "metric", "runs", "inside"])


def model_class(spec: ModelSpec) -> str:
    """ "moe" or "dense": the model classes of ``gpucap.calibration.ranges``."""
    return "moe" if spec.is_moe else "dense"


def range_slos(slo: SLO, bands: dict[str, Band]) -> tuple[SLO, SLO] | None:
    """The SLOs whose limits are the ends of the SLO-limited concurrency's range: the largest
    concurrency whose predicted latencies times ``f_high`` (low end) or ``f_low`` (high end) of
    their bands still meet both SLOs is the SLO search's answer with each SLO divided by its
    factor. None without both latency bands."""
    if "ttft_ms" not in bands or "tpot_ms" not in bands:
        return None
    t, d = bands["ttft_ms"], bands["tpot_ms"]

    def scaled(f_ttft: float, f_tpot: float) -> SLO:
        return SLO(ttft_s=slo.ttft_s / f_ttft, tpot_s=slo.tpot_s / f_tpot, statistic=slo.statistic)

    return scaled(t.f_high, d.f_high), scaled(t.f_low, d.f_low)


def answer_ranges(
    bands: dict[str, Band],
    recommended: int,
    concurrency: tuple[float, float] | None,
    *,
    output_tokens_per_s: float,
    ttft_s: float,
    tpot_s: float,
    saturation: tuple[float, Band | None],
) -> dict[str, Range]:
    """Each answer with its range: ``value x (f_low, f_high)`` of its metric's band; the
    concurrency's from ``slo_concurrency``, named after the TTFT band it comes from."""
    out: dict[str, Range] = {}
    for key, value, metric in (
        ("output_tokens_per_s", output_tokens_per_s, "output_tok_s"),
        ("ttft_s", ttft_s, "ttft_ms"),
        ("tpot_s", tpot_s, "tpot_ms"),
    ):
        band = bands.get(metric)
        if band is not None and np.isfinite(value):
            out[key] = Range(value, *band.apply(value), band)
    sat_value, sat_band = saturation
    if sat_band is not None and np.isfinite(sat_value):
        out["saturation_output_tokens_per_s"] = Range(sat_value, *sat_band.apply(sat_value), sat_band)
    if concurrency is not None:
        low, high = concurrency
        t, d = bands["ttft_ms"], bands["tpot_ms"]
        band = Band(
            "concurrency",
            low / max(recommended, 1),
            high / max(recommended, 1),
            min(t.runs, d.runs),
            f"TTFT: {t.group}; TPOT: {d.group}",
            t.level,
            t.basis,
        )
        out["recommended_concurrency"] = Range(float(recommended), float(np.floor(low)), float(np.floor(high)), band)
    return out
