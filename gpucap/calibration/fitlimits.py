"""Sweep limits in the calibration fit (``gpucap.calibration.calibrate``): which sweeps' measured
SLO-limited concurrency or rate can be targets, and the table of measured, default and fitted
limits with the fitted limit's interval.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpucap.calibration.limits import Sweep, find_sweeps, predicted_limits
from gpucap.calibration.uncertainty import delta_interval
from gpucap.config import SLO
from gpucap.physics.coefficients import Coefficients
from gpucap.types import LIMIT_STATISTICS


def limit_targets(cases: pd.DataFrame, slo: SLO) -> tuple[list[Sweep], list[Sweep], list[str]]:
    """All sweeps, those with an interpolated measured limit (the fit's targets), and why others
    are not sweeps; raises when the limits cannot be targets."""
    given = [
        s
        for s in LIMIT_STATISTICS
        if all(f"{m}_{s}_ms" in cases and cases[f"{m}_{s}_ms"].notna().any() for m in ("ttft", "tpot"))
    ]
    if slo.statistic not in given:
        has = f"they give the {' and the '.join(given)}" if given else "they give neither a mean nor a median of both"
        raise ValueError(
            f"the runs report no {slo.statistic} TTFT and TPOT ({has}); take the limits at a statistic they report"
        )
    sweeps, skipped = find_sweeps(cases, slo)
    if not sweeps:
        why = "; ".join(skipped) or "no closed-loop or Poisson runs"
        raise ValueError(
            f"no sweep to take a limit from ({why}): run the load test at several loads, or fit on the runs alone"
        )
    usable = [s for s in sweeps if s.measured.status == "interpolated"]
    if not usable:
        if all(s.measured.status == "already violated" for s in sweeps):
            raise ValueError(
                f"no run meets {slo}: every limit is below the lowest load tested; loosen the SLOs or test lower loads"
            )
        top = ", ".join(
            f"{s.label}: beyond {max(s.loads):g} {s.unit}" for s in sweeps if s.measured.status == "not reached"
        )
        raise ValueError(
            f"no sweep crosses {slo}: each limit is beyond the highest load tested, a lower bound only ({top}); "
            "fit on the runs alone, or test higher loads"
        )
    return sweeps, usable, skipped


def limit_table(
    sweeps: list[Sweep],
    slo: SLO,
    default: Coefficients,
    fitted: Coefficients,
    free: tuple[str, ...] = (),
    covariance: np.ndarray | None = None,
    level: float = 0.95,
) -> pd.DataFrame:
    """Per sweep: the measured limit, the limit predicted with ``default`` and with ``fitted``
    coefficients, and the fitted limit's interval at ``level`` from the coefficients' covariance
    (``gpucap.calibration.uncertainty.delta_interval``)."""
    before = predicted_limits(sweeps, default, slo)
    if free and covariance is not None and len(sweeps):
        low, after, high = delta_interval(lambda c: predicted_limits(sweeps, c, slo), fitted, free, covariance, level)
    else:
        after = predicted_limits(sweeps, fitted, slo)
        low, high = np.full(len(sweeps), np.nan), np.full(len(sweeps), np.nan)
    return pd.DataFrame(
        {
            "sweep": [s.label for s in sweeps],
            "unit": [s.unit for s in sweeps],
            "loads": [f"{min(s.loads):g}-{max(s.loads):g} ({len(s.loads)} levels)" for s in sweeps],
            "measured": [np.nan if s.measured.limit is None else s.measured.limit for s in sweeps],
            "measured_status": [s.measured.status for s in sweeps],
            "binding": [s.measured.binding for s in sweeps],
            "default": before,
            "fitted": after,
            "fitted_low": low,
            "fitted_high": high,
        }
    )
