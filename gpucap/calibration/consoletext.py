"""Read the vLLM / SGLang console summary (the "Serving Benchmark Result" block) saved as text.

A file may hold several blocks; "Traffic request rate:" and "Maximum request concurrency:" lines
printed just before a block belong to it. Means of input and output length are the total tokens
over the successful requests.
"""

from __future__ import annotations

import re
from typing import Any

from gpucap.calibration.resultfields import COLUMNS, new_row, number
from gpucap.units import MS

CONSOLE_HEADER = re.compile(r"^\s*=+ ?Serving Benchmark Result ?=+\s*$", re.M)
CONSOLE_LABELS = {
    "successful requests": "completed", "failed requests": "failed",
    "maximum request concurrency": "concurrency", "max request concurrency": "concurrency",
    "traffic request rate": "request_rate", "benchmark duration (s)": "duration_s",
    "total input tokens": "tokens_in", "total generated tokens": "tokens_out",
    "request throughput (req/s)": "request_throughput_per_s", "request goodput (req/s)": "goodput_per_s",
    "output token throughput (tok/s)": "output_tokens_per_s", "total token throughput (tok/s)": "total_tokens_per_s",
}  # fmt: skip
CONSOLE_LATENCY = re.compile(r"(mean|median|p\d+(?:\.\d+)?) (ttft|tpot|itl|e2el|e2e latency) \(ms\)")


def read_console(text: str, where: str) -> list[dict[str, Any]]:
    """The runs of a console-summary text file, one per "Serving Benchmark Result" block."""
    parts = CONSOLE_HEADER.split(text)
    rows, before = [], parts[0]
    for k, part in enumerate(parts[1:]):
        pieces = re.split(r"^\s*=+\s*$", part, maxsplit=1, flags=re.M)
        if len(pieces) < 2:
            raise ValueError(f"{where}, block {k}: no closing '=====' line: the block is cut off")
        block, after = pieces
        values: dict[str, Any] = {}
        for source in (before, block):  # lines inside the block win
            for line in source.splitlines():
                m = re.match(r"\s*([A-Za-z][^:]*?):\s+(\S+)", line)
                if not m:
                    continue
                label, raw = m.group(1).strip().lower(), m.group(2)
                lat = CONSOLE_LATENCY.fullmatch(label)
                name = CONSOLE_LABELS.get(label) or (
                    lat and f"{lat.group(2).replace('e2e latency', 'e2el')}_{lat.group(1)}_s"
                )
                if label == "backend" and source is block:
                    values["backend"] = raw
                if not name or (source is before and name not in ("concurrency", "request_rate")):
                    continue
                try:
                    x = None if raw.lower() in ("none", "not", "n/a") else float(raw)  # "not set"
                except ValueError:
                    raise ValueError(f"{where}, block {k}: {m.group(1)} = {raw!r} is not a number") from None
                values[name] = number(
                    {m.group(1): x}, m.group(1), f"{where}, block {k}", MS if lat else 1.0, name == "request_rate"
                )
        if values.get("completed") is None:
            raise ValueError(f"{where}, block {k}: missing required line 'Successful requests:'")
        row = new_row(**{c: v for c, v in values.items() if c in COLUMNS or c == "backend"})
        for tokens, col in (("tokens_in", "input_len_mean"), ("tokens_out", "output_len_mean")):
            row[col] = values[tokens] / values["completed"] if values.get(tokens) and values["completed"] else None
        rows.append(row)
        before = after
    return rows
