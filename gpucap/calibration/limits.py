"""SLO-limited concurrency (or request rate) as a calibration target.

A *sweep* is a set of runs of one configuration (model, hardware, parallelism, formats, engine,
lengths) at several load levels: concurrencies of a closed loop, or request rates of an open
loop. Its *measured limit* is where the chosen statistic of TTFT or TPOT first crosses its SLO,
interpolated linearly between the two runs that bracket it (``gpucap.calibration.loadtests.measured_limit``).
Its *predicted limit* is found the same way on the model's predictions over a fine grid of load
levels around the measured ones, so the two are comparable and the predicted one moves
continuously with the coefficients (what ``scipy.optimize.least_squares`` needs).

Predicted limits use the closed forms (``gpucap.calibration.validate.predict_prepared`` with
``method="closed-form"``, the same machinery as ``gpucap.estimate``): they predict means, so the
limit targets compare means or medians.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpucap.calibration.cases import PreparedCase
from gpucap.calibration.loadtests import MeasuredLimit, crossing, measured_limit
from gpucap.calibration.validate import predict_prepared, prepare_case
from gpucap.config import SLO
from gpucap.physics.coefficients import Coefficients
from gpucap.types import LIMIT_STATISTICS

SWEEP_X = {"fixed-concurrency": "concurrency", "poisson": "request_rate"}
# Columns that must agree for runs to belong to one sweep (those present in the cases).
CONFIG_COLUMNS = (
    "source_id",
    "model",
    "gpu",
    "num_gpus",
    "tp",
    "pp",
    "ep",
    "attn_dp",
    "engine",
    "engine_version",
    "weight_dtype",
    "kv_cache_dtype",
    "length_dist",
    "range_ratio",
    "max_num_seqs",
    "max_num_batched_tokens",
)
# Mean lengths within this relative distance are one length setting (random lengths make each
# run's measured means differ by a few percent).
LENGTH_TOLERANCE = 0.15
GRID_POINTS = 48  # predicted-limit grid, geometric between the ends below
GRID_BELOW, GRID_ABOVE = 4.0, 4.0  # grid from lowest load / 4 to highest load x 4


def check_limit_slo(slo: SLO) -> SLO:
    """``slo`` when its statistic is one a limit can be fitted at: the closed forms predict
    means (and medians where they are read as such), not tails."""
    if slo.statistic not in LIMIT_STATISTICS:
        raise ValueError(
            f"limits as fit targets compare {' or '.join(LIMIT_STATISTICS)} (the closed forms predict means), "
            f"got stat {slo.statistic!r}"
        )
    return slo


@dataclass(frozen=True)
class Sweep:
    """One configuration's runs at several load levels and the limit they measured."""

    label: str
    x: str  # "concurrency" or "request_rate"
    positions: tuple[int, ...]  # row positions in the cases frame, ordered by load
    loads: tuple[float, ...]
    measured: MeasuredLimit
    grid: tuple[PreparedCase, ...]  # the configuration at GRID_POINTS loads, for the prediction
    grid_loads: tuple[float, ...]

    @property
    def unit(self) -> str:
        return "requests in flight" if self.x == "concurrency" else "requests/s"


def _length_groups(values: np.ndarray) -> np.ndarray:
    """Cluster labels: sorted values start a new cluster beyond LENGTH_TOLERANCE of its first."""
    order = np.argsort(values)
    labels = np.empty(len(values), dtype=int)
    label, first = -1, None
    for k in order:
        v = values[k]
        if first is None or not np.isfinite(v) or abs(v - first) > LENGTH_TOLERANCE * max(abs(first), 1e-9):
            label, first = label + 1, v
        labels[k] = label
    return labels


def _as_runs(cases: pd.DataFrame, x: str, stat: str) -> pd.DataFrame:
    """The sweep's measured metrics in the column names ``measured_limit`` reads (seconds)."""
    out = pd.DataFrame({x: pd.to_numeric(cases[x], errors="coerce")})
    for metric in ("ttft", "tpot", "itl"):
        col = f"{metric}_{stat}_ms"
        out[f"{metric}_{stat}_s"] = pd.to_numeric(cases[col], errors="coerce") / 1e3 if col in cases else np.nan
    return out


SPIKE_FACTOR = 10.0  # a run this many times above (or below) both neighbours' latency is not the sweep's


