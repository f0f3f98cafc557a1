"""Read GenAI-Perf's ``profile_export_genai_perf.csv`` (genai_perf/export_data/csv_exporter.py).

The file holds a per-metric table (avg, p99, p90, p50 ...), a blank line, a Metric,Value table;
numbers carry thousands separators. Its "Inter Token Latency" is (latency - TTFT)/(OSL - 1) per
request, vLLM's TPOT, so it fills the tpot columns. Concurrency or request rate come from the
artifact folder name (``...-concurrency8``, ``...-request_rate4``); duration = request count /
request throughput.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

from gpucap.calibration.resultfields import new_row, number
from gpucap.units import MS


def read_genai_perf(text: str, where: str, path: Path) -> list[dict[str, Any]]:
    """The one run of a GenAI-Perf CSV export, its load read from the folder name of ``path``."""
    stats: dict[str, dict[str, float | None]] = {}
    header: list[str] | None = None
    for r in csv.reader(io.StringIO(text)):
        if not r or not any(c.strip() for c in r):
            header = None
        elif r[0] == "Metric":
            header = r
        elif header is not None and header[1] != "GPU":  # GPU telemetry tables are skipped
            cells: dict[str, float | None] = {}
            for col, cell in zip(header[1:], r[1:], strict=False):
                cell = cell.replace(",", "").strip()
                try:
                    cells[col] = None if cell in ("", "N/A") else float(cell)
                except ValueError:
                    raise ValueError(f"{where}: {r[0]} {col} = {cell!r} is not a number") from None
                number(cells, col, f"{where}: {r[0]}")
            stats[r[0]] = cells

    def get(label: str, col: str, scale: float = 1.0) -> float | None:
        """The value of one metric row and statistic column, times ``scale``; None when absent."""
        v = stats.get(label, {}).get(col)
        return None if v is None else v * scale

    row = new_row(
        completed=get("Request Count (count)", "Value"), goodput_per_s=get("Request Goodput (per sec)", "Value")
    )
    row["request_throughput_per_s"] = get("Request Throughput (per sec)", "Value")
    row["output_tokens_per_s"] = get("Output Token Throughput (per sec)", "Value")
    if row["request_throughput_per_s"] is None:
        raise ValueError(f"{where}: missing required row 'Request Throughput (per sec)'")
    row["input_len_mean"] = get("Input Sequence Length", "avg")
    row["output_len_mean"] = get("Output Sequence Length", "avg")
    row["e2el_mean_s"] = get("Request Latency (ms)", "avg", MS)
    for s, col in (("mean", "avg"), ("median", "p50"), ("p90", "p90"), ("p99", "p99")):
        row[f"ttft_{s}_s"] = get("Time To First Token (ms)", col, MS)
        row[f"tpot_{s}_s"] = get("Inter Token Latency (ms)", col, MS)
    if row["completed"] and row["request_throughput_per_s"]:
        row["duration_s"] = row["completed"] / row["request_throughput_per_s"]
    for col in ("concurrency", "request_rate"):  # artifacts/<model>-<service>-<endpoint>-concurrency8
        if m := re.search(rf"-{col}(\d+(?:\.\d+)?)$", path.parent.name):
            row[col] = float(m.group(1))
    return [row]
