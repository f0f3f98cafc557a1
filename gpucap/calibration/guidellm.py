"""Read GuideLLM's ``benchmarks.json`` (GenerativeBenchmarksReport, v0.3 and later): one run per
entry of ``benchmarks``, from the ``successful`` distributions. Its inter-token latency, (last -
first token time)/(output tokens - 1), fills tpot and itl; failed = errored requests.
"""

from __future__ import annotations

import math
from typing import Any

from gpucap.calibration.resultfields import new_row, number
from gpucap.units import MS


def read_guidellm(report: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """The runs of a GuideLLM report, one per entry of ``benchmarks``."""
    if not isinstance(report["benchmarks"], list):
        raise ValueError(f"{where}: benchmarks is not a list")
    rows = []
    for i, b in enumerate(report["benchmarks"]):
        w = f"{where}, benchmark {i}"
        if not isinstance(b, dict) or not isinstance(b.get("metrics"), dict):
            raise ValueError(f"{w}: missing required key 'metrics'")
        successful = {}
        for name, dist in b["metrics"].items():
            if isinstance(dist, dict) and isinstance(dist.get("successful"), dict):
                successful[name] = {**dist["successful"], **(dist["successful"].get("percentiles") or {})}

        def stat(name: str, which: str, scale: float = 1.0, d: dict[str, Any] = successful, w: str = w) -> float | None:
            """One statistic of a successful-request distribution, times ``scale``."""
            return number(d.get(name, {}), which, f"{w}: metrics.{name}.successful", scale)

        strategy = (b.get("args") or b.get("config") or {}).get("strategy") or {}
        kind, ws = strategy.get("type_"), f"{w}: strategy"
        totals = b.get("request_totals") or (b.get("run_stats") or b.get("scheduler_metrics") or {}).get(
            "requests_made"
        )
        duration = b.get("duration", b["end_time"] - b["start_time"] if "end_time" in b else None)
        row = new_row(model=(b.get("worker") or {}).get("backend_model"))
        row["completed"] = number(totals or {}, "successful", f"{w}: request_totals")
        row["failed"] = number(totals or {}, "errored", f"{w}: request_totals")
        row["duration_s"] = number({"duration": duration}, "duration", w)  # seconds
        row["concurrency"] = {"synchronous": 1.0, "concurrent": number(strategy, "streams", ws)}.get(str(kind))
        row["request_rate"] = number(strategy, "rate", ws) if kind in ("constant", "poisson") else None
        if kind == "throughput":
            row["request_rate"], row["concurrency"] = math.inf, number(strategy, "max_concurrency", ws)
        row["request_throughput_per_s"] = stat("requests_per_second", "mean")
        row["output_tokens_per_s"] = stat("output_tokens_per_second", "mean")
        row["total_tokens_per_s"] = stat("tokens_per_second", "mean")
        row["input_len_mean"] = stat("prompt_token_count", "mean")
        row["output_len_mean"] = stat("output_token_count", "mean")
        row["e2el_mean_s"] = stat("request_latency", "mean")  # seconds
        for s in ("mean", "median", "p90", "p99"):
            row[f"ttft_{s}_s"] = stat("time_to_first_token_ms", s, MS)
            row[f"tpot_{s}_s"] = row[f"itl_{s}_s"] = stat("inter_token_latency_ms", s, MS)
        row.pop("itl_p90_s")
        rows.append(row)
    return rows
