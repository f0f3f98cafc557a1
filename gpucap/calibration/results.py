"""Read load-test result files into one tidy table: one row per run, SI units, units in the names.

Formats, recognised from the content (not only the extension):

* vLLM ``--save-result`` JSON from ``vllm bench serve`` (vllm/benchmarks/serve.py) and from the
  older ``benchmarks/benchmark_serving.py`` (whose goodput key is ``"request_goodput:"``, trailing
  colon included). ``--metadata k=v`` pairs sit at the top level. ``--append-result`` files hold
  one such object a line (JSON lines); a JSON list of them (``vllm bench sweep`` summary.json) too.
* ``vllm bench sweep`` ``summary.csv``: pandas ``to_csv`` of the run dicts, index column first.
* SGLang ``python -m sglang.bench_serving --output-file``: JSON lines, one object per run;
  ``request_rate`` inf is the non-standard literal ``Infinity``; ``max_concurrency`` is the cap
  (its ``concurrency`` key is the measured average and is not used). Dec-2024 files lack
  request_throughput, TPOT and the TTFT/ITL means.
* The vLLM / SGLang console summary (the "Serving Benchmark Result" block) saved as text. A file
  may hold several blocks; "Traffic request rate:" and "Maximum request concurrency:" lines
  printed just before a block belong to it.
* GenAI-Perf ``profile_export_genai_perf.csv`` (genai_perf/export_data/csv_exporter.py): a
  per-metric table (avg, p99, p90, p50 ...), a blank line, a Metric,Value table; numbers carry
  thousands separators. Its "Inter Token Latency" is (latency - TTFT)/(OSL - 1) per request,
  vLLM's TPOT, so it fills the tpot columns. Concurrency or request rate come from the artifact
  folder name (``...-concurrency8``, ``...-request_rate4``); duration = request count / request
  throughput.
* GuideLLM ``benchmarks.json`` (GenerativeBenchmarksReport, v0.3 and later): one run per entry
  of ``benchmarks``, from the ``successful`` distributions. Its inter-token latency, (last - first
  token time)/(output tokens - 1), fills tpot and itl; failed = errored requests.

Real examples and their origins: data/loadtests/README.md; field notes: ../shared/formats/notes/.
Means of input and output length are per completed request (total tokens / completed where the
file gives totals). Times are seconds, throughputs per second; ``request_rate`` is inf for "all
at once". request_throughput and total token throughput missing from a file are computed from its
totals (completed / duration, (input + output tokens) / duration), as the tools compute them.

Hardware, parallelism and model of a run, field by field: the run's own metadata (vLLM
``--metadata gpu=H100-SXM-80GB tp=2``; keys gpu, num_gpus, tp or tensor_parallel_size, pp or
pipeline_parallel_size, ep, engine, model; a gpu value like ``4xNVIDIA_L40S`` also gives
num_gpus 4), then the file's ``model_id`` (model only), then a manifest, then ``defaults``, and
for the engine last of all the tool's ``backend`` when it names an engine. A model given as a
relative path to a ``config.json`` is read relative to the folder of the file (result file or
manifest) that names it, so a results folder can carry the config of a model no catalog has.

Manifest: maps file-name globs to those fields. JSON ``{"runs/*.json": {"gpu": "H100-SXM-80GB",
"tp": 2, "engine": "vllm"}}``, or CSV with a ``pattern`` column and any of the columns gpu,
num_gpus, tp, pp, ep, engine, model (empty cells ignored). A glob matches the file's path relative
to the manifest's folder (``*`` also crosses folders) or its bare name; every matching entry
applies, later ones overriding earlier ones; keys starting with ``_`` are comments. A
``manifest.json``/``manifest.csv`` in a folder being read (or next to a file being read) applies
to the files under it, deeper ones winning; the ``manifest=`` argument wins over those.
"""

from __future__ import annotations

import csv
import fnmatch
import io
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from gpucap.catalog.configfields import show_value as _show
from gpucap.units import MS

