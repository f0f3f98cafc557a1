"""One case: a row of a cases table (the schema of ``measured-public.csv``), what it says and what it
implies where it is silent (front end, host overlap, memory utilization of its vLLM version,
length distributions, the statistic each latency reports, its testbed), and ``PreparedCase``, the
row resolved into hardware and a load (``gpucap.calibration.validate.prepare_case``).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpucap.catalog.gpus import scaled
from gpucap.config import VLLM_UTILIZATION_BEFORE_0_20, EngineConfig, Hardware
from gpucap.queueing.lengths import Lengths
from gpucap.queueing.loads import Load
from gpucap.textfiles import read_text

# Prompts of a closed-loop or single-request row that does not say how many it sent.
DEFAULT_PROMPTS_PER_SLOT = 8
SINGLE_REQUEST_PROMPTS = 8
MAX_TABLE_BYTES = 256 << 20  # a cases or corrections CSV: ~1M rows at most


def read_table(path: Path, what: str, required: tuple[str, ...], **read_csv: Any) -> pd.DataFrame:
    """A CSV the user names, read by ``pandas.read_csv(**read_csv)``: a missing file, one that is not
    a CSV, or a missing ``required`` column is a ValueError naming the file (``what`` says which
    kind: "cases file", "corrections file")."""
    try:
        df = pd.read_csv(io.StringIO(read_text(path, what, MAX_TABLE_BYTES)), **read_csv)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, MemoryError) as exc:
        raise ValueError(f"{what} {path} is not a readable CSV ({exc})") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ValueError(f"{what} {path} lacks required columns: {', '.join(missing)}")
    return df


def csv_columns(path: Path, what: str) -> list[str]:
    """The header of a CSV the user names (read as ``read_table`` reads it: a regular file of
    bounded size); ValueError naming the file otherwise."""
    text = read_text(path, what, MAX_TABLE_BYTES)
    first = text.split("\n", 1)[0]
    try:
        return [c.strip() for c in next(csv.reader([first]), [])]
    except csv.Error as exc:
        raise ValueError(f"{what} {path} is not a readable CSV ({exc})") from None


def cell_number(row: pd.Series, col: str, default: float | None = None) -> float | None:
    """The cell as a float; ``default`` when empty or absent; ValueError when not a number."""
    v = row.get(col)
    if v is None or (isinstance(v, float) and math.isnan(v)) or v == "":
        return default
    try:
        return float(v)
    except (TypeError, ValueError):
        raise ValueError(f"column {col!r} = {v!r} is not a number") from None


def cell_int(row: pd.Series, col: str, default: int) -> int:
    """The cell as a whole number (truncated); ``default`` when empty or absent."""
    v = cell_number(row, col)
    return default if v is None else int(v)


def cell_text(row: pd.Series, col: str) -> str:
    """The cell as text; "" when empty or absent."""
    v = row.get(col)
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


def row_front_end(row: pd.Series) -> str:
    """How the row's requests reached the engine: the ``front_end`` column when given; else
    offline for runs of trtllm-bench (its ``prepare_dataset`` lengths), MLPerf's LoadGen, and the
    static-batch and single-request tables of TensorRT-LLM's C++ benchmarks; HTTP otherwise."""
    given = cell_text(row, "front_end").strip().lower()
    if given:
        return given
    dist = cell_text(row, "length_dist").lower()
    engine = cell_text(row, "engine").lower()
    if "prepare_dataset" in dist or "mlperf" in dist:
        return "offline"
    if engine in ("trtllm", "tensorrt-llm", "trt-llm") and str(row.get("load_mode")) in (
        "static-batch",
        "single-request",
    ):
        return "offline"
    return "http"


