"""Physical ranges of the coefficients per device class, and what a fit outside them means.

``COEFFICIENT_INFO``'s bounds keep a fit numerically sane; the ranges here say what hardware can
do: the share of peak a GPU's matmuls or memory reads reach, the host time a step can take. Each
range has its source (``data/coefficient-ranges.csv``), per device class (``gpu``: a datasheet
row; ``cpu``: a measured CPU row, vendor "CPU", whose peaks are what the machine reached).

A fit that lands outside a range is not telling of hardware that slow or that fast: it is a
coefficient standing in for a mechanism the step model lacks, fitted at the loads it was given
and wrong at others. ``calibrate`` then fits again with the ranges as bounds, shows both fits,
and names the load mode driving the coefficient out: the mode whose runs' median absolute error
rises most from the free fit to the bounded one (the runs the free fit bent the coefficient for).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from gpucap.catalog.gpus import DATA_DIR
from gpucap.config import Hardware
from gpucap.physics.coefficients import COEFFICIENT_INFO, Coefficients
from gpucap.textfiles import read_text

RANGES_FILE = DATA_DIR / "coefficient-ranges.csv"
DEVICES = ("gpu", "cpu")
FIELDS = ("coefficient", "device", "lower", "upper", "source")


@dataclass(frozen=True)
class PhysicalRange:
    """Where one coefficient can lie on one device class, and why."""

    coefficient: str
    device: str
    lower: float
    upper: float
    source: str

    def __str__(self) -> str:
        return f"[{self.lower:.3g}, {self.upper:.3g}]"


Ranges = Mapping[tuple[str, str], PhysicalRange]


def read_physical_ranges(path: str | Path | None = None) -> dict[tuple[str, str], PhysicalRange]:
    """``{(coefficient, device): PhysicalRange}`` from a CSV of ``FIELDS`` (default
    ``data/coefficient-ranges.csv``). A bad row is a one-line error naming the file, line and
    field; every coefficient needs a row for each device class."""
    path = Path(path) if path is not None else RANGES_FILE
    text = read_text(path, "coefficient ranges file", 1 << 20)
    reader = csv.DictReader(text.splitlines())
    missing = [f for f in FIELDS if f not in (reader.fieldnames or [])]
    if missing:
        raise ValueError(f"{path}: no column {', '.join(missing)} (columns: {', '.join(FIELDS)})")
    out: dict[tuple[str, str], PhysicalRange] = {}
    for line, row in enumerate(reader, start=2):
        where = f"{path} line {line}"
        name, device = (row["coefficient"] or "").strip(), (row["device"] or "").strip().lower()
        if name not in COEFFICIENT_INFO:
            raise ValueError(f"{where}: unknown coefficient {name!r}; known: {', '.join(COEFFICIENT_INFO)}")
        if device not in DEVICES:
            raise ValueError(f"{where}: device {device!r} is not one of {', '.join(DEVICES)}")
        bounds = []
        for field in ("lower", "upper"):
            try:
                value = float(row[field])
            except (TypeError, ValueError):
                value = math.nan
            if not math.isfinite(value):
                raise ValueError(f"{where}: {field} {row[field]!r} is not a finite number")
            bounds.append(value)
        lower, upper = bounds
        if lower > upper:
            raise ValueError(f"{where}: {name} on {device}: lower {lower:g} is above upper {upper:g}; swap them")
        info = COEFFICIENT_INFO[name]
        if lower < info.lower or upper > info.upper:
            raise ValueError(
                f"{where}: {name} on {device}: [{lower:g}, {upper:g}] reaches outside the coefficient's "
                f"bounds [{info.lower:g}, {info.upper:g}]"
            )
        if not (row["source"] or "").strip():
            raise ValueError(f"{where}: {name} on {device} has no source; say where the range comes from")
        if (name, device) in out:
            raise ValueError(f"{where}: a second row for {name} on {device}")
        out[(name, device)] = PhysicalRange(name, device, lower, upper, row["source"].strip())
    absent = [f"{n} on {d}" for n in COEFFICIENT_INFO for d in DEVICES if (n, d) not in out]
    if absent:
        raise ValueError(f"{path}: no range for {', '.join(absent)}")
    return out


def device_class(hw: Hardware) -> str:
    """``cpu`` for a measured CPU row (vendor "CPU"), else ``gpu``."""
    return "cpu" if hw.gpu.is_cpu else "gpu"


def cases_device(hardware: Iterable[Hardware]) -> str:
    """The device class of a fit's runs: ``cpu`` when every run is on a CPU, else ``gpu``."""
    classes = {device_class(hw) for hw in hardware}
    return "cpu" if classes == {"cpu"} else "gpu"


def physical_bounds(free: tuple[str, ...], device: str, ranges: Ranges) -> tuple[np.ndarray, np.ndarray]:
    """The (lower, upper) physical ranges of the free coefficients on ``device``."""
    lower = np.array([ranges[(n, device)].lower for n in free])
    upper = np.array([ranges[(n, device)].upper for n in free])
    return lower, upper


def outside_ranges(
    coefficients: Coefficients, free: tuple[str, ...], device: str, ranges: Ranges
) -> dict[str, PhysicalRange]:
    """The free coefficients whose value lies outside their physical range on ``device``."""
    values = coefficients.as_dict()
    out = {}
    for name in free:
        r = ranges[(name, device)]
        if not r.lower <= values[name] <= r.upper:
            out[name] = r
    return out


def driving_mode(modes: list[str], free_errors: pd.DataFrame, bounded_errors: pd.DataFrame) -> str:
    """Which load mode's runs drive a coefficient out of its range: per mode, the median absolute
    error over its runs and metrics (``|exp(log ratio) - 1|``) with the free fit and with the
    bounded one; the mode whose error rises most when the range is enforced, as text."""
    rows = []
    for mode in sorted(set(modes)):
        pick = np.array([m == mode for m in modes])
        a = np.abs(np.expm1(free_errors.to_numpy(float)[pick]))
        b = np.abs(np.expm1(bounded_errors.to_numpy(float)[pick]))
        a, b = a[np.isfinite(a)], b[np.isfinite(b)]
        if a.size and b.size:
            rows.append(
                (float(np.median(b) - np.median(a)), mode, int(pick.sum()), float(np.median(a)), float(np.median(b)))
            )
    if not rows:
        return "no load mode measured"
    rise, mode, n, a, b = max(rows)
    if rise <= 0:
        return "no load mode: every mode is as well fitted within the ranges"
    return f"the {mode} runs ({n}: median error {a:.0%} with the free fit, {b:.0%} within the ranges)"


def missing_mechanism_flags(
    fitted: Coefficients, outside: Mapping[str, PhysicalRange], driver: str | None
) -> tuple[str, ...]:
    """One line per coefficient fitted outside its physical range: the value, the range and its
    device, and the runs driving it (``driving_mode``; None: not determined, no fit within the
    ranges was run)."""
    values = fitted.as_dict()
    tail = (
        f"driven by {driver}; it stands for something the step model lacks (the fit within the ranges is beside it)"
        if driver
        else "it stands for something the step model lacks"
    )
    return tuple(
        f"missing mechanism: {name} = {values[name]:.3g} is outside its physical range {r} on "
        f"{r.device.upper()}s ({'below' if values[name] < r.lower else 'above'}); {tail}"
        for name, r in outside.items()
    )