COLUMNS = (
    "source_file", "run_index", "engine", "model", "gpu", "num_gpus", "tp", "pp", "ep",
    "weight_dtype", "kv_cache_dtype", "max_num_seqs", "max_num_batched_tokens", "block_size",
    "gpu_memory_utilization", "enforce_eager", "overlap_host", "range_ratio",
    "concurrency", "request_rate", "num_prompts", "completed", "failed", "input_len_mean",
    "output_len_mean", "duration_s", "request_throughput_per_s", "output_tokens_per_s",
    "total_tokens_per_s", "ttft_mean_s", "ttft_median_s", "ttft_p90_s", "ttft_p99_s",
    "tpot_mean_s", "tpot_median_s", "tpot_p90_s", "tpot_p99_s", "itl_mean_s", "itl_median_s",
    "itl_p99_s", "e2el_mean_s", "goodput_per_s",
)  # fmt: skip
# What a run ran on: hardware, split, formats and the engine knobs that change a prediction.
ENGINE_KNOBS = (
    "max_num_seqs", "max_num_batched_tokens", "block_size", "gpu_memory_utilization", "enforce_eager", "overlap_host",
)  # fmt: skip
# ... and the load test's --random-range-ratio, which decides how its request lengths spread.
HARDWARE = (
    "gpu", "num_gpus", "tp", "pp", "ep", "engine", "model", "weight_dtype", "kv_cache_dtype", *ENGINE_KNOBS,
    "range_ratio",
)  # fmt: skip
INT_FIELDS = ("num_gpus", "tp", "pp", "ep", "max_num_seqs", "max_num_batched_tokens", "block_size")
META_KEYS = {"gpu": "gpu", "num_gpus": "num_gpus", "tp": "tp", "tensor_parallel_size": "tp", "pp": "pp",
             "pipeline_parallel_size": "pp", "ep": "ep", "engine": "engine", "model": "model",
             "weight_dtype": "weight_dtype", "kv_cache_dtype": "kv_cache_dtype", "kv_dtype": "kv_cache_dtype",
             "max_num_seqs": "max_num_seqs", "max_num_batched_tokens": "max_num_batched_tokens",
             "block_size": "block_size", "gpu_memory_utilization": "gpu_memory_utilization",
             "enforce_eager": "enforce_eager", "overlap_host": "overlap_host", "async_scheduling": "overlap_host",
             "range_ratio": "range_ratio", "random_range_ratio": "range_ratio"}  # fmt: skip
TRUE, FALSE = ("true", "1", "yes"), ("false", "0", "no")
TEXT_FIELDS = ("weight_dtype", "kv_cache_dtype", "enforce_eager", "overlap_host")  # not numbers (the last two: bool)
BACKEND_ENGINES = {"vllm": "vllm", "sglang": "sglang", "sglang-oai": "sglang", "trt": "trtllm"}
# What the calibration fit needs of each run; "a|b" means either will do.
FIT_FIELDS = ("gpu", "tp", "model", "concurrency|request_rate", "input_len_mean", "output_len_mean")
LATENCY = tuple(c for c in COLUMNS if c.startswith(("ttft", "tpot", "itl", "e2el")))
SUFFIXES = (".json", ".jsonl", ".csv", ".txt")
MANIFEST_NAMES = ("manifest.json", "manifest.csv")
SKIP = {".pytorch.json": "vLLM's PyTorch-benchmark copy of the result next to it", "warmup.json": "sweep warm-up run"}
# Files a results folder may carry beside the runs: the config.json of the model they served (named
# by a relative path in the metadata or manifest) and a GPU file for hardware no catalog has.
SKIP_NAMES = {"config.json": "a model's config.json, not a result", "gpus.csv": "a GPU file, not a result"}
# No count, time (s or ms) or rate a load test reports reaches this; a larger value is corrupt.
ABSURD = 1e12
MAX_RESULT_BYTES = 1 << 29  # a result file larger than this (512 MiB; ~7x that once parsed) is not read
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


