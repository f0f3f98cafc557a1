"""What a GPU-hour costs: rented (a price list, ``data/prices.csv`` by default, which the user
overrides with their own file) or owned (power at the GPU's board power times a $/kWh, plus any
amortized price per hour the user's file gives).

    cost per GPU-hour = price per GPU-hour + TDP (kW) x $/kWh
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from gpucap.catalog.gpus import DATA_DIR, GPU
from gpucap.textfiles import read_text

PRICE_FILE = DATA_DIR / "prices.csv"
REQUIRED = ("gpu", "usd_per_gpu_hour")


@dataclass(frozen=True)
class Prices:
    """Dollars per GPU-hour by catalog key, and an optional electricity price."""

    per_gpu_hour: dict[str, float]
    usd_per_kwh: float | None = None
    source: str = ""

    def usd_per_gpu_hour(self, gpu: GPU) -> float | None:
        """Price plus power. None when the GPU is not priced: a price list that does not name it,
        or power only for a GPU whose catalog row gives no TDP."""
        price = self.per_gpu_hour.get(gpu.key)
        if self.per_gpu_hour and price is None:
            return None  # a list was given and leaves this GPU out: power alone would look free
        if self.usd_per_kwh is None:
            return price
        if not gpu.tdp_w:
            return None if price is None else price
        return (price or 0.0) + gpu.tdp_w / 1000.0 * self.usd_per_kwh


def read_prices(source: str | Path | pd.DataFrame | None = None, *, usd_per_kwh: float | None = None) -> Prices:
    """Read a price file (CSV with at least ``gpu`` and ``usd_per_gpu_hour``); None reads the
    shipped list. With ``usd_per_kwh`` and no file, only power is counted (owned hardware)."""
    if usd_per_kwh is not None and not (math.isfinite(usd_per_kwh) and usd_per_kwh >= 0):
        raise ValueError(f"usd_per_kwh must be a number >= 0, got {usd_per_kwh!r}")
    if source is None and usd_per_kwh is not None:
        return Prices({}, usd_per_kwh, "power only")
    if isinstance(source, pd.DataFrame):
        df, where = source, "price table"
    else:
        path = Path(source) if source is not None else PRICE_FILE
        where = str(path)
        try:
            text = read_text(path, "price file")
        except FileNotFoundError:
            raise ValueError(f"price file {where} not found; give a CSV with columns gpu,usd_per_gpu_hour") from None
        try:
            df = pd.read_csv(io.StringIO(text), comment="#")
        except (pd.errors.ParserError, pd.errors.EmptyDataError) as err:
            raise ValueError(f"{where}: not a readable CSV ({err})") from None
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise ValueError(f"{where}: missing column(s) {', '.join(missing)}; need gpu,usd_per_gpu_hour")
    out: dict[str, float] = {}
    for k, row in enumerate(df.itertuples(index=False), start=2):
        gpu, price = str(row.gpu).strip(), row.usd_per_gpu_hour
        try:
            value = float(price)
        except (TypeError, ValueError):
            value = math.nan
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{where} line {k}: usd_per_gpu_hour {price!r} for {gpu} is not a number >= 0")
        if gpu in out:
            raise ValueError(f"{where} line {k}: {gpu} is listed twice; keep one price per GPU")
        out[gpu] = value
    return Prices(out, usd_per_kwh, where)
