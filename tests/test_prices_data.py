"""The shipped default prices (data/prices.csv): keys, numbers, provenance, and one sanity ordering.

The file is read with the csv module only, so these checks hold whatever the planner's loader does.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import re
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent.parent / "data"
PRICES = DATA / "prices.csv"
GPUS = DATA / "gpus.csv"

COLUMNS = ["gpu", "usd_per_gpu_hour", "provider", "offering", "date_seen", "source", "notes"]
ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def prices() -> list[dict[str, str]]:
    return _rows(PRICES)


@pytest.fixture(scope="module")
def gpu_keys() -> set[str]:
    return {row["key"] for row in _rows(GPUS)}


def _price(row: dict[str, str]) -> float:
    return float(row["usd_per_gpu_hour"])


def _by_gpu(prices: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    return {row["gpu"]: row for row in prices}


def test_columns_and_some_rows(prices: list[dict[str, str]]) -> None:
    with PRICES.open(newline="", encoding="utf-8") as f:
        header = next(csv.reader(f))
    assert header == COLUMNS
    assert prices, "prices.csv has no rows"


def test_every_gpu_is_a_catalog_key_once(prices: list[dict[str, str]], gpu_keys: set[str]) -> None:
    names = [row["gpu"] for row in prices]
    assert not set(names) - gpu_keys, f"not keys of gpus.csv: {sorted(set(names) - gpu_keys)}"
    assert len(names) == len(set(names)), "a GPU has more than one row"


def test_prices_are_positive_and_finite(prices: list[dict[str, str]]) -> None:
    for row in prices:
        value = _price(row)
        assert math.isfinite(value) and value > 0, row["gpu"]


def test_every_row_has_source_date_and_description(prices: list[dict[str, str]]) -> None:
    today = dt.date.today()
    for row in prices:
        gpu = row["gpu"]
        assert re.match(r"^https?://\S+$", row["source"]), f"{gpu}: source is not a URL"
        assert ISO_DATE.match(row["date_seen"]), f"{gpu}: date_seen is not YYYY-MM-DD"
        seen = dt.date.fromisoformat(row["date_seen"])
        assert dt.date(2020, 1, 1) <= seen <= today, f"{gpu}: date_seen {seen} out of range"
        for column in ("provider", "offering", "notes"):
            assert row[column].strip(), f"{gpu}: empty {column}"


def test_h100_costs_more_than_a100_at_aws(prices: list[dict[str, str]]) -> None:
    # The rows, as shipped:
    #   H100-SXM-80GB,6.88,AWS,"on-demand, 8x H100 SXM instance p5.48xlarge, us-east-1, Linux"    ($55.04/h / 8)
    #   A100-SXM-80GB,3.4309,AWS,"on-demand, 8x A100 80GB SXM instance p4de.24xlarge, ..."       ($27.44705/h / 8)
    #   A100-SXM-40GB,2.7447,AWS,"on-demand, 8x A100 40GB SXM instance p4d.24xlarge, ..."        ($21.957642/h / 8)
    rows = _by_gpu(prices)
    h100 = rows["H100-SXM-80GB"]
    for a100_key in ("A100-SXM-80GB", "A100-SXM-40GB"):
        a100 = rows[a100_key]
        assert h100["provider"] == a100["provider"] == "AWS"
        assert _price(h100) > _price(a100), f"H100-SXM-80GB {_price(h100)} <= {a100_key} {_price(a100)}"


def test_h100_costs_more_than_a100_within_every_provider(prices: list[dict[str, str]]) -> None:
    pairs = 0
    for provider in {row["provider"] for row in prices}:
        mine = [row for row in prices if row["provider"] == provider]
        for h100 in (row for row in mine if row["gpu"].startswith("H100-")):
            for a100 in (row for row in mine if row["gpu"].startswith("A100-")):
                pairs += 1
                assert _price(h100) > _price(a100), f"{provider}: {h100['gpu']} <= {a100['gpu']}"
    assert pairs, "no provider lists both an H100 and an A100"