@dataclass(frozen=True)
class ResultSet:
    """runs: one row per run (``COLUMNS``). bad: (file, reason) for files that could not be read.
    incomplete: (run, reason) for runs lacking what the fit needs. skipped: (file or run, reason)
    for what was left out on purpose (vLLM's ``.pytorch.json`` copies, sweep warm-ups, a run read
    twice, e.g. from a sweep's run=0.json and its summary.csv)."""

    runs: pd.DataFrame
    bad: list[tuple[str, str]] = field(default_factory=list)
    incomplete: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def _num(d: Mapping[str, Any], key: str, where: str, scale: float = 1.0, infinite: bool | None = None) -> float | None:
    """d[key] times scale; None when absent or null. A string, NaN, a negative, an infinity
    (unless ``infinite``: by default for a request rate, where it means "all at once") or a value
    beyond ABSURD is an error."""
    v = d.get(key)
    if v is None:
        return None
    infinite = key == "request_rate" if infinite is None else infinite
    if infinite and isinstance(v, str) and v.strip().lower() in ("inf", "infinity"):
        return math.inf
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"{where}: {key} = {_show(v)} is not a number")
    try:
        x = float(v)
    except OverflowError:  # an integer of hundreds of digits
        raise ValueError(f"{where}: {key} = {_show(v)} is beyond any measurement (> {ABSURD:g})") from None
    if math.isnan(x) or x < 0:
        raise ValueError(f"{where}: {key} {'is NaN' if math.isnan(x) else f'= {_show(v)} is negative'}")
    if math.isinf(x):
        if infinite:
            return math.inf
        raise ValueError(f"{where}: {key} is infinite, not a measurement")
    if x > ABSURD:
        raise ValueError(f"{where}: {key} = {_show(v)} is beyond any measurement (> {ABSURD:g})")
    return x * scale


