"""Read load-test result files into one tidy table: one row per run, SI units, units in the names.

Formats, recognised from the content (not only the extension), each read by its own module:

* vLLM ``vllm bench serve`` / ``benchmark_serving.py`` JSON (one object, JSON lines, a list),
  SGLang ``bench_serving`` JSON lines, and ``vllm bench sweep`` ``summary.csv``:
  ``gpucap.calibration.benchserve``.
* The vLLM / SGLang console summary ("Serving Benchmark Result" blocks) saved as text:
  ``gpucap.calibration.consoletext``.
* GenAI-Perf ``profile_export_genai_perf.csv``: ``gpucap.calibration.genaiperf``.
* GuideLLM ``benchmarks.json``: ``gpucap.calibration.guidellm``.

The table they fill, and the checks of numbers and hardware fields: ``gpucap.calibration.resultfields``.

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

Manifest: maps file-name globs to those fields (JSON or CSV, ``gpucap.calibration.manifests``). A
``manifest.json``/``manifest.csv`` in a folder being read (or next to a file being read) applies
to the files under it, deeper ones winning; the ``manifest=`` argument wins over those.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpucap.calibration.benchserve import read_bench_json, read_sweep_csv
from gpucap.calibration.consoletext import CONSOLE_HEADER, read_console
from gpucap.calibration.genaiperf import read_genai_perf
from gpucap.calibration.manifests import MANIFEST_NAMES, Manifest, manifest_fields, model_beside, read_manifest
from gpucap.calibration.resultfields import COLUMNS, HARDWARE, LATENCY, TEXT_FIELDS, hardware_fields
from gpucap.textfiles import read_text_gz

BACKEND_ENGINES = {"vllm": "vllm", "sglang": "sglang", "sglang-oai": "sglang", "trt": "trtllm"}
# What the calibration fit needs of each run; "a|b" means either will do.
FIT_FIELDS = ("gpu", "tp", "model", "concurrency|request_rate", "input_len_mean", "output_len_mean")
SUFFIXES = (".json", ".jsonl", ".csv", ".txt")
SKIP = {".pytorch.json": "vLLM's PyTorch-benchmark copy of the result next to it", "warmup.json": "sweep warm-up run"}
# Files a results folder may carry beside the runs: the config.json of the model they served (named
# by a relative path in the metadata or manifest) and a GPU file for hardware no catalog has.
SKIP_NAMES = {"config.json": "a model's config.json, not a result", "gpus.csv": "a GPU file, not a result"}
# Text files a load-test folder often carries beside the runs, told apart by how they begin.
TEXT_NOT_RESULTS = {
    "# HELP ": "a Prometheus /metrics scrape, not a result: read it with `gpucap telemetry`",
    "# TYPE ": "a Prometheus /metrics scrape, not a result: read it with `gpucap telemetry`",
    "# scraped at ": "a Prometheus /metrics scrape, not a result: read it with `gpucap telemetry`",
    "HTTP/1.": "an HTTP response's headers, not a result",
}
MAX_RESULT_BYTES = 1 << 29  # a result file larger than this (512 MiB; ~7x that once parsed) is not read


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
    _check_consistent(row, where)
    if row["request_throughput_per_s"] is None and row["completed"] and row["duration_s"]:
        row["request_throughput_per_s"] = row["completed"] / row["duration_s"]


# a run's own figures that cannot all be true at once; a load test's rounding stays far inside
THROUGHPUT_SLACK = 0.05  # request throughput against completed / duration
MIN_DURATION_S = 1e-3  # no load test finishes a request in under a millisecond


def _check_consistent(row: dict[str, Any], where: str) -> None:
    """Figures of one run that contradict each other: percentiles out of order, more completed
    than sent, a throughput its own count and duration deny, a first token after the last, a
    concurrency that is not a whole number of requests. ValueError naming the field."""
    for metric in ("ttft", "tpot", "itl"):
        ladder = [(s, row.get(f"{metric}_{s}_s")) for s in ("median", "p90", "p99")]
        given = [(s, v) for s, v in ladder if v is not None]
        for (s0, v0), (s1, v1) in zip(given, given[1:], strict=False):
            if v1 < v0 * (1.0 - 1e-9):
                raise ValueError(f"{where}: {metric} {s1} ({v1:g} s) is below its {s0} ({v0:g} s); percentiles rise")
    sent, done = row.get("num_prompts"), row.get("completed")
    if sent is not None and done is not None and done > sent:
        raise ValueError(f"{where}: completed = {done:g} is more than num_prompts = {sent:g}")
    duration = row.get("duration_s")
    if duration is not None and duration < MIN_DURATION_S:
        raise ValueError(f"{where}: duration = {duration:g} s: no load test runs in under {MIN_DURATION_S:g} s")
    rate = row.get("request_throughput_per_s")
    if rate is not None and done and duration:
        implied = done / duration
        if abs(rate - implied) > THROUGHPUT_SLACK * implied:
            raise ValueError(
                f"{where}: request_throughput = {rate:g}/s but completed / duration = {implied:g}/s; one of them is wrong"
            )
    first, whole = row.get("ttft_mean_s"), row.get("e2el_mean_s")
    if first is not None and whole is not None and first > whole * (1.0 + 1e-9):
        raise ValueError(f"{where}: mean TTFT ({first:g} s) is longer than mean E2E latency ({whole:g} s)")
    conc = row.get("concurrency")
    if conc is not None and math.isfinite(conc) and (conc < 1 or conc != int(conc)):
        raise ValueError(f"{where}: max_concurrency = {conc:g} is not a whole number of requests >= 1")


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
        if path.suffix.lower() == ".gz":  # a compressed result (.json.gz, .jsonl.gz): read inflated, same cap
            text = read_text_gz(path, "result file", MAX_RESULT_BYTES)
        else:
            text = path.read_text(encoding="utf-8-sig")  # a byte-order mark is not part of the JSON
    except FileNotFoundError:
        raise ValueError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{where}: cannot read as text ({exc})") from None
    head = text.lstrip()
    first = head.split("\n", 1)[0]
    try:
        if head[:1] in ("{", "["):
            rows = read_bench_json(text, where, bad_runs)
        elif CONSOLE_HEADER.search(text):
            rows = read_console(text, where)
        elif first.startswith("Metric,"):
            rows = read_genai_perf(text, where, path)
        elif "," in first and ("request_throughput" in first or "output_throughput" in first):
            rows = read_sweep_csv(text, where)
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


def _result_suffix(f: Path) -> bool:
    """A result file's name: one of ``SUFFIXES``, or one of them then ``.gz``."""
    suffixes = [s.lower() for s in f.suffixes[-2:]]
    return bool(suffixes) and (
        suffixes[-1] in SUFFIXES or (suffixes[-1] == ".gz" and len(suffixes) == 2 and suffixes[0] in SUFFIXES)
    )


