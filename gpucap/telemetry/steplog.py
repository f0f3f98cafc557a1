"""vLLM's log of every engine step (``vllm serve --enable-logging-iteration-details``), as a table.

vLLM (0.32: ``vllm/v1/metrics/loggers.py``, ``_log_iteration_details``) logs one line per step
from the API server's stats logger:

    Engine 000: Iteration(12): 3 context requests, 1794 context tokens, 8 generation requests,
    8 generation tokens, iteration elapsed time: 45.20 ms, CPU KV cache usage: 1.8%

"context" is vLLM's word for prompt tokens (a prefill chunk), "generation" for decode tokens.
What the time measures (``vllm/v1/engine/core.py``, ``capture_iteration_details``): the engine
core's wait for the step's model output, from after the step is dispatched to the output. With
async scheduling (vLLM's default from 0.14.0; ``step_with_batch_queue``) the engine core schedules
the next step and hands back the previous step's output while this one runs, so the wait is the
step's device time less that host work; without it the wait is the device time, and the host's
scheduling and output handling come on top. Either way the sum of the logged times over a run is
a little below its wall time (measured on vLLM 0.32's CPU server, benchmarks/README.md: 91-98%,
~0.6 ms of host time a step). The line's clock (``MM-DD HH:MM:SS``) has whole seconds only.

The KV cache usage is the share of KV blocks in use after the step was scheduled; with the cache's
size in tokens (the start-up line "KV cache size: N tokens", or ``vllm:cache_config_info``) it
gives the tokens the running requests hold, hence their mean context (``mean_context``).

``read_step_log`` reads a server log (or any text holding these lines: other lines are skipped)
into ``StepLog``: one row per step with ``engine`` (the data-parallel rank), ``iteration``,
``prompt_requests``, ``prompt_tokens``, ``decode_requests``, ``decode_tokens``, ``elapsed_s``,
``kv_usage`` (0-1), ``dummy`` (a data-parallel rank's idle step), ``segment`` (a count that grows
whenever the iteration number goes back: the server restarted) and ``line`` (1-based).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from gpucap.textfiles import read_text_gz
from gpucap.units import MS

MAX_LOG_BYTES = 1 << 30  # half a day of steps at 100 steps/s

_LINE = re.compile(
    r"(?:Engine (?P<engine>\d+): )?Iteration\((?P<iteration>\d+)\): (?P<prompt_requests>\d+) context requests, "
    r"(?P<prompt_tokens>\d+) context tokens, (?P<decode_requests>\d+) generation requests, "
    r"(?P<decode_tokens>\d+) generation tokens, iteration elapsed time: (?P<elapsed_ms>[\d.]+) ms"
    r"(?P<dummy> \(dummy\))?, (?:\w+ )?KV cache usage: (?P<kv_pct>[\d.]+)%"
)
_CLOCK = re.compile(r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")
_KV_SIZE = re.compile(r"(?:GPU|CPU|XPU|TPU)? ?KV cache size: ([\d,]+) tokens")
COLUMNS = (
    "engine",
    "iteration",
    "prompt_requests",
    "prompt_tokens",
    "decode_requests",
    "decode_tokens",
    "elapsed_s",
    "kv_usage",
    "dummy",
    "segment",
    "clock_s",
    "line",
)


@dataclass(frozen=True)
class StepLog:
    """The steps of a log (``COLUMNS``), the KV cache size its start-up line states (tokens, per
    data-parallel rank; None if the log does not say) and the file read."""

    steps: pd.DataFrame
    kv_cache_tokens: int | None
    path: str

    @property
    def real(self) -> pd.DataFrame:
        """The steps that ran tokens (no data-parallel idle step)."""
        s = self.steps
        return s[~s["dummy"] & ((s["prompt_tokens"] + s["decode_tokens"]) > 0)]

    def during(self, spans: list[tuple[float, float]]) -> StepLog:
        """The steps whose line's clock (``clock_s``) falls within one of ``spans`` (start, end),
        ends included. The clock has whole seconds: pad a span by a second to keep its edges."""
        at = self.steps["clock_s"].to_numpy()
        inside = np.zeros(len(at), dtype=bool)
        for start, end in spans:
            inside |= (at >= start) & (at <= end)
        return dataclasses.replace(self, steps=self.steps[inside].reset_index(drop=True))

    def mean_context(self, kv_cache_tokens: float | None = None) -> np.ndarray:
        """Mean tokens each running request holds after a step was scheduled:
        ``kv_usage x kv_cache_tokens / (prompt_requests + decode_requests)``. An upper bound by
        up to a block per request (the cache counts whole blocks), and 0.1% of the cache coarse
        (the log prints one decimal of the percentage)."""
        tokens = kv_cache_tokens or self.kv_cache_tokens
        if not tokens:
            raise ValueError(
                f"{self.path}: the log does not state the KV cache size (the start-up line 'KV cache size: N "
                "tokens' is missing); give kv_cache_tokens (vllm:cache_config_info's kv_cache_size_tokens)"
            )
        s = self.steps
        running = (s["prompt_requests"] + s["decode_requests"]).to_numpy(dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(running > 0, s["kv_usage"].to_numpy() * float(tokens) / running, 0.0)


def clock_s(text: str) -> float:
    """Seconds since the start of the year of a log clock ``MM-DD HH:MM:SS`` (31-day months: only
    differences within a run matter); NaN when the line has none."""
    m = _CLOCK.search(text)
    if not m:
        return float("nan")
    mo, d, h, mi, s = (int(g) for g in m.groups())
    return ((((mo - 1) * 31 + d - 1) * 24 + h) * 60 + mi) * 60.0 + s


def clock_text(seconds: float) -> str:
    """``MM-DD HH:MM:SS`` of a ``clock_s`` value (its inverse)."""
    s = int(seconds)
    days, s = divmod(s, 86400)
    month, day = divmod(days, 31)
    return f"{month + 1:02d}-{day + 1:02d} {s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def parse_step_lines(text: str, where: str = "step log") -> StepLog:
    """The steps in ``text`` (see the module docstring); ``where`` names it in messages. A text
    with no step line at all is an error that says how to get them."""
    rows: list[tuple[float, ...]] = []
    kv_tokens: int | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if "Iteration(" not in line:
            if kv_tokens is None and "KV cache size" in line and (k := _KV_SIZE.search(line)):
                kv_tokens = int(k.group(1).replace(",", ""))
            continue
        m = _LINE.search(line)
        if not m:
            continue
        g = m.groupdict()
        rows.append(
            (
                int(g["engine"] or 0),
                int(g["iteration"]),
                int(g["prompt_requests"]),
                int(g["prompt_tokens"]),
                int(g["decode_requests"]),
                int(g["decode_tokens"]),
                float(g["elapsed_ms"]) * MS,
                float(g["kv_pct"]) / 100.0,
                bool(g["dummy"]),
                clock_s(line[: m.start()]),
                number,
            )
        )
    if not rows:
        raise ValueError(
            f"{where}: no engine step lines ('Iteration(N): ... iteration elapsed time: ... ms'); start vLLM with "
            "--enable-logging-iteration-details and without --disable-log-stats"
        )
    cols = [c for c in COLUMNS if c != "segment"]
    steps = pd.DataFrame(rows, columns=cols)
    steps["dummy"] = steps["dummy"].astype(bool)
    back = steps.groupby("engine")["iteration"].diff() < 0  # the iteration count restarted
    steps["segment"] = back.astype(int).groupby(steps["engine"]).cumsum()
    return StepLog(steps=steps[list(COLUMNS)], kv_cache_tokens=kv_tokens, path=where)


def read_step_log(path: str | Path) -> StepLog:
    """The steps of a vLLM server log file, or of its gzip (``parse_step_lines``)."""
    path = Path(path)
    return parse_step_lines(read_text_gz(path, "step log", MAX_LOG_BYTES), str(path))