def _row(**values: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row["backend"] = None
    row.update(values)
    return row


def _hardware(d: Mapping[str, Any], where: str, strict: bool = False) -> dict[str, Any]:
    """The HARDWARE fields in ``d`` (metadata; a manifest entry or defaults when strict), checked."""
    out: dict[str, Any] = {}
    for key, v in d.items():
        name = META_KEYS.get(str(key).replace("-", "_"))
        if strict and key not in HARDWARE and not str(key).startswith("_"):
            raise ValueError(f"{where}: unknown field {key!r}; use {', '.join(HARDWARE)}")
        if name is None or v is None or v == "" or (isinstance(v, float) and math.isnan(v)):
            continue
        if name in INT_FIELDS:
            try:
                n = float(v)
                if isinstance(v, bool) or n != int(n) or n < 1:
                    raise ValueError
            except (TypeError, ValueError, OverflowError):
                raise ValueError(f"{where}: {key} = {_show(v)} is not a positive whole number") from None
            out[name] = int(n)
        elif name == "gpu_memory_utilization":
            try:
                u = float(v)
                if isinstance(v, bool) or not 0 < u <= 1:
                    raise ValueError
            except (TypeError, ValueError, OverflowError):
                raise ValueError(f"{where}: {key} = {_show(v)} is not a fraction in (0, 1]") from None
            out[name] = u
        elif name == "range_ratio":
            try:
                rr = float(v)
                if isinstance(v, bool) or not 0 <= rr < 1:
                    raise ValueError
            except (TypeError, ValueError, OverflowError):
                raise ValueError(f"{where}: {key} = {_show(v)} is not a range ratio in [0, 1)") from None
            out[name] = rr
        elif name in ("enforce_eager", "overlap_host"):
            text = str(v).strip().lower()
            if text not in TRUE + FALSE:
                raise ValueError(f"{where}: {key} = {_show(v)} is not true or false")
            out[name] = text in TRUE
        else:
            out[name] = str(v).strip()
    m = re.fullmatch(r"(\d+)\s*[xX]\s*(.+)", out.get("gpu", ""))
    if m:  # "4xNVIDIA_L40S"
        out["gpu"] = m.group(2)
        out.setdefault("num_gpus", int(m.group(1)))
    return out


def _bench_dict(d: Any, where: str) -> dict[str, Any]:
    """One run of vLLM (serve.py, benchmark_serving.py, sweep) or SGLang bench_serving."""
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected a JSON object with the result keys, got {type(d).__name__}")
    for key in ("completed", "duration"):
        if d.get(key) is None:
            raise ValueError(f"{where}: missing required key {key!r}")
    completed, duration = _num(d, "completed", where), _num(d, "duration", where)
    row = _row(**_hardware(d, where), completed=completed, duration_s=duration, backend=d.get("backend"))
    row["model"] = row["model"] or d.get("model_id")
    row["num_prompts"] = _num(d, "num_prompts", where)
    row["failed"] = _num(d, "failed", where)
    row["request_rate"] = _num(d, "request_rate", where)
    row["concurrency"] = _num(d, "max_concurrency", where)
    row["request_throughput_per_s"] = _num(d, "request_throughput", where)
    row["output_tokens_per_s"] = _num(d, "output_throughput", where)
    row["total_tokens_per_s"] = _num(d, "total_token_throughput", where)
    goodput = "request_goodput" if d.get("request_goodput") is not None else "request_goodput:"
    row["goodput_per_s"] = _num(d, goodput, where)
    for col in LATENCY:  # SGLang writes e2e_latency where vLLM writes e2el
        metric, stat, _ = col.split("_")
        for key in [f"{stat}_{metric}_ms", f"{stat}_e2e_latency_ms"][: 1 + (metric == "e2el")]:
            row[col] = row[col] if d.get(key) is None else _num(d, key, where, MS)
    tokens_in, tokens_out = _num(d, "total_input_tokens", where), _num(d, "total_output_tokens", where)
    if completed:
        row["input_len_mean"] = None if tokens_in is None else tokens_in / completed
        row["output_len_mean"] = None if tokens_out is None else tokens_out / completed
    if duration and row["total_tokens_per_s"] is None and tokens_in is not None and tokens_out is not None:
        row["total_tokens_per_s"] = (tokens_in + tokens_out) / duration
    return row


def _json_objects(text: str, where: str) -> list[tuple[Any, int]]:
    """Every JSON value in ``text`` (one document, JSON lines, or concatenated), with its line;
    linear in the text's length (lines counted from the previous value on)."""
    decoder, i, line, counted = json.JSONDecoder(), 0, 1, 0
    space = re.compile(r"\s*")
    out: list[tuple[Any, int]] = []
    while True:
        i = space.match(text, i).end()  # type: ignore[union-attr]
        if i == len(text):
            return out
        line += text.count("\n", counted, i)
        counted = i
        try:
            obj, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{where}: truncated or invalid JSON at line {exc.lineno}, column {exc.colno} ({exc.msg})"
            ) from None
        except RecursionError:
            raise ValueError(f"{where}: JSON nested too deeply at line {line} (not a load-test result)") from None
        except ValueError as exc:  # e.g. an integer longer than Python reads
            raise ValueError(f"{where}: unreadable JSON value at line {line} ({str(exc)[:80]})") from None
        out.append((obj, line))