def _without_spikes(group: pd.DataFrame, x: str, stat: str) -> tuple[pd.DataFrame, list[str]]:
    """The sweep's runs (ordered by load) less the ones whose TTFT or TPOT at ``stat`` is more
    than SPIKE_FACTOR times, or less than 1 / SPIKE_FACTOR of, both neighbours': latency moves
    with load steadily (it may rise steeply past saturation, but then it stays up), so a run
    that jumps and comes back is a broken run (a cold start, a stalled client), not the load.
    One line for each run left out, naming it and the figures."""
    if len(group) < 3:
        return group, []
    keep = np.ones(len(group), dtype=bool)
    lines = []
    loads = group["_x"].to_numpy(float)
    for metric in ("ttft", "tpot"):
        col = f"{metric}_{stat}_ms"
        if col not in group:
            continue
        v = pd.to_numeric(group[col], errors="coerce").to_numpy(float)
        for k in range(1, len(v) - 1):
            lo, mid, hi = v[k - 1], v[k], v[k + 1]
            if not (np.isfinite([lo, mid, hi]).all() and min(lo, mid, hi) > 0) or not keep[k]:
                continue
            if mid > SPIKE_FACTOR * max(lo, hi) or mid < min(lo, hi) / SPIKE_FACTOR:
                keep[k] = False
                lines.append(
                    f"the run at {x.replace('_', ' ')} {loads[k]:g} is left out: its {stat} {metric.upper()} "
                    f"{mid:.4g} ms is over {SPIKE_FACTOR:g}x off both neighbours' ({lo:.4g} and {hi:.4g} ms); check that run"
                )
    return group[keep], lines


def _label(row: pd.Series, x: str) -> str:
    path = [p for p in str(row.get("model", "?")).split("/") if p and p != "config.json"]
    parts = [path[-1] if path else "?"]
    gpus = row.get("num_gpus")
    parts.append(f"{int(gpus) if pd.notna(gpus) else '?'} x {row.get('gpu', '?')}")
    for name in ("tp", "pp", "ep"):
        v = row.get(name)
        if pd.notna(v) and float(v) > 1:
            parts.append(f"{name}{int(v)}")
    parts.append(str(row.get("engine", "?")))
    parts.append(f"{float(row['isl']):.0f}/{float(row['osl']):.0f} tokens")
    parts.append("closed loop" if x == "concurrency" else "Poisson")
    return ", ".join(parts)


def _grid(row: pd.Series, x: str, loads: np.ndarray, stat: str) -> tuple[tuple[PreparedCase, ...], np.ndarray]:
    lo, hi = float(loads.min()) / GRID_BELOW, float(loads.max()) * GRID_ABOVE
    if x == "concurrency":
        lo = max(lo, 1.0)
    values = np.unique(np.concatenate([np.geomspace(lo, hi, GRID_POINTS), loads]))
    template = row.copy()
    for metric in ("ttft", "tpot", "itl"):
        for s in ("mean", "median", "p99"):
            template[f"{metric}_{s}_ms"] = np.nan
    template[f"ttft_{stat}_ms"] = template[f"tpot_{stat}_ms"] = 1.0  # the statistic the grid reports
    grid = []
    for v in values:
        r = template.copy()
        r[x] = v
        if x == "concurrency":
            r["request_rate"] = np.inf
        grid.append(prepare_case(r))
    return tuple(grid), values


def sweep_labels(cases: pd.DataFrame) -> list[str]:
    """The sweep each row belongs to: rows that agree on ``CONFIG_COLUMNS``, the load mode and
    the prompt and output lengths (within LENGTH_TOLERANCE) and differ only in the load level.
    A run at one load level is a sweep of its own."""
    if cases.empty:
        return []
    df = cases.reset_index(drop=True)
    parts = [[str(v) for v in df[c]] for c in (*CONFIG_COLUMNS, "load_mode") if c in df]
    for col in ("isl", "osl"):
        if col in df:
            parts.append([str(g) for g in _length_groups(pd.to_numeric(df[col], errors="coerce").to_numpy(float))])
    return [" / ".join(row) for row in zip(*parts, strict=True)]


def find_sweeps(cases: pd.DataFrame, slo: SLO) -> tuple[list[Sweep], list[str]]:
    """The sweeps in ``cases`` (the schema of measured-public.csv / ``cases_from_runs``) with the
    limit each measured at ``slo``, and one line for every group of runs that is not a sweep (one
    load level) or whose limit cannot be found. ``slo``'s statistic: mean or median
    (``check_limit_slo``)."""
    check_limit_slo(slo)
    if cases.empty:
        return [], []
    df = cases.reset_index(drop=True)
    mode = df["load_mode"].astype(str) if "load_mode" in df else pd.Series("", index=df.index)
    df = df.assign(
        _pos=np.arange(len(df)),
        _isl=_length_groups(pd.to_numeric(df["isl"], errors="coerce").to_numpy(float)),
        _osl=_length_groups(pd.to_numeric(df["osl"], errors="coerce").to_numpy(float)),
    )
    keys = [c for c in CONFIG_COLUMNS if c in df] + ["_isl", "_osl"]
    sweeps: list[Sweep] = []
    skipped: list[str] = []
    for m, x in SWEEP_X.items():
        sub = df[mode == m]
        if sub.empty:
            continue
        for _, group in sub.groupby(keys, dropna=False, sort=True):
            group = group.assign(_x=pd.to_numeric(group[x], errors="coerce")).dropna(subset=["_x"]).sort_values("_x")
            if group.empty:
                continue
            label = _label(group.iloc[0], x)
            group, spikes = _without_spikes(group, x, slo.statistic)
            skipped += [f"{label}: {why}" for why in spikes]
            if group["_x"].nunique() < 2:
                skipped.append(f"{label}: one load level ({group['_x'].iloc[0]:g}); a limit needs two or more")
                continue
            try:
                runs = _as_runs(group, x, slo.statistic)
                lim = measured_limit(runs, x=x, stat=slo.statistic, ttft_slo_s=slo.ttft_s, tpot_slo_s=slo.tpot_s)
            except ValueError as exc:
                skipped.append(f"{label}: {exc}")
                continue
            try:
                grid, values = _grid(group.iloc[0], x, group["_x"].to_numpy(float), slo.statistic)
            except ValueError as exc:
                skipped.append(f"{label}: cannot be predicted ({exc})")
                continue
            sweeps.append(
                Sweep(
                    label=label,
                    x=x,
                    positions=tuple(int(p) for p in group["_pos"]),
                    loads=tuple(float(v) for v in group["_x"]),
                    measured=lim,
                    grid=grid,
                    grid_loads=tuple(float(v) for v in values),
                )
            )
    return sweeps, skipped