def row_overlap_host(row: pd.Series, engine: str, on_cpu: bool = False) -> bool | None:
    """The ``overlap_host`` column when given; vLLM before 0.14 did not overlap the host with the
    GPU by default (async scheduling became its default in v0.14.0, released 2026-01-17: PR
    #27614, whose release notes and downstream ports to 0.14 say so), and vLLM on a CPU
    (``on_cpu``: a measured CPU row) never does (its CPU platform turns async scheduling off
    whatever the flags say: ``vllm/platforms/cpu.py``, ``check_and_update_config``, 0.32); None
    (the engine's default, on) otherwise."""
    given = cell_text(row, "overlap_host").strip().lower()
    if given:
        return given in ("true", "1", "1.0", "yes")
    if engine != "vllm":
        return None
    if on_cpu:
        return False
    version = vllm_version(row)
    return None if version is None else version >= (0, 14)


def row_prefix_caching(row: pd.Series) -> bool:
    """The ``enable_prefix_caching`` column: off only where it says false; on otherwise, vLLM V1's
    default (``EngineConfig.prefix_caching``)."""
    return cell_text(row, "enable_prefix_caching").strip().lower() not in ("false", "0", "0.0", "no")


def vllm_version(row: pd.Series, parts: int = 2) -> tuple[int, ...] | None:
    """The first ``parts`` numbers of the row's ``engine_version`` ("v0.11.0" -> (0, 11), or
    (0, 11, 0) with ``parts=3``; a missing patch number reads 0); None when unreadable."""
    text = cell_text(row, "engine_version").strip().lower().lstrip("v").split(".")
    try:
        numbers = [int(text[0]), int(text[1])] + [int("".join(c for c in t if c.isdigit()) or 0) for t in text[2:]]
    except (IndexError, ValueError):
        return None
    return tuple((numbers + [0] * parts)[:parts])


def row_sampler(row: pd.Series, engine: str, moe: bool) -> str:
    """How the row's vLLM sampled at its profiling run (``EngineConfig.sampler``): the ``sampler``
    column when given; else by the row's vLLM version, as its sources read: the V1 model runner
    up to 0.21, with FlashInfer's sampler on by default up to 0.11.0 ("in-place", taking FlashInfer
    installed), PyTorch's sort from 0.11.1 (FlashInfer opt-in) and the Triton top-k/top-p from
    0.17 ("in-place"); the V2 runner ("logits") for dense models from 0.22 (0.22-0.24 for a list of
    architectures, all dense ones from 0.25) and for every model from 0.29, MoE models keeping V1
    before that. Other engines and unreadable versions: the current default."""
    given = cell_text(row, "sampler").strip().lower()
    if given:
        return given
    version = vllm_version(row, parts=3)
    if engine != "vllm" or version is None:
        return EngineConfig.sampler
    if version <= (0, 11, 0) or (0, 17, 0) <= version < (0, 22, 0):
        return "in-place"
    if version < (0, 17, 0):
        return "sort"
    return "in-place" if moe and version < (0, 29, 0) else "logits"


def row_utilization(row: pd.Series, engine: str) -> float | None:
    """The ``gpu_memory_utilization`` column; else vLLM's default of the row's version, 0.9 before
    0.20 (``VLLM_UTILIZATION_BEFORE_0_20``); else None (the engine's current default)."""
    util = cell_number(row, "gpu_memory_utilization")
    if util is None and engine == "vllm":
        version = vllm_version(row)
        if version is not None and version < (0, 20):
            return VLLM_UTILIZATION_BEFORE_0_20
    return util


def row_lengths(row: pd.Series, isl: float, osl: float) -> tuple[str, Lengths, Lengths, list[str]]:
    """The row's length distributions (what its benchmark drew) and their label: ``fixed``;
    ``range`` (a ``range_ratio`` column: vLLM's ``--random-range-ratio`` around the stated means);
    ``uniform`` on [1, stated maximum] (SGLang's random dataset at range ratio 0, the columns
    being the maxima); ``dataset`` (ShareGPT, MLPerf: taken as exponential with the stated means,
    ``Lengths.exponential``, an assumption)."""
    dist = cell_text(row, "length_dist").lower() or "fixed"
    ratio = cell_number(row, "range_ratio") or 0.0
    if ratio > 0 and dist.startswith("fixed"):  # vllm bench serve --random-range-ratio
        notes = [f"lengths uniform within +/-{ratio:.0%} of the stated means (--random-range-ratio)"]
        return "range", Lengths.range_ratio(isl, ratio), Lengths.range_ratio(osl, ratio), notes
    if "nominal maxima" in dist:
        notes = ["uniform random lengths on [1, stated maximum]"]
        return "uniform", Lengths.uniform(1, isl), Lengths.uniform(1, osl), notes
    if dist.startswith(("sharegpt", "mlperf", "dataset")):
        notes = ["dataset lengths taken as exponential with the stated means"]
        return "dataset", Lengths.exponential(isl), Lengths.exponential(osl), notes
    return "fixed", Lengths.fixed(isl), Lengths.fixed(osl), []