def _files(item: Path) -> tuple[list[Path], list[Path], list[tuple[str, str]]]:
    """(result files, manifests that apply, shallowest first; files skipped) for a file or folder."""
    if item.is_file():
        return [item], [item.parent / n for n in MANIFEST_NAMES if (item.parent / n).is_file()], []
    if not item.is_dir():
        there = item.exists()
        raise ValueError(
            f"{item}: {'not a regular file or folder (a pipe or device)' if there else 'no such file or folder'}"
        )
    found = sorted(f for f in item.rglob("*") if f.is_file() and _result_suffix(f))
    manifests = sorted((f for f in found if f.name in MANIFEST_NAMES), key=lambda m: len(m.parts))
    files = [f for f in found if f.name not in MANIFEST_NAMES]
    skipped = [(str(f), SKIP[n]) for f in files for n in SKIP if f.name.endswith(n)]
    skipped += [(str(f), SKIP_NAMES[f.name]) for f in files if f.name in SKIP_NAMES]
    files = [f for f in files if not any(f.name.endswith(n) for n in SKIP) and f.name not in SKIP_NAMES]
    text = [(f, _text_kind(f)) for f in files if f.suffix.lower() == ".txt"]
    skipped += [(str(f), kind) for f, kind in text if kind]
    files = [f for f in files if f not in {t for t, kind in text if kind}]
    if not files:
        raise ValueError(f"{item}: no result files ({', '.join(SUFFIXES)}) in this folder")
    return files, manifests, skipped


def _text_kind(file: Path) -> str:
    """Why the text file ``file`` is not a result (``TEXT_NOT_RESULTS``, by how it begins), or ""."""
    if not file.is_file():
        return "not a regular file (a pipe or device is never read)"
    with file.open("rb") as fh:
        head = fh.read(64).decode("utf-8", "replace").lstrip("\ufeff")
    return next((why for start, why in TEXT_NOT_RESULTS.items() if head.startswith(start)), "")


def _file_fields(
    file: Path, defaults: dict[str, Any], auto: list[tuple[Path, Manifest]], explicit: Manifest
) -> dict[str, Any]:
    """The hardware fields manifests give ``file``: ``defaults``, then the manifests found in the
    folders read (``auto``: (resolved folder, manifest), shallowest first), then ``explicit``."""
    fields = dict(defaults)
    for folder, entries in auto:
        fields.update(manifest_fields(entries, file) if file.resolve().is_relative_to(folder) else {})
    fields.update(manifest_fields(explicit, file))
    return fields


def _fill_hardware(run: dict[str, Any], fields: dict[str, Any], folder: Path) -> None:
    """Completes ``run`` in place: a model path made absolute from ``folder``, each hardware field
    the file left empty from ``fields``, and the engine last of all from the tool's ``backend``."""
    engine = BACKEND_ENGINES.get(str(run.pop("backend") or "").lower())
    run["model"] = model_beside(run["model"], folder)
    run.update({k: fields.get(k) for k in HARDWARE if run[k] is None})
    run["engine"] = run["engine"] or engine


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
    base = hardware_fields(defaults or {}, "defaults", strict=True)
    rows: list[dict[str, Any]] = []
    bad: list[tuple[str, str]] = []
    skipped: list[tuple[str, str]] = []
    seen: dict[tuple[Any, ...], str] = {}
    for item in items:
        files, manifest_files, skip = _files(item)
        skipped += skip
        auto: list[tuple[Path, Manifest]] = []
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
            fields = _file_fields(f, base, auto, explicit)
            for run in runs:
                name = f"{f} run {run['run_index']}"
                key = (run["model"], run["completed"], round(run["duration_s"] or 0, 6), run["output_tokens_per_s"])
                if run["duration_s"] is not None and key in seen:
                    skipped.append((name, f"the same run as {seen[key]}"))
                    continue
                seen[key] = name
                _fill_hardware(run, fields, f.parent)
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
    fields = list(fields)
    if df.empty or not fields:
        return []
    # one column-wise pass per field (a row loop took most of the time on 10^5 runs)
    missing = np.column_stack([df[f.split("|")].isna().all(axis=1).to_numpy() for f in fields])
    names = (df["source_file"].astype(str) + " run " + df["run_index"].astype(str)).to_numpy()
    out = []
    for k, j in zip(*np.nonzero(missing), strict=True):  # row-major: each run's fields in order
        out.append((str(names[k]), f"missing field {' or '.join(fields[j].split('|'))} needed for the fit"))
    return out