def sweep_table(sweeps: list[Sweep]) -> pd.DataFrame:
    """One row per sweep: its label, the load levels it ran, the measured limit (None where the
    SLO was not reached or already missed at the lowest load), how it was found and which SLO
    binds there."""
    return pd.DataFrame(
        {
            "sweep": [s.label for s in sweeps],
            "loads": [", ".join(f"{v:g}" for v in s.loads) for s in sweeps],
            "measured limit": [s.measured.limit for s in sweeps],
            "status": [s.measured.status for s in sweeps],
            "binds": [s.measured.binding for s in sweeps],
        }
    ).round(2)


BISECTIONS = 12  # halvings of the step from a stable load to an unstable one (2^-12 of it)


def _latencies(cases: list[PreparedCase], coef: Coefficients | None) -> tuple[np.ndarray, np.ndarray]:
    pred = predict_prepared(cases, coef, "closed-form")
    return pred["ttft_ms_predicted"].to_numpy(float) / 1e3, pred["tpot_ms_predicted"].to_numpy(float) / 1e3


def _limit(s: Sweep, ttft: np.ndarray, tpot: np.ndarray, coef: Coefficients | None, slo: SLO) -> float:
    x = np.asarray(s.grid_loads)
    lim = min(crossing(x, ttft, slo.ttft_s), crossing(x, tpot, slo.tpot_s))
    if lim in (0.0, np.inf) or lim not in x:
        return lim
    # the next grid load has no finite prediction (the queue grows without bound): find where
    # stability ends between the two, so the limit moves continuously with the coefficients
    k = int(np.flatnonzero(x == lim)[0])
    lo, hi = float(x[k]), float(x[k + 1])
    y_lo = (ttft[k], tpot[k])
    for _ in range(BISECTIONS):
        mid = float(np.sqrt(lo * hi))
        t, p = _latencies([dataclasses.replace(s.grid[k], load=mid)], coef)
        if t[0] <= slo.ttft_s and p[0] <= slo.tpot_s:
            lo, y_lo = mid, (t[0], p[0])
        elif np.isfinite(t[0]) and np.isfinite(p[0]):  # a finite crossing between lo and mid
            xs = np.array([lo, mid])
            return min(
                crossing(xs, np.array([y_lo[0], t[0]]), slo.ttft_s), crossing(xs, np.array([y_lo[1], p[0]]), slo.tpot_s)
            )
        else:
            hi = mid
    return lo


def predicted_limits(sweeps: list[Sweep], coef: Coefficients | None, slo: SLO) -> np.ndarray:
    """The limit each sweep's configuration reaches in the model with ``coef`` (module
    docstring): 0 where one request already misses an SLO at the grid's lowest load, inf where
    the highest grid load still meets both."""
    if not sweeps:
        return np.zeros(0)
    ttft, tpot = _latencies([c for s in sweeps for c in s.grid], coef)
    out, k = [], 0
    for s in sweeps:
        n = len(s.grid)
        out.append(_limit(s, ttft[k : k + n], tpot[k : k + n], coef, slo))
        k += n
    return np.array(out)


def deployment_sweep(row: pd.Series, slo: SLO, top: float) -> Sweep:
    """A deployment that was not load-tested (``row``: the cases schema with its model, hardware,
    engine and lengths) as a closed-loop sweep from 1 to ``top`` requests in flight, so that its
    SLO-limited concurrency can be predicted like a measured sweep's (``predicted_limits``,
    ``gpucap.calibration.fitlimits.limit_table``); its measured limit is "not measured"."""
    check_limit_slo(slo)
    row = row.copy()
    row["load_mode"] = "fixed-concurrency"
    loads = np.array([1.0, max(float(top), 2.0)])
    grid, values = _grid(row, "concurrency", loads, slo.statistic)
    return Sweep(
        label=_label(row, "concurrency"),
        x="concurrency",
        positions=(),
        loads=tuple(float(v) for v in loads),
        measured=MeasuredLimit(None, "not measured", "", None, None),
        grid=grid,
        grid_loads=tuple(float(v) for v in values),
    )