def _json_file(text: str, where: str, bad_runs: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
    """The runs of a JSON file; with ``bad_runs``, a run that does not read (a non-finite or
    absurd value, a missing key) is listed there and the file's other runs still load."""
    objs = _json_objects(text, where)
    if len(objs) == 1 and isinstance(objs[0][0], dict) and "benchmarks" in objs[0][0]:
        return _guidellm(objs[0][0], where)
    if len(objs) == 1 and isinstance(objs[0][0], list):
        items = [(d, f"{where}, item {k}") for k, d in enumerate(objs[0][0])]
    elif len(objs) == 1:
        return [_bench_dict(objs[0][0], where)]
    else:
        items = [(d, f"{where}, line {line}") for d, line in objs]
    rows = []
    for d, name in items:
        try:
            rows.append(_bench_dict(d, name))
        except ValueError as exc:
            if bad_runs is None:
                raise
            bad_runs.append((name, str(exc)))
    return rows


def _guidellm(report: dict[str, Any], where: str) -> list[dict[str, Any]]:
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
            return _num(d.get(name, {}), which, f"{w}: metrics.{name}.successful", scale)

        strategy = (b.get("args") or b.get("config") or {}).get("strategy") or {}
        kind, ws = strategy.get("type_"), f"{w}: strategy"
        totals = b.get("request_totals") or (b.get("run_stats") or b.get("scheduler_metrics") or {}).get(
            "requests_made"
        )
        duration = b.get("duration", b["end_time"] - b["start_time"] if "end_time" in b else None)
        row = _row(model=(b.get("worker") or {}).get("backend_model"))
        row["completed"] = _num(totals or {}, "successful", f"{w}: request_totals")
        row["failed"] = _num(totals or {}, "errored", f"{w}: request_totals")
        row["duration_s"] = _num({"duration": duration}, "duration", w)  # seconds
        row["concurrency"] = {"synchronous": 1.0, "concurrent": _num(strategy, "streams", ws)}.get(str(kind))
        row["request_rate"] = _num(strategy, "rate", ws) if kind in ("constant", "poisson") else None
        if kind == "throughput":
            row["request_rate"], row["concurrency"] = math.inf, _num(strategy, "max_concurrency", ws)
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


def _console(text: str, where: str) -> list[dict[str, Any]]:
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
                values[name] = _num(
                    {m.group(1): x}, m.group(1), f"{where}, block {k}", MS if lat else 1.0, name == "request_rate"
                )
        if values.get("completed") is None:
            raise ValueError(f"{where}, block {k}: missing required line 'Successful requests:'")
        row = _row(**{c: v for c, v in values.items() if c in COLUMNS or c == "backend"})
        for tokens, col in (("tokens_in", "input_len_mean"), ("tokens_out", "output_len_mean")):
            row[col] = values[tokens] / values["completed"] if values.get(tokens) and values["completed"] else None
        rows.append(row)
        before = after
    return rows


def _genai_perf(text: str, where: str, path: Path) -> list[dict[str, Any]]:
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
                _num(cells, col, f"{where}: {r[0]}")
            stats[r[0]] = cells

    def get(label: str, col: str, scale: float = 1.0) -> float | None:
        v = stats.get(label, {}).get(col)
        return None if v is None else v * scale

    row = _row(completed=get("Request Count (count)", "Value"), goodput_per_s=get("Request Goodput (per sec)", "Value"))
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


def _sweep_csv(text: str, where: str) -> list[dict[str, Any]]:
    try:
        df = pd.read_csv(io.StringIO(text), index_col=0)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ValueError(f"{where}: not a readable CSV ({exc})") from None
    rows = []
    for i, rec in enumerate(df.to_dict("records")):
        clean = {str(k): None if isinstance(v, float) and math.isnan(v) else v for k, v in rec.items()}
        rows.append(_bench_dict(clean, f"{where}, row {i + 2}"))
    return rows


def _check(row: dict[str, Any], where: str) -> None:
    """Checks common to every format, once the run is in columns."""
    if row["completed"] == 0:
        raise ValueError(f"{where}: completed = 0 (no request finished)")
    if row["duration_s"] == 0:
        raise ValueError(f"{where}: duration = 0")
    if row["request_throughput_per_s"] is None and row["output_tokens_per_s"] is None:
        raise ValueError(f"{where}: missing required key request_throughput or output_throughput")
    if all(row[c] is None for c in LATENCY):
        raise ValueError(f"{where}: missing required latency keys (no TTFT, TPOT, ITL or E2E latency)")
    if row["request_throughput_per_s"] is None and row["completed"] and row["duration_s"]:
        row["request_throughput_per_s"] = row["completed"] / row["duration_s"]


def read_result_file(path: str | Path, bad_runs: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
    """The runs in one result file, as dicts keyed by ``COLUMNS`` (plus the tool's ``backend``).

    Hardware fields hold only what the file itself says (its metadata). Any problem raises
    ValueError("<path>: <field> ..."); with ``bad_runs``, a run of a JSON-lines file that does not
    read is listed there instead and the others load. Files beyond MAX_RESULT_BYTES, and
    anything but a regular file, are refused before reading."""
    path = Path(path)
    where = str(path)
    try:
        if not path.is_file():
            raise ValueError(f"{where}: {'no such file' if not path.exists() else 'not a regular file'}")
        size = path.stat().st_size
        if size > MAX_RESULT_BYTES:
            raise ValueError(
                f"{where}: {size / 2**30:.1f} GiB, more than the {MAX_RESULT_BYTES / 2**30:g} GiB read into memory; "
                "split it (one file per sweep or per run)"
            )
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{where}: cannot read as text ({exc})") from None
    head = text.lstrip()
    first = head.split("\n", 1)[0]
    try:
        if head[:1] in ("{", "["):
            rows = _json_file(text, where, bad_runs)
        elif CONSOLE_HEADER.search(text):
            rows = _console(text, where)
        elif first.startswith("Metric,"):
            rows = _genai_perf(text, where, path)
        elif "," in first and ("request_throughput" in first or "output_throughput" in first):
            rows = _sweep_csv(text, where)
        else:
            raise ValueError(f"{where}: {'empty file' if not head else 'not a load-test result format gpucap reads'}")
    except (TypeError, AttributeError, KeyError, IndexError) as exc:  # a value of the wrong shape
        raise ValueError(f"{where}: unexpected layout ({type(exc).__name__}: {exc})") from None
    if not rows:
        raise ValueError(f"{where}: holds no run that reads")
    good = []
    for i, row in enumerate(rows):
        name = where if len(rows) == 1 else f"{where}, run {i}"
        try:
            _check(row, name)
        except ValueError as exc:
            if bad_runs is None or len(rows) == 1:
                raise
            bad_runs.append((name, str(exc)))
            continue
        row.update(source_file=where, run_index=i)
        good.append(row)
    if not good:
        raise ValueError(f"{where}: holds no run that reads")
    return good


Manifest = list[tuple[Path | None, str, dict[str, Any]]]  # (folder, glob, fields)


def read_manifest(source: str | Path | Mapping[str, Mapping[str, Any]]) -> Manifest:
    """A manifest file (JSON or CSV, see the module docstring) or a dict {glob: {field: value}}."""
    if isinstance(source, Mapping):
        folder, entries, where = None, dict(source), "manifest"
    else:
        path = Path(source)
        folder, where = path.parent, str(path)
        try:
            text = path.read_text(encoding="utf-8")
            if path.suffix.lower() == ".csv":
                entries = {r.pop("pattern", "") or "": r for r in csv.DictReader(io.StringIO(text))}
            else:
                entries = json.loads(text)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, csv.Error) as exc:
            raise ValueError(f"{where}: unreadable manifest ({exc})") from None
    if not isinstance(entries, dict):
        raise ValueError(f"{where}: a manifest maps file globs to {{gpu, num_gpus, tp, pp, ep, engine, model}}")
    out: Manifest = []
    for glob, fields in entries.items():
        if str(glob).startswith("_"):
            continue
        if not glob or not isinstance(fields, dict):
            raise ValueError(f"{where}: entry {glob!r} must be a glob mapping to a dict of fields")
        checked = _hardware(fields, f"{where}: {glob}", strict=True)
        if folder is not None and "model" in checked:
            checked["model"] = model_beside(checked["model"], folder)
        out.append((folder, str(glob), checked))
    return out


def model_beside(model: Any, folder: Path) -> Any:
    """``model`` with a relative ``.json`` path (a config.json) made absolute from ``folder``;
    names of catalog models and absolute paths as they are."""
    if isinstance(model, str) and model.lower().endswith(".json") and not Path(model).is_absolute():
        return str((folder / model).resolve())
    return model


def _manifest_fields(manifest: Manifest, file: Path) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for folder, glob, fields in manifest:
        names = [file.name, "/" + file.as_posix()]
        if folder is not None and file.resolve().is_relative_to(folder.resolve()):
            names.append(file.resolve().relative_to(folder.resolve()).as_posix())
        if any(fnmatch.fnmatch(n, glob) or fnmatch.fnmatch(n, "*/" + glob) for n in names):
            merged.update(fields)
    return merged


def _files(item: Path) -> tuple[list[Path], list[Path], list[tuple[str, str]]]:
    """(result files, manifests that apply, shallowest first; files skipped) for a file or folder."""
    if item.is_file():
        return [item], [item.parent / n for n in MANIFEST_NAMES if (item.parent / n).is_file()], []
    if not item.is_dir():
        raise ValueError(f"{item}: no such file or folder")
    found = sorted(f for f in item.rglob("*") if f.is_file() and f.suffix.lower() in SUFFIXES)
    manifests = sorted((f for f in found if f.name in MANIFEST_NAMES), key=lambda m: len(m.parts))
    files = [f for f in found if f.name not in MANIFEST_NAMES]
    skipped = [(str(f), SKIP[n]) for f in files for n in SKIP if f.name.endswith(n)]
    skipped += [(str(f), SKIP_NAMES[f.name]) for f in files if f.name in SKIP_NAMES]
    files = [f for f in files if not any(f.name.endswith(n) for n in SKIP) and f.name not in SKIP_NAMES]
    if not files:
        raise ValueError(f"{item}: no result files ({', '.join(SUFFIXES)}) in this folder")
    return files, manifests, skipped


def read_results(
    paths: str | Path | Iterable[str | Path],
    *,
    manifest: str | Path | Mapping[str, Mapping[str, Any]] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> ResultSet:
    """Every run in ``paths`` (files, folders read recursively, or a list of both) as one table.

    Unreadable files are listed in ``.bad`` (a folder's good files still load), and so is a run
    of a multi-run file that does not read (its line named; the file's other runs load); runs lacking what
    the calibration fit needs are listed in ``.incomplete``. No readable file at all: ValueError."""
    items = [Path(paths)] if isinstance(paths, str | Path) else [Path(p) for p in paths]
    if not items:
        raise ValueError("read_results: no paths given")
    explicit = read_manifest(manifest) if manifest is not None else []
    base = _hardware(defaults or {}, "defaults", strict=True)
    rows: list[dict[str, Any]] = []
    bad: list[tuple[str, str]] = []
    skipped: list[tuple[str, str]] = []
    seen: dict[tuple[Any, ...], str] = {}
    for item in items:
        files, manifest_files, skip = _files(item)
        skipped += skip
        auto = []
        for m in manifest_files:
            try:
                auto.append((m.parent.resolve(), read_manifest(m)))
            except ValueError as exc:  # its files still load, and show up in .incomplete
                bad.append((str(m), str(exc)))
        for f in files:
            try:
                runs = read_result_file(f, bad)
            except ValueError as exc:
                bad.append((str(f), str(exc)))
                continue
            fields = dict(base)
            for folder, entries in auto:
                fields.update(_manifest_fields(entries, f) if f.resolve().is_relative_to(folder) else {})
            fields.update(_manifest_fields(explicit, f))
            for run in runs:
                name = f"{f} run {run['run_index']}"
                key = (run["model"], run["completed"], round(run["duration_s"] or 0, 6), run["output_tokens_per_s"])
                if run["duration_s"] is not None and key in seen:
                    skipped.append((name, f"the same run as {seen[key]}"))
                    continue
                seen[key] = name
                engine = BACKEND_ENGINES.get(str(run.pop("backend") or "").lower())
                run["model"] = model_beside(run["model"], f.parent)
                run.update({k: fields.get(k) for k in HARDWARE if run[k] is None})
                run["engine"] = run["engine"] or engine
                rows.append(run)
    if not rows:
        reasons = "; ".join(reason for _, reason in bad[:3])
        raise ValueError(
            f"{', '.join(map(str, items))}: no readable load-test result ({len(bad)} unreadable: {reasons})"
        )
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    numeric = [c for c in COLUMNS[5:] if c not in TEXT_FIELDS]
    df[numeric] = df[numeric].astype(float)
    return ResultSet(runs=df, bad=bad, incomplete=runs_needing(df), skipped=skipped)


def runs_needing(runs: ResultSet | pd.DataFrame, fields: Iterable[str] = FIT_FIELDS) -> list[tuple[str, str]]:
    """(run, "missing field X needed for the fit") for every run lacking one of ``fields``;
    "a|b" in ``fields`` accepts either column."""
    df = runs.runs if isinstance(runs, ResultSet) else runs
    out = []
    for _, r in df.iterrows():
        for f in fields:
            alternatives = f.split("|")
            if all(pd.isna(r[a]) for a in alternatives):
                reason = f"missing field {' or '.join(alternatives)} needed for the fit"
                out.append((f"{r['source_file']} run {r['run_index']}", reason))
    return out
