"""Calibration history: one line per calibration, appended after each load test, and what
changed since the last one.

The history is a JSON-lines file (a folder holds it as ``calibration-history.jsonl``). Each line
is one fit: when, gpucap's version, the engines and versions of the runs, every coefficient with
its standard error and whether it was free, the input files and their hashes, the SLOs and the
limits table (measured, fitted and its interval per sweep), the flags, and what it was fitted to
(``source``: "load test", or "telemetry" with the ``window_span`` of the scrapes, unix seconds). Lines are only ever
appended; a file that does not read is never written to.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpucap.calibration.fitchecks import Z_95
from gpucap.calibration.fitresult import FitResult

HISTORY_NAME = "calibration-history.jsonl"


def history_path(path: str | Path) -> Path:
    """The JSON-lines file: ``path`` itself, or ``calibration-history.jsonl`` in a folder."""
    path = Path(path)
    return path / HISTORY_NAME if path.is_dir() else path


def read_history(path: Path) -> list[dict[str, Any]]:
    """The calibrations in the JSON-lines file ``path`` (none if it does not exist); a line that
    does not read is an error naming it."""
    if not path.exists():
        return []
    if not path.is_file():
        raise ValueError(f"calibration history {path} is not a file")
    entries = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except (json.JSONDecodeError, RecursionError) as exc:
                raise ValueError(f"calibration history {path}, line {n}: not JSON ({exc})") from None
            if not isinstance(entry, dict) or not isinstance(entry.get("coefficients"), dict):
                raise ValueError(f"calibration history {path}, line {n}: not a calibration (no 'coefficients' object)")
            entries.append(entry)
    return entries


def append_history(fit: FitResult, path: str | Path, *, label: str = "") -> Path:
    """Append ``fit`` as one line to the history at ``path``; refuses to write to a file whose
    existing lines do not read (nothing saved is lost or mixed with junk). Returns the file."""
    target = history_path(path)
    before = read_history(target)  # raises on a corrupt file before anything is written
    data = fit.to_dict()
    prov = data["provenance"]
    entry = {
        "entry": len(before) + 1,
        "label": label,
        "fitted_at": prov.get("fitted_at"),
        "gpucap_version": prov.get("gpucap_version"),
        "engines": prov.get("engines", []),
        "engine_versions": prov.get("engine_versions", []),
        "coefficients": data["coefficients"],
        "statistics": data["statistics"],
        "slo": prov.get("slo"),
        "limits": data["limits"],
        "flags": data["flags"],
        "inputs": prov.get("inputs", []),
        "rows_used": prov.get("rows_used"),
        "source": prov.get("source", "load test"),
        "window_span": prov.get("window_span"),
    }
    with target.open("a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
    return target


def calibration_history(path: str | Path) -> pd.DataFrame:
    """The history as a tidy table: one row per calibration and coefficient (entry, label,
    fitted_at, engines, coefficient, value, stderr, free); a line that does not read is an
    error naming it."""
    target = history_path(path)
    if not target.exists():
        raise ValueError(f"no calibration history at {target}")
    rows = []
    for e in read_history(target):
        for name, c in e["coefficients"].items():
            rows.append(
                {
                    "entry": e.get("entry"),
                    "label": e.get("label", ""),
                    "fitted_at": pd.Timestamp(e["fitted_at"]) if e.get("fitted_at") else pd.NaT,
                    "engines": ", ".join(e.get("engines", [])),
                    "coefficient": name,
                    "value": float(c.get("value", np.nan)),
                    "stderr": np.nan if c.get("stderr") is None else float(c["stderr"]),
                    "free": bool(c.get("free", False)),
                }
            )
    return pd.DataFrame(rows)


def history_limits(path: str | Path) -> pd.DataFrame:
    """Every calibration's limits table: one row per calibration and sweep."""
    rows = []
    for e in read_history(history_path(path)):
        for lim in e.get("limits", []):
            rows.append({"entry": e.get("entry"), "label": e.get("label", ""), "slo": e.get("slo"), **lim})
    return pd.DataFrame(rows)


def what_changed(path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The last calibration against the one before: per free coefficient the change and whether
    it exceeds its uncertainty (``|change| > 1.96 sqrt(se_before^2 + se_after^2)``); per sweep
    both fitted at the same SLOs, the change of the SLO-limited concurrency or rate and whether it
    exceeds theirs (the same test on log limits, each sd from its 95% interval)."""
    coef = calibration_history(path)
    entries = sorted(coef["entry"].dropna().unique())
    if len(entries) < 2:
        raise ValueError(f"{history_path(path)} holds {len(entries)} calibration(s): nothing to compare yet")
    last, prev = entries[-1], entries[-2]
    a = coef[coef["entry"] == prev].set_index("coefficient")
    b = coef[coef["entry"] == last].set_index("coefficient")
    names = [n for n in b.index if b.loc[n, "free"] or (n in a.index and a.loc[n, "free"])]
    rows = []
    for n in names:
        v0 = float(a.loc[n, "value"]) if n in a.index else np.nan
        se0 = float(a.loc[n, "stderr"]) if n in a.index else np.nan
        v1, se1 = float(b.loc[n, "value"]), float(b.loc[n, "stderr"])
        band = Z_95 * np.sqrt(np.nansum([se0**2, se1**2]))
        change = v1 - v0
        rows.append(
            {
                "coefficient": n,
                "before": v0,
                "stderr_before": se0,
                "after": v1,
                "stderr_after": se1,
                "change": change,
                "moved": bool(np.isfinite(change) and np.isfinite(band) and abs(change) > band),
            }
        )
    coefficients = pd.DataFrame(rows)
    lim = history_limits(path)
    limits = pd.DataFrame()
    if not lim.empty:
        old, new = lim[lim["entry"] == prev], lim[lim["entry"] == last]
        both = old.merge(new, on=["sweep", "slo"], suffixes=("_before", "_after"))
        if not both.empty:
            # log-normal intervals: sd of log limit = log(high / fitted) / 1.96, per calibration
            sd = [np.log(both[f"fitted_high_{w}"] / both[f"fitted_{w}"]) / Z_95 for w in ("before", "after")]
            change = np.log(both["fitted_after"] / both["fitted_before"])
            band = Z_95 * np.sqrt(sd[0] ** 2 + sd[1] ** 2)
            limits = pd.DataFrame(
                {
                    "sweep": both["sweep"],
                    "slo": both["slo"],
                    "unit": both["unit_after"],
                    "fitted_before": both["fitted_before"],
                    "fitted_after": both["fitted_after"],
                    "low_after": both["fitted_low_after"],
                    "high_after": both["fitted_high_after"],
                    "moved": (change.abs() > band) & band.notna(),
                }
            )
    return coefficients, limits