def row_stats(row: pd.Series) -> tuple[tuple[str, str], ...]:
    """The statistic each latency metric of the row reports: mean where given, else median
    (a value whose statistic the source does not state is compared with the mean)."""
    out = []
    for metric in ("ttft", "tpot", "itl"):
        stat = "mean"
        if cell_number(row, f"{metric}_mean_ms") is None and cell_number(row, f"{metric}_median_ms") is not None:
            stat = "median"
        out.append((f"{metric}_ms", stat))
    return tuple(out)


def testbed_keys(cases: pd.DataFrame, by: str) -> list[str]:
    """The testbed of each row: the value of column ``by``, or of several joined by ``+``
    (``"source_id+gpu"``: one lab's machines of one GPU type)."""
    cols = by.split("+")
    missing = [c for c in cols if c not in cases]
    if missing:
        raise ValueError(f"cases have no column {', '.join(missing)} to group testbeds by")
    return cases[cols].astype(str).agg(" / ".join, axis=1).tolist()


@dataclass(frozen=True)
class PreparedCase:
    """One case row resolved into hardware and a load, ready to predict with any coefficients."""

    case_id: str
    hw: Hardware
    replicas: int
    mode: str
    lengths: str
    input_len: float
    output_len: float
    load: float  # prompts (saturation), concurrency, batch or request rate, for the whole case
    max_running: float  # per replica: min(max_num_seqs, requests memory holds)
    ttft_only: bool
    notes: str
    bench: Load | None = None  # the benchmark run of one replica, where it can be simulated
    input_dist: Lengths | None = None
    output_dist: Lengths | None = None
    stats: tuple[tuple[str, str], ...] = ()  # (metric, statistic the row reports)

    @property
    def group_key(self) -> tuple[Any, ...]:
        """What cases predicted together by the closed forms share: hardware, load mode, lengths."""
        hw = self.hw
        return (hw.spec.name, hw.gpu.key, hw.layout, hw.weight_dtype, hw.kv_dtype, hw.engine, self.mode, self.lengths)

    def stat(self, metric: str) -> str:
        """The statistic the row reports for ``metric`` ("mean" unless it says otherwise)."""
        return dict(self.stats).get(metric, "mean")


def bench_load(mode: str, load: float, replicas: int, num_prompts: float | None) -> Load | None:
    """One replica's share of the row's benchmark run, or None where it cannot be simulated."""
    n = None if num_prompts is None or not np.isfinite(num_prompts) else int(round(num_prompts / replicas))
    if mode == "saturation":
        return Load.all_at_once(n) if n else None
    if mode == "fixed-concurrency":
        c = max(int(round(load / replicas)), 1)
        return Load.closed_loop(c, max(n or 0, DEFAULT_PROMPTS_PER_SLOT * c, c))
    if mode == "single-request":
        return Load.closed_loop(1, SINGLE_REQUEST_PROMPTS)
    if mode == "poisson":
        rate = load / replicas
        return Load.open_loop(rate, n or max(int(np.ceil(60 * rate)), 64))
    return None


def at_speed(case: PreparedCase, speed: float, part: str = "compute") -> PreparedCase:
    """``case`` on a testbed ``speed`` times as fast as the datasheet (``gpucap.catalog.gpus.scaled``)."""
    hw = dataclasses.replace(case.hw, gpu=scaled(case.hw.gpu, speed, part))
    return dataclasses.replace(case, hw=hw)
